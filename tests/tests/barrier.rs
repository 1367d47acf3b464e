//! `DistributedBarrier` and `DistributedDoubleBarrier` against real
//! ZooKeeper: waits end when they should and by their deadlines, also
//! through an ensemble's leader kill and rolling restart.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::{Client, ConnectionState, Error};
use latchkey_recipes::{DistributedBarrier, DistributedDoubleBarrier, READY_NODE};
use latchkey_test::{FaultProxy, TestingCluster, TestingServer};

const SESSION: Duration = Duration::from_secs(10);

/// How long a timed barrier call may take before the test calls it hung.
const BOUND: Duration = Duration::from_secs(10);

/// How much later than its timeout a timed call may return: its requests
/// and its clean-up, on a loaded machine (seen: 1.3 s after a 300 ms
/// timeout). A deadline not kept at all is caught by [`BOUND`].
const LATE: Duration = Duration::from_secs(5);

#[test]
fn waiters_pass_when_the_barrier_is_removed() {
    let cs = clients(3, SESSION);
    let path = unique("barrier");
    let gate = DistributedBarrier::new(&cs[0], &path).unwrap();
    assert!(
        gate.wait_on_barrier(Duration::ZERO).unwrap(),
        "not set: open"
    );
    gate.set_barrier().unwrap();
    gate.set_barrier().unwrap();
    for timeout in [Duration::ZERO, Duration::from_millis(300)] {
        let t = Instant::now();
        let waiter = DistributedBarrier::new(&cs[0], &path).unwrap();
        let passed = call_within("a timed wait on a set barrier", BOUND, move || {
            waiter.wait_on_barrier(timeout)
        });
        assert!(!passed.unwrap());
        assert!(t.elapsed() < timeout + LATE, "{:?}", t.elapsed());
    }
    let passed = AtomicUsize::new(0);
    thread::scope(|s| {
        for c in &cs[1..] {
            let (path, passed) = (&path, &passed);
            s.spawn(move || {
                let b = DistributedBarrier::new(c, path).unwrap();
                if b.wait_on_barrier(Duration::from_secs(30)).unwrap() {
                    passed.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        thread::sleep(Duration::from_millis(300));
        assert_eq!(passed.load(Ordering::SeqCst), 0, "passed a set barrier");
        gate.remove_barrier().unwrap();
    });
    assert_eq!(passed.load(Ordering::SeqCst), 2);
    gate.remove_barrier().unwrap();
    assert!(DistributedBarrier::new(&cs[0], "/").is_err());
}

/// Setting a barrier that is set, or removing one that is not, is fine;
/// anything else ZooKeeper refuses is an error (here: an ACL on the
/// parent that lets nobody create, then nobody delete).
#[test]
fn set_and_remove_report_what_zookeeper_refuses() {
    use latchkey_framework::{Acl, ErrorCode, Perms};
    let c = connect(&shared_server().connect_string(), SESSION);
    let parent = unique("barrier-refused");
    c.create().for_path(&parent, &[]).unwrap();
    let gate = DistributedBarrier::new(&c, &format!("{parent}/gate")).unwrap();
    let only = |perms| [Acl::new(perms, "world", "anyone")];
    c.set_acl(&parent, &only(Perms::READ | Perms::ADMIN), None)
        .unwrap();
    match gate.set_barrier() {
        Err(e) if e.is(ErrorCode::NoAuth) => {}
        other => panic!("set_barrier under a parent refusing creates: {other:?}"),
    }
    c.set_acl(&parent, &Acl::open_unsafe(), None).unwrap();
    gate.set_barrier().unwrap();
    c.set_acl(
        &parent,
        &only(Perms::READ | Perms::CREATE | Perms::ADMIN),
        None,
    )
    .unwrap();
    match gate.remove_barrier() {
        Err(e) if e.is(ErrorCode::NoAuth) => {}
        other => panic!("remove_barrier under a parent refusing deletes: {other:?}"),
    }
    c.set_acl(&parent, &Acl::open_unsafe(), None).unwrap();
    gate.remove_barrier().unwrap();
    c.delete().for_path(&parent).unwrap();
}

/// A member whose listing or delete ZooKeeper refuses in `leave` gets the
/// error; it is not taken for "everyone has left" (only a barrier node that
/// is gone is) or for "already deleted".
#[test]
fn a_refused_listing_or_delete_in_leave_is_an_error() {
    use latchkey_framework::{Acl, ErrorCode, Perms};
    let c = connect(&shared_server().connect_string(), SESSION);
    let path = unique("double-barrier-refused");
    let alone = DistributedDoubleBarrier::new(&c, &path, 1).unwrap();
    assert!(alone.enter(BOUND).unwrap(), "one member of one enters");
    let unreadable = [Acl::new(
        Perms::CREATE | Perms::DELETE | Perms::ADMIN,
        "world",
        "anyone",
    )];
    c.set_acl(&path, &unreadable, None).unwrap();
    match alone.leave(BOUND) {
        Err(e) if e.is(ErrorCode::NoAuth) => {}
        other => panic!("leave with its listing refused: {other:?}"),
    }
    // Nobody may delete: the member's node stays, and leave says why.
    let undeletable = [Acl::new(
        Perms::READ | Perms::CREATE | Perms::ADMIN,
        "world",
        "anyone",
    )];
    c.set_acl(&path, &undeletable, None).unwrap();
    match alone.leave(BOUND) {
        Err(e) if e.is(ErrorCode::NoAuth) => {}
        other => panic!("leave with its delete refused: {other:?}"),
    }
    c.set_acl(&path, &Acl::open_unsafe(), None).unwrap();
    assert!(alone.leave(BOUND).unwrap());
    assert!(sorted_children(&c, &path).is_empty());
    // A barrier node that is gone (removed since, or never made) is
    // nobody inside, as in Curator: leave returns at once.
    c.delete().for_path(&path).unwrap();
    assert!(
        alone.leave(BOUND).unwrap(),
        "leave once the barrier node went"
    );
    let never = DistributedDoubleBarrier::new(&c, &unique("double-barrier-never"), 2).unwrap();
    assert!(
        never.leave(BOUND).unwrap(),
        "leave of a barrier never entered"
    );
}

/// A timed wait whose time runs out in a request (ZooKeeper silent) is
/// "not passed", as one that runs out while waiting for the watch is, not
/// an error.
#[test]
fn a_timed_wait_with_zookeeper_silent_is_not_passed_rather_than_an_error() {
    let proxy = FaultProxy::start(shared_server().addr()).unwrap();
    let c = connect(&proxy.connect_string(), Duration::from_secs(30));
    let path = unique("barrier-silent");
    let gate = DistributedBarrier::new(&c, &path).unwrap();
    gate.set_barrier().unwrap();
    proxy.pause();
    let passed = call_within("a timed wait with ZooKeeper silent", BOUND, move || {
        gate.wait_on_barrier(Duration::from_millis(1500))
    });
    assert!(
        matches!(passed, Ok(false)),
        "want Ok(false), got {passed:?}: {:?}",
        c.state_history()
    );
    proxy.resume();
    c.delete().for_path(&path).unwrap();
}

#[test]
fn a_barrier_wait_survives_a_server_restart() {
    let mut server = TestingServer::start().unwrap();
    let c = connect(&server.connect_string(), Duration::from_secs(30));
    let other = connect(&server.connect_string(), Duration::from_secs(30));
    let path = unique("barrier-restart");
    let gate = DistributedBarrier::new(&c, &path).unwrap();
    gate.set_barrier().unwrap();
    thread::scope(|s| {
        let _close = CloseIfPanicking(std::slice::from_ref(&other));
        let w = s.spawn(|| {
            DistributedBarrier::new(&other, &path)
                .unwrap()
                .wait_on_barrier(Duration::from_secs(60))
        });
        // The waiter is in its wait: its watch is on the server.
        wait_until(
            Duration::from_secs(30),
            || {
                server
                    .four_letter("wchp")
                    .is_ok_and(|w| w.lines().any(|l| l == path))
            },
            || format!("no watch on {path}: {:?}", other.state_history()),
        );
        server.stop().unwrap();
        thread::sleep(Duration::from_millis(500));
        server.restart().unwrap();
        assert!(c.block_until_connected(Duration::from_secs(30)).unwrap());
        gate.remove_barrier().unwrap();
        end_waits_unless(|| w.is_finished(), std::slice::from_ref(&other));
        assert!(w.join().unwrap().unwrap(), "{:?}", other.state_history());
    });
}

#[test]
fn members_enter_together_and_leave_together() {
    let members = 4;
    let cs = clients(members, SESSION);
    let path = unique("double-barrier");
    let entered = AtomicUsize::new(0);
    let left = AtomicUsize::new(0);
    // When each member called enter, and when its enter returned.
    let arrivals = Mutex::new(Vec::new());
    let entries = Mutex::new(Vec::new());
    thread::scope(|s| {
        for (i, c) in cs.iter().enumerate() {
            let (path, entered, left) = (&path, &entered, &left);
            let (arrivals, entries) = (&arrivals, &entries);
            s.spawn(move || {
                // Arrive one after another; nobody enters before the last.
                thread::sleep(Duration::from_millis(100 * i as u64));
                let b = DistributedDoubleBarrier::new(c, path, members).unwrap();
                arrivals.lock().unwrap().push(Instant::now());
                assert!(b.enter(Duration::from_secs(30)).unwrap());
                entries.lock().unwrap().push((i, Instant::now()));
                entered.fetch_add(1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(100 * (members - i) as u64));
                assert!(b.leave(Duration::from_secs(30)).unwrap());
                // Nobody leaves before everyone has arrived at leave.
                assert_eq!(entered.load(Ordering::SeqCst), members);
                left.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    let last_arrival = arrivals.lock().unwrap().iter().max().copied();
    for (i, at) in entries.lock().unwrap().iter() {
        assert!(
            last_arrival.is_some_and(|last| *at >= last),
            "member {i} entered before the last member arrived"
        );
    }
    assert_eq!(left.load(Ordering::SeqCst), members);
    assert!(sorted_children(&cs[0], &path).is_empty());
}

#[test]
fn an_enter_that_times_out_is_not_counted() {
    let cs = clients(2, SESSION);
    let path = unique("double-barrier-timeout");
    let b = DistributedDoubleBarrier::new(&cs[0], &path, 2).unwrap();
    let t = Instant::now();
    let entered = call_within("a timed enter alone", BOUND, move || {
        b.enter(Duration::from_millis(300))
    });
    assert!(!entered.unwrap());
    assert!(
        t.elapsed() < Duration::from_millis(300) + LATE,
        "{:?}",
        t.elapsed()
    );
    assert!(sorted_children(&cs[0], &path).is_empty(), "its node went");
    let late = DistributedDoubleBarrier::new(&cs[1], &path, 2).unwrap();
    let entered = call_within("a late timed enter alone", BOUND, move || {
        late.enter(Duration::from_millis(200))
    });
    assert!(!entered.unwrap(), "alone: no quorum");
    assert!(matches!(
        DistributedDoubleBarrier::new(&cs[0], &path, 0),
        Err(Error::InvalidArgument(_))
    ));
}

/// Curator's `leave` (CURATOR-233, open) lets a member whose node is gone
/// return as soon as it looks again and finds one node left, although that
/// node is the lowest member's, which has not left yet. Waiting members
/// look again on any connection-state change: here a cut of the other
/// members' connections (their sessions kept) made both return from
/// `leave` while the lowest member was still inside. They must wait for it
/// (ZooKeeper's double-barrier recipe: wait on the lowest node until it
/// goes).
#[test]
fn members_wait_in_leave_for_the_lowest_member_through_a_connection_blip() {
    let members = 3;
    let proxies: Vec<FaultProxy> = (0..members)
        .map(|_| FaultProxy::start(shared_server().addr()).unwrap())
        .collect();
    let cs: Vec<Client> = proxies
        .iter()
        .map(|p| connect(&p.connect_string(), SESSION))
        .collect();
    let path = unique("double-barrier-lowest-last");
    let barriers: Vec<DistributedDoubleBarrier> = cs
        .iter()
        .map(|c| DistributedDoubleBarrier::new(c, &path, members).unwrap())
        .collect();
    thread::scope(|s| {
        for b in &barriers {
            s.spawn(move || assert!(b.enter(Duration::from_secs(30)).unwrap()));
        }
    });
    let member_nodes = || {
        sorted_children(&cs[0], &path)
            .into_iter()
            .filter(|c| c != READY_NODE)
            .collect::<Vec<_>>()
    };
    let lowest = member_nodes()[0].clone();
    let owner = cs[0]
        .exists(&format!("{path}/{lowest}"))
        .unwrap()
        .expect("the lowest node")
        .ephemeral_owner;
    let last = cs
        .iter()
        .position(|c| c.session_id() == owner)
        .expect("the lowest node's member");
    let others: Vec<usize> = (0..members).filter(|&i| i != last).collect();
    let dump = || {
        let states: Vec<String> = cs
            .iter()
            .map(|c| format!("{:?}", c.state_history()))
            .collect();
        format!("children: {:?}\nstates: {states:?}", member_nodes())
    };
    let left = Outcome::default();
    let leaving = thread::scope(|s| {
        for &i in &others {
            let (left, b) = (&left, &barriers[i]);
            s.spawn(move || {
                let got = b.leave(Duration::from_secs(30));
                left.lock().unwrap().push((i, Instant::now(), got));
            });
        }
        // The others have deleted their nodes and wait for the lowest.
        wait_until(
            Duration::from_secs(10),
            || member_nodes() == [lowest.clone()],
            dump,
        );
        let reconnects = |i: usize| {
            cs[i]
                .state_history()
                .iter()
                .filter(|(_, s)| *s == ConnectionState::Reconnected)
                .count()
        };
        let before: Vec<usize> = others.iter().map(|&i| reconnects(i)).collect();
        for &i in &others {
            proxies[i].cut();
        }
        wait_until(
            Duration::from_secs(20),
            || others.iter().zip(&before).all(|(&i, &b)| reconnects(i) > b),
            dump,
        );
        // A second for one of them to return too early (both did at once).
        let deadline = Instant::now() + Duration::from_secs(1);
        while left.lock().unwrap().is_empty() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        let leaving = Instant::now();
        assert!(barriers[last].leave(Duration::from_secs(10)).unwrap());
        leaving
    });
    assert_passed_together("leave", &left, members - 1, leaving, dump);
    assert!(member_nodes().is_empty(), "{}", dump());
}

/// How long after the event that should end a wait (the barrier removed,
/// the last member arriving or leaving) every waiter must have returned,
/// faults included.
const PASS_WITHIN: Duration = Duration::from_secs(30);

/// What a waiter's call returned, and when.
type Outcome = Mutex<Vec<(usize, Instant, latchkey_framework::Result<bool>)>>;

/// Waits until `done` ([`PASS_WITHIN`] at most); if it is not, closes
/// `cs`, whose blocked calls then end: the test's scope joins at once and
/// its checks fail with what happened, instead of waiting out the calls.
fn end_waits_unless(done: impl Fn() -> bool, cs: &[Client]) {
    let until = Instant::now() + PASS_WITHIN;
    while !done() && Instant::now() < until {
        thread::sleep(Duration::from_millis(10));
    }
    if !done() {
        for c in cs {
            c.close();
        }
    }
}

/// Closes its clients if the test panics while they wait (a check
/// inside a `thread::scope` that fails): their blocked calls end, so the
/// scope joins at once and the panic is reported, instead of after the
/// calls' own time-outs (120 s).
struct CloseIfPanicking<'a>(&'a [Client]);

impl Drop for CloseIfPanicking<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            for c in self.0 {
                c.close();
            }
        }
    }
}

/// Clients of `cluster`, connected to any member.
fn cluster_clients(cluster: &TestingCluster, n: usize) -> Vec<Client> {
    (0..n)
        .map(|_| connect(&cluster.connect_string(), SESSION))
        .collect()
}

/// Watches set on `path` across the running members (`wchp`).
fn watchers(cluster: &TestingCluster, path: &str) -> usize {
    (0..cluster.size())
        .filter_map(|i| cluster.four_letter(i, "wchp").ok())
        .map(|text| {
            text.lines()
                .skip_while(|l| *l != path)
                .skip(1)
                .take_while(|l| l.starts_with('\t'))
                .count()
        })
        .sum()
}

/// The member states and client histories, for a failure message.
fn ensemble_dump(cluster: &TestingCluster, cs: &[Client]) -> String {
    let states: Vec<String> = cs
        .iter()
        .enumerate()
        .map(|(i, c)| format!("client {i}: {:?}", c.state_history()))
        .collect();
    format!("{}\n{}", states.join("\n"), cluster.describe(15))
}

/// Waits until every client is connected again after a fault.
fn all_connected(cluster: &TestingCluster, cs: &[Client]) {
    wait_until(
        Duration::from_secs(60),
        || {
            cs.iter()
                .all(|c| c.state().is_some_and(ConnectionState::is_connected))
        },
        || ensemble_dump(cluster, cs),
    );
}

/// Checks that each of `expected` waiters returned `Ok(true)`, none
/// before `not_before`, each within [`PASS_WITHIN`] of it.
fn assert_passed_together(
    what: &str,
    outcome: &Outcome,
    expected: usize,
    not_before: Instant,
    dump: impl Fn() -> String,
) {
    let outcome = outcome.lock().unwrap();
    assert_eq!(outcome.len(), expected, "{what}: {outcome:?}\n{}", dump());
    for (i, at, got) in outcome.iter() {
        assert!(
            matches!(got, Ok(true)),
            "{what}: waiter {i} returned {got:?}\n{}",
            dump()
        );
        assert!(
            *at >= not_before,
            "{what}: waiter {i} returned {:?} too early\n{}",
            not_before - *at,
            dump()
        );
        assert!(
            *at - not_before <= PASS_WITHIN,
            "{what}: waiter {i} returned {:?} after it could, beyond {PASS_WITHIN:?}\n{}",
            *at - not_before,
            dump()
        );
    }
    println!(
        "{what}: {} waiters, the last {:?} after it could",
        outcome.len(),
        outcome
            .iter()
            .map(|(_, at, _)| *at - not_before)
            .max()
            .unwrap_or_default()
    );
}

/// Three waiters on a set barrier while the ensemble's leader is killed
/// and every member then restarted in turn: none passes while the barrier
/// stands, all pass once it is removed, within a bound.
#[test]
fn barrier_waiters_pass_once_removed_after_a_leader_kill_and_a_rolling_restart() {
    let mut cluster = TestingCluster::start(3).unwrap();
    let waiters = 3;
    let cs = cluster_clients(&cluster, waiters + 1);
    let path = unique("barrier-ensemble");
    let gate = DistributedBarrier::new(&cs[waiters], &path).unwrap();
    gate.set_barrier().unwrap();
    // Each waiter's member has the barrier: a follower that has not applied
    // the create yet answers that there is none, and a waiter asking it
    // passes at once (so does Curator's; ZooKeeper orders reads across
    // clients only through a sync). A client never reads older data than
    // it has seen, so from here on its waiter finds the barrier set.
    for (i, c) in cs[..waiters].iter().enumerate() {
        wait_until(
            Duration::from_secs(30),
            || matches!(c.exists(&path), Ok(Some(_))),
            || {
                format!(
                    "waiter {i} never saw the barrier\n{}",
                    ensemble_dump(&cluster, &cs)
                )
            },
        );
    }
    let outcome = Outcome::default();
    let removed_at = thread::scope(|s| {
        let _close = CloseIfPanicking(&cs[..waiters]);
        for (i, c) in cs[..waiters].iter().enumerate() {
            let (path, outcome) = (&path, &outcome);
            s.spawn(move || {
                let got = DistributedBarrier::new(c, path)
                    .unwrap()
                    .wait_on_barrier(Duration::from_secs(120));
                outcome.lock().unwrap().push((i, Instant::now(), got));
            });
        }
        // Every waiter has its watch set: it is in its wait.
        wait_until(
            Duration::from_secs(60),
            || watchers(&cluster, &path) >= waiters,
            || {
                let wchp: Vec<String> = (0..cluster.size())
                    .map(|i| format!("member {i}: {:?}", cluster.four_letter(i, "wchp")))
                    .collect();
                format!(
                    "returned: {:?}\n{}\n{}",
                    outcome.lock().unwrap(),
                    wchp.join("\n"),
                    ensemble_dump(&cluster, &cs)
                )
            },
        );
        let leader = cluster.leader().expect("an ensemble leader");
        cluster.kill(leader).unwrap();
        cluster.wait_for_quorum(Duration::from_secs(60)).unwrap();
        all_connected(&cluster, &cs);
        cluster.restart(leader).unwrap();
        for member in 0..cluster.size() {
            cluster.restart(member).unwrap();
            cluster.wait_for_quorum(Duration::from_secs(60)).unwrap();
        }
        all_connected(&cluster, &cs);
        assert!(
            outcome.lock().unwrap().is_empty(),
            "passed a barrier that stands: {:?}",
            outcome.lock().unwrap()
        );
        let removed_at = Instant::now();
        gate.remove_barrier().unwrap();
        end_waits_unless(|| outcome.lock().unwrap().len() == waiters, &cs[..waiters]);
        removed_at
    });
    assert_passed_together("barrier", &outcome, waiters, removed_at, || {
        ensemble_dump(&cluster, &cs)
    });
    assert!(sorted_children(&cs[waiters], &path).is_empty());
}

/// Four members of a double barrier: three wait in `enter` while the
/// ensemble's leader is killed, then the fourth arrives and all enter
/// together; three wait in `leave` through a rolling restart, then the
/// fourth leaves and all leave together. No member returns before the
/// fourth arrives (leaves), every one within a bound after, and no node
/// is left.
#[test]
fn double_barrier_members_enter_and_leave_together_through_a_leader_kill_and_a_rolling_restart() {
    let mut cluster = TestingCluster::start(3).unwrap();
    let members = 4;
    let cs = cluster_clients(&cluster, members + 1);
    let observer = &cs[members];
    let path = unique("double-barrier-ensemble");
    let barriers: Vec<DistributedDoubleBarrier> = cs[..members]
        .iter()
        .map(|c| DistributedDoubleBarrier::new(c, &path, members).unwrap())
        .collect();
    let last = members - 1;
    let member_nodes = || {
        sorted_children(observer, &path)
            .into_iter()
            .filter(|c| c != READY_NODE)
            .count()
    };
    let dump = |cluster: &TestingCluster| {
        format!(
            "children: {:?}\n{}",
            sorted_children(observer, &path),
            ensemble_dump(cluster, &cs)
        )
    };
    let entered = Outcome::default();
    let last_arrived = thread::scope(|s| {
        let _close = CloseIfPanicking(&cs[..members]);
        for (i, b) in barriers[..last].iter().enumerate() {
            let entered = &entered;
            s.spawn(move || {
                let got = b.enter(Duration::from_secs(120));
                entered.lock().unwrap().push((i, Instant::now(), got));
            });
        }
        // Their nodes are there: they wait for the fourth.
        wait_until(
            Duration::from_secs(30),
            || member_nodes() == last,
            || dump(&cluster),
        );
        let leader = cluster.leader().expect("an ensemble leader");
        cluster.kill(leader).unwrap();
        cluster.wait_for_quorum(Duration::from_secs(60)).unwrap();
        all_connected(&cluster, &cs);
        assert!(
            entered.lock().unwrap().is_empty(),
            "entered without the fourth member: {:?}\n{}",
            entered.lock().unwrap(),
            dump(&cluster)
        );
        let arrived = Instant::now();
        let got = barriers[last].enter(PASS_WITHIN);
        entered.lock().unwrap().push((last, Instant::now(), got));
        end_waits_unless(|| entered.lock().unwrap().len() == members, &cs[..members]);
        cluster.restart(leader).unwrap();
        arrived
    });
    assert_passed_together("enter", &entered, members, last_arrived, || dump(&cluster));

    let left = Outcome::default();
    let last_left = thread::scope(|s| {
        let _close = CloseIfPanicking(&cs[..members]);
        for (i, b) in barriers[..last].iter().enumerate() {
            let left = &left;
            s.spawn(move || {
                let got = b.leave(Duration::from_secs(120));
                left.lock().unwrap().push((i, Instant::now(), got));
            });
        }
        // All but the lowest of the three have deleted their nodes; the
        // lowest waits for the fourth, which has not left.
        wait_until(
            Duration::from_secs(30),
            || member_nodes() <= 2,
            || dump(&cluster),
        );
        for member in 0..cluster.size() {
            cluster.restart(member).unwrap();
            cluster.wait_for_quorum(Duration::from_secs(60)).unwrap();
        }
        all_connected(&cluster, &cs);
        assert!(
            left.lock().unwrap().is_empty(),
            "left before the fourth member: {:?}\n{}",
            left.lock().unwrap(),
            dump(&cluster)
        );
        let leaving = Instant::now();
        let got = barriers[last].leave(PASS_WITHIN);
        left.lock().unwrap().push((last, Instant::now(), got));
        end_waits_unless(|| left.lock().unwrap().len() == members, &cs[..members]);
        leaving
    });
    assert_passed_together("leave", &left, members, last_left, || dump(&cluster));
    assert!(
        sorted_children(observer, &path).is_empty(),
        "nodes left once everyone left: {}",
        dump(&cluster)
    );
}

/// The member nodes of a double barrier at `path` (without `ready`).
fn member_nodes_of(c: &Client, path: &str) -> Vec<String> {
    sorted_children(c, path)
        .into_iter()
        .filter(|n| n != READY_NODE)
        .collect()
}

/// Waits [`BOUND`] for what `enter` on another thread sent on `rx`; if it
/// sent nothing by then, closes `c` (which ends the call) and fails,
/// saying `what`.
fn enter_outcome(
    rx: &crossbeam_channel::Receiver<latchkey_framework::Result<bool>>,
    c: &Client,
    what: &str,
) -> latchkey_framework::Result<bool> {
    match rx.recv_timeout(BOUND) {
        Ok(got) => got,
        Err(_) => {
            let history = c.state_history();
            c.close();
            panic!("{what}: enter had not returned {BOUND:?} later; states: {history:?}")
        }
    }
}

/// Issue 38 (9): an `enter` without a deadline whose session expires while
/// it waits. Its node went with the session and so did its watch on
/// `ready`, and nothing would wake it to count again: it waited for ever.
/// Curator's `enter` throws a connection loss when the connection went
/// while it entered; this one fails with `SessionExpired`, naming the
/// call and the member's node, and leaves no node behind. Entering again
/// joins with a new node.
#[test]
fn an_enter_whose_session_expires_fails_rather_than_waiting_for_ever() {
    let cs = clients(2, SESSION);
    let path = unique("double-barrier-expired");
    let first_session = cs[0].session_id();
    let barrier = std::sync::Arc::new(DistributedDoubleBarrier::new(&cs[0], &path, 2).unwrap());
    let (tx, rx) = crossbeam_channel::bounded(1);
    let entering = std::sync::Arc::clone(&barrier);
    let waiter = thread::spawn(move || {
        let _ = tx.send(entering.enter(Duration::MAX));
    });
    let dump = || {
        format!(
            "children: {:?}; states: {:?}",
            sorted_children(&cs[1], &path),
            cs[0].state_history()
        )
    };
    // In its wait: its node is there, its watch on `ready` set.
    wait_until(
        BOUND,
        || member_nodes_of(&cs[1], &path).len() == 1 && cs[0].pending_watches() > 0,
        dump,
    );
    cs[0].expire_session_for_testing().unwrap();
    wait_until(
        Duration::from_secs(30),
        || {
            let s = cs[0].session_id();
            s != 0 && s != first_session
        },
        dump,
    );
    let got = enter_outcome(&rx, &cs[0], "its session expired");
    waiter.join().unwrap();
    let err = match got {
        Err(e) => e,
        Ok(entered) => panic!(
            "enter with its session lost returned Ok({entered}): {}",
            dump()
        ),
    };
    let message = err.to_string();
    assert!(
        err.is(latchkey_framework::ErrorCode::SessionExpired),
        "want SessionExpired, got {err:?}"
    );
    assert!(
        message.contains("enter") && message.contains(&path),
        "the error names neither the call nor the path: {message}"
    );
    wait_until(BOUND, || member_nodes_of(&cs[1], &path).is_empty(), dump);
    // Entering again, on the new session, counts again.
    thread::scope(|s| {
        let other = s.spawn(|| {
            DistributedDoubleBarrier::new(&cs[1], &path, 2)
                .unwrap()
                .enter(BOUND)
        });
        assert!(barrier.enter(BOUND).unwrap(), "{}", dump());
        assert!(other.join().unwrap().unwrap(), "{}", dump());
    });
}

/// Issue 38 (9): the session changes between `enter`'s watch on `ready`
/// (set on the old session, so gone) and the create of its node (retried
/// on the new session). The node is counted but nothing wakes the member:
/// when the other member arrives and creates `ready`, it waited for ever.
/// It must set its watch again on the session of its node, and enter.
#[test]
fn an_enter_whose_session_changes_before_its_node_is_made_watches_again() {
    let proxy = FaultProxy::start(shared_server().addr()).unwrap();
    let c = connect(&proxy.connect_string(), Duration::from_secs(2));
    let other = connect(&shared_server().connect_string(), SESSION);
    let path = unique("double-barrier-late-node");
    other.create().for_path(&path, &[]).unwrap();
    let first_session = c.session_id();
    // The create of the member's node: a path `<path>/<uuid>` (36 chars).
    let node_len = i32::try_from(path.len() + 1 + 36).unwrap();
    let mut create = node_len.to_be_bytes().to_vec();
    create.extend_from_slice(format!("{path}/").as_bytes());
    proxy.pause_requests_at(&create);
    let (tx, rx) = crossbeam_channel::bounded(1);
    let (entering, p) = (c.clone(), path.clone());
    let waiter = thread::spawn(move || {
        let b = DistributedDoubleBarrier::new(&entering, &p, 2).unwrap();
        let _ = tx.send(b.enter(Duration::MAX));
    });
    let dump = || {
        format!(
            "children: {:?}; states: {:?}",
            sorted_children(&other, &path),
            c.state_history()
        )
    };
    wait_until(BOUND, || proxy.requests_paused(), dump);
    // Held past the session's timeout: the client declares it lost.
    wait_until(
        Duration::from_secs(20),
        || c.lost_session_id() == Some(first_session),
        dump,
    );
    proxy.cut();
    proxy.resume();
    // The member's node is made on the next session.
    wait_until(
        Duration::from_secs(30),
        || {
            member_nodes_of(&other, &path).iter().any(|n| {
                other
                    .exists(&format!("{path}/{n}"))
                    .ok()
                    .flatten()
                    .is_some_and(|s| s.ephemeral_owner == c.session_id())
            })
        },
        dump,
    );
    let second = DistributedDoubleBarrier::new(&other, &path, 2).unwrap();
    assert!(second.enter(BOUND).unwrap(), "{}", dump());
    let got = enter_outcome(&rx, &c, "the other member arrived");
    waiter.join().unwrap();
    assert!(matches!(got, Ok(true)), "got {got:?}: {}", dump());
}

/// A member's create that the server applied, whose reply the cut
/// connection lost: the client's retry meets the member's own node
/// (`NodeExists`). The node is this session's, so `enter` must go on with
/// it and pass once the second member comes, not fail while its node
/// stays and counts as a member.
#[test]
fn an_enter_whose_create_reply_is_lost_goes_on_with_its_own_node() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = patient_client(&proxy);
    let other = connect(&server.connect_string(), SESSION);
    let ctx = Ctx::new(server, &c);
    let path = unique("/double-barrier-lost-create");
    // The parent first, so that the member's first create is applied.
    other
        .create()
        .creating_parents_if_needed()
        .for_path(&path, b"")
        .unwrap();
    let first = DistributedDoubleBarrier::new(&c.with_timeout(BOUND * 2), &path, 2).unwrap();
    // The member's create2: op 15, then its path (`<path>/<uuid>`).
    let mut create = 15i32.to_be_bytes().to_vec();
    create.extend(i32::try_from(path.len() + 37).unwrap().to_be_bytes());
    create.extend(format!("{path}/").as_bytes());
    proxy.pause_requests_at(&create);
    let (entered, second) = thread::scope(|scope| {
        let entering = scope.spawn(|| first.enter(BOUND));
        wait_until(
            BOUND,
            || proxy.requests_paused(),
            || "the member's create never reached the proxy".into(),
        );
        proxy.pause_replies();
        proxy.resume_requests();
        wait_until(
            BOUND,
            || other.get_children(&path).is_ok_and(|c| c.len() == 1),
            || "the held create was not applied".into(),
        );
        proxy.cut();
        proxy.resume();
        let second = DistributedDoubleBarrier::new(&other, &path, 2).unwrap();
        let joined = second.enter(BOUND);
        (entering.join().expect("enter panicked"), joined)
    });
    assert!(
        matches!(entered, Ok(true)),
        "the member whose create reply was lost: {entered:?}\n{}",
        ctx.dump()
    );
    assert!(matches!(second, Ok(true)), "the second member: {second:?}");
}

//! Leader election (`LeaderLatch`) against real ZooKeeper: one leader at a
//! time, Curator's nodes, listeners and close modes, and leadership across
//! suspended connections, expired sessions and an ensemble's leader kills.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::{Client, ConnectionState, Error, ExponentialBackoffRetry};
use latchkey_recipes::{leader_of, CloseMode, LatchEvent, LatchState, LeaderLatch, Participant};
use latchkey_test::{TestingCluster, TestingServer};

const SESSION: Duration = Duration::from_secs(10);
/// How long a new leader may take after the old one goes.
const NEW_LEADER_WITHIN: Duration = Duration::from_secs(20);

fn leaders(latches: &[LeaderLatch]) -> Vec<usize> {
    (0..latches.len())
        .filter(|&i| latches[i].has_leadership())
        .collect()
}

fn wait_one_leader(latches: &[LeaderLatch], within: Duration) -> usize {
    let mut found = None;
    wait_until(
        within,
        || {
            let l = leaders(latches);
            found = l.first().copied();
            l.len() == 1
        },
        || format!("leaders: {:?}", leaders(latches)),
    );
    found.unwrap()
}

#[test]
fn one_of_three_latches_leads_and_the_next_takes_over_on_close() {
    let cs = clients(3, SESSION);
    let path = unique("latch-basic");
    let latches: Vec<LeaderLatch> = cs
        .iter()
        .enumerate()
        .map(|(i, c)| LeaderLatch::with_id(c, &path, &format!("p{i}")).unwrap())
        .collect();
    assert_eq!(latches[0].state(), LatchState::Latent);
    for l in &latches {
        l.start().unwrap();
    }
    let first = wait_one_leader(&latches, NEW_LEADER_WITHIN);

    // Curator's nodes: protected, `latch-`, the id as data. `start` joins
    // in the background, so the last node may come after the first leads.
    let mut children = Vec::new();
    wait_until(
        NEW_LEADER_WITHIN,
        || {
            children = sorted_children(&cs[0], &path);
            children.len() == 3
        },
        || format!("latch nodes: {:?}", sorted_children(&cs[0], &path)),
    );
    for c in &children {
        assert!(
            c.starts_with("_c_") && c.contains("-latch-"),
            "{children:?}"
        );
    }
    let participants = latches[1].participants().unwrap();
    assert_eq!(participants.len(), 3, "{participants:?}");
    assert_eq!(participants[0], Participant::new(format!("p{first}"), true));
    assert!(participants[1..].iter().all(|p| !p.is_leader));
    assert_eq!(latches[2].leader().unwrap().id, format!("p{first}"));

    // The leader closes: one of the others leads within the bound.
    let closed_at = Instant::now();
    latches[first].close().unwrap();
    assert!(!latches[first].has_leadership());
    let rest: Vec<LeaderLatch> = latches
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != first)
        .map(|(_, l)| l)
        .collect();
    let second = wait_one_leader(&rest, NEW_LEADER_WITHIN);
    println!("new leader after close in {:?}", closed_at.elapsed());
    assert_eq!(rest[0].participants().unwrap().len(), 2);
    assert_eq!(rest[0].leader().unwrap().id, rest[second].id());
    // The next in the queue, as in Curator, with the node it queued with:
    // a waiter keeps its place (and its node) through its wake-ups.
    assert_eq!(
        rest[second].id(),
        participants[1].id,
        "the queue was {participants:?}"
    );
    let mut queue = children.clone();
    queue.sort_by(|a, b| a.rsplit('-').next().cmp(&b.rsplit('-').next()));
    assert_eq!(
        rest[second].our_path(),
        Some(format!("{path}/{}", queue[1])),
        "the queue was {queue:?}"
    );

    // Dropping a latch closes it too.
    drop(rest);
    wait_until(
        Duration::from_secs(10),
        || sorted_children(&cs[0], &path).is_empty(),
        || format!("{:?}", sorted_children(&cs[0], &path)),
    );
}

/// The events a latch's channel gives until it disconnects, which it does
/// when the latch closes; fails the test if it has not within 10 s.
fn events_until_closed(events: &crossbeam_channel::Receiver<LatchEvent>) -> Vec<LatchEvent> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        match events.recv_deadline(deadline) {
            Ok(e) => seen.push(e),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return seen,
            Err(_) => panic!("the latch's events did not end within 10 s of its close: {seen:?}"),
        }
    }
}

#[test]
fn listeners_hear_leadership_and_close_modes_differ() {
    let c = connect(&shared_server().connect_string(), SESSION);
    let path = unique("latch-listen");
    for (mode, want_not_leader) in [(CloseMode::Silent, false), (CloseMode::NotifyLeader, true)] {
        let latch = LeaderLatch::with_close_mode(&c, &path, "me", mode).unwrap();
        let events = latch.listen();
        latch.start().unwrap();
        assert!(latch.await_leadership(Duration::from_secs(10)).unwrap());
        assert_eq!(
            events.recv_timeout(Duration::from_secs(5)),
            Ok(LatchEvent::IsLeader)
        );
        latch.close().unwrap();
        let after = events_until_closed(&events);
        let want = if want_not_leader {
            vec![LatchEvent::NotLeader]
        } else {
            vec![]
        };
        assert_eq!(after, want, "{mode:?}");
        assert_eq!(latch.state(), LatchState::Closed);
    }
    // A mode given at close wins over the latch's own; the latch knows
    // its node while it takes part.
    let latch = LeaderLatch::with_close_mode(&c, &path, "me", CloseMode::Silent).unwrap();
    let events = latch.listen();
    latch.start().unwrap();
    assert!(latch.await_leadership(Duration::from_secs(10)).unwrap());
    let node = format!("{path}/{}", sorted_children(&c, &path)[0]);
    assert_eq!(latch.our_path().as_deref(), Some(node.as_str()));
    latch.close_with(CloseMode::NotifyLeader).unwrap();
    let after = events_until_closed(&events);
    assert_eq!(after, [LatchEvent::IsLeader, LatchEvent::NotLeader]);
    assert!(sorted_children(&c, &path).is_empty());
}

/// A latch whose listing of the queue, or whose watch on its own node,
/// fails (the connection is lost while that request waits, on a client
/// that does not retry) keeps its node and leads once connected again; it
/// does not queue a second node behind its first, which would then block
/// it for the rest of the session.
#[test]
fn a_latch_whose_look_fails_keeps_its_node_and_leads() {
    let cut = CutOff::new();
    let c = &cut.client;
    for held in ["the listing", "the watch on its node"] {
        let path = unique("/leader/look-fails");
        // No parent to create: the requests on the latch's own path are
        // its listings.
        c.create()
            .creating_parents_if_needed()
            .for_path(&path, b"")
            .unwrap();
        let request = match held {
            "the listing" => request_path(&path),
            _ => {
                // getData (op code 4) of the latch's node: the latch's path,
                // "/_c_", a 36-character id, "-latch-", a 10-digit sequence.
                let node_len = i32::try_from(path.len() + 57).unwrap();
                let mut read = 4i32.to_be_bytes().to_vec();
                read.extend(node_len.to_be_bytes());
                read.extend(format!("{path}/_c_").as_bytes());
                read
            }
        };
        let latch = LeaderLatch::new(c, &path).unwrap();
        cut.fail_request(&request, || latch.start().unwrap());
        let led = latch.await_leadership(Duration::from_secs(20)).unwrap();
        let nodes = sorted_children(c, &path);
        assert!(
            led && nodes.len() == 1,
            "{held} failed; led: {led}, nodes: {nodes:?}\n{}",
            cut.ctx.dump()
        );
        latch.close().unwrap();
    }
}

/// `participants` and `leader` list the queue, then read each node's id.
/// A node gone between the two is left out (and the next one leads); a
/// read that fails otherwise (cut off, the client not retrying) is an
/// error, not a participant left out.
#[test]
fn participants_leave_out_a_node_gone_since_the_listing_but_report_a_failed_read() {
    use std::sync::Arc;
    let cut = CutOff::new();
    let cs = clients(3, SESSION);
    let path = unique("/leader/gone-between");
    let latches: Vec<LeaderLatch> = cs
        .iter()
        .enumerate()
        .map(|(i, c)| LeaderLatch::with_id(c, &path, &format!("p{i}")).unwrap())
        .collect();
    for l in &latches {
        l.start().unwrap();
    }
    wait_until(
        Duration::from_secs(10),
        || sorted_children(&cs[0], &path).len() == 3,
        || format!("{:?}", sorted_children(&cs[0], &path)),
    );
    // In queue order: by sequence number, as `participants` lists them.
    let mut nodes: Vec<String> = sorted_children(&cs[0], &path)
        .iter()
        .map(|n| format!("{path}/{n}"))
        .collect();
    nodes.sort_by_key(|n| n.rsplit('-').next().unwrap_or_default().to_string());
    let ids: Vec<String> = latches[0]
        .participants()
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    let observer = Arc::new(LeaderLatch::new(&cut.client, &path).unwrap());
    // The observer's `leader` (as a list of one) or `participants`, asked
    // on a thread of its own; the answer comes on the channel.
    let ask = |leader_only: bool| {
        let o = Arc::clone(&observer);
        let (tx, rx) = crossbeam_channel::bounded(1);
        thread::spawn(move || {
            let _ = tx.send(if leader_only {
                o.leader().map(|l| vec![l])
            } else {
                o.participants()
            });
        });
        rx
    };
    // Holds the read (getData, op code 4) of `nodes[i]` while its latch
    // closes, then lets it go on: ZooKeeper answers it NoNode.
    let gone_between = |i: usize, leader_only: bool| {
        cut.proxy.pause_requests_at(&request_on(4, &nodes[i]));
        let rx = ask(leader_only);
        wait_until(
            Duration::from_secs(10),
            || cut.proxy.requests_paused(),
            || format!("the read was never sent\n{}", cut.ctx.dump()),
        );
        latches
            .iter()
            .find(|l| l.id() == ids[i])
            .expect("the node's latch")
            .close()
            .unwrap();
        cut.proxy.resume();
        rx.recv_timeout(Duration::from_secs(20))
            .expect("the listing returned in time")
            .map(|ps| {
                ps.into_iter()
                    .map(|p| (p.id, p.is_leader))
                    .collect::<Vec<_>>()
            })
    };
    let listed = gone_between(0, false);
    assert_eq!(
        listed.as_ref().ok().map(Vec::as_slice),
        Some(&[(ids[1].clone(), true), (ids[2].clone(), false)][..]),
        "the first node went between the listing and its read: {listed:?}\n{}",
        cut.ctx.dump()
    );
    let leader = gone_between(1, true);
    assert_eq!(
        leader.as_ref().ok().map(Vec::as_slice),
        Some(&[(ids[2].clone(), true)][..]),
        "the leader's node went between the listing and its read: {leader:?}\n{}",
        cut.ctx.dump()
    );
    // The last node's read cut off: an error, for both calls.
    for leader_only in [false, true] {
        let mut answer = None;
        cut.fail_request(&request_on(4, &nodes[2]), || {
            answer = Some(ask(leader_only));
        });
        let got = answer
            .expect("the call was asked")
            .recv_timeout(Duration::from_secs(20))
            .expect("the call returned in time");
        assert!(
            got.is_err(),
            "a cut-off read (leader only: {leader_only}) answered {got:?}\n{}",
            cut.ctx.dump()
        );
        wait_until(
            Duration::from_secs(10),
            || {
                cut.client
                    .state()
                    .is_some_and(ConnectionState::is_connected)
            },
            || cut.ctx.dump(),
        );
    }
}

#[test]
fn await_leadership_is_a_deadline_and_false_unless_started() {
    let cs = clients(2, SESSION);
    let path = unique("latch-await");
    let leader = LeaderLatch::new(&cs[0], &path).unwrap();
    let waiting = LeaderLatch::new(&cs[1], &path).unwrap();
    // Not started: false at once, whatever the timeout (Curator's `await`).
    for timeout in [Duration::ZERO, Duration::from_secs(30), Duration::MAX] {
        let t = Instant::now();
        let got = waiting.await_leadership(timeout);
        assert!(matches!(got, Ok(false)), "before start: {got:?}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }
    leader.start().unwrap();
    assert!(leader.await_leadership(Duration::from_secs(10)).unwrap());
    waiting.start().unwrap();
    assert!(matches!(waiting.start(), Err(Error::IllegalState(_))));
    for timeout in [Duration::ZERO, Duration::from_millis(300)] {
        let t = Instant::now();
        assert!(!waiting.await_leadership(timeout).unwrap());
        let took = t.elapsed();
        assert!(
            took < timeout + Duration::from_millis(500),
            "await {timeout:?} took {took:?}"
        );
    }
    // Waiting without limit returns once the leader goes. (The waiter is
    // not a scoped thread: if the wait never ends, the test still fails.)
    let waiting = std::sync::Arc::new(waiting);
    let (tx, rx) = crossbeam_channel::bounded(1);
    {
        let waiting = std::sync::Arc::clone(&waiting);
        thread::spawn(move || tx.send(waiting.await_leadership(Duration::MAX)));
    }
    thread::sleep(Duration::from_millis(100));
    leader.close().unwrap();
    let got = rx.recv_timeout(Duration::from_secs(20));
    assert!(
        matches!(got, Ok(Ok(true))),
        "the unbounded wait, 20 s after the leader closed: {got:?}"
    );
    assert!(matches!(leader.close(), Err(Error::IllegalState(_))));
    // Closed (after leading): false at once.
    for timeout in [Duration::ZERO, Duration::from_secs(30), Duration::MAX] {
        let t = Instant::now();
        let got = leader.await_leadership(timeout);
        assert!(matches!(got, Ok(false)), "after close: {got:?}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }
    // A close while another thread waits ends its wait with false, at once.
    let third = LeaderLatch::new(&cs[0], &path).unwrap();
    third.start().unwrap();
    thread::scope(|s| {
        let w = s.spawn(|| {
            let got = third.await_leadership(Duration::from_secs(30));
            (got, Instant::now())
        });
        thread::sleep(Duration::from_millis(200));
        third.close().unwrap();
        let closed = Instant::now();
        let (got, at) = w.join().unwrap();
        assert!(matches!(got, Ok(false)), "closed while waiting: {got:?}");
        assert!(
            at.saturating_duration_since(closed) < Duration::from_secs(1),
            "returned {:?} after the close",
            at.saturating_duration_since(closed)
        );
    });
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    let c = connect(&shared_server().connect_string(), SESSION);
    for bad in ["", "/", "no-slash", "/a//b", "/zookeeper/x"] {
        assert!(LeaderLatch::new(&c, bad).is_err(), "{bad:?}");
    }
    let huge = "x".repeat(2 << 20);
    match LeaderLatch::with_id(&c, "/latch-huge", &huge) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("/latch-huge"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Never started: dropping does nothing; reading works.
    let idle = LeaderLatch::new(&c, &unique("latch-idle")).unwrap();
    assert!(idle.participants().unwrap().is_empty());
    assert_eq!(idle.leader().unwrap(), Participant::default());
    assert!(!idle.has_leadership());
    assert!(idle.close().is_err());
}

/// A client that never joins asks who leads a latch's path
/// (`leader_of`), and hears of the next leader once the first closes.
#[test]
fn leader_of_tells_a_latch_s_leader_to_a_client_that_does_not_take_part() {
    let cs = clients(3, SESSION);
    let path = unique("latch-leader-of");
    let asker = &cs[2];
    assert_eq!(leader_of(asker, &path).unwrap(), None, "no path yet");
    let a = LeaderLatch::with_id(&cs[0], &path, "a").unwrap();
    a.start().unwrap();
    assert!(a.await_leadership(NEW_LEADER_WITHIN).unwrap());
    let b = LeaderLatch::with_id(&cs[1], &path, "b").unwrap();
    b.start().unwrap();
    wait_until(
        NEW_LEADER_WITHIN,
        || a.participants().is_ok_and(|p| p.len() == 2),
        || format!("participants: {:?}", a.participants()),
    );
    // A child that is no participant is left out.
    asker
        .create()
        .for_path(&format!("{path}/not-a-participant"), b"x")
        .unwrap();
    assert_eq!(
        leader_of(asker, &path).unwrap(),
        Some(Participant::new("a", true))
    );
    a.close().unwrap();
    assert!(b.await_leadership(NEW_LEADER_WITHIN).unwrap());
    assert_eq!(
        leader_of(asker, &path).unwrap().map(|p| p.id),
        Some("b".into())
    );
    b.close().unwrap();
    assert_eq!(leader_of(asker, &path).unwrap(), None, "nobody takes part");
}

/// Through a proxy of the shared server, a latch leads; the proxy pauses
/// until the client is `Suspended` (2/3 of the 12 s session) and resumes
/// well within the session timeout. Returns whether the latch led while
/// suspended, the latch's events, whether it leads after `Reconnected`,
/// and whether it kept its node.
fn latch_through_a_short_outage(
    policy: impl latchkey_framework::ConnectionStateErrorPolicy + 'static,
    name: &str,
) -> (bool, Vec<LatchEvent>, bool, bool) {
    let server = shared_server();
    let proxy = latchkey_test::FaultProxy::start(server.addr()).expect("start the proxy");
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(12))
            .connection_timeout(Duration::from_secs(5))
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 10))
            .connection_state_error_policy(policy),
    );
    let ctx = Ctx::new(server, &c);
    let states = c.listen();
    let latch = LeaderLatch::with_id(&c, &unique(name), "solo").unwrap();
    let events = latch.listen();
    latch.start().unwrap();
    assert!(latch.await_leadership(Duration::from_secs(10)).unwrap());
    let node = latch.our_path();
    let session = c.session_id();

    proxy.pause();
    ctx.expect(&states, ConnectionState::Suspended, Duration::from_secs(20));
    // Give the latch's listener time to act on the state.
    thread::sleep(Duration::from_millis(300));
    let led_while_suspended = latch.has_leadership();
    proxy.resume();
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(20),
    );
    assert_eq!(c.session_id(), session, "the session outlived the outage");
    let leads_after = latch.await_leadership(Duration::from_secs(10)).unwrap();
    thread::sleep(Duration::from_millis(300));
    let told: Vec<LatchEvent> = events.try_iter().collect();
    (
        led_while_suspended,
        told,
        leads_after,
        latch.our_path() == node,
    )
}

/// With `SessionConnectionStateErrorPolicy`, a latch leads on through a
/// `Suspended` connection that comes back within the session.
///
/// Curator's TestLeaderLatch.testSessionErrorPolicy (its session half).
#[test]
fn with_the_session_policy_a_latch_leads_on_through_a_short_outage() {
    let (during, told, after, same_node) = latch_through_a_short_outage(
        latchkey_framework::SessionConnectionStateErrorPolicy,
        "latch-session-policy",
    );
    assert!(during, "stopped leading while suspended; told {told:?}");
    assert_eq!(
        told,
        vec![LatchEvent::IsLeader],
        "leadership was interrupted"
    );
    assert!(after && same_node);
}

/// With the default, `StandardConnectionStateErrorPolicy`, the same outage
/// ends leadership until `Reconnected` confirms it.
///
/// Curator's TestLeaderLatch.testSessionErrorPolicy (its standard half).
#[test]
fn with_the_standard_policy_a_short_outage_ends_a_latch_s_leadership() {
    let (during, told, after, same_node) = latch_through_a_short_outage(
        latchkey_framework::StandardConnectionStateErrorPolicy,
        "latch-standard-policy",
    );
    assert!(!during, "led while suspended");
    assert_eq!(
        told,
        vec![
            LatchEvent::IsLeader,
            LatchEvent::NotLeader,
            LatchEvent::IsLeader
        ]
    );
    assert!(after && same_node);
}

#[test]
fn a_suspended_leader_stops_leading_until_reconnected_confirms_it() {
    let mut server = TestingServer::start().unwrap();
    let c = connect(&server.connect_string(), Duration::from_secs(30));
    let ctx = Ctx::new(&server, &c);
    let states = c.listen();
    let latch = LeaderLatch::with_id(&c, &unique("latch-suspend"), "solo").unwrap();
    let events = latch.listen();
    latch.start().unwrap();
    assert!(latch.await_leadership(Duration::from_secs(10)).unwrap());
    assert_eq!(
        events.recv_timeout(Duration::from_secs(5)),
        Ok(LatchEvent::IsLeader)
    );

    server.stop().unwrap();
    ctx.expect(&states, ConnectionState::Suspended, Duration::from_secs(30));
    assert!(
        !latch.has_leadership(),
        "suspended, yet leading\n{}",
        ctx.dump()
    );
    assert_eq!(
        events.recv_timeout(Duration::from_secs(5)),
        Ok(LatchEvent::NotLeader),
        "{}",
        ctx.dump()
    );

    server.restart().unwrap();
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(30),
    );
    assert!(
        latch.await_leadership(Duration::from_secs(20)).unwrap(),
        "{}",
        ctx.dump()
    );
    assert_eq!(
        events.recv_timeout(Duration::from_secs(5)),
        Ok(LatchEvent::IsLeader)
    );
    assert_eq!(
        sorted_children(&c, latch.path()).len(),
        1,
        "the same node, not a second one"
    );
}

/// Curator's TestLeaderLatch.testSessionInterruptionDoNotCauseBrainSplit.
#[test]
fn an_expired_leader_gives_way_and_queues_again() {
    let cs = clients(2, SESSION);
    let path = unique("latch-expire");
    let a = LeaderLatch::with_id(&cs[0], &path, "a").unwrap();
    a.start().unwrap();
    assert!(a.await_leadership(Duration::from_secs(10)).unwrap());
    let b = LeaderLatch::with_id(&cs[1], &path, "b").unwrap();
    b.start().unwrap();
    wait_until(
        Duration::from_secs(10),
        || a.participants().map(|p| p.len() == 2).unwrap_or(false),
        String::new,
    );
    let events = a.listen();
    cs[0].expire_session_for_testing().unwrap();
    assert!(
        b.await_leadership(NEW_LEADER_WITHIN).unwrap(),
        "{:?}",
        cs[0].state_history()
    );
    assert_eq!(
        events.recv_timeout(Duration::from_secs(10)),
        Ok(LatchEvent::NotLeader)
    );
    // `a` queues again behind `b`, with a node of its new session.
    wait_until(
        Duration::from_secs(20),
        || {
            b.participants()
                .map(|p| p.iter().map(|p| p.id.clone()).collect::<Vec<_>>() == ["b", "a"])
                .unwrap_or(false)
        },
        || format!("{:?} {:?}", b.participants(), cs[0].state_history()),
    );
    assert!(!a.has_leadership());
}

/// The ensemble scenario: five latches on five sessions while the
/// ensemble's leader is killed and restarted, then every member restarted
/// in turn. An oracle outside ZooKeeper counts the latches that lead (by
/// `has_leadership`, which is false while suspended or lost) and must never
/// see two; after every fault some latch must lead again within a bound.
#[test]
fn never_two_leaders_through_leader_kills_and_a_rolling_restart() {
    let mut cluster = TestingCluster::start(3).unwrap();
    let path = unique("latch-ensemble");
    let sessions = 5;
    let cs: Vec<Client> = (0..sessions)
        .map(|_| {
            start_connected(
                Client::builder()
                    .connect_string(cluster.connect_string())
                    .session_timeout(Duration::from_secs(6))
                    .connection_timeout(Duration::from_secs(3))
                    .retry_policy(ExponentialBackoffRetry::with_max_sleep(
                        Duration::from_millis(50),
                        29,
                        Duration::from_millis(500),
                    )),
            )
        })
        .collect();
    let latches: Vec<LeaderLatch> = cs
        .iter()
        .enumerate()
        .map(|(i, c)| LeaderLatch::with_id(c, &path, &format!("s{i}")).unwrap())
        .collect();
    for l in &latches {
        l.start().unwrap();
    }
    let leading = AtomicUsize::new(0);
    let violations = AtomicUsize::new(0);
    let terms = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let dump = |c: &TestingCluster| {
        (0..3)
            .map(|i| format!("member {i}:\n{}", c.log_tail(i, 10)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        for l in &latches {
            let (leading, violations, terms, stop) = (&leading, &violations, &terms, &stop);
            s.spawn(move || {
                let mut was = false;
                while !stop.load(Ordering::SeqCst) {
                    if l.has_leadership() {
                        if !was {
                            terms.fetch_add(1, Ordering::SeqCst);
                        }
                        was = true;
                        if leading.fetch_add(1, Ordering::SeqCst) != 0 {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        thread::sleep(Duration::from_millis(5));
                        leading.fetch_sub(1, Ordering::SeqCst);
                    } else {
                        was = false;
                        thread::sleep(Duration::from_millis(2));
                    }
                }
            });
        }
        let some_leader = |what: &str, c: &TestingCluster| {
            let t = Instant::now();
            // Once the clients are back (each noticed the fault and
            // reconnected), exactly one latch leads: within far more than
            // the few seconds recovery takes, far less than a hung suite.
            thread::sleep(Duration::from_millis(500));
            wait_until(
                Duration::from_secs(30),
                || {
                    cs.iter()
                        .all(|c| c.state().is_some_and(ConnectionState::is_connected))
                        && leaders(&latches).len() == 1
                },
                || {
                    format!(
                        "no single latch leads after {what}: {:?}\n{}",
                        leaders(&latches),
                        dump(c)
                    )
                },
            );
            println!("{what}: one latch leads after {:?}", t.elapsed());
        };
        some_leader("start", &cluster);
        for _ in 0..2 {
            let zk_leader = cluster.leader().expect("an ensemble leader");
            cluster.kill(zk_leader).unwrap();
            some_leader("leader kill", &cluster);
            cluster.restart(zk_leader).unwrap();
            some_leader("leader restart", &cluster);
        }
        for member in 0..3 {
            cluster.restart(member).unwrap();
            some_leader("rolling restart", &cluster);
        }
        stop.store(true, Ordering::SeqCst);
    });
    let v = violations.load(Ordering::SeqCst);
    println!(
        "ensemble: {} leadership terms, {v} times two leaders at once",
        terms.load(Ordering::SeqCst)
    );
    assert_eq!(v, 0, "two latches led at once");
    // A latch whose session the faults ended joins again in the background.
    wait_until(
        Duration::from_secs(30),
        || latches[0].participants().is_ok_and(|p| p.len() == sessions),
        || format!("participants: {:?}", latches[0].participants()),
    );
}

mod selector {
    use super::*;
    use latchkey_recipes::{LeaderSelector, Leadership};
    use std::sync::Arc;

    /// Counts leaders at once (only valid terms) and terms per participant.
    #[derive(Default)]
    struct Oracle {
        leading: AtomicUsize,
        violations: AtomicUsize,
        terms: std::sync::Mutex<Vec<usize>>,
    }

    impl Oracle {
        /// Leads in short steps while the term is valid, at most `steps`.
        fn lead(&self, me: usize, l: &Leadership, steps: usize) {
            {
                let mut t = self.terms.lock().unwrap();
                if t.len() <= me {
                    t.resize(me + 1, 0);
                }
                t[me] += 1;
            }
            for _ in 0..steps {
                if !l.is_valid() {
                    return;
                }
                if self.leading.fetch_add(1, Ordering::SeqCst) != 0 {
                    self.violations.fetch_add(1, Ordering::SeqCst);
                }
                thread::sleep(Duration::from_millis(5));
                self.leading.fetch_sub(1, Ordering::SeqCst);
            }
        }

        fn total_terms(&self) -> usize {
            self.terms.lock().unwrap().iter().sum()
        }
    }

    fn selectors(
        cs: &[Client],
        path: &str,
        oracle: &Arc<Oracle>,
        steps: usize,
    ) -> Vec<LeaderSelector> {
        cs.iter()
            .enumerate()
            .map(|(i, c)| {
                let o = Arc::clone(oracle);
                let s =
                    LeaderSelector::new(c, path, &format!("s{i}"), move |l| o.lead(i, l, steps))
                        .unwrap();
                s.auto_requeue();
                s
            })
            .collect()
    }

    #[test]
    fn selectors_take_turns_one_at_a_time_and_requeue() {
        let cs = clients(3, SESSION);
        let path = unique("selector-turns");
        let oracle = Arc::new(Oracle::default());
        let sel = selectors(&cs, &path, &oracle, 20);
        for s in &sel {
            s.start().unwrap();
        }
        wait_until(
            Duration::from_secs(30),
            || {
                oracle
                    .terms
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|&&t| t >= 2)
                    .count()
                    == 3
            },
            || format!("terms {:?}", oracle.terms.lock().unwrap()),
        );
        // Curator's lock nodes hold the ids; every participant is listed
        // (once the one whose term just ended has queued again).
        let mut p = Vec::new();
        wait_until(
            Duration::from_secs(20),
            || {
                p = sel[0].participants().unwrap_or_default();
                p.len() == 3
            },
            || format!("participants: {:?}", sel[0].participants()),
        );
        let mut ids: Vec<String> = p.iter().map(|p| p.id.clone()).collect();
        ids.sort();
        assert_eq!(ids, ["s0", "s1", "s2"]);
        assert!(p[0].is_leader && !p[1].is_leader);
        for c in sorted_children(&cs[0], &path) {
            assert!(c.starts_with("_c_") && c.contains("-lock-"), "{c}");
        }
        drop(sel);
        wait_until(
            Duration::from_secs(10),
            || sorted_children(&cs[0], &path).is_empty(),
            || format!("{:?}", sorted_children(&cs[0], &path)),
        );
        assert_eq!(oracle.violations.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn interrupt_ends_a_term_and_close_releases() {
        let cs = clients(2, SESSION);
        let path = unique("selector-interrupt");
        let (tx, rx) = crossbeam_channel::unbounded();
        let a = LeaderSelector::new(&cs[0], &path, "a", move |l| {
            let _ = tx.send("lead");
            // A timed wait of a valid term lasts its time, and says valid.
            let slept = Instant::now();
            let valid = l.wait(Duration::from_millis(300));
            let waited = slept.elapsed() >= Duration::from_millis(300);
            let _ = tx.send(if valid && waited { "waited" } else { "short" });
            // Lead until told otherwise.
            let valid = l.wait(Duration::MAX);
            let _ = tx.send(if l.is_interrupted() && !valid {
                "interrupted"
            } else {
                "other"
            });
        })
        .unwrap();
        a.start().unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("lead"));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("waited"));
        assert!(a.has_leadership());
        assert_eq!(a.leader().unwrap().id, "a");
        let b = LeaderSelector::new(&cs[1], &path, "b", |_| {}).unwrap();
        b.start().unwrap();
        wait_until(
            Duration::from_secs(10),
            || b.participants().map(|p| p.len() == 2).unwrap_or(false),
            String::new,
        );
        assert!(!b.has_leadership());
        // Leading, or queued: nothing to requeue.
        assert!(!a.requeue().unwrap(), "requeue while leading");
        assert!(!b.requeue().unwrap(), "requeue while queued");
        let t = Instant::now();
        a.interrupt_leadership();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok("interrupted"));
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        // Without auto-requeue, `a` is out until it requeues; `b` led and is done.
        wait_until(
            Duration::from_secs(10),
            || sorted_children(&cs[0], &path).is_empty(),
            || format!("{:?}", sorted_children(&cs[0], &path)),
        );
        // The next node holds a new id; one too large for a node is refused.
        assert_eq!(a.id(), "a");
        assert!(a.set_id(&"x".repeat(2 << 20)).is_err());
        a.set_id("a2").unwrap();
        assert_eq!(a.id(), "a2");
        assert!(a.requeue().unwrap());
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("lead"));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("waited"));
        assert_eq!(a.leader().unwrap().id, "a2");
        a.close();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok("interrupted"));
        wait_until(
            Duration::from_secs(10),
            || sorted_children(&cs[0], &path).is_empty(),
            || format!("{:?}", sorted_children(&cs[0], &path)),
        );
        assert!(a.requeue().is_err());
        assert!(a.start().is_err(), "started twice");
        let never = LeaderSelector::new(&cs[0], &path, "never", |_| {}).unwrap();
        never.close();
        assert!(
            matches!(never.start(), Err(Error::IllegalState(_))),
            "start after close"
        );
        assert!(LeaderSelector::new(&cs[0], "/", "x", |_| {}).is_err());
    }

    /// A client that never joins asks who leads a selector's path
    /// (`leader_of`), and hears of the next leader once the first's term
    /// ends.
    #[test]
    fn leader_of_tells_a_selector_s_leader_to_a_client_that_does_not_take_part() {
        let cs = clients(3, SESSION);
        let path = unique("selector-leader-of");
        let asker = &cs[2];
        let (tx, rx) = crossbeam_channel::unbounded();
        let sel: Vec<LeaderSelector> = (0..2)
            .map(|i| {
                let tx = tx.clone();
                LeaderSelector::new(&cs[i], &path, &format!("s{i}"), move |l| {
                    let _ = tx.send(i);
                    l.wait(Duration::MAX);
                })
                .unwrap()
            })
            .collect();
        sel[0].start().unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(0));
        sel[1].start().unwrap();
        wait_until(
            Duration::from_secs(10),
            || sel[0].participants().is_ok_and(|p| p.len() == 2),
            || format!("participants: {:?}", sel[0].participants()),
        );
        assert_eq!(
            leader_of(asker, &path).unwrap(),
            Some(Participant::new("s0", true))
        );
        sel[0].close();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(1));
        assert_eq!(
            leader_of(asker, &path).unwrap().map(|p| p.id),
            Some("s1".into())
        );
        sel[1].close();
        wait_until(
            Duration::from_secs(10),
            || leader_of(asker, &path).is_ok_and(|l| l.is_none()),
            || format!("{:?}", leader_of(asker, &path)),
        );
    }

    /// Through a proxy of the shared server, a selector leads; the proxy
    /// pauses until the client is `Suspended` and resumes well within the
    /// 12 s session. Returns whether the selector led while suspended,
    /// what the term told (`interrupted` when its wait ended) before the
    /// selector closed, and whether it leads after `Reconnected`.
    fn selector_through_a_short_outage(
        policy: impl latchkey_framework::ConnectionStateErrorPolicy + 'static,
        name: &str,
    ) -> (bool, Vec<(bool, bool)>, bool) {
        let server = shared_server();
        let proxy = latchkey_test::FaultProxy::start(server.addr()).expect("start the proxy");
        let c = start_connected(
            Client::builder()
                .connect_string(proxy.connect_string())
                .session_timeout(Duration::from_secs(12))
                .connection_timeout(Duration::from_secs(5))
                .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 10))
                .connection_state_error_policy(policy),
        );
        let ctx = Ctx::new(server, &c);
        let states = c.listen();
        let (tx, rx) = crossbeam_channel::unbounded();
        let s = LeaderSelector::new(&c, &unique(name), "solo", move |l| {
            let _ = tx.send((false, l.is_valid()));
            l.wait(Duration::MAX);
            let _ = tx.send((true, l.is_interrupted()));
        })
        .unwrap();
        s.start().unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok((false, true)));
        proxy.pause();
        ctx.expect(&states, ConnectionState::Suspended, Duration::from_secs(20));
        thread::sleep(Duration::from_millis(300));
        let led_while_suspended = s.has_leadership();
        proxy.resume();
        ctx.expect(
            &states,
            ConnectionState::Reconnected,
            Duration::from_secs(20),
        );
        thread::sleep(Duration::from_millis(300));
        let leads_after = s.has_leadership();
        let told: Vec<(bool, bool)> = rx.try_iter().collect();
        s.close();
        (led_while_suspended, told, leads_after)
    }

    /// With `SessionConnectionStateErrorPolicy`, a `Suspended` connection
    /// that comes back within the session does not interrupt the term.
    #[test]
    fn with_the_session_policy_a_term_outlives_a_short_outage() {
        let (during, told, after) = selector_through_a_short_outage(
            latchkey_framework::SessionConnectionStateErrorPolicy,
            "selector-session-policy",
        );
        assert!(during, "not leading while suspended; told {told:?}");
        assert!(told.is_empty(), "the term ended: {told:?}");
        assert!(after, "not leading after the reconnection");
    }

    /// With the default, `StandardConnectionStateErrorPolicy`, the same
    /// outage interrupts the term.
    #[test]
    fn with_the_standard_policy_a_short_outage_interrupts_the_term() {
        let (during, told, after) = selector_through_a_short_outage(
            latchkey_framework::StandardConnectionStateErrorPolicy,
            "selector-standard-policy",
        );
        assert!(!during, "led while suspended");
        assert_eq!(told, vec![(true, true)], "the term was not interrupted");
        assert!(!after, "without auto-requeue, no second term");
    }

    #[test]
    fn a_suspended_connection_interrupts_the_term() {
        let mut server = TestingServer::start().unwrap();
        let c = connect(&server.connect_string(), Duration::from_secs(30));
        let ctx = Ctx::new(&server, &c);
        let (tx, rx) = crossbeam_channel::unbounded();
        // The term's standing (interrupted, lost, in doubt) as it begins,
        // and once its wait ends (lost: within 5 s of that).
        let s = LeaderSelector::new(&c, &unique("selector-suspend"), "solo", move |l| {
            let _ = tx.send((l.is_interrupted(), l.is_lost(), l.is_in_doubt()));
            l.wait(Duration::MAX);
            let (interrupted, in_doubt) = (l.is_interrupted(), l.is_in_doubt());
            let ended = Instant::now();
            while !l.is_lost() && ended.elapsed() < Duration::from_secs(5) {
                thread::sleep(Duration::from_millis(20));
            }
            let _ = tx.send((interrupted, l.is_lost(), in_doubt));
        })
        .unwrap();
        s.auto_requeue();
        s.start().unwrap();
        let fresh = (false, false, false);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(fresh));
        server.stop().unwrap();
        // Interrupted and in doubt, not lost: the session may come back.
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(30)),
            Ok((true, false, true)),
            "the term was not interrupted\n{}",
            ctx.dump()
        );
        assert!(!s.has_leadership());
        server.restart().unwrap();
        // Queued again: leads again once reconnected.
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(60)),
            Ok(fresh),
            "{}",
            ctx.dump()
        );
        assert!(s.has_leadership());
        // The session ends on the server: that term is lost.
        c.expire_session_for_testing().unwrap();
        assert!(
            matches!(
                rx.recv_timeout(Duration::from_secs(30)),
                Ok((true, true, _))
            ),
            "the term of an expired session\n{}",
            ctx.dump()
        );
    }

    /// Without auto-requeue, an error queueing (here ZooKeeper refusing
    /// the lock node by ACL) ends the selector's work and is told by
    /// `last_error`; with auto-requeue the selector retries, tells no
    /// error, and leads once the refusal is lifted.
    #[test]
    fn a_queueing_error_stops_the_selector_and_is_told() {
        use latchkey_framework::{Acl, ErrorCode, Perms};
        let c = connect(&shared_server().connect_string(), SESSION);
        let path = unique("selector-refused");
        c.create().for_path(&path, b"").unwrap();
        let closed = Acl::new(Perms::READ | Perms::ADMIN, "world", "anyone");
        c.set_acl(&path, &[closed], None).unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let (tx1, tx2) = (tx.clone(), tx);
        let once = LeaderSelector::new(&c, &path, "once", move |_| {
            let _ = tx1.send("once");
        })
        .unwrap();
        let again = LeaderSelector::new(&c, &path, "again", move |_| {
            let _ = tx2.send("again");
        })
        .unwrap();
        again.auto_requeue();
        assert_eq!(once.last_error(), None, "an error before starting");
        once.start().unwrap();
        again.start().unwrap();
        wait_until(
            Duration::from_secs(10),
            || once.last_error().is_some(),
            || "the refused selector told no error".into(),
        );
        let told = once.last_error().unwrap();
        let refusal = ErrorCode::NoAuth.to_string();
        assert!(
            told.contains(&path) && told.contains(&refusal),
            "the error names neither the path nor the refusal: {told:?}"
        );
        assert_eq!(again.last_error(), None, "an auto-requeued error was told");
        // The auto-requeued selector retries after a pause (1 s), not at
        // once: over 2 s, a few attempts of a few requests each.
        let sent = requests_sent_around(&c, || {}, Duration::from_secs(2));
        assert!(sent <= 30, "a refused selector sent {sent} requests in 2 s");
        // Lift the refusal: the auto-requeued selector leads (within its
        // error pause); the stopped one is queued no more, so it may queue
        // again, and leads too.
        c.set_acl(&path, &Acl::open_unsafe(), None).unwrap();
        assert!(
            once.requeue().unwrap(),
            "a stopped selector was still queued"
        );
        let mut led = std::collections::BTreeSet::new();
        let lifted = Instant::now();
        while led.len() < 2 && lifted.elapsed() < Duration::from_secs(10) {
            if let Ok(who) = rx.recv_timeout(Duration::from_millis(100)) {
                led.insert(who);
            }
        }
        assert_eq!(
            led.into_iter().collect::<Vec<_>>(),
            ["again", "once"],
            "who led within 10 s of the refusal's end"
        );
        assert_eq!(again.last_error(), None);
    }

    /// A `requeue` that returns `Ok(true)` as a term ends leads again.
    /// Before, the selector's thread set `queued` to its auto-requeue
    /// setting after the release's round trip, over a requeue accepted
    /// meanwhile: the second term never came.
    #[test]
    fn a_requeue_accepted_as_a_term_ends_leads_again() {
        const ROUNDS: usize = 20;
        let c = connect(&shared_server().connect_string(), SESSION);
        let path = unique("selector-requeue");
        let (tx, rx) = crossbeam_channel::unbounded();
        let s = LeaderSelector::new(&c, &path, "solo", move |_| {
            let _ = tx.send(());
        })
        .unwrap();
        s.start().unwrap();
        assert!(
            rx.recv_timeout(Duration::from_secs(10)).is_ok(),
            "no first term within 10 s"
        );
        let (mut lost, mut tried) = (Vec::new(), 0);
        for round in 0..ROUNDS {
            tried += 1;
            // The term is ending or over: requeue as soon as it is accepted.
            let deadline = Instant::now() + Duration::from_secs(10);
            while !s.requeue().unwrap() {
                assert!(Instant::now() < deadline, "round {round}: never requeued");
                thread::yield_now();
            }
            // A term on the local server comes within milliseconds.
            if rx.recv_timeout(Duration::from_secs(2)).is_ok() {
                continue;
            }
            lost.push(round);
            if lost.len() == 3 {
                break;
            }
            // Lost: the selector is idle, so this requeue is no race.
            assert!(s.requeue().unwrap(), "round {round}: still queued");
            assert!(
                rx.recv_timeout(Duration::from_secs(10)).is_ok(),
                "round {round}: no term after a requeue of an idle selector"
            );
        }
        assert!(
            lost.is_empty(),
            "{} of {tried} accepted requeues gave no term within 2 s (rounds {lost:?})",
            lost.len()
        );
    }

    /// A `take_leadership` that panics ends its term (the lock goes) and
    /// is told by `last_error`, with its message when it is a string.
    #[test]
    fn a_panicking_leader_is_told_by_last_error() {
        let c = connect(&shared_server().connect_string(), SESSION);
        let path = unique("selector-panic");
        let terms = Arc::new(AtomicUsize::new(0));
        let t = Arc::clone(&terms);
        let s = LeaderSelector::new(&c, &path, "panics", move |_| {
            match t.fetch_add(1, Ordering::SeqCst) {
                0 => panic!("static boom"),
                n => panic!("boom number {n}"),
            }
        })
        .unwrap();
        assert_eq!(s.last_error(), None);
        s.start().unwrap();
        for (term, want) in [(1, "static boom"), (2, "boom number 1")] {
            // Read before requeueing: a requeue starts the next term, whose
            // panic would replace this one's.
            wait_until(
                Duration::from_secs(10),
                || {
                    terms.load(Ordering::SeqCst) == term
                        && s.last_error()
                            .is_some_and(|e| e.contains("panicked") && e.contains(want))
                },
                || {
                    format!(
                        "term {term}: last_error {:?}, wanted the panic {want:?}",
                        s.last_error()
                    )
                },
            );
            wait_until(
                Duration::from_secs(10),
                || s.requeue().is_ok_and(|q| q),
                || format!("term {term}: not requeued: last_error {:?}", s.last_error()),
            );
        }
        wait_until(
            Duration::from_secs(10),
            || terms.load(Ordering::SeqCst) == 3,
            || format!("no third term: {:?}", s.last_error()),
        );
    }

    /// A term tells its lock node and fencing token (the node's czxid),
    /// and its writes through `Leadership::bound_client` and
    /// `Leadership::transaction` fail once it is interrupted (here by an
    /// expired session) instead of being applied. Before, a leader had
    /// only the selector's client: a create after the session expired was
    /// retried into the next session and applied.
    #[test]
    fn a_term_s_bound_writes_fail_once_it_is_interrupted() {
        let server = shared_server();
        let c = connect(&server.connect_string(), SESSION);
        let other = &clients(1, SESSION)[0];
        let ctx = Ctx::new(server, &c);
        let path = unique("selector-fenced");
        let base = unique("/selector-fenced-writes");
        other.create().for_path(&base, b"").unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let (after_tx, after_rx) = crossbeam_channel::unbounded();
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
        let b = base.clone();
        let s = LeaderSelector::new(&c, &path, "fenced", move |l| {
            let during = l
                .transaction()
                .create(&format!("{b}/txn-during"), b"")
                .commit()
                .map(|r| r.len());
            let begun = (
                l.bound_client().clone(),
                l.node_path().to_owned(),
                l.fencing_token(),
                during,
            );
            let _ = tx.send(begun);
            let valid = l.wait(Duration::from_secs(60));
            let after = l
                .transaction()
                .create(&format!("{b}/txn-after"), b"")
                .commit()
                .map(|r| r.len());
            let _ = after_tx.send((valid, l.is_interrupted(), after));
            // The term goes on until told: what fails, fails because it
            // was interrupted, not because it is over.
            let _ = done_rx.recv_timeout(Duration::from_secs(30));
        })
        .unwrap();
        s.start().unwrap();
        let (bound, node, token, during) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("no term within 10 s");
        assert_eq!(during.unwrap(), 2, "the check, then the create");
        assert!(
            node.starts_with(&format!("{path}/")),
            "{node} is not under {path}"
        );
        let stat = other.exists(&node).unwrap().expect("the term's lock node");
        assert_eq!(stat.czxid, token, "the fencing token is the node's czxid");
        bound
            .create()
            .for_path(&format!("{base}/during"), b"")
            .unwrap();

        c.expire_session_for_testing().unwrap();
        let (valid, interrupted, txn_after) = after_rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("the term was not interrupted\n{}", ctx.dump()));
        assert!(!valid && interrupted);
        assert!(!s.has_leadership());
        let after = bound.create().for_path(&format!("{base}/after"), b"");
        // Once the client has its new session, calls through it go on, but
        // not those bound to the old term.
        wait_until(
            Duration::from_secs(30),
            || c.exists(&base).is_ok(),
            || format!("no new session\n{}", ctx.dump()),
        );
        let late = bound.create().for_path(&format!("{base}/late"), b"");
        for (what, result) in [
            ("bound create", after.map(|_| 0)),
            ("transaction", txn_after),
            ("bound create in the new session", late.map(|_| 0)),
        ] {
            assert!(
                matches!(result, Err(Error::Cancelled)),
                "{what} after the interruption: {result:?}"
            );
        }
        let _ = done_tx.send(());
        assert_eq!(
            sorted_children(other, &base),
            ["during", "txn-during"],
            "only the writes made during the term were applied"
        );
    }

    /// A listener of the client that blocks (here for 3 s on `Suspended`)
    /// holds up the client's listener thread, and with it the listener
    /// that interrupts the term. A leader whose `wait` has returned false
    /// must find its term interrupted at once all the same, and its bound
    /// calls refused: the term is over the moment the leader is told so.
    #[test]
    fn a_term_whose_wait_ended_is_interrupted_though_a_listener_blocks() {
        let server = shared_server();
        let proxy = latchkey_test::FaultProxy::start(server.addr()).expect("start the proxy");
        // Silence after 1.33 s: the connection is suspended soon.
        let c = connect(&proxy.connect_string(), Duration::from_secs(2));
        let ctx = Ctx::new(server, &c);
        let _blocking = c.add_listener(|state| {
            if state == ConnectionState::Suspended {
                thread::sleep(Duration::from_secs(3));
            }
        });
        let path = unique("selector-blocked-listener");
        let (started_tx, started_rx) = crossbeam_channel::bounded(1);
        let (ended_tx, ended_rx) = crossbeam_channel::bounded(1);
        let (bound_tx, bound_rx) = crossbeam_channel::bounded(1);
        let s = LeaderSelector::new(&c, &path, "blocked", move |l| {
            let _ = started_tx.send(());
            let valid = l.wait(Duration::from_secs(30));
            let _ = ended_tx.send((valid, l.is_interrupted()));
            let bound = l.bound_client().exists("/").map(drop);
            let _ = bound_tx.send(bound);
        })
        .unwrap();
        s.start().unwrap();
        started_rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no term within 10 s\n{}", ctx.dump()));
        proxy.pause();
        let (valid, interrupted) = ended_rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("the wait did not end\n{}", ctx.dump()));
        assert!(!valid);
        assert!(
            interrupted,
            "the wait ended, the term was not interrupted\n{}",
            ctx.dump()
        );
        let bound = bound_rx
            .recv_timeout(Duration::from_secs(2))
            .unwrap_or_else(|_| panic!("the bound call did not return\n{}", ctx.dump()));
        assert!(
            matches!(bound, Err(Error::Cancelled)),
            "a bound call after the term ended: {bound:?}"
        );
        proxy.resume();
    }

    /// The case: a leader's create, sent while the term was
    /// valid, waits out an outage (its requests held at a proxy); the
    /// connection is suspended, which interrupts the term. Through the
    /// term's bound handle the create returns `Cancelled` at once and is
    /// never applied, also once the client reconnects in the same session.
    /// Before (the selector's client, what a leader had), the create went
    /// on waiting through the interruption and was retried after the
    /// reconnection.
    #[test]
    fn a_bound_create_waiting_out_an_outage_fails_when_the_term_is_interrupted() {
        let server = shared_server();
        let proxy = latchkey_test::FaultProxy::start(server.addr()).expect("start the proxy");
        let c = connect(&proxy.connect_string(), SESSION);
        let other = &clients(1, SESSION)[0];
        let ctx = Ctx::new(server, &c);
        let path = unique("selector-outage");
        let base = unique("/selector-outage-writes");
        other.create().for_path(&base, b"").unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let (ended_tx, ended_rx) = crossbeam_channel::unbounded();
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
        let s = LeaderSelector::new(&c, &path, "outage", move |l| {
            let _ = tx.send(l.bound_client().clone());
            // The wait ends once the state is an error state, which
            // interrupts the term.
            l.wait(Duration::from_secs(60));
            let _ = ended_tx.send((Instant::now(), l.is_interrupted()));
            let _ = done_rx.recv_timeout(Duration::from_secs(60));
        })
        .unwrap();
        s.start().unwrap();
        let bound = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("no term within 10 s");
        let target = format!("{base}/in-flight");
        proxy.pause_requests_at(&request_path(&target));
        let (result_tx, result_rx) = crossbeam_channel::bounded(1);
        let t = target.clone();
        thread::spawn(move || {
            let result = bound.create().for_path(&t, b"");
            let _ = result_tx.send((Instant::now(), result));
        });
        wait_until(
            Duration::from_secs(10),
            || proxy.requests_paused(),
            || format!("the create did not reach the proxy\n{}", ctx.dump()),
        );
        // No reply, no ping: the connection is suspended, the term ends.
        let (ended, interrupted) = ended_rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("the term was not interrupted\n{}", ctx.dump()));
        assert!(interrupted);
        let (returned, result) = result_rx
            .recv_timeout(Duration::from_secs(2))
            .unwrap_or_else(|_| {
                panic!(
                    "the create did not return within 2 s of the interruption\n{}",
                    ctx.dump()
                )
            });
        println!(
            "the create returned {:?} after the interruption",
            returned.saturating_duration_since(ended)
        );
        assert!(
            matches!(result, Err(Error::Cancelled)),
            "the create in flight: {result:?}"
        );
        // The held request is dropped with its connection; the client
        // reconnects (same session) and its calls go through again.
        proxy.cut();
        proxy.resume();
        wait_until(
            Duration::from_secs(30),
            || c.exists(&base).is_ok(),
            || format!("no reconnection\n{}", ctx.dump()),
        );
        let _ = done_tx.send(());
        assert_eq!(
            other.exists(&target).unwrap(),
            None,
            "the create of the interrupted term was applied\n{}",
            ctx.dump()
        );
    }

    /// `Leadership::transaction` is applied only while the term's lock
    /// node exists: once it is gone (here deleted by someone else, which
    /// does not end the term), the transaction fails on its check
    /// (operation 0, `NoNode`) and its create is not applied, where a
    /// plain create through the bound handle still is.
    #[test]
    fn a_term_s_transaction_is_not_applied_once_its_lock_node_is_gone() {
        use latchkey_framework::ErrorCode;
        let c = connect(&shared_server().connect_string(), SESSION);
        let other = &clients(1, SESSION)[0];
        let path = unique("selector-txn");
        let base = unique("/selector-txn-writes");
        other.create().for_path(&base, b"").unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
        let (result_tx, result_rx) = crossbeam_channel::unbounded();
        let b = base.clone();
        let s = LeaderSelector::new(&c, &path, "txn", move |l| {
            let _ = tx.send(l.node_path().to_owned());
            if go_rx.recv_timeout(Duration::from_secs(30)).is_err() {
                return;
            }
            let txn = l
                .transaction()
                .create(&format!("{b}/txn"), b"")
                .commit()
                .map(|r| r.len());
            let plain = l
                .bound_client()
                .create()
                .for_path(&format!("{b}/plain"), b"")
                .map(|_| ());
            let _ = result_tx.send((txn, plain, l.is_valid()));
        })
        .unwrap();
        s.start().unwrap();
        let node = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("no term within 10 s");
        other.delete().for_path(&node).unwrap();
        go_tx.send(()).unwrap();
        let (txn, plain, valid) = result_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the writes did not return within 10 s");
        assert!(valid, "the term is not ended by the delete");
        let err = txn.expect_err("the transaction without its lock node");
        assert!(err.is(ErrorCode::NoNode), "{err:?}");
        plain.unwrap();
        assert_eq!(sorted_children(other, &base), ["plain"]);
    }

    #[test]
    fn never_two_selector_leaders_through_leader_kills() {
        let mut cluster = TestingCluster::start(3).unwrap();
        let path = unique("selector-ensemble");
        let cs: Vec<Client> = (0..4)
            .map(|_| {
                start_connected(
                    Client::builder()
                        .connect_string(cluster.connect_string())
                        .session_timeout(Duration::from_secs(6))
                        .connection_timeout(Duration::from_secs(3))
                        .retry_policy(ExponentialBackoffRetry::with_max_sleep(
                            Duration::from_millis(50),
                            29,
                            Duration::from_millis(500),
                        )),
                )
            })
            .collect();
        let oracle = Arc::new(Oracle::default());
        let sel = selectors(&cs, &path, &oracle, 40);
        for s in &sel {
            s.start().unwrap();
        }
        let progress = |what: &str, c: &TestingCluster| {
            let before = oracle.total_terms();
            let t = Instant::now();
            wait_until(
                Duration::from_secs(60),
                || oracle.total_terms() >= before + 2,
                || {
                    format!(
                        "no new term after {what}\n{}",
                        (0..3)
                            .map(|i| c.log_tail(i, 10))
                            .collect::<Vec<_>>()
                            .join("\n")
                    )
                },
            );
            println!("{what}: new terms after {:?}", t.elapsed());
        };
        progress("start", &cluster);
        for _ in 0..2 {
            let zk_leader = cluster.leader().expect("an ensemble leader");
            cluster.kill(zk_leader).unwrap();
            progress("leader kill", &cluster);
            cluster.restart(zk_leader).unwrap();
            progress("leader restart", &cluster);
        }
        drop(sel);
        let v = oracle.violations.load(Ordering::SeqCst);
        println!(
            "selector ensemble: {} terms, {v} overlaps",
            oracle.total_terms()
        );
        assert_eq!(v, 0, "two selectors led at once");
    }
}

/// A latch whose node is deleted by someone else queues again with a new
/// node, and leads again when it is alone.
#[test]
fn a_latch_whose_node_is_deleted_queues_again() {
    let cs = clients(2, SESSION);
    let path = unique("latch-node-deleted");
    let latch = LeaderLatch::new(&cs[0], &path).unwrap();
    latch.start().unwrap();
    assert!(latch.await_leadership(Duration::from_secs(10)).unwrap());
    let first = latch.our_path().expect("a node while leading");
    cs[1].delete().for_path(&first).unwrap();
    wait_until(
        Duration::from_secs(10),
        || latch.has_leadership() && latch.our_path().is_some_and(|p| p != first),
        || {
            format!(
                "after its node {first} went: leads {}, node {:?}, nodes {:?}",
                latch.has_leadership(),
                latch.our_path(),
                sorted_children(&cs[1], &path)
            )
        },
    );
    assert_eq!(sorted_children(&cs[1], &path).len(), 1);
    latch.close().unwrap();
}

/// `last_path_is_leader` (Curator's `getLastPathIsLeader`) is `None` until
/// a latch first leads, then the path of the node it leads with, the one
/// ZooKeeper lists first under the latch's path; it stays after the latch
/// closes, and each latch tells its own node.
#[test]
fn last_path_is_leader_names_the_node_each_latch_led_with() {
    let cs = clients(2, SESSION);
    let path = unique("latch-last-path");
    let a = LeaderLatch::with_id(&cs[0], &path, "a").unwrap();
    let b = LeaderLatch::with_id(&cs[1], &path, "b").unwrap();
    assert_eq!(a.last_path_is_leader(), None, "never started");
    a.start().unwrap();
    assert!(a.await_leadership(Duration::from_secs(10)).unwrap());
    b.start().unwrap();
    wait_until(
        Duration::from_secs(10),
        || b.our_path().is_some(),
        || format!("b's node: nodes {:?}", sorted_children(&cs[1], &path)),
    );
    let nodes = sorted_children(&cs[1], &path);
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    let a_led = a.last_path_is_leader().expect("a leads");
    assert_eq!(Some(&a_led), a.our_path().as_ref());
    assert!(
        nodes.iter().any(|n| format!("{path}/{n}") == a_led)
            && a_led.contains(latchkey_recipes::LATCH_NAME),
        "{a_led} among {nodes:?}"
    );
    assert_eq!(a.leader().unwrap().id, "a");
    assert!(!b.has_leadership());
    assert_eq!(b.last_path_is_leader(), None, "b queues behind a");

    a.close().unwrap();
    assert!(b.await_leadership(NEW_LEADER_WITHIN).unwrap());
    let b_led = b.last_path_is_leader().expect("b leads");
    let nodes = sorted_children(&cs[1], &path);
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert_eq!(b_led, format!("{path}/{}", nodes[0]));
    assert_eq!(Some(&b_led), b.our_path().as_ref());
    assert_ne!(a_led, b_led);
    // a closed: it still names the node it led with, now gone.
    assert_eq!(a.last_path_is_leader(), Some(a_led.clone()));
    assert_eq!(a.our_path(), None);
    assert!(cs[1].exists(&a_led).unwrap().is_none());
    b.close().unwrap();
    assert_eq!(b.last_path_is_leader(), Some(b_led));
}

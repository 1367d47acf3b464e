//! Reliability under faults: an ensemble losing its leader, rolling
//! restarts, silent partitions, lost replies, blips, a server down past the
//! session timeout, and misuse. Every scenario counts holders with an
//! independent oracle and prints its figures (on stderr, uncaptured).
//!
//! Soak mode: `LATCHKEY_SOAK_SECS=600 cargo test -p latchkey-test --test faults -- --ignored soak`.

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::{Client, ConnectionState, CreateMode, Error, ExponentialBackoffRetry};
use latchkey_recipes::{InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2};
use latchkey_test::{FaultProxy, TestingCluster, TestingServer};

/// Figures of one scenario.
#[derive(Default)]
struct Figures {
    cycles: AtomicU64,
    /// Cycles per contender, to see that every session makes progress.
    per_session: Mutex<Vec<u64>>,
    /// Scenario-specific figures, appended to the report as they are.
    extra: Mutex<String>,
    faults: AtomicU64,
    violations: AtomicU64,
    longest_stall_ms: AtomicU64,
}

impl Figures {
    fn count_for(&self, session: usize) {
        let mut per = self.per_session.lock().unwrap();
        if per.len() <= session {
            per.resize(session + 1, 0);
        }
        per[session] += 1;
    }

    fn session_cycles(&self, sessions: usize) -> Vec<u64> {
        let mut per = self.per_session.lock().unwrap().clone();
        per.resize(sessions, 0);
        per
    }

    fn report(&self, scenario: &str, orphans: usize) {
        let per = self.per_session.lock().unwrap().clone();
        let per = match per.iter().min() {
            Some(min) => format!(" fewest_cycles_of_a_session={min}"),
            None => String::new(),
        };
        let line = format!(
            "RELIABILITY {scenario}: cycles={} faults={} violations={} orphaned_nodes={} longest_stall_ms={}{per}{}\n",
            self.cycles.load(Ordering::SeqCst),
            self.faults.load(Ordering::SeqCst),
            self.violations.load(Ordering::SeqCst),
            orphans,
            self.longest_stall_ms.load(Ordering::SeqCst),
            self.extra.lock().unwrap(),
        );
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
}

/// Holders now inside the critical section, by kind.
#[derive(Default)]
struct Oracle {
    exclusive: AtomicUsize,
    shared: AtomicUsize,
}

fn fault_client(connect_string: &str, session: Duration) -> Client {
    start_connected(
        Client::builder()
            .connect_string(connect_string)
            .session_timeout(session)
            .connection_timeout(Duration::from_secs(3))
            .retry_policy(ExponentialBackoffRetry::with_max_sleep(
                Duration::from_millis(50),
                29,
                Duration::from_millis(500),
            )),
    )
}

/// Work is done only while the client is connected and the lock not lost:
/// Curator's rule that a suspended holder must treat its lock as in doubt.
fn may_work(c: &Client) -> bool {
    c.state().is_some_and(ConnectionState::is_connected)
}

#[derive(Clone, Copy)]
enum Kind {
    Mutex,
    ReadWrite,
    Semaphore(u32),
}

/// One contender's loop; returns when `stop` is set.
fn contend(
    c: &Client,
    path: &str,
    kind: Kind,
    me: usize,
    oracle: &Oracle,
    figs: &Figures,
    stop: &AtomicBool,
) {
    let mutex = InterProcessMutex::new(c, path).unwrap();
    let rw = InterProcessReadWriteLock::new(c, path).unwrap();
    let sem = match kind {
        Kind::Semaphore(max) => Some(InterProcessSemaphoreV2::new(c, path, max).unwrap()),
        _ => None,
    };
    let mut last_progress = Instant::now();
    let mut round = 0usize;
    while !stop.load(Ordering::SeqCst) {
        round += 1;
        let step = Duration::from_millis(500);
        let worked = match kind {
            Kind::Mutex => match mutex.try_lock_for(step) {
                Ok(Some(g)) => {
                    exclusive_section(c, oracle, figs, || g.is_lost());
                    true
                }
                _ => false,
            },
            Kind::ReadWrite if (me + round).is_multiple_of(4) => {
                match rw.write_lock().try_lock_for(step) {
                    Ok(Some(g)) => {
                        exclusive_section(c, oracle, figs, || g.is_lost());
                        true
                    }
                    _ => false,
                }
            }
            Kind::ReadWrite => match rw.read_lock().try_lock_for(step) {
                Ok(Some(g)) => {
                    if may_work(c) && !g.is_lost() {
                        oracle.shared.fetch_add(1, Ordering::SeqCst);
                        if oracle.exclusive.load(Ordering::SeqCst) != 0 {
                            figs.violations.fetch_add(1, Ordering::SeqCst);
                        }
                        thread::sleep(Duration::from_millis(3));
                        oracle.shared.fetch_sub(1, Ordering::SeqCst);
                    }
                    true
                }
                _ => false,
            },
            Kind::Semaphore(max) => match sem.as_ref().unwrap().acquire_timeout(step) {
                Ok(Some(lease)) => {
                    if may_work(c) && !lease.is_lost() {
                        let n = oracle.shared.fetch_add(1, Ordering::SeqCst) + 1;
                        if n > max as usize {
                            figs.violations.fetch_add(1, Ordering::SeqCst);
                        }
                        thread::sleep(Duration::from_millis(3));
                        oracle.shared.fetch_sub(1, Ordering::SeqCst);
                    }
                    true
                }
                _ => false,
            },
        };
        if worked {
            figs.cycles.fetch_add(1, Ordering::SeqCst);
            figs.count_for(me);
            let stall = last_progress.elapsed().as_millis() as u64;
            figs.longest_stall_ms.fetch_max(stall, Ordering::SeqCst);
            last_progress = Instant::now();
        }
    }
}

fn exclusive_section(c: &Client, oracle: &Oracle, figs: &Figures, lost: impl Fn() -> bool) {
    if !may_work(c) || lost() {
        return;
    }
    let before = oracle.exclusive.fetch_add(1, Ordering::SeqCst);
    if before != 0 || oracle.shared.load(Ordering::SeqCst) != 0 {
        figs.violations.fetch_add(1, Ordering::SeqCst);
    }
    thread::sleep(Duration::from_millis(2));
    oracle.exclusive.fetch_sub(1, Ordering::SeqCst);
}

/// How long a scenario waits for every contender to get in again after a
/// fault: several times the longest stall ever recorded (about 4 s, see
/// docs/RELIABILITY.md), short enough that a lock that lets nobody in fails
/// the test within seconds.
const RECOVERY_BOUND: Duration = Duration::from_secs(20);

/// Waits until every one of `sessions` contenders has made at least one
/// more cycle: a recovery counts only if nobody is left stuck. Fails at
/// once if the oracle has seen overlapping holders.
fn wait_progress(
    figs: &Figures,
    sessions: usize,
    within: Duration,
    what: &str,
    dump: impl Fn() -> String,
) {
    let from = figs.session_cycles(sessions);
    wait_until(
        within,
        || {
            let violations = figs.violations.load(Ordering::SeqCst);
            assert_eq!(
                violations, 0,
                "overlapping holders while waiting for progress after {what}"
            );
            let now = figs.session_cycles(sessions);
            now.iter().zip(&from).all(|(n, f)| n > f)
        },
        || {
            format!(
                "not every session progressed after {what}: before {from:?}, now {:?}\n{}",
                figs.session_cycles(sessions),
                dump()
            )
        },
    );
}

fn ensemble_scenario(kind: Kind, name: &str, leader_kills: usize, soak: Option<Duration>) {
    let mut cluster = TestingCluster::start(3).unwrap();
    let path = unique(name);
    let session = Duration::from_secs(6);
    let sessions = 8;
    let clients: Vec<Client> = (0..sessions)
        .map(|_| fault_client(&cluster.connect_string(), session))
        .collect();
    let oracle = Oracle::default();
    let figs = Figures::default();
    let stop = AtomicBool::new(false);
    let dump = |c: &TestingCluster| {
        (0..3)
            .map(|i| format!("member {i}:\n{}", c.log_tail(i, 15)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        for (i, c) in clients.iter().enumerate() {
            let (path, oracle, figs, stop) = (&path, &oracle, &figs, &stop);
            s.spawn(move || contend(c, path, kind, i, oracle, figs, stop));
        }
        let within = RECOVERY_BOUND;
        wait_progress(&figs, sessions, within, "start", || dump(&cluster));
        let until = soak.map(|d| Instant::now() + d);
        let mut kills = 0;
        while kills < leader_kills || until.is_some_and(|u| Instant::now() < u) {
            let leader = cluster.leader().expect("a leader");
            cluster.kill(leader).unwrap();
            figs.faults.fetch_add(1, Ordering::SeqCst);
            wait_progress(&figs, sessions, within, "leader kill", || dump(&cluster));
            cluster.restart(leader).unwrap();
            wait_progress(&figs, sessions, within, "leader restart", || dump(&cluster));
            kills += 1;
        }
        for member in 0..3 {
            cluster.restart(member).unwrap();
            figs.faults.fetch_add(1, Ordering::SeqCst);
            wait_progress(&figs, sessions, within, "rolling restart", || {
                dump(&cluster)
            });
        }
        stop.store(true, Ordering::SeqCst);
    });
    clients.iter().for_each(Client::close);
    let observer = fault_client(&cluster.connect_string(), session);
    let mut orphans = 0;
    wait_until(
        Duration::from_secs(30),
        || {
            orphans = count_nodes(&observer, &path);
            orphans == 0
        },
        || format!("orphaned lock nodes remain under {path}"),
    );
    figs.report(name, orphans);
    observer.close();
    assert_eq!(
        figs.violations.load(Ordering::SeqCst),
        0,
        "overlapping holders"
    );
}

/// Ephemeral lock nodes left anywhere under `path`.
fn count_nodes(c: &Client, path: &str) -> usize {
    let Ok(children) = c.get_children(path) else {
        return 0;
    };
    children
        .iter()
        .map(|child| {
            let p = format!("{path}/{child}");
            match c.exists(&p) {
                Ok(Some(st)) if st.ephemeral_owner != 0 && st.ephemeral_owner != i64::MIN => 1,
                _ => count_nodes(c, &p),
            }
        })
        .sum()
}

#[test]
fn ensemble_mutex_survives_leader_kills_and_a_rolling_restart() {
    ensemble_scenario(Kind::Mutex, "ensemble-mutex", 3, None);
}

#[test]
fn ensemble_read_write_lock_survives_leader_kills() {
    ensemble_scenario(Kind::ReadWrite, "ensemble-rw", 2, None);
}

#[test]
fn ensemble_semaphore_survives_leader_kills() {
    ensemble_scenario(Kind::Semaphore(3), "ensemble-sem", 2, None);
}

#[test]
#[ignore = "soak: run with LATCHKEY_SOAK_SECS and --ignored"]
fn soak() {
    let secs = std::env::var("LATCHKEY_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    ensemble_scenario(
        Kind::Mutex,
        "soak-mutex",
        0,
        Some(Duration::from_secs(secs)),
    );
}

#[test]
fn a_partitioned_holder_learns_it_lost_the_lock_before_anyone_else_takes_it() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let session = Duration::from_secs(3);
    let holder_client = fault_client(&proxy.connect_string(), session);
    let other = fault_client(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &holder_client);
    let path = unique("partition");
    let holder = InterProcessMutex::new(&holder_client, &path).unwrap();
    let figs = Figures::default();
    let lost_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let suspended_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let (l, s) = (Arc::clone(&lost_at), Arc::clone(&suspended_at));
    let _h = holder_client.add_listener(move |st| {
        let slot = match st {
            ConnectionState::Lost => &l,
            ConnectionState::Suspended => &s,
            _ => return,
        };
        slot.lock().unwrap().get_or_insert(Instant::now());
    });
    let g = holder.lock().unwrap();
    let silent_since = Instant::now();
    proxy.pause();
    figs.faults.fetch_add(1, Ordering::SeqCst);
    let contender = InterProcessMutex::new(&other, &path).unwrap();
    assert!(
        // The holder's session ends within about 3 s; a contender that is
        // not woken by then fails the test within 15 s.
        contender.acquire_timeout(Duration::from_secs(15)).unwrap(),
        "{}",
        ctx.dump()
    );
    let other_got_it = Instant::now();
    figs.cycles.fetch_add(1, Ordering::SeqCst);
    let lost = lost_at
        .lock()
        .unwrap()
        .expect("holder never told it lost the lock");
    let suspended = suspended_at
        .lock()
        .unwrap()
        .expect("holder never suspended");
    assert!(
        lost <= other_got_it,
        "another session got the lock before the holder knew\n{}",
        ctx.dump()
    );
    assert!(suspended - silent_since <= session * 2 / 3 + Duration::from_millis(1500));
    assert!(lost - silent_since <= session + Duration::from_millis(1500));
    *figs.extra.lock().unwrap() = format!(
        " suspended_after_ms={} lost_after_ms={} lost_ms_before_another_holder={}",
        (suspended - silent_since).as_millis(),
        (lost - silent_since).as_millis(),
        (other_got_it - lost).as_millis()
    );
    assert!(g.is_lost());
    figs.longest_stall_ms.store(
        (other_got_it - silent_since).as_millis() as u64,
        Ordering::SeqCst,
    );
    contender.release().unwrap();
    // After healing, the old holder recovers without a restart.
    proxy.resume();
    drop(g);
    wait_until(
        Duration::from_secs(20),
        || may_work(&holder_client),
        || ctx.dump(),
    );
    let g = holder
        .try_lock_for(Duration::from_secs(20))
        .unwrap()
        .expect("lock again after healing");
    drop(g);
    figs.report("silent-partition", count_nodes(&other, &path));
    holder_client.close();
    other.close();
}

/// Lock-node creates reach the server but their replies are lost with a
/// cut connection: protected mode must find each contender's node instead
/// of making a second, and the queue must still drain.
#[test]
fn lost_create_replies_leave_exactly_one_node_per_contender() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let contenders = 3;
    let clients: Vec<Client> = (0..contenders)
        .map(|_| fault_client(&proxy.connect_string(), Duration::from_secs(6)))
        .collect();
    let observer = fault_client(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &clients[0]);
    let path = unique("lost-reply");
    observer.ensure_path(&path).unwrap();
    let oracle = Oracle::default();
    let figs = Figures::default();
    let most_nodes = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    proxy.pause_replies();
    thread::scope(|s| {
        for c in &clients {
            let (path, oracle, figs, done) = (&path, &oracle, &figs, &done);
            s.spawn(move || {
                let m = InterProcessMutex::new(c, path).unwrap();
                let g = m.try_lock_for(RECOVERY_BOUND).unwrap();
                let g = g.expect("a contender never got the lock");
                exclusive_section(c, oracle, figs, || g.is_lost());
                figs.cycles.fetch_add(1, Ordering::SeqCst);
                drop(g);
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        // Every create has reached the server; now lose the replies.
        wait_until(
            Duration::from_secs(10),
            || observer.get_children(&path).unwrap().len() == contenders,
            || ctx.dump(),
        );
        proxy.cut();
        proxy.resume();
        figs.faults.fetch_add(1, Ordering::SeqCst);
        let started = Instant::now();
        while done.load(Ordering::SeqCst) < contenders && started.elapsed() < RECOVERY_BOUND {
            let n = observer.get_children(&path).unwrap().len();
            most_nodes.fetch_max(n, Ordering::SeqCst);
            thread::sleep(Duration::from_millis(10));
        }
        figs.longest_stall_ms
            .store(started.elapsed().as_millis() as u64, Ordering::SeqCst);
    });
    assert_eq!(done.load(Ordering::SeqCst), contenders, "{}", ctx.dump());
    assert!(
        most_nodes.load(Ordering::SeqCst) <= contenders,
        "a contender made a second node\n{}",
        ctx.dump()
    );
    assert_eq!(
        figs.violations.load(Ordering::SeqCst),
        0,
        "overlapping holders"
    );
    let mut orphans = 0;
    wait_until(
        Duration::from_secs(10),
        || {
            orphans = count_nodes(&observer, &path);
            orphans == 0
        },
        || ctx.dump(),
    );
    figs.report("lost-create-reply", orphans);
    clients.iter().for_each(Client::close);
    observer.close();
}

#[test]
fn short_blips_do_not_hang_waiters_or_break_the_queue() {
    let server = shared_server();
    let path = unique("blips");
    let holder_client = fault_client(&server.connect_string(), Duration::from_secs(10));
    let holder = InterProcessMutex::new(&holder_client, &path).unwrap();
    holder.acquire().unwrap();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let waiters: Vec<Client> = (0..4)
        .map(|_| fault_client(&proxy.connect_string(), Duration::from_secs(10)))
        .collect();
    let order = Arc::new(Mutex::new(Vec::new()));
    let figs = Figures::default();
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let handles: Vec<_> = waiters
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (c, path, order) = (c.clone(), path.clone(), Arc::clone(&order));
            let done = done_tx.clone();
            let h = thread::spawn(move || {
                let m = InterProcessMutex::new(&c, &path).unwrap();
                let got = m.acquire_timeout(Duration::from_secs(60)).unwrap();
                if got {
                    order.lock().unwrap().push(i);
                    m.release().unwrap();
                }
                let _ = done.send(());
                got
            });
            wait_until(
                Duration::from_secs(10),
                || holder.participant_nodes().unwrap().len() == i + 2,
                String::new,
            );
            h
        })
        .collect();
    for _ in 0..3 {
        proxy.cut();
        figs.faults.fetch_add(1, Ordering::SeqCst);
        wait_until(
            Duration::from_secs(20),
            || waiters.iter().all(may_work),
            || {
                format!(
                    "{:?}",
                    waiters
                        .iter()
                        .map(Client::state_history)
                        .collect::<Vec<_>>()
                )
            },
        );
    }
    let released = Instant::now();
    holder.release().unwrap();
    // Every waiter gets in soon after the release; one that does not fails
    // the test now rather than at its 60 s timeout.
    for _ in 0..handles.len() {
        let left = RECOVERY_BOUND.saturating_sub(released.elapsed());
        assert!(
            done_rx.recv_timeout(left).is_ok(),
            "a waiter hung: not every waiter got the lock within {RECOVERY_BOUND:?} of the release, \
             order so far {:?}",
            order.lock().unwrap()
        );
    }
    for h in handles {
        assert!(h.join().unwrap(), "a waiter hung");
        figs.cycles.fetch_add(1, Ordering::SeqCst);
    }
    figs.longest_stall_ms
        .store(released.elapsed().as_millis() as u64, Ordering::SeqCst);
    assert_eq!(
        *order.lock().unwrap(),
        vec![0, 1, 2, 3],
        "queue order changed"
    );
    figs.report("blips", count_nodes(&holder_client, &path));
    waiters.iter().for_each(Client::close);
    holder_client.close();
}

#[test]
fn a_server_down_past_the_session_timeout_means_lost_then_locks_work_again() {
    let mut server = TestingServer::start().unwrap();
    let session = Duration::from_secs(2);
    let clients: Vec<Client> = (0..3)
        .map(|_| fault_client(&server.connect_string(), session))
        .collect();
    let states: Vec<_> = clients.iter().map(Client::listen).collect();
    let path = unique("server-down");
    let m = InterProcessMutex::new(&clients[0], &path).unwrap();
    let g = m.lock().unwrap();
    let figs = Figures::default();
    let old_sessions: Vec<i64> = clients.iter().map(Client::session_id).collect();
    server.stop().unwrap();
    figs.faults.fetch_add(1, Ordering::SeqCst);
    for (c, st) in clients.iter().zip(&states) {
        Ctx::new(&server, c).expect(st, ConnectionState::Lost, Duration::from_secs(15));
    }
    assert!(g.is_lost());
    // Releasing a lost lock has nothing to delete: it must not wait on the
    // dead server through the retry policy.
    let releasing = Instant::now();
    drop(g);
    assert!(
        releasing.elapsed() < Duration::from_secs(3),
        "{:?}",
        releasing.elapsed()
    );
    server.restart().unwrap();
    let restarted = Instant::now();
    for (c, st) in clients.iter().zip(&states) {
        Ctx::new(&server, c).expect(st, ConnectionState::Reconnected, Duration::from_secs(30));
    }
    for (c, old) in clients.iter().zip(&old_sessions) {
        assert_ne!(c.session_id(), *old, "a new session after Lost");
    }
    for c in &clients {
        let m = InterProcessMutex::new(c, &path).unwrap();
        let g = m.try_lock_for(Duration::from_secs(30)).unwrap();
        assert!(g.is_some(), "{}", Ctx::new(&server, c).dump());
        figs.cycles.fetch_add(1, Ordering::SeqCst);
    }
    // From the restart until every client has locked again.
    figs.longest_stall_ms
        .store(restarted.elapsed().as_millis() as u64, Ordering::SeqCst);
    figs.report("server-down", count_nodes(&clients[0], &path));
    clients.iter().for_each(Client::close);
}

#[test]
fn misuse_gets_clear_errors_and_leaves_nothing_behind() {
    let server = shared_server();
    let c = fault_client(&server.connect_string(), Duration::from_secs(10));
    let figs = Figures::default();
    // Each misuse is one "fault"; its error must name what was wrong.
    let case = |result: Result<(), Error>, want: &str| {
        let err = result.expect_err(want);
        assert!(err.to_string().contains(want), "{err} lacks {want:?}");
        figs.faults.fetch_add(1, Ordering::SeqCst);
    };
    for bad in ["", "relative", "/trailing/", "/a//b", "/"] {
        case(InterProcessMutex::new(&c, bad).map(drop), bad);
        case(InterProcessSemaphoreV2::new(&c, bad, 1).map(drop), bad);
    }
    // A lock path under an ephemeral node.
    let eph = c
        .create()
        .mode(CreateMode::Ephemeral)
        .for_path(&unique("eph"), b"")
        .unwrap();
    let m = InterProcessMutex::new(&c, &format!("{eph}/lock")).unwrap();
    let err = m.acquire_timeout(Duration::from_secs(5)).unwrap_err();
    assert!(
        err.is(latchkey_framework::ErrorCode::NoChildrenForEphemerals),
        "{err}"
    );
    figs.faults.fetch_add(1, Ordering::SeqCst);
    assert!(c.get_children(&eph).unwrap().is_empty());
    // Release without holding, and twice.
    let path = unique("misuse");
    let m = InterProcessMutex::new(&c, &path).unwrap();
    case(m.release(), "does not hold");
    m.acquire().unwrap();
    m.release().unwrap();
    case(m.release(), "does not hold");
    // Zero leases, or more than the maximum, asked of a semaphore.
    case(
        InterProcessSemaphoreV2::new(&c, &path, 0).map(drop),
        "max_leases",
    );
    let sem = InterProcessSemaphoreV2::new(&c, &path, 2).unwrap();
    case(sem.acquire_many(0).map(drop), "zero leases");
    case(sem.acquire_many(3).map(drop), "only 2");
    case(
        sem.acquire_many_timeout(3, Duration::from_secs(1))
            .map(drop),
        "only 2",
    );
    assert_eq!(count_nodes(&c, &path), 0, "a refused request left a node");
    // A lock path deleted (with its nodes) while a waiter waits: the waiter
    // queues again instead of hanging, and gets the lock.
    let holder_client = fault_client(&server.connect_string(), Duration::from_secs(10));
    let holder = InterProcessMutex::new(&holder_client, &path).unwrap();
    holder.acquire().unwrap();
    let waiter = {
        let (c, path) = (c.clone(), path.clone());
        thread::spawn(move || {
            let m = InterProcessMutex::new(&c, &path).unwrap();
            let got = m.acquire_timeout(Duration::from_secs(30)).unwrap();
            if got {
                m.release().unwrap();
            }
            got
        })
    };
    wait_until(
        Duration::from_secs(10),
        || c.get_children(&path).unwrap().len() == 2,
        String::new,
    );
    c.delete()
        .deleting_children_if_needed()
        .for_path(&path)
        .unwrap();
    assert!(waiter.join().unwrap());
    figs.faults.fetch_add(1, Ordering::SeqCst);
    holder.release().unwrap();
    // A closed client refuses politely.
    c.close();
    assert!(matches!(
        InterProcessMutex::new(&c, "/x").unwrap().acquire(),
        Err(Error::Closed)
    ));
    figs.faults.fetch_add(1, Ordering::SeqCst);
    wait_until(
        Duration::from_secs(10),
        || count_nodes(&holder_client, &path) == 0,
        String::new,
    );
    figs.report("misuse", count_nodes(&holder_client, &path));
    holder_client.close();
}

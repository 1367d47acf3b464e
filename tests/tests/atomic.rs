//! `DistributedAtomicLong` / `DistributedAtomicInteger` against real
//! ZooKeeper: Curator's semantics and format, contention, promotion to a
//! lock, and no lost or doubled increment through an ensemble's leader
//! kills.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::{Client, Error, ExponentialBackoffRetry, RetryNTimes};
use latchkey_recipes::{DistributedAtomicInteger, DistributedAtomicLong, PromotedToLock};
use latchkey_test::{FaultProxy, TestingCluster};

const SESSION: Duration = Duration::from_secs(10);

fn retries(n: u32) -> RetryNTimes {
    RetryNTimes::new(n, Duration::from_millis(1))
}

#[test]
fn operations_follow_curators_semantics_and_format() {
    let c = connect(&shared_server().connect_string(), SESSION);
    let path = unique("atomic-ops");
    let a = DistributedAtomicLong::new(&c, &path, retries(3)).unwrap();
    let v = a.get().unwrap();
    assert!(v.succeeded);
    assert_eq!(
        (v.pre_value, v.post_value),
        (0, 0),
        "a missing node reads as 0"
    );
    assert!(c.exists(&path).unwrap().is_none(), "get creates nothing");

    let v = a.increment().unwrap();
    assert_eq!((v.succeeded, v.pre_value, v.post_value), (true, 0, 1));
    assert_eq!(c.get_data(&path).unwrap().0, 1i64.to_be_bytes());
    assert_eq!(a.add(10).unwrap().post_value, 11);
    assert_eq!(a.subtract(4).unwrap().post_value, 7);
    assert_eq!(a.decrement().unwrap().post_value, 6);
    assert_eq!(v.stats.optimistic_tries, 1);

    let miss = a.compare_and_set(5, 100).unwrap();
    assert!(!miss.succeeded);
    assert_eq!(miss.pre_value, 6);
    let hit = a.compare_and_set(6, 100).unwrap();
    assert!(hit.succeeded);
    assert_eq!(hit.post_value, 100);
    assert_eq!(a.try_set(-5).unwrap().post_value, -5);
    assert!(!a.initialize(9).unwrap(), "exists already");
    a.force_set(i64::MAX).unwrap();
    let wrapped = a.increment().unwrap();
    assert_eq!(wrapped.post_value, i64::MIN, "wraps as Java's long does");
    assert!(a.subtract(i64::MIN).unwrap().succeeded);

    let fresh = DistributedAtomicInteger::new(&c, &unique("atomic-int"), retries(0)).unwrap();
    assert!(fresh.initialize(3).unwrap());
    assert_eq!(fresh.add(2).unwrap().post_value, 5);
    assert_eq!(c.get_data(fresh.path()).unwrap().0, 5i32.to_be_bytes());
    let cas_missing = DistributedAtomicLong::new(&c, &unique("atomic-none"), retries(0)).unwrap();
    assert!(!cas_missing.compare_and_set(0, 1).unwrap().succeeded);
}

#[test]
fn corrupted_data_and_bad_paths_are_errors() {
    let c = connect(&shared_server().connect_string(), SESSION);
    let path = unique("atomic-corrupt");
    c.create()
        .creating_parents_if_needed()
        .for_path(&path, b"abc")
        .unwrap();
    let a = DistributedAtomicLong::new(&c, &path, retries(0)).unwrap();
    for result in [a.get().map(|_| ()), a.increment().map(|_| ())] {
        match result {
            Err(Error::IllegalState(m)) => {
                assert!(m.contains(&path) && m.contains("3 bytes"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(c.get_data(&path).unwrap().0, b"abc", "nothing written");
    for bad in ["", "/", "x", "/a/"] {
        assert!(
            DistributedAtomicLong::new(&c, bad, retries(0)).is_err(),
            "{bad:?}"
        );
    }
}

/// Four sessions increment one counter at once. With enough retries every
/// increment succeeds; with none, some give up, and the counter still
/// equals the number that succeeded.
#[test]
fn contended_increments_are_never_lost_or_doubled() {
    let cs = clients(4, SESSION);
    for (name, policy_retries, promoted) in [
        ("retries", 1000, false),
        ("no-retries", 0, false),
        ("promoted", 0, true),
    ] {
        let path = unique(&format!("atomic-contended-{name}"));
        let succeeded = AtomicU64::new(0);
        let failed = AtomicU64::new(0);
        // Far above what the increments need (a few seconds): a counter
        // whose writes never land fails here instead of retrying for minutes.
        let phase_ends = Instant::now() + Duration::from_secs(30);
        thread::scope(|s| {
            for c in &cs {
                let (path, succeeded, failed) = (&path, &succeeded, &failed);
                s.spawn(move || {
                    let mut a =
                        DistributedAtomicLong::new(c, path, retries(policy_retries)).unwrap();
                    if promoted {
                        a = a
                            .promoted_to_lock(
                                PromotedToLock::new(&format!("{path}-lock"))
                                    .timeout(Duration::from_secs(30))
                                    // Optimistic writers still race the lock holder
                                    // (as in Curator): it retries until it wins.
                                    .retry_policy(retries(1000)),
                            )
                            .unwrap();
                    }
                    for _ in 0..50 {
                        assert!(
                            Instant::now() < phase_ends,
                            "{name}: 50 increments per session not done within 30 s"
                        );
                        let v = a.increment().unwrap();
                        if v.succeeded {
                            assert_eq!(v.post_value, v.pre_value + 1);
                            succeeded.fetch_add(1, Ordering::SeqCst);
                        } else {
                            failed.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        let ok = succeeded.load(Ordering::SeqCst);
        let value = DistributedAtomicLong::new(&cs[0], &path, retries(0))
            .unwrap()
            .get()
            .unwrap()
            .post_value;
        println!(
            "{name}: {ok} succeeded, {} gave up, value {value}",
            failed.load(Ordering::SeqCst)
        );
        assert_eq!(value, ok as i64, "{name}");
        if name != "no-retries" {
            assert_eq!(ok, 200, "{name}: every increment succeeds");
        }
    }
}

/// Increments from four sessions while the ensemble's leader is killed and
/// restarted twice. Every increment that reported success is in the final
/// value, and none is counted twice: the final value is at least the
/// successes and at most the successes plus the increments whose outcome
/// was left unknown by an error after their write was sent.
#[test]
fn no_increment_is_lost_through_leader_kills() {
    let mut cluster = TestingCluster::start(3).unwrap();
    let path = unique("atomic-ensemble");
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
    let succeeded = AtomicU64::new(0);
    let gave_up = AtomicU64::new(0);
    let errors = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(150);
    thread::scope(|s| {
        // A failed check below stops the incrementing threads too.
        let _stop = StopOnDrop(&stop);
        for c in &cs {
            let (path, succeeded, gave_up, errors, stop) =
                (&path, &succeeded, &gave_up, &errors, &stop);
            s.spawn(move || {
                let a = DistributedAtomicLong::new(c, path, retries(50)).unwrap();
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) && n < 5000 && Instant::now() < deadline {
                    n += 1;
                    match a.increment() {
                        Ok(v) if v.succeeded => succeeded.fetch_add(1, Ordering::SeqCst),
                        Ok(_) => gave_up.fetch_add(1, Ordering::SeqCst),
                        Err(_) => errors.fetch_add(1, Ordering::SeqCst),
                    };
                }
            });
        }
        let progress = |what: &str| {
            let before = succeeded.load(Ordering::SeqCst);
            wait_until(
                Duration::from_secs(60),
                || succeeded.load(Ordering::SeqCst) >= before + 20,
                || format!("no increments after {what}"),
            );
        };
        progress("start");
        for _ in 0..2 {
            let leader = cluster.leader().expect("an ensemble leader");
            cluster.kill(leader).unwrap();
            progress("leader kill");
            cluster.restart(leader).unwrap();
            progress("leader restart");
        }
        stop.store(true, Ordering::SeqCst);
    });
    let (ok, unknown) = (
        succeeded.load(Ordering::SeqCst),
        errors.load(Ordering::SeqCst),
    );
    // A read is served by the client's server, which may be a follower
    // that has not applied the last increments yet: sync first.
    cs[0].sync(&path).unwrap();
    let value = DistributedAtomicLong::new(&cs[0], &path, retries(0))
        .unwrap()
        .get()
        .unwrap()
        .post_value as u64;
    println!(
        "ensemble: {ok} succeeded, {} gave up, {unknown} errors (outcome unknown), final value {value}",
        gave_up.load(Ordering::SeqCst)
    );
    assert!(
        value >= ok,
        "an increment that succeeded was lost: {value} < {ok}"
    );
    assert!(
        value <= ok + unknown,
        "an increment was applied twice: {value} > {ok} + {unknown}"
    );
}

/// `force_set` creates a missing node; what ZooKeeper refuses (here by
/// ACL) reaches the caller instead of reading as "not set" or "exists".
#[test]
fn force_set_creates_and_refusals_are_errors() {
    use latchkey_framework::{Acl, ErrorCode, Perms};
    let c = connect(&shared_server().connect_string(), SESSION);
    let fresh = DistributedAtomicLong::new(&c, &unique("atomic-force"), retries(0)).unwrap();
    fresh.force_set(42).unwrap();
    assert_eq!(fresh.get().unwrap().post_value, 42);

    // A node nobody may read, and a parent nobody may create under.
    let (closed, parent) = (unique("atomic-unreadable"), unique("atomic-closed-parent"));
    c.create().for_path(&closed, &1i64.to_be_bytes()).unwrap();
    c.set_acl(&closed, &[Acl::new(Perms::WRITE, "world", "anyone")], None)
        .unwrap();
    c.create().for_path(&parent, b"").unwrap();
    c.set_acl(&parent, &[Acl::new(Perms::READ, "world", "anyone")], None)
        .unwrap();
    let unreadable = DistributedAtomicLong::new(&c, &closed, retries(0)).unwrap();
    match unreadable.get() {
        Err(e) if e.is(ErrorCode::NoAuth) => {}
        other => panic!("get on an unreadable node: {other:?}"),
    }
    match unreadable.compare_and_set(1, 2) {
        Err(e) if e.is(ErrorCode::NoAuth) => {}
        other => panic!("compare_and_set on an unreadable node: {other:?}"),
    }
    let read_only = unique("atomic-read-only");
    c.create()
        .for_path(&read_only, &1i64.to_be_bytes())
        .unwrap();
    c.set_acl(
        &read_only,
        &[Acl::new(Perms::READ, "world", "anyone")],
        None,
    )
    .unwrap();
    let unwritable = DistributedAtomicLong::new(&c, &read_only, retries(0)).unwrap();
    match unwritable.compare_and_set(1, 2) {
        Err(e) if e.is(ErrorCode::NoAuth) => {}
        other => panic!("compare_and_set on a read-only node: {other:?}"),
    }
    match unwritable.increment() {
        Err(e) if e.is(ErrorCode::NoAuth) => {}
        other => panic!("increment on a read-only node: {other:?}"),
    }
    let under = DistributedAtomicLong::new(&c, &format!("{parent}/n"), retries(0)).unwrap();
    match under.initialize(1) {
        Err(e) if e.is(ErrorCode::NoAuth) => {}
        other => panic!("initialize where nobody may create: {other:?}"),
    }
    match under.force_set(1) {
        Err(e) if e.is(ErrorCode::NoAuth) => {}
        other => panic!("force_set where nobody may create: {other:?}"),
    }
    match under.increment() {
        Err(e) if e.is(ErrorCode::NoAuth) => {}
        other => panic!("increment where nobody may create: {other:?}"),
    }
}

/// An increment whose write loses every time (another session writes
/// between its read and its write: the write is held at the proxy while
/// it does) tries once and then as often as the policy allows, then as
/// often as the promotion's policy allows holding the lock, and gives up
/// "not succeeded".
#[test]
fn an_increment_that_always_loses_gives_up_after_the_policys_retries() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = connect(&proxy.connect_string(), SESSION);
    let other = connect(&server.connect_string(), SESSION);
    let ctx = Ctx::new(server, &c);
    let path = unique("atomic-always-loses");
    other.create().for_path(&path, &0i64.to_be_bytes()).unwrap();
    // The setData request (op code 5) of the counter's node.
    let write = request_on(5, &path);
    // Increments with `counter`, making each of its first `writes` writes
    // lose; the outcome.
    let losing = |counter: DistributedAtomicLong, writes: usize| {
        let (done, result) = crossbeam_channel::bounded(1);
        thread::spawn(move || {
            let _ = done.send(counter.increment());
        });
        for attempt in 0..writes {
            proxy.pause_requests_at(&write);
            wait_until(
                Duration::from_secs(10),
                || proxy.requests_paused(),
                || format!("write {attempt} never came\n{}", ctx.dump()),
            );
            other.set_data(&path, &100i64.to_be_bytes(), None).unwrap();
            proxy.resume();
        }
        match result.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(v)) if !v.succeeded => v.stats,
            other => panic!("an increment losing every write: {other:?}\n{}", ctx.dump()),
        }
    };
    // The first try and the policy's two retries.
    let plain = DistributedAtomicLong::new(&c, &path, retries(2)).unwrap();
    let stats = losing(plain, 3);
    assert_eq!((stats.optimistic_tries, stats.promoted_tries), (3, 0));
    // Then two tries under the lock: the promotion's policy allows one retry.
    let promoted = DistributedAtomicLong::new(&c, &path, retries(2))
        .unwrap()
        .promoted_to_lock(
            PromotedToLock::new(&format!("{path}-lock"))
                .timeout(Duration::from_secs(10))
                .retry_policy(retries(1)),
        )
        .unwrap();
    let stats = losing(promoted, 5);
    assert_eq!((stats.optimistic_tries, stats.promoted_tries), (3, 2));
}

/// `force_set` of a missing node that another session creates between
/// the set (which finds no node) and the create (which then finds one):
/// the value is set on the node the other created.
#[test]
fn force_set_racing_another_create_sets_the_value() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = connect(&proxy.connect_string(), SESSION);
    let other = connect(&server.connect_string(), SESSION);
    let ctx = Ctx::new(server, &c);
    let path = unique("atomic-force-race");
    let counter = DistributedAtomicLong::new(&c, &path, retries(0)).unwrap();
    // The create request (create2, op code 15) of the counter's node.
    let create = request_on(15, &path);
    proxy.pause_requests_at(&create);
    let (done, set) = crossbeam_channel::bounded(1);
    thread::spawn(move || {
        let _ = done.send(counter.force_set(42).map(|()| counter));
    });
    wait_until(
        Duration::from_secs(10),
        || proxy.requests_paused(),
        || format!("force_set never created {path}\n{}", ctx.dump()),
    );
    other.create().for_path(&path, &7i64.to_be_bytes()).unwrap();
    proxy.resume();
    match set.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(counter)) => assert_eq!(counter.get().unwrap().post_value, 42),
        other => panic!(
            "force_set racing a create: {:?}\n{}",
            other.map(|r| r.map(|_| ())),
            ctx.dump()
        ),
    }
}

//! `DistributedBarrier` and `DistributedDoubleBarrier` against real
//! ZooKeeper: waits end when they should and by their deadlines.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::Error;
use latchkey_recipes::{DistributedBarrier, DistributedDoubleBarrier};
use latchkey_test::TestingServer;

const SESSION: Duration = Duration::from_secs(10);

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
        assert!(!gate.wait_on_barrier(timeout).unwrap());
        assert!(
            t.elapsed() < timeout + Duration::from_millis(1500),
            "{:?}",
            t.elapsed()
        );
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

#[test]
fn a_barrier_wait_survives_a_server_restart() {
    let mut server = TestingServer::start().unwrap();
    let c = connect(&server.connect_string(), Duration::from_secs(30));
    let other = connect(&server.connect_string(), Duration::from_secs(30));
    let path = unique("barrier-restart");
    let gate = DistributedBarrier::new(&c, &path).unwrap();
    gate.set_barrier().unwrap();
    thread::scope(|s| {
        let w = s.spawn(|| {
            DistributedBarrier::new(&other, &path)
                .unwrap()
                .wait_on_barrier(Duration::from_secs(60))
        });
        thread::sleep(Duration::from_millis(300));
        server.stop().unwrap();
        thread::sleep(Duration::from_millis(500));
        server.restart().unwrap();
        assert!(c.block_until_connected(Duration::from_secs(30)).unwrap());
        gate.remove_barrier().unwrap();
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
    thread::scope(|s| {
        for (i, c) in cs.iter().enumerate() {
            let (path, entered, left) = (&path, &entered, &left);
            s.spawn(move || {
                // Arrive one after another; nobody enters before the last.
                thread::sleep(Duration::from_millis(100 * i as u64));
                let arrived = Instant::now();
                let b = DistributedDoubleBarrier::new(c, path, members).unwrap();
                assert!(b.enter(Duration::from_secs(30)).unwrap());
                let waited = arrived.elapsed();
                let last_arrives = Duration::from_millis(100 * (members - 1 - i) as u64);
                assert!(
                    waited + Duration::from_millis(20) >= last_arrives,
                    "member {i} entered after {waited:?}"
                );
                entered.fetch_add(1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(100 * (members - i) as u64));
                assert!(b.leave(Duration::from_secs(30)).unwrap());
                // Nobody leaves before everyone has arrived at leave.
                assert_eq!(entered.load(Ordering::SeqCst), members);
                left.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    assert_eq!(left.load(Ordering::SeqCst), members);
    assert!(sorted_children(&cs[0], &path).is_empty());
}

#[test]
fn an_enter_that_times_out_is_not_counted() {
    let cs = clients(2, SESSION);
    let path = unique("double-barrier-timeout");
    let b = DistributedDoubleBarrier::new(&cs[0], &path, 2).unwrap();
    let t = Instant::now();
    assert!(!b.enter(Duration::from_millis(300)).unwrap());
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    assert!(sorted_children(&cs[0], &path).is_empty(), "its node went");
    let late = DistributedDoubleBarrier::new(&cs[1], &path, 2).unwrap();
    assert!(
        !late.enter(Duration::from_millis(200)).unwrap(),
        "alone: no quorum"
    );
    assert!(matches!(
        DistributedDoubleBarrier::new(&cs[0], &path, 0),
        Err(Error::InvalidArgument(_))
    ));
}

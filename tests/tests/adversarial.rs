//! The recipes and the client tried as a hostile network and an
//! adversarial user would: faults that strike mid-wait, grants racing
//! deadlines and cancellation, callbacks that close or drop the client.
//! Every wait is bounded, so a broken recipe fails within seconds.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::{Client, RetryForever};
use latchkey_recipes::{InterProcessMutex, InterProcessSemaphoreV2, REQUEST_GRACE};
use latchkey_test::{FaultProxy, TestingServer};

/// What a timed call may overrun its deadline by on a loaded machine (as
/// in the deadline suite).
const SLACK: Duration = Duration::from_millis(300);

/// Runs `f` on its own thread; fails the test if it does not return within
/// `within`.
fn on_thread<T: Send + 'static>(
    what: &str,
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = crossbeam_channel::bounded(1);
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(within)
        .unwrap_or_else(|_| panic!("{what} did not return within {within:?}"))
}

/// A client through `proxy` whose every attempt may wait 5 s for a reply,
/// retrying for ever: only the call's own deadline can bound its calls.
fn patient_client(proxy: &FaultProxy) -> Client {
    start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(30))
            .connection_timeout(Duration::from_secs(5))
            .retry_policy(RetryForever::new(Duration::from_millis(100))),
    )
}

/// A timed acquire that is already queued when the network goes silent must
/// still return by its deadline: giving up its place in the queue must not
/// wait for ZooKeeper.
#[test]
fn a_partition_during_a_timed_wait_does_not_stretch_its_deadline() {
    let server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let holder = connect(&server.connect_string(), Duration::from_secs(30));
    let waiter = patient_client(&proxy);
    let ctx = Ctx::new(&server, &waiter);
    let base = unique("/adversarial/partition-mid-wait");
    let timeout = Duration::from_secs(2);

    let mutex_path = format!("{base}/mutex");
    let held = InterProcessMutex::new(&holder, &mutex_path).unwrap();
    held.acquire().unwrap();
    let sem_path = format!("{base}/sem");
    let sem_held = InterProcessSemaphoreV2::new(&holder, &sem_path, 1).unwrap();
    let lease = sem_held.acquire().unwrap();

    let mut late = Vec::new();
    for (name, queued_nodes) in [("mutex", 2), ("semaphore", 2)] {
        let (mutex, sem) = (
            InterProcessMutex::new(&waiter, &mutex_path).unwrap(),
            InterProcessSemaphoreV2::new(&waiter, &sem_path, 1).unwrap(),
        );
        let started = Instant::now();
        let call = thread::spawn(move || match name {
            "mutex" => mutex.acquire_timeout(timeout).map(|got| got.then_some(())),
            _ => sem.acquire_timeout(timeout).map(|got| got.map(drop)),
        });
        // Queued behind the holder: then the network goes silent.
        wait_until(
            Duration::from_secs(10),
            || match name {
                "mutex" => held.participant_nodes().unwrap_or_default().len() == queued_nodes,
                _ => sem_held.participant_nodes().unwrap_or_default().len() == queued_nodes,
            },
            || ctx.dump(),
        );
        proxy.pause();
        let result = on_thread(name, Duration::from_secs(30), move || call.join());
        let took = started.elapsed();
        assert!(
            matches!(result, Ok(Ok(None))),
            "{name}: expected not acquired, got {result:?}"
        );
        if took > timeout.max(REQUEST_GRACE) + SLACK {
            late.push(format!("{name}: {took:?}"));
        }
        proxy.resume();
        // The abandoned node goes once ZooKeeper is reachable again.
        wait_until(
            Duration::from_secs(20),
            || match name {
                "mutex" => held.participant_nodes().unwrap_or_default().len() == 1,
                _ => sem_held.participant_nodes().unwrap_or_default().len() == 1,
            },
            || ctx.dump(),
        );
    }
    assert!(
        late.is_empty(),
        "timed calls with a {timeout:?} timeout returned late once the network went \
         silent mid-wait: {late:?}\n{}",
        ctx.dump()
    );
    drop(lease);
    held.release().unwrap();
}

//! The recipes and the client tried as a hostile network and an
//! adversarial user would: faults that strike mid-wait, grants racing
//! deadlines and cancellation, callbacks that close or drop the client.
//! Every wait is bounded, so a broken recipe fails within seconds.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::{Client, RetryForever};
use latchkey_recipes::{
    InterProcessMultiLock, InterProcessMutex, InterProcessSemaphoreV2, REQUEST_GRACE,
};
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

/// A reply body holding `s` as a jute string.
fn jute_string(s: &str) -> Vec<u8> {
    let mut b = (s.len() as i32).to_be_bytes().to_vec();
    b.extend_from_slice(s.as_bytes());
    b
}

/// A create2 reply for `path`: the path, then a stat owned by `owner`.
fn create2_reply(path: &str, owner: i64) -> Vec<u8> {
    let mut b = jute_string(path);
    for v in [1i64, 1, 0, 0] {
        b.extend_from_slice(&v.to_be_bytes()); // czxid, mzxid, ctime, mtime
    }
    for v in [0i32, 0, 0] {
        b.extend_from_slice(&v.to_be_bytes()); // version, cversion, aversion
    }
    b.extend_from_slice(&owner.to_be_bytes());
    for v in [0i32, 0] {
        b.extend_from_slice(&v.to_be_bytes()); // dataLength, numChildren
    }
    b.extend_from_slice(&1i64.to_be_bytes()); // pzxid
    b
}

/// A revocable mutex sets a watch on each new node before it waits. If
/// ZooKeeper stops answering right after the create (here: a server that
/// answers the create and the listing, then never answers getData), a timed
/// acquire must still return by its deadline instead of retrying that
/// watch for as long as the retry policy allows (for ever here).
#[test]
fn a_revocable_timed_acquire_keeps_its_deadline_when_the_watch_gets_no_reply() {
    use latchkey_test::fake_server::{FakeServer, Reply, Script};
    const CREATE2: i32 = 15;
    const GET_CHILDREN: i32 = 8;
    const GET_DATA: i32 = 4;
    let session = 0x5eed_0001;
    let node = "/adversarial/revocable/_c_00000000-0000-0000-0000-000000000000-lock-0000000001";
    let mut script = Script::default()
        .session_id(session)
        .reply(CREATE2, Reply::Ok(create2_reply(node, session)))
        .reply(GET_DATA, Reply::Ignore);
    let mut children = 1i32.to_be_bytes().to_vec();
    children.extend(jute_string(&node["/adversarial/revocable/".len()..]));
    script = script.reply(GET_CHILDREN, Reply::Ok(children));
    script.default_reply = Reply::Error(-101);
    let fake = FakeServer::start(script).expect("start the fake server");
    let client = start_connected(
        Client::builder()
            .connect_string(fake.connect_string())
            .session_timeout(Duration::from_secs(30))
            .connection_timeout(Duration::from_secs(1))
            .retry_policy(RetryForever::new(Duration::from_millis(50))),
    );
    let mutex = InterProcessMutex::new(&client, "/adversarial/revocable").unwrap();
    mutex.make_revocable(|| {});
    let timeout = Duration::from_millis(1500);
    let started = Instant::now();
    let (tx, rx) = crossbeam_channel::bounded(1);
    thread::spawn(move || {
        let _ = tx.send(mutex.acquire_timeout(timeout));
    });
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| {
            panic!(
                "a revocable acquire_timeout({timeout:?}) did not return within 10 s; \
             getData requests it sent meanwhile (the revocation watch): {}",
                fake.seen().count(GET_DATA)
            )
        });
    let took = started.elapsed();
    assert!(
        took <= timeout.max(REQUEST_GRACE) + SLACK,
        "a revocable acquire_timeout({timeout:?}) took {took:?} (returned {got:?}); \
         getData requests sent: {}",
        fake.seen().count(GET_DATA)
    );
    assert!(
        matches!(got, Ok(false)),
        "expected not acquired, got {got:?}"
    );
    client.close();
}

/// Cancelling an acquire that waits in the queue returns `Cancelled` at
/// once, as documented, even when the network has just gone silent: the
/// node is given up without waiting for ZooKeeper's answer.
#[test]
fn cancelling_a_queued_acquire_during_a_partition_returns_at_once() {
    use latchkey_framework::Error;
    use latchkey_recipes::CancelToken;
    let server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let holder = connect(&server.connect_string(), Duration::from_secs(30));
    let waiter = patient_client(&proxy);
    let ctx = Ctx::new(&server, &waiter);
    let base = unique("/adversarial/cancel-in-partition");
    let mutex_path = format!("{base}/mutex");
    let held = InterProcessMutex::new(&holder, &mutex_path).unwrap();
    held.acquire().unwrap();
    let sem_path = format!("{base}/sem");
    let sem_held = InterProcessSemaphoreV2::new(&holder, &sem_path, 1).unwrap();
    let lease = sem_held.acquire().unwrap();
    // The multi-lock takes this free lock first, then queues on the mutex:
    // its cancel must roll the free lock back without waiting on ZooKeeper.
    let free_path = format!("{base}/free");
    let free = InterProcessMutex::new(&holder, &free_path).unwrap();
    let queued = |name: &str| match name {
        "mutex" | "multi-lock" => held.participant_nodes().unwrap_or_default().len(),
        _ => sem_held.participant_nodes().unwrap_or_default().len(),
    };

    let mut late = Vec::new();
    for name in ["mutex", "semaphore", "multi-lock"] {
        let (mutex, sem, multi) = (
            InterProcessMutex::new(&waiter, &mutex_path).unwrap(),
            InterProcessSemaphoreV2::new(&waiter, &sem_path, 1).unwrap(),
            InterProcessMultiLock::from_paths(&waiter, &[&free_path, &mutex_path]).unwrap(),
        );
        let cancel = CancelToken::new();
        let token = cancel.clone();
        let (tx, rx) = crossbeam_channel::bounded(1);
        thread::spawn(move || {
            let got = match name {
                "mutex" => mutex.acquire_cancellable(Duration::MAX, &token),
                "multi-lock" => multi.acquire_cancellable(Duration::MAX, &token),
                _ => sem
                    .acquire_many_cancellable(1, Duration::MAX, &token)
                    .map(|l| l.is_some()),
            };
            let _ = tx.send(got);
        });
        wait_until(Duration::from_secs(10), || queued(name) == 2, || ctx.dump());
        proxy.pause();
        let cancelled_at = Instant::now();
        cancel.cancel();
        let result = rx.recv_timeout(Duration::from_secs(20));
        let took = cancelled_at.elapsed();
        assert!(
            matches!(result, Ok(Err(Error::Cancelled))),
            "{name}: expected Cancelled, got {result:?} after {took:?}\n{}",
            ctx.dump()
        );
        if took > Duration::from_millis(500) {
            late.push(format!("{name}: {took:?}"));
        }
        proxy.resume();
        wait_until(Duration::from_secs(20), || queued(name) == 1, || ctx.dump());
    }
    // The multi-lock's free lock was given back, in the background.
    wait_until(
        Duration::from_secs(20),
        || free.participant_nodes().is_ok_and(|n| n.is_empty()),
        || ctx.dump(),
    );
    assert!(
        late.is_empty(),
        "cancelled acquires returned late once the network went silent: {late:?}\n{}",
        ctx.dump()
    );
    drop(lease);
    held.release().unwrap();
}

/// Cancelling an acquire whose request ZooKeeper has not answered yet (the
/// network went silent before the create) returns `Cancelled` at once, the
/// request abandoned; the node the create makes once the network heals is
/// removed in the background (protected mode), so nothing is left queued.
#[test]
fn cancelling_an_acquire_whose_request_is_under_way_returns_at_once() {
    use latchkey_framework::Error;
    use latchkey_recipes::CancelToken;
    let server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let holder = connect(&server.connect_string(), Duration::from_secs(30));
    let waiter = patient_client(&proxy);
    let ctx = Ctx::new(&server, &waiter);
    let base = unique("/adversarial/cancel-in-flight");
    let mutex_path = format!("{base}/mutex");
    let held = InterProcessMutex::new(&holder, &mutex_path).unwrap();
    held.acquire().unwrap();
    let sem_path = format!("{base}/sem");
    let sem_held = InterProcessSemaphoreV2::new(&holder, &sem_path, 1).unwrap();
    let lease = sem_held.acquire().unwrap();
    let queued = |name: &str| match name {
        "mutex" => held.participant_nodes().unwrap_or_default().len(),
        _ => sem_held.participant_nodes().unwrap_or_default().len(),
    };

    for name in ["mutex", "semaphore"] {
        let (mutex, sem) = (
            InterProcessMutex::new(&waiter, &mutex_path).unwrap(),
            InterProcessSemaphoreV2::new(&waiter, &sem_path, 1).unwrap(),
        );
        proxy.pause();
        let sent = waiter.metrics().requests_sent;
        let cancel = CancelToken::new();
        let token = cancel.clone();
        let (tx, rx) = crossbeam_channel::bounded(1);
        thread::spawn(move || {
            let got = match name {
                "mutex" => mutex.acquire_cancellable(Duration::MAX, &token),
                _ => sem
                    .acquire_many_cancellable(1, Duration::MAX, &token)
                    .map(|l| l.is_some()),
            };
            let _ = tx.send(got);
        });
        // The create is written and waits for a reply that cannot come.
        wait_until(
            Duration::from_secs(10),
            || waiter.metrics().requests_sent > sent,
            || ctx.dump(),
        );
        let cancelled_at = Instant::now();
        cancel.cancel();
        let result = rx.recv_timeout(Duration::from_secs(20));
        let took = cancelled_at.elapsed();
        assert!(
            matches!(result, Ok(Err(Error::Cancelled))) && took < Duration::from_millis(500),
            "{name}: expected Cancelled at once, got {result:?} after {took:?}\n{}",
            ctx.dump()
        );
        proxy.resume();
        // The create reaches the server after the resume; its node must go.
        wait_until(Duration::from_secs(20), || queued(name) == 1, || ctx.dump());
    }
    drop(lease);
    held.release().unwrap();
}

/// A plain operation on a handle with a cancel token fails with
/// `Cancelled` as soon as the token is cancelled, while its request waits
/// for a reply on a connection gone silent.
#[test]
fn a_cancelled_handle_abandons_a_request_under_way() {
    use latchkey_framework::{CancelToken, Error};
    let server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let client = patient_client(&proxy);
    let ctx = Ctx::new(&server, &client);
    let path = unique("/adversarial/cancel-handle");
    client
        .create()
        .creating_parents_if_needed()
        .for_path(&path, b"x")
        .unwrap();
    let cancel = CancelToken::new();
    let handle = client.with_cancel(Some(&cancel));
    assert_eq!(handle.get_data(&path).unwrap().0, b"x");
    proxy.pause();
    let sent = client.metrics().requests_sent;
    let (tx, rx) = crossbeam_channel::bounded(1);
    let reader = handle.clone();
    let read_path = path.clone();
    thread::spawn(move || {
        let _ = tx.send(reader.get_data(&read_path).map(|(data, _)| data));
    });
    wait_until(
        Duration::from_secs(10),
        || client.metrics().requests_sent > sent,
        || ctx.dump(),
    );
    let cancelled_at = Instant::now();
    cancel.cancel();
    let result = rx.recv_timeout(Duration::from_secs(20));
    let took = cancelled_at.elapsed();
    assert!(
        matches!(result, Ok(Err(Error::Cancelled))) && took < Duration::from_millis(500),
        "expected Cancelled at once, got {result:?} after {took:?}\n{}",
        ctx.dump()
    );
    // Later calls on the handle fail at once; the client itself goes on.
    assert!(matches!(handle.get_data(&path), Err(Error::Cancelled)));
    proxy.resume();
    assert_eq!(client.get_data(&path).unwrap().0, b"x");
}

/// A multi-lock that took its first lock and then times out on the second
/// rolls the first back; with the network gone silent mid-wait, that
/// rollback still has to fit in the call's deadline.
#[test]
fn a_multi_lock_rolls_back_within_its_deadline_during_a_partition() {
    use latchkey_recipes::{InterProcessLock, InterProcessSemaphoreMutex};
    let server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let holder = connect(&server.connect_string(), Duration::from_secs(30));
    let waiter = patient_client(&proxy);
    let ctx = Ctx::new(&server, &waiter);
    let base = unique("/adversarial/multi-rollback");
    let (free, taken) = (format!("{base}/free"), format!("{base}/taken"));
    let held = InterProcessMutex::new(&holder, &taken).unwrap();
    held.acquire().unwrap();
    // The first lock is a mutex, then a semaphore mutex: both roll back
    // within the deadline.
    for first in ["mutex", "semaphore mutex"] {
        let free = format!("{free}-{}", first.len());
        let free_lock: Box<dyn InterProcessLock> = match first {
            "mutex" => Box::new(InterProcessMutex::new(&waiter, &free).unwrap()),
            _ => Box::new(InterProcessSemaphoreMutex::new(&waiter, &free).unwrap()),
        };
        let second: Box<dyn InterProcessLock> =
            Box::new(InterProcessMutex::new(&waiter, &taken).unwrap());
        let multi = InterProcessMultiLock::new(vec![free_lock, second]).unwrap();
        let timeout = Duration::from_secs(2);
        let started = Instant::now();
        let (tx, rx) = crossbeam_channel::bounded(1);
        thread::spawn(move || {
            let _ = tx.send(multi.acquire_timeout(timeout));
        });
        wait_until(
            Duration::from_secs(10),
            || held.participant_nodes().unwrap_or_default().len() == 2,
            || ctx.dump(),
        );
        proxy.pause();
        let result = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the multi-lock did not return within 30 s");
        let took = started.elapsed();
        proxy.resume();
        assert!(
            matches!(result, Ok(false)),
            "{first}: expected Ok(false), got {result:?}"
        );
        assert!(
            took <= timeout.max(REQUEST_GRACE) + SLACK,
            "{first}: a multi-lock acquire_timeout({timeout:?}) took {took:?} with the network \
             silent mid-wait\n{}",
            ctx.dump()
        );
        // The rolled-back node goes once the network is back.
        let (mutex_view, sem_view) = (
            InterProcessMutex::new(&holder, &free).unwrap(),
            InterProcessSemaphoreMutex::new(&holder, &free).unwrap(),
        );
        wait_until(
            Duration::from_secs(20),
            || {
                match first {
                    "mutex" => mutex_view.participant_nodes(),
                    _ => sem_view.participant_nodes(),
                }
                .is_ok_and(|nodes| nodes.is_empty())
            },
            || ctx.dump(),
        );
        wait_until(
            Duration::from_secs(20),
            || held.participant_nodes().unwrap_or_default().len() == 1,
            || ctx.dump(),
        );
    }
    held.release().unwrap();
}

/// A timed acquire whose timeout outlasts the client's retry policy ends
/// when the policy gives up, with its last error (connection loss, saying
/// why), as Curator's does; never later than its deadline, and never
/// acquired.
#[test]
fn a_timed_acquire_outlasting_the_retry_policy_ends_with_its_error_in_time() {
    use latchkey_framework::ExponentialBackoffRetry;
    let server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let client = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(30))
            .connection_timeout(Duration::from_millis(500))
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 2)),
    );
    let ctx = Ctx::new(&server, &client);
    let base = unique("/adversarial/outlast-policy");
    let mutex = InterProcessMutex::new(&client, &format!("{base}/mutex")).unwrap();
    let sem = InterProcessSemaphoreV2::new(&client, &format!("{base}/sem"), 1).unwrap();
    proxy.set_refuse(true);
    proxy.cut();
    let timeout = Duration::from_secs(6);
    let started = Instant::now();
    let got = on_thread("mutex", Duration::from_secs(30), move || {
        mutex.acquire_timeout(timeout)
    });
    let mutex_took = started.elapsed();
    let started = Instant::now();
    let leased = on_thread("semaphore", Duration::from_secs(30), move || {
        sem.acquire_timeout(timeout).map(|l| l.is_some())
    });
    let sem_took = started.elapsed();
    let not_acquired = |r: &latchkey_framework::Result<bool>| match r {
        Ok(took) => !took,
        Err(e) => e.is(latchkey_framework::ErrorCode::ConnectionLoss),
    };
    assert!(
        not_acquired(&got)
            && not_acquired(&leased)
            && mutex_took <= timeout + SLACK
            && sem_took <= timeout + SLACK,
        "with ZooKeeper refusing connections, acquire_timeout({timeout:?}) gave \
         mutex: {got:?} after {mutex_took:?}, semaphore: {leased:?} after {sem_took:?}\n{}",
        ctx.dump()
    );
    proxy.set_refuse(false);
}

/// Releasing a lock (or returning a lease) "never waits on a broken
/// connection": the background takes the delete over. A connection that
/// has just gone silent is broken too, though the client cannot tell yet.
#[test]
fn releasing_during_a_partition_does_not_block() {
    let server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let client = patient_client(&proxy);
    let ctx = Ctx::new(&server, &client);
    let base = unique("/adversarial/release-in-partition");
    let mutex = InterProcessMutex::new(&client, &format!("{base}/mutex")).unwrap();
    let sem = InterProcessSemaphoreV2::new(&client, &format!("{base}/sem"), 1).unwrap();
    let (held_tx, held_rx) = crossbeam_channel::bounded(1);
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    thread::spawn(move || {
        mutex.acquire().unwrap();
        let lease = sem.acquire().unwrap();
        let _ = held_tx.send(());
        let _ = go_rx.recv_timeout(Duration::from_secs(30));
        let started = Instant::now();
        mutex.release().unwrap();
        let mutex_took = started.elapsed();
        let started = Instant::now();
        drop(lease);
        let _ = done_tx.send((mutex_took, started.elapsed()));
    });
    held_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the lock and the lease were not taken within 20 s");
    proxy.pause();
    go_tx.send(()).unwrap();
    let (mutex_took, lease_took) = done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the releases did not return within 30 s");
    proxy.resume();
    assert!(
        mutex_took <= Duration::from_millis(500) && lease_took <= Duration::from_millis(500),
        "with the network silent, a release took {mutex_took:?} and a lease's return \
         {lease_took:?}\n{}",
        ctx.dump()
    );
    // The deletes the releases handed over are done once the network heals.
    let empty = |path: String| client.get_children(&path).is_ok_and(|c| c.is_empty());
    wait_until(
        Duration::from_secs(20),
        || empty(format!("{base}/mutex")) && empty(format!("{base}/sem/leases")),
        || ctx.dump(),
    );
}

/// A listener that closes the client when its session is lost (a common
/// way to shut down) races the client starting the next session: however
/// that race goes, nothing may connect after `close()`.
#[test]
fn closing_from_a_lost_listener_leaves_no_session_behind() {
    use latchkey_framework::ConnectionState;
    let server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let mut leaked = Vec::new();
    for round in 0..10 {
        let client = connect(&proxy.connect_string(), Duration::from_secs(10));
        let weak = client.downgrade();
        let (tx, rx) = crossbeam_channel::bounded(1);
        client
            .add_listener(move |state| {
                if state == ConnectionState::Lost {
                    if let Some(c) = weak.upgrade() {
                        c.close();
                    }
                    let _ = tx.send(());
                }
            })
            .forget();
        client.expire_session_for_testing().unwrap();
        rx.recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("round {round}: no Lost within 20 s"));
        assert!(client.is_closed());
        drop(client);
        // Whatever connects after close() shows in the proxy.
        let quiet = Instant::now() + Duration::from_secs(3);
        let mut open = 0;
        while Instant::now() < quiet {
            open = proxy.connection_count();
            if open == 0 {
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        thread::sleep(Duration::from_millis(300));
        open = open.max(proxy.connection_count());
        if open != 0 {
            leaked.push(format!(
                "round {round}: {open} connection(s) open after close"
            ));
            proxy.cut();
        }
    }
    assert!(
        leaked.is_empty(),
        "a client closed by its Lost listener kept connecting: {leaked:?}"
    );
}

/// Listeners share one thread, and one may block on `Lost` for a while
/// (the client still starts its next session meanwhile). A hold taken in
/// the new session must not be marked lost when the mutex's own listener
/// finally hears of the earlier session's loss.
#[test]
fn a_late_lost_event_does_not_mark_a_hold_of_the_next_session_lost() {
    use latchkey_framework::ConnectionState;
    let server = shared_server();
    let client = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &client);
    // Registered first: blocks the listener thread on Lost until released.
    let (unblock_tx, unblock_rx) = crossbeam_channel::bounded::<()>(1);
    client
        .add_listener(move |state| {
            if state == ConnectionState::Lost {
                let _ = unblock_rx.recv_timeout(Duration::from_secs(30));
            }
        })
        .forget();
    let mutex = InterProcessMutex::new(&client, &unique("/adversarial/late-lost")).unwrap();
    // Registered after the mutex: tells when the mutex's listener has run.
    let (heard_tx, heard_rx) = crossbeam_channel::bounded(1);
    client
        .add_listener(move |state| {
            if state == ConnectionState::Lost {
                let _ = heard_tx.send(());
            }
        })
        .forget();
    let old_session = client.session_id();
    client.expire_session_for_testing().unwrap();
    wait_until(
        Duration::from_secs(20),
        || {
            client.session_id() != old_session
                && client.session_id() != 0
                && client.state().is_some_and(|s| s.is_connected())
        },
        || ctx.dump(),
    );
    // A hold of the new session, on a thread of its own.
    let (ask_tx, ask_rx) = crossbeam_channel::bounded::<()>(1);
    let (lost_tx, lost_rx) = crossbeam_channel::bounded(2);
    let holder = mutex.clone();
    thread::spawn(move || {
        holder.acquire().unwrap();
        let _ = lost_tx.send(holder.is_lost());
        let _ = ask_rx.recv_timeout(Duration::from_secs(30));
        let _ = lost_tx.send(holder.is_lost());
        holder.release().unwrap();
    });
    let fresh = lost_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(!fresh, "a fresh hold of the new session reads as lost");
    unblock_tx.send(()).unwrap();
    heard_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the listeners never heard of the loss");
    ask_tx.send(()).unwrap();
    let later = lost_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        !later,
        "a hold taken in the new session reads as lost once the old session's Lost \
         reached the mutex's listener\n{}",
        ctx.dump()
    );
}

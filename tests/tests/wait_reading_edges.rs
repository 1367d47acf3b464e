//! Edges of `Client::wait_reading`, where a waiting thread reads its
//! client's connection itself: what the `done` check it is given may do
//! (call the client, panic); what the wakers the reading thread runs may
//! meet (a panic, many at once, the connection ending and coming back
//! meanwhile); what other threads of the client need meanwhile (a large
//! write going out, the connection not looking silent while the reader
//! is held up). Each test bounds every wait, so that a stall fails it in
//! seconds.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;
use latchkey_framework::{CancelToken, Client};
use latchkey_test::FaultProxy;

use common::{
    call_within, connect, read_a_few_times, shared_server, signal_reading, unique, wait_until,
};

/// Long enough that no ping or silence check comes along within a test.
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a read of `/` takes on a handle with a cancel token, which
/// waits for the engine's thread to read its reply (at most 10 s).
fn engine_read_time(c: &Client) -> Duration {
    let c = c.clone();
    call_within(
        "a read through the engine",
        Duration::from_secs(10),
        move || {
            let token = CancelToken::new();
            let started = Instant::now();
            c.with_cancel(Some(&token)).get_data("/").unwrap();
            started.elapsed()
        },
    )
}

/// `done` is the caller's code: while it runs, no other client of the
/// process may stall. Here `done` makes a (bounded) call on its own
/// client, as a check of "is the node there yet" would; meanwhile another
/// client, whose reply the engine's thread must read, reads a node.
#[test]
fn a_done_check_that_calls_the_client_does_not_stall_other_clients() {
    let server = shared_server();
    let a = connect(&server.connect_string(), SESSION_TIMEOUT);
    let b = connect(&server.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&a, "/");
    read_a_few_times(&b, "/");
    let (entered_tx, entered) = bounded(1);
    let (inner, waiter) = (a.with_timeout(Duration::from_secs(2)), a.clone());
    let wait = thread::spawn(move || {
        let calls = AtomicUsize::new(0);
        let done = || {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                let _ = entered_tx.send(());
                let _ = inner.exists("/");
            }
            false
        };
        waiter.wait_reading(&done, Some(Instant::now() + Duration::from_secs(3)))
    });
    entered
        .recv_timeout(Duration::from_secs(10))
        .expect("done() was never called");
    let took = engine_read_time(&b);
    let _ = call_within("the wait", Duration::from_secs(10), move || wait.join());
    assert!(
        took < Duration::from_secs(1),
        "another client's read took {took:?} while done() called its client: \
         done() ran with the connection's lock held, and the engine thread, \
         which serves every client, waited for it"
    );
}

/// A `done` check that panics: the panic reaches the caller, and the
/// connection is the engine's again, so the client's next calls are
/// answered at once instead of after the connection is dropped for
/// silence.
#[test]
fn a_done_check_that_panics_gives_the_connection_back() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&c, "/");
    let session = c.session_id();
    let waiter = c.clone();
    let panicked = call_within("the panicking wait", Duration::from_secs(10), move || {
        let calls = AtomicUsize::new(0);
        let done = || {
            if calls.fetch_add(1, Ordering::SeqCst) > 0 {
                panic!("done() fails");
            }
            false
        };
        let deadline = Some(Instant::now() + Duration::from_secs(5));
        catch_unwind(AssertUnwindSafe(|| waiter.wait_reading(&done, deadline))).is_err()
    });
    assert!(panicked, "the panic of done() did not reach the caller");
    let c2 = c.clone();
    let took = call_within(
        "a read after the panic",
        Duration::from_secs(3),
        move || {
            let token = CancelToken::new();
            let started = Instant::now();
            let got = c2.with_cancel(Some(&token)).get_data("/");
            (got.map(drop), started.elapsed())
        },
    );
    assert!(took.0.is_ok(), "the read failed: {:?}", took.0);
    assert!(
        took.1 < Duration::from_secs(1),
        "the read took {:?}: {:?}",
        took.1,
        c.state_history()
    );
    // Also a call that reads its own reply, and no new connection.
    let c3 = c.clone();
    call_within(
        "a plain read after the panic",
        Duration::from_secs(3),
        move || c3.get_data("/").unwrap(),
    );
    assert_eq!(c.session_id(), session);
    assert_eq!(c.metrics().suspensions, 0, "{:?}", c.state_history());
}

/// A session's wakers run one at a time (the contract of
/// `get_data_watch_waker`), also when the connection ends and comes back
/// while a waiting thread that read an event still runs its waker: the
/// waker of an event on the next connection waits for it. The first
/// waker blocks on purpose, for as long as the check takes.
#[test]
fn wakers_of_a_session_do_not_overlap_across_a_reconnection() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    // A short session: while the waiting thread is held up in a waker,
    // nobody polls the socket, and the engine notices the cut only by its
    // clocks (a ping that fails, or silence).
    let c = connect(&proxy.connect_string(), Duration::from_secs(3));
    let other = connect(&server.connect_string(), SESSION_TIMEOUT);
    let base = unique("/wait_reading_edges/overlap");
    let (first, second) = (format!("{base}/first"), format!("{base}/second"));
    for node in [&first, &second] {
        other
            .create()
            .creating_parents_if_needed()
            .for_path(node, b"")
            .unwrap();
    }
    read_a_few_times(&c, "/");
    let running = Arc::new(AtomicBool::new(false));
    let overlapped = Arc::new(AtomicBool::new(false));
    let fired = Arc::new(AtomicBool::new(false));
    let (entered_tx, entered) = bounded(1);
    let (go, released) = bounded::<()>(1);
    let flag = Arc::clone(&running);
    c.exists_watch_waker(&first, move |_| {
        flag.store(true, Ordering::SeqCst);
        let _ = entered_tx.send(thread::current().name().map(str::to_owned));
        let _ = released.recv_timeout(Duration::from_secs(8));
        flag.store(false, Ordering::SeqCst);
    })
    .unwrap();
    let (flag, seen, done) = (
        Arc::clone(&running),
        Arc::clone(&overlapped),
        Arc::clone(&fired),
    );
    c.exists_watch_waker(&second, move |_| {
        if flag.load(Ordering::SeqCst) {
            seen.store(true, Ordering::SeqCst);
        }
        done.store(true, Ordering::SeqCst);
    })
    .unwrap();
    let (done, reading) = signal_reading(move || false);
    let waiter = c.clone();
    let wait = thread::Builder::new()
        .name("waiting-reader".into())
        .spawn(move || waiter.wait_reading(&done, Some(Instant::now() + Duration::from_secs(10))))
        .unwrap();
    reading.wait();
    other.delete().for_path(&first).unwrap();
    let ran_on = entered
        .recv_timeout(Duration::from_secs(10))
        .expect("the first waker never ran");
    assert_eq!(ran_on.as_deref(), Some("waiting-reader"));
    // While the first waker runs: a new connection, and an event on it.
    proxy.cut();
    wait_until(
        Duration::from_secs(10),
        || c.metrics().suspensions > 0 && c.state().is_some_and(|s| s.is_connected()),
        || format!("no reconnection: {:?}", c.state_history()),
    );
    other.delete().for_path(&second).unwrap();
    // The second waker may run only after the first: give it a moment
    // to show it does not wait (bounded), then let the first go.
    let t0 = Instant::now();
    while !fired.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(2) {
        thread::sleep(Duration::from_millis(10));
    }
    let _ = go.send(());
    let _ = call_within("the wait", Duration::from_secs(15), move || wait.join());
    wait_until(
        Duration::from_secs(10),
        || fired.load(Ordering::SeqCst),
        || "the second waker never ran".into(),
    );
    assert!(
        !overlapped.load(Ordering::SeqCst),
        "the second waker ran while the first (run by the waiting thread) still ran"
    );
}

/// A waker that panics, run by the waiting thread that read its event:
/// the next waker of the same read still runs there, and the wait ends.
#[test]
fn a_panicking_waker_run_by_a_waiting_thread_does_not_end_its_wait() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    let other = connect(&server.connect_string(), SESSION_TIMEOUT);
    let base = unique("/wait_reading_edges/panicking_waker");
    let (bad, good) = (format!("{base}/bad"), format!("{base}/good"));
    for node in [&bad, &good] {
        other
            .create()
            .creating_parents_if_needed()
            .for_path(node, b"")
            .unwrap();
    }
    read_a_few_times(&c, "/");
    c.exists_watch_waker(&bad, |_| panic!("a waker fails"))
        .unwrap();
    let fired = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&fired);
    c.exists_watch_waker(&good, move |_| flag.store(true, Ordering::SeqCst))
        .unwrap();
    let before = c.metrics().waits_read_by_waiter;
    let (waiter, flag) = (c.clone(), Arc::clone(&fired));
    let (done, reading) = signal_reading(move || flag.load(Ordering::SeqCst));
    let wait = thread::spawn(move || {
        let started = Instant::now();
        let done = waiter.wait_reading(&done, Some(Instant::now() + Duration::from_secs(8)));
        (done, started.elapsed())
    });
    reading.wait();
    other
        .transaction()
        .delete(&bad)
        .delete(&good)
        .commit()
        .unwrap();
    let (done, took) = call_within("the wait", Duration::from_secs(12), move || {
        wait.join().unwrap()
    });
    assert!(done, "the wait ended without the second waker ({took:?})");
    assert!(took < Duration::from_secs(3), "the wait took {took:?}");
    assert!(
        c.metrics().waits_read_by_waiter > before,
        "{:?}",
        c.metrics()
    );
    c.get_data("/").unwrap();
}

/// The connection under a waiting thread goes silent: the engine's
/// silence check (2/3 of a 3 s session timeout) ends it, which wakes the
/// thread well before the 5 s a read waits at most, and the client
/// reconnects.
#[test]
fn a_silent_connection_under_a_waiting_thread_ends_on_time() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), Duration::from_secs(3));
    read_a_few_times(&c, "/");
    let (done, reading) = signal_reading(move || false);
    let waiter = c.clone();
    let wait = thread::spawn(move || {
        let deadline = Some(Instant::now() + Duration::from_secs(20));
        let done = waiter.wait_reading(&done, deadline);
        (done, Instant::now())
    });
    reading.wait();
    let paused = Instant::now();
    proxy.pause();
    let (done, at) = call_within("the wait", Duration::from_secs(25), move || {
        wait.join().unwrap()
    });
    proxy.resume();
    let took = at.saturating_duration_since(paused);
    assert!(!done);
    assert!(
        took < Duration::from_millis(4500),
        "the wait ended {took:?} after the silence began: {:?}",
        c.state_history()
    );
    wait_until(
        Duration::from_secs(15),
        || c.state().is_some_and(|s| s.is_connected()) && c.metrics().suspensions > 0,
        || format!("no reconnection: {:?}", c.state_history()),
    );
}

/// A write the socket takes in parts while another thread waits reading
/// the connection (as a lock waiter does, for as long as the lock is
/// held): the rest must still go out as the socket takes it, not wait for
/// the waiting thread to give the socket back. 16 MiB to a fake server
/// that reads everything and answers only once the whole request is in.
#[test]
fn a_write_taken_in_parts_while_a_thread_waits_reading_still_goes_out() {
    use latchkey_framework::RetryNTimes;
    use latchkey_test::fake_server::{FakeServer, Reply, Script};
    let fake = FakeServer::start(Script {
        default_reply: Reply::Error(-101), // NoNode
        ..Script::default()
    })
    .unwrap();
    let c = common::start_connected(
        Client::builder()
            .connect_string(fake.connect_string())
            .session_timeout(SESSION_TIMEOUT)
            .connection_timeout(Duration::from_secs(5))
            .max_request_size(32 << 20)
            .retry_policy(RetryNTimes::new(0, Duration::ZERO)),
    );
    assert!(c.exists("/a").unwrap().is_none());
    let stop = Arc::new(AtomicBool::new(false));
    let (waiter, stopped) = (c.clone(), Arc::clone(&stop));
    let (done, reading) = signal_reading(move || stopped.load(Ordering::SeqCst));
    let wait = thread::spawn(move || {
        waiter.wait_reading(&done, Some(Instant::now() + Duration::from_secs(20)))
    });
    reading.wait();
    let writer = c.with_timeout(Duration::from_secs(6));
    let (result, took) = call_within("the 16 MiB write", Duration::from_secs(15), move || {
        let t0 = Instant::now();
        let result = writer.set_data("/big", &vec![0u8; 16 << 20], None);
        (result, t0.elapsed())
    });
    stop.store(true, Ordering::SeqCst);
    let _ = c.exists("/a"); // a reply, so that the waiting thread looks
    let _ = call_within("the wait", Duration::from_secs(25), move || wait.join());
    let err = result.expect_err("the fake answers NoNode");
    assert!(
        err.is(latchkey_framework::ErrorCode::NoNode),
        "{err} after {took:?}: the write never went out whole while a thread waited reading"
    );
}

/// A waiting thread held up (here by a slow waker it runs; a thread
/// descheduled on a busy machine is the same) past the silence bound
/// while the server keeps answering: the replies wait in the socket, the
/// connection is not silent, and must not be dropped as if it were.
#[test]
fn a_waiting_thread_held_up_does_not_make_a_live_connection_look_silent() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(3));
    let other = connect(&server.connect_string(), SESSION_TIMEOUT);
    let node = unique("/wait_reading_edges/held_up");
    other
        .create()
        .creating_parents_if_needed()
        .for_path(&node, b"")
        .unwrap();
    read_a_few_times(&c, "/");
    let fired = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&fired);
    // Past the 2 s silence bound of a 3 s session, and less than the
    // session: the server keeps the session, and pings are answered.
    c.exists_watch_waker(&node, move |_| {
        thread::sleep(Duration::from_millis(2600));
        flag.store(true, Ordering::SeqCst);
    })
    .unwrap();
    let (waiter, flag) = (c.clone(), Arc::clone(&fired));
    let (done, reading) = signal_reading(move || flag.load(Ordering::SeqCst));
    let wait = thread::spawn(move || {
        waiter.wait_reading(&done, Some(Instant::now() + Duration::from_secs(10)))
    });
    reading.wait();
    other.delete().for_path(&node).unwrap();
    let done = call_within("the wait", Duration::from_secs(15), move || {
        wait.join().unwrap()
    });
    assert!(done, "the waker never ran");
    c.get_data("/").unwrap();
    assert_eq!(
        c.metrics().suspensions,
        0,
        "the connection was dropped as silent: {:?}",
        c.state_history()
    );
}

/// Many watches fire at once (one transaction deletes 40 nodes) while a
/// thread waits reading: each waker runs exactly once, in the order of
/// the deletions, and the wait ends when the last one has run.
#[test]
fn many_wakers_read_by_a_waiting_thread_run_once_each_in_order() {
    const N: usize = 40;
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    let other = connect(&server.connect_string(), SESSION_TIMEOUT);
    let base = unique("/wait_reading_edges/many");
    let nodes: Vec<String> = (0..N).map(|i| format!("{base}/n{i:02}")).collect();
    for node in &nodes {
        other
            .create()
            .creating_parents_if_needed()
            .for_path(node, b"")
            .unwrap();
    }
    read_a_few_times(&c, "/");
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    for (i, node) in nodes.iter().enumerate() {
        let ran = Arc::clone(&ran);
        c.exists_watch_waker(node, move |_| ran.lock().unwrap().push(i))
            .unwrap();
    }
    let (waiter, seen) = (c.clone(), Arc::clone(&ran));
    let (done, reading) = signal_reading(move || seen.lock().unwrap().len() >= N);
    let wait = thread::spawn(move || {
        let started = Instant::now();
        let done = waiter.wait_reading(&done, Some(Instant::now() + Duration::from_secs(8)));
        (done, started.elapsed())
    });
    reading.wait();
    // Reversed, so that the order is the transaction's, not the names'.
    let mut tx = other.transaction();
    for node in nodes.iter().rev() {
        tx = tx.delete(node);
    }
    tx.commit().unwrap();
    let (done, took) = call_within("the wait", Duration::from_secs(12), move || {
        wait.join().unwrap()
    });
    assert!(
        done,
        "not every waker ran ({took:?}): {:?}",
        ran.lock().unwrap()
    );
    assert!(took < Duration::from_secs(3), "the wait took {took:?}");
    let want: Vec<usize> = (0..N).rev().collect();
    assert_eq!(*ran.lock().unwrap(), want);
    // No waker runs twice later on.
    c.get_data("/").unwrap();
    assert_eq!(ran.lock().unwrap().len(), N);
}

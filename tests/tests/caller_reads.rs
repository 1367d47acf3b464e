//! A caller that reads its own reply: on a plain connection nobody else is
//! reading, a caller whose request is written waits on the socket itself
//! and dispatches what it reads, instead of being handed its reply by the
//! engine's thread. These tests pin what that must not change:
//!
//! - the socket goes back to the engine afterwards, so events that come
//!   while nobody calls are still read;
//! - watch events a caller happens to read still reach their wakers, in
//!   the order ZooKeeper sent them;
//! - other callers' replies that a caller reads wake them;
//! - a connection that closes or goes silent under a reading caller ends
//!   as any other (the call is retried on the next connection).
//!
//! Each test checks `replies_read_by_caller`, so that it cannot pass on
//! the engine's path alone.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;
use latchkey_framework::{Client, CreateMode, RetryNTimes};
use latchkey_recipes::InterProcessMutex;
use latchkey_test::FaultProxy;

use common::{
    call_within, connect, read_a_few_times, shared_server, start_connected, unique,
    wait_for_a_watch, wait_until, StopOnDrop,
};

/// Long enough that no ping (every 10 s at most) or silence check comes
/// along to read for a broken hand-back within a test's bounds.
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

fn read_by_caller(c: &Client) -> u64 {
    c.metrics().replies_read_by_caller
}

/// Waits (at most 10 s) until `c` has written a request after `sent`.
fn wait_until_sent_after(c: &Client, sent: u64) {
    wait_until(
        Duration::from_secs(10),
        || c.metrics().requests_sent > sent,
        || format!("the call was never sent: {:?}", c.state_history()),
    );
}

#[test]
fn after_a_caller_read_its_reply_the_engine_reads_the_next_event() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    let other = connect(&server.connect_string(), SESSION_TIMEOUT);
    let path = unique("/caller_reads/handback");
    c.create()
        .creating_parents_if_needed()
        .for_path(&path, b"0")
        .unwrap();
    let before = read_by_caller(&c);
    let (fired, heard) = bounded(1);
    c.get_data_watch(&path, move |e| {
        let _ = fired.send(e);
    })
    .unwrap();
    for _ in 0..20 {
        c.get_data(&path).unwrap();
    }
    assert!(
        read_by_caller(&c) > before,
        "no call read its own reply: {:?}",
        c.metrics()
    );
    // Nobody calls on `c` now: only the engine can read the event.
    other.set_data(&path, b"1", None).unwrap();
    let event = heard.recv_timeout(Duration::from_secs(5));
    assert!(
        event.is_ok(),
        "the change was never heard: the socket did not go back to the engine\n{:?}",
        c.state_history()
    );
}

#[test]
fn events_a_caller_reads_reach_their_wakers_in_order() {
    const NODES: usize = 40;
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    let other = connect(&server.connect_string(), SESSION_TIMEOUT);
    let base = unique("/caller_reads/order");
    other
        .create()
        .creating_parents_if_needed()
        .for_path(&base, b"")
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    for i in 0..NODES {
        let node = format!("{base}/n{i:02}");
        other.create().for_path(&node, b"").unwrap();
        let order = Arc::clone(&order);
        c.exists_watch_waker(&node, move |_| order.lock().unwrap().push(i))
            .unwrap();
    }
    let before = read_by_caller(&c);
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        // Keeps `c`'s socket in a caller's hands as much as it can.
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                let _ = c.exists(&base);
            }
        });
        let started = Instant::now();
        while read_by_caller(&c) < before + 50 && started.elapsed() < Duration::from_secs(5) {
            thread::sleep(Duration::from_millis(5));
        }
        let tx = (0..NODES).fold(other.transaction(), |tx, i| {
            tx.delete(&format!("{base}/n{i:02}"))
        });
        tx.commit().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while order.lock().unwrap().len() < NODES && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
    });
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order,
        (0..NODES).collect::<Vec<_>>(),
        "wakers missing or out of order (callers read {} replies)",
        read_by_caller(&c) - before
    );
    assert!(read_by_caller(&c) > before, "no caller read a reply");
}

#[test]
fn replies_a_caller_reads_for_others_wake_them() {
    const THREADS: usize = 6;
    const CALLS: usize = 300;
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    let base = unique("/caller_reads/others");
    c.create()
        .creating_parents_if_needed()
        .for_path(&base, b"")
        .unwrap();
    let before = read_by_caller(&c);
    let started = Instant::now();
    let c2 = c.clone();
    let base2 = base.clone();
    // Each call's deadline is generous; a caller left unwoken would wait
    // for it and the whole run would take minutes, not seconds.
    let created = call_within("six threads of calls", Duration::from_secs(60), move || {
        thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let c = c2.with_timeout(Duration::from_secs(20));
                    let base = &base2;
                    s.spawn(move || {
                        let mut slow = Vec::new();
                        for i in 0..CALLS {
                            let t0 = Instant::now();
                            c.create()
                                .mode(CreateMode::Ephemeral)
                                .for_path(&format!("{base}/t{t}-{i}"), b"")
                                .unwrap();
                            if t0.elapsed() > Duration::from_secs(2) {
                                slow.push(t0.elapsed());
                            }
                        }
                        slow
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        })
    });
    let slow: Vec<_> = created.into_iter().flatten().collect();
    assert!(
        slow.is_empty(),
        "calls waited for another caller's read: {slow:?}"
    );
    assert_eq!(
        c.get_children(&base).unwrap().len(),
        THREADS * CALLS,
        "in {:?}",
        started.elapsed()
    );
    assert!(read_by_caller(&c) > before, "no caller read a reply");
}

/// A connection the proxy cuts while a caller waits on its socket: the
/// caller's read sees the close, the connection ends, and the call is
/// sent again on the next connection.
#[test]
fn a_connection_closed_under_a_reading_caller_ends_and_the_call_is_retried() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), SESSION_TIMEOUT);
    let path = unique("/caller_reads/cut");
    c.create()
        .creating_parents_if_needed()
        .for_path(&path, b"x")
        .unwrap();
    read_a_few_times(&c, &path);
    let suspensions = c.metrics().suspensions;
    let sent = c.metrics().requests_sent;
    proxy.pause_replies();
    let reader = c.with_timeout(Duration::from_secs(20));
    let path2 = path.clone();
    let call = thread::spawn(move || {
        let t0 = Instant::now();
        (reader.get_data(&path2), t0.elapsed())
    });
    // Written: the cut comes while its reply is awaited (the request is
    // sent again on the next connection if the cut came before the server).
    wait_until_sent_after(&c, sent);
    proxy.cut();
    proxy.resume();
    let (result, took) = call_within("the cut call", Duration::from_secs(15), move || {
        call.join().unwrap()
    });
    assert_eq!(result.unwrap().0, b"x", "after {took:?}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(
        c.metrics().suspensions > suspensions,
        "the connection never ended: {:?}",
        c.state_history()
    );
}

/// A connection that goes silent under a reading caller: the engine's
/// silence check ends it (2/3 of the 3 s session timeout), which wakes
/// the caller; the call fails as a lost connection (no retries here),
/// long before its own 20 s deadline.
#[test]
fn a_silent_connection_under_a_reading_caller_ends_on_time() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(3))
            .connection_timeout(Duration::from_secs(20))
            .retry_policy(RetryNTimes::new(0, Duration::ZERO)),
    );
    let path = unique("/caller_reads/silent");
    c.create()
        .creating_parents_if_needed()
        .for_path(&path, b"x")
        .unwrap();
    read_a_few_times(&c, &path);
    proxy.pause();
    let reader = c.with_timeout(Duration::from_secs(20));
    let (result, took) = call_within("the silenced call", Duration::from_secs(15), move || {
        let t0 = Instant::now();
        (reader.get_data(&path), t0.elapsed())
    });
    proxy.resume();
    assert!(result.is_err(), "got {result:?} after {took:?}");
    assert!(
        took < Duration::from_millis(4500),
        "the call ended after {took:?}, not with the connection (2 s of silence): {result:?}"
    );
}

/// An event that a reading caller reads just before its own reply, with
/// nothing on the connection afterwards: its waker still runs at once
/// (the engine is asked to run it), not at the next ping 10 s later.
#[test]
fn a_waker_whose_event_a_caller_read_runs_with_no_more_traffic() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), SESSION_TIMEOUT);
    let other = connect(&server.connect_string(), SESSION_TIMEOUT);
    let base = unique("/caller_reads/quiet");
    let node = format!("{base}/n");
    other
        .create()
        .creating_parents_if_needed()
        .for_path(&node, b"")
        .unwrap();
    let (fired, heard) = bounded(1);
    c.exists_watch_waker(&node, move |_| {
        let _ = fired.send(Instant::now());
    })
    .unwrap();
    read_a_few_times(&c, &base);
    let before = read_by_caller(&c);
    // The event waits in the proxy; the call's reply queues behind it.
    proxy.pause_replies();
    other.delete().for_path(&node).unwrap();
    let sent = c.metrics().requests_sent;
    let reader = c.clone();
    let read_base = base.clone();
    let call = thread::spawn(move || reader.get_data(&read_base).map(|_| ()));
    wait_until_sent_after(&c, sent);
    let resumed = Instant::now();
    proxy.resume();
    call_within("the call", Duration::from_secs(10), move || {
        call.join().unwrap()
    })
    .unwrap();
    assert!(
        read_by_caller(&c) > before,
        "the caller did not read its reply (and so not the event)"
    );
    match heard.recv_timeout(Duration::from_secs(5)) {
        Ok(at) => eprintln!("waker ran {:?} after the resume", at - resumed),
        Err(_) => panic!("the waker did not run within 5 s of the resume"),
    }
}

/// A caller that read its own reply leaves the engine's poll watching
/// for reads only; a write the socket then takes in parts must still get
/// the engine told when the socket takes more (here 16 MiB to a fake
/// server that reads everything and answers only once the whole request
/// is in: no reply comes to wake the engine meanwhile).
#[test]
fn a_write_taken_in_parts_after_a_caller_read_still_goes_out() {
    use latchkey_test::fake_server::{FakeServer, Reply, Script};
    let fake = FakeServer::start(Script {
        default_reply: Reply::Error(-101), // NoNode
        ..Script::default()
    })
    .unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(fake.connect_string())
            .session_timeout(SESSION_TIMEOUT)
            .connection_timeout(Duration::from_secs(5))
            .max_request_size(32 << 20)
            .retry_policy(RetryNTimes::new(0, Duration::ZERO)),
    );
    assert!(c.exists("/a").unwrap().is_none());
    assert!(read_by_caller(&c) > 0, "no caller read a reply");
    let writer = c.with_timeout(Duration::from_secs(10));
    let (result, took) = call_within("the 16 MiB write", Duration::from_secs(30), move || {
        let t0 = Instant::now();
        let result = writer.set_data("/big", &vec![0u8; 16 << 20], None);
        (result, t0.elapsed())
    });
    let err = result.expect_err("the fake answers NoNode");
    assert!(
        err.is(latchkey_framework::ErrorCode::NoNode),
        "{err} after {took:?}: the write never went out whole"
    );
}

/// How many waits for a watch event `c`'s waiting threads ended by
/// reading the event themselves.
fn waits_read_by_waiter(c: &Client) -> u64 {
    c.metrics().waits_read_by_waiter
}

/// A lock waiter waits on its connection itself: the predecessor's
/// deletion event is read, and its waker run, on the waiting thread.
#[test]
fn a_lock_waiter_reads_the_event_that_wakes_it() {
    let server = shared_server();
    let holder = connect(&server.connect_string(), SESSION_TIMEOUT);
    let waiter = connect(&server.connect_string(), SESSION_TIMEOUT);
    let path = unique("/caller_reads/lock_waiter");
    let held = InterProcessMutex::new(&holder, &path).unwrap();
    assert!(held.acquire_timeout(Duration::from_secs(10)).unwrap());
    let before = waits_read_by_waiter(&waiter);
    let waiting = InterProcessMutex::new(&waiter, &path).unwrap();
    let acquire = thread::spawn(move || {
        let got = waiting.acquire_timeout(Duration::from_secs(10))?;
        if got {
            waiting.release()?;
        }
        Ok::<_, latchkey_framework::Error>(got)
    });
    wait_for_a_watch(&waiter);
    held.release().unwrap();
    let got = call_within("the waiter's acquire", Duration::from_secs(15), move || {
        acquire.join().unwrap()
    })
    .unwrap();
    assert!(
        got,
        "the waiter never got the lock: {:?}",
        waiter.state_history()
    );
    assert!(
        waits_read_by_waiter(&waiter) > before,
        "the waiter was woken by the engine, not by its own read: {:?}",
        waiter.metrics()
    );
}

/// Three sessions hand a lock round many times, each waiter reading its
/// own event where it can; a wake-up lost between a waiter and the
/// engine would hold a waiter past its 5 s timeout. The holders are
/// checked by a counter outside ZooKeeper.
#[test]
fn waiters_reading_their_events_hand_a_lock_round_without_a_stall() {
    const ROUNDS: usize = 60;
    let server = shared_server();
    let path = unique("/caller_reads/lock_round");
    let clients: Vec<Client> = (0..3)
        .map(|_| connect(&server.connect_string(), SESSION_TIMEOUT))
        .collect();
    let before: u64 = clients.iter().map(waits_read_by_waiter).sum();
    let holders = AtomicUsize::new(0);
    thread::scope(|s| {
        for c in &clients {
            let (path, holders) = (&path, &holders);
            s.spawn(move || {
                let mutex = InterProcessMutex::new(c, path).unwrap();
                for round in 0..ROUNDS {
                    let started = Instant::now();
                    let got = mutex.acquire_timeout(Duration::from_secs(5)).unwrap();
                    assert!(
                        got,
                        "round {round}: no lock after {:?}: {:?}",
                        started.elapsed(),
                        c.state_history()
                    );
                    assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    holders.fetch_sub(1, Ordering::SeqCst);
                    mutex.release().unwrap();
                }
            });
        }
    });
    let after: u64 = clients.iter().map(waits_read_by_waiter).sum();
    assert!(after > before, "no waiter read its own event");
}

/// A waiter whose client another thread keeps calling on: that thread
/// is often the one reading when the event comes, or its read is still
/// running the waker when the waiter looks; the waiter must be woken
/// either way.
#[test]
fn a_waiter_is_woken_while_another_thread_of_its_client_keeps_reading() {
    const ROUNDS: usize = 20;
    let server = shared_server();
    let holder = connect(&server.connect_string(), SESSION_TIMEOUT);
    let waiter = connect(&server.connect_string(), SESSION_TIMEOUT);
    let path = unique("/caller_reads/busy_waiter");
    let held = InterProcessMutex::new(&holder, &path).unwrap();
    let waiting = InterProcessMutex::new(&waiter, &path).unwrap();
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                let _ = waiter.exists(&path);
            }
        });
        for round in 0..ROUNDS {
            assert!(held.acquire_timeout(Duration::from_secs(10)).unwrap());
            thread::scope(|inner| {
                let acquire = inner.spawn(|| {
                    let started = Instant::now();
                    let got = waiting.acquire_timeout(Duration::from_secs(5)).unwrap();
                    let took = started.elapsed();
                    if got {
                        waiting.release().unwrap();
                    }
                    (got, took)
                });
                wait_for_a_watch(&waiter);
                held.release().unwrap();
                let (got, took) = acquire.join().unwrap();
                assert!(got, "round {round}: the waiter was not woken ({took:?})");
            });
        }
    });
}

/// A wait that starts while the engine is still running the waker it
/// waits for (held up here by an earlier waker of the same read) must not
/// go to sleep on the socket, where nothing more comes to wake it: it
/// returns at once, and the waker still runs. The first waker blocks the
/// engine on purpose, for as long as the check takes.
#[test]
fn a_wait_that_starts_while_the_engine_runs_its_waker_does_not_sleep_on_the_socket() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    let other = connect(&server.connect_string(), SESSION_TIMEOUT);
    let base = unique("/caller_reads/engine_waking");
    let (held, fires) = (format!("{base}/held"), format!("{base}/fires"));
    for node in [&held, &fires] {
        other
            .create()
            .creating_parents_if_needed()
            .for_path(node, b"")
            .unwrap();
    }
    let (entered, in_waker) = bounded(1);
    let (go, released) = bounded::<()>(1);
    c.exists_watch_waker(&held, move |_| {
        let _ = entered.send(());
        let _ = released.recv_timeout(Duration::from_secs(5));
    })
    .unwrap();
    let fired = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&fired);
    c.exists_watch_waker(&fires, move |_| flag.store(true, Ordering::SeqCst))
        .unwrap();
    other
        .transaction()
        .delete(&held)
        .delete(&fires)
        .commit()
        .unwrap();
    in_waker
        .recv_timeout(Duration::from_secs(10))
        .expect("the first waker never ran");
    let (waiter, flag) = (c.clone(), Arc::clone(&fired));
    let wait = thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(5);
        waiter.wait_reading(&|| flag.load(Ordering::SeqCst), Some(deadline))
    });
    let returned = call_within("the wait", Duration::from_secs(3), move || {
        wait.join().unwrap()
    });
    let _ = go.send(());
    assert!(!returned, "the waker ran while the first one still blocked");
    wait_until(
        Duration::from_secs(10),
        || fired.load(Ordering::SeqCst),
        || "the second waker never ran".into(),
    );
}

/// A handle with a cancel token does not wait on the socket, where a
/// cancel could not wake it: `wait_reading` returns at once, and the
/// caller waits for its waker as it would have.
#[test]
fn a_cancellable_handle_does_not_wait_on_the_socket() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&c, "/");
    let token = latchkey_framework::CancelToken::new();
    let handle = c.with_cancel(Some(&token));
    let done = call_within("wait_reading", Duration::from_secs(2), move || {
        handle.wait_reading(&|| false, Some(Instant::now() + Duration::from_secs(5)))
    });
    assert!(!done);
}

/// This thread's voluntary context switches so far: one for each sleep,
/// in a read on the socket or anywhere else.
fn sleeps_of_this_thread() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("voluntary_ctxt_switches in /proc/thread-self/status")
}

/// A reading caller sleeps in its read with the socket's receive timeout,
/// set only when it must change. After a wait with a deadline 1 ms away
/// (which sets it to 1 ms), a wait of a second with nothing coming wakes a
/// handful of times, the timeout growing each time it runs out, not once
/// a millisecond.
#[test]
fn a_long_wait_after_a_short_one_does_not_wake_every_millisecond() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&c, "/");
    let read_before = read_by_caller(&c);
    c.exists("/").unwrap();
    assert!(
        read_by_caller(&c) > read_before,
        "the caller did not read its reply: no reading caller to test"
    );
    let short = Instant::now() + Duration::from_millis(1);
    assert!(!c.wait_reading(&|| false, Some(short)));
    let sleeps = sleeps_of_this_thread();
    let started = Instant::now();
    assert!(!c.wait_reading(&|| false, Some(started + Duration::from_secs(1))));
    let took = started.elapsed();
    let woke = sleeps_of_this_thread() - sleeps;
    assert!(
        took >= Duration::from_secs(1),
        "the wait ended early, after {took:?}"
    );
    assert!(
        woke < 50,
        "the second's wait slept {woke} times: the socket's receive timeout stayed short"
    );
}

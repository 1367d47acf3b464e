//! Attacks on parked connections (see `parked.rs`): once a reader finds
//! nothing due from the server it leaves the connection parked, the
//! engine's poll hearing of hang-ups only, and the next caller reads its
//! own reply. The invariant under attack: a parked connection never holds
//! something somebody waits for, unread.
//!
//! - a hang-up the poll reports while a held-up thread still reads, which
//!   that thread then leaves parked;
//! - watches and auth set on a parked connection (persistent and one-shot
//!   watches, `add_auth` accepted and rejected), and a watcher that calls
//!   the client back;
//! - every kind of operation on a parked connection (sync, transactions,
//!   multi reads, a create with its parent's listing, whoAmI,
//!   getEphemerals, a large write, a delete handed to the background);
//! - deadlines that end a caller's read early (zero, microseconds, a late
//!   reply), a cancel while parked; cancellable calls racing a reader that
//!   parks, their requests left in the inbox for the engine;
//! - the connection's end while parked: close, expiry, a silent server;
//! - many threads calling on one client at once, each call bounded;
//! - a read-only server hanging up a parked connection.
//!
//! Each test parks the connection first (a caller reads its own replies
//! with no watch set) and bounds every wait.
//!
//! Written for the engine of 2026-11-26, whose callers read their own
//! replies; the engine now reads every reply (`isolation.rs`), and these
//! tests pin the same outcomes against it.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded};
use latchkey_framework::{
    AddWatchMode, CancelToken, Client, ConnectionState, CreateMode, Error, ErrorCode, EventType,
    ExponentialBackoffRetry, WatcherType,
};
use latchkey_test::fake_server::{FakeServer, Script};
use latchkey_test::FaultProxy;

use common::{
    assert_connection_kept, call_within, connect, read_a_few_times, shared_server, start_connected,
    unique, wait_until, StopOnDrop, Watchdog,
};

/// Long enough that no ping (every 10 s at most) or silence check comes
/// along within a test's bounds.
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// What "at once" allows on a loaded machine; a reply nobody reads waits
/// for the next ping, 10 s away.
const PROMPT: Duration = Duration::from_secs(3);

/// A persistent parent for a test's nodes, created by `c`.
fn base(c: &Client, name: &str) -> String {
    let path = unique(&format!("/parked_review/{name}"));
    c.create()
        .creating_parents_if_needed()
        .for_path(&path, b"")
        .unwrap();
    path
}

/// A persistent recursive watch added on a parked connection hears every
/// event, with calls read by callers in between; once it is removed and
/// the connection parks again, a one-shot watch set then is heard too.
#[test]
fn watches_added_on_a_parked_connection_hear_their_events() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    let other = connect(&server.connect_string(), SESSION_TIMEOUT);
    let base = base(&other, "watches");
    read_a_few_times(&c, "/");
    let (tx, events) = unbounded();
    c.add_watch(&base, AddWatchMode::PersistentRecursive, move |e| {
        let _ = tx.send(e);
    })
    .unwrap();
    for i in 0..5 {
        let child = format!("{base}/{i}");
        other.create().for_path(&child, b"").unwrap();
        let e = events
            .recv_timeout(PROMPT)
            .unwrap_or_else(|_| panic!("no event for {child}: {:?}", c.state_history()));
        assert_eq!(
            (e.event_type, e.path.as_str()),
            (EventType::NodeCreated, child.as_str())
        );
        // A caller reading between events must not park the watched
        // connection.
        c.get_data("/").unwrap();
    }
    c.remove_watches(&base, WatcherType::PersistentRecursive)
        .unwrap();
    assert_eq!(c.pending_watches(), 0);
    read_a_few_times(&c, "/");
    let (fired_tx, fired) = bounded(1);
    c.get_data_watch(&base, move |e| {
        let _ = fired_tx.send(e);
    })
    .unwrap();
    other.set_data(&base, b"1", None).unwrap();
    let e = fired
        .recv_timeout(PROMPT)
        .unwrap_or_else(|_| panic!("the one-shot watch never fired: {:?}", c.state_history()));
    assert_eq!(e.event_type, EventType::NodeDataChanged);
}

/// A watcher that calls the client back (on the watcher thread) while the
/// connection parks and unparks under it gets every answer, round after
/// round: its read parks the connection, the next round's watch unparks it.
#[test]
fn a_watcher_calling_back_on_a_parked_connection_gets_its_answers() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    let other = connect(&server.connect_string(), SESSION_TIMEOUT);
    let node = base(&other, "calling_back");
    read_a_few_times(&c, "/");
    for round in 0..20u32 {
        let (tx, answered) = bounded(1);
        let (back, path) = (c.with_timeout(PROMPT), node.clone());
        c.get_data_watch(&node, move |_| {
            let _ = tx.send(back.get_data(&path).map(|(d, _)| d));
        })
        .unwrap();
        other
            .set_data(&node, round.to_string().as_bytes(), None)
            .unwrap();
        let got = answered
            .recv_timeout(PROMPT * 2)
            .unwrap_or_else(|_| panic!("round {round}: no answer: {:?}", c.state_history()));
        assert_eq!(
            got.unwrap(),
            round.to_string().into_bytes(),
            "round {round}"
        );
    }
}

/// Auth added on a parked connection is in force once `add_auth` returns,
/// promptly.
#[test]
fn auth_added_on_a_parked_connection_is_in_force_at_once() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&c, "/");
    let started = Instant::now();
    c.with_timeout(PROMPT)
        .add_auth("digest", b"parked:secret")
        .unwrap();
    let took = started.elapsed();
    assert!(took < PROMPT, "add_auth took {took:?}");
    let who = c.with_timeout(PROMPT).who_am_i().unwrap();
    assert!(
        who.iter()
            .any(|i| i.auth_scheme == "digest" && i.user == "parked"),
        "{who:?}"
    );
}

/// An auth packet the server rejects on a parked connection (the server
/// answers, then hangs up) fails `add_auth` at once.
#[test]
fn an_auth_rejected_on_a_parked_connection_fails_at_once() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&c, "/");
    let adder = c.clone();
    let (result, took) = call_within("add_auth", Duration::from_secs(15), move || {
        let started = Instant::now();
        (
            adder.add_auth("no-such-scheme", b"whoever"),
            started.elapsed(),
        )
    });
    assert!(
        matches!(&result, Err(e) if e.is(ErrorCode::AuthFailed)),
        "{result:?} after {took:?}"
    );
    assert!(took < PROMPT, "the rejection took {took:?}");
    c.close();
}

/// Every kind of operation on a parked connection, each twice (the first
/// of a kind may find the connection parked by another kind): each is
/// answered promptly.
#[test]
fn every_kind_of_operation_on_a_parked_connection_is_answered() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    let base = base(&c, "ops");
    let big = vec![7u8; 900_000];
    read_a_few_times(&c, "/");
    for round in 0..2 {
        let b = c.with_timeout(Duration::from_secs(10));
        let timed = |what: &str, f: &dyn Fn() -> Result<(), Error>| {
            let started = Instant::now();
            let r = f();
            let took = started.elapsed();
            assert!(r.is_ok(), "round {round}: {what}: {r:?}");
            assert!(took < PROMPT, "round {round}: {what} took {took:?}");
        };
        let node = format!("{base}/n{round}");
        timed("sync", &|| b.sync("/"));
        timed("create listing the parent", &|| {
            b.create()
                .mode(CreateMode::EphemeralSequential)
                .for_path_listing_parent(&format!("{base}/seq-"), b"")
                .map(drop)
        });
        timed("transaction", &|| {
            b.transaction()
                .create(&node, b"t")
                .set_data(&node, b"u")
                .commit()
                .map(drop)
        });
        timed("multi read", &|| {
            b.multi_read()
                .get_data(&node)
                .get_children(&base)
                .execute()
                .map(drop)
        });
        timed("who am i", &|| b.who_am_i().map(drop));
        timed("ephemerals", &|| b.get_ephemerals(&base).map(drop));
        timed("large write", &|| b.set_data(&node, &big, None).map(drop));
        timed("large read", &|| {
            let (got, _) = b.get_data(&node)?;
            assert_eq!(got.len(), big.len());
            Ok(())
        });
        timed("delete in the background", &|| {
            b.delete().in_background().for_path(&node)
        });
        timed("children", &|| b.get_children(&base).map(drop));
        wait_until(
            PROMPT,
            || c.exists(&node).unwrap().is_none(),
            || format!("round {round}: {node} never deleted"),
        );
    }
}

/// Calls whose deadline ends their own read early (no time at all, a few
/// microseconds, a millisecond) on a parked connection fail or succeed at
/// once, and leave the connection working: nothing dropped, later calls
/// answered, cancellable ones too.
#[test]
fn calls_with_hardly_any_time_on_a_parked_connection_leave_it_working() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&c, "/");
    let before = c.metrics();
    let token = CancelToken::new();
    let cancellable = c.with_cancel(Some(&token)).with_timeout(PROMPT);
    let mut timed_out = 0;
    for round in 0..20u64 {
        let left = Duration::from_micros([0, 1, 20, 200, 1000][(round % 5) as usize]);
        let started = Instant::now();
        let r = c.with_timeout(left).get_data("/");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(1), "{left:?}: took {took:?}");
        match r {
            Ok(_) => {}
            Err(Error::Timeout { .. }) => timed_out += 1,
            Err(e) => panic!("{left:?}: {e:?}"),
        }
        c.with_timeout(PROMPT).get_data("/").unwrap();
        if round % 4 == 0 {
            cancellable.get_data("/").unwrap();
        }
    }
    println!("{timed_out} of 20 timed out");
    assert_connection_kept(&c, &before, "the connection was dropped");
}

/// A call that gives up (its deadline) before its reply comes leaves the
/// reply to come late on a connection that had been parked: the late
/// reply is read and dropped (its watch not set), the next call gets its
/// own answer, and the connection stays up.
#[test]
fn a_late_reply_on_a_parked_connection_is_read_and_dropped() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), SESSION_TIMEOUT);
    let base = base(&c, "late");
    let (a, b) = (format!("{base}/a"), format!("{base}/b"));
    c.create().for_path(&a, b"a").unwrap();
    c.create().for_path(&b, b"b").unwrap();
    read_a_few_times(&c, "/");
    let before = c.metrics();
    proxy.set_delay(Duration::from_millis(300));
    let r = c
        .with_timeout(Duration::from_millis(100))
        .get_data_watch(&a, |_| {});
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    proxy.set_delay(Duration::ZERO);
    let (got, _) = c.with_timeout(PROMPT).get_data(&b).unwrap();
    assert_eq!(got, b"b");
    for _ in 0..5 {
        let (got, _) = c.with_timeout(PROMPT).get_data(&a).unwrap();
        assert_eq!(got, b"a");
    }
    assert_eq!(c.pending_watches(), 0, "the abandoned call left a watch");
    assert_connection_kept(&c, &before, "the connection was dropped");
}

/// A cancellable call cancelled while its reply is on its way on a
/// connection that had been parked: it ends at once, and later calls are
/// answered.
#[test]
fn a_cancel_on_a_parked_connection_leaves_it_working() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&c, "/");
    proxy.set_delay(Duration::from_millis(300));
    let token = CancelToken::new();
    let handle = c.with_cancel(Some(&token));
    let call = thread::spawn(move || {
        let started = Instant::now();
        (handle.get_data("/").map(drop), started.elapsed())
    });
    thread::sleep(Duration::from_millis(50));
    token.cancel();
    let (r, took) = call_within("the cancelled call", PROMPT, move || call.join().unwrap());
    assert!(matches!(r, Err(Error::Cancelled) | Ok(())), "{r:?}");
    assert!(took < Duration::from_secs(1), "the cancel took {took:?}");
    proxy.set_delay(Duration::ZERO);
    for _ in 0..5 {
        c.with_timeout(PROMPT).get_data("/").unwrap();
    }
}

/// Closing a client whose connection is parked: the closeSession reply
/// is read (the close does not wait out its timeout) and the server ends
/// the session.
#[test]
fn closing_a_parked_client_is_answered_at_once() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    let other = connect(&server.connect_string(), SESSION_TIMEOUT);
    let base = base(&other, "close");
    let eph = format!("{base}/eph");
    c.create()
        .mode(CreateMode::Ephemeral)
        .for_path(&eph, b"")
        .unwrap();
    read_a_few_times(&c, "/");
    let started = Instant::now();
    c.close();
    let took = started.elapsed();
    // The close waits 1 s at most for its reply.
    assert!(
        took < Duration::from_millis(900),
        "close took {took:?}: its reply went unread"
    );
    wait_until(
        PROMPT,
        || other.exists(&eph).unwrap().is_none(),
        || "the closed session's ephemeral node stayed".to_string(),
    );
}

/// The session expired (taken over and closed elsewhere) while its
/// connection is parked: the server hangs up, and the client learns of
/// the expiry at once, then works on a new session.
#[test]
fn a_session_expired_while_parked_is_noticed_at_once() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&c, "/");
    let lost = c.metrics().sessions_lost;
    let expired_at = Instant::now();
    c.expire_session_for_testing().unwrap();
    wait_until(
        Duration::from_secs(5),
        || c.metrics().sessions_lost > lost,
        || format!("the expiry went unnoticed: {:?}", c.state_history()),
    );
    println!("noticed {:?} after the expiry", expired_at.elapsed());
    assert!(c.block_until_connected(Duration::from_secs(10)).unwrap());
    c.with_timeout(PROMPT).get_data("/").unwrap();
}

/// A server that goes silent (a partition) while the connection is parked:
/// the client's pings go unanswered and the silence bound (2/3 of a 2 s
/// session) drops the connection on time.
#[test]
fn a_server_gone_silent_under_a_parked_connection_is_noticed_on_time() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), Duration::from_secs(2));
    read_a_few_times(&c, "/");
    let suspended = c.metrics().suspensions;
    let paused_at = Instant::now();
    proxy.pause();
    wait_until(
        Duration::from_secs(4),
        || c.metrics().suspensions > suspended,
        || format!("the silence went unnoticed: {:?}", c.state_history()),
    );
    println!("noticed {:?} after the partition", paused_at.elapsed());
    proxy.resume();
    assert!(c.block_until_connected(Duration::from_secs(10)).unwrap());
    c.with_timeout(PROMPT).get_data("/").unwrap();
}

/// Eight threads call on one client at once, 500 calls each: plain reads
/// (which take the reader's part of a parked connection), cancellable
/// reads (which the engine reads for), writes, transactions and syncs,
/// and watches set and fired round after round. Every call must be
/// answered within 2 s, every watch heard within 2 s; and in whatever
/// state the threads leave the connection, the server hanging up then is
/// noticed at once.
#[test]
fn many_threads_calling_on_one_client_each_return_promptly() {
    const THREADS: usize = 8;
    const CALLS: usize = 500;
    const BOUND: Duration = Duration::from_secs(2);
    let _dog = Watchdog::new("many threads on one client", Duration::from_secs(120));
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), SESSION_TIMEOUT);
    let base = base(&c, "many");
    for t in 0..THREADS {
        c.create().for_path(&format!("{base}/{t}"), b"0").unwrap();
    }
    read_a_few_times(&c, "/");
    let before = c.metrics();
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let results: Vec<Result<Duration, String>> = thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (c, base, stop) = (&c, &base, &stop);
                s.spawn(move || {
                    let node = format!("{base}/{t}");
                    let token = CancelToken::new();
                    let handle = match t {
                        1 | 5 => c.with_cancel(Some(&token)),
                        _ => c.clone(),
                    };
                    let mut slowest = Duration::ZERO;
                    let (fired_tx, fired) = bounded(1);
                    for i in 0..CALLS {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let h = handle.with_timeout(Duration::from_secs(5));
                        let call_started = Instant::now();
                        let r: Result<(), Error> = match (t, i % 5) {
                            (3, 0) => {
                                let tx = fired_tx.clone();
                                h.get_data_watch(&node, move |e| {
                                    let _ = tx.send(e);
                                })
                                .map(drop)
                            }
                            (3, 1) => h.set_data(&node, i.to_string().as_bytes(), None).map(drop),
                            (3, 2) => match fired.recv_timeout(BOUND) {
                                Ok(_) => Ok(()),
                                Err(_) => {
                                    stop.store(true, Ordering::SeqCst);
                                    return Err(format!("thread 3, call {i}: watch never fired"));
                                }
                            },
                            (7, 0) => h.sync(&node),
                            (7, 1) => h
                                .transaction()
                                .set_data(&node, b"x")
                                .set_data(&node, b"y")
                                .commit()
                                .map(drop),
                            (7, 2) => h.multi_read().get_data(&node).execute().map(drop),
                            (_, 4) => h.set_data(&node, b"w", None).map(drop),
                            _ => h.get_data(&node).map(drop),
                        };
                        let took = call_started.elapsed();
                        slowest = slowest.max(took);
                        if let Err(e) = r {
                            stop.store(true, Ordering::SeqCst);
                            return Err(format!("thread {t}, call {i}: {e:?} after {took:?}"));
                        }
                        if took > BOUND {
                            stop.store(true, Ordering::SeqCst);
                            return Err(format!("thread {t}, call {i} took {took:?}"));
                        }
                    }
                    Ok(slowest)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let took = started.elapsed();
    let after = c.metrics();
    println!(
        "{} calls in {took:?}; slowest per thread: {results:?}",
        after.requests_sent - before.requests_sent,
    );
    for r in &results {
        if let Err(e) = r {
            panic!("{e}\n{:?}", c.state_history());
        }
    }
    assert_connection_kept(&c, &before, "the connection was dropped");
    assert_eq!(proxy.cut(), 1, "one connection to cut");
    wait_until(
        PROMPT,
        || c.metrics().suspensions > after.suspensions,
        || format!("the hang-up went unnoticed: {:?}", c.state_history()),
    );
}

/// A read-only server (scripted: every read fails with NoNode, so no watch
/// is left): calls read their own replies and park the connection, each
/// answered; the server hanging up the parked connection is noticed at
/// once.
#[test]
fn a_parked_read_only_connection_hears_the_server_hang_up() {
    let fake = FakeServer::start(Script::default().read_only()).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(fake.connect_string())
            .session_timeout(SESSION_TIMEOUT)
            .connection_timeout(Duration::from_secs(5))
            .can_be_read_only(true)
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 3)),
    );
    assert_eq!(c.state(), Some(ConnectionState::ReadOnly));
    for _ in 0..5 {
        let r = c.with_timeout(PROMPT).get_data("/missing");
        assert!(matches!(&r, Err(e) if e.is(ErrorCode::NoNode)), "{r:?}");
    }
    let suspended = c.metrics().suspensions;
    fake.cut();
    wait_until(
        PROMPT,
        || c.metrics().suspensions > suspended,
        || format!("the hang-up went unnoticed: {:?}", c.state_history()),
    );
    c.close();
}

/// A cancellable call (whose reply the engine must read) races a plain
/// call whose thread reads and then parks the connection: round after
/// round the two start together, the cancellable one a little later each
/// round, so that some of its requests wait in the inbox while the reader
/// decides to park. The engine, writing them to a parked connection, must
/// read their replies: each call is answered within 1 s.
#[test]
fn a_cancellable_call_racing_a_reader_that_parks_is_answered() {
    const ROUNDS: usize = 3000;
    let _dog = Watchdog::new(
        "cancellable calls racing a reader",
        Duration::from_secs(120),
    );
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&c, "/");
    let token = CancelToken::new();
    let cancellable = c.with_cancel(Some(&token));
    let barrier = std::sync::Barrier::new(2);
    let stop = AtomicBool::new(false);
    let mut failure = None;
    let mut slowest = Duration::ZERO;
    thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..ROUNDS {
                barrier.wait();
                let r = c.with_timeout(Duration::from_secs(2)).get_data("/");
                barrier.wait();
                if r.is_err() || stop.load(Ordering::SeqCst) {
                    stop.store(true, Ordering::SeqCst);
                    break;
                }
            }
        });
        for round in 0..ROUNDS {
            barrier.wait();
            let lag = Duration::from_micros((round as u64 * 37) % 300);
            let lagged = Instant::now();
            while lagged.elapsed() < lag {
                std::hint::spin_loop();
            }
            let started = Instant::now();
            let r = cancellable
                .with_timeout(Duration::from_secs(2))
                .get_data("/");
            let took = started.elapsed();
            slowest = slowest.max(took);
            if r.is_err() || took > Duration::from_secs(1) {
                failure = Some(format!("round {round}: {r:?} after {took:?}"));
                stop.store(true, Ordering::SeqCst);
            }
            barrier.wait();
            if stop.load(Ordering::SeqCst) {
                break;
            }
        }
    });
    if let Some(f) = failure {
        panic!("{f}\n{:?}", c.state_history());
    }
    assert!(!stop.load(Ordering::SeqCst), "the plain call failed");
    println!("slowest cancellable call {slowest:?}");
}

/// A client closed while its threads call on it, round after round, the
/// connection parking and being claimed between their calls: every call
/// ends (answered, or failed as closed) within 2 s of the close.
#[test]
fn a_close_racing_callers_on_a_parking_connection_ends_every_call() {
    const ROUNDS: u64 = 30;
    let _dog = Watchdog::new("closes racing callers", Duration::from_secs(120));
    let server = shared_server();
    for round in 0..ROUNDS {
        let c = connect(&server.connect_string(), SESSION_TIMEOUT);
        read_a_few_times(&c, "/");
        let started = AtomicUsize::new(0);
        let ended = thread::scope(|s| {
            let callers: Vec<_> = (0..3)
                .map(|t| {
                    let (c, started) = (&c, &started);
                    s.spawn(move || {
                        let token = CancelToken::new();
                        let h = match t {
                            2 => c.with_cancel(Some(&token)),
                            _ => c.clone(),
                        };
                        started.fetch_add(1, Ordering::SeqCst);
                        let mut last = Ok(());
                        for _ in 0..10_000 {
                            last = h
                                .with_timeout(Duration::from_secs(10))
                                .get_data("/")
                                .map(drop);
                            if last.is_err() {
                                break;
                            }
                        }
                        (last, Instant::now())
                    })
                })
                .collect();
            wait_until(
                Duration::from_secs(5),
                || started.load(Ordering::SeqCst) == 3,
                || "the callers never started".to_string(),
            );
            // A little later each round: the close meets the callers at
            // different points of their calls.
            let lag = Duration::from_micros(round * 97 % 2000);
            let lagged = Instant::now();
            while lagged.elapsed() < lag {
                std::hint::spin_loop();
            }
            let closed_at = Instant::now();
            c.close();
            callers
                .into_iter()
                .map(|h| {
                    let (last, at) = h.join().unwrap();
                    (last, at.saturating_duration_since(closed_at))
                })
                .collect::<Vec<_>>()
        });
        for (last, after) in ended {
            assert!(
                matches!(last, Err(Error::Closed)),
                "round {round}: the last call ended with {last:?}"
            );
            assert!(
                after < Duration::from_secs(2),
                "round {round}: a call ended {after:?} after the close"
            );
        }
    }
}

//! Adversarial review of the wire engine (one engine thread for every
//! session, a connect thread per session): closes at awkward moments,
//! stalled servers next to healthy ones, calls racing cuts, read-only
//! searches after their connection ended.
//!
//! Tests here count the process' `latchkey-*` threads, so they run one at
//! a time (`SERIAL`).

mod common;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use common::{call_within, shared_server, start_connected, unique, wait_until, Watchdog};
use latchkey_framework::{
    Client, ConnectionState, CreateMode, ExponentialBackoffRetry, RetryNTimes, TlsConfig,
};
use latchkey_test::fake_server::{AfterHandshake, FakeServer, Script};
use latchkey_test::{FaultProxy, TestCerts};

static SERIAL: Mutex<()> = Mutex::new(());

/// Logs to stderr when ENGINE_REVIEW_LOG is set (to diagnose a failure).
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        if r.target().starts_with("latchkey") {
            eprintln!(
                "{:?} [{}] {}: {}",
                Instant::now(),
                r.level(),
                r.target(),
                r.args()
            );
        }
    }
    fn flush(&self) {}
}

fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if std::env::var_os("ENGINE_REVIEW_THREADS").is_some() {
        let mut names: Vec<String> = thread_names()
            .into_iter()
            .filter(|n| n.starts_with("latchkey-"))
            .collect();
        names.sort();
        eprintln!(
            "{:?} starts with threads {names:?}",
            thread::current().name()
        );
    }
    if std::env::var_os("ENGINE_REVIEW_LOG").is_some() {
        static LOGGER: StderrLog = StderrLog;
        if log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(log::LevelFilter::Debug);
        }
    }
    guard
}

fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("read /proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect()
}

fn count_named(name: &str) -> usize {
    let short: String = name.chars().take(15).collect();
    thread_names().iter().filter(|n| **n == short).count()
}

/// A started client (TLS with `certs`' CA, if given; 120 s connection
/// timeout) whose server accepted its connection and then neither reads
/// nor writes, and the server's end of that connection.
fn connecting_to_a_silent_server(certs: Option<&TestCerts>) -> (Client, std::net::TcpStream) {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let (accepted_tx, accepted_rx) = crossbeam_channel::unbounded();
    let acceptor = thread::spawn(move || {
        if let Ok((s, _)) = silent.accept() {
            let _ = accepted_tx.send(s);
        }
    });
    let mut builder = Client::builder()
        .connect_string(addr.to_string())
        .session_timeout(Duration::from_secs(10))
        .connection_timeout(Duration::from_secs(120))
        .retry_policy(RetryNTimes::new(0, Duration::ZERO));
    if let Some(certs) = certs {
        builder = builder.tls(TlsConfig::new(certs.ca_file()));
    }
    let c = builder.build().unwrap();
    c.start().unwrap();
    let held = accepted_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the client never connected to the silent server");
    acceptor.join().unwrap();
    (c, held)
}

/// A close while the connect thread is in the TLS handshake with a server
/// that accepted the TCP connection and never answers must end that
/// thread: the client is closed, nothing will ever use the connection.
#[test]
fn close_during_a_tls_handshake_ends_the_connect_thread() {
    let _s = serial();
    let _dog = Watchdog::new("close_during_a_tls_handshake", Duration::from_secs(60));
    let certs = TestCerts::generate().expect("certs");
    let before = count_named("latchkey-connect");
    let (c, held) = connecting_to_a_silent_server(Some(&certs));
    let closing = c.clone();
    call_within("close", Duration::from_secs(10), move || closing.close());
    // The client's end of the handshake connection must close: read what
    // it sent (its ClientHello) until the end of the stream.
    let mut held = held;
    held.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = [0u8; 4096];
    let closed = loop {
        match std::io::Read::read(&mut held, &mut buf) {
            Ok(0) => break true,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break true, // reset
        }
        if Instant::now() >= deadline {
            break false;
        }
    };
    let connect_threads = count_named("latchkey-connect");
    assert!(
        closed,
        "5 s after close() the client still holds its TLS handshake \
         connection open ({connect_threads} latchkey-connect threads, {before} \
         before the client): its connect thread waits out the 120 s connection timeout"
    );
}

/// A close during the plain-TCP session handshake with a server that
/// accepted the connection and never answers: the connect thread ends at
/// once (the handshake socket is shut down).
#[test]
fn close_during_a_plain_handshake_ends_the_connect_thread() {
    let _s = serial();
    let _dog = Watchdog::new("close_during_a_plain_handshake", Duration::from_secs(60));
    let before = count_named("latchkey-connect");
    let (c, held) = connecting_to_a_silent_server(None);
    let closing = c.clone();
    call_within("close", Duration::from_secs(10), move || closing.close());
    wait_until(
        Duration::from_secs(5),
        || count_named("latchkey-connect") <= before,
        || format!("threads: {:?}", thread_names()),
    );
    drop(held);
}

/// A session whose server stalls (reads nothing) with a large request stuck
/// in its write buffer must not delay the calls of a session on a healthy
/// server: both are served by the same engine thread.
#[test]
fn a_stalled_session_does_not_delay_another() {
    let _s = serial();
    let _dog = Watchdog::new("a_stalled_session", Duration::from_secs(120));
    let fake = FakeServer::start(Script::default().after_handshake(AfterHandshake::Stall)).unwrap();
    let stalled = start_connected(
        Client::builder()
            .connect_string(fake.connect_string())
            .session_timeout(Duration::from_secs(30))
            .connection_timeout(Duration::from_secs(5))
            .max_request_size(8 << 20)
            .retry_policy(RetryNTimes::new(0, Duration::ZERO)),
    );
    let healthy = common::connect(&shared_server().connect_string(), Duration::from_secs(10));
    let path = unique("/engine-review-stall");
    healthy.create().for_path(&path, b"").unwrap();
    // Many large writes that the stalled server never reads.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let c = stalled.clone();
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                let big = vec![7u8; 4 << 20];
                while !stop.load(Ordering::Acquire) {
                    let _ = c
                        .with_timeout(Duration::from_secs(20))
                        .set_data("/x", &big, None);
                }
            })
        })
        .collect();
    // Give the writers a moment to fill the socket buffers. The engine
    // takes a request from the outbox only once the socket has taken the
    // one before: one 4 MiB write is stuck, the others wait unsent.
    wait_until(
        Duration::from_secs(10),
        || stalled.metrics().requests_sent >= 1,
        || "the stalled session sent nothing".into(),
    );
    let mut worst = Duration::ZERO;
    for i in 0..200 {
        let t = Instant::now();
        healthy
            .set_data(&path, &i.to_string().into_bytes(), None)
            .unwrap();
        worst = worst.max(t.elapsed());
    }
    stop.store(true, Ordering::Release);
    let stalled2 = stalled.clone();
    call_within("close stalled", Duration::from_secs(10), move || {
        stalled2.close()
    });
    for w in writers {
        w.join().unwrap();
    }
    healthy.close();
    assert!(
        worst < Duration::from_secs(1),
        "a healthy session's call took {worst:?} while another stalled"
    );
}

/// Calls racing cuts of the connection: every call returns within its
/// deadline, and with no retries a create is never applied twice (nodes
/// created never exceed the creates attempted, never fall below the
/// successes).
#[test]
fn calls_racing_cuts_each_get_one_answer() {
    let _s = serial();
    let _dog = Watchdog::new("calls_racing_cuts", Duration::from_secs(180));
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(20))
            .connection_timeout(Duration::from_secs(5))
            .retry_policy(RetryNTimes::new(0, Duration::ZERO)),
    );
    let observer = common::connect(&server.connect_string(), Duration::from_secs(20));
    let base = unique("/engine-review-race");
    observer.create().for_path(&base, b"").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let attempted = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicUsize::new(0));
    let last_error = Arc::new(Mutex::new(String::new()));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let c = c.clone();
            let (stop, attempted, ok) =
                (Arc::clone(&stop), Arc::clone(&attempted), Arc::clone(&ok));
            let last_error = Arc::clone(&last_error);
            let prefix = format!("{base}/n-");
            thread::spawn(move || {
                let mut slowest = Duration::ZERO;
                while !stop.load(Ordering::Acquire) {
                    attempted.fetch_add(1, Ordering::AcqRel);
                    let t = Instant::now();
                    match c
                        .with_timeout(Duration::from_secs(10))
                        .create()
                        .mode(CreateMode::PersistentSequential)
                        .for_path(&prefix, b"")
                    {
                        Ok(_) => {
                            ok.fetch_add(1, Ordering::AcqRel);
                        }
                        Err(e) => *last_error.lock().unwrap() = format!("{e:?}"),
                    }
                    slowest = slowest.max(t.elapsed());
                }
                slowest
            })
        })
        .collect();
    for _ in 0..30 {
        let before = ok.load(Ordering::Acquire);
        wait_until(
            Duration::from_secs(15),
            || ok.load(Ordering::Acquire) > before,
            || {
                format!(
                    "no create succeeded after a cut ({} ok of {} attempted, last error {}): {:?}\nserver log:\n{}",
                    ok.load(Ordering::Acquire),
                    attempted.load(Ordering::Acquire),
                    last_error.lock().unwrap(),
                    c.state_history(),
                    common::log_tail(&server.log_path(), 40)
                )
            },
        );
        proxy.cut();
    }
    stop.store(true, Ordering::Release);
    let slowest = workers
        .into_iter()
        .map(|w| w.join().unwrap())
        .max()
        .unwrap();
    let nodes = observer.get_children(&base).unwrap().len();
    let (attempted, ok) = (
        attempted.load(Ordering::Acquire),
        ok.load(Ordering::Acquire),
    );
    c.close();
    observer.close();
    assert!(slowest < Duration::from_secs(11), "a call took {slowest:?}");
    assert!(
        nodes >= ok && nodes <= attempted,
        "{nodes} nodes for {ok} successful of {attempted} attempted creates"
    );
}

/// Connected read-only: the read-write search thread ends with the
/// connection it searched for, and with the client's close.
#[test]
fn read_only_search_ends_with_its_connection() {
    let _s = serial();
    let _dog = Watchdog::new("read_only_search", Duration::from_secs(60));
    let mut script = Script::default().read_only();
    script.isro = "ro";
    let fake = FakeServer::start(script).unwrap();
    let before = count_named("latchkey-rw-probe");
    let c = start_connected(
        Client::builder()
            .connect_string(fake.connect_string())
            .session_timeout(Duration::from_secs(3))
            .connection_timeout(Duration::from_secs(2))
            .can_be_read_only(true)
            .retry_policy(RetryNTimes::new(0, Duration::ZERO)),
    );
    let states = c.listen();
    wait_until(
        Duration::from_secs(5),
        || count_named("latchkey-rw-probe") > before,
        || format!("no read-write search: {:?}", thread_names()),
    );
    for _ in 0..10 {
        fake.cut();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match states.recv_deadline(deadline) {
                Ok(ConnectionState::Reconnected) | Ok(ConnectionState::ReadOnly) => break,
                Ok(_) => {}
                Err(_) => panic!("no reconnect: {:?}", c.state_history()),
            }
        }
    }
    // One connection, one search (give a probe in progress its timeout).
    wait_until(
        Duration::from_secs(5),
        || count_named("latchkey-rw-probe") - before <= 1,
        || {
            format!(
                "searches left behind by ended connections: {:?}",
                thread_names()
            )
        },
    );
    let closing = c.clone();
    call_within("close", Duration::from_secs(10), move || closing.close());
    wait_until(
        Duration::from_secs(5),
        || count_named("latchkey-rw-probe") <= before,
        || format!("a search outlived its closed client: {:?}", thread_names()),
    );
}

/// Closes from several threads at once while calls are pending: every
/// call and every close returns, and the listener hears the end.
#[test]
fn concurrent_closes_during_pending_calls() {
    let _s = serial();
    let _dog = Watchdog::new("concurrent_closes", Duration::from_secs(120));
    let server = shared_server();
    for round in 0..10 {
        let proxy = FaultProxy::start(server.addr()).unwrap();
        let c = start_connected(
            Client::builder()
                .connect_string(proxy.connect_string())
                .session_timeout(Duration::from_secs(10))
                .connection_timeout(Duration::from_secs(2))
                .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(10), 3)),
        );
        let states = c.listen();
        if round % 2 == 0 {
            proxy.pause_replies();
        }
        let path = unique("/engine-review-close");
        let callers: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                let path = path.clone();
                thread::spawn(move || {
                    let _ = c.exists(&path);
                    let _ = c.get_data(&path);
                })
            })
            .collect();
        let closers: Vec<_> = (0..3)
            .map(|_| {
                let c = c.clone();
                thread::spawn(move || c.close())
            })
            .collect();
        let t = Instant::now();
        for h in closers.into_iter().chain(callers) {
            while !h.is_finished() {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "round {round}: a call or close hangs: {:?}",
                    c.state_history()
                );
                thread::sleep(Duration::from_millis(10));
            }
            h.join().unwrap();
        }
        proxy.resume();
        drop(states);
        assert_eq!(c.state(), None, "round {round}: state after close");
        assert!(c.is_closed());
    }
}

/// A waker that panics, and one that blocks a little, on the engine
/// thread: other sessions' calls keep being answered.
#[test]
fn a_panicking_waker_leaves_the_engine_serving() {
    let _s = serial();
    let _dog = Watchdog::new("a_panicking_waker", Duration::from_secs(60));
    let server = shared_server();
    let a = common::connect(&server.connect_string(), Duration::from_secs(10));
    let b = common::connect(&server.connect_string(), Duration::from_secs(10));
    let path = unique("/engine-review-waker");
    a.create().for_path(&path, b"").unwrap();
    for _ in 0..20 {
        a.get_data_watch_waker(&path, |_| panic!("a waker panics"))
            .unwrap();
    }
    a.set_data(&path, b"1", None).unwrap();
    let t = Instant::now();
    for _ in 0..50 {
        b.exists(&path).unwrap();
        a.exists(&path).unwrap();
    }
    assert!(t.elapsed() < Duration::from_secs(10));
    // A waker that fires after its session closed.
    let fired = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&fired);
    a.get_data_watch_waker(&path, move |_| f.store(true, Ordering::Release))
        .unwrap();
    a.close();
    b.set_data(&path, b"2", None).unwrap();
    b.exists(&path).unwrap();
    b.close();
}

/// Many sessions connecting, calling and closing at once on the one
/// engine: every call returns.
#[test]
fn many_sessions_at_once() {
    let _s = serial();
    let _dog = Watchdog::new("many_sessions_at_once", Duration::from_secs(240));
    const N: usize = 40; // the server allows 60 connections per address
    let server = shared_server().connect_string();
    let path = unique("/engine-review-many");
    let setup = common::connect(&server, Duration::from_secs(10));
    setup.create().for_path(&path, b"").unwrap();
    let threads: Vec<_> = (0..N)
        .map(|i| {
            let server = server.clone();
            let path = path.clone();
            thread::spawn(move || {
                let c = common::connect(&server, Duration::from_secs(10));
                let c2 = c.with_timeout(Duration::from_secs(20));
                for j in 0..20 {
                    c2.create()
                        .mode(CreateMode::Ephemeral)
                        .for_path(&format!("{path}/{i}-{j}"), b"")
                        .unwrap();
                }
                c.close();
            })
        })
        .collect();
    let t = Instant::now();
    for h in threads {
        h.join().unwrap();
    }
    let took = t.elapsed();
    wait_until(
        Duration::from_secs(10),
        || setup.get_children(&path).unwrap().is_empty(),
        || "ephemerals of closed sessions remain".into(),
    );
    setup.close();
    assert!(took < Duration::from_secs(120), "took {took:?}");
}

/// The client's threads other than the engine: every `latchkey-*` one
/// but the test proxy's (`latchkey-proxy-conn-*`).
fn client_threads() -> Vec<String> {
    thread_names()
        .into_iter()
        .filter(|n| {
            n.starts_with("latchkey-") && n != "latchkey-engine" && !n.starts_with("latchkey-proxy")
        })
        .collect()
}

/// Watchers that call back into their client (re-arming their watch), one
/// that closes its own client from the watcher thread, and wakers: every
/// close returns and no client thread outlives its client.
#[test]
fn watchers_calling_back_and_closing_leave_no_thread() {
    let _s = serial();
    let _dog = Watchdog::new("watchers_calling_back", Duration::from_secs(120));
    let server = shared_server().connect_string();
    let before = client_threads().len();
    let writer = common::connect(&server, Duration::from_secs(10));
    let base = unique("/engine-review-watch");
    writer.create().for_path(&base, b"").unwrap();
    let mut clients = Vec::new();
    let (closed_tx, closed_rx) = crossbeam_channel::unbounded();
    for i in 0..8 {
        let c = common::connect(&server, Duration::from_secs(10));
        let path = format!("{base}/{i}");
        writer.create().for_path(&path, b"").unwrap();
        // Re-arms itself three times, then closes its own client;
        // `armed` counts the arms in place.
        fn arm(
            c: Client,
            path: String,
            left: u32,
            closed: crossbeam_channel::Sender<u32>,
            armed: Arc<AtomicUsize>,
        ) {
            let again = c.clone();
            let p = path.clone();
            let counted = Arc::clone(&armed);
            let r = c.get_data_watch(&path, move |_| {
                if left == 0 {
                    again.close();
                    let _ = closed.send(0);
                } else {
                    arm(again, p, left - 1, closed, counted);
                }
            });
            r.expect("arm a watch");
            armed.fetch_add(1, Ordering::AcqRel);
        }
        let armed = Arc::new(AtomicUsize::new(0));
        arm(
            c.clone(),
            path.clone(),
            3,
            closed_tx.clone(),
            Arc::clone(&armed),
        );
        let woke = Arc::new(AtomicUsize::new(0));
        let w = Arc::clone(&woke);
        c.get_data_watch_waker(&path, move |_| {
            w.fetch_add(1, Ordering::AcqRel);
        })
        .unwrap();
        clients.push((c, path, armed));
    }
    for round in 0..4 {
        for (_, path, _) in &clients {
            writer
                .set_data(path, format!("{round}").as_bytes(), None)
                .unwrap();
        }
        // Each watcher re-arms before the next change (a change between
        // two arms is not seen): wait for the arm that follows this
        // round's event. (Counting the client's watches instead passed
        // while the event was still on its way, the old watch still
        // counted: then the next change came before the new arm, and
        // its watcher never fired.)
        if round < 3 {
            wait_until(
                Duration::from_secs(10),
                || {
                    clients
                        .iter()
                        .all(|(_, _, armed)| armed.load(Ordering::Acquire) >= round + 2)
                },
                || "watches not re-armed".into(),
            );
        }
    }
    for _ in 0..clients.len() {
        closed_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("a watcher's close of its own client did not return");
    }
    for (c, _, _) in &clients {
        assert!(c.is_closed());
    }
    drop(clients);
    writer.close();
    wait_until(
        Duration::from_secs(10),
        || client_threads().len() <= before,
        || {
            format!(
                "threads left after every client closed: {:?}",
                client_threads()
            )
        },
    );
}

/// A zero timeout: the call returns at once with a timeout, and a watch
/// it carried is never registered (its late reply is dropped).
#[test]
fn a_zero_timeout_leaves_no_watch() {
    let _s = serial();
    let _dog = Watchdog::new("a_zero_timeout", Duration::from_secs(60));
    let c = common::connect(&shared_server().connect_string(), Duration::from_secs(10));
    let path = unique("/engine-review-zero");
    c.create().for_path(&path, b"").unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    for _ in 0..200 {
        let f = Arc::clone(&fired);
        let t = Instant::now();
        let r = c
            .with_timeout(Duration::ZERO)
            .get_data_watch(&path, move |_| {
                f.fetch_add(1, Ordering::AcqRel);
            });
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "took {:?}",
            t.elapsed()
        );
        assert!(r.is_err(), "a zero timeout succeeded: {r:?}");
    }
    // Every late reply has been read once a later call's reply is in.
    c.exists(&path).unwrap();
    assert_eq!(c.pending_watches(), 0, "watches from timed-out calls");
    c.set_data(&path, b"x", None).unwrap();
    c.exists(&path).unwrap();
    c.close();
    assert_eq!(fired.load(Ordering::Acquire), 0);
}

/// A reply larger than the client accepts: the call fails in bounded
/// time (its connection is dropped), and another session is unaffected.
#[test]
fn an_oversize_reply_fails_only_its_call() {
    let _s = serial();
    let _dog = Watchdog::new("an_oversize_reply", Duration::from_secs(120));
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let writer = common::connect(&server.connect_string(), Duration::from_secs(10));
    let path = unique("/engine-review-big");
    writer
        .create()
        .for_path(&path, &vec![1u8; 900_000])
        .unwrap();
    let small = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(10))
            .connection_timeout(Duration::from_secs(5))
            .max_reply_size(64 * 1024)
            .retry_policy(RetryNTimes::new(3, Duration::from_millis(10))),
    );
    let s2 = small.clone();
    let p2 = path.clone();
    let r = call_within("oversize get_data", Duration::from_secs(30), move || {
        s2.get_data(&p2)
    });
    assert!(r.is_err(), "{r:?}");
    let accepted = proxy.accepted_count();
    assert!(accepted <= 6, "{accepted} connections for one call");
    // The same session still answers small replies.
    let s3 = small.clone();
    let p3 = path.clone();
    call_within(
        "exists after oversize",
        Duration::from_secs(30),
        move || s3.exists(&p3).unwrap(),
    );
    writer.exists(&path).unwrap();
    small.close();
    writer.close();
}

/// 200 sessions in one process connecting, calling and closing at once,
/// beside one whose server stalls with a large write stuck: every call
/// returns and no session waits on another.
#[test]
fn two_hundred_sessions_beside_a_stalled_one() {
    let _s = serial();
    let _dog = Watchdog::new("two_hundred_sessions", Duration::from_secs(300));
    const N: usize = 200;
    let server = shared_server().connect_string();
    let before = client_threads().len();
    let fake = FakeServer::start(Script::default().after_handshake(AfterHandshake::Stall)).unwrap();
    let stalled = start_connected(
        Client::builder()
            .connect_string(fake.connect_string())
            .session_timeout(Duration::from_secs(60))
            .connection_timeout(Duration::from_secs(5))
            .max_request_size(8 << 20)
            .retry_policy(RetryNTimes::new(0, Duration::ZERO)),
    );
    let st = stalled.clone();
    let stuck = thread::spawn(move || {
        let _ = st
            .with_timeout(Duration::from_secs(120))
            .set_data("/x", &vec![0u8; 6 << 20], None);
    });
    let path = unique("/engine-review-200");
    let setup = common::connect(&server, Duration::from_secs(10));
    setup.create().for_path(&path, b"").unwrap();
    let slowest = Arc::new(Mutex::new(Duration::ZERO));
    let threads: Vec<_> = (0..N)
        .map(|i| {
            let (server, path, slowest) = (server.clone(), path.clone(), Arc::clone(&slowest));
            thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let c = start_connected(
                        Client::builder()
                            .connect_string(&server)
                            .session_timeout(Duration::from_secs(30))
                            .connection_timeout(Duration::from_secs(30))
                            .retry_policy(RetryNTimes::new(0, Duration::ZERO)),
                    );
                    let me = format!("{path}/{i}");
                    for j in 0..10 {
                        let t = Instant::now();
                        let r = c
                            .with_timeout(Duration::from_secs(60))
                            .create()
                            .mode(CreateMode::Ephemeral)
                            .for_path(&format!("{me}-{j}"), b"");
                        let took = t.elapsed();
                        r.unwrap_or_else(|e| panic!("session {i} call {j}: {e:?}"));
                        let mut s = slowest.lock().unwrap();
                        *s = (*s).max(took);
                    }
                    c.close();
                })
                .unwrap()
        })
        .collect();
    for h in threads {
        h.join().unwrap();
    }
    let slowest = *slowest.lock().unwrap();
    let left = setup.get_children(&path).unwrap().len();
    let st = stalled.clone();
    call_within(
        "close the stalled session",
        Duration::from_secs(10),
        move || st.close(),
    );
    stuck.join().unwrap();
    setup.close();
    assert_eq!(left, 0, "ephemerals of closed sessions remain");
    assert!(
        slowest < Duration::from_secs(10),
        "slowest call {slowest:?}"
    );
    wait_until(
        Duration::from_secs(10),
        || client_threads().len() <= before,
        || format!("threads left: {:?}", client_threads()),
    );
}

/// Thousands of watches re-armed (SetWatches) on a reconnect while calls
/// are queued: every call returns, and a re-armed watch still fires.
#[test]
fn thousands_of_watches_rearmed_while_calls_queue() {
    let _s = serial();
    let _dog = Watchdog::new("thousands_of_watches", Duration::from_secs(300));
    const W: usize = 3000;
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(20))
            .connection_timeout(Duration::from_secs(5))
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(20), 20)),
    );
    let writer = common::connect(&server.connect_string(), Duration::from_secs(20));
    let base = unique("/engine-review-watches");
    writer.create().for_path(&base, b"").unwrap();
    let fired = Arc::new(Mutex::new(std::collections::HashSet::new()));
    // Exists watches on missing nodes, with long names (large SetWatches).
    let pad = "p".repeat(200);
    for i in 0..W {
        let f = Arc::clone(&fired);
        let p = format!("{base}/{pad}-{i}");
        assert!(c
            .exists_watch(&p, move |e| {
                f.lock().unwrap().insert(e.path.clone());
            })
            .unwrap()
            .is_none());
    }
    assert!(c.pending_watches() >= W, "{} watches", c.pending_watches());
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|k| {
            let (c, stop, base) = (c.clone(), Arc::clone(&stop), base.clone());
            thread::spawn(move || {
                let mut slowest = Duration::ZERO;
                let mut n = 0;
                while !stop.load(Ordering::Acquire) {
                    let t = Instant::now();
                    let _ = c
                        .with_timeout(Duration::from_secs(15))
                        .exists(&format!("{base}/w{k}-{n}"));
                    slowest = slowest.max(t.elapsed());
                    n += 1;
                }
                slowest
            })
        })
        .collect();
    for _ in 0..5 {
        let reconnects = c.metrics().reconnects;
        proxy.cut();
        wait_until(
            Duration::from_secs(20),
            || c.metrics().reconnects > reconnects,
            || format!("no reconnect: {:?}", c.state_history()),
        );
    }
    stop.store(true, Ordering::Release);
    let slowest = workers
        .into_iter()
        .map(|w| w.join().unwrap())
        .max()
        .unwrap();
    assert!(slowest < Duration::from_secs(16), "a call took {slowest:?}");
    assert!(
        c.pending_watches() >= W,
        "{} watches after reconnects",
        c.pending_watches()
    );
    // Re-armed on the server: creating nodes fires them.
    let want: Vec<String> = (0..W)
        .step_by(W / 30)
        .map(|i| format!("{base}/{pad}-{i}"))
        .collect();
    for p in &want {
        writer.create().for_path(p, b"").unwrap();
    }
    wait_until(
        Duration::from_secs(20),
        || want.iter().all(|p| fired.lock().unwrap().contains(p)),
        || {
            let f = fired.lock().unwrap();
            format!(
                "watches that did not fire: {:?}",
                want.iter().filter(|p| !f.contains(*p)).count()
            )
        },
    );
    c.close();
    writer.close();
}

/// A waker holding the last handle on its client (the application let go
/// of every other one without closing it). The waker itself returns at
/// once, as it must; dropping it after it ran drops the client, which
/// closes it. That close must not run on (and stall) the engine thread
/// every session shares: another session's calls stay fast.
#[test]
fn a_waker_dropping_the_last_client_handle_does_not_stall_the_engine() {
    let _s = serial();
    let _dog = Watchdog::new("a_waker_dropping_the_last_handle", Duration::from_secs(60));
    let server = shared_server().connect_string();
    let other = common::connect(&server, Duration::from_secs(10));
    let path = unique("/engine-review-last-handle");
    other.create().for_path(&path, b"").unwrap();
    let owner = common::connect(&server, Duration::from_secs(10));
    let held = owner.clone();
    let (woke_tx, woke_rx) = crossbeam_channel::bounded(1);
    owner
        .get_data_watch_waker(&path, move |_| {
            let _keep = &held; // the closure owns the handle
            let _ = woke_tx.send(());
        })
        .unwrap();
    drop(owner); // the waker's handle is the last one now
                 // Another session keeps calling while the waker runs and is dropped.
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let caller = {
        let (other, path) = (other.clone(), path.clone());
        let (stop, calls) = (Arc::clone(&stop), Arc::clone(&calls));
        thread::spawn(move || {
            let mut slowest = Duration::ZERO;
            while !stop.load(Ordering::Acquire) {
                let t = Instant::now();
                other.exists(&path).unwrap();
                slowest = slowest.max(t.elapsed());
                calls.fetch_add(1, Ordering::AcqRel);
            }
            slowest
        })
    };
    let _stop = common::StopOnDrop(&stop);
    other.set_data(&path, b"x", None).unwrap();
    woke_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the waker never ran");
    // Some calls of the other session after the waker ran.
    let after = calls.load(Ordering::Acquire);
    wait_until(
        Duration::from_secs(10),
        || calls.load(Ordering::Acquire) >= after + 20,
        || "the other session's calls stopped".into(),
    );
    stop.store(true, Ordering::Release);
    let slowest = caller.join().unwrap();
    other.close();
    assert!(
        slowest < Duration::from_millis(500),
        "another session's call took {slowest:?} while a waker's client was \
         dropped (and closed) on the engine thread"
    );
}

/// A close while the connect thread waits between attempts (the server
/// refuses): how long the thread outlives the close (bounded by the
/// back-off, at most about 1.5 s).
#[test]
fn close_during_the_reconnect_back_off() {
    let _s = serial();
    let _dog = Watchdog::new("close_during_the_back_off", Duration::from_secs(60));
    let fake = FakeServer::start(Script::default().refuse(true)).unwrap();
    let before = count_named("latchkey-connect");
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let c = Client::builder()
            .connect_string(fake.connect_string())
            .session_timeout(Duration::from_secs(10))
            .connection_timeout(Duration::from_secs(2))
            .retry_policy(RetryNTimes::new(0, Duration::ZERO))
            .build()
            .unwrap();
        c.start().unwrap();
        // Let it fail a few rounds so the back-off has grown.
        let seen = fake.seen().connections;
        wait_until(
            Duration::from_secs(20),
            || fake.seen().connections >= seen + 4,
            || "no connection attempts".into(),
        );
        c.close();
        let t = Instant::now();
        wait_until(
            Duration::from_secs(5),
            || count_named("latchkey-connect") <= before,
            || format!("threads: {:?}", thread_names()),
        );
        worst = worst.max(t.elapsed());
    }
    eprintln!("a connect thread outlived its client's close by up to {worst:?}");
}

/// Many threads calling on one session (one wake per batch): no call
/// waits for a wake that never comes; then the session expires under
/// them and every call still returns.
#[test]
fn many_callers_on_one_session_through_an_expiry() {
    let _s = serial();
    let _dog = Watchdog::new("many_callers_on_one_session", Duration::from_secs(180));
    let c = common::connect(&shared_server().connect_string(), Duration::from_secs(6));
    let path = unique("/engine-review-callers");
    c.create().for_path(&path, b"").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (c, path) = (c.clone(), path.clone());
            let (stop, calls) = (Arc::clone(&stop), Arc::clone(&calls));
            thread::spawn(move || {
                let mut slowest = Duration::ZERO;
                let mut failed = 0;
                while !stop.load(Ordering::Acquire) {
                    let t = Instant::now();
                    if c.with_timeout(Duration::from_secs(20))
                        .exists(&path)
                        .is_err()
                    {
                        failed += 1;
                    }
                    slowest = slowest.max(t.elapsed());
                    calls.fetch_add(1, Ordering::AcqRel);
                }
                (slowest, failed)
            })
        })
        .collect();
    let _stop = common::StopOnDrop(&stop);
    wait_until(
        Duration::from_secs(60),
        || calls.load(Ordering::Acquire) >= 20_000,
        || format!("{} calls", calls.load(Ordering::Acquire)),
    );
    let sessions = c.metrics().sessions_started;
    c.expire_session_for_testing().unwrap();
    wait_until(
        Duration::from_secs(30),
        || c.metrics().sessions_started > sessions,
        || format!("no new session: {:?}", c.state_history()),
    );
    let now = calls.load(Ordering::Acquire);
    wait_until(
        Duration::from_secs(30),
        || calls.load(Ordering::Acquire) >= now + 2_000,
        || format!("calls stopped after the expiry: {:?}", c.state_history()),
    );
    stop.store(true, Ordering::Release);
    for w in workers {
        let (slowest, _failed) = w.join().unwrap();
        assert!(slowest < Duration::from_secs(20), "a call took {slowest:?}");
    }
    c.close();
}

/// TLS with `Duration::MAX` for the session and connection timeouts:
/// connects, carries a request near the size limit both ways, survives a
/// cut, answers a call with a deadline during a blackhole by its deadline,
/// and leaves no thread after close.
#[test]
fn tls_with_unbounded_timeouts() {
    let _s = serial();
    let _dog = Watchdog::new("tls_with_unbounded_timeouts", Duration::from_secs(240));
    let certs = TestCerts::generate().unwrap();
    let server = latchkey_test::TestingServer::start_with(
        latchkey_test::ServerConfig::default().tls(&certs, latchkey_test::ClientAuth::None),
    )
    .expect("start a TLS ZooKeeper");
    let secure: std::net::SocketAddr = server
        .secure_connect_string()
        .unwrap()
        .parse()
        .expect("an address");
    let proxy = FaultProxy::start(secure).unwrap();
    let before = client_threads().len();
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::MAX)
            .connection_timeout(Duration::MAX)
            .tls(TlsConfig::new(certs.ca_file()))
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(20), 10)),
    );
    let path = "/engine-review-tls";
    let big = vec![9u8; 1_000_000];
    c.create().for_path(path, &big).unwrap();
    assert_eq!(c.get_data(path).unwrap().0.len(), big.len());
    let reconnects = c.metrics().reconnects;
    proxy.cut();
    wait_until(
        Duration::from_secs(30),
        || c.metrics().reconnects > reconnects,
        || format!("no reconnect: {:?}", c.state_history()),
    );
    assert_eq!(c.get_data(path).unwrap().0.len(), big.len());
    proxy.pause();
    let t = Instant::now();
    let r = c.with_timeout(Duration::from_secs(2)).get_data(path);
    assert!(r.is_err());
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "took {:?}",
        t.elapsed()
    );
    proxy.resume();
    assert_eq!(c.get_data(path).unwrap().0.len(), big.len());
    let closing = c.clone();
    call_within("close", Duration::from_secs(10), move || closing.close());
    wait_until(
        Duration::from_secs(10),
        || client_threads().len() <= before,
        || format!("threads left: {:?}", client_threads()),
    );
}

/// A client of `server`, started `micros` ago: spinning that long spreads
/// a close over the moments of a connect (jitter, not synchronisation).
fn started_for(server: &latchkey_test::TestingServer, micros: u64) -> (Client, Duration) {
    let c = Client::builder()
        .connect_string(server.connect_string())
        .session_timeout(Duration::from_secs(10))
        .connection_timeout(Duration::from_secs(5))
        .retry_policy(RetryNTimes::new(0, Duration::ZERO))
        .build()
        .unwrap();
    c.start().unwrap();
    let spin = Instant::now();
    let wait = Duration::from_micros(micros);
    while spin.elapsed() < wait {
        std::hint::spin_loop();
    }
    (c, wait)
}

/// Closes (and drops without close) at every moment of a connect: before
/// the connect thread gets going, during the handshake, as the connection
/// is handed to the engine, just after; from one thread or several. Every
/// close returns promptly and no client thread is left.
#[test]
fn close_at_every_moment_of_a_connect() {
    let _s = serial();
    let _dog = Watchdog::new("close_at_every_moment", Duration::from_secs(240));
    let server = shared_server();
    let before = client_threads().len();
    let mut slowest = Duration::ZERO;
    for i in 0..150u64 {
        let (c, _) = started_for(server, (i * 37) % 3000);
        let t = Instant::now();
        match i % 3 {
            0 => c.close(),
            1 => drop(c),
            _ => {
                let hs: Vec<_> = (0..3)
                    .map(|_| {
                        let c = c.clone();
                        thread::spawn(move || c.close())
                    })
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
                assert_eq!(c.state(), None);
            }
        }
        slowest = slowest.max(t.elapsed());
    }
    assert!(slowest < Duration::from_secs(2), "a close took {slowest:?}");
    wait_until(
        Duration::from_secs(10),
        || client_threads().len() <= before,
        || format!("threads left: {:?}", client_threads()),
    );
}

/// Connected read-only (the only read-write server refuses at first), the
/// search finds the read-write server once it is back and the session
/// moves there: calls running across the move all return, a watch set
/// while read-only still fires on the read-write server, and the search
/// thread is gone.
#[test]
fn read_only_moves_to_a_read_write_server() {
    let _s = serial();
    let _dog = Watchdog::new("read_only_moves", Duration::from_secs(120));
    let server = shared_server();
    // The fake's replies carry zxid 1: the real server must be past it, or
    // it refuses the session of a client that has seen a later zxid.
    let writer = common::connect(&server.connect_string(), Duration::from_secs(10));
    let path = unique("/engine-review-ro");
    writer
        .create()
        .for_path(&format!("{path}-zxid"), b"")
        .unwrap();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    proxy.set_refuse(true);
    let mut script = Script::default().read_only();
    script.isro = "ro";
    // Exists on a missing node: NoNode, with an exists watch left.
    script.default_reply = latchkey_test::fake_server::Reply::Error(-101);
    let fake = FakeServer::start(script).unwrap();
    let before = count_named("latchkey-rw-probe");
    let c = start_connected(
        Client::builder()
            .connect_string(format!(
                "{},{}",
                fake.connect_string(),
                proxy.connect_string()
            ))
            .session_timeout(Duration::from_secs(6))
            .connection_timeout(Duration::from_secs(2))
            .can_be_read_only(true)
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(20), 20)),
    );
    assert_eq!(
        c.state(),
        Some(ConnectionState::ReadOnly),
        "{:?}",
        c.state_history()
    );
    let fired = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&fired);
    assert!(c
        .exists_watch(&path, move |_| f.store(true, Ordering::Release))
        .unwrap()
        .is_none());
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (c, stop, calls) = (c.clone(), Arc::clone(&stop), Arc::clone(&calls));
            thread::spawn(move || {
                let mut slowest = Duration::ZERO;
                while !stop.load(Ordering::Acquire) {
                    let t = Instant::now();
                    let _ = c.with_timeout(Duration::from_secs(10)).exists("/");
                    slowest = slowest.max(t.elapsed());
                    calls.fetch_add(1, Ordering::AcqRel);
                }
                slowest
            })
        })
        .collect();
    let _stop = common::StopOnDrop(&stop);
    proxy.set_refuse(false);
    wait_until(
        Duration::from_secs(8),
        || {
            c.state_history().iter().any(|(_, s)| {
                matches!(s, ConnectionState::Reconnected | ConnectionState::Connected)
            }) && c.state().is_some_and(|s| s != ConnectionState::ReadOnly)
        },
        || {
            format!(
                "never moved to the read-write server: {:?}\nserver log:\n{}",
                c.state_history(),
                common::log_tail(&server.log_path(), 8)
            )
        },
    );
    let now = calls.load(Ordering::Acquire);
    wait_until(
        Duration::from_secs(20),
        || calls.load(Ordering::Acquire) > now + 100,
        || format!("calls stopped after the move: {:?}", c.state_history()),
    );
    stop.store(true, Ordering::Release);
    for w in workers {
        let slowest = w.join().unwrap();
        assert!(slowest < Duration::from_secs(11), "a call took {slowest:?}");
    }
    wait_until(
        Duration::from_secs(5),
        || count_named("latchkey-rw-probe") <= before,
        || {
            format!(
                "the search outlived the read-only connection: {:?}",
                thread_names()
            )
        },
    );
    writer.create().for_path(&path, b"").unwrap();
    let history = c.state_history();
    let pending = c.pending_watches();
    wait_until(
        Duration::from_secs(10),
        || fired.load(Ordering::Acquire),
        || {
            format!(
                "the watch set while read-only never fired ({pending} pending watches): {history:?}"
            )
        },
    );
    writer.close();
    c.close();
}

/// After a close at any moment of a connect, how long the client's
/// connect thread lives on; each client is waited for before the next.
#[test]
fn connect_thread_ends_soon_after_a_close_at_any_moment() {
    let _s = serial();
    let _dog = Watchdog::new("connect_thread_ends_soon", Duration::from_secs(240));
    let server = shared_server();
    // Earlier tests' threads end first.
    wait_until(
        Duration::from_secs(10),
        || count_named("latchkey-connect") == 0,
        || format!("threads: {:?}", thread_names()),
    );
    let mut worst = (Duration::ZERO, 0);
    for i in 0..60u64 {
        let (c, wait) = started_for(server, (i * 53) % 3000);
        c.close();
        let t = Instant::now();
        while count_named("latchkey-connect") > 0 && t.elapsed() < Duration::from_secs(20) {
            thread::sleep(Duration::from_millis(5));
        }
        if std::env::var_os("ENGINE_REVIEW_THREADS").is_some() {
            eprintln!(
                "close {} us after start: connect thread ended after {:?}",
                wait.as_micros(),
                t.elapsed()
            );
        }
        if t.elapsed() > worst.0 {
            worst = (t.elapsed(), wait.as_micros() as u64);
        }
    }
    eprintln!("worst: {worst:?}");
    assert!(
        worst.0 < Duration::from_secs(2),
        "a connect thread lived {:?} after its client's close (closed {} us after start)",
        worst.0,
        worst.1
    );
}

/// The reconnect back-off starts at 20 ms (±50 % jitter), growing to 1 s
/// (session.rs `Dialer::new`): after the first failed round through the
/// hosts, the next attempt comes within a few tens of milliseconds.
#[test]
fn the_first_reconnect_pause_is_the_initial_interval() {
    let _s = serial();
    let _dog = Watchdog::new("the_first_reconnect_pause", Duration::from_secs(60));
    let mut gaps = Vec::new();
    for _ in 0..5 {
        // Accepts and closes at once: each attempt fails its handshake.
        let fake = FakeServer::start(Script::default().refuse(true)).unwrap();
        let c = Client::builder()
            .connect_string(fake.connect_string())
            .session_timeout(Duration::from_secs(10))
            .connection_timeout(Duration::from_secs(2))
            .retry_policy(RetryNTimes::new(0, Duration::ZERO))
            .build()
            .unwrap();
        c.start().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut first = None;
        while Instant::now() < deadline {
            let n = fake.seen().connections;
            if n >= 1 && first.is_none() {
                first = Some(Instant::now());
            }
            if n >= 2 {
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
        let first = first.expect("no connection attempt");
        assert!(fake.seen().connections >= 2, "no second attempt");
        gaps.push(first.elapsed());
        c.close();
    }
    gaps.sort();
    assert!(
        gaps[0] < Duration::from_millis(150),
        "the pause between the first two attempts was {gaps:?} (want about \
         20 ms ± 50 %): the back-off starts from the backoff crate's default \
         current_interval (500 ms ± 50 %), not from initial_interval"
    );
}

/// A request at exactly the size limit (the default, ZooKeeper's
/// jute.maxbuffer): the largest payload the client agrees to send, the
/// server takes; one byte more fails alone, unsent.
#[test]
fn a_request_at_the_size_limit() {
    let _s = serial();
    let _dog = Watchdog::new("a_request_at_the_size_limit", Duration::from_secs(120));
    let c = start_connected(
        Client::builder()
            .connect_string(shared_server().connect_string())
            .session_timeout(Duration::from_secs(10))
            .connection_timeout(Duration::from_secs(5))
            .retry_policy(RetryNTimes::new(2, Duration::from_millis(10))),
    );
    let path = unique("/engine-review-limit");
    c.create().for_path(&path, b"").unwrap();
    let too_large = |r: &latchkey_framework::Result<_>| matches!(r, Err(e) if format!("{e:?}").contains("RequestTooLarge"));
    // The largest set_data the client sends: search down from 1 MiB.
    let mut lo = 0usize; // sent
    let mut hi = 1 << 20; // refused unsent
    let probe = unique("/engine-review-limit-probe");
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let r = c
            .with_timeout(Duration::from_secs(10))
            .set_data(&probe, &vec![0u8; mid], None);
        if too_large(&r) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let sessions = c.metrics().sessions_started;
    let reconnects = c.metrics().reconnects;
    let r = c
        .with_timeout(Duration::from_secs(10))
        .set_data(&path, &vec![5u8; lo], None);
    assert!(
        r.is_ok(),
        "set_data of {lo} bytes (the largest the client sends) failed: {r:?}"
    );
    assert_eq!(c.get_data(&path).unwrap().0.len(), lo);
    assert_eq!(c.metrics().reconnects, reconnects);
    assert_eq!(c.metrics().sessions_started, sessions);
    c.close();
}

//! Observability against a real ZooKeeper: the client's counters
//! (`Client::metrics`), the recipes' process-wide lock counters
//! (`lock_metrics`) and, with the `tracing` feature, the spans and events.
//! Run the tracing test with
//! `cargo test -p latchkey-test --features tracing --test observability`.

mod common;

use std::thread;
use std::time::Duration;

use common::{connect, shared_server, start_connected, unique, wait_until, Ctx};
use crossbeam_channel::bounded;
use latchkey_framework::{Client, ConnectionState, Error, RetryNTimes};
use latchkey_recipes::{
    lock_metrics, CancelToken, InterProcessMutex, InterProcessSemaphoreV2, LockMetrics,
};
use latchkey_test::FaultProxy;
use parking_lot::Mutex;

/// The lock counters are process-wide: the tests here that take locks run
/// one at a time, so that each sees only its own waits.
fn lock_test() -> parking_lot::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock()
}

const LONG: Duration = Duration::from_secs(20);

#[test]
fn client_counters_follow_requests_watches_retries_reconnects_and_lost_sessions() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let client = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(10))
            .connection_timeout(Duration::from_secs(2))
            .retry_policy(RetryNTimes::new(100, Duration::from_millis(50))),
    );
    let other = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &client);
    let m = || client.metrics();
    let path = unique("metrics");
    client.create().for_path(&path, b"1").unwrap();

    let start = m();
    assert_eq!(start.sessions_started, 1, "{start:?}\n{}", ctx.dump());
    assert_eq!(
        (start.retries, start.sessions_lost, start.reconnects),
        (0, 0, 0),
        "{start:?}"
    );

    // Requests: one per read (and one more per retry, should a reply be
    // slower than the connection timeout on a loaded machine).
    for _ in 0..5 {
        client.exists(&path).unwrap();
    }
    let now = m();
    let sent = now.requests_sent - start.requests_sent;
    assert!(sent >= 5 && sent <= 5 + now.retries, "{sent}: {now:?}");

    // Watch events: one per fired watch.
    let (fired_tx, fired) = bounded(1);
    client
        .get_data_watch(&path, move |_| {
            let _ = fired_tx.send(());
        })
        .unwrap();
    other.set_data(&path, b"2", None).unwrap();
    fired.recv_timeout(LONG).expect("the data watch fired");
    assert_eq!(m().watch_events - start.watch_events, 1, "{:?}", m());

    // A cut connection that stays refused: the call retries until it is
    // let through, then the client is Reconnected to the same session.
    proxy.set_refuse(true);
    proxy.cut();
    let (done_tx, done) = bounded(1);
    let c = client.clone();
    let p = path.clone();
    let call = thread::spawn(move || done_tx.send(c.exists(&p).map(|s| s.is_some())));
    wait_until(LONG, || m().retries > start.retries, || ctx.dump());
    proxy.set_refuse(false);
    let found = done.recv_timeout(LONG).expect("the call returned");
    call.join().unwrap().unwrap();
    assert!(found.unwrap(), "the node exists");
    wait_until(LONG, || m().reconnects >= 1, || ctx.dump());
    let after_cut = m();
    assert!(after_cut.suspensions >= 1, "{after_cut:?}");
    assert_eq!(after_cut.sessions_started, 1, "{after_cut:?}");
    assert_eq!(after_cut.sessions_lost, 0, "{after_cut:?}");

    // An expired session: Lost, then a second session.
    let states = client.listen();
    client.expire_session_for_testing().unwrap();
    ctx.expect(&states, ConnectionState::Lost, LONG);
    wait_until(LONG, || m().sessions_started >= 2, || ctx.dump());
    let end = m();
    assert_eq!(end.sessions_started, 2, "{end:?}");
    assert_eq!(end.sessions_lost, 1, "{end:?}");
    assert_eq!(end.auth_failures, 0, "{end:?}");
    println!("client metrics: {end:?}");
    client.close();
    other.close();
}

#[test]
fn a_rejected_auth_is_counted_with_the_lost_session() {
    let client = Client::builder()
        .connect_string(shared_server().connect_string())
        .connection_timeout(Duration::from_secs(2))
        .authorization("no-such-scheme", b"whoever")
        .build()
        .unwrap();
    client.start().unwrap();
    wait_until(
        LONG,
        || client.metrics().auth_failures >= 1,
        || format!("{:?}", client.state_history()),
    );
    let m = client.metrics();
    assert!(m.sessions_lost >= 1, "{m:?}");
    client.close();
}

/// How the lock counters moved from `before`.
fn since(before: LockMetrics) -> [i64; 6] {
    let now = lock_metrics();
    let d = |a: u64, b: u64| a as i64 - b as i64;
    [
        d(now.waits_started, before.waits_started),
        d(now.acquired, before.acquired),
        d(now.timed_out, before.timed_out),
        d(now.cancelled, before.cancelled),
        d(now.failed, before.failed),
        d(now.holds, before.holds),
    ]
}

#[test]
fn lock_counters_follow_waits_outcomes_and_holds() {
    let _serial = lock_test();
    let server = shared_server();
    let a = connect(&server.connect_string(), Duration::from_secs(10));
    let b = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &a);
    let path = unique("lock-metrics");
    let mine = InterProcessMutex::new(&a, &path).unwrap();
    let theirs = InterProcessMutex::new(&b, &path).unwrap();
    let start = lock_metrics();
    //                 [waits, acquired, timed out, cancelled, failed, holds]

    mine.acquire().unwrap();
    mine.acquire().unwrap(); // re-entered: no wait, no new hold
    assert_eq!(since(start), [1, 1, 0, 0, 0, 1]);

    let waited_before = lock_metrics().time_waited;
    assert!(!theirs.acquire_timeout(Duration::from_millis(300)).unwrap());
    assert_eq!(since(start), [2, 1, 1, 0, 0, 1]);
    assert!(
        lock_metrics().time_waited - waited_before >= Duration::from_millis(300),
        "{:?}",
        lock_metrics()
    );

    let token = CancelToken::new();
    let (t, m) = (token.clone(), theirs.clone());
    let waiter = thread::spawn(move || m.acquire_cancellable(Duration::MAX, &t));
    wait_until(
        LONG,
        || mine.participant_nodes().is_ok_and(|n| n.len() == 2),
        || ctx.dump(),
    );
    token.cancel();
    let cancelled = waiter.join().unwrap();
    assert!(matches!(cancelled, Err(Error::Cancelled)), "{cancelled:?}");
    assert_eq!(since(start), [3, 1, 1, 1, 0, 1]);

    mine.release().unwrap();
    assert_eq!(since(start), [3, 1, 1, 1, 0, 1]);
    mine.release().unwrap();
    assert_eq!(since(start), [3, 1, 1, 1, 0, 0]);

    // A semaphore: one wait for two leases (its internal lock is not a
    // wait of its own), one hold per lease.
    let sem = InterProcessSemaphoreV2::new(&a, &unique("sem-metrics"), 3).unwrap();
    let leases = sem.acquire_many(2).unwrap();
    assert_eq!(since(start), [4, 2, 1, 1, 0, 2]);
    drop(leases);
    assert_eq!(since(start), [4, 2, 1, 1, 0, 0]);

    // A wait that fails.
    let closed = connect(&server.connect_string(), Duration::from_secs(10));
    let gone = InterProcessMutex::new(&closed, &path).unwrap();
    closed.close();
    assert!(gone.acquire().is_err());
    assert_eq!(since(start), [5, 2, 1, 1, 1, 0]);
    println!("lock metrics: {:?}", lock_metrics());
    a.close();
    b.close();
}

#[cfg(feature = "tracing")]
mod spans {
    //! A subscriber that records every span's name and fields and every
    //! event's fields, installed as the global default for this binary.

    use std::collections::{BTreeMap, HashMap};
    use std::fmt::Debug;
    use std::sync::atomic::{AtomicU64, Ordering};

    use parking_lot::Mutex;
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    pub type Fields = BTreeMap<String, String>;

    #[derive(Default)]
    pub struct Recorded {
        pub spans: HashMap<u64, (&'static str, Fields)>,
        pub events: Vec<Fields>,
    }

    pub static RECORDED: Mutex<Option<Recorded>> = Mutex::new(None);
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);

    struct Into<'a>(&'a mut Fields);

    impl Visit for Into<'_> {
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().into(), value.into());
        }
        fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
            self.0.insert(field.name().into(), format!("{value:?}"));
        }
    }

    pub struct Recorder;

    impl Subscriber for Recorder {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, span: &Attributes<'_>) -> Id {
            let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
            let mut fields = Fields::new();
            span.record(&mut Into(&mut fields));
            if let Some(r) = RECORDED.lock().as_mut() {
                r.spans.insert(id, (span.metadata().name(), fields));
            }
            Id::from_u64(id)
        }
        fn record(&self, span: &Id, values: &Record<'_>) {
            if let Some(r) = RECORDED.lock().as_mut() {
                if let Some((_, fields)) = r.spans.get_mut(&span.into_u64()) {
                    values.record(&mut Into(fields));
                }
            }
        }
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut fields = Fields::new();
            event.record(&mut Into(&mut fields));
            if let Some(r) = RECORDED.lock().as_mut() {
                r.events.push(fields);
            }
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }
}

#[cfg(feature = "tracing")]
#[test]
fn tracing_spans_cover_operations_lock_waits_and_state_changes() {
    let _serial = lock_test();
    *spans::RECORDED.lock() = Some(spans::Recorded::default());
    tracing::subscriber::set_global_default(spans::Recorder).expect("the only subscriber");

    let server = shared_server();
    let client = connect(&server.connect_string(), Duration::from_secs(10));
    let path = unique("traced");
    let mutex = InterProcessMutex::new(&client, &path).unwrap();
    mutex.acquire().unwrap();
    mutex.release().unwrap();
    let missing = format!("{path}/missing");
    assert!(client.get_data(&missing).is_err());
    client.close();

    let recorded = spans::RECORDED.lock().take().unwrap();
    let spans: Vec<_> = recorded.spans.values().collect();
    let find = |name: &str, key: &str, value: &str| {
        spans
            .iter()
            .find(|(n, f)| *n == name && f.get(key).map(String::as_str) == Some(value))
            .map(|(_, f)| f.clone())
            .unwrap_or_else(|| panic!("no {name} span with {key}={value} in {spans:#?}"))
    };

    let wait = find("lock_wait", "path", &path);
    assert_eq!(wait["recipe"], "mutex", "{wait:?}");
    assert_eq!(wait["outcome"], "acquired", "{wait:?}");
    assert!(wait["waited_ms"].parse::<u64>().is_ok(), "{wait:?}");

    let create = find("operation", "path", &format!("{path}/lock-"));
    assert_eq!(create["op"], "create", "{create:?}");
    assert_eq!(create["attempts"], "1", "{create:?}");
    assert_eq!(create["outcome"], "ok", "{create:?}");
    let read = find("operation", "path", &missing);
    assert_eq!(read["op"], "get_data", "{read:?}");
    assert_eq!(read["outcome"], "error", "{read:?}");
    assert!(read["error"].contains("NoNode"), "{read:?}");

    assert!(
        recorded.events.iter().any(|e| {
            e.get("message").map(String::as_str) == Some("connection state changed")
                && e.get("state").map(String::as_str) == Some("Connected")
        }),
        "no Connected event in {:#?}",
        recorded.events
    );
}

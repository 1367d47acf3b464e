//! The client's session life cycle against real ZooKeeper: rejected auth,
//! listeners off the session's critical path, close on the last handle,
//! deadlines that hold whatever the server does.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use crossbeam_channel::{bounded, Receiver};
use latchkey_framework::{
    Client, ConnectionState, CreateMode, ErrorCode, ExponentialBackoffRetry, RetryForever,
};
use latchkey_recipes::InterProcessMutex;
use latchkey_test::TestingServer;
use parking_lot::Mutex;

/// The tests of this binary run one at a time, as some count the
/// process's threads.
fn serial() -> parking_lot::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock()
}

/// Threads of this process whose name starts with `latchkey-`.
fn latchkey_threads() -> usize {
    latchkey_thread_ids().len()
}

/// The ids of this process's `latchkey-` threads.
fn latchkey_thread_ids() -> BTreeSet<String> {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| {
                    let t = t.ok()?;
                    let name = std::fs::read_to_string(t.path().join("comm")).ok()?;
                    name.starts_with("latchkey-")
                        .then(|| t.file_name().to_string_lossy().into_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// [`latchkey_thread_ids`] once their number has not changed for 300 ms
/// (threads of a client closed just before take a moment to end), within
/// 5 s. A thread of an earlier test may still end later: callers compare
/// sets of ids, not counts, so that it cannot pass for a new thread's
/// start or hide one that leaked.
fn settled_latchkey_threads() -> BTreeSet<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = latchkey_threads();
    let mut since = Instant::now();
    while Instant::now() < deadline && since.elapsed() < Duration::from_millis(300) {
        std::thread::sleep(Duration::from_millis(20));
        let now = latchkey_threads();
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
    latchkey_thread_ids()
}

/// Waits (at most 5 s) until every `latchkey-` thread is one of `before`.
fn wait_for_no_threads_but(before: &BTreeSet<String>) {
    wait_until(
        Duration::from_secs(5),
        || latchkey_thread_ids().is_subset(before),
        || {
            let left: Vec<_> = latchkey_thread_ids().difference(before).cloned().collect();
            format!("latchkey threads started since and still running: {left:?}")
        },
    );
}

/// Sessions the server holds now (`mntr`'s `zk_global_sessions`).
fn live_sessions(server: &TestingServer) -> usize {
    let mntr = server.four_letter("mntr").expect("mntr");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_global_sessions"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no zk_global_sessions in mntr:\n{mntr}"))
}

/// The Java client treats a rejected auth as final (`AUTH_FAILED`); a
/// client must not answer it by opening session after session.
#[test]
fn rejected_auth_fails_calls_with_auth_failed_and_opens_few_sessions() {
    let _serial = serial();
    let server = TestingServer::start().unwrap();
    let before = live_sessions(&server);
    let c = Client::builder()
        .connect_string(server.connect_string())
        .session_timeout(Duration::from_secs(10))
        .connection_timeout(Duration::from_secs(2))
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 3))
        .authorization("no-such-scheme", b"whoever")
        .build()
        .unwrap();
    c.start().unwrap();
    let started = Instant::now();
    let mut codes = Vec::new();
    while started.elapsed() < Duration::from_secs(3) && codes.len() < 50 {
        match c.exists("/") {
            Ok(_) => codes.push(None),
            Err(e) => codes.push(e.code()),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let opened = live_sessions(&server) - before;
    let history = c.state_history();
    let auth_failed = codes
        .iter()
        .filter(|c| **c == Some(ErrorCode::AuthFailed))
        .count();
    println!("sessions opened in 3 s: {opened}; call results: {codes:?}");
    assert!(
        opened <= 5,
        "{opened} sessions opened in 3 s\nstates: {history:?}\n{}",
        server.log_tail(20)
    );
    assert!(
        auth_failed >= codes.len() / 2 && !codes.contains(&None),
        "calls should fail with AuthFailed: {codes:?}"
    );
    assert!(
        !codes.contains(&Some(ErrorCode::ConnectionLoss)),
        "{codes:?}"
    );
    c.close();
}

/// What a `Lost` listener does in [`lost_listener_does_not_hold_the_client`].
#[derive(Clone, Copy, Debug)]
enum LostListener {
    /// Blocks until the test lets it go (30 s at most).
    Blocks,
    /// Calls the client (which retries for ever).
    CallsTheClient,
    Panics,
}

/// Listeners run off the session's critical path (Curator runs them on
/// their own thread): whatever a `Lost` listener does, the client reaches
/// a new session within its connection timeout.
#[test]
fn a_lost_listener_that_blocks_does_not_hold_the_client_on_its_dead_session() {
    lost_listener_does_not_hold_the_client(LostListener::Blocks);
}

#[test]
fn a_lost_listener_that_calls_the_client_does_not_hold_it_on_its_dead_session() {
    lost_listener_does_not_hold_the_client(LostListener::CallsTheClient);
}

#[test]
fn a_lost_listener_that_panics_does_not_hold_the_client_on_its_dead_session() {
    lost_listener_does_not_hold_the_client(LostListener::Panics);
}

fn lost_listener_does_not_hold_the_client(kind: LostListener) {
    let _serial = serial();
    let server = shared_server();
    {
        let connection_timeout = Duration::from_secs(5);
        let c = start_connected(
            Client::builder()
                .connect_string(server.connect_string())
                .session_timeout(Duration::from_secs(10))
                .connection_timeout(connection_timeout)
                .retry_policy(RetryForever::new(Duration::from_millis(100))),
        );
        let ctx = Ctx::new(server, &c);
        let (release_tx, release_rx): (_, Receiver<()>) = bounded(1);
        let (done_tx, done_rx) = bounded(1);
        let me = c.clone();
        let _listener = c.add_listener(move |state| {
            if state != ConnectionState::Lost {
                return;
            }
            match kind {
                LostListener::Blocks => {
                    let _ = release_rx.recv_timeout(Duration::from_secs(30));
                }
                LostListener::CallsTheClient => {
                    let _ = done_tx.send(me.exists("/").map(|_| ()));
                }
                LostListener::Panics => panic!("a Lost listener that panics"),
            }
        });
        let old = c.session_id();
        c.expire_session_for_testing().unwrap();
        wait_until(
            Duration::from_secs(10),
            || c.state() == Some(ConnectionState::Lost) || c.session_id() != old,
            || format!("{kind:?}: never Lost\n{}", ctx.dump()),
        );
        let lost = Instant::now();
        wait_until(
            connection_timeout,
            || c.session_id() != old && c.state().is_some_and(ConnectionState::is_connected),
            || format!("{kind:?}: no new session since Lost\n{}", ctx.dump()),
        );
        println!("{kind:?}: new session {:?} after Lost", lost.elapsed());
        c.exists("/").unwrap();
        if let LostListener::CallsTheClient = kind {
            let called = done_rx.recv_timeout(connection_timeout);
            assert!(
                matches!(called, Ok(Ok(()))),
                "the listener's call: {called:?}\n{}",
                ctx.dump()
            );
        }
        let _ = release_tx.send(());
        c.close();
    }
}

/// Dropping the last user handle closes the session at once (its
/// ephemeral nodes vanish then, not a session timeout later) and ends the
/// client's threads, whatever the client's watchers, listeners and wakers
/// hold: a callback that needs the client holds a `WeakClient`.
#[test]
fn dropping_the_last_handle_closes_the_session_whatever_callbacks_hold() {
    let _serial = serial();
    let server = shared_server();
    let observer = connect(&server.connect_string(), Duration::from_secs(30));
    let baseline = settled_latchkey_threads();
    let c = connect(&server.connect_string(), Duration::from_secs(30));
    let ctx = Ctx::new(server, &observer);
    let eph = c
        .create()
        .mode(CreateMode::Ephemeral)
        .for_path(&unique("eph"), b"")
        .unwrap();
    let weak = c.downgrade();
    c.get_data_watch(&eph, move |_| {
        if let Some(c) = weak.upgrade() {
            let _ = c.exists("/");
        }
    })
    .unwrap();
    let weak = c.downgrade();
    c.exists_watch(&format!("{eph}-missing"), move |_| drop(weak.upgrade()))
        .unwrap();
    let weak = c.downgrade();
    let listener = c.add_listener(move |_| drop(weak.upgrade()));
    let _waker = c.add_waker(|| {});
    // A connected client has no thread of its own until it has callbacks
    // to run (the engine and the timer thread are the process'): one
    // watcher fired starts its session's event thread.
    observer
        .create()
        .for_path(&format!("{eph}-missing"), b"")
        .unwrap();
    wait_until(
        Duration::from_secs(5),
        || !latchkey_thread_ids().is_subset(&baseline),
        || format!("the client started no thread of its own\n{}", ctx.dump()),
    );
    let states = c.listen();
    let clone = c.clone();
    drop(c);
    assert!(
        observer.exists(&eph).unwrap().is_some(),
        "a clone is still alive"
    );
    drop(clone);
    let dropped = Instant::now();
    wait_until(
        Duration::from_secs(3),
        || observer.exists(&eph).unwrap().is_none(),
        || format!("the ephemeral node outlived its client\n{}", ctx.dump()),
    );
    println!("ephemeral node gone {:?} after the drop", dropped.elapsed());
    wait_for_no_threads_but(&baseline);
    drop((listener, states));
    observer.close();
}

/// A revocable lock watches its node with a closure that needs the client;
/// dropping the mutex and the client while holding the lock still closes
/// the session, so the lock node goes at once.
#[test]
fn dropping_a_held_revocable_lock_and_its_client_closes_the_session() {
    let _serial = serial();
    let server = shared_server();
    let observer = connect(&server.connect_string(), Duration::from_secs(30));
    let baseline = settled_latchkey_threads();
    let c = connect(&server.connect_string(), Duration::from_secs(30));
    let ctx = Ctx::new(server, &observer);
    let path = unique("revocable");
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    mutex.make_revocable(|| {});
    mutex.acquire().unwrap();
    let nodes = observer.get_children(&path).unwrap();
    assert_eq!(nodes.len(), 1, "{}", ctx.dump());
    drop(mutex);
    drop(c);
    wait_until(
        Duration::from_secs(3),
        || observer.get_children(&path).unwrap().is_empty(),
        || format!("the lock node outlived its client\n{}", ctx.dump()),
    );
    wait_for_no_threads_but(&baseline);
    observer.close();
}

/// Huge durations mean "no deadline"; they must not panic.
#[test]
fn huge_timeouts_mean_no_deadline() {
    let _serial = serial();
    let server = shared_server();
    let c = start_connected(
        Client::builder()
            .connect_string(server.connect_string())
            .session_timeout(Duration::MAX)
            .connection_timeout(Duration::MAX),
    );
    assert!(c.block_until_connected(Duration::MAX).unwrap());
    assert!(c.exists("/").unwrap().is_some());
    let path = unique("huge");
    c.create().for_path(&path, b"").unwrap();
    c.delete().guaranteed().for_path(&path).unwrap();
    c.close();
}

/// How late an operation may return after its handle's deadline.
const SLACK: Duration = Duration::from_millis(250);

/// How ZooKeeper is unreachable in [`operations_return_by_their_deadline`].
#[derive(Clone, Copy, Debug)]
enum Outage {
    /// The server process is stopped.
    Stopped,
    /// Every byte is swallowed both ways (a silent partition).
    Blackholed,
    /// New connections are refused and the old ones are cut.
    Refusing,
}

#[test]
fn operations_return_by_their_deadline_when_zookeeper_is_stopped() {
    operations_return_by_their_deadline(Outage::Stopped);
}

#[test]
fn operations_return_by_their_deadline_when_zookeeper_is_blackholed() {
    operations_return_by_their_deadline(Outage::Blackholed);
}

#[test]
fn operations_return_by_their_deadline_when_zookeeper_is_refusing() {
    operations_return_by_their_deadline(Outage::Refusing);
}

/// Every operation on a `with_deadline` handle returns by the deadline plus
/// [`SLACK`], with a timeout that names the operation and the path, though
/// the retry policy would retry for ever and one attempt could wait 5 s.
fn operations_return_by_their_deadline(outage: Outage) {
    let _serial = serial();
    let mut server = TestingServer::start().unwrap();
    let proxy = latchkey_test::FaultProxy::start(server.addr()).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(30))
            .connection_timeout(Duration::from_secs(5))
            .retry_policy(RetryForever::new(Duration::from_millis(300))),
    );
    let ctx = Ctx::new(&server, &c);
    let base = unique("deadline");
    c.create().for_path(&base, b"").unwrap();
    c.create().for_path(&format!("{base}/x"), b"").unwrap();
    match outage {
        Outage::Stopped => server.stop().unwrap(),
        Outage::Blackholed => proxy.pause(),
        Outage::Refusing => {
            proxy.set_refuse(true);
            proxy.cut();
        }
    }
    let x = format!("{base}/x");
    type Op<'a> = (
        &'a str,
        Box<dyn Fn(&Client) -> latchkey_framework::Result<()> + 'a>,
    );
    let ops: Vec<Op> = vec![
        ("exists", Box::new(|c| c.exists(&x).map(drop))),
        ("get_data", Box::new(|c| c.get_data(&x).map(drop))),
        (
            "set_data",
            Box::new(|c| c.set_data(&x, b"1", None).map(drop)),
        ),
        (
            "get_children",
            Box::new(|c| c.get_children(&base).map(drop)),
        ),
        ("sync", Box::new(|c| c.sync(&x))),
        (
            "ensure_path",
            Box::new(|c| c.ensure_path(&format!("{base}/e"))),
        ),
        ("exists", Box::new(|c| c.exists_watch(&x, |_| {}).map(drop))),
        (
            "get_data",
            Box::new(|c| c.get_data_watch(&x, |_| {}).map(drop)),
        ),
        (
            "get_children",
            Box::new(|c| c.get_children_watch(&x, |_| {}).map(drop)),
        ),
        (
            "create",
            Box::new(|c| c.create().for_path(&format!("{base}/n"), b"").map(drop)),
        ),
        (
            "create",
            Box::new(|c| {
                c.create()
                    .with_protection()
                    .creating_parents_if_needed()
                    .mode(CreateMode::EphemeralSequential)
                    .for_path(&format!("{base}/p/n-"), b"")
                    .map(drop)
            }),
        ),
        ("delete", Box::new(|c| c.delete().for_path(&x))),
        ("delete", Box::new(|c| c.delete().guaranteed().for_path(&x))),
    ];
    for timeout in [Duration::ZERO, Duration::from_millis(700)] {
        for (name, op) in &ops {
            let t = Instant::now();
            let deadline = t + timeout;
            let result = op(&c.with_deadline(Some(deadline)));
            let late = Instant::now().saturating_duration_since(deadline);
            let err = match result {
                Err(e) => e,
                Ok(()) => panic!("{outage:?}: {name} succeeded\n{}", ctx.dump()),
            };
            println!(
                "{outage:?} {name} within {timeout:?}: {:?} late: {err}",
                late
            );
            assert!(
                late <= SLACK,
                "{outage:?}: {name} returned {late:?} after its deadline: {err}\n{}",
                ctx.dump()
            );
            assert!(err.is(ErrorCode::OperationTimeout), "{name}: {err}");
            let shown = err.to_string();
            assert!(
                shown.starts_with(&format!("{name} {base}")),
                "{name}: the error does not name the operation and path: {shown}"
            );
        }
    }
    // No deadline at the handle's level: a plain handle still waits.
    assert!(c.deadline().is_none());
    c.close();
}

/// After `close()` the client is not connected, whatever it was before.
#[test]
fn state_is_not_connected_after_close() {
    let _serial = serial();
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));
    assert_eq!(c.state(), Some(ConnectionState::Connected));
    c.close();
    assert!(
        !c.state().is_some_and(ConnectionState::is_connected),
        "{:?}",
        c.state()
    );
}

/// A namespace is a relative path; Curator refuses `/app` and `app/`.
#[test]
fn namespaces_with_leading_or_trailing_slashes_are_refused() {
    for bad in ["/app", "app/", "/", "a//b"] {
        let built = Client::builder()
            .connect_string("127.0.0.1:1")
            .namespace(bad)
            .build();
        match built {
            Err(e) => assert!(e.to_string().contains(bad), "{bad:?}: {e}"),
            Ok(c) => panic!("namespace {bad:?} accepted as {:?}", c.namespace()),
        }
    }
    let ok = Client::builder()
        .connect_string("127.0.0.1:1/chroot")
        .namespace("app/sub")
        .build()
        .unwrap();
    assert_eq!(ok.namespace(), Some("chroot/app/sub"));
}

/// A `Lost` listener learns which session ended from `lost_session_id()`,
/// whatever the next session has done by the time the listener runs.
/// `session_id()` there read the lost id, 0 or the next session's id
/// (8 expiries in a row once gave the lost id 7 times and 0 once).
#[test]
fn a_lost_listener_reads_the_lost_session_id_every_time() {
    let _serial = serial();
    let server = shared_server();
    let c = start_connected(
        Client::builder()
            .connect_string(server.connect_string())
            .session_timeout(Duration::from_secs(4))
            .connection_timeout(Duration::from_secs(5))
            .retry_policy(RetryForever::new(Duration::from_millis(50))),
    );
    let ctx = Ctx::new(server, &c);
    assert_eq!(c.lost_session_id(), None, "no session lost yet");
    let (seen_tx, seen_rx) = bounded(16);
    let me = c.clone();
    let _listener = c.add_listener(move |state| {
        if state == ConnectionState::Lost {
            let _ = seen_tx.send(me.lost_session_id());
        }
    });
    for round in 0..6 {
        let old = c.session_id();
        assert_ne!(old, 0, "round {round}: connected\n{}", ctx.dump());
        c.expire_session_for_testing().unwrap();
        let seen = seen_rx.recv_timeout(Duration::from_secs(10));
        assert_eq!(
            seen,
            Ok(Some(old)),
            "round {round}: the Lost listener's lost_session_id\n{}",
            ctx.dump()
        );
        wait_until(
            Duration::from_secs(10),
            || c.session_id() != old && c.state().is_some_and(ConnectionState::is_connected),
            || format!("round {round}: no new session\n{}", ctx.dump()),
        );
    }
    c.close();
}

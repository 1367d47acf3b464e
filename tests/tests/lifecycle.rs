//! The client's session life cycle against real ZooKeeper: rejected auth,
//! listeners off the session's critical path, close on the last handle,
//! deadlines that hold whatever the server does.

mod common;

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
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.starts_with("latchkey-"))
                .count()
        })
        .unwrap_or(0)
}

/// [`latchkey_threads`] once it has not changed for 300 ms (threads of a
/// client closed just before take a moment to end), within 5 s.
fn settled_latchkey_threads() -> usize {
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
    last
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
    assert!(latchkey_threads() > baseline);
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
    wait_until(
        Duration::from_secs(5),
        || latchkey_threads() == baseline,
        || format!("{} latchkey threads, {baseline} before", latchkey_threads()),
    );
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
    wait_until(
        Duration::from_secs(5),
        || latchkey_threads() == baseline,
        || format!("{} latchkey threads, {baseline} before", latchkey_threads()),
    );
    observer.close();
}

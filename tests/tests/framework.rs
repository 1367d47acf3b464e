//! The framework against real ZooKeeper servers: operations, connection
//! states through server restarts and fault-proxy partitions, watches and
//! auth across reconnects, session expiry, protected create.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::{
    Acl, Client, ConnectionState, CreateMode, Error, ErrorCode, EventType, FixedAclProvider,
    RetryNTimes,
};
use latchkey_test::{FaultProxy, TestingServer};

/// Container mode must send the container opcode: the server's container
/// manager then removes the node once its last child goes, which it never
/// does for a plain persistent node. The server hides the container marker
/// from stats, so this is the only way to see it.
#[test]
fn container_nodes_are_real_containers() {
    let config = latchkey_test::ServerConfig {
        system_properties: vec![("znode.container.checkIntervalMs".into(), "200".into())],
        ..Default::default()
    };
    let server = TestingServer::start_with(config).unwrap();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(&server, &c);
    let container = "/container";
    let persistent = "/persistent";
    c.create()
        .mode(CreateMode::Container)
        .for_path(container, b"")
        .unwrap();
    c.create().for_path(persistent, b"").unwrap();
    for parent in [container, persistent] {
        let child = c
            .create()
            .for_path(&format!("{parent}/child"), b"")
            .unwrap();
        c.delete().for_path(&child).unwrap();
    }
    wait_until(
        Duration::from_secs(20),
        || c.exists(container).unwrap().is_none(),
        || ctx.dump(),
    );
    assert!(c.exists(persistent).unwrap().is_some(), "{}", ctx.dump());
    c.close();
}

#[test]
fn operations_and_error_codes() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let base = unique("ops");
    let ctx = Ctx::new(server, &c);

    let created = c
        .create()
        .creating_parents_if_needed()
        .for_path(&format!("{base}/a/b"), b"one")
        .unwrap();
    assert_eq!(created, format!("{base}/a/b"));
    let (data, stat) = c.get_data(&created).unwrap();
    assert_eq!(data, b"one", "{}", ctx.dump());
    let stat2 = c.set_data(&created, b"two", Some(stat.version)).unwrap();
    assert_eq!(stat2.version, stat.version + 1);
    let err = c.set_data(&created, b"x", Some(stat.version)).unwrap_err();
    assert!(err.is(ErrorCode::BadVersion), "{err}");
    let err = c.create().for_path(&created, b"").unwrap_err();
    assert!(err.is(ErrorCode::NodeExists), "{err}");
    let err = c.delete().for_path(&format!("{base}/a")).unwrap_err();
    assert!(err.is(ErrorCode::NotEmpty), "{err}");
    let err = c.get_data(&format!("{base}/missing")).unwrap_err();
    assert!(err.is(ErrorCode::NoNode), "{err}");
    assert!(c.exists(&format!("{base}/missing")).unwrap().is_none());
    assert_eq!(c.get_children(&format!("{base}/a")).unwrap(), vec!["b"]);

    let seq = c
        .create()
        .mode(CreateMode::PersistentSequential)
        .for_path(&format!("{base}/seq-"), b"")
        .unwrap();
    assert!(
        seq.starts_with(&format!("{base}/seq-")) && seq.len() == base.len() + 15,
        "{seq}"
    );

    // Ephemeral parents cannot have children.
    let eph = c
        .create()
        .mode(CreateMode::Ephemeral)
        .for_path(&format!("{base}/eph"), b"")
        .unwrap();
    let err = c
        .create()
        .for_path(&format!("{eph}/child"), b"")
        .unwrap_err();
    assert!(err.is(ErrorCode::NoChildrenForEphemerals), "{err}");

    c.delete()
        .deleting_children_if_needed()
        .for_path(&base)
        .unwrap();
    assert!(c.exists(&base).unwrap().is_none());
    c.close();
}

/// Errors name the operation and the path, read well, and keep the
/// ZooKeeper error as their `source()` and their `code()`.
#[test]
fn errors_name_the_operation_and_the_path() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let base = unique("errors");
    c.create().for_path(&base, b"").unwrap();
    c.create().for_path(&format!("{base}/child"), b"").unwrap();
    let missing = format!("{base}/missing");
    let cases: Vec<(Error, String, ErrorCode)> = vec![
        (
            c.get_data(&missing).unwrap_err(),
            format!("get_data {missing}: NoNode"),
            ErrorCode::NoNode,
        ),
        (
            c.create()
                .for_path(&format!("{missing}/x"), b"")
                .unwrap_err(),
            format!("create {missing}/x: NoNode"),
            ErrorCode::NoNode,
        ),
        (
            c.delete().for_path(&base).unwrap_err(),
            format!("delete {base}: NotEmpty"),
            ErrorCode::NotEmpty,
        ),
        (
            c.set_data(&base, b"", Some(99)).unwrap_err(),
            format!("set_data {base}: BadVersion"),
            ErrorCode::BadVersion,
        ),
    ];
    for (err, start, code) in cases {
        let shown = err.to_string();
        assert!(
            shown.starts_with(&start),
            "{shown:?} should start with {start:?}"
        );
        assert!(err.is(code), "{shown}");
        let source = std::error::Error::source(&err);
        assert!(
            source.is_some_and(|s| s.to_string().contains(&format!("{code:?}"))),
            "{shown}: source {source:?}"
        );
    }
    c.delete()
        .deleting_children_if_needed()
        .for_path(&base)
        .unwrap();
    c.close();
}

#[test]
fn bad_input_is_refused_before_sending() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    for bad in [
        "",
        "relative",
        "/trailing/",
        "/double//slash",
        "/dot/./x",
        "/nul\u{0}x",
    ] {
        let err = c.create().for_path(bad, b"").unwrap_err();
        assert!(matches!(err, Error::InvalidPath { .. }), "{bad:?}: {err}");
        let err = c.get_data(bad).unwrap_err();
        assert!(matches!(err, Error::InvalidPath { .. }), "{bad:?}: {err}");
    }
    assert!(matches!(
        c.delete().for_path("/").unwrap_err(),
        Error::InvalidPath { .. }
    ));
    assert!(Client::builder()
        .connect_string("nonsense:port")
        .build()
        .is_err());
    c.close();
    assert!(matches!(c.exists("/"), Err(Error::Closed)));
    assert!(matches!(c.create().for_path("/x", b""), Err(Error::Closed)));
}

#[test]
fn namespace_is_applied_and_stripped() {
    let server = shared_server();
    let ns = unique("ns").trim_start_matches('/').to_owned();
    let c = start_connected(
        Client::builder()
            .connect_string(server.connect_string())
            .namespace(ns.clone()),
    );
    let p = c
        .create()
        .creating_parents_if_needed()
        .with_protection()
        .mode(CreateMode::EphemeralSequential)
        .for_path("/x/node-", b"")
        .unwrap();
    assert!(p.starts_with("/x/_c_"), "{p}");
    let plain = connect(&server.connect_string(), Duration::from_secs(10));
    let raw = plain.get_children(&format!("/{ns}/x")).unwrap();
    assert_eq!(raw.len(), 1);
    assert_eq!(format!("/x/{}", raw[0]), p);
    let (tx, rx) = crossbeam_channel::bounded(1);
    c.exists_watch(&p, move |e| {
        let _ = tx.send(e);
    })
    .unwrap();
    plain.delete().for_path(&format!("/{ns}{p}")).unwrap();
    let ev = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(ev.path, p);
    assert_eq!(ev.event_type, EventType::NodeDeleted);
    c.close();
    plain.close();
}

/// Curator creates the namespace's nodes on first use; a create directly
/// under a fresh namespace must not fail with NoNode.
#[test]
fn a_fresh_namespace_is_created_on_first_use() {
    let server = shared_server();
    let ns = format!("{}/sub", unique("fresh-ns").trim_start_matches('/'));
    let c = start_connected(
        Client::builder()
            .connect_string(server.connect_string())
            .namespace(ns.clone()),
    );
    let plain = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &plain);
    assert!(plain.exists(&format!("/{ns}")).unwrap().is_none());
    let created = c.create().for_path("/a", b"x");
    assert_eq!(
        created.as_deref().ok(),
        Some("/a"),
        "{created:?}\n{}",
        ctx.dump()
    );
    let (data, _) = plain.get_data(&format!("/{ns}/a")).unwrap();
    assert_eq!(data, b"x");
    assert_eq!(c.get_children("/").unwrap(), vec!["a"]);
    c.close();
    plain
        .delete()
        .deleting_children_if_needed()
        .for_path(&format!("/{ns}"))
        .unwrap();
    plain.close();
}

#[test]
fn server_restart_within_session_is_suspended_then_reconnected() {
    let mut server = TestingServer::start().unwrap();
    // Well above a JVM's stop and start on a loaded machine (over 7 s
    // seen), so the session outlives the restart.
    let c = connect(&server.connect_string(), Duration::from_secs(30));
    let ctx = Ctx::new(&server, &c);
    let states = c.listen();
    let session = c.session_id();
    let eph = c
        .create()
        .mode(CreateMode::Ephemeral)
        .for_path("/eph", b"")
        .unwrap();
    server.stop().unwrap();
    ctx.expect(&states, ConnectionState::Suspended, Duration::from_secs(10));
    server.restart().unwrap();
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(20),
    );
    assert_eq!(c.session_id(), session, "{}", ctx.dump());
    assert!(c.exists(&eph).unwrap().is_some(), "{}", ctx.dump());
    c.close();
}

#[test]
fn server_down_past_session_timeout_is_lost_then_a_new_session() {
    let mut server = TestingServer::start().unwrap();
    let c = connect(&server.connect_string(), Duration::from_secs(2));
    let ctx = Ctx::new(&server, &c);
    let states = c.listen();
    let session = c.session_id();
    server.stop().unwrap();
    ctx.expect(&states, ConnectionState::Suspended, Duration::from_secs(10));
    let suspended = Instant::now();
    ctx.expect(&states, ConnectionState::Lost, Duration::from_secs(10));
    assert!(
        suspended.elapsed() <= Duration::from_secs(4),
        "{}",
        ctx.dump()
    );
    server.restart().unwrap();
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(30),
    );
    assert_ne!(c.session_id(), session, "{}", ctx.dump());
    c.create()
        .mode(CreateMode::Ephemeral)
        .for_path("/after-lost", b"")
        .unwrap();
    c.close();
}

#[test]
fn short_partition_is_suspended_then_reconnected_same_session() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let session_timeout = Duration::from_secs(6);
    let c = connect(&proxy.connect_string(), session_timeout);
    let ctx = Ctx::new(server, &c);
    let states = c.listen();
    let session = c.session_id();
    let silent_since = Instant::now();
    proxy.pause();
    ctx.expect(&states, ConnectionState::Suspended, Duration::from_secs(10));
    let to_suspend = silent_since.elapsed();
    // Silence is noticed after 2/3 of the session timeout (plus a tick).
    assert!(
        to_suspend <= session_timeout * 2 / 3 + Duration::from_millis(1500),
        "suspended after {to_suspend:?}\n{}",
        ctx.dump()
    );
    proxy.resume();
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(20),
    );
    assert_eq!(c.session_id(), session, "{}", ctx.dump());
    c.close();
}

#[test]
fn long_partition_is_lost_by_the_session_timeout_and_recovers() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let session_timeout = Duration::from_secs(3);
    let c = connect(&proxy.connect_string(), session_timeout);
    let ctx = Ctx::new(server, &c);
    let states = c.listen();
    let session = c.session_id();
    let silent_since = Instant::now();
    proxy.pause();
    ctx.expect(&states, ConnectionState::Suspended, Duration::from_secs(10));
    ctx.expect(&states, ConnectionState::Lost, Duration::from_secs(10));
    let to_lost = silent_since.elapsed();
    assert!(
        to_lost <= session_timeout + Duration::from_millis(1500),
        "lost after {to_lost:?}\n{}",
        ctx.dump()
    );
    proxy.resume();
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(20),
    );
    assert_ne!(c.session_id(), session);
    c.exists("/").unwrap();
    c.close();
}

#[test]
fn cut_connections_reconnect_to_the_same_session() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let states = c.listen();
    let session = c.session_id();
    proxy.cut();
    ctx.expect(&states, ConnectionState::Suspended, Duration::from_secs(10));
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(20),
    );
    assert_eq!(c.session_id(), session, "{}", ctx.dump());
    c.close();
}

/// On a silent partition a call returns by its deadline, and a call with
/// none once silence detection (2/3 of the session timeout) drops the
/// connection, as the Java client's do; a request on a live connection is
/// never given up early and sent again, which could apply it twice.
#[test]
fn no_call_blocks_past_its_deadline_or_silence_detection_on_a_silent_partition() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(6))
            .connection_timeout(Duration::from_secs(1))
            .retry_policy(RetryNTimes::new(0, Duration::ZERO)),
    );
    proxy.pause();
    let t = Instant::now();
    let err = c
        .with_timeout(Duration::from_millis(500))
        .exists("/")
        .unwrap_err();
    assert!(err.is(ErrorCode::OperationTimeout), "{err}");
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "blocked {:?} past a 500 ms deadline",
        t.elapsed()
    );
    let err = c.exists("/").unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(
        t.elapsed() < Duration::from_secs(7),
        "blocked {:?}; silence detection drops the connection after 4 s",
        t.elapsed()
    );
    let t = Instant::now();
    c.close();
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "close blocked {:?}",
        t.elapsed()
    );
}

#[test]
fn watches_survive_a_reconnect_and_see_changes_made_meanwhile() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), Duration::from_secs(10));
    let other = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let states = c.listen();
    let path = unique("watched");
    other.create().for_path(&path, b"v1").unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let tx2 = tx.clone();
    c.get_data_watch(&path, move |e| {
        let _ = tx.send(e);
    })
    .unwrap();
    c.exists_watch(&format!("{path}-later"), move |e| {
        let _ = tx2.send(e);
    })
    .unwrap();
    // The change happens while the client is cut off; after reconnecting,
    // the re-armed watches must report it.
    proxy.pause();
    ctx.expect(&states, ConnectionState::Suspended, Duration::from_secs(15));
    other.set_data(&path, b"v2", None).unwrap();
    other
        .create()
        .for_path(&format!("{path}-later"), b"")
        .unwrap();
    proxy.resume();
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(20),
    );
    let mut seen: Vec<_> = (0..2)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(10))
                .expect("watch fired")
        })
        .map(|e| e.event_type)
        .collect();
    seen.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(
        seen,
        vec![EventType::NodeCreated, EventType::NodeDataChanged]
    );
    c.close();
    other.close();
}

#[test]
fn auth_is_sent_again_after_a_reconnect() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(10))
            .authorization("digest", b"alice:secret")
            .acl_provider(FixedAclProvider(Acl::creator_all())),
    );
    let ctx = Ctx::new(server, &c);
    let states = c.listen();
    let path = unique("private");
    c.create().for_path(&path, b"secret").unwrap();
    let stranger = connect(&server.connect_string(), Duration::from_secs(10));
    assert!(stranger.get_data(&path).unwrap_err().is(ErrorCode::NoAuth));
    proxy.cut();
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(20),
    );
    assert_eq!(c.get_data(&path).unwrap().0, b"secret", "{}", ctx.dump());
    c.delete().for_path(&path).unwrap();
    c.close();
    stranger.close();
}

#[test]
fn an_expired_session_is_lost_then_replaced() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let states = c.listen();
    let session = c.session_id();
    let eph = c
        .create()
        .mode(CreateMode::Ephemeral)
        .for_path(&unique("eph"), b"")
        .unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    c.get_data_watch(&eph, move |e| {
        let _ = tx.send(e);
    })
    .unwrap();
    c.expire_session_for_testing().unwrap();
    ctx.expect(&states, ConnectionState::Lost, Duration::from_secs(20));
    // A watch of the old session is woken, not left hanging.
    assert!(rx.recv_timeout(Duration::from_secs(10)).is_ok());
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(20),
    );
    assert_ne!(c.session_id(), session);
    assert!(c.exists(&eph).unwrap().is_none(), "{}", ctx.dump());
    c.close();
}

#[test]
fn listeners_may_call_the_client_and_panicking_watchers_are_contained() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let calls = Arc::new(AtomicUsize::new(0));
    let (c2, calls2) = (c.clone(), Arc::clone(&calls));
    let _h = c.add_listener(move |s| {
        if s == ConnectionState::Reconnected && c2.exists("/").is_ok() {
            calls2.fetch_add(1, Ordering::SeqCst);
        }
    });
    let path = unique("panic");
    c.create().for_path(&path, b"").unwrap();
    c.get_data_watch(&path, |_| panic!("a watcher that panics"))
        .unwrap();
    c.set_data(&path, b"x", None).unwrap();
    proxy.cut();
    wait_until(
        Duration::from_secs(20),
        || calls.load(Ordering::SeqCst) == 1,
        || ctx.dump(),
    );
    // The client still works after the panicking watcher.
    c.set_data(&path, b"y", None).unwrap();
    c.close();
}

#[test]
fn guaranteed_delete_finishes_in_the_background() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(20))
            .connection_timeout(Duration::from_millis(500))
            .retry_policy(RetryNTimes::new(0, Duration::ZERO)),
    );
    let ctx = Ctx::new(server, &c);
    let path = unique("doomed");
    c.create().for_path(&path, b"").unwrap();
    proxy.set_refuse(true);
    proxy.cut();
    let err = c.delete().guaranteed().for_path(&path).unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert_eq!(c.pending_background_work(), 1);
    proxy.set_refuse(false);
    let observer = connect(&server.connect_string(), Duration::from_secs(10));
    wait_until(
        Duration::from_secs(30),
        || observer.exists(&path).unwrap().is_none(),
        || ctx.dump(),
    );
    wait_until(
        Duration::from_secs(10),
        || c.pending_background_work() == 0,
        || ctx.dump(),
    );
    c.close();
    observer.close();
}

/// `in_background` never waits on a broken connection, even with a retry
/// policy that would keep a plain call busy for a long time.
#[test]
fn background_delete_returns_at_once_when_disconnected() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(20))
            .connection_timeout(Duration::from_secs(5))
            .retry_policy(RetryNTimes::new(100, Duration::from_millis(100))),
    );
    let ctx = Ctx::new(server, &c);
    let path = unique("doomed-bg");
    c.create()
        .mode(CreateMode::Ephemeral)
        .for_path(&path, b"")
        .unwrap();
    let states = c.listen();
    proxy.set_refuse(true);
    proxy.cut();
    ctx.expect(&states, ConnectionState::Suspended, Duration::from_secs(10));
    let started = Instant::now();
    c.delete().in_background().for_path(&path).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(c.pending_background_work(), 1);
    // Still there while the client is away, gone once it is back.
    let observer = connect(&server.connect_string(), Duration::from_secs(10));
    assert!(observer.exists(&path).unwrap().is_some());
    proxy.set_refuse(false);
    wait_until(
        Duration::from_secs(30),
        || observer.exists(&path).unwrap().is_none() && c.pending_background_work() == 0,
        || ctx.dump(),
    );
    assert!(
        c.state().is_some_and(ConnectionState::is_connected),
        "{}",
        ctx.dump()
    );
    c.close();
    observer.close();
}

/// A client behind its own proxy, and a protected ephemeral-sequential
/// create of it whose reply does not come back.
struct LostCreateReply {
    proxy: FaultProxy,
    c: Client,
    ctx: Ctx,
    observer: Client,
    parent: String,
}

impl LostCreateReply {
    fn new(
        session: Duration,
        connection: Duration,
        policy: impl latchkey_framework::RetryPolicy + 'static,
    ) -> Self {
        let server = shared_server();
        let proxy = FaultProxy::start(server.addr()).unwrap();
        let c = start_connected(
            Client::builder()
                .connect_string(proxy.connect_string())
                .session_timeout(session)
                .connection_timeout(connection)
                .retry_policy(policy),
        );
        let ctx = Ctx::new(server, &c);
        let observer = connect(&server.connect_string(), Duration::from_secs(10));
        let parent = unique("protected-lost");
        c.create().for_path(&parent, b"").unwrap();
        LostCreateReply {
            proxy,
            c,
            ctx,
            observer,
            parent,
        }
    }

    /// Sends the create with replies paused; once its node exists on the
    /// server, runs `lose` (which ends with the proxy resumed) and returns
    /// the create's outcome, within 20 s.
    fn create(&self, lose: impl FnOnce()) -> latchkey_framework::Result<String> {
        self.proxy.pause_replies();
        let creator = {
            let c = self.c.clone();
            let parent = self.parent.clone();
            std::thread::spawn(move || {
                c.create()
                    .with_protection()
                    .mode(CreateMode::EphemeralSequential)
                    .for_path(&format!("{parent}/n-"), b"")
            })
        };
        wait_until(
            Duration::from_secs(10),
            || self.children().len() == 1,
            || self.ctx.dump(),
        );
        lose();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !creator.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            creator.is_finished(),
            "create still running\n{}",
            self.ctx.dump()
        );
        creator.join().unwrap()
    }

    fn children(&self) -> Vec<String> {
        self.observer.get_children(&self.parent).unwrap()
    }
}

impl Drop for LostCreateReply {
    fn drop(&mut self) {
        self.c.close();
        let _ = self
            .observer
            .delete()
            .deleting_children_if_needed()
            .for_path(&self.parent);
        self.observer.close();
    }
}

/// A protected ephemeral create whose reply was lost, retried on the same
/// session after a reconnect, finds the node the lost reply was for and
/// returns it: one node, not two (the reason protected mode exists).
#[test]
fn protected_create_whose_reply_was_lost_returns_its_node_once() {
    let t = LostCreateReply::new(
        Duration::from_secs(20),
        Duration::from_secs(2),
        latchkey_framework::RetryNTimes::new(5, Duration::from_millis(100)),
    );
    let session = t.c.session_id();
    let node = t.create(|| {
        t.proxy.cut();
        t.proxy.resume();
    });
    let children = t.children();
    assert_eq!(t.c.session_id(), session, "{}", t.ctx.dump());
    assert!(
        children.len() == 1
            && node
                .as_ref()
                .is_ok_and(|n| *n == format!("{}/{}", t.parent, children[0])),
        "the create returned {node:?}; the parent holds {children:?}\n{}",
        t.ctx.dump()
    );
}

/// A protected ephemeral create whose reply was lost, retried on a new
/// session after the client declared the old one lost, must not return the
/// old session's node (which goes when that session expires): Curator's
/// `ProtectedMode.validateFoundNode`.
#[test]
fn protected_create_does_not_return_a_node_of_a_lost_session() {
    let t = LostCreateReply::new(
        Duration::from_secs(4),
        Duration::from_secs(1),
        latchkey_framework::RetryForever::new(Duration::from_millis(200)),
    );
    let old_session = t.c.session_id();
    let states = t.c.listen();
    let node = t
        .create(|| {
            t.ctx
                .expect(&states, ConnectionState::Lost, Duration::from_secs(20));
            t.proxy.resume();
        })
        .unwrap();
    let c = &t.c;
    assert_ne!(c.session_id(), old_session, "{}", t.ctx.dump());
    let owner = t.observer.exists(&node).unwrap().map(|s| s.ephemeral_owner);
    assert_eq!(
        owner,
        Some(c.session_id()),
        "{node} belongs to session {owner:x?}, not the client's {:x} (old {old_session:x})\n{}",
        c.session_id(),
        t.ctx.dump()
    );
}

/// Curator's background deletes re-queue only on connection loss: an
/// error that retrying cannot fix (the node gained a child, its version
/// moved on) ends the job instead of keeping it busy for ever.
#[test]
fn background_deletes_drop_errors_that_retrying_cannot_fix() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(20))
            .connection_timeout(Duration::from_secs(5)),
    );
    let ctx = Ctx::new(server, &c);
    let observer = connect(&server.connect_string(), Duration::from_secs(10));
    let parent = unique("not-empty");
    let versioned = unique("bad-version");
    c.create().for_path(&parent, b"").unwrap();
    let stat = c.create().for_path_with_stat(&versioned, b"").unwrap().1;
    let states = c.listen();
    proxy.set_refuse(true);
    proxy.cut();
    ctx.expect(&states, ConnectionState::Suspended, Duration::from_secs(10));
    c.delete().in_background().for_path(&parent).unwrap();
    c.delete()
        .in_background()
        .with_version(stat.version)
        .for_path(&versioned)
        .unwrap();
    assert_eq!(c.pending_background_work(), 2);
    // Meanwhile the nodes change so that neither delete can succeed.
    observer
        .create()
        .for_path(&format!("{parent}/child"), b"")
        .unwrap();
    observer.set_data(&versioned, b"moved on", None).unwrap();
    proxy.set_refuse(false);
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(20),
    );
    wait_until(
        Duration::from_secs(10),
        || c.pending_background_work() == 0,
        || {
            format!(
                "{} jobs still queued\n{}",
                c.pending_background_work(),
                ctx.dump()
            )
        },
    );
    assert!(observer.exists(&parent).unwrap().is_some());
    assert!(observer.exists(&versioned).unwrap().is_some());
    observer
        .delete()
        .deleting_children_if_needed()
        .for_path(&parent)
        .unwrap();
    observer.delete().for_path(&versioned).unwrap();
    c.close();
    observer.close();
}

/// A member that loses its quorum serves reads only (`readonlymode.enabled`):
/// a client that allows it reports `ReadOnly`, can read but not write, and
/// goes back to read-write once the quorum returns.
#[test]
fn read_only_state_when_the_quorum_is_gone() {
    let config = latchkey_test::ServerConfig {
        system_properties: vec![("readonlymode.enabled".into(), "true".into())],
        // A read-only server refuses global sessions, old and new alike
        // (new ones get NOTREADONLY); it serves local sessions only.
        extra: vec![("localSessionsEnabled".into(), "true".into())],
        ..Default::default()
    };
    let mut cluster = latchkey_test::TestingCluster::start_with(3, config).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(cluster.member_connect_string(0))
            .session_timeout(Duration::from_secs(4))
            .connection_timeout(Duration::from_secs(2))
            .retry_policy(RetryNTimes::new(3, Duration::from_millis(200)))
            .can_be_read_only(true),
    );
    let dump = |c: &Client, cluster: &latchkey_test::TestingCluster| {
        format!(
            "client states: {:?}\nmember 0:\n{}",
            c.state_history(),
            cluster.log_tail(0, 20)
        )
    };
    let path = unique("ro");
    c.create().for_path(&path, b"before").unwrap();
    let states = c.listen();
    cluster.kill(1).unwrap();
    cluster.kill(2).unwrap();
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        match states.recv_deadline(deadline) {
            Ok(ConnectionState::ReadOnly) => break,
            Ok(_) => {}
            Err(_) => panic!("no ReadOnly\n{}", dump(&c, &cluster)),
        }
    }
    // Reads are served; writes are refused with ZooKeeper's code.
    assert_eq!(c.get_data(&path).unwrap().0, b"before");
    let err = c.set_data(&path, b"after", None).unwrap_err();
    assert!(err.is(ErrorCode::NotReadOnly), "{err}");
    cluster.restart(1).unwrap();
    cluster.restart(2).unwrap();
    wait_until(
        Duration::from_secs(60),
        || c.set_data(&path, b"after", None).is_ok(),
        || dump(&c, &cluster),
    );
    assert_eq!(
        c.state(),
        Some(ConnectionState::Reconnected),
        "{}",
        dump(&c, &cluster)
    );
    c.close();
}

/// A waker runs on the engine thread as the event is read, gets the event
/// like a watcher does, and a panicking one does not stop the session.
#[test]
fn data_watch_wakers_run_on_the_engine_thread() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let other = connect(&server.connect_string(), Duration::from_secs(10));
    let path = unique("waker");
    other.create().for_path(&path, b"").unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    c.get_data_watch_waker(&path, move |e| {
        let _ = tx.send((e, std::thread::current().name().map(str::to_owned)));
    })
    .unwrap();
    other.delete().for_path(&path).unwrap();
    let (event, thread) = rx.recv_timeout(Duration::from_secs(10)).expect("woken");
    assert_eq!(event.event_type, latchkey_framework::EventType::NodeDeleted);
    assert_eq!(event.path, path);
    assert_eq!(thread.as_deref(), Some("latchkey-engine"));

    other.create().for_path(&path, b"").unwrap();
    c.get_data_watch_waker(&path, |_| panic!("a waker that panics"))
        .unwrap();
    other.set_data(&path, b"x", None).unwrap();
    wait_until(
        Duration::from_secs(10),
        || c.get_data(&path).is_ok_and(|(d, _)| d == b"x"),
        String::new,
    );
    c.close();
    other.close();
}

/// "Could not connect" says why: the host did not resolve, or nothing
/// listens there. The error still counts as connection loss.
#[test]
fn connection_errors_say_why_the_client_could_not_connect() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused_at = closed.local_addr().unwrap();
    drop(closed);
    for (connect, why) in [
        ("no-such-host.invalid:2181".to_owned(), "cannot resolve"),
        (refused_at.to_string(), "refused"),
    ] {
        let c = Client::builder()
            .connect_string(&connect)
            .connection_timeout(Duration::from_millis(500))
            .retry_policy(RetryNTimes::new(0, Duration::ZERO))
            .build()
            .unwrap();
        c.start().unwrap();
        let err = c.exists("/x").unwrap_err();
        let shown = err.to_string();
        assert!(err.is(ErrorCode::ConnectionLoss), "{shown}");
        assert!(
            shown.contains(why) && shown.contains("/x"),
            "{connect}: {shown:?} should name /x and say {why:?}"
        );
        c.close();
    }
}

/// The README's start: a client pointed at a port where nothing listens
/// fails within the time it was given, saying where it tried to connect
/// and why that failed, instead of returning `Ok(false)` and leaving the
/// first operation to block for its whole retry loop.
#[test]
fn a_client_that_cannot_connect_in_time_gets_an_error_naming_the_server() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let c = Client::new(&addr.to_string()).unwrap();
    c.start().unwrap();
    let timeout = Duration::from_secs(2);
    let t0 = Instant::now();
    let err = c.block_until_connected_or_err(timeout).unwrap_err();
    let took = t0.elapsed();
    assert!(
        took >= timeout && took < timeout + Duration::from_secs(1),
        "returned after {took:?}: {err}"
    );
    assert!(matches!(err, Error::ConnectTimeout { .. }), "{err:?}");
    assert!(err.is(ErrorCode::ConnectionLoss), "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains(&format!("at {addr} within 2s"))
            && shown.contains(&format!("connection to {addr} refused")),
        "{shown}"
    );

    // A handle's deadline bounds the wait as well.
    let t0 = Instant::now();
    let err = c
        .with_timeout(Duration::from_millis(300))
        .block_until_connected_or_err(Duration::from_secs(30))
        .unwrap_err();
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "{:?}: {err}",
        t0.elapsed()
    );
    c.close();
    assert!(matches!(
        c.block_until_connected_or_err(timeout),
        Err(Error::Closed)
    ));

    let live = Client::new(&shared_server().connect_string()).unwrap();
    live.start().unwrap();
    live.block_until_connected_or_err(Duration::from_secs(30))
        .unwrap();
    live.close();
}

/// A bad path is named once, with its reason once: `invalid path
/// "probe/b": path must start with /`, whichever call refused it.
#[test]
fn a_bad_path_error_says_invalid_path_once() {
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let cases: Vec<(&str, Error)> = vec![
        ("create", c.create().for_path("probe/b", b"").unwrap_err()),
        (
            "sequential create",
            c.create()
                .mode(CreateMode::PersistentSequential)
                .for_path("probe/b", b"")
                .unwrap_err(),
        ),
        ("get_data", c.get_data("probe/b").unwrap_err()),
        ("delete", c.delete().for_path("probe/b").unwrap_err()),
        (
            "transaction",
            c.transaction().create("probe/b", b"").commit().unwrap_err(),
        ),
        (
            "mutex",
            latchkey_recipes::InterProcessMutex::new(&c, "probe/b").unwrap_err(),
        ),
    ];
    for (call, err) in cases {
        let shown = err.to_string();
        assert!(matches!(err, Error::InvalidPath { .. }), "{call}: {err:?}");
        assert_eq!(shown.matches("invalid path").count(), 1, "{call}: {shown}");
        assert_eq!(shown.matches("probe/b").count(), 1, "{call}: {shown}");
        assert!(
            shown.starts_with("invalid path \"probe/b\": ")
                && shown.ends_with("path must start with /"),
            "{call}: {shown}"
        );
    }
    c.close();
}

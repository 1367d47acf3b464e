//! `PersistentWatcher` against a real ZooKeeper: node events of a
//! persistent and a persistent recursive watch, each exactly once, through
//! a cut connection, an expired session and a ZooKeeper restart (set again
//! on the new session, and each reset told), with a namespace, and its
//! channels ending when it or its client closes.
//!
//! Curator's `TestPersistentWatcher`:
//!
//! | Curator method | here |
//! |---|---|
//! | `testConnectionLostRecursive` | `the_watch_is_set_again_after_zookeeper_restarts` (recursive watcher) |
//! | `testConnectionLost` | `the_watch_is_set_again_after_zookeeper_restarts` (plain watcher). Curator's listener also gets the client's `Disconnected` event; here connection states come from `Client::listen`, and the resets from `listen_resets` |
//! | `testNamespacedWatching` | `a_namespaced_watch_tells_namespace_relative_paths` |
//! | `testConcurrentClientClose` | `closing_the_client_ends_the_channels` |
//! | `testAfterClientClose` | `closing_the_client_ends_the_channels` (a watcher started on a closed client) |
//! | `testCuratorListenersNotLeaking` | `started_and_closed_watchers_leave_no_watch_behind` |

mod common;

use std::time::Duration;

use common::*;
use crossbeam_channel::Receiver;
use latchkey_framework::{
    Client, ConnectionState, EventType, ExponentialBackoffRetry, WatchedEvent, WatcherType,
};
use latchkey_recipes::{PersistentWatcher, WatchReset};
use latchkey_test::{FaultProxy, TestingServer};

const WAIT: Duration = Duration::from_secs(10);

/// The next event, or a failure naming what was expected.
fn expect_event(rx: &Receiver<WatchedEvent>, event_type: EventType, path: &str, ctx: &Ctx) {
    let ev = rx
        .recv_timeout(WAIT)
        .unwrap_or_else(|_| panic!("no {event_type:?} {path} within {WAIT:?}\n{}", ctx.dump()));
    assert_eq!(
        (ev.event_type, ev.path.as_str()),
        (event_type, path),
        "{}",
        ctx.dump()
    );
}

fn expect_reset(rx: &Receiver<WatchReset>, want: WatchReset, ctx: &Ctx) {
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(got) => assert_eq!(got, want, "{}", ctx.dump()),
        Err(e) => panic!("no reset {want:?}: {e}\n{}", ctx.dump()),
    }
}

/// Nothing more arrives for a short while: no event was told twice.
fn quiet<T: std::fmt::Debug>(rx: &Receiver<T>, what: &str) {
    if let Ok(extra) = rx.recv_timeout(Duration::from_millis(200)) {
        panic!("{what}: unexpected {extra:?}");
    }
}

fn started(
    c: &Client,
    path: &str,
    recursive: bool,
) -> (
    PersistentWatcher,
    Receiver<WatchedEvent>,
    Receiver<WatchReset>,
) {
    let w = PersistentWatcher::new(c, path, recursive).unwrap();
    let (events, resets) = (w.listen(), w.listen_resets());
    w.start().unwrap();
    (w, events, resets)
}

/// Curator's TestPersistentWatcher.testConnectionLost and
/// testConnectionLostRecursive: ZooKeeper stops for longer than one
/// client's session (lost: the watch is added on the new session) and
/// shorter than another's (the client sets it again itself); both tell
/// the reset, and every change after it is told once.
#[test]
fn the_watch_is_set_again_after_zookeeper_restarts() {
    let mut server = TestingServer::start().expect("start ZooKeeper");
    // One client per watcher: ZooKeeper 3.8 keeps one watch mode per
    // client and path, so a plain and a recursive watch on one path
    // through one client interfere (the plain one's child events were
    // not delivered).
    let short = || {
        start_connected(
            Client::builder()
                .connect_string(server.connect_string())
                .session_timeout(Duration::from_millis(1500))
                .connection_timeout(Duration::from_secs(2))
                .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 10)),
        )
    };
    let (short_rec, short_plain) = (short(), short());
    let long = connect(&server.connect_string(), Duration::from_secs(30));
    let ctx = Ctx::new(&server, &short_rec);
    let states = [short_rec.listen(), short_plain.listen()];
    let base = unique("/pwatcher/restart");
    let main = format!("{base}/main");
    let (rec, rec_events, rec_resets) = started(&short_rec, &main, true);
    let (plain, plain_events, plain_resets) = started(&short_plain, &main, false);
    let (kept, kept_events, kept_resets) = started(&long, &main, true);
    for resets in [&rec_resets, &plain_resets, &kept_resets] {
        expect_reset(resets, WatchReset::Started, &ctx);
    }
    assert!(rec.is_recursive() && !plain.is_recursive());

    let child = format!("{main}/a");
    long.create()
        .creating_parents_if_needed()
        .for_path(&child, b"")
        .unwrap();
    expect_event(&rec_events, EventType::NodeCreated, &main, &ctx);
    expect_event(&rec_events, EventType::NodeCreated, &child, &ctx);
    expect_event(&plain_events, EventType::NodeCreated, &main, &ctx);
    expect_event(&plain_events, EventType::NodeChildrenChanged, &main, &ctx);
    expect_event(&kept_events, EventType::NodeCreated, &main, &ctx);
    expect_event(&kept_events, EventType::NodeCreated, &child, &ctx);

    server.stop().unwrap();
    for states in &states {
        ctx.expect(states, ConnectionState::Lost, Duration::from_secs(20));
    }
    server.restart().unwrap();
    expect_reset(&rec_resets, WatchReset::NewSession, &ctx);
    expect_reset(&plain_resets, WatchReset::NewSession, &ctx);
    expect_reset(&kept_resets, WatchReset::Reconnected, &ctx);

    long.set_data(&child, b"foo", None).unwrap();
    expect_event(&rec_events, EventType::NodeDataChanged, &child, &ctx);
    expect_event(&kept_events, EventType::NodeDataChanged, &child, &ctx);
    long.set_data(&main, b"bar", None).unwrap();
    expect_event(&rec_events, EventType::NodeDataChanged, &main, &ctx);
    expect_event(&plain_events, EventType::NodeDataChanged, &main, &ctx);
    expect_event(&kept_events, EventType::NodeDataChanged, &main, &ctx);
    for (rx, what) in [
        (&rec_events, "recursive"),
        (&plain_events, "plain"),
        (&kept_events, "kept"),
    ] {
        quiet(rx, what);
    }
    drop((rec, plain, kept));
    assert!(rec_events.recv_timeout(WAIT).is_err(), "closed");
}

/// A cut connection (same session) and an expired session each tell
/// their reset, and events go on, each told once; a watch removed by
/// someone else is added again.
#[test]
fn resets_are_told_for_a_reconnect_an_expiry_and_a_removal() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = connect(&proxy.connect_string(), Duration::from_secs(10));
    let writer = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let node = unique("/pwatcher/resets");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&node, b"")
        .unwrap();
    let (w, events, resets) = started(&c, &node, false);
    expect_reset(&resets, WatchReset::Started, &ctx);
    let mut n = 0;
    let mut change = |ctx: &Ctx| {
        n += 1;
        writer.set_data(&node, &[n], None).unwrap();
        expect_event(&events, EventType::NodeDataChanged, &node, ctx);
        quiet(&events, "after a change");
    };
    change(&ctx);

    proxy.cut();
    expect_reset(&resets, WatchReset::Reconnected, &ctx);
    change(&ctx);

    let session = c.session_id();
    c.expire_session_for_testing().unwrap();
    expect_reset(&resets, WatchReset::NewSession, &ctx);
    assert_ne!(c.session_id(), session);
    change(&ctx);

    // Someone removes this client's watches on the path.
    c.remove_watches(&node, WatcherType::Any).unwrap();
    expect_reset(&resets, WatchReset::NewSession, &ctx);
    change(&ctx);
    quiet(&resets, "resets");

    w.close();
    assert!(events.recv_timeout(WAIT).is_err(), "closed");
    assert!(resets.recv_timeout(WAIT).is_err(), "closed");
    writer.set_data(&node, b"after", None).unwrap();
    assert_eq!(c.pending_watches(), 0, "close removed the watch");
}

/// Curator's TestPersistentWatcher.testNamespacedWatching: a watcher
/// through a namespaced client tells paths inside the namespace, and
/// ends when the client closes.
#[test]
fn a_namespaced_watch_tells_namespace_relative_paths() {
    let server = shared_server();
    let ns = unique("/pwatcher-ns")
        .trim_start_matches('/')
        .replace('/', "-");
    let c = start_connected(
        Client::builder()
            .connect_string(server.connect_string())
            .namespace(ns.clone()),
    );
    let plain = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let (_w, events, resets) = started(&c, "/main", true);
    expect_reset(&resets, WatchReset::Started, &ctx);
    plain
        .create()
        .creating_parents_if_needed()
        .for_path(&format!("/{ns}/main"), b"")
        .unwrap();
    plain
        .create()
        .for_path(&format!("/{ns}/main/a"), b"")
        .unwrap();
    expect_event(&events, EventType::NodeCreated, "/main", &ctx);
    expect_event(&events, EventType::NodeCreated, "/main/a", &ctx);
    c.close();
    assert!(
        events.recv_timeout(WAIT).is_err(),
        "the channel ends with the client (Curator tells Closed)"
    );
    assert!(resets.recv_timeout(WAIT).is_err());
}

/// Curator's TestPersistentWatcher.testConcurrentClientClose and
/// testAfterClientClose: the channels end when the client closes, also
/// when it was closed before the watcher started.
#[test]
fn closing_the_client_ends_the_channels() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let (w, events, _resets) = started(&c, "/top/main", true);
    c.close();
    assert!(events.recv_timeout(WAIT).is_err(), "ends with the client");
    w.close();

    let closed = connect(&server.connect_string(), Duration::from_secs(10));
    closed.close();
    let (w, events, resets) = started(&closed, "/top/main", true);
    assert!(events.recv_timeout(WAIT).is_err(), "a closed client");
    assert!(resets.recv_timeout(WAIT).is_err());
    w.close();
    assert!(w.start().is_err(), "started already");
}

/// Curator's TestPersistentWatcher.testCuratorListenersNotLeaking: many
/// watchers started and closed on one client (each closed once set, or
/// at once) leave no watch and no thread behind.
#[test]
fn started_and_closed_watchers_leave_no_watch_behind() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let path = unique("/pwatcher/leak");
    for i in 0..100 {
        let (w, _events, resets) = started(&c, &path, i % 2 == 0);
        if i % 4 < 2 {
            expect_reset(&resets, WatchReset::Started, &ctx);
        }
        w.close();
    }
    // A watch whose add was cut short by its close may have been applied
    // by the server without this client holding it: none is held here.
    assert_eq!(c.pending_watches(), 0);
    for bad in ["", "x", "/a/"] {
        assert!(PersistentWatcher::new(&c, bad, true).is_err(), "{bad:?}");
    }
    assert!(
        PersistentWatcher::new(&c, "/", true).is_ok(),
        "the whole tree"
    );
}

/// Issue 38, item 2: closing one of two watchers on the same path and
/// client removes its own watch alone (Curator removes only its watcher):
/// the other hears no reset and every one of 200 later changes.
#[test]
fn closing_one_of_two_watchers_on_a_path_leaves_the_other_whole() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let writer = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let node = unique("/pwatcher/two");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&node, b"")
        .unwrap();
    let (closed, _, closed_resets) = started(&c, &node, false);
    let (kept, events, resets) = started(&c, &node, false);
    expect_reset(&closed_resets, WatchReset::Started, &ctx);
    expect_reset(&resets, WatchReset::Started, &ctx);
    closed.close();
    for i in 0..200u32 {
        writer.set_data(&node, &i.to_be_bytes(), None).unwrap();
        expect_event(&events, EventType::NodeDataChanged, &node, &ctx);
    }
    quiet(&resets, "the watcher left");
    assert_eq!(c.pending_watches(), 1, "the watcher left keeps its watch");
    kept.close();
    assert_eq!(c.pending_watches(), 0);
}

/// Issue 38, item 3: a watcher closed while its client is disconnected
/// does not have its watch set again when the client reconnects (the
/// client does not count it, and the server sends it no event).
#[test]
fn a_watcher_closed_while_disconnected_is_not_set_again_on_reconnecting() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = connect(&proxy.connect_string(), Duration::from_secs(30));
    let writer = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let node = unique("/pwatcher/offline-close");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&node, b"")
        .unwrap();
    let (w, _events, resets) = started(&c, &node, false);
    expect_reset(&resets, WatchReset::Started, &ctx);
    proxy.set_refuse(true);
    proxy.cut();
    wait_until(
        WAIT,
        || c.state() == Some(ConnectionState::Suspended),
        || format!("not suspended\n{}", ctx.dump()),
    );
    w.close();
    proxy.set_refuse(false);
    wait_until(
        Duration::from_secs(20),
        || c.state() == Some(ConnectionState::Reconnected),
        || format!("not reconnected\n{}", ctx.dump()),
    );
    let before = c.metrics().watch_events;
    for i in 0..3u8 {
        writer.set_data(&node, &[i], None).unwrap();
    }
    // A watch event comes before this read's reply, which sees the change.
    assert_eq!(c.get_data(&node).unwrap().0, [2]);
    assert_eq!(
        c.metrics().watch_events - before,
        0,
        "the server still sent events for the closed watcher\n{}",
        ctx.dump()
    );
    assert_eq!(c.pending_watches(), 0, "the client still counts it");
}

//! Persistent and persistent-recursive watches (`addWatch`) against a real
//! ZooKeeper: they keep firing after many events, across a cut connection
//! and a server restart (re-armed with SetWatches2), and `removeWatches`
//! removes watches by kind.

mod common;

use std::time::Duration;

use common::*;
use crossbeam_channel::{unbounded, Receiver};
use latchkey_framework::{
    AddWatchMode, Client, ConnectionState, EventType, WatchedEvent, WatcherType,
};
use latchkey_test::{FaultProxy, TestingServer};

/// A watcher that sends every event to the returned channel.
fn collector() -> (
    impl Fn(WatchedEvent) + Send + Sync + 'static,
    Receiver<WatchedEvent>,
) {
    let (tx, rx) = unbounded();
    (
        move |ev: WatchedEvent| {
            let _ = tx.send(ev);
        },
        rx,
    )
}

/// The next event, or a failure naming what was expected.
fn next(rx: &Receiver<WatchedEvent>, what: &str, ctx: &Ctx) -> WatchedEvent {
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("no event for {what} within 20 s\n{}", ctx.dump()))
}

fn expect_event(rx: &Receiver<WatchedEvent>, event_type: EventType, path: &str, ctx: &Ctx) {
    let ev = next(rx, path, ctx);
    assert_eq!(
        (ev.event_type, ev.path.as_str()),
        (event_type, path),
        "{}",
        ctx.dump()
    );
}

/// Sets `node`'s data `n` times and checks both watchers saw each change.
fn changes_are_seen(
    writer: &Client,
    node: &str,
    n: usize,
    watchers: [&Receiver<WatchedEvent>; 2],
    ctx: &Ctx,
) {
    for i in 0..n {
        writer
            .set_data(node, format!("{i}").as_bytes(), None)
            .unwrap();
        for rx in watchers {
            expect_event(rx, EventType::NodeDataChanged, node, ctx);
        }
    }
}

#[test]
fn a_persistent_watch_keeps_firing_after_many_events_across_reconnects_and_restarts() {
    let mut server = TestingServer::start().unwrap();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), Duration::from_secs(30));
    let writer = connect(&server.connect_string(), Duration::from_secs(30));
    let ctx = Ctx::new(&server, &c);
    let states = c.listen();
    let base = unique("pw");
    let node = format!("{base}/node");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&node, b"")
        .unwrap();

    let (on_node, node_events) = collector();
    let (on_tree, tree_events) = collector();
    c.add_watch(&node, AddWatchMode::Persistent, on_node)
        .unwrap();
    c.add_watch(&base, AddWatchMode::PersistentRecursive, on_tree)
        .unwrap();

    // Many events: a one-shot watch would have fired once.
    changes_are_seen(&writer, &node, 100, [&node_events, &tree_events], &ctx);
    // A child: children-changed for the persistent watch only, created for
    // the recursive one.
    let child = format!("{node}/child");
    writer.create().for_path(&child, b"").unwrap();
    expect_event(&node_events, EventType::NodeChildrenChanged, &node, &ctx);
    expect_event(&tree_events, EventType::NodeCreated, &child, &ctx);

    // The connection is cut: the watches are set again on reconnect.
    proxy.cut();
    ctx.expect(&states, ConnectionState::Suspended, Duration::from_secs(10));
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(20),
    );
    rearmed(&c, &node);
    changes_are_seen(&writer, &node, 10, [&node_events, &tree_events], &ctx);

    // The server restarts (same data, the session survives).
    server.restart().unwrap();
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(40),
    );
    assert!(writer
        .block_until_connected(Duration::from_secs(30))
        .unwrap());
    rearmed(&c, &node);
    changes_are_seen(&writer, &node, 10, [&node_events, &tree_events], &ctx);
    writer.delete().for_path(&child).unwrap();
    expect_event(&node_events, EventType::NodeChildrenChanged, &node, &ctx);
    expect_event(&tree_events, EventType::NodeDeleted, &child, &ctx);

    // Removed, the persistent watch says so once and fires no more; the
    // recursive one goes on.
    c.remove_watches(&node, WatcherType::Persistent).unwrap();
    expect_event(&node_events, EventType::PersistentWatchRemoved, &node, &ctx);
    changes_are_seen_by_tree_only(&writer, &node, &tree_events, &node_events, &ctx);
    // Known here to hold none: refused without asking the server.
    let before = c.metrics().requests_sent;
    let err = c
        .remove_watches(&node, WatcherType::Persistent)
        .unwrap_err();
    assert!(
        err.is(latchkey_framework::ErrorCode::NoWatcher) && err.to_string().contains(&node),
        "{err}"
    );
    let sent = c.metrics().requests_sent - before;
    assert_eq!(sent, 0, "the removal of a watch not held sent requests");
    c.close();
    writer.close();
}

fn changes_are_seen_by_tree_only(
    writer: &Client,
    node: &str,
    tree: &Receiver<WatchedEvent>,
    removed: &Receiver<WatchedEvent>,
    ctx: &Ctx,
) {
    writer.set_data(node, b"after", None).unwrap();
    expect_event(tree, EventType::NodeDataChanged, node, ctx);
    // Both watchers run on the one watcher thread, in the server's order:
    // had the removed watch fired, its event would be queued by now.
    assert!(removed.try_recv().is_err(), "a removed watch fired");
}

/// `Reconnected` is told once the handshake is answered; the re-armed
/// persistent watch reaches the server just after. Another session's write
/// in between raises no event (ZooKeeper sends no catch-up event for
/// persistent watches, unlike one-shot ones). A request of the watching
/// client itself is answered after the re-arm, so a write made after that
/// answer is seen. A delay on the watching client's link widens the window.
#[test]
fn a_write_after_the_watching_clients_first_reply_since_reconnecting_is_seen() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), Duration::from_secs(30));
    let writer = connect(&server.connect_string(), Duration::from_secs(30));
    let ctx = Ctx::new(server, &c);
    let states = c.listen();
    let node = unique("pw-rearm");
    writer.create().for_path(&node, b"").unwrap();
    let (on_node, events) = collector();
    c.add_watch(&node, AddWatchMode::Persistent, on_node)
        .unwrap();

    proxy.set_delay(Duration::from_millis(300));
    proxy.cut();
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(20),
    );
    rearmed(&c, &node);
    writer.set_data(&node, b"after", None).unwrap();
    expect_event(&events, EventType::NodeDataChanged, &node, &ctx);
    c.close();
    writer.close();
}

/// Returns once the server has the watches `c` re-armed on reconnecting:
/// a session's requests are answered in order, and the re-arm went first.
fn rearmed(c: &Client, path: &str) {
    c.exists(path).expect("a request after reconnecting");
}

#[test]
fn remove_watches_by_kind_removes_only_that_kind() {
    let server = shared_server();
    let ns = unique("pw-ns");
    let c = start_connected(
        Client::builder()
            .connect_string(server.connect_string())
            .namespace(ns.trim_start_matches('/')),
    );
    let ctx = Ctx::new(server, &c);
    c.create().for_path("/n", b"").unwrap();
    let (data_tx, data_rx) = unbounded();
    let (child_tx, child_rx) = unbounded();
    c.get_data_watch("/n", move |ev| {
        let _ = data_tx.send(ev);
    })
    .unwrap();
    c.get_children_watch("/n", move |ev| {
        let _ = child_tx.send(ev);
    })
    .unwrap();
    let (on_tree, tree) = collector();
    c.add_watch("/", AddWatchMode::PersistentRecursive, on_tree)
        .unwrap();

    c.remove_watches("/n", WatcherType::Data).unwrap();
    expect_event(&data_rx, EventType::DataWatchRemoved, "/n", &ctx);
    // The children watch stays and still fires; the data watch does not.
    c.create().for_path("/n/c", b"").unwrap();
    expect_event(&child_rx, EventType::NodeChildrenChanged, "/n", &ctx);
    expect_event(&tree, EventType::NodeCreated, "/n/c", &ctx);
    c.set_data("/n", b"x", None).unwrap();
    expect_event(&tree, EventType::NodeDataChanged, "/n", &ctx);
    assert!(data_rx.try_recv().is_err(), "a removed data watch fired");

    let err = c.remove_watches("/n", WatcherType::Children).unwrap_err();
    assert!(err.is(latchkey_framework::ErrorCode::NoWatcher), "{err}");
    assert!(err.to_string().contains("remove_watches /n"), "{err}");
    c.remove_watches("/", WatcherType::Any).unwrap();
    expect_event(&tree, EventType::PersistentWatchRemoved, "/", &ctx);
    c.close();
}

/// A lost session takes its persistent watches with it: each watcher hears
/// `SessionExpired` once, so nobody waits on a watch that is gone.
#[test]
fn a_lost_session_ends_persistent_watches_with_one_expired_event() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let states = c.listen();
    let node = unique("pw-expire");
    let (on_node, events) = collector();
    c.add_watch(&node, AddWatchMode::Persistent, on_node)
        .unwrap();
    c.expire_session_for_testing().unwrap();
    ctx.expect(&states, ConnectionState::Lost, Duration::from_secs(30));
    let ev = next(&events, "the expiry", &ctx);
    assert_eq!(ev.event_type, EventType::SessionExpired, "{}", ctx.dump());
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(30),
    );
    c.create().for_path(&node, b"").unwrap();
    assert!(
        events.recv_timeout(Duration::from_millis(500)).is_err(),
        "the watch of the lost session fired"
    );
    c.close();
}

//! Curator's own tests of its node and cache recipes, ported to
//! `PersistentNode`, `GroupMember`, `NodeCache` and `CuratorCache`: every
//! test method of each class, ported here, covered by an existing suite
//! (named with its file), or not applicable with the reason.
//!
//! All ports share this binary's server, with 3 or 4 s sessions. Where Curator
//! stops and restarts its server while the session outlives the outage, the
//! port cuts the client's connection through a `FaultProxy` that refuses
//! new connections for the outage instead: the client sees the same
//! (connection lost, refused, back on its session) at a fraction of the
//! cost of a JVM restart. Curator's `injectSessionExpiration` is
//! `Client::expire_session_for_testing`. Curator's fixed sleeps
//! ("sleepABit") are bounded waits for the state asserted, and where
//! Curator asserts that something does not happen, a short window in which
//! it must not.
//!
//! ## TestPersistentNode
//!
//! | Curator method | Rust test |
//! |---|---|
//! | testQuickSetData | `pn_quick_set_data_is_taken_and_written` (a deliberate difference: Curator refuses a `setData` before the first create is processed, with IllegalStateException; latchkey takes it and creates or writes the node with it) |
//! | testBasic | `pn_basic_persistent_node_outlives_its_session` |
//! | testCreationWithParentCreationOff | `pn_creation_with_parent_creation_off` |
//! | testRecreationWithParentCreationOff | `pn_recreation_with_parent_creation_off` |
//! | testQuickClose | `pn_quick_close` (also persistent_nodes.rs::`a_node_closed_while_its_create_is_under_way_is_deleted`, 150 nodes closed during their create) |
//! | testQuickCloseNodeExists | `pn_quick_close_node_exists` |
//! | testEphemeralSequentialWithProtectionReconnection | `pn_ephemeral_sequential_with_protection_reconnection` |
//!
//! ## TestPersistentEphemeralNode
//!
//! Curator's deprecated `PersistentEphemeralNode` is a `PersistentNode`
//! with an ephemeral mode (its `PROTECTED_EPHEMERAL`: protection on); so
//! are these ports.
//!
//! | Curator method | Rust test |
//! |---|---|
//! | testListenersReconnectedIsFast | `pen_listeners_reconnected_is_fast` |
//! | testNoServerAtStart | persistent_nodes.rs::`waiting_for_the_first_create_keeps_its_deadline_while_zookeeper_is_down` (a real server stopped before the start and restarted) |
//! | testNullCurator | not applicable: a `&Client` cannot be null in Rust |
//! | testNullPath | not applicable: a `&str` cannot be null; an empty or invalid path is refused, naming it: persistent_nodes.rs::`bad_arguments_are_refused_naming_the_path` |
//! | testNullData | not applicable: `&[u8]` cannot be null |
//! | testNullMode | not applicable: `CreateMode` cannot be null |
//! | testSettingDataSequential | `pen_setting_data_sequential` |
//! | testSettingData | `pen_setting_data` |
//! | testDeletesNodeWhenClosed | `pen_deletes_node_when_closed` |
//! | testClosingMultipleTimes | `pen_closing_multiple_times` |
//! | testDeletesNodeWhenSessionDisconnects | `pen_deletes_node_when_session_disconnects` (Curator holds the re-create with a test latch; here the observer's watch sees the delete before the re-create) |
//! | testRecreatesNodeWhenSessionReconnects | `pen_recreates_node_when_session_reconnects` |
//! | testRecreatesNodeWhenSessionReconnectsMultipleTimes | `pen_recreates_node_when_session_reconnects_multiple_times` |
//! | testRecreatesNodeWhenEphemeralOwnerSessionExpires | `pen_recreates_node_when_ephemeral_owner_session_expires` |
//! | testRecreatesNodeWhenItGetsDeleted | `pen_recreates_node_when_it_gets_deleted` |
//! | testNodesCreateUniquePaths | `pen_nodes_create_unique_paths` |
//! | testData | `pen_data` |
//! | testSetDataWhenNodeExists | `pen_set_data_when_node_exists` |
//! | testSetDataWhenDisconnected | `pen_set_data_when_disconnected` |
//! | testSetUpdatedDataWhenReconnected | `pen_set_updated_data_when_reconnected` |
//! | testProtected | `pen_protected` |
//! | testNoCreatePermission | `pen_no_create_permission` |
//! | testNoWritePermission | `pen_no_write_permission` |
//!
//! ## TestPersistentEphemeralNodeListener
//!
//! | Curator method | Rust test |
//! |---|---|
//! | testListenersReconnectedIsOK | `penl_listeners_reconnected_is_ok` |
//!
//! ## TestGroupMember
//!
//! | Curator method | Rust test |
//! |---|---|
//! | testBasic | `gm_basic` |
//!
//! ## TestNodeCache
//!
//! | Curator method | Rust test |
//! |---|---|
//! | testDeleteThenCreate | `nc_delete_then_create` (Curator's `start(true)` loads the node without telling its listeners; latchkey's one `start` tells the first read to the channels made before it, as Curator's `start()` does: the port listens after `start`) |
//! | testRebuildAgainstOtherProcesses | `nc_rebuild_against_other_processes` (Curator's test exchanger that stops the cache mid-read is a proxy here holding the reply of the cache's first read while another client changes the node) |
//! | testKilledSession | `nc_killed_session` |
//! | testBasics | caches.rs::`a_node_cache_follows_creates_changes_and_deletes` |
//!
//! ## TestCuratorCache
//!
//! Curator's `CuratorCacheListener.builder()` filters (`forCreates`,
//! `forChanges`, ...) are a `match` on `CacheEvent` here.
//!
//! | Curator method | Rust test |
//! |---|---|
//! | testUpdateWhenNotCachingData | `cc_update_when_not_caching_data` |
//! | testAfterInitialized | `cc_after_initialized` |
//! | testListenerBuilder | `cc_listener_builder` |
//! | testClearOnClose | `cc_clear_on_close` (latchkey keeps the copy on close by default, Curator's `DO_NOT_CLEAR_ON_CLOSE`; `clear_on_close()` is Curator's default) |
//! | testGreaterThan64kZNodes | `cc_many_znodes` (6,000 nodes); `cc_greater_than_64k_znodes` (65,540, as Curator; ignored by default: it loads in 17 to 30 s, over this binary's budget) |
//!
//! ## TestCuratorCacheEdges
//!
//! | Curator method | Rust test |
//! |---|---|
//! | testReconnectConsistency | `cce_reconnect_consistency` (Curator shares one `CuratorCacheStorage` between two caches, a storage latchkey does not expose; the port makes the same changes during a partition of one cache and checks the copy it converges to) |
//! | testServerLoss | cache_faults.rs::`caches_converge_to_the_ensembles_state_after_leader_kills_and_a_rolling_restart` (caches on a 3-member ensemble through leader kills and a rolling restart, which stops the member their client is connected to in turn) |
//!
//! ## TestCuratorCacheEventOrdering
//!
//! | Curator method | Rust test |
//! |---|---|
//! | testEventOrdering (from `TestEventOrdering`) | `cceo_event_ordering` |
//!
//! ## TestCuratorCacheConsistency
//!
//! | Curator method | Rust test |
//! |---|---|
//! | testConsistencyAfterSimulation | not ported: a 30 s random simulation with 10 to 20 clients and their caches on a 5-member ensemble, up to 2 members killed, alone over this binary's budget (and 5 JVMs). cache_faults.rs::`caches_converge_to_the_ensembles_state_after_leader_kills_and_a_rolling_restart` checks the same two things on a 3-member ensemble through leader kills and a rolling restart: each cache converges to the ensemble's tree, and replaying what its listener told gives exactly its content (Curator's `listenerDataMap`) |
//!
//! Curator's TestCuratorCacheBridge and TestCuratorCacheWrappers are not
//! ported here: they test Java adapters (`CuratorCacheBridge`, and the
//! listener builder's `forPathChildrenCache`/`forTreeCache`/`forNodeCache`
//! wrappers) that latchkey's `CuratorCache` has no counterpart of.
//!
//! ## Beyond Curator's tests
//!
//! `set_data_from_many_threads_ends_with_the_last_data` and
//! `data_too_large_for_zookeeper_is_refused_by_set_data` try what the
//! ports' fixes to `set_data` opened up: writes from the caller's thread
//! racing the node's own, and data ZooKeeper never takes.

mod common;

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use crossbeam_channel::{unbounded, Receiver};
use latchkey_framework::{
    Acl, AclProvider, Client, ConnectionState, CreateMode, EventType, Perms, WatchedEvent,
};
use latchkey_recipes::{CacheEvent, CuratorCache, GroupMember, NodeCache, PersistentNode};
use latchkey_test::FaultProxy;

/// The session timeout of every client here.
const SESSION: Duration = Duration::from_secs(3);
/// How long any one expected thing may take.
const WAIT: Duration = Duration::from_secs(10);

fn client() -> Client {
    connect(&shared_server().connect_string(), SESSION)
}

fn ctx(c: &Client) -> Ctx {
    Ctx::new(shared_server(), c)
}

/// A client through its own proxy to the shared server, and its states.
fn proxied() -> (FaultProxy, Client, Receiver<ConnectionState>) {
    let proxy = FaultProxy::start(shared_server().addr()).expect("start the proxy");
    let c = connect(&proxy.connect_string(), Duration::from_secs(4));
    let states = c.listen();
    (proxy, c, states)
}

/// Curator's `server.stop()` as its client sees it: the connection goes
/// and new ones are refused.
fn server_down(proxy: &FaultProxy) {
    proxy.set_refuse(true);
    proxy.cut();
}

/// Curator's `server.restart()` after [`server_down`].
fn server_up(proxy: &FaultProxy) {
    proxy.set_refuse(false);
}

/// Curator's test `Trigger`: a one-shot watcher that tells the events of
/// the given types.
fn trigger(types: &'static [EventType]) -> (impl FnOnce(WatchedEvent) + Send, Receiver<EventType>) {
    let (tx, rx) = unbounded();
    let watcher = move |e: WatchedEvent| {
        if types.contains(&e.event_type) {
            let _ = tx.send(e.event_type);
        }
    };
    (watcher, rx)
}

const DELETED_OR_SET_DATA: &[EventType] = &[EventType::NodeDeleted, EventType::NodeDataChanged];
const CREATED: &[EventType] = &[EventType::NodeCreated];
const DATA_CHANGED: &[EventType] = &[EventType::NodeDataChanged];

fn fired(rx: &Receiver<EventType>, within: Duration) -> bool {
    rx.recv_timeout(within).is_ok()
}

/// The node at `path` exists now, or is created within [`WAIT`] (Curator's
/// `stat != null || createdTrigger.firedWithin(..)`).
fn exists_or_is_created(observer: &Client, path: &str) -> bool {
    let (watcher, created) = trigger(CREATED);
    observer.exists_watch(path, watcher).unwrap().is_some() || fired(&created, WAIT)
}

fn data(c: &Client, path: &str) -> Vec<u8> {
    c.get_data(path).unwrap().0
}

/// Waits until `path` is gone, then checks it stays gone for a while
/// (what Curator's `sleepABit` then `assertNull` checks: also that no late
/// create brings it back).
fn gone_and_stays_gone(c: &Client, path: &str) {
    wait_until(
        WAIT,
        || c.exists(path).unwrap().is_none(),
        || format!("{path} is still there\n{}", ctx(c).dump()),
    );
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        assert!(
            c.exists(path).unwrap().is_none(),
            "{path} came back after it was gone"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

fn started(node: &PersistentNode) -> String {
    node.start().unwrap();
    assert!(
        node.wait_for_initial_create(WAIT).unwrap(),
        "{node:?} not created within {WAIT:?}"
    );
    node.actual_path().unwrap()
}

// ---- TestPersistentNode -------------------------------------------------

/// Curator's TestPersistentNode.testQuickSetData. Curator refuses a
/// `setData` made before the first create is processed; latchkey takes it
/// (deliberately: it cannot be lost) and the node ends up with it.
#[test]
fn pn_quick_set_data_is_taken_and_written() {
    let c = client();
    let path = unique("/ports/pn/quick-set");
    let node = PersistentNode::new(&c, CreateMode::Persistent, false, &path, b"hey").unwrap();
    node.start().unwrap();
    node.set_data(b"there").unwrap();
    assert!(node.wait_for_initial_create(WAIT).unwrap());
    wait_until(
        WAIT,
        || c.get_data(&path).is_ok_and(|(d, _)| d == b"there"),
        || format!("the node holds {:?}", c.get_data(&path).map(|(d, _)| d)),
    );
    node.close();
    gone_and_stays_gone(&c, &path);
}

/// Curator's TestPersistentNode.testBasic: a persistent node stays when
/// its client's session ends.
#[test]
fn pn_basic_persistent_node_outlives_its_session() {
    let c = client();
    let path = unique("/ports/pn/basic");
    let node = PersistentNode::new(&c, CreateMode::Persistent, false, &path, b"hey").unwrap();
    started(&node);
    c.close(); // the session ends
    let other = client();
    assert_eq!(data(&other, &path), b"hey");
    drop(node);
    other.delete().for_path(&path).unwrap();
}

/// Curator's TestPersistentNode.testCreationWithParentCreationOff: without
/// parent creation, a node whose parents are missing is not created, and
/// says why.
#[test]
fn pn_creation_with_parent_creation_off() {
    let c = client();
    let path = format!("{}/one/two", unique("/ports/pn/parents-off"));
    let node = PersistentNode::new(&c, CreateMode::Persistent, false, &path, b"")
        .unwrap()
        .without_parent_creation();
    node.start().unwrap();
    assert!(!node
        .wait_for_initial_create(Duration::from_secs(1))
        .unwrap());
    assert!(node.is_parent_creation_failure());
    assert!(c.exists(&path).unwrap().is_none());
}

/// Curator's TestPersistentNode.testRecreationWithParentCreationOff:
/// without parent creation, a node whose parent is deleted (with it) is
/// not created again; new data is refused and the data stays.
#[test]
fn pn_recreation_with_parent_creation_off() {
    let c = client();
    let parent = format!("{}/one", unique("/ports/pn/re-parents-off"));
    c.create()
        .creating_parents_if_needed()
        .for_path(&parent, b"")
        .unwrap();
    let path = format!("{parent}/two");
    let node = PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"hey")
        .unwrap()
        .without_parent_creation();
    started(&node);
    assert!(!node.is_parent_creation_failure());
    c.delete()
        .deleting_children_if_needed()
        .for_path(&parent)
        .unwrap();
    wait_until(
        WAIT,
        || node.is_parent_creation_failure(),
        || format!("no parent creation failure\n{}", ctx(&c).dump()),
    );
    assert!(c.exists(&path).unwrap().is_none());
    let refused = node.set_data(b"").unwrap_err();
    assert!(refused.to_string().contains(&path), "{refused}");
    assert_eq!(node.data(), b"hey");
    gone_and_stays_gone(&c, &path);
}

/// Curator's TestPersistentNode.testQuickClose.
#[test]
fn pn_quick_close() {
    let c = client();
    let path = format!("{}/one/two", unique("/ports/pn/quick-close"));
    let node = PersistentNode::new(&c, CreateMode::Persistent, false, &path, b"").unwrap();
    node.start().unwrap();
    node.close();
    gone_and_stays_gone(&c, &path);
}

/// Curator's TestPersistentNode.testQuickCloseNodeExists: a node that was
/// there already, adopted by a node started and closed at once, is
/// deleted by the close.
#[test]
fn pn_quick_close_node_exists() {
    let c = client();
    let base = unique("/ports/pn/quick-close-exists");
    for round in 0..10 {
        let path = format!("{base}/{round}/one/two");
        c.create()
            .creating_parents_if_needed()
            .for_path(&path, b"")
            .unwrap();
        let node = PersistentNode::new(&c, CreateMode::Persistent, false, &path, b"").unwrap();
        node.start().unwrap();
        node.close();
        gone_and_stays_gone(&c, &path);
    }
}

/// Curator's TestPersistentNode.testEphemeralSequentialWithProtectionReconnection:
/// through a server outage the session outlives, a protected sequential
/// node stays the one node, under its name.
#[test]
fn pn_ephemeral_sequential_with_protection_reconnection() {
    let (proxy, c, states) = proxied();
    let cx = ctx(&c);
    let parent = format!("{}/one", unique("/ports/pn/seq-protected"));
    c.create()
        .creating_parents_if_needed()
        .for_path(&parent, b"")
        .unwrap();
    let node = PersistentNode::new(
        &c,
        CreateMode::EphemeralSequential,
        true,
        &format!("{parent}/two"),
        b"",
    )
    .unwrap();
    started(&node);
    let before = sorted_children(&c, &parent);
    assert_eq!(before.len(), 1, "children before the outage: {before:?}");
    server_down(&proxy);
    cx.expect(&states, ConnectionState::Suspended, WAIT);
    thread::sleep(Duration::from_millis(200));
    server_up(&proxy);
    cx.expect(&states, ConnectionState::Reconnected, WAIT);
    // Curator sleeps a bit and compares: any stray create has landed by
    // the end of this window.
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        let after = sorted_children(&c, &parent);
        assert_eq!(
            after,
            before,
            "unexpected nodes after the outage\n{}",
            cx.dump()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

// ---- TestPersistentEphemeralNode -----------------------------------------

/// The server is down when an ephemeral node starts; the node is created
/// once it is up, and after a second outage the client tells
/// `Reconnected`, within `WAIT`. Returns the proxy (its drop cuts the
/// connection), the client and its states channel.
fn created_after_the_server_comes_up_then_reconnected(
) -> (FaultProxy, Client, Receiver<ConnectionState>) {
    let proxy = FaultProxy::start(shared_server().addr()).expect("start the proxy");
    server_down(&proxy);
    let c = Client::builder()
        .connect_string(proxy.connect_string())
        .session_timeout(Duration::from_secs(4))
        .connection_timeout(Duration::from_secs(5))
        .retry_policy(latchkey_framework::RetryOneTime::new(
            Duration::from_millis(1),
        ))
        .build()
        .unwrap();
    let states = c.listen();
    c.start().unwrap();
    let cx = ctx(&c);
    let path = format!("{}/node", unique("/ports/pen/abc"));
    let node = PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"hello").unwrap();
    node.start().unwrap();
    thread::sleep(Duration::from_millis(200));
    server_up(&proxy);
    cx.expect(&states, ConnectionState::Connected, WAIT);
    assert!(node.wait_for_initial_create(WAIT).unwrap(), "{}", cx.dump());
    server_down(&proxy);
    thread::sleep(Duration::from_millis(200));
    server_up(&proxy);
    let began = Instant::now();
    cx.expect(&states, ConnectionState::Reconnected, WAIT);
    println!(
        "reconnected {:?} after the server was back",
        began.elapsed()
    );
    (proxy, c, states)
}

/// Curator's TestPersistentEphemeralNode.testListenersReconnectedIsFast.
#[test]
fn pen_listeners_reconnected_is_fast() {
    created_after_the_server_comes_up_then_reconnected();
}

/// Curator's TestPersistentEphemeralNodeListener.testListenersReconnectedIsOK:
/// as testListenersReconnectedIsFast, and `Reconnected` stays the last
/// state told.
#[test]
fn penl_listeners_reconnected_is_ok() {
    let (_proxy, c, states) = created_after_the_server_comes_up_then_reconnected();
    thread::sleep(Duration::from_millis(300));
    let later: Vec<ConnectionState> = states.try_iter().collect();
    assert!(
        later.is_empty(),
        "states after Reconnected: {later:?}\n{}",
        ctx(&c).dump()
    );
}

/// Curator's TestPersistentEphemeralNode.setDataTest: each `set_data`
/// reaches the node (a watch on it fires), and the close deletes it.
fn set_data_test(mode: CreateMode) {
    let c = client();
    let path = format!("{}/foo", unique("/ports/pen/set-data"));
    let node = PersistentNode::new(&c, mode, false, &path, b"a").unwrap();
    let actual = started(&node);
    assert_eq!(data(&c, &actual), b"a");
    let (watcher, events) = trigger(DELETED_OR_SET_DATA);
    c.exists_watch(&actual, watcher).unwrap();
    node.set_data(b"b").unwrap();
    assert!(fired(&events, WAIT), "no event for the write of b");
    assert_eq!(node.actual_path().as_deref(), Some(actual.as_str()));
    let (watcher, events) = trigger(DELETED_OR_SET_DATA);
    assert_eq!(c.get_data_watch(&actual, watcher).unwrap().0, b"b");
    node.set_data(b"c").unwrap();
    assert!(fired(&events, WAIT), "no event for the write of c");
    assert_eq!(node.actual_path().as_deref(), Some(actual.as_str()));
    let (watcher, events) = trigger(DELETED_OR_SET_DATA);
    assert_eq!(c.get_data_watch(&actual, watcher).unwrap().0, b"c");
    node.close();
    assert!(fired(&events, WAIT), "no event for the delete on close");
}

/// Curator's TestPersistentEphemeralNode.testSettingDataSequential.
#[test]
fn pen_setting_data_sequential() {
    set_data_test(CreateMode::EphemeralSequential);
}

/// Curator's TestPersistentEphemeralNode.testSettingData.
#[test]
fn pen_setting_data() {
    set_data_test(CreateMode::Ephemeral);
}

/// Curator's TestPersistentEphemeralNode.testDeletesNodeWhenClosed: when
/// `close` returns (connected), the node is gone for its client.
#[test]
fn pen_deletes_node_when_closed() {
    let c = client();
    let path = format!("{}/foo", unique("/ports/pen/closed"));
    let node = PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"").unwrap();
    let actual = started(&node);
    assert!(c.exists(&actual).unwrap().is_some());
    node.close();
    assert!(
        c.exists(&actual).unwrap().is_none(),
        "still there after close"
    );
}

/// Curator's TestPersistentEphemeralNode.testClosingMultipleTimes.
#[test]
fn pen_closing_multiple_times() {
    let c = client();
    let path = format!("{}/foo", unique("/ports/pen/close-twice"));
    let node = PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"").unwrap();
    let actual = started(&node);
    node.close();
    assert!(c.exists(&actual).unwrap().is_none());
    node.close();
    assert!(c.exists(&actual).unwrap().is_none());
}

/// A node of `c`'s, started, and an observer's trigger on its deletion.
fn expire_and_see_delete(c: &Client, observer: &Client, actual: &str) {
    let (watcher, deleted) = trigger(DELETED_OR_SET_DATA);
    assert!(
        observer.exists_watch(actual, watcher).unwrap().is_some(),
        "{actual} should exist"
    );
    c.expire_session_for_testing().unwrap();
    assert!(
        fired(&deleted, WAIT),
        "{actual} not deleted when its session expired\n{}",
        ctx(c).dump()
    );
}

/// Curator's TestPersistentEphemeralNode.testDeletesNodeWhenSessionDisconnects.
#[test]
fn pen_deletes_node_when_session_disconnects() {
    let (c, observer) = (client(), client());
    let path = format!("{}/foo", unique("/ports/pen/expired"));
    let node = PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"").unwrap();
    let actual = started(&node);
    expire_and_see_delete(&c, &observer, &actual);
}

/// Curator's TestPersistentEphemeralNode.testRecreatesNodeWhenSessionReconnects.
#[test]
fn pen_recreates_node_when_session_reconnects() {
    let (c, observer) = (client(), client());
    let path = format!("{}/foo", unique("/ports/pen/recreated"));
    let node = PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"").unwrap();
    let actual = started(&node);
    expire_and_see_delete(&c, &observer, &actual);
    assert!(
        exists_or_is_created(&observer, &actual),
        "not re-created\n{}",
        ctx(&c).dump()
    );
}

/// Curator's TestPersistentEphemeralNode.testRecreatesNodeWhenSessionReconnectsMultipleTimes.
#[test]
fn pen_recreates_node_when_session_reconnects_multiple_times() {
    let (c, observer) = (client(), client());
    let path = format!("{}/foo", unique("/ports/pen/recreated-5"));
    let node = PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"").unwrap();
    let actual = started(&node);
    for i in 0..5 {
        expire_and_see_delete(&c, &observer, &actual);
        assert!(
            exists_or_is_created(&observer, &actual),
            "round {i}: not re-created\n{}",
            ctx(&c).dump()
        );
        // The next round's watch must see the node of this round's
        // session: wait until it is there.
        wait_until(
            WAIT,
            || observer.exists(&actual).unwrap().is_some(),
            || ctx(&c).dump(),
        );
    }
}

/// Curator's TestPersistentEphemeralNode.testRecreatesNodeWhenEphemeralOwnerSessionExpires:
/// a node found there, someone else's ephemeral, is adopted (our data is
/// written to it), and created again when its owner's session expires.
#[test]
fn pen_recreates_node_when_ephemeral_owner_session_expires() {
    let (c, creator, observer) = (client(), client(), client());
    let path = format!("{}/foo", unique("/ports/pen/owner-expires"));
    creator
        .create()
        .creating_parents_if_needed()
        .mode(CreateMode::Ephemeral)
        .for_path(&path, b"")
        .unwrap();
    let (watcher, data_changed) = trigger(DATA_CHANGED);
    observer.get_data_watch(&path, watcher).unwrap();
    let node = PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"").unwrap();
    let actual = started(&node);
    assert!(observer.exists(&actual).unwrap().is_some());
    assert!(
        fired(&data_changed, WAIT),
        "our data was not written to the node found there"
    );
    expire_and_see_delete(&creator, &observer, &actual);
    assert!(
        exists_or_is_created(&observer, &actual),
        "not re-created\n{}",
        ctx(&c).dump()
    );
}

/// Curator's TestPersistentEphemeralNode.testRecreatesNodeWhenItGetsDeleted.
#[test]
fn pen_recreates_node_when_it_gets_deleted() {
    let c = client();
    let path = format!("{}/foo", unique("/ports/pen/deleted"));
    let node = PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"").unwrap();
    let actual = started(&node);
    c.delete().for_path(&actual).unwrap();
    assert!(exists_or_is_created(&c, &actual), "not re-created");
}

/// Curator's TestPersistentEphemeralNode.testNodesCreateUniquePaths.
#[test]
fn pen_nodes_create_unique_paths() {
    let c = client();
    let path = format!("{}/foo", unique("/ports/pen/unique"));
    let node1 =
        PersistentNode::new(&c, CreateMode::EphemeralSequential, false, &path, b"").unwrap();
    let path1 = started(&node1);
    let node2 =
        PersistentNode::new(&c, CreateMode::EphemeralSequential, false, &path, b"").unwrap();
    let path2 = started(&node2);
    assert_ne!(path1, path2);
}

/// Curator's TestPersistentEphemeralNode.testData.
#[test]
fn pen_data() {
    let c = client();
    let path = format!("{}/foo", unique("/ports/pen/data"));
    let node =
        PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"Hello World").unwrap();
    let actual = started(&node);
    assert_eq!(data(&c, &actual), b"Hello World");
}

/// Curator's TestPersistentEphemeralNode.testSetDataWhenNodeExists: once
/// the first create is done, a node that was there already holds our
/// data.
#[test]
fn pen_set_data_when_node_exists() {
    let c = client();
    let base = unique("/ports/pen/exists");
    for round in 0..5 {
        let path = format!("{base}/{round}/foo");
        c.create()
            .creating_parents_if_needed()
            .mode(CreateMode::Ephemeral)
            .for_path(&path, b"InitialData")
            .unwrap();
        let node =
            PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"Hello World").unwrap();
        let actual = started(&node);
        assert_eq!(
            String::from_utf8_lossy(&data(&c, &actual)),
            "Hello World",
            "round {round}: the node's data once its first create is done"
        );
    }
}

/// Curator's TestPersistentEphemeralNode.testSetDataWhenDisconnected.
#[test]
fn pen_set_data_when_disconnected() {
    let (proxy, c, _states) = proxied();
    let observer = client();
    let path = format!("{}/foo", unique("/ports/pen/set-disconnected"));
    let node =
        PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"Hello World").unwrap();
    let actual = started(&node);
    assert_eq!(data(&c, &actual), b"Hello World");
    server_down(&proxy);
    let (watcher, updated) = trigger(DATA_CHANGED);
    observer.get_data_watch(&actual, watcher).unwrap();
    // Disconnected, `set_data` leaves the write to the node's thread.
    let began = Instant::now();
    node.set_data(b"Updated").unwrap();
    let took = began.elapsed();
    assert!(took < Duration::from_secs(1), "set_data took {took:?}");
    server_up(&proxy);
    assert!(fired(&updated, WAIT), "not written\n{}", ctx(&c).dump());
    assert_eq!(data(&c, &actual), b"Updated");
}

/// Curator's TestPersistentEphemeralNode.testSetUpdatedDataWhenReconnected:
/// `set_data` has written its data when it returns (while connected: a
/// read on the same client sees it), and the new data stays through a
/// reconnection (not the first data again).
#[test]
fn pen_set_updated_data_when_reconnected() {
    let (proxy, c, states) = proxied();
    let cx = ctx(&c);
    let path = format!("{}/foo", unique("/ports/pen/set-reconnected"));
    let node =
        PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"Hello World").unwrap();
    let actual = started(&node);
    assert_eq!(data(&c, &actual), b"Hello World");
    node.set_data(b"Updated").unwrap();
    assert_eq!(
        String::from_utf8_lossy(&data(&c, &actual)),
        "Updated",
        "read right after set_data"
    );
    // More of the same: each write is there when `set_data` returns.
    for i in 0..20 {
        let value = format!("Updated {i}");
        node.set_data(value.as_bytes()).unwrap();
        assert_eq!(String::from_utf8_lossy(&data(&c, &actual)), value);
    }
    node.set_data(b"Updated").unwrap();
    server_down(&proxy);
    server_up(&proxy);
    cx.expect(&states, ConnectionState::Reconnected, WAIT);
    assert_eq!(data(&c, &actual), b"Updated");
    // Curator reads once; the node's thread looks again after the
    // reconnection: the data stays ours meanwhile.
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        assert_eq!(data(&c, &actual), b"Updated");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Curator's TestPersistentEphemeralNode.testProtected (CURATOR-190): a
/// protected node is not created again beside itself on reconnection.
#[test]
fn pen_protected() {
    let (proxy, c, states) = proxied();
    let cx = ctx(&c);
    let dir = unique("/ports/pen/protected");
    let node =
        PersistentNode::new(&c, CreateMode::Ephemeral, true, &format!("{dir}/foo"), b"").unwrap();
    let actual = started(&node);
    assert!(c.exists(&actual).unwrap().is_some());
    server_down(&proxy);
    server_up(&proxy);
    cx.expect(&states, ConnectionState::Reconnected, WAIT);
    assert!(c.exists(&actual).unwrap().is_some());
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        let children = sorted_children(&c, &dir);
        assert_eq!(children.len(), 1, "{children:?}\n{}", cx.dump());
        thread::sleep(Duration::from_millis(50));
    }
}

/// Curator's TestPersistentEphemeralNode.testNoCreatePermission: under a
/// parent only an authenticated user may write to, the node is not
/// created.
#[test]
fn pen_no_create_permission() {
    let dir = unique("/ports/pen/no-create");
    let authed = start_connected(
        Client::builder()
            .connect_string(shared_server().connect_string())
            .session_timeout(SESSION)
            .authorization("digest", b"me1:pass1"),
    );
    authed.ensure_path("/ports/pen").unwrap();
    authed
        .create()
        .with_acl(vec![Acl::new(Perms::WRITE, "auth", "")])
        .for_path(&dir, b"")
        .unwrap();
    authed.close();
    let c = client();
    let path = format!("{dir}/foo");
    let node = PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"").unwrap();
    node.start().unwrap();
    assert!(
        !node
            .wait_for_initial_create(Duration::from_secs(2))
            .unwrap(),
        "created without create permission"
    );
    assert!(c.exists(&path).unwrap().is_none());
    assert!(node.is_auth_failure());
}

/// Nodes made with read, create and delete permission for anyone, but not
/// write (Curator's test's `ACLProvider`).
struct NoWrite;

impl AclProvider for NoWrite {
    fn default_acl(&self) -> Vec<Acl> {
        vec![Acl::new(
            Perms::READ | Perms::CREATE | Perms::DELETE,
            "world",
            "anyone",
        )]
    }
}

/// Curator's TestPersistentEphemeralNode.testNoWritePermission: the node
/// is created, but new data, refused, never lands.
#[test]
fn pen_no_write_permission() {
    let c = start_connected(
        Client::builder()
            .connect_string(shared_server().connect_string())
            .session_timeout(SESSION)
            .acl_provider(NoWrite),
    );
    let path = format!("{}/foo", unique("/ports/pen/no-write"));
    let node = PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"").unwrap();
    started(&node);
    assert!(c.exists(&path).unwrap().is_some());
    assert!(!node.is_auth_failure(), "an auth failure creating the node");
    node.set_data(b"NEW_DATA").unwrap();
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        assert_ne!(data(&c, &path), b"NEW_DATA", "the write went through");
        thread::sleep(Duration::from_millis(50));
    }
    assert!(
        node.is_auth_failure(),
        "no auth failure for the refused write"
    );
}

// ---- TestGroupMember ----------------------------------------------------

/// Curator's TestGroupMember.testBasic.
#[test]
fn gm_basic() {
    let c = client();
    let cx = ctx(&c);
    let group = unique("/ports/gm/member");
    let m1 = GroupMember::new(&c, &group, "1", b"").unwrap();
    assert!(m1.current_members().contains_key("1"));
    m1.start().unwrap();
    let m2 = GroupMember::new(&c, &group, "2", b"").unwrap();
    m2.start().unwrap();
    let ids = |m: &GroupMember| -> Vec<String> { m.current_members().into_keys().collect() };
    for m in [&m1, &m2] {
        wait_until(
            WAIT,
            || ids(m) == ["1", "2"],
            || format!("{} sees {:?}\n{}", m.id(), ids(m), cx.dump()),
        );
    }
    let as_text = |m: &GroupMember| -> BTreeMap<String, String> {
        m.current_members()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
            .collect()
    };
    assert_eq!(as_text(&m1), as_text(&m2));
    m2.close();
    wait_until(
        WAIT,
        || ids(&m1) == ["1"],
        || format!("1 sees {:?}\n{}", ids(&m1), cx.dump()),
    );
    m1.set_this_data(b"something").unwrap();
    wait_until(
        WAIT,
        || m1.current_members().get("1").map(Vec::as_slice) == Some(&b"something"[..]),
        || cx.dump(),
    );
}

// ---- TestNodeCache ------------------------------------------------------

fn node_data(cache: &NodeCache) -> Option<Vec<u8>> {
    cache.current_data().map(|n| n.data)
}

/// Curator's TestNodeCache.testDeleteThenCreate.
#[test]
fn nc_delete_then_create() {
    let c = client();
    let path = format!("{}/foo", unique("/ports/nc/delete-create"));
    c.create()
        .creating_parents_if_needed()
        .for_path(&path, b"one")
        .unwrap();
    let cache = NodeCache::new(&c, &path).unwrap();
    cache.start().unwrap();
    // Curator's `start(true)` tells its first read to no listener: a
    // channel from `listen` before `start` is told it (as Curator's
    // `start()` tells its listeners), so listen after.
    let changes = cache.listen();
    assert_eq!(node_data(&cache).as_deref(), Some(&b"one"[..]));
    c.delete().for_path(&path).unwrap();
    let told = changes.recv_timeout(WAIT).map(|n| n.map(|n| n.data));
    assert_eq!(told, Ok(None), "the event for the delete");
    c.create().for_path(&path, b"two").unwrap();
    let told = changes.recv_timeout(WAIT).map(|n| n.map(|n| n.data));
    assert_eq!(told, Ok(Some(b"two".to_vec())), "the event for the create");
    assert_eq!(node_data(&cache).as_deref(), Some(&b"two"[..]));
}

/// The watches the server holds on `path` (from `wchp`).
fn server_watches_on(path: &str) -> usize {
    let report = shared_server().four_letter("wchp").unwrap_or_default();
    let mut lines = report.lines();
    let mut count = 0;
    while let Some(line) = lines.next() {
        if line.trim() == path {
            count += lines
                .clone()
                .take_while(|l| l.starts_with(char::is_whitespace))
                .count();
        }
    }
    count
}

/// Curator's TestNodeCache.testRebuildAgainstOtherProcesses: another
/// process changes the node while the cache reads it (the read done on
/// the server, its reply held by the proxy); the cache tells the change
/// and ends up with the other process's data.
#[test]
fn nc_rebuild_against_other_processes() {
    let (proxy, c, _states) = proxied();
    let other = client();
    let cx = ctx(&c);
    let path = format!("{}/snafu", unique("/ports/nc/rebuild"));
    other
        .create()
        .creating_parents_if_needed()
        .for_path(&path, b"original")
        .unwrap();
    let cache = NodeCache::new(&c, &path).unwrap();
    let changes = cache.listen();
    proxy.pause_replies();
    thread::scope(|s| {
        let start = s.spawn(|| cache.start());
        wait_until(WAIT, || server_watches_on(&path) > 0, || cx.dump());
        other.set_data(&path, b"other", None).unwrap();
        proxy.resume();
        start.join().unwrap().unwrap();
    });
    assert!(
        changes.recv_timeout(WAIT).is_ok(),
        "no event for the change\n{}",
        cx.dump()
    );
    wait_until(
        WAIT,
        || node_data(&cache).as_deref() == Some(&b"other"[..]),
        || format!("the cache holds {:?}\n{}", node_data(&cache), cx.dump()),
    );
}

/// Curator's TestNodeCache.testKilledSession.
#[test]
fn nc_killed_session() {
    let c = client();
    let cx = ctx(&c);
    let path = format!("{}/node", unique("/ports/nc/killed"));
    c.create()
        .creating_parents_if_needed()
        .for_path(&path, b"start")
        .unwrap();
    let cache = NodeCache::new(&c, &path).unwrap();
    cache.start().unwrap();
    let changes = cache.listen();
    let session = c.session_id();
    c.expire_session_for_testing().unwrap();
    wait_until(
        WAIT,
        || c.session_id() != session && c.state().is_some_and(|s| s.is_connected()),
        || cx.dump(),
    );
    assert_eq!(node_data(&cache).as_deref(), Some(&b"start"[..]));
    c.set_data(&path, b"new data", None).unwrap();
    let told = changes.recv_timeout(WAIT);
    assert!(told.is_ok(), "no event for the change\n{}", cx.dump());
}

// ---- TestCuratorCache ---------------------------------------------------

/// The next event that is not `Initialized`.
fn next_change(events: &Receiver<CacheEvent>, what: &str) -> CacheEvent {
    let deadline = Instant::now() + WAIT;
    loop {
        match events.recv_deadline(deadline) {
            Ok(CacheEvent::Initialized) => {}
            Ok(e) => return e,
            Err(e) => panic!("no event for {what}: {e}"),
        }
    }
}

/// Curator's TestCuratorCache.testUpdateWhenNotCachingData.
#[test]
fn cc_update_when_not_caching_data() {
    let c = client();
    let root = unique("/ports/cc/not-caching");
    c.create()
        .creating_parents_if_needed()
        .for_path(&root, b"")
        .unwrap();
    let cache = CuratorCache::builder(&c, &root)
        .data_not_cached()
        .build()
        .unwrap();
    let events = cache.listen();
    cache.start().unwrap();
    assert!(matches!(
        next_change(&events, "the root"),
        CacheEvent::Created(_)
    ));
    let foo = format!("{root}/foo");
    c.create().for_path(&foo, b"first").unwrap();
    match next_change(&events, "the create") {
        CacheEvent::Created(n) => assert_eq!(n.path, foo),
        e => panic!("want Created {foo}, got {e:?}"),
    }
    c.set_data(&foo, b"something new", None).unwrap();
    match next_change(&events, "the change") {
        CacheEvent::Changed { new, .. } => assert_eq!(new.path, foo),
        e => panic!("want Changed {foo}, got {e:?}"),
    }
}

/// Curator's TestCuratorCache.testAfterInitialized.
#[test]
fn cc_after_initialized() {
    let c = client();
    let root = unique("/ports/cc/initialized");
    c.create()
        .creating_parents_if_needed()
        .for_path(&format!("{root}/one/two/three"), b"")
        .unwrap();
    let cache = CuratorCache::new(&c, &root).unwrap();
    let events = cache.listen();
    cache.start().unwrap();
    let deadline = Instant::now() + WAIT;
    while events.recv_deadline(deadline).expect("no Initialized") != CacheEvent::Initialized {}
    assert_eq!(cache.size(), 4);
    for p in ["", "/one", "/one/two", "/one/two/three"] {
        assert!(cache.get(&format!("{root}{p}")).is_some(), "{root}{p}");
    }
}

/// Curator's TestCuratorCache.testListenerBuilder: a create, a change and
/// a delete, each told once as what it is.
#[test]
fn cc_listener_builder() {
    let c = client();
    let root = unique("/ports/cc/listener");
    let cache = CuratorCache::new(&c, &root).unwrap();
    let events = cache.listen();
    cache.start().unwrap();
    let none_pending = |what: &str| {
        let left: Vec<CacheEvent> = events
            .try_iter()
            .filter(|e| *e != CacheEvent::Initialized)
            .collect();
        assert!(left.is_empty(), "after {what}: {left:?}");
    };
    c.create()
        .creating_parents_if_needed()
        .for_path(&root, b"")
        .unwrap();
    assert!(matches!(
        next_change(&events, "the create"),
        CacheEvent::Created(_)
    ));
    none_pending("the create");
    c.set_data(&root, b"new", None).unwrap();
    assert!(matches!(
        next_change(&events, "the change"),
        CacheEvent::Changed { .. }
    ));
    none_pending("the change");
    c.delete().for_path(&root).unwrap();
    assert!(matches!(
        next_change(&events, "the delete"),
        CacheEvent::Deleted(_)
    ));
    thread::sleep(Duration::from_millis(200));
    none_pending("the delete");
}

/// Curator's TestCuratorCache.testClearOnClose.
#[test]
fn cc_clear_on_close() {
    let c = client();
    let root = unique("/ports/cc/clear");
    let kept = CuratorCache::new(&c, &root).unwrap();
    kept.start().unwrap();
    c.create()
        .creating_parents_if_needed()
        .for_path(&root, b"foo")
        .unwrap();
    c.create().for_path(&format!("{root}/bar"), b"bar").unwrap();
    wait_until(WAIT, || kept.size() == 2, || format!("{}", kept.size()));
    kept.close();
    assert_eq!(kept.size(), 2);

    let cleared = CuratorCache::builder(&c, &root)
        .clear_on_close()
        .build()
        .unwrap();
    cleared.start().unwrap();
    assert_eq!(cleared.size(), 2);
    cleared.close();
    assert_eq!(cleared.size(), 0);
}

/// A cache of a subtree of `nodes` children made in transactions of
/// 10,000 loads them all, and the `Initialized` event comes after them.
fn loads_many_children(nodes: usize) {
    let c = client();
    let root = unique("/ports/cc/many");
    c.create()
        .creating_parents_if_needed()
        .for_path(&root, b"")
        .unwrap();
    let names: Vec<String> = (0..nodes).map(|i| format!("{root}/node_{i}")).collect();
    let began = Instant::now();
    for chunk in names.chunks(10_000) {
        let tx = chunk
            .iter()
            .fold(c.transaction(), |tx, p| tx.create(p, b""));
        tx.commit().unwrap();
    }
    let created = began.elapsed();
    let cache = CuratorCache::builder(&c, &root)
        .data_not_cached()
        .build()
        .unwrap();
    let events = cache.listen();
    let began = Instant::now();
    cache.start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while events.recv_deadline(deadline).expect("no Initialized") != CacheEvent::Initialized {}
    println!(
        "{nodes} nodes created in {created:?}, loaded in {:?}",
        began.elapsed()
    );
    assert_eq!(cache.size(), nodes + 1);
    drop(cache);
    // Leave the shared server light for the other tests.
    for chunk in names.chunks(10_000) {
        let tx = chunk.iter().fold(c.transaction(), |tx, p| tx.delete(p));
        tx.commit().unwrap();
    }
    c.delete().for_path(&root).unwrap();
}

/// Curator's TestCuratorCache.testGreaterThan64kZNodes (CURATOR-690), at
/// the size of the bug it guards against: Java's `Phaser`, which Curator
/// used to wait for the first load, allows 65,535 parties. Ignored by
/// default: latchkey has no such bound, and loading 65,540 nodes takes
/// 17 to 30 s here (one read after another); `cc_many_znodes` runs the same
/// at a tenth of the size.
#[test]
#[ignore = "about a minute: run with --ignored"]
fn cc_greater_than_64k_znodes() {
    loads_many_children(0xFFFF + 5);
}

/// Curator's TestCuratorCache.testGreaterThan64kZNodes at 6,000 nodes.
#[test]
fn cc_many_znodes() {
    loads_many_children(6_000);
}

// ---- TestCuratorCacheEdges ----------------------------------------------

/// Curator's TestCuratorCacheEdges.testReconnectConsistency: nodes
/// deleted, changed and created while the cache is cut off are all in its
/// copy once it is back, with the data they have.
#[test]
fn cce_reconnect_consistency() {
    let (proxy, c, states) = proxied();
    let writer = client();
    let cx = ctx(&c);
    let root = unique("/ports/cce/root");
    let (first, second) = (b"one", b"two");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&root, first)
        .unwrap();
    for p in ["1", "2", "1/11", "1/12", "1/13", "2/21", "2/22"] {
        writer
            .create()
            .for_path(&format!("{root}/{p}"), first)
            .unwrap();
    }
    let cache = CuratorCache::new(&c, &root).unwrap();
    cache.start().unwrap();
    assert_eq!(cache.size(), 8);

    server_down(&proxy);
    cx.expect(&states, ConnectionState::Suspended, WAIT);
    for p in ["2/21", "2/22", "2"] {
        writer.delete().for_path(&format!("{root}/{p}")).unwrap();
    }
    writer.set_data(&root, second, None).unwrap();
    for p in [
        "1/11/111",
        "1/11/111/1111",
        "1/11/111/1112",
        "1/13/131",
        "1/13/132",
        "1/13/132/1321",
    ] {
        writer
            .create()
            .for_path(&format!("{root}/{p}"), second)
            .unwrap();
    }
    server_up(&proxy);
    cx.expect(&states, ConnectionState::Reconnected, WAIT);

    let want: BTreeMap<String, Vec<u8>> = [
        ("", second),
        ("/1", first),
        ("/1/11", first),
        ("/1/11/111", second),
        ("/1/11/111/1111", second),
        ("/1/11/111/1112", second),
        ("/1/12", first),
        ("/1/13", first),
        ("/1/13/131", second),
        ("/1/13/132", second),
        ("/1/13/132/1321", second),
    ]
    .into_iter()
    .map(|(p, d)| (format!("{root}{p}"), d.to_vec()))
    .collect();
    let copy = || -> BTreeMap<String, Vec<u8>> {
        cache
            .entries()
            .into_iter()
            .map(|n| (n.path, n.data))
            .collect()
    };
    wait_until(
        WAIT,
        || copy() == want,
        || format!("the cache holds {:?}\n{}", copy(), cx.dump()),
    );
    assert_eq!(cache.size(), 11);
}

// ---- TestCuratorCacheEventOrdering --------------------------------------

/// Curator's TestCuratorCacheEventOrdering.testEventOrdering (its
/// `TestEventOrdering`): threads create, change and delete ten nodes at
/// random; once they are done, the creates the cache told minus the
/// deletes it told is the number of nodes it holds.
#[test]
fn cceo_event_ordering() {
    const THREADS: usize = 100;
    const ITERATIONS: usize = 100;
    const NODES: u64 = 10;
    let c = client();
    let cx = ctx(&c);
    let root = unique("/ports/cceo/root");
    c.create()
        .creating_parents_if_needed()
        .for_path(&root, b"")
        .unwrap();
    let cache = CuratorCache::new(&c, &root).unwrap();
    let events = cache.listen();
    cache.start().unwrap();
    let began = Instant::now();
    thread::scope(|s| {
        for t in 0..THREADS {
            let (c, root) = (&c, &root);
            s.spawn(move || {
                // A small xorshift per thread: no dependency for random.
                let mut x = 0x9E37_79B9_7F4A_7C15_u64 ^ (t as u64 + 1);
                let mut next = || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                for _ in 0..ITERATIONS {
                    let node = format!("{root}/{}", next() % NODES);
                    // Refusals (the node there already, or missing) are
                    // part of the game, as in Curator's.
                    let _ = match next() % 3 {
                        0 => c.create().for_path(&node, b"").map(|_| ()),
                        1 => c.set_data(&node, b"new", None).map(|_| ()),
                        _ => c.delete().for_path(&node),
                    };
                }
            });
        }
    });
    println!(
        "{} operations in {:?}",
        THREADS * ITERATIONS,
        began.elapsed()
    );
    let want = sorted_children(&c, &root).len() + 1;
    let suggested = std::cell::Cell::new(0_i64);
    let told = std::cell::RefCell::new(Vec::new());
    wait_until(
        WAIT,
        || {
            for e in events.try_iter() {
                match &e {
                    CacheEvent::Created(_) => suggested.set(suggested.get() + 1),
                    CacheEvent::Deleted(_) => suggested.set(suggested.get() - 1),
                    _ => {}
                }
                told.borrow_mut().push(e);
            }
            cache.size() == want && suggested.get() == want as i64
        },
        || {
            let told = told.borrow();
            format!(
                "the cache holds {} nodes, its {} events suggest {}, the server has {want}; \
                 the last events: {:?}\n{}",
                cache.size(),
                told.len(),
                suggested.get(),
                &told[told.len().saturating_sub(20)..],
                cx.dump()
            )
        },
    );
}

// ---- Beyond Curator's tests ----------------------------------------------

/// `set_data` writes from the caller's thread while the node's thread may
/// write too (woken by the watch each write fires): from 4 threads at
/// once, the node ends with the last data set, and no older write lands
/// after it.
#[test]
fn set_data_from_many_threads_ends_with_the_last_data() {
    const THREADS: usize = 4;
    const WRITES: usize = 50;
    let (c, other) = (client(), client());
    let path = unique("/ports/extra/many-writers");
    let node = PersistentNode::new(&c, CreateMode::Persistent, false, &path, b"").unwrap();
    started(&node);
    thread::scope(|s| {
        for t in 0..THREADS {
            let node = &node;
            s.spawn(move || {
                for i in 0..WRITES {
                    node.set_data(format!("{t}-{i}").as_bytes()).unwrap();
                }
            });
        }
    });
    let last = node.data();
    wait_until(
        WAIT,
        || other.get_data(&path).is_ok_and(|(d, _)| d == last),
        || {
            format!(
                "the node holds {:?}, the last data set is {:?}",
                other.get_data(&path).map(|(d, _)| d),
                last
            )
        },
    );
    // And stays so: no older write lands after it.
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        assert_eq!(data(&other, &path), last);
        thread::sleep(Duration::from_millis(50));
    }
    drop(node);
}

/// Data larger than ZooKeeper takes (2 MiB; `jute.maxbuffer` is 1 MiB) is
/// refused by `set_data`, naming the node, and the node keeps its data
/// and takes new data after. Before, `set_data` took it, and the write,
/// refused before it was sent, was tried again every second for good
/// while the node kept its old data.
#[test]
fn data_too_large_for_zookeeper_is_refused_by_set_data() {
    let c = client();
    let path = unique("/ports/extra/too-large");
    let node = PersistentNode::new(&c, CreateMode::Ephemeral, false, &path, b"small").unwrap();
    started(&node);
    let err = node.set_data(&vec![7u8; 2 << 20]).unwrap_err();
    assert!(err.to_string().contains(&path), "{err}");
    assert_eq!(node.data(), b"small");
    assert_eq!(data(&c, &path), b"small");
    node.set_data(b"next").unwrap();
    assert_eq!(data(&c, &path), b"next");
}

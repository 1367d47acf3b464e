//! `PersistentTtlNode` against a real ZooKeeper with TTL nodes enabled and
//! a short TTL check interval: the node stays while kept (touches of its
//! child only), through a deleted touch child, an expired session and a
//! ZooKeeper restart, and goes some TTLs after it is closed.
//!
//! Curator's `TestPersistentTtlNode`:
//!
//! | Curator method | here |
//! |---|---|
//! | `testBasic` | `the_node_stays_while_kept_and_goes_after_close` |
//! | `testForcedDeleteOfTouchNode` | `a_deleted_touch_node_is_made_again` |
//! | `testRecreationOfParentNodeWithParentCreationOff` | `without_parent_creation_a_deleted_parent_stops_the_node` |
//! | `testEventsOnParent` | `touches_raise_no_event_on_the_node` (a `PersistentWatcher` on the node instead of a `PathChildrenCache` of `/`: both see the node's data changes) |
//! | `testTouchNodeNotCreated` | `without_touches_the_node_goes_after_its_ttl` |
//! | `testInternalExecutorClose` | `close_ends_the_touch_thread` |
//! | `testExternalExecutorClose` | not applicable: no executor is passed in; the touches run on the node's own thread, which close ends |

mod common;

use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use crossbeam_channel::Receiver;
use latchkey_framework::{Client, Error, EventType, Stat, WatchedEvent};
use latchkey_recipes::{PersistentTtlNode, PersistentWatcher};
use latchkey_test::{ServerConfig, TestingServer};
use parking_lot::RwLock;

/// The TTL of most tests (Curator's is a tenth of its test timing): the
/// default touch every 500 ms leaves 500 ms for a touch delayed on a
/// loaded machine.
const TTL: Duration = Duration::from_secs(1);
const WAIT: Duration = Duration::from_secs(10);

fn ttl_config() -> ServerConfig {
    ServerConfig {
        system_properties: vec![
            ("zookeeper.extendedTypesEnabled".into(), "true".into()),
            ("znode.container.checkIntervalMs".into(), "50".into()),
        ],
        ..Default::default()
    }
}

/// This binary's server, with TTL nodes on and a 50 ms TTL check.
fn ttl_server() -> &'static TestingServer {
    static SERVER: OnceLock<TestingServer> = OnceLock::new();
    SERVER.get_or_init(|| TestingServer::start_with(ttl_config()).expect("start ZooKeeper"))
}

/// Held for reading by every test, and for writing by the one that counts
/// touch threads, which must run alone.
fn threads_lock() -> &'static RwLock<()> {
    static LOCK: OnceLock<RwLock<()>> = OnceLock::new();
    LOCK.get_or_init(RwLock::default)
}

fn client() -> Client {
    connect(&ttl_server().connect_string(), Duration::from_secs(10))
}

fn stat(c: &Client, path: &str) -> Option<Stat> {
    c.exists(path).unwrap()
}

fn started(node: PersistentTtlNode, ctx: &Ctx) -> PersistentTtlNode {
    node.start().unwrap();
    assert!(
        node.wait_for_initial_create(WAIT).unwrap(),
        "not created\n{}",
        ctx.dump()
    );
    node
}

/// Curator's TestPersistentTtlNode.testBasic.
#[test]
fn the_node_stays_while_kept_and_goes_after_close() {
    let _serial = threads_lock().read();
    let c = client();
    let ctx = Ctx::new(ttl_server(), &c);
    let path = unique("/ttl/basic");
    let node = started(PersistentTtlNode::new(&c, &path, TTL, b"").unwrap(), &ctx);
    for i in 0..3 {
        // A fixed sleep is the point: longer than the TTL.
        thread::sleep(TTL + TTL / 2);
        assert!(
            stat(&c, &path).is_some(),
            "gone after {i} TTLs\n{}",
            ctx.dump()
        );
    }
    assert!(stat(&c, node.child_path()).is_some(), "touched");
    node.close();
    assert!(stat(&c, &path).is_some(), "close leaves it to its TTL");
    wait_until(WAIT, || stat(&c, &path).is_none(), || ctx.dump());
}

/// Curator's TestPersistentTtlNode.testForcedDeleteOfTouchNode.
#[test]
fn a_deleted_touch_node_is_made_again() {
    let _serial = threads_lock().read();
    let c = client();
    let ctx = Ctx::new(ttl_server(), &c);
    let path = unique("/ttl/forced");
    let node = started(PersistentTtlNode::new(&c, &path, TTL, b"").unwrap(), &ctx);
    for _ in 0..4 {
        thread::sleep(TTL);
        let _ = c.delete().for_path(node.child_path());
    }
    wait_until(
        WAIT,
        || stat(&c, node.child_path()).is_some(),
        || ctx.dump(),
    );
    assert!(stat(&c, &path).is_some(), "{}", ctx.dump());
}

/// Curator's TestPersistentTtlNode.testRecreationOfParentNodeWithParentCreationOff:
/// without parent creation, a deleted parent leaves the node and its
/// child gone, and a set of its data refused.
#[test]
fn without_parent_creation_a_deleted_parent_stops_the_node() {
    let _serial = threads_lock().read();
    let c = client();
    let ctx = Ctx::new(ttl_server(), &c);
    let base = unique("/ttl/no-parents");
    let one = format!("{base}/one");
    let path = format!("{one}/two");
    let child = format!("{path}/{}", PersistentTtlNode::DEFAULT_CHILD_NODE_NAME);
    c.create()
        .creating_parents_if_needed()
        .for_path(&one, b"")
        .unwrap();
    let node = PersistentTtlNode::builder(&c, &path, TTL, b"hey")
        .use_parent_creation(false)
        .build()
        .unwrap();
    let node = started(node, &ctx);
    wait_until(WAIT, || stat(&c, &child).is_some(), || ctx.dump());

    // The node's touches may re-create its child between the recursive
    // delete's listing and its delete of the parent (`NotEmpty`): again.
    let mut tries = 0;
    while let Err(e) = c.delete().deleting_children_if_needed().for_path(&one) {
        tries += 1;
        assert!(
            e.is(latchkey_framework::ErrorCode::NotEmpty) && tries < 20,
            "delete {one}: {e}\n{}",
            ctx.dump()
        );
    }
    // Long enough for a re-create and a touch to have happened.
    thread::sleep(TTL * 2);
    assert!(stat(&c, &path).is_none(), "made again\n{}", ctx.dump());
    assert!(stat(&c, &child).is_none());
    assert!(stat(&c, &one).is_none());
    assert!(matches!(node.set_data(b""), Err(Error::IllegalState(_))));
    assert_eq!(node.data(), b"hey");

    // Without a missing parent, a plain node is not held back.
    let never = PersistentTtlNode::builder(&c, &format!("{base}/missing/n"), TTL, b"")
        .use_parent_creation(false)
        .build()
        .unwrap();
    never.start().unwrap();
    assert!(!never.wait_for_initial_create(TTL).unwrap());
    assert!(stat(&c, &format!("{base}/missing")).is_none());
}

fn data_changes(events: &Receiver<WatchedEvent>, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    let mut n = 0;
    while let Ok(ev) = events.recv_deadline(deadline) {
        if ev.event_type == EventType::NodeDataChanged {
            n += 1;
        }
    }
    n
}

/// Curator's TestPersistentTtlNode.testEventsOnParent: the touches raise
/// no data change on the node; a set does, once; the node goes after
/// close.
#[test]
fn touches_raise_no_event_on_the_node() {
    let _serial = threads_lock().read();
    let c = client();
    let ctx = Ctx::new(ttl_server(), &c);
    let path = unique("/ttl/events");
    let watcher = PersistentWatcher::new(&c, &path, false).unwrap();
    let events = watcher.listen();
    watcher.start().unwrap();
    let node = started(PersistentTtlNode::new(&c, &path, TTL, b"").unwrap(), &ctx);
    assert_eq!(
        data_changes(&events, TTL * 2),
        0,
        "the touches changed the node"
    );
    c.set_data(&path, b"changed", None).unwrap();
    assert_eq!(data_changes(&events, TTL), 1);
    node.close();
    wait_until(WAIT, || stat(&c, &path).is_none(), || ctx.dump());
}

/// Curator's TestPersistentTtlNode.testTouchNodeNotCreated: a node whose
/// child is never touched goes after its TTL once closed, and a watcher
/// sees it come and go.
#[test]
fn without_touches_the_node_goes_after_its_ttl() {
    let _serial = threads_lock().read();
    let c = client();
    let ctx = Ctx::new(ttl_server(), &c);
    let main = format!("{}/main", unique("/ttl/untouched"));
    let ttl = Duration::from_millis(500);
    let watcher = PersistentWatcher::new(&c, &main, false).unwrap();
    let events = watcher.listen();
    watcher.start().unwrap();
    let node = PersistentTtlNode::builder(&c, &main, ttl, b"")
        .without_touches_for_testing()
        .build()
        .unwrap();
    node.start().unwrap();
    let created = events.recv_timeout(WAIT).expect("created");
    assert_eq!(created.event_type, EventType::NodeCreated);
    node.close();
    assert!(stat(&c, node.child_path()).is_none());
    let deleted = events.recv_timeout(ttl * 3 + WAIT).expect("deleted");
    assert_eq!(deleted.event_type, EventType::NodeDeleted, "{}", ctx.dump());
}

/// The threads of this process with `name` (as Linux keeps it, at most
/// 15 bytes).
fn threads_named(name: &str) -> usize {
    let name = &name[..name.len().min(15)];
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|comm| comm.trim_end() == name)
                .count()
        })
        .unwrap_or(0)
}

/// Curator's TestPersistentTtlNode.testInternalExecutorClose: the touch
/// thread runs while the node is kept and is gone once it is closed.
#[test]
fn close_ends_the_touch_thread() {
    let _alone = threads_lock().write();
    let c = client();
    let ctx = Ctx::new(ttl_server(), &c);
    let path = format!("{}/main", unique("/ttl/thread"));
    let before = threads_named("latchkey-ttl-touch");
    let watcher = PersistentWatcher::new(&c, &format!("{path}/touch"), false).unwrap();
    let events = watcher.listen();
    watcher.start().unwrap();
    let node = started(PersistentTtlNode::new(&c, &path, TTL, b"").unwrap(), &ctx);
    let touched = events.recv_timeout(TTL * 5).expect("the touch node made");
    assert_eq!(touched.event_type, EventType::NodeCreated);
    assert_eq!(threads_named("latchkey-ttl-touch"), before + 1);
    node.close();
    assert_eq!(
        threads_named("latchkey-ttl-touch"),
        before,
        "joined by close"
    );
}

/// The node is kept through an expired session (touches go on from the
/// new one) and a ZooKeeper restart shorter than its TTL: it is never
/// deleted, and its child is touched again after each.
///
/// The TTL is far longer than the touch interval (500 ms) because the
/// server checks it against wall time: a connect made while the new JVM
/// was starting sometimes hung until its timeout, so the first touch came
/// 5.8 s after the restart began, and with the 5 s TTL this test once had
/// the server rightly deleted the node.
#[test]
fn the_node_is_kept_through_an_expired_session_and_a_restart() {
    let _serial = threads_lock().read();
    let mut server = TestingServer::start_with(ttl_config()).expect("start ZooKeeper");
    let c = connect(&server.connect_string(), Duration::from_secs(20));
    let observer = connect(&server.connect_string(), Duration::from_secs(20));
    let ctx = Ctx::new(&server, &c);
    let path = unique("/ttl/kept");
    let ttl = Duration::from_secs(30);
    let node = PersistentTtlNode::builder(&c, &path, ttl, b"kept")
        .touch_schedule_factor(60)
        .build()
        .unwrap();
    let node = started(node, &ctx);
    let created = stat(&observer, &path).unwrap().czxid;
    let touched_after = |what: &str, since: i64| {
        wait_until(
            WAIT,
            || stat(&observer, node.child_path()).is_some_and(|s| s.mzxid > since),
            || format!("not touched after {what}\n{}", ctx.dump()),
        );
    };
    touched_after("the start", 0);

    let session = c.session_id();
    c.expire_session_for_testing().unwrap();
    wait_until(
        WAIT,
        || c.session_id() != session && c.session_id() != 0,
        || ctx.dump(),
    );
    // Any touch from now on comes from the new session.
    let mark = stat(&observer, node.child_path()).map_or(0, |s| s.mzxid);
    touched_after("the expiry", mark);

    let down = Instant::now();
    server.restart().unwrap();
    assert!(observer
        .block_until_connected(Duration::from_secs(30))
        .unwrap());
    let mark = stat(&observer, node.child_path()).map_or(0, |s| s.mzxid);
    touched_after("the restart", mark);
    let untouched = down.elapsed();
    let now = stat(&observer, &path).expect("kept");
    assert_eq!(
        now.czxid,
        created,
        "never deleted (restart to first touch after it: {untouched:?}, TTL {ttl:?})\n{}",
        ctx.dump()
    );
    assert_eq!(observer.get_data(&path).unwrap().0, b"kept");
    node.close();
}

//! `PathChildrenCache` and `TreeCache` (Curator 4's classic-watch caches)
//! against a real ZooKeeper: Curator's own tests ported, a Curator (Java)
//! peer making the changes the Rust caches follow, and faults (a session
//! expiry, a partition, a server restart and a server not started yet)
//! after which the caches tell exactly what changed, never losing a
//! removal, with one watch per node however often they reconnect. Every
//! wait is bounded, so a broken cache fails within seconds.
//!
//! Curator's `TestPathChildrenCache`:
//!
//! | Curator test | here |
//! |---|---|
//! | `testParentContainerMissing` | `pcc_creates_its_path_again_and_follows_it` |
//! | `testInitializedEvenIfChildDeleted` | `pcc_post_initialized_event_comes_after_the_initial_children` (a child deleted before it is read; Curator's hook between listing and reading has no equivalent, the deletion is made before start) |
//! | `testWithBadConnect` | `classic_caches_start_before_the_server_and_follow_it_through_a_restart` |
//! | `testPostInitializedForEmpty` | `pcc_post_initialized_event_comes_after_the_initial_children` |
//! | `testAsyncInitialPopulation` | `pcc_post_initialized_event_comes_after_the_initial_children` |
//! | `testChildrenInitialized` | `pcc_post_initialized_event_comes_after_the_initial_children` |
//! | `testChildrenInitializedNormal` | `pcc_normal_start_tells_each_child_and_no_initialized` |
//! | `testUpdateWhenNotCachingData` | `pcc_without_data_keeps_stats_only` |
//! | `testEnsurePath` | `pcc_creates_its_path_again_and_follows_it` |
//! | `testDeleteThenCreate` | `pcc_tells_a_child_deleted_then_created` |
//! | `testRebuildAgainstOtherProcesses` | `pcc_rebuild_reads_at_once_and_later_changes_are_told` (another client's changes before and after the rebuild; Curator's hook inside the rebuild has no equivalent) |
//! | `testIssue27` | `pcc_tells_a_child_deleted_then_created` |
//! | `testIssue27Alt` | `pcc_tells_a_child_deleted_then_created` (with `BuildInitialCache`) |
//! | `testKilledSession` | `pcc_after_a_session_expiry_tells_lost_reconnected_and_the_removed_ephemeral`; other clients' changes while the session expires: `classic_caches_tell_what_changed_while_their_session_expired` |
//! | `testModes` | `pcc_without_data_keeps_stats_only` |
//! | `testRebuildNode` | `pcc_rebuild_reads_at_once_and_later_changes_are_told` |
//! | `testBasics` | `pcc_tells_children_added_updated_and_removed` |
//! | `testBasicsOnTwoCachesWithSameExecutor` | `pcc_two_caches_on_one_client_each_tell_everything` (no executors here: two caches on one client) |
//! | `testDeleteNodeAfterCloseDoesntCallExecutor` | `classic_caches_closed_tell_nothing_and_refuse_a_second_start` |
//! | `testInterruptedOperationOnShutdown` | not applicable: no executor or queued operations; a close during a read ends the read at once (`classic_caches_close_at_once_while_cut_off`) |
//!
//! Curator's `TestTreeCache`:
//!
//! | Curator test | here |
//! |---|---|
//! | `testSelector` | `tree_selector_skips_what_it_rejects` |
//! | `testStartup` | `tree_startup_tells_nodes_level_by_level` |
//! | `testCreateParents` | `tree_creates_parents_only_when_asked` |
//! | `testStartEmpty` | `tree_started_empty_tells_the_root_when_created` |
//! | `testStartEmptyDeeper` | `tree_started_empty_tells_the_root_when_created` |
//! | `testDepth0` | `tree_max_depth_limits_what_is_held` |
//! | `testDepth1` | `tree_max_depth_limits_what_is_held` |
//! | `testDepth1Deeper` | `tree_max_depth_limits_what_is_held` |
//! | `testAsyncInitialPopulation` | `tree_startup_tells_nodes_level_by_level` |
//! | `testFromRoot` | `tree_from_the_root_and_in_a_namespace` |
//! | `testFromRootWithDepth` | `tree_from_the_root_and_in_a_namespace` |
//! | `testWithNamespace` | `tree_from_the_root_and_in_a_namespace` |
//! | `testWithNamespaceAtRoot` | `tree_from_the_root_and_in_a_namespace` |
//! | `testSyncInitialPopulation` | `tree_started_empty_tells_the_root_when_created` |
//! | `testChildrenInitialized` | `tree_startup_tells_nodes_level_by_level` |
//! | `testUpdateWhenNotCachingData` | `tree_without_data_keeps_stats_only` |
//! | `testDeleteThenCreate` | `tree_tells_nodes_deleted_then_created` |
//! | `testDeleteThenCreateRoot` | `tree_tells_nodes_deleted_then_created` |
//! | `testKilledSession` | `tree_after_a_session_expiry_tells_the_removed_ephemeral_then_initialized` (a real expiry on the server: the ephemeral node is gone when the cache reads again, so its removal comes before `Initialized`) |
//! | `testBasics` | `tree_basics` |
//! | `testBasicsWithNoZkWatches` | `tree_without_watches_reads_once` |
//! | `testBasicsOnTwoCaches` | `tree_two_caches_on_one_client` |
//! | `testDeleteNodeAfterCloseDoesntCallExecutor` | `classic_caches_closed_tell_nothing_and_refuse_a_second_start` |
//! | `testServerNotStartedYet` | `classic_caches_start_before_the_server_and_follow_it_through_a_restart` |
//! | `testErrorListener` | not applicable: no listener callbacks (events go to channels; a dropped receiver is skipped, `tree_two_caches_on_one_client`); a panicking selector is covered by `tree_selector_skips_what_it_rejects` |
//!
//! Curator's `TestTreeCacheRandomTree` (`testGiantRandomDeepTree`,
//! `testGiantRandomDeepTreeWithDepth`): `tree_follows_a_random_tree`
//! (both, 250 steps each instead of 1000, a fixed seed). Curator's
//! `TestTreeCacheIteratorAndSize` (`testBasic`, `testIteratorWithRandomGraph`,
//! `testEmptyTree`, `testWithDeletedNodes`): `tree_entries_and_size`.
//! Curator's `TestPathChildrenCacheEventOrdering` and
//! `TestTreeCacheEventOrdering` (`testEventOrdering`, from
//! `TestEventOrdering`): `classic_caches_events_replay_to_their_content`
//! (4 writers of 150 changes each instead of 100 of 100). Not ported:
//! `TestPathChildrenCacheInCluster` (a cache through a member's restart
//! in an ensemble: the client's failover is the framework's, and
//! `cache_faults.rs` runs the other caches through leader kills; here a
//! standalone server's restart, a partition and session expiries).

mod common;

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use common::*;
use crossbeam_channel::Receiver;
use latchkey_framework::{Client, ConnectionState, CreateMode};
use latchkey_recipes::{
    PathChildrenCache, PathChildrenCacheEvent as P, PathChildrenCacheStartMode as Mode, TreeCache,
    TreeCacheEvent as T, TreeCacheSelector,
};
use latchkey_test::peers::{peer_available, Peer, PeerKind};
use latchkey_test::{FaultProxy, TestingServer};

/// How long an expected event may take.
const WAIT: Duration = Duration::from_secs(10);
/// How long to listen for events that must not come.
const QUIET: Duration = Duration::from_millis(300);

fn client() -> Client {
    connect(&shared_server().connect_string(), Duration::from_secs(10))
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// A path shown relative to `root` (`~` for the root itself).
fn rel(root: &str, path: &str) -> String {
    match path.strip_prefix(root) {
        Some("") => "~".into(),
        Some(rest) if rest.starts_with('/') => format!("~{rest}"),
        _ if root == "/" => path.to_owned(),
        _ => path.to_owned(),
    }
}

/// A children-cache event in short: `added ~/a=data`.
fn pshort(root: &str, e: &P) -> String {
    match e {
        P::ChildAdded(n) => format!("added {}={}", rel(root, &n.path), text(&n.data)),
        P::ChildUpdated(n) => format!("updated {}={}", rel(root, &n.path), text(&n.data)),
        P::ChildRemoved(n) => format!("removed {}", rel(root, &n.path)),
        P::Initialized(all) => format!(
            "initialized {}",
            all.iter()
                .map(|n| rel(root, &n.path))
                .collect::<Vec<_>>()
                .join(",")
        ),
        P::ConnectionSuspended => "suspended".into(),
        P::ConnectionReconnected => "reconnected".into(),
        P::ConnectionLost => "lost".into(),
        other => format!("{other:?}"),
    }
}

/// A tree-cache event in short: `added ~/a=data`, `updated ~/a=old>new`.
fn tshort(root: &str, e: &T) -> String {
    match e {
        T::NodeAdded(n) => format!("added {}={}", rel(root, &n.path), text(&n.data)),
        T::NodeUpdated { old, new } => format!(
            "updated {}={}>{}",
            rel(root, &new.path),
            text(&old.data),
            text(&new.data)
        ),
        T::NodeRemoved(n) => format!("removed {}", rel(root, &n.path)),
        T::Initialized => "initialized".into(),
        T::ConnectionSuspended => "suspended".into(),
        T::ConnectionReconnected => "reconnected".into(),
        T::ConnectionLost => "lost".into(),
        other => format!("{other:?}"),
    }
}

fn is_connection(s: &str) -> bool {
    matches!(s, "suspended" | "reconnected" | "lost")
}

/// Events read from a cache's channel, in short.
struct Events<E> {
    rx: Receiver<E>,
    short: Box<dyn Fn(&E) -> String>,
    skip_connection: bool,
}

impl<E: Debug> Events<E> {
    fn next(&self, want: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            match self.rx.recv_deadline(deadline) {
                Ok(e) => {
                    let s = (self.short)(&e);
                    if self.skip_connection && is_connection(&s) {
                        continue;
                    }
                    return s;
                }
                Err(_) => panic!("no event within {WAIT:?}: wanted {want}"),
            }
        }
    }

    /// The next events are exactly `want`, in order.
    fn expect(&self, want: &[&str]) {
        for (i, w) in want.iter().enumerate() {
            let got = self.next(w);
            assert_eq!(&got, w, "event {i} of {want:?}");
        }
    }

    /// The next `want.len()` events are `want`, in any order.
    fn expect_unordered(&self, want: &[&str]) {
        let mut got: Vec<String> = want.iter().map(|w| self.next(w)).collect();
        let mut want: Vec<String> = want.iter().map(|w| w.to_string()).collect();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    /// Nothing more comes for a while.
    fn expect_quiet(&self) {
        let deadline = Instant::now() + QUIET;
        while let Ok(e) = self.rx.recv_deadline(deadline) {
            let s = (self.short)(&e);
            if !(self.skip_connection && is_connection(&s)) {
                panic!("unexpected event: {s}");
            }
        }
    }
}

fn pevents(cache: &PathChildrenCache) -> Events<P> {
    let root = cache.path().to_owned();
    Events {
        rx: cache.listen(),
        short: Box::new(move |e| pshort(&root, e)),
        skip_connection: true,
    }
}

fn tevents(cache: &TreeCache) -> Events<T> {
    let root = cache.path().to_owned();
    Events {
        rx: cache.listen(),
        short: Box::new(move |e| tshort(&root, e)),
        skip_connection: true,
    }
}

fn create(c: &Client, path: &str, data: &str) {
    c.create()
        .creating_parents_if_needed()
        .for_path(path, data.as_bytes())
        .unwrap_or_else(|e| panic!("create {path}: {e}"));
}

fn names(
    map: Option<std::collections::BTreeMap<String, latchkey_recipes::ChildData>>,
) -> Vec<String> {
    map.expect("a held node").into_keys().collect()
}

// ---------------------------------------------------------------- PathChildrenCache

/// Curator's TestPathChildrenCache.testBasics.
#[test]
fn pcc_tells_children_added_updated_and_removed() {
    let c = client();
    let root = unique("/pcc/basics");
    create(&c, &root, "");
    let cache = PathChildrenCache::new(&c, &root, true).unwrap();
    let events = pevents(&cache);
    cache.start().unwrap();

    create(&c, &format!("{root}/one"), "hey there");
    events.expect(&["added ~/one=hey there"]);
    c.set_data(&format!("{root}/one"), b"sup!", None).unwrap();
    events.expect(&["updated ~/one=sup!"]);
    assert_eq!(
        cache
            .current_data_for(&format!("{root}/one"))
            .map(|n| n.data),
        Some(b"sup!".to_vec())
    );
    c.delete().for_path(&format!("{root}/one")).unwrap();
    events.expect(&["removed ~/one"]);
    events.expect_quiet();
    assert!(cache.current_data().is_empty());
}

/// Curator's TestPathChildrenCache.testChildrenInitialized,
/// testAsyncInitialPopulation, testPostInitializedForEmpty and
/// testInitializedEvenIfChildDeleted.
#[test]
fn pcc_post_initialized_event_comes_after_the_initial_children() {
    let c = client();
    let root = unique("/pcc/initialized");
    for i in 1..=3 {
        create(&c, &format!("{root}/{i}"), &i.to_string());
    }
    let cache = PathChildrenCache::new(&c, &root, true).unwrap();
    let events = pevents(&cache);
    cache.start_with(Mode::PostInitializedEvent).unwrap();
    events.expect(&[
        "added ~/1=1",
        "added ~/2=2",
        "added ~/3=3",
        "initialized ~/1,~/2,~/3",
    ]);
    let data: Vec<String> = cache.current_data().iter().map(|n| text(&n.data)).collect();
    assert_eq!(data, ["1", "2", "3"]);
    // Later changes come after it, and it comes once.
    create(&c, &format!("{root}/4"), "4");
    events.expect(&["added ~/4=4"]);
    events.expect_quiet();

    // An empty (and missing) node: initialized at once, with nothing.
    let empty = unique("/pcc/initialized-empty");
    let cache = PathChildrenCache::new(&c, &empty, true).unwrap();
    let events = pevents(&cache);
    cache.start_with(Mode::PostInitializedEvent).unwrap();
    events.expect(&["initialized "]);

    // A child deleted before the cache reads it is not in the initial data.
    let gone = unique("/pcc/initialized-gone");
    create(&c, &format!("{gone}/one"), "x");
    c.delete().for_path(&format!("{gone}/one")).unwrap();
    let cache = PathChildrenCache::new(&c, &gone, true).unwrap();
    let events = pevents(&cache);
    cache.start_with(Mode::PostInitializedEvent).unwrap();
    events.expect(&["initialized "]);
    assert!(cache.current_data().is_empty());
}

/// Curator's TestPathChildrenCache.testChildrenInitializedNormal.
#[test]
fn pcc_normal_start_tells_each_child_and_no_initialized() {
    let c = client();
    let root = unique("/pcc/normal");
    for i in 1..=3 {
        create(&c, &format!("{root}/{i}"), &i.to_string());
    }
    let cache = PathChildrenCache::new(&c, &root, true).unwrap();
    let events = pevents(&cache);
    cache.start_with(Mode::Normal).unwrap();
    events.expect(&["added ~/1=1", "added ~/2=2", "added ~/3=3"]);
    events.expect_quiet();
    assert_eq!(cache.current_data().len(), 3);
}

/// Curator's TestPathChildrenCache.testModes and
/// testUpdateWhenNotCachingData.
#[test]
fn pcc_without_data_keeps_stats_only() {
    let c = client();
    let root = unique("/pcc/no-data");
    create(&c, &root, "");
    let cache = PathChildrenCache::new(&c, &root, false).unwrap();
    let events = pevents(&cache);
    cache.start_with(Mode::BuildInitialCache).unwrap();
    create(&c, &format!("{root}/one"), "one");
    create(&c, &format!("{root}/two"), "two");
    events.expect(&["added ~/one=", "added ~/two="]);
    for node in cache.current_data() {
        assert!(node.data.is_empty(), "{node:?}");
        assert!(node.stat.czxid > 0, "{node:?}");
    }
    c.set_data(&format!("{root}/one"), b"something new", None)
        .unwrap();
    events.expect(&["updated ~/one="]);
    assert_eq!(
        cache
            .current_data_for(&format!("{root}/one"))
            .unwrap()
            .stat
            .version,
        1
    );
    events.expect_quiet();
}

/// Curator's TestPathChildrenCache.testEnsurePath and
/// testParentContainerMissing: the cache creates its node (a container)
/// when it is missing, also after it is deleted, and follows it.
#[test]
fn pcc_creates_its_path_again_and_follows_it() {
    let c = client();
    let root = unique("/pcc/ensure") + "/a/b";
    let cache = PathChildrenCache::new(&c, &root, true).unwrap();
    let events = pevents(&cache);
    cache.start_with(Mode::PostInitializedEvent).unwrap();
    events.expect(&["initialized "]);
    let stat = c
        .exists(&root)
        .unwrap()
        .expect("the cache created its node");
    assert_eq!(stat.ephemeral_owner, 0);

    create(&c, &format!("{root}/one"), "");
    create(&c, &format!("{root}/two"), "");
    events.expect(&["added ~/one=", "added ~/two="]);
    c.delete().for_path(&format!("{root}/one")).unwrap();
    c.delete().for_path(&format!("{root}/two")).unwrap();
    c.delete().for_path(&root).unwrap();
    events.expect_unordered(&["removed ~/one", "removed ~/two"]);
    wait_until(
        WAIT,
        || c.exists(&root).ok().flatten().is_some(),
        || "the cache did not create its node again".into(),
    );
    c.create()
        .creating_parent_containers_if_needed()
        .for_path(&format!("{root}/new"), b"")
        .unwrap();
    events.expect(&["added ~/new="]);
    events.expect_quiet();
}

/// Curator's TestPathChildrenCache.testDeleteThenCreate, testIssue27 and
/// testIssue27Alt.
#[test]
fn pcc_tells_a_child_deleted_then_created() {
    let c = client();
    let root = unique("/pcc/issue27");
    for name in ["a", "b", "c"] {
        create(&c, &format!("{root}/{name}"), "one");
    }
    let cache = PathChildrenCache::new(&c, &root, true).unwrap();
    let events = pevents(&cache);
    cache.start().unwrap();
    events.expect(&["added ~/a=one", "added ~/b=one", "added ~/c=one"]);
    c.delete().for_path(&format!("{root}/a")).unwrap();
    events.expect(&["removed ~/a"]);
    create(&c, &format!("{root}/a"), "two");
    events.expect(&["added ~/a=two"]);
    events.expect_quiet();

    // testIssue27Alt: the initial children are not told.
    let cache = PathChildrenCache::new(&c, &root, true).unwrap();
    let events = pevents(&cache);
    cache.start_with(Mode::BuildInitialCache).unwrap();
    assert_eq!(cache.current_data().len(), 3, "read before start returned");
    c.delete().for_path(&format!("{root}/b")).unwrap();
    events.expect(&["removed ~/b"]);
    create(&c, &format!("{root}/b"), "two");
    events.expect(&["added ~/b=two"]);
    events.expect_quiet();
}

/// Curator's TestPathChildrenCache.testRebuildNode and
/// testRebuildAgainstOtherProcesses: a rebuild reads on the caller's
/// thread and tells nothing; what changes later is told; a node that is
/// not a child is refused.
#[test]
fn pcc_rebuild_reads_at_once_and_later_changes_are_told() {
    let (c, other) = (client(), client());
    let root = unique("/pcc/rebuild");
    create(&c, &format!("{root}/one"), "one");
    create(&c, &format!("{root}/snafu"), "original");
    let cache = PathChildrenCache::new(&c, &root, true).unwrap();
    assert!(cache.rebuild().is_err(), "not started");
    let events = pevents(&cache);
    cache.start_with(Mode::BuildInitialCache).unwrap();

    other
        .set_data(&format!("{root}/one"), b"alt", None)
        .unwrap();
    cache.rebuild_node(&format!("{root}/one")).unwrap();
    assert_eq!(
        cache.current_data_for(&format!("{root}/one")).unwrap().data,
        b"alt"
    );
    let err = cache
        .rebuild_node(&format!("{root}/one/deeper"))
        .unwrap_err();
    assert!(err.to_string().contains("not one of its children"), "{err}");
    assert!(cache.rebuild_node("not a path").is_err());

    create(&other, &format!("{root}/test"), "");
    other.delete().for_path(&format!("{root}/one")).unwrap();
    cache.rebuild().unwrap();
    assert!(cache.current_data_for(&format!("{root}/test")).is_some());
    assert!(cache.current_data_for(&format!("{root}/one")).is_none());
    other
        .set_data(&format!("{root}/snafu"), b"grilled", None)
        .unwrap();
    // The rebuild's changes may or may not be told (its watches raced
    // them); the later one is.
    let deadline = Instant::now() + WAIT;
    loop {
        let got = events.next("updated ~/snafu=grilled");
        if got == "updated ~/snafu=grilled" {
            break;
        }
        assert!(Instant::now() < deadline, "last: {got}");
    }
    assert_eq!(
        cache
            .current_data_for(&format!("{root}/snafu"))
            .unwrap()
            .data,
        b"grilled"
    );
    cache.close();
    assert!(cache.rebuild().is_err(), "closed");
}

/// Curator's TestPathChildrenCache.testBasicsOnTwoCachesWithSameExecutor
/// (two caches on one client), with `clear`, `clear_and_refresh` and
/// `clear_data_bytes`.
#[test]
fn pcc_two_caches_on_one_client_each_tell_everything() {
    let c = client();
    let root = unique("/pcc/two");
    create(&c, &root, "");
    let (one, two) = (
        PathChildrenCache::new(&c, &root, true).unwrap(),
        PathChildrenCache::new(&c, &root, true).unwrap(),
    );
    let (e1, e2) = (pevents(&one), pevents(&two));
    one.start().unwrap();
    two.start().unwrap();
    create(&c, &format!("{root}/one"), "hey there");
    for e in [&e1, &e2] {
        e.expect(&["added ~/one=hey there"]);
    }
    c.set_data(&format!("{root}/one"), b"sup!", None).unwrap();
    for e in [&e1, &e2] {
        e.expect(&["updated ~/one=sup!"]);
    }
    assert_eq!(
        one.current_data_for(&format!("{root}/one")).unwrap().data,
        b"sup!"
    );
    assert_eq!(
        two.current_data_for(&format!("{root}/one")).unwrap().data,
        b"sup!"
    );
    c.delete().for_path(&format!("{root}/one")).unwrap();
    for e in [&e1, &e2] {
        e.expect(&["removed ~/one"]);
    }

    create(&c, &format!("{root}/x"), "x");
    e1.expect(&["added ~/x=x"]);
    e2.expect(&["added ~/x=x"]);
    let x = format!("{root}/x");
    assert!(!one.clear_data_bytes(&x, Some(5)), "another version");
    assert!(one.clear_data_bytes(&x, Some(0)));
    assert!(one.current_data_for(&x).unwrap().data.is_empty());
    assert!(!one.clear_data_bytes(&format!("{root}/none"), None));
    one.clear();
    assert!(one.current_data().is_empty());
    one.clear_and_refresh().unwrap();
    e1.expect(&["added ~/x=x"]);
    e1.expect_quiet();
    e2.expect_quiet();
}

/// Curator's TestPathChildrenCache.testKilledSession: the cache's client
/// loses its session; its ephemeral child goes, and the cache tells the
/// loss, the reconnection and the removal, nothing else.
#[test]
fn pcc_after_a_session_expiry_tells_lost_reconnected_and_the_removed_ephemeral() {
    let c = client();
    let ctx = Ctx::new(shared_server(), &c);
    let root = unique("/pcc/killed");
    create(&c, &format!("{root}/stays"), "x");
    let cache = PathChildrenCache::new(&c, &root, true).unwrap();
    let rx = cache.listen();
    cache.start_with(Mode::BuildInitialCache).unwrap();
    c.create()
        .mode(CreateMode::Ephemeral)
        .for_path(&format!("{root}/me"), b"data")
        .unwrap();
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    let mut expired = false;
    while !["lost", "reconnected", "removed ~/me"]
        .iter()
        .all(|w| seen.iter().any(|s| s == w))
    {
        if seen.iter().any(|s| s == "added ~/me=data") && !expired {
            c.expire_session_for_testing().unwrap();
            expired = true;
        }
        match rx.recv_deadline(deadline) {
            Ok(e) => seen.push(pshort(&root, &e)),
            Err(_) => panic!("seen {seen:?}\n{}", ctx.dump()),
        }
    }
    let data: Vec<&String> = seen.iter().filter(|s| !is_connection(s)).collect();
    assert_eq!(data, ["added ~/me=data", "removed ~/me"], "{seen:?}");
    let quiet = Events {
        rx,
        short: Box::new(move |e| pshort(&root, e)),
        skip_connection: true,
    };
    quiet.expect_quiet();
    assert_eq!(cache.current_data().len(), 1);
}

// ---------------------------------------------------------------- TreeCache

/// Curator's TestTreeCache.testStartup, testAsyncInitialPopulation and
/// testChildrenInitialized.
#[test]
fn tree_startup_tells_nodes_level_by_level() {
    let c = client();
    let root = unique("/tree/startup");
    create(&c, &root, "");
    create(&c, &format!("{root}/1"), "one");
    create(&c, &format!("{root}/2"), "two");
    create(&c, &format!("{root}/3"), "three");
    create(&c, &format!("{root}/2/sub"), "two-sub");
    let cache = TreeCache::new(&c, &root).unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&[
        "added ~=",
        "added ~/1=one",
        "added ~/2=two",
        "added ~/3=three",
        "added ~/2/sub=two-sub",
        "initialized",
    ]);
    events.expect_quiet();
    assert_eq!(names(cache.current_children(&root)), ["1", "2", "3"]);
    assert!(names(cache.current_children(&format!("{root}/1"))).is_empty());
    assert_eq!(names(cache.current_children(&format!("{root}/2"))), ["sub"]);
    assert!(cache
        .current_children(&format!("{root}/non_exist"))
        .is_none());
}

/// Curator's TestTreeCache.testSelector; a selector that panics counts as
/// `false`.
#[test]
fn tree_selector_skips_what_it_rejects() {
    struct Selector(String);
    impl TreeCacheSelector for Selector {
        fn traverse_children(&self, path: &str) -> bool {
            if path.ends_with("/boom") {
                panic!("a selector that panics");
            }
            path != format!("{}/n1-b/n2-b", self.0)
        }
        fn accept_child(&self, path: &str) -> bool {
            path != format!("{}/n1-c", self.0)
        }
    }
    let c = client();
    let root = unique("/tree/selector");
    for p in [
        "",
        "/n1-a",
        "/n1-b",
        "/n1-b/n2-a",
        "/n1-b/n2-b",
        "/n1-b/n2-b/n3-a",
        "/n1-c",
        "/n1-d",
        "/boom",
        "/boom/x",
    ] {
        create(&c, &format!("{root}{p}"), "");
    }
    let cache = TreeCache::builder(&c, &root)
        .selector(Selector(root.clone()))
        .build()
        .unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&[
        "added ~=",
        "added ~/boom=",
        "added ~/n1-a=",
        "added ~/n1-b=",
        "added ~/n1-d=",
        "added ~/n1-b/n2-a=",
        "added ~/n1-b/n2-b=",
        "initialized",
    ]);
    events.expect_quiet();
}

/// Curator's TestTreeCache.testCreateParents.
#[test]
fn tree_creates_parents_only_when_asked() {
    let c = client();
    let root = unique("/tree/parents") + "/two/three";
    let cache = TreeCache::new(&c, &root).unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&["initialized"]);
    events.expect_quiet();
    assert!(c.exists(&root).unwrap().is_none());
    cache.close();

    let cache = TreeCache::builder(&c, &root)
        .create_parent_nodes(true)
        .build()
        .unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&["added ~=", "initialized"]);
    events.expect_quiet();
    assert!(c.exists(&root).unwrap().is_some());
}

/// Curator's TestTreeCache.testStartEmpty, testStartEmptyDeeper and
/// testSyncInitialPopulation.
#[test]
fn tree_started_empty_tells_the_root_when_created() {
    let c = client();
    let root = unique("/tree/empty");
    let cache = TreeCache::new(&c, &root).unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&["initialized"]);
    create(&c, &root, "");
    create(&c, &format!("{root}/one"), "hey there");
    events.expect(&["added ~=", "added ~/one=hey there"]);
    events.expect_quiet();

    let deeper = unique("/tree/empty-deeper") + "/foo/bar";
    let cache = TreeCache::new(&c, &deeper).unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&["initialized"]);
    create(&c, latchkey_framework::paths::parent(&deeper).unwrap(), "");
    events.expect_quiet();
    create(&c, &deeper, "");
    events.expect(&["added ~="]);
    events.expect_quiet();
}

/// Curator's TestTreeCache.testDepth0, testDepth1 and testDepth1Deeper.
#[test]
fn tree_max_depth_limits_what_is_held() {
    let c = client();
    let root = unique("/tree/depth") + "/foo/bar";
    create(&c, &root, "");
    create(&c, &format!("{root}/1"), "one");
    create(&c, &format!("{root}/2"), "two");
    create(&c, &format!("{root}/3"), "three");
    create(&c, &format!("{root}/2/sub"), "two-sub");

    let cache = TreeCache::builder(&c, &root).max_depth(0).build().unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&["added ~=", "initialized"]);
    events.expect_quiet();
    assert!(names(cache.current_children(&root)).is_empty());
    assert!(cache.current_data(&format!("{root}/1")).is_none());
    assert!(cache.current_children(&format!("{root}/1")).is_none());

    let cache = TreeCache::builder(&c, &root).max_depth(1).build().unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&[
        "added ~=",
        "added ~/1=one",
        "added ~/2=two",
        "added ~/3=three",
        "initialized",
    ]);
    events.expect_quiet();
    assert_eq!(names(cache.current_children(&root)), ["1", "2", "3"]);
    assert!(names(cache.current_children(&format!("{root}/2"))).is_empty());
    assert!(cache.current_data(&format!("{root}/2/sub")).is_none());
    assert!(cache.current_children(&format!("{root}/2/sub")).is_none());
    // Below the depth, nothing is watched either.
    create(&c, &format!("{root}/2/sub/deep"), "");
    events.expect_quiet();
}

/// Curator's TestTreeCache.testFromRoot, testFromRootWithDepth,
/// testWithNamespace and testWithNamespaceAtRoot. Other tests of this
/// binary create nodes under `/` meanwhile: from the root, only this
/// test's nodes are checked.
#[test]
fn tree_from_the_root_and_in_a_namespace() {
    let c = client();
    let top = unique("/tree-root");
    create(&c, &format!("{top}/one"), "hey there");

    let cache = TreeCache::builder(&c, "/").max_depth(1).build().unwrap();
    let rx = cache.listen();
    cache.start().unwrap();
    let first = rx.recv_timeout(WAIT).expect("an event");
    assert_eq!(tshort("/", &first), "added ~=");
    let mut seen = Vec::new();
    loop {
        let e = rx.recv_timeout(WAIT).expect("initialized");
        let s = tshort("/", &e);
        if s == "initialized" {
            break;
        }
        seen.push(s);
    }
    assert!(seen.contains(&format!("added {top}=")), "{seen:?}");
    assert!(
        !seen.iter().any(|s| s.contains(&format!("{top}/"))),
        "{seen:?}"
    );
    assert!(names(cache.current_children("/")).contains(&top[1..].to_owned()));
    assert!(names(cache.current_children(&top)).is_empty());
    assert!(cache.current_data(&format!("{top}/one")).is_none());
    cache.close();

    let cache = TreeCache::new(&c, "/").unwrap();
    cache.start().unwrap();
    wait_until(
        WAIT,
        || cache.current_data(&format!("{top}/one")).is_some(),
        || "the whole tree from the root".into(),
    );
    assert_eq!(names(cache.current_children(&top)), ["one"]);
    assert_eq!(
        cache.current_data(&format!("{top}/one")).unwrap().data,
        b"hey there"
    );
    cache.close();

    // In a namespace, at its root and below.
    create(&c, &format!("{top}/outer/foo"), "");
    create(&c, &format!("{top}/outer/test/one"), "hey there");
    let ns = start_connected(
        Client::builder()
            .connect_string(shared_server().connect_string())
            .session_timeout(Duration::from_secs(10))
            .namespace(format!("{}/outer", &top[1..])),
    );
    let cache = TreeCache::new(&ns, "/test").unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&["added ~=", "added ~/one=hey there", "initialized"]);
    assert_eq!(names(cache.current_children("/test")), ["one"]);
    let cache = TreeCache::new(&ns, "/").unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&[
        "added ~=",
        "added /foo=",
        "added /test=",
        "added /test/one=hey there",
        "initialized",
    ]);
    events.expect_quiet();
    assert_eq!(names(cache.current_children("/")), ["foo", "test"]);
    assert!(names(cache.current_children("/foo")).is_empty());
}

/// Curator's TestTreeCache.testUpdateWhenNotCachingData.
#[test]
fn tree_without_data_keeps_stats_only() {
    let c = client();
    let root = unique("/tree/no-data");
    create(&c, &root, "");
    let cache = TreeCache::builder(&c, &root)
        .cache_data(false)
        .build()
        .unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&["added ~=", "initialized"]);
    create(&c, &format!("{root}/foo"), "first");
    events.expect(&["added ~/foo=first"]);
    c.set_data(&format!("{root}/foo"), b"something new", None)
        .unwrap();
    events.expect(&["updated ~/foo=>something new"]);
    events.expect_quiet();
    let foo = cache.current_data(&format!("{root}/foo")).unwrap();
    assert!(foo.data.is_empty());
    assert_eq!(foo.stat.version, 1);
}

/// Curator's TestTreeCache.testDeleteThenCreate and
/// testDeleteThenCreateRoot.
#[test]
fn tree_tells_nodes_deleted_then_created() {
    let c = client();
    let root = unique("/tree/delete-create");
    create(&c, &format!("{root}/foo"), "one");
    let cache = TreeCache::new(&c, &root).unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&["added ~=", "added ~/foo=one", "initialized"]);
    let foo = format!("{root}/foo");
    c.delete().for_path(&foo).unwrap();
    events.expect(&["removed ~/foo"]);
    create(&c, &foo, "two");
    events.expect(&["added ~/foo=two"]);
    c.delete().for_path(&foo).unwrap();
    events.expect(&["removed ~/foo"]);
    create(&c, &foo, "two");
    events.expect(&["added ~/foo=two"]);
    events.expect_quiet();

    // The root itself (Curator's testDeleteThenCreateRoot).
    let root2 = unique("/tree/delete-create-root");
    create(&c, &root2, "one");
    let cache = TreeCache::new(&c, &root2).unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&["added ~=one", "initialized"]);
    for _ in 0..2 {
        c.delete().for_path(&root2).unwrap();
        events.expect(&["removed ~"]);
        create(&c, &root2, "two");
        events.expect(&["added ~=two"]);
    }
    events.expect_quiet();
}

/// Curator's TestTreeCache.testKilledSession, with the session expired on
/// the server: the ephemeral node is gone when the cache reads again on
/// the new session, and `Initialized` is told again after its removal.
#[test]
fn tree_after_a_session_expiry_tells_the_removed_ephemeral_then_initialized() {
    let c = client();
    let ctx = Ctx::new(shared_server(), &c);
    let root = unique("/tree/killed");
    create(&c, &root, "");
    let cache = TreeCache::new(&c, &root).unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&["added ~=", "initialized"]);
    create(&c, &format!("{root}/foo"), "foo");
    events.expect(&["added ~/foo=foo"]);
    c.create()
        .mode(CreateMode::Ephemeral)
        .for_path(&format!("{root}/me"), b"data")
        .unwrap();
    events.expect(&["added ~/me=data"]);
    let states = c.listen();
    c.expire_session_for_testing().unwrap();
    ctx.expect(&states, ConnectionState::Lost, WAIT);
    events.expect(&["removed ~/me", "initialized"]);
    events.expect_quiet();
    assert_eq!(names(cache.current_children(&root)), ["foo"]);
}

/// Curator's TestTreeCache.testBasics.
#[test]
fn tree_basics() {
    let c = client();
    let root = unique("/tree/basics");
    create(&c, &root, "");
    let cache = TreeCache::new(&c, &root).unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&["added ~=", "initialized"]);
    assert!(names(cache.current_children(&root)).is_empty());
    assert!(cache.current_children(&root[..root.len() - 1]).is_none());
    assert!(cache.current_children(&format!("{root}ing")).is_none());

    let one = format!("{root}/one");
    create(&c, &one, "hey there");
    events.expect(&["added ~/one=hey there"]);
    assert_eq!(names(cache.current_children(&root)), ["one"]);
    assert!(names(cache.current_children(&one)).is_empty());
    assert!(cache.current_children(&format!("{root}/o")).is_none());
    assert!(cache.current_children(&format!("{root}/onely")).is_none());

    c.set_data(&one, b"sup!", None).unwrap();
    events.expect(&["updated ~/one=hey there>sup!"]);
    assert_eq!(cache.current_data(&one).unwrap().data, b"sup!");
    c.delete().for_path(&one).unwrap();
    events.expect(&["removed ~/one"]);
    assert!(names(cache.current_children(&root)).is_empty());
    events.expect_quiet();
}

/// Curator's TestTreeCache.testBasicsWithNoZkWatches: read once, changes
/// not followed, no watch set.
#[test]
fn tree_without_watches_reads_once() {
    let c = client();
    let root = unique("/tree/no-watches");
    create(&c, &format!("{root}/one"), "hey there");
    let watches_before = c.pending_watches();
    let cache = TreeCache::builder(&c, &root)
        .disable_zk_watches(true)
        .build()
        .unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&["added ~=", "added ~/one=hey there", "initialized"]);
    assert_eq!(names(cache.current_children(&root)), ["one"]);
    assert!(names(cache.current_children(&format!("{root}/one"))).is_empty());
    assert_eq!(c.pending_watches(), watches_before);
    create(&c, &format!("{root}/two"), "");
    events.expect_quiet();
}

/// Curator's TestTreeCache.testBasicsOnTwoCaches; a dropped receiver is
/// left out, the others go on.
#[test]
fn tree_two_caches_on_one_client() {
    let c = client();
    let root = unique("/tree/two");
    create(&c, &root, "");
    let (one, two) = (
        TreeCache::new(&c, &root).unwrap(),
        TreeCache::new(&c, &root).unwrap(),
    );
    let (e1, e2) = (tevents(&one), tevents(&two));
    drop(one.listen());
    one.start().unwrap();
    two.start().unwrap();
    for e in [&e1, &e2] {
        e.expect(&["added ~=", "initialized"]);
    }
    let path = format!("{root}/one");
    create(&c, &path, "hey there");
    for e in [&e1, &e2] {
        e.expect(&["added ~/one=hey there"]);
    }
    c.set_data(&path, b"sup!", None).unwrap();
    for e in [&e1, &e2] {
        e.expect(&["updated ~/one=hey there>sup!"]);
    }
    c.delete().for_path(&path).unwrap();
    for e in [&e1, &e2] {
        e.expect(&["removed ~/one"]);
    }
    assert!(one.current_data(&path).is_none() && two.current_data(&path).is_none());
    e1.expect_quiet();
    e2.expect_quiet();
}

/// Curator's TestTreeCacheIteratorAndSize (all four tests).
#[test]
fn tree_entries_and_size() {
    let c = client();
    // testEmptyTree
    let empty = unique("/tree/iter-empty");
    let cache = TreeCache::new(&c, &empty).unwrap();
    let events = tevents(&cache);
    cache.start().unwrap();
    events.expect(&["initialized"]);
    assert!(cache.entries().is_empty() && cache.size() == 0);

    // testBasic
    let base = unique("/tree/iter");
    let cache = TreeCache::new(&c, &base).unwrap();
    cache.start().unwrap();
    let nodes = [
        "", "/3", "/3/0", "/3/0/0", "/3/0/1", "/3/1", "/3/1/0", "/3/1/1", "/3/2", "/3/2/0",
        "/3/2/1", "/3/2/3", "/3/3", "/3/3/1", "/3/3/3",
    ];
    for n in nodes {
        create(&c, &format!("{base}{n}"), &format!("{base}{n}"));
    }
    wait_until(
        WAIT,
        || cache.size() == nodes.len(),
        || format!("{:?}", cache.entries()),
    );
    for node in cache.entries() {
        assert_eq!(text(&node.data), node.path);
    }

    // testIteratorWithRandomGraph (a fixed pseudo-random graph)
    let graph = unique("/tree/iter-graph");
    let cache = TreeCache::new(&c, &graph).unwrap();
    cache.start().unwrap();
    create(&c, &graph, "0");
    let mut want = std::collections::BTreeMap::from([(graph.clone(), "0".to_owned())]);
    let mut rng = Rng(7);
    for _ in 0..60 {
        let mut path = graph.clone();
        for _ in 0..1 + rng.below(3) {
            path = format!("{path}/{}", rng.below(4));
            let value = rng.next().to_string();
            if c.exists(&path).unwrap().is_some() {
                c.set_data(&path, value.as_bytes(), None).unwrap();
            } else {
                c.create().for_path(&path, value.as_bytes()).unwrap();
            }
            want.insert(path.clone(), value);
        }
    }
    let want: Vec<(String, String)> = want.into_iter().collect();
    wait_until(
        WAIT,
        || {
            let got: Vec<(String, String)> = cache
                .entries()
                .into_iter()
                .map(|n| (n.path, text(&n.data)))
                .collect();
            got == want
        },
        || format!("{} of {} nodes", cache.size(), want.len()),
    );

    // testWithDeletedNodes
    let foo = unique("/tree/iter-deleted");
    let cache = TreeCache::new(&c, &foo).unwrap();
    cache.start().unwrap();
    for n in [
        "", "/a1", "/a2", "/a2/a2.1", "/a2/a2.2", "/a3", "/a3/a3.1", "/a3/a3.2",
    ] {
        create(&c, &format!("{foo}{n}"), "");
    }
    c.delete().for_path(&format!("{foo}/a2/a2.2")).unwrap();
    c.delete().for_path(&format!("{foo}/a3/a3.1")).unwrap();
    let want: BTreeSet<String> = ["", "/a1", "/a2", "/a2/a2.1", "/a3", "/a3/a3.2"]
        .iter()
        .map(|n| format!("{foo}{n}"))
        .collect();
    wait_until(
        WAIT,
        || {
            cache
                .entries()
                .into_iter()
                .map(|n| n.path)
                .collect::<BTreeSet<_>>()
                == want
        },
        || format!("{:?}", cache.entries()),
    );
    assert_eq!(cache.size(), 6);
}

/// A small deterministic generator (xorshift), for the random trees.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Curator's TestTreeCacheRandomTree.testGiantRandomDeepTree and
/// testGiantRandomDeepTreeWithDepth: a random tree built, changed and
/// pruned step by step; after each step the cache told exactly that
/// change (if within its depth) and holds exactly the tree.
#[test]
fn tree_follows_a_random_tree() {
    use std::collections::BTreeMap;
    const STEPS: usize = 250;
    const DEPTH: usize = 4;
    let c = client();
    for with_depth in [false, true] {
        let top = unique("/tree/random");
        create(&c, &top, "");
        let ns = start_connected(
            Client::builder()
                .connect_string(shared_server().connect_string())
                .session_timeout(Duration::from_secs(10))
                .namespace(top[1..].to_owned()),
        );
        let builder = TreeCache::builder(&ns, "/");
        let cache = match with_depth {
            true => builder.max_depth(DEPTH),
            false => builder,
        }
        .build()
        .unwrap();
        let events = tevents(&cache);
        cache.start().unwrap();
        events.expect(&["added ~=", "initialized"]);
        // The model: path -> data.
        let mut tree: BTreeMap<String, String> = BTreeMap::from([("/".to_owned(), String::new())]);
        let mut rng = Rng(0x5eed + with_depth as u64);
        let visible =
            |path: &str| !with_depth || path.split('/').filter(|s| !s.is_empty()).count() <= DEPTH;
        for step in 0..STEPS {
            // Dive from the root to a random node.
            let mut node = "/".to_owned();
            loop {
                let children: Vec<String> = tree
                    .keys()
                    .filter(|p| latchkey_framework::paths::parent(p) == Some(node.as_str()))
                    .cloned()
                    .collect();
                if children.is_empty() || rng.below(10) == 0 {
                    break;
                }
                node = children[rng.below(children.len() as u64) as usize].clone();
            }
            let leaf = !tree
                .keys()
                .any(|p| latchkey_framework::paths::parent(p) == Some(node.as_str()));
            match rng.below(3) {
                0 if node != "/" && leaf => {
                    ns.delete().for_path(&node).unwrap();
                    tree.remove(&node);
                    if visible(&node) {
                        events.expect(&[&format!("removed {node}")]);
                    }
                }
                1 => {
                    let data = format!("{:x}", rng.next());
                    let old = tree.insert(node.clone(), data.clone()).unwrap();
                    ns.set_data(&node, data.as_bytes(), None).unwrap();
                    if visible(&node) {
                        let shown = if node == "/" {
                            "~".into()
                        } else {
                            node.clone()
                        };
                        events.expect(&[&format!("updated {shown}={old}>{data}")]);
                    }
                }
                _ => {
                    let child =
                        latchkey_framework::paths::make_path(&node, &format!("{:x}", rng.next()));
                    let data = format!("{:x}", rng.next());
                    ns.create().for_path(&child, data.as_bytes()).unwrap();
                    tree.insert(child.clone(), data.clone());
                    if visible(&child) {
                        events.expect(&[&format!("added {child}={data}")]);
                    }
                }
            }
            let held: BTreeMap<String, String> = cache
                .entries()
                .into_iter()
                .map(|n| (n.path, text(&n.data)))
                .collect();
            let want: BTreeMap<String, String> = tree
                .iter()
                .filter(|(p, _)| visible(p))
                .map(|(p, d)| (p.clone(), d.clone()))
                .collect();
            assert_eq!(held, want, "step {step} (with depth: {with_depth})");
        }
        events.expect_quiet();
    }
}

// ---------------------------------------------------------------- both

/// Curator's TestPathChildrenCache and TestTreeCache
/// .testDeleteNodeAfterCloseDoesntCallExecutor: a closed cache tells
/// nothing, reads nothing more and keeps its copy; a second start, or a
/// start after close, is refused with an error naming the cache.
#[test]
fn classic_caches_closed_tell_nothing_and_refuse_a_second_start() {
    let c = client();
    let root = unique("/classic/closed");
    create(&c, &format!("{root}/one"), "hey there");
    let pcc = PathChildrenCache::new(&c, &root, true).unwrap();
    let tree = TreeCache::new(&c, &root).unwrap();
    let (pe, te) = (pevents(&pcc), tevents(&tree));
    pcc.start().unwrap();
    tree.start().unwrap();
    pe.expect(&["added ~/one=hey there"]);
    te.expect(&["added ~=", "added ~/one=hey there", "initialized"]);
    let err = pcc.start().unwrap_err().to_string();
    assert!(
        err.contains("path children cache") && err.contains(&root),
        "{err}"
    );
    let err = tree.start().unwrap_err().to_string();
    assert!(err.contains("tree cache") && err.contains(&root), "{err}");

    pcc.close();
    tree.close();
    let sent = requests_sent_around(
        &c,
        || c.delete().for_path(&format!("{root}/one")).unwrap(),
        QUIET,
    );
    assert_eq!(sent, 1, "the closed caches read nothing");
    assert!(pe.rx.recv_timeout(QUIET).is_err());
    assert!(te.rx.recv_timeout(QUIET).is_err());
    assert!(pcc.current_data_for(&format!("{root}/one")).is_some());
    for err in [pcc.start().unwrap_err(), tree.start().unwrap_err()] {
        assert!(err.to_string().contains("is closed"), "{err}");
    }
    assert!(pcc.clear_and_refresh().is_err());
}

/// Bad arguments are refused with an error naming the path; depth 0 and
/// `usize::MAX` are fine; a huge node is held like any other.
#[test]
fn classic_caches_refuse_bad_paths_and_take_extreme_arguments() {
    let c = client();
    for bad in ["", "no-slash", "/trailing/", "/a//b", "/a/\u{0}"] {
        assert!(PathChildrenCache::new(&c, bad, true).is_err(), "{bad:?}");
        assert!(TreeCache::new(&c, bad).is_err(), "{bad:?}");
    }
    let root = unique("/classic/extreme");
    let big = vec![b'x'; 512 * 1024];
    c.create()
        .creating_parents_if_needed()
        .for_path(&format!("{root}/big"), &big)
        .unwrap();
    let tree = TreeCache::builder(&c, &root)
        .max_depth(usize::MAX)
        .build()
        .unwrap();
    let events = tevents(&tree);
    tree.start().unwrap();
    let _ = events.next("added ~");
    let added = events.next("added ~/big");
    assert!(added.starts_with("added ~/big="), "{}", &added[..40]);
    assert_eq!(
        tree.current_data(&format!("{root}/big"))
            .unwrap()
            .data
            .len(),
        big.len()
    );
}

/// Curator's TestPathChildrenCache.testWithBadConnect and
/// TestTreeCache.testServerNotStartedYet, then a server restart: caches
/// started while the server is down read once it is up; through a stop
/// and restart they tell suspended and reconnected, and follow changes
/// made after it.
#[test]
fn classic_caches_start_before_the_server_and_follow_it_through_a_restart() {
    let mut server = TestingServer::start().expect("start ZooKeeper");
    let writer = connect(&server.connect_string(), Duration::from_secs(20));
    let root = unique("/classic/restart");
    create(&writer, &format!("{root}/one"), "1");
    writer.close();
    server.stop().unwrap();

    let c = Client::builder()
        .connect_string(server.connect_string())
        .session_timeout(Duration::from_secs(6))
        .connection_timeout(Duration::from_secs(2))
        .retry_policy(latchkey_framework::RetryNTimes::new(
            3,
            Duration::from_millis(100),
        ))
        .build()
        .unwrap();
    c.start().unwrap();
    let ctx = Ctx::new(&server, &c);
    let pcc = PathChildrenCache::new(&c, &root, true).unwrap();
    let tree = TreeCache::new(&c, &root).unwrap();
    let (prx, trx) = (pcc.listen(), tree.listen());
    let t0 = Instant::now();
    pcc.start().unwrap();
    tree.start().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2), "start does not wait");
    assert!(
        trx.recv_timeout(QUIET).is_err(),
        "nothing before the server"
    );

    server.restart().unwrap();
    let collect = |rx: &Receiver<P>, until: &str| {
        let mut seen = Vec::new();
        while !seen.iter().any(|s| s == until) {
            match rx.recv_timeout(Duration::from_secs(20)) {
                Ok(e) => seen.push(pshort(&root, &e)),
                Err(_) => panic!("no {until}: {seen:?}\n{}", ctx.dump()),
            }
        }
        seen
    };
    let seen = collect(&prx, "added ~/one=1");
    assert!(
        seen.iter()
            .all(|s| is_connection(s) || s == "added ~/one=1"),
        "{seen:?}"
    );
    let tevents = Events {
        rx: trx,
        short: Box::new({
            let root = root.clone();
            move |e| tshort(&root, e)
        }),
        skip_connection: true,
    };
    tevents.expect(&["added ~=", "added ~/one=1", "initialized"]);
    create(&c, &format!("{root}/baz"), "123");
    assert!(collect(&prx, "added ~/baz=123").len() == 1);
    tevents.expect(&["added ~/baz=123"]);

    // A stop and restart within the session.
    server.stop().unwrap();
    let seen = collect(&prx, "suspended");
    assert_eq!(seen, ["suspended"]);
    server.restart().unwrap();
    let seen = collect(&prx, "reconnected");
    assert_eq!(seen, ["reconnected"]);
    let writer = connect(&server.connect_string(), Duration::from_secs(20));
    writer
        .set_data(&format!("{root}/one"), b"after", None)
        .unwrap();
    assert_eq!(
        collect(&prx, "updated ~/one=after"),
        ["updated ~/one=after"]
    );
    tevents.expect(&["updated ~/one=1>after"]);
    tevents.expect_quiet();
    let quiet = Events {
        rx: prx,
        short: Box::new(move |e| pshort(&root, e)),
        skip_connection: true,
    };
    quiet.expect_quiet();
}

/// Changes made while the caches' client is cut off are told once it
/// reconnects, exactly: a deletion (never lost), a node deleted and
/// created again (removed, then added), a change and a creation; nothing
/// else. However often it reconnects, each node keeps one watch of each
/// kind.
#[test]
fn classic_caches_tell_exactly_what_changed_while_cut_off() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = connect(&proxy.connect_string(), Duration::from_secs(20));
    let writer = client();
    let ctx = Ctx::new(server, &c);
    let root = unique("/classic/cut-off");
    for n in ["a", "b", "c", "keep"] {
        create(&writer, &format!("{root}/{n}"), "0");
    }
    create(&writer, &format!("{root}/b/sub"), "0");
    let pcc = PathChildrenCache::new(&c, &root, true).unwrap();
    let tree = TreeCache::new(&c, &root).unwrap();
    let (pe, te) = (pevents(&pcc), tevents(&tree));
    pcc.start_with(Mode::BuildInitialCache).unwrap();
    tree.start().unwrap();
    te.expect(&[
        "added ~=",
        "added ~/a=0",
        "added ~/b=0",
        "added ~/c=0",
        "added ~/keep=0",
        "added ~/b/sub=0",
        "initialized",
    ]);
    // PCC: a child watch and 4 data watches; tree: a data and a child
    // watch on each of its 6 nodes.
    let watches = 1 + 4 + 2 * 6;
    wait_until(
        WAIT,
        || c.pending_watches() == watches,
        || format!("{} watches, want {watches}", c.pending_watches()),
    );

    let states = c.listen();
    proxy.pause();
    writer
        .delete()
        .deleting_children_if_needed()
        .for_path(&format!("{root}/a"))
        .unwrap();
    writer
        .delete()
        .deleting_children_if_needed()
        .for_path(&format!("{root}/b"))
        .unwrap();
    create(&writer, &format!("{root}/b"), "again");
    writer.set_data(&format!("{root}/c"), b"1", None).unwrap();
    create(&writer, &format!("{root}/d"), "new");
    proxy.cut();
    ctx.expect(&states, ConnectionState::Suspended, WAIT);
    proxy.resume();
    ctx.expect(
        &states,
        ConnectionState::Reconnected,
        Duration::from_secs(20),
    );

    let mut told = Vec::new();
    for _ in 0..5 {
        told.push(pe.next("a change"));
    }
    assert_eq!(
        told.iter().filter(|s| s.as_str() == "removed ~/a").count(),
        1,
        "{told:?}"
    );
    let b: Vec<&String> = told.iter().filter(|s| s.contains("~/b")).collect();
    assert_eq!(b, ["removed ~/b", "added ~/b=again"], "{told:?}");
    assert!(told.contains(&"updated ~/c=1".to_owned()), "{told:?}");
    assert!(told.contains(&"added ~/d=new".to_owned()), "{told:?}");
    pe.expect_quiet();

    let mut told = Vec::new();
    for _ in 0..6 {
        told.push(te.next("a change"));
    }
    let b: Vec<&String> = told.iter().filter(|s| s.contains("~/b")).collect();
    assert_eq!(
        b,
        ["removed ~/b/sub", "removed ~/b", "added ~/b=again"],
        "{told:?}"
    );
    for want in ["removed ~/a", "updated ~/c=0>1", "added ~/d=new"] {
        assert!(told.iter().any(|s| s == want), "{want} in {told:?}");
    }
    te.expect_quiet();

    // More reconnections: the same watches, no events.
    let watches = 1 + 4 + 2 * 5;
    for _ in 0..3 {
        proxy.cut();
        ctx.expect(
            &states,
            ConnectionState::Reconnected,
            Duration::from_secs(20),
        );
    }
    wait_until(
        WAIT,
        || c.pending_watches() == watches,
        || format!("{} watches, want {watches}", c.pending_watches()),
    );
    pe.expect_quiet();
    te.expect_quiet();
}

/// A close while the cache's read hangs (its connection paused) returns
/// at once.
#[test]
fn classic_caches_close_at_once_while_cut_off() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = connect(&proxy.connect_string(), Duration::from_secs(20));
    let root = unique("/classic/close-cut");
    create(&c, &format!("{root}/one"), "");
    proxy.pause();
    let pcc = PathChildrenCache::new(&c, &root, true).unwrap();
    let tree = TreeCache::new(&c, &root).unwrap();
    pcc.start().unwrap();
    tree.start().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    call_within("close", Duration::from_secs(3), move || {
        pcc.close();
        tree.close();
    });
    proxy.resume();
}

/// A Curator (Java) peer makes the changes; the Rust caches follow them,
/// including the removal of the peer's ephemeral node when it quits.
#[test]
fn classic_caches_follow_changes_curator_makes() {
    if let Err(why) = peer_available(PeerKind::Curator) {
        eprintln!("SKIPPED: Curator peer unavailable: {why}");
        return;
    }
    let mut java = Peer::start(PeerKind::Curator, &shared_server().connect_string())
        .expect("start the Curator peer");
    let mut ok = |cmd: String| {
        java.command_ok(&cmd, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    };
    let c = client();
    let root = unique("/classic/curator");
    let pcc = PathChildrenCache::new(&c, &root, true).unwrap();
    let tree = TreeCache::new(&c, &root).unwrap();
    let (pe, te) = (pevents(&pcc), tevents(&tree));
    pcc.start_with(Mode::PostInitializedEvent).unwrap();
    pe.expect(&["initialized "]);
    tree.start().unwrap();
    te.expect(&["added ~=", "initialized"]);

    ok(format!("cachenode fill {root} 3"));
    pe.expect(&["added ~/0=0", "added ~/1=1", "added ~/2=2"]);
    te.expect(&["added ~/0=0", "added ~/1=1", "added ~/2=2"]);
    ok(format!("cachenode create {root}/1/deep java"));
    te.expect(&["added ~/1/deep=java"]);
    ok(format!("cachenode set {root}/0 changed"));
    pe.expect(&["updated ~/0=changed"]);
    te.expect(&["updated ~/0=0>changed"]);
    ok(format!("cachenode delete {root}/1"));
    pe.expect(&["removed ~/1"]);
    te.expect(&["removed ~/1/deep", "removed ~/1"]);
    ok(format!("cachenode ephemeral {root}/java-member me"));
    pe.expect(&["added ~/java-member=me"]);
    te.expect(&["added ~/java-member=me"]);
    java.quit(Duration::from_secs(10)).expect("the peer quits");
    pe.expect(&["removed ~/java-member"]);
    te.expect(&["removed ~/java-member"]);
    pe.expect_quiet();
    te.expect_quiet();
    let held: Vec<String> = pcc.current_data().into_iter().map(|n| n.path).collect();
    assert_eq!(held, [format!("{root}/0"), format!("{root}/2")]);
    assert_eq!(tree.size(), 3);
}

/// Curator's TestPathChildrenCacheEventOrdering and
/// TestTreeCacheEventOrdering (`testEventOrdering`): writers create,
/// change and delete ten children at random, concurrently; once they stop
/// and the caches hold what the server has, replaying each cache's events
/// gives exactly its content: per child, additions and removals
/// alternate, and the last event holds the data held.
#[test]
fn classic_caches_events_replay_to_their_content() {
    use std::collections::BTreeMap;
    const WRITERS: u64 = 4;
    const CHANGES: usize = 150;
    let c = client();
    let root = unique("/classic/ordering");
    create(&c, &root, "");
    let pcc = PathChildrenCache::new(&c, &root, true).unwrap();
    let tree = TreeCache::new(&c, &root).unwrap();
    let (prx, trx) = (pcc.listen(), tree.listen());
    pcc.start().unwrap();
    tree.start().unwrap();
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let root = root.clone();
            s.spawn(move || {
                let c = client();
                let mut rng = Rng(w * 7919 + 1);
                for i in 0..CHANGES {
                    let node = format!("{root}/{}", rng.below(10));
                    let _ = match rng.below(3) {
                        0 => c.create().for_path(&node, b"").map(|_| ()),
                        1 => c
                            .set_data(&node, format!("{w}-{i}").as_bytes(), None)
                            .map(|_| ()),
                        _ => c.delete().for_path(&node),
                    };
                }
            });
        }
    });
    let server: BTreeMap<String, Vec<u8>> = c
        .get_children(&root)
        .unwrap()
        .into_iter()
        .map(|n| {
            let path = format!("{root}/{n}");
            let data = c.get_data(&path).unwrap().0;
            (path, data)
        })
        .collect();
    wait_until(
        WAIT,
        || {
            let held: BTreeMap<String, Vec<u8>> = pcc
                .current_data()
                .into_iter()
                .map(|n| (n.path, n.data))
                .collect();
            held == server
        },
        || format!("the children cache holds {:?}", pcc.current_data()),
    );
    wait_until(
        WAIT,
        || {
            let held: BTreeMap<String, Vec<u8>> = tree
                .entries()
                .into_iter()
                .filter(|n| n.path != root)
                .map(|n| (n.path, n.data))
                .collect();
            held == server
        },
        || format!("the tree cache holds {:?}", tree.entries()),
    );
    // Replay what each told (a cache tells a change just after it holds
    // it: read until the replay catches up, or the deadline).
    let deadline = Instant::now() + WAIT;
    let mut replayed: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    while replayed != server {
        let Ok(e) = prx.recv_deadline(deadline) else {
            break;
        };
        match e {
            P::ChildAdded(n) => assert!(
                replayed.insert(n.path.clone(), n.data).is_none(),
                "added twice: {}",
                n.path
            ),
            P::ChildUpdated(n) => assert!(
                replayed.insert(n.path.clone(), n.data).is_some(),
                "updated unknown: {}",
                n.path
            ),
            P::ChildRemoved(n) => assert!(
                replayed.remove(&n.path).is_some(),
                "removed unknown: {}",
                n.path
            ),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(replayed, server, "the children cache's events");
    let mut replayed: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    while replayed.len() != server.len() + 1
        || replayed
            .iter()
            .any(|(p, d)| p != &root && server.get(p) != Some(d))
    {
        let Ok(e) = trx.recv_deadline(deadline) else {
            break;
        };
        match e {
            T::NodeAdded(n) => assert!(
                replayed.insert(n.path.clone(), n.data).is_none(),
                "added twice: {}",
                n.path
            ),
            T::NodeUpdated { old, new } => assert_eq!(
                replayed.insert(new.path.clone(), new.data),
                Some(old.data),
                "{}",
                new.path
            ),
            T::NodeRemoved(n) => assert!(
                replayed.remove(&n.path).is_some(),
                "removed unknown: {}",
                n.path
            ),
            T::Initialized => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    replayed.remove(&root);
    assert_eq!(replayed, server, "the tree cache's events");
}

/// A `CuratorCache` of `/` (here the root of a namespace) does not take
/// `/` for one of its own children: listing `/` never tells `/` deleted.
/// Found while porting `TestTreeCacheRandomTree`, whose tree cache of `/`
/// removed its root the same way.
#[test]
fn a_curator_cache_of_the_root_keeps_its_root() {
    use latchkey_recipes::{CacheEvent, CuratorCache};
    let top = unique("/classic/curator-cache-root");
    create(&client(), &format!("{top}/a"), "1");
    let ns = start_connected(
        Client::builder()
            .connect_string(shared_server().connect_string())
            .session_timeout(Duration::from_secs(10))
            .namespace(top[1..].to_owned()),
    );
    let cache = CuratorCache::new(&ns, "/").unwrap();
    let rx = cache.listen();
    cache.start().unwrap();
    create(&ns, "/b", "2");
    wait_until(
        WAIT,
        || cache.get("/b").is_some(),
        || format!("{:?}", cache.entries()),
    );
    let told: Vec<String> = rx
        .try_iter()
        .map(|e| match e {
            CacheEvent::Created(n) => format!("+{}", n.path),
            CacheEvent::Changed { new, .. } => format!("~{}", new.path),
            CacheEvent::Deleted(n) => format!("-{}", n.path),
            CacheEvent::Initialized => "init".into(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(told, ["+/", "+/a", "init", "+/b"]);
    assert!(cache.get("/").is_some());
}

/// Changes made while the caches' session expires (their client cut off
/// for longer than the session timeout, so their watches are gone) are
/// told once it has a new session: the caches read everything again,
/// tell only what changed, and the tree cache tells `Initialized` again
/// after that.
#[test]
fn classic_caches_tell_what_changed_while_their_session_expired() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = connect(&proxy.connect_string(), Duration::from_millis(1500));
    let writer = client();
    let ctx = Ctx::new(server, &c);
    let root = unique("/classic/expired");
    for n in ["a", "b", "c"] {
        create(&writer, &format!("{root}/{n}"), "0");
    }
    let pcc = PathChildrenCache::new(&c, &root, true).unwrap();
    let tree = TreeCache::new(&c, &root).unwrap();
    let (pe, te) = (pevents(&pcc), tevents(&tree));
    pcc.start_with(Mode::BuildInitialCache).unwrap();
    tree.start().unwrap();
    te.expect(&[
        "added ~=",
        "added ~/a=0",
        "added ~/b=0",
        "added ~/c=0",
        "initialized",
    ]);

    let states = c.listen();
    let old_session = c.session_id();
    proxy.pause();
    writer.delete().for_path(&format!("{root}/a")).unwrap();
    writer.set_data(&format!("{root}/c"), b"1", None).unwrap();
    create(&writer, &format!("{root}/d"), "new");
    ctx.expect(&states, ConnectionState::Lost, WAIT);
    proxy.resume();
    wait_until(
        WAIT,
        || c.session_id() != old_session && c.session_id() != 0,
        || ctx.dump(),
    );
    pe.expect_unordered(&["removed ~/a", "updated ~/c=1", "added ~/d=new"]);
    pe.expect_quiet();
    let mut told: Vec<String> = (0..3).map(|_| te.next("a change")).collect();
    told.sort();
    assert_eq!(told, ["added ~/d=new", "removed ~/a", "updated ~/c=0>1"]);
    te.expect(&["initialized"]);
    te.expect_quiet();
    // Watched again on the new session: later changes are told.
    writer.set_data(&format!("{root}/b"), b"2", None).unwrap();
    pe.expect(&["updated ~/b=2"]);
    te.expect(&["updated ~/b=0>2"]);
}

/// Issue 38, item 4 (Curator's caches call `removeWatchers()` on close):
/// each open and close of a `PathChildrenCache`, `TreeCache` and
/// `NodeCache` over 40 children leaves no watch callback registered on
/// the client, round after round.
#[test]
fn closed_classic_caches_leave_no_watch_registered() {
    const CHILDREN: usize = 40;
    let c = client();
    let root = unique("/classic/leak");
    create(&c, &root, "");
    for i in 0..CHILDREN {
        create(&c, &format!("{root}/n{i}"), "x");
    }
    let before = c.pending_watches();
    let set = |what: &str, at_least: usize| {
        wait_until(
            WAIT,
            || c.pending_watches() >= before + at_least,
            || {
                format!(
                    "{what}: {} watches set, want {at_least}",
                    c.pending_watches() - before
                )
            },
        );
    };
    let left = |what: &str, round: usize| {
        assert_eq!(
            c.pending_watches(),
            before,
            "round {round}: {what} left watches registered after close"
        );
    };
    for round in 0..3 {
        let pcc = PathChildrenCache::new(&c, &root, true).unwrap();
        pcc.start_with(Mode::BuildInitialCache).unwrap();
        set("PathChildrenCache", CHILDREN + 1);
        pcc.close();
        left("PathChildrenCache", round);

        let tree = TreeCache::new(&c, &root).unwrap();
        tree.start().unwrap();
        set("TreeCache", 2 * CHILDREN + 2);
        tree.close();
        left("TreeCache", round);

        let node = latchkey_recipes::NodeCache::new(&c, &root).unwrap();
        node.start().unwrap();
        set("NodeCache", 1);
        node.close();
        left("NodeCache", round);
    }
}

//! Curator's `CuratorCache`: a local copy of a node and its whole subtree,
//! with events for what is created, changed and deleted, kept current by
//! one persistent recursive watch (ZooKeeper 3.6+), or by classic watches
//! on every node (Curator's `TreeCache` way) where the server has no
//! `addWatch`; read again after every reconnection and rebuilt (with
//! events for what changed meanwhile) on a new session.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use latchkey_framework::{compression, paths};
use latchkey_framework::{AddWatchMode, Client, ErrorCode, EventType, Result, WatchedEvent};
use parking_lot::Mutex;

use crate::armed::{read_watched, waking, WatchArms};
use crate::cache::node_cache::ChildData;
use crate::keeper::{Keeper, Kept};
use crate::locks::lock_internals::validate_any_path;

/// A change a [`CuratorCache`] saw (Curator's `CuratorCacheListener`
/// events).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CacheEvent {
    /// A node appeared.
    Created(ChildData),
    /// A node's data changed: before and after.
    Changed {
        /// The node as it was.
        old: ChildData,
        /// The node as it is.
        new: ChildData,
    },
    /// A node went (as last seen).
    Deleted(ChildData),
    /// The first read of the subtree is done (Curator's
    /// `CuratorCacheListener.initialized()`): told once, after the
    /// `Created` events of the nodes there were when the cache started
    /// and before any event of a later change. A channel from
    /// [`CuratorCache::listen`] called after that never gets it.
    Initialized,
}

/// How a [`CuratorCache`] is made (Curator's `CuratorCache.builder` and
/// its `Options`): from [`CuratorCache::builder`], then
/// [`build`](Self::build). By default the cache holds the whole subtree
/// with the nodes' data, and keeps its copy when it closes.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::CuratorCache;
///
/// // The root alone, its stat but not its data; emptied on close.
/// let cache = CuratorCache::builder(client, "/config")
///     .single_node()
///     .data_not_cached()
///     .clear_on_close()
///     .build()?;
/// cache.start()?;
/// if let Some(node) = cache.get("/config") {
///     assert!(node.data.is_empty());
///     println!("version {}", node.stat.version);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build`"]
pub struct CuratorCacheBuilder {
    client: Client,
    root: String,
    single: bool,
    cache_data: bool,
    clear_on_close: bool,
    compressed: bool,
}

impl CuratorCacheBuilder {
    /// Reads the nodes' data as gzip and keeps it gunzipped (Curator's
    /// `Options.COMPRESSED_DATA`, for data written with
    /// `create().compressed()` by Curator or latchkey). A node whose data
    /// is not gzip is kept as it is, and a warning names it.
    pub fn compressed_data(mut self) -> Self {
        self.compressed = true;
        self
    }

    /// Caches the root node alone, not its children (Curator's
    /// `Options.SINGLE_NODE_CACHE`): it is watched with a persistent,
    /// not recursive, watch (or a classic data watch), and only its
    /// creation, changes and deletion are told.
    pub fn single_node(mut self) -> Self {
        self.single = true;
        self
    }

    /// Keeps the nodes' stats but not their data (Curator's
    /// `CuratorCacheBuilder.withDataNotCached()`): in the copy (and so in
    /// [`CuratorCache::get`], [`CuratorCache::entries`], and the `old`
    /// node of a [`CacheEvent::Changed`] and the node of a
    /// [`CacheEvent::Deleted`]) every node's `data` is empty. As in
    /// Curator, the data is still read, and a `Created` event and the
    /// `new` node of a `Changed` one carry the data read.
    pub fn data_not_cached(mut self) -> Self {
        self.cache_data = false;
        self
    }

    /// Empties the copy when the cache closes, as Curator's does unless
    /// given `Options.DO_NOT_CLEAR_ON_CLOSE`. Without it (the default
    /// here, unlike Curator) a closed cache keeps its copy as last seen.
    pub fn clear_on_close(mut self) -> Self {
        self.clear_on_close = true;
        self
    }

    /// The cache, not started. Fails if the root is not a valid path.
    pub fn build(self) -> Result<CuratorCache> {
        validate_any_path(&self.root)?;
        let keeper = Keeper::default();
        Ok(CuratorCache {
            inner: Arc::new(Inner {
                // Its own watch group, so that closing removes its watches alone.
                client: self
                    .client
                    .with_watcher_removal()
                    .with_cancel(Some(keeper.cancel_token())),
                root: self.root,
                single: self.single,
                cache_data: self.cache_data,
                clear_on_close: self.clear_on_close,
                compressed: self.compressed,
                nodes: Mutex::new(BTreeMap::new()),
                subscribers: Mutex::new(Vec::new()),
                dirty: Arc::default(),
                armed: Arc::default(),
                session: AtomicI64::new(0),
                classic: AtomicBool::new(false),
                recursive: Arc::default(),
                reconnects: AtomicU64::new(0),
                initialized: AtomicBool::new(false),
                keeper,
            }),
        })
    }
}

/// How long [`CuratorCache::close`] waits to remove its persistent watch.
const REMOVE_WITHIN: Duration = Duration::from_secs(2);

/// A local copy of a node and its subtree (Curator's `CuratorCache`),
/// kept current in the background: [`get`](Self::get) and
/// [`entries`](Self::entries) never wait, and [`listen`](Self::listen)
/// tells every creation, change and deletion, parents' creations before
/// their children's.
///
/// As Curator's, it watches the subtree with one persistent recursive
/// watch on the root ([`Client::add_watch`], ZooKeeper 3.6+) and reads the
/// nodes it tells of; a server without `addWatch` (it answers
/// `Unimplemented`) is watched the classic way instead, with a data and a
/// child watch on every node, as Curator's `TreeCache` does.
///
/// After every reconnection the cache reads the whole subtree again and
/// tells the differences: ZooKeeper sends no event for a change made
/// before the client's re-armed persistent watch reaches it (while the
/// client was disconnected, or just after it reconnected). On a new
/// session it watches again and does the same. While the client is
/// disconnected the copy may be stale, as in Curator.
///
/// Closing the cache removes its own watches only, at once here (Curator's
/// `removeWatchers()`): another cache or watcher of the same client on the
/// root keeps its own and hears nothing of it. The server's watch goes
/// once none of this client's is left on the path (on ZooKeeper before
/// 3.9, once no watch of any kind of this client is left there); closed
/// while disconnected, it is not set again on reconnecting.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::{CacheEvent, CuratorCache};
///
/// let cache = CuratorCache::new(client, "/services")?;
/// cache.start()?; // the whole subtree is read before this returns
/// for node in cache.entries() {
///     println!("{} = {:?}", node.path, node.data);
/// }
/// for event in cache.listen().iter().take(10) {
///     match event {
///         CacheEvent::Created(n) => println!("+ {}", n.path),
///         CacheEvent::Changed { new, .. } => println!("~ {}", new.path),
///         CacheEvent::Deleted(n) => println!("- {}", n.path),
///         CacheEvent::Initialized => println!("(the first read is done)"),
///         _ => {} // more kinds of event may be added
///     }
/// }
/// # Ok(()) }
/// ```
///
/// The cache only reads: it makes no write that a lost reply could leave in
/// doubt. [`close`](Self::close) waits for the cache's thread, whose
/// requests it cancels, then removes its watch, waiting at most 2 s for
/// ZooKeeper to remove a persistent watch on the server (see `close`).
pub struct CuratorCache {
    inner: Arc<Inner>,
}

/// What is watched on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Watch {
    Data,
    Children,
}

struct Inner {
    client: Client,
    root: String,
    /// The root alone ([`CuratorCacheBuilder::single_node`]).
    single: bool,
    /// Data kept in the copy (not [`CuratorCacheBuilder::data_not_cached`]).
    cache_data: bool,
    /// [`CuratorCacheBuilder::clear_on_close`].
    clear_on_close: bool,
    /// Data read is gunzipped ([`CuratorCacheBuilder::compressed_data`]).
    compressed: bool,
    nodes: Mutex<BTreeMap<String, ChildData>>,
    subscribers: Mutex<Vec<Sender<CacheEvent>>>,
    /// What to read again: a watch fired, or the copy is being built.
    dirty: Arc<Mutex<BTreeSet<(String, Watch)>>>,
    /// The watches pending.
    armed: Arc<WatchArms<(String, Watch)>>,
    /// The session the copy was built on: a new one reads everything.
    session: AtomicI64,
    /// The server refused `addWatch`: classic watches on every node.
    classic: AtomicBool,
    /// The persistent recursive watch on the root, and its session.
    recursive: Arc<WatchArms<()>>,
    /// The client's reconnections when the copy was last read in full.
    reconnects: AtomicU64,
    /// [`CacheEvent::Initialized`] was told.
    initialized: AtomicBool,
    keeper: Keeper,
}

impl CuratorCache {
    /// A cache of `root` and its subtree through `client`, not started,
    /// with the default options (see [`builder`](Self::builder)).
    pub fn new(client: &Client, root: &str) -> Result<CuratorCache> {
        Self::builder(client, root).build()
    }

    /// A builder of a cache of `root` through `client`, to set options.
    pub fn builder(client: &Client, root: &str) -> CuratorCacheBuilder {
        CuratorCacheBuilder {
            client: client.clone(),
            root: root.to_owned(),
            single: false,
            cache_data: true,
            clear_on_close: false,
            compressed: false,
        }
    }

    /// Reads the subtree (waiting for a connection as the client's retry
    /// policy allows) and then keeps the copy current on a thread of its
    /// own. Fails if the first read fails; starting twice is an error.
    pub fn start(&self) -> Result<()> {
        let inner = &self.inner;
        let first = || {
            while !inner.sync()? {}
            Ok(())
        };
        Keeper::start(inner, "latchkey-curator-cache", &inner.client, Some(&first))
    }

    /// Starts keeping the copy on the cache's thread without reading it
    /// first: returns at once, the copy filling in as the thread reads.
    pub(crate) fn start_in_background(&self) -> Result<()> {
        Keeper::start(
            &self.inner,
            "latchkey-curator-cache",
            &self.inner.client,
            None,
        )
    }

    /// The node at `path` as last seen, if it is in the subtree.
    pub fn get(&self, path: &str) -> Option<ChildData> {
        self.inner.nodes.lock().get(path).cloned()
    }

    /// Every node as last seen, sorted by path.
    pub fn entries(&self) -> Vec<ChildData> {
        self.inner.nodes.lock().values().cloned().collect()
    }

    /// How many nodes the copy has.
    pub fn size(&self) -> usize {
        self.inner.nodes.lock().len()
    }

    /// A channel that receives every change the cache sees, in order. It
    /// disconnects when the cache closes.
    pub fn listen(&self) -> Receiver<CacheEvent> {
        let (tx, rx) = unbounded();
        self.inner.subscribers.lock().push(tx);
        rx
    }

    /// Stops the cache: its requests end at once, its thread ends, its
    /// channels disconnect, its own watches are removed (another cache or
    /// watcher of the same client on the path keeps its own; see
    /// [`PersistentWatcher::close`](crate::PersistentWatcher::close)); the
    /// copy stays as last seen, unless built with
    /// [`clear_on_close`](CuratorCacheBuilder::clear_on_close).
    /// Idempotent; dropping the cache does the same.
    pub fn close(&self) {
        let inner = &self.inner;
        if !inner.keeper.close() {
            return;
        }
        inner.subscribers.lock().clear();
        if inner.clear_on_close {
            inner.nodes.lock().clear();
        }
        let client = inner
            .client
            .with_cancel(None)
            .with_deadline(Some(Instant::now() + REMOVE_WITHIN));
        if let Err(e) = client.remove_watchers() {
            log::debug!("{}: removing its watch: {e}", inner.what());
        }
    }
}

impl Drop for CuratorCache {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for CuratorCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuratorCache")
            .field("root", &self.inner.root)
            .field("size", &self.size())
            .finish()
    }
}

impl Kept for Inner {
    fn keeper(&self) -> &Keeper {
        &self.keeper
    }
    fn work(&self) -> Result<()> {
        self.sync().map(|_| ())
    }
    fn what(&self) -> String {
        format!("the cache of {}", self.root)
    }
}

impl Inner {
    /// Reads what is dirty until nothing is (parents before children: the
    /// set is ordered by path); on a new session, everything. False if a
    /// new session began meanwhile (the worker is woken to go on).
    fn sync(&self) -> Result<bool> {
        let session = self.client.session_id();
        // Watches go with their session: read the whole subtree.
        let mut full = self.session.swap(session, Ordering::AcqRel) != session;
        if full {
            self.armed.keep_only(session);
        }
        let recursive = !self.classic.load(Ordering::Acquire);
        if recursive {
            // A change made before the re-armed watch reached the server
            // raised no event; the re-read comes after the re-arm.
            let reconnects = self.client.metrics().reconnects;
            full |= self.reconnects.swap(reconnects, Ordering::AcqRel) != reconnects;
            full |= !self.recursive.is_armed(&(), session);
        }
        if full {
            let mut dirty = self.dirty.lock();
            for path in std::iter::once(&self.root).chain(self.nodes.lock().keys()) {
                dirty.insert((path.clone(), Watch::Data));
                dirty.insert((path.clone(), Watch::Children));
            }
        }
        if recursive && !self.recursive.is_armed(&(), session) {
            self.watch_recursively()?;
        }
        loop {
            if self.client.session_id() != session {
                // A read went on in a new session: start over on it (its
                // watches are kept, the rest is read again).
                self.keeper.signal().notify();
                return Ok(false);
            }
            let next = self.dirty.lock().pop_first();
            let Some((path, what)) = next else {
                if !self.initialized.swap(true, Ordering::AcqRel) {
                    self.tell(CacheEvent::Initialized);
                }
                return Ok(true);
            };
            let read = match what {
                Watch::Data => self.read_data(&path, session),
                // The root alone: no children are read or watched.
                Watch::Children if self.single => continue,
                Watch::Children => self.read_children(&path),
            };
            if let Err(e) = read {
                self.dirty.lock().insert((path, what));
                return Err(e);
            }
        }
    }

    /// Adds the persistent recursive watch on the root (once per session),
    /// or switches to classic watches if the server has no `addWatch`.
    /// Each event marks its node to be read; the watch's end (a new
    /// session, a removal) has it added again.
    fn watch_recursively(&self) -> Result<()> {
        let token = self.recursive.arm(&());
        let (arms, dirty, wake) = (
            Arc::downgrade(&self.recursive),
            Arc::downgrade(&self.dirty),
            Arc::downgrade(self.keeper.signal()),
        );
        let single = self.single;
        let watcher = move |event: WatchedEvent| {
            match event.event_type {
                // The root's own persistent watch tells its children's
                // changes too: not cached.
                EventType::NodeChildrenChanged if single => return,
                EventType::SessionExpired | EventType::PersistentWatchRemoved => {
                    if let Some(arms) = arms.upgrade() {
                        arms.fired(&(), token);
                    }
                }
                _ => {
                    if let Some(dirty) = dirty.upgrade() {
                        dirty.lock().insert((event.path, Watch::Data));
                    }
                }
            }
            if let Some(wake) = wake.upgrade() {
                wake.notify();
            }
        };
        let mode = match self.single {
            true => AddWatchMode::Persistent,
            false => AddWatchMode::PersistentRecursive,
        };
        let added = self.client.add_watch(&self.root, mode, watcher);
        match added {
            Ok(()) => {
                self.recursive.confirm(&(), token, self.client.session_id());
                Ok(())
            }
            Err(e) => {
                self.recursive.fired(&(), token);
                if !e.is(ErrorCode::Unimplemented) {
                    return Err(e);
                }
                log::info!(
                    "{}: no addWatch on the server, classic watches",
                    self.what()
                );
                self.classic.store(true, Ordering::Release);
                Ok(())
            }
        }
    }

    /// A read that watches the node in classic mode (see [`read_watched`]);
    /// a plain read under the recursive watch.
    fn watched<T>(
        &self,
        key: &(String, Watch),
        watched: impl FnOnce(Box<dyn FnOnce(WatchedEvent) + Send>) -> Result<T>,
        plain: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        if !self.classic.load(Ordering::Acquire) {
            return plain();
        }
        let (dirty, owned, wake) = (
            Arc::downgrade(&self.dirty),
            key.clone(),
            waking(self.keeper.signal()),
        );
        let on_fire = move || {
            if let Some(dirty) = dirty.upgrade() {
                dirty.lock().insert(owned);
            }
            wake();
        };
        read_watched(&self.armed, key, &self.client, on_fire, watched, plain)
    }

    fn read_data(&self, path: &str, session: i64) -> Result<()> {
        let key = (path.to_owned(), Watch::Data);
        let got = self.watched(
            &key,
            |w| self.client.get_data_watch(path, w),
            || self.client.get_data(path),
        );
        match got {
            Ok((data, stat)) => {
                let data = match self.compressed {
                    true => compression::decompress(path, &data).unwrap_or_else(|e| {
                        log::warn!("CuratorCache of {}: {e}; kept as it is", self.root);
                        data
                    }),
                    false => data,
                };
                self.seen(ChildData {
                    path: path.to_owned(),
                    stat,
                    data,
                });
                Ok(())
            }
            Err(e) if e.is(ErrorCode::NoNode) => {
                self.gone(path);
                let classic = self.classic.load(Ordering::Acquire);
                if classic && path == self.root && !self.armed.is_armed(&key, session) {
                    // Watch for the root's creation.
                    let exists = self.watched(
                        &key,
                        |w| self.client.exists_watch(path, w),
                        || self.client.exists(path),
                    )?;
                    if exists.is_some() {
                        // Created meanwhile: read it now.
                        self.dirty.lock().insert(key);
                    }
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn read_children(&self, path: &str) -> Result<()> {
        let key = (path.to_owned(), Watch::Children);
        let listed = self.watched(
            &key,
            |w| self.client.get_children_watch(path, w),
            || self.client.get_children(path),
        );
        let children = match listed {
            // No watch is left on a missing node; its data read tells.
            Err(e) if e.is(ErrorCode::NoNode) => return Ok(()),
            other => other?,
        };
        let children: BTreeSet<String> = children
            .into_iter()
            .map(|c| paths::make_path(path, &c))
            .collect();
        for child in self.known_children(path) {
            if !children.contains(&child) {
                self.gone(&child);
            }
        }
        let mut dirty = self.dirty.lock();
        let nodes = self.nodes.lock();
        for child in children {
            if !nodes.contains_key(&child) {
                dirty.insert((child.clone(), Watch::Data));
                dirty.insert((child, Watch::Children));
            }
        }
        Ok(())
    }

    /// The children of `path` in the copy.
    fn known_children(&self, path: &str) -> Vec<String> {
        let prefix = match path {
            "/" => "/".to_owned(),
            _ => format!("{path}/"),
        };
        self.nodes
            .lock()
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            // Not "/" itself, which the prefix of its children matches.
            .filter(|(p, _)| p.len() > prefix.len() && !p[prefix.len()..].contains('/'))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Records a node as read, telling what changed. A node whose czxid is
    /// not the copy's was deleted and created again since the last read:
    /// the old one and its subtree are told deleted, the new one created.
    fn seen(&self, node: ChildData) {
        let events = {
            let mut nodes = self.nodes.lock();
            let mut events = Vec::new();
            match nodes.get(&node.path) {
                Some(old) if old.stat.czxid != node.stat.czxid => {
                    events.extend(remove_subtree(&mut nodes, &node.path).map(CacheEvent::Deleted));
                }
                Some(old) if old.stat.mzxid == node.stat.mzxid => return,
                _ => {}
            }
            let stored = match self.cache_data {
                true => node.clone(),
                false => ChildData {
                    data: Vec::new(),
                    ..node.clone()
                },
            };
            match nodes.insert(node.path.clone(), stored) {
                None => events.push(CacheEvent::Created(node)),
                Some(old) => events.push(CacheEvent::Changed { old, new: node }),
            }
            events
        };
        for event in events {
            if let CacheEvent::Created(node) = &event {
                // A node new to the copy: its children are to be read too
                // (a root that appears, a child whose listing failed, a
                // node created again).
                self.dirty
                    .lock()
                    .insert((node.path.clone(), Watch::Children));
            }
            self.tell(event);
        }
    }

    /// Removes a node and its subtree from the copy, deepest first.
    fn gone(&self, path: &str) {
        let removed: Vec<ChildData> = remove_subtree(&mut self.nodes.lock(), path).collect();
        for node in removed {
            self.tell(CacheEvent::Deleted(node));
        }
    }

    fn tell(&self, event: CacheEvent) {
        self.subscribers
            .lock()
            .retain(|tx| tx.send(event.clone()).is_ok());
    }
}

/// Takes `path` and its subtree out of `nodes`, deepest first.
fn remove_subtree(
    nodes: &mut BTreeMap<String, ChildData>,
    path: &str,
) -> impl Iterator<Item = ChildData> {
    // The node, then its subtree (contiguous: one prefix).
    let prefix = format!("{}/", path.trim_end_matches('/'));
    let under: Vec<String> = std::iter::once(path.to_owned())
        .filter(|p| nodes.contains_key(p))
        .chain(
            nodes
                .range(prefix.clone()..)
                .take_while(|(p, _)| p.starts_with(&prefix))
                .map(|(p, _)| p.clone()),
        )
        .collect();
    let removed: Vec<ChildData> = under.iter().rev().filter_map(|p| nodes.remove(p)).collect();
    removed.into_iter()
}

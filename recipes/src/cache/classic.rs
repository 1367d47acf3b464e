//! The engine of the classic-watch caches, Curator 4's
//! [`PathChildrenCache`](crate::PathChildrenCache) and
//! [`TreeCache`](crate::TreeCache): a copy of a node's subtree, limited in
//! depth and by a selector, kept current by one-shot data and child
//! watches on every node it holds. The engine owns the copy and its
//! keeper thread; each recipe gives it a [`Shape`] and turns its
//! [`Change`]s into the recipe's own events.
//!
//! Watches fire into a set of nodes to read again ("dirty"), read in
//! breadth-first order (by depth, then path), so a parent is always read
//! before its children and a first read is told as Curator tells it. The
//! whole copy is read again after every reconnection (what changed while
//! the client was away is told) and on a new session (its watches went
//! with the old one); only differences are told, and [`WatchArms`] keeps
//! one watch per node and kind, however often it is read.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crossbeam_channel::{unbounded, Receiver, Sender};
use latchkey_framework::{
    paths, Client, ConnectionState, CreateMode, Error, ErrorCode, ListenerHandle, Result,
    WatchedEvent,
};
use parking_lot::Mutex;

use crate::armed::{read_watched, WatchArms};
use crate::cache::node_cache::ChildData;
use crate::keeper::{Keeper, Kept};
use crate::locks::lock_internals::validate_any_path;

/// Which subtree nodes a [`TreeCache`](crate::TreeCache) holds (Curator's
/// `TreeCacheSelector`): the cache lists the children of a node only if
/// [`traverse_children`](Self::traverse_children) says so, and holds a
/// listed child only if [`accept_child`](Self::accept_child) says so.
/// Both default to `true`. They run on the cache's thread and should be
/// quick; one that panics counts as `false` (and is logged).
///
/// ```
/// use latchkey_recipes::TreeCacheSelector;
///
/// /// Everything but the `locks` subtrees.
/// struct NoLocks;
///
/// impl TreeCacheSelector for NoLocks {
///     fn accept_child(&self, path: &str) -> bool {
///         !path.ends_with("/locks")
///     }
/// }
/// ```
pub trait TreeCacheSelector: Send + Sync {
    /// Whether the children of the node at `path` are cached (the node
    /// itself is).
    fn traverse_children(&self, path: &str) -> bool {
        let _ = path;
        true
    }
    /// Whether the child at `path`, just listed, is cached.
    fn accept_child(&self, path: &str) -> bool {
        let _ = path;
        true
    }
}

/// What the engine tells its recipe.
pub(crate) enum Change {
    Added(ChildData),
    Updated {
        old: ChildData,
        new: ChildData,
    },
    Removed(ChildData),
    /// A full read is done; the copy then (children of the root only for
    /// a cache whose root is not held).
    Initialized(Vec<ChildData>),
}

/// When [`Change::Initialized`] is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Announce {
    Never,
    /// After the first full read.
    Once,
    /// After the first full read, and after the full read of every new
    /// session (Curator's `TreeCache` tells it again after `LOST`).
    EverySession,
}

/// What a cache holds and how.
pub(crate) struct Shape {
    /// The root itself is held (`TreeCache`), or its children alone
    /// (`PathChildrenCache`).
    pub root_cached: bool,
    /// The deepest level held, the root being 0.
    pub max_depth: usize,
    pub selector: Option<Arc<dyn TreeCacheSelector>>,
    /// Data kept in the copy; without, stats only.
    pub cache_data: bool,
    /// Events carry the data read, also when the copy does not keep it
    /// (`TreeCache`); else as the copy has it (`PathChildrenCache`).
    pub data_in_events: bool,
    /// Watches set (Curator's `disableZkWatches(false)`); without, the
    /// subtree is read at start and after reconnections only.
    pub watches: bool,
    /// The root is created (as a container, with container parents) when
    /// missing, as Curator's `PathChildrenCache` does (`EnsureContainers`).
    pub ensure_root: bool,
}

/// What is read of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Watch {
    Data,
    Children,
}

/// A read to do: depth first, so that the reads go breadth-first and a
/// parent is read before its children.
type Key = (usize, String, Watch);

/// Maps the engine's changes and the client's states to a recipe's events.
pub(crate) struct Events<E> {
    pub change: fn(Change) -> E,
    pub state: fn(ConnectionState) -> Option<E>,
}

pub(crate) struct Classic<E: Clone + Send + 'static> {
    client: Client,
    root: String,
    shape: Shape,
    events: Events<E>,
    /// Set before start.
    announce: Mutex<Announce>,
    nodes: Mutex<BTreeMap<String, ChildData>>,
    subscribers: Mutex<Vec<Sender<E>>>,
    dirty: Arc<Mutex<BTreeSet<Key>>>,
    armed: Arc<WatchArms<(String, Watch)>>,
    /// The session the copy was read on: a new one reads everything.
    session: AtomicI64,
    /// The client's reconnections when the copy was last read in full.
    reconnects: AtomicU64,
    /// [`Change::Initialized`] was told (for this session, with
    /// [`Announce::EverySession`]).
    initialized: AtomicBool,
    /// The root was created by the cache since it was last listed: not
    /// again until it is seen (no loop against a process deleting it).
    root_created: AtomicBool,
    /// One pass over the copy at a time: the keeper's or a rebuild's.
    pass: Mutex<()>,
    state_listener: Mutex<Option<ListenerHandle>>,
    keeper: Keeper,
}

impl<E: Clone + Send + 'static> Classic<E> {
    pub(crate) fn new(
        client: &Client,
        root: &str,
        shape: Shape,
        events: Events<E>,
    ) -> Result<Arc<Self>> {
        validate_any_path(root)?;
        let keeper = Keeper::default();
        Ok(Arc::new(Classic {
            // Its own watch group, so that closing removes its watches.
            client: client
                .with_watcher_removal()
                .with_cancel(Some(keeper.cancel_token())),
            root: root.to_owned(),
            shape,
            events,
            announce: Mutex::new(Announce::Never),
            nodes: Mutex::new(BTreeMap::new()),
            subscribers: Mutex::new(Vec::new()),
            dirty: Arc::default(),
            armed: Arc::default(),
            session: AtomicI64::new(0),
            reconnects: AtomicU64::new(0),
            initialized: AtomicBool::new(false),
            root_created: AtomicBool::new(false),
            pass: Mutex::new(()),
            state_listener: Mutex::new(None),
            keeper,
        }))
    }

    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    /// Starts the keeper thread `name`. With `silent_first`, the subtree
    /// is first read on the caller's thread without telling anything
    /// (`BUILD_INITIAL_CACHE`); else the thread reads it, telling each node.
    pub(crate) fn start(
        self: &Arc<Self>,
        name: &str,
        announce: Announce,
        silent_first: bool,
    ) -> Result<()> {
        self.startable()?;
        *self.announce.lock() = announce;
        let weak = Arc::downgrade(self);
        let to_event = self.events.state;
        let listener = self.client.add_listener(move |state| {
            if let (Some(me), Some(event)) = (weak.upgrade(), to_event(state)) {
                if !me.keeper.is_closed() {
                    me.send(event);
                }
            }
        });
        let started = if silent_first {
            let first = || self.rebuild_locked();
            Keeper::start(self, name, &self.client, Some(&first))
        } else {
            Keeper::start(self, name, &self.client, None)
        };
        match started {
            Ok(()) => *self.state_listener.lock() = Some(listener),
            Err(_) => drop(listener),
        }
        started
    }

    /// Neither started nor closed, or which.
    pub(crate) fn startable(&self) -> Result<()> {
        let why = match (self.keeper.is_closed(), self.keeper.is_running()) {
            (true, _) => "is closed",
            (false, true) => "was started already",
            (false, false) => return Ok(()),
        };
        Err(Error::IllegalState(format!("{} {why}", self.what())))
    }

    /// Started and not closed, or why not.
    pub(crate) fn check_running(&self) -> Result<()> {
        if self.keeper.is_running() {
            return Ok(());
        }
        let why = match self.keeper.is_closed() {
            true => "closed",
            false => "not started",
        };
        Err(Error::IllegalState(format!("{} is {why}", self.what())))
    }

    pub(crate) fn listen(&self) -> Receiver<E> {
        let (tx, rx) = unbounded();
        if !self.keeper.is_closed() {
            self.subscribers.lock().push(tx);
        }
        rx
    }

    pub(crate) fn get(&self, path: &str) -> Option<ChildData> {
        self.nodes.lock().get(path).cloned()
    }

    pub(crate) fn entries(&self) -> Vec<ChildData> {
        self.nodes.lock().values().cloned().collect()
    }

    pub(crate) fn size(&self) -> usize {
        self.nodes.lock().len()
    }

    /// The children of `path` by name, if `path` is held.
    pub(crate) fn children(&self, path: &str) -> Option<BTreeMap<String, ChildData>> {
        let nodes = self.nodes.lock();
        if self.shape.root_cached || path != self.root {
            nodes.get(path)?;
        }
        let prefix = child_prefix(path);
        Some(
            nodes
                .range(prefix.clone()..)
                .take_while(|(p, _)| p.starts_with(&prefix))
                // Not "/" itself, which the prefix of its children matches.
                .filter(|(p, _)| p.len() > prefix.len() && !p[prefix.len()..].contains('/'))
                .map(|(p, n)| (p[prefix.len()..].to_owned(), n.clone()))
                .collect(),
        )
    }

    /// Empties the copy without telling anything (Curator's `clear()`);
    /// the nodes come back, told as added, as the cache reads them again.
    pub(crate) fn clear(&self) {
        self.nodes.lock().clear();
    }

    /// Empties the copy and reads it again in the background, telling
    /// every node as added.
    pub(crate) fn clear_and_refresh(&self) -> Result<()> {
        self.check_running()?;
        self.nodes.lock().clear();
        self.mark_all();
        self.keeper.signal().notify();
        Ok(())
    }

    /// Drops the data of `path` from the copy if its version is
    /// `if_version` (any, with `None`); false if it is not held or of
    /// another version.
    pub(crate) fn clear_data_bytes(&self, path: &str, if_version: Option<i32>) -> bool {
        let mut nodes = self.nodes.lock();
        match nodes.get_mut(path) {
            Some(node) if if_version.is_none_or(|v| v == node.stat.version) => {
                node.data = Vec::new();
                true
            }
            _ => false,
        }
    }

    /// Reads the root's children and their data again on the caller's
    /// thread and replaces the copy with them, telling nothing (Curator's
    /// `PathChildrenCache.rebuild()`); the cache then reads again in the
    /// background, telling what changed since.
    pub(crate) fn rebuild(&self) -> Result<()> {
        self.check_running()?;
        let _pass = self.pass.lock();
        self.rebuild_locked()
    }

    /// Reads one child of the root again on the caller's thread, telling
    /// nothing (Curator's `rebuildNode`).
    pub(crate) fn rebuild_node(&self, path: &str) -> Result<()> {
        if paths::validate_path(path).is_err() || paths::parent(path) != Some(self.root.as_str()) {
            return Err(Error::InvalidArgument(format!(
                "{}: {} is not one of its children",
                self.what(),
                path.chars().take(200).collect::<String>()
            )));
        }
        self.check_running()?;
        let _pass = self.pass.lock();
        match self.client.get_data(path) {
            Ok((data, stat)) => {
                let node = self.stored(ChildData {
                    path: path.to_owned(),
                    stat,
                    data,
                });
                self.nodes.lock().insert(path.to_owned(), node);
            }
            Err(e) if e.is(ErrorCode::NoNode) => {
                self.nodes.lock().remove(path);
            }
            Err(e) => return Err(e),
        }
        // What changed meanwhile is told by the next pass.
        self.mark(1, path, Watch::Data);
        self.mark(0, &self.root, Watch::Children);
        self.keeper.signal().notify();
        Ok(())
    }

    /// Stops the keeper and the channels; the copy stays as last seen.
    /// The watches the cache set stay on the server until they fire (one
    /// event each, then gone) or the session ends.
    pub(crate) fn close(&self) {
        if self.keeper.close() {
            self.state_listener.lock().take();
            self.subscribers.lock().clear();
            // Its one-shot watches, here only (Curator's removeWatchers):
            // the server's fire once to nobody.
            if let Err(e) = self.client.remove_watchers() {
                log::debug!("closing the cache of {}: {e}", self.root);
            }
        }
    }

    /// The silent read of [`rebuild`](Self::rebuild), under the pass lock
    /// (or before the keeper runs).
    fn rebuild_locked(&self) -> Result<()> {
        let listed = match self.client.get_children(&self.root) {
            Err(e) if e.is(ErrorCode::NoNode) && self.shape.ensure_root => {
                self.create_root()?;
                self.client.get_children(&self.root)
            }
            other => other,
        };
        let names = match listed {
            Ok(names) => names,
            Err(e) if e.is(ErrorCode::NoNode) => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut fresh = BTreeMap::new();
        for name in names {
            let path = paths::make_path(&self.root, &name);
            match self.client.get_data(&path) {
                Ok((data, stat)) => {
                    let node = self.stored(ChildData {
                        path: path.clone(),
                        stat,
                        data,
                    });
                    fresh.insert(path, node);
                }
                Err(e) if e.is(ErrorCode::NoNode) => {}
                Err(e) => return Err(e),
            }
        }
        *self.nodes.lock() = fresh;
        // Watch everything read, and tell what changed since it was read.
        self.mark_all();
        self.keeper.signal().notify();
        Ok(())
    }

    fn what(&self) -> String {
        let kind = match self.shape.root_cached {
            true => "tree cache",
            false => "path children cache",
        };
        format!("the {kind} of {}", self.root)
    }

    /// One pass; false if a new session began meanwhile (the keeper is
    /// woken to go on).
    fn sync(&self) -> Result<bool> {
        let _pass = self.pass.lock();
        let mut session = self.client.session_id();
        if session == 0 {
            // Wait for a connection as the retry policy allows.
            self.client.exists(&self.root)?;
            session = self.client.session_id();
            if session == 0 {
                return Err(Error::NotConnected { last_attempt: None });
            }
        }
        let before = self.session.swap(session, Ordering::AcqRel);
        let reconnects = self.client.metrics().reconnects;
        let reconnected = self.reconnects.swap(reconnects, Ordering::AcqRel) != reconnects;
        if before != session {
            self.armed.keep_only(session);
            if before != 0 && *self.announce.lock() == Announce::EverySession {
                self.initialized.store(false, Ordering::Release);
            }
        }
        if before != session || reconnected {
            self.mark_all();
        }
        loop {
            if self.client.session_id() != session {
                self.keeper.signal().notify();
                return Ok(false);
            }
            let next = self.dirty.lock().pop_first();
            let Some(key) = next else {
                self.maybe_initialized();
                return Ok(true);
            };
            let (depth, path, what) = &key;
            let read = match what {
                Watch::Data => self.read_data(*depth, path, session),
                Watch::Children => self.read_children(*depth, path, session),
            };
            if let Err(e) = read {
                self.dirty.lock().insert(key);
                return Err(e);
            }
        }
    }

    fn maybe_initialized(&self) {
        let announce = *self.announce.lock();
        if announce != Announce::Never && !self.initialized.swap(true, Ordering::AcqRel) {
            let entries = self.entries();
            self.tell(Change::Initialized(entries));
        }
    }

    /// Everything held to be read again, the root first.
    fn mark_all(&self) {
        let nodes: Vec<String> = self.nodes.lock().keys().cloned().collect();
        let mut dirty = self.dirty.lock();
        dirty.insert((0, self.root.clone(), Watch::Data));
        dirty.insert((0, self.root.clone(), Watch::Children));
        for path in nodes {
            let depth = self.depth_of(&path);
            dirty.insert((depth, path.clone(), Watch::Data));
            dirty.insert((depth, path, Watch::Children));
        }
    }

    fn mark(&self, depth: usize, path: &str, what: Watch) {
        self.dirty.lock().insert((depth, path.to_owned(), what));
    }

    fn depth_of(&self, path: &str) -> usize {
        let below = match self.root.as_str() {
            "/" => path,
            root => &path[root.len().min(path.len())..],
        };
        below.split('/').filter(|s| !s.is_empty()).count()
    }

    /// Whether the children of `path` (at `depth`) are held.
    fn traverses(&self, depth: usize, path: &str) -> bool {
        depth < self.shape.max_depth
            && self
                .shape
                .selector
                .as_ref()
                .is_none_or(|s| ask(path, "traverse_children", || s.traverse_children(path)))
    }

    fn accepts(&self, path: &str) -> bool {
        self.shape
            .selector
            .as_ref()
            .is_none_or(|s| ask(path, "accept_child", || s.accept_child(path)))
    }

    /// A read that sets a watch of `key` unless one of this session is
    /// pending (see [`read_watched`]); a plain read without watches. When
    /// the watch fires, the node is read again; the root's existence watch
    /// has its data and children read.
    fn watched<T>(
        &self,
        depth: usize,
        key: (String, Watch),
        watched: impl FnOnce(Box<dyn FnOnce(WatchedEvent) + Send>) -> Result<T>,
        plain: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        if !self.shape.watches {
            return plain();
        }
        let (dirty, wake) = (
            Arc::downgrade(&self.dirty),
            Arc::downgrade(self.keeper.signal()),
        );
        let (path, what) = key.clone();
        let root = depth == 0;
        let on_fire = move || {
            if let Some(dirty) = Weak::upgrade(&dirty) {
                let mut dirty = dirty.lock();
                if root {
                    dirty.insert((0, path.clone(), Watch::Data));
                    dirty.insert((0, path, Watch::Children));
                } else {
                    dirty.insert((depth, path, what));
                }
            }
            if let Some(wake) = wake.upgrade() {
                wake.notify();
            }
        };
        read_watched(&self.armed, &key, &self.client, on_fire, watched, plain)
    }

    fn read_data(&self, depth: usize, path: &str, session: i64) -> Result<()> {
        if depth == 0 && !self.shape.root_cached {
            return Ok(());
        }
        if depth > 0 && self.shape.root_cached {
            // A node whose parent went is read again, if it is there,
            // once its parent is: no orphans in the copy.
            let parent = paths::parent(path).unwrap_or("/");
            if !self.nodes.lock().contains_key(parent) {
                return Ok(());
            }
        }
        let got = self.watched(
            depth,
            (path.to_owned(), Watch::Data),
            |w| self.client.get_data_watch(path, w),
            || self.client.get_data(path),
        );
        match got {
            Ok((data, stat)) => {
                self.seen(
                    depth,
                    ChildData {
                        path: path.to_owned(),
                        stat,
                        data,
                    },
                );
                Ok(())
            }
            Err(e) if e.is(ErrorCode::NoNode) => {
                self.gone(path);
                if depth == 0 {
                    self.watch_root(session)?;
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn read_children(&self, depth: usize, path: &str, session: i64) -> Result<()> {
        if !self.traverses(depth, path) {
            return Ok(());
        }
        if self.shape.root_cached && !self.nodes.lock().contains_key(path) {
            // Not held (yet): its data read adds it and lists it.
            return Ok(());
        }
        let listed = self.watched(
            depth,
            (path.to_owned(), Watch::Children),
            |w| self.client.get_children_watch(path, w),
            || self.client.get_children(path),
        );
        let names = match listed {
            Ok(names) => names,
            Err(e) if e.is(ErrorCode::NoNode) => {
                if depth == 0 && !self.shape.root_cached {
                    return self.root_missing(session);
                }
                // Deleted: its data read tells (also without watches).
                self.mark(depth, path, Watch::Data);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if depth == 0 {
            self.root_created.store(false, Ordering::Release);
        }
        let listed: BTreeSet<String> = names
            .iter()
            .map(|name| paths::make_path(path, name))
            .filter(|child| self.accepts(child))
            .collect();
        for known in self.children(path).unwrap_or_default().into_values() {
            if !listed.contains(&known.path) {
                self.gone(&known.path);
            }
        }
        let nodes = self.nodes.lock();
        let mut dirty = self.dirty.lock();
        for child in listed {
            if !nodes.contains_key(&child) {
                dirty.insert((depth + 1, child, Watch::Data));
            }
        }
        Ok(())
    }

    /// The root of a children cache is missing: its children went; it is
    /// created again (once until it is seen) or its creation is watched.
    fn root_missing(&self, session: i64) -> Result<()> {
        for known in self.entries() {
            self.gone(&known.path);
        }
        if self.shape.ensure_root && !self.root_created.swap(true, Ordering::AcqRel) {
            if let Err(e) = self.create_root() {
                if e.is_retryable() {
                    self.root_created.store(false, Ordering::Release);
                    return Err(e);
                }
                log::debug!("{}: creating it: {e}", self.what());
            }
            self.mark(0, &self.root, Watch::Children);
            return Ok(());
        }
        self.watch_root(session)
    }

    /// Creates the root and its missing parents as containers (Curator's
    /// `createContainers`).
    pub(crate) fn create_root(&self) -> Result<()> {
        if self.root == "/" {
            return Ok(());
        }
        let created = self
            .client
            .create()
            .creating_parent_containers_if_needed()
            .mode(CreateMode::Container)
            .for_path(&self.root, &[]);
        match created {
            Err(e) if !e.is(ErrorCode::NodeExists) => Err(e),
            _ => Ok(()),
        }
    }

    /// Watches for the root's creation, unless a watch of this session is
    /// pending; reads it again if it exists by now.
    fn watch_root(&self, session: i64) -> Result<()> {
        let key = (self.root.clone(), Watch::Data);
        if !self.shape.watches || self.armed.is_armed(&key, session) {
            return Ok(());
        }
        let exists = self.watched(
            0,
            key,
            |w| self.client.exists_watch(&self.root, w),
            || self.client.exists(&self.root),
        )?;
        if exists.is_some() {
            let mut dirty = self.dirty.lock();
            dirty.insert((0, self.root.clone(), Watch::Data));
            dirty.insert((0, self.root.clone(), Watch::Children));
        }
        Ok(())
    }

    /// The node as the copy keeps it.
    fn stored(&self, node: ChildData) -> ChildData {
        match self.shape.cache_data {
            true => node,
            false => ChildData {
                data: Vec::new(),
                ..node
            },
        }
    }

    /// Records a node as read, telling what changed. A node of another
    /// czxid was deleted and created again since the last read: the old
    /// one (and its subtree) is told removed, the new one added.
    fn seen(&self, depth: usize, node: ChildData) {
        let told = match self.shape.data_in_events {
            true => node.clone(),
            false => self.stored(node.clone()),
        };
        let changes = {
            let mut nodes = self.nodes.lock();
            let mut changes = Vec::new();
            match nodes.get(&node.path) {
                Some(old) if old.stat.czxid != node.stat.czxid => {
                    changes.extend(remove_subtree(&mut nodes, &node.path).map(Change::Removed));
                }
                Some(old) if old.stat.mzxid == node.stat.mzxid => {
                    // The same version: keep its stat current (children,
                    // cversion), tell nothing.
                    let data = old.data.clone();
                    nodes.insert(node.path.clone(), ChildData { data, ..node });
                    return;
                }
                _ => {}
            }
            match nodes.insert(node.path.clone(), self.stored(node)) {
                None => changes.push(Change::Added(told)),
                Some(old) => changes.push(Change::Updated { old, new: told }),
            }
            changes
        };
        for change in changes {
            if let Change::Added(node) = &change {
                // Its children are to be read (a new node, or one created
                // again).
                if self.traverses(depth, &node.path) {
                    self.mark(depth, &node.path, Watch::Children);
                }
            }
            self.tell(change);
        }
    }

    /// Removes a node and its subtree from the copy, telling each, deepest
    /// first.
    fn gone(&self, path: &str) {
        let removed: Vec<ChildData> = remove_subtree(&mut self.nodes.lock(), path).collect();
        for node in removed {
            self.tell(Change::Removed(node));
        }
    }

    fn tell(&self, change: Change) {
        self.send((self.events.change)(change));
    }

    fn send(&self, event: E) {
        self.subscribers
            .lock()
            .retain(|tx| tx.send(event.clone()).is_ok());
    }
}

impl<E: Clone + Send + 'static> Kept for Classic<E> {
    fn keeper(&self) -> &Keeper {
        &self.keeper
    }
    fn work(&self) -> Result<()> {
        self.sync().map(|_| ())
    }
    fn what(&self) -> String {
        Classic::what(self)
    }
}

/// A selector's answer; a panic counts as `false`.
fn ask(path: &str, what: &str, f: impl FnOnce() -> bool) -> bool {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        log::error!("the tree cache selector's {what} panicked on {path}: taken as false");
        false
    })
}

/// What the paths of `path`'s children start with.
fn child_prefix(path: &str) -> String {
    match path {
        "/" => "/".to_owned(),
        _ => format!("{path}/"),
    }
}

/// Takes `path` and its subtree out of `nodes`, deepest first.
fn remove_subtree(
    nodes: &mut BTreeMap<String, ChildData>,
    path: &str,
) -> impl Iterator<Item = ChildData> {
    let prefix = child_prefix(path);
    let mut under: Vec<String> = nodes
        .range(prefix.clone()..)
        .take_while(|(p, _)| p.starts_with(&prefix))
        .map(|(p, _)| p.clone())
        .filter(|p| p != path)
        .collect();
    // Deepest first, as Curator tells them.
    under.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
    under.push(path.to_owned());
    let removed: Vec<ChildData> = under.iter().filter_map(|p| nodes.remove(p)).collect();
    removed.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;
    use latchkey_framework::Stat;

    fn held(paths: &[&str]) -> BTreeMap<String, ChildData> {
        paths
            .iter()
            .map(|p| {
                let node = ChildData {
                    path: (*p).to_owned(),
                    stat: Stat::default(),
                    data: Vec::new(),
                };
                ((*p).to_owned(), node)
            })
            .collect()
    }

    #[test]
    fn a_subtree_goes_deepest_first_and_only_its_own() {
        let mut nodes = held(&["/a", "/a/b", "/a/b/c", "/a/d", "/a-b", "/ab"]);
        let gone: Vec<String> = remove_subtree(&mut nodes, "/a").map(|n| n.path).collect();
        assert_eq!(gone, ["/a/b/c", "/a/b", "/a/d", "/a"]);
        assert_eq!(nodes.keys().collect::<Vec<_>>(), ["/a-b", "/ab"]);
    }

    #[test]
    fn the_root_of_everything_goes_last() {
        let mut nodes = held(&["/", "/x", "/x/y"]);
        let gone: Vec<String> = remove_subtree(&mut nodes, "/").map(|n| n.path).collect();
        assert_eq!(gone, ["/x/y", "/x", "/"]);
        assert!(remove_subtree(&mut nodes, "/none").next().is_none());
    }

    #[test]
    fn a_panicking_selector_answers_false() {
        assert!(!ask("/p", "accept_child", || panic!("boom")));
        assert!(ask("/p", "accept_child", || true));
        assert_eq!(child_prefix("/"), "/");
        assert_eq!(child_prefix("/a"), "/a/");
    }
}

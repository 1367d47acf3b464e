//! Curator's `PathChildrenCache` (deprecated in Curator 5 for
//! `CuratorCache`, provided for code written against it): a local copy of
//! a node's children, with events for each child added, updated and
//! removed, kept current by classic watches.

use std::sync::Arc;

use latchkey_framework::{Client, ConnectionState, Result};

use crate::cache::classic::{Announce, Change, Classic, Events, Shape};
use crate::cache::node_cache::ChildData;
use crate::Receiver;

/// What a [`PathChildrenCache`] tells (Curator's
/// `PathChildrenCacheEvent.Type`, each with its data).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathChildrenCacheEvent {
    /// A child appeared (`CHILD_ADDED`).
    ChildAdded(ChildData),
    /// A child's data changed (`CHILD_UPDATED`): the child as it is now.
    ChildUpdated(ChildData),
    /// A child went (`CHILD_REMOVED`), as last seen.
    ChildRemoved(ChildData),
    /// The children there were when the cache started have all been read
    /// (`INITIALIZED`, with Curator's `getInitialData()`): told once,
    /// with [`PathChildrenCacheStartMode::PostInitializedEvent`] only, after their
    /// `ChildAdded` events.
    Initialized(Vec<ChildData>),
    /// The connection was suspended (`CONNECTION_SUSPENDED`): the copy may
    /// be stale until `ConnectionReconnected`.
    ConnectionSuspended,
    /// The client connected (again) (`CONNECTION_RECONNECTED`, which
    /// Curator also tells for the first connection of a client that was
    /// not connected when the cache started); the cache reads its
    /// children again and tells what changed meanwhile.
    ConnectionReconnected,
    /// The session is gone (`CONNECTION_LOST`); the cache reads its
    /// children again on the next session, telling what changed.
    ConnectionLost,
}

/// How a [`PathChildrenCache`] starts (Curator's `PathChildrenCacheStartMode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathChildrenCacheStartMode {
    /// In the background: every child there is told as
    /// [`ChildAdded`](PathChildrenCacheEvent::ChildAdded).
    #[default]
    Normal,
    /// On the caller's thread: [`PathChildrenCache::start_with`] returns
    /// once the children are read, and tells nothing of them (Curator's
    /// `BUILD_INITIAL_CACHE`).
    BuildInitialCache,
    /// As [`Normal`](Self::Normal), then
    /// [`Initialized`](PathChildrenCacheEvent::Initialized) once every child
    /// there was at the start is read (Curator's `POST_INITIALIZED_EVENT`).
    PostInitializedEvent,
}

/// A local copy of the children of a node (Curator's `PathChildrenCache`,
/// which Curator 5 deprecates in favour of
/// [`CuratorCache`](crate::CuratorCache); provided for code written
/// against it): [`current_data`](Self::current_data) never waits, and
/// [`listen`](Self::listen) tells each child added, updated and removed,
/// and the connection's changes.
///
/// As Curator's, it watches the node's children with a child watch and
/// each child with a data watch (classic one-shot watches, one per node
/// and kind however often it is read), and creates the node (a container,
/// with container parents) when it is missing, also when it is deleted
/// while the cache runs. After every reconnection and on a new session it
/// reads the children again and tells what changed meanwhile, nothing
/// else: a child deleted and created again between two reads is told
/// removed, then added. While the client is disconnected the copy may be
/// stale, as in Curator.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::{PathChildrenCache, PathChildrenCacheEvent, PathChildrenCacheStartMode};
///
/// let workers = PathChildrenCache::new(client, "/app/workers", true)?;
/// let events = workers.listen();
/// workers.start_with(PathChildrenCacheStartMode::PostInitializedEvent)?;
/// for event in events.iter() {
///     match event {
///         PathChildrenCacheEvent::ChildAdded(w) => println!("+ {}", w.path),
///         PathChildrenCacheEvent::ChildRemoved(w) => println!("- {}", w.path),
///         PathChildrenCacheEvent::Initialized(all) => println!("{} workers", all.len()),
///         _ => {}
///     }
/// }
/// # Ok(()) }
/// ```
///
/// Its only write is the node's create, as a container, whose retry after a
/// lost reply takes `NodeExists` as done. [`close`](Self::close) waits for
/// the cache's thread, whose requests it cancels, so it returns within
/// moments also while ZooKeeper cannot be reached; it deletes nothing.
pub struct PathChildrenCache {
    inner: Arc<Classic<PathChildrenCacheEvent>>,
}

impl PathChildrenCache {
    /// A cache of the children of `path` through `client`, not started;
    /// with `cache_data` false it keeps (and tells) their stats only, each
    /// child's `data` empty. Fails if `path` is not a valid path.
    pub fn new(client: &Client, path: &str, cache_data: bool) -> Result<PathChildrenCache> {
        let shape = Shape {
            root_cached: false,
            max_depth: 1,
            selector: None,
            cache_data,
            data_in_events: false,
            watches: true,
            ensure_root: true,
        };
        let events = Events {
            change: |change| match change {
                Change::Added(n) => PathChildrenCacheEvent::ChildAdded(n),
                Change::Updated { new, .. } => PathChildrenCacheEvent::ChildUpdated(new),
                Change::Removed(n) => PathChildrenCacheEvent::ChildRemoved(n),
                Change::Initialized(all) => PathChildrenCacheEvent::Initialized(all),
            },
            state: |state| match state {
                ConnectionState::Suspended => Some(PathChildrenCacheEvent::ConnectionSuspended),
                ConnectionState::Lost => Some(PathChildrenCacheEvent::ConnectionLost),
                ConnectionState::Connected | ConnectionState::Reconnected => {
                    Some(PathChildrenCacheEvent::ConnectionReconnected)
                }
                // `ReadOnly`, and any state a later client may add.
                _ => None,
            },
        };
        Ok(PathChildrenCache {
            inner: Classic::new(client, path, shape, events)?,
        })
    }

    /// Starts the cache in [`PathChildrenCacheStartMode::Normal`]: returns at once; the
    /// children are read in the background, each told as added.
    pub fn start(&self) -> Result<()> {
        self.start_with(PathChildrenCacheStartMode::Normal)
    }

    /// Starts the cache in `mode`, keeping the copy current on a thread of
    /// its own. With [`PathChildrenCacheStartMode::BuildInitialCache`] the children are read
    /// first on the caller's thread (waiting for a connection as the
    /// client's retry policy allows); an error then means nothing was
    /// started. Starting twice, or a closed cache, is an error.
    pub fn start_with(&self, mode: PathChildrenCacheStartMode) -> Result<()> {
        let announce = match mode {
            PathChildrenCacheStartMode::PostInitializedEvent => Announce::Once,
            _ => Announce::Never,
        };
        let silent = mode == PathChildrenCacheStartMode::BuildInitialCache;
        self.inner
            .start("latchkey-path-children-cache", announce, silent)
    }

    /// The path whose children are cached.
    pub fn path(&self) -> &str {
        self.inner.root()
    }

    /// Every child as last seen, sorted by path.
    pub fn current_data(&self) -> Vec<ChildData> {
        self.inner.entries()
    }

    /// The child at `path` (its full path) as last seen, if held.
    pub fn current_data_for(&self, path: &str) -> Option<ChildData> {
        self.inner.get(path)
    }

    /// A channel that receives every event, in order (connection events
    /// are told as the client's state changes, from another thread). It
    /// disconnects when the cache closes.
    pub fn listen(&self) -> Receiver<PathChildrenCacheEvent> {
        self.inner.listen()
    }

    /// Drops the data of the child at `path` from the copy, if its
    /// version is `if_version` (any version with `None`), to save memory
    /// once it has been used (Curator's `clearDataBytes`); false if the
    /// child is not held or of another version.
    pub fn clear_data_bytes(&self, path: &str, if_version: Option<i32>) -> bool {
        self.inner.clear_data_bytes(path, if_version)
    }

    /// Empties the copy, telling nothing (Curator's `clear()`); children
    /// read again later (when the node's children change, after a
    /// reconnection) are told as added.
    pub fn clear(&self) {
        self.inner.clear()
    }

    /// Empties the copy and reads the children again in the background,
    /// each told as added (Curator's `clearAndRefresh()`). Fails if the
    /// cache is not running.
    pub fn clear_and_refresh(&self) -> Result<()> {
        self.inner.clear_and_refresh()
    }

    /// Reads the children and their data again on the caller's thread and
    /// replaces the copy with what it read, telling nothing (Curator's
    /// `rebuild()`); the cache then looks again in the background and
    /// tells what changed since. Waits for a connection as the client's
    /// retry policy allows; fails with `IllegalState` if the cache is not
    /// running.
    pub fn rebuild(&self) -> Result<()> {
        self.inner.rebuild()
    }

    /// Reads the child at `path` again on the caller's thread and replaces
    /// it in the copy (or removes it if it is gone), telling nothing
    /// (Curator's `rebuildNode`). Fails with `InvalidArgument` if `path` is
    /// not a child of the cached node, `IllegalState` if not running.
    pub fn rebuild_node(&self, path: &str) -> Result<()> {
        self.inner.rebuild_node(path)
    }

    /// Stops the cache: its requests end at once, its thread ends, its
    /// channels disconnect; the copy stays as last seen. The watches it
    /// set are removed here (Curator's `removeWatchers()`); on the server
    /// each fires once more, to nobody, or goes with the session.
    /// Idempotent; dropping the cache does the same.
    pub fn close(&self) {
        self.inner.close()
    }
}

impl Drop for PathChildrenCache {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for PathChildrenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PathChildrenCache")
            .field("path", &self.inner.root())
            .field("size", &self.inner.size())
            .finish()
    }
}

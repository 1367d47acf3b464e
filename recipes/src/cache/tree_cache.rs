//! Curator's `TreeCache` (deprecated in Curator 5 for `CuratorCache`,
//! provided for code written against it): a local copy of a node and its
//! subtree, limited in depth and by a selector, with events for each node
//! added, updated and removed, kept current by classic watches.

use std::collections::BTreeMap;
use std::sync::Arc;

use latchkey_framework::{Client, ConnectionState, Result};

use crate::cache::classic::{Announce, Change, Classic, Events, Shape, TreeCacheSelector};
use crate::cache::node_cache::ChildData;
use crate::Receiver;

/// What a [`TreeCache`] tells (Curator's `TreeCacheEvent.Type`, each with
/// its data).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TreeCacheEvent {
    /// A node appeared (`NODE_ADDED`), with its data as read (also when the
    /// cache does not keep data).
    NodeAdded(ChildData),
    /// A node's data changed (`NODE_UPDATED`): as it was in the copy, and
    /// as read now.
    NodeUpdated {
        /// The node as the copy had it.
        old: ChildData,
        /// The node as read.
        new: ChildData,
    },
    /// A node went (`NODE_REMOVED`), as the copy had it; a subtree is told
    /// deepest first.
    NodeRemoved(ChildData),
    /// The subtree has been read in full (`INITIALIZED`): after the first
    /// read, and again after the read on each new session (after
    /// [`ConnectionLost`](Self::ConnectionLost)), after the events of what
    /// that read found changed.
    Initialized,
    /// The connection was suspended (`CONNECTION_SUSPENDED`).
    ConnectionSuspended,
    /// Connected again (`CONNECTION_RECONNECTED`); the cache reads its
    /// subtree again and tells what changed meanwhile.
    ConnectionReconnected,
    /// The session is gone (`CONNECTION_LOST`).
    ConnectionLost,
}

/// Selects everything: the default.
struct All;

impl TreeCacheSelector for All {}

/// How a [`TreeCache`] is made (Curator's `TreeCache.Builder`): from
/// [`TreeCache::builder`], then [`build`](Self::build). By default it
/// holds the whole subtree with the nodes' data.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::{TreeCache, TreeCacheSelector};
///
/// struct NotLocks;
/// impl TreeCacheSelector for NotLocks {
///     fn traverse_children(&self, path: &str) -> bool {
///         !path.ends_with("/locks")
///     }
/// }
///
/// let cache = TreeCache::builder(client, "/app")
///     .max_depth(2)
///     .selector(NotLocks)
///     .cache_data(false)
///     .create_parent_nodes(true)
///     .build()?;
/// cache.start()?;
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until `build`"]
pub struct TreeCacheBuilder {
    client: Client,
    root: String,
    cache_data: bool,
    max_depth: usize,
    selector: Arc<dyn TreeCacheSelector>,
    create_parent_nodes: bool,
    watches: bool,
}

impl TreeCacheBuilder {
    /// Whether the copy keeps the nodes' data (Curator's `setCacheData`,
    /// default true); without, their stats only, each `data` empty. Events
    /// carry the data read either way, as in Curator.
    pub fn cache_data(mut self, cache_data: bool) -> Self {
        self.cache_data = cache_data;
        self
    }

    /// The deepest level held (Curator's `setMaxDepth`): 0 is the root
    /// alone, 1 the root and its children; unbounded by default.
    pub fn max_depth(mut self, max_depth: usize) -> Self {
        self.max_depth = max_depth;
        self
    }

    /// Which nodes are held (Curator's `setSelector`); see
    /// [`TreeCacheSelector`].
    pub fn selector(mut self, selector: impl TreeCacheSelector + 'static) -> Self {
        self.selector = Arc::new(selector);
        self
    }

    /// Whether [`TreeCache::start`] creates the root, and its missing
    /// parents, as container nodes (Curator's `setCreateParentNodes`,
    /// default false).
    pub fn create_parent_nodes(mut self, create: bool) -> Self {
        self.create_parent_nodes = create;
        self
    }

    /// Reads without watches (Curator's `disableZkWatches(true)`): the
    /// subtree is read at start and after each reconnection and new
    /// session, and changes in between are not seen.
    pub fn disable_zk_watches(mut self, disable: bool) -> Self {
        self.watches = !disable;
        self
    }

    /// The cache, not started. Fails if the root is not a valid path.
    pub fn build(self) -> Result<TreeCache> {
        let shape = Shape {
            root_cached: true,
            max_depth: self.max_depth,
            selector: Some(self.selector),
            cache_data: self.cache_data,
            data_in_events: true,
            watches: self.watches,
            ensure_root: false,
        };
        let events = Events {
            change: |change| match change {
                Change::Added(n) => TreeCacheEvent::NodeAdded(n),
                Change::Updated { old, new } => TreeCacheEvent::NodeUpdated { old, new },
                Change::Removed(n) => TreeCacheEvent::NodeRemoved(n),
                Change::Initialized(_) => TreeCacheEvent::Initialized,
            },
            state: |state| match state {
                ConnectionState::Suspended => Some(TreeCacheEvent::ConnectionSuspended),
                ConnectionState::Lost => Some(TreeCacheEvent::ConnectionLost),
                ConnectionState::Reconnected => Some(TreeCacheEvent::ConnectionReconnected),
                // `Connected`, `ReadOnly`, and any state a later client may add.
                _ => None,
            },
        };
        Ok(TreeCache {
            inner: Classic::new(&self.client, &self.root, shape, events)?,
            create_parent_nodes: self.create_parent_nodes,
        })
    }
}

/// A local copy of a node and its subtree (Curator's `TreeCache`, which
/// Curator 5 deprecates in favour of [`CuratorCache`](crate::CuratorCache);
/// provided for code written against it): [`current_data`](Self::current_data)
/// and [`current_children`](Self::current_children) never wait, and
/// [`listen`](Self::listen) tells each node added, updated and removed,
/// parents before children, and the connection's changes.
///
/// As Curator's, it sets a data and a child watch on every node it holds
/// (classic one-shot watches, one per node and kind however often it is
/// read), and an existence watch on a missing root. The first read and
/// every full read go breadth-first, so nodes are told level by level.
/// After every reconnection and on a new session it reads the subtree
/// again and tells what changed meanwhile, nothing else: a node deleted
/// and created again between two reads is told removed (with its
/// subtree), then added. While the client is disconnected the copy may be
/// stale, as in Curator.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::{TreeCache, TreeCacheEvent};
///
/// let cache = TreeCache::new(client, "/config")?;
/// let events = cache.listen();
/// cache.start()?; // returns at once; the subtree is read in the background
/// for event in events.iter() {
///     match event {
///         TreeCacheEvent::Initialized => break,
///         TreeCacheEvent::NodeAdded(n) => println!("+ {}", n.path),
///         _ => {}
///     }
/// }
/// if let Some(children) = cache.current_children("/config") {
///     println!("{:?}", children.keys().collect::<Vec<_>>());
/// }
/// # Ok(()) }
/// ```
///
/// Its only write is the root's create, with
/// [`create_parent_nodes`](TreeCacheBuilder::create_parent_nodes), as a
/// container, whose retry after a lost reply takes `NodeExists` as done.
/// [`close`](Self::close) waits for the cache's thread, whose requests it
/// cancels, so it returns within moments also while ZooKeeper cannot be
/// reached; it deletes nothing.
pub struct TreeCache {
    inner: Arc<Classic<TreeCacheEvent>>,
    create_parent_nodes: bool,
}

impl TreeCache {
    /// A cache of `root` and its whole subtree through `client`, with the
    /// nodes' data, not started.
    pub fn new(client: &Client, root: &str) -> Result<TreeCache> {
        Self::builder(client, root).build()
    }

    /// A builder of a cache of `root` through `client`, to set options.
    pub fn builder(client: &Client, root: &str) -> TreeCacheBuilder {
        TreeCacheBuilder {
            client: client.clone(),
            root: root.to_owned(),
            cache_data: true,
            max_depth: usize::MAX,
            selector: Arc::new(All),
            create_parent_nodes: false,
            watches: true,
        }
    }

    /// Starts the cache: with
    /// [`create_parent_nodes`](TreeCacheBuilder::create_parent_nodes),
    /// creates the root first (waiting for a connection as the client's
    /// retry policy allows; an error means nothing was started), then
    /// returns at once and reads the subtree in the background, telling
    /// each node, then [`Initialized`](TreeCacheEvent::Initialized).
    /// Starting twice, or a closed cache, is an error.
    pub fn start(&self) -> Result<()> {
        self.inner.startable()?;
        if self.create_parent_nodes {
            self.inner.create_root()?;
        }
        self.inner
            .start("latchkey-tree-cache", Announce::EverySession, false)
    }

    /// The root's path.
    pub fn path(&self) -> &str {
        self.inner.root()
    }

    /// The node at `path` as last seen, if the cache holds it.
    pub fn current_data(&self, path: &str) -> Option<ChildData> {
        self.inner.get(path)
    }

    /// The children the cache holds of the node at `path`, by name; `None`
    /// if it does not hold that node (an empty map for a held node whose
    /// children are not held, below the maximum depth or not selected).
    pub fn current_children(&self, path: &str) -> Option<BTreeMap<String, ChildData>> {
        self.inner.children(path)
    }

    /// Every node held, sorted by path (Curator's `iterator()`).
    pub fn entries(&self) -> Vec<ChildData> {
        self.inner.entries()
    }

    /// How many nodes the cache holds (Curator's `size()`).
    pub fn size(&self) -> usize {
        self.inner.size()
    }

    /// A channel that receives every event, in order (connection events
    /// are told as the client's state changes, from another thread). It
    /// disconnects when the cache closes.
    pub fn listen(&self) -> Receiver<TreeCacheEvent> {
        self.inner.listen()
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

impl Drop for TreeCache {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for TreeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeCache")
            .field("root", &self.inner.root())
            .field("size", &self.inner.size())
            .finish()
    }
}

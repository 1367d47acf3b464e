//! Curator's `NodeCache`: a local copy of one node (its data and stat, or
//! its absence), kept current by a watch and re-read after every
//! reconnection and new session, so that it converges to the server's
//! state after any fault.

use std::sync::Arc;

use crossbeam_channel::{unbounded, Receiver, Sender};
use latchkey_framework::{Client, Error, ErrorCode, Result, Stat};
use parking_lot::Mutex;

use crate::armed::{read_watched, waking, WatchArms};
use crate::keeper::{Keeper, Kept};
use crate::locks::lock_internals::validate_any_path;

/// A node as a cache saw it (Curator's `ChildData`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChildData {
    /// The node's path (relative to the client's namespace).
    pub path: String,
    /// Its stat when read.
    pub stat: Stat,
    /// Its data when read.
    pub data: Vec<u8>,
}

impl ChildData {
    /// A node from its parts (Curator's `new ChildData(path, stat, data)`).
    pub fn new(path: impl Into<String>, stat: Stat, data: Vec<u8>) -> ChildData {
        ChildData {
            path: path.into(),
            stat,
            data,
        }
    }
}

/// A local copy of one node, kept current in the background (Curator's
/// `NodeCache`): [`current_data`](Self::current_data) never waits, and
/// [`listen`](Self::listen) tells each change.
///
/// The copy is re-read whenever the node changes (one watch at a time),
/// after every reconnection (changes made while the client was
/// disconnected are picked up) and on a new session. While the client is
/// disconnected the copy may be stale, as in Curator. The cache stops when
/// closed or dropped; it keeps its client open until then.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_recipes::NodeCache;
///
/// let config = NodeCache::new(client, "/config/feature-flags")?;
/// config.start()?; // reads the node once before returning
/// if let Some(node) = config.current_data() {
///     println!("flags: {:?}", String::from_utf8_lossy(&node.data));
/// }
/// let changes = config.listen();
/// while let Ok(node) = changes.recv_timeout(Duration::from_secs(60)) {
///     println!("now {:?}", node.map(|n| n.data));
/// }
/// # Ok(()) }
/// ```
///
/// The cache only reads: it makes no write that a lost reply could leave in
/// doubt. [`close`](Self::close) waits for the cache's thread, whose
/// requests it cancels, so it returns within moments also while ZooKeeper
/// cannot be reached; the cache's one-shot watch is removed in the client
/// (on the server it fires once more, to nobody, or goes with the
/// session). After a close, [`start`](Self::start) and
/// [`rebuild`](Self::rebuild) fail with [`Error::IllegalState`].
pub struct NodeCache {
    inner: Arc<Inner>,
}

struct Inner {
    /// The cache's requests end at once when it is closed.
    client: Client,
    path: String,
    current: Mutex<Option<ChildData>>,
    subscribers: Mutex<Vec<Sender<Option<ChildData>>>>,
    /// The watch on the node still pending, so that re-reads after a
    /// reconnection do not pile up watches.
    armed: Arc<WatchArms<()>>,
    keeper: Keeper,
}

impl NodeCache {
    /// A cache of `path` through `client`, not started yet.
    pub fn new(client: &Client, path: &str) -> Result<NodeCache> {
        // Any node may be cached, `/` and `/zookeeper/config` included.
        validate_any_path(path)?;
        let keeper = Keeper::default();
        Ok(NodeCache {
            inner: Arc::new(Inner {
                // Its own watch group, so that closing removes its watches.
                client: client
                    .with_watcher_removal()
                    .with_cancel(Some(keeper.cancel_token())),
                path: path.to_owned(),
                current: Mutex::new(None),
                subscribers: Mutex::new(Vec::new()),
                armed: Arc::default(),
                keeper,
            }),
        })
    }

    /// Reads the node (waiting for a connection as the client's retry
    /// policy allows) and then keeps the copy current in the background,
    /// on a thread of its own. Fails if the first read fails; starting a
    /// started or closed cache is an error.
    pub fn start(&self) -> Result<()> {
        let inner = &self.inner;
        Keeper::start(
            inner,
            "latchkey-node-cache",
            &inner.client,
            Some(&|| inner.refresh()),
        )
    }

    /// The node as last seen: `None` if it did not exist (or the cache has
    /// not read it yet).
    pub fn current_data(&self) -> Option<ChildData> {
        self.inner.current.lock().clone()
    }

    /// The path of the cached node.
    pub fn path(&self) -> &str {
        &self.inner.path
    }

    /// A channel that receives the node each time the cache sees it change
    /// (`None`: deleted), in order; changes in quick succession may arrive
    /// as only the last one. It disconnects when the cache closes.
    pub fn listen(&self) -> Receiver<Option<ChildData>> {
        let (tx, rx) = unbounded();
        self.inner.subscribers.lock().push(tx);
        rx
    }

    /// Reads the node again now, on the caller's thread, and replaces the
    /// copy with what it read (Curator's `NodeCache.rebuild()`): when it
    /// returns `Ok`, [`current_data`](Self::current_data) is the node as
    /// read then (`None` if it did not exist), also if the cache's watch
    /// has not told of a change yet (its event held up by the network, or
    /// the change made while the client was cut off).
    ///
    /// As in Curator, a rebuild tells [`listen`](Self::listen)ers nothing,
    /// whether or not the node changed; the cache then looks again in the
    /// background (re-arming its watch), which tells nothing either unless
    /// the node changed since the rebuild read it. A copy the cache got
    /// meanwhile of a later version of the same node is kept.
    ///
    /// Waits for a connection as the client's retry policy allows. Fails
    /// with [`Error::IllegalState`] if the cache is not started or is
    /// closed; a close during the read ends it with `Cancelled`.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use latchkey_recipes::NodeCache;
    ///
    /// let config = NodeCache::new(client, "/config/feature-flags")?;
    /// config.start()?;
    /// // ... after an outage, before acting on the flags:
    /// config.rebuild()?; // the node as it is now, not as last watched
    /// println!("flags: {:?}", config.current_data().map(|n| n.data));
    /// # Ok(()) }
    /// ```
    pub fn rebuild(&self) -> Result<()> {
        let inner = &self.inner;
        if !inner.keeper.is_running() {
            return Err(Error::IllegalState(format!(
                "the node cache of {} is {}",
                inner.path,
                if inner.keeper.is_closed() {
                    "closed"
                } else {
                    "not started"
                }
            )));
        }
        let now = match inner.client.get_data(&inner.path) {
            Ok((data, stat)) => Some(ChildData {
                path: inner.path.clone(),
                stat,
                data,
            }),
            Err(e) if e.is(ErrorCode::NoNode) => None,
            Err(e) => return Err(e),
        };
        {
            let mut current = inner.current.lock();
            let newer_kept = match (current.as_ref(), now.as_ref()) {
                (Some(kept), Some(read)) => {
                    kept.stat.czxid == read.stat.czxid && kept.stat.mzxid > read.stat.mzxid
                }
                _ => false,
            };
            if !newer_kept {
                *current = now;
            }
        }
        // Look again in the background: re-arms the watch if need be.
        inner.keeper.signal().notify();
        Ok(())
    }

    /// Stops the cache: its requests end at once, its thread ends, its
    /// channels disconnect; [`current_data`](Self::current_data) keeps the
    /// last copy. Idempotent; dropping the cache does the same.
    pub fn close(&self) {
        if self.inner.keeper.close() {
            self.inner.subscribers.lock().clear();
            // Its one-shot watches, here only (Curator's removeWatchers).
            if let Err(e) = self.inner.client.remove_watchers() {
                log::debug!("closing the cache of {}: {e}", self.inner.path);
            }
        }
    }
}

impl Drop for NodeCache {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for NodeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCache")
            .field("path", &self.inner.path)
            .field("current", &self.current_data())
            .finish()
    }
}

impl Kept for Inner {
    fn keeper(&self) -> &Keeper {
        &self.keeper
    }
    fn work(&self) -> Result<()> {
        self.refresh()
    }
    fn what(&self) -> String {
        format!("the node cache of {}", self.path)
    }
}

impl Inner {
    /// Reads the node, arming a watch unless one of this session is still
    /// pending, and tells subscribers if it changed.
    fn refresh(&self) -> Result<()> {
        let path = &self.path;
        let stat = read_watched(
            &self.armed,
            &(),
            &self.client,
            waking(self.keeper.signal()),
            |w| self.client.exists_watch(path, w),
            || self.client.exists(path),
        )?;
        let now = match stat {
            None => None,
            Some(_) => match self.client.get_data(&self.path) {
                Ok((data, stat)) => Some(ChildData {
                    path: self.path.clone(),
                    stat,
                    data,
                }),
                // Deleted since: the exists watch tells us (it fires).
                Err(e) if e.is(ErrorCode::NoNode) => None,
                Err(e) => return Err(e),
            },
        };
        let changed = {
            let mut current = self.current.lock();
            let changed = !same_node(current.as_ref(), now.as_ref());
            if changed {
                current.clone_from(&now);
            }
            changed
        };
        if changed {
            self.subscribers
                .lock()
                .retain(|tx| tx.send(now.clone()).is_ok());
        }
        Ok(())
    }
}

/// Whether two reads saw the same version of the node (or both no node).
fn same_node(a: Option<&ChildData>, b: Option<&ChildData>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.stat.czxid == b.stat.czxid && a.stat.mzxid == b.stat.mzxid,
        _ => false,
    }
}

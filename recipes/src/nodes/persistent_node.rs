//! Curator's `PersistentNode`: a node that stays present while the object
//! lives, re-created after a session loss or a delete by someone else, with
//! data that can be updated; and `GroupMember`, membership of a group built
//! on it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use latchkey_framework::paths;
use latchkey_framework::{Client, CreateMode, Error, ErrorCode, Result, HANDOVER_AFTER};
use parking_lot::{Condvar, Mutex};

use crate::armed::{read_watched, waking, WatchArms};
use crate::cache::curator_cache::CuratorCache;
use crate::fence::{self, Fence, Fenced};
use crate::keeper::{Keeper, Kept};
use crate::locks::lock_internals::{
    deadline_after, delete_if_lost, validate_any_path, validate_node_size,
};

/// A node kept present for as long as this object lives (Curator's
/// `PersistentNode`): created when started, re-created when it goes (its
/// session lost, deleted by someone else), its data kept to the latest
/// [`set_data`](Self::set_data), deleted when closed or dropped.
///
/// With a sequential mode the server names the node the first time; it is
/// re-created under that same name, as Curator does. With protection the
/// name carries Curator's `_c_<uuid>-` prefix, so a create whose reply was
/// lost is found instead of made twice. Until the client hears that its
/// session was lost, the node of that session may still be listed; an
/// ephemeral node is back within a round trip of the new session. An
/// ephemeral node of a session the client declared lost is deleted from
/// the next session, if still that session's (see
/// [`Client::delete_when_session_lost`]), and so made again by the new
/// session at once: a server restarted within the session timeout
/// restores the old session, whose node would otherwise stay until the
/// server expires it, and then vanish until re-created (Curator waits
/// for that).
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_framework::CreateMode;
/// use latchkey_recipes::PersistentNode;
///
/// let node = PersistentNode::new(client, CreateMode::Ephemeral, false, "/services/api/host-1", b"10.0.0.1:8080")?;
/// node.start()?;
/// if !node.wait_for_initial_create(Duration::from_secs(10))? {
///     eprintln!("not registered yet; it keeps trying");
/// }
/// // ... serve; the node comes back if the session is lost ...
/// node.set_data(b"10.0.0.1:8081")?;
/// node.close(); // or drop it
/// # Ok(()) }
/// ```
///
/// # In-doubt writes
///
/// Creates are retried after a lost reply, and what the retry meets
/// depends on the mode. With protection it finds the node by its
/// `_c_<uuid>-` prefix (a create that fails in the end leaves the client a
/// background job that deletes any node it made). A plain name meets
/// `NodeExists`: the node is then taken as one that was there already, our
/// data written to it, and [`listen`](Self::listen) is not told of it. An
/// unprotected sequential mode makes a second node, and the first one
/// stays (an ephemeral one until its session ends, a persistent one for
/// good): use protection with sequential modes. Data writes are
/// `set_data` without a version: [`set_data`](Self::set_data) tries once
/// and leaves a write that failed, reply lost or not, to the node's
/// thread, which writes the latest data again, so both end with the node
/// holding the latest data. A [fenced](Self::fenced) write that fails
/// after its request was sent leaves [`data`](Self::data) as it was,
/// though the node may hold the new data.
///
/// # Close
///
/// [`close`](Self::close) (or drop) waits for the node's thread, whose
/// requests it cancels, so it returns within moments; then the delete
/// waits at most [`HANDOVER_AFTER`] for ZooKeeper and goes on in the
/// client's background. The watch on the node fires with its deletion.
/// After a close, [`set_data`](Self::set_data) and [`start`](Self::start)
/// fail with [`Error::IllegalState`]; [`actual_path`](Self::actual_path)
/// keeps the last path.
pub struct PersistentNode {
    inner: Arc<Inner>,
}

struct Inner {
    /// The keeper's requests; they end at once when the node is closed.
    client: Client,
    /// For the delete on close, which must not be cancelled.
    plain: Client,
    base_path: String,
    mode: CreateMode,
    protected: bool,
    /// Missing parents are created (as containers); see
    /// [`PersistentNode::without_parent_creation`].
    parent_creation: AtomicBool,
    /// The last create failed for want of a parent, not created.
    parent_failure: AtomicBool,
    /// The last create or write of data was refused `NoAuth`.
    auth_failure: AtomicBool,
    /// Delete the node on close (Curator's `deleteNode`; `PersistentTtlNode`
    /// leaves it to its TTL).
    delete_on_close: bool,
    state: Mutex<NodeState>,
    /// Held while the node's data is written (or the node created with
    /// it), by the node's thread or by `set_data`: each takes the data
    /// under it, so writes reach ZooKeeper in the order their data was set.
    writes: Mutex<()>,
    /// Notified when the node is created for the first time.
    created: Condvar,
    /// The watch on the node still pending.
    armed: Arc<WatchArms<()>>,
    keeper: Keeper,
    /// Told the node's path each time this node creates it.
    listeners: Mutex<Vec<Sender<String>>>,
}

/// How a [`PersistentNode`] is created and left, for recipes built on it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeOptions {
    /// Create missing parents as containers (Curator's `useParentCreation`).
    pub(crate) create_parents: bool,
    /// Delete the node on close (Curator's `deleteNode`; `PersistentTtlNode`
    /// leaves it to its TTL).
    pub(crate) delete_on_close: bool,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            create_parents: true,
            delete_on_close: true,
        }
    }
}

struct NodeState {
    data: Vec<u8>,
    /// The node's full path once created; kept for re-creating it.
    actual: Option<String>,
    /// `data` not yet written to the node.
    dirty: bool,
    /// A first create was sent: the server may have made the node even
    /// if no answer came (the close cancelled it).
    create_sent: bool,
}

impl PersistentNode {
    /// A node at `path` (the base name for a sequential `mode`) holding
    /// `data`, not created until [`start`](Self::start). `protected`
    /// creates it in Curator's protected mode. Fails on an invalid path,
    /// on `/`, on a container `mode`, and on data that with the path is
    /// more than one ZooKeeper request carries (about 1 MiB).
    pub fn new(
        client: &Client,
        mode: CreateMode,
        protected: bool,
        path: &str,
        data: &[u8],
    ) -> Result<PersistentNode> {
        Self::with_options(client, mode, protected, path, data, NodeOptions::default())
    }

    /// [`new`](Self::new) with `options`.
    pub(crate) fn with_options(
        client: &Client,
        mode: CreateMode,
        protected: bool,
        path: &str,
        data: &[u8],
        options: NodeOptions,
    ) -> Result<PersistentNode> {
        validate_any_path(path)?;
        if path == "/" {
            return Err(Error::InvalidPath {
                path: path.into(),
                reason: "the root cannot be created".into(),
            });
        }
        if mode == CreateMode::Container {
            return Err(Error::InvalidArgument(format!(
                "a persistent node at {path} cannot be a container (the server deletes those)"
            )));
        }
        // Else never created: the server drops the connection of each try.
        validate_node_size("persistent node", path, data)?;
        let keeper = Keeper::default();
        Ok(PersistentNode {
            inner: Arc::new(Inner {
                client: client.with_cancel(Some(keeper.cancel_token())),
                plain: client.with_cancel(None),
                base_path: path.to_owned(),
                mode,
                protected,
                parent_creation: AtomicBool::new(options.create_parents),
                parent_failure: AtomicBool::new(false),
                auth_failure: AtomicBool::new(false),
                delete_on_close: options.delete_on_close,
                state: Mutex::new(NodeState {
                    data: data.to_vec(),
                    actual: None,
                    dirty: false,
                    create_sent: false,
                }),
                writes: Mutex::new(()),
                created: Condvar::new(),
                armed: Arc::default(),
                keeper,
                listeners: Mutex::new(Vec::new()),
            }),
        })
    }

    /// A channel that receives the node's full path (its
    /// [`actual_path`](Self::actual_path)) each time this node creates it,
    /// from now on, in order: the first create, and every re-create after
    /// a delete by someone else or a lost session (Curator's
    /// `PersistentNode.getListenable()` and its `nodeCreated(path)`).
    ///
    /// As in Curator, only a create of ours that ZooKeeper answered tells:
    /// a node found there already and adopted (someone else's, or ours
    /// from an earlier session) does not, nor does a write of new data. It
    /// disconnects when the node is closed (at once if it is closed
    /// already); dropping the receiver removes it.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use std::time::Duration;
    /// use latchkey_framework::CreateMode;
    /// use latchkey_recipes::PersistentNode;
    ///
    /// let node = PersistentNode::new(client, CreateMode::Ephemeral, false, "/services/api/host-1", b"10.0.0.1:8080")?;
    /// let created = node.listen();
    /// node.start()?;
    /// while let Ok(path) = created.recv_timeout(Duration::from_secs(60)) {
    ///     println!("registered as {path}"); // again after each re-create
    /// }
    /// # Ok(()) }
    /// ```
    pub fn listen(&self) -> Receiver<String> {
        let (tx, rx) = unbounded();
        let mut listeners = self.inner.listeners.lock();
        // Under the lock `close` clears them with, after marking closed.
        if !self.inner.keeper.is_closed() {
            listeners.push(tx);
        }
        rx
    }

    /// Starts keeping the node, on a thread of its own; returns at once
    /// (see [`wait_for_initial_create`](Self::wait_for_initial_create)).
    /// Starting twice, or after closing, is an error.
    pub fn start(&self) -> Result<()> {
        let inner = &self.inner;
        Keeper::start(inner, "latchkey-persistent-node", &inner.client, None)
    }

    /// Waits until the node has been created once, at most `timeout`
    /// (`Duration::MAX`: as long as it takes); false if it was not by then
    /// (it keeps trying).
    pub fn wait_for_initial_create(&self, timeout: Duration) -> Result<bool> {
        let deadline = deadline_after(timeout);
        let mut state = self.inner.state.lock();
        while state.actual.is_none() {
            if self.inner.keeper.is_closed() {
                return Err(Error::IllegalState(format!(
                    "the persistent node {} is closed",
                    self.inner.base_path
                )));
            }
            match deadline {
                Some(d) => {
                    if self.inner.created.wait_until(&mut state, d).timed_out() {
                        return Ok(state.actual.is_some());
                    }
                }
                None => self.inner.created.wait(&mut state),
            }
        }
        Ok(true)
    }

    /// Does not create the node's missing parents (Curator's
    /// `useParentCreation = false`): while a parent is missing the node is
    /// not created (or created again), [`is_parent_creation_failure`]
    /// says so, and [`set_data`](Self::set_data) is refused. It tries
    /// again when the client connects again or the node's thread is woken
    /// otherwise, as Curator's does on reconnection. By default parents are
    /// created, as containers. Give it before [`start`](Self::start).
    ///
    /// [`is_parent_creation_failure`]: Self::is_parent_creation_failure
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use latchkey_framework::CreateMode;
    /// use latchkey_recipes::PersistentNode;
    ///
    /// // Registered only while /services/api exists: deleting it deregisters.
    /// let node = PersistentNode::new(client, CreateMode::Ephemeral, false, "/services/api/host-1", b"")?
    ///     .without_parent_creation();
    /// node.start()?;
    /// if node.is_parent_creation_failure() {
    ///     eprintln!("/services/api is missing");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn without_parent_creation(self) -> Self {
        self.inner.parent_creation.store(false, Ordering::Release);
        self
    }

    /// Whether the node's last create failed because a parent is missing
    /// (only [`without_parent_creation`](Self::without_parent_creation);
    /// Curator's `isParentCreationFailure`).
    pub fn is_parent_creation_failure(&self) -> bool {
        self.inner.parent_failure.load(Ordering::Acquire)
    }

    /// Whether ZooKeeper refused the node's last create or write of its
    /// data for want of permission (`NoAuth`; Curator's `isAuthFailure`).
    /// The node's thread keeps trying (each second or so), in case the
    /// permission is granted; a create or write that succeeds clears it.
    pub fn is_auth_failure(&self) -> bool {
        self.inner.auth_failure.load(Ordering::Acquire)
    }

    /// The node's full path once created (with its sequence number or
    /// protection prefix, if any).
    pub fn actual_path(&self) -> Option<String> {
        self.inner.state.lock().actual.clone()
    }

    /// This node with its data writes fenced by `fence`, a hold such as a
    /// [`Leadership`](crate::Leadership) or a
    /// [`MutexGuard`](crate::MutexGuard) (see [`crate::Fence`]).
    ///
    /// ```no_run
    /// # fn f(node: &latchkey_recipes::PersistentNode, guard: &latchkey_recipes::MutexGuard<'_>) -> latchkey_framework::Result<()> {
    /// node.fenced(guard).set_data(b"epoch 8")?; // refused once the lock is lost
    /// # Ok(()) }
    /// ```
    pub fn fenced<'a>(&'a self, fence: &'a dyn Fence) -> Fenced<'a, PersistentNode> {
        Fenced::new(self, fence)
    }

    /// The data the node is kept at.
    pub fn data(&self) -> Vec<u8> {
        self.inner.state.lock().data.clone()
    }

    /// Sets the node's data, used whenever it is re-created. While the
    /// node exists and the client is connected it is written before this
    /// returns, as Curator's `setData` sends its write before returning (a
    /// read on the same client then sees it): the call waits at most
    /// [`HANDOVER_AFTER`] for a write of the node's thread under way, and
    /// as long for ZooKeeper's answer. Otherwise, or if that write fails,
    /// the node's thread writes it as soon as it can. Before the first
    /// create it is the data the node is created with (Curator refuses a
    /// `setData` then). Fails on a closed node, while its parent is
    /// missing without [parent creation](Self::without_parent_creation),
    /// and, keeping the data it had, on data longer than ZooKeeper takes
    /// ([`Error::RequestTooLarge`], found when it writes now).
    pub fn set_data(&self, data: &[u8]) -> Result<()> {
        if self.inner.keeper.is_closed() {
            return Err(Error::IllegalState(format!(
                "the persistent node {} is closed",
                self.inner.base_path
            )));
        }
        if self.is_parent_creation_failure() {
            return Err(Error::IllegalState(format!(
                "the persistent node {} cannot be created: a parent is missing \
                 (parent creation is off)",
                self.inner.base_path
            )));
        }
        let previous = {
            let mut state = self.inner.state.lock();
            state.dirty = true;
            std::mem::replace(&mut state.data, data.to_vec())
        };
        match self.inner.write_now() {
            Ok(true) => {}
            Ok(false) => self.inner.keeper.signal().notify(),
            Err(e) => {
                // Never writable: back to the data before, unless newer
                // data came meanwhile; written again in case that data
                // was not yet.
                let mut state = self.inner.state.lock();
                if state.data == data {
                    state.data = previous;
                }
                state.dirty = true;
                drop(state);
                self.inner.keeper.signal().notify();
                return Err(e);
            }
        }
        Ok(())
    }

    /// Stops keeping the node and deletes it (guaranteed: the client
    /// retries in the background if ZooKeeper cannot be reached). Its
    /// requests under way end at once; a first create cut short that the
    /// server applied all the same is deleted too (found by its name, or
    /// by its protection prefix; an unprotected sequential node's name is
    /// unknown, so use protection with sequential modes). A plain node
    /// started and closed before its first create was sent deletes the
    /// node at its path all the same, as Curator's does: a node there
    /// already is adopted once started. Idempotent; dropping does the
    /// same.
    pub fn close(&self) {
        // Started: the node at its path is ours to delete, also if the
        // close came before the first create was sent (a plain node that
        // was there already is adopted at start, as in Curator).
        let was_started = self.inner.keeper.is_running();
        if !self.inner.keeper.close() {
            return;
        }
        // The node's thread has ended: nothing is told any more.
        self.inner.listeners.lock().clear();
        {
            // Under the lock its waiters check `is_closed` with.
            let _state = self.inner.state.lock();
            self.inner.created.notify_all();
        }
        if !self.inner.delete_on_close {
            return;
        }
        // The node's thread has ended: `actual` is final. A first create
        // cut short by the close may have made the node all the same; a
        // plain one is deleted by its name, a protected one by the
        // client's clean-up of protected creates that got no answer.
        let path = {
            let s = self.inner.state.lock();
            match (&s.actual, s.create_sent) {
                (Some(path), _) => Some(path.clone()),
                (None, true) if !self.inner.mode.is_sequential() => {
                    Some(self.inner.base_path.clone())
                }
                (None, true) if !self.inner.protected => {
                    log::warn!(
                        "the persistent node {} was closed during its first create: \
                         a node the server made is left (an unprotected sequential \
                         name cannot be found)",
                        self.inner.base_path
                    );
                    None
                }
                (None, false) if was_started && !self.inner.mode.is_sequential() => {
                    Some(self.inner.base_path.clone())
                }
                (None, _) => None,
            }
        };
        if let Some(path) = path {
            self.inner.plain.keep_when_session_lost(&path);
            if let Err(e) = self.inner.plain.delete().in_background().for_path(&path) {
                log::warn!("deleting the persistent node {path}: {e}");
            }
        }
    }
}

impl Fenced<'_, PersistentNode> {
    /// Writes the node's data now, only while the fence stands, and keeps
    /// it for re-creates once written. Unlike
    /// [`PersistentNode::set_data`] nothing is left to the node's thread:
    /// it fails, keeping the data the node had, with
    /// [`Error::FenceGone`] once the hold has ended, with `NoNode` while
    /// the node does not exist (it is being created or re-created; try
    /// again), and on a closed node. After an error that it may or may not
    /// have run (`ConnectionLoss`), the node may hold `data` while the data
    /// kept for re-creates is still the old: call it again until it
    /// answers, or the hold ends.
    pub fn set_data(&self, data: &[u8]) -> Result<()> {
        let inner = &self.recipe.inner;
        if inner.keeper.is_closed() {
            return Err(Error::IllegalState(format!(
                "the persistent node {} is closed",
                inner.base_path
            )));
        }
        // Under the write lock, so no write of the node's thread lands
        // between this one and the data kept.
        let _writing = inner.writes.lock();
        let Some(path) = inner.state.lock().actual.clone() else {
            return Err(Error::Zk {
                code: ErrorCode::NoNode,
                path: Some(inner.base_path.clone()),
            });
        };
        let fence = fence::fence_for(&inner.client, self.fence, "set_data", &path)?;
        inner.client.set_data_fenced(&fence, &path, data, None)?;
        inner.state.lock().data = data.to_vec();
        Ok(())
    }
}

impl Drop for PersistentNode {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for PersistentNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentNode")
            .field("path", &self.inner.base_path)
            .field("actual", &self.actual_path())
            .finish()
    }
}

impl Kept for Inner {
    fn keeper(&self) -> &Keeper {
        &self.keeper
    }
    fn work(&self) -> Result<()> {
        self.ensure()
    }
    fn what(&self) -> String {
        format!("the persistent node {}", self.base_path)
    }
}

impl Inner {
    /// Writes the latest data to the node from the caller's thread (see
    /// [`PersistentNode::set_data`]): true if it is written, false if
    /// that is left to the node's thread (not running, not connected, no
    /// node yet, its write under way for too long, or this write failed),
    /// an error if the data can never be written (too long).
    fn write_now(&self) -> Result<bool> {
        if !self.keeper.is_running() || !self.client.state().is_some_and(|s| s.is_connected()) {
            return Ok(false);
        }
        let Some(_writing) = self.writes.try_lock_for(HANDOVER_AFTER) else {
            return Ok(false);
        };
        let (path, data) = {
            let mut s = self.state.lock();
            let Some(path) = s.actual.clone() else {
                return Ok(false);
            };
            if !s.dirty {
                // The node's thread took this data and has written it
                // (a failed write marks it again).
                return Ok(true);
            }
            s.dirty = false;
            (path, s.data.clone())
        };
        let bounded = self
            .client
            .with_deadline(Some(Instant::now() + HANDOVER_AFTER));
        let written = bounded.set_data_once(&path, &data, None);
        self.note_auth(written.as_ref().map(|_| ()), true);
        match written {
            Ok(_) => Ok(true),
            Err(e) if too_large(&e) => Err(e),
            Err(e) => {
                log::debug!("writing the persistent node {path}: {e}; left to its thread");
                self.state.lock().dirty = true;
                Ok(false)
            }
        }
    }

    /// Creates the node if it is missing, watches it, and writes new data.
    fn ensure(&self) -> Result<()> {
        // Data is taken and written under this lock, as by `write_now`.
        let _writing = self.writes.lock();
        // The data and its mark are taken together: a `set_data` from now
        // on marks its data again, for the next pass.
        let (actual, data, mut dirty) = {
            let mut s = self.state.lock();
            (
                s.actual.clone(),
                s.data.clone(),
                std::mem::take(&mut s.dirty),
            )
        };
        let creating = actual.is_none();
        let result = match actual {
            None => self.create_first(&data),
            Some(path) => match self.watch(&path) {
                Ok(None) => {
                    // Should the re-create fail, the node someone makes
                    // meanwhile gets our data.
                    dirty = true;
                    self.recreate(&path, &data)
                }
                Ok(Some(_)) if dirty => match self.client.set_data(&path, &data, None) {
                    // Gone meanwhile: the watch fires and we create it.
                    Err(e) if e.is(ErrorCode::NoNode) => Ok(()),
                    other => other.map(|_| ()),
                },
                other => other.map(|_| ()),
            },
        };
        if result.is_err() && dirty {
            // Not written: the next try writes it.
            self.state.lock().dirty = true;
        }
        self.note_auth(result.as_ref().map(|_| ()), creating || dirty);
        result
    }

    /// Marks a create or write refused for want of permission; clears
    /// the mark when one succeeds (`wrote`: this pass created or wrote).
    fn note_auth(&self, result: std::result::Result<(), &Error>, wrote: bool) {
        match result {
            Err(e) if e.is(ErrorCode::NoAuth) => self.auth_failure.store(true, Ordering::Release),
            Ok(()) if wrote => self.auth_failure.store(false, Ordering::Release),
            _ => {}
        }
    }

    /// A create of the node, its parents too unless parent creation is
    /// off.
    fn create_builder(&self, mode: CreateMode) -> latchkey_framework::CreateBuilder<'_> {
        let builder = self.client.create().mode(mode);
        match self.parent_creation.load(Ordering::Acquire) {
            true => builder.creating_parent_containers_if_needed(),
            false => builder,
        }
    }

    /// Whether a failed create is for want of a parent that we may not
    /// create; then marked, and not an error to retry (Curator's waits for
    /// a reconnection).
    fn parent_missing(&self, created: &Result<String>) -> bool {
        let missing = !self.parent_creation.load(Ordering::Acquire)
            && created.as_ref().is_err_and(|e| e.is(ErrorCode::NoNode));
        self.parent_failure.store(missing, Ordering::Release);
        if missing {
            log::warn!(
                "the persistent node {}: a parent is missing, and parent creation is off",
                self.base_path
            );
        }
        missing
    }

    fn create_first(&self, data: &[u8]) -> Result<()> {
        let builder = self.create_builder(self.mode);
        let builder = match self.protected {
            true => builder.with_protection(),
            false => builder,
        };
        self.state.lock().create_sent = true;
        let created = builder
            .for_path_with_stat(&self.base_path, data)
            .map(|(path, stat)| self.owned(path, &stat));
        if created
            .as_ref()
            .is_err_and(|e| e.code().is_some() && !e.is_retryable())
        {
            // ZooKeeper refused it: no node (an earlier attempt's would
            // have made this one `NodeExists`).
            self.state.lock().create_sent = false;
        }
        if self.parent_missing(&created) {
            return Ok(());
        }
        let (path, made) = match created {
            // A plain node that is there already (ours from an earlier
            // session, or someone's): keep it, with our data, written
            // before the first create counts as done (as Curator's
            // `waitForInitialCreate` waits for that write). Gone
            // meanwhile: the next pass creates it.
            Err(e) if e.is(ErrorCode::NodeExists) => {
                self.client.set_data(&self.base_path, data, None)?;
                (self.base_path.clone(), false)
            }
            other => (other?, true),
        };
        {
            let mut state = self.state.lock();
            state.actual = Some(path.clone());
            if made {
                // Told before `wait_for_initial_create` can see the path.
                self.tell_created(&path);
            }
        }
        self.created.notify_all();
        self.watch_created(&path)
    }

    /// Creates the node again under its first name: a sequential mode
    /// becomes its plain form, as in Curator.
    fn recreate(&self, path: &str, data: &[u8]) -> Result<()> {
        let mode = match self.mode {
            CreateMode::EphemeralSequential => CreateMode::Ephemeral,
            CreateMode::PersistentSequential => CreateMode::Persistent,
            CreateMode::PersistentSequentialWithTtl(ttl) => CreateMode::PersistentWithTtl(ttl),
            other => other,
        };
        let created = self
            .create_builder(mode)
            .for_path_with_stat(path, data)
            .map(|(path, stat)| self.owned(path, &stat));
        if self.parent_missing(&created) {
            return Ok(());
        }
        match created {
            // Someone (or our previous session) made it meanwhile: write
            // our data to it.
            Err(e) if e.is(ErrorCode::NodeExists) => {
                self.state.lock().dirty = true;
                self.keeper.signal().notify();
                Ok(())
            }
            Err(e) => Err(e),
            Ok(_) => {
                self.tell_created(path);
                self.watch_created(path)
            }
        }
    }

    /// `path`, the node just created with `stat`: an ephemeral one is
    /// registered for deletion should its session be declared lost.
    fn owned(&self, path: String, stat: &latchkey_framework::Stat) -> String {
        if stat.ephemeral_owner != 0 {
            delete_if_lost(&self.plain, &path, stat.ephemeral_owner);
        }
        path
    }

    /// Tells the listeners that we created the node at `path`.
    fn tell_created(&self, path: &str) {
        self.listeners
            .lock()
            .retain(|tx| tx.send(path.to_owned()).is_ok());
    }

    /// Watches the node just created. Gone already (deleted before the
    /// watch was set, so no event will come): the next pass creates it
    /// again, as Curator's `watchNode` does on `NoNode`.
    fn watch_created(&self, path: &str) -> Result<()> {
        if self.watch(path)?.is_none() {
            self.keeper.signal().notify();
        }
        Ok(())
    }

    /// Whether the node exists, leaving a watch on it unless one of this
    /// session is pending already.
    fn watch(&self, path: &str) -> Result<Option<latchkey_framework::Stat>> {
        read_watched(
            &self.armed,
            &(),
            &self.client,
            waking(self.keeper.signal()),
            |w| self.client.exists_watch(path, w),
            || self.client.exists(path),
        )
    }
}

/// Whether `e` is a request too long for ZooKeeper, which no retry fixes.
fn too_large(e: &Error) -> bool {
    match e {
        Error::RequestTooLarge { .. } => true,
        Error::Operation { source, .. } => too_large(source),
        _ => false,
    }
}

/// Membership of a group (Curator's `GroupMember`): an ephemeral
/// [`PersistentNode`] named by this member's id under the group's path,
/// holding its payload, and the current members from a [`CuratorCache`]
/// of the group, kept by watches.
///
/// As in Curator, [`current_members`](Self::current_members) answers from
/// the cache: it never waits on ZooKeeper (also while partitioned, when it
/// tells the members last seen), and always lists this member, with its
/// own data, also before its node exists.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::GroupMember;
///
/// let me = GroupMember::new(client, "/groups/workers", "worker-1", b"10.0.0.1")?;
/// me.start()?;
/// // At once, without a round trip: this member, and the others seen so far.
/// for (id, payload) in me.current_members() {
///     println!("{id}: {}", String::from_utf8_lossy(&payload));
/// }
/// # Ok(()) }
/// ```
///
/// The member's node is a plain ephemeral [`PersistentNode`], with its
/// in-doubt writes: a create retried after a lost reply meets the node it
/// made, and keeps it. [`close`](Self::close) (or drop) closes the cache,
/// then the node, which is deleted as [`PersistentNode::close`] deletes
/// it; neither waits more than a few seconds on a broken connection.
pub struct GroupMember {
    group: String,
    id: String,
    node: PersistentNode,
    cache: CuratorCache,
}

impl GroupMember {
    /// Member `id` of the group at `group_path`, with `payload` as its
    /// node's data; not a member until [`start`](Self::start).
    pub fn new(client: &Client, group_path: &str, id: &str, payload: &[u8]) -> Result<Self> {
        if id.is_empty() || id.contains('/') {
            return Err(Error::InvalidArgument(format!(
                "a member id of group {group_path} must be a non-empty name without '/', not {id:?}"
            )));
        }
        let node = PersistentNode::new(
            client,
            CreateMode::Ephemeral,
            false,
            &paths::make_path(group_path, id),
            payload,
        )?;
        let cache = CuratorCache::new(client, group_path)?;
        Ok(GroupMember {
            group: group_path.to_owned(),
            id: id.to_owned(),
            node,
            cache,
        })
    }

    /// Joins the group and starts watching it, both in the background
    /// (see [`PersistentNode::wait_for_initial_create`] through
    /// [`wait_joined`](Self::wait_joined)): returns without waiting on
    /// ZooKeeper.
    pub fn start(&self) -> Result<()> {
        self.node.start()?;
        self.cache.start_in_background()
    }

    /// Waits at most `timeout` until this member's node was created once.
    pub fn wait_joined(&self, timeout: Duration) -> Result<bool> {
        self.node.wait_for_initial_create(timeout)
    }

    /// This member's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Changes this member's payload.
    pub fn set_this_data(&self, payload: &[u8]) -> Result<()> {
        self.node.set_data(payload)
    }

    /// The members, by id, with their payloads, as this member's cache of
    /// the group last saw them (Curator's `getCurrentMembers`): never
    /// waits on ZooKeeper and never fails. This member is always listed,
    /// with its own data (the latest [`set_this_data`](Self::set_this_data)),
    /// also before it is started or its node exists. Others show up and go
    /// as the cache's watches tell (within a round trip or so while
    /// connected); while the client is disconnected, and after
    /// [`close`](Self::close), the members last seen.
    pub fn current_members(&self) -> BTreeMap<String, Vec<u8>> {
        let prefix = if self.group.ends_with('/') {
            self.group.clone()
        } else {
            format!("{}/", self.group)
        };
        let mut members: BTreeMap<String, Vec<u8>> = self
            .cache
            .entries()
            .into_iter()
            .filter_map(|node| {
                let id = node.path.strip_prefix(&prefix)?;
                (!id.is_empty() && !id.contains('/')).then(|| (id.to_owned(), node.data))
            })
            .collect();
        members.insert(self.id.clone(), self.node.data());
        members
    }

    /// Leaves the group (deletes this member's node) and stops watching
    /// it. Dropping does the same.
    pub fn close(&self) {
        self.cache.close();
        self.node.close();
    }
}

impl std::fmt::Debug for GroupMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupMember")
            .field("group", &self.group)
            .field("id", &self.id)
            .finish()
    }
}

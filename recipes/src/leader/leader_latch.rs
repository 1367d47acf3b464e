//! Curator's `LeaderLatch`: every participant queues a protected
//! ephemeral-sequential `latch-` node holding its id; whoever's node is
//! first leads, until it closes or its session ends.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use latchkey_framework::{
    paths, Client, ConnectionState, CreateMode, Error, ErrorCode, ListenerHandle, Result,
};
use parking_lot::{Condvar, Mutex};

use crate::hold;
use crate::leader::participant::{self, Participant};
use crate::locks::lock_internals::{
    deadline_after, sort_children, validate_node_size, validate_recipe_path, NodeWatches, Signal,
};

/// Curator's node name for a latch participant.
pub const LATCH_NAME: &str = "latch-";

/// How long the latch's thread waits before trying again after an error (a
/// state change or a watch wakes it sooner).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// The longest one wait of [`LeaderLatch::await_leadership`] sleeps before
/// it looks at the connection again (leadership also depends on it).
const AWAIT_POLL: Duration = Duration::from_millis(100);

/// What closing a latch tells its listeners (Curator's `CloseMode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CloseMode {
    /// Listeners hear nothing: they are removed before leadership ends.
    #[default]
    Silent,
    /// A leader's listeners hear [`LatchEvent::NotLeader`] before they are
    /// removed.
    NotifyLeader,
}

/// A change of leadership, from [`LeaderLatch::listen`] (Curator's
/// `LeaderLatchListener.isLeader` / `notLeader`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LatchEvent {
    /// This latch leads now.
    IsLeader,
    /// This latch no longer leads (or, after `Suspended` with the standard
    /// error policy, cannot be sure that it does; a `Reconnected` that
    /// confirms it brings `IsLeader` again).
    NotLeader,
}

/// Where a latch is in its life (Curator's `LeaderLatch.State`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LatchState {
    /// Made, not started.
    Latent,
    /// Started: taking part in the election.
    Started,
    /// Closed: its node is gone or going, it never leads again.
    Closed,
}

/// Leader election by Curator's `LeaderLatch`, wire-compatible with it:
/// Java and Rust processes that use the same path take part in the same
/// election (nodes `<path>/_c_<uuid>-latch-<seq>`, holding the participant
/// id as UTF-8).
///
/// Unlike Curator, a latch node whose session the client declares lost
/// (suspended for the whole session timeout) is deleted from the next
/// session once it connects, if it is still the old session's node
/// (its `ephemeral_owner`; see [`Client::delete_when_session_lost`]).
/// The server may keep the old session alive for a while (a server
/// restarted within the session timeout restores its sessions for a
/// whole timeout more); Curator's nodes wait for that expiry, and so
/// does everyone queued behind them.
///
/// Leadership follows Curator's rule for connection states, by the
/// client's [`ConnectionStateErrorPolicy`](latchkey_framework::ConnectionStateErrorPolicy)
/// ([`ClientBuilder::connection_state_error_policy`](latchkey_framework::ClientBuilder::connection_state_error_policy)).
/// With the default, [`StandardConnectionStateErrorPolicy`](latchkey_framework::StandardConnectionStateErrorPolicy),
/// when the connection is `Suspended` the latch stops leading (another
/// process may lead soon), and leads again only once `Reconnected` within
/// the same session confirms that its node is still first. With
/// [`SessionConnectionStateErrorPolicy`](latchkey_framework::SessionConnectionStateErrorPolicy)
/// it leads on while `Suspended` (and `Reconnected` looks at the queue
/// again). `Lost` always ends it, and the latch queues again with a new
/// node in the new session.
/// [`has_leadership`](LeaderLatch::has_leadership) reads the client's
/// state at each call, so it is false from the moment the state is an
/// error state, before any listener has run.
///
/// A started latch works on a thread of its own. Dropping the latch closes
/// it (in its [`CloseMode`]), which deletes its node.
///
/// On close, leadership ends at once and the node is deleted; a closed
/// latch never leads again, even if the node ahead of it goes while its
/// own deletion is on the way. Closing a whole group: a member still open
/// when the node ahead of it goes takes over, so members closed one after
/// another from the leader down (a rolling stop, or processes stopped a
/// few milliseconds apart) hand leadership down the queue, up to one
/// short term per member (heard as [`LatchEvent::IsLeader`], and as
/// `NotLeader` on its close only in [`CloseMode::NotifyLeader`]). Four
/// members closed in queue order, each once the one before had gone,
/// gave 0 to 3 extra terms a round, mostly 2 or 3. To stop a group
/// without handing leadership on, close the followers first and the
/// leader last: a follower's node going moves nobody ahead of it.
/// Latches of one process closed in the same moment hand nothing on (each
/// is closed before any deletion comes back).
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_recipes::{LatchEvent, LeaderLatch};
///
/// let latch = LeaderLatch::with_id(client, "/services/indexer/leader", "host-a")?;
/// let events = latch.listen();
/// latch.start()?;
/// if latch.await_leadership(Duration::from_secs(10))? {
///     println!("leading; all: {:?}", latch.participants()?);
///     // Work in steps, checking before each one.
///     while latch.has_leadership() {
///         # break;
///     }
/// }
/// for event in events.try_iter() {
///     if event == LatchEvent::NotLeader {
///         println!("stopped leading");
///     }
/// }
/// # Ok(()) }
/// ```
///
/// # In-doubt writes
///
/// The latch node is created in Curator's protected mode: a create whose
/// reply was lost is retried and finds the node by its `_c_<uuid>-`
/// prefix instead of queueing a second one. A create that fails in the
/// end leaves the client a background job that deletes any node it made,
/// and the latch's thread tries again a second later (or at the next
/// connection-state change). Its deletes wait at most
/// [`HANDOVER_AFTER`](latchkey_framework::HANDOVER_AFTER) and then go on in
/// the client's background; `NoNode` on a retry counts as done.
///
/// # Close
///
/// [`close`](Self::close) does not wait for the latch's thread, which ends
/// at its next wake-up (a create it has under way finishes, and its node is
/// deleted at once); the delete of the node waits at most
/// [`HANDOVER_AFTER`](latchkey_framework::HANDOVER_AFTER). The watches are
/// not removed: the one on its own node fires with its deletion, one on
/// the node ahead stays until that node changes, waking nobody. After a
/// close, [`has_leadership`](Self::has_leadership) is false, and `close`
/// and [`start`](Self::start) fail with [`Error::IllegalState`].
pub struct LeaderLatch {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    path: String,
    id: String,
    close_mode: CloseMode,
    shared: Mutex<Shared>,
    /// Wakes [`LeaderLatch::await_leadership`] on every change of leadership.
    changed: Condvar,
    /// Wakes the latch's thread: a watch fired, the state changed, closing.
    signal: Arc<Signal>,
    watches: Arc<NodeWatches>,
}

struct Shared {
    state: LatchState,
    leader: bool,
    /// Our node and the session that owns it.
    node: Option<(String, i64)>,
    /// Our node's czxid (its fencing token), set with `node`.
    node_czxid: i64,
    /// Our node when we last became (or were confirmed) leader.
    last_leader_path: Option<String>,
    listeners: Vec<Sender<LatchEvent>>,
}

impl std::fmt::Debug for LeaderLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderLatch")
            .field("path", &self.inner.path)
            .field("id", &self.inner.id)
            .field("state", &self.state())
            .field("leader", &self.has_leadership())
            .finish()
    }
}

impl LeaderLatch {
    /// A latch on `path` with an empty id, closing silently (not started).
    pub fn new(client: &Client, path: &str) -> Result<LeaderLatch> {
        Self::with_close_mode(client, path, "", CloseMode::Silent)
    }

    /// A latch on `path` whose node holds `id`, closing silently.
    pub fn with_id(client: &Client, path: &str, id: &str) -> Result<LeaderLatch> {
        Self::with_close_mode(client, path, id, CloseMode::Silent)
    }

    /// A latch on `path` whose node holds `id`, closing in `close_mode`
    /// (when dropped, or by [`close`](LeaderLatch::close)).
    pub fn with_close_mode(
        client: &Client,
        path: &str,
        id: &str,
        close_mode: CloseMode,
    ) -> Result<LeaderLatch> {
        validate_recipe_path(client, path)?;
        validate_node_size("LeaderLatch", path, id.as_bytes())?;
        Ok(LeaderLatch {
            inner: Arc::new(Inner {
                client: client.clone(),
                path: path.to_owned(),
                id: id.to_owned(),
                close_mode,
                shared: Mutex::new(Shared {
                    state: LatchState::Latent,
                    leader: false,
                    node: None,
                    node_czxid: 0,
                    last_leader_path: None,
                    listeners: Vec::new(),
                }),
                changed: Condvar::new(),
                signal: Arc::default(),
                watches: Arc::default(),
            }),
        })
    }

    /// Joins the election: creates this latch's node as soon as the client
    /// is connected, and keeps it (again after a lost session) until
    /// closed. Fails with [`Error::IllegalState`] if started before.
    ///
    /// The node is made from the latch's own thread, so latches started
    /// one right after the other may queue in either order.
    pub fn start(&self) -> Result<()> {
        {
            let mut s = self.inner.shared.lock();
            if s.state != LatchState::Latent {
                return Err(Error::IllegalState(format!(
                    "the leader latch at {} cannot be started more than once",
                    self.inner.path
                )));
            }
            s.state = LatchState::Started;
        }
        let client = &self.inner.client;
        let wake = Arc::clone(&self.inner.signal);
        let waker = client.add_waker(move || wake.notify());
        let weak = Arc::downgrade(&self.inner);
        let listener = client.add_listener(move |state| {
            // Curator's `handleStateChange`: `Lost` ends leadership, and
            // `Suspended` does where the error policy says so.
            if let Some(inner) = weak.upgrade() {
                if inner.client.is_error_state(state) || state == ConnectionState::Lost {
                    inner.set_leadership(false);
                    // A state heard late may undo a confirmation made
                    // since: look again.
                    inner.signal.notify();
                }
            }
        });
        let weak = Arc::downgrade(&self.inner);
        let signal = Arc::clone(&self.inner.signal);
        let spawned = std::thread::Builder::new()
            .name("latchkey-leader-latch".into())
            .spawn(move || run(&weak, &signal, [waker, listener]));
        if let Err(e) = spawned {
            self.inner.shared.lock().state = LatchState::Closed;
            return Err(e.into());
        }
        Ok(())
    }

    /// Whether this latch leads now: started, its node first in the queue
    /// as last seen, and the client in the session that owns the node, in
    /// a state its error policy allows (connected; with the session policy,
    /// suspended too).
    pub fn has_leadership(&self) -> bool {
        self.inner.leads(&self.inner.shared.lock())
    }

    /// Waits until this latch leads: `Ok(true)` as soon as it does,
    /// `Ok(false)` when `timeout` (a deadline from now; `Duration::MAX`
    /// waits without limit) passes first. As Curator's `await`, it is
    /// `Ok(false)` at once, whatever the timeout, if the latch is not
    /// started or is closed, and a close while waiting ends the wait with
    /// `Ok(false)`: a latch that is not started never leads.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use std::time::Duration;
    /// use latchkey_recipes::LeaderLatch;
    ///
    /// let latch = LeaderLatch::new(client, "/services/indexer/leader")?;
    /// // Not started yet: false at once, not an error.
    /// assert!(!latch.await_leadership(Duration::from_secs(10))?);
    /// latch.start()?;
    /// let leads = latch.await_leadership(Duration::from_secs(10))?;
    /// latch.close()?;
    /// // Closed: false at once.
    /// assert!(!latch.await_leadership(Duration::MAX)?);
    /// # let _ = leads; Ok(()) }
    /// ```
    pub fn await_leadership(&self, timeout: Duration) -> Result<bool> {
        let deadline = deadline_after(timeout);
        let mut s = self.inner.shared.lock();
        loop {
            if s.state != LatchState::Started {
                return Ok(false);
            }
            if self.inner.leads(&s) {
                return Ok(true);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(false);
            }
            let poll = now + AWAIT_POLL;
            let until = deadline.map_or(poll, |d| d.min(poll));
            let _ = self.inner.changed.wait_until(&mut s, until);
        }
    }

    /// A channel that receives [`LatchEvent`]s from now on, in order. It
    /// disconnects when the latch closes (after `NotLeader` in
    /// [`CloseMode::NotifyLeader`]); dropping the receiver removes it.
    pub fn listen(&self) -> Receiver<LatchEvent> {
        let (tx, rx) = unbounded();
        let mut s = self.inner.shared.lock();
        if s.state != LatchState::Closed {
            s.listeners.push(tx);
        }
        rx
    }

    /// Every participant, in queue order, the first marked as leader.
    /// Empty if nobody takes part (the path does not exist).
    pub fn participants(&self) -> Result<Vec<Participant>> {
        let nodes =
            participant::participant_nodes(&self.inner.client, &self.inner.path, &[LATCH_NAME])?;
        participant::participants(&self.inner.client, &nodes)
    }

    /// The current leader as ZooKeeper sees it (whose node is first), or
    /// [`Participant::default`] (empty id, not leader) if nobody takes part.
    pub fn leader(&self) -> Result<Participant> {
        let nodes =
            participant::participant_nodes(&self.inner.client, &self.inner.path, &[LATCH_NAME])?;
        participant::leader(&self.inner.client, &nodes)
    }

    /// Leaves the election in this latch's [`CloseMode`]: leadership ends,
    /// the node is deleted (in the background if ZooKeeper cannot be
    /// reached now). Fails with [`Error::IllegalState`] if the latch is not
    /// started or already closed. Dropping the latch closes it too.
    ///
    /// To close every latch of a group without leadership passing from
    /// one to the next, close the leader last (see [`LeaderLatch`]).
    pub fn close(&self) -> Result<()> {
        self.inner.close(self.inner.close_mode)
    }

    /// [`close`](LeaderLatch::close) in `mode` instead of the latch's own.
    pub fn close_with(&self, mode: CloseMode) -> Result<()> {
        self.inner.close(mode)
    }

    /// The participant id this latch's node holds.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The latch's path.
    pub fn path(&self) -> &str {
        &self.inner.path
    }

    /// Where the latch is in its life.
    pub fn state(&self) -> LatchState {
        self.inner.shared.lock().state
    }

    /// The full path of this latch's node, once created.
    pub fn our_path(&self) -> Option<String> {
        self.inner
            .shared
            .lock()
            .node
            .as_ref()
            .map(|(p, _)| p.clone())
    }

    /// This latch's fencing token while it leads: the czxid of its node,
    /// larger for every later leader of this election (a node created
    /// later has a larger czxid), so a store that keeps the largest token
    /// it has seen can refuse a deposed leader's late write. `None` while
    /// it does not lead. Curator's latch has none.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use std::time::Duration;
    /// use latchkey_recipes::LeaderLatch;
    ///
    /// let latch = LeaderLatch::new(client, "/services/indexer/leader")?;
    /// latch.start()?;
    /// if latch.await_leadership(Duration::from_secs(10))? {
    ///     if let Some(token) = latch.fencing_token() {
    ///         println!("leading with token {token}");
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> Option<i64> {
        let s = self.inner.shared.lock();
        self.inner.leads(&s).then_some(s.node_czxid)
    }

    /// The full path of this latch's node the last time it became leader
    /// (Curator's `getLastPathIsLeader`): `None` until it first leads.
    /// It stays after leadership ends (the latch closed, its session was
    /// lost, it queued again) until the latch leads with another node, so
    /// it names the node under which this latch last led, which may no
    /// longer exist.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use std::time::Duration;
    /// use latchkey_recipes::LeaderLatch;
    ///
    /// let latch = LeaderLatch::new(client, "/services/indexer/leader")?;
    /// assert_eq!(latch.last_path_is_leader(), None); // never led
    /// latch.start()?;
    /// if latch.await_leadership(Duration::from_secs(10))? {
    ///     // The node it leads with, e.g. ".../_c_<uuid>-latch-0000000003".
    ///     assert_eq!(latch.last_path_is_leader(), latch.our_path());
    /// }
    /// latch.close()?;
    /// // Still the node it last led with, though that node is gone.
    /// println!("last led as {:?}", latch.last_path_is_leader());
    /// # Ok(()) }
    /// ```
    pub fn last_path_is_leader(&self) -> Option<String> {
        self.inner.shared.lock().last_leader_path.clone()
    }
}

impl crate::Fence for LeaderLatch {
    /// This latch's node while it leads: as long as it exists, no later
    /// node can sort ahead of it, so a write fenced by the latch is applied
    /// only while this latch leads. Fails with [`Error::IllegalState`]
    /// when it does not lead now.
    fn fence_path(&self) -> Result<String> {
        let s = self.inner.shared.lock();
        match (&s.node, self.inner.leads(&s)) {
            (Some((node, _)), true) => Ok(crate::fence::full_path(&self.inner.client, node)),
            _ => Err(Error::IllegalState(format!(
                "fencing by the leader latch at {}: it does not lead",
                self.inner.path
            ))),
        }
    }
}

impl Drop for LeaderLatch {
    fn drop(&mut self) {
        if self.state() == LatchState::Started {
            let _ = self.inner.close(self.inner.close_mode);
        }
    }
}

/// What the latch's thread does after a look at the queue.
enum Next {
    /// Sleep until a watch, a state change or closing wakes it.
    Wait,
    /// Look again at once (our node or its predecessor went meanwhile).
    Again,
}

impl Inner {
    fn leads(&self, s: &Shared) -> bool {
        s.state == LatchState::Started
            && s.leader
            && s.node
                .as_ref()
                .is_some_and(|(_, owner)| *owner == self.client.session_id())
            && hold::policy_allows(&self.client)
    }

    fn set_leadership(&self, leader: bool) {
        let mut s = self.shared.lock();
        self.set_leadership_locked(&mut s, leader);
    }

    fn set_leadership_locked(&self, s: &mut Shared, leader: bool) {
        let was = std::mem::replace(&mut s.leader, leader);
        if was != leader {
            let event = match leader {
                true => LatchEvent::IsLeader,
                false => LatchEvent::NotLeader,
            };
            s.listeners.retain(|tx| tx.send(event).is_ok());
        }
        self.changed.notify_all();
    }

    fn close(&self, mode: CloseMode) -> Result<()> {
        let node = {
            let mut s = self.shared.lock();
            if s.state != LatchState::Started {
                return Err(Error::IllegalState(format!(
                    "the leader latch at {} is already closed or was not started",
                    self.path
                )));
            }
            s.state = LatchState::Closed;
            match mode {
                CloseMode::NotifyLeader => {
                    self.set_leadership_locked(&mut s, false);
                    s.listeners.clear();
                }
                CloseMode::Silent => {
                    s.listeners.clear();
                    self.set_leadership_locked(&mut s, false);
                }
            }
            s.node.take()
        };
        self.signal.notify();
        match node {
            Some((path, _)) => self.delete_node(&path),
            None => Ok(()),
        }
    }

    /// Deletes a node of ours; the background makes sure of it if
    /// ZooKeeper cannot be reached now.
    fn delete_node(&self, path: &str) -> Result<()> {
        self.client.keep_when_session_lost(path);
        match self.client.delete().in_background().for_path(path) {
            Err(Error::Closed) => Ok(()), // the session's end removes it
            other => other,
        }
    }

    /// One look at the queue: makes sure we have a node in this session,
    /// then leads if it is first, or watches the node before it.
    fn check(&self, epoch: u64) -> Result<Next> {
        let session = self.client.session_id();
        let current = self.shared.lock().node.clone();
        let (ours, owner) = match current {
            Some((path, owner)) if owner == session => (path, owner),
            stale => {
                if let Some((old, _)) = stale {
                    // A node of an ended session: gone or going.
                    self.shared.lock().node = None;
                    let _ = self.delete_node(&old);
                }
                match self.create_node()? {
                    Some(node) => node,
                    None => return Ok(Next::Wait), // closed meanwhile
                }
            }
        };
        let mut children = match self.client.get_children(&self.path) {
            Err(e) if e.is(ErrorCode::NoNode) => {
                // The latch's parent went (and our node with it): queue again.
                self.forget_node(&ours);
                return Ok(Next::Again);
            }
            other => other?,
        };
        sort_children(&mut children, &[LATCH_NAME]);
        let name = paths::get_node_from_path(&ours);
        match children.iter().position(|c| c == name) {
            None => {
                log::debug!(
                    "leader latch {}: our node {ours} is gone; queueing again",
                    self.path
                );
                self.forget_node(&ours);
                Ok(Next::Again)
            }
            Some(0) => {
                // Our own node, watched: nobody else tells a leader that its
                // node went (deleted by an operator or a tool, say), and a
                // latch that led on without it would lead beside the next.
                match self.watches.watch_data(&self.client, &ours, &self.signal) {
                    Ok(()) => {}
                    Err(e) if e.is(ErrorCode::NoNode) => {
                        self.forget_node(&ours);
                        return Ok(Next::Again);
                    }
                    Err(e) => return Err(e),
                }
                let mut s = self.shared.lock();
                // Lead only if nothing happened since we began to look:
                // a state change or watch in between makes us look again.
                let confirmed = s.state == LatchState::Started
                    && self.client.session_id() == owner
                    && self
                        .client
                        .state()
                        .is_some_and(ConnectionState::is_connected)
                    && self.signal.epoch() == epoch;
                if confirmed {
                    s.last_leader_path = Some(ours.clone());
                    self.set_leadership_locked(&mut s, true);
                }
                Ok(Next::Wait)
            }
            Some(i) => {
                self.set_leadership(false);
                let before = paths::make_path(&self.path, &children[i - 1]);
                match self.watches.watch_data(&self.client, &before, &self.signal) {
                    Ok(()) => Ok(Next::Wait),
                    Err(e) if e.is(ErrorCode::NoNode) => Ok(Next::Again),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Creates our node; `None` (and the node deleted) if the latch closed
    /// meanwhile.
    fn create_node(&self) -> Result<Option<(String, i64)>> {
        let (path, stat) = self
            .client
            .create()
            .creating_parent_containers_if_needed()
            .with_protection()
            .mode(CreateMode::EphemeralSequential)
            .for_path_with_stat(
                &paths::make_path(&self.path, LATCH_NAME),
                self.id.as_bytes(),
            )?;
        crate::locks::lock_internals::delete_if_lost(&self.client, &path, stat.ephemeral_owner);
        let mut s = self.shared.lock();
        if s.state != LatchState::Started {
            drop(s);
            let _ = self.delete_node(&path);
            return Ok(None);
        }
        s.node = Some((path.clone(), stat.ephemeral_owner));
        s.node_czxid = stat.czxid;
        Ok(Some((path, stat.ephemeral_owner)))
    }

    fn forget_node(&self, path: &str) {
        let mut s = self.shared.lock();
        if s.node.as_ref().is_some_and(|(p, _)| p == path) {
            s.node = None;
        }
        self.set_leadership_locked(&mut s, false);
    }
}

/// The latch's thread: looks at the queue whenever something may have
/// changed, while connected, until the latch closes or is dropped.
fn run(weak: &Weak<Inner>, signal: &Signal, _handles: [ListenerHandle; 2]) {
    loop {
        let epoch = signal.epoch();
        let mut retry_at = None;
        {
            let Some(inner) = weak.upgrade() else { return };
            if inner.shared.lock().state != LatchState::Started {
                return;
            }
            if inner.client.is_closed() {
                inner.set_leadership(false);
                return;
            }
            if inner
                .client
                .state()
                .is_some_and(ConnectionState::is_connected)
            {
                match inner.check(epoch) {
                    Ok(Next::Again) => continue,
                    Ok(Next::Wait) => {}
                    Err(e) => {
                        log::debug!("leader latch {}: {e}", inner.path);
                        retry_at = Some(Instant::now() + RETRY_PAUSE);
                    }
                }
            }
        }
        let _ = signal.wait(epoch, retry_at);
    }
}

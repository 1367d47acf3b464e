//! Curator's `DistributedBarrier` (wait while a node exists) and
//! `DistributedDoubleBarrier` (enter together when a member count is
//! reached, leave together).

use std::sync::Arc;
use std::time::{Duration, Instant};

use latchkey_framework::{paths, Client, CreateMode, Error, ErrorCode, ListenerHandle, Result};

use crate::locks::lock_internals::{deadline_after, delete_if_lost, validate_recipe_path, Signal};

/// The node whose creation tells a double barrier's members to enter.
pub const READY_NODE: &str = "ready";

/// Something to wait on: a wake-up from a watch or a connection-state
/// change, by a deadline.
struct Waiter {
    signal: Arc<Signal>,
    _state: ListenerHandle,
}

impl Waiter {
    fn new(client: &Client) -> Waiter {
        let signal = Arc::new(Signal::default());
        let wake = Arc::clone(&signal);
        let state = client.add_waker(move || wake.notify());
        Waiter {
            signal,
            _state: state,
        }
    }

    /// A watch callback that wakes this waiter.
    fn wake(&self) -> impl FnOnce(latchkey_framework::WatchedEvent) + Send + 'static {
        let signal = Arc::downgrade(&self.signal);
        move |_| {
            if let Some(s) = signal.upgrade() {
                s.notify();
            }
        }
    }

    /// Waits for a wake-up after `epoch`; false if the deadline passed.
    fn wait(&self, epoch: u64, deadline: Option<Instant>) -> bool {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        self.signal.wait(epoch, deadline);
        true
    }
}

/// Curator's `DistributedBarrier`: processes wait while the barrier node
/// exists; removing it lets them all through.
///
/// A waiter reads through its own client's server: connected to a
/// follower that has not yet applied a barrier set moments before through
/// another client, it finds no barrier and passes (as Curator's does).
/// Where the order matters, have the waiter's client call
/// [`Client::sync`](latchkey_framework::Client::sync) on the path first.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_recipes::DistributedBarrier;
///
/// let barrier = DistributedBarrier::new(client, "/jobs/start-gate")?;
/// barrier.set_barrier()?;
/// // ... elsewhere, workers call barrier.wait_on_barrier(timeout) ...
/// barrier.remove_barrier()?; // lets every waiter through
/// assert!(barrier.wait_on_barrier(Duration::ZERO)?);
/// # Ok(()) }
/// ```
///
/// Both writes are retried after a lost reply and are safe to repeat: a
/// retried [`set_barrier`](Self::set_barrier) that meets `NodeExists`, or a
/// retried [`remove_barrier`](Self::remove_barrier) that meets `NoNode`,
/// counts as done (so neither tells whether this call or another made the
/// change). There is nothing to close; a
/// [`wait_on_barrier`](Self::wait_on_barrier) that times out leaves its
/// watch on the node until the node changes, and it then wakes nobody.
#[derive(Clone, Debug)]
pub struct DistributedBarrier {
    client: Client,
    path: String,
}

impl DistributedBarrier {
    /// A barrier at `path`.
    pub fn new(client: &Client, path: &str) -> Result<DistributedBarrier> {
        validate_recipe_path(client, path)?;
        Ok(DistributedBarrier {
            client: client.clone(),
            path: path.to_owned(),
        })
    }

    /// Sets the barrier (creates the node, with parents as containers); a
    /// barrier already set stays as it is.
    pub fn set_barrier(&self) -> Result<()> {
        match self
            .client
            .create()
            .creating_parent_containers_if_needed()
            .for_path(&self.path, &[])
        {
            Err(e) if e.is(ErrorCode::NodeExists) => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Removes the barrier, letting every waiter through; a barrier not
    /// set is fine.
    pub fn remove_barrier(&self) -> Result<()> {
        match self.client.delete().for_path(&self.path) {
            Err(e) if e.is(ErrorCode::NoNode) => Ok(()),
            other => other,
        }
    }

    /// Waits until the barrier is removed: `Ok(true)` once it is gone,
    /// `Ok(false)` when `timeout` (a deadline; `Duration::MAX`: no limit)
    /// passes first.
    pub fn wait_on_barrier(&self, timeout: Duration) -> Result<bool> {
        let deadline = deadline_after(timeout);
        let waiter = Waiter::new(&self.client);
        loop {
            let epoch = waiter.signal.epoch();
            let exists = self
                .client
                .with_deadline(deadline.map(|d| d.max(Instant::now() + crate::REQUEST_GRACE)))
                .exists_watch_waker(&self.path, waiter.wake());
            match exists {
                Ok(None) => return Ok(true),
                Ok(Some(_)) => {}
                Err(Error::Timeout { .. }) if deadline.is_some() => return Ok(false),
                Err(e) => return Err(e),
            }
            if !waiter.wait(epoch, deadline) {
                return Ok(false);
            }
        }
    }
}

/// Curator's `DistributedDoubleBarrier`: `member_count` processes enter
/// together (each waits in [`enter`](Self::enter) until that many have
/// arrived) and leave together (each waits in [`leave`](Self::leave) until
/// all have left). Nodes are Curator's: an ephemeral node per member named
/// by a random UUID, and `ready` once the count is reached, so Java and
/// Rust members share a barrier.
///
/// Unlike Curator, a member node whose session the client declares lost
/// is deleted from the next session once it connects, if it is still the
/// old session's node (see [`Client::delete_when_session_lost`]): a
/// server restarted within the session timeout restores the old session
/// for a whole timeout more, and the other members' `leave` would wait
/// for it.
///
/// On session loss: a member in [`enter`](Self::enter) fails with
/// `SessionExpired` (whatever its timeout) and may enter again; a member
/// in [`leave`](Self::leave) whose node went fails with
/// [`Error::IllegalState`]. A member that has entered and loses its
/// session before leaving is no longer counted by the others' `leave`.
/// The barrier holds nothing to close: a member that never leaves is
/// removed with its session.
///
/// In-doubt writes: the member node's name is this object's own UUID, so
/// a create retried after a lost reply that meets a node there finds its
/// own: one of this session is kept and `enter` goes on with it, one of an
/// ended session is deleted and made again. The `ready` node's create
/// and every delete are retried and safe to repeat (`NodeExists` and
/// `NoNode` count as done). A `leave` deletes `ready` at its end, also when
/// it times out; the lowest member, which waits for the others to go,
/// keeps its node when its `leave` times out.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_recipes::DistributedDoubleBarrier;
///
/// let barrier = DistributedDoubleBarrier::new(client, "/jobs/round-1", 3)?;
/// if barrier.enter(Duration::from_secs(30))? {
///     // ... the three members compute together ...
///     barrier.leave(Duration::from_secs(30))?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DistributedDoubleBarrier {
    client: Client,
    path: String,
    member_count: usize,
    our_path: String,
    ready_path: String,
}

impl DistributedDoubleBarrier {
    /// A double barrier at `path` for `member_count` members (at least 1).
    pub fn new(
        client: &Client,
        path: &str,
        member_count: usize,
    ) -> Result<DistributedDoubleBarrier> {
        validate_recipe_path(client, path)?;
        if member_count == 0 {
            return Err(Error::InvalidArgument(format!(
                "double barrier at {path}: the member count must be at least 1"
            )));
        }
        Ok(DistributedDoubleBarrier {
            client: client.clone(),
            path: path.to_owned(),
            member_count,
            our_path: paths::make_path(path, &paths::new_protection_id()),
            ready_path: paths::make_path(path, READY_NODE),
        })
    }

    /// Enters: adds this member and waits until `member_count` members
    /// have. `Ok(false)` if `timeout` (a deadline; `Duration::MAX`: no
    /// limit) passes first; this member's node is then removed, so it is
    /// not counted (Curator leaves it).
    ///
    /// A connection that drops and comes back within the session changes
    /// nothing: the node and the watch on `ready` are the session's, and
    /// the client sets the watch again on reconnecting. If the session is
    /// lost while entering, the node went with it (or goes from the next
    /// session, see above) and so did the watch, and the count may already
    /// have been reached without this member: `enter` then fails with
    /// `SessionExpired` ([`Error::Operation`] naming
    /// `DistributedDoubleBarrier::enter` and this member's node), whatever
    /// the timeout, as Curator's fails with a connection loss. Call `enter`
    /// again to join with a node of the new session. A session that
    /// changes between the watch and the create (the create retried on the
    /// next session) has the watch set again on the node's session.
    pub fn enter(&self, timeout: Duration) -> Result<bool> {
        let deadline = deadline_after(timeout);
        let waiter = Waiter::new(&self.client);
        let before = self.client.session_id();
        let ready = self
            .client
            .exists_watch_waker(&self.ready_path, waiter.wake())?
            .is_some();
        let owner = self.create_member_node()?;
        // Should the session be declared lost, the node goes from the next
        // session, instead of holding the others in `leave` until the
        // server expires the old one.
        delete_if_lost(&self.client, &self.our_path, owner);
        if ready {
            return Ok(true);
        }
        // The watch is the node's session's only if no other session came
        // between reading the id and the create: ids are never reused, so
        // the same id before the watch and on the node means both went to
        // that session. Otherwise the watch may have gone with an ended
        // session: set it again.
        let mut watched = before == owner;
        loop {
            let epoch = waiter.signal.epoch();
            if self.session_lost(owner) {
                return Err(self.lost_while_entering());
            }
            if !watched {
                let before = self.client.session_id();
                if self
                    .client
                    .exists_watch_waker(&self.ready_path, waiter.wake())?
                    .is_some()
                {
                    return Ok(true);
                }
                watched = before == owner && self.client.session_id() == owner;
            }
            let children = self.client.get_children(&self.path)?;
            if children.len() >= self.member_count {
                match self.client.create().for_path(&self.ready_path, &[]) {
                    Err(e) if !e.is(ErrorCode::NodeExists) => return Err(e),
                    _ => return Ok(true),
                }
            }
            if self.client.exists(&self.ready_path)?.is_some() {
                return Ok(true);
            }
            if !waiter.wait(epoch, deadline) {
                self.delete(&self.our_path)?;
                return Ok(false);
            }
        }
    }

    /// Creates this member's node; returns its session. The name is this
    /// object's own, so a node already there is ours: this session's (a
    /// create retried after a lost reply meets the node its first attempt
    /// made), kept; an ended session's (an `enter` before a lost session),
    /// deleted and made again.
    fn create_member_node(&self) -> Result<i64> {
        for _ in 0..3 {
            let created = self
                .client
                .create()
                .creating_parent_containers_if_needed()
                .mode(CreateMode::Ephemeral)
                .for_path_with_stat(&self.our_path, &[]);
            match created {
                Ok((_, stat)) => return Ok(stat.ephemeral_owner),
                Err(e) if e.is(ErrorCode::NodeExists) => {}
                Err(e) => return Err(e),
            }
            match self.client.exists(&self.our_path)? {
                Some(stat) if stat.ephemeral_owner == self.client.session_id() => {
                    return Ok(stat.ephemeral_owner)
                }
                Some(_) => self.delete(&self.our_path)?,
                None => {} // gone meanwhile: create it again
            }
        }
        Err(Error::Zk {
            code: ErrorCode::NodeExists,
            path: Some(self.our_path.clone()),
        })
    }

    /// Whether session `owner`, which made our node, has ended here: the
    /// client declared it lost, or another session is connected. While
    /// not connected (id 0) it may still come back; the next state change
    /// wakes the waiter to look again.
    fn session_lost(&self, owner: i64) -> bool {
        if self.client.lost_session_id() == Some(owner) {
            return true;
        }
        let now = self.client.session_id();
        now != 0 && now != owner
    }

    fn lost_while_entering(&self) -> Error {
        Error::Operation {
            op: "DistributedDoubleBarrier::enter",
            path: self.our_path.clone(),
            source: Box::new(Error::Zk {
                code: ErrorCode::SessionExpired,
                path: Some(self.our_path.clone()),
            }),
        }
    }

    /// Leaves: removes this member and waits until every member has left
    /// (Curator's may return once only the lowest member's node is left,
    /// before that member leaves: CURATOR-233; this one waits for it).
    /// `Ok(false)` if `timeout` (a deadline) passes first. Fails with
    /// [`Error::IllegalState`] if this member's node went meanwhile (its
    /// session was lost).
    pub fn leave(&self, timeout: Duration) -> Result<bool> {
        let deadline = deadline_after(timeout);
        let waiter = Waiter::new(&self.client);
        let ours = paths::get_node_from_path(&self.our_path).to_owned();
        let mut ours_exists = true;
        let mut result = true;
        loop {
            let epoch = waiter.signal.epoch();
            let mut children = match self.client.get_children(&self.path) {
                Err(e) if e.is(ErrorCode::NoNode) => Vec::new(),
                other => other?,
            };
            children.retain(|c| c != READY_NODE);
            children.sort();
            if children.is_empty() {
                break;
            }
            let index = children.iter().position(|c| *c == ours);
            if index.is_none() && ours_exists {
                return Err(Error::IllegalState(format!(
                    "double barrier at {}: our node {ours} is missing",
                    self.path
                )));
            }
            if children.len() == 1 && ours_exists {
                if children[0] != ours {
                    return Err(Error::IllegalState(format!(
                        "double barrier at {}: the last node {} is not ours ({ours})",
                        self.path, children[0]
                    )));
                }
                self.delete(&self.our_path)?;
                break;
            }
            // The lowest member waits for the highest; the others leave at
            // once and wait for the lowest, also once it is the only node
            // left (Curator returns then, before the lowest has left:
            // CURATOR-233).
            let watched = if index == Some(0) {
                children[children.len() - 1].clone()
            } else {
                if ours_exists {
                    self.delete(&self.our_path)?;
                    ours_exists = false;
                }
                children[0].clone()
            };
            let still_there = self
                .client
                .exists_watch_waker(&paths::make_path(&self.path, &watched), waiter.wake())?
                .is_some();
            if still_there && !waiter.wait(epoch, deadline) {
                result = false;
                break;
            }
        }
        self.delete(&self.ready_path)?;
        Ok(result)
    }

    fn delete(&self, path: &str) -> Result<()> {
        self.client.keep_when_session_lost(path);
        match self.client.delete().for_path(path) {
            Err(e) if e.is(ErrorCode::NoNode) => Ok(()),
            other => other,
        }
    }
}

//! `InterProcessSemaphoreV2` and `InterProcessSemaphoreMutex`, in Curator's
//! layout: `<path>/locks` holds an internal mutex, `<path>/leases` holds one
//! protected `lease-` node per lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use latchkey_framework::paths;
use latchkey_framework::{Client, CreateMode, Error, ListenerHandle, Result};
use parking_lot::Mutex;

use crate::cancel::{self, CancelToken};
use crate::hold::{self, HoldEvent};
use crate::locks::lock_internals::{
    bounded, deadline_after, delete_ephemeral, delete_if_lost, giving_up, node_data_or_who,
    out_of_time, validate_node_size, validate_recipe_path, NodeWatches, Signal,
};
use crate::locks::metrics::{self, Held};
use crate::locks::multi_lock::InterProcessLock;
use crate::locks::mutex::InterProcessMutex;
use crate::shared::shared_count::SharedCount;
use crate::shared::shared_value::ChangeHook;

/// Curator's lease node name.
pub const LEASE_NAME: &str = "lease-";

/// A counting semaphore across processes, sharing its maximum with Curator's
/// `InterProcessSemaphoreV2` on the same path.
///
/// Unlike Curator, a lease node whose session the client declares lost
/// (suspended for the whole session timeout) is deleted from the next
/// session once it connects, if it is still the old session's node
/// (its `ephemeral_owner`; see [`Client::delete_when_session_lost`]).
/// The server may keep the old session alive for a while (a server
/// restarted within the session timeout restores its sessions for a
/// whole timeout more); Curator's nodes wait for that expiry, and so
/// does everyone queued behind them.
///
/// The maximum is fixed ([`new`](Self::new)) or follows a [`SharedCount`]
/// ([`with_shared_count`](Self::with_shared_count)).
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_recipes::InterProcessSemaphoreV2;
///
/// let sem = InterProcessSemaphoreV2::new(client, "/semaphores/db", 3)?;
/// let lease = sem.acquire()?;          // one of three
/// // ... use the resource ...
/// drop(lease);                          // or sem.return_lease(lease)
/// if let Some(leases) = sem.acquire_many_timeout(2, Duration::from_secs(1))? {
///     assert_eq!(leases.len(), 2);
/// }
/// # Ok(()) }
/// ```
///
/// # In-doubt writes
///
/// Each lease node, and each node of the internal lock that serializes
/// waiters (`<path>/locks`, an [`InterProcessMutex`]), is created in
/// Curator's protected mode: a create whose reply was lost is retried and
/// finds its node by its `_c_<uuid>-` prefix instead of taking a second
/// lease, and one that fails in the end leaves the client a background
/// job that deletes any node it made. Returning a lease (dropping it, or
/// [`return_lease`](Self::return_lease)) deletes its node in one attempt
/// that waits at most [`HANDOVER_AFTER`](latchkey_framework::HANDOVER_AFTER),
/// then leaves the delete to the client's background; a retried delete
/// that meets `NoNode` counts as done.
///
/// # Close
///
/// There is no `close`: each [`Lease`] holds its own client handle and is
/// returned when dropped, also after the semaphore is dropped. A waiter
/// that gives up gives back its lease node; the children watch it set on
/// `<path>/leases` stays on the server until the leases change, and then
/// wakes nobody.
#[derive(Clone, Debug)]
pub struct InterProcessSemaphoreV2 {
    client: Client,
    leases_path: String,
    lock: InterProcessMutex,
    max_leases: MaxLeases,
    /// What the next lease node stores (empty: who holds it); shared by clones.
    data: Arc<Mutex<Vec<u8>>>,
    /// One children watch on the leases, however many attempts wait on it.
    watches: Arc<NodeWatches>,
}

/// Where a semaphore's maximum comes from.
#[derive(Clone, Debug)]
enum MaxLeases {
    Fixed(u32),
    Shared(SharedCount),
}

impl MaxLeases {
    fn current(&self) -> i64 {
        match self {
            MaxLeases::Fixed(n) => i64::from(*n),
            MaxLeases::Shared(count) => i64::from(count.count()),
        }
    }

    /// Wakes `signal` whenever a shared maximum changes.
    fn wake_on_change(&self, signal: &Arc<Signal>) -> Option<ChangeHook> {
        match self {
            MaxLeases::Fixed(_) => None,
            MaxLeases::Shared(count) => {
                let signal = Arc::clone(signal);
                Some(count.on_change(move |_| signal.notify()))
            }
        }
    }
}

/// One lease of a semaphore; returned when dropped. May be moved to and
/// returned from any thread.
///
/// Dropping a lease returns it, so a lease that is not kept is given back
/// at once; the compiler warns:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # fn f(sem: &latchkey_recipes::InterProcessSemaphoreV2) -> latchkey_framework::Result<()> {
/// sem.acquire()?; // the lease would be returned right here
/// # Ok(()) }
/// ```
#[must_use = "the lease is returned as soon as it is dropped"]
pub struct Lease {
    client: Client,
    path: String,
    /// The lease nodes' parent: tells which semaphore the lease is of.
    leases_path: String,
    /// The session that owns the lease node; a different current session
    /// means the lease went with the old one.
    owner: i64,
    returned: bool,
    /// Listeners behind [`Lease::events`]; they go with the lease.
    subscriptions: Mutex<Vec<ListenerHandle>>,
    /// Counts the lease in the lock metrics' holds once it is granted.
    held: Option<Held>,
}

/// How one attempt at a lease ended.
enum Attempt {
    Got(Lease),
    TimedOut,
    NodeMissing,
}

impl InterProcessSemaphoreV2 {
    /// A semaphore on `path` with `max_leases` leases (at least 1).
    pub fn new(client: &Client, path: &str, max_leases: u32) -> Result<Self> {
        Self::with_lease_data(client, path, max_leases, &[])
    }

    /// Like [`InterProcessSemaphoreV2::new`], storing `data` in each lease
    /// node (empty `data` stores who holds the lease:
    /// `host=<host> pid=<pid> thread=<thread name or id>`, as `new` does).
    pub fn with_lease_data(
        client: &Client,
        path: &str,
        max_leases: u32,
        data: &[u8],
    ) -> Result<Self> {
        if max_leases == 0 {
            return Err(Error::InvalidArgument(
                "a semaphore needs max_leases of at least 1".into(),
            ));
        }
        Self::build(client, path, MaxLeases::Fixed(max_leases), data)
    }

    /// A semaphore on `path` whose maximum is `count`'s current value
    /// (Curator's constructor with a `SharedCountReader`). The count may be
    /// kept on another path and by another client.
    ///
    /// When the count changes, waiters check again at once. As in Curator, a
    /// lease is granted while the lease nodes (holders plus the one waiter
    /// whose turn it is) number no more than the count: lowering it takes no
    /// lease away, but nobody new gets one until enough are returned, and a
    /// count below 1 lets nobody new in. Asking for more leases than the
    /// current count is allowed: the caller waits, since the count may grow.
    /// Leases are taken one at a time, so such a caller keeps the leases it
    /// has, and its turn, while it waits for the rest (as in Curator).
    /// Each process learns of a change through its own watch, so for a
    /// moment after the count is lowered a process that has not seen it yet
    /// may still grant a lease by the old value (so may Curator).
    ///
    /// The semaphore keeps a clone of `count`, so the count stays watched
    /// while the semaphore lives; closing the count freezes the maximum.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use latchkey_recipes::{InterProcessSemaphoreV2, SharedCount};
    ///
    /// let limit = SharedCount::new(client, "/config/db-connections", 2)?;
    /// let sem = InterProcessSemaphoreV2::with_shared_count(client, "/semaphores/db", &limit)?;
    /// let lease = sem.acquire()?;
    /// limit.set_count(5)?; // every process using the count now allows 5
    /// # drop(lease);
    /// # Ok(()) }
    /// ```
    pub fn with_shared_count(client: &Client, path: &str, count: &SharedCount) -> Result<Self> {
        Self::build(client, path, MaxLeases::Shared(count.clone()), &[])
    }

    fn build(client: &Client, path: &str, max_leases: MaxLeases, data: &[u8]) -> Result<Self> {
        validate_recipe_path(client, path)?;
        validate_node_size("semaphore lease", path, data)?;
        Ok(InterProcessSemaphoreV2 {
            client: client.clone(),
            leases_path: paths::make_path(path, "leases"),
            lock: InterProcessMutex::new(client, &paths::make_path(path, "locks"))?.unobserved(),
            max_leases,
            data: Arc::new(Mutex::new(data.to_vec())),
            watches: Arc::default(),
        })
    }

    /// Sets the data that lease nodes created from now on store (Curator's
    /// `setNodeData`; empty: who holds the lease). Shared by clones; leases
    /// already taken keep their data. Data too large for one ZooKeeper
    /// request is refused.
    pub fn set_node_data(&self, data: &[u8]) -> Result<()> {
        validate_node_size("semaphore lease", &self.leases_path, data)?;
        *self.data.lock() = data.to_vec();
        Ok(())
    }

    /// The maximum number of leases now: the fixed maximum, or the shared
    /// count's latest value (0 when the count is below 1).
    pub fn max_leases(&self) -> u32 {
        u32::try_from(self.max_leases.current()).unwrap_or(0)
    }

    /// Waits as long as it takes for one lease.
    pub fn acquire(&self) -> Result<Lease> {
        let mut leases = self.acquire_leases(1, None, None)?.unwrap_or_default();
        leases
            .pop()
            .ok_or_else(|| Error::IllegalState("lease wait ended without a deadline".into()))
    }

    /// Waits as long as it takes for `n` leases.
    #[must_use = "the leases are returned as soon as they are dropped"]
    pub fn acquire_many(&self, n: u32) -> Result<Vec<Lease>> {
        Ok(self.acquire_leases(n, None, None)?.unwrap_or_default())
    }

    /// Waits at most `timeout` for one lease: a deadline for the whole
    /// call, as [`InterProcessMutex::acquire_timeout`]'s.
    #[must_use = "the leases are returned as soon as they are dropped"]
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Option<Lease>> {
        Ok(self
            .acquire_leases(1, deadline_after(timeout), None)?
            .and_then(|mut v| v.pop()))
    }

    /// Waits at most `timeout` for `n` leases; on timeout the leases already
    /// taken are given back and `None` is returned.
    #[must_use = "the leases are returned as soon as they are dropped"]
    pub fn acquire_many_timeout(&self, n: u32, timeout: Duration) -> Result<Option<Vec<Lease>>> {
        self.acquire_leases(n, deadline_after(timeout), None)
    }

    /// Like [`acquire_many_timeout`](Self::acquire_many_timeout)
    /// (`Duration::MAX` waits as long as it takes), and fails with
    /// [`Error::Cancelled`] as soon as `cancel` is cancelled from another
    /// thread; the leases already taken and the node of the one awaited are
    /// given back (see [`CancelToken`]).
    #[must_use = "the leases are returned as soon as they are dropped"]
    pub fn acquire_many_cancellable(
        &self,
        n: u32,
        timeout: Duration,
        cancel: &CancelToken,
    ) -> Result<Option<Vec<Lease>>> {
        self.acquire_leases(n, deadline_after(timeout), Some(cancel))
    }

    /// Returns a lease of this semaphore (the same as dropping it, but
    /// reports errors). A lease of another semaphore (another path, or the
    /// same path through another client) is refused and handed back, still
    /// held, in [`LeaseReturnError::NotOurs`].
    pub fn return_lease(&self, lease: Lease) -> Result<(), LeaseReturnError> {
        self.return_all(vec![lease])
    }

    /// Returns every lease; tries each and reports the first error. If any
    /// lease is not of this semaphore, none is returned: all are handed
    /// back in [`LeaseReturnError::NotOurs`].
    pub fn return_all(&self, leases: Vec<Lease>) -> Result<(), LeaseReturnError> {
        if !leases.iter().all(|l| self.owns(l)) {
            return Err(LeaseReturnError::NotOurs(leases));
        }
        let mut first = None;
        for lease in leases {
            if let Err(e) = lease.return_lease() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), |e| Err(LeaseReturnError::Failed(e)))
    }

    /// Whether `lease` was taken from this semaphore: the same lease list,
    /// through the same client (same namespace, same session).
    fn owns(&self, lease: &Lease) -> bool {
        lease.leases_path == self.leases_path
            && lease.client.namespace() == self.client.namespace()
            && lease.client.session_id() == self.client.session_id()
    }

    /// The names of the lease nodes, holders and waiters alike.
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        match self.client.get_children(&self.leases_path) {
            Err(e) if e.is(latchkey_framework::ErrorCode::NoNode) => Ok(Vec::new()),
            other => other,
        }
    }

    /// Waits for `n` leases, one wait in the lock metrics and spans.
    fn acquire_leases(
        &self,
        n: u32,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
    ) -> Result<Option<Vec<Lease>>> {
        let path = paths::parent(&self.leases_path).unwrap_or(&self.leases_path);
        metrics::observe_wait("semaphore", path, || {
            self.wait_for_leases(n, deadline, cancel)
        })
    }

    fn wait_for_leases(
        &self,
        n: u32,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
    ) -> Result<Option<Vec<Lease>>> {
        if n == 0 {
            return Err(Error::InvalidArgument("asked for zero leases".into()));
        }
        // A shared maximum may grow, so asking for more than it is now
        // waits; but never beyond what an i32 count can reach.
        let (limit, why) = match self.max_leases {
            MaxLeases::Fixed(max) => (max, "the semaphore has only"),
            MaxLeases::Shared(_) => (i32::MAX as u32, "a shared count never allows more than"),
        };
        if n > limit {
            return Err(Error::InvalidArgument(format!(
                "asked for {n} leases of {} but {why} {limit}",
                self.leases_path
            )));
        }
        let started = Instant::now();
        let mut retries = 0;
        // Every request of the call, the give-backs of a call that fails
        // included, goes through this handle, so the call keeps its deadline.
        let client = bounded(&self.client, deadline);
        // Grows as leases arrive: `n` may be far more than will ever be granted.
        // The leases hold `client` until the call succeeds: dropping them
        // on the way out gives them back within the call's deadline.
        let mut leases = Vec::new();
        while leases.len() < n as usize {
            let attempt = self.acquire_one(&client, deadline, cancel);
            match attempt.map_err(|e| give_back_on(&mut leases, &client, e))? {
                Attempt::Got(lease) => leases.push(lease),
                // Dropping `leases` gives back what was taken.
                Attempt::TimedOut => return Ok(None),
                Attempt::NodeMissing => {
                    let policy = self.client.retry_policy();
                    match policy.allow_retry(retries, started.elapsed()) {
                        Some(sleep) => {
                            let resume = deadline_after(sleep);
                            if deadline.is_some_and(|d| resume.is_none_or(|r| r >= d)) {
                                return Ok(None);
                            }
                            cancel::pause(cancel, sleep);
                            cancel::check(cancel)
                                .map_err(|e| give_back_on(&mut leases, &client, e))?;
                            retries += 1;
                        }
                        None => {
                            return Err(Error::IllegalState(
                                "lease node vanished (session lost) and retries ran out".into(),
                            ))
                        }
                    }
                }
            }
        }
        for lease in &mut leases {
            lease.client = self.client.clone();
        }
        Ok(Some(leases))
    }

    fn acquire_one(
        &self,
        client: &Client,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
    ) -> Result<Attempt> {
        if !self.lock.internal_lock(deadline, cancel)? {
            return Ok(Attempt::TimedOut);
        }
        let attempt = self.wait_for_room(client, deadline, cancel);
        let by = match &attempt {
            Err(e) => giving_up(client, e),
            Ok(_) => client.clone(),
        };
        if let Err(e) = self.lock.release_through(&by) {
            log::warn!("releasing the semaphore's internal lock: {e}");
        }
        attempt
    }

    /// Holding the internal lock (so only one waiter watches the leases),
    /// adds our lease node and waits until there are at most `max` nodes.
    fn wait_for_room(
        &self,
        client: &Client,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
    ) -> Result<Attempt> {
        let data = self.data.lock().clone();
        // The call's requests end at a cancel, even while they wait for a
        // reply; the lease gives its node back through `client`.
        let asking = client.with_cancel(cancel);
        let created = asking
            .create()
            .creating_parent_containers_if_needed()
            .with_protection()
            .mode(CreateMode::EphemeralSequential)
            .for_path_with_stat(
                &paths::make_path(&self.leases_path, LEASE_NAME),
                &node_data_or_who(&data),
            );
        let (path, stat) = match created {
            // A node whose create reply never came is removed in the
            // background (protected mode).
            Err(e) if out_of_time(&e, deadline) => return Ok(Attempt::TimedOut),
            other => other?,
        };
        delete_if_lost(&self.client, &path, stat.ephemeral_owner);
        let mut lease = Lease::new(client, &self.leases_path, path, stat.ephemeral_owner);
        let name = paths::get_node_from_path(&lease.path).to_owned();
        let signal = Arc::new(Signal::default());
        let wake = Arc::clone(&signal);
        let _waker = self.client.add_waker(move || wake.notify());
        let _count_hook = self.max_leases.wake_on_change(&signal);
        let _on_cancel = cancel::wake_on_cancel(cancel, &signal);
        loop {
            let session = self.client.session_id();
            if !may_wait_for_room(session, stat.ephemeral_owner, self.lock.is_lost()) {
                // Dropping `lease` removes our node if this session made it.
                return Ok(Attempt::NodeMissing);
            }
            let epoch = signal.epoch();
            // After `epoch`: a cancel from now on also ends the wait below.
            // Dropping `lease` then removes our node.
            if let Err(e) = cancel::check(cancel) {
                lease.client = giving_up(client, &e);
                return Err(e);
            }
            // Dropping `lease` on the way out removes our node.
            let children = match self
                .watches
                .watch_children(&asking, &self.leases_path, &signal)
            {
                Err(e) if out_of_time(&e, deadline) => return Ok(Attempt::TimedOut),
                Err(e) => {
                    lease.client = giving_up(client, &e);
                    return Err(e);
                }
                Ok(children) => children,
            };
            if !children.contains(&name) {
                return Ok(Attempt::NodeMissing);
            }
            // Read after `epoch`: a change from now on wakes the wait below.
            let max = self.max_leases.current();
            if lease_granted(children.len(), max) {
                let mut lease = lease;
                lease.held = Some(Held::new());
                return Ok(Attempt::Got(lease));
            }
            if !signal.wait(epoch, deadline) {
                return Ok(Attempt::TimedOut);
            }
        }
    }
}

/// Whether a waiter may go on waiting for room: its lease node belongs to
/// the current session and so does its internal lock. A session that
/// expired between the internal lock's grant and the lease's create leaves
/// a lease node of the new session and an internal lock that is gone;
/// such waiters, not serialized by the lock, could wait for each other for
/// ever (two of them with one lease). The waiter gives its node back and
/// queues for the internal lock again.
pub fn may_wait_for_room(session: i64, lease_owner: i64, internal_lock_lost: bool) -> bool {
    session == lease_owner && !internal_lock_lost
}

/// Curator's rule for the waiter that holds the internal lock: its lease is
/// granted once the lease nodes (holders, and its own) number no more than
/// the maximum now.
pub fn lease_granted(lease_nodes: usize, max_leases: i64) -> bool {
    i64::try_from(lease_nodes).is_ok_and(|len| len <= max_leases)
}

/// Hands `leases` over for their give-back as a call that fails with `e`
/// gives back what it took (see [`giving_up`]), and returns `e`.
fn give_back_on(leases: &mut [Lease], client: &Client, e: Error) -> Error {
    let by = giving_up(client, &e);
    for lease in leases {
        lease.client = by.clone();
    }
    e
}

impl Lease {
    fn new(client: &Client, leases_path: &str, path: String, owner: i64) -> Lease {
        Lease {
            client: client.clone(),
            path,
            leases_path: leases_path.to_owned(),
            owner,
            returned: false,
            subscriptions: Mutex::new(Vec::new()),
            held: None,
        }
    }

    /// The lease node's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The name of the lease node.
    pub fn node_name(&self) -> &str {
        paths::get_node_from_path(&self.path)
    }

    /// The data stored in the lease node.
    pub fn data(&self) -> Result<Vec<u8>> {
        self.client.get_data(&self.path).map(|(d, _)| d)
    }

    /// Whether the lease was lost with its session.
    pub fn is_lost(&self) -> bool {
        hold::is_lost(&self.client, self.owner)
    }

    /// Whether the lease is in doubt: lost, or the client not connected now
    /// (`Suspended`; Curator's rule is to treat it as not held until
    /// `Reconnected`). Check it right before each step that needs the lease.
    pub fn is_in_doubt(&self) -> bool {
        hold::in_doubt(&self.client, self.owner)
    }

    /// A channel telling this lease's standing as it changes; it
    /// disconnects when the lease is returned (see
    /// [`crate::MutexGuard::events`] for the events and how to use them).
    pub fn events(&self) -> Receiver<HoldEvent> {
        let (rx, handle) = hold::subscribe(&self.client, self.owner);
        self.subscriptions.lock().push(handle);
        rx
    }

    /// Gives the lease back (as dropping it does, but with the error); its
    /// [`events`](Self::events) channels disconnect. Deleting the node is
    /// guaranteed and never waits on a broken connection: if ZooKeeper
    /// cannot be reached now, or has not answered within
    /// [`HANDOVER_AFTER`](latchkey_framework::HANDOVER_AFTER), the client
    /// keeps trying in the background; a lease lost with its session has
    /// nothing left to delete.
    /// Errors are those retrying cannot fix, such as missing permissions.
    pub fn return_lease(mut self) -> Result<()> {
        self.returned = true;
        delete_ephemeral(&self.client, &self.path, self.owner)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.returned {
            if let Err(e) = delete_ephemeral(&self.client, &self.path, self.owner) {
                log::warn!("cannot return lease {}: {e}", self.path);
            }
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("path", &self.path).finish()
    }
}

/// Why [`InterProcessSemaphoreV2::return_lease`] or
/// [`InterProcessSemaphoreV2::return_all`] did not return every lease.
#[derive(Debug)]
#[non_exhaustive]
pub enum LeaseReturnError {
    /// Leases of another semaphore: none was returned, and here they all
    /// are, still held. Return them through their own semaphore (or drop
    /// them).
    NotOurs(Vec<Lease>),
    /// Returning failed with an error that retrying cannot fix (such as
    /// missing permissions).
    Failed(Error),
}

impl std::fmt::Display for LeaseReturnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeaseReturnError::NotOurs(leases) => {
                let paths: Vec<&str> = leases.iter().map(Lease::path).collect();
                write!(
                    f,
                    "not leases of this semaphore (kept, still held): {paths:?}"
                )
            }
            LeaseReturnError::Failed(e) => write!(f, "returning a lease failed: {e}"),
        }
    }
}

impl std::error::Error for LeaseReturnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LeaseReturnError::Failed(e) => Some(e),
            LeaseReturnError::NotOurs(_) => None,
        }
    }
}

/// For `?` in functions returning latchkey's [`Error`]: refused leases
/// become [`Error::InvalidArgument`] and are dropped, which returns each to
/// its own semaphore.
impl From<LeaseReturnError> for Error {
    fn from(e: LeaseReturnError) -> Self {
        match e {
            LeaseReturnError::Failed(e) => e,
            refused @ LeaseReturnError::NotOurs(_) => Error::InvalidArgument(refused.to_string()),
        }
    }
}

/// A mutex that is not reentrant and may be released from any thread:
/// a one-lease [`InterProcessSemaphoreV2`] (Curator's
/// `InterProcessSemaphoreMutex`). A thread that acquires it twice waits for
/// itself; use the timed form where that can happen.
///
/// Clones share the same lock object (as [`InterProcessMutex`]'s do): a
/// lock taken through one clone is released through any other.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::InterProcessSemaphoreMutex;
/// let m = InterProcessSemaphoreMutex::new(client, "/locks/job")?;
/// m.acquire()?;
/// std::thread::scope(|s| { s.spawn(|| m.release()).join().unwrap() })?;
/// # Ok(()) }
/// ```
///
/// Writes as [`InterProcessSemaphoreV2`] does (protected creates, a release
/// that never waits on a broken connection). There is no `close`: the
/// lease is held by the clones together, so dropping the last clone while
/// the lock is held returns it.
#[derive(Clone, Debug)]
pub struct InterProcessSemaphoreMutex {
    semaphore: InterProcessSemaphoreV2,
    /// The lease held, shared by clones.
    lease: Arc<Mutex<Option<Lease>>>,
}

impl InterProcessSemaphoreMutex {
    /// A mutex on `path`.
    pub fn new(client: &Client, path: &str) -> Result<Self> {
        Ok(InterProcessSemaphoreMutex {
            semaphore: InterProcessSemaphoreV2::new(client, path, 1)?,
            lease: Arc::default(),
        })
    }

    /// Waits as long as it takes.
    pub fn acquire(&self) -> Result<()> {
        let lease = self.semaphore.acquire()?;
        *self.lease.lock() = Some(lease);
        Ok(())
    }

    /// Waits at most `timeout`; `Ok(false)` if not taken.
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        match self.semaphore.acquire_timeout(timeout)? {
            Some(lease) => {
                *self.lease.lock() = Some(lease);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Takes the lock and returns a guard that releases it when dropped
    /// (on any thread).
    pub fn lock(&self) -> Result<SemaphoreMutexGuard<'_>> {
        self.acquire()?;
        Ok(SemaphoreMutexGuard { mutex: self })
    }

    /// Like [`lock`](Self::lock), waiting at most `timeout`; `None` if not taken.
    pub fn try_lock_for(&self, timeout: Duration) -> Result<Option<SemaphoreMutexGuard<'_>>> {
        Ok(self
            .acquire_timeout(timeout)?
            .then_some(SemaphoreMutexGuard { mutex: self }))
    }

    /// Takes the lock only if that needs no waiting.
    pub fn try_lock(&self) -> Result<Option<SemaphoreMutexGuard<'_>>> {
        self.try_lock_for(Duration::ZERO)
    }

    /// Sets the data that lease nodes created from now on store (see
    /// [`InterProcessSemaphoreV2::set_node_data`]).
    pub fn set_node_data(&self, data: &[u8]) -> Result<()> {
        self.semaphore.set_node_data(data)
    }

    /// Like [`acquire_timeout`](Self::acquire_timeout), and fails with
    /// [`Error::Cancelled`] as soon as `cancel` is cancelled (see
    /// [`CancelToken`]).
    pub fn acquire_cancellable(&self, timeout: Duration, cancel: &CancelToken) -> Result<bool> {
        match self
            .semaphore
            .acquire_many_cancellable(1, timeout, cancel)?
        {
            Some(mut leases) => {
                *self.lease.lock() = leases.pop();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Releases the lock, from any thread. Fails if it is not held.
    pub fn release(&self) -> Result<()> {
        self.release_by(None)
    }

    /// Like [`release`](Self::release) within a call that must end by
    /// `deadline` (see [`InterProcessLock::release_by`]).
    pub fn release_by(&self, deadline: Option<Instant>) -> Result<()> {
        let mut lease = self
            .lease
            .lock()
            .take()
            .ok_or_else(|| Error::IllegalState("the semaphore mutex is not held".into()))?;
        if let Some(d) = deadline {
            let d = lease.client.deadline().map_or(d, |own| own.min(d));
            lease.client = lease.client.with_deadline(Some(d));
        }
        lease.return_lease()
    }

    /// Whether this object holds the lock.
    pub fn is_acquired_in_this_process(&self) -> bool {
        self.lease.lock().is_some()
    }

    /// Whether the held lock was lost with its session.
    pub fn is_lost(&self) -> bool {
        self.lease.lock().as_ref().is_some_and(Lease::is_lost)
    }

    /// Whether the held lock is in doubt (see [`Lease::is_in_doubt`]);
    /// `false` if it is not held.
    pub fn is_in_doubt(&self) -> bool {
        self.lease.lock().as_ref().is_some_and(Lease::is_in_doubt)
    }

    /// The lease nodes of holders and waiters.
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        self.semaphore.participant_nodes()
    }
}

impl InterProcessLock for InterProcessSemaphoreMutex {
    fn acquire(&self) -> Result<()> {
        InterProcessSemaphoreMutex::acquire(self)
    }
    fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        InterProcessSemaphoreMutex::acquire_timeout(self, timeout)
    }
    fn release(&self) -> Result<()> {
        InterProcessSemaphoreMutex::release(self)
    }
    fn release_by(&self, deadline: Option<Instant>) -> Result<()> {
        InterProcessSemaphoreMutex::release_by(self, deadline)
    }
    fn is_acquired_in_this_process(&self) -> bool {
        InterProcessSemaphoreMutex::is_acquired_in_this_process(self)
    }
    fn acquire_cancellable(&self, timeout: Duration, cancel: &CancelToken) -> Result<bool> {
        InterProcessSemaphoreMutex::acquire_cancellable(self, timeout, cancel)
    }
}

/// Holds an [`InterProcessSemaphoreMutex`] until dropped. Unlike a
/// [`crate::MutexGuard`] it may be sent to and dropped on another thread.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::InterProcessSemaphoreMutex;
/// let m = InterProcessSemaphoreMutex::new(client, "/locks/job")?;
/// let guard = m.lock()?;
/// std::thread::scope(|s| {
///     s.spawn(move || drop(guard)); // released on another thread
/// });
/// # Ok(()) }
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct SemaphoreMutexGuard<'a> {
    mutex: &'a InterProcessSemaphoreMutex,
}

impl SemaphoreMutexGuard<'_> {
    /// Whether the lock was lost with its session.
    pub fn is_lost(&self) -> bool {
        self.mutex.is_lost()
    }

    /// Whether the hold is in doubt (see [`Lease::is_in_doubt`]).
    pub fn is_in_doubt(&self) -> bool {
        self.mutex.is_in_doubt()
    }

    /// The hold's standing as it changes (see [`Lease::events`]).
    pub fn events(&self) -> Receiver<HoldEvent> {
        match self.mutex.lease.lock().as_ref() {
            Some(lease) => lease.events(),
            None => crossbeam_channel::bounded(0).1,
        }
    }

    /// The lease node's path.
    pub fn node_path(&self) -> String {
        self.mutex
            .lease
            .lock()
            .as_ref()
            .map(|l| l.path().to_owned())
            .unwrap_or_default()
    }
}

impl Drop for SemaphoreMutexGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.mutex.release() {
            log::error!("releasing a semaphore mutex failed: {e}");
        }
    }
}

impl std::fmt::Debug for SemaphoreMutexGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphoreMutexGuard")
            .field("node", &self.node_path())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_failed_return_keeps_its_cause_as_the_source() {
        let failed = LeaseReturnError::Failed(Error::Closed);
        assert!(failed
            .source()
            .is_some_and(|s| s.to_string() == Error::Closed.to_string()));
        assert!(LeaseReturnError::NotOurs(Vec::new()).source().is_none());
    }
}

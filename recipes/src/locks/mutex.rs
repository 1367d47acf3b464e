//! `InterProcessMutex`: Curator's reentrant distributed mutex.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use latchkey_framework::{Client, Error, ErrorCode, ListenerHandle, Result};
use parking_lot::Mutex;

use crate::cancel::{self, CancelToken};
use crate::hold::{self, HoldEvent};
use crate::locks::lock_internals::{
    deadline_after, node_data_or_who, validate_node_size, LockDriver, LockInternals, LockNode,
    StandardDriver,
};
use crate::locks::revoke::Revocable;

/// Curator's lock-node name for a mutex.
pub const LOCK_NAME: &str = "lock-";

/// One thread's hold on the lock.
struct Hold {
    node: LockNode,
    count: u32,
    /// Listeners behind [`MutexGuard::events`]; they go with the hold.
    subscriptions: Vec<ListenerHandle>,
}

pub(crate) struct MutexInner {
    internals: LockInternals,
    holds: Mutex<HashMap<ThreadId, Hold>>,
    /// What the next lock node stores; empty: who holds it.
    data: Mutex<Vec<u8>>,
    revocable: Revocable,
}

/// A distributed mutex, reentrant per thread, that queues with Curator's
/// `InterProcessMutex` on the same path (nodes `_c_<uuid>-lock-<seq>`).
///
/// Unlike Curator, a lock node whose session the client declares lost
/// (suspended for the whole session timeout) is deleted from the next
/// session once it connects, if it is still the old session's node
/// (its `ephemeral_owner`; see [`Client::delete_when_session_lost`]).
/// The server may keep the old session alive for a while (a server
/// restarted within the session timeout restores its sessions for a
/// whole timeout more); Curator's nodes wait for that expiry, and so
/// does everyone queued behind them.
///
/// Threads of one process contend with each other as processes do; a thread
/// that holds the lock may take it again (each acquire needs a release).
/// Clones share the same lock object.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_recipes::InterProcessMutex;
///
/// let mutex = InterProcessMutex::new(client, "/locks/orders")?;
/// {
///     let guard = mutex.lock()?;
///     // ... exclusive work; guard.fencing_token() guards writes elsewhere ...
///     assert!(!guard.is_lost());
/// } // released here
/// if let Some(_guard) = mutex.try_lock_for(Duration::from_secs(2))? {
///     // got it within two seconds
/// }
/// # Ok(()) }
/// ```
///
/// # In-doubt writes
///
/// The lock node is created in Curator's protected mode. A create whose
/// reply was lost is retried by the client's retry loop, which first looks
/// for the node by its `_c_<uuid>-` prefix and takes it instead of queueing
/// a second one (a node found of an earlier session is deleted and one
/// made for this session). A create that fails in the end (retries spent,
/// a timed acquire's deadline, a cancel) leaves the client a background
/// job that deletes any node it made, so no stray node waits in the queue.
/// A release deletes the node in one attempt that waits at most
/// [`HANDOVER_AFTER`](latchkey_framework::HANDOVER_AFTER), then leaves the
/// delete to the client's background, which retries until the node is
/// gone; a retried delete that meets `NoNode` counts as done.
///
/// # Close
///
/// There is no `close`: a hold ends with its guard's drop or with
/// [`release`](Self::release), which never block on a broken connection
/// (see above). Dropping the mutex, every clone, while a thread holds it
/// through [`acquire`](Self::acquire) releases nothing: the lock node
/// stays until its session ends. A waiter that gives up (timeout, cancel,
/// error) deletes its node the same way; the watch it set on the node
/// ahead of it stays on the server until that node changes, and then
/// wakes nobody.
#[derive(Clone)]
pub struct InterProcessMutex {
    inner: Arc<MutexInner>,
}

impl std::fmt::Debug for InterProcessMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessMutex")
            .field("path", &self.inner.internals.base_path())
            .finish()
    }
}

impl InterProcessMutex {
    /// A mutex on `path` (created on first use). Each lock node says who
    /// holds it: `host=<host> pid=<pid> thread=<thread name or id>`.
    pub fn new(client: &Client, path: &str) -> Result<Self> {
        Self::with_lock_data(client, path, &[])
    }

    /// Like [`InterProcessMutex::new`], storing `data` in each lock node
    /// (empty `data` stores who holds it, as `new` does). Data too large
    /// for one ZooKeeper request is refused.
    pub fn with_lock_data(client: &Client, path: &str, data: &[u8]) -> Result<Self> {
        let driver = Arc::new(StandardDriver);
        Self::with_driver(client, path, LOCK_NAME, &[LOCK_NAME], 1, driver, data)
    }

    /// A mutex on `path` whose queue follows `driver` (Curator's
    /// `InterProcessMutex(client, path, driver)`): the driver decides, from
    /// the sorted children, whether our node holds the lock or which node it
    /// waits for. Nodes are named as the plain mutex's (`lock-`), and the
    /// driver is asked with `max_leases` 1.
    ///
    /// A driver that lets the first two processes in at once:
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use std::sync::Arc;
    /// use latchkey_framework::Result;
    /// use latchkey_recipes::{Decision, InterProcessMutex, LockDriver, StandardDriver};
    ///
    /// struct FirstTwo;
    ///
    /// impl LockDriver for FirstTwo {
    ///     fn decide(&self, children: &[String], ours: &str, _max: usize) -> Result<Decision> {
    ///         StandardDriver.decide(children, ours, 2)
    ///     }
    /// }
    ///
    /// let pair = InterProcessMutex::with_lock_driver(client, "/locks/pair", Arc::new(FirstTwo))?;
    /// let _guard = pair.lock()?; // at most two holders now
    /// # Ok(()) }
    /// ```
    pub fn with_lock_driver(
        client: &Client,
        path: &str,
        driver: Arc<dyn LockDriver>,
    ) -> Result<Self> {
        Self::with_driver(client, path, LOCK_NAME, &[LOCK_NAME], 1, driver, &[])
    }

    pub(crate) fn with_driver(
        client: &Client,
        path: &str,
        lock_name: &str,
        sort_names: &[&str],
        max_leases: usize,
        driver: Arc<dyn LockDriver>,
        data: &[u8],
    ) -> Result<Self> {
        validate_node_size("lock", path, data)?;
        let internals =
            LockInternals::new(client, path, lock_name, sort_names, max_leases, driver)?;
        Ok(InterProcessMutex {
            inner: Arc::new(MutexInner {
                internals,
                holds: Mutex::new(HashMap::new()),
                data: Mutex::new(data.to_vec()),
                revocable: Revocable::default(),
            }),
        })
    }

    /// This mutex as part of another recipe's wait: its own waits and
    /// holds stay out of the lock metrics and spans.
    pub(crate) fn unobserved(self) -> Self {
        self.inner.internals.set_unobserved();
        self
    }

    /// Waits as long as it takes to hold the lock.
    ///
    /// A thread that holds the lock takes it again at once (each acquire
    /// needs a release); if its hold was lost with its session, it gets
    /// `SessionExpired` with the lock node's path instead, and must still
    /// release the lost hold before it can queue again.
    pub fn acquire(&self) -> Result<()> {
        match self.internal_lock(None, None)? {
            true => Ok(()),
            false => Err(Error::IllegalState(
                "lock wait ended without a deadline".into(),
            )),
        }
    }

    /// Waits at most `timeout`; `Ok(false)` if the lock was not taken (and
    /// no node is left behind).
    ///
    /// The timeout is a deadline for the whole call, retries and reconnect
    /// waits included: with ZooKeeper unreachable it returns by then too,
    /// `Ok(false)` when the time ran out, or the retry policy's last error
    /// (connection loss, saying why) if the policy gave up first, as
    /// Curator's does (check [`Client::state`]). Its requests get at least
    /// [`REQUEST_GRACE`](crate::REQUEST_GRACE), so a zero timeout still
    /// queues and looks once; a call overruns `max(timeout, REQUEST_GRACE)`
    /// by a few milliseconds at most. `Duration::MAX` means no deadline.
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        self.internal_lock(deadline_after(timeout), None)
    }

    /// Like [`acquire_timeout`](Self::acquire_timeout) (`Duration::MAX`
    /// waits as long as it takes), and fails with [`Error::Cancelled`] as
    /// soon as `cancel` is cancelled from another thread, leaving no node
    /// (see [`CancelToken`]). A thread that holds the lock already takes it
    /// again unless the token is cancelled.
    pub fn acquire_cancellable(&self, timeout: Duration, cancel: &CancelToken) -> Result<bool> {
        self.internal_lock(deadline_after(timeout), Some(cancel))
    }

    pub(crate) fn internal_lock(
        &self,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
    ) -> Result<bool> {
        cancel::check(cancel)?;
        let me = thread::current().id();
        if let Some(hold) = self.inner.holds.lock().get_mut(&me) {
            if self.hold_lost(hold) {
                // Counting another hold on a lock that is gone would tell the
                // caller it holds what another session may hold now.
                return Err(Error::Zk {
                    code: ErrorCode::SessionExpired,
                    path: Some(hold.node.path.clone()),
                });
            }
            hold.count = hold
                .count
                .checked_add(1)
                .ok_or_else(|| Error::IllegalState("lock count overflow".into()))?;
            return Ok(true);
        }
        let data = self.inner.data.lock().clone();
        let Some(node) = self.inner.internals.attempt_lock_cancellable(
            deadline,
            &node_data_or_who(&data),
            cancel,
        )?
        else {
            return Ok(false);
        };
        self.inner.holds.lock().insert(
            me,
            Hold {
                node,
                count: 1,
                subscriptions: Vec::new(),
            },
        );
        Ok(true)
    }

    /// Releases one hold of the calling thread; the last one deletes the
    /// lock node (guaranteed: retried in the background if ZooKeeper cannot
    /// be reached or has not answered within
    /// [`HANDOVER_AFTER`](latchkey_framework::HANDOVER_AFTER), so a release
    /// never stalls on a connection gone silent; a lock lost with its
    /// session releases quietly).
    /// Fails if this thread does not hold the lock.
    pub fn release(&self) -> Result<()> {
        self.release_through(self.inner.internals.client())
    }

    /// Like [`release`](Self::release) within a call that must end by
    /// `deadline` (`None`: the same as `release`): if ZooKeeper has not
    /// confirmed the delete by then, the client's background makes sure of
    /// it, and this returns.
    pub fn release_by(&self, deadline: Option<Instant>) -> Result<()> {
        let client = self.inner.internals.client();
        match deadline {
            None => self.release(),
            Some(d) => {
                let d = client.deadline().map_or(d, |own| own.min(d));
                self.release_through(&client.with_deadline(Some(d)))
            }
        }
    }

    /// Like [`release`](Self::release), deleting the node through `client`
    /// (a timed call's bounded handle, so that the call keeps its deadline).
    pub(crate) fn release_through(&self, client: &Client) -> Result<()> {
        let me = thread::current().id();
        let node = {
            let mut holds = self.inner.holds.lock();
            let Some(hold) = holds.get_mut(&me) else {
                return Err(Error::IllegalState(format!(
                    "this thread does not hold the lock {}",
                    self.inner.internals.base_path()
                )));
            };
            hold.count -= 1;
            if hold.count > 0 {
                return Ok(());
            }
            holds.remove(&me).map(|h| h.node)
        };
        // As Curator's releaseLock: the next hold is not revocable.
        self.inner.revocable.set(None);
        if let Some(node) = node {
            self.inner.internals.release_by(client, &node);
        }
        Ok(())
    }

    /// Sets the data that lock nodes created from now on store (empty: who
    /// holds the lock). A node already queued or held keeps its data.
    pub fn set_lock_data(&self, data: &[u8]) -> Result<()> {
        validate_node_size("lock", self.path(), data)?;
        *self.inner.data.lock() = data.to_vec();
        Ok(())
    }

    /// Takes the lock and returns a guard that releases it when dropped.
    pub fn lock(&self) -> Result<MutexGuard<'_>> {
        self.acquire()?;
        Ok(self.guard())
    }

    /// Takes the lock only if that needs no waiting (Curator's
    /// `acquire(0, ..)`): `None` if another holder or an earlier waiter is
    /// ahead. Still one round trip to ZooKeeper, and no node is left behind.
    pub fn try_lock(&self) -> Result<Option<MutexGuard<'_>>> {
        self.try_lock_for(Duration::ZERO)
    }

    /// Like [`InterProcessMutex::lock`], waiting at most `timeout`.
    pub fn try_lock_for(&self, timeout: Duration) -> Result<Option<MutexGuard<'_>>> {
        Ok(self.acquire_timeout(timeout)?.then(|| self.guard()))
    }

    fn guard(&self) -> MutexGuard<'_> {
        MutexGuard {
            mutex: self,
            _not_send: PhantomData,
        }
    }

    /// Whether any thread of this process holds the lock through this object.
    pub fn is_acquired_in_this_process(&self) -> bool {
        !self.inner.holds.lock().is_empty()
    }

    /// Whether the calling thread holds the lock.
    pub fn is_owned_by_current_thread(&self) -> bool {
        self.inner
            .holds
            .lock()
            .contains_key(&thread::current().id())
    }

    /// Whether the calling thread's hold was lost with its session.
    pub fn is_lost(&self) -> bool {
        let holds = self.inner.holds.lock();
        let Some(hold) = holds.get(&thread::current().id()) else {
            return false;
        };
        self.hold_lost(hold)
    }

    fn hold_lost(&self, hold: &Hold) -> bool {
        hold::is_lost(self.inner.internals.client(), hold.node.owner)
    }

    /// Whether the calling thread's hold is in doubt: lost, or the client
    /// not connected now (`Suspended`: the session may be expiring and
    /// another process may get the lock soon). Curator's rule: treat a
    /// suspended lock as not held until `Reconnected`. `false` if this
    /// thread holds nothing. See [`MutexGuard::events`] for when to check.
    pub fn is_in_doubt(&self) -> bool {
        let holds = self.inner.holds.lock();
        holds
            .get(&thread::current().id())
            .is_some_and(|h| hold::in_doubt(self.inner.internals.client(), h.node.owner))
    }

    /// The standing of the calling thread's hold as it changes (see
    /// [`MutexGuard::events`]); `None` if this thread holds nothing.
    pub fn hold_events(&self) -> Option<Receiver<HoldEvent>> {
        let mut holds = self.inner.holds.lock();
        let hold = holds.get_mut(&thread::current().id())?;
        let (rx, handle) = hold::subscribe(self.inner.internals.client(), hold.node.owner);
        hold.subscriptions.push(handle);
        Some(rx)
    }

    /// The calling thread's fencing token: the czxid of its lock node, which
    /// is larger for every later holder of this lock path.
    pub fn fencing_token(&self) -> Option<i64> {
        self.inner
            .holds
            .lock()
            .get(&thread::current().id())
            .map(|h| h.node.czxid)
    }

    /// The calling thread's lock node, if it holds the lock.
    pub fn lock_node_path(&self) -> Option<String> {
        self.inner
            .holds
            .lock()
            .get(&thread::current().id())
            .map(|h| h.node.path.clone())
    }

    /// Every node queued on this lock, holder first, as full paths
    /// (Curator's `getParticipantNodes`).
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        self.inner.internals.participant_nodes()
    }

    /// Makes the next acquisitions revocable, as Curator's `makeRevocable`:
    /// when another process calls [`crate::Revoker::attempt_revoke`] on our
    /// lock node, `listener` runs; it should arrange for a release.
    ///
    /// - The watch is set on each new lock node before it waits, so a
    ///   request made while `acquire` still waits reaches the listener then.
    /// - The listener runs on a thread of its own (`latchkey-revocation`),
    ///   never inside `acquire` and never on one of the client's threads, so
    ///   it may block or call the client. Each request runs it once.
    /// - Revocability ends with the release of a hold (Curator clears it
    ///   there too): call `make_revocable` again before the next acquire.
    ///   A new call replaces the listener, also for nodes already watched.
    /// - If the watch cannot be set on a new node, the acquire fails with
    ///   that error and leaves no node (a vanished node is queued again as
    ///   the retry policy allows), rather than holding a lock that silently
    ///   cannot be revoked. Should re-arming the watch later fail (after a
    ///   non-revoking change of the node's data), a warning is logged.
    pub fn make_revocable(&self, listener: impl Fn() + Send + Sync + 'static) {
        let revocable = self.inner.revocable.clone();
        revocable.set(Some(Arc::new(listener)));
        self.inner
            .internals
            .set_node_hook(Some(Arc::new(move |client, path| {
                revocable.watch_new_node(client, path)
            })));
    }

    /// The lock path.
    pub fn path(&self) -> &str {
        self.inner.internals.base_path()
    }
}

/// Holds an [`InterProcessMutex`] until dropped. Not `Send`: the thread that
/// took the lock releases it, so dropping a guard on another thread is
/// refused at compile time:
///
/// ```compile_fail
/// # fn f(mutex: &latchkey_recipes::InterProcessMutex) -> latchkey_framework::Result<()> {
/// let guard = mutex.lock()?;
/// std::thread::scope(|s| {
///     s.spawn(move || drop(guard));
/// });
/// # Ok(()) }
/// ```
///
/// To release from another thread, use [`crate::InterProcessSemaphoreMutex`].
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct MutexGuard<'a> {
    mutex: &'a InterProcessMutex,
    _not_send: PhantomData<*const ()>,
}

impl MutexGuard<'_> {
    /// Whether the lock was lost with the session while held. Work that
    /// needs exclusion should stop.
    pub fn is_lost(&self) -> bool {
        self.mutex.is_lost()
    }

    /// Whether the hold is in doubt: lost, or the connection suspended (see
    /// [`InterProcessMutex::is_in_doubt`]). Check it right before each step
    /// that needs exclusion, such as a write to what the lock protects.
    pub fn is_in_doubt(&self) -> bool {
        self.mutex.is_in_doubt()
    }

    /// A channel telling this hold's standing as it changes:
    /// [`HoldEvent::InDoubt`] when the connection is suspended,
    /// [`HoldEvent::Restored`] on reconnecting in the same session,
    /// [`HoldEvent::Lost`] when the session is gone. If the hold is in
    /// doubt or lost already, that comes first. The channel disconnects
    /// when the hold ends.
    ///
    /// A worker selects over it beside its own work, or checks it with
    /// `try_recv` between steps; [`is_in_doubt`](Self::is_in_doubt) right
    /// before each step that needs exclusion closes the gap between two
    /// looks. Wait for `Restored` before going on after `InDoubt`; after
    /// `Lost`, drop the guard and acquire again.
    ///
    /// ```no_run
    /// # fn f(mutex: &latchkey_recipes::InterProcessMutex) -> latchkey_framework::Result<()> {
    /// use latchkey_recipes::HoldEvent;
    /// let guard = mutex.lock()?;
    /// let standing = guard.events();
    /// for step in 0..10 {
    ///     match standing.try_recv() {
    ///         Ok(HoldEvent::Lost) => break, // stop: someone else may hold it
    ///         Ok(HoldEvent::InDoubt) => {
    ///             // pause until the session is confirmed, or lost
    ///             if standing.recv() != Ok(HoldEvent::Restored) {
    ///                 break;
    ///             }
    ///         }
    ///         _ => {}
    ///     }
    ///     if guard.is_in_doubt() {
    ///         continue;
    ///     }
    ///     // ... step `step`, using guard.fencing_token() where writes can race ...
    /// #   let _ = step;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn events(&self) -> Receiver<HoldEvent> {
        self.mutex.hold_events().unwrap_or_else(|| {
            // The guard's hold always exists; a disconnected channel if not.
            crossbeam_channel::bounded(0).1
        })
    }

    /// The fencing token of this hold (see [`InterProcessMutex::fencing_token`]).
    pub fn fencing_token(&self) -> i64 {
        self.mutex.fencing_token().unwrap_or_default()
    }

    /// The lock node's path.
    pub fn node_path(&self) -> String {
        self.mutex.lock_node_path().unwrap_or_default()
    }
}

impl crate::Fence for MutexGuard<'_> {
    /// The lock node of this hold: a write fenced by the guard is applied
    /// only while this thread's hold stands.
    fn fence_path(&self) -> Result<String> {
        let node = self.mutex.lock_node_path().ok_or_else(|| {
            Error::IllegalState(format!(
                "fencing by the lock at {}: this thread does not hold it",
                self.mutex.path()
            ))
        })?;
        Ok(crate::fence::full_path(
            self.mutex.inner.internals.client(),
            &node,
        ))
    }
}

impl Drop for MutexGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.mutex.release() {
            log::error!("releasing {} failed: {e}", self.mutex.path());
        }
    }
}

impl std::fmt::Debug for MutexGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexGuard")
            .field("path", &self.mutex.path())
            .finish()
    }
}

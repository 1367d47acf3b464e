//! Curator's `LeaderSelector`: participants queue on an
//! [`InterProcessMutex`]; whoever holds it leads for as long as its
//! `take_leadership` runs, then gives the lock up.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use latchkey_framework::{Client, ConnectionState, Error, ListenerHandle, Result, Transaction};
use parking_lot::{Condvar, Mutex};

use crate::cancel::CancelToken;
use crate::hold::{self, HoldEvent};
use crate::leader::participant::{self, Participant};
use crate::locks::lock_internals::{deadline_after, validate_node_size};
use crate::locks::mutex::InterProcessMutex;

/// How long the selector waits before queueing again after an error, with
/// [`LeaderSelector::auto_requeue`] on.
const ERROR_PAUSE: Duration = Duration::from_secs(1);

/// The longest one sleep of [`Leadership::wait`] before it looks again.
const WAIT_POLL: Duration = Duration::from_millis(50);

type TakeLeadership = dyn Fn(&Leadership) + Send + Sync;

/// One term of leadership, handed to `take_leadership`: the term lasts
/// until the closure returns, and the closure should return as soon as the
/// term is no longer [`valid`](Leadership::is_valid).
///
/// Following Curator's `LeaderSelectorListenerAdapter`, a connection state
/// that the client's
/// [`ConnectionStateErrorPolicy`](latchkey_framework::ConnectionStateErrorPolicy)
/// takes as an error interrupts the term (another process may lead soon):
/// `Suspended` or `Lost` with the default
/// [`StandardConnectionStateErrorPolicy`](latchkey_framework::StandardConnectionStateErrorPolicy),
/// `Lost` only with
/// [`SessionConnectionStateErrorPolicy`](latchkey_framework::SessionConnectionStateErrorPolicy),
/// whose terms outlive a short outage.
/// [`LeaderSelector::interrupt_leadership`] and closing the selector
/// interrupt it too.
/// Rust cannot interrupt a running closure; it checks
/// [`is_valid`](Leadership::is_valid) or sleeps with
/// [`wait`](Leadership::wait), which returns early when the term ends.
///
/// A check of `is_valid` cannot fence a write that follows it: the write
/// may wait out an outage and be applied after the term ended. Write
/// through [`bound_client`](Leadership::bound_client) (its calls fail once
/// the term is interrupted or over) and, where a write must not land once
/// the lock is gone, through [`transaction`](Leadership::transaction)
/// (applied only while this term's lock node exists) or a recipe's
/// fenced view (`count.fenced(&leadership)`, see [`crate::Fence`]), or
/// carry [`fencing_token`](Leadership::fencing_token) to the store written
/// to.
pub struct Leadership {
    client: Client,
    /// `client` bound to the term: cancelled when it ends.
    bound: Client,
    /// The session that owns the lock node.
    owner: i64,
    /// The lock node of this term, and its czxid.
    node_path: String,
    fencing_token: i64,
    term: Arc<Term>,
}

struct Term {
    /// The session that owns the lock node.
    owner: i64,
    interrupted: AtomicBool,
    /// Cancelled when the term is interrupted or over: ends the calls of
    /// [`Leadership::bound_client`].
    cancel: CancelToken,
    /// Wakes [`Leadership::wait`] when the term is interrupted.
    lock: Mutex<()>,
    changed: Condvar,
    subscriptions: Mutex<Vec<ListenerHandle>>,
}

impl Term {
    fn new(owner: i64) -> Term {
        Term {
            owner,
            interrupted: AtomicBool::new(false),
            cancel: CancelToken::new(),
            lock: Mutex::new(()),
            changed: Condvar::new(),
            subscriptions: Mutex::new(Vec::new()),
        }
    }

    /// Whether the term may go on (see [`Leadership::is_valid`]); a lost
    /// term is in doubt too. A term found in an error state ends here for
    /// good: the state listener would interrupt it a moment later (or
    /// later still, behind a listener of the client's that blocks), and a
    /// leader told its term is over must not find it going on meanwhile.
    fn is_valid(&self, client: &Client) -> bool {
        if self.interrupted.load(Ordering::Acquire) {
            return false;
        }
        if !hold::is_lost(client, self.owner) && hold::policy_allows(client) {
            return true;
        }
        self.end();
        false
    }

    /// Marks the term interrupted and ends its bound calls; see
    /// [`Term::interrupt`], which also wakes [`Leadership::wait`] (whose
    /// lock a caller of this may hold).
    fn end(&self) {
        self.interrupted.store(true, Ordering::Release);
        self.cancel.cancel();
    }

    fn interrupt(&self) {
        self.end();
        let _guard = self.lock.lock();
        self.changed.notify_all();
    }
}

impl Leadership {
    /// Whether the term may go on: not interrupted, the lock not lost (the
    /// session that holds it is current), and the client in a state its
    /// error policy allows (connected; with the session policy, suspended
    /// too, while [`is_in_doubt`](Leadership::is_in_doubt) says so). Check
    /// it right before each step that needs to be the only leader. Once it
    /// is false the term is interrupted for good, its bound calls refused,
    /// even before the client's listeners have heard of the state.
    pub fn is_valid(&self) -> bool {
        self.term.is_valid(&self.client)
    }

    /// Whether the term was interrupted: by
    /// [`LeaderSelector::interrupt_leadership`], by closing the selector, or
    /// by an error state of the connection (`Suspended` or `Lost` with the
    /// standard policy, `Lost` with the session policy). For good: return.
    pub fn is_interrupted(&self) -> bool {
        self.term.interrupted.load(Ordering::Acquire)
    }

    /// Whether the lock, and leadership with it, was lost with its session.
    pub fn is_lost(&self) -> bool {
        hold::is_lost(&self.client, self.owner)
    }

    /// Whether the lock is in doubt right now: lost, or the client not
    /// connected.
    pub fn is_in_doubt(&self) -> bool {
        hold::in_doubt(&self.client, self.owner)
    }

    /// Sleeps for `timeout` (`Duration::MAX`: as long as the term lasts),
    /// waking early when the term ends; returns
    /// [`is_valid`](Leadership::is_valid) at the end. A leader that has
    /// nothing to do but lead sleeps in this and returns when it is false.
    pub fn wait(&self, timeout: Duration) -> bool {
        let deadline = deadline_after(timeout);
        let mut guard = self.term.lock.lock();
        loop {
            if !self.is_valid() {
                return false;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return true;
            }
            let poll = now + WAIT_POLL;
            let until = deadline.map_or(poll, |d| d.min(poll));
            let _ = self.term.changed.wait_until(&mut guard, until);
        }
    }

    /// The lock's standing as it changes (see [`HoldEvent`]); the channel
    /// disconnects when the term ends.
    pub fn events(&self) -> Receiver<HoldEvent> {
        let (rx, handle) = hold::subscribe(&self.client, self.owner);
        self.term.subscriptions.lock().push(handle);
        rx
    }

    /// The path of this term's lock node (as
    /// [`MutexGuard::node_path`](crate::MutexGuard::node_path)).
    pub fn node_path(&self) -> &str {
        &self.node_path
    }

    /// This term's fencing token: the czxid of its lock node, larger for
    /// every later term of this election (as
    /// [`MutexGuard::fencing_token`](crate::MutexGuard::fencing_token)).
    /// Stores written to outside ZooKeeper can refuse writes carrying a
    /// token smaller than the largest they have seen.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use latchkey_recipes::LeaderSelector;
    ///
    /// # fn write_plan(_token: i64, _plan: &str) {}
    /// let selector = LeaderSelector::new(client, "/services/scheduler/leader", "host-a", |leadership| {
    ///     println!("leading with lock node {}", leadership.node_path());
    ///     // The store keeps the largest token seen and refuses smaller ones,
    ///     // so a write of an earlier leader that arrives late is refused.
    ///     write_plan(leadership.fencing_token(), "plan v2");
    /// })?;
    /// selector.start()?;
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> i64 {
        self.fencing_token
    }

    /// A handle on the selector's client bound to this term: once the term
    /// is interrupted (by an error state of the connection,
    /// [`LeaderSelector::interrupt_leadership`] or closing the selector) or
    /// over (`take_leadership` returned), its calls fail with
    /// [`Error::Cancelled`] without being sent, and a call waiting on
    /// ZooKeeper then (for a reply, a reconnection, a retry's pause)
    /// returns so at once instead of being sent again in a later
    /// connection or session. Clones, also on other threads, are bound the
    /// same way.
    ///
    /// A request already sent when the term ends may still reach the
    /// server and be applied, as with any connection loss: for writes that
    /// must not land once the lock is gone use
    /// [`transaction`](Self::transaction).
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use latchkey_recipes::LeaderSelector;
    ///
    /// let selector = LeaderSelector::new(client, "/services/scheduler/leader", "host-a", |leadership| {
    ///     let zk = leadership.bound_client();
    ///     while leadership.is_valid() {
    ///         // Fails (Error::Cancelled) instead of being applied later if
    ///         // the term ends while this waits out an outage.
    ///         if zk.create().for_path("/jobs/job-", b"").is_err() {
    ///             return;
    ///         }
    /// #       break;
    ///     }
    /// })?;
    /// selector.start()?;
    /// # Ok(()) }
    /// ```
    pub fn bound_client(&self) -> &Client {
        &self.bound
    }

    /// A transaction through [`bound_client`](Self::bound_client) that
    /// begins with a check that this term's lock node still exists: the
    /// server applies it only while this process holds the lock, so a
    /// write delayed by an outage cannot land after another process took
    /// over (ZooKeeper orders it before the lock node's deletion, or fails
    /// it with `NoNode` on the check, operation 0). Add the writes and
    /// commit; the results start with the check's.
    ///
    /// A commit whose reply was lost is retried (until the term ends, which
    /// cancels it): if the lost attempt was applied, the retry fails (a
    /// create with `NodeExists`, a versioned write with `BadVersion`, or the
    /// check with `NoNode` once the lock node has gone since), so an error
    /// after a connection loss, `Cancelled` included, does not prove that
    /// nothing was applied.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use latchkey_recipes::LeaderSelector;
    ///
    /// let selector = LeaderSelector::new(client, "/services/scheduler/leader", "host-a", |leadership| {
    ///     let written = leadership
    ///         .transaction()
    ///         .set_data("/services/scheduler/plan", b"v2")
    ///         .commit();
    ///     if written.is_err() {
    ///         return; // refused, or in doubt after a lost reply (see above)
    ///     }
    /// })?;
    /// selector.start()?;
    /// # Ok(()) }
    /// ```
    pub fn transaction(&self) -> Transaction<'_> {
        self.bound.transaction().check_exists(&self.node_path)
    }
}

impl crate::Fence for Leadership {
    /// This term's lock node: a write fenced by the leadership is applied
    /// only while the term's hold stands (see [`Leadership::transaction`]).
    fn fence_path(&self) -> Result<String> {
        Ok(crate::fence::full_path(&self.client, &self.node_path))
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("valid", &self.is_valid())
            .field("interrupted", &self.is_interrupted())
            .field("lost", &self.is_lost())
            .field("node_path", &self.node_path)
            .field("fencing_token", &self.fencing_token)
            .finish()
    }
}

/// Leader election by Curator's `LeaderSelector`, wire-compatible with it:
/// participants queue on an [`InterProcessMutex`] at the path (nodes
/// `_c_<uuid>-lock-<seq>` holding the participant id), so Java and Rust
/// processes take part in the same election.
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
/// Also unlike Curator, an error state of the connection (by the
/// client's error policy) interrupts only a term under way: a selector
/// that is queued stays queued, its lock node made again in a new session
/// if the old one is lost. Curator's `LeaderSelectorListenerAdapter`
/// cancels the whole election then, and a selector without auto-requeue
/// is out until it requeues. Leadership that may be dated is guarded
/// here instead at the start of a term: a term whose hold is already lost,
/// or that begins in an error state, begins interrupted
/// ([`Leadership::is_valid`] is false); `take_leadership` is still called
/// with it, where Curator would not call `takeLeadership`.
///
/// The holder of the lock leads: `take_leadership` runs on the selector's
/// thread with a [`Leadership`] handle, and leadership ends (the lock is
/// released) when it returns. With [`auto_requeue`](Self::auto_requeue)
/// the selector queues again each time, also after errors; without it,
/// [`requeue`](Self::requeue) queues it again. Dropping the selector closes
/// it.
///
/// On close, a queued attempt is cancelled (its node removed) and a term
/// under way is interrupted; its lock node goes once `take_leadership`
/// returns. A selector closed just as it wins the lock gives it back
/// without calling `take_leadership`. Closing a whole group: a member
/// still open when the lock comes to it leads, so members closed one
/// after another from the leader down (a rolling stop, or processes
/// stopped a few milliseconds apart) hand leadership down the queue, up
/// to one short term per member, each `take_leadership` interrupted when
/// its member closes. Four members closed in queue order, each once the
/// one before had gone, gave 2 or 3 extra terms a round. To stop a group
/// without handing leadership on, close the followers first and the
/// leader last. Selectors of one process closed in the same moment hand
/// nothing on.
///
/// # In-doubt writes
///
/// The selector writes only its lock node, as [`InterProcessMutex`] does:
/// a protected create, found again after a lost reply, and a release that
/// hands its delete to the client's background after at most
/// [`HANDOVER_AFTER`](latchkey_framework::HANDOVER_AFTER). For the
/// leader's own writes, see [`Leadership::transaction`].
///
/// # Close
///
/// [`close`](Self::close) does not block: it cancels a queued attempt
/// (whose node is then deleted as a release's is), interrupts the term
/// and returns. The selector's thread releases the lock and ends once
/// `take_leadership` returns, so a `take_leadership` that never looks at
/// [`Leadership::is_valid`] keeps the lock, after `close` and drop too,
/// until it returns or the session ends. After a close,
/// [`start`](Self::start) and [`requeue`](Self::requeue) fail with
/// [`Error::IllegalState`].
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_recipes::LeaderSelector;
///
/// let selector = LeaderSelector::new(client, "/services/scheduler/leader", "host-a", |leadership| {
///     // Lead in steps while the term is valid; return to give leadership up.
///     for _step in 0..10 {
///         if !leadership.wait(Duration::from_millis(500)) {
///             return; // interrupted, suspended or lost
///         }
///         // ... one step of the leader's work ...
///     }
/// })?;
/// selector.auto_requeue();
/// selector.start()?;
/// // ... later: selector.close() or drop(selector)
/// # Ok(()) }
/// ```
pub struct LeaderSelector {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    mutex: InterProcessMutex,
    id: Mutex<String>,
    take: Box<TakeLeadership>,
    auto_requeue: AtomicBool,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    started: bool,
    closed: bool,
    /// Queued (or about to be), not yet leading.
    queued: bool,
    /// The term under way.
    term: Option<Arc<Term>>,
    /// Cancels the acquire under way on close.
    cancel: Option<CancelToken>,
    /// The error that ended the selector's work (without auto-requeue).
    last_error: Option<String>,
}

impl std::fmt::Debug for LeaderSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderSelector")
            .field("path", &self.inner.mutex.path())
            .field("id", &*self.inner.id.lock())
            .field("leader", &self.has_leadership())
            .finish()
    }
}

impl LeaderSelector {
    /// A selector on `path` whose lock node holds `id` (empty: who holds
    /// it, as for any mutex); `take_leadership` runs each time it leads.
    /// Not started.
    pub fn new(
        client: &Client,
        path: &str,
        id: &str,
        take_leadership: impl Fn(&Leadership) + Send + Sync + 'static,
    ) -> Result<LeaderSelector> {
        let mutex = InterProcessMutex::with_lock_data(client, path, id.as_bytes())?;
        Ok(LeaderSelector {
            inner: Arc::new(Inner {
                client: client.clone(),
                mutex,
                id: Mutex::new(id.to_owned()),
                take: Box::new(take_leadership),
                auto_requeue: AtomicBool::new(false),
                state: Mutex::default(),
                changed: Condvar::new(),
            }),
        })
    }

    /// Queues again each time leadership ends, and after errors (Curator's
    /// `autoRequeue`).
    pub fn auto_requeue(&self) {
        self.inner.auto_requeue.store(true, Ordering::Release);
        self.inner.changed.notify_all();
    }

    /// Sets the id the next lock node holds.
    pub fn set_id(&self, id: &str) -> Result<()> {
        validate_node_size("LeaderSelector", self.inner.mutex.path(), id.as_bytes())?;
        self.inner.mutex.set_lock_data(id.as_bytes())?;
        *self.inner.id.lock() = id.to_owned();
        Ok(())
    }

    /// This selector's id.
    pub fn id(&self) -> String {
        self.inner.id.lock().clone()
    }

    /// Starts the selector's thread and queues for leadership. Fails with
    /// [`Error::IllegalState`] if started before or closed.
    pub fn start(&self) -> Result<()> {
        {
            let mut s = self.inner.state.lock();
            if s.started || s.closed {
                return Err(Error::IllegalState(format!(
                    "the leader selector at {} cannot be started more than once, or once closed",
                    self.inner.mutex.path()
                )));
            }
            s.started = true;
            s.queued = true;
        }
        let inner = Arc::clone(&self.inner);
        let spawned = std::thread::Builder::new()
            .name("latchkey-leader-selector".into())
            .spawn(move || inner.run());
        if let Err(e) = spawned {
            self.inner.state.lock().closed = true;
            return Err(e.into());
        }
        Ok(())
    }

    /// Queues for leadership again after a term ended (not needed with
    /// auto-requeue). `Ok(false)` if already queued or leading. Fails with
    /// [`Error::IllegalState`] if not started or closed.
    pub fn requeue(&self) -> Result<bool> {
        let mut s = self.inner.state.lock();
        if !s.started || s.closed {
            return Err(Error::IllegalState(format!(
                "the leader selector at {} is not started or is closed",
                self.inner.mutex.path()
            )));
        }
        if s.queued || s.term.is_some() {
            return Ok(false);
        }
        s.queued = true;
        self.inner.changed.notify_all();
        Ok(true)
    }

    /// Whether this selector leads now: a term is under way and valid.
    pub fn has_leadership(&self) -> bool {
        let term = self.inner.state.lock().term.clone();
        term.is_some_and(|t| t.is_valid(&self.inner.client))
    }

    /// Interrupts the term under way, if any (Curator's
    /// `interruptLeadership`): its [`Leadership`] turns invalid and its
    /// waits return.
    pub fn interrupt_leadership(&self) {
        if let Some(term) = self.inner.state.lock().term.clone() {
            term.interrupt();
        }
    }

    /// Every participant, in queue order, the first marked as leader.
    pub fn participants(&self) -> Result<Vec<Participant>> {
        let nodes = self.participant_nodes()?;
        participant::participants(&self.inner.client, &nodes)
    }

    /// The current leader as ZooKeeper sees it, or
    /// [`Participant::default`] (empty id, not leader) if nobody queues.
    pub fn leader(&self) -> Result<Participant> {
        let nodes = self.participant_nodes()?;
        participant::leader(&self.inner.client, &nodes)
    }

    fn participant_nodes(&self) -> Result<Vec<String>> {
        match self.inner.mutex.participant_nodes() {
            Err(e) if e.is(latchkey_framework::ErrorCode::NoNode) => Ok(Vec::new()),
            other => other,
        }
    }

    /// The error that stopped the selector's work, if one did (without
    /// auto-requeue, an error queueing ends the work as in Curator), or
    /// the last panic of `take_leadership` ("take_leadership panicked: "
    /// and its message, if it is a string), which ends that term.
    pub fn last_error(&self) -> Option<String> {
        self.inner.state.lock().last_error.clone()
    }

    /// Leaves the election: a queued attempt is cancelled (its node
    /// removed), a term under way is interrupted, and the lock is released
    /// once `take_leadership` returns. Does not wait for it. Idempotent;
    /// dropping the selector closes it too. A selector closed while it
    /// wins the lock releases it without calling `take_leadership`. To
    /// close every selector of a group without leadership passing from one
    /// to the next, close the leader last (see [`LeaderSelector`]).
    pub fn close(&self) {
        let mut s = self.inner.state.lock();
        s.closed = true;
        if let Some(term) = &s.term {
            term.interrupt();
        }
        if let Some(cancel) = &s.cancel {
            cancel.cancel();
        }
        self.inner.changed.notify_all();
    }
}

impl Drop for LeaderSelector {
    fn drop(&mut self) {
        self.close();
    }
}

impl Inner {
    /// The selector's thread: queue, lead, release, and again while
    /// queued, until closed.
    fn run(self: Arc<Self>) {
        loop {
            let cancel = {
                let mut s = self.state.lock();
                while !s.closed && !s.queued {
                    self.changed.wait(&mut s);
                }
                if s.closed {
                    return;
                }
                let cancel = CancelToken::new();
                s.cancel = Some(cancel.clone());
                cancel
            };
            let outcome = self.mutex.acquire_cancellable(Duration::MAX, &cancel);
            self.state.lock().cancel = None;
            match outcome {
                Ok(true) => {
                    self.lead();
                    continue;
                }
                Ok(false) | Err(Error::Cancelled) => {}
                Err(e) => {
                    log::warn!("leader selector {}: {e}", self.mutex.path());
                    let mut s = self.state.lock();
                    if !self.auto_requeue.load(Ordering::Acquire) {
                        s.last_error = Some(e.to_string());
                        s.queued = false;
                        continue;
                    }
                    let _ = self
                        .changed
                        .wait_until(&mut s, Instant::now() + ERROR_PAUSE);
                    continue;
                }
            }
            let mut s = self.state.lock();
            s.queued = self.auto_requeue.load(Ordering::Acquire);
        }
    }

    /// One term: `take_leadership` runs with the handle, then the lock goes.
    fn lead(&self) {
        let owner = self.client.session_id();
        let term = Arc::new(Term::new(owner));
        if self.mutex.is_lost() {
            term.interrupt();
        }
        // Curator's adapter: an error state by the client's policy
        // (Suspended or Lost; with the session policy, Lost only)
        // interrupts the term.
        let weak = Arc::downgrade(&term);
        let policy = self.client.connection_state_error_policy();
        let listener = self.client.add_listener(move |state| {
            if let Some(term) = weak.upgrade() {
                if policy.is_error_state(state) || state == ConnectionState::Lost {
                    term.interrupt();
                }
            }
        });
        {
            let mut s = self.state.lock();
            s.queued = false;
            if s.closed {
                // Closed while the lock was being won: a closed selector
                // leads no term (`close` said it leaves the election), and
                // the lock goes at once to whoever queues next, if anyone.
                // Under the lock `close` takes, so a close from here on
                // finds the term and interrupts it.
                drop(s);
                drop(listener);
                term.cancel.cancel();
                if let Err(e) = self.mutex.release() {
                    log::warn!("leader selector {}: releasing: {e}", self.mutex.path());
                }
                return;
            }
            s.term = Some(Arc::clone(&term));
        }
        // This thread holds the mutex: its hold is this term's.
        let leadership = Leadership {
            client: self.client.clone(),
            bound: self.client.with_cancel(Some(&term.cancel)),
            owner,
            node_path: self.mutex.lock_node_path().unwrap_or_default(),
            fencing_token: self.mutex.fencing_token().unwrap_or_default(),
            term: Arc::clone(&term),
        };
        if !hold::policy_allows(&self.client) {
            term.interrupt();
        }
        let panicked = catch_unwind(AssertUnwindSafe(|| (self.take)(&leadership)))
            .err()
            .map(|panic| {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|m| m.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned());
                match message {
                    Some(m) => format!("take_leadership panicked: {m}"),
                    None => "take_leadership panicked".to_string(),
                }
            });
        if let Some(panicked) = &panicked {
            log::warn!(
                "leader selector {}: {panicked}; leadership ends",
                self.mutex.path()
            );
        }
        drop(listener);
        // The term is over: its bound calls end before the lock goes.
        term.cancel.cancel();
        term.subscriptions.lock().clear();
        {
            // In one step with the end of the term, so that a `requeue`
            // accepted from now on is not overwritten (Curator's
            // `internalRequeue`): queued again before the release.
            let mut s = self.state.lock();
            s.term = None;
            if panicked.is_some() {
                s.last_error = panicked;
            }
            if self.auto_requeue.load(Ordering::Acquire) {
                s.queued = true;
            }
        }
        if let Err(e) = self.mutex.release() {
            log::warn!("leader selector {}: releasing: {e}", self.mutex.path());
        }
    }
}

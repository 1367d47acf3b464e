//! The lock driver every recipe shares (Curator's `LockInternals`): a
//! protected ephemeral-sequential node per attempt, the children sorted by
//! sequence, and a wait on exactly one other node.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use latchkey_framework::paths;
use latchkey_framework::{Client, CreateMode, Error, ErrorCode, Result, WatchedEvent};
use parking_lot::{Condvar, Mutex};

use crate::cancel::{self, CancelToken};
use crate::locks::metrics;
use crate::locks::rwlock::{READ_LOCK_NAME, WRITE_LOCK_NAME};

/// What a driver decides for one listing of the lock's children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The caller holds the lock.
    Acquired,
    /// Wait until this child (a name under the lock path) changes, then
    /// list the children again and decide anew. The waiter always lists
    /// again, as Curator's does: a node's deletion alone never proves that
    /// ours still stands (a session's close deletes all its nodes in one
    /// transaction, whose events come in no fixed order) nor that none
    /// joined ahead (a downgrade read node sorts with its write node).
    WaitFor {
        /// The child to watch.
        node: String,
    },
}

/// What a lock waiter does once its wait ends (see [`after_wake`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterWake {
    /// List the queue again and decide anew.
    ListAgain,
    /// Give up: the acquire is not granted, and its node goes.
    GiveUp,
}

/// The waiter's rule once its wait ends (Curator's `internalLockLoop`),
/// whatever ended it: the deletion of the node it watched, another event
/// on that node, a reconnection, or the node being gone already when the
/// watch was to be set. A wake-up never grants the lock by itself (see
/// [`Decision::WaitFor`]): the waiter lists the queue again and decides,
/// unless its deadline has passed. `LockInternals` follows this rule, and
/// the model check of the protocol calls it too (`model_support`).
pub fn after_wake(deadline_passed: bool) -> AfterWake {
    if deadline_passed {
        AfterWake::GiveUp
    } else {
        AfterWake::ListAgain
    }
}

/// Decides, from the sorted children, whether a node holds the lock
/// (Curator's `LockInternalsDriver.getsTheLock`). A mutex takes a custom
/// one through [`crate::InterProcessMutex::with_lock_driver`].
pub trait LockDriver: Send + Sync {
    /// `children` are sorted; `ours` is our node's name.
    fn decide(&self, children: &[String], ours: &str, max_leases: usize) -> Result<Decision>;

    /// Curator's `getSortingSequence`: `Some(seq)` makes the next node of
    /// the calling thread an EPHEMERAL (not sequential) node named
    /// `<lock name><seq>`, which sorts wherever `seq` puts it. The
    /// read-write lock's read side answers its write node's sequence while
    /// the calling thread holds the write lock, so that a downgrade read
    /// node sorts with the write node, ahead of waiting writers. The
    /// default, `None`, queues at the end as usual.
    fn sorting_sequence(&self) -> Option<String> {
        None
    }
}

/// Curator's standard rule: the first `max_leases` nodes hold the lock; any
/// other waits for the node `max_leases` places before it.
#[derive(Clone, Copy, Debug, Default)]
pub struct StandardDriver;

impl LockDriver for StandardDriver {
    fn decide(&self, children: &[String], ours: &str, max_leases: usize) -> Result<Decision> {
        let index = our_index(children, ours)?;
        if index < max_leases {
            return Ok(Decision::Acquired);
        }
        Ok(Decision::WaitFor {
            node: children[index - max_leases].clone(),
        })
    }
}

/// Our node's place among the children, or NoNode if it is gone (session
/// lost, or deleted by someone else).
pub(crate) fn our_index(children: &[String], ours: &str) -> Result<usize> {
    children
        .iter()
        .position(|c| c == ours)
        .ok_or_else(|| Error::Zk {
            code: ErrorCode::NoNode,
            path: Some(ours.to_owned()),
        })
}

/// Curator's sort key (`StandardLockInternalsDriver.fixForSorting`, applied
/// for each of `names` in turn, as the read-write lock's sorter does): what
/// follows the last occurrence of the name, or the whole child when the
/// name does not occur.
pub fn sort_key<'a>(child: &'a str, names: &[&str]) -> &'a str {
    names
        .iter()
        .fold(child, |rest, name| match rest.rfind(name) {
            Some(i) => &rest[i + name.len()..],
            None => rest,
        })
}

/// Sorts children into Curator's queue order, so that Java and Rust
/// processes agree on who is first: by [`sort_key`], compared as text (byte
/// order, which is Java's UTF-16 order for every character ZooKeeper allows
/// in a name: it refuses surrogates), in a stable sort that keeps the
/// server's order for equal keys (a downgrade read node and its write
/// node). The keys are compared as text, not as numbers: "5" sorts after
/// "0000000006", and once ZooKeeper's sequence counter wraps to negative
/// values ("-2147483648"), those sort before every positive one and, among
/// themselves, newest first, so a new node can sort ahead of older ones;
/// Curator does the same, and a queue shared with it must agree with it
/// more than with arithmetic. (The counter wraps only on a lock path that
/// was never empty for 2^31 creations; an empty container node goes, and
/// its counter with it.)
pub fn sort_children(children: &mut [String], names: &[&str]) {
    children.sort_by(|a, b| sort_key(a, names).cmp(sort_key(b, names)));
}

/// Wakes a waiter: a watch fired, the connection state changed, or the
/// client closed.
/// Waiters read the epoch before they look, and wait for it to move, so a
/// wake-up that comes while they look is not lost.
#[derive(Default)]
pub(crate) struct Signal {
    epoch: Mutex<u64>,
    cond: Condvar,
}

impl Signal {
    pub(crate) fn epoch(&self) -> u64 {
        *self.epoch.lock()
    }

    pub(crate) fn notify(&self) {
        *self.epoch.lock() += 1;
        self.cond.notify_all();
    }

    /// Waits for a wake-up after `epoch`: true if one came, false at the
    /// deadline.
    pub(crate) fn wait(&self, epoch: u64, deadline: Option<Instant>) -> bool {
        let mut now = self.epoch.lock();
        while *now == epoch {
            match deadline {
                Some(d) => {
                    if self.cond.wait_until(&mut now, d).timed_out() {
                        return *now != epoch;
                    }
                }
                None => self.cond.wait(&mut now),
            }
        }
        true
    }
}

#[cfg(test)]
mod signal_tests {
    use super::*;

    const SHORT: Duration = Duration::from_millis(20);

    /// `signal.wait(epoch, deadline)` on a thread of its own: its answer, or
    /// a failed test if it has not returned within 10 s (a wait without a
    /// deadline that misses its wake-up must not hang the suite).
    fn wait_at_most_10s(signal: &Arc<Signal>, epoch: u64, deadline: Option<Instant>) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        let signal = Arc::clone(signal);
        std::thread::spawn(move || {
            let _ = tx.send(signal.wait(epoch, deadline));
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the wait missed its wake-up")
    }

    #[test]
    fn a_wait_with_no_wake_up_ends_false_at_its_deadline() {
        let signal = Signal::default();
        let epoch = signal.epoch();
        let started = Instant::now();
        assert!(!signal.wait(epoch, Some(started + SHORT)));
        assert!(started.elapsed() >= SHORT);
        // A deadline already passed: false at once.
        assert!(!signal.wait(epoch, Some(Instant::now())));
    }

    #[test]
    fn every_notify_moves_the_epoch() {
        let signal = Signal::default();
        let mut seen = vec![signal.epoch()];
        for _ in 0..3 {
            signal.notify();
            seen.push(signal.epoch());
        }
        let mut distinct = seen.clone();
        distinct.dedup();
        assert_eq!(distinct, seen, "an epoch repeated: {seen:?}");
    }

    #[test]
    fn a_notify_after_the_epoch_was_read_is_not_lost() {
        // The waiter reads the epoch, looks, and only then waits: a notify
        // that came meanwhile ends the wait at once, deadline or not.
        let signal = Arc::new(Signal::default());
        let epoch = signal.epoch();
        signal.notify();
        assert!(wait_at_most_10s(&signal, epoch, None));
        let epoch = signal.epoch();
        signal.notify();
        let deadline = Instant::now() + Duration::from_secs(60);
        assert!(wait_at_most_10s(&signal, epoch, Some(deadline)));
        // The epoch read after the notify waits for the next one.
        assert!(!signal.wait(signal.epoch(), Some(Instant::now() + SHORT)));
    }

    #[test]
    fn a_blocked_waiter_wakes_at_a_notify_from_another_thread() {
        let signal = Arc::new(Signal::default());
        let epoch = signal.epoch();
        let waiter = {
            let signal = Arc::clone(&signal);
            std::thread::spawn(move || wait_at_most_10s(&signal, epoch, None))
        };
        signal.notify();
        assert!(waiter.join().unwrap());
    }
}

/// The watches a recipe object keeps on other nodes: at most one callback
/// per watched node and kind, however many waiters wait on it (Curator's one
/// watcher object per lock, which the Java client's watch set keeps once).
///
/// A timed attempt that gives up leaves nothing behind but a dead entry in
/// the node's waiter list, dropped at the next registration: polling a held
/// lock costs no memory, where a callback per attempt would pile up on the
/// holder's node until it changes.
#[derive(Default)]
pub(crate) struct NodeWatches {
    by_node: Mutex<HashMap<(WatchOn, String), Watched>>,
    next_id: AtomicU64,
}

/// What a watch is set on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum WatchOn {
    /// The node's data or its deletion (getData).
    Data,
    /// The node's children (getChildren).
    Children,
}

/// One armed watch and who waits on it.
struct Watched {
    /// Tells this arming from an earlier one whose callback may still run.
    id: u64,
    /// Watches end with their session.
    session: i64,
    waiters: Vec<Weak<Signal>>,
}

impl NodeWatches {
    /// Has `signal` woken at the next event of `path`'s data: joins the
    /// watch already set for this session, or sets one (reading the node).
    /// Fails with NoNode if the node is gone (then no watch is left).
    pub(crate) fn watch_data(
        self: &Arc<Self>,
        client: &Client,
        path: &str,
        signal: &Arc<Signal>,
    ) -> Result<()> {
        if self.join(WatchOn::Data, path, client.session_id(), signal) {
            return Ok(());
        }
        let (id, wake) = self.arm(WatchOn::Data, path, client.session_id(), signal);
        client
            .get_data_watch_waker(path, wake)
            .map(|_| ())
            .inspect_err(|_| self.disarm(WatchOn::Data, path, id))
    }

    /// The children of `path`, with `signal` woken at their next change (see
    /// [`NodeWatches::watch_data`]).
    pub(crate) fn watch_children(
        self: &Arc<Self>,
        client: &Client,
        path: &str,
        signal: &Arc<Signal>,
    ) -> Result<Vec<String>> {
        if self.join(WatchOn::Children, path, client.session_id(), signal) {
            return client.get_children(path);
        }
        let (id, wake) = self.arm(WatchOn::Children, path, client.session_id(), signal);
        client
            .get_children_watch(path, wake)
            .inspect_err(|_| self.disarm(WatchOn::Children, path, id))
    }

    /// Adds `signal` to the waiters of a watch set in `session`, if any.
    fn join(&self, on: WatchOn, path: &str, session: i64, signal: &Arc<Signal>) -> bool {
        let mut map = self.by_node.lock();
        match map.get_mut(&(on, path.to_owned())) {
            Some(w) if w.session == session && session != 0 => {
                w.waiters.retain(|s| s.strong_count() > 0);
                w.waiters.push(Arc::downgrade(signal));
                true
            }
            _ => false,
        }
    }

    /// Records a new watch with `signal` as its first waiter and returns its
    /// callback, which wakes every waiter then present.
    fn arm(
        self: &Arc<Self>,
        on: WatchOn,
        path: &str,
        session: i64,
        signal: &Arc<Signal>,
    ) -> (u64, impl FnOnce(WatchedEvent) + Send + 'static) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let replaced = self.by_node.lock().insert(
            (on, path.to_owned()),
            Watched {
                id,
                session,
                waiters: vec![Arc::downgrade(signal)],
            },
        );
        // Waiters of a watch from an earlier session look again.
        wake_all(replaced);
        let (registry, path) = (Arc::downgrade(self), path.to_owned());
        let wake = move |_: WatchedEvent| {
            if let Some(registry) = registry.upgrade() {
                registry.disarm(on, &path, id);
            }
        };
        (id, wake)
    }

    /// Ends watch `id` (its event came, or setting it failed) and wakes its
    /// waiters, who look again.
    fn disarm(&self, on: WatchOn, path: &str, id: u64) {
        let ended = {
            let mut map = self.by_node.lock();
            let key = (on, path.to_owned());
            match map.get(&key) {
                Some(w) if w.id == id => map.remove(&key),
                _ => None,
            }
        };
        wake_all(ended);
    }
}

impl std::fmt::Debug for NodeWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeWatches")
            .field("armed", &self.by_node.lock().len())
            .finish()
    }
}

fn wake_all(watched: Option<Watched>) {
    for waiter in watched.into_iter().flat_map(|w| w.waiters) {
        if let Some(signal) = waiter.upgrade() {
            signal.notify();
        }
    }
}

/// Registers a recipe's new ephemeral node of session `owner` for removal
/// if that session is declared lost (see
/// [`Client::delete_when_session_lost`]); [`delete_ephemeral`] forgets it.
pub(crate) fn delete_if_lost(client: &Client, path: &str, owner: i64) {
    if let Err(e) = client.delete_when_session_lost(path, owner) {
        log::warn!("cannot register {path} for removal with a lost session: {e}");
    }
}

/// Deletes an ephemeral node of session `owner` (see
/// [`LockInternals::delete_node`]); a node of a session already declared
/// lost is deleted from the next session, if still that session's.
pub(crate) fn delete_ephemeral(client: &Client, path: &str, owner: i64) -> Result<()> {
    client.keep_when_session_lost(path);
    if client.session_id() != owner {
        log::debug!("{path} ended with its session");
        return Ok(());
    }
    client.delete().in_background().for_path(path)
}

/// The most path and node data a recipe sends in one create: ZooKeeper's
/// default request limit (`jute.maxbuffer`, 1 MiB) less room for the
/// request's header, ACL and the protected-name prefix. A larger request
/// would be refused by the server by dropping the connection, which every
/// other call on the client would feel.
pub(crate) const MAX_REQUEST_PAYLOAD: usize = 0xfffff - 4096;

/// The deadline `timeout` from now, or `None` (no deadline) when it is too
/// far away for an `Instant` (such as `Duration::MAX`).
///
/// Every timed recipe call turns its timeout into a deadline here, once, and
/// passes the deadline down; this is the one place where an overall
/// deadline set on the client would be combined with the call's own
/// (the earlier of the two wins).
pub(crate) fn deadline_after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// How long a timed call's requests may take however short its timeout: a
/// zero timeout still queues and looks once (as Curator's `acquire(0, ..)`)
/// when ZooKeeper answers within this. It is also the most a timed call
/// overruns a timeout shorter than this.
pub const REQUEST_GRACE: Duration = Duration::from_secs(1);

/// A handle on `client` whose every request, retries and reconnect waits
/// included, returns by `deadline` (but no sooner than [`REQUEST_GRACE`]
/// from now), or by the client's own deadline if that is earlier. Recipes
/// send a timed call's requests through it, so that the call keeps its
/// deadline even while ZooKeeper cannot be reached; what outlives the call
/// (a lease, a release, a background delete) keeps the recipe's own client.
pub(crate) fn bounded(client: &Client, deadline: Option<Instant>) -> Client {
    let requests = deadline.map(|d| d.max(Instant::now() + REQUEST_GRACE));
    let earliest = match (requests, client.deadline()) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    client.with_deadline(earliest)
}

/// The handle through which a call that fails with `e` gives back what it
/// took: a cancelled call does not wait for ZooKeeper's answer (it returns
/// at once; the delete is sent, and the background makes sure of it); any
/// other failure keeps `client`'s deadline.
pub(crate) fn giving_up(client: &Client, e: &Error) -> Client {
    match e {
        Error::Cancelled => client.with_deadline(Some(Instant::now())),
        _ => client.clone(),
    }
}

/// Whether `e` says that a timed call's time ran out in a request: the call
/// then ends as not acquired, like a wait that reaches its deadline.
pub(crate) fn out_of_time(e: &Error, deadline: Option<Instant>) -> bool {
    deadline.is_some() && matches!(e, Error::Timeout { .. })
}

/// The data a lock or lease node holds when none was given: who holds it,
/// as `host=<host name> pid=<process id> thread=<thread name or id>`
/// (Curator stores the local address). Read by the calling thread.
pub(crate) fn who_holds() -> Vec<u8> {
    // Read once: the process id costs a system call per lock otherwise.
    static HOST_AND_PID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let host_and_pid = HOST_AND_PID.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown".into());
        format!("host={host} pid={}", std::process::id())
    });
    let current = std::thread::current();
    let thread = match current.name() {
        Some(name) => name.to_owned(),
        None => format!("{:?}", current.id()),
    };
    format!("{host_and_pid} thread={thread}").into_bytes()
}

/// The data to store in a node: `data`, or [`who_holds`] when it is empty.
pub(crate) fn node_data_or_who(data: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if data.is_empty() {
        std::borrow::Cow::Owned(who_holds())
    } else {
        std::borrow::Cow::Borrowed(data)
    }
}

/// Checks that a recipe node of `path` holding `data` fits in one request.
pub(crate) fn validate_node_size(op: &str, path: &str, data: &[u8]) -> Result<()> {
    if path.len().saturating_add(data.len()) > MAX_REQUEST_PAYLOAD {
        return Err(Error::InvalidArgument(format!(
            "{op} at {}: path ({} bytes) and node data ({} bytes) exceed the {} bytes \
             one ZooKeeper request may carry",
            shorten(path),
            path.len(),
            data.len(),
            MAX_REQUEST_PAYLOAD
        )));
    }
    Ok(())
}

/// A path cut to a readable length for messages.
pub(crate) fn shorten(path: &str) -> String {
    const SHOWN: usize = 80;
    match path.char_indices().nth(SHOWN) {
        Some((i, _)) => format!("{}... ({} bytes)", &path[..i], path.len()),
        None => path.to_owned(),
    }
}

/// Checks that `path` is a valid ZooKeeper path (the root included), for a
/// recipe that may sit anywhere: an error names the path (its first 200
/// characters) and why.
pub(crate) fn validate_any_path(path: &str) -> Result<()> {
    paths::validate_path(path).map_err(|e| Error::InvalidPath {
        path: path.chars().take(200).collect(),
        reason: e.kind().to_string(),
    })
}

/// Checks a recipe's base path: a valid ZooKeeper path other than the root,
/// whose children a recipe would share with everything else there, and
/// outside ZooKeeper's own `/zookeeper` subtree (quotas, configuration),
/// unless a namespace puts it elsewhere.
pub(crate) fn validate_recipe_path(client: &Client, path: &str) -> Result<()> {
    if path.len() > MAX_REQUEST_PAYLOAD {
        return Err(Error::InvalidPath {
            path: shorten(path),
            reason: format!(
                "longer than the {MAX_REQUEST_PAYLOAD} bytes one ZooKeeper request may carry"
            ),
        });
    }
    paths::validate_path(path).map_err(|e| Error::InvalidPath {
        path: path.to_owned(),
        reason: e.kind().to_string(),
    })?;
    if path == "/" {
        return Err(Error::InvalidPath {
            path: path.into(),
            reason: "a recipe needs its own node, not the root".into(),
        });
    }
    let reserved = path == "/zookeeper" || path.starts_with("/zookeeper/");
    if reserved
        && client
            .namespace()
            .is_none_or(|ns| ns.trim_matches('/').is_empty())
    {
        return Err(Error::InvalidPath {
            path: path.into(),
            reason: "/zookeeper is ZooKeeper's own subtree, not for recipes".into(),
        });
    }
    Ok(())
}

/// The acquired node: its path and its creation zxid (a fencing token).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockNode {
    /// Full (namespace-relative) path of the lock node.
    pub path: String,
    /// The node's czxid: larger for every later holder of the lock path.
    pub czxid: i64,
    /// The session that owns the (ephemeral) node; the hold is gone once the
    /// client's session is another.
    pub owner: i64,
}

/// Runs with every new lock node before its wait (the mutex sets its
/// revocation watch there); an error ends the attempt as a failed wait does.
/// Its requests go through the client it is given: the attempt's handle,
/// bounded by a timed call's deadline.
pub(crate) type NodeHook = Arc<dyn Fn(&Client, &str) -> Result<()> + Send + Sync>;

/// Drives one kind of lock node under one lock path.
///
/// Its nodes are protected creates, found again by their `_c_<uuid>-`
/// prefix when a reply is lost (and deleted in the background if the
/// create fails in the end), and its deletes try once for at most
/// [`HANDOVER_AFTER`](latchkey_framework::HANDOVER_AFTER), then leave the
/// delete to the client's background (see
/// [`delete_node`](Self::delete_node)).
pub struct LockInternals {
    client: Client,
    base_path: String,
    lock_name: String,
    /// Names that mark this lock's nodes among the children (sorting and
    /// participant listing); the read-write lock shares a path between two.
    sort_names: Vec<String>,
    max_leases: usize,
    driver: Arc<dyn LockDriver>,
    node_hook: Mutex<Option<NodeHook>>,
    /// One watch per watched node, shared by every waiter of this lock.
    watches: Arc<NodeWatches>,
    /// Whether waits and holds count in [`metrics::lock_metrics`] and get a
    /// span; not for a lock that is part of another recipe's wait.
    observed: AtomicBool,
}

impl std::fmt::Debug for LockInternals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockInternals")
            .field("base_path", &self.base_path)
            .field("lock_name", &self.lock_name)
            .field("max_leases", &self.max_leases)
            .finish()
    }
}

impl LockInternals {
    /// A driver for nodes named `lock_name` under `base_path`. `sort_names`
    /// lists every lock name that shares the path; children sort by the text
    /// that follows them, as Curator's sorter does.
    pub fn new(
        client: &Client,
        base_path: &str,
        lock_name: &str,
        sort_names: &[&str],
        max_leases: usize,
        driver: Arc<dyn LockDriver>,
    ) -> Result<Self> {
        validate_recipe_path(client, base_path)?;
        if max_leases == 0 {
            return Err(Error::InvalidArgument(
                "max_leases must be at least 1".into(),
            ));
        }
        Ok(LockInternals {
            client: client.clone(),
            base_path: base_path.to_owned(),
            lock_name: lock_name.to_owned(),
            sort_names: sort_names.iter().map(|s| s.to_string()).collect(),
            max_leases,
            driver,
            node_hook: Mutex::new(None),
            watches: Arc::default(),
            observed: AtomicBool::new(true),
        })
    }

    /// Leaves this lock's waits and holds out of the metrics and spans: it
    /// is part of another recipe's wait (the semaphore's internal lock).
    pub(crate) fn set_unobserved(&self) {
        self.observed.store(false, Ordering::Relaxed);
    }

    /// What this lock is, in a wait's span.
    fn recipe(&self) -> &'static str {
        match self.lock_name.as_str() {
            READ_LOCK_NAME => "read_lock",
            WRITE_LOCK_NAME => "write_lock",
            _ => "mutex",
        }
    }

    /// Sets (or clears) what runs with every new lock node before its wait.
    pub(crate) fn set_node_hook(&self, hook: Option<NodeHook>) {
        *self.node_hook.lock() = hook;
    }

    fn run_node_hook(&self, client: &Client, path: &str) -> Result<()> {
        let hook = self.node_hook.lock().clone();
        hook.map_or(Ok(()), |hook| hook(client, path))
    }

    /// The client the lock uses.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The lock path.
    pub fn base_path(&self) -> &str {
        &self.base_path
    }

    /// The children of the lock path sorted by sequence (every kind of lock
    /// node sharing the path).
    pub fn sorted_children(&self) -> Result<Vec<String>> {
        self.sorted_children_by(&self.client)
    }

    fn sorted_children_by(&self, client: &Client) -> Result<Vec<String>> {
        let mut children = client.get_children(&self.base_path)?;
        self.sort(&mut children);
        Ok(children)
    }

    fn sort(&self, children: &mut [String]) {
        let names: Vec<&str> = self.sort_names.iter().map(String::as_str).collect();
        sort_children(children, &names);
    }

    /// The participants of this kind, in queue order, as full paths.
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        let children = match self.sorted_children() {
            Err(e) if e.is(ErrorCode::NoNode) => return Ok(Vec::new()),
            other => other?,
        };
        Ok(children
            .into_iter()
            .filter(|c| c.contains(&self.lock_name))
            .map(|c| paths::make_path(&self.base_path, &c))
            .collect())
    }

    /// Queues for the lock and waits until it is held or `deadline` passes
    /// (`Ok(None)`; the node is then removed). A node that disappears while
    /// waiting (session lost) is re-created as the retry policy allows.
    pub fn attempt_lock(&self, deadline: Option<Instant>, data: &[u8]) -> Result<Option<LockNode>> {
        self.attempt_lock_cancellable(deadline, data, None)
    }

    /// Like [`LockInternals::attempt_lock`]; once `cancel` is cancelled
    /// it fails with [`Error::Cancelled`], its node removed.
    ///
    /// The wait counts in [`lock_metrics`](crate::lock_metrics), and a node
    /// acquired counts as a hold until [`LockInternals::release`].
    pub fn attempt_lock_cancellable(
        &self,
        deadline: Option<Instant>,
        data: &[u8],
        cancel: Option<&CancelToken>,
    ) -> Result<Option<LockNode>> {
        if !self.observed.load(Ordering::Relaxed) {
            return self.queue_and_wait(deadline, data, cancel);
        }
        let node = metrics::observe_wait(self.recipe(), &self.base_path, || {
            self.queue_and_wait(deadline, data, cancel)
        })?;
        if node.is_some() {
            metrics::hold_started();
        }
        Ok(node)
    }

    /// Releases a node that [`LockInternals::attempt_lock`] acquired: deletes
    /// it as [`LockInternals::delete_node`] does, and counts the hold ended.
    pub fn release(&self, node: &LockNode) {
        self.release_by(&self.client, node);
    }

    /// Like [`LockInternals::release`], deleting the node through `client`
    /// (see [`LockInternals::delete_node_by`]).
    pub(crate) fn release_by(&self, client: &Client, node: &LockNode) {
        if self.observed.load(Ordering::Relaxed) {
            metrics::hold_ended();
        }
        self.delete_node_by(client, &node.path, node.owner);
    }

    fn queue_and_wait(
        &self,
        deadline: Option<Instant>,
        data: &[u8],
        cancel: Option<&CancelToken>,
    ) -> Result<Option<LockNode>> {
        let started = Instant::now();
        let mut retries = 0u32;
        let client = bounded(&self.client, deadline);
        // The call's requests end at a cancel, even while they wait for a
        // reply; what gives its node back goes through `client`.
        let asking = client.with_cancel(cancel);
        loop {
            cancel::check(cancel)?;
            // The first listing rides along with the create: one round trip.
            let (name, mode) = match self.driver.sorting_sequence() {
                Some(seq) => (format!("{}{seq}", self.lock_name), CreateMode::Ephemeral),
                None => (self.lock_name.clone(), CreateMode::EphemeralSequential),
            };
            let created = asking
                .create()
                .creating_parent_containers_if_needed()
                .with_protection()
                .mode(mode)
                .for_path_listing_parent(&paths::make_path(&self.base_path, &name), data);
            let (path, stat, children) = match created {
                // A node whose create reply never came is removed in the
                // background (protected mode).
                Err(e) if out_of_time(&e, deadline) => return Ok(None),
                other => other?,
            };
            delete_if_lost(&self.client, &path, stat.ephemeral_owner);
            let waited = self.run_node_hook(&asking, &path).and_then(|()| {
                self.wait_for_lock(
                    &asking,
                    &path,
                    stat.ephemeral_owner,
                    children,
                    deadline,
                    cancel,
                )
            });
            match waited {
                Ok(true) => {
                    return Ok(Some(LockNode {
                        path,
                        czxid: stat.czxid,
                        owner: stat.ephemeral_owner,
                    }))
                }
                Ok(false) => {
                    self.delete_node_by(&client, &path, stat.ephemeral_owner);
                    return Ok(None);
                }
                Err(e) if out_of_time(&e, deadline) => {
                    self.delete_node_by(&client, &path, stat.ephemeral_owner);
                    return Ok(None);
                }
                Err(e) if e.is(ErrorCode::NoNode) => {
                    // Our node vanished (session lost): queue again if allowed.
                    self.delete_node_by(&client, &path, stat.ephemeral_owner);
                    let policy = self.client.retry_policy();
                    let in_time = |sleep: Duration| {
                        deadline.is_none_or(|d| {
                            Instant::now().checked_add(sleep).is_some_and(|t| t < d)
                        })
                    };
                    match policy.allow_retry(retries, started.elapsed()) {
                        Some(sleep) if in_time(sleep) => {
                            cancel::check(cancel)?;
                            cancel::pause(cancel, sleep);
                            retries += 1;
                        }
                        // The policy would queue again, but only after the
                        // deadline: not acquired in time (Curator, whose
                        // sleep ignores the deadline, ends the same way).
                        Some(_) => return Ok(None),
                        None => return Err(e),
                    }
                }
                Err(e) => {
                    self.delete_node_by(&giving_up(&client, &e), &path, stat.ephemeral_owner);
                    return Err(e);
                }
            }
        }
    }

    /// Removes a lock node of session `owner` for good without waiting on a
    /// broken connection: one attempt now, then the background retries until
    /// it is gone, so an abandoned attempt never blocks the queue. A node of
    /// a session the client has already replaced went with that session.
    pub fn delete_node(&self, path: &str, owner: i64) {
        self.delete_node_by(&self.client, path, owner);
    }

    /// Like [`LockInternals::delete_node`], its one attempt made through
    /// `client`: a timed call gives up its node through its bounded handle,
    /// so that a connection gone silent cannot hold it past its deadline
    /// (the delete is then sent, and the background makes sure of it).
    pub(crate) fn delete_node_by(&self, client: &Client, path: &str, owner: i64) {
        if let Err(e) = delete_ephemeral(client, path, owner) {
            log::warn!("cannot delete lock node {path}: {e}");
        }
    }

    /// Waits until our node holds the lock (`Ok(true)`) or `deadline`
    /// passes (`Ok(false)`); every request goes through `client`.
    fn wait_for_lock(
        &self,
        client: &Client,
        our_path: &str,
        owner: i64,
        listed: Option<Vec<String>>,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
    ) -> Result<bool> {
        let ours = paths::get_node_from_path(our_path).to_owned();
        let signal = Arc::new(Signal::default());
        let waker_signal = Arc::clone(&signal);
        let _waker = self.client.add_waker(move || waker_signal.notify());
        let _on_cancel = cancel::wake_on_cancel(cancel, &signal);
        let mut children = match listed {
            Some(mut children) => {
                self.sort(&mut children);
                children
            }
            None => self.sorted_children_by(client)?,
        };
        loop {
            if self.client.is_closed() {
                return Err(Error::Closed);
            }
            if self.client.session_id() != owner {
                // The session that owns our node was given up; the node is
                // worthless even while the server still lists it.
                return Err(Error::Zk {
                    code: ErrorCode::NoNode,
                    path: Some(our_path.to_owned()),
                });
            }
            let epoch = signal.epoch();
            // After `epoch`: a cancel from now on also ends the wait below.
            cancel::check(cancel)?;
            let node = match self.driver.decide(&children, &ours, self.max_leases)? {
                Decision::Acquired => return Ok(true),
                Decision::WaitFor { node } => node,
            };
            let watched = paths::make_path(&self.base_path, &node);
            match self.watches.watch_data(client, &watched, &signal) {
                Ok(_) => {
                    if signal.wait(epoch, deadline) {
                        // A cancel ends the wait before another listing,
                        // which could wait long on a connection gone silent.
                        cancel::check(cancel)?;
                    }
                }
                Err(e) if e.is(ErrorCode::NoNode) => {}
                Err(e) => return Err(e),
            }
            match after_wake(deadline.is_some_and(|d| Instant::now() >= d)) {
                AfterWake::GiveUp => return Ok(false),
                AfterWake::ListAgain => children = self.sorted_children_by(client)?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(children: &[&str], names: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = children.iter().map(|s| s.to_string()).collect();
        sort_children(&mut v, names);
        v
    }

    #[test]
    fn foreign_children_sort_by_their_whole_name_as_text() {
        let got = sorted(
            &[
                "zzz",
                "_c_a-lock-0000000002",
                "!x",
                "_c_f-lock-5",
                "_c_b-lock-0000000001",
            ],
            &["lock-"],
        );
        // Keys "!x" < "0000000001" < "0000000002" < "5" < "zzz".
        let want = [
            "!x",
            "_c_b-lock-0000000001",
            "_c_a-lock-0000000002",
            "_c_f-lock-5",
            "zzz",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_wrapped_counter_sorts_as_curator_sorts_it() {
        let got = sorted(
            &[
                "_c_a-lock-2147483647",
                "_c_b-lock--2147483648",
                "_c_c-lock--2147483647",
                "_c_d-lock--000000001",
            ],
            &["lock-"],
        );
        let want = [
            "_c_d-lock--000000001",
            "_c_c-lock--2147483647",
            "_c_b-lock--2147483648",
            "_c_a-lock-2147483647",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn read_write_names_are_stripped_in_turn() {
        let names = [READ, WRIT];
        assert_eq!(sort_key("_c_a-__READ__0000000003", &names), "0000000003");
        assert_eq!(sort_key("_c_a-__WRIT__0000000003", &names), "0000000003");
        // After the last __READ__, the rest is searched for __WRIT__.
        assert_eq!(sort_key("__READ__x__WRIT__5", &names), "5");
        assert_eq!(sort_key("__WRIT__x__READ__5", &names), "5");
        // Overlapping names: the __WRIT__ inside "__READ__WRIT__" is not
        // found after the __READ__ is cut off.
        assert_eq!(sort_key("__READ__WRIT__", &names), "WRIT__");
        assert_eq!(sort_key("plain", &names), "plain");
    }
    const READ: &str = "__READ__";
    const WRIT: &str = "__WRIT__";

    #[test]
    fn equal_keys_keep_the_servers_order() {
        let a = ["_c_z-__WRIT__0000000005", "_c_a-__READ__0000000005"];
        assert_eq!(sorted(&a, &[READ, WRIT]), a);
        let b = [a[1], a[0]];
        assert_eq!(sorted(&b, &[READ, WRIT]), b);
    }
}

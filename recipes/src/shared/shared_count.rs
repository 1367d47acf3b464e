//! Curator's `SharedCount`: an `i32` kept in one node as 4 big-endian bytes,
//! read and set by every process, each copy kept current by a data watch.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver};
use latchkey_framework::{
    Client, ConnectionState, Error, ErrorCode, ListenerHandle, Result, Stat, WatchedEvent,
};
use parking_lot::Mutex;

use crate::locks::lock_internals::{validate_recipe_path, Signal};

/// How long the watch thread waits before reading again after a failed read
/// (a state change wakes it sooner).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// A count with the node version and change it was read at, for
/// [`SharedCount::try_set_count`] (Curator's `VersionedValue`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VersionedValue {
    /// The zxid of the change that wrote this value (the node's mzxid); it
    /// tells a value from an equal one written later or to a re-created node.
    pub zxid: i64,
    /// The node's data version.
    pub version: i32,
    /// The count.
    pub value: i32,
}

/// A counter shared by every process that uses the same path, wire-compatible
/// with Curator's `SharedCount` (the node holds the count as a 4-byte
/// big-endian `i32`).
///
/// Each `SharedCount` watches its node from a thread of its own and caches
/// the latest value it has seen, so [`count`](SharedCount::count) never
/// waits on ZooKeeper. After a connection-state change it reads the node
/// again, since a change may have been missed. Data that is not 4 bytes long
/// leaves the cached value as it was (a warning is logged), and the count
/// follows again once the node holds a valid count.
///
/// Clones share one cache and one watch, which stop when
/// [`close`](SharedCount::close) is called or the last clone is dropped.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::SharedCount;
///
/// let workers = SharedCount::new(client, "/config/workers", 4)?; // 4 if the node is new
/// let changes = workers.listen();
/// workers.set_count(workers.count() + 1)?;
///
/// // Compare-and-set: only if nobody changed it since we read it.
/// let seen = workers.versioned_value();
/// if !workers.try_set_count(&seen, seen.value * 2)? {
///     println!("someone else changed it first; now {}", workers.count());
/// }
/// for count in changes.try_iter() {
///     println!("count is now {count}");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SharedCount {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    path: String,
    cache: Mutex<Cached>,
    listeners: Arc<Mutex<Listeners>>,
    /// Wakes the watch thread: a watch fired, the state changed, or closing.
    signal: Arc<Signal>,
    /// The session whose watch on the node is set and has not fired; 0 if
    /// none. Keeps re-reads after state changes from piling up watches.
    armed: Arc<AtomicI64>,
    closed: AtomicBool,
}

/// The newest version of the node seen so far.
#[derive(Clone, Copy, Debug)]
struct Cached {
    /// The zxid of the change that wrote the value: it only grows, across
    /// re-created nodes and wrapped versions alike (Curator 5.7 orders by it).
    mzxid: i64,
    version: i32,
    value: i32,
    /// Counts changes of the cache, so each is delivered once.
    seq: u64,
}

type Listener = Arc<dyn Fn(i32) + Send + Sync>;

#[derive(Default)]
struct Listeners {
    next_id: u64,
    list: Vec<(u64, Listener)>,
}

impl Listeners {
    fn add(registry: &Arc<Mutex<Listeners>>, make: impl FnOnce(u64) -> Listener) -> u64 {
        let mut l = registry.lock();
        l.next_id += 1;
        let id = l.next_id;
        let listener = make(id);
        l.list.push((id, listener));
        id
    }

    fn remove(registry: &Weak<Mutex<Listeners>>, id: u64) {
        if let Some(r) = registry.upgrade() {
            r.lock().list.retain(|(i, _)| *i != id);
        }
    }
}

/// Unregisters a change hook when dropped.
pub(crate) struct ChangeHook {
    registry: Weak<Mutex<Listeners>>,
    id: u64,
}

impl Drop for ChangeHook {
    fn drop(&mut self) {
        Listeners::remove(&self.registry, self.id);
    }
}

impl SharedCount {
    /// Opens the count at `path`, creating the node (and its parents, as
    /// containers, as Curator does) with `seed` if it does not exist, and
    /// starts watching it.
    ///
    /// Fails if the client is not started or ZooKeeper cannot be reached,
    /// and with [`Error::IllegalState`] if the node holds something other
    /// than a 4-byte count.
    pub fn new(client: &Client, path: &str, seed: i32) -> Result<SharedCount> {
        validate_recipe_path(client, path)?;
        let created = client
            .create()
            .creating_parent_containers_if_needed()
            .for_path(path, &seed.to_be_bytes());
        match created {
            Err(e) if !e.is(ErrorCode::NodeExists) => return Err(e),
            _ => {}
        }
        let inner = Arc::new(Inner {
            client: client.clone(),
            path: path.to_owned(),
            cache: Mutex::new(Cached {
                mzxid: 0,
                version: -1,
                value: seed,
                seq: 0,
            }),
            listeners: Arc::default(),
            signal: Arc::default(),
            armed: Arc::default(),
            closed: AtomicBool::new(false),
        });
        // Registered before the first read, so no state change is missed.
        let wake = Arc::clone(&inner.signal);
        let waker = client.add_waker(move || wake.notify());
        let epoch = inner.signal.epoch();
        inner.refresh()?;
        let cached = *inner.cache.lock();
        if cached.mzxid == 0 {
            // Deleted between our create and our read.
            return Err(Error::Zk {
                code: ErrorCode::NoNode,
                path: Some(path.to_owned()),
            });
        }
        let weak = Arc::downgrade(&inner);
        let signal = Arc::clone(&inner.signal);
        std::thread::Builder::new()
            .name("latchkey-shared-count".into())
            .spawn(move || watch_loop(&weak, &signal, waker, epoch, cached.seq))?;
        Ok(SharedCount { inner })
    }

    /// The path of the count's node.
    pub fn path(&self) -> &str {
        &self.inner.path
    }

    /// The latest count seen (from the cache; never waits).
    pub fn count(&self) -> i32 {
        self.inner.cache.lock().value
    }

    /// The latest count seen, with its node version.
    pub fn versioned_value(&self) -> VersionedValue {
        let c = self.inner.cache.lock();
        VersionedValue {
            zxid: c.mzxid,
            version: c.version,
            value: c.value,
        }
    }

    /// Sets the count, whatever it was. Fails with `NoNode` if the node was
    /// deleted, and with [`Error::IllegalState`] after
    /// [`close`](SharedCount::close).
    pub fn set_count(&self, count: i32) -> Result<()> {
        self.check_open()?;
        let stat = self.write(count, None)?;
        self.inner.update(&stat, count);
        Ok(())
    }

    /// Sets the count only if the node still holds `previous`: the same
    /// value written by the same change (`zxid`), at the same version
    /// (compare-and-set). `Ok(false)` if someone changed it since, even to
    /// an equal value or by deleting and re-creating the node; the cache
    /// is then current, so [`versioned_value`](Self::versioned_value) gives
    /// a fresh value to retry with.
    ///
    /// As in Curator, `previous` is first compared with the cache; unlike
    /// Curator, the node is then read once more, so a change the cache has
    /// not heard of yet is refused too. Only a delete and re-create that
    /// lands between that read and the write, and reaches the same version,
    /// would go unnoticed. Version -1 (which ZooKeeper takes as "any
    /// version") is refused with [`Error::InvalidArgument`].
    pub fn try_set_count(&self, previous: &VersionedValue, count: i32) -> Result<bool> {
        self.check_open()?;
        if previous.version == -1 {
            return Err(Error::InvalidArgument(format!(
                "try_set_count on {}: version -1 would match any version",
                self.inner.path
            )));
        }
        let matches = |c: &Cached| c.mzxid == previous.zxid && c.value == previous.value;
        if !matches(&self.inner.cache.lock()) {
            return Ok(false);
        }
        // The cache may lag behind the server: check what the node holds now.
        let (data, stat) = self.inner.client.get_data(&self.inner.path)?;
        if let Ok(now) = decode(&self.inner.path, &data) {
            self.inner.update(&stat, now);
        }
        if stat.mzxid != previous.zxid || stat.version != previous.version {
            return Ok(false);
        }
        match self.write(count, Some(previous.version)) {
            Ok(stat) => {
                self.inner.update(&stat, count);
                Ok(true)
            }
            Err(e) if e.is(ErrorCode::BadVersion) => {
                if let Err(e) = self.inner.read(false) {
                    log::debug!("re-reading {}: {e}", self.inner.path);
                }
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// A channel that receives every new count, in the order they were seen;
    /// counts set in quick succession may arrive as only the last one. A
    /// write of the same value is a new count (a new version); a
    /// reconnection is not (Curator's listeners hear the value again after
    /// each reconnection; these hear only what changed meanwhile). The
    /// listener goes away with the receiver (at the next change after it is
    /// dropped). Connection states come from [`Client::listen`].
    pub fn listen(&self) -> Receiver<i32> {
        let (tx, rx) = unbounded();
        let registry = Arc::downgrade(&self.inner.listeners);
        Listeners::add(&self.inner.listeners, |id| {
            Arc::new(move |count: i32| {
                if tx.send(count).is_err() {
                    Listeners::remove(&registry, id);
                }
            })
        });
        rx
    }

    /// Stops watching the node; [`count`](Self::count) keeps the last value
    /// and setting fails from now on. Idempotent; affects every clone.
    pub fn close(&self) {
        self.inner.close();
    }

    /// Calls `hook` with each new count on the watch thread; it must return
    /// at once. For recipes that wake a waiter on a change.
    pub(crate) fn on_change(&self, hook: impl Fn(i32) + Send + Sync + 'static) -> ChangeHook {
        let id = Listeners::add(&self.inner.listeners, |_| Arc::new(hook));
        ChangeHook {
            registry: Arc::downgrade(&self.inner.listeners),
            id,
        }
    }

    fn check_open(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::IllegalState(format!(
                "the shared count at {} is closed",
                self.inner.path
            )));
        }
        Ok(())
    }

    fn write(&self, count: i32, version: Option<i32>) -> Result<Stat> {
        self.inner
            .client
            .set_data(&self.inner.path, &count.to_be_bytes(), version)
    }
}

impl std::fmt::Debug for SharedCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.versioned_value();
        f.debug_struct("SharedCount")
            .field("path", &self.inner.path)
            .field("value", &v.value)
            .field("version", &v.version)
            .finish()
    }
}

/// Decodes a count; Curator writes it as a big-endian `i32`.
fn decode(path: &str, data: &[u8]) -> Result<i32> {
    let bytes: [u8; 4] = data.try_into().map_err(|_| {
        Error::IllegalState(format!(
            "{path} holds {} bytes, not a shared count (a 4-byte big-endian i32)",
            data.len()
        ))
    })?;
    Ok(i32::from_be_bytes(bytes))
}

impl Inner {
    /// Reads the node into the cache, setting a watch if none is set for the
    /// current session. A deleted node keeps the last value and gets a watch
    /// for its return.
    fn refresh(&self) -> Result<()> {
        loop {
            let session = self.client.session_id();
            // Session 0 (not connected yet) never has a watch.
            let watched = session != 0 && self.armed.load(Ordering::Acquire) == session;
            match self.read(!watched) {
                Err(e) if e.is(ErrorCode::NoNode) => {
                    let wake = self.watch_waker(session);
                    match self.client.exists_watch_waker(&self.path, wake) {
                        Ok(None) => return Ok(()),
                        Ok(Some(_)) => {} // back already: read it
                        Err(e) => {
                            self.disarm(session);
                            return Err(e);
                        }
                    }
                }
                other => return other,
            }
        }
    }

    /// Reads the node into the cache, with a watch if `watch`.
    fn read(&self, watch: bool) -> Result<()> {
        let (data, stat) = if watch {
            let session = self.client.session_id();
            let wake = self.watch_waker(session);
            self.client
                .get_data_watch_waker(&self.path, wake)
                .inspect_err(|_| self.disarm(session))?
        } else {
            self.client.get_data(&self.path)?
        };
        let count = decode(&self.path, &data)?;
        self.update(&stat, count);
        Ok(())
    }

    /// Marks a watch as set for `session` and returns its callback, which
    /// clears the mark and wakes the watch thread.
    fn watch_waker(&self, session: i64) -> impl FnOnce(WatchedEvent) + Send + 'static {
        self.armed.store(session, Ordering::Release);
        let (armed, signal) = (Arc::clone(&self.armed), Arc::clone(&self.signal));
        move |_: WatchedEvent| {
            let _ = armed.compare_exchange(session, 0, Ordering::AcqRel, Ordering::Acquire);
            signal.notify();
        }
    }

    fn disarm(&self, session: i64) {
        let _ = self
            .armed
            .compare_exchange(session, 0, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Takes a value if it is newer than the cached one (reads and writes
    /// from several threads may finish out of order).
    fn update(&self, stat: &Stat, value: i32) {
        let mut c = self.cache.lock();
        if is_newer(&c, stat) {
            *c = Cached {
                mzxid: stat.mzxid,
                version: stat.version,
                value,
                seq: c.seq + 1,
            };
        }
    }

    /// Tells the listeners about the cached count if it changed since
    /// `delivered`. Only the watch thread delivers, so counts arrive in order.
    fn deliver(&self, delivered: &mut u64) {
        let c = *self.cache.lock();
        if c.seq == *delivered {
            return;
        }
        *delivered = c.seq;
        let listeners: Vec<Listener> = self
            .listeners
            .lock()
            .list
            .iter()
            .map(|(_, l)| Arc::clone(l))
            .collect();
        for l in listeners {
            l(c.value);
        }
    }

    fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.signal.notify();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

/// Whether `stat` describes a later write than the cached one. Orders by
/// the mzxid, which only grows: versions restart at 0 on a re-created node
/// and wrap to negative after 2^31 writes.
fn is_newer(cached: &Cached, stat: &Stat) -> bool {
    stat.mzxid > cached.mzxid
}

/// Keeps the cache current: re-reads on every wake-up (watch or state
/// change) and delivers changes, until closed or the last handle is gone.
fn watch_loop(
    weak: &Weak<Inner>,
    signal: &Signal,
    _waker: ListenerHandle,
    mut epoch: u64,
    mut delivered: u64,
) {
    let mut retry_at = None;
    loop {
        // A wake-up and the retry deadline both mean: look again.
        let _ = signal.wait(epoch, retry_at);
        let Some(inner) = weak.upgrade() else { return };
        if inner.closed.load(Ordering::Acquire) || inner.client.is_closed() {
            return;
        }
        epoch = signal.epoch();
        retry_at = None;
        // While disconnected a read would only wait; the next state change
        // wakes us.
        if inner
            .client
            .state()
            .is_some_and(ConnectionState::is_connected)
        {
            match inner.refresh() {
                Ok(()) => {}
                // Malformed data: the watch is set, the next change is heard.
                Err(e @ Error::IllegalState(_)) => log::warn!("{e}"),
                Err(e) => {
                    log::debug!("reading shared count {}: {e}", inner.path);
                    retry_at = Some(Instant::now() + RETRY_PAUSE);
                }
            }
        }
        inner.deliver(&mut delivered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(mzxid: i64, version: i32) -> Cached {
        Cached {
            mzxid,
            version,
            value: 0,
            seq: 0,
        }
    }

    fn stat(czxid: i64, mzxid: i64, version: i32) -> Stat {
        Stat {
            czxid,
            mzxid,
            version,
            ..Stat::default()
        }
    }

    #[test]
    fn a_version_that_wraps_negative_is_still_newer() {
        let c = cached(100, i32::MAX);
        assert!(is_newer(&c, &stat(1, 101, i32::MIN)));
        assert!(is_newer(&cached(100, -2), &stat(1, 101, -1)));
    }

    #[test]
    fn later_writes_win_and_earlier_ones_are_ignored() {
        let c = cached(100, 3);
        assert!(!is_newer(&c, &stat(1, 100, 3)), "the same write again");
        assert!(!is_newer(&c, &stat(1, 99, 2)), "an earlier write");
        // A re-created node: version 0 again, but a later change.
        assert!(is_newer(&c, &stat(150, 150, 0)));
    }

    #[test]
    fn counts_are_four_big_endian_bytes() {
        assert_eq!(decode("/c", &[0, 0, 1, 2]).unwrap(), 258);
        assert_eq!(decode("/c", &[0xff; 4]).unwrap(), -1);
        assert_eq!(decode("/c", &i32::MIN.to_be_bytes()).unwrap(), i32::MIN);
        for bad in [&b""[..], b"abc", b"abcde"] {
            match decode("/c", bad) {
                Err(Error::IllegalState(m)) => {
                    assert!(m.contains(&format!("{} bytes", bad.len())), "{m}")
                }
                other => panic!("{bad:?} decoded as {other:?}"),
            }
        }
    }

    #[test]
    fn each_hook_and_listener_goes_alone() {
        use std::sync::atomic::AtomicUsize;
        let registry: Arc<Mutex<Listeners>> = Arc::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let hook = |registry: &Arc<Mutex<Listeners>>| {
            let calls = Arc::clone(&calls);
            let id = Listeners::add(registry, |_| {
                Arc::new(move |_| {
                    calls.fetch_add(1, Ordering::SeqCst);
                })
            });
            ChangeHook {
                registry: Arc::downgrade(registry),
                id,
            }
        };
        let (a, b, c) = (hook(&registry), hook(&registry), hook(&registry));
        assert!(a.id != b.id && b.id != c.id && a.id != c.id);
        drop(b);
        let ids: Vec<u64> = registry.lock().list.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [a.id, c.id], "dropping one hook removes it alone");
        for (_, listener) in registry.lock().list.iter() {
            listener(1);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        drop((a, c));
        assert!(registry.lock().list.is_empty());
    }
}

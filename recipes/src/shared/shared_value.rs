//! Curator's `SharedValue`: bytes kept in one node, read and set by every
//! process, each copy kept current by a data watch. The machinery (the
//! cache ordered by mzxid, the watch thread, compare-and-set) is generic
//! over how the node's bytes decode, so that
//! [`SharedCount`](crate::SharedCount) is a thin layer on it, as in Curator.

use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use latchkey_framework::{
    Client, ConnectionState, Error, ErrorCode, ListenerHandle, Result, Stat, WatchedEvent,
};
use parking_lot::Mutex;

use crate::fence::{Fence, Fenced};
use crate::locks::lock_internals::{validate_recipe_path, Signal};

/// How long the watch thread waits before reading again after a failed read
/// (a state change wakes it sooner).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// A value with the node version and change it was read at, for a
/// compare-and-set ([`SharedValue::try_set_value`],
/// [`SharedCount::try_set_count`](crate::SharedCount::try_set_count));
/// Curator's `VersionedValue`. Without a type, the count of a
/// [`SharedCount`](crate::SharedCount).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct VersionedValue<T = i32> {
    /// The zxid of the change that wrote this value (the node's mzxid); it
    /// tells a value from an equal one written later or to a re-created node.
    pub zxid: i64,
    /// The node's data version.
    pub version: i32,
    /// The value.
    pub value: T,
}

impl<T> VersionedValue<T> {
    /// A value with the change and version it was read at (Curator's
    /// `new VersionedValue(version, value)`, with the zxid too).
    pub fn new(zxid: i64, version: i32, value: T) -> Self {
        VersionedValue {
            zxid,
            version,
            value,
        }
    }
}

/// How a shared node's bytes are read and written.
pub(crate) trait Codec: Clone + PartialEq + Send + Sync + 'static {
    /// What the recipe is called in messages ("shared count").
    const WHAT: &'static str;
    /// The value in `data`; [`Error::IllegalState`] if it holds none.
    fn decode(path: &str, data: &[u8]) -> Result<Self>;
    /// The node's bytes for `self`.
    fn encode(&self) -> Vec<u8>;
}

impl Codec for Vec<u8> {
    const WHAT: &'static str = "shared value";
    fn decode(_path: &str, data: &[u8]) -> Result<Self> {
        Ok(data.to_vec())
    }
    fn encode(&self) -> Vec<u8> {
        self.clone()
    }
}

const LATENT: u8 = 0;
const STARTED: u8 = 1;
const CLOSED: u8 = 2;

/// The shared machinery: one node's value, cached and kept current by a
/// data watch from a thread of its own. Clones share it; it stops when
/// closed or when the last clone is dropped.
pub(crate) struct Shared<V: Codec> {
    inner: Arc<Inner<V>>,
}

impl<V: Codec> Clone for Shared<V> {
    fn clone(&self) -> Self {
        Shared {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<V: Codec> {
    client: Client,
    path: String,
    seed: V,
    cache: Mutex<Cached<V>>,
    listeners: Arc<Mutex<Listeners<V>>>,
    /// Wakes the watch thread: a watch fired, the state changed, or closing.
    signal: Arc<Signal>,
    /// The session whose watch on the node is set and has not fired; 0 if
    /// none. Keeps re-reads after state changes from piling up watches.
    armed: Arc<AtomicI64>,
    /// `LATENT`, `STARTED` or `CLOSED`.
    state: AtomicU8,
    /// Serialises `start` (a failed start may be tried again).
    starting: Mutex<()>,
}

/// The newest version of the node seen so far.
#[derive(Clone, Debug)]
struct Cached<V> {
    /// The zxid of the change that wrote the value: it only grows, across
    /// re-created nodes and wrapped versions alike (Curator 5.7 orders by it).
    mzxid: i64,
    version: i32,
    value: V,
    /// Counts changes of the cache, so each is delivered once.
    seq: u64,
}

impl<V: Clone> Cached<V> {
    fn versioned(&self) -> VersionedValue<V> {
        VersionedValue {
            zxid: self.mzxid,
            version: self.version,
            value: self.value.clone(),
        }
    }
}

type Listener<V> = Arc<dyn Fn(&VersionedValue<V>) + Send + Sync>;

struct Listeners<V> {
    next_id: u64,
    list: Vec<(u64, Listener<V>)>,
}

impl<V> Default for Listeners<V> {
    fn default() -> Self {
        Listeners {
            next_id: 0,
            list: Vec::new(),
        }
    }
}

impl<V> Listeners<V> {
    fn add(registry: &Arc<Mutex<Listeners<V>>>, make: impl FnOnce(u64) -> Listener<V>) -> u64 {
        let mut l = registry.lock();
        l.next_id += 1;
        let id = l.next_id;
        let listener = make(id);
        l.list.push((id, listener));
        id
    }

    fn remove(registry: &Weak<Mutex<Listeners<V>>>, id: u64) {
        if let Some(r) = registry.upgrade() {
            r.lock().list.retain(|(i, _)| *i != id);
        }
    }
}

/// Unregisters a change hook when dropped.
pub(crate) struct ChangeHook {
    remove: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Drop for ChangeHook {
    fn drop(&mut self) {
        if let Some(remove) = self.remove.take() {
            remove();
        }
    }
}

impl<V: Codec> Shared<V> {
    /// The value at `path`, not read until [`start`](Self::start); until
    /// then it reads as `seed`.
    pub(crate) fn new(client: &Client, path: &str, seed: V) -> Result<Shared<V>> {
        validate_recipe_path(client, path)?;
        Ok(Shared {
            inner: Arc::new(Inner {
                // Its watches go with it on close, as Curator's do.
                client: client.with_watcher_removal(),
                path: path.to_owned(),
                cache: Mutex::new(Cached {
                    mzxid: 0,
                    version: -1,
                    value: seed.clone(),
                    seq: 0,
                }),
                seed,
                listeners: Arc::default(),
                signal: Arc::default(),
                armed: Arc::default(),
                state: AtomicU8::new(LATENT),
                starting: Mutex::new(()),
            }),
        })
    }

    /// Creates the node (and its parents, as containers, as Curator does)
    /// holding the seed if it does not exist, reads it, and starts the
    /// watch thread. Once only; a start that failed may be tried again.
    pub(crate) fn start(&self, thread_name: &str) -> Result<()> {
        let inner = &self.inner;
        let _starting = inner.starting.lock();
        match inner.state.load(Ordering::Acquire) {
            LATENT => {}
            STARTED => {
                return Err(Error::IllegalState(format!(
                    "the {} at {} was started already",
                    V::WHAT,
                    inner.path
                )))
            }
            _ => return Err(inner.closed_error()),
        }
        let created = inner
            .client
            .create()
            .creating_parent_containers_if_needed()
            .for_path(&inner.path, &inner.seed.encode());
        match created {
            Err(e) if !e.is(ErrorCode::NodeExists) => return Err(e),
            _ => {}
        }
        // Registered before the first read, so no state change is missed.
        let wake = Arc::clone(&inner.signal);
        let waker = inner.client.add_waker(move || wake.notify());
        let epoch = inner.signal.epoch();
        inner.refresh()?;
        let cached = inner.cache.lock().clone();
        if cached.mzxid == 0 {
            // Deleted between our create and our read.
            return Err(Error::Zk {
                code: ErrorCode::NoNode,
                path: Some(inner.path.clone()),
            });
        }
        // A close while starting wins: no thread is started.
        if inner
            .state
            .compare_exchange(LATENT, STARTED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(inner.closed_error());
        }
        let weak = Arc::downgrade(inner);
        let signal = Arc::clone(&inner.signal);
        let spawned = std::thread::Builder::new()
            .name(thread_name.into())
            .spawn(move || watch_loop(&weak, &signal, waker, epoch, cached.seq));
        if let Err(e) = spawned {
            inner.state.store(LATENT, Ordering::Release);
            return Err(e.into());
        }
        Ok(())
    }

    pub(crate) fn client(&self) -> &Client {
        &self.inner.client
    }

    pub(crate) fn path(&self) -> &str {
        &self.inner.path
    }

    /// The latest value seen (from the cache; never waits).
    pub(crate) fn value(&self) -> V {
        self.inner.cache.lock().value.clone()
    }

    /// Reads the cached value without cloning it.
    pub(crate) fn with_value<R>(&self, read: impl FnOnce(&V) -> R) -> R {
        read(&self.inner.cache.lock().value)
    }

    pub(crate) fn versioned_value(&self) -> VersionedValue<V> {
        self.inner.cache.lock().versioned()
    }

    /// Sets the value, whatever it was; with a `fence`, only while it stands.
    pub(crate) fn set_value(&self, value: V, fence: Option<&dyn Fence>) -> Result<()> {
        self.check_started()?;
        let (client, path) = (&self.inner.client, &self.inner.path);
        let stat = match fence {
            None => client.set_data(path, &value.encode(), None)?,
            Some(fence) => {
                let fence = crate::fence::fence_for(client, fence, "set_data", path)?;
                client.set_data_fenced(&fence, path, &value.encode(), None)?
            }
        };
        self.inner.update(&stat, value);
        Ok(())
    }

    /// Compare-and-set (see [`SharedValue::try_set_value`]); with a
    /// `fence`, only while it stands.
    pub(crate) fn try_set_value(
        &self,
        previous: &VersionedValue<V>,
        value: V,
        fence: Option<&dyn Fence>,
    ) -> Result<bool> {
        self.check_started()?;
        let (client, path) = (&self.inner.client, &self.inner.path);
        // The fence first: a hold that is not there refuses before any read.
        let fence = match fence {
            Some(f) => Some(crate::fence::fence_for(client, f, "set_data", path)?),
            None => None,
        };
        if previous.version == -1 {
            return Err(Error::InvalidArgument(format!(
                "setting the {} at {}: version -1 would match any version",
                V::WHAT,
                self.inner.path
            )));
        }
        let matches = |c: &Cached<V>| c.mzxid == previous.zxid && c.value == previous.value;
        if !matches(&self.inner.cache.lock()) {
            return Ok(false);
        }
        // The cache may lag behind the server: check what the node holds now.
        let (data, stat) = self.inner.client.get_data(&self.inner.path)?;
        if let Ok(now) = V::decode(&self.inner.path, &data) {
            self.inner.update(&stat, now);
        }
        if stat.mzxid != previous.zxid || stat.version != previous.version {
            return Ok(false);
        }
        // Not `set_data`: a retry after a lost reply would meet its own
        // write as `BadVersion`, and an applied write be reported refused.
        let data = value.encode();
        let written = match &fence {
            None => client.compare_and_set_data(path, &data, previous.version),
            Some(fence) => client.set_data_fenced(fence, path, &data, Some(previous.version)),
        };
        match written {
            Ok(stat) => {
                self.inner.update(&stat, value);
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

    /// A channel of every new value seen, in order; it goes away with its
    /// receiver (at the next change after it is dropped).
    pub(crate) fn listen_with<T: Send + 'static>(
        &self,
        map: impl Fn(&VersionedValue<V>) -> T + Send + Sync + 'static,
    ) -> Receiver<T> {
        let (tx, rx) = unbounded();
        let registry = Arc::downgrade(&self.inner.listeners);
        Listeners::add(&self.inner.listeners, |id| {
            Arc::new(move |v: &VersionedValue<V>| {
                if tx.send(map(v)).is_err() {
                    Listeners::remove(&registry, id);
                }
            })
        });
        rx
    }

    /// Calls `hook` with each new value on the watch thread; it must
    /// return at once.
    pub(crate) fn on_change(
        &self,
        hook: impl Fn(&VersionedValue<V>) + Send + Sync + 'static,
    ) -> ChangeHook {
        let id = Listeners::add(&self.inner.listeners, |_| Arc::new(hook));
        let registry = Arc::downgrade(&self.inner.listeners);
        ChangeHook {
            remove: Some(Box::new(move || Listeners::remove(&registry, id))),
        }
    }

    /// Stops watching; the value stays as last seen. Idempotent.
    pub(crate) fn close(&self) {
        self.inner.close();
    }

    fn check_started(&self) -> Result<()> {
        match self.inner.state.load(Ordering::Acquire) {
            STARTED => Ok(()),
            LATENT => Err(Error::IllegalState(format!(
                "the {} at {} is not started",
                V::WHAT,
                self.inner.path
            ))),
            _ => Err(self.inner.closed_error()),
        }
    }
}

impl<V: Codec> Inner<V> {
    fn closed_error(&self) -> Error {
        Error::IllegalState(format!("the {} at {} is closed", V::WHAT, self.path))
    }

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
        let value = V::decode(&self.path, &data)?;
        self.update(&stat, value);
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
    fn update(&self, stat: &Stat, value: V) {
        let mut c = self.cache.lock();
        if is_newer(c.mzxid, stat) {
            let seq = c.seq + 1;
            *c = Cached {
                mzxid: stat.mzxid,
                version: stat.version,
                value,
                seq,
            };
        }
    }

    /// Tells the listeners about the cached value if it changed since
    /// `delivered`. Only the watch thread delivers, so values arrive in order.
    fn deliver(&self, delivered: &mut u64) {
        let c = self.cache.lock().clone();
        if c.seq == *delivered {
            return;
        }
        *delivered = c.seq;
        let versioned = c.versioned();
        let listeners: Vec<Listener<V>> = self
            .listeners
            .lock()
            .list
            .iter()
            .map(|(_, l)| Arc::clone(l))
            .collect();
        for l in listeners {
            // A listener that panics must not end the watch for the others.
            let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l(&versioned)));
            if called.is_err() {
                log::error!("a listener of the {} at {} panicked", V::WHAT, self.path);
            }
        }
    }

    fn close(&self) {
        if self.state.swap(CLOSED, Ordering::AcqRel) != CLOSED {
            // Here only (one-shot watches): it never waits on the server.
            if let Err(e) = self.client.remove_watchers() {
                log::debug!("removing the watches of {}: {e}", self.path);
            }
            self.signal.notify();
        }
    }

    fn is_closed(&self) -> bool {
        self.state.load(Ordering::Acquire) == CLOSED
    }
}

impl<V: Codec> Drop for Inner<V> {
    fn drop(&mut self) {
        self.close();
    }
}

/// Whether `stat` describes a later write than the one cached at
/// `cached_mzxid`. Orders by the mzxid, which only grows: versions restart
/// at 0 on a re-created node and wrap to negative after 2^31 writes.
fn is_newer(cached_mzxid: i64, stat: &Stat) -> bool {
    stat.mzxid > cached_mzxid
}

/// Keeps the cache current: re-reads on every wake-up (watch or state
/// change) and delivers changes, until closed or the last handle is gone.
fn watch_loop<V: Codec>(
    weak: &Weak<Inner<V>>,
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
        if inner.is_closed() || inner.client.is_closed() {
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
                    log::debug!("reading {} {}: {e}", V::WHAT, inner.path);
                    retry_at = Some(Instant::now() + RETRY_PAUSE);
                }
            }
        }
        inner.deliver(&mut delivered);
    }
}

/// What a [`SharedValue`] tells its listeners (Curator's
/// `SharedValueListener`: `valueHasChanged` and `stateChanged`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SharedValueEvent {
    /// A new value was seen (set here or by anyone else), with the node
    /// version and change it was read at.
    Changed(VersionedValue<Vec<u8>>),
    /// The client's connection state changed.
    StateChanged(ConnectionState),
}

/// Bytes shared by every process that uses the same path, wire-compatible
/// with Curator's `SharedValue` (the node holds the bytes as they are).
///
/// Once [started](Self::start), it watches its node from a thread of its
/// own and caches the latest value it has seen, so [`value`](Self::value)
/// never waits on ZooKeeper. After a connection-state change it reads the
/// node again, since a change may have been missed. A deleted node keeps
/// the last value seen, and is followed again once it is back.
///
/// Clones share one cache and one watch, which stop when
/// [`close`](SharedValue::close) is called or the last clone is dropped.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::{SharedValue, SharedValueEvent};
///
/// let config = SharedValue::new(client, "/config/mode", b"normal")?; // if the node is new
/// let events = config.listen();
/// config.start()?;
/// config.set_value(b"maintenance")?;
///
/// // Compare-and-set: only if nobody changed it since we read it.
/// let seen = config.versioned_value();
/// if !config.try_set_value(&seen, b"normal")? {
///     println!("someone else changed it first; now {:?}", config.value());
/// }
/// for event in events.try_iter() {
///     match event {
///         SharedValueEvent::Changed(v) => println!("now {:?}", v.value),
///         SharedValueEvent::StateChanged(state) => println!("connection {state:?}"),
///         _ => {} // more kinds of event may be added
///     }
/// }
/// # Ok(()) }
/// ```
///
/// # In-doubt writes
///
/// [`start`](Self::start) creates the node with the seed; a create
/// retried after a lost reply that meets `NodeExists` takes the node as
/// there. [`set_value`](Self::set_value) is a `set_data` without a version,
/// retried after a lost reply, so it may be applied twice (the same bytes,
/// two versions on; listeners may hear both). For
/// [`try_set_value`](Self::try_set_value) see there: `Ok(false)` only when
/// the write was certainly not applied, `ConnectionLoss` when it cannot be
/// told. An error from any write after its request was sent leaves it
/// unknown whether it was applied.
///
/// # Close
///
/// [`close`](Self::close) deletes nothing and does not wait: the watch
/// thread ends at its next wake-up (close wakes it; a read under way
/// finishes first). The watch on the node is not removed: it stays set on
/// the server and in the client until the node next changes or the
/// session ends, and then wakes nobody. After a close, setting fails with
/// [`Error::IllegalState`], as does [`start`](Self::start);
/// [`value`](Self::value) keeps the last value seen.
#[derive(Clone)]
pub struct SharedValue {
    shared: Shared<Vec<u8>>,
    events: Arc<Events>,
}

/// The event channels of a [`SharedValue`] and its client state listener.
struct Events {
    subscribers: Mutex<Vec<Sender<SharedValueEvent>>>,
    /// Forwards the client's states; removed when the last clone goes.
    state_listener: Mutex<Option<ListenerHandle>>,
    /// Forwards the values; removed when the last clone goes.
    value_hook: Mutex<Option<ChangeHook>>,
}

impl Events {
    fn send(&self, event: SharedValueEvent) {
        self.subscribers
            .lock()
            .retain(|tx| tx.send(event.clone()).is_ok());
    }
}

impl SharedValue {
    /// A value at `path`, not read until [`start`](Self::start); the node
    /// is created holding `seed` then, if it does not exist.
    pub fn new(client: &Client, path: &str, seed: &[u8]) -> Result<SharedValue> {
        let shared = Shared::new(client, path, seed.to_vec())?;
        let events = Arc::new(Events {
            subscribers: Mutex::new(Vec::new()),
            state_listener: Mutex::new(None),
            value_hook: Mutex::new(None),
        });
        let weak = Arc::downgrade(&events);
        let hook = shared.on_change(move |v| {
            if let Some(events) = weak.upgrade() {
                events.send(SharedValueEvent::Changed(v.clone()));
            }
        });
        *events.value_hook.lock() = Some(hook);
        Ok(SharedValue { shared, events })
    }

    /// Creates the node (and its parents, as containers, as Curator does)
    /// with the seed if it does not exist, reads it and starts watching it.
    /// Fails if the client is not started or ZooKeeper cannot be reached
    /// (a failed start may be tried again), and with
    /// [`Error::IllegalState`] if started before or closed.
    pub fn start(&self) -> Result<()> {
        // Not under a lock: a close must not wait for the first read.
        self.shared.start("latchkey-shared-value")?;
        let (weak, started) = (
            Arc::downgrade(&self.events),
            Arc::downgrade(&self.shared.inner),
        );
        let handle = self.shared.client().add_listener(move |state| {
            let open = started.upgrade().is_some_and(|s| !s.is_closed());
            if let (true, Some(events)) = (open, weak.upgrade()) {
                events.send(SharedValueEvent::StateChanged(state));
            }
        });
        let mut listener = self.events.state_listener.lock();
        // Under the lock `close` takes it with, after marking closed.
        if !self.shared.inner.is_closed() {
            *listener = Some(handle);
        }
        Ok(())
    }

    /// The path of the value's node.
    pub fn path(&self) -> &str {
        self.shared.path()
    }

    /// The latest value seen (from the cache; never waits); the seed
    /// before [`start`](Self::start).
    pub fn value(&self) -> Vec<u8> {
        self.shared.value()
    }

    /// The latest value seen, with its node version (version -1 and zxid
    /// 0 before [`start`](Self::start)).
    pub fn versioned_value(&self) -> VersionedValue<Vec<u8>> {
        self.shared.versioned_value()
    }

    /// Sets the value, whatever it was. Fails with `NoNode` if the node was
    /// deleted, and with [`Error::IllegalState`] before
    /// [`start`](Self::start) or after [`close`](Self::close).
    pub fn set_value(&self, value: &[u8]) -> Result<()> {
        self.shared.set_value(value.to_vec(), None)
    }

    /// Sets the value only if the node still holds `previous`: the same
    /// bytes written by the same change (`zxid`), at the same version
    /// (compare-and-set). `Ok(false)` if someone changed it since, even to
    /// equal bytes or by deleting and re-creating the node; the cache is
    /// then current, so [`versioned_value`](Self::versioned_value) gives a
    /// fresh value to retry with.
    ///
    /// As in Curator, `previous` is first compared with the cache; unlike
    /// Curator, the node is then read once more, so a change the cache has
    /// not heard of yet is refused too. Version -1 (which ZooKeeper takes
    /// as "any version") is refused with [`Error::InvalidArgument`].
    ///
    /// `Ok(false)` always means this write was not applied. When the
    /// connection broke after the write was sent and the node cannot tell
    /// whether it was (it holds these bytes one version on, or has moved
    /// further), the error is `ConnectionLoss`, "may or may not have run";
    /// Curator reports `false` there, even when its write was applied.
    pub fn try_set_value(&self, previous: &VersionedValue<Vec<u8>>, value: &[u8]) -> Result<bool> {
        self.shared.try_set_value(previous, value.to_vec(), None)
    }

    /// This value with its writes fenced by `fence`, a hold such as a
    /// [`Leadership`](crate::Leadership) or a
    /// [`MutexGuard`](crate::MutexGuard): each set through it is applied
    /// only while the hold stands, and fails with [`Error::FenceGone`]
    /// once it has ended (see [`SharedCount::fenced`](crate::SharedCount::fenced)).
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client, value: &latchkey_recipes::SharedValue,
    /// #      leadership: &latchkey_recipes::Leadership) -> latchkey_framework::Result<()> {
    /// let seen = value.versioned_value();
    /// if !value.fenced(leadership).try_set_value(&seen, b"plan v2")? {
    ///     println!("changed meanwhile; not written");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn fenced<'a>(&'a self, fence: &'a dyn Fence) -> Fenced<'a, SharedValue> {
        Fenced::new(self, fence)
    }

    /// A channel that receives every new value, in the order they were
    /// seen (values set in quick succession may arrive as only the last
    /// one), and every connection-state change once started. It
    /// disconnects when the value is closed; dropping the receiver removes
    /// it. Listen before [`start`](Self::start) to miss nothing.
    pub fn listen(&self) -> Receiver<SharedValueEvent> {
        let (tx, rx) = unbounded();
        if !self.shared.inner.is_closed() {
            self.events.subscribers.lock().push(tx);
        }
        rx
    }

    /// Stops watching the node; [`value`](Self::value) keeps the last
    /// value, setting fails from now on and the [`listen`](Self::listen)
    /// channels disconnect. Idempotent; affects every clone.
    pub fn close(&self) {
        self.shared.close();
        self.events.state_listener.lock().take();
        self.events.subscribers.lock().clear();
    }
}

impl Fenced<'_, SharedValue> {
    /// [`SharedValue::set_value`], applied only while the fence stands.
    pub fn set_value(&self, value: &[u8]) -> Result<()> {
        self.recipe
            .shared
            .set_value(value.to_vec(), Some(self.fence))
    }

    /// [`SharedValue::try_set_value`], applied only while the fence
    /// stands: `Ok(false)` when someone changed the value since
    /// `previous`, [`Error::FenceGone`] when the hold has ended.
    pub fn try_set_value(&self, previous: &VersionedValue<Vec<u8>>, value: &[u8]) -> Result<bool> {
        self.recipe
            .shared
            .try_set_value(previous, value.to_vec(), Some(self.fence))
    }
}

impl std::fmt::Debug for SharedValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.versioned_value();
        f.debug_struct("SharedValue")
            .field("path", &self.path())
            .field("value", &String::from_utf8_lossy(&v.value))
            .field("version", &v.version)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(is_newer(100, &stat(1, 101, i32::MIN)));
        assert!(is_newer(100, &stat(1, 101, -1)));
    }

    #[test]
    fn later_writes_win_and_earlier_ones_are_ignored() {
        assert!(!is_newer(100, &stat(1, 100, 3)), "the same write again");
        assert!(!is_newer(100, &stat(1, 99, 2)), "an earlier write");
        // A re-created node: version 0 again, but a later change.
        assert!(is_newer(100, &stat(150, 150, 0)));
    }

    #[test]
    fn bytes_are_kept_as_they_are() {
        for data in [&b""[..], b"\0", b"abc", &[0xff; 300]] {
            let v = <Vec<u8> as Codec>::decode("/v", data).unwrap();
            assert_eq!(v, data);
            assert_eq!(v.encode(), data);
        }
    }

    #[test]
    fn each_hook_and_listener_goes_alone() {
        use std::sync::atomic::AtomicUsize;
        let registry: Arc<Mutex<Listeners<i32>>> = Arc::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let hook = |registry: &Arc<Mutex<Listeners<i32>>>| {
            let calls = Arc::clone(&calls);
            let id = Listeners::add(registry, |_| {
                Arc::new(move |_: &VersionedValue<i32>| {
                    calls.fetch_add(1, Ordering::SeqCst);
                })
            });
            let weak = Arc::downgrade(registry);
            (
                id,
                ChangeHook {
                    remove: Some(Box::new(move || Listeners::remove(&weak, id))),
                },
            )
        };
        let ((a, ha), (b, hb), (c, hc)) = (hook(&registry), hook(&registry), hook(&registry));
        assert!(a != b && b != c && a != c);
        drop(hb);
        let ids: Vec<u64> = registry.lock().list.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [a, c], "dropping one hook removes it alone");
        let v = VersionedValue {
            zxid: 1,
            version: 0,
            value: 1,
        };
        for (_, listener) in registry.lock().list.iter() {
            listener(&v);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        drop((ha, hc));
        assert!(registry.lock().list.is_empty());
    }
}

//! Curator's `DistributedAtomicLong`, `DistributedAtomicInteger` and
//! `DistributedAtomicValue`: a number (8 or 4 big-endian bytes) or bytes in
//! one node, changed by optimistic compare-and-set with retries, optionally
//! promoted to a mutex.

use std::sync::Arc;
use std::time::{Duration, Instant};

use latchkey_framework::{Client, Error, ErrorCode, Result, RetryNTimes, RetryPolicy, Stat};

use crate::fence::{self, Fence, Fenced};
use crate::locks::lock_internals::{deadline_after, validate_recipe_path};
use crate::locks::mutex::InterProcessMutex;

/// What a distributed atomic can hold: `i64` (Curator's
/// `DistributedAtomicLong`), `i32` (`DistributedAtomicInteger`) or bytes,
/// `Vec<u8>` (`DistributedAtomicValue`).
pub trait AtomicData:
    Clone + PartialEq + std::fmt::Debug + Send + Sync + 'static + private::Sealed
{
    /// The node's bytes for `self`.
    fn to_data(&self) -> Vec<u8>;
    /// The value in `data`: the empty value for no data, `None` if `data`
    /// holds no value of this type.
    fn from_data(data: &[u8]) -> Option<Self>;
    /// What a missing node or a node without data reads as: 0, or no bytes.
    fn empty() -> Self;
    /// What this type is, for the error about a node holding something
    /// else ("8-byte number").
    fn describe() -> String;
}

/// A number type a distributed atomic can hold: `i64` (Curator's
/// `DistributedAtomicLong`) or `i32` (`DistributedAtomicInteger`).
pub trait AtomicNumber:
    Copy + PartialEq + std::fmt::Debug + Send + Sync + 'static + private::Sealed + AtomicData
{
    /// How many bytes the node holds.
    const WIDTH: usize;
    /// The big-endian bytes of `self`.
    fn encode(self) -> Vec<u8>;
    /// The number in `data`: 0 for no data (as Curator reads it), `None`
    /// for any length other than 0 or [`WIDTH`](Self::WIDTH).
    fn decode(data: &[u8]) -> Option<Self>;
    /// `self + delta`, wrapping on overflow as Java's arithmetic does.
    fn wrapping_add(self, delta: Self) -> Self;
    /// `-self`, wrapping (the minimum stays itself) as Java's does.
    fn wrapping_neg(self) -> Self;
    /// Zero.
    fn zero() -> Self;
}

mod private {
    pub trait Sealed {}
    impl Sealed for i64 {}
    impl Sealed for i32 {}
    impl Sealed for Vec<u8> {}
}

impl AtomicData for Vec<u8> {
    fn to_data(&self) -> Vec<u8> {
        self.clone()
    }
    fn from_data(data: &[u8]) -> Option<Self> {
        Some(data.to_vec())
    }
    fn empty() -> Self {
        Vec::new()
    }
    fn describe() -> String {
        "byte string".into()
    }
}

macro_rules! atomic_number {
    ($t:ty) => {
        impl AtomicNumber for $t {
            const WIDTH: usize = std::mem::size_of::<$t>();
            fn encode(self) -> Vec<u8> {
                self.to_be_bytes().to_vec()
            }
            fn decode(data: &[u8]) -> Option<Self> {
                if data.is_empty() {
                    return Some(0);
                }
                data.try_into().ok().map(<$t>::from_be_bytes)
            }
            fn wrapping_add(self, delta: Self) -> Self {
                <$t>::wrapping_add(self, delta)
            }
            fn wrapping_neg(self) -> Self {
                <$t>::wrapping_neg(self)
            }
            fn zero() -> Self {
                0
            }
        }

        impl AtomicData for $t {
            fn to_data(&self) -> Vec<u8> {
                AtomicNumber::encode(*self)
            }
            fn from_data(data: &[u8]) -> Option<Self> {
                <$t as AtomicNumber>::decode(data)
            }
            fn empty() -> Self {
                0
            }
            fn describe() -> String {
                format!("{}-byte number", <$t as AtomicNumber>::WIDTH)
            }
        }
    };
}
atomic_number!(i64);
atomic_number!(i32);

/// What an operation did (Curator's `AtomicValue`): whether it
/// succeeded, the value before and after, and how hard it tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AtomicValue<T> {
    /// Whether the change was made. When false, nothing was written and
    /// `post_value` is meaningless (as in Curator).
    pub succeeded: bool,
    /// The value the change started from (0 if the node did not exist).
    pub pre_value: T,
    /// The value written, if `succeeded`.
    pub post_value: T,
    /// How many attempts it took.
    pub stats: AtomicStats,
}

/// Attempts and time spent by one operation (Curator's `AtomicStats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AtomicStats {
    /// Optimistic compare-and-set attempts.
    pub optimistic_tries: u32,
    /// Attempts made holding the promotion lock.
    pub promoted_tries: u32,
    /// Time spent in the optimistic attempts.
    pub optimistic_time: Duration,
    /// Time spent holding or waiting for the promotion lock.
    pub promoted_time: Duration,
}

/// When the optimistic attempts of a distributed atomic give up, try again
/// holding an [`InterProcessMutex`] at `lock_path` (Curator's
/// `PromotedToLock`).
#[derive(Clone)]
pub struct PromotedToLock {
    lock_path: String,
    timeout: Option<Duration>,
    retry_policy: Arc<dyn RetryPolicy>,
}

impl std::fmt::Debug for PromotedToLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromotedToLock")
            .field("lock_path", &self.lock_path)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl PromotedToLock {
    /// Promotion to the mutex at `lock_path`, waiting for it without limit
    /// and trying once while holding it (Curator's defaults); see
    /// [`timeout`](Self::timeout) and [`retry_policy`](Self::retry_policy).
    pub fn new(lock_path: &str) -> PromotedToLock {
        PromotedToLock {
            lock_path: lock_path.to_owned(),
            timeout: None,
            retry_policy: Arc::new(RetryNTimes::new(0, Duration::ZERO)),
        }
    }

    /// Waits at most `timeout` for the lock (a deadline; `Duration::MAX`:
    /// no limit). Not getting it leaves the operation unsucceeded.
    pub fn timeout(mut self, timeout: Duration) -> PromotedToLock {
        self.timeout = Some(timeout);
        self
    }

    /// How often to try again while holding the lock.
    pub fn retry_policy(mut self, policy: impl RetryPolicy + 'static) -> PromotedToLock {
        self.retry_policy = Arc::new(policy);
        self
    }
}

/// A number or bytes shared by every process using the same path,
/// wire-compatible with Curator's `DistributedAtomicLong`
/// (`DistributedAtomic<i64>`), `DistributedAtomicInteger`
/// (`DistributedAtomic<i32>`) and `DistributedAtomicValue`
/// (`DistributedAtomic<Vec<u8>>`): the node holds the number as 8 or 4
/// big-endian bytes, or the bytes as they are; a missing node or no data
/// reads as 0, or as no bytes.
///
/// Each change reads the node and writes it back only if its version is
/// unchanged, trying again as `retry_policy` allows; with
/// [`PromotedToLock`], it then tries again holding a mutex. An operation
/// that did not manage returns `succeeded: false` and wrote nothing.
///
/// Unlike Curator's, the conditional write is made once per attempt,
/// outside the client's retry loop, so a write applied just before the
/// connection broke is never taken for a conflict and applied again. An
/// `Err` from a change after its write was sent (connection loss, timeout)
/// leaves it unknown whether that one change was applied, as for any
/// ZooKeeper write; every `Ok` with `succeeded` was applied exactly once.
///
/// The other writes: a node created holding the empty value before a
/// first change, whose retry meeting `NodeExists` is fine (the empty value
/// is what a missing node reads as);
/// [`force_set`](DistributedAtomic::force_set), a `set_data` without a
/// version retried after a lost reply (applied once or twice, to the same
/// value); and `initialize`, a create retried after a lost reply, which
/// returns `false` ("the node was there") when it meets its own node,
/// created by the attempt whose reply was lost. Through
/// [`fenced`](DistributedAtomic::fenced), a write whose reply was lost and
/// whose fence is then found gone is `ConnectionLoss`, "may or may not
/// have run".
///
/// A clone is another handle on the same number (it keeps no state of its
/// own besides its settings); with [`PromotedToLock`], clones share the
/// promotion's mutex object. There is nothing to close: it sets no watch
/// and runs no thread, and an operation promoted to the lock releases the
/// mutex before it returns.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_framework::RetryNTimes;
/// use latchkey_recipes::{DistributedAtomicLong, PromotedToLock};
///
/// let counter = DistributedAtomicLong::new(client, "/counters/jobs", RetryNTimes::new(10, Duration::from_millis(10)))?
///     .promoted_to_lock(PromotedToLock::new("/counters/jobs-lock").timeout(Duration::from_secs(5)))?;
/// let done = counter.increment()?;
/// if done.succeeded {
///     println!("{} -> {}", done.pre_value, done.post_value);
/// }
/// println!("now {}", counter.get()?.post_value);
/// # Ok(()) }
/// ```
pub struct DistributedAtomic<T: AtomicData> {
    client: Client,
    path: String,
    retry_policy: Arc<dyn RetryPolicy>,
    promoted: Option<(PromotedToLock, InterProcessMutex)>,
    _value: std::marker::PhantomData<T>,
}

// By hand: a derive would ask `T: Clone` of the marker's parameter.
impl<T: AtomicData> Clone for DistributedAtomic<T> {
    fn clone(&self) -> Self {
        DistributedAtomic {
            client: self.client.clone(),
            path: self.path.clone(),
            retry_policy: Arc::clone(&self.retry_policy),
            promoted: self.promoted.clone(),
            _value: std::marker::PhantomData,
        }
    }
}

/// Curator's `DistributedAtomicLong`: an `i64` in 8 big-endian bytes.
pub type DistributedAtomicLong = DistributedAtomic<i64>;
/// Curator's `DistributedAtomicInteger`: an `i32` in 4 big-endian bytes.
pub type DistributedAtomicInteger = DistributedAtomic<i32>;
/// Curator's `DistributedAtomicValue`: bytes, compared and set as a whole.
///
/// A missing node reads as no bytes, as a node without data does (Curator
/// reads it as `null`); [`compare_and_set`](DistributedAtomic::compare_and_set)
/// never succeeds on a missing node, while
/// [`try_set`](DistributedAtomic::try_set) and
/// [`force_set`](DistributedAtomic::force_set) create it.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_framework::RetryNTimes;
/// use latchkey_recipes::DistributedAtomicValue;
///
/// let owner = DistributedAtomicValue::new(client, "/jobs/7/owner", RetryNTimes::new(3, Duration::from_millis(10)))?;
/// owner.initialize(b"nobody")?; // only if the node is new
/// let swapped = owner.compare_and_set(b"nobody", b"worker-1")?;
/// if swapped.succeeded {
///     println!("claimed it");
/// } else {
///     println!("taken by {}", String::from_utf8_lossy(&swapped.pre_value));
/// }
/// # Ok(()) }
/// ```
pub type DistributedAtomicValue = DistributedAtomic<Vec<u8>>;

impl<T: AtomicData> std::fmt::Debug for DistributedAtomic<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedAtomic")
            .field("path", &self.path)
            .field("holds", &T::describe())
            .field("promoted", &self.promoted.as_ref().map(|(p, _)| p))
            .finish()
    }
}

impl<T: AtomicData> DistributedAtomic<T> {
    /// The value at `path` (the node is created on the first change),
    /// changed optimistically as `retry_policy` allows.
    pub fn new(
        client: &Client,
        path: &str,
        retry_policy: impl RetryPolicy + 'static,
    ) -> Result<Self> {
        validate_recipe_path(client, path)?;
        Ok(DistributedAtomic {
            client: client.clone(),
            path: path.to_owned(),
            retry_policy: Arc::new(retry_policy),
            promoted: None,
            _value: std::marker::PhantomData,
        })
    }

    /// Tries again holding a mutex when the optimistic attempts give up.
    pub fn promoted_to_lock(mut self, promoted: PromotedToLock) -> Result<Self> {
        let mutex = InterProcessMutex::new(&self.client, &promoted.lock_path)?;
        self.promoted = Some((promoted, mutex));
        Ok(self)
    }

    /// The node's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The current value (0 or no bytes if the node does not exist), as
    /// both `pre_value` and `post_value`, `succeeded` true.
    pub fn get(&self) -> Result<AtomicValue<T>> {
        let value = match self.read()? {
            Some((v, _)) => v,
            None => T::empty(),
        };
        Ok(AtomicValue {
            succeeded: true,
            pre_value: value.clone(),
            post_value: value,
            stats: AtomicStats::default(),
        })
    }

    fn force_set_data(&self, data: &[u8], fence: Option<&dyn Fence>) -> Result<()> {
        let Some(fence) = fence else {
            return match self.client.set_data(&self.path, data, None) {
                Err(e) if e.is(ErrorCode::NoNode) => match self.create(data) {
                    Err(e) if e.is(ErrorCode::NodeExists) => {
                        self.client.set_data(&self.path, data, None).map(|_| ())
                    }
                    other => other,
                },
                other => other.map(|_| ()),
            };
        };
        let fence = fence::fence_for(&self.client, fence, "set_data", &self.path)?;
        let set = || self.client.set_data_fenced(&fence, &self.path, data, None);
        match set() {
            // A missing node: created holding the empty value (what a
            // missing node reads as, so unfenced), then set under the fence.
            Err(e) if e.is(ErrorCode::NoNode) && !matches!(e, Error::FenceGone { .. }) => {
                match self.create(&T::empty().to_data()) {
                    Err(e) if !e.is(ErrorCode::NodeExists) => Err(e),
                    _ => set().map(|_| ()),
                }
            }
            other => other.map(|_| ()),
        }
    }

    fn compare_and_set_value(
        &self,
        expected: &[u8],
        new: T,
        fence: Option<&dyn Fence>,
    ) -> Result<AtomicValue<T>> {
        let mut result = self.unsucceeded();
        let (data, stat) = match self.client.get_data(&self.path) {
            Err(e) if e.is(ErrorCode::NoNode) => return Ok(result),
            other => other?,
        };
        result.pre_value = self.decode(&data)?;
        if data == expected && self.write_once(&new.to_data(), stat.version, fence)? {
            result.succeeded = true;
            result.post_value = new;
        }
        Ok(result)
    }

    fn initialize_data(&self, data: &[u8]) -> Result<bool> {
        match self.create(data) {
            Ok(()) => Ok(true),
            Err(e) if e.is(ErrorCode::NodeExists) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn unsucceeded(&self) -> AtomicValue<T> {
        AtomicValue {
            succeeded: false,
            pre_value: T::empty(),
            post_value: T::empty(),
            stats: AtomicStats::default(),
        }
    }

    fn decode(&self, data: &[u8]) -> Result<T> {
        T::from_data(data).ok_or_else(|| {
            let shown: Vec<String> = data.iter().take(16).map(|b| format!("0x{b:02x}")).collect();
            Error::IllegalState(format!(
                "corrupted data for node {}: {} bytes [{}{}], not a {}",
                self.path,
                data.len(),
                shown.join(", "),
                if data.len() > 16 { ", ..." } else { "" },
                T::describe()
            ))
        })
    }

    /// The value and node version; `None` if the node does not exist.
    fn read(&self) -> Result<Option<(T, Stat)>> {
        match self.client.get_data(&self.path) {
            Ok((data, stat)) => Ok(Some((self.decode(&data)?, stat))),
            Err(e) if e.is(ErrorCode::NoNode) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn create(&self, data: &[u8]) -> Result<()> {
        self.client
            .create()
            .creating_parent_containers_if_needed()
            .for_path(&self.path, data)
            .map(|_| ())
    }

    /// Writes `data` at `version` in one attempt: `Ok(false)` if refused
    /// (the version moved, the node went, or nothing could be sent). With
    /// a `fence`, in one transaction with its check (retried as a
    /// compare-and-set is, never reporting its own write refused), and
    /// [`Error::FenceGone`] once the hold has ended.
    fn write_once(&self, data: &[u8], version: i32, fence: Option<&dyn Fence>) -> Result<bool> {
        let written = match fence {
            None => self.client.set_data_once(&self.path, data, Some(version)),
            Some(fence) => {
                let fence = fence::fence_for(&self.client, fence, "set_data", &self.path)?;
                self.client
                    .set_data_fenced(&fence, &self.path, data, Some(version))
            }
        };
        match written {
            Ok(_) => Ok(true),
            Err(e @ Error::FenceGone { .. }) => Err(e),
            Err(e) if e.is(ErrorCode::BadVersion) || e.is(ErrorCode::NoNode) => Ok(false),
            Err(e) if not_sent(&e) => {
                // Nothing was sent: wait for the connection, then retry.
                let _ = self
                    .client
                    .block_until_connected(self.client.connection_timeout());
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// One read-modify-write; `Ok(true)` if it was applied.
    fn attempt(
        &self,
        make: &impl Fn(&T) -> T,
        result: &mut AtomicValue<T>,
        fence: Option<&dyn Fence>,
    ) -> Result<bool> {
        let (pre, stat) = match self.read()? {
            Some(found) => found,
            None => {
                // Create the node holding the empty value, then change it
                // like any other: a create retried after a connection loss
                // may be answered NodeExists for itself, and the empty value
                // is what a missing node reads as, so this create cannot be
                // applied twice to any effect.
                match self.create(&T::empty().to_data()) {
                    Err(e) if !e.is(ErrorCode::NodeExists) => return Err(e),
                    _ => {}
                }
                match self.read()? {
                    Some(found) => found,
                    None => return Ok(false),
                }
            }
        };
        let new = make(&pre);
        result.pre_value = pre;
        if self.write_once(&new.to_data(), stat.version, fence)? {
            result.post_value = new;
            return Ok(true);
        }
        Ok(false)
    }

    fn change(&self, make: impl Fn(&T) -> T, fence: Option<&dyn Fence>) -> Result<AtomicValue<T>> {
        let mut result = self.unsucceeded();
        let started = Instant::now();
        let mut retries = 0u32;
        loop {
            result.stats.optimistic_tries += 1;
            if self.attempt(&make, &mut result, fence)? {
                result.succeeded = true;
                break;
            }
            match self.retry_policy.allow_retry(retries, started.elapsed()) {
                Some(pause) => std::thread::sleep(pause),
                None => break,
            }
            retries += 1;
        }
        result.stats.optimistic_time = started.elapsed();
        if !result.succeeded {
            if let Some((promoted, mutex)) = &self.promoted {
                self.change_locked(promoted, mutex, &make, &mut result, fence)?;
            }
        }
        Ok(result)
    }

    fn change_locked(
        &self,
        promoted: &PromotedToLock,
        mutex: &InterProcessMutex,
        make: &impl Fn(&T) -> T,
        result: &mut AtomicValue<T>,
        fence: Option<&dyn Fence>,
    ) -> Result<()> {
        let started = Instant::now();
        let timeout = promoted.timeout.unwrap_or(Duration::MAX);
        let acquired = match deadline_after(timeout) {
            None => {
                mutex.acquire()?;
                true
            }
            Some(_) => mutex.acquire_timeout(timeout)?,
        };
        if acquired {
            let outcome: Result<()> = (|| {
                let mut retries = 0u32;
                loop {
                    result.stats.promoted_tries += 1;
                    if self.attempt(make, result, fence)? {
                        result.succeeded = true;
                        return Ok(());
                    }
                    match promoted
                        .retry_policy
                        .allow_retry(retries, started.elapsed())
                    {
                        Some(pause) => std::thread::sleep(pause),
                        None => return Ok(()),
                    }
                    retries += 1;
                }
            })();
            let released = mutex.release();
            outcome?;
            released?;
        }
        result.stats.promoted_time = started.elapsed();
        Ok(())
    }
}

impl<T: AtomicNumber> DistributedAtomic<T> {
    /// Sets the value whatever it is, creating the node if needed.
    pub fn force_set(&self, value: T) -> Result<()> {
        self.force_set_data(&value.to_data(), None)
    }

    /// Sets `new` only if the node holds exactly `expected` (compared as
    /// bytes, as Curator does: a node without data does not hold 0 here);
    /// one attempt, no retries.
    pub fn compare_and_set(&self, expected: T, new: T) -> Result<AtomicValue<T>> {
        self.compare_and_set_value(&expected.to_data(), new, None)
    }

    /// Sets `value` by compare-and-set with retries (and the lock, if
    /// promoted).
    pub fn try_set(&self, value: T) -> Result<AtomicValue<T>> {
        self.change(|_| value, None)
    }

    /// Creates the node holding `value` if it does not exist; `false` if
    /// it does (nothing changes then). A create retried after a lost reply
    /// that meets the node its first attempt made also returns `false`.
    pub fn initialize(&self, value: T) -> Result<bool> {
        self.initialize_data(&value.to_data())
    }

    /// Adds 1.
    pub fn increment(&self) -> Result<AtomicValue<T>> {
        self.add(Self::one())
    }

    /// Subtracts 1.
    pub fn decrement(&self) -> Result<AtomicValue<T>> {
        self.add(Self::one().wrapping_neg())
    }

    /// Adds `delta` (wrapping on overflow, as Java does).
    pub fn add(&self, delta: T) -> Result<AtomicValue<T>> {
        self.change(|v| v.wrapping_add(delta), None)
    }

    /// Subtracts `delta` (wrapping on overflow, as Java does).
    pub fn subtract(&self, delta: T) -> Result<AtomicValue<T>> {
        self.add(delta.wrapping_neg())
    }

    fn one() -> T {
        // 1 in every width: the last byte set, big-endian.
        let mut bytes = vec![0u8; T::WIDTH];
        bytes[T::WIDTH - 1] = 1;
        AtomicNumber::decode(&bytes).unwrap_or_else(T::zero)
    }
}

impl DistributedAtomic<Vec<u8>> {
    /// Sets the value whatever it is, creating the node if needed.
    pub fn force_set(&self, value: &[u8]) -> Result<()> {
        self.force_set_data(value, None)
    }

    /// Sets `new` only if the node holds exactly `expected`; one attempt,
    /// no retries. Never succeeds on a missing node (see
    /// [`initialize`](Self::initialize)).
    pub fn compare_and_set(&self, expected: &[u8], new: &[u8]) -> Result<AtomicValue<Vec<u8>>> {
        self.compare_and_set_value(expected, new.to_vec(), None)
    }

    /// Sets `value` by compare-and-set with retries (and the lock, if
    /// promoted), creating the node if needed.
    pub fn try_set(&self, value: &[u8]) -> Result<AtomicValue<Vec<u8>>> {
        self.change(|_| value.to_vec(), None)
    }

    /// Creates the node holding `value` if it does not exist; `false` if
    /// it does (nothing changes then). A create retried after a lost reply
    /// that meets the node its first attempt made also returns `false`.
    pub fn initialize(&self, value: &[u8]) -> Result<bool> {
        self.initialize_data(value)
    }
}

impl<T: AtomicData> DistributedAtomic<T> {
    /// This value with its writes fenced by `fence`, a hold such as a
    /// [`Leadership`](crate::Leadership) or a
    /// [`MutexGuard`](crate::MutexGuard): each change through it is
    /// written only while the hold stands, in one transaction with a check
    /// of the hold's node, and fails with [`Error::FenceGone`] once the
    /// hold has ended (see [`crate::Fence`]). A missing node is first
    /// created holding the empty value, which is what a missing node reads
    /// as. There is no fenced `initialize`.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client, leadership: &latchkey_recipes::Leadership) -> latchkey_framework::Result<()> {
    /// use std::time::Duration;
    /// use latchkey_framework::RetryNTimes;
    /// use latchkey_recipes::DistributedAtomicLong;
    ///
    /// let epoch = DistributedAtomicLong::new(client, "/config/epoch", RetryNTimes::new(3, Duration::from_millis(10)))?;
    /// let next = epoch.fenced(leadership).increment()?; // fails once the term is over
    /// # let _ = next;
    /// # Ok(()) }
    /// ```
    pub fn fenced<'a>(&'a self, fence: &'a dyn Fence) -> Fenced<'a, DistributedAtomic<T>> {
        Fenced::new(self, fence)
    }
}

impl<T: AtomicNumber> Fenced<'_, DistributedAtomic<T>> {
    /// [`DistributedAtomic::force_set`], written only while the fence stands.
    pub fn force_set(&self, value: T) -> Result<()> {
        self.recipe
            .force_set_data(&value.to_data(), Some(self.fence))
    }

    /// [`DistributedAtomic::compare_and_set`], written only while the
    /// fence stands.
    pub fn compare_and_set(&self, expected: T, new: T) -> Result<AtomicValue<T>> {
        self.recipe
            .compare_and_set_value(&expected.to_data(), new, Some(self.fence))
    }

    /// [`DistributedAtomic::try_set`], written only while the fence stands.
    pub fn try_set(&self, value: T) -> Result<AtomicValue<T>> {
        self.recipe.change(|_| value, Some(self.fence))
    }

    /// Adds 1, only while the fence stands.
    pub fn increment(&self) -> Result<AtomicValue<T>> {
        self.add(DistributedAtomic::<T>::one())
    }

    /// Subtracts 1, only while the fence stands.
    pub fn decrement(&self) -> Result<AtomicValue<T>> {
        self.add(DistributedAtomic::<T>::one().wrapping_neg())
    }

    /// Adds `delta` (wrapping), only while the fence stands.
    pub fn add(&self, delta: T) -> Result<AtomicValue<T>> {
        self.recipe
            .change(|v| v.wrapping_add(delta), Some(self.fence))
    }

    /// Subtracts `delta` (wrapping), only while the fence stands.
    pub fn subtract(&self, delta: T) -> Result<AtomicValue<T>> {
        self.add(delta.wrapping_neg())
    }
}

impl Fenced<'_, DistributedAtomic<Vec<u8>>> {
    /// [`DistributedAtomic::force_set`], written only while the fence stands.
    pub fn force_set(&self, value: &[u8]) -> Result<()> {
        self.recipe.force_set_data(value, Some(self.fence))
    }

    /// [`DistributedAtomic::compare_and_set`], written only while the
    /// fence stands.
    pub fn compare_and_set(&self, expected: &[u8], new: &[u8]) -> Result<AtomicValue<Vec<u8>>> {
        self.recipe
            .compare_and_set_value(expected, new.to_vec(), Some(self.fence))
    }

    /// [`DistributedAtomic::try_set`], written only while the fence stands.
    pub fn try_set(&self, value: &[u8]) -> Result<AtomicValue<Vec<u8>>> {
        self.recipe.change(|_| value.to_vec(), Some(self.fence))
    }
}

/// Whether `e` says that a request was never sent (no connection).
fn not_sent(e: &Error) -> bool {
    match e {
        Error::NotConnected { .. } => true,
        Error::Operation { source, .. } => not_sent(source),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_curators_big_endian_bytes() {
        assert_eq!(258i64.encode(), [0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(258i32.encode(), [0, 0, 1, 2]);
        assert_eq!(i64::decode(&(-1i64).encode()), Some(-1));
        assert_eq!(
            i32::decode(&[]),
            Some(0),
            "no data reads as 0, as in Curator"
        );
        assert_eq!(i64::decode(&[0; 4]), None);
        assert_eq!(i32::decode(&[0; 8]), None);
        assert_eq!(i64::MAX.wrapping_add(1), i64::MIN);
        assert_eq!(AtomicNumber::wrapping_neg(i32::MIN), i32::MIN);
    }

    #[test]
    fn bytes_are_kept_as_they_are_and_no_data_is_empty() {
        for data in [&b""[..], b"\0", &[0xff; 300]] {
            assert_eq!(Vec::<u8>::from_data(data).unwrap(), data);
            assert_eq!(data.to_vec().to_data(), data);
        }
        assert_eq!(Vec::<u8>::empty(), b"");
        assert_eq!(<i64 as AtomicData>::from_data(&[]), Some(0));
        assert_eq!(<i32 as AtomicData>::from_data(&[1, 2, 3]), None);
        assert_eq!(<i64 as AtomicData>::describe(), "8-byte number");
        assert_eq!(258i32.to_data(), [0, 0, 1, 2]);
    }
}

//! Curator's `QueueSharder`: one logical queue spread over several queue
//! nodes `<path>/queue-<uuid>`, each a queue of its own. Every sharder
//! checks the shards' sizes now and then; the leader among them (a
//! [`LeaderLatch`](crate::LeaderLatch) on the leader path) adds a shard
//! when one holds the threshold or more, and puts go to shards holding
//! half the threshold or less where there are any.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use latchkey_framework::{CancelToken, Client, CreateMode, Error, ErrorCode, Result};
use parking_lot::Mutex;

use super::distributed::DistributedQueue;
use super::names::QUEUE_ITEM_PREFIX;
use super::simple::SimpleDistributedQueue;
use super::variants::{DistributedDelayQueue, DistributedIdQueue, DistributedPriorityQueue};
use crate::leader::leader_latch::LeaderLatch;
use crate::locks::lock_internals::{validate_recipe_path, Signal};

/// A queue a [`QueueSharder`] can hold as a shard: started when the
/// sharder takes it on, closed with the sharder (Curator's `QueueBase`).
pub trait ShardQueue: Send + Sync + 'static {
    /// Starts the queue.
    fn start(&self) -> Result<()>;
    /// Closes the queue.
    fn close(&self);
}

macro_rules! shard_queue {
    ($($queue:ident),*) => {$(
        impl<T: Send + 'static> ShardQueue for $queue<T> {
            fn start(&self) -> Result<()> {
                $queue::start(self)
            }
            fn close(&self) {
                $queue::close(self)
            }
        }
    )*};
}
shard_queue!(
    DistributedQueue,
    DistributedPriorityQueue,
    DistributedDelayQueue,
    DistributedIdQueue
);

impl ShardQueue for SimpleDistributedQueue {
    fn start(&self) -> Result<()> {
        Ok(())
    }
    fn close(&self) {}
}

/// When a [`QueueSharder`] adds a shard (Curator's `QueueSharderPolicies`).
#[derive(Clone, Debug)]
pub struct QueueSharderPolicies {
    new_queue_threshold: usize,
    threshold_check: Duration,
    max_queues: usize,
}

impl Default for QueueSharderPolicies {
    /// Curator's defaults: a threshold of 10 000 items, a check every 30 s,
    /// at most 10 shards.
    fn default() -> Self {
        QueueSharderPolicies {
            new_queue_threshold: 10_000,
            threshold_check: Duration::from_secs(30),
            max_queues: 10,
        }
    }
}

impl QueueSharderPolicies {
    /// A shard holding this many items or more makes the leader add one.
    pub fn new_queue_threshold(mut self, items: usize) -> Self {
        self.new_queue_threshold = items;
        self
    }

    /// How often each sharder looks at the shards' sizes.
    pub fn threshold_check(mut self, every: Duration) -> Self {
        self.threshold_check = every;
        self
    }

    /// The most shards the leader adds up to.
    pub fn max_queues(mut self, max: usize) -> Self {
        self.max_queues = max;
        self
    }
}

type Allocator<Q> = Box<dyn Fn(&Client, &str) -> Result<Q> + Send + Sync>;

/// One logical queue over several shards (Curator's `QueueSharder`).
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::{QueueBuilder, QueueSharder, QueueSharderPolicies, StringSerializer};
///
/// let sharder = QueueSharder::new(
///     client,
///     |client, path| {
///         QueueBuilder::new(client, StringSerializer, path)
///             .consumer(|job: String| { println!("{job}"); Ok(()) })
///             .build_queue()
///     },
///     "/queues/jobs",
///     "/queues/jobs-leader",
///     QueueSharderPolicies::default().new_queue_threshold(1000),
/// )?;
/// sharder.start()?;
/// sharder.queue()?.put(&"job-1".to_string())?;
/// # Ok(()) }
/// ```
///
/// The sharder itself writes only the container node at its path (a
/// retried create that meets `NodeExists` counts as done) and its
/// [`LeaderLatch`](crate::LeaderLatch)'s node; the shards write as their
/// queues do. [`close`](Self::close) (or drop) waits for the thread that
/// checks the shards' sizes, then closes the latch (its node deleted) and
/// every shard (each waiting for the item its consumer is on); items stay
/// in ZooKeeper. A size check under way when it closes is cancelled: its
/// reads end at once, whatever the client's retry policy. (A shard that
/// another sharder added, being started by the check, is started to the
/// end.)
pub struct QueueSharder<Q: ShardQueue> {
    inner: Arc<Inner<Q>>,
}

struct Inner<Q> {
    client: Client,
    /// `client`, cancelled on close: the size checks' reads.
    checking: Client,
    cancel: CancelToken,
    allocate: Allocator<Q>,
    path: String,
    policies: QueueSharderPolicies,
    queues: Mutex<BTreeMap<String, Arc<Q>>>,
    preferred: Mutex<BTreeSet<String>>,
    latch: LeaderLatch,
    state: AtomicU8,
    signal: Signal,
    worker: Mutex<Option<JoinHandle<()>>>,
}

const LATENT: u8 = 0;
const STARTED: u8 = 1;
const CLOSED: u8 = 2;

impl<Q: ShardQueue> QueueSharder<Q> {
    /// A sharder of the queues under `path`, each made by `allocate(client,
    /// shard path)`, the leader elected on `leader_path`.
    pub fn new(
        client: &Client,
        allocate: impl Fn(&Client, &str) -> Result<Q> + Send + Sync + 'static,
        path: &str,
        leader_path: &str,
        policies: QueueSharderPolicies,
    ) -> Result<QueueSharder<Q>> {
        validate_recipe_path(client, path)?;
        if policies.max_queues == 0 {
            return Err(Error::InvalidArgument(format!(
                "the queue sharder of {path}: max_queues must be at least 1"
            )));
        }
        let cancel = CancelToken::new();
        Ok(QueueSharder {
            inner: Arc::new(Inner {
                client: client.clone(),
                checking: client.with_cancel(Some(&cancel)),
                cancel,
                allocate: Box::new(allocate),
                path: path.to_owned(),
                policies,
                queues: Mutex::default(),
                preferred: Mutex::default(),
                latch: LeaderLatch::new(client, leader_path)?,
                state: AtomicU8::new(LATENT),
                signal: Signal::default(),
                worker: Mutex::new(None),
            }),
        })
    }

    /// Takes on the shards there are (making one if there is none), joins
    /// the leader election and starts checking sizes. Starting twice is an
    /// error.
    pub fn start(&self) -> Result<()> {
        let inner = &self.inner;
        if inner
            .state
            .compare_exchange(LATENT, STARTED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(Error::IllegalState(format!(
                "the queue sharder of {} was started already",
                inner.path
            )));
        }
        match inner
            .client
            .create()
            .creating_parent_containers_if_needed()
            .mode(CreateMode::Container)
            .for_path(&inner.path, &[])
        {
            Err(e) if !e.is(ErrorCode::NodeExists) => return Err(e),
            _ => {}
        }
        let children = inner.client.get_children(&inner.path)?;
        for child in &children {
            inner.add_if_needed(Some(format!("{}/{child}", inner.path)))?;
        }
        if children.is_empty() {
            inner.add_if_needed(None)?;
        }
        inner.latch.start()?;
        let weak = Arc::downgrade(inner);
        let thread = std::thread::Builder::new()
            .name("latchkey-queue-sharder".into())
            .spawn(move || loop {
                let Some(inner) = weak.upgrade() else { return };
                let epoch = inner.signal.epoch();
                if inner.state.load(Ordering::Acquire) != STARTED {
                    return;
                }
                // Sleeps (woken by close), then checks.
                let next = Instant::now().checked_add(inner.policies.threshold_check);
                inner.signal.wait(epoch, next);
                if inner.state.load(Ordering::Acquire) != STARTED {
                    return;
                }
                match inner.check_threshold() {
                    Err(_) if inner.state.load(Ordering::Acquire) != STARTED => return,
                    Err(e) => log::warn!("the queue sharder of {}: {e}", inner.path),
                    Ok(()) => {}
                }
            })?;
        *inner.worker.lock() = Some(thread);
        Ok(())
    }

    /// A shard to put to: one holding half the threshold or less if there
    /// is any, else any; chosen at random.
    pub fn queue(&self) -> Result<Arc<Q>> {
        let inner = &self.inner;
        if inner.state.load(Ordering::Acquire) != STARTED {
            return Err(Error::IllegalState(format!(
                "the queue sharder of {} is not started",
                inner.path
            )));
        }
        let queues = inner.queues.lock();
        let preferred: Vec<String> = inner
            .preferred
            .lock()
            .iter()
            .filter(|p| queues.contains_key(*p))
            .cloned()
            .collect();
        let pick = if preferred.is_empty() {
            let keys: Vec<&String> = queues.keys().collect();
            keys.get(random_below(keys.len())).map(|k| (*k).clone())
        } else {
            Some(preferred[random_below(preferred.len())].clone())
        };
        pick.and_then(|k| queues.get(&k).cloned()).ok_or_else(|| {
            Error::IllegalState(format!("the queue sharder of {} has no queue", inner.path))
        })
    }

    /// How many shards this sharder holds (Curator's `getShardQty`).
    pub fn shard_qty(&self) -> usize {
        self.inner.queues.lock().len()
    }

    /// The shards' paths (Curator's `getQueuePaths`).
    pub fn queue_paths(&self) -> Vec<String> {
        self.inner.queues.lock().keys().cloned().collect()
    }

    /// Stops checking, leaves the election and closes every shard.
    /// Idempotent; dropping the sharder does the same.
    pub fn close(&self) {
        let inner = &self.inner;
        if inner.state.swap(CLOSED, Ordering::AcqRel) != STARTED {
            return;
        }
        // A check under way ends at once.
        inner.cancel.cancel();
        inner.signal.notify();
        if let Some(worker) = inner.worker.lock().take() {
            if worker.thread().id() != std::thread::current().id() {
                let _ = worker.join();
            }
        }
        let _ = inner.latch.close();
        for queue in std::mem::take(&mut *inner.queues.lock()).into_values() {
            queue.close();
        }
    }
}

impl<Q: ShardQueue> Drop for QueueSharder<Q> {
    fn drop(&mut self) {
        self.close();
    }
}

impl<Q: ShardQueue> std::fmt::Debug for QueueSharder<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSharder")
            .field("path", &self.inner.path)
            .field("shards", &self.queue_paths())
            .finish()
    }
}

impl<Q: ShardQueue> Inner<Q> {
    /// Takes on the shard at `path` (a new one if `None`), unless held.
    fn add_if_needed(&self, path: Option<String>) -> Result<()> {
        let path = path.unwrap_or_else(|| format!("{}/{QUEUE_ITEM_PREFIX}{}", self.path, uuid()));
        if self.queues.lock().contains_key(&path) {
            return Ok(());
        }
        let queue = (self.allocate)(&self.client, &path)?;
        queue.start()?;
        let mut queues = self.queues.lock();
        if queues.contains_key(&path) || self.state.load(Ordering::Acquire) != STARTED {
            drop(queues);
            queue.close();
            return Ok(());
        }
        queues.insert(path.clone(), Arc::new(queue));
        self.preferred.lock().insert(path);
        Ok(())
    }

    /// Curator's `checkThreshold`.
    fn check_threshold(&self) -> Result<()> {
        let threshold = self.policies.new_queue_threshold;
        let mut over = None;
        for child in self.checking.get_children(&self.path)? {
            if self.state.load(Ordering::Acquire) != STARTED {
                return Ok(());
            }
            let path = format!("{}/{child}", self.path);
            self.add_if_needed(Some(path.clone()))?;
            let Some(stat) = self.checking.exists(&path)? else {
                continue;
            };
            let items = usize::try_from(stat.num_children).unwrap_or(0);
            if items >= threshold {
                over = Some(items);
                self.preferred.lock().remove(&path);
            } else if items <= threshold / 2 {
                self.preferred.lock().insert(path);
            }
        }
        if let Some(items) = over {
            if self.latch.has_leadership() {
                if self.queues.lock().len() < self.policies.max_queues {
                    log::info!(
                        "the queue sharder of {}: adding a queue ({items} items, threshold {threshold})",
                        self.path
                    );
                    self.add_if_needed(None)?;
                } else {
                    log::warn!(
                        "the queue sharder of {}: {} queues, the most allowed",
                        self.path,
                        self.policies.max_queues
                    );
                }
            }
        }
        Ok(())
    }
}

/// 128 bits that no other process picks, as a UUID's text (a shard's name
/// only needs to be unique, as Curator's random UUID is).
fn uuid() -> String {
    let a = random_u64();
    let b = random_u64();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        (b >> 48) & 0x3fff | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// A random number from the standard library's per-process random keys,
/// the time and a counter.
fn random_u64() -> u64 {
    use std::sync::atomic::AtomicU64;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// A random index below `n` (0 if `n` is 0).
fn random_below(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        (random_u64() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_look_like_uuids_and_differ() {
        let (a, b) = (uuid(), uuid());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(a.matches('-').count(), 4);
        assert!((0..100).all(|_| random_below(3) < 3));
        assert_eq!(random_below(0), 0);
    }
}

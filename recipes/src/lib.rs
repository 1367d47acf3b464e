//! # latchkey-recipes
//!
//! Distributed locks and semaphores on ZooKeeper, built like Apache
//! Curator's and named like them on the wire, so that Rust and Java
//! processes can queue for the same lock.
//!
//! | recipe | Curator |
//! |---|---|
//! | [`InterProcessMutex`] | `InterProcessMutex` |
//! | [`InterProcessReadWriteLock`] | `InterProcessReadWriteLock` |
//! | [`InterProcessSemaphoreV2`] | `InterProcessSemaphoreV2` |
//! | [`InterProcessSemaphoreMutex`] | `InterProcessSemaphoreMutex` |
//! | [`InterProcessMultiLock`] | `InterProcessMultiLock` |
//! | [`SharedCount`] | `SharedCount` |
//! | [`SharedValue`] | `SharedValue` |
//! | [`PersistentWatcher`] | `PersistentWatcher` |
//! | [`PersistentTtlNode`] | `PersistentTtlNode` |
//! | [`LeaderLatch`] | `LeaderLatch` |
//! | [`LeaderSelector`] | `LeaderSelector` |
//! | [`DistributedAtomicLong`], [`DistributedAtomicInteger`], [`DistributedAtomicValue`] | `DistributedAtomicLong`, `DistributedAtomicInteger`, `DistributedAtomicValue` |
//! | [`DistributedBarrier`], [`DistributedDoubleBarrier`] | `DistributedBarrier`, `DistributedDoubleBarrier` |
//! | [`PathChildrenCache`] | `PathChildrenCache` (deprecated in Curator 5) |
//! | [`TreeCache`] | `TreeCache` (deprecated in Curator 5) |
//! | [`SimpleDistributedQueue`] | `SimpleDistributedQueue` |
//! | [`DistributedQueue`], [`DistributedPriorityQueue`], [`DistributedDelayQueue`], [`DistributedIdQueue`] (built by [`QueueBuilder`]) | `DistributedQueue`, `DistributedPriorityQueue`, `DistributedDelayQueue`, `DistributedIdQueue` (`QueueBuilder`) |
//! | [`QueueSharder`] | `QueueSharder` |
//!
//! A semaphore's maximum may follow a [`SharedCount`]
//! ([`InterProcessSemaphoreV2::with_shared_count`]).
//!
//! Every waiter watches exactly one node (no herd effect) and re-checks on
//! every connection-state change. A lock held when the session is lost
//! reports it (`is_lost`), and its release still succeeds.
//!
//! ## Holding a lock safely
//!
//! ZooKeeper can only tell a holder that its hold is *in doubt*: while the
//! connection is `Suspended` the session may be expiring, and once it has
//! expired (`Lost`) another process may hold the lock. Following Curator,
//! treat a suspended lock as not held until `Reconnected`:
//!
//! - check `is_in_doubt()` (on the guard or lease) right before each step
//!   that needs exclusion, such as each write to what the lock protects;
//! - between steps, or in a `select!` beside your own channels, watch
//!   `events()`: [`HoldEvent::InDoubt`] means pause, [`HoldEvent::Restored`]
//!   means go on, [`HoldEvent::Lost`] means stop, drop the guard and
//!   acquire again;
//! - where a write can still race a new holder (a step already under way
//!   when the connection went), pass the guard's fencing token to the
//!   resource and let it refuse older tokens.
//!
//! A worker that does its work in steps, each step waiting on something
//! (here a timer standing in for the work), selects over the hold's
//! `events()` so it stops as soon as the hold is in doubt, and takes the
//! lock again after a loss. Only the hold's own thread watches it; no
//! other thread or callback is needed. The `job_runner` example runs this
//! pattern across processes while one of them is cut off from ZooKeeper
//! and then ZooKeeper is stopped, each for longer than the session timeout.
//!
//! ```no_run
//! # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
//! use std::time::Duration;
//! use latchkey_recipes::{select, HoldEvent, InterProcessMutex};
//!
//! # fn write_step(_step: u32, _token: i64) {}
//! let mutex = InterProcessMutex::new(client, "/locks/job-7")?;
//! let mut next_step = 0;
//! 'acquire: while next_step < 10 {
//!     let guard = mutex.lock()?;
//!     let standing = guard.events();
//!     while next_step < 10 {
//!         // The step's work, as long as the hold stays good.
//!         select! {
//!             recv(standing) -> event => match event {
//!                 Ok(HoldEvent::InDoubt) => {
//!                     // Pause: wait for Restored (go on) or Lost (start over).
//!                     loop {
//!                         match standing.recv() {
//!                             Ok(HoldEvent::Restored) => break,
//!                             Ok(HoldEvent::Lost) | Err(_) => continue 'acquire,
//!                             Ok(_) => {} // still in doubt
//!                         }
//!                     }
//!                     continue; // redo the step from its start
//!                 }
//!                 Ok(HoldEvent::Restored) => continue,
//!                 Ok(HoldEvent::Lost) | Err(_) => continue 'acquire, // drops the guard
//!                 Ok(_) => continue, // the enum is non-exhaustive
//!             },
//!             default(Duration::from_millis(100)) => {}
//!         }
//!         // Right before the write that needs exclusion:
//!         if guard.is_in_doubt() {
//!             continue;
//!         }
//!         write_step(next_step, guard.fencing_token());
//!         next_step += 1;
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Work that may not be redone after a loss keeps its progress where the
//! next holder finds it (the example keeps it in a file that only the
//! holder writes).
//!
//! A blocked acquire can be ended from another thread with a
//! [`CancelToken`].
//!
//! ## Sharing a recipe between threads
//!
//! Curator's recipe objects are shared between threads; so are these.
//! Every recipe handle is `Send + Sync` (checked when this crate
//! compiles): share one by reference within [`std::thread::scope`], or
//! put it in an [`Arc`](std::sync::Arc) for threads of their own. Each
//! method takes `&self`.
//!
//! ```no_run
//! # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
//! use std::sync::Arc;
//! use latchkey_recipes::LeaderLatch;
//!
//! let latch = Arc::new(LeaderLatch::new(client, "/services/scheduler/latch")?);
//! latch.start()?;
//! let watcher = {
//!     let latch = Arc::clone(&latch);
//!     std::thread::spawn(move || latch.has_leadership())
//! };
//! let _leads = watcher.join();
//! latch.close()?; // closes it for every thread that shares it
//! # Ok(()) }
//! ```
//!
//! Some handles are also `Clone`, where a clone is cheap and plainly the
//! same recipe: [`InterProcessMutex`], [`InterProcessReadWriteLock`],
//! [`InterProcessSemaphoreMutex`] and [`InterProcessSemaphoreV2`] (clones
//! share one lock object: a lock taken through one is held by all, and a
//! reentrant lock counts per thread across them), [`SharedCount`] (one
//! cache and watch, stopped by `close` or when the last clone goes),
//! [`DistributedAtomic`] and [`DistributedBarrier`] (a path and a client;
//! nothing else to share).
//!
//! The others are not `Clone`, on purpose; share them with an `Arc`:
//!
//! - a recipe that runs until closed and closes when dropped
//!   ([`LeaderLatch`], [`LeaderSelector`], [`NodeCache`], [`CuratorCache`],
//!   [`PersistentNode`], [`GroupMember`]): should dropping one clone close
//!   it for all, or only the last? An `Arc` makes the answer plain (the
//!   last `Arc`, or an explicit `close`);
//! - a recipe that is one participant ([`DistributedDoubleBarrier`]: one
//!   member node) or holds other handles ([`InterProcessMultiLock`]);
//! - a hold or a term ([`Lease`], [`Leadership`], the guards): one owner
//!   releases it. [`MutexGuard`], [`ReadGuard`], [`WriteGuard`] and
//!   [`MultiLockGuard`] are not even `Send`, as their locks count holds per
//!   thread; a [`Lease`] and a [`SemaphoreMutexGuard`] may move to, and be
//!   released on, another thread.
//!
//! ## Observability
//!
//! [`lock_metrics`] returns this process's lock and lease waits (started,
//! acquired, timed out, cancelled, failed), the holds now and the time
//! waited. The optional `tracing` feature (off by default; without it no
//! `tracing` code is compiled in) adds an info span `lock_wait` per wait
//! (`recipe`, `path`, `waited_ms`, `outcome`, `error`), around the
//! framework's `operation` spans of its requests.

// Support shared by several families.
mod armed;
mod cancel;
mod fence;
mod hold;
mod keeper;
#[doc(hidden)]
pub mod model_support;

// The recipes, one folder per family as Curator's packages.
mod atomic;
mod barriers;
mod cache;
mod leader;
mod locks;
mod nodes;
mod queue;
mod shared;
mod watch;

/// The channel receiver that `events()` and `listen()` return
/// (re-exported from `crossbeam-channel`, so it can be named and used in
/// `select!` without depending on that crate directly).
pub use crossbeam_channel::Receiver;

/// `crossbeam-channel`'s `select!`, to wait on a hold's `events()` beside
/// other channels or a timeout (see "Holding a lock safely" above).
pub use crossbeam_channel::select;

pub use atomic::distributed_atomic::{
    AtomicData, AtomicNumber, AtomicStats, AtomicValue, DistributedAtomic,
    DistributedAtomicInteger, DistributedAtomicLong, DistributedAtomicValue, PromotedToLock,
};
pub use barriers::barrier::{DistributedBarrier, DistributedDoubleBarrier, READY_NODE};
pub use cache::classic::TreeCacheSelector;
pub use cache::curator_cache::{CacheEvent, CuratorCache, CuratorCacheBuilder};
pub use cache::node_cache::{ChildData, NodeCache};
pub use cache::path_children_cache::{
    PathChildrenCache, PathChildrenCacheEvent, PathChildrenCacheStartMode,
};
pub use cache::tree_cache::{TreeCache, TreeCacheBuilder, TreeCacheEvent};
pub use cancel::CancelToken;
pub use fence::{Fence, Fenced};
pub use hold::HoldEvent;
pub use leader::leader_latch::{CloseMode, LatchEvent, LatchState, LeaderLatch, LATCH_NAME};
pub use leader::leader_selector::{LeaderSelector, Leadership};
pub use leader::participant::{leader_of, Participant};
pub use locks::lock_internals::{
    sort_key, Decision, LockDriver, LockInternals, LockNode, StandardDriver, REQUEST_GRACE,
};
pub use locks::metrics::{lock_metrics, LockMetrics};
pub use locks::multi_lock::{InterProcessLock, InterProcessMultiLock, MultiLockGuard};
pub use locks::mutex::{InterProcessMutex, MutexGuard, LOCK_NAME};
pub use locks::revoke::{Revoker, REVOKE_MESSAGE};
pub use locks::rwlock::{
    InterProcessReadWriteLock, ReadGuard, WriteGuard, READ_LOCK_NAME, WRITE_LOCK_NAME,
};
pub use locks::semaphore::{
    InterProcessSemaphoreMutex, InterProcessSemaphoreV2, Lease, LeaseReturnError,
    SemaphoreMutexGuard, LEASE_NAME,
};
pub use nodes::persistent_node::{GroupMember, PersistentNode};
pub use nodes::persistent_ttl_node::{PersistentTtlNode, PersistentTtlNodeBuilder};
pub use shared::shared_count::SharedCount;
pub use shared::shared_value::{SharedValue, SharedValueEvent, VersionedValue};
pub use watch::persistent_watcher::{PersistentWatcher, WatchReset};

pub use queue::builder::{ConsumeResult, ErrorMode, QueueBuilder};
pub use queue::distributed::DistributedQueue;
pub use queue::names::{sort as sort_queue_items, Kind as QueueKind, QUEUE_ITEM_PREFIX};
pub use queue::serializer::{
    BytesSerializer, ItemSerializer, QueueError, QueueSerializer, StringSerializer,
};
pub use queue::sharder::{QueueSharder, QueueSharderPolicies, ShardQueue};
pub use queue::simple::{SimpleDistributedQueue, SIMPLE_QUEUE_PREFIX};
pub use queue::variants::{DistributedDelayQueue, DistributedIdQueue, DistributedPriorityQueue};

// Every recipe handle can be shared between threads, and the cheap ones
// cloned (see "Sharing a recipe between threads"): a change that breaks
// either fails the build here.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    const fn cloned<T: Clone + Send + Sync>() {}
    cloned::<DistributedAtomicLong>();
    cloned::<DistributedAtomicInteger>();
    cloned::<DistributedBarrier>();
    cloned::<InterProcessMutex>();
    cloned::<InterProcessReadWriteLock>();
    cloned::<InterProcessSemaphoreMutex>();
    cloned::<InterProcessSemaphoreV2>();
    cloned::<SharedCount>();
    cloned::<CancelToken>();
    shared::<CuratorCache>();
    shared::<DistributedDoubleBarrier>();
    shared::<GroupMember>();
    shared::<InterProcessMultiLock>();
    shared::<LeaderLatch>();
    shared::<LeaderSelector>();
    shared::<Leadership>();
    shared::<Lease>();
    shared::<LockInternals>();
    shared::<NodeCache>();
    shared::<PersistentNode>();
    shared::<SemaphoreMutexGuard<'static>>();
};

/// This crate's README (its page on crates.io): its Rust examples are
/// compiled by `cargo test --doc -p latchkey-recipes`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

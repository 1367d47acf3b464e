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
//!
//! A semaphore's maximum may follow a [`SharedCount`]
//! ([`InterProcessSemaphoreV2::with_shared_count`]).
//!
//! Every waiter watches exactly one node (no herd effect) and re-checks on
//! every connection-state change. A lock held when the session is lost
//! reports it (`is_lost`), and its release still succeeds.

mod cancel;
mod lock_internals;
mod multi_lock;
mod mutex;
mod revoke;
mod rwlock;
mod semaphore;
mod shared_count;

pub use cancel::CancelToken;
pub use lock_internals::{Decision, LockDriver, LockInternals, LockNode, StandardDriver};
pub use multi_lock::{InterProcessLock, InterProcessMultiLock, MultiLockGuard};
pub use mutex::{InterProcessMutex, MutexGuard, LOCK_NAME};
pub use revoke::{Revoker, REVOKE_MESSAGE};
pub use rwlock::{InterProcessReadWriteLock, READ_LOCK_NAME, WRITE_LOCK_NAME};
pub use semaphore::{
    InterProcessSemaphoreMutex, InterProcessSemaphoreV2, Lease, LeaseReturnError,
    SemaphoreMutexGuard, LEASE_NAME,
};
pub use shared_count::{SharedCount, VersionedValue};

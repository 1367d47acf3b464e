//! The lock family (Curator's `org.apache.curator.framework.recipes.locks`):
//! [`LockInternals`](crate::LockInternals), the queue of ephemeral
//! sequential nodes every lock stands on, and the locks built on it
//! ([`InterProcessMutex`](crate::InterProcessMutex),
//! [`InterProcessReadWriteLock`](crate::InterProcessReadWriteLock),
//! [`InterProcessSemaphoreV2`](crate::InterProcessSemaphoreV2),
//! [`InterProcessSemaphoreMutex`](crate::InterProcessSemaphoreMutex),
//! [`InterProcessMultiLock`](crate::InterProcessMultiLock)), revocation
//! and the process's lock metrics.

pub(crate) mod lock_internals;
pub(crate) mod metrics;
pub(crate) mod multi_lock;
pub(crate) mod mutex;
pub(crate) mod revoke;
pub(crate) mod rwlock;
pub(crate) mod semaphore;

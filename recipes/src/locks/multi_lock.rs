//! `InterProcessMultiLock`: several locks taken as one, all or none.

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use latchkey_framework::{Client, Error, Result};

use crate::cancel::CancelToken;
use crate::locks::lock_internals::deadline_after;
use crate::locks::mutex::InterProcessMutex;

/// What a lock offers so that [`InterProcessMultiLock`] can combine it
/// (Curator's `InterProcessLock`).
pub trait InterProcessLock: Send + Sync {
    /// Waits as long as it takes.
    fn acquire(&self) -> Result<()>;
    /// Waits at most `timeout`; `Ok(false)` if not taken.
    fn acquire_timeout(&self, timeout: Duration) -> Result<bool>;
    /// Releases one hold.
    fn release(&self) -> Result<()>;
    /// Releases one hold within a call that must end by `deadline`
    /// (`None`: as [`release`](Self::release)): what ZooKeeper has not
    /// confirmed by then is left to the client's background, which retries
    /// until the node is gone. [`InterProcessMultiLock`] rolls back with
    /// it, so that a timed acquire keeps its deadline. This default
    /// ignores `deadline` and calls [`release`](Self::release).
    fn release_by(&self, deadline: Option<Instant>) -> Result<()> {
        let _ = deadline;
        self.release()
    }
    /// Whether this process holds it.
    fn is_acquired_in_this_process(&self) -> bool;
    /// Like [`acquire_timeout`](Self::acquire_timeout) (`Duration::MAX`
    /// waits as long as it takes), failing with [`Error::Cancelled`] once
    /// `cancel` is cancelled. This default checks the token only before
    /// waiting; the locks of this crate also end the wait itself.
    fn acquire_cancellable(&self, timeout: Duration, cancel: &CancelToken) -> Result<bool> {
        if cancel.is_cancelled() {
            return Err(Error::Cancelled);
        }
        self.acquire_timeout(timeout)
    }
}

impl InterProcessLock for InterProcessMutex {
    fn acquire(&self) -> Result<()> {
        InterProcessMutex::acquire(self)
    }
    fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        InterProcessMutex::acquire_timeout(self, timeout)
    }
    fn release(&self) -> Result<()> {
        InterProcessMutex::release(self)
    }
    fn release_by(&self, deadline: Option<Instant>) -> Result<()> {
        InterProcessMutex::release_by(self, deadline)
    }
    fn is_acquired_in_this_process(&self) -> bool {
        InterProcessMutex::is_acquired_in_this_process(self)
    }
    fn acquire_cancellable(&self, timeout: Duration, cancel: &CancelToken) -> Result<bool> {
        InterProcessMutex::acquire_cancellable(self, timeout, cancel)
    }
}

/// Takes every lock in order, or none: on a failure or timeout the locks
/// already taken are released in reverse order.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::InterProcessMultiLock;
///
/// let both = InterProcessMultiLock::from_paths(client, &["/locks/a", "/locks/b"])?;
/// both.acquire()?;
/// // ... holds /locks/a and /locks/b ...
/// both.release()?;
/// # Ok(()) }
/// ```
///
/// It writes only through its locks, as each of them writes (for
/// [`InterProcessMutex`]: protected creates, found again after a lost
/// reply). A rollback releases with [`InterProcessLock::release_by`], so a
/// timed acquire keeps its deadline and what ZooKeeper has not confirmed is
/// left to the client's background. There is no `close`: a
/// [`MultiLockGuard`] releases when dropped; dropping the multi-lock while
/// it holds its locks through [`acquire`](Self::acquire) releases nothing,
/// and the locks' nodes stay until their session ends.
pub struct InterProcessMultiLock {
    locks: Vec<Box<dyn InterProcessLock>>,
}

impl std::fmt::Debug for InterProcessMultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InterProcessMultiLock({} locks)", self.locks.len())
    }
}

impl InterProcessMultiLock {
    /// Combines `locks`, taken in the given order.
    pub fn new(locks: Vec<Box<dyn InterProcessLock>>) -> Result<Self> {
        if locks.is_empty() {
            return Err(Error::InvalidArgument(
                "a multi-lock needs at least one lock".into(),
            ));
        }
        Ok(InterProcessMultiLock { locks })
    }

    /// One [`InterProcessMutex`] per path. A path given twice is refused:
    /// its second mutex would wait for the first forever.
    pub fn from_paths(client: &Client, paths: &[&str]) -> Result<Self> {
        for (i, p) in paths.iter().enumerate() {
            if paths[..i].contains(p) {
                return Err(Error::InvalidArgument(format!(
                    "multi-lock path {p} is given twice"
                )));
            }
        }
        let locks = paths
            .iter()
            .map(|p| {
                InterProcessMutex::new(client, p).map(|m| Box::new(m) as Box<dyn InterProcessLock>)
            })
            .collect::<Result<Vec<_>>>()?;
        Self::new(locks)
    }

    /// Takes every lock, waiting as long as it takes.
    pub fn acquire(&self) -> Result<()> {
        self.acquire_until(None, None).map(|_| ())
    }

    /// Takes every lock within `timeout` in all, or none of them.
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        self.acquire_until(deadline_after(timeout), None)
    }

    /// Like [`acquire_timeout`](Self::acquire_timeout) (`Duration::MAX`
    /// waits as long as it takes), failing with [`Error::Cancelled`] as soon
    /// as `cancel` is cancelled; the locks already taken are released (see
    /// [`CancelToken`]).
    pub fn acquire_cancellable(&self, timeout: Duration, cancel: &CancelToken) -> Result<bool> {
        self.acquire_until(deadline_after(timeout), Some(cancel))
    }

    fn acquire_until(
        &self,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
    ) -> Result<bool> {
        for (taken, lock) in self.locks.iter().enumerate() {
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let outcome = match (remaining, cancel) {
                (None, None) => lock.acquire().map(|_| true),
                (Some(left), None) => lock.acquire_timeout(left),
                (left, Some(cancel)) => {
                    lock.acquire_cancellable(left.unwrap_or(Duration::MAX), cancel)
                }
            };
            if !matches!(outcome, Ok(true)) {
                // The roll-back keeps the call's deadline, but no sooner
                // than REQUEST_GRACE from now, as a timed call's requests
                // do (a request past its deadline is not sent at all); a
                // cancelled call returns at once, leaving the deletes to
                // the background.
                let by = match outcome {
                    Err(Error::Cancelled) => Some(Instant::now()),
                    _ => deadline.map(|d| d.max(Instant::now() + crate::REQUEST_GRACE)),
                };
                for held in self.locks[..taken].iter().rev() {
                    if let Err(e) = held.release_by(by) {
                        log::warn!("rolling back a multi-lock: {e}");
                    }
                }
                return outcome;
            }
        }
        Ok(true)
    }

    /// Takes every lock and returns a guard that releases them all when
    /// dropped (on the thread that took them, as the mutexes need).
    pub fn lock(&self) -> Result<MultiLockGuard<'_>> {
        self.acquire()?;
        Ok(self.guard())
    }

    /// Like [`lock`](Self::lock), within `timeout` in all; `None` (and no
    /// lock held) if not all were taken.
    pub fn try_lock_for(&self, timeout: Duration) -> Result<Option<MultiLockGuard<'_>>> {
        Ok(self.acquire_timeout(timeout)?.then(|| self.guard()))
    }

    /// Takes every lock only if none needs waiting.
    pub fn try_lock(&self) -> Result<Option<MultiLockGuard<'_>>> {
        self.try_lock_for(Duration::ZERO)
    }

    fn guard(&self) -> MultiLockGuard<'_> {
        MultiLockGuard {
            locks: self,
            _not_send: PhantomData,
        }
    }

    /// Releases every lock in reverse order, trying each even when one
    /// fails; returns the first error.
    pub fn release(&self) -> Result<()> {
        self.release_by(None)
    }

    /// Like [`release`](Self::release) within a call that must end by
    /// `deadline` (see [`InterProcessLock::release_by`]).
    pub fn release_by(&self, deadline: Option<Instant>) -> Result<()> {
        let mut first_error = None;
        for lock in self.locks.iter().rev() {
            if let Err(e) = lock.release_by(deadline) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Whether every lock is held by this process.
    pub fn is_acquired_in_this_process(&self) -> bool {
        self.locks.iter().all(|l| l.is_acquired_in_this_process())
    }
}

impl InterProcessLock for InterProcessMultiLock {
    fn acquire(&self) -> Result<()> {
        InterProcessMultiLock::acquire(self)
    }
    fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        InterProcessMultiLock::acquire_timeout(self, timeout)
    }
    fn release(&self) -> Result<()> {
        InterProcessMultiLock::release(self)
    }
    fn release_by(&self, deadline: Option<Instant>) -> Result<()> {
        InterProcessMultiLock::release_by(self, deadline)
    }
    fn is_acquired_in_this_process(&self) -> bool {
        InterProcessMultiLock::is_acquired_in_this_process(self)
    }
    fn acquire_cancellable(&self, timeout: Duration, cancel: &CancelToken) -> Result<bool> {
        InterProcessMultiLock::acquire_cancellable(self, timeout, cancel)
    }
}

/// Holds every lock of an [`InterProcessMultiLock`] until dropped. Not
/// `Send`: a mutex is released by the thread that took it.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::InterProcessMultiLock;
/// let both = InterProcessMultiLock::from_paths(client, &["/locks/a", "/locks/b"])?;
/// {
///     let _guard = both.lock()?;
///     // ... holds /locks/a and /locks/b ...
/// } // both released here
/// # Ok(()) }
/// ```
#[must_use = "the locks are released as soon as the guard is dropped"]
pub struct MultiLockGuard<'a> {
    locks: &'a InterProcessMultiLock,
    _not_send: PhantomData<*const ()>,
}

impl Drop for MultiLockGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.locks.release() {
            log::error!("releasing a multi-lock failed: {e}");
        }
    }
}

impl std::fmt::Debug for MultiLockGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("locks", &self.locks.locks.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A lock of the caller's own that keeps the trait's defaults
    /// (`release_by`, `acquire_cancellable`), as a user's lock would.
    #[derive(Clone, Default)]
    struct Local {
        held: Arc<AtomicBool>,
        acquires: Arc<AtomicUsize>,
        grant: Arc<AtomicBool>,
    }

    impl InterProcessLock for Local {
        fn acquire(&self) -> Result<()> {
            self.acquire_timeout(Duration::MAX).map(|_| ())
        }
        fn acquire_timeout(&self, _: Duration) -> Result<bool> {
            self.acquires.fetch_add(1, Ordering::SeqCst);
            let granted =
                self.grant.load(Ordering::SeqCst) && !self.held.swap(true, Ordering::SeqCst);
            Ok(granted)
        }
        fn release(&self) -> Result<()> {
            self.held.store(false, Ordering::SeqCst);
            Ok(())
        }
        fn is_acquired_in_this_process(&self) -> bool {
            self.held.load(Ordering::SeqCst)
        }
    }

    fn local(grant: bool) -> Local {
        let l = Local::default();
        l.grant.store(grant, Ordering::SeqCst);
        l
    }

    #[test]
    fn a_failed_acquire_rolls_back_a_custom_lock_through_the_default_release_by() {
        let (first, second) = (local(true), local(false));
        let multi =
            InterProcessMultiLock::new(vec![Box::new(first.clone()), Box::new(second.clone())])
                .unwrap();
        assert_eq!(format!("{multi:?}"), "InterProcessMultiLock(2 locks)");
        assert!(!multi.acquire_timeout(Duration::from_millis(10)).unwrap());
        assert!(
            !first.is_acquired_in_this_process(),
            "the first lock was kept"
        );
        assert_eq!(second.acquires.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn try_lock_takes_free_locks_and_the_guard_gives_them_back() {
        let (a, b) = (local(true), local(true));
        let multi =
            InterProcessMultiLock::new(vec![Box::new(a.clone()), Box::new(b.clone())]).unwrap();
        let guard = multi.try_lock().unwrap().expect("both locks are free");
        assert_eq!(format!("{guard:?}"), "MultiLockGuard { locks: 2 }");
        assert!(multi.is_acquired_in_this_process());
        drop(guard);
        assert!(!a.is_acquired_in_this_process() && !b.is_acquired_in_this_process());
        // One lock taken elsewhere: nothing is kept.
        b.held.store(true, Ordering::SeqCst);
        assert!(multi.try_lock().unwrap().is_none());
        assert!(!a.is_acquired_in_this_process());
    }

    #[test]
    fn the_default_acquire_cancellable_checks_the_token_first() {
        let lock = local(true);
        let multi = InterProcessMultiLock::new(vec![Box::new(lock.clone())]).unwrap();
        let cancel = CancelToken::new();
        cancel.cancel();
        assert!(matches!(
            multi.acquire_cancellable(Duration::from_secs(1), &cancel),
            Err(Error::Cancelled)
        ));
        assert_eq!(
            lock.acquires.load(Ordering::SeqCst),
            0,
            "waited though cancelled"
        );
        let fresh = CancelToken::new();
        assert!(multi
            .acquire_cancellable(Duration::from_secs(1), &fresh)
            .unwrap());
        assert!(lock.is_acquired_in_this_process());
        multi.release().unwrap();
        assert!(!lock.is_acquired_in_this_process());
    }
}

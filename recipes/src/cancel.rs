//! Cancelling a blocked acquire from another thread (what Curator does with
//! `Thread.interrupt`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use latchkey_framework::{Error, Result};
use parking_lot::Mutex;

use crate::lock_internals::Signal;

/// Cancels the acquires it is passed to, from any thread: a waiting acquire
/// returns [`Error::Cancelled`] at once and removes its node; a later
/// acquire with the same token fails the same way without creating one.
/// Cancelling is for good; use a new token for new calls. Clones share the
/// token.
///
/// A request to ZooKeeper that is already under way finishes first (on a
/// broken connection, within the retry policy), then the call sees the
/// cancellation; the wait in the queue itself ends at once.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_framework::Error;
/// use latchkey_recipes::{CancelToken, InterProcessMutex};
///
/// let mutex = InterProcessMutex::new(client, "/locks/orders")?;
/// let cancel = CancelToken::new();
/// let stop = cancel.clone();
/// std::thread::scope(|s| {
///     let worker = s.spawn(|| match mutex.acquire_cancellable(Duration::MAX, &cancel) {
///         Ok(true) => mutex.release(),
///         Ok(false) => Ok(()), // not within the timeout
///         Err(Error::Cancelled) => Ok(()), // shutting down: no node left
///         Err(e) => Err(e),
///     });
///     stop.cancel(); // e.g. on shutdown
///     worker.join().unwrap()
/// })
/// # }
/// ```
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    /// The waits to wake; dead ones are dropped as new ones come.
    waiters: Mutex<Vec<Weak<Signal>>>,
}

impl CancelToken {
    /// A token not cancelled yet.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels every call using this token, now and later.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::Release);
        let waiters = std::mem::take(&mut *self.inner.waiters.lock());
        for waiter in waiters {
            if let Some(signal) = waiter.upgrade() {
                signal.notify();
            }
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::Acquire)
    }

    /// `Err(Cancelled)` once cancelled.
    pub(crate) fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            return Err(Error::Cancelled);
        }
        Ok(())
    }

    /// Has `signal` woken when the token is cancelled (at once if it is).
    pub(crate) fn wake_on_cancel(&self, signal: &Arc<Signal>) {
        {
            let mut waiters = self.inner.waiters.lock();
            waiters.retain(|w| w.strong_count() > 0);
            waiters.push(Arc::downgrade(signal));
        }
        // A cancel between the push and here took the list before the push,
        // or after: either way the signal is woken.
        if self.is_cancelled() {
            signal.notify();
        }
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// Checks `cancel`, if any.
pub(crate) fn check(cancel: Option<&CancelToken>) -> Result<()> {
    cancel.map_or(Ok(()), CancelToken::check)
}

//! Cancelling blocked calls from another thread (what Curator does with
//! `Thread.interrupt`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// Cancels the calls it is given to, from any thread, for good: a call
/// waiting on ZooKeeper (a reply, a connection, a retry's pause) fails with
/// [`Error::Cancelled`] at once, and a later call with the same token fails
/// the same way before sending anything. Clones share the token.
///
/// A request abandoned this way may still reach the server; ZooKeeper then
/// applies it as usual. The recipes take care of that for their own nodes
/// (an abandoned create is cleaned up in the background); for a plain
/// operation, read the node again if it matters.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) {
/// use latchkey_framework::{CancelToken, Error};
///
/// let cancel = CancelToken::new();
/// let handle = client.with_cancel(Some(&cancel));
/// let stop = cancel.clone();
/// std::thread::scope(|s| {
///     let reader = s.spawn(|| handle.get_data("/config"));
///     stop.cancel(); // e.g. on shutdown
///     match reader.join().unwrap() {
///         Err(Error::Cancelled) => {} // gave up, whatever the network does
///         other => println!("{other:?}"),
///     }
/// });
/// # }
/// ```
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

type Callback = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    next_id: AtomicU64,
    /// What to run on cancel, by registration id.
    callbacks: Mutex<Vec<(u64, Callback)>>,
    /// Wakes pauses taken through [`CancelToken::sleep`].
    pauses: Mutex<()>,
    paused: Condvar,
}

impl CancelToken {
    /// A token not cancelled yet.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels every call using this token, now and later.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::Release);
        let callbacks = std::mem::take(&mut *self.inner.callbacks.lock());
        for (_, callback) in callbacks {
            callback();
        }
        let _pauses = self.inner.pauses.lock();
        self.inner.paused.notify_all();
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::Acquire)
    }

    /// `Err(Cancelled)` once cancelled.
    pub fn check(&self) -> Result<()> {
        match self.is_cancelled() {
            true => Err(Error::Cancelled),
            false => Ok(()),
        }
    }

    /// Runs `wake` once when the token is cancelled (at once, on this
    /// thread, if it is already), unless the returned registration was
    /// dropped first. `wake` runs on the cancelling thread: it must return
    /// at once (typically it notifies a condition variable).
    pub fn on_cancel(&self, wake: impl Fn() + Send + Sync + 'static) -> OnCancel {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let wake: Callback = Arc::new(wake);
        self.inner.callbacks.lock().push((id, Arc::clone(&wake)));
        // A cancel between the push and here either took the list with
        // `wake` in it or ran before the push: `wake` may run twice, never
        // not at all.
        if self.is_cancelled() {
            wake();
        }
        OnCancel {
            token: self.clone(),
            id,
        }
    }

    /// Sleeps for `pause`, or until cancelled; true if the whole pause
    /// passed (for a retry's back-off that a cancel should cut short).
    pub fn sleep(&self, pause: Duration) -> bool {
        let until = crate::deadline::instant_after(pause);
        let mut guard = self.inner.pauses.lock();
        while !self.is_cancelled() {
            if self.inner.paused.wait_until(&mut guard, until).timed_out() {
                return !self.is_cancelled();
            }
        }
        false
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// A callback registered with [`CancelToken::on_cancel`]; dropping it
/// unregisters the callback.
#[must_use = "the callback is unregistered when this is dropped"]
pub struct OnCancel {
    token: CancelToken,
    id: u64,
}

impl Drop for OnCancel {
    fn drop(&mut self) {
        self.token
            .inner
            .callbacks
            .lock()
            .retain(|(id, _)| *id != self.id);
    }
}

impl std::fmt::Debug for OnCancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnCancel").field("id", &self.id).finish()
    }
}

thread_local! {
    /// The token of the operation this thread is running, if any: the
    /// waits deep in the wire client end when it is cancelled, without
    /// every request taking it as an argument.
    static CURRENT: RefCell<Option<CancelToken>> = const { RefCell::new(None) };
}

/// Makes `token` this thread's current token until the returned guard is
/// dropped (then the previous one is current again).
pub(crate) fn enter(token: Option<&CancelToken>) -> Entered {
    let previous = CURRENT.with(|c| c.replace(token.cloned()));
    Entered { previous }
}

/// This thread's current token (see [`enter`]).
pub(crate) fn current() -> Option<CancelToken> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Restores the previous current token on drop.
pub(crate) struct Entered {
    previous: Option<CancelToken>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Waits on `condvar` (with `guard` of its mutex) until `done` or
/// `deadline`, ending early with `Err(Cancelled)` when this thread's
/// current token is cancelled. `notify` must wake `condvar` under its
/// mutex, so that a cancel between the check and the wait is not missed.
pub(crate) fn wait_until<T>(
    condvar: &Condvar,
    guard: &mut parking_lot::MutexGuard<'_, T>,
    deadline: Instant,
    mut done: impl FnMut(&mut T) -> bool,
    notify: impl Fn() + Send + Sync + 'static,
) -> Result<bool> {
    let token = current();
    // Registered with the mutex released: a token cancelled already runs
    // `notify` at once, which takes the mutex.
    let _registered = token
        .as_ref()
        .map(|t| parking_lot::MutexGuard::unlocked(guard, || t.on_cancel(notify)));
    loop {
        if done(guard) {
            return Ok(true);
        }
        if let Some(token) = &token {
            token.check()?;
        }
        if condvar.wait_until(guard, deadline).timed_out() {
            return Ok(done(guard));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_wakes_a_registered_callback_once_and_not_after_drop() {
        let token = CancelToken::new();
        let hits = Arc::new(AtomicU64::new(0));
        let kept = {
            let hits = Arc::clone(&hits);
            token.on_cancel(move || {
                hits.fetch_add(1, Ordering::SeqCst);
            })
        };
        let dropped = {
            let hits = Arc::clone(&hits);
            token.on_cancel(move || {
                hits.fetch_add(100, Ordering::SeqCst);
            })
        };
        drop(dropped);
        token.cancel();
        token.cancel();
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        drop(kept);
        // Registering after the cancel runs the callback at once.
        let late = Arc::clone(&hits);
        let _r = token.on_cancel(move || {
            late.fetch_add(10, Ordering::SeqCst);
        });
        assert_eq!(hits.load(Ordering::SeqCst), 11);
    }

    #[test]
    fn a_sleep_ends_at_the_cancel() {
        let token = CancelToken::new();
        let stop = token.clone();
        let (starting, started) = std::sync::mpsc::channel();
        let (tx, slept) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = starting.send(());
            let _ = tx.send(token.sleep(Duration::MAX));
        });
        started
            .recv_timeout(Duration::from_secs(10))
            .expect("the sleeper started");
        // Gives the sleeper time to be in its wait, so that the cancel has
        // to wake it: cancelled first, the sleep returns at once without
        // the wake-up. Either order is correct; this only makes the wake-up
        // the usual case.
        std::thread::sleep(Duration::from_millis(50));
        stop.cancel();
        // A sleep the cancel does not end fails the test, not hangs it.
        let whole = slept
            .recv_timeout(Duration::from_secs(10))
            .expect("the sleep did not end within 10 s of the cancel");
        assert!(!whole);
        assert!(CancelToken::new().sleep(Duration::from_millis(1)));
    }

    #[test]
    fn entered_tokens_nest() {
        let a = CancelToken::new();
        assert!(current().is_none());
        {
            let _a = enter(Some(&a));
            assert!(current().is_some());
            {
                let _none = enter(None);
                assert!(current().is_none());
            }
            assert!(current().is_some());
        }
        assert!(current().is_none());
    }
}

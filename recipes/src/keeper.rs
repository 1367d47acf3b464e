//! The thread that keeps something current in the background (a cache's
//! copy, a node that must exist): it works on every wake-up (a watch, a
//! state change, a request) and, after a failure, waits a little or for
//! the next wake-up and tries again, until its owner closes or goes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use latchkey_framework::{CancelToken, Client, Error, ListenerHandle, Result};
use parking_lot::Mutex;

use crate::locks::lock_internals::Signal;

/// How long to wait before trying again after a failure.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// What a keeper keeps: the owner's shared state, which holds its
/// [`Keeper`].
pub(crate) trait Kept: Send + Sync + 'static {
    /// The keeper of this state.
    fn keeper(&self) -> &Keeper;
    /// One pass; an error means: try again.
    fn work(&self) -> Result<()>;
    /// What is kept, for messages and the log ("the node cache of /x").
    fn what(&self) -> String;
}

/// A keeper's thread and what stops it.
#[derive(Default)]
pub(crate) struct Keeper {
    closed: AtomicBool,
    /// Ends the owner's requests at once on close (its client handle
    /// carries it).
    cancel: CancelToken,
    /// Wakes the thread: a watch fired, the state changed, or closing.
    signal: Arc<Signal>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl Keeper {
    /// The token the owner's client handle carries.
    pub(crate) fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// What wakes the thread.
    pub(crate) fn signal(&self) -> &Arc<Signal> {
        &self.signal
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Started (its first pass, if any, succeeded) and not closed.
    pub(crate) fn is_running(&self) -> bool {
        !self.is_closed() && self.worker.lock().is_some()
    }

    /// Starts keeping `kept` on the thread `name`, once: every state change
    /// of `client` wakes it. With `first`, that pass runs on the caller's
    /// thread (its error is returned, and nothing is started); without, the
    /// thread works at once.
    pub(crate) fn start<K: Kept>(
        kept: &Arc<K>,
        name: &str,
        client: &Client,
        first: Option<&dyn Fn() -> Result<()>>,
    ) -> Result<()> {
        let keeper = kept.keeper();
        let mut worker = keeper.worker.lock();
        if worker.is_some() || keeper.is_closed() {
            return Err(Error::IllegalState(format!(
                "{} was started already",
                kept.what()
            )));
        }
        let wake = Arc::clone(&keeper.signal);
        // Registered before the first pass, so no state change is missed.
        let waker = client.add_waker(move || wake.notify());
        let epoch = match first {
            Some(first) => {
                let epoch = keeper.signal.epoch();
                first()?;
                epoch
            }
            // An epoch before the current one: the thread works at once.
            None => keeper.signal.epoch().wrapping_sub(1),
        };
        let (weak, signal) = (Arc::downgrade(kept), Arc::clone(&keeper.signal));
        *worker = Some(
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || run(&weak, &signal, waker, epoch))?,
        );
        Ok(())
    }

    /// Stops the thread (waiting for it, unless called on it) and ends the
    /// owner's requests under way; false if it was closed already.
    pub(crate) fn close(&self) -> bool {
        if self.closed.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.cancel.cancel();
        self.signal.notify();
        if let Some(worker) = self.worker.lock().take() {
            if worker.thread().id() != std::thread::current().id() {
                let _ = worker.join();
            }
        }
        true
    }
}

fn run<K: Kept>(weak: &Weak<K>, signal: &Signal, _waker: ListenerHandle, mut epoch: u64) {
    loop {
        signal.wait(epoch, None);
        epoch = signal.epoch();
        let Some(kept) = weak.upgrade() else { return };
        if kept.keeper().is_closed() {
            return;
        }
        if let Err(e) = kept.work() {
            if kept.keeper().is_closed() {
                return;
            }
            log::debug!("{}: {e}; trying again", kept.what());
            drop(kept);
            if !signal.wait(epoch, Some(Instant::now() + RETRY_PAUSE)) {
                // Nothing woke us: try again anyway.
                signal.notify();
            }
        }
    }
}

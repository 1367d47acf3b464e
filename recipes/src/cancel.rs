//! Cancelling a blocked acquire from another thread (what Curator does with
//! `Thread.interrupt`), with the framework's [`CancelToken`]: a waiting
//! acquire returns [`Error::Cancelled`](latchkey_framework::Error::Cancelled)
//! at once and removes its node, even while a request of it waits for
//! ZooKeeper's reply; a later acquire with the same token fails the same way
//! without creating one. Cancelling is for good; use a new token for new
//! calls.
//!
//! ```no_run
//! # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
//! use std::time::Duration;
//! use latchkey_framework::Error;
//! use latchkey_recipes::{CancelToken, InterProcessMutex};
//!
//! let mutex = InterProcessMutex::new(client, "/locks/orders")?;
//! let cancel = CancelToken::new();
//! let stop = cancel.clone();
//! std::thread::scope(|s| {
//!     let worker = s.spawn(|| match mutex.acquire_cancellable(Duration::MAX, &cancel) {
//!         Ok(true) => mutex.release(),
//!         Ok(false) => Ok(()), // not within the timeout
//!         Err(Error::Cancelled) => Ok(()), // shutting down: no node left
//!         Err(e) => Err(e),
//!     });
//!     stop.cancel(); // e.g. on shutdown
//!     worker.join().unwrap()
//! })
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

pub use latchkey_framework::CancelToken;
use latchkey_framework::{OnCancel, Result};

use crate::locks::lock_internals::Signal;

/// Checks `cancel`, if any.
pub(crate) fn check(cancel: Option<&CancelToken>) -> Result<()> {
    cancel.map_or(Ok(()), CancelToken::check)
}

/// Sleeps for `pause` (a retry's back-off), or until `cancel` is
/// cancelled.
pub(crate) fn pause(cancel: Option<&CancelToken>, pause: Duration) {
    match cancel {
        Some(cancel) => {
            cancel.sleep(pause);
        }
        None => std::thread::sleep(pause),
    }
}

/// Has `signal` woken when `cancel` is cancelled (at once if it is), for
/// as long as the returned registration lives.
pub(crate) fn wake_on_cancel(
    cancel: Option<&CancelToken>,
    signal: &Arc<Signal>,
) -> Option<OnCancel> {
    cancel.map(|cancel| {
        let signal = Arc::clone(signal);
        cancel.on_cancel(move || signal.notify())
    })
}

//! Lock waits and holds: process-wide counters ([`lock_metrics`]) and,
//! with the `tracing` feature, a `lock_wait` span per wait.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use latchkey_framework::{Error, Result};

/// Lock and lease waits and holds of every recipe in this process, on
/// every client, since it started; read with [`lock_metrics`].
///
/// A wait is one acquire that queues in ZooKeeper: a mutex's (or a
/// read-write lock side's) `acquire*`, `lock` and `try_lock*` that do not
/// re-enter a hold of the calling thread, and a semaphore's `acquire*` (for
/// one lease or several; the semaphore's internal lock is part of it). It
/// ends acquired, timed out, cancelled or failed. A hold is a lock node or
/// lease acquired and not yet released; a hold lost with its session counts
/// until it is released.
///
/// ```no_run
/// let m = latchkey_recipes::lock_metrics();
/// println!(
///     "lock_waits_total {} lock_wait_timeouts_total {} lock_holds {} lock_wait_seconds_total {}",
///     m.waits_started,
///     m.timed_out,
///     m.holds,
///     m.time_waited.as_secs_f64()
/// );
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockMetrics {
    /// Waits begun.
    pub waits_started: u64,
    /// Waits that ended holding the lock or the leases.
    pub acquired: u64,
    /// Waits that reached their timeout.
    pub timed_out: u64,
    /// Waits ended by a [`CancelToken`](crate::CancelToken).
    pub cancelled: u64,
    /// Waits that ended with any other error.
    pub failed: u64,
    /// Locks and leases held now.
    pub holds: u64,
    /// Time spent in finished waits, all outcomes.
    pub time_waited: Duration,
}

static WAITS_STARTED: AtomicU64 = AtomicU64::new(0);
static ACQUIRED: AtomicU64 = AtomicU64::new(0);
static TIMED_OUT: AtomicU64 = AtomicU64::new(0);
static CANCELLED: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
static HOLDS: AtomicU64 = AtomicU64::new(0);
static WAITED_NANOS: AtomicU64 = AtomicU64::new(0);

/// The lock waits and holds of this process so far (see [`LockMetrics`]).
/// Cheap: a handful of relaxed atomic loads.
pub fn lock_metrics() -> LockMetrics {
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    LockMetrics {
        waits_started: get(&WAITS_STARTED),
        acquired: get(&ACQUIRED),
        timed_out: get(&TIMED_OUT),
        cancelled: get(&CANCELLED),
        failed: get(&FAILED),
        holds: get(&HOLDS),
        time_waited: Duration::from_nanos(get(&WAITED_NANOS)),
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// Counts one more hold; [`hold_ended`] must follow once for it.
pub(crate) fn hold_started() {
    add(&HOLDS, 1);
}

/// Counts a hold released.
pub(crate) fn hold_ended() {
    HOLDS.fetch_sub(1, Ordering::Relaxed);
}

/// A hold counted for as long as this lives (a lease's).
#[derive(Debug)]
pub(crate) struct Held(());

impl Held {
    pub(crate) fn new() -> Held {
        hold_started();
        Held(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        hold_ended();
    }
}

/// Runs `wait`, a wait for `recipe`'s lock at `path` that gives `None` when
/// its time ran out, counting it and (with `tracing`) in a `lock_wait`
/// span with the recipe, path, time waited and outcome. The caller counts
/// the hold it yields.
pub(crate) fn observe_wait<T>(
    recipe: &'static str,
    path: &str,
    wait: impl FnOnce() -> Result<Option<T>>,
) -> Result<Option<T>> {
    add(&WAITS_STARTED, 1);
    let span = trace::WaitSpan::start(recipe, path);
    let started = Instant::now();
    let result = wait();
    let waited = started.elapsed();
    let outcome = match &result {
        Ok(Some(_)) => ("acquired", &ACQUIRED),
        Ok(None) => ("timed_out", &TIMED_OUT),
        Err(Error::Cancelled) => ("cancelled", &CANCELLED),
        Err(_) => ("error", &FAILED),
    };
    add(outcome.1, 1);
    add(
        &WAITED_NANOS,
        u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX),
    );
    span.finish(waited, outcome.0, result.as_ref().err());
    result
}

#[cfg(feature = "tracing")]
mod trace {
    use super::*;
    use tracing::field::{display, Empty};

    pub(super) struct WaitSpan(tracing::span::EnteredSpan);

    impl WaitSpan {
        pub(super) fn start(recipe: &'static str, path: &str) -> Self {
            let span = tracing::info_span!(
                "lock_wait",
                recipe,
                path,
                waited_ms = Empty,
                outcome = Empty,
                error = Empty
            );
            WaitSpan(span.entered())
        }

        pub(super) fn finish(self, waited: Duration, outcome: &'static str, error: Option<&Error>) {
            let millis = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
            self.0.record("waited_ms", millis);
            self.0.record("outcome", outcome);
            if let Some(e) = error {
                self.0.record("error", display(e));
            }
        }
    }
}

#[cfg(not(feature = "tracing"))]
mod trace {
    use super::*;

    pub(super) struct WaitSpan;

    impl WaitSpan {
        #[inline(always)]
        pub(super) fn start(_recipe: &'static str, _path: &str) -> Self {
            WaitSpan
        }

        #[inline(always)]
        pub(super) fn finish(self, _: Duration, _: &'static str, _: Option<&Error>) {}
    }
}

//! Instants from durations that may not fit the clock.

use std::time::{Duration, Instant};

/// The instant `d` from now; a duration too large for an `Instant` (such as
/// `Duration::MAX`) means a century from now, in effect no deadline.
pub(crate) fn instant_after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(now)
}

//! Retry policies with Apache Curator's parameters and formulas.
//!
//! Every operation the client sends goes through a retry loop: when it fails
//! with a retryable error (connection loss, operation timeout, a moved or,
//! if the policy allows it, an expired session) the loop asks its
//! [`RetryPolicy`] whether to try again and how long to sleep first. The
//! first retry asks with `retry_count == 0`, the next with `1`, and so on;
//! `elapsed` is the time since the operation began.
//!
//! | policy | sleep before retry `n` (from 0) | gives up when |
//! |---|---|---|
//! | [`ExponentialBackoffRetry`] | `base * max(1, random in [0, 2^(n+1)))`, at most `max_sleep` | `n >= max_retries` (capped at 29) |
//! | [`BoundedExponentialBackoffRetry`] | as above, at most its `max_sleep` | `n >= max_retries` (capped at 29) |
//! | [`RetryNTimes`] | a fixed sleep | `n >= n_times` |
//! | [`RetryOneTime`] | a fixed sleep | `n >= 1` |
//! | [`RetryUntilElapsed`] | a fixed sleep | `elapsed >= max_elapsed` |
//! | [`RetryForever`] | a fixed sleep | never |
//! | [`SessionFailedRetryPolicy`] | its inner policy's | as its inner policy, and never retries an expired session |
//!
//! The policies are pure: they compute a sleep and never sleep themselves.
//! With the `backoff` feature, `RetryBackoff` adapts any policy to the
//! `backoff` crate's `Backoff` trait, so it can drive `backoff::retry`.
//!
//! ```
//! use std::time::Duration;
//! use latchkey_framework::retry::{ExponentialBackoffRetry, RetryNTimes, RetryPolicy};
//!
//! let fixed = RetryNTimes::new(2, Duration::from_millis(100));
//! assert_eq!(fixed.allow_retry(0, Duration::ZERO), Some(Duration::from_millis(100)));
//! assert_eq!(fixed.allow_retry(1, Duration::ZERO), Some(Duration::from_millis(100)));
//! assert_eq!(fixed.allow_retry(2, Duration::ZERO), None);
//!
//! // Curator's formula: the first retry always sleeps exactly the base time
//! // (the random factor is drawn from [0, 2) and raised to at least 1).
//! let exp = ExponentialBackoffRetry::new(Duration::from_millis(100), 3);
//! assert_eq!(exp.allow_retry(0, Duration::ZERO), Some(Duration::from_millis(100)));
//! // With an injected random value the sleep is exactly base * max(1, r).
//! assert_eq!(exp.sleep_for(2, |_bound| 5), Duration::from_millis(500));
//! assert_eq!(exp.allow_retry(3, Duration::ZERO), None);
//! ```

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
#[cfg(feature = "backoff")]
use std::time::Instant;

/// Decides whether, and after what sleep, a failed operation is tried again.
///
/// Curator's `org.apache.curator.RetryPolicy`, made pure: instead of sleeping
/// through a `RetrySleeper`, [`allow_retry`](Self::allow_retry) returns the
/// sleep and the retry loop does it.
///
/// ```
/// use std::time::Duration;
/// use latchkey_framework::retry::RetryPolicy;
///
/// /// Retries three times, sleeping 10 ms more each time.
/// #[derive(Debug)]
/// struct Linear;
///
/// impl RetryPolicy for Linear {
///     fn allow_retry(&self, retry_count: u32, _elapsed: Duration) -> Option<Duration> {
///         (retry_count < 3).then(|| Duration::from_millis(10) * (retry_count + 1))
///     }
/// }
///
/// assert_eq!(Linear.allow_retry(2, Duration::ZERO), Some(Duration::from_millis(30)));
/// assert_eq!(Linear.allow_retry(3, Duration::ZERO), None);
/// assert!(Linear.allow_session_expired_retry());
/// ```
pub trait RetryPolicy: Send + Sync + fmt::Debug {
    /// Called after an operation failed with a retryable error.
    ///
    /// `retry_count` is 0 for the first retry; `elapsed` is the time since
    /// the operation began. Returns how long to sleep before retrying, or
    /// `None` to give up.
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration>;

    /// Whether a session-expired error may be retried at all (Curator's
    /// `RetryPolicy.allowRetry(Throwable)` for `SessionExpiredException`).
    ///
    /// Defaults to `true`, as in Curator; [`SessionFailedRetryPolicy`]
    /// returns `false`.
    fn allow_session_expired_retry(&self) -> bool {
        true
    }
}

impl<P: RetryPolicy + ?Sized> RetryPolicy for Arc<P> {
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration> {
        (**self).allow_retry(retry_count, elapsed)
    }

    fn allow_session_expired_retry(&self) -> bool {
        (**self).allow_session_expired_retry()
    }
}

impl<P: RetryPolicy + ?Sized> RetryPolicy for Box<P> {
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration> {
        (**self).allow_retry(retry_count, elapsed)
    }

    fn allow_session_expired_retry(&self) -> bool {
        (**self).allow_session_expired_retry()
    }
}

/// Curator caps exponential policies at 29 retries so that `1 << (n + 1)`
/// still fits in a Java `int`.
const MAX_RETRIES_LIMIT: u32 = 29;

/// Java's `Integer.MAX_VALUE`, Curator's retry-count limit for
/// [`RetryUntilElapsed`].
const JAVA_INT_MAX: u32 = 0x7FFF_FFFF;

/// Curator's default maximum sleep for [`ExponentialBackoffRetry`]:
/// `Integer.MAX_VALUE` milliseconds (about 24.8 days).
pub const DEFAULT_MAX_SLEEP: Duration = Duration::from_millis(i32::MAX as u64);

/// A random fraction in `[0, 1)`, for jittered pauses elsewhere in the
/// client (the reconnect back-off).
pub(crate) fn random_fraction() -> f64 {
    static JITTER: std::sync::OnceLock<Jitter> = std::sync::OnceLock::new();
    let bits = JITTER.get_or_init(Jitter::new).next_u64() >> 11;
    bits as f64 / (1u64 << 53) as f64
}

/// A lock-free source of uniformly distributed numbers (SplitMix64 over an
/// atomic counter, seeded from the standard library's per-process random
/// keys). Not cryptographic; it only spreads out retry sleeps.
struct Jitter {
    state: AtomicU64,
}

impl Jitter {
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    fn new() -> Self {
        Jitter {
            state: AtomicU64::new(RandomState::new().hash_one(0x6c61_7463_686b_6579_u64)),
        }
    }

    fn next_u64(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(Self::GAMMA, Ordering::Relaxed)
            .wrapping_add(Self::GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `[0, bound)` (0 when `bound` is 0). Exactly uniform for
    /// the powers of two that [`ExponentialBackoffRetry`] asks for.
    fn below(&self, bound: u32) -> u32 {
        let high = self.next_u64() >> 32;
        // high < 2^32, so the product fits in u64 and the result is < bound.
        u32::try_from((high * u64::from(bound)) >> 32).unwrap_or(0)
    }
}

/// Retries a bounded number of times with a randomised, growing sleep;
/// Curator's `ExponentialBackoffRetry`.
///
/// Before retry `n` (0-based) it sleeps `base_sleep * max(1, r)` where `r`
/// is drawn uniformly from `[0, 2^(n+1))`, pinned to `max_sleep`. So the
/// first retry sleeps exactly `base_sleep`, the second 1–3 times it, the
/// third 1–7 times, and so on. `max_retries` is capped at 29, as in Curator.
///
/// ```
/// use std::time::Duration;
/// use latchkey_framework::retry::{ExponentialBackoffRetry, RetryPolicy};
///
/// let policy = ExponentialBackoffRetry::new(Duration::from_millis(50), 10);
/// let sleep = policy.allow_retry(3, Duration::ZERO).unwrap();
/// assert!(sleep >= Duration::from_millis(50) && sleep <= Duration::from_millis(50 * 15));
/// assert_eq!(policy.allow_retry(10, Duration::ZERO), None);
/// ```
pub struct ExponentialBackoffRetry {
    base_sleep: Duration,
    max_retries: u32,
    max_sleep: Duration,
    jitter: Jitter,
}

impl ExponentialBackoffRetry {
    /// `base_sleep` is the unit of the randomised sleep; `max_retries` the
    /// number of retries (capped at 29). The sleep is pinned to
    /// [`DEFAULT_MAX_SLEEP`] (Curator's `Integer.MAX_VALUE` ms).
    pub fn new(base_sleep: Duration, max_retries: u32) -> Self {
        Self::with_max_sleep(base_sleep, max_retries, DEFAULT_MAX_SLEEP)
    }

    /// Like [`new`](Self::new), with each sleep pinned to at most `max_sleep`.
    pub fn with_max_sleep(base_sleep: Duration, max_retries: u32, max_sleep: Duration) -> Self {
        ExponentialBackoffRetry {
            base_sleep,
            max_retries: capped_retries(max_retries),
            max_sleep,
            jitter: Jitter::new(),
        }
    }

    /// The unit of the randomised sleep.
    pub fn base_sleep(&self) -> Duration {
        self.base_sleep
    }

    /// The number of retries allowed, after the cap at 29.
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// The longest single sleep.
    pub fn max_sleep(&self) -> Duration {
        self.max_sleep
    }

    /// The exclusive upper bound of the random factor for `retry_count`:
    /// `2^(retry_count + 1)`, with `retry_count` taken as at most 29 (the
    /// largest count Curator can reach), so at most `2^30`.
    pub fn random_bound(retry_count: u32) -> u32 {
        1u32 << (retry_count.min(MAX_RETRIES_LIMIT) + 1)
    }

    /// The sleep before retry `retry_count`, with the random factor taken
    /// from `random`.
    ///
    /// `random` receives the exclusive bound
    /// ([`random_bound`](Self::random_bound)) and should return a number
    /// below it; a larger answer is treated as `bound - 1`. The result is
    /// `base_sleep * max(1, r)`, pinned to [`max_sleep`](Self::max_sleep).
    /// This ignores `max_retries`; [`RetryPolicy::allow_retry`] checks it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use latchkey_framework::retry::ExponentialBackoffRetry;
    ///
    /// let policy = ExponentialBackoffRetry::new(Duration::from_millis(10), 29);
    /// assert_eq!(policy.sleep_for(0, |_| 0), Duration::from_millis(10));
    /// assert_eq!(policy.sleep_for(4, |bound| bound - 1), Duration::from_millis(310));
    /// ```
    pub fn sleep_for(&self, retry_count: u32, random: impl FnOnce(u32) -> u32) -> Duration {
        let bound = Self::random_bound(retry_count);
        let r = random(bound).min(bound - 1).max(1);
        let sleep = self.base_sleep.saturating_mul(r);
        if sleep > self.max_sleep {
            log::debug!(
                "retry sleep {sleep:?} too large; pinning to {:?}",
                self.max_sleep
            );
            self.max_sleep
        } else {
            sleep
        }
    }
}

fn capped_retries(max_retries: u32) -> u32 {
    if max_retries > MAX_RETRIES_LIMIT {
        log::warn!("max_retries too large ({max_retries}); pinning to {MAX_RETRIES_LIMIT}");
        MAX_RETRIES_LIMIT
    } else {
        max_retries
    }
}

impl RetryPolicy for ExponentialBackoffRetry {
    fn allow_retry(&self, retry_count: u32, _elapsed: Duration) -> Option<Duration> {
        (retry_count < self.max_retries)
            .then(|| self.sleep_for(retry_count, |bound| self.jitter.below(bound)))
    }
}

impl Clone for ExponentialBackoffRetry {
    /// The clone draws from its own random sequence.
    fn clone(&self) -> Self {
        Self::with_max_sleep(self.base_sleep, self.max_retries, self.max_sleep)
    }
}

impl fmt::Debug for ExponentialBackoffRetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExponentialBackoffRetry")
            .field("base_sleep", &self.base_sleep)
            .field("max_retries", &self.max_retries)
            .field("max_sleep", &self.max_sleep)
            .finish_non_exhaustive()
    }
}

/// [`ExponentialBackoffRetry`] with an upper bound on each sleep; Curator's
/// `BoundedExponentialBackoffRetry`.
///
/// Note Curator's argument order: base sleep, then max sleep, then retries.
///
/// ```
/// use std::time::Duration;
/// use latchkey_framework::retry::{BoundedExponentialBackoffRetry, RetryPolicy};
///
/// let policy = BoundedExponentialBackoffRetry::new(
///     Duration::from_millis(100),
///     Duration::from_millis(400),
///     20,
/// );
/// assert!(policy.allow_retry(15, Duration::ZERO).unwrap() <= Duration::from_millis(400));
/// ```
#[derive(Clone, Debug)]
pub struct BoundedExponentialBackoffRetry {
    inner: ExponentialBackoffRetry,
    max_sleep: Duration,
}

impl BoundedExponentialBackoffRetry {
    /// Sleeps as [`ExponentialBackoffRetry::new`]`(base_sleep, max_retries)`
    /// (so `max_retries` is capped at 29), each sleep at most `max_sleep`.
    pub fn new(base_sleep: Duration, max_sleep: Duration, max_retries: u32) -> Self {
        BoundedExponentialBackoffRetry {
            inner: ExponentialBackoffRetry::new(base_sleep, max_retries),
            max_sleep,
        }
    }

    /// The unit of the randomised sleep.
    pub fn base_sleep(&self) -> Duration {
        self.inner.base_sleep()
    }

    /// The longest single sleep.
    pub fn max_sleep(&self) -> Duration {
        self.max_sleep
    }

    /// The number of retries allowed, after the cap at 29.
    pub fn max_retries(&self) -> u32 {
        self.inner.max_retries()
    }

    /// The sleep before retry `retry_count` with the random factor taken
    /// from `random`: [`ExponentialBackoffRetry::sleep_for`], then at most
    /// [`max_sleep`](Self::max_sleep).
    pub fn sleep_for(&self, retry_count: u32, random: impl FnOnce(u32) -> u32) -> Duration {
        self.inner
            .sleep_for(retry_count, random)
            .min(self.max_sleep)
    }
}

impl RetryPolicy for BoundedExponentialBackoffRetry {
    fn allow_retry(&self, retry_count: u32, _elapsed: Duration) -> Option<Duration> {
        (retry_count < self.inner.max_retries)
            .then(|| self.sleep_for(retry_count, |bound| self.inner.jitter.below(bound)))
    }
}

/// Retries `n` times with a fixed sleep between attempts; Curator's
/// `RetryNTimes`.
///
/// ```
/// use std::time::Duration;
/// use latchkey_framework::retry::{RetryNTimes, RetryPolicy};
///
/// let policy = RetryNTimes::new(3, Duration::from_millis(100));
/// let sleeps: Vec<_> = (0..5).map(|n| policy.allow_retry(n, Duration::ZERO)).collect();
/// let some = Some(Duration::from_millis(100));
/// assert_eq!(sleeps, [some, some, some, None, None]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RetryNTimes {
    n: u32,
    sleep_between: Duration,
}

impl RetryNTimes {
    /// Allows `n` retries, sleeping `sleep_between` before each. `n == 0`
    /// never retries.
    pub fn new(n: u32, sleep_between: Duration) -> Self {
        RetryNTimes { n, sleep_between }
    }

    /// The number of retries allowed.
    pub fn n(&self) -> u32 {
        self.n
    }

    /// The sleep before each retry.
    pub fn sleep_between(&self) -> Duration {
        self.sleep_between
    }
}

impl RetryPolicy for RetryNTimes {
    fn allow_retry(&self, retry_count: u32, _elapsed: Duration) -> Option<Duration> {
        (retry_count < self.n).then_some(self.sleep_between)
    }
}

/// Retries once after a fixed sleep; Curator's `RetryOneTime` (a
/// [`RetryNTimes`] with `n == 1`).
///
/// ```
/// use std::time::Duration;
/// use latchkey_framework::retry::{RetryOneTime, RetryPolicy};
///
/// let policy = RetryOneTime::new(Duration::from_millis(100));
/// assert_eq!(policy.allow_retry(0, Duration::ZERO), Some(Duration::from_millis(100)));
/// assert_eq!(policy.allow_retry(1, Duration::ZERO), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RetryOneTime {
    inner: RetryNTimes,
}

impl RetryOneTime {
    /// Allows one retry after `sleep`.
    pub fn new(sleep: Duration) -> Self {
        RetryOneTime {
            inner: RetryNTimes::new(1, sleep),
        }
    }

    /// The sleep before the retry.
    pub fn sleep(&self) -> Duration {
        self.inner.sleep_between
    }
}

impl RetryPolicy for RetryOneTime {
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration> {
        self.inner.allow_retry(retry_count, elapsed)
    }
}

/// Retries with a fixed sleep until a total time has elapsed; Curator's
/// `RetryUntilElapsed`.
///
/// A retry is allowed while `elapsed < max_elapsed` (and, as in Curator,
/// while `retry_count < i32::MAX`). The sleep is not shortened to fit the
/// remaining time, so the operation may run up to one sleep past
/// `max_elapsed`. (Curator sleeps even when it then refuses because the
/// time is up; this policy refuses without a sleep.)
///
/// ```
/// use std::time::Duration;
/// use latchkey_framework::retry::{RetryPolicy, RetryUntilElapsed};
///
/// let policy = RetryUntilElapsed::new(Duration::from_secs(1), Duration::from_millis(100));
/// assert_eq!(policy.allow_retry(7, Duration::from_millis(999)), Some(Duration::from_millis(100)));
/// assert_eq!(policy.allow_retry(8, Duration::from_secs(1)), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RetryUntilElapsed {
    max_elapsed: Duration,
    sleep_between: Duration,
}

impl RetryUntilElapsed {
    /// Retries while less than `max_elapsed` has passed since the operation
    /// began, sleeping `sleep_between` before each retry.
    pub fn new(max_elapsed: Duration, sleep_between: Duration) -> Self {
        RetryUntilElapsed {
            max_elapsed,
            sleep_between,
        }
    }

    /// The time after which no retry starts.
    pub fn max_elapsed(&self) -> Duration {
        self.max_elapsed
    }

    /// The sleep before each retry.
    pub fn sleep_between(&self) -> Duration {
        self.sleep_between
    }
}

impl RetryPolicy for RetryUntilElapsed {
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration> {
        // Curator's SleepingRetry with n = Integer.MAX_VALUE.
        let count_ok = retry_count < JAVA_INT_MAX;
        (count_ok && elapsed < self.max_elapsed).then_some(self.sleep_between)
    }
}

/// Retries forever with a fixed sleep; Curator's `RetryForever`.
///
/// Curator refuses an interval of zero; this policy pins it to 1 ms instead,
/// so that a retry loop never spins.
///
/// ```
/// use std::time::Duration;
/// use latchkey_framework::retry::{RetryForever, RetryPolicy};
///
/// let policy = RetryForever::new(Duration::from_millis(250));
/// assert_eq!(
///     policy.allow_retry(u32::MAX, Duration::MAX),
///     Some(Duration::from_millis(250))
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RetryForever {
    sleep: Duration,
}

impl RetryForever {
    /// Retries forever, sleeping `sleep` (at least 1 ms) before each retry.
    pub fn new(sleep: Duration) -> Self {
        let min = Duration::from_millis(1);
        if sleep < min {
            log::warn!("RetryForever interval {sleep:?} too small; pinning to {min:?}");
        }
        RetryForever {
            sleep: sleep.max(min),
        }
    }

    /// The sleep before each retry.
    pub fn sleep(&self) -> Duration {
        self.sleep
    }
}

impl RetryPolicy for RetryForever {
    fn allow_retry(&self, _retry_count: u32, _elapsed: Duration) -> Option<Duration> {
        Some(self.sleep)
    }
}

/// Delegates to another policy but never retries an expired session;
/// Curator's `SessionFailedRetryPolicy`.
///
/// Use it when an operation must fail rather than run again in a new
/// session (for example when ephemeral nodes of the old session matter).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use latchkey_framework::retry::{RetryNTimes, RetryPolicy, SessionFailedRetryPolicy};
///
/// let policy = SessionFailedRetryPolicy::new(Arc::new(RetryNTimes::new(3, Duration::ZERO)));
/// assert_eq!(policy.allow_retry(0, Duration::ZERO), Some(Duration::ZERO));
/// assert!(!policy.allow_session_expired_retry());
/// ```
#[derive(Clone, Debug)]
pub struct SessionFailedRetryPolicy {
    inner: Arc<dyn RetryPolicy>,
}

impl SessionFailedRetryPolicy {
    /// Wraps `inner`, which decides every retry except after a session
    /// expiry.
    pub fn new(inner: Arc<dyn RetryPolicy>) -> Self {
        SessionFailedRetryPolicy { inner }
    }

    /// The policy retries are delegated to.
    pub fn inner(&self) -> &Arc<dyn RetryPolicy> {
        &self.inner
    }
}

impl RetryPolicy for SessionFailedRetryPolicy {
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration> {
        self.inner.allow_retry(retry_count, elapsed)
    }

    fn allow_session_expired_retry(&self) -> bool {
        false
    }
}

/// Adapts a [`RetryPolicy`] to the `backoff` crate's
/// [`Backoff`](backoff::backoff::Backoff) trait. Behind the `backoff`
/// feature (off by default): `backoff` 0.4 is unmaintained
/// (RUSTSEC-2025-0012), and so is the `instant` crate it pulls in
/// (RUSTSEC-2024-0384), so a default build carries neither.
///
/// Each [`next_backoff`](backoff::backoff::Backoff::next_backoff) asks the
/// policy with the number of retries so far and the time since the adapter
/// was created or last [`reset`](backoff::backoff::Backoff::reset) (which
/// [`backoff::retry`] does before its first attempt).
///
/// ```
/// use std::time::Duration;
/// use latchkey_framework::retry::{RetryBackoff, RetryNTimes};
///
/// let mut attempts = 0;
/// let result: Result<(), backoff::Error<&str>> = backoff::retry(
///     RetryBackoff::new(RetryNTimes::new(2, Duration::ZERO)),
///     || {
///         attempts += 1;
///         Err(backoff::Error::transient("connection loss"))
///     },
/// );
/// assert!(result.is_err());
/// assert_eq!(attempts, 3); // the first attempt and two retries
/// ```
#[cfg(feature = "backoff")]
#[derive(Clone, Debug)]
pub struct RetryBackoff<P> {
    policy: P,
    retry_count: u32,
    started: Instant,
}

#[cfg(feature = "backoff")]
impl<P: RetryPolicy> RetryBackoff<P> {
    /// Starts counting retries and time now.
    pub fn new(policy: P) -> Self {
        RetryBackoff {
            policy,
            retry_count: 0,
            started: Instant::now(),
        }
    }

    /// The wrapped policy.
    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// The number of retries allowed so far.
    pub fn retry_count(&self) -> u32 {
        self.retry_count
    }
}

#[cfg(feature = "backoff")]
impl<P: RetryPolicy> backoff::backoff::Backoff for RetryBackoff<P> {
    fn reset(&mut self) {
        self.retry_count = 0;
        self.started = Instant::now();
    }

    fn next_backoff(&mut self) -> Option<Duration> {
        let sleep = self
            .policy
            .allow_retry(self.retry_count, self.started.elapsed())?;
        self.retry_count = self.retry_count.saturating_add(1);
        Some(sleep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(feature = "backoff")]
    use backoff::backoff::Backoff;
    use std::collections::BTreeSet;

    const MS: Duration = Duration::from_millis(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn sequence(policy: &dyn RetryPolicy, counts: u32) -> Vec<Option<Duration>> {
        (0..counts)
            .map(|n| policy.allow_retry(n, Duration::ZERO))
            .collect()
    }

    #[test]
    fn policies_are_send_sync_and_object_safe() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<ExponentialBackoffRetry>();
        assert_send_sync::<BoundedExponentialBackoffRetry>();
        assert_send_sync::<RetryNTimes>();
        assert_send_sync::<RetryOneTime>();
        assert_send_sync::<RetryUntilElapsed>();
        assert_send_sync::<RetryForever>();
        assert_send_sync::<SessionFailedRetryPolicy>();
        #[cfg(feature = "backoff")]
        assert_send_sync::<RetryBackoff<Arc<dyn RetryPolicy>>>();

        let all: Vec<Box<dyn RetryPolicy>> = vec![
            Box::new(ExponentialBackoffRetry::new(MS, 3)),
            Box::new(BoundedExponentialBackoffRetry::new(MS, MS, 3)),
            Box::new(RetryNTimes::new(3, MS)),
            Box::new(RetryOneTime::new(MS)),
            Box::new(RetryUntilElapsed::new(ms(10), MS)),
            Box::new(RetryForever::new(MS)),
            Box::new(SessionFailedRetryPolicy::new(Arc::new(RetryOneTime::new(
                MS,
            )))),
        ];
        for p in &all {
            assert_eq!(p.allow_retry(0, Duration::ZERO), Some(MS), "{p:?}");
            assert!(!format!("{p:?}").is_empty());
        }
    }

    #[test]
    fn retry_n_times_sleeps_n_times_then_gives_up() {
        let p = RetryNTimes::new(3, ms(100));
        let some = Some(ms(100));
        assert_eq!(sequence(&p, 5), [some, some, some, None, None]);
        assert_eq!(p.allow_retry(u32::MAX, Duration::ZERO), None);
        // Elapsed time is irrelevant.
        assert_eq!(p.allow_retry(2, Duration::MAX), some);
        assert_eq!(p.n(), 3);
        assert_eq!(p.sleep_between(), ms(100));
    }

    #[test]
    fn retry_n_times_zero_never_retries() {
        let p = RetryNTimes::new(0, ms(100));
        assert_eq!(p.allow_retry(0, Duration::ZERO), None);
    }

    #[test]
    fn retry_one_time_retries_once() {
        let p = RetryOneTime::new(ms(250));
        assert_eq!(sequence(&p, 3), [Some(ms(250)), None, None]);
        assert_eq!(p.sleep(), ms(250));
    }

    #[test]
    fn exponential_random_bound_is_two_to_the_count_plus_one() {
        for count in 0..=28 {
            assert_eq!(
                ExponentialBackoffRetry::random_bound(count),
                1u32 << (count + 1)
            );
        }
        // Curator never reaches a count above 28 (29 retries max); larger
        // counts are pinned rather than overflowing.
        assert_eq!(ExponentialBackoffRetry::random_bound(29), 1 << 30);
        assert_eq!(ExponentialBackoffRetry::random_bound(30), 1 << 30);
        assert_eq!(ExponentialBackoffRetry::random_bound(u32::MAX), 1 << 30);
    }

    #[test]
    fn exponential_formula_with_fixed_random() {
        let base = ms(100);
        let p = ExponentialBackoffRetry::new(base, 29);
        for count in 0..29 {
            let bound = ExponentialBackoffRetry::random_bound(count);
            let mut seen_bound = None;
            let s = p.sleep_for(count, |b| {
                seen_bound = Some(b);
                0
            });
            assert_eq!(seen_bound, Some(bound));
            // max(1, 0) == 1
            assert_eq!(s, base, "count {count}");
            assert_eq!(p.sleep_for(count, |_| 1), base);
            let top = bound - 1;
            // Pinned to Integer.MAX_VALUE ms from count 24 on (100 ms * 2^25).
            let top_sleep = (base * top).min(DEFAULT_MAX_SLEEP);
            assert_eq!(p.sleep_for(count, |_| top), top_sleep, "count {count}");
            if bound > 3 {
                assert_eq!(p.sleep_for(count, |_| 3), base * 3);
            }
            // Out-of-range answers are treated as bound - 1.
            assert_eq!(p.sleep_for(count, |_| u32::MAX), top_sleep);
        }
    }

    #[test]
    fn exponential_first_retry_always_sleeps_base() {
        let p = ExponentialBackoffRetry::new(ms(7), 5);
        for _ in 0..1000 {
            assert_eq!(p.allow_retry(0, Duration::ZERO), Some(ms(7)));
        }
    }

    #[test]
    fn exponential_random_draws_stay_within_curator_bounds() {
        let base = ms(10);
        let p = ExponentialBackoffRetry::new(base, 29);
        for count in 0..=10u32 {
            let bound = 1u32 << (count + 1);
            let mut distinct = BTreeSet::new();
            for _ in 0..2000 {
                let s = p.allow_retry(count, Duration::ZERO).expect("allowed");
                assert!(s >= base, "count {count}: {s:?}");
                assert!(s <= base * (bound - 1), "count {count}: {s:?}");
                // Always a whole multiple of the base sleep.
                assert_eq!(s.as_nanos() % base.as_nanos(), 0);
                distinct.insert(s);
            }
            // The random factor really varies (bound 2 only yields base).
            let possible = (bound - 1) as usize;
            if possible > 1 {
                assert!(distinct.len() > 1, "count {count}: {distinct:?}");
            }
            if possible <= 8 {
                // Small ranges get fully covered in 2000 draws.
                assert_eq!(distinct.len(), possible, "count {count}");
            }
        }
    }

    #[test]
    fn exponential_draws_look_uniform() {
        // Count 2: r in [0, 8), sleep factor max(1, r): factor 1 has
        // probability 2/8, factors 2..=7 have 1/8 each.
        let p = ExponentialBackoffRetry::new(MS, 29);
        let draws = 16_000u32;
        let mut hist = [0u32; 8];
        for _ in 0..draws {
            let s = p.allow_retry(2, Duration::ZERO).expect("allowed");
            let factor = usize::try_from(s.as_millis()).expect("small");
            hist[factor] += 1;
        }
        assert_eq!(hist[0], 0);
        let expect = draws / 8;
        assert!(hist[1] > expect * 2 - expect / 2 && hist[1] < expect * 2 + expect / 2);
        for (factor, &n) in hist.iter().enumerate().skip(2) {
            assert!(n > expect / 2 && n < expect * 3 / 2, "{factor}: {hist:?}");
        }
    }

    #[test]
    fn exponential_gives_up_after_max_retries() {
        let p = ExponentialBackoffRetry::new(ms(1), 3);
        let s = sequence(&p, 6);
        assert!(s[..3].iter().all(Option::is_some));
        assert_eq!(s[3..], [None, None, None]);
        assert_eq!(p.allow_retry(u32::MAX, Duration::ZERO), None);
        let zero = ExponentialBackoffRetry::new(ms(1), 0);
        assert_eq!(zero.allow_retry(0, Duration::ZERO), None);
    }

    #[test]
    fn exponential_max_retries_capped_at_29() {
        let p = ExponentialBackoffRetry::new(ms(1), 100);
        assert_eq!(p.max_retries(), 29);
        assert!(p.allow_retry(28, Duration::ZERO).is_some());
        assert_eq!(p.allow_retry(29, Duration::ZERO), None);
        assert_eq!(ExponentialBackoffRetry::new(ms(1), 29).max_retries(), 29);
        assert_eq!(ExponentialBackoffRetry::new(ms(1), 5).max_retries(), 5);
    }

    #[test]
    fn exponential_default_max_sleep_is_int_max_millis() {
        let p = ExponentialBackoffRetry::new(ms(1), 3);
        assert_eq!(p.max_sleep(), ms(2_147_483_647));
        assert_eq!(p.base_sleep(), ms(1));
        // A huge base is pinned to Integer.MAX_VALUE ms, as in Curator.
        let big = ExponentialBackoffRetry::new(Duration::from_secs(1_000_000), 29);
        assert_eq!(big.sleep_for(5, |_| 9), DEFAULT_MAX_SLEEP);
    }

    #[test]
    fn exponential_with_max_sleep_pins() {
        let p = ExponentialBackoffRetry::with_max_sleep(ms(50), 29, ms(500));
        assert_eq!(p.max_sleep(), ms(500));
        assert_eq!(p.sleep_for(5, |_| 9), ms(450));
        assert_eq!(p.sleep_for(5, |_| 10), ms(500));
        assert_eq!(p.sleep_for(5, |_| 11), ms(500));
        for count in 0..29 {
            for _ in 0..50 {
                let s = p.allow_retry(count, Duration::ZERO).expect("allowed");
                assert!(s >= ms(50) && s <= ms(500), "{count}: {s:?}");
            }
        }
    }

    #[test]
    fn exponential_never_overflows() {
        let p = ExponentialBackoffRetry::with_max_sleep(Duration::MAX, 29, Duration::MAX);
        assert_eq!(p.sleep_for(28, |b| b - 1), Duration::MAX);
        assert_eq!(p.sleep_for(u32::MAX, |_| u32::MAX), Duration::MAX);
        assert!(p.allow_retry(28, Duration::MAX).is_some());
        let zero = ExponentialBackoffRetry::new(Duration::ZERO, 29);
        assert_eq!(zero.allow_retry(10, Duration::ZERO), Some(Duration::ZERO));
    }

    #[test]
    fn exponential_clone_keeps_parameters() {
        let p = ExponentialBackoffRetry::with_max_sleep(ms(3), 4, ms(9));
        let c = p.clone();
        assert_eq!(
            (c.base_sleep(), c.max_retries(), c.max_sleep()),
            (ms(3), 4, ms(9))
        );
        assert_eq!(format!("{p:?}"), format!("{c:?}"));
    }

    #[test]
    fn exponential_shared_between_threads() {
        let p = Arc::new(ExponentialBackoffRetry::new(ms(1), 29));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let p = Arc::clone(&p);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        let s = p.allow_retry(4, Duration::ZERO).expect("allowed");
                        assert!(s >= ms(1) && s <= ms(31));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("no panic");
        }
    }

    #[test]
    fn jitter_below_stays_in_range() {
        let j = Jitter::new();
        assert_eq!(j.below(0), 0);
        assert_eq!(j.below(1), 0);
        for bound in [2, 3, 7, 1 << 10, 1 << 30, u32::MAX] {
            for _ in 0..500 {
                assert!(j.below(bound) < bound);
            }
        }
        // Two generators are seeded differently.
        let a: Vec<u64> = (0..4).map(|_| Jitter::new().next_u64()).collect();
        assert!(a.windows(2).any(|w| w[0] != w[1]));
    }

    /// The generator is SplitMix64: from seed 1234567 it gives the
    /// algorithm's published first outputs.
    #[test]
    fn jitter_is_splitmix64() {
        let j = Jitter {
            state: AtomicU64::new(1234567),
        };
        let got: Vec<u64> = (0..5).map(|_| j.next_u64()).collect();
        assert_eq!(
            got,
            [
                6457827717110365317,
                3203168211198807973,
                9817491932198370423,
                4593380528125082431,
                16408922859458223821,
            ]
        );
    }

    #[test]
    fn bounded_caps_at_max_sleep() {
        let p = BoundedExponentialBackoffRetry::new(ms(100), ms(1000), 10);
        assert_eq!(p.base_sleep(), ms(100));
        assert_eq!(p.max_sleep(), ms(1000));
        assert_eq!(p.max_retries(), 10);
        assert_eq!(p.sleep_for(0, |_| 0), ms(100));
        assert_eq!(p.sleep_for(3, |_| 9), ms(900));
        assert_eq!(p.sleep_for(3, |_| 10), ms(1000));
        assert_eq!(p.sleep_for(9, |b| b - 1), ms(1000));
        for count in 0..10 {
            for _ in 0..200 {
                let s = p.allow_retry(count, Duration::ZERO).expect("allowed");
                assert!(s >= ms(100) && s <= ms(1000), "{count}: {s:?}");
            }
        }
        // Late retries hit the cap almost always (r >= 10 out of 2^10).
        let capped = (0..200)
            .filter(|_| p.allow_retry(9, Duration::ZERO) == Some(ms(1000)))
            .count();
        assert!(capped > 150, "{capped}");
        assert_eq!(p.allow_retry(10, Duration::ZERO), None);
    }

    #[test]
    fn bounded_max_retries_capped_at_29() {
        let p = BoundedExponentialBackoffRetry::new(ms(1), ms(10), 1000);
        assert_eq!(p.max_retries(), 29);
        assert!(p.allow_retry(28, Duration::ZERO).is_some());
        assert_eq!(p.allow_retry(29, Duration::ZERO), None);
    }

    #[test]
    fn bounded_max_sleep_below_base_wins() {
        let p = BoundedExponentialBackoffRetry::new(ms(100), ms(10), 3);
        assert_eq!(p.allow_retry(0, Duration::ZERO), Some(ms(10)));
    }

    #[test]
    fn until_elapsed_stops_once_elapsed_reaches_max() {
        let p = RetryUntilElapsed::new(ms(1000), ms(100));
        assert_eq!(p.allow_retry(0, Duration::ZERO), Some(ms(100)));
        assert_eq!(p.allow_retry(500, ms(999)), Some(ms(100)));
        assert_eq!(p.allow_retry(0, ms(1000)), None);
        assert_eq!(p.allow_retry(0, ms(1001)), None);
        assert_eq!(p.allow_retry(0, Duration::MAX), None);
        // The count only matters at Curator's Integer.MAX_VALUE limit.
        assert_eq!(p.allow_retry(2_147_483_646, ms(1)), Some(ms(100)));
        assert_eq!(p.allow_retry(2_147_483_647, ms(1)), None);
        assert_eq!(p.max_elapsed(), ms(1000));
        assert_eq!(p.sleep_between(), ms(100));
        let zero = RetryUntilElapsed::new(Duration::ZERO, ms(1));
        assert_eq!(zero.allow_retry(0, Duration::ZERO), None);
    }

    #[test]
    fn forever_never_stops() {
        let p = RetryForever::new(ms(20));
        for n in [0, 1, 29, 1000, JAVA_INT_MAX, u32::MAX] {
            assert_eq!(p.allow_retry(n, Duration::MAX), Some(ms(20)));
        }
        assert_eq!(p.sleep(), ms(20));
        assert!(p.allow_session_expired_retry());
    }

    #[test]
    fn forever_pins_zero_interval() {
        assert_eq!(RetryForever::new(Duration::ZERO).sleep(), ms(1));
        assert_eq!(
            RetryForever::new(Duration::from_micros(10)).allow_retry(0, Duration::ZERO),
            Some(ms(1))
        );
    }

    #[test]
    fn session_failed_refuses_session_expiry_and_delegates_the_rest() {
        let inner: Arc<dyn RetryPolicy> = Arc::new(RetryNTimes::new(2, ms(5)));
        let p = SessionFailedRetryPolicy::new(Arc::clone(&inner));
        assert!(inner.allow_session_expired_retry());
        assert!(!p.allow_session_expired_retry());
        assert_eq!(sequence(&p, 3), [Some(ms(5)), Some(ms(5)), None]);
        assert_eq!(p.inner().allow_retry(0, Duration::ZERO), Some(ms(5)));
        // Through Arc and Box the refusal is kept.
        let arc: Arc<dyn RetryPolicy> = Arc::new(p.clone());
        assert!(!arc.allow_session_expired_retry());
        let boxed: Box<dyn RetryPolicy> = Box::new(p);
        assert!(!boxed.allow_session_expired_retry());
        // Nesting: the outer wrapper refuses regardless.
        let nested = SessionFailedRetryPolicy::new(arc);
        assert!(!nested.allow_session_expired_retry());
    }

    #[test]
    fn default_policies_allow_session_expired_retry() {
        assert!(ExponentialBackoffRetry::new(MS, 1).allow_session_expired_retry());
        assert!(BoundedExponentialBackoffRetry::new(MS, MS, 1).allow_session_expired_retry());
        assert!(RetryNTimes::new(1, MS).allow_session_expired_retry());
        assert!(RetryOneTime::new(MS).allow_session_expired_retry());
        assert!(RetryUntilElapsed::new(MS, MS).allow_session_expired_retry());
        assert!(RetryForever::new(MS).allow_session_expired_retry());
        // Through Arc and Box too (the wrappers ask what they wrap).
        let boxed: Box<dyn RetryPolicy> = Box::new(RetryNTimes::new(1, MS));
        assert!(boxed.allow_session_expired_retry());
        let arc: Arc<dyn RetryPolicy> = Arc::new(RetryOneTime::new(MS));
        assert!(arc.allow_session_expired_retry());
    }

    #[cfg(feature = "backoff")]
    #[test]
    fn backoff_adapter_counts_and_resets() {
        let mut b = RetryBackoff::new(RetryNTimes::new(2, ms(10)));
        assert_eq!(b.next_backoff(), Some(ms(10)));
        assert_eq!(b.retry_count(), 1);
        assert_eq!(b.next_backoff(), Some(ms(10)));
        assert_eq!(b.next_backoff(), None);
        assert_eq!(b.next_backoff(), None);
        assert_eq!(b.retry_count(), 2);
        b.reset();
        assert_eq!(b.retry_count(), 0);
        assert_eq!(b.next_backoff(), Some(ms(10)));
        assert_eq!(b.policy().n(), 2);
    }

    #[cfg(feature = "backoff")]
    #[test]
    fn backoff_adapter_passes_elapsed_time() {
        let mut b = RetryBackoff::new(RetryUntilElapsed::new(Duration::ZERO, MS));
        assert_eq!(b.next_backoff(), None);
        let mut b = RetryBackoff::new(RetryUntilElapsed::new(Duration::from_secs(3600), MS));
        assert_eq!(b.next_backoff(), Some(MS));
    }

    #[cfg(feature = "backoff")]
    #[test]
    fn backoff_adapter_drives_backoff_retry() {
        let policy: Arc<dyn RetryPolicy> = Arc::new(RetryNTimes::new(3, Duration::ZERO));
        let mut attempts = 0;
        let result: Result<u32, backoff::Error<&str>> =
            backoff::retry(RetryBackoff::new(Arc::clone(&policy)), || {
                attempts += 1;
                Err(backoff::Error::transient("connection loss"))
            });
        assert!(matches!(result, Err(backoff::Error::Transient { .. })));
        assert_eq!(attempts, 4);

        let mut attempts = 0;
        let result: Result<u32, backoff::Error<&str>> =
            backoff::retry(RetryBackoff::new(policy), || {
                attempts += 1;
                if attempts < 3 {
                    Err(backoff::Error::transient("connection loss"))
                } else {
                    Ok(attempts)
                }
            });
        assert_eq!(result.ok(), Some(3));
    }
}

//! Which one-shot watches a recipe has pending, and on which session, so
//! that reading a node again (after a reconnection, or for fresh data)
//! does not pile up watches, and a new session sets them again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use latchkey_framework::{Client, Result, WatchedEvent};
use parking_lot::Mutex;

use crate::locks::lock_internals::Signal;

/// A session id no session has: a watch whose read has not returned yet.
const UNCONFIRMED: i64 = 0;

/// Pending watches by key (a node, or a node and what is watched on it).
///
/// Each watch gets a token when set: its callback clears only its own
/// entry, so a watch of an ended session that fires late cannot clear the
/// next session's. The session is the one seen once the watched read
/// returned: a read retried across a session change leaves its watch on
/// the new session.
///
/// A new session may connect between the reply and the read of the id,
/// and the watch, which ended with the old session, is then recorded as
/// the new one's. That lasts only until its callback runs: the client
/// fires every watch of a session that ends with `SessionExpired`, also
/// one whose reply comes after the end, and the callback clears its entry
/// and wakes the recipe, whose next read sets the watch again. Requiring
/// the same id before the request and after the reply instead would leave
/// a read retried onto the new session unconfirmed, and set a second watch
/// there (a cache test saw two callbacks where one belongs).
pub(crate) struct WatchArms<K> {
    next: AtomicU64,
    pending: Mutex<BTreeMap<K, (u64, i64)>>,
}

impl<K: Ord + Clone> Default for WatchArms<K> {
    fn default() -> Self {
        WatchArms {
            next: AtomicU64::new(1),
            pending: Mutex::new(BTreeMap::new()),
        }
    }
}

impl<K: Ord + Clone> WatchArms<K> {
    /// Whether a watch on `key` set on `session` is still pending.
    pub(crate) fn is_armed(&self, key: &K, session: i64) -> bool {
        session != UNCONFIRMED
            && self
                .pending
                .lock()
                .get(key)
                .is_some_and(|(_, s)| *s == session)
    }

    /// Records a watch about to be set on `key`; its token goes to the
    /// callback ([`WatchArms::fired`]) and to [`WatchArms::confirm`].
    pub(crate) fn arm(&self, key: &K) -> u64 {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        self.pending
            .lock()
            .insert(key.clone(), (token, UNCONFIRMED));
        token
    }

    /// The watched read returned: its watch is pending on `session`.
    pub(crate) fn confirm(&self, key: &K, token: u64, session: i64) {
        if let Some((t, s)) = self.pending.lock().get_mut(key) {
            if *t == token {
                *s = session;
            }
        }
    }

    /// The watch fired (or its read failed): set it again next time.
    pub(crate) fn fired(&self, key: &K, token: u64) {
        let mut pending = self.pending.lock();
        if pending.get(key).is_some_and(|(t, _)| *t == token) {
            pending.remove(key);
        }
    }

    /// Forgets every watch not of `session` (their session ended).
    pub(crate) fn keep_only(&self, session: i64) {
        self.pending.lock().retain(|_, (_, s)| *s == session);
    }
}

/// A watched read through `arms`: `plain` if a watch of `key` is pending
/// on the client's session, else `watched` with a one-shot watcher that
/// clears its entry and runs `on_fire`. The watch counts as pending on the
/// session seen once the read returned; a failed read leaves none.
pub(crate) fn read_watched<K, T>(
    arms: &Arc<WatchArms<K>>,
    key: &K,
    client: &Client,
    on_fire: impl FnOnce() + Send + 'static,
    watched: impl FnOnce(Box<dyn FnOnce(WatchedEvent) + Send>) -> Result<T>,
    plain: impl FnOnce() -> Result<T>,
) -> Result<T>
where
    K: Ord + Clone + Send + Sync + 'static,
{
    read_watched_on(arms, key, || client.session_id(), on_fire, watched, plain)
}

/// [`read_watched`] with the client's session id read by `session`.
fn read_watched_on<K, T>(
    arms: &Arc<WatchArms<K>>,
    key: &K,
    session: impl Fn() -> i64,
    on_fire: impl FnOnce() + Send + 'static,
    watched: impl FnOnce(Box<dyn FnOnce(WatchedEvent) + Send>) -> Result<T>,
    plain: impl FnOnce() -> Result<T>,
) -> Result<T>
where
    K: Ord + Clone + Send + Sync + 'static,
{
    if arms.is_armed(key, session()) {
        return plain();
    }
    let token = arms.arm(key);
    let (weak, owned) = (Arc::downgrade(arms), key.clone());
    let got = watched(Box::new(move |_event| {
        if let Some(arms) = weak.upgrade() {
            arms.fired(&owned, token);
        }
        on_fire();
    }));
    match &got {
        Ok(_) => arms.confirm(key, token, session()),
        Err(_) => arms.fired(key, token),
    }
    got
}

/// A callback that wakes `signal`, if it still exists.
pub(crate) fn waking(signal: &Arc<Signal>) -> impl FnOnce() + Send + 'static {
    let signal = Arc::downgrade(signal);
    move || {
        if let Some(signal) = signal.upgrade() {
            signal.notify();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_callback_clears_only_its_own_watch() {
        let arms = WatchArms::<&str>::default();
        let old = arms.arm(&"a");
        arms.confirm(&"a", old, 7);
        assert!(arms.is_armed(&"a", 7));
        assert!(!arms.is_armed(&"a", 8), "another session's watch");
        let new = arms.arm(&"a");
        assert!(!arms.is_armed(&"a", 8), "not confirmed yet");
        arms.confirm(&"a", new, 8);
        arms.fired(&"a", old);
        assert!(arms.is_armed(&"a", 8), "the old watch's callback left it");
        arms.fired(&"a", new);
        assert!(!arms.is_armed(&"a", 8));
    }

    #[test]
    fn a_new_session_keeps_only_its_own() {
        let arms = WatchArms::<u8>::default();
        let (a, b) = (arms.arm(&1), arms.arm(&2));
        arms.confirm(&1, a, 5);
        arms.confirm(&2, b, 6);
        arms.keep_only(6);
        assert!(!arms.is_armed(&1, 5));
        assert!(arms.is_armed(&2, 6));
    }

    /// Issue 38 (9), kept as a regression test: the watched read's reply
    /// came on session 7, then session 8 connected before the recipe read
    /// the id, so the watch (gone with session 7) is recorded as session
    /// 8's. Session 7's end fires it with `SessionExpired` (the client
    /// does so for every watch of an ended session: the wire suite's
    /// `client_declared_loss_fires_pending_watchers_once`; and for one
    /// whose reply came after the end: `register_watch`); the callback
    /// clears the entry and wakes the recipe, and its next read on session
    /// 8 sets the watch again.
    #[test]
    fn a_watch_taken_for_the_next_session_s_is_set_again_once_it_expires() {
        use latchkey_framework::EventType;
        use std::sync::atomic::{AtomicBool, AtomicI64};
        let arms = Arc::new(WatchArms::<()>::default());
        let session = Arc::new(AtomicI64::new(7));
        let woken = Arc::new(AtomicBool::new(false));
        let mut callback = None;
        let (next, wake) = (Arc::clone(&session), Arc::clone(&woken));
        let got: Result<()> = read_watched_on(
            &arms,
            &(),
            || session.load(Ordering::SeqCst),
            move || wake.store(true, Ordering::SeqCst),
            |watcher| {
                callback = Some(watcher);
                // The reply is in (the watch is session 7's)...
                next.store(8, Ordering::SeqCst); // ...and session 8 connects.
                Ok(())
            },
            || panic!("no watch was pending"),
        );
        got.unwrap();
        assert!(arms.is_armed(&(), 8), "recorded as session 8's meanwhile");
        (callback.take().expect("a watcher"))(WatchedEvent::new(EventType::SessionExpired, "/a"));
        assert!(woken.load(Ordering::SeqCst), "the recipe was not woken");
        assert!(!arms.is_armed(&(), 8), "the expired watch still counts");
        let mut set_again = false;
        let got: Result<()> = read_watched_on(
            &arms,
            &(),
            || session.load(Ordering::SeqCst),
            || {},
            |_watcher| {
                set_again = true;
                Ok(())
            },
            || Ok(()),
        );
        got.unwrap();
        assert!(set_again, "the next read on session 8 set no watch");
        assert!(arms.is_armed(&(), 8));
    }
}

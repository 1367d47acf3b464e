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
/// next session's.
///
/// A watch counts as pending on a session only if the client's session
/// id was the same before the watched request and after its reply: ids
/// are never reused, so the request ran on that session. The id read after
/// the reply alone may be the next session's (one that connected between
/// the reply and the read), which would take a watch that ended with the
/// old session for one of the new, and the watch would never be set again.
/// When the ids differ the watch stays unconfirmed and the next read sets
/// another: at worst one callback more, never one missing.
pub(crate) struct WatchArms<K> {
    next: AtomicU64,
    /// By key: the token, the session the watch is confirmed on (or
    /// [`UNCONFIRMED`]), and the session seen when it was armed.
    pending: Mutex<BTreeMap<K, (u64, i64, i64)>>,
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
                .is_some_and(|(_, s, _)| *s == session)
    }

    /// Records a watch about to be set on `key` by a request sent while
    /// the client's session id reads `session`; its token goes to the
    /// callback ([`WatchArms::fired`]) and to [`WatchArms::confirm`].
    pub(crate) fn arm(&self, key: &K, session: i64) -> u64 {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        self.pending
            .lock()
            .insert(key.clone(), (token, UNCONFIRMED, session));
        token
    }

    /// The watched request returned and the client's session id reads
    /// `session` now: the watch is pending on it if that is the session
    /// seen when it was armed, else (another session came meanwhile) it
    /// stays unconfirmed and is set again next time.
    pub(crate) fn confirm(&self, key: &K, token: u64, session: i64) {
        if let Some((t, s, armed_on)) = self.pending.lock().get_mut(key) {
            if *t == token && *armed_on == session {
                *s = session;
            }
        }
    }

    /// The watch fired (or its read failed): set it again next time.
    pub(crate) fn fired(&self, key: &K, token: u64) {
        let mut pending = self.pending.lock();
        if pending.get(key).is_some_and(|(t, _, _)| *t == token) {
            pending.remove(key);
        }
    }

    /// Forgets every watch not of `session` (their session ended).
    pub(crate) fn keep_only(&self, session: i64) {
        self.pending.lock().retain(|_, (_, s, _)| *s == session);
    }
}

/// A watched read through `arms`: `plain` if a watch of `key` is pending
/// on the client's session, else `watched` with a one-shot watcher that
/// clears its entry and runs `on_fire`. The watch counts as pending on the
/// session only if no other session came between the read and its reply
/// (see [`WatchArms`]); a failed read leaves none.
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
    let before = session();
    if arms.is_armed(key, before) {
        return plain();
    }
    let token = arms.arm(key, before);
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
        let old = arms.arm(&"a", 7);
        arms.confirm(&"a", old, 7);
        assert!(arms.is_armed(&"a", 7));
        assert!(!arms.is_armed(&"a", 8), "another session's watch");
        let new = arms.arm(&"a", 8);
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
        let (a, b) = (arms.arm(&1, 5), arms.arm(&2, 6));
        arms.confirm(&1, a, 5);
        arms.confirm(&2, b, 6);
        arms.keep_only(6);
        assert!(!arms.is_armed(&1, 5));
        assert!(arms.is_armed(&2, 6));
    }

    /// Issue 38 (9): the watched read's reply came on session 7, then
    /// session 8 connected before the recipe read the session id. The
    /// watch went with session 7; taken for one of session 8, it would
    /// never be set again there.
    #[test]
    fn a_watch_whose_session_changed_before_its_reply_was_seen_is_set_again() {
        use std::sync::atomic::AtomicI64;
        let arms = Arc::new(WatchArms::<()>::default());
        let session = Arc::new(AtomicI64::new(7));
        let (now, next) = (Arc::clone(&session), Arc::clone(&session));
        let got: Result<()> = read_watched_on(
            &arms,
            &(),
            move || now.load(Ordering::SeqCst),
            || {},
            move |_watcher| {
                // The reply is in (the watch is on session 7)...
                next.store(8, Ordering::SeqCst); // ...and session 8 connects.
                Ok(())
            },
            || panic!("no watch was pending"),
        );
        got.unwrap();
        assert!(
            !arms.is_armed(&(), 8),
            "session 7's watch taken for session 8's"
        );
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

//! What a holder is told about its hold: Curator's rule that `Suspended`
//! puts a lock in doubt and `Lost` ends it, per hold.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::{unbounded, Receiver};
use latchkey_framework::{Client, ConnectionState, ListenerHandle};

/// A change in a hold's standing, from [`crate::MutexGuard::events`],
/// [`crate::Lease::events`] and the like.
///
/// The events of one hold come in order: any number of
/// `InDoubt`/`Restored` pairs, then at most one `Lost`, after which the
/// hold never comes back. The channel disconnects when the hold ends
/// (released, returned or dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HoldEvent {
    /// The connection is suspended: the hold may be gone and someone else
    /// may get the lock soon. Pause work that needs exclusion.
    InDoubt,
    /// Reconnected within the same session: the hold is good again.
    Restored,
    /// The session is gone, and the hold with it: stop, release, and
    /// acquire again if the work must go on.
    Lost,
}

/// Whether a hold of session `owner` is lost: another session is current,
/// or the client is `Lost` (a rejected auth ends a session and keeps its
/// id until the next one starts, which may be never).
pub(crate) fn is_lost(client: &Client, owner: i64) -> bool {
    client.session_id() != owner || client.state() == Some(ConnectionState::Lost)
}

/// Whether a hold of session `owner` is in doubt: lost, or the client not
/// connected now.
pub(crate) fn in_doubt(client: &Client, owner: i64) -> bool {
    client.session_id() != owner || !client.state().is_some_and(ConnectionState::is_connected)
}

/// Whether the client's state now lets a leader go on leading by its
/// connection-state error policy: a state is known and is no error state
/// (connected; with `SessionConnectionStateErrorPolicy`, `Suspended` too).
pub(crate) fn policy_allows(client: &Client) -> bool {
    client.state().is_some_and(|s| !client.is_error_state(s))
}

/// Subscribes to the standing of a hold of session `owner`. The current
/// standing is sent first if it is not good; the listener goes when the
/// handle drops (with the hold), which disconnects the channel.
pub(crate) fn subscribe(client: &Client, owner: i64) -> (Receiver<HoldEvent>, ListenerHandle) {
    let (tx, rx) = unbounded();
    let lost = Arc::new(AtomicBool::new(false));
    // A weak handle: a listener must not keep the session open once the
    // user drops the client.
    let (listener_client, listener_lost, listener_tx) =
        (client.downgrade(), Arc::clone(&lost), tx.clone());
    let handle = client.add_listener(move |state| {
        if listener_lost.load(Ordering::Acquire) {
            return;
        }
        let event = match state {
            ConnectionState::Suspended => HoldEvent::InDoubt,
            ConnectionState::Lost => HoldEvent::Lost,
            _ if listener_client
                .upgrade()
                .is_none_or(|c| c.session_id() != owner) =>
            {
                HoldEvent::Lost
            }
            _ => HoldEvent::Restored,
        };
        if event == HoldEvent::Lost {
            listener_lost.store(true, Ordering::Release);
        }
        let _ = listener_tx.send(event);
    });
    // After registering, so a change from now on is not missed; one that
    // raced with this may be told twice (`InDoubt` again, or a `Restored`
    // after this `InDoubt`), which a reader handles as usual.
    // Lost now: the session changed, or it is the one just lost (the new
    // one not started yet), as the listener tells it.
    if is_lost(client, owner) {
        if !lost.swap(true, Ordering::AcqRel) {
            let _ = tx.send(HoldEvent::Lost);
        }
    } else if !client.state().is_some_and(ConnectionState::is_connected) {
        let _ = tx.send(HoldEvent::InDoubt);
    }
    (rx, handle)
}

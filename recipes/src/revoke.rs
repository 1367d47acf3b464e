//! Curator's lock revocation: another process asks a holder to let go by
//! writing `__REVOKE__` into the holder's lock node.

use std::sync::Arc;

use latchkey_framework::{Client, EventType, Result};

/// The data that asks a holder to release.
pub const REVOKE_MESSAGE: &[u8] = b"__REVOKE__";

pub(crate) type RevocationListener = Arc<dyn Fn() + Send + Sync>;

/// Asks the holder of a lock node to release it (Curator's `Revoker`).
///
/// The holder must have made its mutex revocable; its listener runs and
/// should arrange the release, typically by telling the holding thread.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// use latchkey_recipes::{InterProcessMutex, Revoker};
///
/// // The holder: asked to let go, it sets a flag its work loop checks.
/// let mutex = InterProcessMutex::new(client, "/locks/leader")?;
/// let asked = Arc::new(AtomicBool::new(false));
/// let flag = Arc::clone(&asked);
/// mutex.make_revocable(move || flag.store(true, Ordering::SeqCst));
/// let guard = mutex.lock()?;
///
/// // Anyone else: ask whoever holds the lock to release it.
/// if let Some(holder) = mutex.participant_nodes()?.first() {
///     Revoker::attempt_revoke(client, holder)?;
/// }
/// # drop(guard);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Revoker;

impl Revoker {
    /// Writes the revocation request into `node_path`. A node that is
    /// already gone is not an error.
    pub fn attempt_revoke(client: &Client, node_path: &str) -> Result<()> {
        match client.set_data(node_path, REVOKE_MESSAGE, None) {
            Err(e) if e.is(latchkey_framework::ErrorCode::NoNode) => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// Watches our lock node's data and calls `listener` once it reads
/// `__REVOKE__`; re-arms after other changes, stops when the node goes.
pub(crate) fn watch_for_revocation(client: &Client, path: &str, listener: RevocationListener) {
    // A weak handle: the watch must not keep the session open once the
    // user drops the client.
    let again = (client.downgrade(), path.to_owned(), Arc::clone(&listener));
    let watched = client.get_data_watch(path, move |ev| {
        if ev.event_type == EventType::NodeDataChanged || ev.event_type == EventType::NodeCreated {
            let (client, path, listener) = again;
            let Some(client) = client.upgrade() else {
                return;
            };
            // Re-read on a fresh thread: watchers should not block the client.
            std::thread::spawn(move || watch_for_revocation(&client, &path, listener));
        }
    });
    match watched {
        Ok((data, _)) if data == REVOKE_MESSAGE => listener(),
        Ok(_) => {}
        Err(e) => log::debug!("revocation watch on {path} not set: {e}"),
    }
}

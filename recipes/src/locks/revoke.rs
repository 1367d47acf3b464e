//! Curator's lock revocation: another process asks a holder to let go by
//! writing `__REVOKE__` into the holder's lock node.

use std::sync::Arc;

use latchkey_framework::{Client, EventType, Result};
use parking_lot::Mutex;

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
///
/// The request is a `set_data` without a version, retried after a lost
/// reply: it may be written twice, and the holder's listener then run
/// twice.
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

/// A mutex's revocability, Curator's `revocable` reference: the listener
/// that applies now, if any. Watches read it when their event comes, so a
/// release (which clears it) or a new `make_revocable` (which replaces it)
/// applies to them at once, as in Curator.
#[derive(Clone, Default)]
pub(crate) struct Revocable(Arc<Mutex<Option<RevocationListener>>>);

impl Revocable {
    pub(crate) fn set(&self, listener: Option<RevocationListener>) {
        *self.0.lock() = listener;
    }

    fn get(&self) -> Option<RevocationListener> {
        self.0.lock().clone()
    }

    /// Sets the revocation watch on a new lock node, before its wait, as
    /// Curator does, if the mutex is revocable. An error means the node
    /// cannot be revoked; the caller gives up the attempt.
    pub(crate) fn watch_new_node(&self, client: &Client, path: &str) -> Result<()> {
        if self.get().is_none() {
            return Ok(());
        }
        if self.watch_data(client, path)? == REVOKE_MESSAGE {
            // Revoked between the create and the watch.
            let this = self.clone();
            off_client_thread(move || this.run_listener());
        }
        Ok(())
    }

    fn run_listener(&self) {
        if let Some(listener) = self.get() {
            listener();
        }
    }

    /// The node's data changed: read it again (re-arming the watch) and
    /// run the listener if it asks for revocation. Runs off the client's
    /// threads, as the read waits for a reply.
    fn recheck(&self, client: &Client, path: &str) {
        if self.get().is_none() {
            return;
        }
        match self.watch_data(client, path) {
            Ok(data) if data == REVOKE_MESSAGE => self.run_listener(),
            Ok(_) => {}
            Err(e) if e.is(latchkey_framework::ErrorCode::NoNode) => {}
            Err(e) => log::warn!(
                "revocation watch on {path} could not be set again ({e}); \
                 this hold is no longer revocable"
            ),
        }
    }

    /// Reads the node's data with a watch that re-checks it on every change.
    fn watch_data(&self, client: &Client, path: &str) -> Result<Vec<u8>> {
        // A weak handle: the watch must not keep the session open once the
        // user drops the client.
        let again = (self.clone(), client.downgrade(), path.to_owned());
        let (data, _) = client.get_data_watch(path, move |ev| {
            let (this, client, path) = again;
            if ev.event_type == EventType::NodeDataChanged && this.get().is_some() {
                let Some(client) = client.upgrade() else {
                    return;
                };
                off_client_thread(move || this.recheck(&client, &path));
            }
        })?;
        Ok(data)
    }
}

/// Runs revocation work on a thread of its own: the listener never runs on
/// the client's threads or inside an acquire (Curator runs it on its
/// executor), and may block or call the client.
fn off_client_thread(job: impl FnOnce() + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("latchkey-revocation".into())
        .spawn(job);
    if let Err(e) = spawned {
        log::warn!("cannot start a revocation thread ({e}); a revocation request is lost");
    }
}

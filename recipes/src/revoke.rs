//! Curator's lock revocation: another process asks a holder to let go by
//! writing `__REVOKE__` into the holder's lock node.

use std::sync::atomic::{AtomicBool, Ordering};
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

/// A mutex's revocability (Curator's `RevocationSpec`): the listener, and
/// whether it still applies. Curator ends it with the release of a hold.
pub(crate) struct Revocation {
    listener: RevocationListener,
    ended: AtomicBool,
}

impl Revocation {
    pub(crate) fn new(listener: RevocationListener) -> Arc<Self> {
        Arc::new(Revocation {
            listener,
            ended: AtomicBool::new(false),
        })
    }

    /// Later revocation requests are ignored.
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::Release);
    }

    fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Sets the revocation watch on a new lock node, before its wait, as
    /// Curator does. An error means the node is not revocable; the caller
    /// gives up the attempt.
    pub(crate) fn watch(self: &Arc<Self>, client: &Client, path: &str) -> Result<()> {
        if watch_data(self, client, path)? == REVOKE_MESSAGE {
            // Revoked between the create and the watch.
            Arc::clone(self).run_listener();
        }
        Ok(())
    }

    /// Runs the listener on a thread of its own: never on the client's
    /// threads, never inside an acquire (Curator runs it on its executor).
    fn run_listener(self: Arc<Self>) {
        self.off_client_thread(move |this| {
            if !this.ended() {
                (this.listener)();
            }
        });
    }

    fn off_client_thread(self: Arc<Self>, job: impl FnOnce(Arc<Self>) + Send + 'static) {
        let spawned = std::thread::Builder::new()
            .name("latchkey-revocation".into())
            .spawn(move || job(self));
        if let Err(e) = spawned {
            log::warn!("cannot start a revocation thread: {e}; a revocation request is lost");
        }
    }

    /// The node's data changed: read it again (re-arming the watch) and
    /// run the listener if it asks for revocation.
    fn recheck(self: Arc<Self>, client: Client, path: String) {
        if self.ended() {
            return;
        }
        match watch_data(&self, &client, &path) {
            Ok(data) if data == REVOKE_MESSAGE && !self.ended() => (self.listener)(),
            Ok(_) => {}
            Err(e) if e.is(latchkey_framework::ErrorCode::NoNode) => {}
            Err(e) => log::warn!(
                "revocation watch on {path} could not be set again ({e}); \
                 this hold is no longer revocable"
            ),
        }
    }
}

/// Reads the node's data with a watch that re-checks it on every change.
fn watch_data(rev: &Arc<Revocation>, client: &Client, path: &str) -> Result<Vec<u8>> {
    let again = (Arc::clone(rev), client.clone(), path.to_owned());
    let (data, _) = client.get_data_watch(path, move |ev| {
        let (rev, client, path) = again;
        if ev.event_type == EventType::NodeDataChanged && !rev.ended() {
            // Off the client's watcher thread: the re-read waits for a reply.
            rev.off_client_thread(move |rev| rev.recheck(client, path));
        }
    })?;
    Ok(data)
}

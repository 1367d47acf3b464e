//! Work the client finishes on its own after a caller has moved on:
//! guaranteed deletes, and removal of protected nodes whose create was
//! given up (Curator's `FailedDeleteManager` and protected-node cleanup),
//! and removal of the ephemeral nodes of a session declared lost (which
//! Curator leaves to the server's expiry).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::deadline::instant_after;
use crate::error::{Error, ErrorCode, Result};
use crate::ops;
use crate::wire::WireSession;

/// What the background work needs from the client it works for.
pub(crate) trait Owner: Send + Sync {
    /// The current session, if any.
    fn session(&self) -> Option<WireSession>;
    fn is_closed(&self) -> bool;
    /// How long one attempt may wait for its reply.
    fn connection_timeout(&self) -> Duration;
}

/// A piece of cleanup, with server paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Job {
    /// Delete this node (NoNode counts as done).
    Delete { path: String, version: Option<i32> },
    /// Delete any child of `parent` whose name starts with `prefix`.
    DeleteProtected { parent: String, prefix: String },
    /// Delete this node only while it is still the ephemeral node of
    /// session `owner` (its `ephemeral_owner`), with the version read
    /// (NoNode, or a node of another owner, counts as done).
    DeleteOwned { path: String, owner: i64 },
}

/// Starts the thread that runs [`run`]; kept until it has worked once.
type Starter = Box<dyn Fn() -> std::io::Result<()> + Send>;

#[derive(Default)]
pub(crate) struct Background {
    jobs: Mutex<Queue>,
    wake: Condvar,
    /// Most clients never queue a job: the thread starts with the first.
    starter: Mutex<Option<Starter>>,
    /// Ephemeral nodes to delete once their session is declared lost.
    owned: Mutex<OwnedNodes>,
}

/// Nodes registered with [`Background::delete_when_lost`].
#[derive(Default)]
struct OwnedNodes {
    /// The sessions each registered node is registered for, by server
    /// path: a release forgets its node at once, whatever else is held.
    nodes: HashMap<String, Vec<i64>>,
    /// Sessions declared lost: a node of one registered late is deleted
    /// at once.
    lost: HashSet<i64>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Job>,
    /// Jobs taken out for the pass under way; still pending.
    in_flight: usize,
}

impl Background {
    pub(crate) fn push(&self, job: Job) {
        log::debug!("background cleanup queued: {job:?}");
        self.jobs.lock().waiting.push(job);
        self.wake.notify_all();
        self.start_thread();
    }

    /// Keeps `start` to start the cleanup thread with the first job (at
    /// once if one is queued already).
    pub(crate) fn start_with_first_job(
        &self,
        start: impl Fn() -> std::io::Result<()> + Send + 'static,
    ) {
        *self.starter.lock() = Some(Box::new(start));
        if self.pending() > 0 {
            self.start_thread();
        }
    }

    fn start_thread(&self) {
        let mut starter = self.starter.lock();
        let Some(start) = starter.as_ref() else {
            return;
        };
        match start() {
            Ok(()) => *starter = None,
            // The job waits; the next one tries the thread again.
            Err(e) => log::error!("cannot start the background cleanup thread: {e}"),
        }
    }

    /// Deletes the ephemeral node at `path` (a server path) if session
    /// `owner` is declared lost while the node is registered, and it is then
    /// still that session's node: once a session is connected, only if its
    /// `ephemeral_owner` is `owner`, with the version read.
    pub(crate) fn delete_when_lost(&self, path: String, owner: i64) {
        let mut owned = self.owned.lock();
        if owned.lost.contains(&owner) {
            drop(owned);
            self.push(Job::DeleteOwned { path, owner });
        } else {
            let owners = owned.nodes.entry(path).or_default();
            if !owners.contains(&owner) {
                owners.push(owner);
            }
        }
    }

    /// Forgets the node at `path` (a server path) registered with
    /// [`Background::delete_when_lost`], whatever its owner.
    pub(crate) fn forget_owned(&self, path: &str) {
        self.owned.lock().nodes.remove(path);
    }

    /// Session `owner` was declared lost: queues the deletion of its
    /// registered nodes.
    pub(crate) fn session_lost(&self, owner: i64) {
        let jobs: Vec<Job> = {
            let mut owned = self.owned.lock();
            owned.lost.insert(owner);
            let mut jobs = Vec::new();
            owned.nodes.retain(|path, owners| {
                if let Some(i) = owners.iter().position(|o| *o == owner) {
                    owners.swap_remove(i);
                    jobs.push(Job::DeleteOwned {
                        path: path.clone(),
                        owner,
                    });
                }
                !owners.is_empty()
            });
            jobs
        };
        for job in jobs {
            self.push(job);
        }
    }

    pub(crate) fn wake(&self) {
        self.wake.notify_all();
    }

    pub(crate) fn pending(&self) -> usize {
        let q = self.jobs.lock();
        q.waiting.len() + q.in_flight
    }
}

/// Runs until the client goes away; tries each job whenever connected.
/// Holds the client only while working, never while asleep, so that
/// dropping the last handle closes the client at once.
pub(crate) fn run<O: Owner>(weak: Weak<O>, background: Arc<Background>) {
    let mut pause = Duration::from_millis(50);
    loop {
        {
            let Some(owner) = weak.upgrade() else { return };
            if owner.is_closed() {
                return;
            }
            let jobs = {
                let mut q = background.jobs.lock();
                q.in_flight = q.waiting.len();
                std::mem::take(&mut q.waiting)
            };
            let mut failed = Vec::new();
            for job in jobs {
                match attempt(&*owner, &job) {
                    Ok(()) => {}
                    // As Curator, a connection problem is worth another
                    // try; so is a refused login, which a later session
                    // (retried by the policy, or with fixed credentials)
                    // may get past.
                    Err(e) if e.is_retryable() || matches!(e, Error::AuthFailed { .. }) => {
                        log::debug!("background cleanup {job:?} failed, will retry: {e}");
                        failed.push(job);
                    }
                    Err(e) => log::warn!("background cleanup {job:?} given up: {e}"),
                }
            }
            let retrying = !failed.is_empty();
            {
                let mut q = background.jobs.lock();
                q.waiting.extend(failed);
                q.in_flight = 0;
            }
            if retrying {
                pause = (pause * 2).min(Duration::from_secs(1));
            } else {
                pause = Duration::from_millis(50);
            }
        }
        let mut jobs = background.jobs.lock();
        if weak.strong_count() == 0 {
            return;
        }
        let wait = if jobs.waiting.is_empty() {
            Duration::from_millis(250)
        } else {
            pause
        };
        let _ = background.wake.wait_for(&mut jobs, wait);
    }
}

fn attempt(owner: &dyn Owner, job: &Job) -> Result<()> {
    let Some(session) = owner.session() else {
        return Ok(());
    };
    let deadline = instant_after(owner.connection_timeout());
    if !session.wait_connected(Instant::now()) {
        return Err(Error::from_code(ErrorCode::ConnectionLoss));
    }
    match job {
        Job::Delete { path, version } => {
            match ops::wire_delete(&session, path, *version, deadline) {
                Err(e) if e.is(ErrorCode::NoNode) => Ok(()),
                other => other,
            }
        }
        Job::DeleteProtected { parent, prefix } => {
            let children = match ops::wire_children(&session, parent, None, deadline) {
                Err(e) if e.is(ErrorCode::NoNode) => return Ok(()),
                other => other?,
            };
            for child in children.iter().filter(|c| c.starts_with(prefix.as_str())) {
                let path = crate::paths::make_path(parent, child);
                match ops::wire_delete(&session, &path, None, deadline) {
                    Err(e) if e.is(ErrorCode::NoNode) => {}
                    other => other?,
                }
            }
            Ok(())
        }
        Job::DeleteOwned { path, owner } => loop {
            let Some(stat) = ops::wire_exists(&session, path, None, deadline)? else {
                return Ok(());
            };
            if stat.ephemeral_owner != *owner {
                log::debug!(
                    "{path} is no longer the node of session {owner:#x} \
                     (owner {:#x}): kept",
                    stat.ephemeral_owner
                );
                return Ok(());
            }
            match ops::wire_delete(&session, path, Some(stat.version), deadline) {
                Err(e) if e.is(ErrorCode::NoNode) => return Ok(()),
                // Changed since it was read: read it again.
                Err(e) if e.is(ErrorCode::BadVersion) => {}
                other => {
                    if other.is_ok() {
                        log::info!("deleted {path}, left by lost session {owner:#x}");
                    }
                    return other;
                }
            }
        },
    }
}

//! Work the client finishes on its own after a caller has moved on:
//! guaranteed deletes, and removal of protected nodes whose create was
//! given up (Curator's `FailedDeleteManager` and protected-node cleanup).

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::client::Shared;
use crate::error::{ErrorCode, Result};
use crate::ops;

/// A piece of cleanup, with server paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Job {
    /// Delete this node (NoNode counts as done).
    Delete { path: String, version: Option<i32> },
    /// Delete any child of `parent` whose name starts with `prefix`.
    DeleteProtected { parent: String, prefix: String },
}

#[derive(Default)]
pub(crate) struct Background {
    jobs: Mutex<Vec<Job>>,
    wake: Condvar,
}

impl Background {
    pub(crate) fn push(&self, job: Job) {
        log::debug!("background cleanup queued: {job:?}");
        self.jobs.lock().push(job);
        self.wake.notify_all();
    }

    pub(crate) fn wake(&self) {
        self.wake.notify_all();
    }

    pub(crate) fn pending(&self) -> usize {
        self.jobs.lock().len()
    }
}

/// Runs until the client goes away; tries each job whenever connected.
pub(crate) fn run(weak: Weak<Shared>) {
    let mut pause = Duration::from_millis(50);
    loop {
        let Some(shared) = weak.upgrade() else { return };
        if shared.closed_flag().load(Ordering::Acquire) {
            return;
        }
        let jobs = std::mem::take(&mut *shared.background.jobs.lock());
        let mut failed = Vec::new();
        for job in jobs {
            if let Err(e) = attempt(&shared, &job) {
                log::debug!("background cleanup {job:?} failed: {e}");
                failed.push(job);
            }
        }
        let any_failed = !failed.is_empty();
        if any_failed {
            shared.background.jobs.lock().extend(failed);
            pause = (pause * 2).min(Duration::from_secs(1));
        } else {
            pause = Duration::from_millis(50);
        }
        let mut jobs = shared.background.jobs.lock();
        let wait = if jobs.is_empty() {
            Duration::from_millis(250)
        } else {
            pause
        };
        // Holding only the job lock while asleep; the client may drop meanwhile.
        let bg = &shared.background;
        let _ = bg.wake.wait_for(&mut jobs, wait);
        drop(jobs);
        drop(shared);
    }
}

fn attempt(shared: &Shared, job: &Job) -> Result<()> {
    let Some(session) = shared.session() else {
        return Ok(());
    };
    let deadline = Instant::now() + shared.cfg.wire.connection_timeout;
    if !session.wait_connected(Instant::now()) {
        return Err(crate::Error::from_code(ErrorCode::ConnectionLoss));
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
    }
}

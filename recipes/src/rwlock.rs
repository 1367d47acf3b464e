//! `InterProcessReadWriteLock`: Curator's read-write lock, two reentrant
//! mutexes whose nodes (`__READ__`, `__WRIT__`) queue under one path.

use std::sync::Arc;

use latchkey_framework::{Client, Result};

use crate::lock_internals::{our_index, Decision, LockDriver, StandardDriver};
use crate::mutex::InterProcessMutex;

/// Curator's lock name for readers.
pub const READ_LOCK_NAME: &str = "__READ__";
/// Curator's lock name for writers.
pub const WRITE_LOCK_NAME: &str = "__WRIT__";

/// A distributed read-write lock, wire-compatible with Curator's.
///
/// A writer waits for the node just before it; a reader holds the lock when
/// no writer queues before it (or when its own thread holds the write lock)
/// and otherwise waits for the nearest earlier writer. Downgrading (write,
/// then read on the same thread, then release the write) works as in
/// Curator 5.5+: the read node takes the write node's sequence, so writers
/// that queued meanwhile still wait for the read to go. Upgrading (read,
/// then write) never succeeds: the write waits behind its own read.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::InterProcessReadWriteLock;
///
/// let rw = InterProcessReadWriteLock::new(client, "/locks/config")?;
/// {
///     let _read = rw.read_lock().lock()?;
///     // ... readers may overlap ...
/// }
/// let _write = rw.write_lock().lock()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct InterProcessReadWriteLock {
    read: InterProcessMutex,
    write: InterProcessMutex,
}

impl InterProcessReadWriteLock {
    /// A read-write lock on `path`.
    pub fn new(client: &Client, path: &str) -> Result<Self> {
        Self::with_lock_data(client, path, &[])
    }

    /// Like [`InterProcessReadWriteLock::new`], storing `data` in each node.
    pub fn with_lock_data(client: &Client, path: &str, data: &[u8]) -> Result<Self> {
        let names = [READ_LOCK_NAME, WRITE_LOCK_NAME];
        let write = InterProcessMutex::with_driver(
            client,
            path,
            WRITE_LOCK_NAME,
            &names,
            1,
            Arc::new(StandardDriver),
            data,
        )?;
        let read = InterProcessMutex::with_driver(
            client,
            path,
            READ_LOCK_NAME,
            &names,
            usize::MAX,
            Arc::new(ReadDriver {
                write: write.clone(),
            }),
            data,
        )?;
        Ok(InterProcessReadWriteLock { read, write })
    }

    /// The read side: a reentrant mutex that readers share.
    pub fn read_lock(&self) -> &InterProcessMutex {
        &self.read
    }

    /// The write side: a reentrant mutex that excludes everyone.
    pub fn write_lock(&self) -> &InterProcessMutex {
        &self.write
    }
}

/// Readers hold the lock unless a writer queues before them.
struct ReadDriver {
    write: InterProcessMutex,
}

impl ReadDriver {
    /// Whether the calling thread holds the write lock, and still does: a
    /// hold lost with its session is no reason to read past the writer
    /// that may hold now (Curator asks only the first).
    fn holds_the_write_lock(&self) -> bool {
        self.write.is_owned_by_current_thread() && !self.write.is_lost()
    }
}

impl LockDriver for ReadDriver {
    /// Under our own write lock, Curator 5.5+'s downgrade: the read node
    /// takes the write node's sequence, so it sorts with the write node and
    /// ahead of every writer that queued meanwhile (CURATOR-621).
    fn sorting_sequence(&self) -> Option<String> {
        if !self.holds_the_write_lock() {
            return None;
        }
        let write_node = self.write.lock_node_path()?;
        let at = write_node.rfind(WRITE_LOCK_NAME)? + WRITE_LOCK_NAME.len();
        Some(write_node[at..].to_owned())
    }

    fn decide(&self, children: &[String], ours: &str, _max: usize) -> Result<Decision> {
        let index = our_index(children, ours)?;
        if self.holds_the_write_lock() {
            return Ok(Decision::Acquired);
        }
        let nearest_writer = children[..index]
            .iter()
            .rfind(|c| c.contains(WRITE_LOCK_NAME));
        match nearest_writer {
            None => Ok(Decision::Acquired),
            Some(writer) => Ok(Decision::WaitFor {
                node: writer.clone(),
            }),
        }
    }
}

//! `InterProcessReadWriteLock`: Curator's read-write lock, two reentrant
//! mutexes whose nodes (`__READ__`, `__WRIT__`) queue under one path.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;
use latchkey_framework::{Client, Result};

use crate::hold::HoldEvent;
use crate::locks::lock_internals::{our_index, Decision, LockDriver, StandardDriver};
use crate::locks::mutex::{InterProcessMutex, MutexGuard};

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
/// As with `std::sync::RwLock`, [`read`](Self::read) and
/// [`write`](Self::write) return guards that release when dropped; the
/// `try_` forms return `None` instead of waiting (or waiting longer than
/// asked). Both sides are reentrant per thread, and the guards, like
/// [`MutexGuard`], stay on the thread that took them.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_recipes::InterProcessReadWriteLock;
///
/// let rw = InterProcessReadWriteLock::new(client, "/locks/config")?;
/// {
///     let read = rw.read()?;
///     // ... readers may overlap; check read.is_in_doubt() before relying on it ...
/// #   let _ = read;
/// }
/// {
///     let _write = rw.write()?; // alone
/// }
/// match rw.try_write_for(Duration::from_secs(2))? {
///     Some(_write) => { /* got it within two seconds */ }
///     None => { /* readers or another writer kept it */ }
/// }
/// # Ok(()) }
/// ```
///
/// Downgrading: write, then read on the same thread, then drop the write
/// guard. Writers that queued meanwhile wait for the read to go too.
///
/// ```no_run
/// # fn f(rw: &latchkey_recipes::InterProcessReadWriteLock) -> latchkey_framework::Result<()> {
/// let write = rw.write()?;
/// // ... change the configuration ...
/// let read = rw.read()?; // granted at once: this thread holds the write lock
/// drop(write); // other readers may join now; writers still wait
/// // ... go on reading what was just written ...
/// drop(read);
/// # Ok(()) }
/// ```
///
/// The other way round (read, then write) waits behind its own read, so
/// only a timed attempt makes sense there, and it gives up:
///
/// ```no_run
/// # fn f(rw: &latchkey_recipes::InterProcessReadWriteLock) -> latchkey_framework::Result<()> {
/// # use std::time::Duration;
/// let read = rw.read()?;
/// assert!(rw.try_write_for(Duration::from_millis(100))?.is_none());
/// # drop(read); Ok(()) }
/// ```
///
/// # In-doubt writes and close
///
/// Each side is an [`InterProcessMutex`] and writes as one does: protected
/// creates, found again after a lost reply (the downgrade's read node,
/// named with the write node's sequence, too), and releases that hand
/// their delete to the client's background after at most
/// [`HANDOVER_AFTER`](latchkey_framework::HANDOVER_AFTER). There is no
/// `close`; a guard releases when dropped, and a hold taken without a
/// guard and never released stays until its session ends.
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
            Arc::new(ReadDriver::new(write.clone())),
            data,
        )?;
        Ok(InterProcessReadWriteLock { read, write })
    }

    /// The read side: a reentrant mutex that readers share (Curator's
    /// `readLock()`). [`read`](Self::read) and its `try_` forms are the
    /// same lock with a [`ReadGuard`].
    pub fn read_lock(&self) -> &InterProcessMutex {
        &self.read
    }

    /// The write side: a reentrant mutex that excludes everyone (Curator's
    /// `writeLock()`). [`write`](Self::write) and its `try_` forms are the
    /// same lock with a [`WriteGuard`].
    pub fn write_lock(&self) -> &InterProcessMutex {
        &self.write
    }

    /// Waits as long as it takes to hold the read lock: until no writer
    /// holds it or queues before us (or at once, if this thread holds the
    /// write lock). The lock is released when the guard drops.
    pub fn read(&self) -> Result<ReadGuard<'_>> {
        Ok(ReadGuard(self.read.lock()?))
    }

    /// The read lock if it needs no waiting, else `None` (no node is left
    /// behind). Still one round trip to ZooKeeper.
    pub fn try_read(&self) -> Result<Option<ReadGuard<'_>>> {
        Ok(self.read.try_lock()?.map(ReadGuard))
    }

    /// The read lock within `timeout`, else `None` (no node is left
    /// behind). The timeout is a deadline as in
    /// [`InterProcessMutex::acquire_timeout`]; `Duration::MAX` waits as
    /// long as it takes.
    pub fn try_read_for(&self, timeout: Duration) -> Result<Option<ReadGuard<'_>>> {
        Ok(self.read.try_lock_for(timeout)?.map(ReadGuard))
    }

    /// Waits as long as it takes to hold the write lock: until every node
    /// queued before ours, read or write, has gone. A thread holding the
    /// read lock would wait for itself here; use a timed attempt there.
    pub fn write(&self) -> Result<WriteGuard<'_>> {
        Ok(WriteGuard(self.write.lock()?))
    }

    /// The write lock if it needs no waiting, else `None` (no node is left
    /// behind). Still one round trip to ZooKeeper.
    pub fn try_write(&self) -> Result<Option<WriteGuard<'_>>> {
        Ok(self.write.try_lock()?.map(WriteGuard))
    }

    /// The write lock within `timeout`, else `None` (no node is left
    /// behind). The timeout is a deadline as in
    /// [`InterProcessMutex::acquire_timeout`]; `Duration::MAX` waits as
    /// long as it takes.
    pub fn try_write_for(&self, timeout: Duration) -> Result<Option<WriteGuard<'_>>> {
        Ok(self.write.try_lock_for(timeout)?.map(WriteGuard))
    }

    /// The lock path.
    pub fn path(&self) -> &str {
        self.write.path()
    }
}

/// Generates the methods both guards share, which tell the standing of the
/// hold as [`MutexGuard`]'s do.
macro_rules! hold_methods {
    () => {
        /// Whether the hold was lost with the session. Work that needs the
        /// lock should stop.
        pub fn is_lost(&self) -> bool {
            self.0.is_lost()
        }

        /// Whether the hold is in doubt: lost, or the connection suspended
        /// (see [`MutexGuard::is_in_doubt`]). Check it right before each
        /// step that needs the lock.
        pub fn is_in_doubt(&self) -> bool {
            self.0.is_in_doubt()
        }

        /// The hold's standing as it changes (see [`MutexGuard::events`]):
        /// [`HoldEvent::InDoubt`], [`HoldEvent::Restored`],
        /// [`HoldEvent::Lost`]. The channel disconnects when the hold ends.
        pub fn events(&self) -> Receiver<HoldEvent> {
            self.0.events()
        }

        /// The fencing token of this hold: the czxid of its lock node,
        /// larger for every later hold of this lock path.
        pub fn fencing_token(&self) -> i64 {
            self.0.fencing_token()
        }

        /// The lock node's path.
        pub fn node_path(&self) -> String {
            self.0.node_path()
        }
    };
}

/// Holds the read side of an [`InterProcessReadWriteLock`] until dropped.
///
/// Not `Send`, like [`MutexGuard`]: the thread that took the lock releases
/// it.
///
/// ```compile_fail
/// # fn f(rw: &latchkey_recipes::InterProcessReadWriteLock) -> latchkey_framework::Result<()> {
/// let guard = rw.read()?;
/// std::thread::scope(|s| {
///     s.spawn(move || drop(guard));
/// });
/// # Ok(()) }
/// ```
#[must_use = "the read lock is released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct ReadGuard<'a>(MutexGuard<'a>);

impl ReadGuard<'_> {
    hold_methods!();
}

/// Holds the write side of an [`InterProcessReadWriteLock`] until dropped.
///
/// Not `Send`, like [`MutexGuard`]: the thread that took the lock releases
/// it.
///
/// ```compile_fail
/// # fn f(rw: &latchkey_recipes::InterProcessReadWriteLock) -> latchkey_framework::Result<()> {
/// let guard = rw.write()?;
/// std::thread::scope(|s| {
///     s.spawn(move || drop(guard));
/// });
/// # Ok(()) }
/// ```
///
/// Forgetting to bind it releases at once, which the compiler points out:
///
/// ```compile_fail
/// # #![deny(unused_must_use)]
/// # fn f(rw: &latchkey_recipes::InterProcessReadWriteLock) -> latchkey_framework::Result<()> {
/// rw.write()?;
/// # Ok(()) }
/// ```
#[must_use = "the write lock is released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct WriteGuard<'a>(MutexGuard<'a>);

impl WriteGuard<'_> {
    hold_methods!();
}

/// The calling thread's write lock, as the read side sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteHold {
    /// The write node's path.
    pub path: String,
    /// Whether the hold was lost with its session.
    pub lost: bool,
}

impl WriteHold {
    /// A hold of the write node at `path`.
    pub fn new(path: impl Into<String>, lost: bool) -> WriteHold {
        WriteHold {
            path: path.into(),
            lost,
        }
    }
}

/// Where the read side learns whether the calling thread holds the write
/// lock: the read-write lock's write mutex, or a model of it.
pub trait WriteSide: Send + Sync {
    /// The write lock the calling thread holds, if any.
    fn write_hold(&self) -> Option<WriteHold>;
}

impl WriteSide for InterProcessMutex {
    fn write_hold(&self) -> Option<WriteHold> {
        Some(WriteHold {
            path: self.lock_node_path()?,
            lost: self.is_lost(),
        })
    }
}

/// Readers hold the lock unless a writer queues before them.
pub struct ReadDriver<W = InterProcessMutex> {
    write: W,
}

impl<W: WriteSide> ReadDriver<W> {
    /// The read side's driver, asking `write` about the write lock.
    pub fn new(write: W) -> Self {
        ReadDriver { write }
    }

    /// The write node of the calling thread, if it holds the write lock and
    /// still does: a hold lost with its session is no reason to read past
    /// the writer that may hold now (Curator asks only the first).
    fn live_write_node(&self) -> Option<String> {
        self.write
            .write_hold()
            .filter(|hold| !hold.lost)
            .map(|hold| hold.path)
    }
}

impl<W: WriteSide> LockDriver for ReadDriver<W> {
    /// Under our own write lock, Curator 5.5+'s downgrade: the read node
    /// takes the write node's sequence, so it sorts with the write node and
    /// ahead of every writer that queued meanwhile (CURATOR-621).
    fn sorting_sequence(&self) -> Option<String> {
        let write_node = self.live_write_node()?;
        let at = write_node.rfind(WRITE_LOCK_NAME)? + WRITE_LOCK_NAME.len();
        Some(write_node[at..].to_owned())
    }

    fn decide(&self, children: &[String], ours: &str, _max: usize) -> Result<Decision> {
        let index = our_index(children, ours)?;
        if self.live_write_node().is_some() {
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

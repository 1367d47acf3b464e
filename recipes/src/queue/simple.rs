//! Curator's `SimpleDistributedQueue` (itself a drop-in for ZooKeeper's
//! own queue recipe): each item is a persistent sequential node `qn-…`
//! under the queue path, taken by whoever reads and deletes it first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use latchkey_framework::{Client, CreateMode, Error, ErrorCode, Result};

use crate::armed::waking;
use crate::fence::{self, Fence, Fenced};
use crate::locks::lock_internals::{bounded, deadline_after, validate_recipe_path, Signal};

/// The prefix of every item node (Curator's and ZooKeeper's).
pub const SIMPLE_QUEUE_PREFIX: &str = "qn-";

/// A plain FIFO queue of byte items (Curator's `SimpleDistributedQueue`):
/// [`offer`](Self::offer) adds an item, [`take`](Self::take) and
/// [`poll_timeout`](Self::poll_timeout) block until one is there. Every
/// item is taken by at most one taker (the one whose delete succeeds); an
/// item whose taker dies after the delete, or whose delete's answer is
/// lost with the connection (the retried delete finds it gone, and the
/// taker moves on to the next item), is lost, as in Curator. Items are nodes
/// `<path>/qn-<sequence>`, so Curator's and ZooKeeper's Java queues on the
/// same path share the items.
///
/// The queue node is created on first use as a container node (with
/// container parents), and again if the server removed it while empty.
///
/// In-doubt writes: an [`offer`](Self::offer) is a sequential create,
/// retried after a lost reply, so an offer whose first attempt was applied
/// leaves its item in the queue twice (a [fenced](Self::fenced) offer
/// too, and one that then finds the hold gone is `ConnectionLoss`, the
/// item maybe in the queue); an error after the request was sent leaves it
/// unknown whether the item is there. A take's delete is retried too, with
/// the loss described above. There is nothing to close: the queue holds
/// no thread, and the children watch of a wait that times out stays until
/// the children change, waking nobody.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_recipes::SimpleDistributedQueue;
///
/// let queue = SimpleDistributedQueue::new(client, "/queues/mail")?;
/// queue.offer(b"to: ops")?;
/// if let Some(item) = queue.poll_timeout(Duration::from_secs(5))? {
///     println!("{}", String::from_utf8_lossy(&item));
/// }
/// # Ok(()) }
/// ```
pub struct SimpleDistributedQueue {
    client: Client,
    path: String,
    /// The queue node is known to exist (set once created or seen).
    ensured: AtomicBool,
}

impl SimpleDistributedQueue {
    /// The queue at `path` (nothing is created yet).
    pub fn new(client: &Client, path: &str) -> Result<SimpleDistributedQueue> {
        validate_recipe_path(client, path)?;
        Ok(SimpleDistributedQueue {
            client: client.clone(),
            path: path.to_owned(),
            ensured: AtomicBool::new(false),
        })
    }

    /// The queue's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Adds `data` at the tail; returns the item node's path once it is
    /// in ZooKeeper.
    pub fn offer(&self, data: &[u8]) -> Result<String> {
        let created = self
            .client
            .create()
            .creating_parent_containers_if_needed()
            .mode(CreateMode::PersistentSequential)
            .for_path(&format!("{}/{SIMPLE_QUEUE_PREFIX}", self.path), data)?;
        self.ensured.store(true, Ordering::Release);
        Ok(created)
    }

    /// This queue with its offers fenced by `fence`, a hold such as a
    /// [`Leadership`](crate::Leadership) or a
    /// [`MutexGuard`](crate::MutexGuard): an offer through it adds its item
    /// only while the hold stands, in one transaction with a check of the
    /// hold's node, and fails with [`Error::FenceGone`], adding nothing,
    /// once the hold has ended (see [`crate::Fence`]).
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client, guard: &latchkey_recipes::MutexGuard<'_>) -> latchkey_framework::Result<()> {
    /// use latchkey_recipes::SimpleDistributedQueue;
    ///
    /// let jobs = SimpleDistributedQueue::new(client, "/queues/jobs")?;
    /// jobs.fenced(guard).offer(b"job 7")?; // only while the guard's lock is held
    /// # Ok(()) }
    /// ```
    pub fn fenced<'a>(&'a self, fence: &'a dyn Fence) -> Fenced<'a, SimpleDistributedQueue> {
        Fenced::new(self, fence)
    }

    /// The head's data, leaving it in the queue; `None` if empty.
    pub fn peek(&self) -> Result<Option<Vec<u8>>> {
        self.head(&self.client, false, None)
    }

    /// The head's data, leaving it in the queue; an error naming the
    /// queue if it is empty (Curator's `element()` throws
    /// `NoSuchElementException`).
    pub fn element(&self) -> Result<Vec<u8>> {
        self.peek()?.ok_or_else(|| self.empty())
    }

    /// Removes the head and returns its data; `None` if empty.
    pub fn poll(&self) -> Result<Option<Vec<u8>>> {
        self.head(&self.client, true, None)
    }

    /// Removes the head and returns its data; an error naming the queue
    /// if it is empty (Curator's `remove()`).
    pub fn remove(&self) -> Result<Vec<u8>> {
        self.poll()?.ok_or_else(|| self.empty())
    }

    /// Removes the head and returns its data, waiting for one as long as
    /// it takes (Curator's `take()`). Ends with an error if the client is
    /// closed or its retry policy gives up on a request.
    pub fn take(&self) -> Result<Vec<u8>> {
        loop {
            // Each round waits at most a day, so a lost wake-up cannot
            // block for ever; the loop then simply looks again.
            if let Some(item) = self.poll_timeout(Duration::from_secs(86_400))? {
                return Ok(item);
            }
        }
    }

    /// Removes the head and returns its data, waiting up to `timeout` for
    /// one (Curator's `poll(timeout, unit)`); `None` if none came. A zero
    /// timeout looks once; `Duration::MAX` waits as [`take`](Self::take).
    pub fn poll_timeout(&self, timeout: Duration) -> Result<Option<Vec<u8>>> {
        let deadline = deadline_after(timeout);
        let client = bounded(&self.client, deadline);
        let signal = Arc::new(Signal::default());
        let on_state = Arc::downgrade(&signal);
        // A new session or a reconnection: look again (the watch may be gone).
        let _waker = self.client.add_waker(move || {
            if let Some(s) = on_state.upgrade() {
                s.notify();
            }
        });
        loop {
            let epoch = signal.epoch();
            // One watch per round: a round that finds nothing waits for it.
            if let Some(item) = self.head(&client, true, Some(&signal))? {
                return Ok(Some(item));
            }
            signal.wait(epoch, deadline);
            // Not another look past the deadline: `client`'s requests would
            // be refused unsent (an item that came meanwhile stays queued).
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
        }
    }

    /// The error of `element` and `remove` on an empty queue.
    fn empty(&self) -> Error {
        Error::IllegalState(format!("the queue {} is empty", self.path))
    }

    /// Creates the queue node (a container) unless known to exist.
    fn ensure(&self, client: &Client) -> Result<()> {
        if self.ensured.load(Ordering::Acquire) {
            return Ok(());
        }
        match client
            .create()
            .creating_parent_containers_if_needed()
            .mode(CreateMode::Container)
            .for_path(&self.path, &[])
        {
            Ok(_) => {}
            Err(e) if e.is(ErrorCode::NodeExists) => {}
            Err(e) => return Err(e),
        }
        self.ensured.store(true, Ordering::Release);
        Ok(())
    }

    /// Reads (and with `remove_it` deletes) the first item node, leaving
    /// a watch on the children that wakes `watch` if given. The queue node is recreated if
    /// it went (the server removes an empty container), as Curator does
    /// since CURATOR-514 (testHangFromContainerLoss).
    fn head(
        &self,
        client: &Client,
        remove_it: bool,
        watch: Option<&Arc<Signal>>,
    ) -> Result<Option<Vec<u8>>> {
        for _ in 0..3 {
            self.ensure(client)?;
            let listed = match watch {
                Some(signal) => {
                    let wake = waking(signal);
                    client.get_children_watch(&self.path, move |_| wake())
                }
                None => client.get_children(&self.path),
            };
            let mut nodes = match listed {
                Ok(nodes) => nodes,
                Err(e) if e.is(ErrorCode::NoNode) => {
                    // The container lapsed: create it again and look again.
                    self.ensured.store(false, Ordering::Release);
                    continue;
                }
                Err(e) => return Err(e),
            };
            nodes.sort();
            for node in nodes {
                if !node.starts_with(SIMPLE_QUEUE_PREFIX) {
                    log::warn!("foreign node in queue {}: {node}", self.path);
                    continue;
                }
                let item = format!("{}/{node}", self.path);
                let data = match client.get_data(&item) {
                    Ok((data, _)) => data,
                    Err(e) if e.is(ErrorCode::NoNode) => continue, // taken by another
                    Err(e) => return Err(e),
                };
                if remove_it {
                    match client.delete().for_path(&item) {
                        Ok(()) => {}
                        Err(e) if e.is(ErrorCode::NoNode) => continue, // taken by another
                        Err(e) => return Err(e),
                    }
                }
                return Ok(Some(data));
            }
            return Ok(None);
        }
        Err(Error::IllegalState(format!(
            "the queue node {} keeps disappearing",
            self.path
        )))
    }
}

impl std::fmt::Debug for SimpleDistributedQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimpleDistributedQueue")
            .field("path", &self.path)
            .finish()
    }
}

impl Fenced<'_, SimpleDistributedQueue> {
    /// [`SimpleDistributedQueue::offer`], only while the fence stands.
    pub fn offer(&self, data: &[u8]) -> Result<String> {
        let queue = self.recipe;
        let item = format!("{}/{SIMPLE_QUEUE_PREFIX}", queue.path);
        let fence = fence::fence_for(&queue.client, self.fence, "create", &item)?;
        let create = || {
            queue
                .client
                .create_fenced(&fence, &item, data, CreateMode::PersistentSequential)
        };
        let created = match create() {
            // The queue node is not there yet: made as an unfenced
            // container (it holds nothing), then the item under the fence.
            Err(e) if e.is(ErrorCode::NoNode) && !matches!(e, Error::FenceGone { .. }) => {
                match queue
                    .client
                    .create()
                    .creating_parent_containers_if_needed()
                    .mode(CreateMode::Container)
                    .for_path(&queue.path, &[])
                {
                    Err(e) if !e.is(ErrorCode::NodeExists) => return Err(e),
                    _ => create()?,
                }
            }
            other => other?,
        };
        queue.ensured.store(true, Ordering::Release);
        Ok(created)
    }
}

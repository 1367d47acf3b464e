//! Curator's `DistributedQueue`: items framed by
//! [`ItemSerializer`](crate::ItemSerializer) in persistent sequential nodes
//! `queue-…` under the queue path, put by producers on their own threads
//! and taken in order by the queue's consumer thread ([`super::consumer`]).
//! The priority, delay and id queues ([`super::variants`]) are this queue
//! with other node names; [`super::builder`] makes them all.
//!
//! Producers and the consumer wake on one [`Signal`]: the watch on the
//! queue's children, a lock node going, and the client's state changes.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use latchkey_framework::{
    CancelToken, Client, CreateMode, Error, ErrorCode, ListenerHandle, Result,
};
use parking_lot::{Condvar, Mutex};

use super::builder::{Consumer, ErrorMode, QueueBuilder};
use super::consumer::{lock_mark, taken_by_another};
use super::names::{Kind, QUEUE_ITEM_PREFIX};
use super::serializer::{ItemSerializer, QueueSerializer};
use crate::armed::{read_watched, waking, WatchArms};
use crate::fence::{self, Fence, Fenced};
use crate::locks::lock_internals::{bounded, deadline_after, delete_if_lost, Signal};

pub(super) const LATENT: u8 = 0;
pub(super) const STARTED: u8 = 1;
pub(super) const STOPPED: u8 = 2;

/// The queue's shared state; each public queue wraps one.
pub(crate) struct Core<T> {
    /// Ends the queue's requests at once on close.
    pub(super) client: Client,
    /// For what must be finished after an item was consumed (removing it
    /// and its lock node), which a close must not cut short.
    pub(super) finishing: Client,
    pub(super) cancel: CancelToken,
    pub(super) path: String,
    pub(super) lock_path: Option<String>,
    pub(super) serializer: Arc<dyn QueueSerializer<T>>,
    pub(super) consumer: Option<Consumer<T>>,
    pub(super) kind: Kind,
    pub(super) max_items: Option<usize>,
    /// Curator's `minItemsBeforeRefresh`/`refreshOnWatch`: after this many
    /// items of one listing, a change of the children ends the listing.
    pub(super) min_items_before_refresh: usize,
    pub(super) refresh_on_watch: bool,
    pub(super) error_mode: Mutex<ErrorMode>,
    pub(super) state: AtomicU8,
    /// Wakes the consumer and waiting producers.
    pub(super) signal: Arc<Signal>,
    /// The children watch pending, so listings do not pile up watches.
    pub(super) arms: Arc<WatchArms<()>>,
    /// Puts under way (Curator's `putCount`), for `flush_puts`.
    pub(super) puts: Mutex<usize>,
    pub(super) puts_done: Condvar,
    pub(super) last_count: AtomicUsize,
    pub(super) worker: Mutex<Option<JoinHandle<()>>>,
    pub(super) waker: Mutex<Option<ListenerHandle>>,
}

impl<T: Send + 'static> Core<T> {
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Creates the queue (and lock) node and starts the consumer thread.
    pub(crate) fn start(self: &Arc<Self>) -> Result<()> {
        if self
            .state
            .compare_exchange(LATENT, STARTED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(Error::IllegalState(format!(
                "the queue {} was started already or is closed",
                self.path
            )));
        }
        let created = self
            .ensure(&self.path)
            .and_then(|()| self.lock_path.as_deref().map_or(Ok(()), |l| self.ensure(l)));
        if let Err(e) = created {
            // Nothing started: it may be started again (unless closed meanwhile).
            let _ =
                self.state
                    .compare_exchange(STARTED, LATENT, Ordering::AcqRel, Ordering::Acquire);
            return Err(e);
        }
        let signal = Arc::downgrade(&self.signal);
        *self.waker.lock() = Some(self.client.add_waker(move || {
            if let Some(s) = signal.upgrade() {
                s.notify();
            }
        }));
        if self.consumer.is_some() {
            let core = Arc::clone(self);
            let thread = std::thread::Builder::new()
                .name("latchkey-queue".into())
                .spawn(move || core.run())?;
            *self.worker.lock() = Some(thread);
        }
        Ok(())
    }

    pub(super) fn ensure(&self, path: &str) -> Result<()> {
        match self
            .client
            .create()
            .creating_parent_containers_if_needed()
            .for_path(path, &[])
        {
            Err(e) if !e.is(ErrorCode::NodeExists) => Err(e),
            _ => Ok(()),
        }
    }

    /// Stops the consumer (waiting for an item being consumed) and wakes
    /// every waiting put. Idempotent.
    pub(crate) fn close(&self) {
        if self.state.swap(STOPPED, Ordering::AcqRel) == STOPPED {
            return;
        }
        self.cancel.cancel();
        self.signal.notify();
        self.waker.lock().take();
        if let Some(worker) = self.worker.lock().take() {
            if worker.thread().id() != std::thread::current().id() {
                let _ = worker.join();
            }
        }
    }

    pub(crate) fn check_started(&self) -> Result<()> {
        match self.state.load(Ordering::Acquire) {
            STARTED => Ok(()),
            LATENT => Err(Error::IllegalState(format!(
                "the queue {} is not started",
                self.path
            ))),
            _ => Err(Error::IllegalState(format!(
                "the queue {} is closed",
                self.path
            ))),
        }
    }

    pub(crate) fn set_error_mode(&self, mode: ErrorMode) -> Result<()> {
        if self.lock_path.is_none() {
            return Err(Error::IllegalState(format!(
                "the queue {} has no lock path: a failed item is lost whatever the error mode",
                self.path
            )));
        }
        *self.error_mode.lock() = mode;
        Ok(())
    }

    pub(crate) fn last_message_count(&self) -> usize {
        self.last_count.load(Ordering::Relaxed)
    }

    pub(crate) fn receiver(&self) -> Option<Receiver<T>> {
        match &self.consumer {
            Some(Consumer::Channel(_, rx)) => Some(rx.clone()),
            _ => None,
        }
    }

    pub(crate) fn flush_puts(&self, timeout: Duration) -> bool {
        let deadline = deadline_after(timeout);
        let mut puts = self.puts.lock();
        while *puts > 0 {
            match deadline {
                Some(d) => {
                    if self.puts_done.wait_until(&mut puts, d).timed_out() {
                        return *puts == 0;
                    }
                }
                None => self.puts_done.wait(&mut puts),
            }
        }
        true
    }

    /// Puts `items` as one node `queue-<encoding><sequence>`; false if a
    /// bounded queue stayed full until `timeout` ran out. With a `fence`,
    /// only while it stands.
    pub(crate) fn put(
        &self,
        items: &[&T],
        encoding: &str,
        timeout: Option<Duration>,
        fence: Option<&dyn Fence>,
    ) -> Result<bool> {
        self.check_started()?;
        let item_path = format!("{}/{QUEUE_ITEM_PREFIX}{encoding}", self.path);
        // The fence first: a hold that is not there refuses before any wait.
        let fence = match fence {
            Some(f) => Some(fence::fence_for(&self.client, f, "create", &item_path)?),
            None => None,
        };
        let deadline = timeout.and_then(deadline_after);
        if !self.wait_for_room(deadline)? {
            return Ok(false);
        }
        let framed: Vec<Vec<u8>> = items.iter().map(|i| self.serializer.serialize(i)).collect();
        let data = ItemSerializer::serialize(&framed);
        *self.puts.lock() += 1;
        let client = bounded(&self.client, deadline);
        let created = match &fence {
            None => client
                .create()
                .mode(CreateMode::PersistentSequential)
                .for_path(&item_path, &data),
            Some(fence) => {
                client.create_fenced(fence, &item_path, &data, CreateMode::PersistentSequential)
            }
        };
        {
            let mut puts = self.puts.lock();
            *puts -= 1;
            self.puts_done.notify_all();
        }
        created.map(|_| true)
    }

    /// Curator's `blockIfMaxed`: waits while the queue holds `max_items`
    /// nodes or more; false at the deadline.
    fn wait_for_room(&self, deadline: Option<Instant>) -> Result<bool> {
        let Some(max) = self.max_items else {
            return Ok(true);
        };
        let client = bounded(&self.client, deadline);
        loop {
            let epoch = self.signal.epoch();
            let children = self.list(&client)?;
            if children.len() < max {
                return Ok(true);
            }
            self.check_started()?;
            self.signal.wait(epoch, deadline);
            // Not another look past the deadline: `client`'s requests would
            // be refused unsent.
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
        }
    }

    /// The queue's children, leaving a watch that wakes the signal.
    pub(super) fn list(&self, client: &Client) -> Result<Vec<String>> {
        let children = read_watched(
            &self.arms,
            &(),
            client,
            waking(&self.signal),
            |w| client.get_children_watch(&self.path, w),
            || client.get_children(&self.path),
        )?;
        self.last_count.store(children.len(), Ordering::Relaxed);
        Ok(children)
    }

    pub(super) fn is_running(&self) -> bool {
        self.state.load(Ordering::Acquire) == STARTED
    }

    /// All item nodes (for the id queue's `remove`).
    pub(crate) fn children(&self) -> Result<Vec<String>> {
        self.finishing.get_children(&self.path)
    }

    /// Curator's `tryRemove`: removes the item node `name` without
    /// consuming it (through its lock node in lock-safe mode); false if
    /// another got it first.
    ///
    /// In lock-safe mode the lock node is made in one transaction with a
    /// check that the item is there, so that while it stands (this
    /// session's throughout) no other lock-safe party takes the item: a
    /// delete that then meets `NoNode` is this call's own, applied before
    /// its reply was lost, and counts. Without a lock path such a delete
    /// cannot be told from another consumer's and does not count.
    pub(crate) fn try_remove(&self, name: &str) -> Result<bool> {
        self.check_started()?;
        let item = format!("{}/{name}", self.path);
        let Some(lock_path) = &self.lock_path else {
            return match self.client.delete().for_path(&item) {
                Ok(()) => Ok(true),
                Err(e) if taken_by_another(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let lock = format!("{lock_path}/{name}");
        let mark = lock_mark();
        let locked = self
            .client
            .transaction()
            .create_with_mode(&lock, &mark, CreateMode::Ephemeral)
            .check_exists(&item)
            .commit();
        match locked {
            Ok(_) => {}
            // Ours if a commit retried after a connection loss had been
            // applied (the item was there then).
            Err(e) if e.is(ErrorCode::NodeExists) && self.owns(&self.client, &lock, &mark) => {}
            Err(e) if e.is(ErrorCode::NodeExists) || e.is(ErrorCode::NoNode) => return Ok(false),
            Err(e) => {
                self.forget_lock_in_doubt(&lock, &mark);
                return Err(e);
            }
        }
        let owner = self.client.session_id();
        delete_if_lost(&self.client, &lock, owner);
        let removed = match self.client.delete().for_path(&item) {
            Ok(()) => Ok(true),
            // Gone while our lock node stood: by this call's own delete.
            Err(e)
                if e.is(ErrorCode::NoNode) && owner != 0 && self.client.session_id() == owner =>
            {
                Ok(true)
            }
            Err(e) if taken_by_another(&e) => Ok(false),
            Err(e) => Err(e),
        };
        self.client.keep_when_session_lost(&lock);
        if owner != 0 && self.finishing.session_id() == owner {
            let _ = self.finishing.delete().guaranteed().for_path(&lock);
        }
        // Else our lock node went with our session; a node at its path now
        // is another's.
        removed
    }
}

impl<T: Send + 'static> QueueBuilder<T> {
    /// A FIFO queue.
    pub fn build_queue(self) -> Result<DistributedQueue<T>> {
        Ok(DistributedQueue {
            core: self.build(Kind::Plain, usize::MAX, false)?,
        })
    }
}

/// The methods every queue kind has, forwarded to its core.
macro_rules! queue_common {
    () => {
        /// Creates the queue node (and the lock node) if need be, with
        /// container parents, and starts the consumer thread if the queue
        /// has a consumer. Starting twice is an error.
        pub fn start(&self) -> latchkey_framework::Result<()> {
            self.core.start()
        }

        /// Stops the consumer thread, waiting for the item it is consuming
        /// (a callback that never returns blocks this); puts waiting for
        /// room end with an error. Items stay in ZooKeeper. Idempotent;
        /// dropping the queue does the same.
        ///
        /// The consumer's requests are cancelled, except those that finish
        /// an item already handed over (its removal, or its requeue, and
        /// its lock node's delete), which run to their end. The children
        /// watch stays until the queue's children change, waking nobody.
        /// After a close, puts and `start` fail with `IllegalState`.
        pub fn close(&self) {
            self.core.close()
        }

        /// The queue's path.
        pub fn path(&self) -> &str {
            self.core.path()
        }

        /// This queue with its puts fenced by `fence`, a hold such as a
        /// [`Leadership`](crate::Leadership) or a
        /// [`MutexGuard`](crate::MutexGuard): each put through it creates
        /// its item only while the hold stands, in one transaction with a
        /// check of the hold's node, and fails with
        /// [`Error::FenceGone`](latchkey_framework::Error::FenceGone),
        /// putting nothing, once it has ended (see [`crate::Fence`]). A
        /// put retried after a lost reply may leave its item twice, as an
        /// unfenced put may, and one that finds the hold gone on that
        /// retry is `ConnectionLoss` (the item may be in the queue).
        pub fn fenced<'a>(&'a self, fence: &'a dyn $crate::Fence) -> $crate::Fenced<'a, Self> {
            $crate::Fenced::new(self, fence)
        }

        /// In lock-safe mode, what to do with an item whose consumer
        /// failed (Curator's `setErrorMode`); an error without a lock path.
        pub fn set_error_mode(&self, mode: $crate::ErrorMode) -> latchkey_framework::Result<()> {
            self.core.set_error_mode(mode)
        }

        /// Waits until the puts under way on other threads are in
        /// ZooKeeper (Curator's `flushPuts`); false if `timeout` ran out.
        /// A put itself returns only once its node exists.
        pub fn flush_puts(&self, timeout: std::time::Duration) -> bool {
            self.core.flush_puts(timeout)
        }

        /// How many nodes the queue held when last listed (Curator's
        /// `getLastMessageCount`), for information only.
        pub fn last_message_count(&self) -> usize {
            self.core.last_message_count()
        }

        /// The channel the items go to, if built with
        /// [`channel_consumer`]($crate::QueueBuilder::channel_consumer).
        pub fn receiver(&self) -> Option<crossbeam_channel::Receiver<T>> {
            self.core.receiver()
        }
    };
}
pub(crate) use queue_common;

/// A distributed FIFO queue (Curator's `DistributedQueue`), built by
/// [`QueueBuilder::build_queue`]: every item is a persistent sequential
/// node `<path>/queue-<sequence>` whose data is framed by
/// [`ItemSerializer`], so Java producers and consumers share it. A single
/// consumer gets the items in order; several share them, each item going to
/// one consumer (at least one in lock-safe mode). Without a lock path an
/// item is removed before it is consumed: one whose consumer fails, or
/// whose removal's answer is lost with the connection (the retried delete
/// finds it gone), is lost, as in Curator.
///
/// In lock-safe mode a consumer first creates an ephemeral lock node for
/// the item; a create retried after a lost reply that meets `NodeExists`
/// checks the node's owner and goes on if it is this session's. The item
/// is then removed by a delete, or put back ([`ErrorMode::Requeue`]) in
/// one transaction that deletes it and creates its new node: either one,
/// retried after it was applied, meets `NoNode` and counts as done, so an
/// item is never put back twice. For puts, see [`put`](Self::put).
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_recipes::{QueueBuilder, StringSerializer};
///
/// // A worker: takes items from a channel, each removed from ZooKeeper
/// // only once received.
/// let queue = QueueBuilder::new(client, StringSerializer, "/queues/mail")
///     .channel_consumer()
///     .lock_path("/queues/mail-locks")
///     .build_queue()?;
/// queue.start()?;
/// let items = queue.receiver().expect("built with a channel consumer");
/// queue.put_multi(&["a".to_string(), "b".to_string()])?; // one node, two items
/// while let Ok(mail) = items.recv_timeout(Duration::from_secs(5)) {
///     println!("sending {mail}");
/// }
/// # Ok(()) }
/// ```
pub struct DistributedQueue<T: Send + 'static> {
    core: Arc<Core<T>>,
}

impl<T: Send + 'static> DistributedQueue<T> {
    queue_common!();

    /// Adds `item`; returns once its node is in ZooKeeper. In a bounded
    /// queue, first waits as long as it takes for room. An error after the
    /// request was sent (the connection lost, the retries spent) leaves it
    /// in doubt: the item may be in the queue. A put whose connection was
    /// lost after ZooKeeper made its node, and whose create the retry sent
    /// again, leaves the item in the queue twice, so consumers may see an
    /// item twice after a fault even in lock-safe mode: a sequential create
    /// is not idempotent, and Curator's puts do the same (its consumers
    /// need the plain `queue-` names, so protected names cannot be used).
    pub fn put(&self, item: &T) -> Result<()> {
        self.core.put(&[item], "", None, None).map(|_| ())
    }

    /// As [`put`](Self::put), waiting at most `timeout` for room in a
    /// bounded queue: false if there was none.
    pub fn put_timeout(&self, item: &T, timeout: Duration) -> Result<bool> {
        self.core.put(&[item], "", Some(timeout), None)
    }

    /// Adds `items` as one node (Curator's `putMulti`), consumed in order
    /// and all by the same consumer.
    pub fn put_multi(&self, items: &[T]) -> Result<()> {
        let items: Vec<&T> = items.iter().collect();
        self.core.put(&items, "", None, None).map(|_| ())
    }

    /// As [`put_multi`](Self::put_multi), waiting at most `timeout` for
    /// room in a bounded queue.
    pub fn put_multi_timeout(&self, items: &[T], timeout: Duration) -> Result<bool> {
        let items: Vec<&T> = items.iter().collect();
        self.core.put(&items, "", Some(timeout), None)
    }
}

impl<T: Send + 'static> Fenced<'_, DistributedQueue<T>> {
    /// [`DistributedQueue::put`], only while the fence stands.
    pub fn put(&self, item: &T) -> Result<()> {
        let fence = Some(self.fence);
        self.recipe.core.put(&[item], "", None, fence).map(|_| ())
    }

    /// [`DistributedQueue::put_timeout`], only while the fence stands.
    pub fn put_timeout(&self, item: &T, timeout: Duration) -> Result<bool> {
        let fence = Some(self.fence);
        self.recipe.core.put(&[item], "", Some(timeout), fence)
    }

    /// [`DistributedQueue::put_multi`], only while the fence stands.
    pub fn put_multi(&self, items: &[T]) -> Result<()> {
        let items: Vec<&T> = items.iter().collect();
        let fence = Some(self.fence);
        self.recipe.core.put(&items, "", None, fence).map(|_| ())
    }

    /// [`DistributedQueue::put_multi_timeout`], only while the fence stands.
    pub fn put_multi_timeout(&self, items: &[T], timeout: Duration) -> Result<bool> {
        let items: Vec<&T> = items.iter().collect();
        let fence = Some(self.fence);
        self.recipe.core.put(&items, "", Some(timeout), fence)
    }
}

impl<T: Send + 'static> Drop for DistributedQueue<T> {
    fn drop(&mut self) {
        self.core.close();
    }
}

impl<T: Send + 'static> std::fmt::Debug for DistributedQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedQueue")
            .field("path", &self.core.path)
            .finish()
    }
}

//! Curator's `QueueBuilder`: the one way to make a queue of any kind, and
//! what a queue's consumer is.

use std::sync::atomic::{AtomicU8, AtomicUsize};
use std::sync::Arc;

use crossbeam_channel::{bounded as channel, Receiver, Sender};
use latchkey_framework::{CancelToken, Client, Error, Result};
use parking_lot::{Condvar, Mutex};

use super::distributed::{Core, LATENT};
use super::names::{self, Kind};
use super::serializer::{QueueError, QueueSerializer};
use crate::locks::lock_internals::validate_recipe_path;

/// What a consumer does when a consumer callback fails, in lock-safe mode
/// (Curator's `ErrorMode`). Without a lock path an item is removed before
/// it is consumed, and a failure loses it.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::{ErrorMode, QueueBuilder, StringSerializer};
///
/// let queue = QueueBuilder::new(client, StringSerializer, "/queues/best-effort")
///     .consumer(|item: String| Err(format!("cannot do {item}").into()))
///     .lock_path("/queues/best-effort-locks")
///     .build_queue()?;
/// queue.set_error_mode(ErrorMode::Delete)?; // a failed item is dropped, not retried
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorMode {
    /// Put the item back at the tail of the queue (the default).
    #[default]
    Requeue,
    /// Remove the item anyway.
    Delete,
}

/// A consumer callback's answer: `Err` (or a panic) is a failed item.
pub type ConsumeResult = std::result::Result<(), QueueError>;

pub(super) type Callback<T> = Box<dyn Fn(T) -> ConsumeResult + Send + Sync>;

/// Who takes the queue's items.
pub(super) enum Consumer<T> {
    Callback(Callback<T>),
    /// A rendezvous channel: an item is handed over only when a receiver
    /// takes it, so in lock-safe mode it stays in ZooKeeper until then.
    Channel(Sender<T>, Receiver<T>),
}

/// Builds the queues (Curator's `QueueBuilder`). Without a consumer the
/// queue only produces.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::{QueueBuilder, StringSerializer};
///
/// let queue = QueueBuilder::new(client, StringSerializer, "/queues/jobs")
///     .consumer(|job: String| {
///         println!("doing {job}");
///         Ok(())
///     })
///     // Lock-safe: an item is removed only once the callback returned.
///     .lock_path("/queues/jobs-locks")
///     .build_queue()?;
/// queue.start()?;
/// queue.put(&"job-1".to_string())?; // in ZooKeeper when this returns
/// # Ok(()) }
/// ```
pub struct QueueBuilder<T> {
    client: Client,
    serializer: Arc<dyn QueueSerializer<T>>,
    path: String,
    consumer: Option<Consumer<T>>,
    lock_path: Option<String>,
    max_items: Option<usize>,
}

impl<T: Send + 'static> QueueBuilder<T> {
    /// A builder of a queue at `path` whose items `serializer` turns into
    /// bytes.
    pub fn new(
        client: &Client,
        serializer: impl QueueSerializer<T>,
        path: &str,
    ) -> QueueBuilder<T> {
        QueueBuilder {
            client: client.clone(),
            serializer: Arc::new(serializer),
            path: path.to_owned(),
            consumer: None,
            lock_path: None,
            max_items: None,
        }
    }

    /// Items go to `consume`, one at a time in queue order, on the queue's
    /// consumer thread (Curator's `QueueConsumer.consumeMessage`). An
    /// `Err` or a panic is a failed item (see [`ErrorMode`]).
    pub fn consumer(
        mut self,
        consume: impl Fn(T) -> ConsumeResult + Send + Sync + 'static,
    ) -> Self {
        self.consumer = Some(Consumer::Callback(Box::new(consume)));
        self
    }

    /// Items go to the queue's [`receiver`](crate::DistributedQueue::receiver)
    /// (Curator's `BlockingQueueConsumer`), each handed over only when a
    /// receiver takes it: with a lock path, an item leaves ZooKeeper only
    /// once taken from the channel, and one not taken when the queue
    /// closes stays for the next consumer. Without a lock path an item is
    /// removed before it is handed over, and one in hand when the queue
    /// closes is lost (as the items in Curator's local queue).
    pub fn channel_consumer(mut self) -> Self {
        let (tx, rx) = channel(0);
        self.consumer = Some(Consumer::Channel(tx, rx));
        self
    }

    /// Lock-safe mode (Curator's `lockPath`): a consumer takes an item by
    /// creating an ephemeral node `<lock_path>/<item name>`, and removes
    /// the item only after it was consumed, so an item whose consumer dies
    /// goes to another consumer. Each item is consumed at least once: more
    /// than once only if a consumer's session ends while it consumes, it
    /// cannot reach ZooKeeper to remove the item it consumed, or a put's
    /// create was sent again after a lost connection and made the item
    /// twice (see [`DistributedQueue::put`](crate::DistributedQueue::put)).
    pub fn lock_path(mut self, lock_path: &str) -> Self {
        self.lock_path = Some(lock_path.to_owned());
        self
    }

    /// A bounded queue (Curator's `maxItems`): a put waits while the queue
    /// holds `max_items` nodes or more. The bound is loose: producers that
    /// look at once may all put.
    pub fn max_items(mut self, max_items: usize) -> Self {
        self.max_items = Some(max_items);
        self
    }

    pub(crate) fn build(
        self,
        kind: Kind,
        min_items_before_refresh: usize,
        refresh_on_watch: bool,
    ) -> Result<Arc<Core<T>>> {
        validate_recipe_path(&self.client, &self.path)?;
        if let Some(lock) = &self.lock_path {
            validate_recipe_path(&self.client, lock)?;
            // Lock nodes in the queue would be taken as items.
            if lock.trim_end_matches('/') == self.path.trim_end_matches('/') {
                return Err(Error::InvalidPath {
                    path: lock.clone(),
                    reason: "a queue's lock path must not be the queue's own path".into(),
                });
            }
        }
        if self.max_items == Some(0) {
            return Err(Error::InvalidArgument(format!(
                "the queue {}: max_items must be at least 1",
                self.path
            )));
        }
        if kind == Kind::Id && self.path.contains(names::SEPARATOR) {
            return Err(Error::InvalidPath {
                path: self.path,
                reason: "an id queue's path cannot hold '|'".into(),
            });
        }
        let cancel = CancelToken::default();
        Ok(Arc::new(Core {
            client: self.client.with_cancel(Some(&cancel)),
            finishing: self.client.clone(),
            cancel,
            path: self.path,
            lock_path: self.lock_path,
            serializer: self.serializer,
            consumer: self.consumer,
            kind,
            max_items: self.max_items,
            min_items_before_refresh,
            refresh_on_watch,
            error_mode: Mutex::new(ErrorMode::Requeue),
            state: AtomicU8::new(LATENT),
            signal: Arc::default(),
            arms: Arc::default(),
            puts: Mutex::new(0),
            puts_done: Condvar::new(),
            last_count: AtomicUsize::new(0),
            worker: Mutex::new(None),
            waker: Mutex::new(None),
        }))
    }
}

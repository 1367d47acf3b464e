//! Curator's `DistributedQueue` and its `QueueBuilder`: items framed by
//! [`ItemSerializer`](crate::ItemSerializer) in persistent sequential nodes
//! `queue-…` under the queue path, taken in order by a consumer thread
//! that hands each to a callback or a channel. The priority, delay and id
//! queues ([`super::variants`]) are this queue with other node names.
//!
//! The queue owns its consumer thread; producers put on their own
//! threads. All of them wake on one [`Signal`]: the watch on the queue's
//! children, a lock node going, and the client's state changes.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded as channel, Receiver, SendTimeoutError, Sender};
use latchkey_framework::{
    CancelToken, Client, CreateMode, Error, ErrorCode, ListenerHandle, Result,
};
use parking_lot::{Condvar, Mutex};

use super::names::{self, Kind, QUEUE_ITEM_PREFIX};
use super::serializer::{ItemSerializer, QueueError, QueueSerializer};
use crate::armed::{read_watched, waking, WatchArms};
use crate::locks::lock_internals::{bounded, deadline_after, validate_recipe_path, Signal};

/// How long the consumer thread waits before it looks again after a
/// failed request (unless something wakes it sooner).
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// How often a consumer blocked handing an item to the channel checks
/// whether the queue is closing.
const HANDOVER_CHECK: Duration = Duration::from_millis(100);

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
pub enum ErrorMode {
    /// Put the item back at the tail of the queue (the default).
    #[default]
    Requeue,
    /// Remove the item anyway.
    Delete,
}

/// A consumer callback's answer: `Err` (or a panic) is a failed item.
pub type ConsumeResult = std::result::Result<(), QueueError>;

type Callback<T> = Box<dyn Fn(T) -> ConsumeResult + Send + Sync>;

/// Who takes the queue's items.
enum Consumer<T> {
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

    /// Items go to the queue's [`receiver`](DistributedQueue::receiver)
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
    /// than once only if a consumer's session ends while it consumes, or
    /// it cannot reach ZooKeeper to remove the item it consumed.
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

    /// A FIFO queue.
    pub fn build_queue(self) -> Result<DistributedQueue<T>> {
        Ok(DistributedQueue {
            core: self.build(Kind::Plain, usize::MAX, false)?,
        })
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

const LATENT: u8 = 0;
const STARTED: u8 = 1;
const STOPPED: u8 = 2;

/// The queue's shared state; each public queue wraps one.
pub(crate) struct Core<T> {
    /// Ends the queue's requests at once on close.
    client: Client,
    /// For what must be finished after an item was consumed (removing it
    /// and its lock node), which a close must not cut short.
    finishing: Client,
    cancel: CancelToken,
    path: String,
    lock_path: Option<String>,
    serializer: Arc<dyn QueueSerializer<T>>,
    consumer: Option<Consumer<T>>,
    kind: Kind,
    max_items: Option<usize>,
    /// Curator's `minItemsBeforeRefresh`/`refreshOnWatch`: after this many
    /// items of one listing, a change of the children ends the listing.
    min_items_before_refresh: usize,
    refresh_on_watch: bool,
    error_mode: Mutex<ErrorMode>,
    state: AtomicU8,
    /// Wakes the consumer and waiting producers.
    signal: Arc<Signal>,
    /// The children watch pending, so listings do not pile up watches.
    arms: Arc<WatchArms<()>>,
    /// Puts under way (Curator's `putCount`), for `flush_puts`.
    puts: Mutex<usize>,
    puts_done: Condvar,
    last_count: AtomicUsize,
    worker: Mutex<Option<JoinHandle<()>>>,
    waker: Mutex<Option<ListenerHandle>>,
}

/// What a consumer made of one node's items.
enum Consumed {
    /// All consumed (or the node was corrupt).
    Done,
    /// One failed.
    Failed,
    /// Not handed over: the queue is closing.
    Abandoned,
}

/// Why an item was not handed over.
enum HandOver {
    Failed(QueueError),
    Closing,
}

/// What became of one item node.
enum Outcome {
    /// Consumed (or removed), or taken by another consumer.
    Done,
    /// Another consumer holds its lock node.
    Locked,
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

    fn ensure(&self, path: &str) -> Result<()> {
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
    /// bounded queue stayed full until `timeout` ran out.
    pub(crate) fn put(
        &self,
        items: &[&T],
        encoding: &str,
        timeout: Option<Duration>,
    ) -> Result<bool> {
        self.check_started()?;
        let deadline = timeout.and_then(deadline_after);
        if !self.wait_for_room(deadline)? {
            return Ok(false);
        }
        let framed: Vec<Vec<u8>> = items.iter().map(|i| self.serializer.serialize(i)).collect();
        let data = ItemSerializer::serialize(&framed);
        *self.puts.lock() += 1;
        let created = bounded(&self.client, deadline)
            .create()
            .mode(CreateMode::PersistentSequential)
            .for_path(
                &format!("{}/{QUEUE_ITEM_PREFIX}{encoding}", self.path),
                &data,
            );
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
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
            self.check_started()?;
            self.signal.wait(epoch, deadline);
        }
    }

    /// The queue's children, leaving a watch that wakes the signal.
    fn list(&self, client: &Client) -> Result<Vec<String>> {
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

    fn is_running(&self) -> bool {
        self.state.load(Ordering::Acquire) == STARTED
    }

    /// The consumer thread (Curator's `runLoop`): list, sort, take the
    /// items due in order; wait for a change, the next due time, or a
    /// pause after a failure.
    fn run(&self) {
        let mut epoch = self.signal.epoch().wrapping_sub(1);
        let mut until: Option<Instant> = None;
        while self.is_running() {
            self.signal.wait(epoch, until);
            epoch = self.signal.epoch();
            if !self.is_running() {
                return;
            }
            let mut children = match self.list(&self.client) {
                Ok(children) => children,
                Err(e) => {
                    if self.finishing.is_closed() {
                        log::warn!(
                            "the queue {}: its client is closed; consumer stopped",
                            self.path
                        );
                        return;
                    }
                    if self.is_running() {
                        log::debug!("the queue {}: {e}; looking again", self.path);
                    }
                    until = Some(Instant::now() + RETRY_PAUSE);
                    continue;
                }
            };
            children.retain(|c| {
                let ours = c.starts_with(QUEUE_ITEM_PREFIX);
                if !ours {
                    log::warn!("foreign node in queue {}: {c}", self.path);
                }
                ours
            });
            names::sort(self.kind, &mut children);
            if let Some(first) = children.first() {
                let wait = self.delay(first);
                if wait > Duration::ZERO {
                    // A time too far to wait for (another process may
                    // write any): wait for changes only.
                    until = Instant::now().checked_add(wait);
                    continue;
                }
            }
            until = self.take_all(&children, epoch);
        }
    }

    /// How long until the item `name` is due (zero but for delay queues).
    fn delay(&self, name: &str) -> Duration {
        if self.kind != Kind::Delay {
            return Duration::ZERO;
        }
        match std::time::UNIX_EPOCH.checked_add(Duration::from_millis(names::epoch_of(name))) {
            Some(due) => due
                .duration_since(std::time::SystemTime::now())
                .unwrap_or(Duration::ZERO),
            None => Duration::MAX,
        }
    }

    /// Curator's `processChildren`: takes the sorted `children` in turn;
    /// when to look again regardless of changes (after a failure).
    fn take_all(&self, children: &[String], epoch: u64) -> Option<Instant> {
        let mut look_again = None;
        for (done, name) in children.iter().enumerate() {
            if !self.is_running() {
                break;
            }
            if done >= self.min_items_before_refresh
                && self.refresh_on_watch
                && self.signal.epoch() != epoch
            {
                break;
            }
            if self.delay(name) > Duration::ZERO {
                continue;
            }
            let taken = match &self.lock_path {
                Some(lock) => self.take_locked(name, lock),
                None => self.take_plain(name),
            };
            match taken {
                Ok(Outcome::Done) => {}
                Ok(Outcome::Locked) => {}
                Err(e) => {
                    if self.is_running() {
                        log::warn!("the queue {}: taking {name}: {e}", self.path);
                    }
                    look_again = Some(Instant::now() + RETRY_PAUSE);
                }
            }
        }
        look_again
    }

    /// Without a lock path: read, delete (if unchanged), then consume.
    fn take_plain(&self, name: &str) -> Result<Outcome> {
        let item = format!("{}/{name}", self.path);
        let (data, stat) = match self.client.get_data(&item) {
            Ok(read) => read,
            Err(e) if taken_by_another(&e) => return Ok(Outcome::Done),
            Err(e) => return Err(e),
        };
        match self
            .client
            .delete()
            .with_version(stat.version)
            .for_path(&item)
        {
            Ok(()) => {}
            Err(e) if taken_by_another(&e) => return Ok(Outcome::Done),
            Err(e) => return Err(e),
        }
        // Removed: a failed item is lost, as in Curator.
        let _ = self.consume(name, &data);
        Ok(Outcome::Done)
    }

    /// Lock-safe: lock the item with an ephemeral node, consume it, then
    /// remove it (or put it back), then the lock node.
    fn take_locked(&self, name: &str, lock_path: &str) -> Result<Outcome> {
        let lock = format!("{lock_path}/{name}");
        match self
            .client
            .create()
            .mode(CreateMode::Ephemeral)
            .for_path(&lock, &[])
        {
            Ok(_) => {}
            // Ours if a create retried after a connection loss had been
            // applied: then the item is ours to take.
            Err(e) if e.is(ErrorCode::NodeExists) && self.owns(&self.client, &lock) => {}
            Err(e) if e.is(ErrorCode::NodeExists) => {
                self.watch_lock(&lock);
                return Ok(Outcome::Locked);
            }
            Err(e) if e.is(ErrorCode::NoNode) => {
                // The lock node's parent went: make it again, look again.
                self.ensure(lock_path)?;
                self.signal.notify();
                return Ok(Outcome::Locked);
            }
            Err(e) => {
                self.forget_lock_in_doubt(&lock);
                return Err(e);
            }
        }
        let owner = self.client.session_id();
        let result = self.consume_locked(name);
        if owner != 0 && self.finishing.session_id() == owner {
            // Guaranteed: a failed delete goes on in the background.
            if let Err(e) = self.finishing.delete().guaranteed().for_path(&lock) {
                log::debug!(
                    "the queue {}: removing the lock node {lock}: {e}",
                    self.path
                );
            }
        } else {
            // Our lock node went with our session; a node at its path now
            // is another consumer's lock (Curator deletes it regardless).
            log::debug!(
                "the queue {}: the lock node {lock} went with its session",
                self.path
            );
        }
        result
    }

    /// Whether the node at `path` is an ephemeral of this client's session.
    fn owns(&self, client: &Client, path: &str) -> bool {
        matches!(
            client.exists(path),
            Ok(Some(stat)) if stat.ephemeral_owner != 0 && stat.ephemeral_owner == client.session_id()
        )
    }

    /// After a lock node's create failed without an answer (cut short by
    /// a close, or out of retries), the server may have made it: if it is
    /// ours, remove it, or it would hold the item for as long as this
    /// session lives. (A consumer that goes on finds it again and takes
    /// the item; see `take_locked`.)
    fn forget_lock_in_doubt(&self, lock: &str) {
        if self.owns(&self.finishing, lock) {
            if let Err(e) = self.finishing.delete().guaranteed().for_path(lock) {
                log::debug!(
                    "the queue {}: removing the lock node {lock}: {e}",
                    self.path
                );
            }
        }
    }

    fn consume_locked(&self, name: &str) -> Result<Outcome> {
        let item = format!("{}/{name}", self.path);
        let data = match self.client.get_data(&item) {
            Ok((data, _)) => data,
            Err(e) if taken_by_another(&e) => return Ok(Outcome::Done),
            Err(e) => return Err(e),
        };
        // From here on, finish even while closing (a close cannot cut
        // the removal of an item consumed short).
        let finished = match self.consume(name, &data) {
            // Not handed over (closing): it stays for the next consumer.
            Consumed::Abandoned => return Ok(Outcome::Done),
            Consumed::Failed if *self.error_mode.lock() == ErrorMode::Requeue => {
                let again = format!("{}/{}", self.path, names::requeue_name(name));
                self.finishing
                    .transaction()
                    .delete(&item)
                    .create_with_mode(&again, &data, CreateMode::PersistentSequential)
                    .commit()
                    .map(|_| ())
            }
            Consumed::Failed | Consumed::Done => self.finishing.delete().for_path(&item),
        };
        match finished {
            Ok(()) => Ok(Outcome::Done),
            Err(e) if taken_by_another(&e) => Ok(Outcome::Done),
            Err(e) => Err(e),
        }
    }

    /// A consumer's lock node: wakes the consumer when it goes, so that
    /// the item of a consumer that died is taken without waiting for
    /// another change in the queue.
    fn watch_lock(&self, lock: &str) {
        let wake = waking(&self.signal);
        match self.client.exists_watch(lock, move |_| wake()) {
            Ok(Some(_)) => {}
            // Gone already (or unknown): look again.
            _ => self.signal.notify(),
        }
    }

    /// Hands every item framed in `data` to the consumer. After a failure,
    /// in lock-safe mode with `Requeue`, the rest are not tried (the node
    /// is put back whole), as in Curator. A corrupt node counts as
    /// consumed (logged), so it does not block the queue.
    fn consume(&self, name: &str, data: &[u8]) -> Consumed {
        let items = match ItemSerializer::deserialize(data).and_then(|frames| {
            frames
                .iter()
                .map(|f| {
                    self.serializer
                        .deserialize(f)
                        .map_err(|e| Error::InvalidArgument(format!("corrupt queue item: {e}")))
                })
                .collect::<Result<Vec<T>>>()
        }) {
            Ok(items) => items,
            Err(e) => {
                log::error!("the queue {}: {name}: {e}", self.path);
                return Consumed::Done;
            }
        };
        let stop_on_failure =
            self.lock_path.is_some() && *self.error_mode.lock() == ErrorMode::Requeue;
        let mut outcome = Consumed::Done;
        for item in items {
            match self.hand_over(item) {
                Ok(()) => {}
                Err(HandOver::Closing) => return Consumed::Abandoned,
                Err(HandOver::Failed(e)) => {
                    log::error!("the queue {}: consuming {name}: {e}", self.path);
                    outcome = Consumed::Failed;
                    if stop_on_failure {
                        break;
                    }
                }
            }
        }
        outcome
    }

    fn hand_over(&self, item: T) -> std::result::Result<(), HandOver> {
        match &self.consumer {
            None => Ok(()),
            Some(Consumer::Callback(consume)) => {
                match catch_unwind(AssertUnwindSafe(|| consume(item))) {
                    Ok(result) => result.map_err(HandOver::Failed),
                    Err(_) => Err(HandOver::Failed("the consumer panicked".into())),
                }
            }
            Some(Consumer::Channel(tx, _)) => {
                let mut item = item;
                loop {
                    match tx.send_timeout(item, HANDOVER_CHECK) {
                        Ok(()) => return Ok(()),
                        Err(SendTimeoutError::Timeout(back)) => {
                            if !self.is_running() {
                                return Err(HandOver::Closing);
                            }
                            item = back;
                        }
                        // The queue keeps a receiver: cannot happen.
                        Err(SendTimeoutError::Disconnected(_)) => return Err(HandOver::Closing),
                    }
                }
            }
        }
    }

    /// All item nodes (for the id queue's `remove`).
    pub(crate) fn children(&self) -> Result<Vec<String>> {
        self.finishing.get_children(&self.path)
    }

    /// Curator's `tryRemove`: removes the item node `name` without
    /// consuming it (through its lock node in lock-safe mode); false if
    /// another got it first.
    pub(crate) fn try_remove(&self, name: &str) -> Result<bool> {
        self.check_started()?;
        let item = format!("{}/{name}", self.path);
        let lock = self.lock_path.as_ref().map(|l| format!("{l}/{name}"));
        if let Some(lock) = &lock {
            match self
                .client
                .create()
                .mode(CreateMode::Ephemeral)
                .for_path(lock, &[])
            {
                Ok(_) => {}
                Err(e) if e.is(ErrorCode::NodeExists) || e.is(ErrorCode::NoNode) => {
                    return Ok(false)
                }
                Err(e) => {
                    self.forget_lock_in_doubt(lock);
                    return Err(e);
                }
            }
        }
        let removed = match self.client.delete().for_path(&item) {
            Ok(()) => Ok(true),
            Err(e) if taken_by_another(&e) => Ok(false),
            Err(e) => Err(e),
        };
        if let Some(lock) = &lock {
            let _ = self.finishing.delete().guaranteed().for_path(lock);
        }
        removed
    }
}

/// The errors that mean another consumer took the item first.
fn taken_by_another(e: &Error) -> bool {
    e.is(ErrorCode::NoNode) || e.is(ErrorCode::BadVersion) || e.is(ErrorCode::NodeExists)
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
        pub fn close(&self) {
            self.core.close()
        }

        /// The queue's path.
        pub fn path(&self) -> &str {
            self.core.path()
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
    /// in doubt: the item may be in the queue.
    pub fn put(&self, item: &T) -> Result<()> {
        self.core.put(&[item], "", None).map(|_| ())
    }

    /// As [`put`](Self::put), waiting at most `timeout` for room in a
    /// bounded queue: false if there was none.
    pub fn put_timeout(&self, item: &T, timeout: Duration) -> Result<bool> {
        self.core.put(&[item], "", Some(timeout))
    }

    /// Adds `items` as one node (Curator's `putMulti`), consumed in order
    /// and all by the same consumer.
    pub fn put_multi(&self, items: &[T]) -> Result<()> {
        let items: Vec<&T> = items.iter().collect();
        self.core.put(&items, "", None).map(|_| ())
    }

    /// As [`put_multi`](Self::put_multi), waiting at most `timeout` for
    /// room in a bounded queue.
    pub fn put_multi_timeout(&self, items: &[T], timeout: Duration) -> Result<bool> {
        let items: Vec<&T> = items.iter().collect();
        self.core.put(&items, "", Some(timeout))
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

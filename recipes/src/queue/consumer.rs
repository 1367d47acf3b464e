//! The queue's consumer thread (Curator's `runLoop` and
//! `processChildren`): lists the queue, takes the items due in order and
//! hands each to the callback or the channel; in lock-safe mode through a
//! lock node per item, removing the item only once it was consumed.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::SendTimeoutError;
use latchkey_framework::{Client, CreateMode, Error, ErrorCode, Result};

use super::builder::{Consumer, ErrorMode};
use super::distributed::Core;
use super::names::{self, Kind, QUEUE_ITEM_PREFIX};
use super::serializer::{ItemSerializer, QueueError};
use crate::armed::waking;
use crate::locks::lock_internals::{delete_if_lost, who_holds};

/// How long the consumer thread waits before it looks again after a
/// failed request (unless something wakes it sooner).
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// How often a consumer blocked handing an item to the channel checks
/// whether the queue is closing.
const HANDOVER_CHECK: Duration = Duration::from_millis(100);
/// How many foreign nodes in the queue a consumer tells of in its log.
const MAX_FOREIGN_TOLD: usize = 100;

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
    /// The consumer thread (Curator's `runLoop`): list, sort, take the
    /// items due in order; wait for a change, the next due time, or a
    /// pause after a failure.
    pub(super) fn run(&self) {
        let mut epoch = self.signal.epoch().wrapping_sub(1);
        let mut until: Option<Instant> = None;
        let mut foreign = std::collections::HashSet::new();
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
                // Told once per node, not at every listing (bounded).
                if !ours && foreign.len() < MAX_FOREIGN_TOLD && foreign.insert(c.clone()) {
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
        let mark = lock_mark();
        match self
            .client
            .create()
            .mode(CreateMode::Ephemeral)
            .for_path(&lock, &mark)
        {
            Ok(_) => {}
            // Ours if a create retried after a connection loss had been
            // applied: then the item is ours to take.
            Err(e) if e.is(ErrorCode::NodeExists) && self.owns(&self.client, &lock, &mark) => {}
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
                self.forget_lock_in_doubt(&lock, &mark);
                return Err(e);
            }
        }
        let owner = self.client.session_id();
        // If the session is declared lost while we consume, the next one
        // deletes the lock node, so that another consumer need not wait
        // for the server to expire the old session.
        delete_if_lost(&self.client, &lock, owner);
        let result = self.consume_locked(name);
        self.client.keep_when_session_lost(&lock);
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

    /// Whether the node at `path` is the lock node this call made with
    /// `mark` ([`lock_mark`]): an ephemeral of this client's session
    /// holding `mark`. The session alone does not tell: another queue on
    /// the same client, or this queue's `remove` beside its consumer, may
    /// hold the lock node of the same item in the same session.
    pub(super) fn owns(&self, client: &Client, path: &str, mark: &[u8]) -> bool {
        matches!(
            client.get_data(path),
            Ok((data, stat)) if stat.ephemeral_owner != 0
                && stat.ephemeral_owner == client.session_id()
                && data == mark
        )
    }

    /// After a lock node's create (made with `mark`) failed without an
    /// answer (cut short by a close, or out of retries), the server may
    /// have made it: if it is ours, remove it, or it would hold the item
    /// for as long as this session lives. (A consumer that goes on finds
    /// it again and takes the item; see `take_locked`.)
    pub(super) fn forget_lock_in_doubt(&self, lock: &str, mark: &[u8]) {
        if self.owns(&self.finishing, lock, mark) {
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
}

/// The data of a lock node, different for every lock node this process
/// makes: who holds it (as lock nodes tell), and a count, so that a create
/// retried after a lost reply knows the node it meets for its own.
pub(super) fn lock_mark() -> Vec<u8> {
    static MADE: AtomicU64 = AtomicU64::new(0);
    let mut mark = who_holds();
    mark.extend_from_slice(format!(" lock={}", MADE.fetch_add(1, Ordering::Relaxed)).as_bytes());
    mark
}

/// The errors that mean another consumer took the item first.
pub(super) fn taken_by_another(e: &Error) -> bool {
    e.is(ErrorCode::NoNode) || e.is(ErrorCode::BadVersion) || e.is(ErrorCode::NodeExists)
}

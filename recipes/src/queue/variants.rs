//! The queues that are a [`DistributedQueue`](crate::DistributedQueue)
//! with other item names (Curator's `DistributedPriorityQueue`,
//! `DistributedDelayQueue` and `DistributedIdQueue`): the encoding in each
//! name is Curator's ([`super::names`]), so Java processes share them.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use latchkey_framework::{Error, Result};

use super::builder::QueueBuilder;
use super::distributed::{queue_common, Core};
use super::names::{self, Kind};
use crate::fence::Fenced;

impl<T: Send + 'static> QueueBuilder<T> {
    /// A priority queue (Curator's `buildPriorityQueue`): items of a lower
    /// priority value are taken first. After `min_items_before_refresh`
    /// items of one listing, the consumer lists again if the queue changed,
    /// so that a new urgent item overtakes the rest (0: after every item).
    pub fn build_priority_queue(
        self,
        min_items_before_refresh: usize,
    ) -> Result<DistributedPriorityQueue<T>> {
        Ok(DistributedPriorityQueue {
            core: self.build(Kind::Priority, min_items_before_refresh, true)?,
        })
    }

    /// A delay queue (Curator's `buildDelayQueue`): each item is taken
    /// once its time has come, earliest first.
    pub fn build_delay_queue(self) -> Result<DistributedDelayQueue<T>> {
        Ok(DistributedDelayQueue {
            core: self.build(Kind::Delay, usize::MAX, true)?,
        })
    }

    /// A queue whose items carry an id, by which they can be removed
    /// (Curator's `buildIdQueue`).
    pub fn build_id_queue(self) -> Result<DistributedIdQueue<T>> {
        Ok(DistributedIdQueue {
            core: self.build(Kind::Id, usize::MAX, false)?,
        })
    }
}

/// A queue taken in priority order (Curator's `DistributedPriorityQueue`),
/// built by [`QueueBuilder::build_priority_queue`]: item nodes are
/// `queue-<1 or 0><8 hex digits of the priority><sequence>` (Curator's
/// encoding), so that names sort as priorities, lowest first, and items of
/// one priority in the order put. An item put back after its consumer
/// failed (lock-safe mode, [`ErrorMode::Requeue`](crate::ErrorMode))
/// keeps its priority; Curator puts it back as a plain `queue-` item.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::{QueueBuilder, StringSerializer};
///
/// let queue = QueueBuilder::new(client, StringSerializer, "/queues/alerts")
///     .consumer(|alert: String| { println!("{alert}"); Ok(()) })
///     .build_priority_queue(0)?;
/// queue.start()?;
/// queue.put(&"disk full".to_string(), -10)?; // before priority 0
/// # Ok(()) }
/// ```
///
/// Its puts, consumers and close are
/// [`DistributedQueue`](crate::DistributedQueue)'s: a put retried after a
/// lost reply may leave its item twice, and `close` waits for the item
/// being consumed.
pub struct DistributedPriorityQueue<T: Send + 'static> {
    core: Arc<Core<T>>,
}

impl<T: Send + 'static> DistributedPriorityQueue<T> {
    queue_common!();

    /// Adds `item` with `priority` (lower first); returns once it is in
    /// ZooKeeper, after waiting for room in a bounded queue.
    pub fn put(&self, item: &T, priority: i32) -> Result<()> {
        let encoding = names::priority_to_string(priority);
        self.core.put(&[item], &encoding, None, None).map(|_| ())
    }

    /// As [`put`](Self::put), waiting at most `timeout` for room.
    pub fn put_timeout(&self, item: &T, priority: i32, timeout: Duration) -> Result<bool> {
        let encoding = names::priority_to_string(priority);
        self.core.put(&[item], &encoding, Some(timeout), None)
    }

    /// Adds `items` as one node with `priority`.
    pub fn put_multi(&self, items: &[T], priority: i32) -> Result<()> {
        let items: Vec<&T> = items.iter().collect();
        let encoding = names::priority_to_string(priority);
        self.core.put(&items, &encoding, None, None).map(|_| ())
    }
}

impl<T: Send + 'static> Fenced<'_, DistributedPriorityQueue<T>> {
    /// [`DistributedPriorityQueue::put`], only while the fence stands.
    pub fn put(&self, item: &T, priority: i32) -> Result<()> {
        self.put_timeout_opt(item, priority, None).map(|_| ())
    }

    /// [`DistributedPriorityQueue::put_timeout`], only while the fence stands.
    pub fn put_timeout(&self, item: &T, priority: i32, timeout: Duration) -> Result<bool> {
        self.put_timeout_opt(item, priority, Some(timeout))
    }

    fn put_timeout_opt(&self, item: &T, priority: i32, timeout: Option<Duration>) -> Result<bool> {
        let encoding = names::priority_to_string(priority);
        let fence = Some(self.fence);
        self.recipe.core.put(&[item], &encoding, timeout, fence)
    }
}

/// A queue whose items wait for their time (Curator's
/// `DistributedDelayQueue`), built by [`QueueBuilder::build_delay_queue`]:
/// item nodes are `queue-|<hex millis since the epoch>|<sequence>`
/// (Curator's encoding). Items are taken once due, earliest first; clocks
/// of producers and consumers are compared as they are.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::{Duration, SystemTime};
/// use latchkey_recipes::{QueueBuilder, StringSerializer};
///
/// let queue = QueueBuilder::new(client, StringSerializer, "/queues/reminders")
///     .consumer(|r: String| { println!("{r}"); Ok(()) })
///     .build_delay_queue()?;
/// queue.start()?;
/// queue.put(&"stand up".to_string(), SystemTime::now() + Duration::from_secs(60))?;
/// # Ok(()) }
/// ```
///
/// Its puts, consumers and close are
/// [`DistributedQueue`](crate::DistributedQueue)'s: a put retried after a
/// lost reply may leave its item twice, and `close` waits for the item
/// being consumed.
pub struct DistributedDelayQueue<T: Send + 'static> {
    core: Arc<Core<T>>,
}

impl<T: Send + 'static> DistributedDelayQueue<T> {
    queue_common!();

    /// Adds `item`, to be taken from `until` on; returns once it is in
    /// ZooKeeper. `until` must be after the epoch (Curator refuses 0 and
    /// less).
    pub fn put(&self, item: &T, until: SystemTime) -> Result<()> {
        let encoding = self.encode(until)?;
        self.core.put(&[item], &encoding, None, None).map(|_| ())
    }

    /// As [`put`](Self::put), waiting at most `timeout` for room.
    pub fn put_timeout(&self, item: &T, until: SystemTime, timeout: Duration) -> Result<bool> {
        let encoding = self.encode(until)?;
        self.core.put(&[item], &encoding, Some(timeout), None)
    }

    /// Adds `items` as one node, to be taken from `until` on.
    pub fn put_multi(&self, items: &[T], until: SystemTime) -> Result<()> {
        let items: Vec<&T> = items.iter().collect();
        let encoding = self.encode(until)?;
        self.core.put(&items, &encoding, None, None).map(|_| ())
    }

    fn encode(&self, until: SystemTime) -> Result<String> {
        let millis = until
            .duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .filter(|ms| *ms > 0)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "the delay queue {}: a time must be after the epoch and within 2^63 ms of it, not {until:?}",
                    self.core.path()
                ))
            })?;
        Ok(names::epoch_to_string(millis as u64))
    }
}

impl<T: Send + 'static> Fenced<'_, DistributedDelayQueue<T>> {
    /// [`DistributedDelayQueue::put`], only while the fence stands.
    pub fn put(&self, item: &T, until: SystemTime) -> Result<()> {
        self.put_timeout_opt(item, until, None).map(|_| ())
    }

    /// [`DistributedDelayQueue::put_timeout`], only while the fence stands.
    pub fn put_timeout(&self, item: &T, until: SystemTime, timeout: Duration) -> Result<bool> {
        self.put_timeout_opt(item, until, Some(timeout))
    }

    fn put_timeout_opt(
        &self,
        item: &T,
        until: SystemTime,
        timeout: Option<Duration>,
    ) -> Result<bool> {
        let encoding = self.recipe.encode(until)?;
        let fence = Some(self.fence);
        self.recipe.core.put(&[item], &encoding, timeout, fence)
    }
}

/// A queue whose items carry an id (Curator's `DistributedIdQueue`), built
/// by [`QueueBuilder::build_id_queue`]: item nodes are
/// `queue-|<id>|<sequence>` (Curator's encoding; `/` and `|` in an id
/// become `_`), taken in the order put, and removable by id.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::{QueueBuilder, StringSerializer};
///
/// let queue = QueueBuilder::new(client, StringSerializer, "/queues/orders")
///     .build_id_queue()?; // producer only
/// queue.start()?;
/// queue.put(&"2 apples".to_string(), "order-17")?;
/// assert_eq!(queue.remove("order-17")?, 1); // cancelled
/// # Ok(()) }
/// ```
///
/// Its puts, consumers and close are
/// [`DistributedQueue`](crate::DistributedQueue)'s: a put retried after a
/// lost reply may leave its item twice, and `close` waits for the item
/// being consumed.
/// A [`remove`](Self::remove) whose delete was applied but whose reply
/// was lost meets `NoNode` on its retry: in lock-safe mode it counts that
/// item (its lock node, made with the item there and this session's
/// throughout, shows that no other lock-safe party took it; a party that
/// deletes items without the lock path is not seen); without a lock path
/// it cannot tell its own delete from another consumer's and does not
/// count it. A lock node's create retried after a lost reply knows the
/// node it meets for its own and goes on.
pub struct DistributedIdQueue<T: Send + 'static> {
    core: Arc<Core<T>>,
}

impl<T: Send + 'static> DistributedIdQueue<T> {
    queue_common!();

    /// Adds `item` under `id` (not empty); returns once it is in ZooKeeper.
    pub fn put(&self, item: &T, id: &str) -> Result<()> {
        let encoding = self.encode(id)?;
        self.core.put(&[item], &encoding, None, None).map(|_| ())
    }

    /// As [`put`](Self::put), waiting at most `timeout` for room.
    pub fn put_timeout(&self, item: &T, id: &str, timeout: Duration) -> Result<bool> {
        let encoding = self.encode(id)?;
        self.core.put(&[item], &encoding, Some(timeout), None)
    }

    /// Removes the items of `id` not taken yet, without consuming them
    /// (through their lock nodes in lock-safe mode); how many it removed.
    /// `/` and `|` in `id` match `_`, as they are stored.
    pub fn remove(&self, id: &str) -> Result<usize> {
        let id = self.valid(id)?;
        self.core.check_started()?;
        let mut count = 0;
        for name in self.core.children()? {
            if names::parse_id(&name).0 == id && self.core.try_remove(&name)? {
                count += 1;
            }
        }
        Ok(count)
    }

    /// Whether an item of `id` is in the queue (Curator's
    /// `debugIsQueued`).
    pub fn is_queued(&self, id: &str) -> Result<bool> {
        let id = self.valid(id)?;
        Ok(self
            .core
            .children()?
            .iter()
            .any(|name| names::parse_id(name).0 == id))
    }

    fn valid(&self, id: &str) -> Result<String> {
        if id.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "the id queue {}: an id cannot be empty",
                self.core.path()
            )));
        }
        Ok(names::fix_id(id))
    }

    fn encode(&self, id: &str) -> Result<String> {
        let id = self.valid(id)?;
        Ok(format!("{sep}{id}{sep}", sep = names::SEPARATOR))
    }
}

impl<T: Send + 'static> Fenced<'_, DistributedIdQueue<T>> {
    /// [`DistributedIdQueue::put`], only while the fence stands.
    pub fn put(&self, item: &T, id: &str) -> Result<()> {
        self.put_timeout_opt(item, id, None).map(|_| ())
    }

    /// [`DistributedIdQueue::put_timeout`], only while the fence stands.
    pub fn put_timeout(&self, item: &T, id: &str, timeout: Duration) -> Result<bool> {
        self.put_timeout_opt(item, id, Some(timeout))
    }

    fn put_timeout_opt(&self, item: &T, id: &str, timeout: Option<Duration>) -> Result<bool> {
        let encoding = self.recipe.encode(id)?;
        let fence = Some(self.fence);
        self.recipe.core.put(&[item], &encoding, timeout, fence)
    }
}

macro_rules! drop_and_debug {
    ($($queue:ident),*) => {$(
        impl<T: Send + 'static> Drop for $queue<T> {
            fn drop(&mut self) {
                self.core.close();
            }
        }

        impl<T: Send + 'static> std::fmt::Debug for $queue<T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($queue))
                    .field("path", &self.core.path())
                    .finish()
            }
        }
    )*};
}
drop_and_debug!(
    DistributedPriorityQueue,
    DistributedDelayQueue,
    DistributedIdQueue
);

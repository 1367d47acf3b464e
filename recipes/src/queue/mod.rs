//! Distributed queues (Curator's `recipes.queue`), with Curator's node
//! names and data framing so that Java and Rust processes put and take
//! on the same queue:
//!
//! - [`SimpleDistributedQueue`](crate::SimpleDistributedQueue): byte items
//!   as `qn-<sequence>` nodes, with blocking `take` and `poll_timeout`;
//! - [`DistributedQueue`](crate::DistributedQueue) and its kinds
//!   [`DistributedPriorityQueue`](crate::DistributedPriorityQueue),
//!   [`DistributedDelayQueue`](crate::DistributedDelayQueue) and
//!   [`DistributedIdQueue`](crate::DistributedIdQueue), built by
//!   [`QueueBuilder`](crate::QueueBuilder): typed items through a
//!   [`QueueSerializer`](crate::QueueSerializer), framed by
//!   [`ItemSerializer`](crate::ItemSerializer) in `queue-…` nodes, taken by
//!   a consumer thread that hands them to a callback or a channel, with
//!   Curator's lock-safe mode (`lock_path`) and bounded queues
//!   (`max_items`);
//! - [`QueueSharder`](crate::QueueSharder): one logical queue over several
//!   queue nodes, a new one added by the leader when one holds too many.
//!
//! A put returns only once its node is in ZooKeeper (Curator's
//! `putInBackground(false)`).
//!
//! Inside: `serializer` (items to bytes, and the framing), `names` (the
//! node names of each kind and the order they are taken in), `builder`,
//! `distributed` (the queue's state, its puts and its lifecycle),
//! `consumer` (the thread that takes items), `variants` (the priority,
//! delay and id queues), `simple`, `sharder`.

pub(crate) mod builder;
pub(crate) mod consumer;
pub(crate) mod distributed;
pub(crate) mod names;
pub(crate) mod serializer;
pub(crate) mod sharder;
pub(crate) mod simple;
pub(crate) mod variants;

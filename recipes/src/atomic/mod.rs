//! Distributed atomic values (Curator's `recipes.atomic`): optimistic
//! compare-and-set on one node's data, optionally promoted to a lock
//! ([`DistributedAtomicLong`](crate::DistributedAtomicLong),
//! [`DistributedAtomicInteger`](crate::DistributedAtomicInteger),
//! [`DistributedAtomicValue`](crate::DistributedAtomicValue) for bytes).

pub(crate) mod distributed_atomic;

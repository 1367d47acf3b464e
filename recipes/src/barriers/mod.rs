//! Barriers (Curator's `recipes.barriers`):
//! [`DistributedBarrier`](crate::DistributedBarrier) and
//! [`DistributedDoubleBarrier`](crate::DistributedDoubleBarrier).

pub(crate) mod barrier;

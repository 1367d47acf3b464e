//! Leader election (Curator's `recipes.leader`):
//! [`LeaderLatch`](crate::LeaderLatch), [`LeaderSelector`](crate::LeaderSelector)
//! and the [`Participant`](crate::Participant)s both read from their nodes.

pub(crate) mod leader_latch;
pub(crate) mod leader_selector;
pub(crate) mod participant;

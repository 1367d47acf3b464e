//! The lock protocol's decisions, for an exhaustive model check of the
//! protocol (`tests/tests/model.rs`). Not a stable API.
//!
//! A model of ZooKeeper (sequential and ephemeral nodes, one-shot watches,
//! sessions that expire) calls these to decide what each client does, so
//! that it checks the rules that ship rather than a copy of them:
//!
//! - [`sort_children`] / [`sort_key`]: the queue order of a lock's children;
//! - [`StandardDriver`] and [`ReadDriver`]: who holds and whom a waiter
//!   watches ([`LockDriver::decide`]), and where a downgrade read node sorts
//!   ([`LockDriver::sorting_sequence`]); a model gives the read driver its
//!   own [`WriteSide`];
//! - [`after_wake`]: what a lock waiter does once its wait ends (it lists
//!   again, whatever woke it, or gives up at its deadline);
//! - [`lease_granted`]: when the semaphore grants a lease.
//! - [`may_wait_for_room`]: when a semaphore waiter may go on waiting.
//!
//! [`StandardDriver`]: crate::StandardDriver
//! [`LockDriver::decide`]: crate::LockDriver::decide
//! [`LockDriver::sorting_sequence`]: crate::LockDriver::sorting_sequence

pub use crate::locks::lock_internals::{after_wake, sort_children, sort_key, AfterWake};
pub use crate::locks::rwlock::{ReadDriver, WriteHold, WriteSide};
pub use crate::locks::semaphore::{lease_granted, may_wait_for_room};

//! latchkey examples
//!
//! The programs live in `src/bin/`; two modules hold what they share or
//! what is worth testing on its own:
//!
//! - [`mod@bench`]: the parts of the benchmark program that are worth testing on their own;
//! - [`setup`]: the embedded-or-given ZooKeeper and the client of the Curator-style examples.

pub mod bench;
pub mod setup;

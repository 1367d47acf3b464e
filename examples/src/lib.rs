//! latchkey examples
//!
//! The programs live in `src/bin/`; [`mod@bench`] holds the parts of the
//! benchmark program that are worth testing on their own.

pub mod bench;

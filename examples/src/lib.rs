//! latchkey examples

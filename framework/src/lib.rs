//! latchkey-framework

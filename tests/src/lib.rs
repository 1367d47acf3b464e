//! latchkey-test harness

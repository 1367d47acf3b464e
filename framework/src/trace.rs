//! `tracing` spans and events, with the `tracing` feature: a span per
//! operation (`operation`: op, path, attempts, outcome, error) and an event
//! per connection-state change. Without the feature these are empty
//! functions and no `tracing` code is compiled in.

use crate::error::{Error, Result};
use crate::state::ConnectionState;

/// How an operation ended, as its span records it.
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
fn outcome<T>(result: &Result<T>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(Error::Timeout { .. }) => "timed_out",
        Err(_) => "error",
    }
}

#[cfg(feature = "tracing")]
mod imp {
    use super::*;
    use tracing::field::{display, Empty};

    /// The span of one operation, entered on the calling thread until
    /// [`OpSpan::finish`].
    pub(crate) struct OpSpan(tracing::span::EnteredSpan);

    impl OpSpan {
        pub(crate) fn start(op: &'static str, path: &str) -> Self {
            let span = tracing::debug_span!(
                "operation",
                op,
                path,
                attempts = Empty,
                outcome = Empty,
                error = Empty
            );
            OpSpan(span.entered())
        }

        pub(crate) fn finish<T>(self, attempts: u32, result: &Result<T>) {
            self.0.record("attempts", attempts);
            self.0.record("outcome", outcome(result));
            if let Err(e) = result {
                self.0.record("error", display(e));
            }
        }
    }

    pub(crate) fn state_changed(state: ConnectionState) {
        tracing::info!(state = ?state, "connection state changed");
    }
}

#[cfg(not(feature = "tracing"))]
mod imp {
    use super::*;

    pub(crate) struct OpSpan;

    impl OpSpan {
        #[inline(always)]
        pub(crate) fn start(_op: &'static str, _path: &str) -> Self {
            OpSpan
        }

        #[inline(always)]
        pub(crate) fn finish<T>(self, _attempts: u32, _result: &Result<T>) {}
    }

    #[inline(always)]
    pub(crate) fn state_changed(_state: ConnectionState) {}
}

pub(crate) use imp::{state_changed, OpSpan};

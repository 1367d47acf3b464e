//! One request's bookkeeping: the slot its caller waits on, and the entry
//! the engine keeps while the request waits for its reply.
//!
//! A slot gets exactly one outcome. Either the engine answers it, or the
//! caller gives up on it first (deadline, cancel) and it is *abandoned*:
//! the request keeps its place on the connection, its late reply is read
//! and thrown away, and a watch it would have registered is not. So a call
//! that returned an error never leaves a live watch behind, and a call is
//! never applied twice by the client.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::watches::WatchRegistration;
use crate::cancel;
use crate::error::{Error, ErrorCode};

/// A successful reply's body.
pub(crate) type Reply = Vec<u8>;

enum State {
    Waiting,
    Answered(Result<Reply, Error>),
    /// The caller has its outcome (taken, or gave up): later answers are dropped.
    Done,
}

/// Where one request's outcome is left for its caller. The caller parks at
/// once: a reply takes a network round trip, so spinning for it only burns
/// CPU that the server and the other clients could use.
pub(crate) struct ReplySlot {
    state: Mutex<State>,
    ready: Condvar,
}

impl ReplySlot {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(ReplySlot {
            state: Mutex::new(State::Waiting),
            ready: Condvar::new(),
        })
    }

    /// Answers the slot, running `accept` first under the slot's lock so
    /// that what it does (registering a watch) is in place before the caller
    /// sees the result. Returns false, without running `accept`, when the
    /// caller has given up already.
    pub(crate) fn answer(
        &self,
        result: Result<Reply, Error>,
        accept: impl FnOnce(&Result<Reply, Error>),
    ) -> bool {
        let answered = self.settle(result, accept);
        if answered {
            self.wake();
        }
        answered
    }

    /// Answers the slot as [`answer`](Self::answer) does, without waking
    /// the caller: the engine wakes it with [`wake`](Self::wake) once it
    /// has let go of the connection, so the woken caller finds the
    /// connection free for its next request instead of handing it over.
    pub(crate) fn settle(
        &self,
        result: Result<Reply, Error>,
        accept: impl FnOnce(&Result<Reply, Error>),
    ) -> bool {
        let mut state = self.state.lock();
        if !matches!(*state, State::Waiting) {
            return false;
        }
        accept(&result);
        *state = State::Answered(result);
        true
    }

    /// Wakes the caller of a settled slot. The state is set under the
    /// lock before this runs, so a caller that has not parked yet sees it
    /// and does not park.
    pub(crate) fn wake(&self) {
        self.ready.notify_one();
    }

    /// Whether the slot still waits for its outcome.
    pub(crate) fn is_waiting(&self) -> bool {
        matches!(*self.state.lock(), State::Waiting)
    }

    /// The outcome, waiting for it until `deadline`. A deadline passed or a
    /// cancel of the calling thread's operation abandons the request: the
    /// error says the request may or may not have run.
    pub(crate) fn wait_until(self: &Arc<Self>, deadline: Instant) -> Result<Reply, Error> {
        let mut state = self.state.lock();
        let slot = Arc::clone(self);
        let notify = move || {
            let _state = slot.state.lock();
            slot.ready.notify_all();
        };
        let waited = cancel::wait_until(
            &self.ready,
            &mut state,
            deadline,
            |s| !matches!(s, State::Waiting),
            notify,
        );
        let gave_up = match waited {
            Ok(_) => Error::from_code(ErrorCode::OperationTimeout),
            Err(e) => e,
        };
        // An answer that came with the deadline still counts.
        match std::mem::replace(&mut *state, State::Done) {
            State::Answered(result) => result,
            State::Waiting | State::Done => Err(gave_up),
        }
    }
}

/// A request written to the live connection, waiting for its reply. The
/// engine keeps these in the order they were written: ZooKeeper answers a
/// session's requests in that order.
pub(crate) struct Pending {
    pub xid: i32,
    pub slot: Option<Arc<ReplySlot>>,
    pub watch: Option<WatchRegistration>,
}

impl Pending {
    /// Answers the caller; `accept` runs only if the caller still waits.
    pub(crate) fn answer(
        self,
        result: Result<Reply, Error>,
        accept: impl FnOnce(&Result<Reply, Error>, Option<WatchRegistration>),
    ) {
        if let Some(slot) = self.settle(result, accept) {
            slot.wake();
        }
    }

    /// Settles the caller's slot without waking it (see
    /// [`ReplySlot::settle`]); returns the slot to wake, if its caller
    /// still waits.
    pub(crate) fn settle(
        mut self,
        result: Result<Reply, Error>,
        accept: impl FnOnce(&Result<Reply, Error>, Option<WatchRegistration>),
    ) -> Option<Arc<ReplySlot>> {
        let watch = self.watch.take();
        let slot = self.slot.take()?;
        slot.settle(result, |r| accept(r, watch)).then_some(slot)
    }
}

impl Drop for Pending {
    /// A request dropped unanswered lost its connection: it may or may not
    /// have run, and the retry loop may try it on the next connection.
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.answer(Err(Error::from_code(ErrorCode::ConnectionLoss)), |_| {});
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_abandoned_slot_takes_no_late_answer() {
        let slot = ReplySlot::new();
        let gave_up = slot.wait_until(Instant::now() + Duration::from_millis(5));
        assert!(gave_up.unwrap_err().is(ErrorCode::OperationTimeout));
        let mut accepted = false;
        assert!(!slot.answer(Ok(vec![1]), |_| accepted = true));
        assert!(!accepted, "a late reply must not register anything");
    }

    #[test]
    fn an_answer_is_accepted_before_the_caller_sees_it() {
        let slot = ReplySlot::new();
        let mut accepted = false;
        assert!(slot.answer(Ok(vec![7]), |r| accepted = r.is_ok()));
        assert!(accepted);
        assert_eq!(slot.wait_until(Instant::now()).unwrap(), vec![7]);
    }

    #[test]
    fn a_dropped_pending_request_reads_as_connection_loss() {
        let slot = ReplySlot::new();
        drop(Pending {
            xid: 1,
            slot: Some(Arc::clone(&slot)),
            watch: None,
        });
        let r = slot.wait_until(Instant::now() + Duration::from_secs(5));
        assert!(r.unwrap_err().is(ErrorCode::ConnectionLoss));
    }
}

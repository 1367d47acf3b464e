//! One request's bookkeeping: the slot its caller waits on, and the entry
//! the engine keeps while the request waits for its reply.
//!
//! A slot gets exactly one outcome, and says which side of the wire the
//! request was on when its caller stopped waiting:
//! - still *queued* (in the session's outbox): the engine never writes
//!   it, and the caller's error says it was not applied;
//! - *written*: the request keeps its place on the connection, its late
//!   reply is read and thrown away, and a watch it would have registered
//!   is not. So a call that returned an error never leaves a live watch
//!   behind, and a call is never applied twice by the client.
//!
//! The engine also refuses to write a request whose deadline has passed
//! by the time its turn comes: that caller hears it was not sent.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::watches::WatchRegistration;
use crate::cancel;
use crate::error::{Error, ErrorCode};

/// A successful reply's body.
pub(crate) type Reply = Vec<u8>;

enum State {
    /// In the outbox; the engine has not taken it.
    Queued,
    /// Taken by the engine for writing: it may reach the server.
    Written,
    Answered(Result<Reply, Error>),
    /// The engine found its deadline passed before writing it.
    Unsent,
    /// The caller has its outcome (taken, or gave up): later answers are dropped.
    Done,
}

/// How a caller's wait on its slot ended, before it looks at the outbox.
pub(crate) enum Waited {
    /// The outcome, to return as it is.
    Outcome(Result<Reply, Error>),
    /// The deadline passed, or the call was cancelled (`Cancelled`), while
    /// the request was queued or written: see [`ReplySlot::give_up`].
    GaveUp(Error),
}

/// Where one request's outcome is left for its caller. The caller parks at
/// once: a reply takes a network round trip, so spinning for it only burns
/// CPU that the server and the other clients could use.
pub(crate) struct ReplySlot {
    state: Mutex<State>,
    ready: Condvar,
    /// The caller's deadline: the engine does not write the request after it.
    deadline: Instant,
}

impl ReplySlot {
    pub(crate) fn new(deadline: Instant) -> Arc<Self> {
        Arc::new(ReplySlot {
            state: Mutex::new(State::Queued),
            ready: Condvar::new(),
            deadline,
        })
    }

    /// The engine's turn to write the request, at `now`: true if it is to
    /// be written. False if its caller gave up already, or its deadline has
    /// passed (the caller then hears it was not sent).
    pub(crate) fn take_for_writing(&self, now: Instant) -> bool {
        let mut state = self.state.lock();
        if !matches!(*state, State::Queued) {
            return false;
        }
        if now >= self.deadline {
            *state = State::Unsent;
            drop(state);
            self.ready.notify_one();
            return false;
        }
        *state = State::Written;
        true
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
        let mut state = self.state.lock();
        if !matches!(*state, State::Queued | State::Written) {
            return false;
        }
        accept(&result);
        *state = State::Answered(result);
        drop(state);
        self.ready.notify_one();
        true
    }

    /// Waits for the outcome until `deadline`; a cancel of the calling
    /// thread's operation ends the wait too.
    pub(crate) fn wait_until(self: &Arc<Self>, deadline: Instant) -> Waited {
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
            |s| !matches!(s, State::Queued | State::Written),
            notify,
        );
        let gave_up = match waited {
            Ok(_) => Error::from_code(ErrorCode::OperationTimeout),
            Err(e) => e,
        };
        // An answer that came with the deadline still counts.
        match std::mem::replace(&mut *state, State::Done) {
            State::Answered(result) => Waited::Outcome(result),
            State::Unsent => Waited::Outcome(Err(Error::Unsent { cap: None })),
            old @ (State::Queued | State::Written) => {
                *state = old;
                Waited::GaveUp(gave_up)
            }
            State::Done => Waited::GaveUp(gave_up),
        }
    }

    /// The caller stops waiting, with `why` (a timeout or a cancel): the
    /// outcome it returns. Called under the outbox's lock, so that the
    /// engine cannot take the request meanwhile: `Queued` means it never
    /// will (the caller removes it), and the error says it was not sent
    /// (unless the call was cancelled, which says so). An outcome that came
    /// meanwhile still counts.
    pub(crate) fn give_up(&self, why: Error) -> (Result<Reply, Error>, bool) {
        let mut state = self.state.lock();
        match std::mem::replace(&mut *state, State::Done) {
            State::Answered(result) => (result, false),
            State::Unsent => (Err(Error::Unsent { cap: None }), false),
            State::Queued => match why {
                Error::Cancelled => (Err(why), true),
                _ => (Err(Error::Unsent { cap: None }), true),
            },
            State::Written | State::Done => (Err(why), false),
        }
    }
}

/// A request written to the live connection, waiting for its reply. The
/// engine keeps these in the order they were written: ZooKeeper answers a
/// session's requests in that order.
pub(crate) struct Pending {
    pub xid: i32,
    slot: Option<Arc<ReplySlot>>,
    pub watch: Option<WatchRegistration>,
}

impl Pending {
    pub(crate) fn new(xid: i32, slot: Arc<ReplySlot>, watch: Option<WatchRegistration>) -> Self {
        Pending {
            xid,
            slot: Some(slot),
            watch,
        }
    }

    /// Answers the caller; `accept` runs only if the caller still waits.
    /// The watch registration is handed back when it was not accepted (the
    /// caller gave up): it holds user code, which the engine must not drop
    /// itself.
    pub(crate) fn answer(
        mut self,
        result: Result<Reply, Error>,
        accept: impl FnOnce(&Result<Reply, Error>, Option<WatchRegistration>),
    ) -> Option<WatchRegistration> {
        let mut watch = self.watch.take();
        if let Some(slot) = self.slot.take() {
            slot.answer(result, |r| accept(r, watch.take()));
        }
        watch
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

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[test]
    fn an_abandoned_slot_takes_no_late_answer() {
        let slot = ReplySlot::new(soon());
        assert!(slot.take_for_writing(Instant::now()));
        let Waited::GaveUp(why) = slot.wait_until(Instant::now() + Duration::from_millis(5)) else {
            panic!("no answer was given");
        };
        let (gave_up, was_queued) = slot.give_up(why);
        assert!(gave_up.unwrap_err().is(ErrorCode::OperationTimeout));
        assert!(!was_queued, "written, so in doubt");
        let mut accepted = false;
        assert!(!slot.answer(Ok(vec![1]), |_| accepted = true));
        assert!(!accepted, "a late reply must not register anything");
    }

    #[test]
    fn an_answer_is_accepted_before_the_caller_sees_it() {
        let slot = ReplySlot::new(soon());
        let mut accepted = false;
        assert!(slot.answer(Ok(vec![7]), |r| accepted = r.is_ok()));
        assert!(accepted);
        assert!(matches!(slot.wait_until(Instant::now()), Waited::Outcome(Ok(v)) if v == [7]));
    }

    #[test]
    fn a_queued_request_given_up_is_not_sent_and_says_so() {
        let slot = ReplySlot::new(soon());
        let Waited::GaveUp(why) = slot.wait_until(Instant::now()) else {
            panic!("no answer was given");
        };
        let (gave_up, was_queued) = slot.give_up(why);
        assert!(was_queued);
        assert!(gave_up.unwrap_err().is_unsent());
        assert!(
            !slot.take_for_writing(Instant::now()),
            "given up: not written"
        );
    }

    #[test]
    fn the_engine_does_not_write_a_request_past_its_deadline() {
        let slot = ReplySlot::new(Instant::now());
        assert!(!slot.take_for_writing(Instant::now()));
        match slot.wait_until(soon()) {
            Waited::Outcome(Err(e)) => assert!(e.is_unsent(), "{e}"),
            _ => panic!("the caller must hear it was not sent"),
        }
    }
}

//! A session's outbox: the requests its callers handed over that the
//! engine has not taken for writing yet (Java's `outgoingQueue`).
//!
//! Callers only ever touch this queue, never the connection: they push
//! their frames and wake the engine, which takes them in order, as much at
//! a time as the socket is ready for. So a request here was not sent, and
//! its caller may still take it back when it gives up (the error then says
//! it was not applied). The bytes waiting here are capped: a caller that
//! finds the outbox full waits for room until its own deadline.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use mio::Token;
use parking_lot::{Condvar, Mutex, MutexGuard};

use super::slot::{Reply, ReplySlot};
use super::watches::WatchRegistration;
use crate::cancel;
use crate::error::{Error, ErrorCode};

/// The default cap on a connection's unsent bytes: many large requests
/// (a request may be up to 1 MiB), far below what would strain a process.
pub(crate) const DEFAULT_MAX_UNSENT: usize = 16 << 20;

/// A frame a caller handed over, with where its reply goes (none for an
/// auth packet, whose answer comes under a fixed xid).
pub(crate) struct Submit {
    pub frame: Vec<u8>,
    pub reply: Option<(Arc<ReplySlot>, Option<WatchRegistration>)>,
}

struct Queue {
    /// Whether a connection is live: requests are taken only then.
    live: bool,
    outgoing: VecDeque<Submit>,
    /// The bytes of the frames in `outgoing`.
    bytes: usize,
    /// The live (or last) connection's token with the engine.
    token: Option<Token>,
    /// Whether the engine has been asked to take the queue and has not
    /// emptied it yet: one wake per batch, not per request.
    scheduled: bool,
    /// Callers waiting for room.
    waiting: usize,
}

/// See the module doc.
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    /// Signalled when frames leave the queue, or the connection changes.
    room: Condvar,
    /// Signalled when a connection goes live or the session ends.
    connected: Condvar,
    cap: usize,
}

/// What the engine took: frames to write, in order.
pub(crate) struct Taken {
    pub frames: Vec<Submit>,
    /// Frames are left in the queue.
    pub more: bool,
}

impl Outbox {
    pub(crate) fn new(cap: usize) -> Self {
        Outbox {
            queue: Mutex::new(Queue {
                live: false,
                outgoing: VecDeque::new(),
                bytes: 0,
                token: None,
                scheduled: false,
                waiting: 0,
            }),
            room: Condvar::new(),
            connected: Condvar::new(),
            cap,
        }
    }

    /// Queues `batch` (all or nothing) for the live connection; returns
    /// the token to wake the engine with, if it is not woken already.
    /// Fails with `ConnectionLoss` when no connection is live, and with
    /// [`Error::Unsent`] when `deadline` passes first (nothing queued):
    /// already passed, or while the outbox had no room. A batch larger than
    /// the cap goes in alone, once the outbox is empty.
    pub(crate) fn submit(
        self: &Arc<Self>,
        batch: Vec<Submit>,
        deadline: Instant,
    ) -> Result<Option<Token>, Error> {
        let size: usize = batch.iter().map(|s| s.frame.len()).sum();
        let mut q = self.queue.lock();
        if !q.live {
            return Err(Error::from_code(ErrorCode::ConnectionLoss));
        }
        if Instant::now() >= deadline {
            return Err(Error::Unsent { cap: None });
        }
        if q.bytes > 0 && q.bytes + size > self.cap {
            self.wait_for_room(&mut q, size, deadline)?;
        }
        q.bytes += size;
        q.outgoing.extend(batch);
        let first = !std::mem::replace(&mut q.scheduled, true);
        Ok(q.token.filter(|_| first))
    }

    fn wait_for_room(
        self: &Arc<Self>,
        q: &mut MutexGuard<'_, Queue>,
        size: usize,
        deadline: Instant,
    ) -> Result<(), Error> {
        let cap = self.cap;
        let outbox = Arc::clone(self);
        // A cancel wakes every waiter; each checks its own token.
        let notify = move || {
            let _q = outbox.queue.lock();
            outbox.room.notify_all();
        };
        q.waiting += 1;
        let waited = cancel::wait_until(
            &self.room,
            q,
            deadline,
            |q| !q.live || q.bytes == 0 || q.bytes + size <= cap,
            notify,
        );
        q.waiting -= 1;
        match waited {
            Err(e) => Err(e),
            Ok(_) if !q.live => Err(Error::from_code(ErrorCode::ConnectionLoss)),
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::Unsent { cap: Some(cap) }),
        }
    }

    /// The caller of `slot` stops waiting with `why`: takes its frame out
    /// of the queue if the engine has not taken it, and returns the
    /// outcome (see [`ReplySlot::give_up`]), with the watch registration
    /// of a frame taken out (user code, for the caller to drop).
    pub(crate) fn withdraw(
        &self,
        slot: &Arc<ReplySlot>,
        why: Error,
    ) -> (Result<Reply, Error>, Option<WatchRegistration>) {
        let mut q = self.queue.lock();
        let (outcome, queued) = slot.give_up(why);
        if !queued {
            return (outcome, None);
        }
        let at = q
            .outgoing
            .iter()
            .position(|s| matches!(&s.reply, Some((s, _)) if Arc::ptr_eq(s, slot)));
        let removed = at.and_then(|at| q.outgoing.remove(at));
        let watch = removed.and_then(|s| {
            q.bytes -= s.frame.len();
            s.reply.and_then(|(_, watch)| watch)
        });
        if q.waiting > 0 {
            self.room.notify_all();
        }
        (outcome, watch)
    }

    /// For the engine: takes frames from the front, about `budget` bytes
    /// (at least one frame), leaving out those whose callers gave up or
    /// whose deadline has passed (their registrations are put in
    /// `dropped`, to be let go of off the engine's thread).
    pub(crate) fn take(&self, budget: usize, dropped: &mut Vec<WatchRegistration>) -> Taken {
        let now = Instant::now();
        let mut q = self.queue.lock();
        let mut frames = Vec::new();
        let mut took = 0;
        while took < budget.max(1) {
            let Some(s) = q.outgoing.pop_front() else {
                break;
            };
            q.bytes -= s.frame.len();
            match &s.reply {
                Some((slot, _)) if !slot.take_for_writing(now) => {
                    dropped.extend(s.reply.and_then(|(_, watch)| watch));
                }
                _ => {
                    took += s.frame.len();
                    frames.push(s);
                }
            }
        }
        let more = !q.outgoing.is_empty();
        q.scheduled = more;
        if q.waiting > 0 && took > 0 {
            self.room.notify_all();
        }
        Taken { frames, more }
    }

    /// A connection went live under `token`: requests may be queued.
    pub(crate) fn go_live(&self, token: Token) {
        let mut q = self.queue.lock();
        q.token = Some(token);
        q.scheduled = false;
        q.live = true;
        self.connected.notify_all();
    }

    /// The connection's token with the engine, live or last.
    pub(crate) fn token(&self) -> Option<Token> {
        self.queue.lock().token
    }

    /// No connection from now on: what waits here was never sent, and
    /// fails as a lost connection (the retry loop may send it again). The
    /// watch registrations of those frames are put in `dropped`.
    pub(crate) fn close(&self, dropped: &mut Vec<WatchRegistration>) {
        let mut q = self.queue.lock();
        q.live = false;
        q.bytes = 0;
        let lost = std::mem::take(&mut q.outgoing);
        self.room.notify_all();
        self.connected.notify_all();
        drop(q);
        for s in lost {
            if let Some((slot, watch)) = s.reply {
                slot.answer(Err(Error::from_code(ErrorCode::ConnectionLoss)), |_| {});
                dropped.extend(watch);
            }
        }
    }

    /// Wakes whoever waits for a connection (the session has ended).
    pub(crate) fn wake_waiters(&self) {
        let _q = self.queue.lock();
        self.connected.notify_all();
        self.room.notify_all();
    }

    /// Waits until a connection is live or `ended()` holds (true), or
    /// `deadline` passes or the calling thread's operation is cancelled
    /// (false).
    pub(crate) fn wait_live(self: &Arc<Self>, deadline: Instant, ended: impl Fn() -> bool) -> bool {
        let outbox = Arc::clone(self);
        let notify = move || {
            let _q = outbox.queue.lock();
            outbox.connected.notify_all();
        };
        let mut q = self.queue.lock();
        cancel::wait_until(
            &self.connected,
            &mut q,
            deadline,
            |q| q.live || ended(),
            notify,
        )
        .unwrap_or(false)
    }
}

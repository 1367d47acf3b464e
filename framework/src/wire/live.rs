//! A live connection's protocol, as the engine's thread drives it: it
//! alone writes the session's requests (taking them from the outbox as
//! the socket is ready for them, each given its xid then), reads every
//! reply and event, matches replies to requests in order, runs the
//! library's wakers, sends pings and judges silence (2/3 of the session
//! timeout, as the Java client does).
//!
//! No user code runs here, and none is dropped here: watchers go to the
//! session's event thread with their event, and a watch registration
//! whose caller gave up is handed there too, to be let go of.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Interest, Registry, Token};

use super::clock::Clocks;
use super::conn::{Conn, Received};
use super::connect::RwSearch;
use super::engine::Driven;
use super::jute::Reader;
use super::outbox::Submit;
use super::proto::{self, op, xid, ReplyHeader, WatcherEvent};
use super::session::{redial, Dialer, Inner, WireEvent};
use super::slot::Pending;
use super::watches::WatchRegistration;
use crate::error::{Error, ErrorCode};
use crate::metrics;
use crate::{EventType, WatchedEvent};

/// A connection that lasted this long was healthy: the next reconnect
/// starts the back-off afresh.
const HEALTHY_CONNECTION: Duration = Duration::from_secs(1);

/// How many bytes the engine takes from the outbox while the socket has
/// not taken what it took before: more would only move requests out of
/// their callers' reach (a request still in the outbox can be withdrawn
/// unsent).
const WRITE_BATCH: usize = 64 * 1024;

/// How many batches one connection writes before the engine serves the
/// others; it is served again at once after them.
const MAX_BATCHES: usize = 16;

/// Why a connection ended.
pub(super) enum Ended {
    /// Lost (closed, reset, failed): reconnect to the same session.
    Dropped,
    /// Silent past the read timeout: reconnect to the same session, each
    /// attempt waiting its whole connection timeout.
    Silent,
    /// Connected read-only, a read-write server was found: connect there.
    /// Its host as in the connect string (the name TLS verifies) and address.
    ReadWriteFound(String, SocketAddr),
    /// The server rejected the client's auth: why, and whether it was the
    /// SASL login.
    AuthFailed(String, bool),
}

/// One live connection and its requests, owned by the engine.
pub(super) struct Live {
    inner: Arc<Inner>,
    conn: Conn,
    /// Written, waiting for their replies, in the order they were written.
    pending: VecDeque<Pending>,
    /// Bytes read and not yet dispatched (a partial frame).
    received: Vec<u8>,
    clocks: Clocks,
    /// Frames written whose replies are not matched to a request: auth,
    /// SetWatches and pings.
    unanswered: usize,
    token: Option<Token>,
    /// The poll is asked for writable events too.
    writable_interest: bool,
    read_only: bool,
    /// Connected read-only: the search for a read-write server.
    search: Option<RwSearch>,
    dialer: Dialer,
    connected_at: Instant,
    ended: Ended,
    /// Watch registrations to let go of on the event thread, gathered over
    /// one round of service.
    released: Vec<WatchRegistration>,
}

impl Live {
    /// A connection fresh from its handshake, with auth and re-armed
    /// watches queued before any caller's request.
    pub(super) fn new(inner: Arc<Inner>, mut conn: Conn, read_only: bool, dialer: Dialer) -> Self {
        let negotiated = inner.creds.lock().negotiated;
        let primed = inner.prime(&mut conn);
        inner.probe.lock().connected(read_only, negotiated);
        Live {
            conn,
            pending: VecDeque::new(),
            received: Vec::with_capacity(64 * 1024),
            clocks: Clocks::new(negotiated),
            unanswered: primed,
            token: None,
            writable_interest: false,
            read_only,
            search: None,
            dialer,
            connected_at: Instant::now(),
            ended: Ended::Dropped,
            released: Vec::new(),
            inner,
        }
    }

    /// Starts the read-write search of a read-only connection, as the Java
    /// client's pingRwServer; a find wakes the engine for this connection.
    fn start_search(&mut self, token: Token) {
        let engine = self.inner.engine;
        let wake = move || engine.ready(token);
        let inner = &self.inner;
        let hosts = Arc::clone(&inner.hosts);
        match RwSearch::start(Arc::clone(&inner.probe), hosts, inner.cfg.tls.clone(), wake) {
            Ok(search) => self.search = Some(search),
            Err(e) => log::warn!("cannot search for a read-write server: {e}"),
        }
    }

    /// One round of service; `Some` when the connection must end.
    fn step(&mut self, readable: bool) -> Option<Ended> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Some(Ended::Dropped);
        }
        if readable {
            if let Some(ended) = self.read_available() {
                return Some(ended);
            }
        }
        if let Some(ended) = self.write() {
            return Some(ended);
        }
        if self.clocks.silent(Instant::now()) {
            log::info!(
                "no reply from server for {:?}, reconnecting",
                self.clocks.read_timeout
            );
            return Some(Ended::Silent);
        }
        if let Some((host, addr)) = self.search.as_ref().and_then(RwSearch::found) {
            log::info!("read-write server found at {host} ({addr}), moving there");
            return Some(Ended::ReadWriteFound(host, addr));
        }
        None
    }

    /// Takes requests from the outbox as the socket takes them, pings an
    /// idle connection, and asks the poll for writability while bytes wait.
    fn write(&mut self) -> Option<Ended> {
        for batch in 0.. {
            let mut more = false;
            if !self.conn.has_output() {
                let taken = self.inner.outbox.take(WRITE_BATCH, &mut self.released);
                more = taken.more;
                self.enqueue(taken.frames);
            }
            let now = Instant::now();
            if !self.conn.has_output() && self.clocks.ping_due(now) {
                self.conn
                    .queue(&proto::request(xid::PING, op::PING).finish_frame());
                self.clocks.last_send = now;
                self.unanswered += 1;
            }
            if let Err(e) = self.conn.flush() {
                log::debug!("write failed, dropping connection: {e}");
                return Some(Ended::Dropped);
            }
            if self.conn.has_output() || !more {
                break;
            }
            if batch + 1 == MAX_BATCHES {
                // The others first; this one is served again right after.
                if let Some(token) = self.token {
                    self.inner.engine.ready(token);
                }
                break;
            }
        }
        let want_writable = self.conn.has_output();
        if want_writable != self.writable_interest {
            let token = self.token?;
            let interest = match want_writable {
                true => Interest::READABLE | Interest::WRITABLE,
                false => Interest::READABLE,
            };
            if let Err(e) = self
                .inner
                .engine
                .set_interest(self.conn.fd(), token, interest)
            {
                log::debug!("cannot poll the connection, dropping it: {e}");
                return Some(Ended::Dropped);
            }
            self.writable_interest = want_writable;
        }
        None
    }

    /// Puts `frames` in the write buffer, each request given its xid now,
    /// so xids reach the server in the order replies are matched.
    fn enqueue(&mut self, frames: Vec<Submit>) {
        if frames.is_empty() {
            return;
        }
        let mut requests = 0;
        for Submit { mut frame, reply } in frames {
            match reply {
                Some((slot, watch)) => {
                    let xid = self.dialer.xids.take();
                    frame[4..8].copy_from_slice(&xid.to_be_bytes());
                    self.pending.push_back(Pending::new(xid, slot, watch));
                    requests += 1;
                }
                None => self.unanswered += 1,
            }
            self.conn.queue(&frame);
        }
        self.clocks.last_send = Instant::now();
        metrics::add(&self.inner.cfg.counters.requests_sent, requests);
    }

    /// Reads everything the socket has and dispatches every complete
    /// frame; `Some` if the connection must end.
    fn read_available(&mut self) -> Option<Ended> {
        loop {
            match self.conn.receive(&mut self.received) {
                Ok(Received::Bytes(0)) => {}
                Ok(got @ (Received::Bytes(_) | Received::Drained)) => {
                    self.clocks.last_recv = Instant::now();
                    match self.dispatch_frames() {
                        Ok(None) => {}
                        Ok(Some(ended)) => return Some(ended),
                        Err(e) => {
                            log::warn!("protocol error, reconnecting: {e}");
                            return Some(Ended::Dropped);
                        }
                    }
                    if matches!(got, Received::Drained) {
                        return None;
                    }
                }
                Ok(Received::WouldBlock) => return None,
                Ok(Received::Closed) => return Some(Ended::Dropped),
                Err(e) => {
                    log::debug!("read failed: {e}");
                    return Some(Ended::Dropped);
                }
            }
        }
    }

    /// Handles every complete frame received, leaving a partial one behind.
    fn dispatch_frames(&mut self) -> Result<Option<Ended>, Error> {
        let buf = std::mem::take(&mut self.received);
        let mut at = 0;
        let mut outcome = Ok(None);
        while buf.len() - at >= 4 {
            let len = i32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
            if len < 0 || len as usize > self.inner.cfg.max_reply {
                outcome = Err(Error::Marshalling("bad frame length"));
                break;
            }
            let end = at + 4 + len as usize;
            if buf.len() < end {
                break;
            }
            match self.dispatch(&buf[at + 4..end]) {
                Ok(None) => {}
                Ok(Some(ended)) => outcome = Ok(Some(ended)),
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
            at = end;
        }
        self.received = buf;
        self.received.drain(..at);
        outcome
    }

    fn dispatch(&mut self, frame: &[u8]) -> Result<Option<Ended>, Error> {
        let inner = &self.inner;
        let mut r = Reader::new(frame);
        let header = ReplyHeader::read(&mut r)?;
        if header.zxid > 0 {
            inner.last_zxid.fetch_max(header.zxid, Ordering::AcqRel);
        }
        match header.xid {
            xid::WATCH_EVENT => {
                let ev = WatcherEvent::read(&mut r)?;
                metrics::add(&inner.cfg.counters.watch_events, 1);
                let event_type = EventType::from_wire(ev.event_type);
                let fired = inner.watches.lock().triggered(event_type, &ev.path);
                let event = WatchedEvent {
                    event_type,
                    path: ev.path,
                };
                let mut watchers = Vec::new();
                for w in fired {
                    match w.waker {
                        // The library's wakers only wake a thread: at once,
                        // here, in the order of their events.
                        true => super::session::run_watcher(w.run, &event),
                        false => watchers.push(w.run),
                    }
                }
                if !watchers.is_empty() {
                    inner.fire(watchers, event);
                }
            }
            xid::PING | xid::SET_WATCHES => self.unanswered = self.unanswered.saturating_sub(1),
            xid::AUTH => {
                self.unanswered = self.unanswered.saturating_sub(1);
                if header.err != 0 {
                    log::warn!("authentication failed ({})", header.err);
                    return Ok(Some(Ended::AuthFailed(
                        format!(
                            "the server rejected an auth packet ({})",
                            ErrorCode::from_wire(header.err)
                        ),
                        false,
                    )));
                }
            }
            _ => {
                let Some(request) = self.pending.pop_front() else {
                    return Err(Error::Marshalling("reply with no request waiting"));
                };
                if request.xid != header.xid {
                    // Dropped with the connection, the request fails at once.
                    self.pending.push_front(request);
                    return Err(Error::Marshalling("reply out of order"));
                }
                let result = if header.err == 0 {
                    Ok(r.rest().to_vec())
                } else {
                    Err(Error::from_code(ErrorCode::from_wire(header.err)))
                };
                // The watch is registered only for a caller still waiting,
                // before it sees the reply; an abandoned call leaves none.
                let released = &mut self.released;
                let left = request.answer(result, |result, watch| {
                    if let Some(reg) = watch {
                        inner.register_watch(reg, result, released);
                    }
                });
                released.extend(left);
            }
        }
        Ok(None)
    }
}

impl Driven for Live {
    fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        // Auth and re-armed watches may wait to be written already.
        let interest = Interest::READABLE | Interest::WRITABLE;
        registry.register(&mut self.conn.source(), token, interest)?;
        self.writable_interest = true;
        self.token = Some(token);
        Ok(())
    }

    fn deregister(&mut self, registry: &Registry) {
        let _ = registry.deregister(&mut self.conn.source());
        self.conn.shut_down();
    }

    fn attached(&mut self, token: Token) {
        if self.read_only {
            self.start_search(token);
        }
        if self.inner.closed.load(Ordering::Acquire) {
            return; // served next, and ended
        }
        self.inner.outbox.go_live(token);
        (self.inner.events)(WireEvent::Connected {
            read_only: self.read_only,
        });
    }

    fn serve(&mut self, readable: bool) -> bool {
        let ended = self.step(readable);
        self.inner.release(std::mem::take(&mut self.released));
        match ended {
            None => true,
            Some(ended) => {
                self.ended = ended;
                false
            }
        }
    }

    fn next_wake(&self) -> Instant {
        self.clocks.next_wake(self.conn.has_output())
    }

    fn finish(self: Box<Self>) {
        let Live {
            inner,
            pending,
            mut dialer,
            connected_at,
            ended,
            clocks,
            mut released,
            ..
        } = *self;
        if let Ended::AuthFailed(why, _) = &ended {
            // What waits fails with the reason, and nothing reports a mere
            // disconnection first.
            *inner.auth_failure.lock() = why.clone();
            *inner.ended_by.lock() = Some(ErrorCode::AuthFailed);
            inner.closed.store(true, Ordering::Release);
        }
        // No caller reaches the connection from here on; what waited in
        // the outbox was not sent.
        inner.outbox.close(&mut released);
        let error = || match &ended {
            Ended::AuthFailed(why, _) => Error::AuthFailed {
                reason: why.clone(),
            },
            _ => Error::from_code(ErrorCode::ConnectionLoss),
        };
        // Sent, and now in doubt: the retry loop decides what to do again.
        // Their watch registrations go unused, and are let go of off the
        // engine's thread.
        for p in pending {
            let mut unused = None;
            released.extend(p.answer(Err(error()), |_, watch| unused = watch));
            released.extend(unused);
        }
        inner.release(released);
        let ending = inner.is_ending();
        if !ending {
            (inner.events)(WireEvent::Disconnected {
                silent_for: clocks.last_recv.elapsed(),
            });
        }
        match ended {
            Ended::AuthFailed(reason, at_login) => inner.auth_failed(reason, at_login),
            _ if ending => (inner.events)(WireEvent::Closed),
            Ended::ReadWriteFound(host, addr) => {
                dialer.prefer = Some((host, addr));
                redial(inner, dialer);
            }
            Ended::Dropped | Ended::Silent => {
                // Short handshake waits find a restarted server soon; after
                // silence (a partition, a stalled server) they would only
                // send ConnectRequests that arrive once the network heals,
                // each of which, processed after the client is back, moves
                // the session to a dead connection and closes the live one.
                if matches!(ended, Ended::Silent) {
                    dialer.wait.patient();
                }
                // A server that accepts the handshake and then fails at
                // once (garbage, oversize frames) gets a growing, jittered
                // pause, not a reconnect per request.
                if connected_at.elapsed() >= HEALTHY_CONNECTION {
                    dialer.pause.reset();
                }
                dialer.pause_first = true;
                redial(inner, dialer);
            }
        }
    }
}

//! One ZooKeeper session: the handle callers use ([`WireSession`]) and the
//! connect loop. A live connection's protocol is in `live.rs`, which the
//! process' one engine thread (`engine.rs`) drives.
//!
//! Callers never touch a socket. [`WireSession::call`] builds the frame,
//! puts it in the session's outbox (`outbox.rs`) and wakes the engine,
//! then waits on the request's own [`ReplySlot`] until its deadline. The
//! engine takes frames from the outbox as the socket is ready for them,
//! gives each its xid as it enters the write buffer, reads every reply and
//! event, and answers the slots. A caller that gives up takes its frame
//! back if the engine has not taken it (not sent, safe to retry), or else
//! leaves it in place: the late reply is read and dropped, never applied
//! again. Requests are only ever sent again by the retry loop, on a later
//! connection.
//!
//! User code runs on the session's event thread only (watchers), which
//! also lets go of every user closure the engine is done with; the
//! engine runs nothing but the library's own wakers.
//!
//! Connecting (name lookup, TCP, TLS, the session handshake, SASL) blocks,
//! so it runs on a short-lived thread of the session's (`Inner::dial`),
//! which hands the connection to the engine and ends. A dropped connection
//! is resumed on the same session, auth re-sent and watches re-armed with
//! SetWatches before any caller's request. When the server says the
//! session has expired the session reports it and stops: the framework
//! starts a new one.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::conn::Conn;
use super::connect::{
    self, open_stream_with, read_frame, resolve_one, ConnectFailure, HandshakeWait, HostList,
    RwProbe, SharedHosts,
};
use super::engine::{self, Engine};
use super::jute::{Reader, Writer};
use super::live::Live;
use super::outbox::{Outbox, Submit};
use super::proto::{self, op, xid, ConnectRequest, ConnectResponse};
use super::sasl::{self, LoginError, SaslDigest};
use super::slot::{ReplySlot, Waited};
use super::transport::{Stream, TlsSettings};
use super::watches::{
    RemoveKind, WatchFn, WatchGroup, WatchKind, WatchRegistration, Watcher, Watches,
};
use crate::deadline::instant_after;
use crate::error::{Error, ErrorCode};
use crate::lazy_thread::LazyThread;
use crate::metrics::Counters;
use crate::{EventType, WatchedEvent};

pub(crate) use super::slot::Reply;

/// Auth credentials (scheme, auth), in the order they were added.
pub(crate) type AuthList = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// ZooKeeper's default `jute.maxbuffer`: a server drops the connection of
/// a request frame longer than this.
pub(crate) const JUTE_MAXBUFFER: usize = 0xfffff;

/// Default cap on a reply frame: jute.maxbuffer with headroom for a large
/// children listing (the Java client stops at jute.maxbuffer itself).
pub(crate) const DEFAULT_MAX_REPLY: usize = 4 << 20;

/// What a session is given to connect with.
#[derive(Clone, Debug)]
pub(crate) struct WireConfig {
    pub hosts: Vec<String>,
    pub session_timeout: Duration,
    pub connection_timeout: Duration,
    pub can_be_read_only: bool,
    /// Shared with the client and every later session, so auth added at
    /// run time is sent on each (re)connect.
    pub auth: AuthList,
    /// Largest reply frame accepted; a longer one drops the connection.
    pub max_reply: usize,
    /// Largest request frame sent; a longer request fails alone, unsent.
    pub max_request: usize,
    /// Cap on the bytes of requests waiting to be sent, per connection.
    pub max_unsent: usize,
    /// The client's counters: requests sent, watch events received.
    pub counters: Arc<Counters>,
    /// TLS on every connection; `None` for plain TCP.
    pub tls: Option<TlsSettings>,
    /// A SASL DIGEST-MD5 login on every connection, before any request.
    pub sasl: Option<SaslDigest>,
}

/// Session-level happenings, told to the framework (on the engine's or a
/// connect thread: the sink must not block).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WireEvent {
    Connected {
        read_only: bool,
    },
    /// The connection dropped; the server was last heard `silent_for` ago.
    Disconnected {
        silent_for: Duration,
    },
    Expired,
    /// The server rejected the client's auth: why, and whether it was the
    /// connection's SASL login (else an auth packet).
    AuthFailed {
        reason: String,
        at_login: bool,
    },
    Closed,
}

/// Where a session reports its [`WireEvent`]s.
pub(crate) type EventSink = Box<dyn Fn(WireEvent) + Send + Sync>;

/// A request to send: its op code and what writes its body.
pub(crate) type Request<'a> = (i32, &'a dyn Fn(&mut Writer));
/// Request xids: positive, counting up, wrapping to 1. Only the engine
/// gives them out, as frames enter the write buffer, so they reach the
/// server in order.
#[derive(Clone, Copy)]
pub(super) struct Xids(i32);

impl Xids {
    pub(super) fn take(&mut self) -> i32 {
        let xid = self.0;
        self.0 = if xid == i32::MAX { 1 } else { xid + 1 };
        xid
    }
}

pub(crate) use super::outbox::DEFAULT_MAX_UNSENT;

pub(super) struct Credentials {
    session_id: i64,
    passwd: Vec<u8>,
    pub(super) negotiated: Duration,
}

/// What the session's event thread does: runs watchers with their event,
/// or lets go of user closures the engine is done with.
pub(super) enum EventJob {
    Fire(Vec<WatchFn>, WatchedEvent),
    Release(Vec<Watcher>),
}

pub(super) struct Inner {
    pub(super) cfg: WireConfig,
    pub(super) outbox: Arc<Outbox>,
    /// The engine that owns this session's live connection.
    pub(super) engine: &'static Arc<Engine>,
    /// The socket of a connection being set up (handshake, SASL login), so
    /// that a close can cut it short.
    connecting: Mutex<Option<TcpStream>>,
    pub(super) creds: Mutex<Credentials>,
    pub(super) watches: Mutex<Watches>,
    pub(super) last_zxid: AtomicI64,
    pub(super) closed: AtomicBool,
    /// Set once closeSession is on its way: the connection may still carry
    /// the reply, but if it drops the session is over, never resumed.
    closing: AtomicBool,
    /// The server's reason, when the server ended the session.
    pub(super) ended_by: Mutex<Option<ErrorCode>>,
    /// What the server refused, when it ended the session for a rejected auth.
    pub(super) auth_failure: Mutex<String>,
    /// Whether a read-write server has granted this session.
    seen_read_write: AtomicBool,
    /// The connect string's hosts, in the order they are tried.
    pub(super) hosts: SharedHosts,
    /// The read-write search's schedule, kept across connections.
    pub(super) probe: Arc<Mutex<RwProbe>>,
    /// Why the last connect attempt failed; `None` after a success.
    last_connect_error: Mutex<Option<ConnectFailure>>,
    pub(super) events: EventSink,
    /// The session's event thread: runs watch callbacks (not wakers) and
    /// drops user closures, started with its first job.
    watch_events: LazyThread<EventJob>,
}

/// A handle on one session; cheap to clone.
#[derive(Clone)]
pub(crate) struct WireSession {
    inner: Arc<Inner>,
}

impl WireSession {
    /// Starts connecting in the background; `events` hears how it goes.
    pub(crate) fn start(cfg: WireConfig, events: EventSink) -> Result<Self, Error> {
        if cfg.hosts.is_empty() {
            return Err(Error::InvalidArgument(
                "connect string names no server".into(),
            ));
        }
        let hosts = Arc::new(Mutex::new(HostList::new(&cfg.hosts)));
        let engine = Engine::get().map_err(Error::Io)?;
        let inner = Arc::new(Inner {
            outbox: Arc::new(Outbox::new(cfg.max_unsent)),
            engine,
            connecting: Mutex::new(None),
            creds: Mutex::new(Credentials {
                session_id: 0,
                passwd: vec![0; 16],
                negotiated: cfg.session_timeout,
            }),
            cfg,
            watches: Mutex::new(Watches::default()),
            last_zxid: AtomicI64::new(0),
            closed: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            last_connect_error: Mutex::new(None),
            seen_read_write: AtomicBool::new(false),
            hosts,
            probe: Arc::new(Mutex::new(RwProbe::new())),
            ended_by: Mutex::new(None),
            auth_failure: Mutex::new(String::new()),
            events,
            watch_events: LazyThread::new("latchkey-watch", run_event_job),
        });
        Arc::clone(&inner)
            .dial_in_background(Dialer::new())
            .map_err(Error::Io)?;
        Ok(WireSession { inner })
    }

    /// Sends one request and waits for its reply until `deadline`.
    /// `build` writes the request body after the header.
    pub(crate) fn call(
        &self,
        opcode: i32,
        build: impl Fn(&mut Writer),
        watch: Option<WatchRegistration>,
        deadline: Instant,
    ) -> Result<Reply, Error> {
        let slots = self.send_all(&[(opcode, &build)], watch, deadline)?;
        self.inner.wait_reply(&slots[0], deadline)
    }

    /// Sends two requests together and waits for both replies until
    /// `deadline`. ZooKeeper handles a session's requests in order, so the
    /// second sees what the first did: one round trip instead of two.
    pub(crate) fn call_pair(
        &self,
        first: Request<'_>,
        second: Request<'_>,
        deadline: Instant,
    ) -> (Result<Reply, Error>, Result<Reply, Error>) {
        let slots = match self.send_all(&[first, second], None, deadline) {
            Ok(sent) => sent,
            Err(e) => {
                // Neither was sent: the second fails for the same reason.
                let second = match &e {
                    Error::RequestTooLarge {
                        operation,
                        path,
                        size,
                        max,
                    } => Error::RequestTooLarge {
                        operation,
                        path: path.clone(),
                        size: *size,
                        max: *max,
                    },
                    Error::Unsent { cap } => Error::Unsent { cap: *cap },
                    _ => Error::from_code(ErrorCode::ConnectionLoss),
                };
                return (Err(e), Err(second));
            }
        };
        // Replies come in order, usually in one read: waiting for the second
        // first wakes this thread once instead of twice.
        let second = self.inner.wait_reply(&slots[1], deadline);
        (self.inner.wait_reply(&slots[0], deadline), second)
    }

    /// Hands the requests to the engine, in order; `watch` goes with the
    /// last one. Nothing is queued unless all of them are.
    fn send_all(
        &self,
        requests: &[Request<'_>],
        mut watch: Option<WatchRegistration>,
        deadline: Instant,
    ) -> Result<Vec<Arc<ReplySlot>>, Error> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            // This session is over; the client retries on its successor,
            // unless it ended for a reason retrying cannot fix.
            return Err(self.end_error());
        }
        if engine::on_engine_thread() {
            // The engine would wait for a reply only it can read.
            return Err(Error::IllegalState(
                "a ZooKeeper call from the engine's thread (a waker must not call the client)"
                    .into(),
            ));
        }
        let last = requests.len().saturating_sub(1);
        let mut batch = Vec::with_capacity(requests.len());
        let mut slots = Vec::with_capacity(requests.len());
        for (i, (opcode, build)) in requests.iter().enumerate() {
            // The engine writes the xid in when it sends the frame.
            let mut w = proto::request(0, *opcode);
            build(&mut w);
            let frame = w.finish_frame();
            if frame.len() - 4 > inner.cfg.max_request {
                return Err(too_large(&frame, inner.cfg.max_request));
            }
            let slot = ReplySlot::new(deadline);
            let watch = if i == last { watch.take() } else { None };
            batch.push(Submit {
                frame,
                reply: Some((Arc::clone(&slot), watch)),
            });
            slots.push(slot);
        }
        inner.submit(batch, deadline)?;
        Ok(slots)
    }

    /// Why requests on this session fail now that it is over: `AuthFailed`
    /// after a rejected auth, `SessionExpired` after the server expired it
    /// (a retry policy decides whether to go on with the next session),
    /// otherwise `ConnectionLoss` (the client's cue to retry on the next
    /// session).
    pub(crate) fn end_error(&self) -> Error {
        match *self.inner.ended_by.lock() {
            Some(ErrorCode::AuthFailed) => Error::AuthFailed {
                reason: self.inner.auth_failure.lock().clone(),
            },
            Some(ErrorCode::SessionExpired) => Error::from_code(ErrorCode::SessionExpired),
            _ => Error::from_code(ErrorCode::ConnectionLoss),
        }
    }

    /// Waits until the session is connected (true), or the deadline passes
    /// (false). A session that is over returns true at once: a request on
    /// it then fails straight away with why ([`WireSession::end_error`]).
    /// A cancel of the calling thread's operation ends the wait (false).
    pub(crate) fn wait_connected(&self, deadline: Instant) -> bool {
        let closed = &self.inner.closed;
        self.inner
            .outbox
            .wait_live(deadline, || closed.load(Ordering::Acquire))
    }

    /// The server's id for this session, 0 before the first handshake.
    pub(crate) fn session_id(&self) -> i64 {
        self.inner.creds.lock().session_id
    }

    /// Expires this session on the server the way a real expiry looks to
    /// the client: another connection closes it while this one may not
    /// reconnect; the next reconnect then hears that the session expired.
    pub(crate) fn expire_for_testing(&self, timeout: Duration) -> Result<(), Error> {
        let (id, passwd) = self.credentials();
        if id == 0 {
            return Err(Error::IllegalState("not connected yet".into()));
        }
        let cfg = &self.inner.cfg;
        connect::close_session_by_credentials(&cfg.hosts, cfg.tls.as_ref(), id, &passwd, timeout)
    }

    /// How many watch callbacks wait for an event.
    pub(crate) fn pending_watches(&self) -> usize {
        self.inner.watches.lock().len()
    }

    /// The id and password a second connection needs to take over this session.
    pub(crate) fn credentials(&self) -> (i64, Vec<u8>) {
        let c = self.inner.creds.lock();
        (c.session_id, c.passwd.clone())
    }

    /// Why the last attempt to connect failed (refused, unresolvable, timed
    /// out, bad handshake); `None` if it succeeded or none failed yet.
    pub(crate) fn last_connect_error(&self) -> Option<ConnectFailure> {
        self.inner.last_connect_error.lock().clone()
    }

    /// The session timeout in force: the server's grant, clamped to the
    /// requested timeout (a server may not stretch the client's silence
    /// detection beyond what it asked for).
    pub(crate) fn negotiated_timeout(&self) -> Duration {
        self.inner.creds.lock().negotiated
    }

    /// Ends the session: asks the server to close it (waiting at most
    /// `timeout`), then drops the connection. Never blocks longer.
    pub(crate) fn close(&self, timeout: Duration) {
        if self.inner.closed.load(Ordering::Acquire) {
            return;
        }
        self.inner.closing.store(true, Ordering::Release);
        // On the engine thread nothing may wait for a reply the engine
        // itself must read: the session just ends.
        if !engine::on_engine_thread() {
            let _ = self.call(op::CLOSE_SESSION, |_| {}, None, instant_after(timeout));
        }
        // Closed on purpose: its watches go quietly, as in the Java client,
        // let go of on the event thread.
        if self.inner.shut_down() {
            let quiet = self.inner.watches.lock().end();
            self.inner
                .release_watchers(quiet.into_iter().map(|(_, w)| w).collect());
        }
    }

    /// Sends an auth packet on the live connection, after every request
    /// queued before it (no reply to wait for: the server applies it on
    /// arrival, before any later request, and ends the session if it
    /// rejects it).
    pub(crate) fn send_auth(&self, scheme: &str, auth: &[u8]) -> Result<(), Error> {
        let mut w = proto::request(xid::AUTH, op::AUTH);
        w.i32(0).string(scheme).bytes(auth);
        let frame = Submit {
            frame: w.finish_frame(),
            reply: None,
        };
        self.inner.submit(vec![frame], instant_after(Duration::MAX))
    }

    /// Whether this session holds a watch of `kind` at `path`.
    pub(crate) fn has_watches(&self, path: &str, kind: RemoveKind) -> bool {
        self.inner.watches.lock().has(path, kind)
    }

    /// Drops this session's watches of `kind` at `path` (the server has
    /// removed them); each runs once with its `*WatchRemoved` event.
    pub(crate) fn remove_local_watches(&self, path: &str, kind: RemoveKind) {
        let removed = self.inner.watches.lock().remove(path, kind);
        for (w, event_type) in removed {
            let ev = WatchedEvent {
                event_type,
                path: path.to_owned(),
            };
            self.inner.fire(vec![w.run], ev);
        }
    }

    /// Drops this session's watches of `group`, here only; each runs once
    /// with its `*WatchRemoved` event. Returns the persistent watches'
    /// paths and kinds now without a watcher here, which the server may
    /// drop (a reconnection would not set them again).
    pub(crate) fn remove_group_locally(&self, group: &Arc<WatchGroup>) -> Vec<(String, WatchKind)> {
        let (removed, emptied) = self.inner.watches.lock().remove_group(group);
        for (w, event_type, path) in removed {
            self.inner
                .fire(vec![w.run], WatchedEvent { event_type, path });
        }
        emptied
    }

    /// Gives the session up without telling the server (the client declared
    /// it lost): pending watchers fire once with `SessionExpired`, as on a
    /// real expiry, so nobody waits on a watch that can no longer fire.
    pub(crate) fn abandon(&self) {
        if self.inner.shut_down() {
            self.inner.fire_watches_expired();
        }
    }
}

/// The error for a request `frame` over `max` bytes, naming its operation
/// and the path its body starts with (every single-path operation's does).
fn too_large(frame: &[u8], max: usize) -> Error {
    let mut r = Reader::new(&frame[4..]);
    let opcode = r.i32().and_then(|_| r.i32()).unwrap_or(0);
    let path_len = r.i32().unwrap_or(0).clamp(0, 200) as usize;
    let path = String::from_utf8_lossy(r.rest().get(..path_len).unwrap_or_default());
    let path = match path.len() < 200 {
        true => path.into_owned(),
        false => format!("{path}..."),
    };
    Error::RequestTooLarge {
        operation: proto::op_name(opcode),
        path,
        size: frame.len() - 4,
        max,
    }
}

fn run_event_job(job: EventJob) {
    match job {
        EventJob::Fire(watchers, event) => {
            for w in watchers {
                run_watcher(w, &event);
            }
        }
        // Dropped here, on the session's event thread: a `Drop` that calls
        // the client waits for nobody but this session's watchers.
        EventJob::Release(watchers) => drop(watchers),
    }
}

pub(super) fn run_watcher(w: WatchFn, event: &WatchedEvent) {
    let ev = event.clone();
    // A panicking watcher must not take the session's other watchers (or
    // its engine) with it.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w(ev))).is_err() {
        log::error!("a watcher panicked on {:?}", event);
    }
}

impl Inner {
    /// Puts `batch` in the outbox and wakes the engine for it; see
    /// [`Outbox::submit`].
    fn submit(&self, batch: Vec<Submit>, deadline: Instant) -> Result<(), Error> {
        if let Some(token) = self.outbox.submit(batch, deadline)? {
            self.engine.ready(token);
        }
        Ok(())
    }

    /// Waits for `slot`'s outcome until `deadline`; a request not sent by
    /// then is taken back (see [`Outbox::withdraw`]).
    fn wait_reply(&self, slot: &Arc<ReplySlot>, deadline: Instant) -> Result<Reply, Error> {
        match slot.wait_until(deadline) {
            Waited::Outcome(result) => result,
            // A registration taken back is dropped here, on the caller's
            // own thread.
            Waited::GaveUp(why) => self.outbox.withdraw(slot, why).0,
        }
    }

    /// Runs `watchers` with `event` on the session's event thread.
    pub(super) fn fire(&self, watchers: Vec<WatchFn>, event: WatchedEvent) {
        self.watch_events.send(EventJob::Fire(watchers, event));
    }

    /// Lets go of unused watch registrations on the event thread.
    pub(super) fn release(&self, regs: Vec<WatchRegistration>) {
        if !regs.is_empty() {
            self.release_watchers(regs.into_iter().map(|r| r.watcher).collect());
        }
    }

    fn release_watchers(&self, watchers: Vec<Watcher>) {
        if !watchers.is_empty() {
            self.watch_events.send(EventJob::Release(watchers));
        }
    }

    fn dial_in_background(self: Arc<Self>, dialer: Dialer) -> io::Result<()> {
        crate::sched::spawn("latchkey-connect", move || self.dial(dialer))
    }

    /// Tries the hosts until one takes the session, then hands the
    /// connection to the engine; or ends the session if the server says
    /// it is over.
    fn dial(self: Arc<Self>, mut dialer: Dialer) {
        if std::mem::take(&mut dialer.pause_first) {
            dialer.pause_now();
        }
        while !self.is_ending() {
            let (attempt, round_done) = match dialer.prefer.take() {
                Some(found) => (Ok(found), false),
                None => {
                    let (host, round_done) = self.hosts.lock().next();
                    let resolved = resolve_one(&host).map(|addr| (host, addr));
                    (resolved.map_err(HandshakeError::Failed), round_done)
                }
            };
            let per_host = self.per_host_timeout();
            let wait = dialer.wait.get(per_host);
            let connected = attempt.and_then(|(host, addr): (String, _)| {
                self.handshake(&host, addr, wait, &mut dialer.xids)
            });
            match connected {
                Ok((conn, read_only)) => {
                    *self.last_connect_error.lock() = None;
                    dialer.wait.reset();
                    let live = Live::new(Arc::clone(&self), conn, read_only, dialer);
                    self.engine.attach(Box::new(live));
                    return;
                }
                Err(HandshakeError::Expired) => {
                    log::info!("session expired");
                    self.expire(ErrorCode::SessionExpired, WireEvent::Expired);
                    return;
                }
                Err(HandshakeError::AuthFailed(reason)) => {
                    self.auth_failed(reason, true);
                    return;
                }
                Err(HandshakeError::Failed(failure)) => {
                    log::debug!("connecting failed: {failure} (waited up to {wait:?})");
                    if matches!(failure, ConnectFailure::TimedOut { .. }) {
                        dialer.wait.ran_out(per_host);
                    }
                    *self.last_connect_error.lock() = Some(failure);
                    // Back off once per full round of failed hosts.
                    if round_done {
                        dialer.pause_now();
                    }
                }
            }
        }
        (self.events)(WireEvent::Closed);
    }

    /// The server rejected the client's auth: the session is over.
    pub(super) fn auth_failed(&self, reason: String, at_login: bool) {
        log::error!("{reason}");
        *self.auth_failure.lock() = reason.clone();
        self.expire(
            ErrorCode::AuthFailed,
            WireEvent::AuthFailed { reason, at_login },
        );
    }

    /// Whether the session is closed or closing: no more reconnects.
    pub(super) fn is_ending(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.closing.load(Ordering::Acquire)
    }

    /// The session is over for good: fail what waits, fire every watch once
    /// so nobody sleeps on a watch that can no longer fire.
    fn expire(&self, code: ErrorCode, event: WireEvent) {
        *self.ended_by.lock() = Some(code);
        self.closed.store(true, Ordering::Release);
        let mut unsent = Vec::new();
        self.outbox.close(&mut unsent);
        self.release(unsent);
        self.fire_watches_expired();
        (self.events)(event);
    }

    /// Marks the session closed and stops the engine's connection; false if
    /// it was closed already.
    fn shut_down(&self) -> bool {
        if self.closed.swap(true, Ordering::AcqRel) {
            return false;
        }
        let mut unsent = Vec::new();
        self.outbox.close(&mut unsent);
        self.release(unsent);
        // The engine ends the live connection when it next serves it.
        if let Some(token) = self.outbox.token() {
            self.engine.ready(token);
        }
        if let Some(s) = self.connecting.lock().take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        self.outbox.wake_waiters();
        true
    }

    /// Removes every watch and fires each once with `SessionExpired`.
    pub(super) fn fire_watches_expired(&self) {
        let ended = self.watches.lock().end();
        for (path, w) in ended {
            self.send_expired(path, w.run);
        }
    }

    fn send_expired(&self, path: String, run: WatchFn) {
        let ev = WatchedEvent {
            event_type: EventType::SessionExpired,
            path,
        };
        self.fire(vec![run], ev);
    }

    /// Connects to `addr`, resumes or starts the session there and logs in;
    /// returns the connection, ready for the engine, and whether the server
    /// is read-only.
    fn handshake(
        &self,
        host: &str,
        addr: SocketAddr,
        wait: Duration,
        xids: &mut Xids,
    ) -> Result<(Conn, bool), HandshakeError> {
        let result = self.set_up(host, addr, wait, xids);
        *self.connecting.lock() = None;
        result
    }

    fn set_up(
        &self,
        host: &str,
        addr: SocketAddr,
        wait: Duration,
        xids: &mut Xids,
    ) -> Result<(Conn, bool), HandshakeError> {
        let (mut s, resp) = self.exchange_handshake(host, addr, wait)?;
        // The session's own timing follows the requested timeout at most.
        let granted = Duration::from_millis(resp.timeout_ms as u64);
        let negotiated = granted.min(self.cfg.session_timeout);
        if granted > self.cfg.session_timeout {
            log::warn!(
                "{addr} granted a session timeout of {granted:?}, above the {:?} asked for; using {negotiated:?}",
                self.cfg.session_timeout
            );
        }
        {
            let mut c = self.creds.lock();
            c.session_id = resp.session_id;
            c.passwd = resp.passwd;
            c.negotiated = negotiated;
        }
        let failed = |e: io::Error| {
            HandshakeError::Failed(ConnectFailure::Io {
                addr,
                reason: e.to_string(),
            })
        };
        if let Some(creds) = &self.cfg.sasl {
            // Connected now: each SASL reply gets the read timeout any reply
            // gets (the Java client's), not what is left of the connect's.
            s.set_read_timeout(Some((negotiated * 2 / 3).max(Duration::from_millis(200))))
                .map_err(failed)?;
            let login = if self.is_ending() {
                Err(LoginError::Io(io::Error::other("the client is closing")))
            } else {
                // Auth is the connection's: every connection logs in again.
                sasl::login(&mut s, creds, self.cfg.max_reply, || xids.take())
            };
            login.map_err(|e| match e {
                LoginError::Rejected(why) => HandshakeError::AuthFailed(format!(
                    "SASL DIGEST-MD5 login as {:?} at {addr} failed: {why}",
                    creds.user
                )),
                LoginError::Io(e) => HandshakeError::Failed(ConnectFailure::Io {
                    addr,
                    reason: format!("SASL login: {e}"),
                }),
            })?;
        }
        let conn = s.into_conn().map_err(failed)?;
        Ok((conn, resp.read_only))
    }

    /// How long connecting to one host may take at most: the connection
    /// timeout shared by the connect string's hosts, at least 200 ms.
    fn per_host_timeout(&self) -> Duration {
        let per_host = self.cfg.connection_timeout / (self.cfg.hosts.len().max(1) as u32);
        per_host.max(Duration::from_millis(200))
    }

    /// The connect request and its reply, each step waiting at most `wait`
    /// ([`HandshakeWait`]), each failure classified.
    fn exchange_handshake(
        &self,
        host: &str,
        addr: SocketAddr,
        wait: Duration,
    ) -> Result<(Stream, ConnectResponse), HandshakeError> {
        let connecting =
            |e: io::Error| HandshakeError::Failed(ConnectFailure::connecting(addr, &e));
        let handshaking =
            |e: io::Error| HandshakeError::Failed(ConnectFailure::handshaking(host, addr, &e));
        // The socket is kept where a close can shut it down, from the
        // moment it connects: a TLS handshake or a silent server then ends
        // at once, not at the connection timeout.
        let keep = |sock: &TcpStream| {
            *self.connecting.lock() = sock.try_clone().ok();
            // A close that came first found nothing to shut down.
            if self.is_ending() {
                let _ = sock.shutdown(std::net::Shutdown::Both);
            }
        };
        let mut s = open_stream_with(host, addr, self.cfg.tls.as_ref(), wait, keep)
            .map_err(HandshakeError::Failed)?;
        if self.is_ending() {
            return Err(HandshakeError::Failed(ConnectFailure::Io {
                addr,
                reason: "the client is closing".into(),
            }));
        }
        // A write may wait for a slow reader longer than a connect may take.
        s.set_write_timeout(Some(self.cfg.connection_timeout))
            .map_err(connecting)?;
        let (session_id, passwd) = {
            let c = self.creds.lock();
            // A read-only server's session is not resumed elsewhere: ask for
            // a new one until a read-write server has been seen (Java's
            // seenRwServerBefore).
            let resume = self.seen_read_write.load(Ordering::Acquire);
            (if resume { c.session_id } else { 0 }, c.passwd.clone())
        };
        let req = ConnectRequest {
            last_zxid: self.last_zxid.load(Ordering::Acquire),
            timeout_ms: millis_i32(self.cfg.session_timeout),
            session_id,
            passwd: &passwd,
            read_only: self.cfg.can_be_read_only,
        };
        io::Write::write_all(&mut s, &req.frame()).map_err(handshaking)?;
        io::Write::flush(&mut s).map_err(handshaking)?;
        let frame = read_frame(&mut s, self.cfg.max_reply).map_err(handshaking)?;
        let resp = ConnectResponse::read(&frame).map_err(|e| {
            HandshakeError::Failed(ConnectFailure::BadHandshake {
                addr,
                reason: e.to_string(),
            })
        })?;
        if resp.timeout_ms <= 0 {
            return Err(HandshakeError::Expired);
        }
        if !resp.read_only {
            self.seen_read_write.store(true, Ordering::Release);
        }
        Ok((s, resp))
    }

    /// Queues auth and re-armed watches first, before any caller's
    /// request; returns how many frames (the server answers each).
    pub(super) fn prime(&self, conn: &mut Conn) -> usize {
        let mut frames = 0;
        for (scheme, auth) in self.cfg.auth.lock().iter() {
            let mut w = proto::request(xid::AUTH, op::AUTH);
            w.i32(0).string(scheme).bytes(auth);
            conn.queue(&w.finish_frame());
            frames += 1;
        }
        let last_zxid = self.last_zxid.load(Ordering::Acquire);
        for frame in self.watches.lock().set_watches_frames(last_zxid) {
            conn.queue(&frame);
            frames += 1;
        }
        frames
    }

    /// Registers the watch a request carried, as its reply decides; one
    /// that is not registered goes to `released`.
    pub(super) fn register_watch(
        &self,
        reg: WatchRegistration,
        result: &Result<Reply, Error>,
        released: &mut Vec<WatchRegistration>,
    ) {
        let kind = match result {
            Ok(_) => Some(reg.on_ok),
            Err(e) if e.code() == Some(ErrorCode::NoNode) => reg.on_no_node,
            Err(_) => None,
        };
        let Some(kind) = kind else {
            released.push(reg);
            return;
        };
        let mut watches = self.watches.lock();
        if reg.watcher.in_removed_group() {
            // Its group was removed while this reply was on its way.
            released.push(reg);
        } else if !watches.is_ended() {
            watches.add(kind, reg.path, reg.watcher);
        } else if self.closing.load(Ordering::Acquire) {
            // Closed on purpose while this reply was on its way: quietly.
            released.push(reg);
        } else {
            // The session was given up while this reply was on its way:
            // the watch fires like the others.
            drop(watches);
            self.send_expired(reg.path, reg.watcher.run);
        }
    }
}

/// The pause between failed connection attempts: jittered (±50%) and
/// growing by half while attempts keep failing, from 20 ms to 1 s.
pub(super) struct ReconnectPause {
    interval: Duration,
}

impl ReconnectPause {
    const FIRST: Duration = Duration::from_millis(20);
    const MAX: Duration = Duration::from_secs(1);

    fn new() -> Self {
        ReconnectPause {
            interval: Self::FIRST,
        }
    }

    /// The next pause, somewhere in [interval / 2, interval * 3 / 2).
    fn next(&mut self) -> Duration {
        let pause = self.interval.mul_f64(0.5 + crate::retry::random_fraction());
        self.interval = self.interval.mul_f64(1.5).min(Self::MAX);
        pause
    }

    pub(super) fn reset(&mut self) {
        self.interval = Self::FIRST;
    }
}

/// What a session carries from one connection to the next.
pub(super) struct Dialer {
    pub(super) xids: Xids,
    pub(super) pause: ReconnectPause,
    /// How long the next attempt waits for the server.
    pub(super) wait: HandshakeWait,
    /// Whether to pause before the next attempt.
    pub(super) pause_first: bool,
    /// A read-write server found while connected read-only: tried first.
    pub(super) prefer: Option<(String, SocketAddr)>,
}

impl Dialer {
    fn new() -> Self {
        Dialer {
            xids: Xids(1),
            pause: ReconnectPause::new(),
            wait: HandshakeWait::new(),
            pause_first: false,
            prefer: None,
        }
    }

    fn pause_now(&mut self) {
        thread::sleep(self.pause.next());
    }
}

/// Starts connecting again after a connection ended.
pub(super) fn redial(inner: Arc<Inner>, dialer: Dialer) {
    if let Err(e) = Arc::clone(&inner).dial_in_background(dialer) {
        log::error!("cannot start a thread to reconnect: {e}; the session is given up");
        inner.expire(ErrorCode::ConnectionLoss, WireEvent::Expired);
    }
}

enum HandshakeError {
    Expired,
    Failed(ConnectFailure),
    /// The SASL login failed for good: why.
    AuthFailed(String),
}

fn millis_i32(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn session_to(host: String) -> WireSession {
        let cfg = WireConfig {
            hosts: vec![host],
            session_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_millis(300),
            can_be_read_only: false,
            auth: Default::default(),
            sasl: None,
            max_reply: DEFAULT_MAX_REPLY,
            max_request: JUTE_MAXBUFFER,
            max_unsent: DEFAULT_MAX_UNSENT,
            counters: Default::default(),
            tls: None,
        };
        WireSession::start(cfg, Box::new(|_| {})).unwrap()
    }

    fn first_failure(s: &WireSession) -> ConnectFailure {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(f) = s.last_connect_error() {
                s.close(Duration::ZERO);
                return f;
            }
            assert!(Instant::now() < deadline, "no connect failure recorded");
            thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn last_connect_error_says_why() {
        let closed_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = closed_port.local_addr().unwrap();
        drop(closed_port);
        let refused = first_failure(&session_to(addr.to_string()));
        assert_eq!(refused, ConnectFailure::Refused { addr });

        let unresolvable = first_failure(&session_to("no-such-host.invalid:2181".into()));
        assert!(
            matches!(unresolvable, ConnectFailure::Unresolvable { ref host, .. } if host == "no-such-host.invalid:2181"),
            "{unresolvable}"
        );

        // Accepted by the kernel's backlog, never answered.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap();
        let timed_out = first_failure(&session_to(addr.to_string()));
        assert_eq!(timed_out, ConnectFailure::TimedOut { addr });

        // A reply that is not a handshake's; and a close before any reply,
        // where the handshake's read meets the end of the stream.
        let garbage = |mut c: TcpStream| {
            let _ = c.write_all(&[0, 0, 0, 2, 1, 2]);
        };
        for answer in [garbage as fn(TcpStream), drop] {
            let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = server.local_addr().unwrap();
            let serving = thread::spawn(move || answer(server.accept().unwrap().0));
            let bad = first_failure(&session_to(addr.to_string()));
            assert!(
                matches!(bad, ConnectFailure::BadHandshake { addr: a, .. } if a == addr),
                "{bad}"
            );
            serving.join().unwrap();
        }

        // A full accept backlog: the kernel drops further connection
        // requests, so the connect step itself times out.
        let full = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = full.local_addr().unwrap();
        let mut queued = Vec::new();
        loop {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Ok(s) => queued.push(s),
                Err(e) if e.kind() == io::ErrorKind::TimedOut => break,
                Err(e) => panic!("filling the backlog: {e}"),
            }
            assert!(queued.len() < 5000, "the backlog never filled");
        }
        let timed_out = first_failure(&session_to(addr.to_string()));
        assert_eq!(timed_out, ConnectFailure::TimedOut { addr });
    }

    /// Requests on a session the server has expired fail as expired, not
    /// as a lost connection, so that a retry policy that refuses to go on
    /// with a new session (`SessionFailedRetryPolicy`) is asked.
    #[test]
    fn requests_on_an_expired_session_fail_as_expired() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        // Answers a handshake the way a server answers one for an expired
        // session: a timeout of 0.
        let serving = thread::spawn(move || {
            let (mut c, _) = server.accept().unwrap();
            let _ = read_frame(&mut c, DEFAULT_MAX_REPLY);
            let mut w = Writer::frame();
            w.i32(0).i32(0).i64(0).bytes(&[0; 16]);
            let _ = c.write_all(&w.finish_frame());
        });
        let s = session_to(addr.to_string());
        assert!(s.wait_connected(Instant::now() + Duration::from_secs(10)));
        let r = s.call(
            op::EXISTS,
            |w| {
                w.string("/").bool(false);
            },
            None,
            Instant::now() + Duration::from_secs(5),
        );
        assert!(
            r.as_ref().unwrap_err().is(ErrorCode::SessionExpired),
            "{r:?}"
        );
        serving.join().unwrap();
    }

    #[test]
    fn reconnect_pauses_are_jittered_grow_by_half_and_stop_at_1_s() {
        let mut p = ReconnectPause::new();
        let mut interval = ReconnectPause::FIRST;
        for _ in 0..20 {
            let pause = p.next();
            assert!(
                pause >= interval / 2 && pause < interval * 3 / 2,
                "{pause:?} for {interval:?}"
            );
            interval = interval.mul_f64(1.5).min(ReconnectPause::MAX);
        }
        assert_eq!(p.interval, ReconnectPause::MAX);
        p.reset();
        assert_eq!(p.interval, ReconnectPause::FIRST);
    }

    /// Request xids count up and wrap to 1 after `i32::MAX`: never an
    /// overflow, and never 0 or a negative xid, which mean pings,
    /// notifications and the like.
    #[test]
    fn xids_count_up_and_wrap_to_1() {
        let mut xids = Xids(i32::MAX - 1);
        let taken: Vec<i32> = (0..4).map(|_| xids.take()).collect();
        assert_eq!(taken, [i32::MAX - 1, i32::MAX, 1, 2]);
    }
}

//! One ZooKeeper session: the handle callers use, the connect loop, and
//! the protocol of a live connection (which the process' one engine
//! thread, `engine.rs`, drives).
//!
//! Callers never block on the socket. [`WireSession::call`] builds the
//! frame and hands it over (`Inner::submit`): on an idle connection the
//! caller writes it itself, without blocking, under the connection's lock;
//! otherwise it waits in the session's inbox for the engine. Either way
//! xids are given out as frames enter the write buffer, and the caller
//! then waits on the request's own [`ReplySlot`] until its deadline.
//! The engine reads replies, matches them in order and runs wakers, sends
//! pings and judges silence (2/3 of the session timeout, as the Java
//! client does). One caller at a time may read instead
//! (`Inner::read_own_reply`): on a plain socket nobody else is reading, a
//! caller whose request is written switches the engine's interest in the
//! socket off, sleeps in a read on it (a plain socket stays in blocking
//! mode for that, and every other read and write on it says not to wait),
//! dispatches what comes exactly as the engine would, and switches the
//! interest on again once its reply is in. That saves the engine's wake-up and the hand-over of each reply to
//! the caller's thread. When nothing more is due from the server (every
//! request answered, no watch set) the caller leaves the connection
//! parked instead, the poll hearing of hang-ups only, and the next caller
//! takes the reader's part as it writes its request: no switching at all
//! (`Wire::parked`). A thread waiting for a watch event can read the
//! same way (`WireSession::read_while`, for `Client::wait_reading`). The
//! internal wakers a read fires run on the thread that read them, one
//! batch at a time per session, in event order (`wake_from`).
//! Either way a stalled server holds nobody past
//! their own deadline, and a caller who gives up leaves its request in
//! place: the late reply is read and dropped, never applied again.
//! Requests are only ever sent again by the retry loop, on a later
//! connection.
//!
//! Connecting (name lookup, TCP, TLS, the session handshake, SASL) blocks,
//! so it runs on a short-lived thread of the session's (`Inner::dial`),
//! which hands the connection to the engine and ends. A dropped connection
//! is resumed on the same session, auth re-sent and watches re-armed with
//! SetWatches before any caller's request. When the server says the
//! session has expired the session reports it and stops: the framework
//! starts a new one.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use mio::{Interest, Registry, Token};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use parking_lot::{Condvar, Mutex, MutexGuard};

use super::conn::{Conn, Received, Socket};
use super::connect::{
    self, open_stream_with, read_frame, resolve_one, ConnectFailure, HostList, RwProbe, RwSearch,
    SharedHosts,
};
use super::engine::{self, Driven, Engine};
use super::jute::{Reader, Writer};
use super::proto::{self, op, xid, ConnectRequest, ConnectResponse, ReplyHeader, WatcherEvent};
use super::sasl::{self, LoginError, SaslDigest};
use super::slot::{Pending, ReplySlot};
use super::transport::{Stream, TlsSettings};
use super::watches::{RemoveKind, WatchFn, WatchRegistration, Watches};
use crate::cancel;
use crate::deadline::instant_after;
use crate::error::{Error, ErrorCode};
use crate::lazy_thread::LazyThread;
use crate::metrics::{self, Counters};
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

/// The longest an idle connection goes without a ping.
const MAX_PING_INTERVAL: Duration = Duration::from_secs(10);

/// A caller reading its own reply waits on the socket this long at most at
/// a time; the connection's end (a shutdown) wakes it sooner.
const MAX_OWN_READ_WAIT: Duration = Duration::from_secs(5);

/// How much a caller reading its own reply takes from the socket in its
/// wait, on its stack: a lock's replies fit, and what does not is read on
/// at once (see [`Inner::read_as_reader`]).
const READER_CHUNK: usize = 4 * 1024;

/// A connection that lasted this long was healthy: the next reconnect
/// starts the back-off afresh.
const HEALTHY_CONNECTION: Duration = Duration::from_secs(1);

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
    /// The client's counters: requests sent, watch events received.
    pub counters: Arc<Counters>,
    /// TLS on every connection; `None` for plain TCP.
    pub tls: Option<TlsSettings>,
    /// A SASL DIGEST-MD5 login on every connection, before any request.
    pub sasl: Option<SaslDigest>,
}

/// Session-level happenings, sent to the framework's state thread.
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

/// A frame a caller handed to the engine, with where its reply goes (none
/// for an auth packet, whose answer comes under a fixed xid).
struct Submit {
    frame: Vec<u8>,
    reply: Option<(Arc<ReplySlot>, Option<WatchRegistration>)>,
}

/// What callers hand to the engine. Requests are taken only while a
/// connection is live; the engine takes the whole queue each time it
/// serves the connection.
struct Inbox {
    live: bool,
    queue: Vec<Submit>,
    /// The live (or last) connection's token with the engine.
    token: Option<Token>,
    /// Whether the engine has been asked to serve the connection and has
    /// not taken the queue yet: one wake per batch, not per request.
    scheduled: bool,
    /// The live connection's I/O state, for a caller to write directly.
    wire: Option<Arc<Mutex<Wire>>>,
}

impl Inbox {
    /// No connection from now on: what waits here was never sent, and
    /// fails as a lost connection (the retry loop may send it again).
    fn close(&mut self) {
        self.live = false;
        self.wire = None;
        for s in self.queue.drain(..) {
            if let Some((slot, _)) = s.reply {
                slot.answer(Err(Error::from_code(ErrorCode::ConnectionLoss)), |_| {});
            }
        }
    }
}

/// Request xids: positive, counting up, wrapping to 1. Only the engine
/// gives them out, as frames enter the write buffer, so they reach the
/// server in order.
#[derive(Clone, Copy)]
struct Xids(i32);

impl Xids {
    fn take(&mut self) -> i32 {
        let xid = self.0;
        self.0 = if xid == i32::MAX { 1 } else { xid + 1 };
        xid
    }
}

struct Credentials {
    session_id: i64,
    passwd: Vec<u8>,
    negotiated: Duration,
}

struct Inner {
    cfg: WireConfig,
    inbox: Mutex<Inbox>,
    /// Signalled under `inbox` when a connection goes live or the session ends.
    connected: Condvar,
    /// The engine that owns this session's live connection.
    engine: &'static Arc<Engine>,
    /// The socket of a connection being set up (handshake, SASL login), so
    /// that a close can cut it short.
    connecting: Mutex<Option<TcpStream>>,
    creds: Mutex<Credentials>,
    watches: Mutex<Watches>,
    last_zxid: AtomicI64,
    closed: AtomicBool,
    /// Set once closeSession is on its way: the connection may still carry
    /// the reply, but if it drops the session is over, never resumed.
    closing: AtomicBool,
    /// The server's reason, when the server ended the session.
    ended_by: Mutex<Option<ErrorCode>>,
    /// What the server refused, when it ended the session for a rejected auth.
    auth_failure: Mutex<String>,
    /// Whether a read-write server has granted this session.
    seen_read_write: AtomicBool,
    /// The connect string's hosts, in the order they are tried.
    hosts: SharedHosts,
    /// The read-write search's schedule, kept across connections.
    probe: Arc<Mutex<RwProbe>>,
    /// Why the last connect attempt failed; `None` after a success.
    last_connect_error: Mutex<Option<ConnectFailure>>,
    events: EventSink,
    /// Runs watch callbacks (not wakers), started with the first one.
    watch_events: LazyThread<(Vec<WatchFn>, WatchedEvent)>,
    /// The session's wakers waiting for the thread running some: one
    /// thread at a time runs them, across connections too (see
    /// [`wake_from`]).
    wakers: Mutex<WakerTurn>,
}

/// Whose turn it is to run a session's wakers.
#[derive(Default)]
struct WakerTurn {
    /// A thread is running wakers; it runs `queue` too before it stops.
    running: bool,
    /// Wakers read meanwhile, in the order of their events.
    queue: Vec<Wake>,
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
            inbox: Mutex::new(Inbox {
                live: false,
                queue: Vec::new(),
                token: None,
                scheduled: false,
                wire: None,
            }),
            connected: Condvar::new(),
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
            watch_events: LazyThread::new("latchkey-watch", run_watchers),
            wakers: Mutex::new(WakerTurn::default()),
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
        let (mut slots, claim) = self.send_all(&[(opcode, &build)], watch, true)?;
        self.inner.wait_reply(&slots.remove(0), deadline, claim)
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
        let (slots, claim) = match self.send_all(&[first, second], None, true) {
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
                    _ => Error::from_code(ErrorCode::ConnectionLoss),
                };
                return (Err(e), Err(second));
            }
        };
        // Replies come in order, usually in one read: waiting for the second
        // first wakes this thread once instead of twice.
        let second = self.inner.wait_reply(&slots[1], deadline, claim);
        (slots[0].wait_until(deadline), second)
    }

    fn send(
        &self,
        opcode: i32,
        build: impl Fn(&mut Writer),
        watch: Option<WatchRegistration>,
    ) -> Result<Arc<ReplySlot>, Error> {
        let (mut slots, _) = self.send_all(&[(opcode, &build)], watch, false)?;
        Ok(slots.remove(0))
    }

    /// Hands the requests to the engine, in order; `watch` goes with the
    /// last one. Nothing is queued unless all of them are. `waits` says the
    /// caller goes on to [`Inner::wait_reply`] at once, so it may take the
    /// reader's part from a parked connection (see [`Inner::submit`]).
    fn send_all(
        &self,
        requests: &[Request<'_>],
        mut watch: Option<WatchRegistration>,
        waits: bool,
    ) -> Result<(Vec<Arc<ReplySlot>>, Option<Claim>), Error> {
        let inner = &self.inner;
        let waits = waits && cancel::current().is_none() && !engine::on_engine_thread();
        if inner.closed.load(Ordering::Acquire) {
            // This session is over; the client retries on its successor,
            // unless it ended for a reason retrying cannot fix.
            return Err(self.end_error());
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
            let slot = ReplySlot::new();
            let watch = if i == last { watch.take() } else { None };
            batch.push(Submit {
                frame,
                reply: Some((Arc::clone(&slot), watch)),
            });
            slots.push(slot);
        }
        let claim = inner.submit(batch, waits)?;
        Ok((slots, claim))
    }

    /// Reads the connection on this thread while `waiting()` holds, until
    /// `deadline`, so that the waker this thread waits for runs here (see
    /// [`Client::wait_reading`](crate::Client::wait_reading)); true if
    /// `waiting()` turned false after a read of this thread's.
    pub(crate) fn read_while(&self, waiting: &dyn Fn() -> bool, deadline: Instant) -> bool {
        if cancel::current().is_some() || engine::on_engine_thread() {
            return false;
        }
        let wire = self.inner.inbox.lock().wire.clone();
        // A check that panics while this thread is the reader would leave
        // the socket with no reader (the engine's interest off): it ends
        // the read instead, and its panic goes on once the socket is the
        // engine's again.
        let panicked = RefCell::new(None);
        let checked = || {
            if panicked.borrow().is_some() {
                return false;
            }
            catch_unwind(AssertUnwindSafe(waiting)).unwrap_or_else(|p| {
                *panicked.borrow_mut() = Some(p);
                false
            })
        };
        let read_it = wire.is_some_and(|wire| self.inner.read_while(&wire, &checked, deadline));
        if let Some(p) = panicked.into_inner() {
            resume_unwind(p);
        }
        if read_it {
            metrics::add(&self.inner.cfg.counters.waits_read_by_waiter, 1);
        }
        read_it
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
        let inner = Arc::clone(&self.inner);
        let notify = move || {
            let _inbox = inner.inbox.lock();
            inner.connected.notify_all();
        };
        let closed = &self.inner.closed;
        let mut inbox = self.inner.inbox.lock();
        let done = |i: &mut Inbox| i.live || closed.load(Ordering::Acquire);
        crate::cancel::wait_until(&self.inner.connected, &mut inbox, deadline, done, notify)
            .unwrap_or(false)
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
        // On the engine thread (a waker dropped the last handle) nothing
        // may wait for a reply the engine itself must read: the close is
        // sent if the connection takes it now, and not waited for.
        let timeout = match engine::on_engine_thread() {
            true => Duration::ZERO,
            false => timeout,
        };
        if let Ok(slot) = self.send(op::CLOSE_SESSION, |_| {}, None) {
            let _ = slot.wait_until(instant_after(timeout));
        }
        // Closed on purpose: its watches go quietly, as in the Java client.
        self.inner.shut_down();
    }

    /// Sends an auth packet on the live connection, after every request
    /// queued before it (no reply to wait for: the server applies it on
    /// arrival, before any later request, and ends the session if it
    /// rejects it).
    pub(crate) fn send_auth(&self, scheme: &str, auth: &[u8]) -> Result<(), Error> {
        let mut w = proto::request(xid::AUTH, op::AUTH);
        w.i32(0).string(scheme).bytes(auth);
        self.inner
            .submit(
                vec![Submit {
                    frame: w.finish_frame(),
                    reply: None,
                }],
                false,
            )
            .map(drop)
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
            let _ = self.inner.watch_events.send((vec![w.run], ev));
        }
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

fn run_watchers((watchers, event): (Vec<WatchFn>, WatchedEvent)) {
    for w in watchers {
        run_watcher(w, &event);
    }
}

fn run_watcher(w: WatchFn, event: &WatchedEvent) {
    let ev = event.clone();
    // A panicking watcher must not take the session's other watchers (or
    // its engine) with it.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w(ev))).is_err() {
        log::error!("a watcher panicked on {:?}", event);
    }
}

/// Why a connection ended.
enum Ended {
    /// Lost or silent: reconnect to the same session.
    Dropped,
    /// Connected read-only, a read-write server was found: connect there.
    /// Its host as in the connect string (the name TLS verifies) and address.
    ReadWriteFound(String, SocketAddr),
    /// The server rejected the client's auth: why, and whether it was the
    /// SASL login.
    AuthFailed(String, bool),
}

/// A live connection's clocks, in the engine's hands.
struct Clocks {
    last_recv: Instant,
    last_send: Instant,
    /// No reply for this long (2/3 of the session timeout) drops the connection.
    read_timeout: Duration,
    /// An idle connection pings after this long.
    ping_every: Duration,
}

impl Clocks {
    fn new(negotiated: Duration) -> Self {
        let read_timeout = negotiated * 2 / 3;
        let now = Instant::now();
        Clocks {
            last_recv: now,
            last_send: now,
            read_timeout,
            // Half the read timeout, and at least every 10 s as the Java
            // client (`MAX_SEND_PING_INTERVAL`), so idle connections look
            // alive to whatever sits between client and server.
            ping_every: (read_timeout / 2).min(MAX_PING_INTERVAL),
        }
    }

    fn silent(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_recv) >= self.read_timeout
    }

    fn ping_due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_send) >= self.ping_every
    }

    /// When the engine must serve the connection next: when silence would
    /// drop it, or, when nothing waits to be written, when a ping is due,
    /// whichever comes first. (With bytes stuck in the write buffer a ping
    /// would only queue behind them; silence decides then.)
    fn next_wake(&self, writing: bool) -> Instant {
        let silence = self.last_recv + self.read_timeout;
        match writing {
            true => silence,
            false => silence.min(self.last_send + self.ping_every),
        }
    }
}

impl Inner {
    /// Hands `batch` to the live connection; fails with `ConnectionLoss`,
    /// sending nothing, if no connection is live.
    ///
    /// The fast path: when nothing waits in the inbox and the engine is not
    /// using the connection, the caller puts its frames in the write
    /// buffer and writes what the socket takes now, without blocking,
    /// saving a hand-over to the engine thread. Otherwise the batch waits
    /// in the inbox and the engine is asked to serve the connection. Either
    /// way the order of requests is the order they were handed over.
    ///
    /// On a parked connection (see [`Wire::parked`]) nobody would read
    /// the replies: a caller that `waits` for them takes the reader's part
    /// here (the returned [`Claim`]), at no cost to the poll; otherwise the
    /// engine's interest is switched on again.
    fn submit(&self, batch: Vec<Submit>, waits: bool) -> Result<Option<Claim>, Error> {
        let mut inbox = self.inbox.lock();
        if !inbox.live {
            return Err(Error::from_code(ErrorCode::ConnectionLoss));
        }
        let idle_wire = inbox.queue.is_empty().then(|| inbox.wire.clone()).flatten();
        if let Some(wire) = &idle_wire {
            if let Some(mut w) = wire.try_lock() {
                let requests = w.enqueue(batch);
                let flushed = w.conn.flush();
                let left_over = w.conn.has_output();
                let may_read = waits && flushed.is_ok() && !left_over;
                let claim = match w.parked {
                    true => self.claim_or_unpark(&mut w, wire, may_read),
                    false => None,
                };
                let serve = flushed.is_err() || left_over || w.broken.is_some();
                drop(w);
                metrics::add(&self.cfg.counters.requests_sent, requests);
                // A broken socket is the engine's to notice and drop; what
                // the socket did not take, the engine writes when it can
                // (it asks the poll to say when the socket is writable).
                if serve {
                    if let Some(token) = inbox.token {
                        drop(inbox);
                        self.engine.ready(token);
                    }
                }
                return Ok(claim);
            }
        }
        inbox.queue.extend(batch);
        let first = !std::mem::replace(&mut inbox.scheduled, true);
        let wake = inbox.token.filter(|_| first);
        drop(inbox);
        if let Some(token) = wake {
            self.engine.ready(token);
        }
        Ok(None)
    }

    /// Makes sure someone reads what a request just written to the parked
    /// wire `w` brings back: the caller itself when it `may_read` and
    /// nothing else is due to be read, or else the engine.
    fn claim_or_unpark(
        &self,
        w: &mut Wire,
        wire: &Arc<Mutex<Wire>>,
        may_read: bool,
    ) -> Option<Claim> {
        let quiet = self.no_wakers_in_flight(w);
        let answers_only = !w.pending.is_empty() && w.unanswered == 0;
        if let Some(sock) = w.conn.plain_socket() {
            if may_read && quiet && answers_only && !w.reader {
                w.parked = false;
                w.reader = true;
                return Some(Claim {
                    engine: self.engine,
                    wire: Arc::clone(wire),
                    sock,
                    read: false,
                });
            }
        }
        w.give_to_engine(self.engine);
        None
    }

    /// Whether no wakers are in flight: none read and waiting on `w`, and
    /// no thread running some. A waiter that starts reading while one is
    /// could sleep through the wake-up it waits for.
    fn no_wakers_in_flight(&self, w: &Wire) -> bool {
        !w.has_wakers() && !self.wakers.lock().running
    }

    /// Waits for `slot`'s outcome until `deadline`, reading the reply
    /// itself when it can (see [`Inner::read_own_reply`]).
    fn wait_reply(
        &self,
        slot: &Arc<ReplySlot>,
        deadline: Instant,
        claim: Option<Claim>,
    ) -> Result<Reply, Error> {
        if let Some(claim) = claim {
            let (wire, sock) = claim.into_parts();
            if self.read_as_reader(&wire, sock, &|| slot.is_waiting(), deadline) {
                metrics::add(&self.cfg.counters.replies_read_by_caller, 1);
            }
            return slot.wait_until(deadline);
        }
        // A cancellable call waits on its slot, where a cancel reaches it;
        // a waker on the engine's thread must not wait at all.
        if cancel::current().is_none() && !engine::on_engine_thread() {
            let wire = self.inbox.lock().wire.clone();
            if let Some(wire) = wire {
                self.read_own_reply(&wire, slot, deadline);
            }
        }
        slot.wait_until(deadline)
    }

    /// Reads from the socket on the caller's thread until `slot` is
    /// answered or `deadline` passes, if the connection is plain TCP, all
    /// its output is written and nobody else reads; otherwise returns at
    /// once and the engine reads. While the caller reads, the engine's poll
    /// ignores the socket (its interest is switched off: no wake-up per
    /// reply); the engine still keeps the clocks (pings, silence), and
    /// ending the connection shuts the socket down, which wakes the caller.
    /// Everything read is dispatched as the engine would (other callers'
    /// replies, watch events), and before the caller returns the interest
    /// is switched on again, so what arrives next is the engine's, unless
    /// nothing can arrive but a hang-up (see [`Wire::parked`]).
    fn read_own_reply(&self, wire: &Mutex<Wire>, slot: &ReplySlot, deadline: Instant) {
        if self.read_while(wire, &|| slot.is_waiting(), deadline) {
            metrics::add(&self.cfg.counters.replies_read_by_caller, 1);
        }
    }

    /// Reads the connection on this thread while `waiting()` holds, until
    /// `deadline`, as [`Inner::read_own_reply`] does for a reply; true if
    /// `waiting()` turned false after a read of this thread's. A waker
    /// that ends the wait is run by whoever read its event: this thread,
    /// or the engine if it read it first, and then this thread does not
    /// start reading (see [`wake_from`]).
    fn read_while(
        &self,
        wire: &Mutex<Wire>,
        waiting: &dyn Fn() -> bool,
        deadline: Instant,
    ) -> bool {
        // `waiting()` may be a caller's check: it never runs under the
        // wire's lock, which the engine thread (serving every session)
        // would wait for. The loop below checks it again once this thread
        // is the reader: a waker that ran before then was seen done here
        // (`running` is cleared under a lock after it runs), and an event
        // not read yet is this thread's to read.
        if !waiting() {
            return false;
        }
        match self.take_reader(wire) {
            Some(sock) => self.read_as_reader(wire, sock, waiting, deadline),
            None => false,
        }
    }

    /// Makes this thread the reader of `wire`, if the connection is plain
    /// TCP, all its output is written, nobody else reads and no wakers are
    /// in flight; the engine's poll then hears of nothing but hang-ups.
    fn take_reader(&self, wire: &Mutex<Wire>) -> Option<Arc<Socket>> {
        let mut w = wire.try_lock()?;
        let free = !w.reader && !w.done && w.broken.is_none() && !w.conn.has_output();
        let quiet = self.no_wakers_in_flight(&w);
        let sock = w.conn.plain_socket().filter(|_| free && quiet)?;
        let token = w.token?;
        // A parked connection's poll hears of nothing already.
        if !w.parked {
            self.engine.set_interest(sock.as_fd(), token, None).ok()?;
        }
        // If a write is taken in parts meanwhile, the engine asks to hear
        // of writability again.
        w.writable_interest = false;
        w.parked = false;
        w.reader = true;
        Some(sock)
    }

    /// Reads `wire` on this thread, its reader (see [`Inner::take_reader`]),
    /// while `waiting()` holds, until `deadline`; then lets go of it,
    /// parked if nothing is due from the server, or else the engine's
    /// again. True if `waiting()` turned false after a read of this
    /// thread's.
    fn read_as_reader(
        &self,
        wire: &Mutex<Wire>,
        sock: Arc<Socket>,
        waiting: &dyn Fn() -> bool,
        deadline: Instant,
    ) -> bool {
        let mut woken = Vec::new();
        let mut read_it = false;
        let mut buf = [0u8; READER_CHUNK];
        let mut timed_out = false;
        while waiting() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            // Sleeps in the read: no lock is held, so the engine serves
            // the session (and every other) meanwhile.
            let got = sock.wait_read(&mut buf, left, MAX_OWN_READ_WAIT, timed_out);
            timed_out = matches!(&got, Err(e) if e.kind() == io::ErrorKind::WouldBlock);
            let mut w = wire.lock();
            if w.done {
                break; // ended by the engine, which answers what is pending
            }
            let ended = match got {
                Ok(0) => Some(Ended::Dropped),
                Ok(n) => {
                    w.received.extend_from_slice(&buf[..n]);
                    // A full buffer may have left more in the socket.
                    let more = n == buf.len();
                    self.took_input(&mut w)
                        .or_else(|| more.then(|| self.read_available(&mut w)).flatten())
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) =>
                {
                    None
                }
                Err(e) => {
                    log::debug!("read failed: {e}");
                    Some(Ended::Dropped)
                }
            };
            if let Some(ended) = ended {
                w.broken = Some(ended);
                break;
            }
            self.let_go(w, &mut woken, false);
            read_it = !waiting();
        }
        let mut w = wire.lock();
        w.reader = false;
        if w.done {
            return read_it;
        }
        if w.token.is_none() {
            return read_it;
        }
        // What the poll reported while this thread read (a hang-up) may
        // have come after its last read: switching the interest on again
        // has the poll report it anew, to the engine.
        let reported = std::mem::take(&mut w.reported);
        if self.may_park(&w) && !w.writable_interest && !reported {
            // Nothing can come but a hang-up, which the poll still hears
            // of: the next caller reads its reply without switching the
            // interest off, and this one need not switch it on.
            w.parked = true;
        } else {
            w.give_to_engine(self.engine);
        }
        let broken = w.broken.is_some();
        self.let_go(w, &mut woken, broken);
        read_it
    }

    /// Whether a reader letting go of `w` may leave it parked: nothing is
    /// due from the server (every request answered, no watch that an event
    /// could fire) and nothing waits to be written.
    fn may_park(&self, w: &Wire) -> bool {
        w.broken.is_none()
            && !w.conn.has_output()
            && w.pending.is_empty()
            && w.unanswered == 0
            && w.received.is_empty()
            && self.watches.lock().is_empty()
    }

    /// Lets go of the wire after a caller's read: wakes what it read (see
    /// [`wake_from`]), and asks the engine to serve the connection when
    /// `serve` says so.
    fn let_go(&self, guard: MutexGuard<'_, Wire>, woken: &mut Vec<Wake>, serve: bool) {
        let token = guard.token;
        wake_from(self, guard, woken);
        if let Some(token) = token.filter(|_| serve) {
            self.engine.ready(token);
        }
    }

    /// Connects on a thread of its own (name lookup, connect, handshake,
    /// login all block), which ends once the connection is handed to the
    /// engine or the session is over.
    fn dial_in_background(self: Arc<Self>, dialer: Dialer) -> io::Result<()> {
        thread::Builder::new()
            .name("latchkey-connect".into())
            .spawn(move || self.dial(dialer))
            .map(drop)
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
            let connected = attempt.and_then(|(host, addr): (String, _)| {
                self.handshake(&host, addr, &mut dialer.xids)
            });
            match connected {
                Ok((conn, read_only)) => {
                    *self.last_connect_error.lock() = None;
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
                    log::debug!("connecting failed: {failure}");
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
    fn auth_failed(&self, reason: String, at_login: bool) {
        log::error!("{reason}");
        *self.auth_failure.lock() = reason.clone();
        self.expire(
            ErrorCode::AuthFailed,
            WireEvent::AuthFailed { reason, at_login },
        );
    }

    /// Whether the session is closed or closing: no more reconnects.
    fn is_ending(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.closing.load(Ordering::Acquire)
    }

    /// The session is over for good: fail what waits, fire every watch once
    /// so nobody sleeps on a watch that can no longer fire.
    fn expire(&self, code: ErrorCode, event: WireEvent) {
        *self.ended_by.lock() = Some(code);
        self.closed.store(true, Ordering::Release);
        self.inbox.lock().close();
        self.connected.notify_all();
        self.fire_watches_expired();
        (self.events)(event);
    }

    /// Marks the session closed and stops the engine's connection; false if
    /// it was closed already.
    fn shut_down(&self) -> bool {
        if self.closed.swap(true, Ordering::AcqRel) {
            return false;
        }
        let token = {
            let mut inbox = self.inbox.lock();
            inbox.close();
            inbox.token
        };
        // The engine ends the live connection when it next serves it.
        if let Some(token) = token {
            self.engine.ready(token);
        }
        if let Some(s) = self.connecting.lock().take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        self.connected.notify_all();
        true
    }

    /// Removes every watch and fires each once with `SessionExpired`.
    fn fire_watches_expired(&self) {
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
        self.watch_events.send((vec![run], ev));
    }

    /// Connects to `addr`, resumes or starts the session there and logs in;
    /// returns the connection, ready for the engine, and whether the server
    /// is read-only.
    fn handshake(
        &self,
        host: &str,
        addr: SocketAddr,
        xids: &mut Xids,
    ) -> Result<(Conn, bool), HandshakeError> {
        let result = self.set_up(host, addr, xids);
        *self.connecting.lock() = None;
        result
    }

    fn set_up(
        &self,
        host: &str,
        addr: SocketAddr,
        xids: &mut Xids,
    ) -> Result<(Conn, bool), HandshakeError> {
        let (mut s, resp) = self.exchange_handshake(host, addr)?;
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

    /// The connect request and its reply, each failure classified.
    fn exchange_handshake(
        &self,
        host: &str,
        addr: SocketAddr,
    ) -> Result<(Stream, ConnectResponse), HandshakeError> {
        let per_host = self.cfg.connection_timeout / (self.cfg.hosts.len().max(1) as u32);
        let per_host = per_host.max(Duration::from_millis(200));
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
        let mut s = open_stream_with(host, addr, self.cfg.tls.as_ref(), per_host, keep)
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
    fn prime(&self, conn: &mut Conn) -> usize {
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

    /// Dispatches every complete frame of the input a reader just added to
    /// `wire.received`; `Some` if the connection must end.
    fn took_input(&self, wire: &mut Wire) -> Option<Ended> {
        wire.clocks.last_recv = Instant::now();
        let Wire {
            received,
            pending,
            to_wake,
            unanswered,
            ..
        } = wire;
        match self.dispatch_frames(received, pending, unanswered, to_wake) {
            Ok(ended) => ended,
            Err(e) => {
                log::warn!("protocol error, reconnecting: {e}");
                Some(Ended::Dropped)
            }
        }
    }

    /// Reads everything the socket has and dispatches every complete
    /// frame; `Some` if the connection must end.
    fn read_available(&self, wire: &mut Wire) -> Option<Ended> {
        loop {
            match wire.conn.receive(&mut wire.received) {
                Ok(Received::Bytes(0)) => {}
                Ok(got @ (Received::Bytes(_) | Received::Drained)) => {
                    if let Some(ended) = self.took_input(wire) {
                        return Some(ended);
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

    /// Handles every complete frame in `buf`, leaving a partial one behind.
    fn dispatch_frames(
        &self,
        buf: &mut Vec<u8>,
        pending: &mut VecDeque<Pending>,
        unanswered: &mut usize,
        to_wake: &mut Vec<Wake>,
    ) -> Result<Option<Ended>, Error> {
        let mut at = 0;
        let mut outcome = None;
        while buf.len() - at >= 4 {
            let len = i32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
            if len < 0 || len as usize > self.cfg.max_reply {
                return Err(Error::Marshalling("bad frame length"));
            }
            let end = at + 4 + len as usize;
            if buf.len() < end {
                break;
            }
            if let Some(ended) = self.dispatch(&buf[at + 4..end], pending, unanswered, to_wake)? {
                outcome = Some(ended);
            }
            at = end;
        }
        buf.drain(..at);
        Ok(outcome)
    }

    fn dispatch(
        &self,
        frame: &[u8],
        pending: &mut VecDeque<Pending>,
        unanswered: &mut usize,
        to_wake: &mut Vec<Wake>,
    ) -> Result<Option<Ended>, Error> {
        let mut r = Reader::new(frame);
        let header = ReplyHeader::read(&mut r)?;
        if header.zxid > 0 {
            self.last_zxid.fetch_max(header.zxid, Ordering::AcqRel);
        }
        match header.xid {
            xid::WATCH_EVENT => {
                let ev = WatcherEvent::read(&mut r)?;
                metrics::add(&self.cfg.counters.watch_events, 1);
                let event_type = EventType::from_wire(ev.event_type);
                let fired = self.watches.lock().triggered(event_type, &ev.path);
                let event = WatchedEvent {
                    event_type,
                    path: ev.path,
                };
                let (mut wakers, mut watchers) = (Vec::new(), Vec::new());
                for w in fired {
                    match w.waker {
                        true => wakers.push(w.run),
                        false => watchers.push(w.run),
                    }
                }
                match (wakers.is_empty(), watchers.is_empty()) {
                    (true, true) => {}
                    (false, true) => to_wake.push(Wake::Wakers(wakers, event)),
                    (true, false) => {
                        self.watch_events.send((watchers, event));
                    }
                    (false, false) => {
                        to_wake.push(Wake::Wakers(wakers, event.clone()));
                        self.watch_events.send((watchers, event));
                    }
                }
            }
            xid::PING | xid::SET_WATCHES => *unanswered = unanswered.saturating_sub(1),
            xid::AUTH => {
                *unanswered = unanswered.saturating_sub(1);
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
                let Some(request) = pending.pop_front() else {
                    return Err(Error::Marshalling("reply with no request waiting"));
                };
                if request.xid != header.xid {
                    // Dropped with the connection, the request fails at once.
                    return Err(Error::Marshalling("reply out of order"));
                }
                let result = if header.err == 0 {
                    Ok(r.rest().to_vec())
                } else {
                    Err(Error::from_code(ErrorCode::from_wire(header.err)))
                };
                // The watch is registered only for a caller still waiting,
                // before it sees the reply; an abandoned call leaves none.
                let settled = request.settle(result, |result, watch| {
                    if let Some(reg) = watch {
                        self.register_watch(reg, result);
                    }
                });
                to_wake.extend(settled.map(Wake::Caller));
            }
        }
        Ok(None)
    }

    /// Registers the watch a request carried, as its reply decides.
    fn register_watch(&self, reg: WatchRegistration, result: &Result<Reply, Error>) {
        let kind = match result {
            Ok(_) => Some(reg.on_ok),
            Err(e) if e.code() == Some(ErrorCode::NoNode) => reg.on_no_node,
            Err(_) => None,
        };
        let Some(kind) = kind else { return };
        let mut watches = self.watches.lock();
        if watches.is_ended() {
            // The session was given up while this reply was on its way:
            // the watch fires like the others.
            drop(watches);
            self.send_expired(reg.path, reg.watcher.run);
        } else {
            watches.add(kind, reg.path, reg.watcher);
        }
    }
}

/// The pause between failed connection attempts: jittered (±50%) and
/// growing by half while attempts keep failing, from 20 ms to 1 s.
struct ReconnectPause {
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

    fn reset(&mut self) {
        self.interval = Self::FIRST;
    }
}

/// What a session carries from one connection to the next.
struct Dialer {
    xids: Xids,
    pause: ReconnectPause,
    /// Whether to pause before the next attempt.
    pause_first: bool,
    /// A read-write server found while connected read-only: tried first.
    prefer: Option<(String, SocketAddr)>,
}

impl Dialer {
    fn new() -> Self {
        Dialer {
            xids: Xids(1),
            pause: ReconnectPause::new(),
            pause_first: false,
            prefer: None,
        }
    }

    fn pause_now(&mut self) {
        thread::sleep(self.pause.next());
    }
}

/// A live connection's I/O state. The engine holds it while it serves the
/// connection; a caller holds it for a moment when it writes its own
/// request straight to an idle socket (see [`Inner::submit`]).
struct Wire {
    conn: Conn,
    /// Written, waiting for their replies, in the order they were written.
    pending: VecDeque<Pending>,
    /// Bytes read and not yet dispatched (a partial frame).
    received: Vec<u8>,
    clocks: Clocks,
    xids: Xids,
    /// Callers answered, and internal wakers fired, by a read; woken once
    /// the reader lets go of the connection.
    to_wake: Vec<Wake>,
    /// The engine's token for the connection, once attached.
    token: Option<Token>,
    /// A caller is reading (the engine's poll ignores the socket).
    reader: bool,
    /// Nobody reads, and the engine's poll hears of hang-ups only: the
    /// last reader found nothing due from the server (see
    /// [`Inner::may_park`]). Whoever writes a request next either reads
    /// its reply itself or switches the engine's interest on again
    /// ([`Inner::claim_or_unpark`]; the engine, for what it writes). Saves
    /// the two `epoll_ctl` calls of each caller's read on a connection
    /// with no watches.
    parked: bool,
    /// The poll reported the socket (a hang-up, or writability) while a
    /// caller was reading, and the engine left it to the caller; taken
    /// when the caller lets go, which then does not park.
    reported: bool,
    /// Frames written whose replies are not matched to a request: auth,
    /// SetWatches and pings. A connection waiting for one is not parked.
    unanswered: usize,
    /// The poll is asked for writable events too (see [`Wire::interest`]).
    writable_interest: bool,
    /// Found broken by a caller reading: the engine ends it.
    broken: Option<Ended>,
    /// Taken out of the engine for good: nobody puts it back in the poll.
    done: bool,
}

/// A caller's part as the reader of a parked connection, taken as its
/// request was written (see [`Inner::submit`]) and read with
/// [`Inner::read_as_reader`]. A claim dropped unread gives the connection
/// to the engine: nothing between the write and the read can leave it
/// with no reader.
struct Claim {
    engine: &'static Engine,
    wire: Arc<Mutex<Wire>>,
    sock: Arc<Socket>,
    read: bool,
}

impl Claim {
    /// The connection and its socket, to read now.
    fn into_parts(mut self) -> (Arc<Mutex<Wire>>, Arc<Socket>) {
        self.read = true;
        (Arc::clone(&self.wire), Arc::clone(&self.sock))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.read {
            return;
        }
        let mut w = self.wire.lock();
        w.reader = false;
        if w.done {
            return;
        }
        w.give_to_engine(self.engine);
        if let Some(token) = w.token.filter(|_| w.broken.is_some()) {
            drop(w);
            self.engine.ready(token);
        }
    }
}

/// Someone to wake once the engine lets go of the connection.
enum Wake {
    Caller(Arc<ReplySlot>),
    Wakers(Vec<WatchFn>, WatchedEvent),
}

impl Wake {
    fn run(self) {
        match self {
            Wake::Caller(slot) => slot.wake(),
            Wake::Wakers(wakers, event) => run_watchers((wakers, event)),
        }
    }
}

impl Wire {
    fn has_wakers(&self) -> bool {
        self.to_wake.iter().any(|w| matches!(w, Wake::Wakers(..)))
    }

    /// What the poll watches for: readable always, writable only while
    /// bytes wait to be written. (A socket is nearly always writable, and
    /// with edge triggering each re-arming would report that once: a
    /// pointless wake-up of the engine.)
    fn interest(&self) -> Interest {
        match self.conn.has_output() {
            true => Interest::READABLE | Interest::WRITABLE,
            false => Interest::READABLE,
        }
    }

    /// Switches the engine's interest on again: it reads the connection
    /// from now on.
    fn unpark(&mut self, engine: &Engine) -> io::Result<()> {
        self.parked = false;
        let token = self.token.ok_or_else(|| io::Error::other("not attached"))?;
        let interest = self.interest();
        engine.set_interest(self.conn.fd(), token, Some(interest))?;
        self.writable_interest = interest.is_writable();
        Ok(())
    }

    /// Gives the connection to the engine ([`Wire::unpark`]); one whose
    /// interest cannot be switched on is marked broken, for the engine to
    /// end.
    fn give_to_engine(&mut self, engine: &Engine) {
        if let Err(e) = self.unpark(engine) {
            log::debug!("cannot give the socket back to the engine: {e}");
            self.broken.get_or_insert(Ended::Dropped);
        }
    }

    /// Puts `batch` in the write buffer, each request given its xid now, so
    /// xids reach the server in the order replies are matched; returns how
    /// many requests it held.
    fn enqueue(&mut self, batch: Vec<Submit>) -> u64 {
        let mut requests = 0;
        for Submit { mut frame, reply } in batch {
            if let Some((slot, watch)) = reply {
                let xid = self.xids.take();
                frame[4..8].copy_from_slice(&xid.to_be_bytes());
                self.pending.push_back(Pending {
                    xid,
                    slot: Some(slot),
                    watch,
                });
                requests += 1;
            } else {
                self.unanswered += 1;
            }
            self.conn.queue(&frame);
        }
        self.clocks.last_send = Instant::now();
        requests
    }
}

/// One live connection and its requests, served by the engine.
struct Live {
    inner: Arc<Inner>,
    wire: Arc<Mutex<Wire>>,
    read_only: bool,
    /// Connected read-only: the search for a read-write server.
    search: Option<RwSearch>,
    dialer: Dialer,
    connected_at: Instant,
    ended: Ended,
    /// Where `Wire::to_wake` is moved to wake outside the lock, kept to
    /// save an allocation per round.
    woken: Vec<Wake>,
}

impl Live {
    /// A connection fresh from its handshake, with auth and re-armed
    /// watches queued before any caller's request.
    fn new(inner: Arc<Inner>, mut conn: Conn, read_only: bool, dialer: Dialer) -> Self {
        let negotiated = inner.creds.lock().negotiated;
        let primed = inner.prime(&mut conn);
        inner.probe.lock().connected(read_only, negotiated);
        let wire = Wire {
            conn,
            pending: VecDeque::new(),
            received: Vec::with_capacity(64 * 1024),
            clocks: Clocks::new(negotiated),
            xids: dialer.xids,
            to_wake: Vec::new(),
            token: None,
            reader: false,
            parked: false,
            reported: false,
            unanswered: primed,
            writable_interest: false,
            broken: None,
            done: false,
        };
        Live {
            wire: Arc::new(Mutex::new(wire)),
            read_only,
            search: None,
            dialer,
            connected_at: Instant::now(),
            ended: Ended::Dropped,
            woken: Vec::new(),
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

    /// One round of service; `Some` when the connection must end. Callers
    /// answered meanwhile are woken after the connection is let go, so
    /// their next requests take the fast path instead of a hand-over.
    fn step(&mut self, readable: bool) -> Option<Ended> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Some(Ended::Dropped);
        }
        let mut wire = self.wire.lock();
        let ended = wire
            .broken
            .take()
            .or_else(|| Self::serve_wire(&self.inner, self.search.as_ref(), &mut wire, readable));
        wake_from(&self.inner, wire, &mut self.woken);
        ended
    }

    fn serve_wire(
        inner: &Inner,
        search: Option<&RwSearch>,
        wire: &mut Wire,
        readable: bool,
    ) -> Option<Ended> {
        let batch = {
            let mut inbox = inner.inbox.lock();
            inbox.scheduled = false;
            std::mem::take(&mut inbox.queue)
        };
        if !batch.is_empty() {
            let requests = wire.enqueue(batch);
            metrics::add(&inner.cfg.counters.requests_sent, requests);
        }
        let now = Instant::now();
        if !wire.conn.has_output() && wire.clocks.ping_due(now) {
            wire.conn
                .queue(&proto::request(xid::PING, op::PING).finish_frame());
            wire.clocks.last_send = now;
            wire.unanswered += 1;
        }
        // What the engine writes to a parked connection, it reads.
        let due = !wire.pending.is_empty() || wire.unanswered > 0 || wire.conn.has_output();
        if wire.parked && due {
            if let Err(e) = wire.unpark(inner.engine) {
                log::debug!("cannot poll the connection, dropping it: {e}");
                return Some(Ended::Dropped);
            }
        }
        if let Err(e) = wire.conn.flush() {
            log::debug!("write failed, dropping connection: {e}");
            return Some(Ended::Dropped);
        }
        if wire.conn.has_output() && !wire.writable_interest {
            // Told when the socket takes more. While a caller reads (for
            // as long as a lock is held, for a lock waiter), the poll is
            // told of writes only: the caller reads, and puts the whole
            // interest back when it is done.
            let Some(token) = wire.token else {
                return Some(Ended::Dropped);
            };
            let interest = match wire.reader {
                true => Interest::WRITABLE,
                false => wire.interest(),
            };
            if let Err(e) = inner
                .engine
                .set_interest(wire.conn.fd(), token, Some(interest))
            {
                log::debug!("cannot poll for writes, dropping connection: {e}");
                return Some(Ended::Dropped);
            }
            wire.writable_interest = true;
        }
        if readable {
            match wire.reader {
                // The reader may have stopped reading already: it must
                // not leave the connection parked with this unread.
                true => wire.reported = true,
                false => {
                    if let Some(ended) = inner.read_available(wire) {
                        return Some(ended);
                    }
                }
            }
        }
        // A thread reading for the engine may be held up (running a
        // waker, or descheduled) with replies waiting in the socket: the
        // connection is not silent then, only its reader is slow.
        if wire.clocks.silent(Instant::now()) && !(wire.reader && input_waiting(&wire.conn)) {
            log::info!(
                "no reply from server for {:?}, reconnecting",
                wire.clocks.read_timeout
            );
            return Some(Ended::Dropped);
        }
        if let Some((host, addr)) = search.and_then(RwSearch::found) {
            log::info!("read-write server found at {host} ({addr}), moving there");
            return Some(Ended::ReadWriteFound(host, addr));
        }
        None
    }
}

impl Driven for Live {
    fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        let mut wire = self.wire.lock();
        // Auth and re-armed watches may wait to be written already.
        let interest = Interest::READABLE | Interest::WRITABLE;
        registry.register(&mut wire.conn.source(), token, interest)?;
        wire.writable_interest = true;
        wire.token = Some(token);
        Ok(())
    }

    fn deregister(&mut self, registry: &Registry) {
        let mut wire = self.wire.lock();
        wire.done = true;
        let _ = registry.deregister(&mut wire.conn.source());
        // A caller waiting on the socket wakes and finds the connection over.
        wire.conn.shut_down();
    }

    fn attached(&mut self, token: Token) {
        if self.read_only {
            self.start_search(token);
        }
        {
            let mut inbox = self.inner.inbox.lock();
            inbox.token = Some(token);
            inbox.scheduled = false;
            if self.inner.closed.load(Ordering::Acquire) {
                return; // served next, and ended
            }
            inbox.wire = Some(Arc::clone(&self.wire));
            inbox.live = true;
        }
        self.inner.connected.notify_all();
        (self.inner.events)(WireEvent::Connected {
            read_only: self.read_only,
        });
    }

    fn serve(&mut self, readable: bool) -> bool {
        match self.step(readable) {
            None => true,
            Some(ended) => {
                self.ended = ended;
                false
            }
        }
    }

    fn next_wake(&self) -> Instant {
        let wire = self.wire.lock();
        wire.clocks.next_wake(wire.conn.has_output())
    }

    fn finish(self: Box<Self>) {
        let Live {
            inner,
            wire,
            mut dialer,
            connected_at,
            ended,
            ..
        } = *self;
        if let Ended::AuthFailed(why, _) = &ended {
            // What waits fails with the reason, and nothing reports a mere
            // disconnection first.
            *inner.auth_failure.lock() = why.clone();
            *inner.ended_by.lock() = Some(ErrorCode::AuthFailed);
            inner.closed.store(true, Ordering::Release);
        }
        // No caller reaches the wire from here on.
        inner.inbox.lock().close();
        let (pending, last_recv) = {
            let mut guard = wire.lock();
            dialer.xids = guard.xids;
            let taken = (std::mem::take(&mut guard.pending), guard.clocks.last_recv);
            // What a read left to wake still runs, in its turn.
            wake_from(&inner, guard, &mut Vec::new());
            taken
        };
        drop(wire);
        let error = || match &ended {
            Ended::AuthFailed(why, _) => Error::AuthFailed {
                reason: why.clone(),
            },
            _ => Error::from_code(ErrorCode::ConnectionLoss),
        };
        // Sent, and now in doubt: the retry loop decides what to do again.
        for p in pending {
            p.answer(Err(error()), |_, _| {});
        }
        let ending = inner.is_ending();
        if !ending {
            (inner.events)(WireEvent::Disconnected {
                silent_for: last_recv.elapsed(),
            });
        }
        match ended {
            Ended::AuthFailed(reason, at_login) => inner.auth_failed(reason, at_login),
            _ if ending => (inner.events)(WireEvent::Closed),
            Ended::ReadWriteFound(host, addr) => {
                dialer.prefer = Some((host, addr));
                redial(inner, dialer);
            }
            Ended::Dropped => {
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

/// Wakes, outside the lock, what `guard`'s wire holds to wake: callers
/// at once; a session's wakers one thread at a time, in the order their
/// events came, across connections too. The thread that finds no one
/// running wakers runs what it read, in order, then what other threads
/// queued meanwhile; another thread only queues its wakers for it.
fn wake_from(inner: &Inner, mut guard: MutexGuard<'_, Wire>, buf: &mut Vec<Wake>) {
    // Callers alone need no turn.
    if !guard.has_wakers() {
        buf.append(&mut guard.to_wake);
        drop(guard);
        for wake in buf.drain(..) {
            wake.run();
        }
        return;
    }
    let runner = {
        let mut turn = inner.wakers.lock();
        if turn.running {
            for wake in guard.to_wake.drain(..) {
                match wake {
                    Wake::Caller(_) => buf.push(wake),
                    Wake::Wakers(..) => turn.queue.push(wake),
                }
            }
            false
        } else {
            turn.running = guard.has_wakers();
            buf.append(&mut guard.to_wake);
            turn.running
        }
    };
    drop(guard);
    for wake in buf.drain(..) {
        wake.run();
    }
    if !runner {
        return;
    }
    loop {
        {
            let mut turn = inner.wakers.lock();
            if turn.queue.is_empty() {
                turn.running = false;
                return;
            }
            std::mem::swap(&mut turn.queue, buf);
        }
        for wake in buf.drain(..) {
            wake.run();
        }
    }
}

/// Whether bytes wait to be read on `conn`'s (plain) socket, and it has
/// not hung up.
fn input_waiting(conn: &Conn) -> bool {
    let Some(sock) = conn.plain_socket() else {
        return false;
    };
    let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
    if !matches!(nix::poll::poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0) {
        return false;
    }
    let ended = PollFlags::POLLHUP | PollFlags::POLLERR;
    fds[0]
        .revents()
        .is_some_and(|r| r.contains(PollFlags::POLLIN) && !r.intersects(ended))
}

/// Starts connecting again after a connection ended.
fn redial(inner: Arc<Inner>, dialer: Dialer) {
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

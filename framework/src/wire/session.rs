//! One ZooKeeper session over plain blocking sockets.
//!
//! Callers write their request frame straight to the socket and wait on a
//! channel; one reader thread per session reads replies in order, sends pings,
//! notices silence (read timeout of 2/3 of the session timeout, as the Java
//! client does) and reconnects to the same session, re-sending auth and
//! re-arming watches with SetWatches. When the server says the session has
//! expired the session reports it and stops: the framework starts a new one.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use backoff::backoff::Backoff;
use parking_lot::{Condvar, Mutex};

use super::jute::{Reader, Writer};
use super::proto::{self, op, xid, ConnectRequest, ConnectResponse, ReplyHeader, WatcherEvent};
use super::sasl::{self, LoginError, SaslDigest};
use super::transport::{self, Stream, TlsFailure, TlsSettings};
use super::watches::{RemoveKind, WatchFn, WatchRegistration, Watches};
use crate::cancel;
use crate::error::{Error, ErrorCode};
use crate::lazy_thread::LazyThread;
use crate::metrics::{self, Counters};
use crate::{EventType, WatchedEvent};

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

/// Why the last attempt to connect failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ConnectFailure {
    /// The host name did not resolve (or to no address).
    Unresolvable { host: String, reason: String },
    /// Nothing listens there.
    Refused { addr: SocketAddr },
    /// No connection or no handshake reply within the connect timeout.
    TimedOut { addr: SocketAddr },
    /// The server's handshake reply was cut short or malformed.
    BadHandshake { addr: SocketAddr, reason: String },
    /// Another socket error.
    Io { addr: SocketAddr, reason: String },
    /// The TLS handshake failed: an untrusted or mismatched certificate,
    /// or the server refused ours.
    Tls {
        host: String,
        addr: SocketAddr,
        reason: String,
    },
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectFailure::Unresolvable { host, reason } => {
                write!(f, "cannot resolve {host}: {reason}")
            }
            ConnectFailure::Refused { addr } => write!(f, "connection to {addr} refused"),
            ConnectFailure::TimedOut { addr } => write!(f, "connecting to {addr} timed out"),
            ConnectFailure::BadHandshake { addr, reason } => {
                write!(f, "bad handshake reply from {addr}: {reason}")
            }
            ConnectFailure::Io { addr, reason } => write!(f, "connecting to {addr}: {reason}"),
            ConnectFailure::Tls { host, addr, reason } if *host == addr.to_string() => {
                write!(f, "TLS with {host} failed: {reason}")
            }
            ConnectFailure::Tls { host, addr, reason } => {
                write!(f, "TLS with {host} ({addr}) failed: {reason}")
            }
        }
    }
}

impl ConnectFailure {
    /// Classifies a socket error of the connect step.
    fn connecting(addr: SocketAddr, e: &io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::ConnectionRefused => ConnectFailure::Refused { addr },
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
                ConnectFailure::TimedOut { addr }
            }
            _ => ConnectFailure::Io {
                addr,
                reason: e.to_string(),
            },
        }
    }

    /// Classifies a failed TLS handshake with `host`.
    fn tls(host: &str, addr: SocketAddr, e: TlsFailure) -> Self {
        match e {
            TlsFailure::TimedOut => ConnectFailure::TimedOut { addr },
            TlsFailure::Rejected(reason) => ConnectFailure::Tls {
                host: host.to_owned(),
                addr,
                reason,
            },
            TlsFailure::Io(e) => ConnectFailure::connecting(addr, &e),
        }
    }

    /// Classifies an error of the handshake exchange.
    fn handshaking(host: &str, addr: SocketAddr, e: &io::Error) -> Self {
        if let Some(reason) = transport::rustls_error(e) {
            // A TLS 1.3 server refuses a client certificate only now.
            let host = host.to_owned();
            return ConnectFailure::Tls { host, addr, reason };
        }
        match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
                ConnectFailure::TimedOut { addr }
            }
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::InvalidData
            | io::ErrorKind::ConnectionReset => ConnectFailure::BadHandshake {
                addr,
                reason: e.to_string(),
            },
            _ => ConnectFailure::Io {
                addr,
                reason: e.to_string(),
            },
        }
    }
}

/// The connect string's hosts in the order this session tries them:
/// shuffled once, as the Java client's `StaticHostProvider` does, so that
/// the clients of a failed server spread over the others. Names are
/// resolved at each attempt, so a changed DNS entry is followed.
struct HostList {
    names: Vec<String>,
    next: usize,
}

impl HostList {
    fn new(names: &[String]) -> Self {
        let mut names = names.to_vec();
        shuffle(&mut names);
        HostList { names, next: 0 }
    }

    /// The next host to try, and whether it ends a round through the list.
    fn next(&mut self) -> (&str, bool) {
        let i = self.next % self.names.len().max(1);
        self.next = self.next.wrapping_add(1);
        let last = i + 1 == self.names.len();
        (self.names.get(i).map_or("", String::as_str), last)
    }
}

/// Resolves `host` (`name:port`) now, to one of its addresses at random;
/// failures are logged, not dropped.
fn resolve_one(host: &str) -> Result<SocketAddr, ConnectFailure> {
    let unresolvable = |reason: String| {
        log::warn!("cannot resolve ZooKeeper host {host}: {reason}");
        ConnectFailure::Unresolvable {
            host: host.to_owned(),
            reason,
        }
    };
    match host.to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            addrs
                .get(random_below(addrs.len()))
                .copied()
                .ok_or_else(|| unresolvable("no address".into()))
        }
        Err(e) => Err(unresolvable(e.to_string())),
    }
}

/// The search for a read-write server while connected read-only: one host
/// at a time, first after 100 ms, then at doubling intervals up to 60 s
/// (the Java client's pingRwServer timing). The interval is the session's,
/// not the connection's, as the Java client's `pingRwTimeout`: a move that
/// fails leads to a new read-only connection, which must not probe (and
/// move) again at once. A read-write connection starts it over.
struct RwProbe {
    every: Duration,
    last: Instant,
    timeout: Duration,
}

impl RwProbe {
    const FIRST: Duration = Duration::from_millis(100);

    fn new() -> Self {
        RwProbe {
            every: Self::FIRST,
            last: Instant::now(),
            timeout: Duration::from_secs(1),
        }
    }

    /// A new connection: read-only ones probe from now on, at the interval
    /// reached; a read-write one ends the search.
    fn connected(&mut self, read_only: bool, negotiated: Duration) {
        if !read_only {
            self.every = Self::FIRST;
        }
        self.last = Instant::now();
        // Short enough to leave the reader time for pings and silence.
        self.timeout = (negotiated / 6).clamp(Duration::from_millis(50), Duration::from_secs(1));
    }

    /// Probes the next host if one is due; its name (as in the connect
    /// string) and address if it is read-write.
    fn due(
        &mut self,
        hosts: &mut HostList,
        tls: Option<&TlsSettings>,
    ) -> Option<(String, SocketAddr)> {
        if self.last.elapsed() < self.every {
            return None;
        }
        self.every = (self.every * 2).min(Duration::from_secs(60));
        let (host, _) = hosts.next();
        let addr = resolve_one(host).ok()?;
        let found = is_read_write(host, addr, tls, self.timeout);
        self.last = Instant::now();
        found.then(|| (host.to_owned(), addr))
    }
}

/// A connection to `addr` (`host` in the connect string), over TLS when
/// the client uses it, as every connection of the client is: the session's,
/// the read-write probe's and a test's expiry. Connecting and the TLS
/// handshake take at most `timeout`, which reads and writes then get too.
fn open_stream(
    host: &str,
    addr: SocketAddr,
    tls: Option<&TlsSettings>,
    timeout: Duration,
) -> Result<Stream, ConnectFailure> {
    let started = Instant::now();
    let connecting = |e: io::Error| ConnectFailure::connecting(addr, &e);
    let sock = TcpStream::connect_timeout(&addr, timeout).map_err(connecting)?;
    sock.set_nodelay(true).map_err(connecting)?;
    sock.set_write_timeout(Some(timeout)).map_err(connecting)?;
    let s = match tls {
        None => Stream::plain(sock),
        Some(tls) => {
            let name = tls
                .server_name
                .as_deref()
                .unwrap_or(transport::host_of(host));
            Stream::tls(sock, tls, name, started + timeout)
                .map_err(|e| ConnectFailure::tls(host, addr, e))?
        }
    };
    s.set_read_timeout(Some(timeout)).map_err(connecting)?;
    Ok(s)
}

/// Asks a server with the `isro` four-letter word whether it serves
/// read-write.
fn is_read_write(
    host: &str,
    addr: SocketAddr,
    tls: Option<&TlsSettings>,
    timeout: Duration,
) -> bool {
    let ask = || -> io::Result<bool> {
        let mut s =
            open_stream(host, addr, tls, timeout).map_err(|e| io::Error::other(e.to_string()))?;
        s.write_all(b"isro")?;
        let mut answer = Vec::new();
        s.take(16).read_to_end(&mut answer)?;
        Ok(answer.starts_with(b"rw"))
    };
    ask().unwrap_or(false)
}

/// Fisher-Yates with [`random_below`].
fn shuffle<T>(items: &mut [T]) {
    for i in (1..items.len()).rev() {
        items.swap(i, random_below(i + 1));
    }
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

/// A successful reply's body.
pub(crate) type Reply = Vec<u8>;

/// A request to send: its op code and what writes its body.
pub(crate) type Request<'a> = (i32, &'a dyn Fn(&mut Writer));

struct Pending {
    xid: i32,
    reply: Option<Arc<ReplySlot>>,
    watch: Option<WatchRegistration>,
}

impl Pending {
    fn answer(mut self, result: Result<Reply, Error>) {
        if let Some(slot) = self.reply.take() {
            slot.put(result);
        }
    }
}

impl Drop for Pending {
    /// A request dropped unanswered (its session ended) lost its connection.
    fn drop(&mut self) {
        if let Some(slot) = self.reply.take() {
            slot.put(Err(Error::from_code(ErrorCode::ConnectionLoss)));
        }
    }
}

/// Where one request's reply is left for its caller. The caller parks at
/// once: a reply takes a network round trip, so spinning for it (as a
/// channel's receive does first) only burns CPU that the server and the
/// other clients on the machine could use.
#[derive(Default)]
struct ReplySlot {
    value: Mutex<Option<Result<Reply, Error>>>,
    ready: Condvar,
}

impl ReplySlot {
    fn put(&self, result: Result<Reply, Error>) {
        *self.value.lock() = Some(result);
        self.ready.notify_one();
    }

    /// The reply, or `None` if none came by `deadline`; `Cancelled` as soon
    /// as the calling thread's operation is cancelled (the reply, when it
    /// comes, is then dropped).
    fn wait_until(self: &Arc<Self>, deadline: Instant) -> Option<Result<Reply, Error>> {
        let mut value = self.value.lock();
        let slot = Arc::clone(self);
        let notify = move || {
            let _value = slot.value.lock();
            slot.ready.notify_all();
        };
        match cancel::wait_until(&self.ready, &mut value, deadline, |v| v.is_some(), notify) {
            Ok(_) => value.take(),
            Err(e) => Some(Err(e)),
        }
    }
}

/// Reply matching: what waits for a reply on the live connection. Held
/// only briefly, never across a socket write, so a write stuck on a stalled
/// peer cannot stop the reader from matching replies or dropping the
/// connection.
struct Io {
    /// A handle on the live connection to shut it down with; `None` while
    /// disconnected.
    live: Option<Stream>,
    /// A handle on a connection whose SASL login is under way (it is not
    /// live yet), so that a close can end the login.
    logging_in: Option<Stream>,
    /// Counts connections; a writer checks it to write only on the
    /// connection its requests were queued for.
    conn_id: u64,
    pending: VecDeque<Pending>,
    next_xid: i32,
}

/// The write side of the live connection. Writers queue their requests in
/// [`Io`] and write them under this lock, so frames and the pending queue
/// keep the same order.
struct Out {
    stream: Option<Stream>,
    conn_id: u64,
    last_send: Instant,
}

impl Io {
    /// The next request's xid; positive ones are for requests, so it wraps to 1.
    fn take_xid(&mut self) -> i32 {
        let xid = self.next_xid;
        self.next_xid = if xid == i32::MAX { 1 } else { xid + 1 };
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
    io: Mutex<Io>,
    out: Mutex<Out>,
    connected: Condvar,
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
    /// Why the last connect attempt failed; `None` after a success.
    last_connect_error: Mutex<Option<ConnectFailure>>,
    events: EventSink,
    /// Runs watch callbacks (not wakers), started with the first one.
    watch_events: LazyThread<(Vec<WatchFn>, WatchedEvent)>,
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
        let inner = Arc::new(Inner {
            io: Mutex::new(Io {
                live: None,
                logging_in: None,
                conn_id: 0,
                pending: VecDeque::new(),
                next_xid: 1,
            }),
            out: Mutex::new(Out {
                stream: None,
                conn_id: 0,
                last_send: Instant::now(),
            }),
            connected: Condvar::new(),
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
            ended_by: Mutex::new(None),
            auth_failure: Mutex::new(String::new()),
            events,
            watch_events: LazyThread::new("latchkey-watch", run_watchers),
        });
        let reader = Arc::clone(&inner);
        thread::Builder::new()
            .name("latchkey-io".into())
            .spawn(move || reader.run())
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
        let slot = self.send(opcode, build, watch)?;
        slot.wait_until(deadline)
            .unwrap_or_else(|| Err(Error::from_code(ErrorCode::OperationTimeout)))
    }

    /// Sends two requests in one write and waits for both replies until
    /// `deadline`. ZooKeeper handles a session's requests in order, so the
    /// second sees what the first did: one round trip instead of two.
    pub(crate) fn call_pair(
        &self,
        first: Request<'_>,
        second: Request<'_>,
        deadline: Instant,
    ) -> (Result<Reply, Error>, Result<Reply, Error>) {
        let slots = match self.send_all(&[first, second], None) {
            Ok(slots) => slots,
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
        let wait = |slot: &Arc<ReplySlot>| {
            slot.wait_until(deadline)
                .unwrap_or_else(|| Err(Error::from_code(ErrorCode::OperationTimeout)))
        };
        // Replies come in order, usually in one read: waiting for the second
        // first wakes this thread once instead of twice.
        let second = wait(&slots[1]);
        (wait(&slots[0]), second)
    }

    fn send(
        &self,
        opcode: i32,
        build: impl Fn(&mut Writer),
        watch: Option<WatchRegistration>,
    ) -> Result<Arc<ReplySlot>, Error> {
        let mut slots = self.send_all(&[(opcode, &build)], watch)?;
        Ok(slots.remove(0))
    }

    /// Writes the requests in one write; `watch` goes with the last one.
    fn send_all(
        &self,
        requests: &[Request<'_>],
        mut watch: Option<WatchRegistration>,
    ) -> Result<Vec<Arc<ReplySlot>>, Error> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            // This session is over; the client retries on its successor,
            // unless it ended for a reason retrying cannot fix.
            return Err(self.end_error());
        }
        let mut out = inner.out.lock();
        let mut frames = Vec::new();
        let mut slots = Vec::with_capacity(requests.len());
        {
            // Queued before the write, so the reply always finds its request.
            let mut io = inner.io.lock();
            if io.live.is_none() || io.conn_id != out.conn_id {
                return Err(Error::from_code(ErrorCode::ConnectionLoss));
            }
            let last = requests.len().saturating_sub(1);
            for (i, (opcode, build)) in requests.iter().enumerate() {
                let xid = io.take_xid();
                let mut w = proto::request(xid, *opcode);
                build(&mut w);
                let frame = w.finish_frame();
                if frame.len() - 4 > inner.cfg.max_request {
                    // Nothing of this batch is queued yet: drop it whole.
                    let keep = io.pending.len() - slots.len();
                    io.pending.truncate(keep);
                    return Err(too_large(&frame, inner.cfg.max_request));
                }
                frames.extend_from_slice(&frame);
                let slot = Arc::new(ReplySlot::default());
                io.pending.push_back(Pending {
                    xid,
                    reply: Some(Arc::clone(&slot)),
                    watch: if i == last { watch.take() } else { None },
                });
                slots.push(slot);
            }
        }
        let Some(stream) = out.stream.as_mut() else {
            return Err(Error::from_code(ErrorCode::ConnectionLoss));
        };
        if let Err(e) = stream.write_all(&frames) {
            log::debug!("write failed, dropping connection: {e}");
            let _ = stream.shutdown();
            return Err(Error::from_code(ErrorCode::ConnectionLoss));
        }
        out.last_send = Instant::now();
        metrics::add(&inner.cfg.counters.requests_sent, slots.len() as u64);
        Ok(slots)
    }

    /// Why requests on this session fail now that it is over: `AuthFailed`
    /// after a rejected auth, otherwise `ConnectionLoss` (the client's
    /// cue to retry on the next session).
    pub(crate) fn end_error(&self) -> Error {
        match *self.inner.ended_by.lock() {
            Some(ErrorCode::AuthFailed) => Error::AuthFailed {
                reason: self.inner.auth_failure.lock().clone(),
            },
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
            let _io = inner.io.lock();
            inner.connected.notify_all();
        };
        let closed = &self.inner.closed;
        let mut io = self.inner.io.lock();
        let done = |io: &mut Io| io.live.is_some() || closed.load(Ordering::Acquire);
        cancel::wait_until(&self.inner.connected, &mut io, deadline, done, notify).unwrap_or(false)
    }

    /// The server's id for this session, 0 before the first handshake.
    pub(crate) fn session_id(&self) -> i64 {
        self.inner.creds.lock().session_id
    }

    /// The id and password a second connection needs to take over this session.
    /// Expires this session on the server the way a real expiry looks to
    /// the client: another connection closes it while this one may not
    /// reconnect; the next reconnect then hears that the session expired.
    pub(crate) fn expire_for_testing(&self, timeout: Duration) -> Result<(), Error> {
        let (id, passwd) = self.credentials();
        if id == 0 {
            return Err(Error::IllegalState("not connected yet".into()));
        }
        let cfg = &self.inner.cfg;
        close_session_by_credentials(&cfg.hosts, cfg.tls.as_ref(), id, &passwd, timeout)
    }

    /// How many watch callbacks wait for an event.
    pub(crate) fn pending_watches(&self) -> usize {
        self.inner.watches.lock().len()
    }

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
        if let Ok(slot) = self.send(op::CLOSE_SESSION, |_| {}, None) {
            let _ = slot.wait_until(Instant::now() + timeout);
        }
        // Closed on purpose: its watches go quietly, as in the Java client.
        self.inner.shut_down();
    }

    /// Sends an auth packet on the live connection (no reply to wait for:
    /// the server applies it on arrival, before any later request, and
    /// ends the session if it rejects it).
    pub(crate) fn send_auth(&self, scheme: &str, auth: &[u8]) -> Result<(), Error> {
        let mut out = self.inner.out.lock();
        let Some(stream) = out.stream.as_mut() else {
            return Err(Error::from_code(ErrorCode::ConnectionLoss));
        };
        let mut w = proto::request(xid::AUTH, op::AUTH);
        w.i32(0).string(scheme).bytes(auth);
        if let Err(e) = stream.write_all(&w.finish_frame()) {
            log::debug!("auth write failed, dropping connection: {e}");
            let _ = stream.shutdown();
            return Err(Error::from_code(ErrorCode::ConnectionLoss));
        }
        out.last_send = Instant::now();
        Ok(())
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

/// Asks the server to close a session by its credentials, from a second
/// connection: the server-side expiry that tests need. The session's own
/// client may take the session back meanwhile (its reconnect displaces this
/// connection), so a close counts only once the server confirms it: by the
/// close reply, or by answering a handshake for the session as expired.
pub(crate) fn close_session_by_credentials(
    hosts: &[String],
    tls: Option<&TlsSettings>,
    session_id: i64,
    passwd: &[u8],
    timeout: Duration,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    let mut last = Error::from_code(ErrorCode::ConnectionLoss);
    while Instant::now() < deadline {
        for (host, addr) in hosts
            .iter()
            .filter_map(|h| resolve_one(h).ok().map(|a| (h, a)))
        {
            match close_once(host, addr, tls, session_id, passwd, deadline) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => last = Error::Io(e),
            }
        }
        thread::sleep(Duration::from_millis(10));
    }
    Err(last)
}

/// One try: `Ok(true)` once the server confirms the session is gone,
/// `Ok(false)` when the connection dropped before it could say.
fn close_once(
    host: &str,
    addr: SocketAddr,
    tls: Option<&TlsSettings>,
    session_id: i64,
    passwd: &[u8],
    deadline: Instant,
) -> io::Result<bool> {
    let mut s = open_stream(host, addr, tls, remaining(deadline))
        .map_err(|e| io::Error::other(e.to_string()))?;
    let req = ConnectRequest {
        last_zxid: 0,
        timeout_ms: 30_000,
        session_id,
        passwd,
        read_only: false,
    };
    s.write_all(&req.frame())?;
    let dropped = |e: &io::Error| {
        matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
        )
    };
    let resp = match read_frame(&mut s, DEFAULT_MAX_REPLY) {
        Ok(frame) => ConnectResponse::read(&frame)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?,
        Err(e) if dropped(&e) => return Ok(false),
        Err(e) => return Err(e),
    };
    if resp.timeout_ms <= 0 {
        return Ok(true); // expired: closed already
    }
    s.write_all(&proto::request(1, op::CLOSE_SESSION).finish_frame())?;
    match read_frame(&mut s, DEFAULT_MAX_REPLY) {
        Ok(_) => Ok(true),
        Err(e) if dropped(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Reads one frame of at most `max` bytes. The buffer grows as bytes
/// arrive: a length prefix alone allocates nothing.
pub(super) fn read_frame(s: &mut impl Read, max: usize) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = i32::from_be_bytes(len);
    if len < 0 || len as usize > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame length {len} outside 0..={max}"),
        ));
    }
    let mut body = Vec::new();
    s.by_ref().take(len as u64).read_to_end(&mut body)?;
    if body.len() < len as usize {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(body)
}

fn run_watchers((watchers, event): (Vec<WatchFn>, WatchedEvent)) {
    for w in watchers {
        run_watcher(w, &event);
    }
}

fn run_watcher(w: WatchFn, event: &WatchedEvent) {
    let ev = event.clone();
    // A panicking watcher must not take the session's other watchers (or
    // its I/O thread) with it.
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
    /// The server says the session is gone.
    Expired,
    /// The server rejected the client's auth: why, and whether it was the
    /// SASL login.
    AuthFailed(String, bool),
}

impl Inner {
    fn run(self: Arc<Self>) {
        let mut hosts = HostList::new(&self.cfg.hosts);
        let mut probe = RwProbe::new();
        // Jittered (the crate's default randomization is ±50%) and growing
        // while attempts keep failing.
        let mut pause = backoff::ExponentialBackoff {
            initial_interval: Duration::from_millis(20),
            max_interval: Duration::from_secs(1),
            max_elapsed_time: None,
            ..Default::default()
        };
        let pause_now = |pause: &mut backoff::ExponentialBackoff| {
            thread::sleep(pause.next_backoff().unwrap_or(Duration::from_secs(1)));
        };
        // A read-write server found while connected read-only.
        let mut prefer: Option<(String, SocketAddr)> = None;
        while !self.is_ending() {
            let (attempt, round_done) = match prefer.take() {
                Some(found) => (Ok(found), false),
                None => {
                    let (host, round_done) = hosts.next();
                    let resolved = resolve_one(host).map(|addr| (host.to_owned(), addr));
                    (resolved.map_err(HandshakeError::Failed), round_done)
                }
            };
            let connected =
                attempt.and_then(|(host, addr): (String, _)| self.handshake(&host, addr));
            let ended = match connected {
                Ok((stream, read_only)) => {
                    *self.last_connect_error.lock() = None;
                    let connected_at = Instant::now();
                    (self.events)(WireEvent::Connected { read_only });
                    let (ended, last_recv) =
                        self.read_loop(stream, read_only, &mut hosts, &mut probe);
                    if let Ended::AuthFailed(why, _) = &ended {
                        *self.auth_failure.lock() = why.clone();
                        // What waits fails with the reason, and nothing
                        // reports a mere disconnection first.
                        *self.ended_by.lock() = Some(ErrorCode::AuthFailed);
                        self.closed.store(true, Ordering::Release);
                        self.drop_connection(ErrorCode::AuthFailed);
                    }
                    self.drop_connection(ErrorCode::ConnectionLoss);
                    if !self.is_ending() {
                        (self.events)(WireEvent::Disconnected {
                            silent_for: last_recv.elapsed(),
                        });
                    }
                    // A server that accepts the handshake and then fails at
                    // once (garbage, oversize frames) gets a growing,
                    // jittered pause, not a reconnect per request.
                    if matches!(ended, Ended::Dropped) && !self.is_ending() {
                        if connected_at.elapsed() >= HEALTHY_CONNECTION {
                            pause.reset();
                        }
                        pause_now(&mut pause);
                    }
                    ended
                }
                Err(HandshakeError::Expired) => Ended::Expired,
                Err(HandshakeError::AuthFailed(why)) => Ended::AuthFailed(why, true),
                Err(HandshakeError::Failed(failure)) => {
                    log::debug!("connecting failed: {failure}");
                    *self.last_connect_error.lock() = Some(failure);
                    // Back off once per full round of failed hosts.
                    if round_done {
                        pause_now(&mut pause);
                    }
                    Ended::Dropped
                }
            };
            match ended {
                Ended::Dropped => {}
                Ended::ReadWriteFound(host, addr) => prefer = Some((host, addr)),
                Ended::Expired => {
                    log::info!("session expired");
                    self.expire(ErrorCode::SessionExpired, WireEvent::Expired);
                    return;
                }
                Ended::AuthFailed(reason, at_login) => {
                    log::error!("{reason}");
                    *self.auth_failure.lock() = reason.clone();
                    self.expire(
                        ErrorCode::AuthFailed,
                        WireEvent::AuthFailed { reason, at_login },
                    );
                    return;
                }
            }
        }
        (self.events)(WireEvent::Closed);
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
        self.drop_connection(code);
        self.connected.notify_all();
        self.fire_watches_expired();
        (self.events)(event);
    }

    /// Marks the session closed and drops its connection; false if it was
    /// closed already.
    fn shut_down(&self) -> bool {
        if self.closed.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.drop_connection(ErrorCode::ConnectionLoss);
        if let Some(s) = self.io.lock().logging_in.take() {
            let _ = s.shutdown();
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

    fn drop_connection(&self, code: ErrorCode) {
        // A rejected auth's waiters learn what was refused, as later calls do.
        let refused = (code == ErrorCode::AuthFailed).then(|| self.auth_failure.lock().clone());
        let error = || match &refused {
            Some(reason) => Error::AuthFailed {
                reason: reason.clone(),
            },
            None => Error::from_code(code),
        };
        let mut io = self.io.lock();
        if let Some(s) = io.live.take() {
            let _ = s.shutdown();
        }
        for p in io.pending.drain(..) {
            p.answer(Err(error()));
        }
    }

    /// Connects to `addr`, resumes or starts the session there, and makes
    /// the connection the live one; returns its read side and whether the
    /// server is read-only.
    fn handshake(&self, host: &str, addr: SocketAddr) -> Result<(Stream, bool), HandshakeError> {
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
            // A close from now on shuts this handle down, ending the login.
            self.io.lock().logging_in = Some(s.try_clone().map_err(failed)?);
            let login = if self.is_ending() {
                Err(LoginError::Io(io::Error::other("the client is closing")))
            } else {
                // Auth is the connection's: every connection logs in again.
                sasl::login(&mut s, creds, self.cfg.max_reply, || {
                    self.io.lock().take_xid()
                })
            };
            self.io.lock().logging_in = None;
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
        let reader = s.try_clone().map_err(failed)?;
        reader
            .set_read_timeout(Some(tick(negotiated)))
            .map_err(failed)?;
        let mut out = self.out.lock();
        self.prime(&mut s).map_err(failed)?;
        let handle = s.try_clone().map_err(failed)?;
        out.stream = Some(s);
        out.last_send = Instant::now();
        let mut io = self.io.lock();
        io.conn_id += 1;
        io.live = Some(handle);
        out.conn_id = io.conn_id;
        drop(io);
        drop(out);
        self.connected.notify_all();
        Ok((reader, resp.read_only))
    }

    /// Auth and re-armed watches go first, before any caller's request.
    fn prime(&self, s: &mut Stream) -> io::Result<()> {
        for (scheme, auth) in self.cfg.auth.lock().iter() {
            let mut w = proto::request(xid::AUTH, op::AUTH);
            w.i32(0).string(scheme).bytes(auth);
            s.write_all(&w.finish_frame())?;
        }
        let last_zxid = self.last_zxid.load(Ordering::Acquire);
        for frame in self.watches.lock().set_watches_frames(last_zxid) {
            s.write_all(&frame)?;
        }
        Ok(())
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
        let mut s = open_stream(host, addr, self.cfg.tls.as_ref(), per_host)
            .map_err(HandshakeError::Failed)?;
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
        s.write_all(&req.frame()).map_err(handshaking)?;
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

    /// Reads and dispatches replies until the connection ends. Connected to
    /// a read-only server, it also probes the other hosts for a read-write
    /// one (`hosts`), as the Java client's pingRwServer.
    fn read_loop(
        &self,
        mut s: Stream,
        read_only: bool,
        hosts: &mut HostList,
        probe: &mut RwProbe,
    ) -> (Ended, Instant) {
        let negotiated = self.creds.lock().negotiated;
        probe.connected(read_only, negotiated);
        let read_timeout = negotiated * 2 / 3;
        // Half the read timeout, and at least every 10 s as the Java client
        // (`MAX_SEND_PING_INTERVAL`), so idle connections look alive to
        // whatever sits between client and server.
        let ping_every = (read_timeout / 2).min(MAX_PING_INTERVAL);
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        let mut chunk = vec![0u8; 64 * 1024];
        let mut last_recv = Instant::now();
        let mut last_check = Instant::now();
        loop {
            if self.closed.load(Ordering::Acquire) {
                return (Ended::Dropped, last_recv);
            }
            match s.read(&mut chunk) {
                Ok(0) => return (Ended::Dropped, last_recv),
                Ok(n) => {
                    last_recv = Instant::now();
                    buf.extend_from_slice(&chunk[..n]);
                    match self.dispatch_frames(&mut buf) {
                        Ok(None) => {}
                        Ok(Some(ended)) => return (ended, last_recv),
                        Err(e) => {
                            log::warn!("protocol error, reconnecting: {e}");
                            return (Ended::Dropped, last_recv);
                        }
                    }
                }
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::debug!("read failed: {e}");
                    return (Ended::Dropped, last_recv);
                }
            }
            if last_check.elapsed() < tick(negotiated) {
                continue;
            }
            last_check = Instant::now();
            if last_recv.elapsed() >= read_timeout {
                log::info!("no reply from server for {:?}, reconnecting", read_timeout);
                return (Ended::Dropped, last_recv);
            }
            if read_only {
                if let Some((host, addr)) = probe.due(hosts, self.cfg.tls.as_ref()) {
                    log::info!("read-write server found at {host} ({addr}), moving there");
                    return (Ended::ReadWriteFound(host, addr), last_recv);
                }
            }
            // A writer holding the lock is sending already (or stuck, which
            // the silence check above catches): no ping needed then.
            if let Some(mut out) = self.out.try_lock() {
                if out.last_send.elapsed() >= ping_every {
                    let ping = proto::request(xid::PING, op::PING).finish_frame();
                    match out.stream.as_mut().map(|st| st.write_all(&ping)) {
                        Some(Ok(())) => out.last_send = Instant::now(),
                        _ => return (Ended::Dropped, last_recv),
                    }
                }
            }
        }
    }

    /// Handles every complete frame in `buf`, leaving a partial one behind.
    fn dispatch_frames(&self, buf: &mut Vec<u8>) -> Result<Option<Ended>, Error> {
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
            if let Some(ended) = self.dispatch(&buf[at + 4..end])? {
                outcome = Some(ended);
            }
            at = end;
        }
        buf.drain(..at);
        Ok(outcome)
    }

    fn dispatch(&self, frame: &[u8]) -> Result<Option<Ended>, Error> {
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
                let mut watchers = Vec::new();
                for w in fired {
                    match w.waker {
                        true => run_watcher(w.run, &event),
                        false => watchers.push(w.run),
                    }
                }
                if !watchers.is_empty() {
                    self.watch_events.send((watchers, event));
                }
            }
            xid::PING | xid::SET_WATCHES => {}
            xid::AUTH => {
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
                let Some(mut pending) = self.io.lock().pending.pop_front() else {
                    return Err(Error::Marshalling("reply with no request waiting"));
                };
                if pending.xid != header.xid {
                    return Err(Error::Marshalling("reply out of order"));
                }
                let result = if header.err == 0 {
                    Ok(r.rest().to_vec())
                } else {
                    Err(Error::from_code(ErrorCode::from_wire(header.err)))
                };
                if let Some(reg) = pending.watch.take() {
                    let kind = match result {
                        Ok(_) => Some(reg.on_ok),
                        Err(ref e) if e.code() == Some(ErrorCode::NoNode) => reg.on_no_node,
                        Err(_) => None,
                    };
                    if let Some(kind) = kind {
                        let mut watches = self.watches.lock();
                        if watches.is_ended() {
                            // The session was given up while this reply was
                            // on its way: the watch fires like the others.
                            drop(watches);
                            self.send_expired(reg.path, reg.watcher.run);
                        } else {
                            watches.add(kind, reg.path, reg.watcher);
                        }
                    }
                }
                pending.answer(result);
            }
        }
        Ok(None)
    }
}

enum HandshakeError {
    Expired,
    Failed(ConnectFailure),
    /// The SASL login failed for good: why.
    AuthFailed(String),
}

/// How often the reader wakes when the socket is idle, to ping and to judge silence.
fn tick(negotiated: Duration) -> Duration {
    (negotiated / 12).clamp(Duration::from_millis(10), Duration::from_millis(500))
}

fn millis_i32(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// A cheap random index; the std hasher is randomly keyed per process.
pub(crate) fn random_below(n: usize) -> usize {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() % (n.max(1) as u64)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Request xids count up and wrap to 1 after `i32::MAX`: never an
    /// overflow, and never 0 or a negative xid, which mean pings,
    /// notifications and the like.
    #[test]
    fn xids_count_up_and_wrap_to_1() {
        let mut io = Io {
            live: None,
            logging_in: None,
            conn_id: 0,
            pending: VecDeque::new(),
            next_xid: i32::MAX - 1,
        };
        let xids: Vec<i32> = (0..4).map(|_| io.take_xid()).collect();
        assert_eq!(xids, [i32::MAX - 1, i32::MAX, 1, 2]);
    }

    #[test]
    fn a_read_write_probe_waits_a_sixth_of_the_session_within_50_ms_and_1_s() {
        let mut probe = RwProbe::new();
        let ms = Duration::from_millis;
        for (session, want) in [
            (ms(120), ms(50)),
            (ms(3000), ms(500)),
            (ms(30_000), ms(1000)),
        ] {
            probe.connected(true, session);
            assert_eq!(probe.timeout, want, "negotiated session {session:?}");
        }
    }

    #[test]
    fn hosts_are_shuffled_not_rotated() {
        let names: Vec<String> = ["a:1", "b:1", "c:1"].map(String::from).to_vec();
        let mut orders = std::collections::HashSet::new();
        for _ in 0..300 {
            let mut hosts = HostList::new(&names);
            let order: Vec<String> = (0..3).map(|_| hosts.next().0.to_owned()).collect();
            let rounds: Vec<bool> = (0..3).map(|_| hosts.next().1).collect();
            assert_eq!(rounds, [false, false, true]);
            orders.insert(order);
        }
        // A rotation gives 3 orders; a shuffle all 3! = 6.
        assert_eq!(orders.len(), 6, "{orders:?}");
    }
}

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
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use backoff::backoff::Backoff;
use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use super::jute::{Reader, Writer};
use super::proto::{self, op, xid, ConnectRequest, ConnectResponse, ReplyHeader, WatcherEvent};
use super::watches::{WatchFn, WatchRegistration, Watches};
use crate::error::{Error, ErrorCode};
use crate::{EventType, WatchedEvent};

/// Largest frame accepted from a server (jute.maxbuffer is 1 MiB by default;
/// a children listing may be bigger, so allow headroom).
const MAX_FRAME: usize = 64 << 20;

/// What a session is given to connect with.
#[derive(Clone, Debug)]
pub(crate) struct WireConfig {
    pub hosts: Vec<String>,
    pub session_timeout: Duration,
    pub connection_timeout: Duration,
    pub can_be_read_only: bool,
    pub auth: Vec<(String, Vec<u8>)>,
}

/// Session-level happenings, sent to the framework's state thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WireEvent {
    Connected {
        read_only: bool,
    },
    /// The connection dropped; the server was last heard `silent_for` ago.
    Disconnected {
        silent_for: Duration,
    },
    Expired,
    AuthFailed,
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

    /// The reply, or `None` if none came by `deadline`.
    fn wait_until(&self, deadline: Instant) -> Option<Result<Reply, Error>> {
        let mut value = self.value.lock();
        loop {
            if let Some(result) = value.take() {
                return Some(result);
            }
            if self.ready.wait_until(&mut value, deadline).timed_out() {
                return value.take();
            }
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
    live: Option<TcpStream>,
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
    stream: Option<TcpStream>,
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
    /// Set while a test expires this session from another connection: the
    /// I/O loop must not reconnect (and so revive the session) meanwhile.
    hold_reconnect: AtomicBool,
    events: EventSink,
    watch_events: Sender<(Vec<WatchFn>, WatchedEvent)>,
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
        let (watch_tx, watch_rx) = unbounded();
        let inner = Arc::new(Inner {
            io: Mutex::new(Io {
                live: None,
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
            hold_reconnect: AtomicBool::new(false),
            events,
            watch_events: watch_tx,
        });
        thread::Builder::new()
            .name("latchkey-watch".into())
            .spawn(move || run_watchers(watch_rx))
            .map_err(Error::Io)?;
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
            Err(e) => return (Err(e), Err(Error::from_code(ErrorCode::ConnectionLoss))),
        };
        let wait = |slot: &ReplySlot| {
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
            // This session is over; the client retries on its successor.
            return Err(Error::from_code(ErrorCode::ConnectionLoss));
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
                frames.extend_from_slice(&w.finish_frame());
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
            let _ = stream.shutdown(Shutdown::Both);
            return Err(Error::from_code(ErrorCode::ConnectionLoss));
        }
        out.last_send = Instant::now();
        Ok(slots)
    }

    /// Waits until the session is connected, or the deadline passes.
    pub(crate) fn wait_connected(&self, deadline: Instant) -> bool {
        let mut io = self.inner.io.lock();
        while io.live.is_none() {
            if self.inner.closed.load(Ordering::Acquire)
                || self
                    .inner
                    .connected
                    .wait_until(&mut io, deadline)
                    .timed_out()
            {
                return io.live.is_some();
            }
        }
        true
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
        self.inner.hold_reconnect.store(true, Ordering::Release);
        let closed = close_session_by_credentials(&self.inner.cfg.hosts, id, &passwd, timeout);
        self.inner.hold_reconnect.store(false, Ordering::Release);
        closed
    }

    pub(crate) fn credentials(&self) -> (i64, Vec<u8>) {
        let c = self.inner.creds.lock();
        (c.session_id, c.passwd.clone())
    }

    /// The session timeout the server granted.
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

    /// Gives the session up without telling the server (the client declared
    /// it lost): pending watchers fire once with `SessionExpired`, as on a
    /// real expiry, so nobody waits on a watch that can no longer fire.
    pub(crate) fn abandon(&self) {
        if self.inner.shut_down() {
            self.inner.fire_watches_expired();
        }
    }
}

/// Asks the server to close a session by its credentials, from a second
/// connection: the server-side expiry that tests need.
pub(crate) fn close_session_by_credentials(
    hosts: &[String],
    session_id: i64,
    passwd: &[u8],
    timeout: Duration,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    let mut last = Error::from_code(ErrorCode::ConnectionLoss);
    for addr in resolve(hosts) {
        let attempt = (|| -> io::Result<()> {
            let mut s = TcpStream::connect_timeout(&addr, remaining(deadline))?;
            s.set_read_timeout(Some(remaining(deadline)))?;
            let req = ConnectRequest {
                last_zxid: 0,
                timeout_ms: 30_000,
                session_id,
                passwd,
                read_only: false,
            };
            s.write_all(&req.frame())?;
            read_frame(&mut s)?;
            s.write_all(&proto::request(1, op::CLOSE_SESSION).finish_frame())?;
            match read_frame(&mut s) {
                // The server may drop every connection of the closed session
                // before our reply is flushed; the close is done either way.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
                    ) =>
                {
                    Ok(())
                }
                other => other.map(drop),
            }
        })();
        match attempt {
            Ok(()) => return Ok(()),
            Err(e) => last = Error::Io(e),
        }
    }
    Err(last)
}

fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

fn resolve(hosts: &[String]) -> Vec<SocketAddr> {
    hosts
        .iter()
        .filter_map(|h| h.to_socket_addrs().ok())
        .flatten()
        .collect()
}

fn read_frame(s: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = i32::from_be_bytes(len);
    if len < 0 || len as usize > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad frame length",
        ));
    }
    let mut body = vec![0; len as usize];
    s.read_exact(&mut body)?;
    Ok(body)
}

fn run_watchers(rx: Receiver<(Vec<WatchFn>, WatchedEvent)>) {
    for (watchers, event) in rx {
        for w in watchers {
            run_watcher(w, &event);
        }
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
    /// The server says the session is gone.
    Expired,
    AuthFailed,
}

impl Inner {
    fn run(self: Arc<Self>) {
        let mut hosts = resolve(&self.cfg.hosts);
        // Spread clients over an ensemble as the Java client does by shuffling.
        let start = random_below(hosts.len().max(1));
        hosts.rotate_left(start);
        let mut pause = backoff::ExponentialBackoff {
            initial_interval: Duration::from_millis(20),
            max_interval: Duration::from_secs(1),
            max_elapsed_time: None,
            ..Default::default()
        };
        let mut next = 0usize;
        while !self.is_ending() {
            if self.hold_reconnect.load(Ordering::Acquire) {
                thread::sleep(Duration::from_millis(5));
                continue;
            }
            if hosts.is_empty() {
                hosts = resolve(&self.cfg.hosts);
            }
            let Some(addr) = hosts.get(next % hosts.len().max(1)).copied() else {
                thread::sleep(pause.next_backoff().unwrap_or(Duration::from_secs(1)));
                continue;
            };
            next = next.wrapping_add(1);
            let ended = match self.handshake(addr) {
                Ok((stream, read_only)) => {
                    pause.reset();
                    (self.events)(WireEvent::Connected { read_only });
                    let (ended, last_recv) = self.read_loop(stream);
                    self.drop_connection(ErrorCode::ConnectionLoss);
                    if !self.is_ending() {
                        (self.events)(WireEvent::Disconnected {
                            silent_for: last_recv.elapsed(),
                        });
                    }
                    ended
                }
                Err(HandshakeError::Expired) => Ended::Expired,
                Err(HandshakeError::Io(e)) => {
                    log::debug!("connect to {addr} failed: {e}");
                    // Back off once per full round of failed hosts.
                    let round_done = next.is_multiple_of(hosts.len().max(1));
                    if round_done {
                        thread::sleep(pause.next_backoff().unwrap_or(Duration::from_secs(1)));
                    }
                    Ended::Dropped
                }
            };
            match ended {
                Ended::Dropped => {}
                Ended::Expired => {
                    log::info!("session expired");
                    self.expire(ErrorCode::SessionExpired, WireEvent::Expired);
                    return;
                }
                Ended::AuthFailed => {
                    self.expire(ErrorCode::AuthFailed, WireEvent::AuthFailed);
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
        self.connected.notify_all();
        true
    }

    /// Removes every watch and fires each once with `SessionExpired`.
    fn fire_watches_expired(&self) {
        for (path, w) in self.watches.lock().drain() {
            let ev = WatchedEvent {
                event_type: EventType::SessionExpired,
                path,
            };
            let _ = self.watch_events.send((vec![w.run], ev));
        }
    }

    fn drop_connection(&self, code: ErrorCode) {
        let mut io = self.io.lock();
        if let Some(s) = io.live.take() {
            let _ = s.shutdown(Shutdown::Both);
        }
        for p in io.pending.drain(..) {
            p.answer(Err(Error::from_code(code)));
        }
    }

    fn handshake(&self, addr: SocketAddr) -> Result<(TcpStream, bool), HandshakeError> {
        let per_host = self.cfg.connection_timeout / (self.cfg.hosts.len().max(1) as u32);
        let per_host = per_host.max(Duration::from_millis(200));
        let mut s = TcpStream::connect_timeout(&addr, per_host)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(per_host))?;
        s.set_write_timeout(Some(self.cfg.connection_timeout))?;
        let (session_id, passwd) = {
            let c = self.creds.lock();
            (c.session_id, c.passwd.clone())
        };
        let req = ConnectRequest {
            last_zxid: self.last_zxid.load(Ordering::Acquire),
            timeout_ms: millis_i32(self.cfg.session_timeout),
            session_id,
            passwd: &passwd,
            read_only: self.cfg.can_be_read_only,
        };
        s.write_all(&req.frame())?;
        let resp = ConnectResponse::read(&read_frame(&mut s)?)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        if resp.timeout_ms <= 0 {
            return Err(HandshakeError::Expired);
        }
        let negotiated = Duration::from_millis(resp.timeout_ms as u64);
        {
            let mut c = self.creds.lock();
            c.session_id = resp.session_id;
            c.passwd = resp.passwd;
            c.negotiated = negotiated;
        }
        let reader = s.try_clone()?;
        reader.set_read_timeout(Some(tick(negotiated)))?;
        let mut out = self.out.lock();
        // Auth and re-armed watches go first, before any caller's request.
        for (scheme, auth) in &self.cfg.auth {
            let mut w = proto::request(xid::AUTH, op::AUTH);
            w.i32(0).string(scheme).bytes(auth);
            s.write_all(&w.finish_frame())?;
        }
        let watches = self.watches.lock();
        if !watches.is_empty() {
            let last_zxid = self.last_zxid.load(Ordering::Acquire);
            for [data, exist, child] in set_watches_batches(watches.paths()) {
                let mut w = proto::request(xid::SET_WATCHES, op::SET_WATCHES);
                w.i64(last_zxid)
                    .strings(&data)
                    .strings(&exist)
                    .strings(&child);
                s.write_all(&w.finish_frame())?;
            }
        }
        drop(watches);
        let handle = s.try_clone()?;
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

    fn read_loop(&self, mut s: TcpStream) -> (Ended, Instant) {
        let negotiated = self.creds.lock().negotiated;
        let read_timeout = negotiated * 2 / 3;
        let ping_every = read_timeout / 2;
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
            if len < 0 || len as usize > MAX_FRAME {
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
                    let _ = self.watch_events.send((watchers, event));
                }
            }
            xid::PING | xid::SET_WATCHES => {}
            xid::AUTH => {
                if header.err != 0 {
                    log::warn!("authentication failed ({})", header.err);
                    return Ok(Some(Ended::AuthFailed));
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
                        self.watches.lock().add(kind, reg.path, reg.watcher);
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
    Io(io::Error),
}

impl From<io::Error> for HandshakeError {
    fn from(e: io::Error) -> Self {
        HandshakeError::Io(e)
    }
}

/// Paths per SetWatches frame: a batch closes once its paths add up to
/// this many bytes, as in the Java client (`SET_WATCHES_MAX_LENGTH`), so a
/// frame stays far below the server's jute.maxbuffer (1 MiB).
const SET_WATCHES_BATCH: usize = 128 * 1024;

/// Splits the watched paths (data, exist, child) into SetWatches batches,
/// the Java client's way: paths are taken in that order and a batch closes
/// once its paths reach [`SET_WATCHES_BATCH`] bytes (so the last path may
/// overshoot it a little).
fn set_watches_batches(
    (data, exist, child): (Vec<String>, Vec<String>, Vec<String>),
) -> Vec<[Vec<String>; 3]> {
    let mut batches = Vec::new();
    let mut batch: [Vec<String>; 3] = Default::default();
    let mut length = 0;
    for (table, paths) in [data, exist, child].into_iter().enumerate() {
        for path in paths {
            length += path.len();
            batch[table].push(path);
            if length >= SET_WATCHES_BATCH {
                batches.push(std::mem::take(&mut batch));
                length = 0;
            }
        }
    }
    if batch.iter().any(|b| !b.is_empty()) {
        batches.push(batch);
    }
    batches
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

    #[test]
    fn set_watches_batches_stay_near_128_kb() {
        let paths = |n: usize, tag: &str| -> Vec<String> {
            (0..n).map(|i| format!("/{tag}/{i:0100}")).collect()
        };
        let batches = set_watches_batches((paths(3000, "d"), paths(3000, "e"), paths(10, "c")));
        let total: usize = batches.iter().flatten().map(Vec::len).sum();
        assert_eq!(total, 6010);
        for b in &batches {
            let bytes: usize = b.iter().flatten().map(String::len).sum();
            assert!(bytes < SET_WATCHES_BATCH + 200, "{bytes}");
        }
        assert!(batches.len() >= 5, "{}", batches.len());
        assert!(set_watches_batches(Default::default()).is_empty());
    }
}

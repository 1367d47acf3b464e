//! [`FaultProxy`]: a TCP proxy between clients and ZooKeeper that can
//! partition, cut, slow down and refuse connections.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Socket read and write timeout: how often forwarding threads look at the
/// flags.
const IO_TICK: Duration = Duration::from_millis(50);
/// How often paused threads look at the flags.
const PAUSE_TICK: Duration = Duration::from_millis(10);
/// How often the acceptor polls for connections.
const ACCEPT_TICK: Duration = Duration::from_millis(5);
/// Timeout for connecting to the target.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A write that makes no progress this long closes the connection.
const STALL_LIMIT: Duration = Duration::from_secs(60);

/// A TCP proxy on `127.0.0.1:<free port>` forwarding every connection to one
/// target (usually a [`TestingServer`](crate::TestingServer)), with faults
/// switched on and off from the test.
///
/// Each accepted connection gets its own connection to the target and two
/// forwarding threads (plain `std::net` and threads, no async).
///
/// Faults:
/// - [`pause`](Self::pause): a network partition. Nothing is forwarded in
///   either direction, but connections stay open and new ones are still
///   accepted (their connection to the target waits for the resume). While
///   paused the forwarding threads do not read their sockets at all, so the
///   bytes sent meanwhile wait in kernel buffers and **are delivered on
///   [`resume`](Self::resume)** (unless the connection was closed or cut in
///   between). A real partition would lose them; ZooKeeper's clients and
///   servers see the same silence either way.
/// - [`pause_replies`](Self::pause_replies) / [`pause_requests`](Self::pause_requests):
///   the same, one direction only (requests reach the server but replies do
///   not come back, or the reverse).
/// - [`cut`](Self::cut): closes every current connection on both sides at
///   once; the client reads EOF (or a reset). New connections work as usual.
/// - [`pause_requests_at`](Self::pause_requests_at): the same as
///   `pause_requests`, from the first request that carries given bytes on
///   (that request waits too): silence at one exact step of a recipe.
/// - [`set_delay`](Self::set_delay): every forwarded chunk waits this long
///   first (chunks of one direction are delayed one after another).
/// - [`set_refuse`](Self::set_refuse): new connections are accepted and
///   closed at once; existing ones keep working (add [`cut`](Self::cut) to
///   look like a dead server).
/// - [`set_starting`](Self::set_starting): a server still starting. New
///   connections are accepted and never answered (nothing is read or
///   forwarded, then or later); existing ones keep working.
///
/// Dropping the proxy closes everything and joins its threads.
///
/// ```no_run
/// # let server = latchkey_test::TestingServer::start()?;
/// let proxy = latchkey_test::FaultProxy::start(server.addr())?;
/// // connect a client to proxy.connect_string(), then:
/// proxy.pause();
/// proxy.resume();
/// proxy.cut();
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct FaultProxy {
    shared: Arc<Shared>,
    addr: SocketAddr,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("target", &self.shared.target)
            .finish_non_exhaustive()
    }
}

struct Shared {
    target: SocketAddr,
    shutdown: AtomicBool,
    /// Client → target is blackholed.
    pause_requests: AtomicBool,
    /// Target → client is blackholed.
    pause_replies: AtomicBool,
    /// Bytes whose next appearance client → target sets `pause_requests`.
    pause_requests_at: Mutex<Option<Vec<u8>>>,
    refuse: AtomicBool,
    /// New connections are held open and never answered.
    starting: AtomicBool,
    delay_us: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    next_id: AtomicU64,
    /// Connections accepted since the start, refused ones included.
    accepted: AtomicU64,
}

/// One proxied connection.
struct Conn {
    id: u64,
    client: TcpStream,
    upstream: Mutex<Option<TcpStream>>,
    closed: AtomicBool,
    pumps_done: AtomicU8,
}

impl Conn {
    /// Closes both sides; forwarding threads see it within one tick.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        if let Some(up) = self.upstream.lock().as_ref() {
            let _ = up.shutdown(Shutdown::Both);
        }
    }
}

impl Shared {
    fn spawn(self: &Arc<Self>, name: String, f: impl FnOnce() + Send + 'static) {
        match thread::Builder::new().name(name).spawn(f) {
            Ok(h) => self.threads.lock().push(h),
            Err(e) => log::warn!("fault proxy could not spawn a thread: {e}"),
        }
    }

    fn stopped(&self, conn: &Conn) -> bool {
        self.shutdown.load(Ordering::SeqCst) || conn.closed.load(Ordering::SeqCst)
    }

    fn delay(&self) -> Duration {
        Duration::from_micros(self.delay_us.load(Ordering::SeqCst))
    }

    /// Sets `pause_requests` if `chunk`, read from a client, carries the
    /// bytes of [`FaultProxy::pause_requests_at`].
    fn pause_requests_if_carrying(&self, chunk: &[u8]) {
        let mut at = self.pause_requests_at.lock();
        let found = at
            .as_deref()
            .is_some_and(|b| !b.is_empty() && chunk.windows(b.len()).any(|w| w == b));
        if found {
            *at = None;
            self.pause_requests.store(true, Ordering::SeqCst);
        }
    }

    fn forget(&self, conn: &Conn) {
        conn.close();
        self.conns.lock().remove(&conn.id);
    }
}

impl FaultProxy {
    /// Starts a proxy on a free 127.0.0.1 port forwarding to `target`.
    pub fn start(target: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target,
            shutdown: AtomicBool::new(false),
            pause_requests: AtomicBool::new(false),
            pause_replies: AtomicBool::new(false),
            pause_requests_at: Mutex::new(None),
            refuse: AtomicBool::new(false),
            starting: AtomicBool::new(false),
            delay_us: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            threads: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
        });
        let acceptor = {
            let shared = shared.clone();
            thread::Builder::new()
                .name(format!("latchkey-proxy-{}", addr.port()))
                .spawn(move || accept_loop(shared, listener))?
        };
        log::debug!("fault proxy {addr} -> {target}");
        Ok(FaultProxy {
            shared,
            addr,
            acceptor: Some(acceptor),
        })
    }

    /// The proxy's own address (`127.0.0.1:PORT`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `"127.0.0.1:PORT"` of the proxy, for a client's connect string.
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// Where connections are forwarded.
    pub fn target(&self) -> SocketAddr {
        self.shared.target
    }

    /// Blackholes both directions (a partition): connections stay open,
    /// nothing is forwarded until [`resume`](Self::resume), and the bytes
    /// sent meanwhile are delivered on resume. New connections are accepted
    /// but reach the target only after the resume.
    pub fn pause(&self) {
        self.shared.pause_requests.store(true, Ordering::SeqCst);
        self.shared.pause_replies.store(true, Ordering::SeqCst);
    }

    /// Blackholes target → client only: requests reach the server, replies
    /// and events wait until [`resume`](Self::resume).
    pub fn pause_replies(&self) {
        self.shared.pause_replies.store(true, Ordering::SeqCst);
    }

    /// Blackholes client → target only: requests (and new connections) wait
    /// until [`resume`](Self::resume); what the server already sends still
    /// arrives.
    pub fn pause_requests(&self) {
        self.shared.pause_requests.store(true, Ordering::SeqCst);
    }

    /// Blackholes client → target, as [`pause_requests`](Self::pause_requests)
    /// does, as soon as a request carrying `bytes` comes (that request and
    /// all after it wait for [`resume`](Self::resume)). One shot; a second
    /// call replaces the bytes. Matched within one read from the socket, which
    /// holds a whole request unless it is large or requests are pipelined
    /// past the buffer. For example the bytes of a path with its length in
    /// front (`[0, 0, 0, 7]` then `/a/path`) match the requests on that node
    /// and not on its children.
    pub fn pause_requests_at(&self, bytes: &[u8]) {
        *self.shared.pause_requests_at.lock() = Some(bytes.to_vec());
    }

    /// Whether client → target is blackholed now (by
    /// [`pause_requests`](Self::pause_requests), [`pause`](Self::pause) or a
    /// [`pause_requests_at`](Self::pause_requests_at) that was reached).
    pub fn requests_paused(&self) -> bool {
        self.shared.pause_requests.load(Ordering::SeqCst)
    }

    /// Forwards client → target again, delivering the requests that waited
    /// (and forgets a [`pause_requests_at`](Self::pause_requests_at) not
    /// reached yet); replies stay as they are. With
    /// [`pause_replies`](Self::pause_replies) first, a request held by
    /// `pause_requests_at` then reaches the server and its reply does not.
    pub fn resume_requests(&self) {
        *self.shared.pause_requests_at.lock() = None;
        self.shared.pause_requests.store(false, Ordering::SeqCst);
    }

    /// Forwards both directions again, delivering what waited (and forgets
    /// a [`pause_requests_at`](Self::pause_requests_at) not reached yet).
    pub fn resume(&self) {
        *self.shared.pause_requests_at.lock() = None;
        self.shared.pause_requests.store(false, Ordering::SeqCst);
        self.shared.pause_replies.store(false, Ordering::SeqCst);
    }

    /// Closes every current connection, both the client's and the target's
    /// side, and returns how many there were. New connections are accepted
    /// as usual afterwards.
    pub fn cut(&self) -> usize {
        let conns: Vec<Arc<Conn>> = self.shared.conns.lock().drain().map(|(_, c)| c).collect();
        for c in &conns {
            c.close();
        }
        conns.len()
    }

    /// Delays every forwarded chunk by `delay` (zero turns it off).
    pub fn set_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_us.store(us, Ordering::SeqCst);
    }

    /// While `true`, new connections are accepted and closed at once.
    pub fn set_refuse(&self, refuse: bool) {
        self.shared.refuse.store(refuse, Ordering::SeqCst);
    }

    /// While `true`, the proxy plays a server that is still starting: new
    /// connections are accepted (the kernel takes them) and then never
    /// answered, not even after the phase ends: nothing is read from them or
    /// forwarded, and they stay open until the client closes them, a
    /// [`cut`](Self::cut) or the proxy's drop. Connections accepted after
    /// `set_starting(false)` are forwarded as usual; existing ones keep
    /// working throughout (add [`cut`](Self::cut) first for a restart).
    pub fn set_starting(&self, starting: bool) {
        self.shared.starting.store(starting, Ordering::SeqCst);
    }

    /// Connections currently open through the proxy (including ones waiting
    /// for a pause to end before reaching the target, and ones held by
    /// [`set_starting`](Self::set_starting)).
    pub fn connection_count(&self) -> usize {
        self.shared.conns.lock().len()
    }

    /// Connections accepted since the proxy started, open or not (refused
    /// ones included): how often clients came.
    pub fn accepted_count(&self) -> usize {
        usize::try_from(self.shared.accepted.load(Ordering::SeqCst)).unwrap_or(usize::MAX)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
        self.cut();
        // Threads see the flag within a tick; a connection thread may still
        // add its partner's handle while we join, hence the rounds.
        for _ in 0..100 {
            let handles: Vec<JoinHandle<()>> = std::mem::take(&mut *self.shared.threads.lock());
            if handles.is_empty() {
                break;
            }
            for h in handles {
                let _ = h.join();
            }
        }
    }
}

fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let mut last_prune = Instant::now();
    // Runs until the proxy is dropped.
    while !shared.shutdown.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                on_accept(&shared, client)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(ACCEPT_TICK),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                log::warn!("fault proxy accept failed: {e}");
                thread::sleep(IO_TICK);
            }
        }
        if last_prune.elapsed() >= Duration::from_secs(1) {
            shared.threads.lock().retain(|h| !h.is_finished());
            last_prune = Instant::now();
        }
    }
}

fn on_accept(shared: &Arc<Shared>, client: TcpStream) {
    if shared.refuse.load(Ordering::SeqCst) {
        let _ = client.shutdown(Shutdown::Both);
        return;
    }
    let _ = client.set_nonblocking(false);
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    let conn = Arc::new(Conn {
        id,
        client,
        upstream: Mutex::new(None),
        closed: AtomicBool::new(false),
        pumps_done: AtomicU8::new(0),
    });
    shared.conns.lock().insert(id, conn.clone());
    if shared.starting.load(Ordering::SeqCst) {
        // Held, unanswered, until closed by a cut or the drop.
        return;
    }
    let s = shared.clone();
    shared.spawn(format!("latchkey-proxy-conn-{id}"), move || {
        run_conn(s, conn)
    });
}

fn run_conn(shared: Arc<Shared>, conn: Arc<Conn>) {
    // In a partition the target cannot be reached either.
    while shared.pause_requests.load(Ordering::SeqCst) {
        if shared.stopped(&conn) {
            shared.forget(&conn);
            return;
        }
        thread::sleep(PAUSE_TICK);
    }
    let upstream = match TcpStream::connect_timeout(&shared.target, CONNECT_TIMEOUT) {
        Ok(s) => s,
        Err(e) => {
            log::debug!("fault proxy: cannot reach {}: {e}", shared.target);
            shared.forget(&conn);
            return;
        }
    };
    let setup = || -> io::Result<(TcpStream, TcpStream, TcpStream, TcpStream)> {
        for s in [&conn.client, &upstream] {
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(IO_TICK))?;
            s.set_write_timeout(Some(IO_TICK))?;
        }
        Ok((
            conn.client.try_clone()?,
            upstream.try_clone()?,
            upstream.try_clone()?,
            conn.client.try_clone()?,
        ))
    };
    let (client_in, up_out, up_in, client_out) = match setup() {
        Ok(s) => s,
        Err(e) => {
            log::debug!("fault proxy: socket setup failed: {e}");
            let _ = upstream.shutdown(Shutdown::Both);
            shared.forget(&conn);
            return;
        }
    };
    *conn.upstream.lock() = Some(upstream);
    // A cut between the connect and now did not see the upstream socket.
    if shared.stopped(&conn) {
        shared.forget(&conn);
        return;
    }
    {
        let (shared, conn) = (shared.clone(), conn.clone());
        let name = format!("latchkey-proxy-conn-{}-replies", conn.id);
        let s2 = shared.clone();
        s2.spawn(name, move || {
            let eof = pump(&shared, &conn, up_in, client_out, &shared.pause_replies);
            finish(&shared, &conn, eof);
        });
    }
    let eof = pump(&shared, &conn, client_in, up_out, &shared.pause_requests);
    finish(&shared, &conn, eof);
}

/// After one direction ends: a clean EOF is passed on as a half-close; the
/// connection goes when both directions ended or either failed.
fn finish(shared: &Shared, conn: &Conn, clean_eof: bool) {
    let done = conn.pumps_done.fetch_add(1, Ordering::SeqCst) + 1;
    if !clean_eof || done >= 2 {
        shared.forget(conn);
    }
}

/// Forwards `src` to `dst` until EOF (returns `true`, after half-closing
/// `dst`), an error, a cut or the proxy's drop (`false`).
fn pump(
    shared: &Shared,
    conn: &Conn,
    mut src: TcpStream,
    mut dst: TcpStream,
    paused: &AtomicBool,
) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    // Runs for the connection's life; each pass is bounded by IO_TICK.
    loop {
        if shared.stopped(conn) {
            return false;
        }
        if paused.load(Ordering::SeqCst) {
            thread::sleep(PAUSE_TICK);
            continue;
        }
        let n = match src.read(&mut buf) {
            Ok(0) => {
                let _ = dst.shutdown(Shutdown::Write);
                return true;
            }
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(_) => return false,
        };
        if std::ptr::eq(paused, &shared.pause_requests) {
            shared.pause_requests_if_carrying(&buf[..n]);
        }
        // Bytes read just as a pause began wait for the resume.
        while paused.load(Ordering::SeqCst) {
            if shared.stopped(conn) {
                return false;
            }
            thread::sleep(PAUSE_TICK);
        }
        let delay = shared.delay();
        if !delay.is_zero() && !sleep_unless_stopped(shared, conn, delay) {
            return false;
        }
        if !write_all(shared, conn, &mut dst, &buf[..n]) {
            return false;
        }
    }
}

fn sleep_unless_stopped(shared: &Shared, conn: &Conn, d: Duration) -> bool {
    let until = Instant::now() + d;
    loop {
        if shared.stopped(conn) {
            return false;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        thread::sleep(left.min(PAUSE_TICK));
    }
}

fn write_all(shared: &Shared, conn: &Conn, dst: &mut TcpStream, mut data: &[u8]) -> bool {
    let mut progress = Instant::now();
    while !data.is_empty() {
        if shared.stopped(conn) || progress.elapsed() > STALL_LIMIT {
            return false;
        }
        match dst.write(data) {
            Ok(0) => return false,
            Ok(k) => {
                data = &data[k..];
                progress = Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return false,
        }
    }
    true
}

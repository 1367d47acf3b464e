//! Reaching a server: the host list, name resolution, the blocking
//! connect (and TLS handshake), the read-write probe, and the short
//! exchanges that need a connection of their own. All of it runs off the
//! engine's loop: on the session's thread while it is not connected, or on
//! a helper thread.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::proto::{self, op, ConnectRequest, ConnectResponse};
use super::session::DEFAULT_MAX_REPLY;
use super::transport::{self, Stream, TlsFailure, TlsSettings};
use crate::deadline::instant_after;
use crate::error::{Error, ErrorCode};

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
    pub(crate) fn connecting(addr: SocketAddr, e: &io::Error) -> Self {
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
    pub(crate) fn tls(host: &str, addr: SocketAddr, e: TlsFailure) -> Self {
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
    pub(crate) fn handshaking(host: &str, addr: SocketAddr, e: &io::Error) -> Self {
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
pub(crate) struct HostList {
    names: Vec<String>,
    next: usize,
}

impl HostList {
    pub(crate) fn new(names: &[String]) -> Self {
        let mut names = names.to_vec();
        shuffle(&mut names);
        HostList { names, next: 0 }
    }

    /// The next host to try, and whether it ends a round through the list.
    pub(crate) fn next(&mut self) -> (String, bool) {
        let i = self.next % self.names.len().max(1);
        self.next = self.next.wrapping_add(1);
        let last = i + 1 == self.names.len();
        (self.names.get(i).cloned().unwrap_or_default(), last)
    }
}

/// The host list a session's connections and its read-write search share,
/// as the Java client's one host provider: a probed host is not the next
/// one connected to.
pub(crate) type SharedHosts = Arc<Mutex<HostList>>;

/// Resolves `host` (`name:port`) now, to one of its addresses at random;
/// failures are logged, not dropped.
pub(crate) fn resolve_one(host: &str) -> Result<SocketAddr, ConnectFailure> {
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

/// How long a connect attempt waits for the server: for the TCP connect,
/// the TLS handshake and the session handshake's reply, each. A server
/// still starting takes connections before it answers them, and waiting
/// out the whole connection timeout on one keeps a client away that long
/// after the server serves. So the first attempt waits 250 ms, and each
/// attempt that runs out of its wait makes the next one wait half as long
/// again (250, 375, 562 ms, ...), never longer than the connection
/// timeout's share of one host: a slow but healthy server is reached after
/// a few attempts, not dropped in a loop. A handshake reply starts it over;
/// a refused or reset connection leaves it as it is; a connection that
/// ended silent makes every attempt wait the whole share (see
/// [`HandshakeWait::patient`]).
pub(crate) struct HandshakeWait {
    next: Duration,
}

impl HandshakeWait {
    pub(crate) const FIRST: Duration = Duration::from_millis(250);

    pub(crate) fn new() -> Self {
        HandshakeWait { next: Self::FIRST }
    }

    /// The next attempt's wait, at most `limit`.
    pub(crate) fn get(&self, limit: Duration) -> Duration {
        self.next.min(limit)
    }

    /// An attempt ran out of its wait: the next waits half as long again,
    /// up to `limit`.
    pub(crate) fn ran_out(&mut self, limit: Duration) {
        self.next = self.next.saturating_add(self.next / 2).min(limit);
    }

    /// The connection went silent (not closed): each attempt waits its
    /// whole limit, until a server answers.
    pub(crate) fn patient(&mut self) {
        self.next = Duration::MAX;
    }

    /// The server answered: the next outage starts at the first wait.
    pub(crate) fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// The search for a read-write server while connected read-only: one host
/// at a time, first after 100 ms, then at doubling intervals up to 60 s
/// (the Java client's pingRwServer timing). The interval is the session's,
/// not the connection's, as the Java client's `pingRwTimeout`: a move that
/// fails leads to a new read-only connection, which must not probe (and
/// move) again at once. A read-write connection starts it over.
pub(crate) struct RwProbe {
    every: Duration,
    last: Instant,
    timeout: Duration,
}

impl RwProbe {
    const FIRST: Duration = Duration::from_millis(100);

    pub(crate) fn new() -> Self {
        RwProbe {
            every: Self::FIRST,
            last: Instant::now(),
            timeout: Duration::from_secs(1),
        }
    }

    /// A new connection: read-only ones probe from now on, at the interval
    /// reached; a read-write one ends the search.
    pub(crate) fn connected(&mut self, read_only: bool, negotiated: Duration) {
        if !read_only {
            self.every = Self::FIRST;
        }
        self.last = Instant::now();
        // Short enough to leave the reader time for pings and silence.
        self.timeout = (negotiated / 6).clamp(Duration::from_millis(50), Duration::from_secs(1));
    }

    /// How long until the next probe is due.
    fn wait(&self) -> Duration {
        self.every.saturating_sub(self.last.elapsed())
    }

    /// A probe starts now: the next one waits twice as long. Returns the
    /// time the probe may take.
    fn start_probe(&mut self) -> Duration {
        self.every = (self.every * 2).min(Duration::from_secs(60));
        self.timeout
    }
}

/// What a read-write search found: a host's name (as in the connect
/// string, the name TLS verifies) and its address.
pub(crate) type Found = Option<(String, SocketAddr)>;

/// The search for a read-write server while connected read-only, on a
/// thread of its own, so a probe (a connect, maybe a TLS handshake, a
/// reply) never holds up the engine's replies or pings. Dropping it ends
/// the search.
pub(crate) struct RwSearch {
    _stop: crossbeam_channel::Sender<()>,
    found: Arc<Mutex<Found>>,
}

impl RwSearch {
    /// Starts searching `hosts` on the schedule `probe` keeps; `wake` runs
    /// when a read-write server is found.
    pub(crate) fn start(
        probe: Arc<Mutex<RwProbe>>,
        hosts: SharedHosts,
        tls: Option<TlsSettings>,
        wake: impl Fn() + Send + 'static,
    ) -> io::Result<Self> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let found = Arc::new(Mutex::new(None));
        let report = Arc::clone(&found);
        crate::sched::spawn("latchkey-rw-probe", move || loop {
            let wait = probe.lock().wait();
            if !matches!(
                stopped.recv_timeout(wait),
                Err(crossbeam_channel::RecvTimeoutError::Timeout)
            ) {
                return;
            }
            let timeout = probe.lock().start_probe();
            let (host, _) = hosts.lock().next();
            let read_write = resolve_one(&host)
                .ok()
                .filter(|addr| is_read_write(&host, *addr, tls.as_ref(), timeout));
            probe.lock().last = Instant::now();
            if let Some(addr) = read_write {
                *report.lock() = Some((host, addr));
                wake();
                return;
            }
        })?;
        Ok(RwSearch { _stop: stop, found })
    }

    /// The read-write server found, if any.
    pub(crate) fn found(&self) -> Found {
        self.found.lock().take()
    }
}

/// A connection to `addr` (`host` in the connect string), over TLS when
/// the client uses it, as every connection of the client is: the session's,
/// the read-write probe's and a test's expiry. Connecting and the TLS
/// handshake take at most `timeout`, which reads and writes then get too.
pub(crate) fn open_stream(
    host: &str,
    addr: SocketAddr,
    tls: Option<&TlsSettings>,
    timeout: Duration,
) -> Result<Stream, ConnectFailure> {
    open_stream_with(host, addr, tls, timeout, |_| {})
}

/// [`open_stream`], handing the TCP socket to `connected` as soon as it is
/// connected, before any TLS handshake (so that a close can cut that short).
pub(crate) fn open_stream_with(
    host: &str,
    addr: SocketAddr,
    tls: Option<&TlsSettings>,
    timeout: Duration,
    connected: impl FnOnce(&TcpStream),
) -> Result<Stream, ConnectFailure> {
    let deadline = instant_after(timeout);
    let connecting = |e: io::Error| ConnectFailure::connecting(addr, &e);
    let sock = TcpStream::connect_timeout(&addr, timeout).map_err(connecting)?;
    connected(&sock);
    sock.set_nodelay(true).map_err(connecting)?;
    sock.set_write_timeout(Some(timeout)).map_err(connecting)?;
    let s = match tls {
        None => Stream::plain(sock),
        Some(tls) => {
            let name = tls
                .server_name
                .as_deref()
                .unwrap_or(transport::host_of(host));
            Stream::tls(sock, tls, name, deadline)
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
    let deadline = instant_after(timeout);
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
pub(crate) fn read_frame(s: &mut impl Read, max: usize) -> io::Result<Vec<u8>> {
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
    fn the_handshake_wait_starts_short_grows_by_half_and_stays_within_the_limit() {
        let ms = Duration::from_millis;
        for limit in [ms(200), ms(1000), ms(3000), ms(15_000), Duration::MAX] {
            let mut wait = HandshakeWait::new();
            let mut want = HandshakeWait::FIRST;
            for _ in 0..200 {
                let got = wait.get(limit);
                assert_eq!(got, want.min(limit), "limit {limit:?}");
                assert!(got <= limit, "{got:?} above {limit:?}");
                wait.ran_out(limit);
                want = want.saturating_add(want / 2);
            }
            wait.reset();
            assert_eq!(wait.get(limit), HandshakeWait::FIRST.min(limit));
        }
        let mut wait = HandshakeWait::new();
        let waits: Vec<Duration> = (0..5)
            .map(|_| {
                let w = wait.get(ms(1000));
                wait.ran_out(ms(1000));
                w
            })
            .collect();
        assert_eq!(
            waits,
            [
                ms(250),
                ms(375),
                ms(562) + Duration::from_micros(500),
                ms(843) + Duration::from_micros(750),
                ms(1000)
            ]
        );
    }

    #[test]
    fn hosts_are_shuffled_not_rotated() {
        let names: Vec<String> = ["a:1", "b:1", "c:1"].map(String::from).to_vec();
        let mut orders = std::collections::HashSet::new();
        for _ in 0..300 {
            let mut hosts = HostList::new(&names);
            let order: Vec<String> = (0..3).map(|_| hosts.next().0).collect();
            let rounds: Vec<bool> = (0..3).map(|_| hosts.next().1).collect();
            assert_eq!(rounds, [false, false, true]);
            orders.insert(order);
        }
        // A rotation gives 3 orders; a shuffle all 3! = 6.
        assert_eq!(orders.len(), 6, "{orders:?}");
    }
}

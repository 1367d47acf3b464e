//! [`FakeServer`]: a scripted fake ZooKeeper server on 127.0.0.1 for the
//! protocol faults a real server will not produce on demand (absurd session
//! timeouts, garbage, oversize frames, rejected auth, a close that races its
//! reply, read-only answers).
//!
//! It speaks just enough of the protocol: the connect handshake, a reply
//! header per request (with a body or an error code chosen by the
//! [`Script`]), pings, closeSession and the `isro` four-letter word. It is
//! not a ZooKeeper: it keeps no tree. Real sockets, one thread per
//! connection. What it receives is recorded ([`FakeServer::seen`]) so a test
//! can count connections, opcodes, frame sizes and the session ids sent.
//!
//! ```no_run
//! use latchkey_test::fake_server::{FakeServer, Script};
//! let fake = FakeServer::start(Script::default().grant_timeout_ms(i32::MAX))?;
//! // connect a client to fake.connect_string(), then look at what it sent:
//! let seen = fake.seen();
//! println!("{} connections", seen.connections);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use parking_lot::Mutex;

/// How often blocked threads look at the stop flag.
const TICK: Duration = Duration::from_millis(20);

/// Op codes the fake knows by name.
pub mod op {
    /// exists
    pub const EXISTS: i32 = 3;
    /// ping
    pub const PING: i32 = 11;
    /// auth
    pub const AUTH: i32 = 100;
    /// setWatches
    pub const SET_WATCHES: i32 = 101;
    /// closeSession
    pub const CLOSE_SESSION: i32 = -11;
}

/// What the fake does to requests of one opcode.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Error code 0 and this body after the reply header.
    Ok(Vec<u8>),
    /// This error code (for example -101 for NoNode) and no body.
    Error(i32),
    /// No reply at all.
    Ignore,
    /// Closes the connection instead of replying.
    Close,
    /// Waits this long (a slow server), then replies as the inner reply.
    Late(Duration, Box<Reply>),
    /// Error code 0 and no body, under the next request's xid instead of
    /// this one's (replies out of order).
    WrongXid,
}

/// What the fake does once the handshake is answered.
#[derive(Clone, Debug, Default)]
pub enum AfterHandshake {
    /// Reads requests and answers them from the script.
    #[default]
    Serve,
    /// Writes these bytes, then serves (their replies are garbage anyway).
    Garbage(Vec<u8>),
    /// Keeps reading (and recording) but never writes again.
    Silent,
    /// Neither reads nor writes: the client's writes stall once the socket
    /// buffers fill.
    Stall,
    /// Closes the connection.
    Close,
}

/// How the fake behaves; change it while running with [`FakeServer::set_script`].
#[derive(Clone, Debug)]
pub struct Script {
    /// Session id granted to a handshake that asks for a new session (id 0).
    pub session_id: i64,
    /// Session timeout granted; `None` grants what the client asked for.
    pub timeout_ms: Option<i32>,
    /// Whether the handshake reply says read-only.
    pub read_only: bool,
    /// Accept the TCP connection, then close it before reading anything.
    pub refuse: bool,
    /// Answer the handshake with a frame of this declared length and then
    /// nothing (a hostile length prefix).
    pub handshake_length_prefix: Option<u32>,
    /// Answer each handshake this long after it arrives (a slow but
    /// healthy server).
    pub handshake_delay: Option<Duration>,
    /// What happens after the handshake.
    pub after_handshake: AfterHandshake,
    /// Reply to auth packets (xid -4) with AuthFailed (-115) and close.
    pub reject_auth: bool,
    /// Close the connection when a request frame declares more bytes than this.
    pub max_frame: Option<usize>,
    /// On closeSession, close the connection without replying (the EOF
    /// reaches the client before any reply).
    pub close_before_close_reply: bool,
    /// Replies by opcode; opcodes not listed get [`Script::default_reply`].
    pub replies: HashMap<i32, Reply>,
    /// Reply to opcodes not in `replies`.
    pub default_reply: Reply,
    /// The answer to the `isro` four-letter word: `"rw"` or `"ro"`.
    pub isro: &'static str,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            session_id: 0x5eed_0001,
            timeout_ms: None,
            read_only: false,
            refuse: false,
            handshake_length_prefix: None,
            handshake_delay: None,
            after_handshake: AfterHandshake::Serve,
            reject_auth: false,
            max_frame: None,
            close_before_close_reply: false,
            replies: HashMap::new(),
            default_reply: Reply::Error(-101),
            isro: "rw",
        }
    }
}

impl Script {
    /// Grants this session timeout whatever the client asks for.
    pub fn grant_timeout_ms(mut self, ms: i32) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// Grants this session id to new sessions.
    pub fn session_id(mut self, id: i64) -> Self {
        self.session_id = id;
        self
    }

    /// Answers handshakes (and `isro`) as a read-only server.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self.isro = "ro";
        self
    }

    /// Closes every new connection at once.
    pub fn refuse(mut self, yes: bool) -> Self {
        self.refuse = yes;
        self
    }

    /// What happens after the handshake.
    pub fn after_handshake(mut self, a: AfterHandshake) -> Self {
        self.after_handshake = a;
        self
    }

    /// Rejects auth packets with AuthFailed and closes.
    pub fn reject_auth(mut self) -> Self {
        self.reject_auth = true;
        self
    }

    /// Drops the connection on a frame longer than `bytes`.
    pub fn max_frame(mut self, bytes: usize) -> Self {
        self.max_frame = Some(bytes);
        self
    }

    /// Closes instead of answering closeSession.
    pub fn close_before_close_reply(mut self) -> Self {
        self.close_before_close_reply = true;
        self
    }

    /// Answers `opcode` with `reply`.
    pub fn reply(mut self, opcode: i32, reply: Reply) -> Self {
        self.replies.insert(opcode, reply);
        self
    }

    /// Answers each handshake `delay` after it arrives, as a slow server.
    pub fn handshake_delay(mut self, delay: Duration) -> Self {
        self.handshake_delay = Some(delay);
        self
    }

    /// Answers the handshake with a length prefix of `len` and no body.
    pub fn handshake_length_prefix(mut self, len: u32) -> Self {
        self.handshake_length_prefix = Some(len);
        self
    }
}

/// One handshake as the fake saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handshake {
    /// The session id the client sent (0 asks for a new session).
    pub session_id: i64,
    /// The session timeout the client asked for.
    pub timeout_ms: i32,
    /// The client's last seen zxid.
    pub last_zxid: i64,
    /// Whether the client accepts a read-only server.
    pub read_only: bool,
}

/// One request frame as the fake saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Which connection (0 = the first accepted).
    pub connection: usize,
    /// The request's xid.
    pub xid: i32,
    /// The request's opcode.
    pub opcode: i32,
    /// The frame's length, without its 4-byte length prefix.
    pub frame_len: usize,
    /// What follows the request header (xid and opcode).
    pub body: Vec<u8>,
}

/// Everything the fake has received so far.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// TCP connections accepted (`isro` probes included).
    pub connections: usize,
    /// `isro` probes answered.
    pub isro_probes: usize,
    /// Handshakes, in order.
    pub handshakes: Vec<Handshake>,
    /// Requests after the handshakes, in order.
    pub requests: Vec<Request>,
    /// Declared lengths of frames the fake refused as too long.
    pub oversize_frames: Vec<usize>,
}

impl Seen {
    /// How many requests had `opcode`.
    pub fn count(&self, opcode: i32) -> usize {
        self.requests.iter().filter(|r| r.opcode == opcode).count()
    }
}

struct Shared {
    script: Mutex<Script>,
    seen: Mutex<Seen>,
    closed_sessions: Mutex<HashSet<i64>>,
    /// Open connections by number, to cut them from the test.
    streams: Mutex<Vec<(usize, TcpStream)>>,
    stop: AtomicBool,
}

/// A scripted fake ZooKeeper server on `127.0.0.1:<free port>`. Dropping it
/// closes every connection and joins its threads.
pub struct FakeServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl FakeServer {
    /// Starts listening with `script`.
    pub fn start(script: Script) -> io::Result<FakeServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            script: Mutex::new(script),
            seen: Mutex::new(Seen::default()),
            closed_sessions: Mutex::new(HashSet::new()),
            streams: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let connections = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let shared = Arc::clone(&shared);
            let connections = Arc::clone(&connections);
            thread::Builder::new()
                .name("fake-zk-accept".into())
                .spawn(move || accept_loop(listener, shared, connections))?
        };
        Ok(FakeServer {
            addr,
            shared,
            acceptor: Some(acceptor),
            connections,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `127.0.0.1:<port>`, for a client's connect string.
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// A copy of what the fake has received so far.
    pub fn seen(&self) -> Seen {
        self.shared.seen.lock().clone()
    }

    /// Replaces the script; connections already past their handshake keep
    /// their after-handshake behaviour but answer requests by the new one.
    pub fn set_script(&self, script: Script) {
        *self.shared.script.lock() = script;
    }

    /// Changes the script in place.
    pub fn update(&self, change: impl FnOnce(&mut Script)) {
        change(&mut self.shared.script.lock());
    }

    /// Closes every open connection (the client reads EOF).
    pub fn cut(&self) {
        for (_, s) in self.shared.streams.lock().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.cut();
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for c in self.connections.lock().drain(..) {
            let _ = c.join();
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    while !shared.stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, _)) => {
                let n = {
                    let mut seen = shared.seen.lock();
                    seen.connections += 1;
                    seen.connections - 1
                };
                if shared.script.lock().refuse {
                    let _ = stream.shutdown(Shutdown::Both);
                    continue;
                }
                if let Ok(clone) = stream.try_clone() {
                    shared.streams.lock().push((n, clone));
                }
                let shared = Arc::clone(&shared);
                let spawned = thread::Builder::new()
                    .name(format!("fake-zk-conn-{n}"))
                    .spawn(move || {
                        let _ = serve(stream, n, &shared);
                        // However it ended, the connection closes now.
                        let mut streams = shared.streams.lock();
                        if let Some(i) = streams.iter().position(|(m, _)| *m == n) {
                            let (_, s) = streams.swap_remove(i);
                            let _ = s.shutdown(Shutdown::Both);
                        }
                    });
                if let Ok(handle) = spawned {
                    connections.lock().push(handle);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(TICK / 4),
            Err(_) => thread::sleep(TICK),
        }
    }
}

/// Reads exactly `buf.len()` bytes, giving up when the fake stops.
fn read_full(s: &mut TcpStream, buf: &mut [u8], shared: &Shared) -> io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        if shared.stop.load(Ordering::Acquire) {
            return Err(io::ErrorKind::Interrupted.into());
        }
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads one frame; `Ok(None)` when it was longer than `max` (the
/// connection is then closed).
fn read_frame(
    s: &mut TcpStream,
    shared: &Shared,
    max: Option<usize>,
) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    read_full(s, &mut len, shared)?;
    let len = u32::from_be_bytes(len) as usize;
    if max.is_some_and(|m| len > m) {
        shared.seen.lock().oversize_frames.push(len);
        return Ok(None);
    }
    let mut body = vec![0; len];
    read_full(s, &mut body, shared)?;
    Ok(Some(body))
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    b.get(at..at + 4)
        .map_or(0, |x| i32::from_be_bytes([x[0], x[1], x[2], x[3]]))
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    b.get(at..at + 8).map_or(0, |x| {
        let mut a = [0u8; 8];
        a.copy_from_slice(x);
        i64::from_be_bytes(a)
    })
}

/// A reply frame: header (xid, zxid, err) and body.
fn reply_frame(xid: i32, err: i32, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(20 + body.len());
    f.extend_from_slice(&((16 + body.len()) as i32).to_be_bytes());
    f.extend_from_slice(&xid.to_be_bytes());
    f.extend_from_slice(&1i64.to_be_bytes());
    f.extend_from_slice(&err.to_be_bytes());
    f.extend_from_slice(body);
    f
}

fn serve(mut s: TcpStream, conn: usize, shared: &Shared) -> io::Result<()> {
    s.set_read_timeout(Some(TICK))?;
    s.set_nodelay(true)?;
    // A four-letter word instead of a handshake: the first four bytes.
    let mut head = [0u8; 4];
    read_full(&mut s, &mut head, shared)?;
    if &head == b"isro" {
        let answer = shared.script.lock().isro;
        shared.seen.lock().isro_probes += 1;
        s.write_all(format!("{answer}\n").as_bytes())?;
        return s.shutdown(Shutdown::Both);
    }
    let len = u32::from_be_bytes(head) as usize;
    if len > 4096 {
        return s.shutdown(Shutdown::Both);
    }
    let mut body = vec![0; len];
    read_full(&mut s, &mut body, shared)?;
    // protocolVersion, lastZxid, timeOut, sessionId, passwd, readOnly
    let hs = Handshake {
        last_zxid: be_i64(&body, 4),
        timeout_ms: be_i32(&body, 12),
        session_id: be_i64(&body, 16),
        read_only: {
            let plen = be_i32(&body, 24).max(0) as usize;
            body.get(28 + plen).is_some_and(|b| *b != 0)
        },
    };
    shared.seen.lock().handshakes.push(hs.clone());
    let script = shared.script.lock().clone();
    if let Some(len) = script.handshake_length_prefix {
        s.write_all(&len.to_be_bytes())?;
        // Then silence, until the client gives up or the fake stops.
        let mut sink = [0u8; 1024];
        while !shared.stop.load(Ordering::Acquire) {
            match s.read(&mut sink) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        return Ok(());
    }
    if let Some(delay) = script.handshake_delay {
        let until = std::time::Instant::now() + delay;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            if shared.stop.load(Ordering::Acquire) {
                return Ok(());
            }
            thread::sleep(left.min(TICK));
        }
    }
    let expired = hs.session_id != 0 && shared.closed_sessions.lock().contains(&hs.session_id);
    let session_id = match hs.session_id {
        0 => script.session_id,
        id => id,
    };
    let timeout = if expired {
        0
    } else {
        script.timeout_ms.unwrap_or(hs.timeout_ms)
    };
    let mut resp = Vec::new();
    resp.extend_from_slice(&0i32.to_be_bytes());
    resp.extend_from_slice(&timeout.to_be_bytes());
    resp.extend_from_slice(&session_id.to_be_bytes());
    resp.extend_from_slice(&16i32.to_be_bytes());
    resp.extend_from_slice(&[7u8; 16]);
    resp.push(u8::from(script.read_only));
    let mut frame = (resp.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&resp);
    s.write_all(&frame)?;
    if expired {
        return s.shutdown(Shutdown::Both);
    }
    let mut silent = false;
    match script.after_handshake {
        AfterHandshake::Serve => {}
        AfterHandshake::Garbage(bytes) => s.write_all(&bytes)?,
        AfterHandshake::Silent => silent = true,
        AfterHandshake::Stall => {
            while !shared.stop.load(Ordering::Acquire) {
                thread::sleep(TICK);
            }
            return Ok(());
        }
        AfterHandshake::Close => return s.shutdown(Shutdown::Both),
    }
    loop {
        let max = shared.script.lock().max_frame;
        let Some(frame) = read_frame(&mut s, shared, max)? else {
            return s.shutdown(Shutdown::Both);
        };
        let (xid, opcode) = (be_i32(&frame, 0), be_i32(&frame, 4));
        shared.seen.lock().requests.push(Request {
            connection: conn,
            xid,
            opcode,
            frame_len: frame.len(),
            body: frame.get(8..).unwrap_or_default().to_vec(),
        });
        if silent {
            continue;
        }
        let script = shared.script.lock().clone();
        let reply = match opcode {
            op::PING => Reply::Ok(Vec::new()),
            op::SET_WATCHES => Reply::Ok(Vec::new()),
            op::AUTH if script.reject_auth => {
                let mut f = reply_frame(xid, -115, &[]);
                // The reply header's zxid is 0 for auth replies.
                f[8..16].copy_from_slice(&0i64.to_be_bytes());
                s.write_all(&f)?;
                return s.shutdown(Shutdown::Both);
            }
            op::AUTH => Reply::Ok(Vec::new()),
            op::CLOSE_SESSION => {
                shared.closed_sessions.lock().insert(session_id);
                if script.close_before_close_reply {
                    return s.shutdown(Shutdown::Both);
                }
                s.write_all(&reply_frame(xid, 0, &[]))?;
                return s.shutdown(Shutdown::Both);
            }
            other => script
                .replies
                .get(&other)
                .cloned()
                .unwrap_or(script.default_reply.clone()),
        };
        let reply = match reply {
            Reply::Late(after, reply) => {
                thread::sleep(after);
                *reply
            }
            reply => reply,
        };
        match reply {
            Reply::Ok(body) => s.write_all(&reply_frame(xid, 0, &body))?,
            Reply::Error(code) => s.write_all(&reply_frame(xid, code, &[]))?,
            Reply::WrongXid => s.write_all(&reply_frame(xid.wrapping_add(1), 0, &[]))?,
            Reply::Ignore => {}
            Reply::Close => return s.shutdown(Shutdown::Both),
            Reply::Late(..) => {}
        }
    }
}

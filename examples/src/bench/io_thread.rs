//! The benchmark's third floor: the bare socket with an I/O thread that
//! owns it both ways, the shape of ZooKeeper's Java client (its
//! `SendThread` over a selector) and of latchkey's engine, with no library
//! around it. Per session one thread owns the socket: callers put their
//! request frames on a queue (a mutex and a `VecDeque`) and wake it (a
//! `mio::Waker`); it writes what is queued, reads replies and watch events
//! from the non-blocking socket (a `mio::Poll`, edge-triggered), and hands
//! each reply to the caller waiting for its xid and each event to whoever
//! waits for that path (the slots of [`super::reader`]). No pings, no
//! retries, no reconnection: what this costs above [`super::reader`] is
//! the hand-over of each request to the I/O thread, a wake of that thread
//! before its frame is written (where the reader thread's callers write
//! their own), so that a round trip takes two hand-overs between threads,
//! not one.
//!
//! It sends what the bare socket sends (the same frames, from the same
//! encoders), fails on anything it does not expect, and is a yardstick,
//! not a client to build on.

use std::collections::VecDeque;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream as StdStream};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};

use super::bare::{bad, connect_request};
use super::slots::{lock, read_frame, Op, Slot, SlotSession, Waiting};

/// The poll's token for the socket.
const SOCKET: Token = Token(0);
/// The poll's token for the callers' wake.
const WAKE: Token = Token(1);

/// What the callers and the I/O thread share.
#[derive(Default)]
struct Shared {
    /// Request frames queued by callers and not yet taken by the I/O
    /// thread, in the order their xids were given.
    outbox: VecDeque<Vec<u8>>,
    /// Who waits for which reply and event.
    waiting: Waiting,
    /// The last xid given.
    xid: i32,
    /// Set by close and drop: the I/O thread ends at its next wake.
    stopping: bool,
}

/// One session: a socket that belongs to a thread of its own.
pub struct IoThreadSession {
    shared: Arc<Mutex<Shared>>,
    waker: Waker,
    io: Option<JoinHandle<()>>,
    /// Bound on each wait for a reply or an event.
    timeout: Duration,
}

impl IoThreadSession {
    /// Connects and shakes hands on a blocking socket, each step bounded
    /// by `timeout` (as is every later wait for a reply or an event); then
    /// makes it non-blocking and starts the I/O thread. The session asks
    /// for a `session_timeout` it never pings to keep, so the caller closes
    /// it before that runs out.
    pub fn connect(
        addr: SocketAddr,
        timeout: Duration,
        session_timeout: Duration,
    ) -> io::Result<Self> {
        let mut sock = StdStream::connect_timeout(&addr, timeout)?;
        sock.set_nodelay(true)?;
        sock.set_read_timeout(Some(timeout))?;
        sock.set_write_timeout(Some(timeout))?;
        sock.write_all(&connect_request(session_timeout))?;
        if read_frame(&mut sock)?.len() < 16 {
            return Err(bad("a handshake reply too short"));
        }
        sock.set_nonblocking(true)?;
        let mut sock = TcpStream::from_std(sock);
        let poll = Poll::new()?;
        // Both ways at once and for good: edge-triggered, a writable event
        // comes only after a write that found the socket's buffer full.
        let both = Interest::READABLE | Interest::WRITABLE;
        poll.registry().register(&mut sock, SOCKET, both)?;
        let waker = Waker::new(poll.registry(), WAKE)?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let theirs = Arc::clone(&shared);
        let io = thread::Builder::new()
            .name("bench-io".into())
            .spawn(move || io_loop(poll, sock, &theirs))?;
        Ok(IoThreadSession {
            shared,
            waker,
            io: Some(io),
            timeout,
        })
    }

    /// Ends the session on the server, waits for its answer and for the
    /// I/O thread.
    pub fn close(mut self) -> io::Result<()> {
        let closed = self.call(Op::Close, "closeSession", "/").map(|_| ());
        self.stop();
        closed
    }

    /// Tells the I/O thread to stop, wakes it and joins it.
    fn stop(&mut self) {
        lock(&self.shared).stopping = true;
        let _ = self.waker.wake();
        if let Some(io) = self.io.take() {
            let _ = io.join();
        }
    }
}

impl SlotSession for IoThreadSession {
    /// Queues `ops` in one frame buffer and wakes the I/O thread.
    fn send<const N: usize>(
        &self,
        ops: &[Op<'_>; N],
        watch: Option<(&str, &Arc<Slot>)>,
    ) -> io::Result<[Arc<Slot>; N]> {
        let slots: [Arc<Slot>; N] = std::array::from_fn(|_| Arc::new(Slot::default()));
        let mut frame = Vec::with_capacity(256);
        let first = {
            let mut shared = lock(&self.shared);
            let s = &mut *shared;
            for (op, slot) in ops.iter().zip(&slots) {
                s.xid = s.xid.wrapping_add(1).max(1);
                s.waiting.expect(s.xid, slot, "I/O thread")?;
                op.push(&mut frame, s.xid);
            }
            if let Some((path, slot)) = watch {
                s.waiting.watch(path, slot);
            }
            s.outbox.push_back(frame);
            s.outbox.len() == 1
        };
        // A queue that held frames already has a wake on its way, and the
        // I/O thread takes the whole queue at once.
        if first {
            self.waker.wake()?;
        }
        Ok(slots)
    }

    fn unwatch(&self, path: &str, slot: &Arc<Slot>) {
        lock(&self.shared).waiting.unwatch(path, slot);
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl Drop for IoThreadSession {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The I/O thread: serves the socket until the session stops, the socket
/// ends or it says what it should not; then every waiter is told why.
fn io_loop(mut poll: Poll, mut sock: TcpStream, shared: &Mutex<Shared>) {
    let why = match serve(&mut poll, &mut sock, shared) {
        Ok(()) => "the session closed".to_owned(),
        Err(why) => why,
    };
    lock(shared).waiting.stop(why);
}

/// At each wake: takes the queued frames and writes what the socket takes;
/// when it is readable, reads all it has (edge-triggered) and hands over
/// every whole frame. Returns when the session stops.
fn serve(poll: &mut Poll, sock: &mut TcpStream, shared: &Mutex<Shared>) -> Result<(), String> {
    let mut events = Events::with_capacity(4);
    // Frames taken from the outbox, and how much of the first is written.
    let mut unsent: VecDeque<Vec<u8>> = VecDeque::new();
    let mut written = 0;
    // Bytes read, of which the first `have` are not yet handed over.
    let mut input = vec![0; 64 * 1024];
    let mut have = 0;
    loop {
        match poll.poll(&mut events, None) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("poll: {e}")),
            Ok(()) => {}
        }
        let readable = events.iter().any(|e| {
            e.token() == SOCKET && (e.is_readable() || e.is_read_closed() || e.is_error())
        });
        {
            let mut s = lock(shared);
            if s.stopping {
                return Ok(());
            }
            unsent.append(&mut s.outbox);
        }
        while let Some(frame) = unsent.front() {
            match sock.write(&frame[written..]) {
                Ok(0) => return Err("the socket takes no more".into()),
                Ok(n) if written + n == frame.len() => {
                    unsent.pop_front();
                    written = 0;
                }
                Ok(n) => written += n,
                // Full: a writable event comes when it has room.
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        if !readable {
            continue;
        }
        loop {
            if have == input.len() {
                input.resize(2 * input.len(), 0);
            }
            match sock.read(&mut input[have..]) {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(n) => have += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.to_string()),
            }
            let mut at = 0;
            while let Some(len) = whole_frame(&input[at..have]) {
                let len = len?;
                lock(shared).waiting.deliver(&input[at + 4..at + 4 + len])?;
                at += 4 + len;
            }
            input.copy_within(at..have, 0);
            have -= at;
        }
    }
}

/// The body length of the frame `input` starts with, once it holds all of
/// it.
fn whole_frame(input: &[u8]) -> Option<Result<usize, String>> {
    let len = i32::from_be_bytes(input.get(..4)?.try_into().ok()?);
    let Ok(len) = usize::try_from(len) else {
        return Some(Err("a negative frame length".into()));
    };
    (input.len() >= 4 + len).then_some(Ok(len))
}

#[cfg(test)]
mod tests {
    use super::super::bare::{children, EPHEMERAL_SEQUENTIAL};
    use super::*;
    use latchkey_framework::Client;
    use latchkey_test::TestingServer;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_cycle_leaves_no_node_and_errors_name_the_path() {
        let server = TestingServer::start().expect("a ZooKeeper server");
        let timeout = Duration::from_secs(10);
        let s = IoThreadSession::connect(server.addr(), timeout, timeout).unwrap();
        s.ensure_path("/io/a/lock").unwrap();
        s.ensure_path("/io/a/lock").unwrap(); // already there: fine
        for _ in 0..3 {
            s.lock_cycle("/io/a/lock", "/io/a/lock/_c_x-lock-", b"who")
                .unwrap();
            s.sequential_cycle("/io/a/lock", "/io/a/lock/lock-")
                .unwrap();
        }
        // Looked at before the session ends, which would take its
        // ephemeral nodes with it.
        let c = Client::new(&server.connect_string()).unwrap();
        c.start().unwrap();
        c.block_until_connected_or_err(timeout).unwrap();
        assert_eq!(c.get_children("/io/a/lock").unwrap(), Vec::<String>::new());
        // Six creates and six deletes under the parent.
        let stat = c.exists("/io/a/lock").unwrap().unwrap();
        assert_eq!(stat.cversion, 12, "{stat:?}");
        let e = s.release("/io/missing").unwrap_err();
        assert!(e.to_string().contains("delete /io/missing"), "{e}");
        s.close().unwrap();
        c.close();
    }

    #[test]
    fn a_reply_larger_than_the_read_buffer_comes_whole() {
        let server = TestingServer::start().expect("a ZooKeeper server");
        let timeout = Duration::from_secs(10);
        let s = IoThreadSession::connect(server.addr(), timeout, timeout).unwrap();
        let parent = "/io/wide";
        s.ensure_path(parent).unwrap();
        // 1,200 children of 65 bytes each in the listing: about 76 KiB.
        let prefix = format!("{parent}/{}-", "n".repeat(50));
        for _ in 0..1200 {
            s.call(
                Op::Create(&prefix, b"", EPHEMERAL_SEQUENTIAL),
                "create",
                &prefix,
            )
            .unwrap();
        }
        let (err, body) = s.call(Op::Children(parent), "getChildren", parent).unwrap();
        assert_eq!(children(parent, err, &body).unwrap().len(), 1200);
        s.close().unwrap();
    }

    #[test]
    fn contending_sessions_take_turns_one_at_a_time() {
        const SESSIONS: usize = 4;
        const TURNS: usize = 25;
        let server = TestingServer::start().expect("a ZooKeeper server");
        let timeout = Duration::from_secs(10);
        let parent = "/io/turns";
        IoThreadSession::connect(server.addr(), timeout, timeout)
            .unwrap()
            .ensure_path(parent)
            .unwrap();
        let holders = Arc::new(AtomicUsize::new(0));
        let turns = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..SESSIONS)
            .map(|i| {
                let (holders, turns, addr) = (holders.clone(), turns.clone(), server.addr());
                thread::spawn(move || {
                    let s = IoThreadSession::connect(addr, timeout, timeout).unwrap();
                    let prefix = format!("{parent}/_c_{i}-lock-");
                    for _ in 0..TURNS {
                        let node = s.acquire(parent, &prefix, b"").unwrap();
                        assert_eq!(
                            holders.fetch_add(1, Ordering::SeqCst),
                            0,
                            "two holders of {parent} at once"
                        );
                        thread::yield_now();
                        holders.fetch_sub(1, Ordering::SeqCst);
                        turns.fetch_add(1, Ordering::SeqCst);
                        s.release(&node).unwrap();
                    }
                    s.close().unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a contending session failed");
        }
        assert_eq!(turns.load(Ordering::SeqCst), SESSIONS * TURNS);
    }
}

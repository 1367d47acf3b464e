//! The benchmark's second floor: the bare socket with a reader thread.
//! Per session one thread owns the socket's reads: it parses each reply
//! frame and hands it to the caller waiting for that xid (a slot per
//! request, a mutex and a condition variable), and each watch event to
//! whoever waits for an event on that path. Callers write their own
//! request frames, under a mutex. No pings, no retries, no reconnection:
//! what this costs above [`super::bare`] is the hand-over from the reader
//! thread to the caller, which any client whose reads run on a thread of
//! their own pays. (The Java client's callers do not write either: that
//! shape is [`super::io_thread`].)
//!
//! It sends what the bare socket sends (the same frames, from the same
//! encoders), fails on anything it does not expect, and is a yardstick,
//! not a client to build on.

use std::io::{self, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::bare::{bad, connect_request};
use super::slots::{lock, read_frame, Op, Slot, SlotSession, Waiting};

/// The writing half: the socket, the next xid and a frame buffer.
struct Writer {
    sock: TcpStream,
    xid: i32,
    out: Vec<u8>,
}

/// One session: a socket whose reads belong to a thread of its own.
pub struct ReaderSession {
    waiting: Arc<Mutex<Waiting>>,
    writer: Mutex<Writer>,
    reader: Option<JoinHandle<()>>,
    /// Bound on each wait for a reply or an event.
    timeout: Duration,
}

impl ReaderSession {
    /// Connects and shakes hands, each step bounded by `timeout` (as is
    /// every later wait for a reply or an event); then starts the reader
    /// thread. The session asks for a `session_timeout` it never pings to
    /// keep, so the caller closes it before that runs out.
    pub fn connect(
        addr: SocketAddr,
        timeout: Duration,
        session_timeout: Duration,
    ) -> io::Result<Self> {
        let mut sock = TcpStream::connect_timeout(&addr, timeout)?;
        sock.set_nodelay(true)?;
        sock.set_write_timeout(Some(timeout))?;
        sock.write_all(&connect_request(session_timeout))?;
        // The handshake's reply is read here, bounded; after it the reader
        // thread blocks in its reads until a reply, an event, or the socket
        // shut down by close or drop.
        sock.set_read_timeout(Some(timeout))?;
        let mut input = BufReader::with_capacity(64 * 1024, sock.try_clone()?);
        if read_frame(&mut input)?.len() < 16 {
            return Err(bad("a handshake reply too short"));
        }
        sock.set_read_timeout(None)?;
        let waiting = Arc::new(Mutex::new(Waiting::default()));
        let theirs = Arc::clone(&waiting);
        let reader = thread::Builder::new()
            .name("bench-reader".into())
            .spawn(move || read_loop(input, &theirs))?;
        Ok(ReaderSession {
            waiting,
            writer: Mutex::new(Writer {
                sock,
                xid: 0,
                out: Vec::with_capacity(512),
            }),
            reader: Some(reader),
            timeout,
        })
    }

    /// Ends the session on the server, waits for its answer and for the
    /// reader thread.
    pub fn close(mut self) -> io::Result<()> {
        let closed = self.call(Op::Close, "closeSession", "/").map(|_| ());
        self.stop();
        closed
    }

    /// Shuts the socket, which ends the reader thread's read, and joins it.
    fn stop(&mut self) {
        let _ = lock(&self.writer).sock.shutdown(Shutdown::Both);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl SlotSession for ReaderSession {
    /// Writes `ops` in one frame buffer, under the writer's lock.
    fn send<const N: usize>(
        &self,
        ops: &[Op<'_>; N],
        watch: Option<(&str, &Arc<Slot>)>,
    ) -> io::Result<[Arc<Slot>; N]> {
        let slots: [Arc<Slot>; N] = std::array::from_fn(|_| Arc::new(Slot::default()));
        let mut w = lock(&self.writer);
        let w = &mut *w;
        w.out.clear();
        {
            let mut waiting = lock(&self.waiting);
            for (op, slot) in ops.iter().zip(&slots) {
                w.xid = w.xid.wrapping_add(1).max(1);
                waiting.expect(w.xid, slot, "reader thread")?;
                op.push(&mut w.out, w.xid);
            }
            if let Some((path, slot)) = watch {
                waiting.watch(path, slot);
            }
        }
        w.sock.write_all(&w.out)?;
        Ok(slots)
    }

    fn unwatch(&self, path: &str, slot: &Arc<Slot>) {
        lock(&self.waiting).unwatch(path, slot);
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl Drop for ReaderSession {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The reader thread: every frame to the slot waiting for it, until the
/// socket ends or says what it should not; then every waiter is told why.
fn read_loop(mut input: BufReader<TcpStream>, waiting: &Mutex<Waiting>) {
    let why = loop {
        let delivered = read_frame(&mut input)
            .map_err(|e| e.to_string())
            .and_then(|frame| lock(waiting).deliver(&frame));
        if let Err(why) = delivered {
            break why;
        }
    };
    lock(waiting).stop(why);
}

#[cfg(test)]
mod tests {
    use super::*;
    use latchkey_framework::Client;
    use latchkey_test::TestingServer;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_cycle_leaves_no_node_and_errors_name_the_path() {
        let server = TestingServer::start().expect("a ZooKeeper server");
        let timeout = Duration::from_secs(10);
        let s = ReaderSession::connect(server.addr(), timeout, timeout).unwrap();
        s.ensure_path("/reader/a/lock").unwrap();
        s.ensure_path("/reader/a/lock").unwrap(); // already there: fine
        for _ in 0..3 {
            s.lock_cycle("/reader/a/lock", "/reader/a/lock/_c_x-lock-", b"who")
                .unwrap();
            s.sequential_cycle("/reader/a/lock", "/reader/a/lock/lock-")
                .unwrap();
        }
        // Looked at before the session ends, which would take its
        // ephemeral nodes with it.
        let c = Client::new(&server.connect_string()).unwrap();
        c.start().unwrap();
        c.block_until_connected_or_err(timeout).unwrap();
        assert_eq!(
            c.get_children("/reader/a/lock").unwrap(),
            Vec::<String>::new()
        );
        // Six creates and six deletes under the parent: every cycle
        // created once and deleted once.
        let stat = c.exists("/reader/a/lock").unwrap().unwrap();
        assert_eq!(stat.cversion, 12, "{stat:?}");
        let e = s.release("/reader/missing").unwrap_err();
        assert!(e.to_string().contains("delete /reader/missing"), "{e}");
        s.close().unwrap();
        c.close();
    }

    #[test]
    fn contending_sessions_take_turns_one_at_a_time() {
        const SESSIONS: usize = 4;
        const TURNS: usize = 25;
        let server = TestingServer::start().expect("a ZooKeeper server");
        let timeout = Duration::from_secs(10);
        let parent = "/reader/turns";
        ReaderSession::connect(server.addr(), timeout, timeout)
            .unwrap()
            .ensure_path(parent)
            .unwrap();
        let holders = Arc::new(AtomicUsize::new(0));
        let turns = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..SESSIONS)
            .map(|i| {
                let (holders, turns, addr) = (holders.clone(), turns.clone(), server.addr());
                thread::spawn(move || {
                    let s = ReaderSession::connect(addr, timeout, timeout).unwrap();
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

//! The benchmark's second floor: the bare socket with a reader thread, the
//! shape of ZooKeeper's Java client with no library around it. Per
//! session one thread owns the socket's reads: it parses each reply frame
//! and hands it to the caller waiting for that xid (a slot per request, a
//! mutex and a condition variable), and each watch event to whoever waits
//! for an event on that path. Callers write their own request frames,
//! under a mutex. No pings, no retries, no reconnection: what this costs
//! above [`super::bare`] is the hand-over from the reader thread to the
//! caller, which any client whose I/O runs on a thread of its own pays.
//!
//! It sends what the bare socket sends (the same frames, from the same
//! encoders), fails on anything it does not expect, and is a yardstick,
//! not a client to build on.

use std::collections::{HashMap, VecDeque};
use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::bare::{
    bad, children, connect_request, created, get_int, get_str, predecessor, push_create,
    push_delete, push_exists, push_get_children, push_request, zk_error, CLOSE_SESSION,
    EPHEMERAL_SEQUENTIAL, NODE_EXISTS, NOTIFICATION, NO_NODE, PERSISTENT,
};

/// A reply (its error code and body) or why none will come. For a watch
/// event the code is the event's type.
pub(super) type Answer = Result<(i32, Vec<u8>), String>;

/// Where the reader thread leaves one answer for the caller waiting on it.
#[derive(Default)]
pub(super) struct Slot {
    answer: Mutex<Option<Answer>>,
    ready: Condvar,
}

impl Slot {
    pub(super) fn fill(&self, answer: Answer) {
        *lock(&self.answer) = Some(answer);
        self.ready.notify_one();
    }

    /// The answer, waiting at most until `deadline`.
    pub(super) fn wait(&self, deadline: Instant, what: &str) -> io::Result<(i32, Vec<u8>)> {
        let mut answer = lock(&self.answer);
        loop {
            if let Some(a) = answer.take() {
                return a.map_err(|e| io::Error::other(format!("{what}: {e}")));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{what}: no answer in time"),
                ));
            }
            answer = self
                .ready
                .wait_timeout(answer, left)
                .map_or_else(|e| e.into_inner().0, |(g, _)| g);
        }
    }
}

/// What the callers and the reader thread share.
#[derive(Default)]
struct Shared {
    /// Requests written and not answered, in the order written, which is
    /// the order ZooKeeper answers them in.
    pending: VecDeque<(i32, Arc<Slot>)>,
    /// Callers waiting for a watch event, by path.
    watches: HashMap<String, Vec<Arc<Slot>>>,
    /// Why the reader thread stopped, once it has.
    stopped: Option<String>,
}

/// The writing half: the socket, the next xid and a frame buffer.
struct Writer {
    sock: TcpStream,
    xid: i32,
    out: Vec<u8>,
}

/// A request to write.
pub(super) enum Op<'a> {
    Create(&'a str, &'a [u8], i32),
    Children(&'a str),
    Exists(&'a str),
    Delete(&'a str),
    Close,
}

impl Op<'_> {
    /// Appends the request's frame, with `xid`, to `out`.
    pub(super) fn push(&self, out: &mut Vec<u8>, xid: i32) {
        match *self {
            Op::Create(path, data, flags) => push_create(out, xid, path, data, flags),
            Op::Children(path) => push_get_children(out, xid, path),
            Op::Exists(path) => push_exists(out, xid, path),
            Op::Delete(path) => push_delete(out, xid, path),
            Op::Close => push_request(out, xid, CLOSE_SESSION, |_| {}),
        }
    }
}

/// One session: a socket whose reads belong to a thread of its own.
pub struct ReaderSession {
    shared: Arc<Mutex<Shared>>,
    writer: Mutex<Writer>,
    reader: Option<JoinHandle<()>>,
    /// Bound on each wait for a reply or an event.
    timeout: Duration,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
        let shared = Arc::new(Mutex::new(Shared::default()));
        let theirs = Arc::clone(&shared);
        let reader = thread::Builder::new()
            .name("bench-reader".into())
            .spawn(move || read_loop(input, &theirs))?;
        Ok(ReaderSession {
            shared,
            writer: Mutex::new(Writer {
                sock,
                xid: 0,
                out: Vec::with_capacity(512),
            }),
            reader: Some(reader),
            timeout,
        })
    }

    /// Creates `path` and its missing parents as persistent nodes.
    pub fn ensure_path(&self, path: &str) -> io::Result<()> {
        let mut at: Vec<usize> = path.match_indices('/').skip(1).map(|(i, _)| i).collect();
        at.push(path.len());
        for i in at {
            let (err, _) = self.call(Op::Create(&path[..i], b"", PERSISTENT), "create", path)?;
            if err != 0 && err != NODE_EXISTS {
                return Err(zk_error("create", &path[..i], err));
            }
        }
        Ok(())
    }

    /// One lock cycle: [`ReaderSession::acquire`], then
    /// [`ReaderSession::release`]. Uncontended, that is the create and the
    /// listing written together, then the delete.
    pub fn lock_cycle(&self, parent: &str, prefix: &str, data: &[u8]) -> io::Result<()> {
        let node = self.acquire(parent, prefix, data)?;
        self.release(&node)
    }

    /// The floor's cycle: create, then list, then delete, one round trip
    /// each.
    pub fn sequential_cycle(&self, parent: &str, prefix: &str) -> io::Result<()> {
        let (err, body) = self.call(
            Op::Create(prefix, b"", EPHEMERAL_SEQUENTIAL),
            "create",
            prefix,
        )?;
        let node = created(prefix, err, &body)?;
        let (err, body) = self.call(Op::Children(parent), "getChildren", parent)?;
        children(parent, err, &body)?;
        self.release(&node)
    }

    /// Takes the lock at `parent` as Curator's lock does, and returns the
    /// node that holds it: creates an ephemeral sequential `prefix` and
    /// lists `parent` together; then, while a node sorts before ours,
    /// watches the one just before it, waits for its event and lists
    /// again. Release it with [`ReaderSession::release`].
    pub fn acquire(&self, parent: &str, prefix: &str, data: &[u8]) -> io::Result<String> {
        let ops = [
            Op::Create(prefix, data, EPHEMERAL_SEQUENTIAL),
            Op::Children(parent),
        ];
        let [create, list] = self.write(&ops, None)?;
        let deadline = Instant::now() + self.timeout;
        let (err, body) = create.wait(deadline, &format!("create {prefix}"))?;
        let node = created(prefix, err, &body)?;
        let ours = node.rsplit('/').next().unwrap_or_default().to_owned();
        let (err, body) = list.wait(deadline, &format!("getChildren {parent}"))?;
        let mut listed = children(parent, err, &body)?;
        while let Some(before) = predecessor(&listed, &ours)? {
            let watched = format!("{parent}/{before}");
            let event = Arc::new(Slot::default());
            let [exists] = self.write(&[Op::Exists(&watched)], Some((&watched, &event)))?;
            let deadline = Instant::now() + self.timeout;
            match exists.wait(deadline, &format!("exists {watched}"))?.0 {
                0 => {
                    let deadline = Instant::now() + self.timeout;
                    event.wait(deadline, &format!("the event of {watched}"))?;
                }
                // Gone already: no event will come for it.
                NO_NODE => self.unwatch(&watched, &event),
                err => return Err(zk_error("exists", &watched, err)),
            }
            let (err, body) = self.call(Op::Children(parent), "getChildren", parent)?;
            listed = children(parent, err, &body)?;
        }
        Ok(node)
    }

    /// Gives up a node [`ReaderSession::acquire`] returned.
    pub fn release(&self, node: &str) -> io::Result<()> {
        match self.call(Op::Delete(node), "delete", node)?.0 {
            0 => Ok(()),
            err => Err(zk_error("delete", node, err)),
        }
    }

    /// Ends the session on the server, waits for its answer and for the
    /// reader thread.
    pub fn close(mut self) -> io::Result<()> {
        let closed = self.call(Op::Close, "closeSession", "/").map(|_| ());
        self.stop();
        closed
    }

    /// Writes `op` and waits for its reply.
    fn call(&self, op: Op<'_>, name: &str, path: &str) -> io::Result<(i32, Vec<u8>)> {
        let [slot] = self.write(&[op], None)?;
        slot.wait(Instant::now() + self.timeout, &format!("{name} {path}"))
    }

    /// Writes `ops` in one frame buffer, each with a slot of its own taken
    /// in the order written; `watch` is a slot for the event of a path,
    /// put in place before the request that sets the watch is written.
    fn write<const N: usize>(
        &self,
        ops: &[Op<'_>; N],
        watch: Option<(&str, &Arc<Slot>)>,
    ) -> io::Result<[Arc<Slot>; N]> {
        let slots: [Arc<Slot>; N] = std::array::from_fn(|_| Arc::new(Slot::default()));
        let mut w = lock(&self.writer);
        let w = &mut *w;
        w.out.clear();
        let mut xids = [0; N];
        for (op, xid) in ops.iter().zip(&mut xids) {
            w.xid = w.xid.wrapping_add(1).max(1);
            *xid = w.xid;
            op.push(&mut w.out, *xid);
        }
        {
            let mut shared = lock(&self.shared);
            if let Some(why) = &shared.stopped {
                return Err(io::Error::other(format!(
                    "the reader thread stopped: {why}"
                )));
            }
            if let Some((path, slot)) = watch {
                let waiting = shared.watches.entry(path.to_owned()).or_default();
                waiting.push(Arc::clone(slot));
            }
            for (xid, slot) in xids.iter().zip(&slots) {
                shared.pending.push_back((*xid, Arc::clone(slot)));
            }
        }
        w.sock.write_all(&w.out)?;
        Ok(slots)
    }

    /// Takes `slot` off the waiters for `path`'s event.
    fn unwatch(&self, path: &str, slot: &Arc<Slot>) {
        let mut shared = lock(&self.shared);
        if let Some(waiting) = shared.watches.get_mut(path) {
            waiting.retain(|s| !Arc::ptr_eq(s, slot));
            if waiting.is_empty() {
                shared.watches.remove(path);
            }
        }
    }

    /// Shuts the socket, which ends the reader thread's read, and joins it.
    fn stop(&mut self) {
        let _ = lock(&self.writer).sock.shutdown(Shutdown::Both);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for ReaderSession {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One frame's body from `input`.
pub(super) fn read_frame(input: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut len = [0; 4];
    input.read_exact(&mut len)?;
    let len =
        usize::try_from(i32::from_be_bytes(len)).map_err(|_| bad("a negative frame length"))?;
    let mut frame = vec![0; len];
    input.read_exact(&mut frame)?;
    Ok(frame)
}

/// The reader thread: every frame to the slot waiting for it, until the
/// socket ends or says what it should not; then every waiter is told why.
fn read_loop(mut input: BufReader<TcpStream>, shared: &Mutex<Shared>) {
    let why = loop {
        let frame = match read_frame(&mut input) {
            Ok(f) if f.len() >= 16 => f,
            Ok(_) => break "a reply too short".to_owned(),
            Err(e) => break e.to_string(),
        };
        let int = |at: usize| {
            i32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]])
        };
        let xid = int(0);
        if xid == NOTIFICATION {
            // type, state, path
            let at = &mut 16;
            let (Some(kind), Some(_), Some(path)) = (
                get_int(&frame, at),
                get_int(&frame, at),
                get_str(&frame, at),
            ) else {
                break "a watch event cut short".to_owned();
            };
            // An event nobody waits for (none is expected) is dropped.
            let waiting = lock(shared).watches.remove(&path).unwrap_or_default();
            for slot in waiting {
                slot.fill(Ok((kind, Vec::new())));
            }
            continue;
        }
        let Some((expected, slot)) = lock(shared).pending.pop_front() else {
            break format!("a reply (xid {xid}) with no request outstanding");
        };
        if xid != expected {
            slot.fill(Err(format!("a reply for xid {xid}, not {expected}")));
            break format!("replies out of order: xid {xid}, not {expected}");
        }
        let err = int(12);
        slot.fill(Ok((err, frame[16..].to_vec())));
    };
    let mut s = lock(shared);
    s.stopped = Some(why.clone());
    for (_, slot) in s.pending.drain(..) {
        slot.fill(Err(why.clone()));
    }
    for (_, waiting) in s.watches.drain() {
        for slot in waiting {
            slot.fill(Err(why.clone()));
        }
    }
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

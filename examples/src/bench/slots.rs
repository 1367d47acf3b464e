//! What the two threaded floors ([`super::reader`] and
//! [`super::io_thread`]) share: the slot a caller waits on for its reply,
//! the record of who waits for what (`Waiting`), and Curator's lock
//! protocol on top of them ([`SlotSession`]). The floors differ only in
//! how a request reaches the socket: written by its caller, or handed to
//! the I/O thread.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::bare::{
    bad, children, created, get_int, get_str, predecessor, push_create, push_delete, push_exists,
    push_get_children, push_request, zk_error, CLOSE_SESSION, EPHEMERAL_SEQUENTIAL, NODE_EXISTS,
    NOTIFICATION, NO_NODE, PERSISTENT,
};

/// A reply (its error code and body) or why none will come. For a watch
/// event the code is the event's type.
pub(super) type Answer = Result<(i32, Vec<u8>), String>;

/// Where the thread that reads leaves one answer for the caller waiting
/// on it.
#[derive(Default)]
pub struct Slot {
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

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A request to send.
pub enum Op<'a> {
    /// A create of a path, with its data and create flags.
    Create(&'a str, &'a [u8], i32),
    /// A listing of a path's children.
    Children(&'a str),
    /// An exists that sets a watch.
    Exists(&'a str),
    /// A delete at any version.
    Delete(&'a str),
    /// The end of the session.
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

/// Who waits for what on one session, kept under the session's lock.
#[derive(Default)]
pub(super) struct Waiting {
    /// Requests sent and not answered, in the order sent, which is the
    /// order ZooKeeper answers them in.
    pending: VecDeque<(i32, Arc<Slot>)>,
    /// Callers waiting for a watch event, by path.
    watches: HashMap<String, Vec<Arc<Slot>>>,
    /// Why the thread that reads stopped, once it has.
    stopped: Option<String>,
}

impl Waiting {
    /// Records a request about to be sent: its reply goes to `slot`. Fails
    /// once the reading thread has stopped (`who` names it).
    pub(super) fn expect(&mut self, xid: i32, slot: &Arc<Slot>, who: &str) -> io::Result<()> {
        if let Some(why) = &self.stopped {
            return Err(io::Error::other(format!("the {who} stopped: {why}")));
        }
        self.pending.push_back((xid, Arc::clone(slot)));
        Ok(())
    }

    /// Puts `slot` among the waiters for `path`'s event.
    pub(super) fn watch(&mut self, path: &str, slot: &Arc<Slot>) {
        let waiting = self.watches.entry(path.to_owned()).or_default();
        waiting.push(Arc::clone(slot));
    }

    /// Takes `slot` off the waiters for `path`'s event.
    pub(super) fn unwatch(&mut self, path: &str, slot: &Arc<Slot>) {
        if let Some(waiting) = self.watches.get_mut(path) {
            waiting.retain(|s| !Arc::ptr_eq(s, slot));
            if waiting.is_empty() {
                self.watches.remove(path);
            }
        }
    }

    /// Hands one frame's body to the slot waiting for it, or an event to
    /// the waiters for its path; an error for anything unexpected.
    pub(super) fn deliver(&mut self, frame: &[u8]) -> Result<(), String> {
        if frame.len() < 16 {
            return Err("a reply too short".into());
        }
        let int = |at: usize| {
            i32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]])
        };
        let xid = int(0);
        if xid == NOTIFICATION {
            // type, state, path
            let at = &mut 16;
            let (Some(kind), Some(_), Some(path)) =
                (get_int(frame, at), get_int(frame, at), get_str(frame, at))
            else {
                return Err("a watch event cut short".into());
            };
            // An event nobody waits for (none is expected) is dropped.
            for slot in self.watches.remove(&path).unwrap_or_default() {
                slot.fill(Ok((kind, Vec::new())));
            }
            return Ok(());
        }
        let Some((expected, slot)) = self.pending.pop_front() else {
            return Err(format!("a reply (xid {xid}) with no request outstanding"));
        };
        if xid != expected {
            slot.fill(Err(format!("a reply for xid {xid}, not {expected}")));
            return Err(format!("replies out of order: xid {xid}, not {expected}"));
        }
        slot.fill(Ok((int(12), frame[16..].to_vec())));
        Ok(())
    }

    /// The reading thread stopped: every waiter is told `why`, and later
    /// requests fail with it.
    pub(super) fn stop(&mut self, why: String) {
        for (_, slot) in self.pending.drain(..) {
            slot.fill(Err(why.clone()));
        }
        for (_, waiting) in self.watches.drain() {
            for slot in waiting {
                slot.fill(Err(why.clone()));
            }
        }
        self.stopped = Some(why);
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

/// A floor session whose replies come through [`Slot`]s. How a request
/// reaches the socket is the session's; the lock protocol on top,
/// Curator's, is the same for each.
pub trait SlotSession {
    /// Sends `ops` together, each with a slot of its own taken in the
    /// order sent; `watch` is a slot for the event of a path, put in place
    /// before the request that sets the watch is sent.
    fn send<const N: usize>(
        &self,
        ops: &[Op<'_>; N],
        watch: Option<(&str, &Arc<Slot>)>,
    ) -> io::Result<[Arc<Slot>; N]>;

    /// Takes `slot` off the waiters for `path`'s event.
    fn unwatch(&self, path: &str, slot: &Arc<Slot>);

    /// Bound on each wait for a reply or an event.
    fn timeout(&self) -> Duration;

    /// Sends `op` and waits for its reply.
    fn call(&self, op: Op<'_>, name: &str, path: &str) -> io::Result<(i32, Vec<u8>)> {
        let [slot] = self.send(&[op], None)?;
        slot.wait(Instant::now() + self.timeout(), &format!("{name} {path}"))
    }

    /// Creates `path` and its missing parents as persistent nodes.
    fn ensure_path(&self, path: &str) -> io::Result<()> {
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

    /// One lock cycle: [`SlotSession::acquire`], then
    /// [`SlotSession::release`]. Uncontended, that is the create and the
    /// listing sent together, then the delete.
    fn lock_cycle(&self, parent: &str, prefix: &str, data: &[u8]) -> io::Result<()> {
        let node = self.acquire(parent, prefix, data)?;
        self.release(&node)
    }

    /// The floor's cycle: create, then list, then delete, one round trip
    /// each.
    fn sequential_cycle(&self, parent: &str, prefix: &str) -> io::Result<()> {
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
    /// again. Release it with [`SlotSession::release`].
    fn acquire(&self, parent: &str, prefix: &str, data: &[u8]) -> io::Result<String> {
        let ops = [
            Op::Create(prefix, data, EPHEMERAL_SEQUENTIAL),
            Op::Children(parent),
        ];
        let [create, list] = self.send(&ops, None)?;
        let deadline = Instant::now() + self.timeout();
        let (err, body) = create.wait(deadline, &format!("create {prefix}"))?;
        let node = created(prefix, err, &body)?;
        let ours = node.rsplit('/').next().unwrap_or_default().to_owned();
        let (err, body) = list.wait(deadline, &format!("getChildren {parent}"))?;
        let mut listed = children(parent, err, &body)?;
        while let Some(before) = predecessor(&listed, &ours)? {
            let watched = format!("{parent}/{before}");
            let event = Arc::new(Slot::default());
            let [exists] = self.send(&[Op::Exists(&watched)], Some((&watched, &event)))?;
            let deadline = Instant::now() + self.timeout();
            match exists.wait(deadline, &format!("exists {watched}"))?.0 {
                0 => {
                    let deadline = Instant::now() + self.timeout();
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

    /// Gives up a node [`SlotSession::acquire`] returned.
    fn release(&self, node: &str) -> io::Result<()> {
        match self.call(Op::Delete(node), "delete", node)?.0 {
            0 => Ok(()),
            err => Err(zk_error("delete", node, err)),
        }
    }
}

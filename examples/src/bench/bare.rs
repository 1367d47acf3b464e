//! The benchmark's floor for client CPU: the requests of an uncontended
//! lock cycle sent by the least client there can be. One thread, one
//! blocking socket, no pings, no watches, no retries, no deadlines: what
//! is left is what the kernel and the server cost any client for the same
//! round trips. A library's CPU above this figure is its own.
//!
//! It speaks just enough of the protocol for that (the handshake, create,
//! getChildren, delete and closeSession), and fails on anything it does not
//! expect. It is a yardstick, not a client to build on.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub(super) const CREATE: i32 = 1;
pub(super) const DELETE: i32 = 2;
pub(super) const EXISTS: i32 = 3;
pub(super) const GET_CHILDREN: i32 = 8;
pub(super) const CLOSE_SESSION: i32 = -11;
pub(super) const NO_NODE: i32 = -101;
pub(super) const NODE_EXISTS: i32 = -110;
/// The xid of a watch event.
pub(super) const NOTIFICATION: i32 = -1;
pub(super) const PERSISTENT: i32 = 0;
pub(super) const EPHEMERAL_SEQUENTIAL: i32 = 3;
pub(super) const PERMS_ALL: i32 = 31;

/// One session on one blocking socket.
pub struct BareSession {
    sock: TcpStream,
    xid: i32,
    out: Vec<u8>,
    input: Vec<u8>,
    /// Where the unread input starts in `input`.
    start: usize,
    /// Watch events read and not yet waited for.
    events: usize,
}

impl BareSession {
    /// Connects and shakes hands, each step bounded by `timeout`; the
    /// session asks for a `session_timeout` it never pings to keep, so the
    /// caller closes it before that runs out.
    pub fn connect(
        addr: SocketAddr,
        timeout: Duration,
        session_timeout: Duration,
    ) -> io::Result<Self> {
        let sock = TcpStream::connect_timeout(&addr, timeout)?;
        sock.set_nodelay(true)?;
        sock.set_read_timeout(Some(timeout))?;
        sock.set_write_timeout(Some(timeout))?;
        let mut s = BareSession {
            sock,
            xid: 0,
            out: Vec::with_capacity(512),
            input: Vec::with_capacity(64 * 1024),
            start: 0,
            events: 0,
        };
        s.sock.write_all(&connect_request(session_timeout))?;
        let reply = s.frame()?;
        if reply.len() < 16 {
            return Err(bad("a handshake reply too short"));
        }
        Ok(s)
    }

    /// Creates `path` and its missing parents as persistent nodes.
    pub fn ensure_path(&mut self, path: &str) -> io::Result<()> {
        for (i, _) in path.match_indices('/').skip(1) {
            self.create_persistent(&path[..i])?;
        }
        self.create_persistent(path)
    }

    fn create_persistent(&mut self, path: &str) -> io::Result<()> {
        self.out.clear();
        self.push_create(path, b"", PERSISTENT);
        self.sock.write_all(&self.out)?;
        match self.reply("create", path)? {
            (0, _) | (NODE_EXISTS, _) => Ok(()),
            (err, _) => Err(zk_error("create", path, err)),
        }
    }

    /// One lock cycle: [`BareSession::acquire`], then
    /// [`BareSession::release`]. Uncontended, that is an ephemeral
    /// sequential node under `parent` named `prefix` and the listing of
    /// `parent` written together, then the node's delete.
    pub fn lock_cycle(&mut self, parent: &str, prefix: &str, data: &[u8]) -> io::Result<()> {
        let node = self.acquire(parent, prefix, data)?;
        self.release(&node)
    }

    /// The floor's cycle: create, then list, then delete, one round trip
    /// each.
    pub fn sequential_cycle(&mut self, parent: &str, prefix: &str) -> io::Result<()> {
        self.out.clear();
        self.push_create(prefix, b"", EPHEMERAL_SEQUENTIAL);
        self.sock.write_all(&self.out)?;
        let node = self.created(prefix)?;
        self.out.clear();
        self.push_get_children(parent);
        self.sock.write_all(&self.out)?;
        self.children(parent)?;
        self.delete(&node)
    }

    /// Takes the lock at `parent` as Curator's lock does, and returns the
    /// node that holds it: creates an ephemeral sequential `prefix` and
    /// lists `parent` together; then, while a node sorts before ours,
    /// watches the one just before it, waits for its event and lists
    /// again. Release it with [`BareSession::release`].
    pub fn acquire(&mut self, parent: &str, prefix: &str, data: &[u8]) -> io::Result<String> {
        self.out.clear();
        self.push_create(prefix, data, EPHEMERAL_SEQUENTIAL);
        self.push_get_children(parent);
        self.sock.write_all(&self.out)?;
        let node = self.created(prefix)?;
        let ours = node.rsplit('/').next().unwrap_or_default().to_owned();
        let mut children = self.children(parent)?;
        while let Some(before) = predecessor(&children, &ours)? {
            let watched = format!("{parent}/{before}");
            self.out.clear();
            let xid = self.next_xid();
            push_exists(&mut self.out, xid, &watched);
            self.sock.write_all(&self.out)?;
            match self.reply("exists", &watched)? {
                (0, _) => self.wait_event()?,
                (NO_NODE, _) => {} // gone already: no event will come
                (err, _) => return Err(zk_error("exists", &watched, err)),
            }
            self.out.clear();
            self.push_get_children(parent);
            self.sock.write_all(&self.out)?;
            children = self.children(parent)?;
        }
        Ok(node)
    }

    /// Gives up a node [`BareSession::acquire`] returned.
    pub fn release(&mut self, node: &str) -> io::Result<()> {
        self.delete(node)
    }

    /// Waits for the next watch event, unless one was read already.
    fn wait_event(&mut self) -> io::Result<()> {
        while self.events == 0 {
            let frame = self.frame()?;
            match frame
                .get(..4)
                .map(|x| i32::from_be_bytes([x[0], x[1], x[2], x[3]]))
            {
                Some(NOTIFICATION) => self.events += 1,
                _ => return Err(bad("a reply with no request outstanding")),
            }
        }
        self.events -= 1;
        Ok(())
    }

    /// Ends the session on the server and waits for its answer.
    pub fn close(mut self) -> io::Result<()> {
        self.out.clear();
        let xid = self.next_xid();
        push_request(&mut self.out, xid, CLOSE_SESSION, |_| {});
        self.sock.write_all(&self.out)?;
        self.reply("closeSession", "/").map(|_| ())
    }

    fn delete(&mut self, path: &str) -> io::Result<()> {
        self.out.clear();
        let xid = self.next_xid();
        push_delete(&mut self.out, xid, path);
        self.sock.write_all(&self.out)?;
        match self.reply("delete", path)? {
            (0, _) => Ok(()),
            (err, _) => Err(zk_error("delete", path, err)),
        }
    }

    fn created(&mut self, path: &str) -> io::Result<String> {
        let (err, body) = self.reply("create", path)?;
        created(path, err, &body)
    }

    fn children(&mut self, path: &str) -> io::Result<Vec<String>> {
        let (err, body) = self.reply("getChildren", path)?;
        children(path, err, &body)
    }

    fn push_create(&mut self, path: &str, data: &[u8], flags: i32) {
        let xid = self.next_xid();
        push_create(&mut self.out, xid, path, data, flags);
    }

    fn push_get_children(&mut self, path: &str) {
        let xid = self.next_xid();
        push_get_children(&mut self.out, xid, path);
    }

    fn next_xid(&mut self) -> i32 {
        self.xid = self.xid.wrapping_add(1).max(1);
        self.xid
    }

    /// The next reply: its error code and body. Replies come in request
    /// order; watch events between them are counted for
    /// [`BareSession::wait_event`] (no pings are sent, so none come back).
    fn reply(&mut self, op: &str, path: &str) -> io::Result<(i32, Vec<u8>)> {
        let frame = loop {
            let frame = self.frame()?;
            if frame.len() < 16 {
                return Err(bad(&format!("{op} {path}: a reply too short")));
            }
            match i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) {
                NOTIFICATION => self.events += 1,
                _ => break frame,
            }
        };
        let err = i32::from_be_bytes([frame[12], frame[13], frame[14], frame[15]]);
        Ok((err, frame[16..].to_vec()))
    }

    fn frame(&mut self) -> io::Result<Vec<u8>> {
        loop {
            let unread = &self.input[self.start..];
            if unread.len() >= 4 {
                let len = i32::from_be_bytes([unread[0], unread[1], unread[2], unread[3]]);
                let len = usize::try_from(len).map_err(|_| bad("a negative frame length"))?;
                if unread.len() >= 4 + len {
                    let frame = unread[4..4 + len].to_vec();
                    self.start += 4 + len;
                    return Ok(frame);
                }
            }
            self.input.drain(..self.start);
            self.start = 0;
            let had = self.input.len();
            self.input.resize(had + 64 * 1024, 0);
            let n = self.sock.read(&mut self.input[had..]);
            self.input.truncate(had + *n.as_ref().unwrap_or(&0));
            match n? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                _ => continue,
            }
        }
    }
}

/// The framed ConnectRequest of a new session that asks for
/// `session_timeout`.
pub(super) fn connect_request(session_timeout: Duration) -> Vec<u8> {
    let millis = i32::try_from(session_timeout.as_millis()).unwrap_or(i32::MAX);
    let mut body = Vec::new();
    put_int(&mut body, 0); // protocol version
    body.extend(0i64.to_be_bytes()); // last zxid seen
    put_int(&mut body, millis);
    body.extend(0i64.to_be_bytes()); // session id: a new session
    put_bytes(&mut body, &[0; 16]); // password
    body.push(0); // not read-only
    let mut out = Vec::new();
    put_frame(&mut out, &body);
    out
}

/// Appends one request frame to `out`: its header, then what `body` writes.
pub(super) fn push_request(
    out: &mut Vec<u8>,
    xid: i32,
    kind: i32,
    body: impl FnOnce(&mut Vec<u8>),
) {
    let start = out.len();
    put_int(out, 0); // the length, filled in below
    put_int(out, xid);
    put_int(out, kind);
    body(out);
    let len = (out.len() - start - 4) as i32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

pub(super) fn push_create(out: &mut Vec<u8>, xid: i32, path: &str, data: &[u8], flags: i32) {
    push_request(out, xid, CREATE, |out| {
        put_str(out, path);
        put_bytes(out, data);
        put_int(out, 1); // one ACL: world:anyone, all permissions
        put_int(out, PERMS_ALL);
        put_str(out, "world");
        put_str(out, "anyone");
        put_int(out, flags);
    });
}

pub(super) fn push_get_children(out: &mut Vec<u8>, xid: i32, path: &str) {
    push_request(out, xid, GET_CHILDREN, |out| {
        put_str(out, path);
        out.push(0); // no watch
    });
}

/// An `exists` that leaves a watch on `path`.
pub(super) fn push_exists(out: &mut Vec<u8>, xid: i32, path: &str) {
    push_request(out, xid, EXISTS, |out| {
        put_str(out, path);
        out.push(1); // watch
    });
}

pub(super) fn push_delete(out: &mut Vec<u8>, xid: i32, path: &str) {
    push_request(out, xid, DELETE, |out| {
        put_str(out, path);
        put_int(out, -1); // any version
    });
}

/// The path a create of `path` made, from its reply's error code and body.
pub(super) fn created(path: &str, err: i32, body: &[u8]) -> io::Result<String> {
    match err {
        0 => get_str(body, &mut 0).ok_or_else(|| bad("a create reply without a path")),
        err => Err(zk_error("create", path, err)),
    }
}

/// The children of `path`, from a getChildren reply's error code and body.
pub(super) fn children(path: &str, err: i32, body: &[u8]) -> io::Result<Vec<String>> {
    if err != 0 {
        return Err(zk_error("getChildren", path, err));
    }
    let at = &mut 0;
    let count = get_int(body, at).ok_or_else(|| bad("a listing without a count"))?;
    (0..count.max(0))
        .map(|_| get_str(body, at).ok_or_else(|| bad("a listing cut short")))
        .collect()
}

pub(super) fn put_int(out: &mut Vec<u8>, v: i32) {
    out.extend(v.to_be_bytes());
}

pub(super) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_int(out, b.len() as i32);
    out.extend(b);
}

pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

pub(super) fn put_frame(out: &mut Vec<u8>, body: &[u8]) {
    put_bytes(out, body);
}

pub(super) fn get_int(b: &[u8], at: &mut usize) -> Option<i32> {
    let v = i32::from_be_bytes(b.get(*at..*at + 4)?.try_into().ok()?);
    *at += 4;
    Some(v)
}

pub(super) fn get_str(b: &[u8], at: &mut usize) -> Option<String> {
    let len = usize::try_from(get_int(b, at)?).ok()?;
    let s = std::str::from_utf8(b.get(*at..*at + len)?).ok()?;
    *at += len;
    Some(s.to_owned())
}

/// The node just before `ours` in the lock's queue (by sequence number,
/// the last ten characters), or `None` if ours is first.
pub(super) fn predecessor(children: &[String], ours: &str) -> io::Result<Option<String>> {
    let seq = |name: &str| {
        name.get(name.len().saturating_sub(10)..)
            .unwrap_or(name)
            .to_owned()
    };
    let mut sorted: Vec<&String> = children.iter().collect();
    sorted.sort_by_key(|c| seq(c));
    let at = sorted
        .iter()
        .position(|c| *c == ours)
        .ok_or_else(|| bad(&format!("our node {ours} is not listed")))?;
    Ok(at.checked_sub(1).map(|i| sorted[i].clone()))
}

pub(super) fn zk_error(op: &str, path: &str, code: i32) -> io::Error {
    io::Error::other(format!("{op} {path}: ZooKeeper error {code}"))
}

pub(super) fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use latchkey_framework::Client;
    use latchkey_test::TestingServer;

    #[test]
    fn a_cycle_leaves_no_node_and_errors_name_the_path() {
        let server = TestingServer::start().expect("a ZooKeeper server");
        let timeout = Duration::from_secs(10);
        let mut s = BareSession::connect(server.addr(), timeout, timeout).unwrap();
        s.ensure_path("/bare/a/lock").unwrap();
        s.ensure_path("/bare/a/lock").unwrap(); // already there: fine
        for _ in 0..3 {
            s.lock_cycle("/bare/a/lock", "/bare/a/lock/_c_x-lock-", b"who")
                .unwrap();
            s.sequential_cycle("/bare/a/lock", "/bare/a/lock/lock-")
                .unwrap();
        }
        // Looked at before the session ends, which would take its
        // ephemeral nodes with it.
        let c = Client::new(&server.connect_string()).unwrap();
        c.start().unwrap();
        c.block_until_connected_or_err(timeout).unwrap();
        assert_eq!(
            c.get_children("/bare/a/lock").unwrap(),
            Vec::<String>::new()
        );
        // Six creates and six deletes under the parent: every cycle
        // created once and deleted once.
        let stat = c.exists("/bare/a/lock").unwrap().unwrap();
        assert_eq!(stat.cversion, 12, "{stat:?}");
        let e = s.delete("/bare/missing").unwrap_err();
        assert!(e.to_string().contains("delete /bare/missing"), "{e}");
        s.close().unwrap();
    }

    #[test]
    fn contending_sessions_take_turns_one_at_a_time() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let server = TestingServer::start().expect("a ZooKeeper server");
        let timeout = Duration::from_secs(10);
        let parent = "/bare/turns";
        BareSession::connect(server.addr(), timeout, timeout)
            .unwrap()
            .ensure_path(parent)
            .unwrap();
        let holders = Arc::new(AtomicUsize::new(0));
        let turns = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let (holders, turns, addr) = (holders.clone(), turns.clone(), server.addr());
                std::thread::spawn(move || {
                    let mut s = BareSession::connect(addr, timeout, timeout).unwrap();
                    let prefix = format!("{parent}/_c_{i}-lock-");
                    for _ in 0..25 {
                        let node = s.acquire(parent, &prefix, b"").unwrap();
                        assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                        std::thread::yield_now();
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
        assert_eq!(turns.load(Ordering::SeqCst), 100);
    }
}

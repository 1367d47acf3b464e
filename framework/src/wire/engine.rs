//! The engine: one thread, started with the process' first session, that
//! owns every live connection of every session and drives them all on one
//! `mio` poll. It only moves bytes and keeps time; what the bytes mean is
//! the connection's business ([`Driven`]).
//!
//! Connections come in through [`Engine::attach`] (from a session's
//! connector thread, once the handshake is done), and callers ask for a
//! connection to be served through [`Engine::ready`] (a request queued, a
//! close). Either wakes the poll. A connection is served when its socket
//! has an event, when it was asked to be, and when its own clock says so
//! (a ping, silence); the poll sleeps until the earliest of those clocks,
//! kept in a heap so that a thousand idle connections cost nothing between
//! their pings. Nothing on this thread blocks: no name lookup, connect,
//! handshake or user callback runs here, and no user closure is dropped.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use mio::{Events, Poll, Registry, Token, Waker};
use parking_lot::Mutex;

/// The waker's token; connections get the others, never reused.
const WAKE: Token = Token(0);

thread_local! {
    static ON_ENGINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this is the engine's thread (a waker running there), where
/// nothing may wait for a reply: the engine itself would have to read it.
pub(crate) fn on_engine_thread() -> bool {
    ON_ENGINE.with(std::cell::Cell::get)
}

/// A live connection, as the engine sees it.
pub(crate) trait Driven: Send {
    /// Registers the socket with the engine's poll, edge-triggered.
    fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()>;

    /// Takes the socket out of the engine's poll.
    fn deregister(&mut self, registry: &Registry);

    /// The connection is registered under `token`: it may go live.
    fn attached(&mut self, token: Token);

    /// Does what is due: `readable` after a socket event (reads must go on
    /// until the socket has nothing more, the poll being edge-triggered).
    /// False once the connection is over.
    fn serve(&mut self, readable: bool) -> bool;

    /// When the connection must next be served without any event.
    fn next_wake(&self) -> Instant;

    /// Deregistered and done with: ends the connection.
    fn finish(self: Box<Self>);
}

/// What other threads hand the engine between two polls.
#[derive(Default)]
struct Incoming {
    next_token: usize,
    attach: Vec<(Token, Box<dyn Driven>)>,
    ready: Vec<Token>,
}

/// The handle every session shares.
pub(crate) struct Engine {
    waker: Waker,
    /// The poll's epoll instance, for changing one socket's interest from
    /// a connection's own service (which has no `mio` registry at hand).
    epoll: nix::sys::epoll::Epoll,
    incoming: Mutex<Incoming>,
}

impl Engine {
    /// The process' engine, started on first use.
    pub(crate) fn get() -> io::Result<&'static Arc<Engine>> {
        static ENGINE: OnceLock<Result<Arc<Engine>, String>> = OnceLock::new();
        ENGINE
            .get_or_init(|| Engine::start().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| io::Error::other(format!("cannot start the ZooKeeper engine: {e}")))
    }

    fn start() -> io::Result<Arc<Engine>> {
        let poll = Poll::new()?;
        let engine = Arc::new(Engine {
            waker: Waker::new(poll.registry(), WAKE)?,
            epoll: nix::sys::epoll::Epoll(
                std::os::fd::AsFd::as_fd(poll.registry()).try_clone_to_owned()?,
            ),
            incoming: Mutex::new(Incoming {
                next_token: WAKE.0 + 1,
                ..Default::default()
            }),
        });
        let serving = Arc::clone(&engine);
        crate::sched::spawn("latchkey-engine", move || serving.run(poll))?;
        Ok(engine)
    }

    /// Hands a connection over; returns the token it will be served under.
    pub(crate) fn attach(&self, conn: Box<dyn Driven>) -> Token {
        let token = {
            let mut incoming = self.incoming.lock();
            let token = Token(incoming.next_token);
            incoming.next_token += 1;
            incoming.attach.push((token, conn));
            token
        };
        self.wake();
        token
    }

    /// Asks for the connection under `token` to be served soon.
    pub(crate) fn ready(&self, token: Token) {
        self.incoming.lock().ready.push(token);
        self.wake();
    }

    /// Sets what the poll watches `fd` (registered under `token`) for,
    /// edge-triggered, as `mio` registers `interest`.
    pub(crate) fn set_interest(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        token: Token,
        interest: mio::Interest,
    ) -> io::Result<()> {
        use nix::sys::epoll::{EpollEvent, EpollFlags};
        let mut flags = EpollFlags::EPOLLET;
        if interest.is_readable() {
            flags |= EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP;
        }
        if interest.is_writable() {
            flags |= EpollFlags::EPOLLOUT;
        }
        let mut event = EpollEvent::new(flags, token.0 as u64);
        self.epoll.modify(fd, &mut event).map_err(io::Error::from)
    }

    fn wake(&self) {
        if let Err(e) = self.waker.wake() {
            log::error!("cannot wake the ZooKeeper engine: {e}");
        }
    }

    fn run(&self, mut poll: Poll) {
        ON_ENGINE.with(|on| on.set(true));
        let mut conns: HashMap<Token, Served> = HashMap::new();
        // Each connection's next wake, earliest first. An entry whose time
        // is not its connection's `scheduled` is stale, and skipped.
        let mut wakes: BinaryHeap<Reverse<(Instant, Token)>> = BinaryHeap::new();
        let mut events = Events::with_capacity(256);
        let mut due: Vec<(Token, bool)> = Vec::new();
        let mut timeout = None;
        loop {
            if let Err(e) = poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    log::error!("the ZooKeeper engine's poll failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            let (attach, ready) = {
                let mut incoming = self.incoming.lock();
                (
                    std::mem::take(&mut incoming.attach),
                    std::mem::take(&mut incoming.ready),
                )
            };
            for (token, mut conn) in attach {
                match conn.register(poll.registry(), token) {
                    Ok(()) => {
                        conn.attached(token);
                        let scheduled = conn.next_wake();
                        wakes.push(Reverse((scheduled, token)));
                        conns.insert(token, Served { conn, scheduled });
                        due.push((token, true));
                    }
                    Err(e) => {
                        log::warn!("cannot poll a connection: {e}");
                        conn.finish();
                    }
                }
            }
            due.extend(
                events
                    .iter()
                    .filter(|e| e.token() != WAKE)
                    .map(|e| (e.token(), true)),
            );
            due.extend(ready.into_iter().map(|t| (t, false)));
            let now = Instant::now();
            while let Some(&Reverse((at, token))) = wakes.peek() {
                if at > now {
                    break;
                }
                wakes.pop();
                if conns.get(&token).is_some_and(|s| s.scheduled == at) {
                    due.push((token, false));
                }
            }
            // Each connection once, readable if any of its reasons says so.
            due.sort_unstable_by_key(|(t, readable)| (*t, !readable));
            due.dedup_by_key(|(t, _)| *t);
            for (token, readable) in due.drain(..) {
                let Some(served) = conns.get_mut(&token) else {
                    continue; // gone already
                };
                // A bug in one connection's handling ends that connection,
                // not the engine every session shares.
                let conn = &mut served.conn;
                let alive =
                    catch_unwind(AssertUnwindSafe(|| conn.serve(readable))).unwrap_or_else(|_| {
                        log::error!("serving a ZooKeeper connection panicked; dropping it");
                        false
                    });
                if alive {
                    // Its clocks moved: wake for it when they say, unless
                    // an entry already does so sooner (then it is served,
                    // and rescheduled, a little early).
                    let next = served.conn.next_wake();
                    let stale = served.scheduled <= now;
                    if stale || next < served.scheduled {
                        served.scheduled = next;
                        wakes.push(Reverse((next, token)));
                    }
                } else if let Some(mut served) = conns.remove(&token) {
                    served.conn.deregister(poll.registry());
                    if catch_unwind(AssertUnwindSafe(|| served.conn.finish())).is_err() {
                        log::error!("ending a ZooKeeper connection panicked");
                    }
                }
            }
            let now = Instant::now();
            timeout = wakes.peek().map(|Reverse((at, _))| {
                at.saturating_duration_since(now)
                    .max(Duration::from_millis(1))
            });
        }
    }
}

/// A connection and when the engine next wakes for it.
struct Served {
    conn: Box<dyn Driven>,
    scheduled: Instant,
}

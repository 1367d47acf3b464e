//! An exhaustive model check of the lock protocol (`stateright`); see
//! docs/RELIABILITY.md, "Model checking".
//!
//! The model is ZooKeeper as the recipes see it: a lock path whose children
//! carry a sequence from the path's counter, ephemeral nodes that go with
//! their session, one-shot data watches (and the semaphore's children
//! watch), and sessions that may end on the server between any two steps
//! (their nodes vanish, the watches on those nodes fire; the client learns
//! of it later and goes on in a new session). Every request is one atomic
//! step; between steps any client, or an expiry, may go next.
//!
//! What each client decides is the recipes' own code, called from here:
//! the queue order (`sort_children`), `LockDriver::decide` of the mutex's
//! `StandardDriver` and the read-write lock's `ReadDriver`, the downgrade's
//! `LockDriver::sorting_sequence`, the waiter's rule once its wait ends
//! (`after_wake`: list again whatever woke it, or give up at the deadline),
//! and the semaphore's `lease_granted` and `may_wait_for_room`. The
//! waiter's loops (`wait_for_lock`, the semaphore's `wait_for_room`) block
//! on a real client, so the model takes their steps: list the children
//! with the create, decide, watch the node the driver names (a node already
//! gone ends the wait at once), wait for a wake-up, then follow
//! `after_wake`; a waiter whose session was replaced queues again.
//!
//! Variants revert this week's fixes inside the model only, and must give
//! counterexamples: a read driver whose downgrade node queues at the end
//! (no `sorting_sequence`), and a waiter that takes the lock when the
//! deletion of its only blocker wakes it, without listing.
//!
//! The CI configurations run in seconds; bigger ones are `#[ignore]`d:
//! `cargo test --release -p latchkey-test --test model -- --ignored --nocapture bigger`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use latchkey_recipes::model_support::{
    after_wake, lease_granted, may_wait_for_room, sort_children, AfterWake, ReadDriver, WriteHold,
    WriteSide,
};
use latchkey_recipes::{
    Decision, LockDriver, StandardDriver, LEASE_NAME, LOCK_NAME, READ_LOCK_NAME, WRITE_LOCK_NAME,
};
use stateright::{Checker, HasDiscoveries, Model, Path, Property};

/// Kinds of lock node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    /// An `InterProcessMutex`.
    Mutex,
    /// The read side of an `InterProcessReadWriteLock`.
    Read,
    /// The write side of an `InterProcessReadWriteLock`.
    Write,
    /// A semaphore's internal mutex (`<path>/locks`).
    SemLock,
    /// A semaphore lease (`<path>/leases`).
    Lease,
}

impl Kind {
    fn lock_name(self) -> &'static str {
        match self {
            Kind::Mutex | Kind::SemLock => LOCK_NAME,
            Kind::Read => READ_LOCK_NAME,
            Kind::Write => WRITE_LOCK_NAME,
            Kind::Lease => LEASE_NAME,
        }
    }

    /// The directory its nodes live in: 0 the lock path, 1 the leases.
    fn dir(self) -> usize {
        match self {
            Kind::Lease => LEASES,
            _ => LOCKS,
        }
    }

    fn sort_names(self) -> &'static [&'static str] {
        match self {
            Kind::Read | Kind::Write => &[READ_LOCK_NAME, WRITE_LOCK_NAME],
            _ => &[LOCK_NAME],
        }
    }

    fn max_leases(self) -> usize {
        match self {
            Kind::Read => usize::MAX,
            _ => 1,
        }
    }
}

const LOCKS: usize = 0;
const LEASES: usize = 1;
const DIR_PATHS: [&str; 2] = ["/lock", "/sem/leases"];

/// One step of a client's program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Op {
    /// Acquire (blocking) a lock of this kind, or a lease.
    Take(Kind),
    /// Acquire with a timeout, which may pass at any moment of the wait.
    TryTake(Kind),
    /// Release it (the lease: return it).
    Give(Kind),
}

/// The lock protocol's rules as the model runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rules {
    /// What ships.
    Shipped,
    /// The downgrade read node queues at the end (before CURATOR-621's fix).
    DowngradeAtEnd,
    /// A waiter woken by its only blocker's deletion takes the lock without
    /// listing again: the fast path as issue 14 found it (every waiter of
    /// the standard driver whose blocker is the node just before it).
    WaiterShortcut,
    /// The fast path as it stood after the downgrade fix, until the
    /// randomized checker's seed 103 finding: a writer took it only when
    /// its blocker was a read node; mutex waiters as before.
    ReadBlockerShortcut,
}

/// A node in one of the model's directories.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Znode {
    name: String,
    owner: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Dir {
    /// The sequence the next sequential child gets.
    counter: u32,
    /// The children in creation order (as the server keeps them).
    children: Vec<Znode>,
}

/// What woke a waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Wake {
    /// The deletion of the node it watched, and nothing else.
    Deleted,
    /// Anything else, or more than one event.
    Other,
}

/// A lock or lease a client holds (or held until its session went).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Hold {
    kind: Kind,
    name: String,
    /// The session the node was created in.
    session: u8,
}

/// Where a client is in its program.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Pc {
    /// About to run `program[step]`.
    Next,
    /// Creates its node (the listing rides along) and decides.
    Create(Kind),
    /// About to watch `node` (getData with a watch).
    Watch(Waiter),
    /// Watch set on `node`: waits for a wake-up.
    Wait(Waiter),
    /// Lists the children again and decides.
    List(Waiter),
    /// Holds the semaphore's internal lock: creates its lease node.
    LeaseCreate,
    /// Lists the leases (with a children watch) and applies the rule to
    /// its lease node, created in the session given.
    LeaseList(String, u8),
    /// Waits for the leases to change.
    LeaseWait(String, u8),
    /// Releases the semaphore's internal lock, then goes on.
    LeaseUnlock,
    /// Finished its program.
    Done,
}

/// A waiter's own node and what it waits for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Waiter {
    kind: Kind,
    ours: String,
    /// The session its node was created in.
    session: u8,
    /// The node it watches.
    node: String,
    /// Whether that node's deletion alone would let it in (the old fast
    /// path's `only_blocker`).
    only_blocker: bool,
    /// Whether the wait may time out.
    timed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ClientState {
    /// The session the client knows.
    session: u8,
    /// Its session has ended on the server, and the client does not know
    /// yet: its requests wait for the new session; what it decides alone
    /// (after a wake-up) it may still do.
    expired: bool,
    step: usize,
    pc: Pc,
    holds: Vec<Hold>,
    woken: Option<Wake>,
    /// Attempts so far, which make protected names unique.
    attempts: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    dirs: [Dir; 2],
    /// Data watches on the lock path's children: (client, child name).
    watches: BTreeSet<(usize, String)>,
    /// Clients with a children watch on the leases.
    lease_watchers: BTreeSet<usize>,
    clients: Vec<ClientState>,
    expiries_left: u8,
    /// The first grant of a node that was gone (a record the model keeps
    /// to check that no grant is ever made so).
    stale_grant: Option<String>,
    /// The first wait that ended against its deadline: given up before it,
    /// or waited on past it.
    bad_wait_end: Option<String>,
}

/// One client's step, or a session expiry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// The client's next step.
    Step(usize),
    /// The server ends the client's session: its nodes go, the watches on
    /// them fire (its own included).
    Expire(usize),
    /// The client learns that its session ended and goes on in a new one.
    Learn(usize),
    /// A timed wait gives up: the waiter deletes its node.
    Timeout(usize),
}

/// The protocol model: clients running `programs` with `max_expiries`
/// session expiries in all, under `rules`.
struct LockModel {
    programs: Vec<Vec<Op>>,
    max_expiries: u8,
    max_leases: i64,
    rules: Rules,
    /// Whether the server lists children newest first. ZooKeeper lists
    /// them in no fixed order; the sort keeps that order for equal keys (a
    /// downgrade read node and its write node), so both are checked.
    newest_first: bool,
}

/// The read driver's view of a model client's write lock.
struct ModelWrite(Option<WriteHold>);

impl WriteSide for ModelWrite {
    fn write_hold(&self) -> Option<WriteHold> {
        self.0.clone()
    }
}

/// The read driver before CURATOR-621's fix: the shipped decision, but the
/// downgrade read node is sequential and queues at the end.
struct DowngradeAtEnd(ReadDriver<ModelWrite>);

impl LockDriver for DowngradeAtEnd {
    fn decide(
        &self,
        children: &[String],
        ours: &str,
        max_leases: usize,
    ) -> latchkey_framework::Result<Decision> {
        self.0.decide(children, ours, max_leases)
    }
}

impl LockModel {
    fn new(programs: Vec<Vec<Op>>, max_expiries: u8, rules: Rules) -> Self {
        LockModel {
            programs,
            max_expiries,
            max_leases: 2,
            rules,
            newest_first: false,
        }
    }

    fn newest_first(self) -> Self {
        LockModel {
            newest_first: true,
            ..self
        }
    }

    /// The driver a client's lock of `kind` decides with now.
    fn driver(&self, client: &ClientState, kind: Kind) -> Box<dyn LockDriver> {
        if kind != Kind::Read {
            return Box::new(StandardDriver);
        }
        let write = client.holds.iter().find(|h| h.kind == Kind::Write);
        let view = ModelWrite(write.map(|h| {
            WriteHold::new(
                format!("{}/{}", DIR_PATHS[LOCKS], h.name),
                h.session != client.session,
            )
        }));
        let driver = ReadDriver::new(view);
        match self.rules {
            Rules::DowngradeAtEnd => Box::new(DowngradeAtEnd(driver)),
            _ => Box::new(driver),
        }
    }
}

impl State {
    /// Deletes `name` from `dir` if it is there, firing its watches.
    fn delete(&mut self, dir: usize, name: &str) {
        let before = self.dirs[dir].children.len();
        self.dirs[dir].children.retain(|n| n.name != name);
        if self.dirs[dir].children.len() == before {
            return;
        }
        if dir == LOCKS {
            let fired: Vec<usize> = self
                .watches
                .iter()
                .filter(|(_, n)| n == name)
                .map(|(c, _)| *c)
                .collect();
            for c in fired {
                self.watches.remove(&(c, name.to_owned()));
                self.wake(c, Wake::Deleted);
            }
        }
        self.children_changed(dir);
    }

    fn children_changed(&mut self, dir: usize) {
        if dir == LEASES {
            for c in std::mem::take(&mut self.lease_watchers) {
                self.wake(c, Wake::Other);
            }
        }
    }

    fn wake(&mut self, client: usize, why: Wake) {
        let woken = &mut self.clients[client].woken;
        *woken = Some(if woken.is_some() { Wake::Other } else { why });
    }

    fn exists(&self, dir: usize, name: &str) -> bool {
        self.dirs[dir].children.iter().any(|n| n.name == name)
    }

    /// The children of `dir` in creation order, sorted as the recipes do.
    fn sorted(&self, dir: usize, names: &[&str]) -> Vec<String> {
        self.listed(dir, names, false)
    }

    /// The children of `dir` as a client lists them (in creation order or
    /// newest first), sorted as the recipes do.
    fn listed(&self, dir: usize, names: &[&str], newest_first: bool) -> Vec<String> {
        let mut children: Vec<String> = self.dirs[dir]
            .children
            .iter()
            .map(|n| n.name.clone())
            .collect();
        if newest_first {
            children.reverse();
        }
        sort_children(&mut children, names);
        children
    }

    /// A client's holds whose node still stands in its live session.
    fn live_holds(&self, client: usize) -> impl Iterator<Item = &Hold> {
        let c = &self.clients[client];
        c.holds
            .iter()
            .filter(move |h| h.session == c.session && self.exists(h.kind.dir(), &h.name))
    }

    fn holders_of(&self, kinds: &[Kind]) -> usize {
        (0..self.clients.len())
            .filter(|&c| self.live_holds(c).any(|h| kinds.contains(&h.kind)))
            .count()
    }
}

impl LockModel {
    /// A client's decision on a listing of its lock's children.
    fn decide(&self, state: &mut State, client: usize, kind: Kind, ours: String, session: u8) {
        let c = &state.clients[client];
        // The waiter's loop first checks that its node's session is still
        // the client's: if not, it queues again.
        if c.session != session {
            state.clients[client].pc = Pc::Create(kind);
            return;
        }
        let children = state.listed(LOCKS, kind.sort_names(), self.newest_first);
        let decision = self
            .driver(c, kind)
            .decide(&children, &ours, kind.max_leases());
        let c = &mut state.clients[client];
        c.woken = None; // the waiter's epoch is read here
        match decision {
            Ok(Decision::Acquired) => self.acquired(state, client, kind, ours, session),
            Ok(Decision::WaitFor { node }) => {
                let index = children.iter().position(|n| *n == ours).unwrap_or(0);
                let timed = matches!(self.programs[client].get(c.step), Some(Op::TryTake(_)));
                c.pc = Pc::Watch(Waiter {
                    kind,
                    ours,
                    session,
                    only_blocker: kind != Kind::Read && index == kind.max_leases(),
                    timed,
                    node,
                });
            }
            // Our node is gone (its session ended): queue again.
            Err(_) => c.pc = Pc::Create(kind),
        }
    }

    fn acquired(&self, state: &mut State, client: usize, kind: Kind, name: String, session: u8) {
        if !state.exists(kind.dir(), &name) && state.stale_grant.is_none() {
            state.stale_grant = Some(format!("client {} {name}", client_name(client)));
        }
        let c = &mut state.clients[client];
        c.holds.push(Hold {
            kind,
            name,
            session,
        });
        if kind == Kind::SemLock {
            c.pc = Pc::LeaseCreate;
        } else {
            c.step += 1;
            c.pc = Pc::Next;
        }
    }

    fn create(&self, state: &mut State, client: usize, kind: Kind) -> String {
        let c = &mut state.clients[client];
        c.attempts += 1;
        let protected = format!("_c_{}{}-", (b'a' + client as u8) as char, c.attempts);
        let sequence = self.driver(c, kind).sorting_sequence();
        let dir = &mut state.dirs[kind.dir()];
        let name = match sequence {
            Some(seq) => format!("{protected}{}{seq}", kind.lock_name()),
            None => format!("{protected}{}{:010}", kind.lock_name(), dir.counter),
        };
        dir.counter += 1;
        dir.children.push(Znode {
            name: name.clone(),
            owner: client,
        });
        state.children_changed(kind.dir());
        name
    }

    /// Releases a client's hold of `kind` (a node of an earlier session
    /// went with it: the delete is skipped, as `delete_ephemeral` does).
    fn release(&self, state: &mut State, client: usize, kind: Kind) {
        let c = &mut state.clients[client];
        let Some(i) = c.holds.iter().position(|h| h.kind == kind) else {
            return;
        };
        let hold = c.holds.remove(i);
        if hold.session == c.session {
            state.delete(kind.dir(), &hold.name);
        }
    }

    fn step(&self, state: &mut State, client: usize) {
        let pc = state.clients[client].pc.clone();
        match pc {
            Pc::Next => {
                let c = &mut state.clients[client];
                match self.programs[client].get(c.step) {
                    None => c.pc = Pc::Done,
                    Some(Op::Take(Kind::Lease)) => c.pc = Pc::Create(Kind::SemLock),
                    Some(&Op::Take(kind) | &Op::TryTake(kind)) => c.pc = Pc::Create(kind),
                    Some(&Op::Give(kind)) => {
                        c.step += 1;
                        self.release(state, client, kind);
                    }
                }
            }
            Pc::Create(kind) => {
                let ours = self.create(state, client, kind);
                let session = state.clients[client].session;
                self.decide(state, client, kind, ours, session);
            }
            Pc::Watch(w) => {
                if state.exists(LOCKS, &w.node) {
                    state.watches.insert((client, w.node.clone()));
                    state.clients[client].pc = Pc::Wait(w);
                } else {
                    self.wait_ended(state, client, w, false);
                }
            }
            Pc::Wait(w) => {
                let woken = state.clients[client].woken.take();
                let fast_path = match self.rules {
                    Rules::WaiterShortcut => w.only_blocker,
                    Rules::ReadBlockerShortcut => {
                        w.only_blocker && (w.kind != Kind::Write || w.node.contains(READ_LOCK_NAME))
                    }
                    _ => false,
                };
                if fast_path && woken == Some(Wake::Deleted) {
                    self.acquired(state, client, w.kind, w.ours, w.session);
                } else {
                    self.wait_ended(state, client, w, false);
                }
            }
            Pc::List(w) => self.decide(state, client, w.kind, w.ours, w.session),
            Pc::LeaseCreate => {
                let ours = self.create(state, client, Kind::Lease);
                let session = state.clients[client].session;
                state.clients[client].pc = Pc::LeaseList(ours, session);
            }
            Pc::LeaseList(ours, session) => {
                let c = &state.clients[client];
                let internal_lock_lost = c
                    .holds
                    .iter()
                    .find(|h| h.kind == Kind::SemLock)
                    .is_none_or(|h| h.session != c.session);
                let gone = !may_wait_for_room(c.session.into(), session.into(), internal_lock_lost)
                    || !state.exists(LEASES, &ours);
                let c = &mut state.clients[client];
                c.woken = None; // the wait's epoch is read here
                if gone {
                    // The semaphore drops its lease node: deleted if this
                    // session made it (the internal lock went with an
                    // older one), skipped if it went with its session.
                    // Then it releases the internal lock and tries again.
                    c.pc = Pc::LeaseUnlock;
                    if c.session == session {
                        state.delete(LEASES, &ours);
                    }
                    return;
                }
                let nodes = state.dirs[LEASES].children.len();
                if lease_granted(nodes, self.max_leases) {
                    let c = &mut state.clients[client];
                    c.holds.push(Hold {
                        kind: Kind::Lease,
                        name: ours,
                        session,
                    });
                    c.step += 1;
                    c.pc = Pc::LeaseUnlock;
                } else {
                    state.lease_watchers.insert(client);
                    state.clients[client].pc = Pc::LeaseWait(ours, session);
                }
            }
            Pc::LeaseWait(ours, session) => {
                state.clients[client].pc = Pc::LeaseList(ours, session);
            }
            Pc::LeaseUnlock => {
                self.release(state, client, Kind::SemLock);
                state.clients[client].pc = Pc::Next;
            }
            Pc::Done => {}
        }
    }

    fn expire(&self, state: &mut State, client: usize) {
        state.expiries_left -= 1;
        state.clients[client].expired = true;
        // The session's nodes go in one transaction; the watches on them
        // fire, those of the session itself included, before it closes.
        for dir in [LOCKS, LEASES] {
            let gone: Vec<String> = state.dirs[dir]
                .children
                .iter()
                .filter(|n| n.owner == client)
                .map(|n| n.name.clone())
                .collect();
            for name in gone {
                state.delete(dir, &name);
            }
        }
        state.watches.retain(|(c, _)| *c != client);
        state.lease_watchers.remove(&client);
    }

    fn learn(&self, state: &mut State, client: usize) {
        let c = &mut state.clients[client];
        c.expired = false;
        c.session += 1;
        state.wake(client, Wake::Other);
    }

    fn time_out(&self, state: &mut State, client: usize) {
        let Pc::Wait(w) = state.clients[client].pc.clone() else {
            return;
        };
        self.wait_ended(state, client, w, true);
    }

    /// The recipes' rule once a wait ends: list again, or give up (the
    /// node goes, if its session still stands) and go on.
    fn wait_ended(&self, state: &mut State, client: usize, w: Waiter, deadline_passed: bool) {
        let next = after_wake(deadline_passed);
        if (next == AfterWake::GiveUp) != deadline_passed && state.bad_wait_end.is_none() {
            state.bad_wait_end = Some(format!(
                "client {} {:?} with its deadline {}",
                client_name(client),
                next,
                if deadline_passed { "passed" } else { "ahead" }
            ));
        }
        match next {
            AfterWake::ListAgain => state.clients[client].pc = Pc::List(w),
            AfterWake::GiveUp => {
                if w.session == state.clients[client].session {
                    state.delete(LOCKS, &w.ours);
                }
                let c = &mut state.clients[client];
                c.woken = None;
                c.step += 1;
                c.pc = Pc::Next;
            }
        }
    }

    /// Whether a client can do anything: take a step, learn of its
    /// session's end, or time out.
    fn can_move(&self, state: &State, client: usize) -> bool {
        let c = &state.clients[client];
        self.can_step(state, client) || c.expired || matches!(&c.pc, Pc::Wait(w) if w.timed)
    }

    /// Whether a client can take a step: a waiter only once woken; one
    /// whose session ended unseen only what needs no request.
    fn can_step(&self, state: &State, client: usize) -> bool {
        let c = &state.clients[client];
        match c.pc {
            Pc::Done => false,
            Pc::Wait(_) | Pc::LeaseWait(..) => c.woken.is_some(),
            Pc::Next => {
                let op = self.programs[client].get(c.step);
                !(c.expired && matches!(op, Some(Op::Give(_))))
            }
            _ => !c.expired,
        }
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let client = ClientState {
            session: 0,
            expired: false,
            step: 0,
            pc: Pc::Next,
            holds: Vec::new(),
            woken: None,
            attempts: 0,
        };
        vec![State {
            dirs: Default::default(),
            watches: BTreeSet::new(),
            lease_watchers: BTreeSet::new(),
            clients: vec![client; self.programs.len()],
            expiries_left: self.max_expiries,
            stale_grant: None,
            bad_wait_end: None,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, c) in state.clients.iter().enumerate() {
            if self.can_step(state, i) {
                actions.push(Action::Step(i));
            }
            if c.expired {
                actions.push(Action::Learn(i));
            } else if state.expiries_left > 0 && c.pc != Pc::Done {
                actions.push(Action::Expire(i));
            }
            if matches!(&c.pc, Pc::Wait(w) if w.timed) {
                actions.push(Action::Timeout(i));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Step(c) => self.step(&mut state, c),
            Action::Expire(c) => self.expire(&mut state, c),
            Action::Learn(c) => self.learn(&mut state, c),
            Action::Timeout(c) => self.time_out(&mut state, c),
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("exclusion", |model: &LockModel, s: &State| {
                let writers = s.holders_of(&[Kind::Mutex, Kind::Write]);
                let readers = s.holders_of(&[Kind::Read]);
                let both = (0..s.clients.len()).any(|c| {
                    let kinds: Vec<Kind> = s.live_holds(c).map(|h| h.kind).collect();
                    kinds.contains(&Kind::Write) && kinds.contains(&Kind::Read)
                });
                let leases = (0..s.clients.len())
                    .map(|c| s.live_holds(c).filter(|h| h.kind == Kind::Lease).count())
                    .sum::<usize>();
                let mixed = writers > 0 && readers > usize::from(both);
                writers <= 1
                    && !mixed
                    && s.holders_of(&[Kind::SemLock]) <= 1
                    && i64::try_from(leases).is_ok_and(|n| n <= model.max_leases)
            }),
            Property::always("no grant of a node that is gone", |_, s: &State| {
                s.stale_grant.is_none()
            }),
            Property::always("a wait ends as its deadline says", |_, s: &State| {
                s.bad_wait_end.is_none()
            }),
            Property::always("no deadlock", |model: &LockModel, s: &State| {
                s.clients.iter().all(|c| c.pc == Pc::Done)
                    || (0..s.clients.len()).any(|i| model.can_move(s, i))
            }),
            Property::sometimes("someone acquires", |_, s: &State| {
                s.clients.iter().any(|c| !c.holds.is_empty())
            }),
            Property::sometimes("every client finishes", |_, s: &State| {
                s.clients.iter().all(|c| c.pc == Pc::Done)
            }),
        ]
    }
}

fn mutex_programs() -> Vec<Vec<Op>> {
    vec![vec![Op::Take(Kind::Mutex), Op::Give(Kind::Mutex)]; 3]
}

/// Client a downgrades (write, read, release the write, release the read);
/// b writes; c reads, then tries to upgrade (a timed write, which waits
/// behind its own read until it times out).
fn rw_programs() -> Vec<Vec<Op>> {
    vec![
        vec![
            Op::Take(Kind::Write),
            Op::Take(Kind::Read),
            Op::Give(Kind::Write),
            Op::Give(Kind::Read),
        ],
        vec![Op::Take(Kind::Write), Op::Give(Kind::Write)],
        vec![
            Op::Take(Kind::Read),
            Op::TryTake(Kind::Write),
            Op::Give(Kind::Write),
            Op::Give(Kind::Read),
        ],
    ]
}

fn semaphore_programs() -> Vec<Vec<Op>> {
    vec![vec![Op::Take(Kind::Lease), Op::Give(Kind::Lease)]; 3]
}

/// The properties that must always hold.
const SAFETY: [&str; 4] = [
    "exclusion",
    "no grant of a node that is gone",
    "a wait ends as its deadline says",
    "no deadlock",
];

/// What a finished check saw.
struct Outcome {
    unique_states: usize,
    elapsed: Duration,
    /// Each safety property violated, with its (shortest) counterexample.
    violations: Vec<(&'static str, String)>,
    acquires: bool,
    finishes: bool,
}

/// Checks every state of `model`, or (for a variant that must fail) until
/// a counterexample to `until` turns up.
fn check(name: &str, model: LockModel, until: Option<&'static str>) -> Outcome {
    let started = Instant::now();
    let mut builder = model.checker().threads(2);
    if let Some(property) = until {
        builder = builder.finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])));
    }
    let checker = builder.spawn_bfs();
    // Long checks say how far they got.
    let mut report = started + Duration::from_secs(30);
    while !checker.is_done() {
        std::thread::sleep(Duration::from_millis(50));
        if Instant::now() >= report {
            report += Duration::from_secs(30);
            eprintln!(
                "model {name}: {} states so far, {:.0} s",
                checker.unique_state_count(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    let checker = checker.join();
    let violations: Vec<(&'static str, String)> = SAFETY
        .iter()
        .filter_map(|&p| Some((p, show(checker.model(), &checker.discovery(p)?))))
        .collect();
    let outcome = Outcome {
        unique_states: checker.unique_state_count(),
        elapsed: started.elapsed(),
        violations,
        acquires: checker.discovery("someone acquires").is_some(),
        finishes: checker.discovery("every client finishes").is_some(),
    };
    let found: Vec<&str> = outcome.violations.iter().map(|(p, _)| *p).collect();
    println!(
        "model {name}: {} states, {:.1} s, violated: {found:?}",
        outcome.unique_states,
        outcome.elapsed.as_secs_f64(),
    );
    for (property, path) in &outcome.violations {
        println!("counterexample to \"{property}\":\n{path}");
    }
    outcome
}

/// A counterexample, step by step, with who holds what at the end.
fn show(model: &LockModel, path: &Path<State, Action>) -> String {
    let mut out = String::new();
    let steps = path.clone().into_vec();
    for (before, action) in &steps {
        let Some(action) = action else { continue };
        let Some(after) = model.next_state(before, action.clone()) else {
            continue;
        };
        if let Some(line) = describe(before, action, &after) {
            let _ = writeln!(out, "  {line}");
        }
    }
    let last = path.last_state();
    let _ = writeln!(
        out,
        "  then: lock children {:?}, leases {:?}",
        last.sorted(LOCKS, Kind::Read.sort_names()),
        last.sorted(LEASES, &[LEASE_NAME])
    );
    for i in 0..last.clients.len() {
        let live: Vec<String> = last
            .live_holds(i)
            .map(|h| format!("{:?} {}", h.kind, h.name))
            .collect();
        let _ = writeln!(out, "  client {} holds {live:?}", client_name(i));
    }
    if let Some(grant) = &last.stale_grant {
        let _ = writeln!(out, "  granted a node that was gone: {grant}");
    }
    out
}

/// One step of a counterexample in words; None for bookkeeping steps.
fn describe(before: &State, action: &Action, after: &State) -> Option<String> {
    let (i, what) = match action {
        Action::Step(i) => (*i, None),
        Action::Expire(i) => (*i, Some("its session expires on the server")),
        Action::Learn(i) => (*i, Some("learns of the expiry, new session")),
        Action::Timeout(i) => (*i, Some("times out, deletes its node")),
    };
    let who = format!("client {}:", client_name(i));
    if let Some(what) = what {
        return Some(format!("{who} {what}"));
    }
    let (was, now) = (&before.clients[i], &after.clients[i]);
    let holds = |c: &ClientState| c.holds.iter().map(|h| h.name.clone()).collect::<Vec<_>>();
    let outcome = if now.holds.len() > was.holds.len() {
        format!("holds {}", now.holds.last().map_or("", |h| &h.name))
    } else {
        match &now.pc {
            Pc::Watch(w) | Pc::Wait(w) => format!("waits for {}", w.node),
            Pc::List(_) => "lists again".into(),
            Pc::Create(_) => "queues again".into(),
            Pc::LeaseWait(..) => "waits for the leases to change".into(),
            pc => format!("{pc:?}"),
        }
    };
    let children = after.sorted(LOCKS, Kind::Read.sort_names());
    Some(match &was.pc {
        Pc::Next if now.holds.len() < was.holds.len() => {
            let gone: Vec<String> = holds(was)
                .into_iter()
                .filter(|h| !now.holds.iter().any(|n| n.name == *h))
                .collect();
            format!("{who} releases {gone:?}")
        }
        Pc::Next => return None,
        Pc::Create(kind) => format!(
            "{who} creates {:?} node {} -> sorted {children:?} -> {outcome}",
            kind,
            after.dirs[kind.dir()]
                .children
                .last()
                .map_or("", |n| &n.name),
        ),
        Pc::Watch(w) if matches!(now.pc, Pc::Wait(_)) => format!("{who} watches {}", w.node),
        Pc::Watch(w) => format!("{who} {} is gone already -> lists again", w.node),
        Pc::Wait(_) => format!("{who} woken ({:?}) -> {outcome}", was.woken),
        Pc::List(_) => format!("{who} lists {children:?} -> {outcome}"),
        Pc::LeaseCreate => format!("{who} creates a lease node"),
        Pc::LeaseList(..) => format!(
            "{who} lists leases {:?} -> {outcome}",
            after.sorted(LEASES, &[LEASE_NAME])
        ),
        Pc::LeaseWait(..) => format!("{who} woken -> lists the leases again"),
        Pc::LeaseUnlock => format!("{who} releases the internal lock"),
        Pc::Done => return None,
    })
}

fn client_name(i: usize) -> char {
    (b'a' + i as u8) as char
}

fn assert_safe(name: &str, outcome: &Outcome) {
    assert!(
        outcome.violations.is_empty(),
        "{name}: the shipped protocol violates {:?}",
        outcome
            .violations
            .iter()
            .map(|(p, _)| p)
            .collect::<Vec<_>>()
    );
    assert!(outcome.acquires, "{name}: no client ever acquires");
    assert!(outcome.finishes, "{name}: the clients never all finish");
}

fn assert_violates(name: &str, outcome: &Outcome, property: &str) {
    assert!(
        outcome.violations.iter().any(|(p, _)| *p == property),
        "{name}: the model found no counterexample to \"{property}\" ({} states)",
        outcome.unique_states
    );
}

#[test]
fn mutex_three_clients_with_an_expiry_is_safe() {
    let outcome = check(
        "mutex",
        LockModel::new(mutex_programs(), 1, Rules::Shipped),
        None,
    );
    assert_safe("mutex", &outcome);
}

#[test]
fn read_write_lock_with_downgrade_and_an_expiry_is_safe() {
    let outcome = check(
        "rwlock",
        LockModel::new(rw_programs(), 1, Rules::Shipped),
        None,
    );
    assert_safe("rwlock", &outcome);
    let model = LockModel::new(rw_programs(), 1, Rules::Shipped).newest_first();
    let outcome = check("rwlock, listed newest first", model, None);
    assert_safe("rwlock, listed newest first", &outcome);
}

#[test]
fn semaphore_of_two_leases_with_an_expiry_is_safe() {
    let outcome = check(
        "semaphore",
        LockModel::new(semaphore_programs(), 1, Rules::Shipped),
        None,
    );
    assert_safe("semaphore", &outcome);
}

#[test]
fn a_downgrade_node_at_the_end_of_the_queue_is_a_counterexample() {
    // The bug needs no expiry: without one the counterexample is shortest.
    let name = "rwlock, downgrade node at the end";
    let model = LockModel::new(rw_programs(), 0, Rules::DowngradeAtEnd);
    let outcome = check(name, model, Some("exclusion"));
    assert_violates(name, &outcome, "exclusion");
}

#[test]
fn the_waiter_shortcut_is_a_counterexample() {
    let name = "rwlock, waiter shortcut";
    let model = LockModel::new(rw_programs(), 0, Rules::WaiterShortcut);
    let outcome = check(name, model, Some("exclusion"));
    assert_violates(name, &outcome, "exclusion");
}

#[test]
fn the_shortcut_on_a_read_blocker_is_a_counterexample() {
    let name = "rwlock, shortcut on a read blocker";
    let model = LockModel::new(rw_programs(), 1, Rules::ReadBlockerShortcut);
    let outcome = check(name, model, Some("no grant of a node that is gone"));
    assert_violates(name, &outcome, "no grant of a node that is gone");
}

/// `program` done `rounds` times in a row.
fn repeat(programs: Vec<Vec<Op>>, rounds: usize) -> Vec<Vec<Op>> {
    programs.into_iter().map(|p| p.repeat(rounds)).collect()
}

/// A bigger configuration, named by `LATCHKEY_MODEL` as
/// `<recipe>:<rounds>:<expiries>` (recipe `mutex`, `rwlock` or
/// `semaphore`; each client runs its program `rounds` times), e.g.
/// `LATCHKEY_MODEL=rwlock:2:1 cargo test --release -p latchkey-test --test
/// model -- --ignored --nocapture bigger`. Without it, the configurations
/// recorded in docs/RELIABILITY.md.
#[test]
#[ignore = "minutes; run by hand, see docs/RELIABILITY.md"]
fn bigger_configurations_are_safe() {
    let wanted = std::env::var("LATCHKEY_MODEL")
        .unwrap_or_else(|_| "mutex:2:1,semaphore:2:1,rwlock:2:1,mutex:1:2,rwlock:1:2".into());
    for config in wanted.split(',') {
        let parts: Vec<&str> = config.split(':').collect();
        let [recipe, rounds, expiries] = parts[..] else {
            panic!("LATCHKEY_MODEL: want <recipe>:<rounds>:<expiries>, got {config}");
        };
        let programs = match recipe {
            "mutex" => mutex_programs(),
            "rwlock" => rw_programs(),
            "semaphore" => semaphore_programs(),
            other => panic!("LATCHKEY_MODEL: no recipe {other}"),
        };
        let rounds: usize = rounds.parse().expect("rounds");
        let expiries: u8 = expiries.parse().expect("expiries");
        let orders: &[bool] = if recipe == "rwlock" {
            &[false, true]
        } else {
            &[false]
        };
        for &newest_first in orders {
            let order = if newest_first {
                ", listed newest first"
            } else {
                ""
            };
            let name = format!("{recipe}, {rounds} rounds, {expiries} expiries{order}");
            let mut model =
                LockModel::new(repeat(programs.clone(), rounds), expiries, Rules::Shipped);
            model.newest_first = newest_first;
            let outcome = check(&name, model, None);
            assert_safe(&name, &outcome);
        }
    }
}

/// What the reverted fixes do to the mutex and the semaphore (whose
/// internal lock is a mutex), for the record: run as the bigger ones.
#[test]
#[ignore = "for the record; run by hand, see docs/RELIABILITY.md"]
fn reverted_fixes_on_the_mutex_and_the_semaphore() {
    for rules in [Rules::WaiterShortcut, Rules::ReadBlockerShortcut] {
        for (name, programs) in [
            ("mutex", mutex_programs()),
            ("semaphore", semaphore_programs()),
        ] {
            let name = format!("{name}, {rules:?}");
            check(&name, LockModel::new(programs, 1, rules), None);
        }
    }
}

/// Finding of the model, now fixed: a semaphore waiter whose session
/// expires between the grant of the internal lock and the create of its
/// lease node creates that node in its new session. It used to wait for
/// room without the internal lock, which nothing checked (nor does
/// Curator's `internalAcquire1Lease`): with a maximum of 1 (as
/// `InterProcessSemaphoreMutex` has), two such lease nodes waited for each
/// other for ever. `may_wait_for_room` now sends it back to the internal
/// lock.
#[test]
fn a_semaphore_waiter_without_its_internal_lock_does_not_wait_for_ever() {
    let name = "semaphore of 1 lease, 2 clients";
    let mut model = LockModel::new(semaphore_programs()[..2].to_vec(), 1, Rules::Shipped);
    model.max_leases = 1;
    let outcome = check(name, model, None);
    assert_safe(name, &outcome);
}

//! The client side: worker threads doing a random mix of lock operations on
//! a few shared paths, reporting every grant to the oracle and every step
//! to the history.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use latchkey_framework::{CancelToken, ConnectionState, Error, Result, RetryNTimes};
use latchkey_recipes::{
    AtomicValue, Decision, DistributedAtomicLong, InterProcessLock, InterProcessMultiLock,
    InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2, Lease, LockDriver,
    Revoker, SharedCount, StandardDriver,
};

use crate::counter::Counter;
use crate::history::History;
use crate::linear::Histories;
use crate::oracle::{HoldId, Mode, Oracle};
use crate::rng::Rng;
use crate::session::{ClientSettings, Session};
use latchkey_test::linearizable::{CountAnswer, CountOp, CounterAnswer, CounterOp};

/// The shared paths every session works on.
pub struct Paths {
    pub mutexes: Vec<String>,
    pub rw: String,
    pub sem: String,
    pub sem_max: u32,
    /// A semaphore whose maximum follows a shared count that workers
    /// change while others wait.
    pub shared_sem: String,
    pub count: String,
    /// The largest value the count is ever set to: holders that got their
    /// leases under a larger maximum keep them when it shrinks (Curator's
    /// rule), so the oracle bounds the leases by this.
    pub shared_max: u32,
    /// The leader latch every participant joins.
    pub latch: String,
    /// The `DistributedAtomicLong` every session increments.
    pub atomic: String,
    /// The lock-safe `DistributedQueue` every session puts to and takes
    /// from (`queue.rs`).
    pub queue: String,
    /// The `SharedCount` every session compare-and-sets (`linear.rs`).
    pub cas: String,
}

impl Paths {
    pub fn under(root: &str) -> Paths {
        Paths {
            mutexes: vec![format!("{root}/mutex-a"), format!("{root}/mutex-b")],
            rw: format!("{root}/rw"),
            sem: format!("{root}/sem"),
            sem_max: 2,
            shared_sem: format!("{root}/shared-sem"),
            count: format!("{root}/shared-sem-max"),
            shared_max: 3,
            latch: format!("{root}/latch"),
            atomic: format!("{root}/counter"),
            queue: format!("{root}/queue"),
            cas: format!("{root}/cas-count"),
        }
    }
}

/// Counters for the summary.
#[derive(Default)]
pub struct Stats {
    pub ops: AtomicU64,
    pub grants: AtomicU64,
    pub grants_in_doubt: AtomicU64,
    pub timeouts: AtomicU64,
    pub errors: AtomicU64,
    pub reentrant: AtomicU64,
    pub downgrades: AtomicU64,
    pub upgrades_refused: AtomicU64,
    pub closes_while_waiting: AtomicU64,
    pub cancels: AtomicU64,
    /// Worst time from a cancel to the cancelled acquire's return, in µs.
    pub worst_cancel_us: AtomicU64,
    pub revoke_requests: AtomicU64,
    pub revocations_honoured: AtomicU64,
    pub max_changes: AtomicU64,
    /// Leadership terms counted by the oracle, and begun in doubt.
    pub leader_terms: AtomicU64,
    pub leader_terms_in_doubt: AtomicU64,
    /// Worst time past its timeout that a timed acquire took, in µs, and
    /// which acquire it was.
    pub worst_overrun_us: AtomicU64,
    pub worst_overrun_op: parking_lot::Mutex<String>,
}

/// What every worker shares.
pub struct World {
    pub history: Arc<History>,
    pub oracle: Arc<Oracle>,
    pub stats: Stats,
    pub paths: Paths,
    pub no_lock: bool,
    pub broken_lock: bool,
    /// The `--broken-leader` control: participants lead when their node is
    /// one of the first two.
    pub broken_leader: bool,
    /// The `--broken-counter` control: increments read, then write without
    /// a version check.
    pub broken_counter: bool,
    pub counter: Counter,
    /// The `--broken-cas` control: compare-and-sets written the way
    /// issue 38's bug 1 did (`set_data` at the version through the retry
    /// loop, `BadVersion` taken for a refusal).
    pub broken_cas: bool,
    /// Most operations are compare-and-sets of the shared count, and none
    /// sets (`--cas-workload`; on in the `--broken-cas` control).
    pub cas_workload: bool,
    /// The histories checked for linearizability.
    pub linear: Histories,
    /// Milliseconds since the run started when a counted leader was last
    /// seen leading.
    pub last_leader_ms: AtomicU64,
    /// Odd while the nemesis has a fault on (see `Claim::Quiet`).
    pub fault_epoch: Arc<AtomicU64>,
    pub stop: AtomicBool,
    /// Straight to the servers, for the short-lived clients that are
    /// closed while they wait.
    pub direct_connect: String,
    pub settings: ClientSettings,
}

impl World {
    /// A counted leader leads now.
    pub fn note_leader(&self) {
        let ms = u64::try_from(self.history.now().as_millis()).unwrap_or(u64::MAX);
        self.last_leader_ms.fetch_max(ms, Ordering::SeqCst);
    }
}

/// One session's lock objects, shared by its threads (which contend with
/// each other as processes do).
pub struct Locks {
    mutexes: Vec<InterProcessMutex>,
    rw: InterProcessReadWriteLock,
    sem: InterProcessSemaphoreV2,
    shared_sem: InterProcessSemaphoreV2,
    count: SharedCount,
    atomic: DistributedAtomicLong,
    cas: SharedCount,
}

impl Locks {
    /// `broken`: the mutexes let two holders in at once (a control: the
    /// checker must see it through real ZooKeeper grants).
    pub fn new(session: &Session, paths: &Paths, broken: bool) -> Result<Locks> {
        let count = SharedCount::new(&session.client, &paths.count, 2)?;
        Ok(Locks {
            mutexes: paths
                .mutexes
                .iter()
                .map(|p| match broken {
                    false => InterProcessMutex::new(&session.client, p),
                    true => InterProcessMutex::with_lock_driver(
                        &session.client,
                        p,
                        Arc::new(TwoHolders),
                    ),
                })
                .collect::<Result<_>>()?,
            rw: InterProcessReadWriteLock::new(&session.client, &paths.rw)?,
            sem: InterProcessSemaphoreV2::new(&session.client, &paths.sem, paths.sem_max)?,
            shared_sem: InterProcessSemaphoreV2::with_shared_count(
                &session.client,
                &paths.shared_sem,
                &count,
            )?,
            count,
            atomic: DistributedAtomicLong::new(
                &session.client,
                &paths.atomic,
                RetryNTimes::new(20, Duration::from_millis(5)),
            )?,
            cas: SharedCount::new(&session.client, &paths.cas, 0)?,
        })
    }
}

/// A broken mutex for the `--broken-lock` control: the first two nodes in
/// the queue both hold the lock.
struct TwoHolders;

impl LockDriver for TwoHolders {
    fn decide(&self, children: &[String], ours: &str, _max: usize) -> Result<Decision> {
        StandardDriver.decide(children, ours, 2)
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Mutex,
    Write,
    Read,
    Semaphore,
    Multi,
    CloseWhileWaiting,
    Cancel,
    Revocable,
    Revoke,
    SharedSemaphore,
    ChangeMax,
    Increment,
    CompareAndSet,
}

const OPS: &[(u64, Op)] = &[
    (25, Op::Mutex),
    (15, Op::Write),
    (20, Op::Read),
    (20, Op::Semaphore),
    (10, Op::Multi),
    (2, Op::CloseWhileWaiting),
    (6, Op::Cancel),
    (6, Op::Revocable),
    (3, Op::Revoke),
    (10, Op::SharedSemaphore),
    (2, Op::ChangeMax),
    (8, Op::Increment),
    (10, Op::CompareAndSet),
];

/// How long a cancelled acquire may take to return on a loaded machine:
/// it gives up at once, even with a request under way.
const CANCEL_BOUND: Duration = Duration::from_secs(1);

/// One worker thread: random operations until `until` or the stop flag.
pub struct Worker<'a> {
    pub world: &'a World,
    pub session: &'a Session,
    pub locks: &'a Locks,
    pub who: String,
    pub rng: Rng,
}

impl Worker<'_> {
    pub fn run(mut self, until: Instant) {
        while !self.world.stop.load(Ordering::SeqCst) && Instant::now() < until {
            // Most operations compare-and-sets, so that a lost reply finds
            // one in flight.
            let op = match self.world.cas_workload && self.rng.percent(90) {
                true => Op::CompareAndSet,
                false => self.rng.weighted(OPS),
            };
            self.world.stats.ops.fetch_add(1, Ordering::Relaxed);
            if self.world.no_lock {
                self.unlocked(op);
                continue;
            }
            match op {
                Op::Mutex => self.mutex(),
                Op::Write => self.write(),
                Op::Read => self.read(),
                Op::Semaphore => self.semaphore(),
                Op::Multi => self.multi(),
                Op::CloseWhileWaiting => self.close_while_waiting(),
                Op::Cancel => self.cancel(),
                Op::Revocable => self.revocable(),
                Op::Revoke => self.revoke(),
                Op::SharedSemaphore => self.shared_semaphore(),
                Op::ChangeMax => self.change_max(),
                Op::Increment => self.increment(),
                Op::CompareAndSet => self.compare_and_set(),
            }
        }
    }

    fn mutex(&mut self) {
        let i = self.rng.index(self.locks.mutexes.len());
        let timeout = self.timeout();
        self.mutex_at(i, timeout);
    }

    fn mutex_at(&mut self, i: usize, timeout: Duration) {
        let m = &self.locks.mutexes[i];
        let path = &self.world.paths.mutexes[i];
        let Some(epoch) = self.timed_acquire("mutex", path, timeout, || m.acquire_timeout(timeout))
        else {
            return;
        };
        let hold = self.grant_mutex(m, epoch, Mode::Exclusive, "mutex");
        self.maybe_reenter(m, path);
        self.work();
        self.world.oracle.exit(hold);
        self.released("mutex", path, m.release());
    }

    fn write(&mut self) {
        let (w, r) = (self.locks.rw.write_lock(), self.locks.rw.read_lock());
        let path = &self.world.paths.rw;
        let timeout = self.timeout();
        let Some(epoch) = self.timed_acquire("write", path, timeout, || w.acquire_timeout(timeout))
        else {
            return;
        };
        let hold = self.grant_mutex(w, epoch, Mode::Exclusive, "write");
        self.maybe_reenter(w, path);
        self.work();
        if !self.rng.percent(40) {
            self.world.oracle.exit(hold);
            self.released("write", path, w.release());
            return;
        }
        // Downgrade: read while holding the write, then let the write go.
        let read_timeout = Duration::from_secs(2);
        match self.timed_acquire("downgrade-read", path, read_timeout, || {
            r.acquire_timeout(read_timeout)
        }) {
            Some(_) => {
                self.world.stats.downgrades.fetch_add(1, Ordering::Relaxed);
                self.world.oracle.downgrade(&hold);
                self.released("write", path, w.release());
                self.work();
                self.try_upgrade(w, path);
                self.world.oracle.exit(hold);
                self.released("read", path, r.release());
            }
            None => {
                self.world.oracle.exit(hold);
                self.released("write", path, w.release());
            }
        }
    }

    fn read(&mut self) {
        let r = self.locks.rw.read_lock();
        let path = &self.world.paths.rw;
        let timeout = self.timeout();
        let Some(epoch) = self.timed_acquire("read", path, timeout, || r.acquire_timeout(timeout))
        else {
            return;
        };
        let hold = self.grant_mutex(r, epoch, Mode::Shared, "read");
        self.maybe_reenter(r, path);
        self.work();
        if self.rng.percent(20) {
            self.try_upgrade(self.locks.rw.write_lock(), path);
        }
        self.world.oracle.exit(hold);
        self.released("read", path, r.release());
    }

    /// Holding a read, asks for the write: Curator never grants it (the
    /// write queues behind our own read). Were it granted while our read
    /// still counts, the oracle sees a writer beside a reader.
    fn try_upgrade(&mut self, w: &InterProcessMutex, path: &str) {
        let timeout = self.rng.millis(0, 50);
        let Some(epoch) = self.timed_acquire("upgrade-write", path, timeout, || {
            w.acquire_timeout(timeout)
        }) else {
            self.world
                .stats
                .upgrades_refused
                .fetch_add(1, Ordering::Relaxed);
            return;
        };
        let hold = self.grant_mutex(w, epoch, Mode::Exclusive, "upgrade-write");
        self.world.oracle.exit(hold);
        self.released("upgrade-write", path, w.release());
    }

    fn semaphore(&mut self) {
        let (sem, path, max) = (
            &self.locks.sem,
            &self.world.paths.sem,
            self.world.paths.sem_max,
        );
        self.leases(sem, path, max, max);
    }

    /// Asks for up to two leases of the shared-count semaphore, whose
    /// maximum others change meanwhile.
    fn shared_semaphore(&mut self) {
        let (sem, path) = (&self.locks.shared_sem, &self.world.paths.shared_sem);
        self.leases(sem, path, 2, self.world.paths.shared_max);
    }

    /// Sets the shared count to 1, 2 or 3 while waiters wait on it.
    fn change_max(&mut self) {
        let to = 1 + self.rng.below(3) as i32;
        self.world.stats.max_changes.fetch_add(1, Ordering::Relaxed);
        let path = &self.world.paths.count;
        match self.locks.count.set_count(to) {
            Ok(()) => self.record(format!("set {path} to {to}")),
            Err(e) => self.record(format!("set {path} to {to} failed: {e}")),
        }
    }

    /// One to three increments of the shared counter.
    fn increment(&mut self) {
        let w = self.world;
        let path = &w.paths.atomic;
        for _ in 0..1 + self.rng.below(3) {
            self.record(format!("invoke increment {path}"));
            let call = w.linear.counter.now(&w.history);
            let got = match w.broken_counter {
                false => self.locks.atomic.increment(),
                true => self.unchecked_increment(),
            };
            match &got {
                Ok(v) if v.succeeded => {
                    let (pre, post) = (v.pre_value, v.post_value);
                    let answer = CounterAnswer::Incremented { pre, post };
                    w.linear
                        .counter
                        .record(&w.history, call, CounterOp::Increment, Some(answer));
                }
                Ok(_) => {} // not done: changed nothing
                Err(_) => w
                    .linear
                    .counter
                    .record(&w.history, call, CounterOp::Increment, None),
            }
            w.counter
                .completed(&w.history, &w.oracle, &self.who, path, got);
        }
    }

    /// A compare-and-set of the shared count from the value last seen to
    /// one more (now and then a plain set), recorded for the
    /// linearizability check: `true` and `false` are answers, an error an
    /// unknown outcome.
    fn compare_and_set(&mut self) {
        let w = self.world;
        let (count, path) = (&self.locks.cas, &w.paths.cas);
        let call = w.linear.count.now(&w.history);
        // Not in the compare-and-set workload: a set retried after a lost
        // reply may be applied twice, and the version it leaves unknown
        // could explain a lost compare-and-set's write.
        if !w.cas_workload && self.rng.below(10) == 0 {
            let to = self.rng.below(100) as i32;
            let got = count.set_count(to);
            self.record(format!("set {path} to {to}: {got:?}"));
            let answer = got.ok().map(|()| CountAnswer::Set);
            w.linear
                .count
                .record(&w.history, call, CountOp::Set(to), answer);
            return;
        }
        let seen = count.versioned_value();
        let (previous, value) = ((seen.value, seen.version), seen.value.wrapping_add(1));
        let got = match (w.cas_workload, w.broken_cas) {
            (false, _) => count.try_set_count(&seen, value),
            (true, false) => self.compare_and_set_write(previous, value),
            (true, true) => self.unresolved_compare_and_set(previous, value),
        };
        self.record(format!(
            "compare-and-set {path} from {previous:?} to {value}: {got:?}"
        ));
        let answer = got.ok().map(CountAnswer::Applied);
        let op = CountOp::CompareAndSet { previous, value };
        w.linear.count.record(&w.history, call, op, answer);
    }

    /// The write `try_set_count` makes (`Client::compare_and_set_data`),
    /// without the recipe's read first, so that under `--cas-workload` the
    /// write is the call's first request, as in the `--broken-cas` control
    /// below: a lost reply then finds one in flight.
    fn compare_and_set_write(&self, previous: (i32, i32), value: i32) -> Result<bool> {
        let (client, path) = (&self.session.client, &self.world.paths.cas);
        match client.compare_and_set_data(path, &value.to_be_bytes(), previous.1) {
            Ok(_) => Ok(true),
            Err(e) if e.is(latchkey_framework::ErrorCode::BadVersion) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The `--broken-cas` control, issue 38's bug 1 put back: `set_data` at
    /// the version seen through the client's retry loop, and `BadVersion`
    /// taken for a refusal, although a retry meets it for its own write
    /// applied before the connection broke. Without the recipe's read
    /// first, so that the write is the call's first request and a lost
    /// reply finds it in flight.
    fn unresolved_compare_and_set(&self, previous: (i32, i32), value: i32) -> Result<bool> {
        let (client, path) = (&self.session.client, &self.world.paths.cas);
        match client.set_data(path, &value.to_be_bytes(), Some(previous.1)) {
            Ok(_) => Ok(true),
            Err(e) if e.is(latchkey_framework::ErrorCode::BadVersion) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The `--broken-counter` control: read, work, write whatever the node
    /// holds by then (no version check), so concurrent increments overwrite
    /// each other.
    fn unchecked_increment(&mut self) -> Result<AtomicValue<i64>> {
        let atomic = &self.locks.atomic;
        let mut got = atomic.get()?;
        let pre = got.post_value;
        self.work();
        atomic.force_set(pre + 1)?;
        // Told as an increment from `pre` (the read's record, rewritten:
        // the record is non-exhaustive).
        got.succeeded = true;
        got.pre_value = pre;
        got.post_value = pre + 1;
        got.stats = Default::default();
        Ok(got)
    }

    /// Takes 1..=`most` leases of `sem` at once; the oracle allows `max`.
    fn leases(&mut self, sem: &InterProcessSemaphoreV2, path: &str, most: u32, max: u32) {
        let n = 1 + self.rng.below(u64::from(most)) as u32;
        let timeout = self.timeout();
        let start = Instant::now();
        self.record(format!("invoke semaphore {path} n={n} timeout={timeout:?}"));
        let got = sem.acquire_many_timeout(n, timeout);
        let Some(leases) = self.completed("semaphore", path, timeout, start, got) else {
            return;
        };
        self.hold_leases(sem, path, n, max, leases);
    }

    /// Enters `leases` in the oracle (as `n` of at most `max`), works, and
    /// returns them.
    fn hold_leases(
        &mut self,
        sem: &InterProcessSemaphoreV2,
        path: &str,
        n: u32,
        max: u32,
        leases: Vec<Lease>,
    ) {
        let epoch = self.session.doubt_epoch();
        let valid = self.connected() && leases.iter().all(|l| !l.is_lost());
        let nodes: Vec<&str> = leases.iter().map(|l| l.path()).collect();
        let hold = self.grant(
            path,
            Mode::Leases { n, max },
            "semaphore",
            valid.then_some(epoch),
            None,
            &nodes.join(" "),
        );
        self.work();
        self.world.oracle.exit(hold);
        self.released(
            "semaphore",
            path,
            sem.return_all(leases).map_err(Into::into),
        );
    }

    fn multi(&mut self) {
        let locks: Vec<Box<dyn InterProcessLock>> = self
            .locks
            .mutexes
            .iter()
            .map(|m| Box::new(m.clone()) as Box<dyn InterProcessLock>)
            .collect();
        let multi = match InterProcessMultiLock::new(locks) {
            Ok(m) => m,
            Err(e) => return self.world.oracle.violation(format!("multi-lock: {e}")),
        };
        let label = self.world.paths.mutexes.join("+");
        let timeout = self.timeout();
        let Some(epoch) =
            self.timed_acquire("multi", &label, timeout, || multi.acquire_timeout(timeout))
        else {
            return;
        };
        let holds: Vec<HoldId> = self
            .locks
            .mutexes
            .iter()
            .map(|m| self.grant_mutex(m, epoch, Mode::Exclusive, "multi"))
            .collect();
        self.work();
        for h in holds {
            self.world.oracle.exit(h);
        }
        self.released("multi", &label, multi.release());
    }

    /// An acquire with no deadline (a mutex or a lease) is cancelled from
    /// another thread after a random moment: it must return within
    /// [`CANCEL_BOUND`], faults or not; a grant that came first is held and
    /// released as usual, and a cancelled one leaves no node (the orphan
    /// check at the end sees any).
    fn cancel(&mut self) {
        let w = self.world;
        let lease = self.rng.percent(30);
        let i = self.rng.index(w.paths.mutexes.len());
        let path = match lease {
            true => w.paths.sem.clone(),
            false => w.paths.mutexes[i].clone(),
        };
        let cancel_after = self.rng.millis(0, 100);
        let token = CancelToken::new();
        w.stats.cancels.fetch_add(1, Ordering::Relaxed);
        let (done_tx, done_rx) = std::sync::mpsc::sync_channel::<Instant>(1);
        thread::scope(|scope| {
            let waiter = {
                let (token, rng, path) =
                    (token.clone(), Rng::stream(self.rng.next_u64(), 2), &path);
                let who = format!("{}.x", self.who);
                let (session, locks) = (self.session, self.locks);
                scope.spawn(move || {
                    let mut me = Worker {
                        world: w,
                        session,
                        locks,
                        who,
                        rng,
                    };
                    me.cancellable(lease, i, path, &token, &done_tx);
                })
            };
            thread::sleep(cancel_after);
            self.record(format!("cancel the acquire on {path}"));
            let cancelled_at = Instant::now();
            token.cancel();
            let bound = CANCEL_BOUND + w.settings.connection_timeout;
            match done_rx.recv_timeout(bound) {
                Ok(at) => {
                    let took = at.saturating_duration_since(cancelled_at);
                    let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
                    w.stats.worst_cancel_us.fetch_max(us, Ordering::Relaxed);
                    if took > CANCEL_BOUND {
                        w.oracle.violation(format!(
                            "{}: a cancelled acquire on {path} returned {took:?} after the cancel",
                            self.who
                        ));
                    }
                }
                Err(_) => w.oracle.violation(format!(
                    "{}: a cancelled acquire on {path} still waited {bound:?} after the cancel",
                    self.who
                )),
            }
            let _ = waiter.join();
        });
    }

    /// The waiting side of [`Worker::cancel`]: sends when its acquire
    /// returned (before any hold), then holds what it got.
    fn cancellable(
        &mut self,
        lease: bool,
        i: usize,
        path: &str,
        token: &CancelToken,
        done: &std::sync::mpsc::SyncSender<Instant>,
    ) {
        self.record(format!("invoke cancellable {path}"));
        if lease {
            let got = self
                .locks
                .sem
                .acquire_many_cancellable(1, Duration::MAX, token);
            let _ = done.send(Instant::now());
            match got {
                Ok(Some(leases)) => {
                    let max = self.world.paths.sem_max;
                    self.hold_leases(&self.locks.sem, path, 1, max, leases);
                }
                other => self.cancel_outcome(path, other.map(|l| l.is_some())),
            }
            return;
        }
        let m = &self.locks.mutexes[i];
        let got = m.acquire_cancellable(Duration::MAX, token);
        let _ = done.send(Instant::now());
        match got {
            Ok(true) => {
                let epoch = self.session.doubt_epoch();
                let hold = self.grant_mutex(m, epoch, Mode::Exclusive, "cancellable");
                self.work();
                self.world.oracle.exit(hold);
                self.released("cancellable", path, m.release());
            }
            other => self.cancel_outcome(path, other),
        }
    }

    fn cancel_outcome(&self, path: &str, got: Result<bool>) {
        match got {
            Err(Error::Cancelled) => self.record(format!("cancelled {path}")),
            Ok(_) => self.record(format!("cancellable {path}: not acquired")),
            Err(e) => {
                self.world.stats.errors.fetch_add(1, Ordering::Relaxed);
                self.record(format!("fail cancellable {path}: {e}"));
            }
        }
    }

    /// Holds a revocable mutex (a mutex object of its own, so its listener
    /// is ours alone) for up to 300 ms, letting go early when another
    /// worker asks (Curator's revocation: cooperative, so exclusion must
    /// hold whatever the timing of the request).
    fn revocable(&mut self) {
        let i = self.rng.index(self.locks.mutexes.len());
        let path = &self.world.paths.mutexes[i];
        let m = match InterProcessMutex::new(&self.session.client, path) {
            Ok(m) => m,
            Err(e) => return self.record(format!("revocable mutex {path}: {e}")),
        };
        let asked = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&asked);
        m.make_revocable(move || flag.store(true, Ordering::SeqCst));
        let timeout = self.timeout();
        let Some(epoch) =
            self.timed_acquire("revocable", path, timeout, || m.acquire_timeout(timeout))
        else {
            return;
        };
        let hold = self.grant_mutex(&m, epoch, Mode::Exclusive, "revocable");
        let until = Instant::now() + self.rng.millis(50, 300);
        while Instant::now() < until && !asked.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(5));
        }
        if asked.load(Ordering::SeqCst) {
            self.world
                .stats
                .revocations_honoured
                .fetch_add(1, Ordering::Relaxed);
            self.record(format!("revoked {path}: letting go"));
        }
        self.world.oracle.exit(hold);
        self.released("revocable", path, m.release());
    }

    /// Asks whoever holds a mutex now to let it go.
    fn revoke(&mut self) {
        let i = self.rng.index(self.locks.mutexes.len());
        let path = &self.world.paths.mutexes[i];
        let holder = match self.locks.mutexes[i].participant_nodes() {
            Ok(nodes) => nodes.into_iter().next(),
            Err(e) => return self.record(format!("list {path} to revoke: {e}")),
        };
        let Some(node) = holder else { return };
        self.world
            .stats
            .revoke_requests
            .fetch_add(1, Ordering::Relaxed);
        match Revoker::attempt_revoke(&self.session.client, &node) {
            Ok(()) => self.record(format!("revoke {node}")),
            Err(e) => self.record(format!("revoke {node} failed: {e}")),
        }
    }

    /// A short-lived client waits for a mutex and is closed meanwhile: the
    /// wait must end (with an error, a timeout or the lock) within the
    /// connection timeout of its deadline, and its node must go.
    fn close_while_waiting(&mut self) {
        let w = self.world;
        let name = format!("{}.c", self.who);
        let session = match Session::connect(
            name.clone(),
            &w.direct_connect,
            Vec::new(),
            w.settings,
            &w.history,
            Duration::from_secs(5),
        ) {
            Ok(s) => Arc::new(s),
            Err(e) => return self.record(format!("close-while-waiting skipped: {e}")),
        };
        w.stats.closes_while_waiting.fetch_add(1, Ordering::Relaxed);
        let i = self.rng.index(w.paths.mutexes.len());
        let path = w.paths.mutexes[i].clone();
        let close_after = self.rng.millis(0, 100);
        let timeout = Duration::from_secs(2);
        let bound = timeout + w.settings.connection_timeout;
        thread::scope(|scope| {
            let waiter = {
                let session = Arc::clone(&session);
                let rng = Rng::stream(self.rng.next_u64(), 1);
                scope.spawn(move || {
                    let locks = match Locks::new(&session, &w.paths, w.broken_lock) {
                        Ok(l) => l,
                        Err(e) => return w.history.record(&session.name, format!("locks: {e}")),
                    };
                    let mut me = Worker {
                        world: w,
                        session: &session,
                        locks: &locks,
                        who: session.name.clone(),
                        rng,
                    };
                    me.mutex_at(i, timeout);
                })
            };
            thread::sleep(close_after);
            session.mark_in_doubt();
            self.record(format!("close {name} while it waits on {path}"));
            session.client.close();
            let closed_at = Instant::now();
            while !waiter.is_finished() && closed_at.elapsed() < bound {
                thread::sleep(Duration::from_millis(10));
            }
            if !waiter.is_finished() {
                w.oracle.violation(format!(
                    "{name}: acquire on {path} still waiting {bound:?} after its client closed"
                ));
            }
        });
    }

    /// Reentrancy: the holding thread takes the lock again at once (no
    /// ZooKeeper round trip), with the same node, and releases it again.
    fn maybe_reenter(&mut self, m: &InterProcessMutex, path: &str) {
        if !self.rng.percent(30) {
            return;
        }
        self.world.stats.reentrant.fetch_add(1, Ordering::Relaxed);
        let token = m.fencing_token();
        match m.acquire_timeout(Duration::ZERO) {
            Ok(true) => {
                if m.fencing_token() != token {
                    self.world.oracle.violation(format!(
                        "{}: reentrant acquire of {path} changed the token {token:?} to {:?}",
                        self.who,
                        m.fencing_token()
                    ));
                }
                self.released("reentrant", path, m.release());
            }
            // A hold lost with its session (or its client closed under
            // it, as close-while-waiting does) is refused again on
            // purpose: the lock may be someone else's by now.
            Err(e) if m.is_lost() || self.session.client.is_closed() => self.record(format!(
                "reentrant acquire of {path} refused, the hold being lost: {e}"
            )),
            other => self.world.oracle.violation(format!(
                "{}: reentrant acquire of {path} by the holder returned {other:?}",
                self.who
            )),
        }
    }

    /// The `--no-lock` control: enters the oracle without any lock.
    fn unlocked(&mut self, op: Op) {
        let p = &self.world.paths;
        let max = p.sem_max;
        let claims: Vec<(&str, Mode)> = match op {
            Op::Mutex | Op::CloseWhileWaiting => {
                vec![(&p.mutexes[self.rng.index(p.mutexes.len())], Mode::Exclusive)]
            }
            Op::Write => vec![(&p.rw, Mode::Exclusive)],
            Op::Read => vec![(&p.rw, Mode::Shared)],
            Op::Semaphore => vec![(
                &p.sem,
                Mode::Leases {
                    n: 1 + self.rng.below(u64::from(max)) as u32,
                    max,
                },
            )],
            Op::Multi => p
                .mutexes
                .iter()
                .map(|m| (m.as_str(), Mode::Exclusive))
                .collect(),
            Op::Cancel | Op::Revocable => {
                vec![(&p.mutexes[self.rng.index(p.mutexes.len())], Mode::Exclusive)]
            }
            Op::SharedSemaphore => vec![(
                &p.shared_sem,
                Mode::Leases {
                    n: 1 + self.rng.below(2) as u32,
                    max: p.shared_max,
                },
            )],
            Op::Revoke | Op::ChangeMax | Op::Increment | Op::CompareAndSet => Vec::new(),
        };
        let holds: Vec<HoldId> = claims
            .into_iter()
            .map(|(path, mode)| {
                self.record(format!("grant (no lock) {mode:?} {path}"));
                self.session.note_grant(self.world.history.now());
                self.world.oracle.enter(path, &self.who, mode, None, None)
            })
            .collect();
        self.work();
        for h in holds {
            self.world.oracle.exit(h);
        }
    }

    /// Runs a timed acquire, records it, and returns the doubt epoch read
    /// right after a grant (`None`: not granted).
    fn timed_acquire(
        &mut self,
        what: &str,
        path: &str,
        timeout: Duration,
        acquire: impl FnOnce() -> Result<bool>,
    ) -> Option<u64> {
        let start = Instant::now();
        self.record(format!("invoke {what} {path} timeout={timeout:?}"));
        let got = acquire().map(|ok| ok.then_some(()));
        self.completed(what, path, timeout, start, got)?;
        Some(self.session.doubt_epoch())
    }

    /// Records an acquire's completion and how far it ran past its timeout.
    fn completed<T>(
        &self,
        what: &str,
        path: &str,
        timeout: Duration,
        start: Instant,
        got: Result<Option<T>>,
    ) -> Option<T> {
        let took = start.elapsed();
        let over = u64::try_from(took.saturating_sub(timeout).as_micros()).unwrap_or(u64::MAX);
        let stats = &self.world.stats;
        if stats.worst_overrun_us.fetch_max(over, Ordering::Relaxed) < over {
            *stats.worst_overrun_op.lock() = format!(
                "{} {what} {path} with timeout {timeout:?}, {} ({:.3}s into the run)",
                self.who,
                match &got {
                    Ok(Some(_)) => "granted".to_string(),
                    Ok(None) => "timed out".to_string(),
                    Err(e) => format!("failed: {e}"),
                },
                self.world.history.now().as_secs_f64()
            );
        }
        match got {
            Ok(Some(v)) => Some(v),
            Ok(None) => {
                stats.timeouts.fetch_add(1, Ordering::Relaxed);
                self.record(format!("timeout {what} {path} after {took:?}"));
                None
            }
            Err(e) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                self.record(format!("fail {what} {path} after {took:?}: {e}"));
                None
            }
        }
    }

    /// Enters a mutex-like grant (mutex, read, write) in the oracle.
    fn grant_mutex(&self, m: &InterProcessMutex, epoch: u64, mode: Mode, what: &str) -> HoldId {
        let valid = self.connected() && !m.is_lost();
        let node = m.lock_node_path().unwrap_or_default();
        self.grant(
            m.path(),
            mode,
            what,
            valid.then_some(epoch),
            m.fencing_token(),
            &node,
        )
    }

    fn grant(
        &self,
        path: &str,
        mode: Mode,
        what: &str,
        epoch: Option<u64>,
        token: Option<i64>,
        node: &str,
    ) -> HoldId {
        let claim = self.session.claim(epoch);
        let counted = claim.counts();
        let stats = &self.world.stats;
        if counted {
            stats.grants.fetch_add(1, Ordering::Relaxed);
            self.session.note_grant(self.world.history.now());
        } else {
            stats.grants_in_doubt.fetch_add(1, Ordering::Relaxed);
        }
        let shown = token.map_or("-".to_string(), |t| format!("{t:#x}"));
        self.record(format!(
            "grant {what} {path} token={shown} node={node}{}",
            if counted { "" } else { " IN-DOUBT" }
        ));
        self.world
            .oracle
            .enter(path, &self.who, mode, Some(claim), token)
    }

    fn released(&self, what: &str, path: &str, r: Result<()>) {
        match r {
            Ok(()) => self.record(format!("release {what} {path}")),
            Err(e) => self.record(format!("release {what} {path} failed: {e}")),
        }
    }

    fn connected(&self) -> bool {
        self.session
            .client
            .state()
            .is_some_and(ConnectionState::is_connected)
    }

    /// A timeout for an acquire, zero and very short ones included.
    fn timeout(&mut self) -> Duration {
        let ms = self
            .rng
            .weighted(&[(2, 0), (2, 1), (2, 10), (3, 100), (3, 500), (2, 2000)]);
        Duration::from_millis(ms)
    }

    /// The critical section's "work": a short random hold, so that holders
    /// overlap if the lock lets them.
    fn work(&mut self) {
        thread::sleep(self.rng.millis(0, 15));
    }

    fn record(&self, what: String) {
        self.world.history.record(&self.who, what);
    }
}

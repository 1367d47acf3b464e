//! latchkey's side of the scale benchmark: a child process of `bench`
//! (`bench --scale-child CONNECT`) that speaks the same line protocol as
//! the Curator peer (`tests/peers/CuratorPeer.java`) for the scale
//! commands, so that both libraries are driven, and their processes
//! measured, the same way.
//!
//! It prints `READY` once its client is connected, then answers each line
//! on stdin with one line, `OK ...` or `ERR <message>`:
//!
//! - `bench held <path> <locks> <probes>`: the child's client takes and
//!   keeps `locks` revocable mutexes `<path>/l<i>`, then times `probes`
//!   more (each released at once): `OK <acquire_p50_us> <probe_p50_us>
//!   <probe_p99_us>`;
//! - `bench heldcheck`: `OK <held> <same_session 0|1> <first_node_there 0|1>`;
//! - `bench heldrelease`;
//! - `bench hold <path> <sessions>` / `bench unhold`: sessions of their
//!   own, each holding a mutex `<path>/s<i>`;
//! - `bench waiters <path> <sessions> <threads> <seconds> <mntr>` and
//!   `bench naive ...` (the same with the naive lock): threads loop on one
//!   lock: `OK <handoffs> <elapsed_us> <p50_us> <p99_us> <window_handoffs>
//!   <window_requests> <window_watch_events>`;
//! - `bench giveup <path> <sessions> <waiters> <mntr>`: `OK <requests>
//!   <watch_events> <overrun_us>`, medians over [`QUITTERS`] waiters queued
//!   in the middle that time out.
//!
//! It exits when stdin closes.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use latchkey_framework::{Client, CreateMode, ErrorCode, ExponentialBackoffRetry};
use latchkey_recipes::InterProcessMutex;

use super::mntr::{self, Counters};
use super::stats;

type Res<T> = Result<T, String>;

/// Timed-out acquires per `bench giveup`, and the time between their deadlines.
pub const QUITTERS: usize = 3;
const QUIT_GAP: Duration = Duration::from_millis(500);
/// Bound on one acquire of a scale command.
const ACQUIRE_WAIT: Duration = Duration::from_secs(120);
/// Bound on a timed run's threads after their run.
const GRACE: Duration = Duration::from_secs(90);
/// Most contender threads one timed command runs.
const MAX_THREADS: usize = 5_000;
/// Most sessions one command opens.
const MAX_SESSIONS: usize = 1_000;

/// The child's `main`: serves the protocol until stdin closes.
pub fn main(connect: &str, session_timeout: Duration) -> Res<()> {
    let client = clients(connect, 1, session_timeout)?.remove(0);
    let mut child = Child {
        connect: connect.to_owned(),
        session_timeout,
        client,
        held: Vec::new(),
        held_path: None,
        held_session: 0,
        hold: Vec::new(),
    };
    let mut out = std::io::stdout();
    let say = |out: &mut std::io::Stdout, line: &str| -> Res<()> {
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| e.to_string())
    };
    say(&mut out, "READY")?;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match child.dispatch(&words) {
            Ok(r) => format!("OK {r}"),
            Err(e) => format!("ERR {}", e.replace('\n', " ")),
        };
        say(&mut out, &reply)?;
    }
    child.held_release();
    child.unhold();
    child.client.close();
    Ok(())
}

struct Child {
    connect: String,
    session_timeout: Duration,
    client: Client,
    held: Vec<InterProcessMutex>,
    held_path: Option<String>,
    held_session: i64,
    /// `bench hold`'s sessions with their mutexes.
    hold: Vec<(Client, InterProcessMutex)>,
}

fn number<T: std::str::FromStr>(s: &str, what: &str) -> Res<T> {
    s.parse().map_err(|_| format!("bad {what}: {s:?}"))
}

fn seconds(s: &str) -> Res<Duration> {
    let v: f64 = number(s, "seconds")?;
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| *d <= Duration::from_secs(86_400))
        .ok_or_else(|| format!("seconds out of range: {s}"))
}

fn address(s: &str) -> Res<SocketAddr> {
    number(s, "mntr address")
}

fn bounded(n: usize, max: usize, what: &str) -> Res<usize> {
    if n == 0 || n > max {
        return Err(format!("{what} must be 1..={max}: {n}"));
    }
    Ok(n)
}

impl Child {
    fn dispatch(&mut self, w: &[&str]) -> Res<String> {
        match w {
            ["bench", "held", path, locks, probes] => {
                self.held(path, number(locks, "locks")?, number(probes, "probes")?)
            }
            ["bench", "heldcheck"] => self.held_check(),
            ["bench", "heldrelease"] => {
                self.held_release();
                Ok("released".into())
            }
            ["bench", "hold", path, n] => {
                let n = bounded(number(n, "sessions")?, MAX_SESSIONS, "sessions")?;
                self.hold(path, n)
            }
            ["bench", "unhold"] => {
                self.unhold();
                Ok("released".into())
            }
            ["bench", kind @ ("waiters" | "naive"), path, sessions, threads, secs, addr] => {
                let sessions = bounded(number(sessions, "sessions")?, MAX_SESSIONS, "sessions")?;
                let threads = bounded(number(threads, "threads")?, MAX_THREADS, "threads")?;
                let naive = *kind == "naive";
                let clients = clients(&self.connect, sessions, self.session_timeout)?;
                let result = waiters(
                    &clients,
                    path,
                    threads,
                    seconds(secs)?,
                    address(addr)?,
                    naive,
                );
                clients.iter().for_each(Client::close);
                result
            }
            ["bench", "giveup", path, sessions, waiters, addr] => {
                let sessions = bounded(number(sessions, "sessions")?, MAX_SESSIONS, "sessions")?;
                let waiters: usize = number(waiters, "waiters")?;
                if !(QUITTERS..=MAX_THREADS).contains(&waiters) {
                    return Err(format!("waiters must be {QUITTERS}..={MAX_THREADS}"));
                }
                let clients = clients(&self.connect, sessions, self.session_timeout)?;
                let result = give_up(&self.client, &clients, path, waiters, address(addr)?);
                clients.iter().for_each(Client::close);
                result
            }
            ["ping"] => Ok("pong".into()),
            _ => Err(format!("unknown command: {}", w.join(" "))),
        }
    }

    fn held(&mut self, path: &str, locks: usize, probes: usize) -> Res<String> {
        if locks > 100_000 || probes > 100_000 {
            return Err("at most 100000 locks and probes".into());
        }
        self.held_release();
        self.held_path = Some(path.to_owned());
        self.held_session = self.client.session_id();
        let take = |p: String| -> Res<(InterProcessMutex, u64)> {
            let m = InterProcessMutex::new(&self.client, &p).map_err(|e| e.to_string())?;
            m.make_revocable(|| {});
            let t0 = Instant::now();
            if !m.acquire_timeout(ACQUIRE_WAIT).map_err(|e| e.to_string())? {
                return Err(format!("{p} not acquired within {ACQUIRE_WAIT:?}"));
            }
            Ok((m, micros(t0.elapsed())))
        };
        let mut build = Vec::with_capacity(locks);
        for i in 0..locks {
            let (m, us) = take(format!("{path}/l{i}"))?;
            self.held.push(m);
            build.push(us);
        }
        let mut probe = Vec::with_capacity(probes);
        for i in 0..probes {
            let (m, us) = take(format!("{path}/p{i}"))?;
            m.release().map_err(|e| e.to_string())?;
            probe.push(us);
        }
        build.sort_unstable();
        probe.sort_unstable();
        Ok(format!(
            "{} {} {}",
            stats::percentile(&build, 0.5),
            stats::percentile(&probe, 0.5),
            stats::percentile(&probe, 0.99)
        ))
    }

    fn held_check(&self) -> Res<String> {
        let Some(path) = &self.held_path else {
            return Err("no bench held".into());
        };
        let held = self
            .held
            .iter()
            .filter(|m| m.is_owned_by_current_thread() && !m.is_lost())
            .count();
        let same = self.client.session_id() == self.held_session;
        let there = self.held.is_empty()
            || self
                .client
                .get_children(&format!("{path}/l0"))
                .map_err(|e| e.to_string())?
                .len()
                == 1;
        Ok(format!("{held} {} {}", u8::from(same), u8::from(there)))
    }

    fn held_release(&mut self) {
        for m in self.held.drain(..) {
            let _ = m.release();
        }
        self.held_path = None;
    }

    fn hold(&mut self, path: &str, n: usize) -> Res<String> {
        self.unhold();
        for c in clients(&self.connect, n, self.session_timeout)? {
            let i = self.hold.len();
            let m = InterProcessMutex::new(&c, &format!("{path}/s{i}")).map_err(|e| e.to_string());
            let m = match m {
                Ok(m) => m,
                Err(e) => {
                    c.close();
                    return Err(e);
                }
            };
            self.hold.push((c, m));
            let m = &self.hold[i].1;
            if !m.acquire_timeout(ACQUIRE_WAIT).map_err(|e| e.to_string())? {
                return Err(format!("{path}/s{i} not acquired within {ACQUIRE_WAIT:?}"));
            }
        }
        Ok(n.to_string())
    }

    fn unhold(&mut self) {
        for (c, m) in self.hold.drain(..) {
            let _ = m.release();
            c.close();
        }
    }
}

/// `n` started clients with their own sessions, all connected.
pub fn clients(connect: &str, n: usize, session_timeout: Duration) -> Res<Vec<Client>> {
    let mut clients = Vec::with_capacity(n);
    let close_all = |clients: &[Client]| clients.iter().for_each(Client::close);
    for _ in 0..n {
        let built = Client::builder()
            .connect_string(connect)
            .session_timeout(session_timeout)
            .connection_timeout(Duration::from_secs(5))
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 3))
            .build()
            .and_then(|c| c.start().map(|()| c));
        match built {
            Ok(c) => clients.push(c),
            Err(e) => {
                close_all(&clients);
                return Err(e.to_string());
            }
        }
    }
    for c in &clients {
        if !c
            .block_until_connected(Duration::from_secs(60))
            .unwrap_or(false)
        {
            close_all(&clients);
            return Err("a session did not connect within 60 s".into());
        }
    }
    Ok(clients)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn read_mntr(addr: SocketAddr) -> Res<Counters> {
    let text = latchkey_test::four_letter_word(addr, "mntr", Duration::from_secs(5))
        .map_err(|e| format!("mntr: {e}"))?;
    mntr::parse(&text).ok_or_else(|| "mntr: no zk_packets_received".to_string())
}

fn sleep_until(at: Instant) {
    thread::sleep(at.saturating_duration_since(Instant::now()));
}

/// The lock the seed articles start from: one ephemeral node; whoever
/// creates it holds the lock, everyone else watches it and tries again when
/// it goes. Every waiter wakes on every release: the herd effect.
struct NaiveLock {
    client: Client,
    node: String,
}

impl NaiveLock {
    fn acquire(&self, deadline: Instant) -> Res<bool> {
        let err = |e: latchkey_framework::Error| format!("naive lock {}: {e}", self.node);
        loop {
            match self
                .client
                .create()
                .mode(CreateMode::Ephemeral)
                .for_path(&self.node, b"")
            {
                Ok(_) => return Ok(true),
                Err(e) if e.is(ErrorCode::NodeExists) => {}
                Err(e) => return Err(err(e)),
            }
            let fired = Arc::new((Mutex::new(false), Condvar::new()));
            let signal = Arc::clone(&fired);
            let watched = self
                .client
                .exists_watch_waker(&self.node, move |_| {
                    if let Ok(mut f) = signal.0.lock() {
                        *f = true;
                    }
                    signal.1.notify_all();
                })
                .map_err(err)?;
            if watched.is_none() {
                continue; // gone already: try again
            }
            let (lock, cond) = &*fired;
            let mut f = lock.lock().map_err(|_| "poisoned")?;
            while !*f {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(false);
                }
                f = cond.wait_timeout(f, left).map_err(|_| "poisoned")?.0;
            }
        }
    }

    fn release(&self) -> Res<()> {
        self.client
            .delete()
            .for_path(&self.node)
            .map_err(|e| format!("naive lock {}: {e}", self.node))
    }
}

/// Either lock, for the timed run.
enum AnyLock {
    Sequential(InterProcessMutex),
    Naive(NaiveLock),
}

impl AnyLock {
    fn acquire(&self, left: Duration) -> Res<bool> {
        match self {
            AnyLock::Sequential(m) => m.acquire_timeout(left).map_err(|e| e.to_string()),
            AnyLock::Naive(n) => n.acquire(Instant::now() + left),
        }
    }

    fn release(&self) -> Res<()> {
        match self {
            AnyLock::Sequential(m) => m.release().map_err(|e| e.to_string()),
            AnyLock::Naive(n) => n.release(),
        }
    }
}

/// `threads` contenders over `clients` loop on one lock for `run`, as the
/// contended benchmark does (handoff latency from one holder's release
/// returning to the next one's acquire returning), with the server's
/// counters read at 1/4 and 3/4 of the run.
fn waiters(
    clients: &[Client],
    path: &str,
    threads: usize,
    run: Duration,
    addr: SocketAddr,
    naive: bool,
) -> Res<String> {
    let locks: Vec<AnyLock> = (0..threads)
        .map(|i| {
            let c = &clients[i % clients.len()];
            if naive {
                Ok(AnyLock::Naive(NaiveLock {
                    client: c.clone(),
                    node: format!("{path}/lock"),
                }))
            } else {
                InterProcessMutex::new(c, path)
                    .map(AnyLock::Sequential)
                    .map_err(|e| e.to_string())
            }
        })
        .collect::<Res<_>>()?;
    if naive {
        clients[0].ensure_path(path).map_err(|e| e.to_string())?;
    }
    let generation = Arc::new(AtomicU64::new(0));
    let holders = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let failure: Arc<Mutex<Option<String>>> = Arc::default();
    let gate = Arc::new(Barrier::new(threads + 1));
    let start = Instant::now() + Duration::from_millis(50);
    let end = start + run;
    let handles: Vec<JoinHandle<Vec<(u64, Instant, Instant)>>> = locks
        .into_iter()
        .map(|lock| {
            let (generation, holders, stop, failure, gate) = (
                Arc::clone(&generation),
                Arc::clone(&holders),
                Arc::clone(&stop),
                Arc::clone(&failure),
                Arc::clone(&gate),
            );
            let path = path.to_owned();
            thread::spawn(move || {
                gate.wait();
                sleep_until(start);
                let mut out = Vec::new();
                let step = |out: &mut Vec<_>| -> Res<bool> {
                    let left = end.saturating_duration_since(Instant::now());
                    if left.is_zero() || !lock.acquire(left)? {
                        return Ok(false);
                    }
                    let acquired = Instant::now();
                    if holders.fetch_add(1, Ordering::SeqCst) != 0 {
                        return Err(format!("two holders of {path} at once"));
                    }
                    let g = generation.fetch_add(1, Ordering::SeqCst);
                    holders.fetch_sub(1, Ordering::SeqCst);
                    lock.release()?;
                    out.push((g, acquired, Instant::now()));
                    Ok(true)
                };
                while !stop.load(Ordering::Acquire) {
                    match step(&mut out) {
                        Ok(true) => {}
                        Ok(false) => break,
                        Err(e) => {
                            stop.store(true, Ordering::Release);
                            if let Ok(mut f) = failure.lock() {
                                f.get_or_insert(e);
                            }
                            break;
                        }
                    }
                }
                out
            })
        })
        .collect();
    gate.wait();
    sleep_until(start + run / 4);
    let window = (|| {
        let (g0, m0) = (generation.load(Ordering::SeqCst), read_mntr(addr)?);
        sleep_until(start + run * 3 / 4);
        let (g1, m1) = (generation.load(Ordering::SeqCst), read_mntr(addr)?);
        Ok::<_, String>((g1 - g0, m0.until(m1)))
    })();
    let records = join_bounded(handles, end + GRACE, &stop)?;
    let elapsed = start.elapsed();
    if let Some(e) = failure.lock().ok().and_then(|mut f| f.take()) {
        return Err(e);
    }
    let (handoffs, counters) = window?;
    let total = generation.load(Ordering::SeqCst) as usize;
    let mut acquired_at = vec![None; total];
    let mut released_at = vec![None; total];
    for (g, a, r) in records.into_iter().flatten() {
        acquired_at[g as usize] = Some(a);
        released_at[g as usize] = Some(r);
    }
    let mut gaps: Vec<u64> = (1..total)
        .filter_map(|g| {
            Some(micros(
                acquired_at[g]?.saturating_duration_since(released_at[g - 1]?),
            ))
        })
        .collect();
    gaps.sort_unstable();
    Ok(format!(
        "{total} {} {} {} {handoffs} {} {}",
        micros(elapsed),
        stats::percentile(&gaps, 0.5),
        stats::percentile(&gaps, 0.99),
        counters.requests,
        counters.watch_events
    ))
}

/// Joins every thread by `deadline`; past it, tells them to stop and fails.
fn join_bounded<T>(
    handles: Vec<JoinHandle<T>>,
    deadline: Instant,
    stop: &AtomicBool,
) -> Res<Vec<T>> {
    while handles.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    if handles.iter().any(|h| !h.is_finished()) {
        stop.store(true, Ordering::Release);
        return Err("a bench thread was still busy after its run".into());
    }
    handles
        .into_iter()
        .map(|h| h.join().map_err(|_| "a bench thread panicked".to_string()))
        .collect()
}

/// Waits (bounded) until `path` has `count` children.
fn await_children(client: &Client, path: &str, count: usize) -> Res<()> {
    let deadline = Instant::now() + ACQUIRE_WAIT;
    loop {
        let n = match client.get_children(path) {
            Ok(c) => c.len(),
            Err(e) if e.is(ErrorCode::NoNode) => 0,
            Err(e) => return Err(e.to_string()),
        };
        if n == count {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("{path} has {n} children, not {count}"));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

fn median(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    stats::percentile(&v, 0.5)
}

fn fail(failure: &Mutex<Option<String>>, e: String) {
    if let Ok(mut f) = failure.lock() {
        f.get_or_insert(e);
    }
}

/// A waiter that takes the lock when its turn comes and gives it back.
fn spawn_waiter(m: InterProcessMutex, failure: Arc<Mutex<Option<String>>>) -> JoinHandle<()> {
    thread::spawn(move || match m.acquire_timeout(ACQUIRE_WAIT) {
        Ok(true) => {
            if let Err(e) = m.release() {
                fail(&failure, e.to_string());
            }
        }
        Ok(false) => fail(&failure, "a waiter timed out".into()),
        Err(e) => fail(&failure, e.to_string()),
    })
}

/// One holder and `waiters` waiters on one mutex (threads over
/// `clients`); [`QUITTERS`] of them, queued in the middle, time out
/// [`QUIT_GAP`] apart. Around each give-up the server's counters give the
/// requests (less the `mntr` reading itself) and watch events it cost;
/// the overrun is how long after its deadline the acquire returned.
fn give_up(
    watcher: &Client,
    clients: &[Client],
    path: &str,
    waiters: usize,
    addr: SocketAddr,
) -> Res<String> {
    let err = |e: latchkey_framework::Error| e.to_string();
    let holder = InterProcessMutex::new(&clients[0], path).map_err(err)?;
    if !holder.acquire_timeout(ACQUIRE_WAIT).map_err(err)? {
        return Err(format!("{path} not acquired"));
    }
    let failure: Arc<Mutex<Option<String>>> = Arc::default();
    let mut next = 0usize;
    let mut mutex = || {
        next += 1;
        InterProcessMutex::new(&clients[next % clients.len()], path).map_err(err)
    };
    let mut handles: Vec<JoinHandle<()>> = Vec::new();
    let first = (waiters - QUITTERS) / 2;
    for _ in 0..first {
        handles.push(spawn_waiter(mutex()?, Arc::clone(&failure)));
    }
    await_children(watcher, path, 1 + first)?;
    let quit_at = Instant::now() + Duration::from_millis(2000 + 10 * waiters as u64);
    let deadlines: Vec<Instant> = (0..QUITTERS)
        .map(|k| quit_at + QUIT_GAP * k as u32)
        .collect();
    let mut quitters = Vec::new();
    for &deadline in &deadlines {
        let m = mutex()?;
        let failure = Arc::clone(&failure);
        quitters.push(thread::spawn(move || {
            match m.acquire_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(false) => Some(Instant::now()),
                Ok(true) => {
                    let _ = m.release();
                    fail(&failure, "a quitter got the lock".into());
                    None
                }
                Err(e) => {
                    fail(&failure, e.to_string());
                    None
                }
            }
        }));
    }
    await_children(watcher, path, 1 + first + QUITTERS)?;
    for _ in 0..waiters - first - QUITTERS {
        handles.push(spawn_waiter(mutex()?, Arc::clone(&failure)));
    }
    await_children(watcher, path, 1 + waiters)?;
    if Instant::now() + Duration::from_millis(100) > quit_at {
        return Err(format!(
            "queueing {waiters} waiters took longer than the give-up wait"
        ));
    }
    let (mut requests, mut events, mut overrun) = (Vec::new(), Vec::new(), Vec::new());
    for (k, q) in quitters.into_iter().enumerate() {
        sleep_until(deadlines[k] - Duration::from_millis(50));
        let m0 = read_mntr(addr)?;
        let bound = deadlines[k] + ACQUIRE_WAIT;
        while !q.is_finished() && Instant::now() < bound {
            thread::sleep(Duration::from_millis(1));
        }
        if !q.is_finished() {
            return Err("a waiter that should give up did not return".into());
        }
        let Some(returned) = q.join().ok().flatten() else {
            break;
        };
        thread::sleep(Duration::from_millis(100));
        let c = m0.until(read_mntr(addr)?);
        requests.push(c.requests.saturating_sub(1));
        events.push(c.watch_events);
        overrun.push(micros(returned.saturating_duration_since(deadlines[k])));
    }
    let drained = await_children(watcher, path, 1 + waiters - QUITTERS);
    holder.release().map_err(err)?;
    let stop = AtomicBool::new(false);
    join_bounded(handles, Instant::now() + ACQUIRE_WAIT, &stop)?;
    if let Some(e) = failure.lock().ok().and_then(|mut f| f.take()) {
        return Err(e);
    }
    drained?;
    Ok(format!(
        "{} {} {}",
        median(&requests),
        median(&events),
        median(&overrun)
    ))
}

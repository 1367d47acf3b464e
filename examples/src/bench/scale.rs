//! The scale section of the benchmark (`bench --scale`): how each cost
//! grows with held locks per client, waiters per lock and sessions per
//! process, for latchkey (in a child process of `bench`, see
//! [`super::scale_child`]) and Curator (in its Java peer), on the same
//! server in the same run, and the naive exclusive lock of the seed
//! articles beside the sequential-node lock.
//!
//! It writes its own section of `docs/BENCHMARKS.md`, between
//! [`BEGIN`] and [`END`], and leaves the rest of the file alone; the main
//! run keeps the section when it rewrites the file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use latchkey_test::peers::{Peer, PeerKind};
use latchkey_test::{four_letter_word, TestingServer};

use super::report::{fmt_ratio, fmt_value, Library};
use super::scale_child::QUITTERS;
use super::svg::{Chart, Series};
use super::{mntr, procfs};

type Res<T> = Result<T, String>;

/// Where the scale section starts in `BENCHMARKS.md`.
pub const BEGIN: &str = "<!-- scale:begin -->";
/// Where it ends.
pub const END: &str = "<!-- scale:end -->";

/// The held-locks and sessions subjects' session timeout: long enough to
/// ride out a server restart on a loaded machine.
const SESSION_TIMEOUT: Duration = Duration::from_secs(20);
/// The sessions subjects' session timeout: each session pings every 10 s
/// (a third of it), in the Java client as in latchkey.
const IDLE_SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the sessions subjects are watched idle.
const IDLE: Duration = Duration::from_secs(10);
/// Sessions a waiters run spreads its threads over, at most.
const WAITER_SESSIONS: usize = 50;
/// Server restarts per held set; the figure is their median.
const RESTARTS: usize = 3;
/// Locks taken (and released) per library before the held-locks figures.
const HELD_WARMUP: usize = 1_000;
/// The fewest held locks whose memory per lock is reported.
const MIN_LOCKS_FOR_MEMORY: usize = 100;
/// How long the memory reading waits for a process to settle.
const SETTLE: Duration = Duration::from_secs(1);
/// Bound on a held set becoming usable after the restart.
const RESTART_WAIT: Duration = Duration::from_secs(60);
/// The command that writes the section.
pub const COMMAND: &str = "cargo run --release -p latchkey-examples --bin bench -- --scale";

/// What a scale run measures.
#[derive(Clone, Debug)]
pub struct ScaleConfig {
    /// Locks held at once by one client.
    pub held: Vec<usize>,
    /// Extra acquires timed while the locks are held.
    pub probes: usize,
    /// Waiters behind the holder of one lock.
    pub waiters: Vec<usize>,
    /// Sessions in one process.
    pub sessions: Vec<usize>,
    /// A waiters run lasts this, plus 6 ms a waiter (to queue them all).
    pub waiter_run: Duration,
    /// Whether this is the short run.
    pub quick: bool,
}

impl ScaleConfig {
    /// The sizes of the issue: 1 to 10,000 held locks, 2 to 1,000
    /// waiters, 1 to 1,000 sessions.
    pub fn full() -> Self {
        ScaleConfig {
            held: vec![1, 100, 1_000, 10_000],
            probes: 200,
            waiters: vec![2, 10, 100, 1_000],
            sessions: vec![1, 100, 1_000],
            waiter_run: Duration::from_secs(2),
            quick: false,
        }
    }

    /// A short run: a tenth of the largest sizes.
    pub fn quick() -> Self {
        ScaleConfig {
            held: vec![1, 100, 1_000],
            probes: 100,
            waiters: vec![2, 10, 100],
            sessions: vec![1, 100],
            waiter_run: Duration::from_millis(1500),
            quick: true,
        }
    }

    fn run_for(&self, waiters: usize) -> Duration {
        self.waiter_run + Duration::from_millis(6) * waiters as u32
    }
}

/// Reads a size list such as `1,100,1000`.
pub fn parse_sizes(s: &str) -> Res<Vec<usize>> {
    let mut v: Vec<usize> = s
        .split(',')
        .map(|n| n.trim().replace('_', "").parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("bad size list {s:?}"))?;
    v.sort_unstable();
    v.dedup();
    if v.is_empty() || v[0] == 0 || v[v.len() - 1] > 100_000 {
        return Err(format!("sizes must be 1..=100000: {s:?}"));
    }
    Ok(v)
}

/// One figure: a curve's value at one size for one library.
#[derive(Default, Debug, Clone)]
pub struct ScaleResults {
    values: BTreeMap<(&'static str, usize, Library), f64>,
    notes: Vec<String>,
}

impl ScaleResults {
    fn put(&mut self, curve: &'static str, size: usize, lib: Library, v: f64) {
        self.values.insert((curve, size, lib), v);
    }

    /// The value of `curve` at `size` for `lib`.
    pub fn get(&self, curve: &str, size: usize, lib: Library) -> Option<f64> {
        self.values
            .iter()
            .find(|((c, s, l), _)| *c == curve && *s == size && *l == lib)
            .map(|(_, v)| *v)
            .filter(|v| v.is_finite())
    }

    fn sizes(&self, curve: &str, lib: Library) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .values
            .keys()
            .filter(|(c, _, l)| *c == curve && *l == lib)
            .map(|(_, s, _)| *s)
            .collect();
        v.dedup();
        v
    }
}

/// A process that answers the scale commands: latchkey's child or the
/// Curator peer.
enum Subject {
    Child {
        child: Child,
        stdin: Option<ChildStdin>,
        lines: Receiver<String>,
    },
    Peer(Peer),
}

impl Subject {
    fn start(lib: Library, connect: &str, session_timeout: Duration) -> Res<Subject> {
        match lib {
            Library::Latchkey => {
                let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                let mut child = Command::new(exe)
                    .args([
                        "--scale-child",
                        connect,
                        &session_timeout.as_millis().to_string(),
                    ])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot start the scale child: {e}"))?;
                let stdout = child.stdout.take().ok_or("no stdout")?;
                let stdin = child.stdin.take();
                let (tx, lines) = mpsc::channel();
                thread::spawn(move || {
                    for line in BufReader::new(stdout).lines() {
                        let Ok(line) = line else { break };
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                });
                let mut s = Subject::Child {
                    child,
                    stdin,
                    lines,
                };
                match s.next_line(Duration::from_secs(90))?.as_str() {
                    "READY" => Ok(s),
                    other => Err(format!("the scale child said {other:?}")),
                }
            }
            _ => Peer::start_with_session_timeout(PeerKind::Curator, connect, session_timeout)
                .map(Subject::Peer)
                .map_err(|e| format!("cannot start the Curator peer: {e}")),
        }
    }

    fn next_line(&mut self, timeout: Duration) -> Res<String> {
        match self {
            Subject::Child { lines, .. } => lines
                .recv_timeout(timeout)
                .map_err(|_| format!("the scale child did not answer within {timeout:?}")),
            Subject::Peer(_) => Err("not a child".into()),
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Subject::Child { child, .. } => child.id(),
            Subject::Peer(p) => p.pid(),
        }
    }

    /// Sends `line`; the numbers after `OK`.
    fn numbers(&mut self, line: &str, timeout: Duration) -> Res<Vec<f64>> {
        let reply = self.ok(line, timeout)?;
        reply
            .split_whitespace()
            .map(|w| w.parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|_| format!("`{line}` answered `{reply}`"))
    }

    /// Sends `line`; what follows `OK`.
    fn ok(&mut self, line: &str, timeout: Duration) -> Res<String> {
        Ok(match self {
            Subject::Peer(p) => p
                .command_ok(line, timeout)
                .map_err(|e| format!("Curator: {e}"))?,
            Subject::Child { stdin, .. } => {
                let Some(stdin) = stdin.as_mut() else {
                    return Err("the scale child's stdin is closed".into());
                };
                writeln!(stdin, "{line}")
                    .and_then(|()| stdin.flush())
                    .map_err(|e| format!("latchkey: {e}"))?;
                let answer = self.next_line(timeout)?;
                match answer.strip_prefix("OK") {
                    Some(rest) => rest.trim().to_owned(),
                    None => return Err(format!("latchkey: `{line}`: {answer}")),
                }
            }
        })
    }

    fn finish(self) {
        match self {
            Subject::Peer(mut p) => {
                let _ = p.quit(Duration::from_secs(10));
            }
            Subject::Child {
                mut child, stdin, ..
            } => {
                drop(stdin);
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline {
                    if matches!(child.try_wait(), Ok(Some(_))) {
                        return;
                    }
                    thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// A fresh subject for `lib`, `work` on it, and the subject ended whatever
/// happens.
fn with_subject<T>(
    lib: Library,
    connect: &str,
    work: impl FnOnce(&mut Subject) -> Res<T>,
) -> Res<T> {
    with_subject_for(lib, connect, SESSION_TIMEOUT, work)
}

/// [`with_subject`] whose sessions ask for `session_timeout`.
fn with_subject_for<T>(
    lib: Library,
    connect: &str,
    session_timeout: Duration,
    work: impl FnOnce(&mut Subject) -> Res<T>,
) -> Res<T> {
    let mut s = Subject::start(lib, connect, session_timeout)?;
    let r = work(&mut s);
    s.finish();
    r
}

/// One `mntr` value; `timeout` bounds the connection and the answer.
fn mntr_value(addr: SocketAddr, key: &str, timeout: Duration) -> Option<u64> {
    four_letter_word(addr, "mntr", timeout)
        .ok()
        .and_then(|t| mntr::value(&t, key))
}

/// The machine's 1-minute load average.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// What the scale run needs from the bench: where the server is, and the
/// server itself when the bench started it (for the restart).
pub struct Target<'a> {
    /// The connect string.
    pub connect: &'a str,
    /// The server that answers `mntr`.
    pub mntr: SocketAddr,
    /// The embedded server, restarted by the held-locks scenario.
    pub server: Option<&'a mut TestingServer>,
    /// A fresh path for a scenario.
    pub path: &'a dyn Fn(&str) -> String,
}

/// Runs every scale scenario for `libs` (latchkey and Curator).
pub fn run(cfg: &ScaleConfig, libs: &[Library], mut t: Target<'_>) -> Res<ScaleResults> {
    let mut r = ScaleResults::default();
    let libs: Vec<Library> = libs
        .iter()
        .copied()
        .filter(|l| matches!(l, Library::Latchkey | Library::Curator))
        .collect();
    // The first figures of a run would otherwise pay for a cold server
    // (and JVM): the smallest size would look slower than the largest.
    for &lib in &libs {
        let path = (t.path)(&format!("{}-held-warmup", lib.name()));
        let warm = HELD_WARMUP.min(cfg.held.iter().copied().max().unwrap_or(1));
        with_subject(lib, t.connect, |s| {
            s.numbers(
                &format!("bench held {path} {warm} {}", cfg.probes),
                Duration::from_secs(300),
            )?;
            s.ok("bench heldrelease", Duration::from_secs(120))
        })?;
    }
    for &n in &cfg.held {
        for &lib in &libs {
            held(cfg, lib, n, &mut t, &mut r)?;
        }
    }
    for &lib in &libs {
        with_subject(lib, t.connect, |s| {
            for &w in &cfg.waiters {
                waiters(cfg, lib, s, w, &t, &mut r, false)?;
                if lib == Library::Latchkey {
                    waiters(cfg, lib, s, w, &t, &mut r, true)?;
                }
                if w >= QUITTERS {
                    give_up(lib, s, w, &t, &mut r)?;
                }
            }
            Ok(())
        })?;
    }
    for &n in &cfg.sessions {
        for &lib in &libs {
            sessions(lib, n, &t, &mut r)?;
        }
    }
    Ok(r)
}

fn held(
    cfg: &ScaleConfig,
    lib: Library,
    n: usize,
    t: &mut Target<'_>,
    r: &mut ScaleResults,
) -> Res<()> {
    let path = (t.path)(&format!("{}-held-{n}", lib.name()));
    with_subject(lib, t.connect, |s| {
        let pid = s.pid();
        thread::sleep(SETTLE);
        let rss0 = procfs::rss_bytes(pid).map_err(|e| e.to_string())?;
        let timeout =
            Duration::from_secs(120) + Duration::from_millis(20) * (n + cfg.probes) as u32;
        let v = s.numbers(&format!("bench held {path} {n} {}", cfg.probes), timeout)?;
        let [build_p50, probe_p50, probe_p99] = v[..] else {
            return Err(format!("bench held answered {v:?}"));
        };
        thread::sleep(SETTLE);
        let rss1 = procfs::rss_bytes(pid).map_err(|e| e.to_string())?;
        // Below this many locks the resident set moves by whole pages and
        // heap steps, not by what a lock costs.
        let per_lock = if n >= MIN_LOCKS_FOR_MEMORY {
            (rss1 as f64 - rss0 as f64) / n as f64
        } else {
            f64::NAN
        };
        r.put("held.build_p50", n, lib, build_p50);
        r.put("held.probe_p50", n, lib, probe_p50);
        r.put("held.probe_p99", n, lib, probe_p99);
        r.put("held.bytes_per_lock", n, lib, per_lock);
        let mut line = format!(
            "  {:<8} held {n:>6}: acquire p50 {build_p50} µs, probe p50 {probe_p50} µs, p99 {probe_p99} µs, {:.0} bytes a lock",
            lib.name(),
            per_lock
        );
        if let Some(server) = t.server.as_deref_mut() {
            // Only this process has watches: its set's own, one a lock.
            let watches = n as u64;
            let mut times = Vec::new();
            for _ in 0..RESTARTS {
                server
                    .restart()
                    .map_err(|e| format!("cannot restart ZooKeeper: {e}"))?;
                match usable_after_restart(s, t.mntr, n, watches, Instant::now()) {
                    Ok(d) => times.push(d.as_secs_f64() * 1e3),
                    Err(e) => {
                        r.notes.push(format!(
                            "{} with {n} held locks after a restart: {e}",
                            lib.name()
                        ));
                        let _ = write!(line, ", not usable after a restart: {e}");
                        break;
                    }
                }
            }
            if times.len() == RESTARTS {
                let median = super::stats::median(&times).unwrap_or(f64::NAN);
                let max = times.iter().copied().fold(0.0, f64::max);
                r.put("held.restart_ms", n, lib, median);
                r.put("held.restart_max_ms", n, lib, max);
                let _ = write!(
                    line,
                    ", usable {median:.0} ms after a restart (median of {RESTARTS}; slowest {max:.0} ms)"
                );
            }
        }
        println!("{line}");
        s.ok(
            "bench heldrelease",
            Duration::from_secs(120) + Duration::from_millis(10) * n as u32,
        )?;
        Ok(())
    })
}

/// From the restarted server serving (`back`) until the server counts the
/// set's watches again (re-armed by the resumed session) and the client
/// answers a round trip with every lock still held in the same session.
fn usable_after_restart(
    s: &mut Subject,
    addr: SocketAddr,
    n: usize,
    watches: u64,
    back: Instant,
) -> Res<Duration> {
    let deadline = back + RESTART_WAIT;
    let mut seen = None;
    loop {
        // A short bound: a reading that hangs on the starting server must
        // not count as time the client needed.
        let count = mntr_value(addr, "zk_watch_count", Duration::from_millis(250));
        if count.is_some_and(|w| w >= watches) {
            break;
        }
        seen = count.or(seen);
        if Instant::now() >= deadline {
            // Say what the client thinks: same session, locks held?
            let check = s.numbers("bench heldcheck", Duration::from_secs(30));
            return Err(format!(
                "the server counted {} of the {watches} watches after {} s \
                 (heldcheck, held / same session / first node there: {check:?})",
                seen.map_or("no reading".into(), |c| c.to_string()),
                RESTART_WAIT.as_secs()
            ));
        }
        thread::sleep(Duration::from_millis(5));
    }
    let watched = back.elapsed();
    let v = s.numbers("bench heldcheck", RESTART_WAIT)?;
    let took = back.elapsed();
    println!(
        "    watches re-armed after {:.0} ms, the client answered after {:.0} ms",
        watched.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e3
    );
    match v[..] {
        [held, same, there] if held as usize == n && same == 1.0 && there == 1.0 => Ok(took),
        _ => Err(format!("heldcheck answered {v:?} (want {n} 1 1)")),
    }
}

fn waiters(
    cfg: &ScaleConfig,
    lib: Library,
    s: &mut Subject,
    w: usize,
    t: &Target<'_>,
    r: &mut ScaleResults,
    naive: bool,
) -> Res<()> {
    let (kind, curve) = if naive {
        ("naive", "naive")
    } else {
        ("waiters", "waiters")
    };
    let path = (t.path)(&format!("{}-{kind}-{w}", lib.name()));
    let threads = w + 1;
    let sessions = threads.min(WAITER_SESSIONS);
    let run = cfg.run_for(w);
    let v = s.numbers(
        &format!(
            "bench {kind} {path} {sessions} {threads} {} {}",
            run.as_secs_f64(),
            t.mntr
        ),
        run + Duration::from_secs(240),
    )?;
    let [cycles, elapsed_us, p50, p99, handoffs, requests, events] = v[..] else {
        return Err(format!("bench {kind} answered {v:?}"));
    };
    let key = |what: &str| -> &'static str {
        match (naive, what) {
            (false, "requests") => "waiters.requests",
            (false, "events") => "waiters.events",
            (false, "p50") => "waiters.p50",
            (false, "p99") => "waiters.p99",
            (false, _) => "waiters.throughput",
            (true, "requests") => "naive.requests",
            (true, "events") => "naive.events",
            (true, "p50") => "naive.p50",
            (true, "p99") => "naive.p99",
            (true, _) => "naive.throughput",
        }
    };
    let (req, ev) = if handoffs > 0.0 {
        (requests / handoffs, events / handoffs)
    } else {
        (f64::NAN, f64::NAN)
    };
    r.put(key("requests"), w, lib, req);
    r.put(key("events"), w, lib, ev);
    r.put(key("p50"), w, lib, p50);
    r.put(key("p99"), w, lib, p99);
    r.put(
        key("throughput"),
        w,
        lib,
        cycles / (elapsed_us.max(1.0) / 1e6),
    );
    println!(
        "  {:<8} {curve:<7} {w:>5} waiters ({sessions} sessions): {req:.2} requests, {ev:.2} watch events per handoff, p50 {p50} µs, p99 {p99} µs ({handoffs} handoffs counted)",
        lib.name()
    );
    Ok(())
}

fn give_up(
    lib: Library,
    s: &mut Subject,
    w: usize,
    t: &Target<'_>,
    r: &mut ScaleResults,
) -> Res<()> {
    let path = (t.path)(&format!("{}-giveup-{w}", lib.name()));
    let sessions = (w + 1).min(WAITER_SESSIONS);
    let v = s.numbers(
        &format!("bench giveup {path} {sessions} {w} {}", t.mntr),
        Duration::from_secs(400),
    )?;
    let [requests, events, overrun_us] = v[..] else {
        return Err(format!("bench giveup answered {v:?}"));
    };
    r.put("giveup.requests", w, lib, requests);
    r.put("giveup.events", w, lib, events);
    r.put("giveup.overrun_ms", w, lib, overrun_us / 1e3);
    println!(
        "  {:<8} give-up {w:>5} waiters: {requests} requests, {events} watch events, returned {:.1} ms after its deadline",
        lib.name(),
        overrun_us / 1e3
    );
    Ok(())
}

fn sessions(lib: Library, n: usize, t: &Target<'_>, r: &mut ScaleResults) -> Res<()> {
    let path = (t.path)(&format!("{}-sessions-{n}", lib.name()));
    with_subject_for(lib, t.connect, IDLE_SESSION_TIMEOUT, |s| {
        s.numbers(
            &format!("bench hold {path} {n}"),
            Duration::from_secs(120) + Duration::from_millis(50) * n as u32,
        )?;
        thread::sleep(SETTLE);
        let pid = s.pid();
        let io = |e: std::io::Error| e.to_string();
        let rss = procfs::rss_bytes(pid).map_err(io)? as f64;
        let threads = procfs::threads(pid).map_err(io)? as f64;
        r.put("sessions.rss_mib", n, lib, rss / 1048576.0);
        r.put("sessions.threads", n, lib, threads);
        // Then the idle cost: what the process spends doing nothing but
        // keeping its sessions (pings and their replies, timers, and for a
        // JVM its own housekeeping).
        let (cpu0, woke0) = (procfs::cpu_time(pid), procfs::context_switches(pid));
        let t0 = Instant::now();
        thread::sleep(IDLE);
        let (cpu1, woke1) = (procfs::cpu_time(pid), procfs::context_switches(pid));
        let secs = t0.elapsed().as_secs_f64();
        let cpu = cpu1.map_err(io)?.saturating_sub(cpu0.map_err(io)?);
        let woke = woke1.map_err(io)?.saturating_sub(woke0.map_err(io)?);
        let cpu_ms = cpu.as_secs_f64() * 1e3 / secs;
        let wakeups = woke as f64 / secs;
        r.put("sessions.idle_cpu_ms", n, lib, cpu_ms);
        r.put("sessions.idle_wakeups", n, lib, wakeups);
        println!(
            "  {:<8} sessions {n:>5}: {:.1} MiB, {threads} threads; idle {cpu_ms:.1} ms CPU and {wakeups:.0} wake-ups per second",
            lib.name(),
            rss / 1048576.0
        );
        let _ = s.ok("bench unhold", Duration::from_secs(120));
        Ok(())
    })?;
    // Per session: the growth from the smallest count measured.
    let first = r.sizes("sessions.rss_mib", lib).first().copied();
    if let Some(first) = first.filter(|&f| f < n) {
        let d = (n - first) as f64;
        for (total, per) in [
            ("sessions.rss_mib", "sessions.kib_per_session"),
            ("sessions.threads", "sessions.threads_per_session"),
        ] {
            if let (Some(a), Some(b)) = (r.get(total, first, lib), r.get(total, n, lib)) {
                let scale = if per.ends_with("kib_per_session") {
                    1024.0
                } else {
                    1.0
                };
                r.put(per, n, lib, (b - a) * scale / d);
            }
        }
    }
    Ok(())
}

// ----- the report ------------------------------------------------------------

/// How a scale run went, for the docs.
pub struct RunInfo {
    /// When it started.
    pub started: SystemTime,
    /// How long it took.
    pub took: Duration,
    /// The 1-minute load average before and after.
    pub load: (f64, f64),
    /// The machine.
    pub machine: String,
    /// Whether the server was the bench's own (so it could be restarted).
    pub restarted: bool,
}

struct Curve {
    key: &'static str,
    label: &'static str,
    unit: &'static str,
}

const CURVES: &[Curve] = &[
    Curve {
        key: "held.probe_p50",
        label: "acquire latency p50 while holding N locks",
        unit: "µs",
    },
    Curve {
        key: "held.build_p50",
        label: "acquire latency p50 while taking the N locks",
        unit: "µs",
    },
    Curve {
        key: "held.bytes_per_lock",
        label: "client memory per held lock",
        unit: "bytes",
    },
    Curve {
        key: "held.restart_ms",
        label: "N held locks usable again after a server restart, median",
        unit: "ms",
    },
    Curve {
        key: "held.restart_max_ms",
        label: "N held locks usable again after a server restart, slowest",
        unit: "ms",
    },
    Curve {
        key: "waiters.requests",
        label: "requests per handoff, N waiters",
        unit: "requests",
    },
    Curve {
        key: "waiters.events",
        label: "watch events per handoff, N waiters",
        unit: "events",
    },
    Curve {
        key: "waiters.p50",
        label: "handoff latency p50, N waiters",
        unit: "µs",
    },
    Curve {
        key: "waiters.p99",
        label: "handoff latency p99, N waiters",
        unit: "µs",
    },
    Curve {
        key: "naive.requests",
        label: "naive lock: requests per handoff, N waiters",
        unit: "requests",
    },
    Curve {
        key: "naive.events",
        label: "naive lock: watch events per handoff, N waiters",
        unit: "events",
    },
    Curve {
        key: "naive.p50",
        label: "naive lock: handoff latency p50, N waiters",
        unit: "µs",
    },
    Curve {
        key: "giveup.requests",
        label: "requests per give-up, N waiters",
        unit: "requests",
    },
    Curve {
        key: "giveup.events",
        label: "watch events per give-up, N waiters",
        unit: "events",
    },
    Curve {
        key: "giveup.overrun_ms",
        label: "give-up returns after its deadline, N waiters",
        unit: "ms",
    },
    Curve {
        key: "sessions.rss_mib",
        label: "resident memory, N sessions in one process",
        unit: "MiB",
    },
    Curve {
        key: "sessions.threads",
        label: "threads, N sessions in one process",
        unit: "threads",
    },
    Curve {
        key: "sessions.idle_cpu_ms",
        label: "idle CPU, N sessions in one process",
        unit: "ms/s",
    },
    Curve {
        key: "sessions.idle_wakeups",
        label: "idle wake-ups (context switches), N sessions in one process",
        unit: "/s",
    },
    Curve {
        key: "sessions.kib_per_session",
        label: "memory per added session",
        unit: "KiB",
    },
    Curve {
        key: "sessions.threads_per_session",
        label: "threads per added session",
        unit: "threads",
    },
];

const LIBS: [Library; 2] = [Library::Latchkey, Library::Curator];

/// The growth of `key` for `lib`: (smallest size, value), (largest, value).
fn growth(r: &ScaleResults, key: &str, lib: Library) -> Option<((usize, f64), (usize, f64))> {
    let sizes: Vec<usize> = r
        .sizes(key, lib)
        .into_iter()
        .filter(|&n| r.get(key, n, lib).is_some())
        .collect();
    let (&a, &b) = (sizes.first()?, sizes.last()?);
    if a == b {
        return None;
    }
    Some(((a, r.get(key, a, lib)?), (b, r.get(key, b, lib)?)))
}

/// The done-when targets: (what, goal, measured, met).
pub fn targets(r: &ScaleResults) -> Vec<(String, String, String, Option<bool>)> {
    let lk = Library::Latchkey;
    let mut out = Vec::new();
    let ratio_target = |key: &str, what: &str, goal: f64| match growth(r, key, lk) {
        Some(((a, va), (b, vb))) => {
            let ratio = vb / va;
            (
                format!("{what}, {b} ÷ {a} (latchkey)"),
                format!("≤ {goal:.2}x"),
                format!(
                    "{} vs {} ({})",
                    fmt_value(Some(vb)),
                    fmt_value(Some(va)),
                    fmt_ratio(Some(ratio))
                ),
                Some(ratio <= goal),
            )
        }
        None => (
            what.to_owned(),
            format!("≤ {goal:.2}x"),
            "not measured".into(),
            None,
        ),
    };
    out.push(ratio_target(
        "waiters.requests",
        "requests per handoff",
        1.10,
    ));
    out.push(ratio_target(
        "held.probe_p50",
        "acquire latency p50 while holding N locks",
        1.5,
    ));
    let largest = r.sizes("held.restart_ms", lk).last().copied();
    out.push(
        match largest.and_then(|n| Some((n, r.get("held.restart_ms", n, lk)?))) {
            Some((n, ms)) => (
                format!(
                    "{n} held locks with their watches usable again after a restart (latchkey)"
                ),
                "≤ 2 s".into(),
                format!("{:.2} s", ms / 1e3),
                Some(ms <= 2000.0),
            ),
            None => (
                "held locks usable again after a restart".into(),
                "≤ 2 s".into(),
                "not measured".into(),
                None,
            ),
        },
    );
    out
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "n/a",
    }
}

/// A table of one scenario's curves: one row per size, one column per
/// library and curve.
fn table(r: &ScaleResults, keys: &[&str], size_label: &str) -> String {
    let curves: Vec<&Curve> = keys
        .iter()
        .filter_map(|k| CURVES.iter().find(|c| c.key == *k))
        .collect();
    let mut cols: Vec<(&Curve, Library)> = Vec::new();
    for c in &curves {
        for lib in LIBS {
            if !r.sizes(c.key, lib).is_empty() {
                cols.push((c, lib));
            }
        }
    }
    let mut sizes: Vec<usize> = cols.iter().flat_map(|(c, l)| r.sizes(c.key, *l)).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut s = String::new();
    let header: Vec<String> = cols
        .iter()
        .map(|(c, l)| {
            let who = if c.key.starts_with("naive") {
                "naive lock"
            } else {
                l.name()
            };
            format!("{who}: {} ({})", column(c.key), c.unit)
        })
        .collect();
    let _ = writeln!(s, "| {size_label} | {} |", header.join(" | "));
    let _ = writeln!(s, "|---:|{}|", vec!["---:"; cols.len()].join("|"));
    for n in sizes {
        let cells: Vec<String> = cols
            .iter()
            .map(|(c, l)| fmt_value(r.get(c.key, n, *l)))
            .collect();
        let _ = writeln!(s, "| {n} | {} |", cells.join(" | "));
    }
    s
}

/// A curve's name in a table's header.
fn column(key: &str) -> &'static str {
    match key {
        "held.probe_p50" => "acquire p50",
        "held.build_p50" => "taking them, p50",
        "held.bytes_per_lock" => "memory per lock",
        "held.restart_ms" => "usable after restart, median",
        "held.restart_max_ms" => "usable after restart, slowest",
        "waiters.requests" | "naive.requests" => "requests per handoff",
        "waiters.events" | "naive.events" => "watch events per handoff",
        "waiters.p50" | "naive.p50" => "handoff p50",
        "waiters.p99" | "naive.p99" => "handoff p99",
        "giveup.requests" => "requests per give-up",
        "giveup.events" => "watch events per give-up",
        "giveup.overrun_ms" => "returns after its deadline",
        "sessions.rss_mib" => "resident memory",
        "sessions.threads" => "threads",
        "sessions.kib_per_session" => "memory per added session",
        "sessions.threads_per_session" => "threads per added session",
        "sessions.idle_cpu_ms" => "idle CPU",
        "sessions.idle_wakeups" => "idle wake-ups",
        _ => "",
    }
}

fn growth_table(r: &ScaleResults) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| curve | library | smallest N | value | largest N | value | growth |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|");
    // Taking the first lock also creates the scenario's parent nodes.
    for c in CURVES.iter().filter(|c| c.key != "held.build_p50") {
        for lib in LIBS {
            if let Some(((a, va), (b, vb))) = growth(r, c.key, lib) {
                let name = if c.key.starts_with("naive") {
                    "naive lock (latchkey's client)"
                } else {
                    lib.name()
                };
                let _ = writeln!(
                    s,
                    "| {} ({}) | {name} | {a} | {} | {b} | {} | {} |",
                    c.label,
                    c.unit,
                    fmt_value(Some(va)),
                    fmt_value(Some(vb)),
                    fmt_ratio((va != 0.0).then(|| vb / va))
                );
            }
        }
    }
    s
}

fn series(
    r: &ScaleResults,
    key: &str,
    lib: Library,
    name: String,
    dashed: bool,
    color: &str,
) -> Series {
    Series {
        name,
        color: color.into(),
        dashed,
        points: r
            .sizes(key, lib)
            .into_iter()
            .map(|n| (n as f64, r.get(key, n, lib).unwrap_or(f64::NAN)))
            .collect(),
    }
}

/// Every (key, library) with figures, as lines of a chart.
fn lines(r: &ScaleResults, keys: &[(&str, &str, bool)]) -> Vec<Series> {
    let mut out = Vec::new();
    for &(key, what, dashed) in keys {
        for lib in LIBS {
            if r.sizes(key, lib).is_empty() {
                continue;
            }
            let (name, color) = if key.starts_with("naive") {
                (format!("naive lock {what}"), "#ff7f0e")
            } else {
                (format!("{} {what}", lib.name()), lib.color())
            };
            out.push(series(r, key, lib, name.trim().to_owned(), dashed, color));
        }
    }
    out
}

/// The charts: (file name, chart).
fn charts(r: &ScaleResults) -> Vec<(&'static str, &'static str, Chart)> {
    let chart = |title: &str, x: &str, y: &str, log_y: bool, series: Vec<Series>| Chart {
        title: title.into(),
        x_label: x.into(),
        y_label: y.into(),
        log_x: true,
        log_y,
        series,
    };
    let held = "locks held at once by one client (log scale)";
    let waiters = "waiters behind the holder of one lock (log scale)";
    let sessions = "sessions in one process (log scale)";
    vec![
        (
            "scale-held-latency.svg",
            "Acquire latency against held locks",
            chart(
                "Acquire latency p50 while holding N locks (lower is better)",
                held,
                "µs per acquire (log scale)",
                true,
                lines(
                    r,
                    &[
                        ("held.probe_p50", "", false),
                        ("held.build_p50", "taking them", true),
                    ],
                ),
            ),
        ),
        (
            "scale-held-memory.svg",
            "Memory per held lock",
            chart(
                "Client memory per held lock (lower is better)",
                held,
                "bytes of resident memory per lock",
                false,
                lines(r, &[("held.bytes_per_lock", "", false)]),
            ),
        ),
        (
            "scale-held-restart.svg",
            "Held locks usable again after a restart",
            chart(
                "Held locks usable again after a server restart (lower is better)",
                held,
                "ms from the server serving again (log scale)",
                true,
                lines(
                    r,
                    &[
                        ("held.restart_ms", "median", false),
                        ("held.restart_max_ms", "slowest", true),
                    ],
                ),
            ),
        ),
        (
            "scale-herd.svg",
            "Requests and watch events per handoff against waiters",
            chart(
                "Per handoff: requests (solid), watch events (dashed)",
                waiters,
                "per handoff, from the server's mntr (log scale)",
                true,
                lines(
                    r,
                    &[
                        ("waiters.requests", "requests", false),
                        ("waiters.events", "events", true),
                        ("naive.requests", "requests", false),
                        ("naive.events", "events", true),
                    ],
                ),
            ),
        ),
        (
            "scale-handoff.svg",
            "Handoff latency against waiters",
            chart(
                "Handoff latency, p50 solid, p99 dashed (lower is better)",
                waiters,
                "µs from release() to the next acquire() (log scale)",
                true,
                lines(
                    r,
                    &[
                        ("waiters.p50", "p50", false),
                        ("waiters.p99", "p99", true),
                        ("naive.p50", "p50", false),
                    ],
                ),
            ),
        ),
        (
            "scale-giveup.svg",
            "Cost of a waiter giving up",
            chart(
                "A waiter in the middle gives up: requests (solid), watch events (dashed)",
                waiters,
                "per give-up, from the server's mntr",
                false,
                lines(
                    r,
                    &[
                        ("giveup.requests", "requests", false),
                        ("giveup.events", "events", true),
                    ],
                ),
            ),
        ),
        (
            "scale-sessions.svg",
            "Memory and threads against sessions",
            chart(
                "N sessions in one process: MiB (solid), threads (dashed)",
                sessions,
                "resident MiB and threads (log scale)",
                true,
                lines(
                    r,
                    &[
                        ("sessions.rss_mib", "MiB", false),
                        ("sessions.threads", "threads", true),
                    ],
                ),
            ),
        ),
    ]
}

/// The section, from [`BEGIN`] to [`END`].
pub fn section(cfg: &ScaleConfig, r: &ScaleResults, info: &RunInfo) -> String {
    let mut s = String::new();
    let mut line = |l: &str| {
        s.push_str(l);
        s.push('\n');
    };
    line(BEGIN);
    line("## Scale");
    line("");
    line(&format!(
        "How each cost grows with held locks per client, waiters per lock and sessions per process, \
         latchkey and Curator on the same server in the same run. Written by `{COMMAND}{}` on {} \
         ({:.0} s); every figure is measured, none is edited.",
        if cfg.quick { " --quick" } else { "" },
        procfs::utc(info.started),
        info.took.as_secs_f64()
    ));
    line("");
    line(&format!(
        "- Machine: {}. Load average (1 min) {:.1} at the start and {:.1} at the end of the run{}.",
        info.machine,
        info.load.0,
        info.load.1,
        if info.load.0.max(info.load.1) > 1.0 {
            ": the machine was busy with other work (2 cores shared with builds and tests), so the \
             timing figures (latency, restart) are noisy and drift during the run (a curve that \
             falls with size shows the load falling, not a cheaper lock); the counts (requests, \
             watch events, threads) and memory are not"
        } else {
            ""
        }
    ));
    line(&format!(
        "- One run (no rounds). latchkey runs in a child process of the bench (`bench --scale-child`), \
         Curator in its Java peer; each scenario's process is fresh, so its memory and threads are its own. \
         Their sessions: {} s session timeout (to ride out the server restart), 5 s connection timeout, \
         `ExponentialBackoffRetry(100 ms, 3)`.",
        SESSION_TIMEOUT.as_secs()
    ));
    line("");
    line("### Targets");
    line("");
    line("| target | goal | measured | verdict |");
    line("|---|---|---|---|");
    for (what, goal, measured, met) in targets(r) {
        line(&format!(
            "| {what} | {goal} | {measured} | {} |",
            verdict(met)
        ));
    }
    line("");
    line("### Held locks per client");
    line("");
    line(&format!(
        "One client takes N `InterProcessMutex`es on N paths of their own and keeps them; each is \
         revocable, so each has a watch on its node (Curator's `makeRevocable`, latchkey's \
         `make_revocable`). *Taking them* is the p50 of those N acquires; then {} more acquires of \
         fresh paths (each released at once) are timed while the N are held: *acquire latency*. \
         Memory per lock is the growth of the process' resident set over the N acquires, divided \
         by N, from 100 locks up (for Curator the JVM's heap grows in steps). \
         Then the server is stopped and started again on the same port and data; *usable again* \
         runs from the restarted server serving until it counts the set's watches again (re-armed \
         by the resumed session with SetWatches) and the client answers a round trip with every \
         lock still held by the same session. The server is restarted {RESTARTS} times per set: \
         the median and the slowest.{}",
        cfg.probes,
        if info.restarted {
            ""
        } else {
            " (Not measured in this run: `--connect` names a server the bench does not own.)"
        }
    ));
    line("");
    s.push_str(&table(
        r,
        &[
            "held.probe_p50",
            "held.build_p50",
            "held.bytes_per_lock",
            "held.restart_ms",
            "held.restart_max_ms",
        ],
        "held locks",
    ));
    let mut line = |l: &str| {
        s.push_str(l);
        s.push('\n');
    };
    line("");
    line("![Acquire latency against held locks](scale-held-latency.svg)");
    line("");
    line("![Memory per held lock](scale-held-memory.svg)");
    line("");
    line("![Held locks usable again after a restart](scale-held-restart.svg)");
    line("");
    line("### Waiters per lock, and the naive lock");
    line("");
    line(&format!(
        "N waiters behind one holder: N + 1 threads over min(N + 1, {WAITER_SESSIONS}) sessions of one \
         process loop acquire + release on one lock for {} s plus 6 ms a waiter. Requests and watch \
         events per handoff come from the server's `mntr` between 1/4 and 3/4 of the run, as in \
         the herd scenario above (pings count as requests). The *naive lock* is the seed articles' \
         exclusive lock on latchkey's client: one ephemeral node; whoever creates it holds the \
         lock, every other waiter watches it (`exists`) and tries to create it again when it goes. \
         The server sends one event per session and path, so its watch events per handoff stop \
         growing at {WAITER_SESSIONS} sessions while its requests keep growing with the waiters.",
        cfg.waiter_run.as_secs_f64()
    ));
    line("");
    s.push_str(&table(
        r,
        &[
            "waiters.requests",
            "waiters.events",
            "waiters.p50",
            "waiters.p99",
            "naive.requests",
            "naive.events",
            "naive.p50",
        ],
        "waiters",
    ));
    let mut line = |l: &str| {
        s.push_str(l);
        s.push('\n');
    };
    line("");
    line("![Requests and watch events per handoff against waiters](scale-herd.svg)");
    line("");
    line("![Handoff latency against waiters](scale-handoff.svg)");
    line("");
    line("### A waiter in the middle giving up");
    line("");
    line(&format!(
        "One holder keeps the lock while N waiters queue (threads over sessions as above); {QUITTERS} \
         of them, queued in the middle, call a timed acquire whose deadlines fall 0.5 s apart. Around \
         each give-up (from 50 ms before its deadline to 100 ms after its acquire returned) the \
         server's counters give the requests (less the `mntr` reading itself) and watch events it \
         cost; the figures are medians over the {QUITTERS}. The sequential-node lock pays the same \
         at any N: the delete of the node, one event to the waiter behind it, and that waiter's \
         listing and new watch."
    ));
    line("");
    s.push_str(&table(
        r,
        &["giveup.requests", "giveup.events", "giveup.overrun_ms"],
        "waiters",
    ));
    let mut line = |l: &str| {
        s.push_str(l);
        s.push('\n');
    };
    line("");
    line("![Cost of a waiter giving up](scale-giveup.svg)");
    line("");
    line("### Sessions per process");
    line("");
    line(&format!(
        "A fresh process opens N sessions ({} s session timeout, so each pings every 10 s) and \
         holds a mutex on each; its resident set and thread count after a second. Per added \
         session is the growth from the smallest N. The processes also keep their own command \
         session. latchkey sessions have no thread of their own: one engine thread and one timer \
         thread serve every session of the process, and a session's event, listener and \
         cleanup threads start only when it has work for them. Then the \
         process is left idle for {} s: *idle CPU* is the CPU time of all its threads over that \
         time (from `/proc/<pid>/task/*/schedstat`), per second; *idle wake-ups* the sum of its \
         threads' voluntary and involuntary context switches (`/proc/<pid>/task/*/status`), per \
         second: each is a thread going off its CPU, so about as many wake-ups. For Curator \
         both include the JVM's own threads (GC, JIT, timers). kazoo is not measured here: the \
         scale run drives latchkey's child and the Curator peer only.",
        IDLE_SESSION_TIMEOUT.as_secs(),
        IDLE.as_secs()
    ));
    line("");
    s.push_str(&table(
        r,
        &[
            "sessions.rss_mib",
            "sessions.threads",
            "sessions.kib_per_session",
            "sessions.threads_per_session",
            "sessions.idle_cpu_ms",
            "sessions.idle_wakeups",
        ],
        "sessions",
    ));
    let mut line = |l: &str| {
        s.push_str(l);
        s.push('\n');
    };
    line("");
    line("![Memory and threads against sessions](scale-sessions.svg)");
    line("");
    line("### Growth ratios");
    line("");
    line("Each curve's value at its largest size divided by its value at its smallest.");
    line("");
    s.push_str(&growth_table(r));
    let mut line = |l: &str| {
        s.push_str(l);
        s.push('\n');
    };
    if !r.notes.is_empty() {
        line("");
        line("Notes of this run:");
        line("");
        for n in &r.notes {
            line(&format!("- {n}"));
        }
    }
    line("");
    line("### Reproduce the scale run");
    line("");
    line("```sh");
    line(&format!(
        "{COMMAND}            # the sizes above, a few minutes; rewrites this section only"
    ));
    line(&format!(
        "{COMMAND} --quick    # a tenth of the largest sizes"
    ));
    line(&format!(
        "{COMMAND} --held 1,100,1000,10000 --waiters 2,10,100,1000 --sessions 1,100,1000 --libs latchkey,curator"
    ));
    line("```");
    line(END);
    s
}

/// `doc` with its scale section replaced by `section` (or the section put
/// before `## Reproduce`, or at the end).
pub fn splice(doc: &str, section: &str) -> String {
    if let (Some(a), Some(b)) = (doc.find(BEGIN), doc.find(END)) {
        if a < b {
            let mut out = doc[..a].to_owned();
            out.push_str(section.trim_end());
            out.push_str(&doc[b + END.len()..]);
            return out;
        }
    }
    let at = doc.find("## Reproduce").unwrap_or(doc.len());
    let mut out = doc[..at].to_owned();
    if !out.is_empty() && !out.ends_with("\n\n") {
        out.push('\n');
    }
    out.push_str(section.trim_end());
    out.push_str("\n\n");
    out.push_str(&doc[at..]);
    out
}

/// The scale section of `doc`, if it has one.
pub fn existing_section(doc: &str) -> Option<&str> {
    let (a, b) = (doc.find(BEGIN)?, doc.find(END)?);
    (a < b).then(|| &doc[a..b + END.len()])
}

/// Writes the section into `dir/BENCHMARKS.md` and the charts beside it.
pub fn write(dir: &Path, cfg: &ScaleConfig, r: &ScaleResults, info: &RunInfo) -> Res<()> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (file, _, chart) in charts(r) {
        let p = dir.join(file);
        std::fs::write(&p, chart.to_svg()).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let p = dir.join("BENCHMARKS.md");
    let doc = std::fs::read_to_string(&p).unwrap_or_else(|_| "# Benchmarks\n\n".into());
    std::fs::write(&p, splice(&doc, &section(cfg, r, info)))
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// The figures as plain text, for the terminal.
pub fn text(r: &ScaleResults) -> String {
    let mut s = growth_table(r);
    for (what, goal, measured, met) in targets(r) {
        let _ = writeln!(s, "{:<7} {what}: {measured} (goal {goal})", verdict(met));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_sizes("1000,1,100").unwrap(), vec![1, 100, 1000]);
        assert_eq!(parse_sizes("10_000").unwrap(), vec![10_000]);
        assert!(parse_sizes("0").is_err() && parse_sizes("x").is_err() && parse_sizes("").is_err());
    }

    #[test]
    fn the_section_is_spliced_in_and_replaced() {
        let doc = "# B\n\ntext\n\n## Reproduce\n\nrun\n";
        let one = splice(doc, &format!("{BEGIN}\none\n{END}\n"));
        assert!(
            one.contains("text\n\n<!-- scale:begin -->\none\n<!-- scale:end -->\n\n## Reproduce")
        );
        let two = splice(&one, &format!("{BEGIN}\ntwo\n{END}\n"));
        assert!(two.contains("two") && !two.contains("one"));
        assert_eq!(
            existing_section(&two),
            Some(format!("{BEGIN}\ntwo\n{END}").as_str())
        );
        assert_eq!(two.matches(BEGIN).count(), 1);
    }

    #[test]
    fn targets_and_growth_from_the_figures() {
        let mut r = ScaleResults::default();
        r.put("waiters.requests", 2, Library::Latchkey, 5.0);
        r.put("waiters.requests", 1000, Library::Latchkey, 5.2);
        r.put("held.probe_p50", 1, Library::Latchkey, 400.0);
        r.put("held.probe_p50", 10_000, Library::Latchkey, 700.0);
        let t = targets(&r);
        assert_eq!(t[0].3, Some(true), "{t:?}");
        assert_eq!(t[1].3, Some(false), "{t:?}");
        assert_eq!(t[2].3, None);
        assert!(growth_table(&r).contains("| 2 | 5.00 | 1000 | 5.20 | 1.04x |"));
    }
}

//! Helpers of the isolation suites (`isolation.rs`, `isolation_api.rs`):
//! threads' scheduling, names and wake-ups read from `/proc`, changed with
//! `chrt` and `taskset` (`unsafe` is forbidden here), a child process for
//! checks that need a process of their own, and the two experiments both
//! suites run: a flood of abandoned large writes on a stalled connection,
//! and creates whose deadline has passed.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Seek};
use std::process::Command;
use std::time::{Duration, Instant};

use latchkey_framework::{Client, ClientBuilder, Result, RetryNTimes, Stat};
use latchkey_test::{FaultProxy, ServerConfig, TestingServer};

use crate::common::{connect, shared_server, start_connected};

/// `SCHED_IDLE`, as `/proc/<pid>/task/<tid>/stat` shows a thread's policy.
pub const SCHED_IDLE: u32 = 5;

/// Tests of these binaries run one at a time: they measure the whole
/// process (threads, memory) and change CPUs' load.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The calling thread's kernel id: `/proc/thread-self` links to
/// `<pid>/task/<tid>`.
pub fn tid() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").expect("read /proc/thread-self");
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no tid in {}", link.display()))
}

fn run_tool(tool: &str, args: &[&str]) {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"));
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Pins thread `tid` to `cpu` (`taskset -pc`).
pub fn pin(tid: u32, cpu: usize) {
    run_tool("taskset", &["-pc", &cpu.to_string(), &tid.to_string()]);
}

/// Makes thread `tid` `SCHED_IDLE` (`chrt --idle`) and pins it to `cpu`.
pub fn make_idle_on(tid: u32, cpu: usize) {
    run_tool("chrt", &["--idle", "-p", "0", &tid.to_string()]);
    pin(tid, cpu);
}

/// What `/proc` says of one thread of this process.
#[derive(Clone, Debug)]
pub struct Sched {
    pub tid: u32,
    pub name: String,
    /// `R`, `S`, `D`, ...
    pub state: char,
    /// The scheduling policy (stat field 41): 0 normal, 5 `SCHED_IDLE`.
    pub policy: u32,
    /// `Cpus_allowed_list`, such as `0-1`.
    pub cpus: String,
    /// Voluntary plus nonvoluntary context switches so far.
    pub switches: u64,
}

fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

/// Thread `tid` of this process; `None` once it has ended.
pub fn sched_of(tid: u32) -> Option<Sched> {
    let dir = format!("/proc/self/task/{tid}");
    let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("{dir}/status")).ok()?;
    let name = std::fs::read_to_string(format!("{dir}/comm")).ok()?;
    // Fields after the name in parentheses (which may hold anything) start
    // with field 3, the state.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let count = |key| status_field(&status, key).and_then(|v| v.parse::<u64>().ok());
    Some(Sched {
        tid,
        name: name.trim_end().to_owned(),
        state: fields.first()?.chars().next()?,
        policy: fields.get(41 - 3)?.parse().ok()?,
        cpus: status_field(&status, "Cpus_allowed_list")?.to_owned(),
        switches: count("voluntary_ctxt_switches")? + count("nonvoluntary_ctxt_switches")?,
    })
}

/// The CPUs this process' main thread may run on: what a thread that took
/// nobody's pinning has.
pub fn process_cpus() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status_field(&status, "Cpus_allowed_list")
        .expect("Cpus_allowed_list")
        .to_owned()
}

/// This process' threads whose name starts with `latchkey` (the harness's
/// proxy threads, `latchkey-proxy-*`, excluded), by tid.
pub fn latchkey_threads() -> HashMap<u32, Sched> {
    std::fs::read_dir("/proc/self/task")
        .expect("read /proc/self/task")
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(sched_of)
        .filter(|s| s.name.starts_with("latchkey") && !s.name.starts_with("latchkey-proxy"))
        .map(|s| (s.tid, s))
        .collect()
}

/// The process' resident set (`VmRSS`), in bytes.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kib: u64 = status_field(&status, "VmRSS")
        .and_then(|v| v.trim_end_matches(" kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// Durations as sorted milliseconds, for a failure message.
pub fn show_ms(d: &[Duration]) -> String {
    let mut v = d.to_vec();
    v.sort();
    let ms: Vec<String> = v
        .iter()
        .map(|d| format!("{:.1}", d.as_secs_f64() * 1e3))
        .collect();
    format!("[{}] ms", ms.join(", "))
}

/// The 99th percentile (nearest rank); `None` of nothing.
pub fn p99(d: &[Duration]) -> Option<Duration> {
    let mut v = d.to_vec();
    v.sort();
    let rank = (v.len() * 99).div_ceil(100);
    v.get(rank.checked_sub(1)?).copied()
}

/// The variable that makes a helper test act as a child process; its value
/// is the connect string of the parent's server.
const CHILD_ENV: &str = "LATCHKEY_ISOLATION_CHILD";

/// In a child started by [`run_in_child`]: the server to use.
pub fn child_server() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

/// Runs the `#[ignore]`d test `helper` of this binary in a child process
/// of its own (with the shared server's connect string in its
/// environment) and fails, showing its output, unless it passes within
/// `within`.
pub fn run_in_child(helper: &str, within: Duration) {
    let out = tempfile::tempfile().expect("a temp file for the child's output");
    let exe = std::env::current_exe().expect("this test binary");
    let mut child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            helper,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, shared_server().connect_string())
        .env("RUST_BACKTRACE", "0")
        .stdout(out.try_clone().expect("clone a file"))
        .stderr(out.try_clone().expect("clone a file"))
        .spawn()
        .expect("start the child");
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut text = String::new();
    let mut out = out;
    let _ = out.rewind();
    let _ = out.read_to_string(&mut text);
    match status {
        Some(s) if s.success() && text.contains("1 passed") => {
            println!("child {helper}:\n{text}")
        }
        Some(s) => panic!("child {helper} failed ({s}):\n{text}"),
        None => panic!("child {helper} did not end within {within:?}:\n{text}"),
    }
}

/// Size of each write of [`flood`]: 256 KiB.
pub const FRAME: usize = 256 << 10;

/// What [`flood`] saw.
pub struct Flood {
    /// Every call's outcome, in order.
    pub results: Vec<Result<Stat>>,
    /// The largest growth of the process' RSS during the calls.
    pub rss_growth: u64,
    /// How many writes the server applied (the node's version grew by it).
    pub applied: i64,
    /// How the wait for the last write's effect ended, after the heal.
    pub settled: String,
    /// The client's state history, for messages.
    pub history: String,
}

impl Flood {
    /// Counts of the calls' outcomes by their `Display` (first 80 bytes).
    pub fn outcomes(&self) -> String {
        let mut by: Vec<(String, usize)> = Vec::new();
        for r in &self.results {
            let key = match r {
                Ok(_) => "ok".to_owned(),
                Err(e) => e.to_string().chars().take(80).collect(),
            };
            match by.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += 1,
                None => by.push((key, 1)),
            }
        }
        format!("{by:?}")
    }

    /// One line of figures for a message.
    pub fn figures(&self) -> String {
        format!(
            "{} calls of {} KiB; RSS grew {:.1} MiB; {} applied; outcomes {}; settled: {}; states {}",
            self.results.len(),
            FRAME >> 10,
            self.rss_growth as f64 / (1 << 20) as f64,
            self.applied,
            self.outcomes(),
            self.settled,
            self.history
        )
    }
}

/// How many calls [`flood`] makes at most, and for how long: well within
/// the 20 s after which a client hears nothing from a stalled connection
/// (2/3 of its 30 s session) and drops it.
pub const FLOOD_CALLS: usize = 400;
pub const FLOOD_FOR: Duration = Duration::from_secs(12);

/// Stalls the connection of a client (built by `tune` from a 30 s session
/// through a proxy, retrying nothing) from client to server, with its
/// session kept, and makes up to [`FLOOD_CALLS`] `set_data` calls of
/// [`FRAME`] bytes with 20 ms deadlines, all of which give up; then heals
/// the connection and counts the writes the server applied. Runs its own
/// server (a larger heap for the backlog) so a flood cannot hurt the
/// shared one.
pub fn flood(tune: impl FnOnce(ClientBuilder) -> ClientBuilder) -> Flood {
    flood_with(1, Duration::from_millis(20), tune)
}

/// [`flood`] from `threads` threads at once, each call with `timeout`:
/// requests given up on are taken back, so only callers waiting at the
/// same time fill the outbox.
pub fn flood_with(
    threads: usize,
    timeout: Duration,
    tune: impl FnOnce(ClientBuilder) -> ClientBuilder,
) -> Flood {
    let server = TestingServer::start_with(ServerConfig::default().jvm_arg("-Xmx1g"))
        .expect("start a server for the flood");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let a = start_connected(tune(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(30))
            .connection_timeout(Duration::from_secs(5))
            .retry_policy(RetryNTimes::new(0, Duration::ZERO)),
    ));
    let b = connect(&server.connect_string(), Duration::from_secs(30));
    let path = "/flood";
    b.create().for_path(path, b"").unwrap();
    let data = vec![7u8; FRAME];
    // One write first, so that buffers a single write needs are in place.
    a.set_data(path, &data, None)
        .expect("a write before the stall");
    let version = |c: &Client| c.get_data(path).map(|(_, s)| i64::from(s.version));
    let before = version(&b).unwrap();
    proxy.pause_requests();
    let rss0 = rss_bytes();
    let rss_max = std::sync::atomic::AtomicU64::new(rss0);
    let started = Instant::now();
    let results: Vec<_> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut results = Vec::new();
                    while results.len() < FLOOD_CALLS / threads && started.elapsed() < FLOOD_FOR {
                        results.push(a.with_timeout(timeout).set_data(path, &data, None));
                        rss_max.fetch_max(rss_bytes(), std::sync::atomic::Ordering::Relaxed);
                    }
                    results
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a flood thread panicked"))
            .collect()
    });
    let rss_max = rss_max.into_inner();
    proxy.resume();
    // The session's requests are handled in order: once a read sent after
    // the writes is answered, every write that was sent has been applied.
    let settled = match a.with_timeout(Duration::from_secs(40)).get_data(path) {
        Ok(_) => "a read after the writes was answered".to_owned(),
        Err(e) => {
            // Else wait until the version stops moving (20 s at most).
            let until = Instant::now() + Duration::from_secs(20);
            let mut last = version(&b).ok();
            let mut steady_since = Instant::now();
            while Instant::now() < until && steady_since.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(100));
                let now = version(&b).ok();
                if now != last {
                    (last, steady_since) = (now, Instant::now());
                }
            }
            format!(
                "the read after the writes failed ({e}); the version then held for {:?}",
                steady_since.elapsed()
            )
        }
    };
    let _ = b.sync(path);
    let applied = version(&b).unwrap() - before;
    let history = format!("{:?}", a.state_history());
    a.close();
    b.close();
    Flood {
        results,
        rss_growth: rss_max.saturating_sub(rss0),
        applied,
        settled,
        history,
    }
}

/// Bytes a stalled connection's kernel buffers take at most: the client's
/// send buffer grows to `tcp_wmem`'s maximum, the proxy's receive buffer
/// (which it does not read while stalled, so it does not grow) holds
/// `tcp_rmem`'s default, and the proxy holds one 64 KiB chunk read before
/// the stall.
pub fn kernel_buffers() -> usize {
    let nth = |file: &str, n: usize| -> usize {
        std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.split_whitespace().nth(n)?.parse().ok())
            .unwrap_or(4 << 20)
    };
    nth("/proc/sys/net/ipv4/tcp_wmem", 2) + nth("/proc/sys/net/ipv4/tcp_rmem", 1) + (64 << 10)
}

/// How many creates [`zero_timeout_creates`] makes.
pub const ZERO_CREATES: usize = 20;

/// Makes [`ZERO_CREATES`] creates with a zero timeout under a fresh parent
/// and returns their outcomes and the children the server then holds.
pub fn zero_timeout_creates() -> (Vec<Result<String>>, Vec<String>) {
    let cs = shared_server().connect_string();
    let a = connect(&cs, Duration::from_secs(30));
    let b = connect(&cs, Duration::from_secs(30));
    let parent = crate::common::unique("/isolation/zero_timeout");
    a.create()
        .creating_parents_if_needed()
        .for_path(&parent, b"")
        .unwrap();
    let results = (0..ZERO_CREATES)
        .map(|i| {
            a.with_timeout(Duration::ZERO)
                .create()
                .for_path(&format!("{parent}/c{i}"), b"")
        })
        .collect();
    // A session's requests are handled in order: a read on the same
    // session answered after the creates comes after any that was sent.
    a.with_timeout(Duration::from_secs(10))
        .get_children(&parent)
        .expect("a read after the creates");
    b.sync(&parent).unwrap();
    let children = b.get_children(&parent).unwrap();
    a.close();
    b.close();
    (results, children)
}

//! A job scheduler of three processes that loses its leader and its
//! ZooKeeper mid-run, and still does every job exactly once.
//!
//! Each process takes part in a `LeaderSelector` election. The leader
//! hands out jobs: it creates `jobs/job-NNN` nodes, a few ahead of the
//! workers, each in a transaction fenced by its term's lock node (so a
//! late write of a deposed leader is refused), together with the `next`
//! counter of jobs handed out. The other processes work (a leader's
//! process does not take jobs): each of their worker threads takes a
//! job's `InterProcessMutex` and one of the 2 leases of an
//! `InterProcessSemaphoreV2`, works for as long as the config says (a
//! `NodeCache` of the `config` node, which the coordinator changes
//! mid-run), then commits the job in one transaction that checks both of
//! its holds' nodes, deletes the job and creates its `done/job-NNN`
//! marker. A `DistributedAtomicLong` counts the jobs done.
//!
//! Mid-run, with the embedded ZooKeeper:
//!
//! 1. the leader's process is killed (SIGKILL): its election node stays
//!    until the server expires its session, so another process leads
//!    about a session timeout (6 s) later;
//! 2. ZooKeeper is stopped for longer than the session timeout, then
//!    restarted on the same port and data. Every client declares its
//!    session lost and starts a new one; the server, though, restores the
//!    old sessions with their ephemeral nodes (lease, lock and election
//!    nodes) for another session timeout. The recipes delete the nodes of
//!    their lost holds from the new sessions, so work resumes as soon as
//!    the clients are back, instead of a session timeout later.
//!
//! An oracle outside ZooKeeper, in files, checks that each job is done
//! exactly once and none is lost: a worker that committed a job creates
//! `done-job-NNN` with `O_EXCL` (`create_new`); a file that exists already
//! is a violation, a job without one at the end is lost. The workers log
//! what they do to a shared file, from which the program prints how long
//! the takeover after the kill took, and how long after ZooKeeper served
//! again a leader led, a job started and a job was done. It exits 1 on a
//! violation, a lost job or a failed process.
//!
//! ```text
//! cargo run -p latchkey-examples --bin scheduler                        # embedded ZooKeeper, kill and restart
//! cargo run -p latchkey-examples --bin scheduler -- --connect HOST:PORT # kills the leader; no restart: not ours
//! ```

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use latchkey_examples::setup::{start_client, zookeeper_from, Zk};
use latchkey_framework::{Client, ErrorCode, ExponentialBackoffRetry, RetryNTimes};
use latchkey_recipes::{
    select, DistributedAtomicLong, HoldEvent, InterProcessMutex, InterProcessSemaphoreV2,
    LeaderSelector, Leadership, NodeCache,
};

const PROGRAM: &str = "scheduler";
/// Processes, each a participant in the election and, while it does not
/// lead, a worker.
const PROCESSES: usize = 3;
/// Worker threads per process.
const WORKERS: usize = 2;
/// Jobs to hand out.
const JOBS: u32 = 60;
/// Jobs the leader keeps handed out ahead of the workers.
const WINDOW: usize = 4;
/// Leases of the semaphore that a job needs.
const LEASES: u32 = 2;
/// The processes' session timeout; the outage lasts longer.
const SESSION: Duration = Duration::from_secs(6);
/// How long ZooKeeper stays stopped: long enough for every client to
/// declare its session lost.
const OUTAGE: Duration = Duration::from_secs(8);
/// The leader's process is killed once this many jobs are done.
const KILL_AFTER_JOBS: usize = 6;
/// ZooKeeper stops once this many more jobs are done under the new leader.
const OUTAGE_AFTER_MORE_JOBS: usize = 2;
/// The config a run starts with, and the one set after the kill.
const CONFIG: [&str; 2] = ["v1 work_ms=100", "v2 work_ms=250"];
/// Processes give up after this long.
const RUN_LIMIT: Duration = Duration::from_secs(90);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let code = match args.split_first() {
        Some((&"--process", rest)) => process_main(rest),
        _ => coordinator_main(&args),
    };
    std::process::exit(code);
}

/// Milliseconds since the epoch: the processes' common clock.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn job_name(n: u32) -> String {
    format!("job-{n:03}")
}

// ---------------------------------------------------------------------------
// The oracle: files outside ZooKeeper.
// ---------------------------------------------------------------------------

/// The files all processes share: `done-job-NNN` per job done (created
/// with `O_EXCL`), the `log` of what happened, and `violations`.
#[derive(Clone)]
struct Oracle {
    dir: PathBuf,
}

impl Oracle {
    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Appends `what` to the shared log with the time; one write of one
    /// line, so lines of several processes do not mix.
    fn log(&self, what: &str) {
        let line = format!("{} {what}\n", now_ms());
        let appended = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.file("log"))
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            eprintln!("cannot write the log: {e}");
        }
    }

    fn violation(&self, what: &str) {
        println!("VIOLATION: {what}");
        let appended = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.file("violations"))
            .and_then(|mut f| f.write_all(format!("{what}\n").as_bytes()));
        if let Err(e) = appended {
            eprintln!("cannot record the violation: {e}");
        }
    }

    /// Records `job` as done by `who`; a violation if it was done already.
    fn done(&self, job: &str, who: &str) {
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.file(&format!("done-{job}")))
        {
            Ok(mut f) => {
                let _ = f.write_all(who.as_bytes());
                self.log(&format!("done {who} {job}"));
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let other =
                    fs::read_to_string(self.file(&format!("done-{job}"))).unwrap_or_default();
                self.violation(&format!("{job} done by {who}, and before by {other}"));
            }
            Err(e) => self.violation(&format!("{who} cannot record {job} as done: {e}")),
        }
    }

    fn jobs_done(&self) -> usize {
        fs::read_dir(&self.dir).map_or(0, |entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with("done-"))
                .count()
        })
    }

    /// The log's lines as (time, words).
    fn entries(&self) -> Vec<(u64, Vec<String>)> {
        fs::read_to_string(self.file("log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                let at = words.next()?.parse().ok()?;
                let words: Vec<String> = words.map(str::to_owned).collect();
                // A line has its kind after the time; a torn one is skipped.
                (!words.is_empty()).then_some((at, words))
            })
            .collect()
    }

    /// When the first job that started at or after `since` was done.
    fn first_done_of_started_after(&self, since: u64) -> Option<u64> {
        let entries = self.entries();
        let started: Vec<&String> = entries
            .iter()
            .filter(|(at, w)| *at >= since && w[0] == "start")
            .filter_map(|(_, w)| w.get(2))
            .collect();
        entries
            .iter()
            .find(|(_, w)| w[0] == "done" && w.get(2).is_some_and(|j| started.contains(&j)))
            .map(|(at, _)| *at)
    }

    /// The first log entry of `kind` at or after `since`, and its words.
    fn first_after(&self, kind: &str, since: u64) -> Option<(u64, Vec<String>)> {
        self.entries()
            .into_iter()
            .find(|(at, words)| *at >= since && words.first().is_some_and(|k| k == kind))
    }
}

// ---------------------------------------------------------------------------
// A process: a participant in the election, and workers.
// ---------------------------------------------------------------------------

/// What a process's leader and workers share.
struct Process {
    name: String,
    client: Client,
    base: String,
    oracle: Oracle,
    config: NodeCache,
    leases: InterProcessSemaphoreV2,
    counter: DistributedAtomicLong,
    /// Set by the leader's closure while it leads: workers then pause.
    leading: AtomicBool,
    deadline: Instant,
    /// The coordinator: if it goes, so does this process.
    parent: u32,
}

/// `--process N --connect HOSTS --base PATH --oracle DIR`
fn process_main(args: &[&str]) -> i32 {
    match start_process(args).and_then(run_process) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{PROGRAM} process: {e}");
            1
        }
    }
}

fn start_process(args: &[&str]) -> Result<Arc<Process>, String> {
    let value = |name: &str| -> Result<&str, String> {
        args.iter()
            .position(|a| *a == name)
            .and_then(|i| args.get(i + 1).copied())
            .ok_or_else(|| format!("a process needs {name}"))
    };
    let id = args.first().ok_or("a process needs its number")?;
    let connect = value("--connect")?;
    let base = value("--base")?.to_owned();
    let client = start_client(
        Client::builder()
            .connect_string(connect)
            .session_timeout(SESSION)
            .connection_timeout(Duration::from_secs(2))
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 3)),
        connect,
    )?;
    let e = |e: latchkey_framework::Error| e.to_string();
    let config = NodeCache::new(&client, &format!("{base}/config")).map_err(e)?;
    config.start().map_err(e)?;
    let leases =
        InterProcessSemaphoreV2::new(&client, &format!("{base}/leases"), LEASES).map_err(e)?;
    let counter = DistributedAtomicLong::new(
        &client,
        &format!("{base}/done-count"),
        RetryNTimes::new(10, Duration::from_millis(20)),
    )
    .map_err(e)?;
    Ok(Arc::new(Process {
        name: format!("p{id}"),
        client,
        base,
        oracle: Oracle {
            dir: PathBuf::from(value("--oracle")?),
        },
        config,
        leases,
        counter,
        leading: AtomicBool::new(false),
        deadline: Instant::now() + RUN_LIMIT,
        parent: std::os::unix::process::parent_id(),
    }))
}

fn run_process(p: Arc<Process>) -> Result<(), String> {
    let leader = Arc::clone(&p);
    let selector = LeaderSelector::new(
        &p.client,
        &format!("{}/leader", p.base),
        &p.name,
        move |term| {
            leader.leading.store(true, Ordering::SeqCst);
            leader.lead(term);
            leader.leading.store(false, Ordering::SeqCst);
        },
    )
    .map_err(|e| e.to_string())?;
    selector.auto_requeue();
    selector.start().map_err(|e| e.to_string())?;
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let p = Arc::clone(&p);
            thread::spawn(move || p.work(&format!("{}w{w}", p.name)))
        })
        .collect();
    let mut failed = Vec::new();
    for w in workers {
        if w.join().is_err() {
            failed.push("a worker panicked");
        }
    }
    selector.close();
    if Instant::now() >= p.deadline {
        failed.push("the run's time limit passed");
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// How a job ended for the worker that took it.
enum Outcome {
    Done,
    /// Taken by another, already done, or no lease in time.
    Skipped,
    /// A hold went in doubt or was lost before the commit.
    Abandoned(&'static str),
}

impl Process {
    fn path(&self, rel: &str) -> String {
        format!("{}/{rel}", self.base)
    }

    fn stopping(&self) -> bool {
        Instant::now() >= self.deadline
            || self.oracle.file("violations").exists()
            || std::os::unix::process::parent_id() != self.parent
    }

    /// How many jobs were handed out, and the node's version.
    fn handed_out(&self, zk: &Client) -> latchkey_framework::Result<(u32, i32)> {
        let (data, stat) = zk.get_data(&self.path("next"))?;
        let n = String::from_utf8_lossy(&data).trim().parse().unwrap_or(0);
        Ok((n, stat.version))
    }

    /// One term: hands out jobs, each in a transaction fenced by the
    /// term's lock node, until all are out; then leads idly until the
    /// term ends.
    fn lead(&self, term: &Leadership) {
        self.oracle.log(&format!(
            "term {} token={}",
            self.name,
            term.fencing_token()
        ));
        let zk = term.bound_client();
        while term.is_valid() && !self.stopping() {
            let step = || -> latchkey_framework::Result<bool> {
                let (next, version) = self.handed_out(zk)?;
                if next >= JOBS {
                    return Ok(false);
                }
                if zk.get_children(&self.path("jobs"))?.len() >= WINDOW {
                    return Ok(false);
                }
                term.transaction()
                    .create(&self.path(&format!("jobs/{}", job_name(next))), b"")
                    .set_data_with_version(
                        &self.path("next"),
                        (next + 1).to_string().as_bytes(),
                        version,
                    )
                    .commit()?;
                Ok(true)
            };
            match step() {
                Ok(true) => continue,
                Ok(false) => {}
                // Refused (the term's node is gone, or another leader's
                // write came first) or cut short: look again.
                Err(e) => log::debug!("{}: handing out: {e}", self.name),
            }
            term.wait(Duration::from_millis(30));
        }
    }

    /// A worker thread: takes handed-out jobs while this process does not
    /// lead, until every job is handed out and done.
    fn work(&self, me: &str) {
        // Workers start at different jobs, so that they rarely meet.
        let mut turn: usize = me.bytes().map(usize::from).sum();
        while !self.stopping() {
            let mut jobs = match self.client.get_children(&self.path("jobs")) {
                Ok(jobs) => jobs,
                Err(_) => {
                    thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            if jobs.is_empty() && self.handed_out(&self.client).is_ok_and(|(n, _)| n >= JOBS) {
                return; // all handed out, and done
            }
            if jobs.is_empty() || self.leading.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(30));
                continue;
            }
            turn += 1;
            jobs.sort();
            let len = jobs.len();
            jobs.rotate_left(turn % len);
            for job in &jobs {
                match self.do_job(me, job) {
                    Ok(Outcome::Done) => break,
                    Ok(Outcome::Skipped) => {}
                    Ok(Outcome::Abandoned(why)) => {
                        self.oracle.log(&format!("abandon {me} {job} {why}"));
                        break;
                    }
                    Err(e) => {
                        log::debug!("{me}: {job}: {e}");
                        break;
                    }
                }
            }
        }
    }

    /// Takes `job`'s mutex and a lease, works, and commits.
    fn do_job(&self, me: &str, job: &str) -> latchkey_framework::Result<Outcome> {
        let mutex = InterProcessMutex::new(&self.client, &self.path(&format!("locks/{job}")))?;
        let Some(guard) = mutex.try_lock_for(Duration::ZERO)? else {
            return Ok(Outcome::Skipped);
        };
        let job_path = self.path(&format!("jobs/{job}"));
        if self.client.exists(&job_path)?.is_none() {
            return Ok(Outcome::Skipped); // done meanwhile
        }
        let Some(lease) = self.leases.acquire_timeout(Duration::from_secs(2))? else {
            return Ok(Outcome::Skipped);
        };
        let (version, work) = self.config_now();
        self.oracle.log(&format!("start {me} {job} {version}"));
        // Work, stopping at the first sign that a hold may be gone.
        let (job_events, lease_events) = (guard.events(), lease.events());
        let until = Instant::now() + work;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let event = select! {
                recv(job_events) -> e => e,
                recv(lease_events) -> e => e,
                default(left) => break,
            };
            match event {
                Ok(HoldEvent::Restored) => {}
                Ok(HoldEvent::InDoubt) => return Ok(Outcome::Abandoned("in-doubt")),
                _ => return Ok(Outcome::Abandoned("lost")),
            }
        }
        if guard.is_in_doubt() || lease.is_in_doubt() {
            return Ok(Outcome::Abandoned("in-doubt"));
        }
        // The commit: applied only while both holds' nodes exist.
        let tag = format!("{me} {}", now_ms());
        let marker = self.path(&format!("done/{job}"));
        let committed = self
            .client
            .transaction()
            .check_exists(&guard.node_path())
            .check_exists(lease.path())
            .delete(&job_path)
            .create(&marker, tag.as_bytes())
            .commit();
        // An error may follow an attempt that was applied (the commit is
        // retried after a connection loss, and the retry then fails): the
        // marker, tagged uniquely, tells.
        let committed = committed.is_ok() || self.was_committed(&marker, &tag);
        if !committed {
            return Ok(Outcome::Abandoned("commit-refused"));
        }
        self.oracle.done(job, me);
        if self.counter.increment().map_or(true, |v| !v.succeeded) {
            self.oracle.log(&format!("count-in-doubt {me} {job}"));
        }
        Ok(Outcome::Done)
    }

    /// Whether the commit tagged `tag` was applied, asked until ZooKeeper
    /// answers (a session timeout at most).
    fn was_committed(&self, marker: &str, tag: &str) -> bool {
        let until = Instant::now() + SESSION * 3;
        while Instant::now() < until {
            match self.client.get_data(marker) {
                Ok((data, _)) => return data == tag.as_bytes(),
                Err(e) if e.is(ErrorCode::NoNode) => return false,
                Err(_) => thread::sleep(Duration::from_millis(100)),
            }
        }
        self.oracle.violation(&format!(
            "cannot tell whether {marker} was committed by {tag}"
        ));
        false
    }

    /// The config as the `NodeCache` holds it: its version and the work time.
    fn config_now(&self) -> (String, Duration) {
        let text = self
            .config
            .current_data()
            .map(|d| String::from_utf8_lossy(&d.data).into_owned())
            .unwrap_or_default();
        let version = text.split_whitespace().next().unwrap_or("none").to_owned();
        let ms = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("work_ms="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(150);
        (version, Duration::from_millis(ms))
    }
}

// ---------------------------------------------------------------------------
// The coordinator: ZooKeeper, the processes, the faults, the verdict.
// ---------------------------------------------------------------------------

/// The processes, killed if the coordinator gives up on them.
struct Processes(Vec<Option<Child>>);

impl Drop for Processes {
    fn drop(&mut self) {
        for child in self.0.iter_mut().flatten() {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Processes {
    fn all_exited(&mut self) -> bool {
        self.0
            .iter_mut()
            .flatten()
            .all(|c| matches!(c.try_wait(), Ok(Some(_))))
    }
}

fn coordinator_main(args: &[&str]) -> i32 {
    let mut zk = match zookeeper_from(PROGRAM, args) {
        Ok(zk) => zk,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    match coordinate(&mut zk) {
        Ok(()) => 0,
        Err(e) => {
            if let Some(server) = &zk.server {
                eprintln!("server log tail:\n{}", server.log_tail(30));
            }
            eprintln!("{PROGRAM}: {e}");
            1
        }
    }
}

/// What the run measured, in seconds.
#[derive(Default)]
struct Figures {
    takeover: Option<f64>,
    leads_after_restart: Option<f64>,
    starts_after_restart: Option<f64>,
    done_after_restart: Option<f64>,
}

fn coordinate(zk: &mut Zk) -> Result<(), String> {
    let started = Instant::now();
    let t0 = now_ms();
    let dir = std::env::temp_dir().join(format!("latchkey-scheduler-{}-{t0}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let oracle = Oracle { dir };
    let base = format!("/examples/scheduler/run-{t0}");
    let client = start_client(
        Client::builder()
            .connect_string(&zk.connect)
            .session_timeout(Duration::from_secs(30))
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 10)),
        &zk.connect,
    )?;
    let e = |e: latchkey_framework::Error| e.to_string();
    for (path, data) in [
        ("jobs", ""),
        ("done", ""),
        ("locks", ""),
        ("next", "0"),
        ("config", CONFIG[0]),
    ] {
        client
            .create()
            .creating_parents_if_needed()
            .for_path(&format!("{base}/{path}"), data.as_bytes())
            .map_err(e)?;
    }
    println!(
        "{PROCESSES} processes x {WORKERS} workers, {JOBS} jobs, {LEASES} leases, \
         session timeout {SESSION:?}; oracle in {}",
        oracle.dir.display()
    );

    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut processes = Processes(Vec::new());
    for p in 0..PROCESSES {
        let child = Command::new(&exe)
            .args([
                "--process",
                &p.to_string(),
                "--connect",
                &zk.connect,
                "--base",
                &base,
            ])
            .arg("--oracle")
            .arg(&oracle.dir)
            .spawn()
            .map_err(|e| format!("cannot start a process: {e}"))?;
        processes.0.push(Some(child));
    }
    let say = |what: &str| println!("[{:>6.2}s] {what}", started.elapsed().as_secs_f64());
    let mut figures = Figures::default();

    // 1. SIGKILL the leader's process.
    wait_for(&mut processes, Duration::from_secs(40), || {
        oracle.jobs_done() >= KILL_AFTER_JOBS
    });
    let leader = oracle
        .entries()
        .into_iter()
        .rev()
        .find_map(|(_, w)| (w.first()? == "term").then(|| w.get(1).cloned())?)
        .ok_or("no process led")?;
    let index: usize = leader
        .strip_prefix('p')
        .and_then(|n| n.parse().ok())
        .filter(|&n| n < PROCESSES)
        .ok_or_else(|| format!("bad leader {leader}"))?;
    let killed_at = now_ms();
    if let Some(mut child) = processes.0[index].take() {
        child
            .kill()
            .map_err(|e| format!("cannot kill {leader}: {e}"))?;
        let _ = child.wait();
    }
    say(&format!(
        "KILLED the leader {leader} (SIGKILL; {} jobs done)",
        oracle.jobs_done()
    ));
    client
        .set_data(&format!("{base}/config"), CONFIG[1].as_bytes(), None)
        .map_err(e)?;
    say(&format!("config set to {:?}", CONFIG[1]));
    wait_for(&mut processes, SESSION * 4, || {
        oracle.first_after("term", killed_at).is_some()
    });
    let (at, words) = oracle
        .first_after("term", killed_at)
        .ok_or("no process led after the kill")?;
    let takeover = (at - killed_at) as f64 / 1000.0;
    figures.takeover = Some(takeover);
    say(&format!(
        "{} leads, {takeover:.2}s after the kill",
        words.get(1).map_or("?", String::as_str)
    ));

    // 2. Stop ZooKeeper for longer than the session timeout.
    let done_before = oracle.jobs_done();
    wait_for(&mut processes, Duration::from_secs(30), || {
        oracle.jobs_done() >= done_before + OUTAGE_AFTER_MORE_JOBS
    });
    if let Some(server) = &mut zk.server {
        if oracle.jobs_done() as u32 >= JOBS {
            return Err("the jobs were done before the outage".into());
        }
        say(&format!(
            "ZooKeeper STOPS for {OUTAGE:?} ({} jobs done)",
            oracle.jobs_done()
        ));
        server
            .stop()
            .map_err(|e| format!("cannot stop ZooKeeper: {e}"))?;
        say(&format!(
            "ZooKeeper stopped ({} jobs done)",
            oracle.jobs_done()
        ));
        thread::sleep(OUTAGE);
        // `restart` sees the server serve only at its next poll; the
        // probe, every 20 ms, sees it sooner.
        let probe = ServingProbe::start(server.addr());
        server
            .restart()
            .map_err(|e| format!("cannot restart ZooKeeper: {e}"))?;
        let serving = probe.first_served().unwrap_or_else(now_ms).min(now_ms());
        say("ZooKeeper serves again");
        wait_for(&mut processes, SESSION * 3, || {
            oracle.first_after("term", serving).is_some()
                && oracle.first_done_of_started_after(serving).is_some()
        });
        let after = |at: Option<u64>| at.map(|at| at.saturating_sub(serving) as f64 / 1000.0);
        figures.leads_after_restart = after(oracle.first_after("term", serving).map(|e| e.0));
        figures.starts_after_restart = after(oracle.first_after("start", serving).map(|e| e.0));
        figures.done_after_restart = after(oracle.first_done_of_started_after(serving));
    } else {
        println!("no restart: the ZooKeeper given with --connect is not ours to stop");
    }

    let exited = wait_for(&mut processes, RUN_LIMIT, || false);
    let mut failed = Vec::new();
    for (p, child) in processes.0.iter_mut().enumerate() {
        if let Some(child) = child {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => {}
                Ok(Some(status)) => failed.push(format!("p{p} exited with {status}")),
                _ => failed.push(format!("p{p} did not end")),
            }
        }
    }
    drop(processes);
    let counted = DistributedAtomicLong::new(
        &client,
        &format!("{base}/done-count"),
        RetryNTimes::new(3, Duration::from_millis(100)),
    )
    .and_then(|c| c.get())
    .map(|v| v.post_value)
    .map_err(e)?;
    client.close();
    let verdict = judge(&oracle, &figures, counted, exited, &failed, started);
    if verdict.is_ok() {
        let _ = fs::remove_dir_all(&oracle.dir);
    } else {
        println!("the oracle's files stay in {}", oracle.dir.display());
    }
    verdict
}

/// Asks a stopped server `srvr` every 20 ms, from a thread, until it
/// answers with its mode: the time it first did.
struct ServingProbe {
    first: Arc<std::sync::Mutex<Option<u64>>>,
    stop: Arc<AtomicBool>,
}

impl ServingProbe {
    fn start(addr: SocketAddr) -> ServingProbe {
        let first = Arc::new(std::sync::Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, stopped) = (Arc::clone(&first), Arc::clone(&stop));
        thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(60);
            while !stopped.load(Ordering::SeqCst) && Instant::now() < until {
                if serves(addr) {
                    *seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(now_ms());
                    return;
                }
                thread::sleep(Duration::from_millis(20));
            }
        });
        ServingProbe { first, stop }
    }

    /// The time the server first answered, waiting 1 s at most for the
    /// probe's answer under way.
    fn first_served(&self) -> Option<u64> {
        let until = Instant::now() + Duration::from_secs(1);
        loop {
            let first = *self.first.lock().unwrap_or_else(|e| e.into_inner());
            if first.is_some() || Instant::now() >= until {
                self.stop.store(true, Ordering::SeqCst);
                return first;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Whether the server at `addr` answers `srvr` with its mode (a server
/// still loading its data answers that it is not serving).
fn serves(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = String::new();
    stream.write_all(b"srvr").is_ok()
        && stream.read_to_string(&mut reply).is_ok()
        && reply.contains("Mode: ")
}

/// Waits until every process has exited or `done()` holds (checked every
/// 50 ms), for at most `within`; whether either happened.
fn wait_for(processes: &mut Processes, within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if processes.all_exited() || done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn seconds(figure: Option<f64>) -> String {
    figure.map_or_else(|| "never".to_owned(), |s| format!("{s:.2}s"))
}

fn judge(
    oracle: &Oracle,
    figures: &Figures,
    counted: i64,
    exited: bool,
    failed: &[String],
    started: Instant,
) -> Result<(), String> {
    let mut violations: Vec<String> = fs::read_to_string(oracle.file("violations"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    let lost: Vec<String> = (0..JOBS)
        .map(job_name)
        .filter(|j| !oracle.file(&format!("done-{j}")).exists())
        .collect();
    let entries = oracle.entries();
    let count = |kind: &str| entries.iter().filter(|(_, w)| w[0] == kind).count();
    let under = |version: &str| {
        entries
            .iter()
            .filter(|(_, w)| w[0] == "start" && w.get(3).is_some_and(|v| v == version))
            .count()
    };
    let in_doubt = count("count-in-doubt") as i64;
    let done = oracle.jobs_done() as i64;
    if (counted - done).abs() > in_doubt {
        violations.push(format!(
            "the counter says {counted}, the oracle {done} ({in_doubt} increments in doubt)"
        ));
    }

    println!("\n== what happened ({:.1?}) ==", started.elapsed());
    println!("jobs done once:         {done}/{JOBS}");
    println!("jobs lost:              {}", lost.len());
    println!("counter:                {counted} ({in_doubt} increments in doubt)");
    println!("leader terms:           {}", count("term"));
    println!("jobs started:           {}", count("start"));
    println!("jobs abandoned:         {}", count("abandon"));
    println!(
        "jobs started under config v1/v2: {}/{}",
        under("v1"),
        under("v2")
    );
    println!("takeover after the kill:     {}", seconds(figures.takeover));
    println!("after ZooKeeper served again:");
    println!(
        "  a leader led:              {}",
        seconds(figures.leads_after_restart)
    );
    println!(
        "  work resumed (job started): {}",
        seconds(figures.starts_after_restart)
    );
    println!(
        "  a job was done:            {}",
        seconds(figures.done_after_restart)
    );
    println!("{} violations", violations.len());
    for v in violations.iter().take(10) {
        println!("  {v}");
    }
    if !violations.is_empty() {
        return Err(format!("the oracle saw {} violations", violations.len()));
    }
    if !lost.is_empty() {
        return Err(format!("jobs lost: {lost:?}"));
    }
    if !failed.is_empty() || !exited {
        return Err(format!("processes failed: {}", failed.join("; ")));
    }
    println!("OK: every job done exactly once, none lost");
    Ok(())
}

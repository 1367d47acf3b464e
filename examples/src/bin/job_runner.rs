//! A job runner that survives losing ZooKeeper without two holders ever
//! working at once.
//!
//! Three worker processes of four threads each share 20 jobs of 10 steps.
//! A thread takes a job's mutex (one `InterProcessMutex` per job) and does
//! its steps; each step also needs one of the 2 leases of an
//! `InterProcessSemaphoreV2` and the read side of an
//! `InterProcessReadWriteLock` on a config file, whose write side a thread
//! takes after finishing a job to record it there.
//!
//! Mid-run, with the embedded ZooKeeper, two faults each last longer than
//! the 4 s session timeout:
//!
//! 1. worker 0 alone is cut off (its connection goes through a proxy that
//!    stops forwarding): its holds go in doubt, its session expires on the
//!    server, and the other workers may take over its jobs meanwhile;
//! 2. ZooKeeper itself is stopped, then started again: every hold goes in
//!    doubt, then is lost.
//!
//! The workers use the loss-handling pattern of the crate docs ("Holding a
//! lock safely"):
//!
//! - `is_in_doubt()` right before each write to what a lock protects;
//! - during a step, `select!` over the holds' `events()` channels, and
//!   stop the step at `InDoubt` or `Lost`;
//! - after `InDoubt`, wait for `Restored` (go on) or `Lost` (drop the
//!   guard and acquire the job again; its progress is kept in a file).
//!
//! An oracle outside ZooKeeper, in files, checks exclusion, counting only
//! holders that are not in doubt (Curator's rule): a holder creates a
//! marker file with `O_EXCL` (`create_new`) for the job, for one of the
//! two lease slots, and for the config file (readers one each, the writer
//! one that no reader may see). A marker that already exists, a third lease
//! holder, a reader beside the writer, a job step done twice or a config
//! update lost is a violation. The program prints what happened and exits
//! 1 if the oracle saw a violation (or a job was not finished); it ends by
//! itself in about 30 s.
//!
//! Curator's rule matters in the first fault: worker 0's jobs are handed
//! to others once its session expires, about a third of the session
//! timeout after worker 0's client suspends. A worker that went on
//! counting itself as holder past that point would meet the new holder's
//! marker.
//!
//! ```text
//! cargo run -p latchkey-examples --bin job_runner                      # embedded ZooKeeper, with the faults
//! cargo run -p latchkey-examples --bin job_runner -- --connect HOST:PORT  # no faults: not ours to break
//! cargo run -p latchkey-examples --bin job_runner -- --break-exclusion    # shows the oracle catching overlaps
//! ```
//!
//! `--break-exclusion` gives every thread a mutex of its own per job
//! (exclusion between threads is gone), to show that the oracle catches
//! the overlaps: that run exits 1.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use latchkey_examples::setup::{start_client, zookeeper_from, Zk};
use latchkey_framework::{Client, ExponentialBackoffRetry, ListenerHandle};
use latchkey_recipes::{
    select, HoldEvent, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2,
    MutexGuard, Receiver,
};
use latchkey_test::{FaultProxy, TestingServer};

const PROGRAM: &str = "job_runner";
/// Worker processes.
const PROCESSES: usize = 3;
/// Threads per worker process.
const THREADS: usize = 4;
/// Jobs to run, each under its own mutex.
const JOBS: usize = 20;
/// Steps per job.
const STEPS: u32 = 10;
/// Leases of the semaphore that every step needs.
const LEASES: u32 = 2;
/// How long one step works (holding the job, a lease and the read lock).
const STEP_WORK: Duration = Duration::from_millis(120);
/// The workers' session timeout; the outage lasts longer.
const SESSION: Duration = Duration::from_secs(4);
/// How long ZooKeeper stays stopped.
const OUTAGE: Duration = Duration::from_secs(7);
/// Worker 0 is cut off once this many steps (of `JOBS * STEPS`) are done.
const PARTITION_AFTER_STEPS: u32 = 15;
/// The outage starts once this many more steps are done after that.
const OUTAGE_AFTER_MORE_STEPS: u32 = 15;
/// How long a step waits for a lease or the read lock, and a finished job
/// for the write lock.
const LOCK_WAIT: Duration = Duration::from_secs(3);
/// Workers give up after this long (the run should take about 30 s).
const RUN_LIMIT: Duration = Duration::from_secs(90);
/// How long the program waits for its workers at most.
const WAIT_LIMIT: Duration = Duration::from_secs(120);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let code = match args.split_first() {
        Some((&"--worker", rest)) => worker_main(rest),
        _ => coordinator_main(&args),
    };
    std::process::exit(code);
}

// ---------------------------------------------------------------------------
// The oracle: files outside ZooKeeper.
// ---------------------------------------------------------------------------

/// Checks exclusion with files in a directory that all processes share.
///
/// A holder counts while its marker file exists. Following Curator's rule
/// a hold in doubt does not count: markers are created only by a hold not
/// in doubt, and a process's markers go as soon as its connection is
/// suspended (from the client's state listener, so that a thread busy
/// elsewhere cannot keep one past the moment its hold went in doubt).
struct Oracle {
    dir: PathBuf,
    /// The markers this process counts (a worker's; empty in the coordinator).
    counted: Mutex<HashSet<String>>,
}

impl Oracle {
    fn new(dir: PathBuf) -> Oracle {
        Oracle {
            dir,
            counted: Mutex::new(HashSet::new()),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn counted(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.counted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a violation, for the coordinator to count.
    fn violation(&self, what: &str) {
        println!("VIOLATION: {what}");
        let line = format!("{what}\n");
        // One append of one line: lines from several processes do not mix.
        let appended = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.file("violations"))
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            eprintln!("cannot record the violation: {e}");
        }
    }

    /// Creates marker `name` saying `who` holds it, if the holds are still
    /// good (`good()`, asked under the same lock the state listener takes).
    /// `false` if they are not, or if the marker exists already (a
    /// violation when `exclusive`).
    fn claim(&self, name: &str, who: &str, good: &dyn Fn() -> bool, exclusive: bool) -> bool {
        let mut counted = self.counted();
        if !good() {
            return false;
        }
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.file(name))
        {
            Ok(mut f) => {
                let _ = f.write_all(who.as_bytes());
                counted.insert(name.to_owned());
                true
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                if exclusive {
                    let other = fs::read_to_string(self.file(name)).unwrap_or_default();
                    self.violation(&format!("{who} holds {name}, and so does {other}"));
                }
                false
            }
            Err(e) => {
                self.violation(&format!("{who} cannot create marker {name}: {e}"));
                false
            }
        }
    }

    /// Removes marker `name` if this process still counts it (the state
    /// listener may have removed it, and another holder made a new one).
    fn unclaim(&self, name: &str) {
        if self.counted().remove(name) {
            let _ = fs::remove_file(self.file(name));
        }
    }

    /// The connection is suspended or the session lost: every hold of this
    /// process is in doubt and stops counting now.
    fn uncount_all(&self) {
        for name in self.counted().drain() {
            let _ = fs::remove_file(self.file(&name));
        }
    }

    /// One of the `LEASES` slots, or `None`: holds in doubt, or all slots
    /// taken (a violation).
    fn claim_lease(&self, who: &str, good: &dyn Fn() -> bool) -> Option<String> {
        for slot in 0..LEASES {
            let name = format!("lease-{slot}");
            if self.claim(&name, who, good, false) {
                return Some(name);
            }
            if !good() {
                return None;
            }
        }
        self.violation(&format!("{who} holds a lease, beside {LEASES} others"));
        None
    }

    /// A reader marker; a violation if the writer's marker is there. Both
    /// sides create their marker before looking for the other's, so of two
    /// that overlap at least one sees the other.
    fn claim_read(&self, who: &str, good: &dyn Fn() -> bool) -> String {
        let name = format!("config.reader.{who}");
        if self.claim(&name, who, good, true) && self.file("config.writer").exists() {
            self.violation(&format!("{who} reads the config while it is written"));
        }
        name
    }

    /// The writer's marker; a violation if another writer or a reader is in.
    fn claim_write(&self, who: &str, good: &dyn Fn() -> bool) -> bool {
        if !self.claim("config.writer", who, good, true) {
            return false;
        }
        let readers: Vec<String> = fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| n.starts_with("config.reader."))
                    .collect()
            })
            .unwrap_or_default();
        if !readers.is_empty() {
            self.violation(&format!("{who} writes the config beside {readers:?}"));
        }
        true
    }

    /// Steps of `job` done, as its holder recorded them.
    fn progress(&self, job: usize) -> u32 {
        fs::read_to_string(self.file(&format!("job-{job:02}.progress")))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Records step `step` of `job` as done by `who`.
    fn record_step(&self, job: usize, step: u32, who: &str, token: i64) -> std::io::Result<()> {
        let mut history = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.file(&format!("job-{job:02}.history")))?;
        history.write_all(format!("{step} {who} token={token}\n").as_bytes())?;
        let tmp = self.file(&format!("job-{job:02}.progress.{who}"));
        fs::write(&tmp, step.to_string())?;
        fs::rename(tmp, self.file(&format!("job-{job:02}.progress")))
    }

    /// Whether a violation was recorded: the workers then stop, the run
    /// has failed already.
    fn saw_violation(&self) -> bool {
        self.file("violations").exists()
    }

    fn total_steps(&self) -> u32 {
        (0..JOBS).map(|j| self.progress(j)).sum()
    }
}

// ---------------------------------------------------------------------------
// A worker process: one client, four threads.
// ---------------------------------------------------------------------------

/// What a worker process shares between its threads.
struct Worker {
    process: usize,
    client: Client,
    oracle: Arc<Oracle>,
    /// Removes this process's markers when its connection is suspended.
    _uncount: ListenerHandle,
    /// One mutex per job (each thread makes its own with `--break-exclusion`).
    jobs: Vec<InterProcessMutex>,
    leases: InterProcessSemaphoreV2,
    config: InterProcessReadWriteLock,
    base: String,
    mode: Mode,
    /// The coordinator's start, for timestamps that line up across processes.
    t0: SystemTime,
    deadline: Instant,
    /// The coordinator: if it goes, so do the workers.
    parent: u32,
}

/// What one thread saw; summed per process into `stats-p<N>`.
#[derive(Default)]
struct Stats {
    jobs_taken: u32,
    jobs_finished: u32,
    steps: u32,
    in_doubt: u32,
    restored: u32,
    lost: u32,
    reacquired: u32,
    config_writes: u32,
    errors: u32,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.jobs_taken += o.jobs_taken;
        self.jobs_finished += o.jobs_finished;
        self.steps += o.steps;
        self.in_doubt += o.in_doubt;
        self.restored += o.restored;
        self.lost += o.lost;
        self.reacquired += o.reacquired;
        self.config_writes += o.config_writes;
        self.errors += o.errors;
    }

    fn lines(&self) -> String {
        format!(
            "jobs_taken {}\njobs_finished {}\nsteps {}\nin_doubt {}\nrestored {}\nlost {}\n\
             reacquired {}\nconfig_writes {}\nerrors {}\n",
            self.jobs_taken,
            self.jobs_finished,
            self.steps,
            self.in_doubt,
            self.restored,
            self.lost,
            self.reacquired,
            self.config_writes,
            self.errors
        )
    }

    fn parse(text: &str) -> Stats {
        let mut s = Stats::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once(' ') else {
                continue;
            };
            let v: u32 = v.trim().parse().unwrap_or(0);
            let field = match k {
                "jobs_taken" => &mut s.jobs_taken,
                "jobs_finished" => &mut s.jobs_finished,
                "steps" => &mut s.steps,
                "in_doubt" => &mut s.in_doubt,
                "restored" => &mut s.restored,
                "lost" => &mut s.lost,
                "reacquired" => &mut s.reacquired,
                "config_writes" => &mut s.config_writes,
                "errors" => &mut s.errors,
                _ => continue,
            };
            *field = v;
        }
        s
    }
}

/// How the workers behave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// As they should: the loss-handling pattern.
    Safe,
    /// `--break-exclusion`: a mutex per thread, so no exclusion at all.
    BreakExclusion,
    /// `--ignore-doubt`: holders never look at `is_in_doubt()` or
    /// `events()` and go on counting themselves after a loss.
    IgnoreDoubt,
}

impl Mode {
    const FLAGS: [&str; 2] = ["--break-exclusion", "--ignore-doubt"];

    fn from_args(args: &[&str]) -> Mode {
        if args.contains(&Mode::FLAGS[0]) {
            Mode::BreakExclusion
        } else if args.contains(&Mode::FLAGS[1]) {
            Mode::IgnoreDoubt
        } else {
            Mode::Safe
        }
    }

    fn flag(self) -> Option<&'static str> {
        match self {
            Mode::Safe => None,
            Mode::BreakExclusion => Some(Mode::FLAGS[0]),
            Mode::IgnoreDoubt => Some(Mode::FLAGS[1]),
        }
    }
}

/// How a step ended.
enum Step {
    Done,
    /// No lease or read lock in time, or an error: try the step again.
    Busy,
    /// A hold went in doubt or was lost: the step stopped before its write.
    Interrupted(HoldEvent),
}

/// `--worker P --connect HOSTS --oracle DIR --base PATH --t0 MILLIS [--break-exclusion]`
fn worker_main(args: &[&str]) -> i32 {
    match Worker::start(args).and_then(|w| w.run()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{PROGRAM} worker: {e}");
            1
        }
    }
}

impl Worker {
    fn start(args: &[&str]) -> Result<Worker, String> {
        let value = |name: &str| -> Result<&str, String> {
            args.iter()
                .position(|a| *a == name)
                .and_then(|i| args.get(i + 1).copied())
                .ok_or_else(|| format!("worker needs {name}"))
        };
        let process: usize = value("--worker-id")?
            .parse()
            .map_err(|_| "bad --worker-id")?;
        let connect = value("--connect")?;
        let base = value("--base")?.to_owned();
        let t0_ms: u64 = value("--t0")?.parse().map_err(|_| "bad --t0")?;
        let client = start_client(
            Client::builder()
                .connect_string(connect)
                .session_timeout(SESSION)
                .connection_timeout(Duration::from_secs(2))
                .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 3)),
            connect,
        )?;
        let jobs = (0..JOBS)
            .map(|j| InterProcessMutex::new(&client, &format!("{base}/jobs/job-{j:02}")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let leases = InterProcessSemaphoreV2::new(&client, &format!("{base}/leases"), LEASES)
            .map_err(|e| e.to_string())?;
        let config = InterProcessReadWriteLock::new(&client, &format!("{base}/config"))
            .map_err(|e| e.to_string())?;
        let oracle = Arc::new(Oracle::new(PathBuf::from(value("--oracle")?)));
        let mode = Mode::from_args(args);
        let listener_oracle = Arc::clone(&oracle);
        let uncount = client.add_listener(move |state| {
            if !state.is_connected() && mode != Mode::IgnoreDoubt {
                listener_oracle.uncount_all();
            }
        });
        Ok(Worker {
            process,
            client,
            oracle,
            _uncount: uncount,
            jobs,
            leases,
            config,
            base,
            mode,
            t0: UNIX_EPOCH + Duration::from_millis(t0_ms),
            deadline: Instant::now() + RUN_LIMIT,
            parent: std::os::unix::process::parent_id(),
        })
    }

    /// Past the run's limit, a violation seen (the run has failed), or the
    /// coordinator gone.
    fn should_stop(&self) -> bool {
        Instant::now() >= self.deadline
            || self.oracle.saw_violation()
            || std::os::unix::process::parent_id() != self.parent
    }

    fn say(&self, who: &str, what: &str) {
        let at = self.t0.elapsed().unwrap_or_default().as_secs_f64();
        println!("[{at:>6.2}s] {who:<6} {what}");
    }

    fn run(self) -> Result<(), String> {
        let mut total = Stats::default();
        thread::scope(|s| {
            let threads: Vec<_> = (0..THREADS)
                .map(|t| {
                    let me = &self;
                    s.spawn(move || me.thread_main(t))
                })
                .collect();
            for t in threads {
                match t.join() {
                    Ok(stats) => total.add(&stats),
                    Err(_) => total.errors += 1,
                }
            }
        });
        fs::write(
            self.oracle.file(&format!("stats-p{}", self.process)),
            total.lines(),
        )
        .map_err(|e| format!("cannot write stats: {e}"))?;
        self.client.close();
        Ok(())
    }

    /// One thread: take a job that is not finished, work on it, repeat.
    fn thread_main(&self, t: usize) -> Stats {
        let me = format!("p{}t{}", self.process, t);
        let mut stats = Stats::default();
        let own_mutexes: Vec<InterProcessMutex>;
        let jobs = if self.mode == Mode::BreakExclusion {
            let made = (0..JOBS)
                .map(|j| {
                    let path = format!("{}/broken/{me}/job-{j:02}", self.base);
                    InterProcessMutex::new(&self.client, &path)
                })
                .collect::<Result<Vec<_>, _>>();
            own_mutexes = match made {
                Ok(mutexes) => mutexes,
                Err(e) => {
                    self.say(&me, &format!("cannot make my mutexes: {e}"));
                    stats.errors += 1;
                    return stats;
                }
            };
            &own_mutexes
        } else {
            &self.jobs
        };
        // Threads start at different jobs, so they rarely ask for the same
        // one; all start at job 0 when exclusion is broken, so they collide.
        let first = if self.mode == Mode::BreakExclusion {
            0
        } else {
            (self.process * THREADS + t) * JOBS / (PROCESSES * THREADS)
        };
        let mut resume: Option<usize> = None;
        let mut last_error: Option<Instant> = None;
        while !self.should_stop() {
            let pending: Vec<usize> = (0..JOBS)
                .map(|i| (first + i) % JOBS)
                .filter(|&j| self.oracle.progress(j) < STEPS)
                .collect();
            if pending.is_empty() {
                break;
            }
            // A job lost to an outage is taken up again first.
            let order = resume.into_iter().chain(pending.iter().copied());
            let mut worked = false;
            for job in order {
                let attempt = if Some(job) == resume {
                    jobs[job].try_lock_for(LOCK_WAIT)
                } else {
                    jobs[job].try_lock()
                };
                match attempt {
                    Ok(Some(guard)) => {
                        if Some(job) == resume {
                            stats.reacquired += 1;
                            self.say(&me, &format!("job {job:02}: taken again after the loss"));
                        }
                        resume = None;
                        stats.jobs_taken += 1;
                        worked = true;
                        if self.run_job(&me, job, guard, &mut stats) {
                            resume = Some(job);
                        }
                        break;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        stats.errors += 1;
                        if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(3)) {
                            self.say(&me, &format!("cannot take a job now: {e}"));
                            last_error = Some(Instant::now());
                        }
                        thread::sleep(Duration::from_millis(200));
                        break;
                    }
                }
            }
            if !worked {
                // Every pending job is held by someone else: look again soon.
                thread::sleep(Duration::from_millis(50));
            }
        }
        stats
    }

    /// Works on `job` while `guard` holds its mutex; returns whether the
    /// hold was lost (the job is to be taken again).
    fn run_job(&self, me: &str, job: usize, guard: MutexGuard<'_>, stats: &mut Stats) -> bool {
        let marker = format!("job-{job:02}.holder");
        // The standing of the job's hold, told as it changes.
        let standing = guard.events();
        let ignore = self.mode == Mode::IgnoreDoubt;
        let good = || ignore || !guard.is_in_doubt();
        let mut counted = self.oracle.claim(&marker, me, &good, true);
        // Whether this hold did the job's last step (another may have just
        // finished it before we got the lock).
        let mut finished_it = false;
        let lost = loop {
            if self.should_stop() {
                break false;
            }
            let done = self.oracle.progress(job);
            if done >= STEPS {
                break false;
            }
            let event = match self.step(me, job, &guard, &standing, done + 1) {
                Step::Done => {
                    stats.steps += 1;
                    finished_it = done + 1 == STEPS;
                    continue;
                }
                Step::Busy if ignore || !guard.is_in_doubt() => continue,
                Step::Busy => HoldEvent::InDoubt,
                Step::Interrupted(event) => event,
            };
            // In doubt: no longer counted as the holder; wait for the
            // session to be confirmed or lost.
            if counted {
                self.oracle.unclaim(&marker);
                counted = false;
            }
            stats.in_doubt += 1;
            self.say(
                me,
                &format!("job {job:02}: in doubt at step {}, pausing", done + 1),
            );
            match event {
                HoldEvent::Lost => break true,
                _ if wait_for_standing(&standing, &guard) => {
                    stats.restored += 1;
                    self.say(me, &format!("job {job:02}: restored, going on"));
                    counted = self.oracle.claim(&marker, me, &good, true);
                }
                _ => break true,
            }
        };
        if counted {
            self.oracle.unclaim(&marker);
        }
        if lost {
            stats.lost += 1;
            self.say(
                me,
                &format!("job {job:02}: lost with the session; dropping it"),
            );
        }
        drop(guard);
        if finished_it {
            stats.jobs_finished += 1;
            self.say(me, &format!("job {job:02}: finished"));
            if self.record_in_config(me, job) {
                stats.config_writes += 1;
            }
        }
        lost
    }

    /// Step `step` of `job`: a lease, the config's read lock, the work,
    /// then the write of the job's progress.
    fn step(
        &self,
        me: &str,
        job: usize,
        guard: &MutexGuard<'_>,
        standing: &Receiver<HoldEvent>,
        step: u32,
    ) -> Step {
        let ignore = self.mode == Mode::IgnoreDoubt;
        if !ignore && guard.is_in_doubt() {
            return Step::Interrupted(HoldEvent::InDoubt);
        }
        let lease = match self.leases.acquire_timeout(LOCK_WAIT) {
            Ok(Some(lease)) => lease,
            Ok(None) | Err(_) => return Step::Busy,
        };
        let read = match self.config.try_read_for(LOCK_WAIT) {
            Ok(Some(read)) => read,
            Ok(None) | Err(_) => return Step::Busy,
        };
        let in_doubt =
            || !ignore && (guard.is_in_doubt() || lease.is_in_doubt() || read.is_in_doubt());
        if in_doubt() {
            return Step::Interrupted(HoldEvent::InDoubt);
        }
        let good = || !in_doubt();
        let slot = self.oracle.claim_lease(me, &good);
        let reader = self.oracle.claim_read(me, &good);
        let _config = fs::read_to_string(self.oracle.file("config")).unwrap_or_default();
        // The work: as long as STEP_WORK, unless a hold goes in doubt.
        let interrupted = if ignore {
            thread::sleep(STEP_WORK);
            None
        } else {
            work_watching(&[standing, &lease.events(), &read.events()])
        };
        // Right before the write: is every hold still good?
        let outcome = match interrupted {
            Some(event) => Step::Interrupted(event),
            None if in_doubt() => Step::Interrupted(HoldEvent::InDoubt),
            None => match self
                .oracle
                .record_step(job, step, me, guard.fencing_token())
            {
                Ok(()) => Step::Done,
                Err(e) => {
                    self.say(
                        me,
                        &format!("cannot record step {step} of job {job:02}: {e}"),
                    );
                    Step::Busy
                }
            },
        };
        // Stop counting before letting go of the locks.
        self.oracle.unclaim(&reader);
        if let Some(slot) = slot {
            self.oracle.unclaim(&slot);
        }
        drop(read);
        drop(lease);
        outcome
    }

    /// Adds `job` to the config file under the write lock.
    fn record_in_config(&self, me: &str, job: usize) -> bool {
        let Ok(Some(write)) = self.config.try_write_for(LOCK_WAIT) else {
            self.say(me, "could not take the config's write lock; not recorded");
            return false;
        };
        let mine = self.oracle.claim_write(me, &|| !write.is_in_doubt());
        if !mine && write.is_in_doubt() {
            return false;
        }
        let path = self.oracle.file("config");
        let text = fs::read_to_string(&path).unwrap_or_default();
        let updates: u32 = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("updates "))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let jobs = text.lines().nth(1).unwrap_or("finished:");
        let new = format!("updates {}\n{jobs} {job:02}\n", updates + 1);
        let written = !write.is_in_doubt() && fs::write(&path, new).is_ok();
        if mine {
            self.oracle.unclaim("config.writer");
        }
        drop(write);
        written
    }
}

/// Waits `STEP_WORK` while watching the holds' channels; the first event
/// that means stop (`InDoubt`, `Lost`), if any. A `Restored` left over from
/// an earlier doubt is passed over.
fn work_watching(holds: &[&Receiver<HoldEvent>; 3]) -> Option<HoldEvent> {
    let [job, lease, read] = *holds;
    let until = Instant::now() + STEP_WORK;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let event = select! {
            recv(job) -> e => e,
            recv(lease) -> e => e,
            recv(read) -> e => e,
            default(left) => return None,
        };
        match event {
            Ok(HoldEvent::Restored) => continue,
            Ok(event) => return Some(event),
            // A hold's channel ends only with the hold.
            Err(_) => return Some(HoldEvent::Lost),
        }
    }
}

/// After `InDoubt`: waits for `Restored` (true) or `Lost` (false). The
/// client declares the session lost after the session timeout without a
/// connection, so this ends; it is bounded all the same.
fn wait_for_standing(standing: &Receiver<HoldEvent>, guard: &MutexGuard<'_>) -> bool {
    let deadline = Instant::now() + SESSION * 4;
    loop {
        match standing.recv_deadline(deadline) {
            Ok(HoldEvent::Restored) if !guard.is_in_doubt() => return true,
            Ok(HoldEvent::Lost) | Err(_) => return false,
            Ok(_) => {}
        }
    }
}

// ---------------------------------------------------------------------------
// The coordinator: ZooKeeper, the workers, the outage, the verdict.
// ---------------------------------------------------------------------------

/// Worker processes, killed if the coordinator gives up on them.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn coordinator_main(args: &[&str]) -> i32 {
    let mode = Mode::from_args(args);
    let rest: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| !Mode::FLAGS.contains(a))
        .collect();
    let mut zk = match zookeeper_from(PROGRAM, &rest) {
        Ok(zk) => zk,
        Err(e) => {
            eprintln!("{e} [--break-exclusion | --ignore-doubt]");
            return 2;
        }
    };
    match coordinate(&mut zk, mode) {
        Ok(()) => 0,
        Err(Failure::Violations(e)) => {
            eprintln!("{PROGRAM}: {e}");
            1
        }
        Err(Failure::Other(e)) => {
            // A worker that failed or hung is often explained there.
            if let Some(server) = &zk.server {
                eprintln!("server log tail:\n{}", server.log_tail(30));
            }
            eprintln!("{PROGRAM}: {e}");
            1
        }
    }
}

/// Why a run failed.
enum Failure {
    /// The oracle saw two holders at once (or its traces).
    Violations(String),
    /// Anything else: a worker failed or hung, a job was left undone.
    Other(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Failure {
        Failure::Other(e)
    }
}

fn coordinate(zk: &mut Zk, mode: Mode) -> Result<(), Failure> {
    let started = Instant::now();
    let t0 = SystemTime::now();
    let t0_ms = t0
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_millis();
    let dir = std::env::temp_dir().join(format!(
        "latchkey-job-runner-{}-{t0_ms}",
        std::process::id()
    ));
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let oracle = Oracle::new(dir);
    fs::write(oracle.file("config"), "updates 0\nfinished:\n").map_err(|e| e.to_string())?;
    let base = format!("/examples/job_runner/run-{t0_ms}");
    println!(
        "{PROCESSES} processes x {THREADS} threads, {JOBS} jobs of {STEPS} steps, \
         {LEASES} leases, session timeout {SESSION:?}; oracle in {}",
        oracle.dir.display()
    );

    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut workers = Workers(Vec::new());
    // Worker 0 reaches an embedded ZooKeeper through a proxy, which can
    // cut it off alone.
    let proxy = match (&zk.server, mode) {
        (Some(server), Mode::Safe | Mode::IgnoreDoubt) => Some(
            FaultProxy::start(server.addr()).map_err(|e| format!("cannot start a proxy: {e}"))?,
        ),
        _ => None,
    };
    for p in 0..PROCESSES {
        let connect = match (&proxy, p) {
            (Some(proxy), 0) => proxy.connect_string(),
            _ => zk.connect.clone(),
        };
        let mut cmd = Command::new(&exe);
        cmd.args(["--worker", "--worker-id", &p.to_string()])
            .args(["--connect", &connect, "--base", &base])
            .args(["--t0", &t0_ms.to_string()])
            .arg("--oracle")
            .arg(&oracle.dir);
        if let Some(flag) = mode.flag() {
            cmd.arg(flag);
        }
        workers.0.push(
            cmd.spawn()
                .map_err(|e| format!("cannot start a worker: {e}"))?,
        );
    }

    if mode == Mode::IgnoreDoubt {
        println!("the workers IGNORE doubt and loss (--ignore-doubt): the oracle must object");
    }
    let faults = match (&mut zk.server, proxy.as_ref(), mode) {
        (_, _, Mode::BreakExclusion) => {
            println!("exclusion BROKEN on purpose (--break-exclusion): the oracle must object");
            Faults::default()
        }
        (Some(server), Some(proxy), _) => {
            inject_faults(server, proxy, &mut workers, &oracle, started)?
        }
        _ => {
            println!("no faults: the ZooKeeper given with --connect is not ours to break");
            Faults::default()
        }
    };

    let all_exited = wait_for(&mut workers, WAIT_LIMIT, || false);
    let mut failed_workers = Vec::new();
    for (p, child) in workers.0.iter_mut().enumerate() {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => {}
            Ok(Some(status)) => failed_workers.push(format!("worker {p} exited with {status}")),
            _ => failed_workers.push(format!("worker {p} did not end within {WAIT_LIMIT:?}")),
        }
    }
    drop(workers);

    let verdict = judge(&oracle, &faults, all_exited, &failed_workers, started);
    if verdict.is_ok() {
        let _ = fs::remove_dir_all(&oracle.dir);
    } else {
        println!("the oracle's files stay in {}", oracle.dir.display());
    }
    verdict
}

/// The faults a run went through.
#[derive(Default)]
struct Faults {
    partition: bool,
    outage: bool,
}

fn say_at(started: Instant, what: &str) {
    println!("[{:>6.2}s] {what}", started.elapsed().as_secs_f64());
}

/// First cuts worker 0 off alone for longer than the session timeout (the
/// others go on and may take over its jobs), then stops ZooKeeper for
/// everyone for longer than the session timeout, each once enough steps
/// were done for it to interrupt work under way.
fn inject_faults(
    server: &mut TestingServer,
    proxy: &FaultProxy,
    workers: &mut Workers,
    oracle: &Oracle,
    started: Instant,
) -> Result<Faults, String> {
    let mut faults = Faults::default();
    let all = JOBS as u32 * STEPS;
    wait_for(workers, Duration::from_secs(60), || {
        oracle.total_steps() >= PARTITION_AFTER_STEPS
    });
    if oracle.total_steps() >= PARTITION_AFTER_STEPS {
        say_at(
            started,
            &format!(
                "worker 0 CUT OFF from ZooKeeper for {OUTAGE:?} ({} of {all} steps done)",
                oracle.total_steps()
            ),
        );
        proxy.pause();
        thread::sleep(OUTAGE);
        proxy.cut();
        proxy.resume();
        say_at(started, "worker 0 can reach ZooKeeper again");
        faults.partition = true;
    }
    let outage_after = oracle.total_steps() + OUTAGE_AFTER_MORE_STEPS;
    wait_for(workers, Duration::from_secs(60), || {
        oracle.total_steps() >= outage_after
    });
    if oracle.total_steps() < outage_after || oracle.total_steps() >= all {
        println!("the workers did not leave enough work for the outage");
        return Ok(faults);
    }
    say_at(
        started,
        &format!(
            "ZooKeeper STOPS for {OUTAGE:?} ({} of {all} steps done)",
            oracle.total_steps()
        ),
    );
    server
        .stop()
        .map_err(|e| format!("cannot stop ZooKeeper: {e}"))?;
    thread::sleep(OUTAGE);
    say_at(started, "ZooKeeper STARTS again");
    server
        .restart()
        .map_err(|e| format!("cannot restart ZooKeeper: {e}"))?;
    say_at(started, "ZooKeeper serves again");
    faults.outage = true;
    Ok(faults)
}

/// Waits until every worker has exited or `done()` holds (checked every
/// 50 ms), for at most `within`; whether either happened.
fn wait_for(workers: &mut Workers, within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        let exited = workers
            .0
            .iter_mut()
            .all(|c| matches!(c.try_wait(), Ok(Some(_))));
        if exited || done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Reads the oracle's files and says what happened.
fn judge(
    oracle: &Oracle,
    faults: &Faults,
    all_exited: bool,
    failed_workers: &[String],
    started: Instant,
) -> Result<(), Failure> {
    let mut stats = Stats::default();
    for p in 0..PROCESSES {
        if let Ok(text) = fs::read_to_string(oracle.file(&format!("stats-p{p}"))) {
            stats.add(&Stats::parse(&text));
        }
    }
    let mut violations: Vec<String> = fs::read_to_string(oracle.file("violations"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    // Each step of each job done exactly once.
    let mut finished = 0;
    let mut shared_jobs = 0;
    for job in 0..JOBS {
        let history =
            fs::read_to_string(oracle.file(&format!("job-{job:02}.history"))).unwrap_or_default();
        let processes: HashSet<&str> = history
            .lines()
            .filter_map(|l| l.split(' ').nth(1)?.get(..2))
            .collect();
        if processes.len() > 1 {
            shared_jobs += 1;
        }
        let mut counts = [0u32; STEPS as usize + 1];
        for step in history
            .lines()
            .filter_map(|l| l.split(' ').next()?.parse::<usize>().ok())
        {
            if let Some(c) = counts.get_mut(step) {
                *c += 1;
            }
        }
        for (step, &n) in counts.iter().enumerate().skip(1) {
            if n > 1 {
                violations.push(format!("job {job:02}: step {step} was done {n} times"));
            }
        }
        if counts[1..].iter().all(|&n| n >= 1) {
            finished += 1;
        }
    }
    // Every config update kept: a writer beside another would lose one.
    let config = fs::read_to_string(oracle.file("config")).unwrap_or_default();
    let updates: u32 = config
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("updates "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if updates != stats.config_writes {
        violations.push(format!(
            "the config has {updates} updates, but {} were written",
            stats.config_writes
        ));
    }

    println!("\n== what happened ({:.1?}) ==", started.elapsed());
    println!("jobs finished:          {finished}/{JOBS}");
    println!(
        "steps done:             {} (each job's steps once: {})",
        stats.steps,
        JOBS as u32 * STEPS
    );
    println!("jobs taken:             {}", stats.jobs_taken);
    let seen = |yes: bool| {
        if yes {
            format!("{OUTAGE:?}, session timeout {SESSION:?}")
        } else {
            "none".to_owned()
        }
    };
    println!("worker 0 cut off:       {}", seen(faults.partition));
    println!("ZooKeeper outage:       {}", seen(faults.outage));
    println!("jobs worked on by more than one process: {shared_jobs}");
    println!("holds gone in doubt:    {}", stats.in_doubt);
    println!("holds restored:         {}", stats.restored);
    println!("holds lost:             {}", stats.lost);
    println!("jobs taken again:       {}", stats.reacquired);
    println!("config updates:         {updates}");
    println!("errors while ZooKeeper was away: {}", stats.errors);
    println!("{} violations", violations.len());
    for v in violations.iter().take(10) {
        println!("  {v}");
    }

    if !violations.is_empty() {
        return Err(Failure::Violations(format!(
            "the oracle saw {} violations of exclusion",
            violations.len()
        )));
    }
    if !failed_workers.is_empty() || !all_exited {
        return Err(Failure::Other(failed_workers.join("; ")));
    }
    if finished != JOBS {
        return Err(Failure::Other(format!(
            "only {finished} of {JOBS} jobs were finished"
        )));
    }
    println!("OK: every job done once, no two holders at once");
    Ok(())
}

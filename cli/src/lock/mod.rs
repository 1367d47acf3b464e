//! `latchkey lock` (also the `lock` program): run a command while holding a
//! distributed lock on ZooKeeper, in the spirit of `flock(1)` and
//! `etcdctl lock`.
//!
//! ```text
//! latchkey lock [OPTIONS] PATH [OPTIONS] [--] CMD [ARGS...]
//! latchkey lock [OPTIONS] PATH [OPTIONS] -c CMD
//! latchkey lock --list [--semaphore N] PATH     (the same as latchkey inspect PATH [--leases N])
//! ```
//!
//! By default the lock is an `InterProcessMutex` on `PATH`; `--read` and
//! `--write` take one side of an `InterProcessReadWriteLock`, and
//! `--semaphore N` one lease of an `InterProcessSemaphoreV2` with N leases.
//! The nodes are named as Curator names them, so `lock` queues with Java
//! (Curator) and Rust (latchkey) processes on the same path.
//!
//! The command runs with the lock held and inherits stdin, stdout and
//! stderr. It also gets `LATCHKEY_LOCK_PATH`, `LATCHKEY_LOCK_NODE` and
//! `LATCHKEY_FENCING_TOKEN` (the czxid of the lock node, larger for every
//! later holder) in its environment. The lock is released when the command
//! ends, and on Ctrl-C.
//!
//! The command runs in a process group of its own, and `lock` signals the
//! whole group, so that what the command started (a shell's background
//! jobs, a pipeline) stops with it: on Ctrl-C, SIGTERM and up to 2 s to
//! exit, then SIGKILL; when the command exits, the same for anything it
//! left running, before the release. When `lock` runs in the foreground of
//! a terminal, the command's group gets the terminal while it runs (it can
//! read from it, and a Ctrl-C typed there reaches it directly); a Ctrl-Z
//! stops `lock` with the command, as a shell job, and `fg` resumes both.
//!
//! If `lock` itself dies without stopping the command (SIGKILL, the OOM
//! killer, a crash), a watchdog process that `lock` starts beside the
//! command kills the command's process group at once (see [`Watchdog`]), so
//! that the command does not run on once the session expires and the next
//! process takes the lock. A process that leaves the command's group
//! (`setsid`, a daemon) is not followed, and nothing stops the command if
//! the watchdog is killed too.
//!
//! If the ZooKeeper session is lost while the command runs (the client was
//! cut off for the whole session timeout, or the server expired the
//! session), another process may already hold the lock: by default the
//! command's whole process group is killed (SIGKILL, no grace) and `lock`
//! exits 78; with `--on-lost warn` a warning goes to stderr and the command
//! keeps running.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | the command's | the command ran and exited with this code |
//! | 128+N | the command died of signal N |
//! | 64 | bad usage (EX_USAGE) |
//! | 69 | ZooKeeper could not be reached within the connection timeout, or the connection failed before the lock was taken (EX_UNAVAILABLE) |
//! | 70 | ZooKeeper refused an operation (for example `NoAuth`) (EX_SOFTWARE) |
//! | 75 | the lock was not taken within `--timeout` (EX_TEMPFAIL) |
//! | 78 | the lock was lost while the command ran, and `--on-lost kill` killed it |
//! | 126 | the command could not be started |
//! | 127 | the command was not found |
//! | 130 | interrupted by Ctrl-C (SIGINT; SIGTERM and SIGHUP are handled alike) |
//!
//! As with `flock`, a command may itself exit with one of these codes.

mod args;
mod group;
mod release;
mod watchdog;

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use latchkey_framework::{Client, ConnectionState, Error, ListenerHandle};
use latchkey_recipes::{
    InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2, Lease,
};
use nix::sys::signal::Signal;

use crate::conn::Env;
use crate::{Exit, EX_SOFTWARE, EX_UNAVAILABLE, EX_USAGE};
use args::{parse_args, Kind, OnLost, Opts, Parsed};
use group::{signal_group, supervise, Outcome, Terminal};
use release::{close_and_release, describe, exit_code, human, Progress};
pub(crate) use watchdog::WATCHDOG_ARG;
use watchdog::{watchdog, Watchdog};

/// The lock was not taken in time (EX_TEMPFAIL).
const EX_TEMPFAIL: i32 = 75;
/// The lock was lost while the command ran, which was killed.
const EX_LOST: i32 = 78;
/// The command could not be started.
const EX_CANNOT_RUN: i32 = 126;
/// The command was not found.
const EX_NOT_FOUND: i32 = 127;
/// Interrupted (128 + SIGINT).
const EX_INTERRUPTED: i32 = 130;

/// How often the main loop looks at the command, the signal flag and the lock.
const POLL: Duration = Duration::from_millis(50);
/// How long an interrupted command has to exit after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(2);
/// The most bytes of lock-node data (who holds it) that `lock` writes.
const MAX_NODE_DATA: usize = 256;

/// Ctrl-C and friends. The signal handler only counts; everything else
/// happens on ordinary threads.
static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);

/// The running command's process group (its pid; 0 when none), so that a
/// second Ctrl-C can kill it before `lock` exits without waiting.
static CHILD_GROUP: AtomicU32 = AtomicU32::new(0);

fn interrupted() -> bool {
    INTERRUPTS.load(Ordering::Acquire) > 0
}

/// Runs `lock` (or `latchkey lock`, which `prog` names in the help) on
/// `args`, the words after the program's name. Returns the exit code.
pub(crate) fn main(prog: &str, args: Vec<OsString>) -> i32 {
    if args.first().is_some_and(|a| a == WATCHDOG_ARG) {
        return watchdog();
    }
    match parse_args(args, &Env::from_process()) {
        Ok(Parsed::Help) => {
            print!("{}", args::usage(prog));
            0
        }
        Ok(Parsed::Version) => {
            match prog {
                "lock" => println!("lock (latchkey) {}", env!("CARGO_PKG_VERSION")),
                _ => println!("latchkey {}", env!("CARGO_PKG_VERSION")),
            }
            0
        }
        Ok(Parsed::Run(opts)) => {
            let outcome = if opts.list { list(&opts) } else { run(&opts) };
            match outcome {
                Ok(code) => code,
                Err(exit) => {
                    if !exit.message.is_empty() {
                        eprintln!("lock: {}", exit.message);
                    }
                    exit.code
                }
            }
        }
        Err(exit) => {
            eprintln!(
                "lock: {}\nTry '{prog} --help' for more information.",
                exit.message
            );
            exit.code
        }
    }
}

/// `--list`: the same as `latchkey inspect PATH` (with `--semaphore N`,
/// `--leases N`), on `lock`'s connection options.
fn list(opts: &Opts) -> Result<i32, Exit> {
    let phase = Arc::new(AtomicUsize::new(PHASE_WAITING));
    let client = connect(opts, &phase)?;
    let inspect = crate::Opts {
        command: "inspect".into(),
        path: opts.path.clone(),
        conn: opts.conn.clone(),
        json: false,
        count: None,
        leases: match opts.kind {
            Kind::Semaphore(n) => Some(n),
            _ => None,
        },
        limit: None,
    };
    let result = crate::inspect::inspect(&client, &inspect);
    client.close();
    result.map(|()| 0)
}

// ---------------------------------------------------------------------------
// Connecting.

/// Runs while the client connects and waits for the lock: on the first
/// Ctrl-C it closes the client, which wakes every wait inside it; on the
/// second it exits at once.
fn spawn_interrupt_watch(client: Client, phase: Arc<AtomicUsize>) {
    let spawned = std::thread::Builder::new()
        .name("lock-interrupts".into())
        .spawn(move || {
            let mut closed = false;
            loop {
                let n = INTERRUPTS.load(Ordering::Acquire);
                if n >= 2 {
                    eprintln!("lock: interrupted twice; exiting without waiting for the release");
                    signal_group(Signal::SIGKILL);
                    std::process::exit(EX_INTERRUPTED);
                }
                if n == 1 && !closed && phase.load(Ordering::Acquire) == PHASE_WAITING {
                    closed = true;
                    client.close();
                }
                std::thread::sleep(POLL);
            }
        });
    if let Err(e) = spawned {
        eprintln!("lock: warning: cannot watch for Ctrl-C while waiting: {e}");
    }
}

const PHASE_WAITING: usize = 0;
const PHASE_HOLDING: usize = 1;

fn connect(opts: &Opts, phase: &Arc<AtomicUsize>) -> Result<Client, Exit> {
    let connected = opts
        .conn
        .connect(|client| spawn_interrupt_watch(client.clone(), Arc::clone(phase)));
    if interrupted() {
        if let Ok(client) = &connected {
            client.close();
        }
        return Err(Exit::new(EX_INTERRUPTED, "interrupted"));
    }
    let client = connected?;
    if opts.verbose {
        eprintln!(
            "lock: connected to {} (session 0x{:x}, timeout {:?})",
            opts.conn.connect,
            client.session_id(),
            client.negotiated_session_timeout()
        );
    }
    Ok(client)
}

/// The exit code for a ZooKeeper error before the lock was taken.
fn zk_failure(e: &Error, doing: &str) -> Exit {
    let code = if interrupted() {
        EX_INTERRUPTED
    } else if e.is_retryable() || matches!(e, Error::Closed | Error::Io(_)) {
        EX_UNAVAILABLE
    } else if matches!(e, Error::InvalidPath { .. } | Error::InvalidArgument(_)) {
        EX_USAGE
    } else {
        EX_SOFTWARE
    };
    if code == EX_INTERRUPTED {
        Exit::new(code, "interrupted")
    } else {
        Exit::new(code, format!("{doing}: {e}"))
    }
}

// ---------------------------------------------------------------------------
// Holding the lock.

/// A lock this process holds (taken on the main thread, released there).
enum Held {
    /// A mutex, or one side of a read-write lock.
    Mutex(InterProcessMutex),
    /// A semaphore lease.
    Lease(Lease),
}

impl Held {
    fn node_path(&self) -> Option<String> {
        match self {
            Held::Mutex(m) => m.lock_node_path(),
            Held::Lease(l) => Some(l.path().to_owned()),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::Mutex(m) => m.is_lost(),
            Held::Lease(l) => l.is_lost(),
        }
    }

    /// Deletes the lock node (or gives the lease back).
    fn release(self) -> Result<(), Error> {
        match self {
            Held::Mutex(m) => m.release(),
            Held::Lease(l) => l.return_lease(),
        }
    }
}

/// Waits for the lock; `Ok(None)` when `--timeout` passed first.
fn acquire(client: &Client, opts: &Opts, data: &[u8]) -> Result<Option<Held>, Error> {
    let take = |m: InterProcessMutex| -> Result<Option<Held>, Error> {
        let got = match opts.timeout {
            Some(t) => m.acquire_timeout(t)?,
            None => m.acquire().map(|()| true)?,
        };
        Ok(got.then_some(Held::Mutex(m)))
    };
    match opts.kind {
        Kind::Mutex => take(InterProcessMutex::with_lock_data(client, &opts.path, data)?),
        Kind::Read | Kind::Write => {
            let rw = InterProcessReadWriteLock::with_lock_data(client, &opts.path, data)?;
            let side = if opts.kind == Kind::Read {
                rw.read_lock()
            } else {
                rw.write_lock()
            };
            take(side.clone())
        }
        Kind::Semaphore(n) => {
            let sem = InterProcessSemaphoreV2::with_lease_data(client, &opts.path, n, data)?;
            match opts.timeout {
                Some(t) => Ok(sem.acquire_timeout(t)?.map(Held::Lease)),
                None => sem.acquire().map(|l| Some(Held::Lease(l))),
            }
        }
    }
}

/// Who holds the lock, stored in its node for `lock --list` (Curator stores
/// the holder's IP address there by default): host, pid and the program's
/// name, or `--data` instead of the name. Never the command's arguments:
/// under the default open ACL anyone can read the node, and arguments may
/// hold secrets.
fn node_data(program: &OsString, data: Option<&str>) -> Vec<u8> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".into());
    let what = match data {
        Some(data) => data.to_owned(),
        None => std::path::Path::new(program)
            .file_name()
            .unwrap_or(program)
            .to_string_lossy()
            .into_owned(),
    };
    let mut text = format!("{host} pid {}: {what}", std::process::id());
    if text.len() > MAX_NODE_DATA {
        let mut end = MAX_NODE_DATA;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text.into_bytes()
}

/// Everything that tells that the lock is gone.
struct LossWatch {
    /// `Lost` states seen by the client's listener since the lock was taken.
    lost_events: Arc<AtomicU64>,
    baseline: u64,
    /// The session that owns the lock node; a new session id means the old
    /// session was given up.
    owner: i64,
    _listener: ListenerHandle,
}

impl LossWatch {
    fn lost(&self, client: &Client, held: &Held) -> bool {
        self.lost_events.load(Ordering::Acquire) > self.baseline
            || held.is_lost()
            || client.session_id() != self.owner
    }
}

/// Runs the command under the lock. Returns the exit code.
fn run(opts: &Opts) -> Result<i32, Exit> {
    // Why `ctrlc`: the lock must be released when the operator presses
    // Ctrl-C (or the process gets SIGTERM/SIGHUP), which the default signal
    // disposition would skip, leaving the lock node until the session
    // expires. Installing a signal handler by hand needs `unsafe` (which the
    // workspace forbids); `ctrlc` is the well-kept crate that does it. Its
    // handler here only counts the signal; the main loop does the rest.
    if let Err(e) = ctrlc::set_handler(|| {
        INTERRUPTS.fetch_add(1, Ordering::AcqRel);
    }) {
        eprintln!(
            "lock: warning: cannot handle Ctrl-C ({e}); an interrupt will not release the lock"
        );
    }
    let phase = Arc::new(AtomicUsize::new(PHASE_WAITING));
    let client = connect(opts, &phase)?;

    let lost_events = Arc::new(AtomicU64::new(0));
    let listener = {
        let lost_events = Arc::clone(&lost_events);
        client.add_listener(move |state| {
            if state == ConnectionState::Lost {
                lost_events.fetch_add(1, Ordering::AcqRel);
            }
        })
    };
    let progress = Progress::start(&client, opts.verbose);

    if opts.verbose {
        eprintln!("lock: waiting for {} ({})", opts.path, describe(opts.kind));
    }
    let started = Instant::now();
    let acquired = acquire(
        &client,
        opts,
        &node_data(&opts.command[0], opts.data.as_deref()),
    );
    let held = match acquired {
        Ok(Some(held)) => held,
        Ok(None) => {
            client.close();
            if interrupted() {
                return Err(Exit::new(EX_INTERRUPTED, "interrupted"));
            }
            let why = match opts.timeout {
                Some(t) if !t.is_zero() => format!("not taken within {}", human(t)),
                _ => "not taken: the lock is held".to_owned(),
            };
            return Err(Exit::new(EX_TEMPFAIL, format!("{}: {why}", opts.path)));
        }
        Err(e) => {
            client.close();
            return Err(zk_failure(&e, &format!("cannot take {}", opts.path)));
        }
    };
    phase.store(PHASE_HOLDING, Ordering::Release);
    let baseline = lost_events.load(Ordering::Acquire);

    // The node's stat: its owner session (to notice a replaced session) and
    // its czxid (the fencing token).
    let node = held.node_path().unwrap_or_default();
    let stat = match client.exists(&node) {
        Ok(stat) => stat,
        Err(e) => {
            close_and_release(&client, held, false, &progress, None);
            return Err(zk_failure(&e, &format!("cannot read the lock node {node}")));
        }
    };
    let Some(stat) = stat else {
        close_and_release(&client, held, true, &progress, None);
        return Err(Exit::new(
            EX_LOST,
            format!("the lock node {node} vanished right after the lock was taken"),
        ));
    };
    let watch = LossWatch {
        lost_events,
        baseline,
        owner: stat.ephemeral_owner,
        _listener: listener,
    };
    if opts.verbose {
        eprintln!(
            "lock: holding {} after {:.1?} (node {node}, fencing token {})",
            opts.path,
            started.elapsed(),
            stat.czxid
        );
    }
    if interrupted() {
        close_and_release(&client, held, false, &progress, None);
        return Err(Exit::new(EX_INTERRUPTED, "interrupted"));
    }

    // Started before the command, so that the command never runs without it.
    let mut watchdog = match Watchdog::start() {
        Ok(watchdog) => watchdog,
        Err(e) => {
            close_and_release(&client, held, false, &progress, None);
            return Err(Exit::new(
                EX_SOFTWARE,
                format!("cannot start the watchdog that stops the command if lock dies: {e}"),
            ));
        }
    };
    let mut command = Command::new(&opts.command[0]);
    command
        .args(&opts.command[1..])
        // Its own process group, so that stopping the command stops
        // everything it started too (a shell's background jobs, a
        // pipeline), not only its first process.
        .process_group(0)
        .env("LATCHKEY_LOCK_PATH", &opts.path)
        .env("LATCHKEY_LOCK_NODE", &node)
        .env("LATCHKEY_FENCING_TOKEN", stat.czxid.to_string())
        // The ZooKeeper password is lock's, not the command's.
        .env_remove(crate::conn::SASL_PASSWORD_ENV);
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            watchdog.disarm();
            close_and_release(&client, held, false, &progress, None);
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                EX_NOT_FOUND
            } else {
                EX_CANNOT_RUN
            };
            return Err(Exit::new(
                code,
                format!("cannot run {}: {e}", opts.command[0].to_string_lossy()),
            ));
        }
    };

    CHILD_GROUP.store(child.id(), Ordering::Release);
    watchdog.arm(child.id());
    let terminal = Terminal::hand_to(child.id());
    let outcome = supervise(
        child,
        opts,
        &client,
        &held,
        &watch,
        &progress,
        terminal.as_ref(),
    );
    // The command's group is gone (or killed) by now.
    watchdog.disarm();
    CHILD_GROUP.store(0, Ordering::Release);
    drop(terminal);
    let lost = matches!(outcome, Outcome::Lost | Outcome::LostThenExited(_));
    close_and_release(&client, held, lost, &progress, Some(&watch));
    Ok(match outcome {
        Outcome::Exited(status) | Outcome::LostThenExited(status) => exit_code(status),
        Outcome::Lost => EX_LOST,
        Outcome::Interrupted => {
            eprintln!("lock: interrupted; the command was stopped and the lock released");
            EX_INTERRUPTED
        }
        Outcome::WaitFailed(e) => {
            eprintln!("lock: lost track of the command: {e}");
            EX_SOFTWARE
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::FOREVER;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    fn parse(a: &[&str]) -> Result<Parsed, Exit> {
        parse_args(args(a), &Env::default())
    }

    #[test]
    fn parses_a_plain_run() {
        let Ok(Parsed::Run(o)) = parse(&["/locks/a", "--", "echo", "--help"]) else {
            panic!("should parse");
        };
        assert_eq!(o.path, "/locks/a");
        assert_eq!(o.command, args(&["echo", "--help"]));
        assert_eq!(o.kind, Kind::Mutex);
        assert_eq!(o.on_lost, OnLost::Kill);
        assert_eq!(o.conn.connect, "127.0.0.1:2181");
        assert!(o.timeout.is_none());
    }

    #[test]
    fn parses_options() {
        let Ok(Parsed::Run(o)) = parse_args(
            args(&[
                "--timeout=0.5",
                "--session-timeout",
                "4",
                "--semaphore",
                "3",
                "--on-lost",
                "warn",
                "/s",
                "true",
            ]),
            &Env {
                connect: Some("10.0.0.1:2181".into()),
                sasl_password: None,
            },
        ) else {
            panic!("should parse");
        };
        assert_eq!(o.timeout, Some(Duration::from_millis(500)));
        assert_eq!(o.conn.session_timeout, Duration::from_secs(4));
        assert_eq!(o.kind, Kind::Semaphore(3));
        assert_eq!(o.on_lost, OnLost::Warn);
        assert_eq!(o.conn.connect, "10.0.0.1:2181");
        assert_eq!(o.command, args(&["true"]));
    }

    #[test]
    fn rejects_bad_usage() {
        for bad in [
            &[][..],
            &["/a"],
            &["/a", "--"],
            &["--", "/a", "true"],
            &["--read", "--write", "/a", "true"],
            &["--semaphore", "0", "/a", "true"],
            &["--semaphore", "x", "/a", "true"],
            &["--timeout", "-1", "/a", "true"],
            &["--timeout", "soon", "/a", "true"],
            &["--timeout"],
            &["--session-timeout", "0", "/a", "true"],
            &["--on-lost", "maybe", "/a", "true"],
            &["--bogus", "/a", "true"],
            &["--list=yes", "/a"],
            &["no-slash", "true"],
            &["/a/", "true"],
            &["/", "true"],
            &["--list", "/a", "true"],
            &["--list", "--read", "/a"],
            &["--list", "--data", "x", "/a"],
            &["--data"],
            &["--connect", "host:notaport", "/a", "true"],
        ] {
            match parse(bad) {
                Err(e) => assert_eq!(e.code, EX_USAGE, "{bad:?}"),
                Ok(p) => panic!("{bad:?} parsed as {p:?}"),
            }
        }
    }

    #[test]
    fn leases_is_semaphore() {
        let Ok(Parsed::Run(o)) = parse(&["--leases=2", "/s", "true"]) else {
            panic!("should parse");
        };
        assert_eq!(o.kind, Kind::Semaphore(2));
        let Ok(Parsed::Run(o)) = parse(&["--list", "--leases", "4", "/s"]) else {
            panic!("should parse");
        };
        assert!(o.list);
        assert_eq!(o.kind, Kind::Semaphore(4));
        for bad in [
            &["--leases", "0", "/s", "true"][..],
            &["--leases", "3", "--read", "/s", "x"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn node_data_holds_no_arguments() {
        let text = |program: &str, data| {
            String::from_utf8(node_data(&OsString::from(program), data)).unwrap()
        };
        let pid = format!(" pid {}: ", std::process::id());
        assert!(text("/usr/bin/backup", None).ends_with(&format!("{pid}backup")));
        assert!(text("backup", Some("db-1 nightly")).ends_with(&format!("{pid}db-1 nightly")));
        assert!(text("x", Some(&"y".repeat(10_000))).len() <= MAX_NODE_DATA);
    }

    #[test]
    fn options_may_follow_the_path() {
        let Ok(Parsed::Run(o)) = parse(&["/a", "--timeout", "2", "-v", "--", "cmd", "-x"]) else {
            panic!("should parse");
        };
        assert_eq!(o.timeout, Some(Duration::from_secs(2)));
        assert!(o.verbose);
        assert_eq!(o.command, args(&["cmd", "-x"]));
        // The command's own options are the command's.
        let Ok(Parsed::Run(o)) = parse(&["/a", "cmd", "--timeout", "2"]) else {
            panic!("should parse");
        };
        assert!(o.timeout.is_none());
        assert_eq!(o.command, args(&["cmd", "--timeout", "2"]));
    }

    #[test]
    fn huge_durations_are_forever() {
        for huge in ["1e30", "inf", "31536000", "99999999999999999999999"] {
            let Ok(Parsed::Run(o)) =
                parse(&["--timeout", huge, "--session-timeout", huge, "/a", "x"])
            else {
                panic!("{huge} should parse");
            };
            assert_eq!(o.timeout, None, "{huge}");
            assert_eq!(o.conn.session_timeout, FOREVER, "{huge}");
        }
        assert!(parse(&["--timeout", "nan", "/a", "x"]).is_err());
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human(Duration::from_millis(250)), "250 ms");
        assert_eq!(human(Duration::from_millis(500)), "500 ms");
        assert_eq!(human(Duration::from_secs(1)), "1 s");
        assert_eq!(human(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(human(Duration::from_secs(150)), "2 min 30 s");
        assert_eq!(human(Duration::from_secs(3 * 3600 + 300)), "3 h 5 min");
    }

    #[test]
    fn help_and_version() {
        assert!(matches!(parse(&["--help"]), Ok(Parsed::Help)));
        assert!(matches!(parse(&["-h", "/a"]), Ok(Parsed::Help)));
        assert!(matches!(parse(&["--version"]), Ok(Parsed::Version)));
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
    }
}

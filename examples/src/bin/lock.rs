//! `lock`: run a command while holding a distributed lock on ZooKeeper, in
//! the spirit of `flock(1)` and `etcdctl lock`.
//!
//! ```text
//! lock [OPTIONS] PATH [OPTIONS] [--] CMD [ARGS...]
//! lock [OPTIONS] PATH [OPTIONS] -c CMD
//! lock --list [OPTIONS] PATH
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

use std::ffi::OsString;
use std::io::{IsTerminal, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use latchkey_framework::{
    paths, Client, ConnectionState, Error, ErrorCode, ExponentialBackoffRetry, ListenerHandle,
};
use latchkey_recipes::{
    InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2, Lease,
};
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::unistd::Pid;

/// Bad usage (sysexits' EX_USAGE).
const EX_USAGE: i32 = 64;
/// ZooKeeper unreachable (EX_UNAVAILABLE).
const EX_UNAVAILABLE: i32 = 69;
/// ZooKeeper refused an operation (EX_SOFTWARE).
const EX_SOFTWARE: i32 = 70;
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

const USAGE: &str = "\
Usage: lock [OPTIONS] PATH [OPTIONS] [--] CMD [ARGS...]
       lock [OPTIONS] PATH [OPTIONS] -c CMD
       lock --list [OPTIONS] PATH

Runs CMD while holding a ZooKeeper lock on PATH (Curator-compatible), and
releases it when CMD ends or on Ctrl-C. Options may come before or after
PATH; after PATH, '--' or the first word that is not an option starts CMD.

Options:
  --connect HOSTS           ZooKeeper hosts, host:port[,host:port...][/chroot]
                            (default: $LATCHKEY_CONNECT, else 127.0.0.1:2181)
  --timeout SECS            give up (exit 75) if the lock is not taken within
                            SECS; 0 tries once; a year or more, or inf, waits as
                            long as it takes (the default); also -w, --wait
  -n, --nonblock            don't wait: the same as --timeout 0
  -c, --command CMD         run CMD with sh -c, instead of CMD [ARGS...]
  --session-timeout SECS    ZooKeeper session timeout (default 15)
  --connection-timeout SECS how long to wait for ZooKeeper (default 15)
  -s, --read                take the read side of a read-write lock (shared)
  -x, --write               take the write side of a read-write lock
                            (exclusive; also -e, --exclusive, --shared for -s)
  --semaphore N             take one lease of a semaphore with N leases
                            (with --list: mark the first N leases as holders)
  --on-lost kill|warn       if the lock is lost while CMD runs: kill CMD and
                            exit 78 (kill, the default), or print a warning
                            and let CMD go on (warn)
  --data TEXT               what the lock node says after host and pid, for
                            --list (default: CMD's program name; its arguments
                            are never stored, as anyone may read the node)
  --list                    print who holds and who waits on PATH, then exit
  -v, --verbose             say what happens on stderr
  -h, --help                print this help
  -V, --version             print the version

As with flock, -n, -w SECS, -c CMD, -s and -x may be bundled (-xn, -w5).
Unlike flock, plain lock (no -s/-x) takes a mutex, which does not exclude
-s or -x holders of the same PATH: processes that share a PATH use -s and -x
alike (or all plain). Giving up under -n or -w exits 75, not flock's 1.

CMD gets LATCHKEY_LOCK_PATH, LATCHKEY_LOCK_NODE and LATCHKEY_FENCING_TOKEN
in its environment. CMD runs in a process group of its own, and lock signals
the whole group: on Ctrl-C (SIGINT, SIGTERM, SIGHUP) SIGTERM, up to 2 s to
exit, then SIGKILL; when CMD exits, the same for what it left running, before
the release; when the lock is lost, SIGKILL at once (--on-lost kill).
If lock itself dies without stopping CMD (SIGKILL, the OOM killer, a crash),
a watchdog process it starts (\"lock (watchdog)\" in ps) kills CMD's process
group at once, before the session can expire and another process can take the
lock. Not covered: a process that leaves CMD's group (setsid, a daemon), and a
watchdog that is killed itself (e.g. kill -9 of lock and the watchdog at once).

Exit codes:
  CMD's own    CMD ran; 128+N if it died of signal N
  64           bad usage
  69           ZooKeeper could not be reached (or failed before the lock was taken)
  70           ZooKeeper refused an operation (e.g. NoAuth)
  75           the lock was not taken within --timeout
  78           the lock was lost while CMD ran and CMD was killed (--on-lost kill)
  126, 127     CMD could not be started, or was not found
  130          interrupted (Ctrl-C; SIGTERM and SIGHUP alike)
";

/// Which lock to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Mutex,
    Read,
    Write,
    Semaphore(u32),
}

/// What to do when the lock is lost while the command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnLost {
    Kill,
    Warn,
}

/// The parsed command line.
#[derive(Debug)]
struct Opts {
    connect: String,
    timeout: Option<Duration>,
    session_timeout: Duration,
    connection_timeout: Duration,
    kind: Kind,
    on_lost: OnLost,
    list: bool,
    verbose: bool,
    /// `--data`: said in the lock node instead of the program name.
    data: Option<String>,
    path: String,
    command: Vec<OsString>,
}

/// What the command line asks for.
#[derive(Debug)]
enum Parsed {
    Run(Opts),
    Help,
    Version,
}

/// A reason to stop early, with its exit code.
#[derive(Debug)]
struct Exit {
    code: i32,
    message: String,
}

impl Exit {
    fn new(code: i32, message: impl Into<String>) -> Self {
        Exit {
            code,
            message: message.into(),
        }
    }

    fn usage(message: impl Into<String>) -> Self {
        Exit::new(EX_USAGE, message)
    }
}

/// Ctrl-C and friends. The signal handler only counts; everything else
/// happens on ordinary threads.
static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);

/// The running command's process group (its pid; 0 when none), so that a
/// second Ctrl-C can kill it before `lock` exits without waiting.
static CHILD_GROUP: AtomicU32 = AtomicU32::new(0);

fn interrupted() -> bool {
    INTERRUPTS.load(Ordering::Acquire) > 0
}

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == WATCHDOG_ARG) {
        std::process::exit(watchdog());
    }
    let env_connect = std::env::var("LATCHKEY_CONNECT").ok();
    let code = match parse_args(args, env_connect.as_deref()) {
        Ok(Parsed::Help) => {
            print!("{USAGE}");
            0
        }
        Ok(Parsed::Version) => {
            println!("lock (latchkey) {}", env!("CARGO_PKG_VERSION"));
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
                "lock: {}\nTry 'lock --help' for more information.",
                exit.message
            );
            exit.code
        }
    };
    std::process::exit(code);
}

// ---------------------------------------------------------------------------
// Argument parsing, by hand: a handful of options does not need a framework.

/// Parses the arguments after the program name. `env_connect` is the value
/// of `LATCHKEY_CONNECT`, if set.
fn parse_args(args: Vec<OsString>, env_connect: Option<&str>) -> Result<Parsed, Exit> {
    let mut connect: Option<String> = None;
    let mut timeout = None;
    let mut session_timeout = Duration::from_secs(15);
    let mut connection_timeout = Duration::from_secs(15);
    let mut kind: Option<Kind> = None;
    let mut on_lost: Option<OnLost> = None;
    let mut list = false;
    let mut verbose = false;
    let mut data: Option<String> = None;
    let mut path: Option<String> = None;
    let mut timeout_given = false;
    let mut nonblock = false;
    // `-c CMD`: run CMD with `sh -c`.
    let mut shell_command: Option<OsString> = None;

    let mut rest: Vec<OsString> = Vec::new();
    let mut queue: std::collections::VecDeque<OsString> = args.into();
    while let Some(raw) = queue.pop_front() {
        // After PATH, `--` or the first word that is not an option starts
        // the command; options may come before or after PATH.
        if path.is_some() && (raw == "--" || raw == "-" || !raw.to_string_lossy().starts_with('-'))
        {
            if raw != "--" {
                rest.push(raw);
            }
            rest.extend(queue.drain(..));
            break;
        }
        let Some(arg) = raw.to_str().map(str::to_owned) else {
            return Err(Exit::usage(format!(
                "argument {raw:?} is not valid UTF-8 (only the command may have such arguments)"
            )));
        };
        if !arg.starts_with('-') || arg == "-" {
            path = Some(arg);
            continue;
        }
        if arg == "--" {
            return Err(Exit::usage("missing PATH before '--'"));
        }
        // Bundled short options, as `flock` takes them: `-xn` is `-x -n`,
        // and `-w5` or `-nw5` give -w its value.
        if !arg.starts_with("--") && arg.chars().count() > 2 {
            let mut split: Vec<OsString> = Vec::new();
            for (i, c) in arg.char_indices().skip(1) {
                split.push(format!("-{c}").into());
                if SHORT_WITH_VALUE.contains(&c) {
                    let value = &arg[i + c.len_utf8()..];
                    if !value.is_empty() {
                        split.push(value.into());
                    }
                    break;
                }
            }
            for one in split.into_iter().rev() {
                queue.push_front(one);
            }
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String, Exit> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            match queue.pop_front() {
                Some(v) => v
                    .into_string()
                    .map_err(|v| Exit::usage(format!("{name} {what}: {v:?} is not valid UTF-8"))),
                None => Err(Exit::usage(format!("{name} needs a value ({what})"))),
            }
        };
        let mut set_kind = |k: Kind| -> Result<(), Exit> {
            match kind {
                Some(old) if old != k => Err(Exit::usage(
                    "choose one of --read (-s), --write (-x) and --semaphore N",
                )),
                _ => {
                    kind = Some(k);
                    Ok(())
                }
            }
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            "-v" | "--verbose" => verbose = true,
            "--list" => list = true,
            // flock's -s and -x: the two sides of a read-write lock, which
            // exclude each other (a mutex and a write lock do not).
            "--read" | "-s" | "--shared" => set_kind(Kind::Read)?,
            "--write" | "-x" | "-e" | "--exclusive" => set_kind(Kind::Write)?,
            "-n" | "--nonblock" | "--nb" => nonblock = true,
            "-c" | "--command" => {
                let v = match inline.clone() {
                    Some(v) => OsString::from(v),
                    None => queue
                        .pop_front()
                        .ok_or_else(|| Exit::usage(format!("{name} needs a value (CMD)")))?,
                };
                if shell_command.replace(v).is_some() {
                    return Err(Exit::usage("give -c CMD once"));
                }
            }
            "--connect" => {
                let v = value("HOSTS")?;
                if v.trim().is_empty() {
                    return Err(Exit::usage("--connect needs host:port[,host:port...]"));
                }
                connect = Some(v);
            }
            "--data" => data = Some(value("TEXT")?),
            "--timeout" | "-w" | "--wait" => {
                // A timeout of a year or more is no timeout.
                timeout = Some(seconds(&name, &value("SECS")?, true)?).filter(|t| *t < FOREVER);
                timeout_given = true;
            }
            "--session-timeout" => session_timeout = seconds(&name, &value("SECS")?, false)?,
            "--connection-timeout" => connection_timeout = seconds(&name, &value("SECS")?, false)?,
            "--semaphore" => {
                let v = value("N")?;
                let n = v.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    Exit::usage(format!(
                        "--semaphore needs a number of leases of at least 1, not {v:?}"
                    ))
                })?;
                set_kind(Kind::Semaphore(n))?;
            }
            "--on-lost" => {
                let v = value("kill|warn")?;
                on_lost = Some(match v.as_str() {
                    "kill" => OnLost::Kill,
                    "warn" => OnLost::Warn,
                    _ => return Err(Exit::usage(format!("--on-lost is kill or warn, not {v:?}"))),
                });
            }
            _ => return Err(Exit::usage(format!("unknown option {arg:?}"))),
        }
        if inline.is_some()
            && !matches!(
                name.as_str(),
                "--connect"
                    | "--data"
                    | "--timeout"
                    | "--wait"
                    | "--command"
                    | "--session-timeout"
                    | "--connection-timeout"
                    | "--semaphore"
                    | "--on-lost"
            )
        {
            return Err(Exit::usage(format!("{name} takes no value")));
        }
    }

    let Some(path) = path else {
        return Err(Exit::usage(
            "missing PATH (a ZooKeeper path such as /locks/backup)",
        ));
    };
    if let Err(e) = paths::validate_path(&path) {
        return Err(Exit::usage(format!(
            "PATH {path:?} is not a valid ZooKeeper path: {}",
            e.kind()
        )));
    }
    if path == "/" {
        return Err(Exit::usage(
            "PATH cannot be the root: a lock needs its own node",
        ));
    }
    if nonblock {
        if timeout_given {
            return Err(Exit::usage(
                "-n means --timeout 0; give -n or -w/--timeout, not both",
            ));
        }
        timeout = Some(Duration::ZERO);
        timeout_given = true;
    }
    if let Some(cmd) = shell_command {
        if !rest.is_empty() {
            return Err(Exit::usage(
                "-c CMD runs CMD with sh -c; give no other command",
            ));
        }
        if list {
            return Err(Exit::usage("--list takes only PATH, no command"));
        }
        rest = vec!["sh".into(), "-c".into(), cmd];
    }
    if list {
        if !rest.is_empty() {
            return Err(Exit::usage("--list takes only PATH, no command"));
        }
        if timeout_given || on_lost.is_some() || data.is_some() {
            return Err(Exit::usage(
                "--timeout, --on-lost and --data do not apply to --list",
            ));
        }
        if matches!(kind, Some(Kind::Read | Kind::Write)) {
            return Err(Exit::usage(
                "--list tells readers from writers by itself; drop --read/--write",
            ));
        }
    } else if rest.is_empty() {
        return Err(Exit::usage(
            "missing the command to run: lock PATH -- CMD [ARGS...]",
        ));
    }
    let connect = connect
        .or_else(|| {
            env_connect
                .map(str::to_owned)
                .filter(|s| !s.trim().is_empty())
        })
        .unwrap_or_else(|| "127.0.0.1:2181".to_owned());
    // Catch a malformed host list before any network work.
    if let Err(e) = Client::builder().connect_string(&connect).build() {
        return Err(Exit::usage(format!("--connect {connect:?}: {e}")));
    }
    Ok(Parsed::Run(Opts {
        connect,
        timeout,
        session_timeout,
        connection_timeout,
        kind: kind.unwrap_or(Kind::Mutex),
        on_lost: on_lost.unwrap_or(OnLost::Kill),
        list,
        verbose,
        data,
        path,
        command: rest,
    }))
}

/// The short options that take a value (`-w5`, `-c CMD`).
const SHORT_WITH_VALUE: [char; 2] = ['w', 'c'];

/// A year: as long as `lock` ever waits. Longer durations, `inf` among them,
/// are taken as this (for `--timeout`: no timeout at all).
const FOREVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses seconds (`3`, `0.5`, `1e9`); zero is allowed only where `zero_ok`.
/// Durations of a year or more come back as [`FOREVER`].
fn seconds(option: &str, v: &str, zero_ok: bool) -> Result<Duration, Exit> {
    let bad = || {
        Exit::usage(format!(
            "{option} needs seconds such as 5 or 0.5, not {v:?}"
        ))
    };
    let secs: f64 = v.trim().parse().map_err(|_| bad())?;
    if secs.is_nan() || secs < 0.0 || (!zero_ok && secs == 0.0) {
        return Err(bad());
    }
    if secs >= FOREVER.as_secs_f64() {
        return Ok(FOREVER);
    }
    Duration::try_from_secs_f64(secs).map_err(|_| bad())
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
    let client = Client::builder()
        .connect_string(&opts.connect)
        .session_timeout(opts.session_timeout)
        .connection_timeout(opts.connection_timeout)
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 3))
        .build()
        .map_err(|e| Exit::usage(format!("--connect {:?}: {e}", opts.connect)))?;
    spawn_interrupt_watch(client.clone(), Arc::clone(phase));
    client.start().map_err(|e| {
        Exit::new(
            EX_UNAVAILABLE,
            format!("cannot start a ZooKeeper client: {e}"),
        )
    })?;
    let connected = client
        .block_until_connected(opts.connection_timeout)
        .unwrap_or(false);
    if interrupted() {
        client.close();
        return Err(Exit::new(EX_INTERRUPTED, "interrupted"));
    }
    if !connected {
        client.close();
        return Err(Exit::new(
            EX_UNAVAILABLE,
            format!(
                "cannot reach ZooKeeper at {} within {:?}",
                opts.connect, opts.connection_timeout
            ),
        ));
    }
    if opts.verbose {
        eprintln!(
            "lock: connected to {} (session 0x{:x}, timeout {:?})",
            opts.connect,
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
        .env("LATCHKEY_FENCING_TOKEN", stat.czxid.to_string());
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

// ---------------------------------------------------------------------------
// The watchdog: the command must not outlive `lock`.

/// The first argument that makes `lock` the watchdog of another `lock`.
const WATCHDOG_ARG: &str = "--internal-watchdog";

/// A second `lock` process that kills the command's process group when
/// this `lock` dies without stopping it (SIGKILL, the OOM killer, a crash):
/// else the command would run on without the lock once the session expires,
/// beside the next holder. `flock` has no such gap because the command holds
/// the lock's file descriptor itself; a ZooKeeper lock belongs to `lock`'s
/// session.
///
/// `lock` holds the write end of a pipe that is the watchdog's stdin (the
/// end is close-on-exec, so the command does not inherit it). The watchdog
/// reads the command's process group, then waits: `done` (written by `lock`
/// once the group is stopped) disarms it; end of file without `done` means
/// that `lock` died, and the watchdog sends the group SIGKILL. It runs in a
/// process group of its own, so that signals to `lock`'s job (or to the
/// command's) do not reach it, and blocks the terminal's and the
/// termination signals. (PR_SET_PDEATHSIG would need `unsafe` in
/// `pre_exec`, which the workspace forbids, and kills one process, not the
/// group.)
struct Watchdog {
    child: Child,
    pipe: Option<std::process::ChildStdin>,
}

impl Watchdog {
    fn start() -> std::io::Result<Watchdog> {
        // /proc/self/exe runs this very binary even if its file was replaced
        // or deleted since `lock` started.
        let exe = if std::path::Path::new("/proc/self/exe").exists() {
            std::path::PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe()?
        };
        let mut child = Command::new(exe)
            .arg0("lock (watchdog)")
            .arg(WATCHDOG_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pipe = child.stdin.take();
        Ok(Watchdog { child, pipe })
    }

    /// Tells the watchdog the command's process group.
    fn arm(&mut self, group: u32) {
        let sent = self.pipe.as_mut().map(|p| {
            p.write_all(format!("{group}\n").as_bytes())
                .and_then(|()| p.flush())
        });
        if let Some(Err(e)) = sent {
            eprintln!(
                "lock: warning: the watchdog is gone ({e}); if lock is killed, the command runs on"
            );
        }
    }

    /// Once the command's group is stopped: the watchdog exits and is reaped.
    fn disarm(&mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = pipe.write_all(b"done\n");
        }
        let _ = self.child.wait();
    }
}

/// `lock --internal-watchdog`: see [`Watchdog`]. Returns the exit code.
fn watchdog() -> i32 {
    let mut blocked = SigSet::empty();
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
        Signal::SIGPIPE,
    ] {
        blocked.add(signal);
    }
    let _ = blocked.thread_block();
    let mut said = Vec::new();
    // Returns at end of file: `lock` closed the pipe, or died.
    let _ = std::io::stdin().lock().read_to_end(&mut said);
    let said = String::from_utf8_lossy(&said);
    let mut lines = said.lines();
    let group = lines
        .next()
        .and_then(|l| l.trim().parse::<i32>().ok())
        .filter(|g| *g > 1);
    if lines.any(|l| l == "done") {
        return 0;
    }
    if let Some(group) = group {
        if killpg(Pid::from_raw(group), Signal::SIGKILL).is_ok() {
            // Not eprintln!, which panics when stderr is gone (a closed pipe).
            let _ = writeln!(
                std::io::stderr(),
                "lock: lock ended while its command ran; killed the command's process group {group}"
            );
        }
    }
    0
}

/// How the command's run ended.
enum Outcome {
    /// It exited by itself with the lock held all along.
    Exited(ExitStatus),
    /// The lock was lost and the command killed (`--on-lost kill`).
    Lost,
    /// The lock was lost, the command went on and exited (`--on-lost warn`).
    LostThenExited(ExitStatus),
    /// Ctrl-C: the command was stopped.
    Interrupted,
    /// Waiting for the command failed.
    WaitFailed(std::io::Error),
}

/// Polls the command every [`POLL`] until it exits, Ctrl-C comes or the
/// lock is lost.
fn supervise(
    mut child: Child,
    opts: &Opts,
    client: &Client,
    held: &Held,
    watch: &LossWatch,
    progress: &Progress,
    terminal: Option<&Terminal>,
) -> Outcome {
    let mut warned = false;
    loop {
        if interrupted() {
            stop_gently(&mut child);
            return Outcome::Interrupted;
        }
        if !warned && watch.lost(client, held) {
            progress.flush();
            match opts.on_lost {
                OnLost::Kill => {
                    eprintln!(
                        "lock: lost the lock on {} (the ZooKeeper session was lost); killing the command",
                        opts.path
                    );
                    // No grace: another process may hold the lock already.
                    kill_group(&mut child);
                    return Outcome::Lost;
                }
                OnLost::Warn => {
                    eprintln!(
                        "lock: WARNING: lost the lock on {} (the ZooKeeper session was lost); \
                         the command keeps running WITHOUT the lock (--on-lost warn)",
                        opts.path
                    );
                    warned = true;
                }
            }
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                // What the command left running must not go on once the
                // lock is released.
                if group_alive() {
                    if opts.verbose {
                        eprintln!("lock: the command exited; stopping what it left running");
                    }
                    stop_rest_of_group();
                }
                return if warned {
                    Outcome::LostThenExited(status)
                } else {
                    Outcome::Exited(status)
                };
            }
            Ok(None) => {
                if let Some(terminal) = terminal {
                    terminal.follow_stop();
                }
            }
            Err(e) => {
                kill_group(&mut child);
                return Outcome::WaitFailed(e);
            }
        }
        std::thread::sleep(POLL);
    }
}

/// SIGTERM to the command's process group, up to [`GRACE`] for all of it
/// to exit, then SIGKILL to what is left.
fn stop_gently(child: &mut Child) {
    signal_group(Signal::SIGTERM);
    let deadline = Instant::now() + GRACE;
    let mut reaped = false;
    while Instant::now() < deadline {
        // Reap the command as soon as it exits: a zombie still counts as a
        // member of its group.
        reaped = reaped || matches!(child.try_wait(), Ok(Some(_)));
        if reaped && !group_alive() {
            return;
        }
        std::thread::sleep(POLL);
    }
    kill_group(child);
}

/// SIGTERM to what is left of the group once the command has exited, up to
/// [`GRACE`] for it to exit, then SIGKILL.
fn stop_rest_of_group() {
    signal_group(Signal::SIGTERM);
    let deadline = Instant::now() + GRACE;
    while group_alive() && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    if group_alive() {
        signal_group(Signal::SIGKILL);
    }
}

/// SIGKILL to the command's whole process group, then reaps the command.
fn kill_group(child: &mut Child) {
    signal_group(Signal::SIGKILL);
    let _ = child.kill();
    let _ = child.wait();
}

/// The running command's process group, if there is one.
fn child_group() -> Option<Pid> {
    let pid = CHILD_GROUP.load(Ordering::Acquire);
    i32::try_from(pid)
        .ok()
        .filter(|pid| *pid > 0)
        .map(Pid::from_raw)
}

/// Sends `signal` to every process of the running command's group. (`nix`
/// comes with `ctrlc` already; it sends a signal without `unsafe`.)
fn signal_group(signal: Signal) {
    if let Some(group) = child_group() {
        let _ = killpg(group, signal);
    }
}

/// Whether a process of the command's group still exists.
fn group_alive() -> bool {
    child_group().is_some_and(|group| killpg(group, None).is_ok())
}

/// The controlling terminal, lent to the command's process group while it
/// runs when `lock` runs in the foreground of one, so that the command can
/// read from it and gets the terminal's Ctrl-C and Ctrl-Z itself, as a job
/// of the shell would. Dropping it takes the terminal back.
struct Terminal {
    /// `lock`'s own process group.
    ours: Pid,
    /// The command's.
    theirs: Pid,
}

impl Terminal {
    fn hand_to(group: u32) -> Option<Terminal> {
        let stdin = std::io::stdin();
        let ours = nix::unistd::getpgrp();
        if !stdin.is_terminal() || nix::unistd::tcgetpgrp(&stdin).ok() != Some(ours) {
            return None;
        }
        let theirs = Pid::from_raw(i32::try_from(group).ok()?);
        nix::unistd::tcsetpgrp(&stdin, theirs).ok()?;
        // The command may have touched the terminal before it was its own
        // and been stopped for that (SIGTTIN): let it go on.
        let _ = killpg(theirs, Signal::SIGCONT);
        Some(Terminal { ours, theirs })
    }

    /// When the command was stopped from the terminal (Ctrl-Z), stops
    /// `lock`'s own job too, so that the shell sees the job stopped and
    /// gets its prompt back; once continued (`fg` or `bg`), lends the
    /// terminal again if `lock` is in the foreground, and continues the
    /// command.
    fn follow_stop(&self) {
        let leader = self.theirs.as_raw();
        if process_state(leader) != Some('T') {
            return;
        }
        self.take_back();
        // Returns once the job is continued.
        let _ = killpg(self.ours, Signal::SIGTSTP);
        let stdin = std::io::stdin();
        if nix::unistd::tcgetpgrp(&stdin).ok() == Some(self.ours) {
            let _ = nix::unistd::tcsetpgrp(&stdin, self.theirs);
        }
        let _ = killpg(self.theirs, Signal::SIGCONT);
    }

    fn take_back(&self) {
        // A background group that sets the foreground group gets SIGTTOU,
        // which would stop `lock`, unless it blocks that signal.
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let _ = ttou.thread_block();
        let _ = nix::unistd::tcsetpgrp(std::io::stdin(), self.ours);
        let _ = ttou.thread_unblock();
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.take_back();
    }
}

/// The state letter of a process (`T` when stopped), from /proc.
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name, which is in parentheses.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Under `-v`, prints every connection state the client goes through, in
/// order and each once, from the client's state history: a background
/// thread keeps up while `lock` waits or the command runs, and
/// [`Progress::flush`] catches up before a final message, so that a state
/// the client reached before the release is always told before it.
#[derive(Clone)]
struct Progress {
    client: Client,
    verbose: bool,
    /// When the last printed state was recorded (on the client's clock).
    printed: Arc<std::sync::Mutex<Option<Duration>>>,
}

impl Progress {
    /// Starts after the states the client has been in so far (`connect`
    /// already said it connected).
    fn start(client: &Client, verbose: bool) -> Progress {
        let last = client.state_history().last().map(|(at, _)| *at);
        let progress = Progress {
            client: client.clone(),
            verbose,
            printed: Arc::new(std::sync::Mutex::new(last)),
        };
        if verbose {
            let background = progress.clone();
            let spawned = std::thread::Builder::new()
                .name("lock-progress".into())
                .spawn(move || loop {
                    background.flush();
                    std::thread::sleep(POLL);
                });
            if let Err(e) = spawned {
                eprintln!("lock: warning: cannot follow the connection state: {e}");
            }
        }
        progress
    }

    /// Prints the states not printed yet.
    fn flush(&self) {
        if !self.verbose {
            return;
        }
        let mut printed = self.printed.lock().unwrap_or_else(|e| e.into_inner());
        for (at, state) in self.client.state_history() {
            if printed.is_none_or(|p| at > p) {
                eprintln!("lock: connection state {state:?}");
                *printed = Some(at);
            }
        }
    }
}

fn is_connected(client: &Client) -> bool {
    client.state().is_some_and(ConnectionState::is_connected)
}

/// Releases the lock and closes the client.
///
/// When the command is done while ZooKeeper is out of reach but the session
/// may still live, this waits for the connection to come back, at most
/// until the session would be lost, so that the lock is released and not
/// left to the session's expiry. When the lock was lost, or ZooKeeper stays
/// out of reach, the client is closed first (the release then does not wait
/// out the retry policy) and the message says where the node stands.
fn close_and_release(
    client: &Client,
    held: Held,
    lost: bool,
    progress: &Progress,
    watch: Option<&LossWatch>,
) {
    let lost_now =
        |held: &Held| lost || held.is_lost() || watch.is_some_and(|w| w.lost(client, held));
    if !lost_now(&held) && !is_connected(client) && !interrupted() {
        let session = client.negotiated_session_timeout();
        if progress.verbose {
            eprintln!(
                "lock: ZooKeeper is out of reach; waiting up to {} for it, to release the lock",
                human(session)
            );
        }
        let deadline = Instant::now() + session + POLL;
        while !is_connected(client)
            && !lost_now(&held)
            && !interrupted()
            && Instant::now() < deadline
        {
            std::thread::sleep(POLL);
        }
    }
    progress.flush();
    let node = held.node_path().unwrap_or_default();
    let lost = lost_now(&held);
    if lost || !is_connected(client) {
        let fate = node_fate(client, &node);
        client.close();
        drop(held.release());
        if !lost {
            eprintln!("lock: warning: cannot release the lock: {fate}");
        } else if progress.verbose {
            eprintln!("lock: {fate}");
        }
        return;
    }
    match held.release() {
        Ok(()) => {
            if progress.verbose {
                eprintln!("lock: released {node}");
            }
        }
        Err(e) => {
            eprintln!("lock: warning: releasing the lock: {e} (closing the session removes it)")
        }
    }
    client.close();
}

/// Where a lock node stands that `lock` cannot delete: with ZooKeeper in
/// reach (on a new session) it looks; otherwise the node stays until the
/// server expires the session that owns it.
fn node_fate(client: &Client, node: &str) -> String {
    // A server that restarts restores its sessions with a whole timeout
    // ahead of each, counted from when it is back; one that is down expires
    // nothing.
    let timeout = human(client.negotiated_session_timeout());
    let expiry = format!(
        "until ZooKeeper expires the session that owns it: {timeout} after ZooKeeper last heard \
         from it, or, if ZooKeeper restarts meanwhile, {timeout} after it is back"
    );
    if !is_connected(client) {
        return format!("ZooKeeper is out of reach; the lock node {node} stays {expiry}");
    }
    match client.exists(node) {
        Ok(None) => format!("the lock node {node} is gone with the session that owned it"),
        Ok(Some(_)) => format!("the lock node {node} stays {expiry}"),
        Err(e) => format!(
            "cannot tell whether the lock node {node} is gone ({e}); if not, it stays {expiry}"
        ),
    }
}

/// A duration as people write it: `250 ms`, `1.5 s`, `2 min 30 s`, `3 h 5 min`.
fn human(d: Duration) -> String {
    let secs = d.as_secs();
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if secs < 60 {
        // Tenths, without a trailing ".0".
        let tenths = d.as_millis().div_ceil(100);
        if tenths.is_multiple_of(10) {
            format!("{} s", tenths / 10)
        } else {
            format!("{}.{} s", tenths / 10, tenths % 10)
        }
    } else if secs < 3600 {
        format!("{} min {} s", secs / 60, secs % 60)
    } else {
        format!("{} h {} min", secs / 3600, secs % 3600 / 60)
    }
}

/// The exit code that stands for a command's status, as shells report it.
fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => EX_SOFTWARE,
    }
}

fn describe(kind: Kind) -> String {
    match kind {
        Kind::Mutex => "mutex".into(),
        Kind::Read => "read lock".into(),
        Kind::Write => "write lock".into(),
        Kind::Semaphore(n) => format!("one of {n} semaphore leases"),
    }
}

// ---------------------------------------------------------------------------
// --list

/// One node queued on the lock.
struct Entry {
    name: String,
    kind: &'static str,
    seq: Option<i64>,
}

/// The lock names Curator uses, longest match wins for the sequence.
const NAMES: [&str; 4] = ["__READ__", "__WRIT__", "lock-", "lease-"];

fn entry(name: String) -> Entry {
    let kind = if name.contains("__WRIT__") {
        "WRITE"
    } else if name.contains("__READ__") {
        "READ"
    } else if name.contains("lease-") {
        "LEASE"
    } else if name.contains("lock-") {
        "MUTEX"
    } else {
        "?"
    };
    let seq = NAMES
        .iter()
        .filter_map(|n| name.rfind(n).map(|i| i + n.len()))
        .max()
        .and_then(|start| name.get(start..))
        .and_then(|digits| digits.parse::<i64>().ok());
    Entry { name, kind, seq }
}

fn sorted(children: Vec<String>) -> Vec<Entry> {
    let mut entries: Vec<Entry> = children.into_iter().map(entry).collect();
    entries
        .sort_by(|a, b| (a.seq.is_none(), a.seq, &a.name).cmp(&(b.seq.is_none(), b.seq, &b.name)));
    entries
}

/// Children of `path`, or none if it does not exist.
fn children_of(client: &Client, path: &str) -> Result<Option<Vec<String>>, Error> {
    match client.get_children(path) {
        Ok(c) => Ok(Some(c)),
        Err(e) if e.is(ErrorCode::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}

fn join(parent: &str, child: &str) -> String {
    format!("{}/{child}", parent.trim_end_matches('/'))
}

/// Prints who holds and who waits on the lock at `opts.path`.
fn list(opts: &Opts) -> Result<i32, Exit> {
    let phase = Arc::new(AtomicUsize::new(PHASE_WAITING));
    let client = connect(opts, &phase)?;
    let result = print_list(&client, opts);
    client.close();
    result.map(|()| 0)
}

fn print_list(client: &Client, opts: &Opts) -> Result<(), Exit> {
    let fail = |e: Error| zk_failure(&e, &format!("cannot list {}", opts.path));
    let Some(children) = children_of(client, &opts.path).map_err(fail)? else {
        println!("{}: no such node; nobody holds or waits", opts.path);
        return Ok(());
    };
    let semaphore_layout = children.iter().any(|c| c == "leases" || c == "locks")
        && !children
            .iter()
            .any(|c| c.contains("__READ__") || c.contains("__WRIT__") || c.contains("lock-"));
    let mut rows: Vec<(String, &'static str, String)> = Vec::new(); // (role, kind, full path)
    let what;
    if semaphore_layout || matches!(opts.kind, Kind::Semaphore(_)) {
        what = "semaphore";
        let leases_path = join(&opts.path, "leases");
        let leases = sorted(
            children_of(client, &leases_path)
                .map_err(fail)?
                .unwrap_or_default(),
        );
        for (i, e) in leases.into_iter().enumerate() {
            let role = match opts.kind {
                Kind::Semaphore(max) if i < max as usize => "HOLDER",
                Kind::Semaphore(_) => "WAITER",
                _ => "LEASE",
            };
            rows.push((role.to_owned(), "LEASE", join(&leases_path, &e.name)));
        }
        // Waiters queue on the semaphore's internal mutex before they add a lease.
        let locks_path = join(&opts.path, "locks");
        let queued = sorted(
            children_of(client, &locks_path)
                .map_err(fail)?
                .unwrap_or_default(),
        );
        for e in queued {
            rows.push(("QUEUED".to_owned(), e.kind, join(&locks_path, &e.name)));
        }
    } else {
        let entries = sorted(children);
        let rw = entries
            .iter()
            .any(|e| e.kind == "READ" || e.kind == "WRITE");
        what = if rw { "read-write lock" } else { "mutex" };
        let first_writer = entries.iter().position(|e| e.kind == "WRITE");
        for (i, e) in entries.iter().enumerate() {
            let holds = if rw {
                // Readers before the first writer share the lock; a writer
                // holds it only at the head of the queue.
                match first_writer {
                    Some(0) => i == 0,
                    Some(w) => i < w && e.kind == "READ",
                    None => e.kind == "READ",
                }
            } else {
                i == 0
            };
            let role = if holds { "HOLDER" } else { "WAITER" };
            rows.push((role.to_owned(), e.kind, join(&opts.path, &e.name)));
        }
    }
    if rows.is_empty() {
        // An empty lock node does not tell what kind of lock it serves.
        match what {
            "semaphore" => println!("{} ({what}): nobody holds or waits", opts.path),
            _ => println!("{}: nobody holds or waits", opts.path),
        }
        return Ok(());
    }
    let holders = rows.iter().filter(|r| r.0 == "HOLDER").count();
    println!(
        "{} ({what}): {} node(s){}",
        opts.path,
        rows.len(),
        if what == "semaphore" && !matches!(opts.kind, Kind::Semaphore(_)) {
            "; give --semaphore N to tell holders from waiters".to_owned()
        } else {
            format!(", {holders} holding")
        }
    );
    println!(
        "{:<7} {:<6} {:<20} {:>8}  NODE / DATA",
        "ROLE", "KIND", "SESSION", "AGE"
    );
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    for (role, kind, path) in rows {
        // The node may go between the listing and this read: then skip it.
        let (data, stat) = match client.get_data(&path) {
            Ok(v) => v,
            Err(e) if e.is(ErrorCode::NoNode) => continue,
            Err(e) => return Err(fail(e)),
        };
        let age = Duration::from_millis(now_ms.saturating_sub(stat.ctime).max(0) as u64);
        let data = String::from_utf8_lossy(&data)
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect::<String>();
        println!(
            "{role:<7} {kind:<6} 0x{:<18x} {:>7.1}s  {path}{}",
            stat.ephemeral_owner,
            age.as_secs_f64(),
            if data.trim().is_empty() {
                String::new()
            } else {
                format!("  [{}]", data.trim())
            }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    fn parse(a: &[&str]) -> Result<Parsed, Exit> {
        parse_args(args(a), None)
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
        assert_eq!(o.connect, "127.0.0.1:2181");
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
            Some("10.0.0.1:2181"),
        ) else {
            panic!("should parse");
        };
        assert_eq!(o.timeout, Some(Duration::from_millis(500)));
        assert_eq!(o.session_timeout, Duration::from_secs(4));
        assert_eq!(o.kind, Kind::Semaphore(3));
        assert_eq!(o.on_lost, OnLost::Warn);
        assert_eq!(o.connect, "10.0.0.1:2181");
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
            assert_eq!(o.session_timeout, FOREVER, "{huge}");
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
    fn sorts_nodes_by_sequence() {
        let e = sorted(vec![
            "_c_b-__WRIT__0000000002".into(),
            "_c_a-__READ__0000000010".into(),
            "_c_c-__READ__0000000001".into(),
            "junk".into(),
        ]);
        let names: Vec<&str> = e.iter().map(|e| e.kind).collect();
        assert_eq!(names, ["READ", "WRITE", "READ", "?"]);
        assert_eq!(e[0].seq, Some(1));
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
    }
}

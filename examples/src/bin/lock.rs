//! `lock`: run a command while holding a distributed lock on ZooKeeper, in
//! the spirit of `flock(1)` and `etcdctl lock`.
//!
//! ```text
//! lock [OPTIONS] PATH -- CMD [ARGS...]
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
//! If the ZooKeeper session is lost while the command runs (the client was
//! cut off for the whole session timeout, or the server expired the
//! session), another process may already hold the lock: by default the
//! command is killed (SIGKILL) and `lock` exits 78; with `--on-lost warn` a
//! warning goes to stderr and the command keeps running.
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
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use latchkey_framework::{
    paths, Client, ConnectionState, Error, ErrorCode, ExponentialBackoffRetry, ListenerHandle,
};
use latchkey_recipes::{
    InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2, Lease,
};

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
Usage: lock [OPTIONS] PATH -- CMD [ARGS...]
       lock --list [OPTIONS] PATH

Runs CMD while holding a ZooKeeper lock on PATH (Curator-compatible), and
releases it when CMD ends or on Ctrl-C.

Options:
  --connect HOSTS           ZooKeeper hosts, host:port[,host:port...][/chroot]
                            (default: $LATCHKEY_CONNECT, else 127.0.0.1:2181)
  --timeout SECS            give up (exit 75) if the lock is not taken within
                            SECS; 0 tries once (default: wait as long as it takes)
  --session-timeout SECS    ZooKeeper session timeout (default 15)
  --connection-timeout SECS how long to wait for ZooKeeper (default 15)
  --read                    take the read side of a read-write lock
  --write                   take the write side of a read-write lock
  --semaphore N             take one lease of a semaphore with N leases
                            (with --list: mark the first N leases as holders)
  --on-lost kill|warn       if the lock is lost while CMD runs: kill CMD and
                            exit 78 (kill, the default), or print a warning
                            and let CMD go on (warn)
  --list                    print who holds and who waits on PATH, then exit
  -v, --verbose             say what happens on stderr
  -h, --help                print this help
  -V, --version             print the version

CMD gets LATCHKEY_LOCK_PATH, LATCHKEY_LOCK_NODE and LATCHKEY_FENCING_TOKEN
in its environment.

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

/// The running command's pid (0 when none), so that a second Ctrl-C can
/// kill it before `lock` exits without waiting.
static CHILD_PID: AtomicU32 = AtomicU32::new(0);

fn interrupted() -> bool {
    INTERRUPTS.load(Ordering::Acquire) > 0
}

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
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
    let mut path: Option<String> = None;
    let mut timeout_given = false;

    let mut it = args.into_iter();
    while let Some(raw) = it.next() {
        let Some(arg) = raw.to_str().map(str::to_owned) else {
            return Err(Exit::usage(format!(
                "argument {raw:?} is not valid UTF-8 (only the command may have such arguments)"
            )));
        };
        if !arg.starts_with('-') || arg == "-" {
            path = Some(arg);
            break;
        }
        if arg == "--" {
            return Err(Exit::usage("missing PATH before '--'"));
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String, Exit> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            match it.next() {
                Some(v) => v
                    .into_string()
                    .map_err(|v| Exit::usage(format!("{name} {what}: {v:?} is not valid UTF-8"))),
                None => Err(Exit::usage(format!("{name} needs a value ({what})"))),
            }
        };
        let mut set_kind = |k: Kind| -> Result<(), Exit> {
            match kind {
                Some(old) if old != k => Err(Exit::usage(
                    "choose one of --read, --write and --semaphore N",
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
            "--read" => set_kind(Kind::Read)?,
            "--write" => set_kind(Kind::Write)?,
            "--connect" => {
                let v = value("HOSTS")?;
                if v.trim().is_empty() {
                    return Err(Exit::usage("--connect needs host:port[,host:port...]"));
                }
                connect = Some(v);
            }
            "--timeout" => {
                timeout = Some(seconds(&name, &value("SECS")?, true)?);
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
                    | "--timeout"
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
            "PATH {path:?} is not a valid ZooKeeper path: {e}"
        )));
    }
    if path == "/" {
        return Err(Exit::usage(
            "PATH cannot be the root: a lock needs its own node",
        ));
    }
    let mut rest: Vec<OsString> = it.collect();
    if rest.first().is_some_and(|a| a == "--") {
        rest.remove(0);
    }
    if list {
        if !rest.is_empty() {
            return Err(Exit::usage("--list takes only PATH, no command"));
        }
        if timeout_given || on_lost.is_some() {
            return Err(Exit::usage(
                "--timeout and --on-lost do not apply to --list",
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
        path,
        command: rest,
    }))
}

/// Parses seconds (`3`, `0.5`); zero is allowed only where `zero_ok`.
fn seconds(option: &str, v: &str, zero_ok: bool) -> Result<Duration, Exit> {
    let bad = || {
        Exit::usage(format!(
            "{option} needs seconds such as 5 or 0.5, not {v:?}"
        ))
    };
    let secs: f64 = v.trim().parse().map_err(|_| bad())?;
    if !secs.is_finite() || secs < 0.0 || (!zero_ok && secs == 0.0) {
        return Err(bad());
    }
    let d = Duration::try_from_secs_f64(secs).map_err(|_| bad())?;
    // Beyond a year is "forever" for a lock tool, and keeps Instant math safe.
    Ok(d.min(Duration::from_secs(365 * 24 * 3600)))
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
                    signal_child(nix::sys::signal::Signal::SIGKILL);
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
/// the holder's IP address there by default).
fn node_data(command: &[OsString]) -> Vec<u8> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".into());
    let cmd: Vec<String> = command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut text = format!("{host} pid {}: {}", std::process::id(), cmd.join(" "));
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
        let verbose = opts.verbose;
        client.add_listener(move |state| {
            if state == ConnectionState::Lost {
                lost_events.fetch_add(1, Ordering::AcqRel);
            }
            if verbose {
                eprintln!("lock: connection state {state:?}");
            }
        })
    };

    if opts.verbose {
        eprintln!("lock: waiting for {} ({})", opts.path, describe(opts.kind));
    }
    let started = Instant::now();
    let acquired = acquire(&client, opts, &node_data(&opts.command));
    let held = match acquired {
        Ok(Some(held)) => held,
        Ok(None) => {
            client.close();
            if interrupted() {
                return Err(Exit::new(EX_INTERRUPTED, "interrupted"));
            }
            return Err(Exit::new(
                EX_TEMPFAIL,
                format!(
                    "{} is held by someone else; not taken within {:?}",
                    opts.path,
                    opts.timeout.unwrap_or_default()
                ),
            ));
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
            close_and_release(&client, held, false, opts.verbose);
            return Err(zk_failure(&e, &format!("cannot read the lock node {node}")));
        }
    };
    let Some(stat) = stat else {
        close_and_release(&client, held, true, opts.verbose);
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
        close_and_release(&client, held, false, opts.verbose);
        return Err(Exit::new(EX_INTERRUPTED, "interrupted"));
    }

    let mut command = Command::new(&opts.command[0]);
    command
        .args(&opts.command[1..])
        .env("LATCHKEY_LOCK_PATH", &opts.path)
        .env("LATCHKEY_LOCK_NODE", &node)
        .env("LATCHKEY_FENCING_TOKEN", stat.czxid.to_string());
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            close_and_release(&client, held, false, opts.verbose);
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

    CHILD_PID.store(child.id(), Ordering::Release);
    let outcome = supervise(child, opts, &client, &held, &watch);
    CHILD_PID.store(0, Ordering::Release);
    let lost = matches!(outcome, Outcome::Lost | Outcome::LostThenExited(_));
    close_and_release(&client, held, lost, opts.verbose);
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
) -> Outcome {
    let mut warned = false;
    loop {
        if interrupted() {
            stop_gently(&mut child);
            return Outcome::Interrupted;
        }
        if !warned && watch.lost(client, held) {
            match opts.on_lost {
                OnLost::Kill => {
                    eprintln!(
                        "lock: lost the lock on {} (the ZooKeeper session was lost); killing the command",
                        opts.path
                    );
                    let _ = child.kill();
                    let _ = child.wait();
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
            Ok(Some(status)) if warned => return Outcome::LostThenExited(status),
            Ok(Some(status)) => return Outcome::Exited(status),
            Ok(None) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Outcome::WaitFailed(e);
            }
        }
        std::thread::sleep(POLL);
    }
}

/// SIGTERM, up to [`GRACE`] to exit, then SIGKILL. (A Ctrl-C typed at the
/// terminal has reached the command too, since it shares our process group.)
fn stop_gently(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    signal_child(nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends `signal` to the running command, if there is one. (`nix` comes
/// with `ctrlc` already; it sends a signal without `unsafe`.)
fn signal_child(signal: nix::sys::signal::Signal) {
    let pid = CHILD_PID.load(Ordering::Acquire);
    if let Ok(pid) = i32::try_from(pid) {
        if pid > 0 {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
    }
}

/// Releases the lock and closes the client. When the lock was lost, or the
/// client cannot reach ZooKeeper right now, the client is closed first: the
/// node then goes with its session, and the release does not wait out the
/// retry policy against an unreachable server.
fn close_and_release(client: &Client, held: Held, lost: bool, verbose: bool) {
    let connected = client.state().is_some_and(ConnectionState::is_connected);
    if lost || !connected {
        client.close();
        drop(held.release());
        if verbose {
            eprintln!("lock: closed the session; its lock node goes with it");
        }
        return;
    }
    let node = held.node_path();
    match held.release() {
        Ok(()) => {
            if verbose {
                eprintln!("lock: released {}", node.unwrap_or_default());
            }
        }
        Err(e) => {
            eprintln!("lock: warning: releasing the lock: {e} (closing the session removes it)")
        }
    }
    client.close();
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
            &["--connect", "host:notaport", "/a", "true"],
        ] {
            match parse(bad) {
                Err(e) => assert_eq!(e.code, EX_USAGE, "{bad:?}"),
                Ok(p) => panic!("{bad:?} parsed as {p:?}"),
            }
        }
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

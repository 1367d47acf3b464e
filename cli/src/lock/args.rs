//! `lock`'s command line, parsed by hand: a handful of options does not
//! need a framework.

use std::ffi::OsString;
use std::time::Duration;

use latchkey_framework::paths;

use crate::conn::{seconds, ConnArgs, ConnOpts, Env, FOREVER};
use crate::Exit;

/// The help, with `PROG` for the program's name.
pub(super) fn usage(prog: &str) -> String {
    USAGE.replace("PROG", prog)
}

pub(super) const USAGE: &str = concat!(
    "\
Usage: PROG [OPTIONS] PATH [OPTIONS] [--] CMD [ARGS...]
       PROG [OPTIONS] PATH [OPTIONS] -c CMD
       PROG --list [--semaphore N] PATH   (latchkey inspect PATH [--leases N])

Runs CMD while holding a ZooKeeper lock on PATH (Curator-compatible), and
releases it when CMD ends or on Ctrl-C. Options may come before or after
PATH; after PATH, '--' or the first word that is not an option starts CMD.

Options:
  --timeout SECS            give up (exit 75) if the lock is not taken within
                            SECS; 0 tries once; a year or more, or inf, waits as
                            long as it takes (the default); also -w, --wait
  -n, --nonblock            don't wait: the same as --timeout 0
  -c, --command CMD         run CMD with sh -c, instead of CMD [ARGS...]
  -s, --read                take the read side of a read-write lock (shared)
  -x, --write               take the write side of a read-write lock
                            (exclusive; also -e, --exclusive, --shared for -s)
  --semaphore N             take one lease of a semaphore with N leases
                            (InterProcessSemaphoreV2; also --leases N; with
                            --list: mark the first N leases as holders)
  --on-lost kill|warn       if the lock is lost while CMD runs: kill CMD and
                            exit 78 (kill, the default), or print a warning
                            and let CMD go on (warn)
  --data TEXT               what the lock node says after host and pid, for
                            inspect (default: CMD's program name; its arguments
                            are never stored, as anyone may read the node)
  --list                    print who holds and who waits on PATH, then exit:
                            the same as latchkey inspect PATH (--leases N
                            for --semaphore N)
  -v, --verbose             say what happens on stderr
  -h, --help                print this help
  -V, --version             print the version

",
    crate::conn::connection_help!(),
    "
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
  69           ZooKeeper could not be reached within --connection-timeout (or
               failed before the lock was taken)
  70           ZooKeeper refused an operation (e.g. NoAuth) or the SASL login
  75           the lock was not taken within --timeout
  78           the lock was lost while CMD ran and CMD was killed (--on-lost kill)
  126, 127     CMD could not be started, or was not found
  130          interrupted (Ctrl-C; SIGTERM and SIGHUP alike)
"
);

/// Which lock to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Mutex,
    Read,
    Write,
    Semaphore(u32),
}

/// What to do when the lock is lost while the command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OnLost {
    Kill,
    Warn,
}

/// The parsed command line.
#[derive(Debug)]
pub(super) struct Opts {
    /// Where ZooKeeper is and how to connect (shared with inspect and watch).
    pub(super) conn: ConnOpts,
    pub(super) timeout: Option<Duration>,
    pub(super) kind: Kind,
    pub(super) on_lost: OnLost,
    pub(super) list: bool,
    pub(super) verbose: bool,
    /// `--data`: said in the lock node instead of the program name.
    pub(super) data: Option<String>,
    pub(super) path: String,
    pub(super) command: Vec<OsString>,
}

/// What the command line asks for.
#[derive(Debug)]
pub(super) enum Parsed {
    Run(Box<Opts>),
    Help,
    Version,
}

/// Parses the arguments after the program name; the connection options
/// fall back on `env`.
pub(super) fn parse_args(args: Vec<OsString>, env: &Env) -> Result<Parsed, Exit> {
    let mut conn = ConnArgs::default();
    let mut timeout = None;
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
            n if ConnArgs::is_option(n) => {
                let v = value(ConnArgs::value_name(n))?;
                conn.take(n, v)?;
            }
            "--data" => data = Some(value("TEXT")?),
            "--timeout" | "-w" | "--wait" => {
                // A timeout of a year or more is no timeout.
                timeout = Some(seconds(&name, &value("SECS")?, true)?).filter(|t| *t < FOREVER);
                timeout_given = true;
            }
            "--semaphore" | "--leases" => {
                let v = value("N")?;
                let n = v.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    Exit::usage(format!(
                        "{name} needs a number of leases of at least 1, not {v:?}"
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
            && !ConnArgs::is_option(&name)
            && !matches!(
                name.as_str(),
                "--data"
                    | "--timeout"
                    | "--wait"
                    | "--command"
                    | "--semaphore"
                    | "--leases"
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
    // A malformed host list or certificate file fails before any network work.
    let conn = conn.finish(env)?;
    Ok(Parsed::Run(Box::new(Opts {
        conn,
        timeout,
        kind: kind.unwrap_or(Kind::Mutex),
        on_lost: on_lost.unwrap_or(OnLost::Kill),
        list,
        verbose,
        data,
        path,
        command: rest,
    })))
}

/// The short options that take a value (`-w5`, `-c CMD`).
const SHORT_WITH_VALUE: [char; 2] = ['w', 'c'];

//! The `latchkey` command: run a command under a ZooKeeper lock, and an
//! operator's view of recipe nodes.
//!
//! ```text
//! latchkey lock [OPTIONS] PATH [OPTIONS] [--] CMD [ARGS...]
//! latchkey inspect PATH [--json] [--leases N] [--limit N] [CONNECTION OPTIONS]
//! latchkey watch PATH [--count N] [CONNECTION OPTIONS]
//! ```
//!
//! The three commands take the same connection options, parsed in one
//! place (`conn`): `--connect`, `--connection-timeout`, `--session-timeout`,
//! TLS (`--tls-ca`, `--tls-cert`, `--tls-key`, `--tls-server-name`) and SASL
//! DIGEST-MD5 (`--sasl-user`, `--sasl-password-file` or
//! `$LATCHKEY_SASL_PASSWORD`).
//!
//! `lock` runs a command while holding a Curator-compatible lock, in the
//! manner of `flock(1)`. `inspect` reads the lock, lease and latch nodes
//! under PATH, whichever library made them (Curator and latchkey name them
//! alike; kazoo's `__lock__` and `__rlock__` nodes are read too), and prints
//! them in queue order with their owner session, age and data. Queues
//! (Curator's `queue-…` and `qn-…` item nodes, a lock-safe queue's lock
//! nodes, a sharder's shards) show their kind, depth and first items, and
//! a service discovery base path (or one service's path) its services and
//! their instances. It only reads (`get_children`, `get_data`, `exists`).
//! `watch` prints each change under PATH as it happens, one line per
//! change, from a `CuratorCache`: like any cache it tells the states it
//! reads, so a node created and deleted between two reads may show no line
//! at all.
//!
//! The crate builds two programs from this library: `latchkey`, and `lock`,
//! the same as `latchkey lock`. The library is their code, not an API:
//! [`latchkey`] and [`lock`] are their `main`s.

use std::ffi::OsString;

use latchkey_framework::Error;

use conn::{ConnArgs, ConnOpts, Env};

mod conn;
mod discovery_view;
mod format;
mod inspect;
mod lock;
mod queue_view;
mod watch;

/// Bad usage (sysexits' EX_USAGE).
const EX_USAGE: i32 = 64;
/// ZooKeeper unreachable (EX_UNAVAILABLE).
const EX_UNAVAILABLE: i32 = 69;
/// ZooKeeper refused an operation (EX_SOFTWARE).
const EX_SOFTWARE: i32 = 70;

/// The options of `inspect` alone (for its help and the overview).
macro_rules! inspect_help {
    () => {
        "  --json            (inspect) print one JSON object instead of a table
  --leases N        (inspect) PATH is a semaphore of N leases: the first N
                    leases are holders, the others waiters
  --limit N         (inspect) queue items shown, first in queue order
                    (default 10; the depth counts them all)
"
    };
}

/// The exit codes of `inspect` and `watch`.
macro_rules! exit_help {
    () => {
        "
Exit codes:
  0    done
  64   bad usage
  69   ZooKeeper could not be reached within --connection-timeout
  70   ZooKeeper refused an operation or the SASL login
"
    };
}

const USAGE: &str = concat!(
    "\
Usage: latchkey lock [OPTIONS] PATH [OPTIONS] [--] CMD [ARGS...]
       latchkey inspect PATH [OPTIONS]
       latchkey watch PATH [OPTIONS]

Commands:
  lock      run CMD while holding a ZooKeeper lock on PATH (Curator's
            InterProcessMutex, read-write lock or semaphore), as flock does
            with a file; 'latchkey lock --help' tells its options
  inspect   print the lock, lease and latch nodes under PATH in queue order
            (holders first), with owner session, age and data; a queue's
            kind, depth and first items; a service discovery path's
            services and instances; read-only ('latchkey inspect --help')
  watch     print each change under PATH as it happens, until Ctrl-C or
            N changes (--count N); nodes there at the start are shown
            as `exists`, then `initialized`; a change undone before the
            cache reads it may not show ('latchkey watch --help')

Options:
",
    inspect_help!(),
    "  --count N         (watch) exit after N changes
  -h, --help        print this help
  -V, --version     print the version

",
    conn::connection_help!(),
    exit_help!(),
);

const INSPECT_USAGE: &str = concat!(
    "\
Usage: latchkey inspect PATH [OPTIONS]

Prints the lock, lease and latch nodes under PATH in queue order (holders
first), with owner session, age and data; a queue's kind, depth and first
items; a service discovery path's services and instances. Only reads.

Options:
",
    inspect_help!(),
    "  -h, --help        print this help

",
    conn::connection_help!(),
    exit_help!(),
);

const WATCH_USAGE: &str = concat!(
    "\
Usage: latchkey watch PATH [OPTIONS]

Prints each change under PATH as it happens, one line per change, until
Ctrl-C or N changes. Nodes there at the start are shown as `exists`, then
`initialized`; a change undone before the cache reads it may not show.

Options:
  --count N         exit after N changes
  -h, --help        print this help

",
    conn::connection_help!(),
    exit_help!(),
);

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

/// The `latchkey` program: runs the command line `args` (without the
/// program name) and returns the exit code.
///
/// ```no_run
/// let args = std::env::args_os().skip(1).collect();
/// std::process::exit(latchkey_cli::latchkey(args));
/// ```
pub fn latchkey(args: Vec<OsString>) -> i32 {
    match args.first().and_then(|a| a.to_str()) {
        Some("lock") => return lock::main("latchkey lock", args[1..].to_vec()),
        // `lock` starts its watchdog as this very program.
        Some(lock::WATCHDOG_ARG) => return lock::main("latchkey lock", args),
        _ => {}
    }
    match run(&args) {
        Ok(code) => code,
        Err(Exit { code, message }) => {
            eprintln!("latchkey: {message}");
            if code == EX_USAGE {
                // The help of the command given, if any.
                let command = args
                    .iter()
                    .filter_map(|a| a.to_str())
                    .find(|a| !a.starts_with('-'))
                    .filter(|a| matches!(*a, "inspect" | "watch"));
                match command {
                    Some(c) => eprintln!("Try 'latchkey {c} --help'."),
                    None => eprintln!("Try 'latchkey --help'."),
                }
            }
            code
        }
    }
}

/// The `lock` program, the same as `latchkey lock`: runs the command line
/// `args` (without the program name) and returns the exit code.
///
/// ```no_run
/// let args = std::env::args_os().skip(1).collect();
/// std::process::exit(latchkey_cli::lock(args));
/// ```
pub fn lock(args: Vec<OsString>) -> i32 {
    lock::main("lock", args)
}

/// What the command line asks of `inspect` or `watch`.
#[derive(Debug, PartialEq, Eq)]
struct Opts {
    command: String,
    path: String,
    conn: ConnOpts,
    json: bool,
    count: Option<u64>,
    /// `--leases N`: the semaphore's number of leases.
    leases: Option<u32>,
    /// `--limit N`: how many queue items to show.
    limit: Option<u32>,
}

/// What the command line of `inspect` or `watch` asks for.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    Run(Box<Opts>),
    /// `--help`, after the command it asks about, if any.
    Help(Option<String>),
    Version,
}

/// Parses the command line (without the program name).
fn parse(args: &[String], env: &Env) -> Result<Parsed, Exit> {
    let mut command: Option<String> = None;
    let mut path = None;
    let mut conn = ConnArgs::default();
    let mut json = false;
    let mut count = None;
    let mut leases = None;
    let mut limit = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        // `--name=value` as well as `--name value`.
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = |what: &str| -> Result<String, Exit> {
            match inline.clone().or_else(|| it.next().cloned()) {
                Some(v) => Ok(v),
                None => Err(Exit::usage(format!("{name} needs a value ({what})"))),
            }
        };
        let takes_value =
            ConnArgs::is_option(name) || matches!(name, "--count" | "--leases" | "--limit");
        if inline.is_some() && !takes_value {
            return Err(Exit::usage(format!("{name} takes no value")));
        }
        match name {
            "-h" | "--help" => return Ok(Parsed::Help(command)),
            "-V" | "--version" => return Ok(Parsed::Version),
            "--json" => json = true,
            n if ConnArgs::is_option(n) => {
                let v = value(ConnArgs::value_name(n))?;
                conn.take(n, v)?;
            }
            "--count" => {
                let n = value("N")?;
                count = Some(
                    n.parse::<u64>()
                        .map_err(|_| Exit::usage(format!("--count {n:?}: not a number")))?,
                );
            }
            "--leases" => {
                let n = value("N")?;
                leases = Some(n.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    Exit::usage(format!(
                        "--leases needs a number of leases of at least 1, not {n:?}"
                    ))
                })?);
            }
            "--limit" => {
                let n = value("N")?;
                limit = Some(n.parse::<u32>().map_err(|_| {
                    Exit::usage(format!("--limit needs a number of items, not {n:?}"))
                })?);
            }
            a if a.starts_with('-') && a != "-" => {
                return Err(Exit::usage(format!("unknown option {a}")))
            }
            a if command.is_none() => command = Some(a.to_owned()),
            a if path.is_none() => path = Some(a.to_owned()),
            a => return Err(Exit::usage(format!("unexpected argument {a:?}"))),
        }
    }
    let command = command.ok_or_else(|| Exit::usage("no command given"))?;
    match command.as_str() {
        "inspect" | "watch" => {}
        // `lock` parses its own options, which follow it.
        "lock" => {
            return Err(Exit::usage(
                "give lock first, then its options: latchkey lock [OPTIONS] PATH -- CMD",
            ))
        }
        _ => return Err(Exit::usage(format!("unknown command {command:?}"))),
    }
    let path = path.ok_or_else(|| Exit::usage(format!("{command} needs PATH")))?;
    if !path.starts_with('/') {
        return Err(Exit::usage(format!("PATH {path:?} must start with '/'")));
    }
    if (json || leases.is_some() || limit.is_some()) && command != "inspect" {
        return Err(Exit::usage(
            "--json, --leases and --limit apply to inspect only",
        ));
    }
    if count.is_some() && command != "watch" {
        return Err(Exit::usage("--count applies to watch only"));
    }
    Ok(Parsed::Run(Box::new(Opts {
        command,
        path,
        conn: conn.finish(env)?,
        json,
        count,
        leases,
        limit,
    })))
}

fn run(args: &[OsString]) -> Result<i32, Exit> {
    let args = args
        .iter()
        .map(|a| {
            a.clone()
                .into_string()
                .map_err(|a| Exit::usage(format!("argument {a:?} is not valid UTF-8")))
        })
        .collect::<Result<Vec<String>, Exit>>()?;
    let opts = match parse(&args, &Env::from_process())? {
        Parsed::Run(opts) => opts,
        Parsed::Help(command) => {
            print!(
                "{}",
                match command.as_deref() {
                    Some("inspect") => INSPECT_USAGE,
                    Some("watch") => WATCH_USAGE,
                    _ => USAGE,
                }
            );
            return Ok(0);
        }
        Parsed::Version => {
            println!("latchkey {}", env!("CARGO_PKG_VERSION"));
            return Ok(0);
        }
    };
    let client = opts.conn.connect(|_| {})?;
    let result = match opts.command.as_str() {
        "inspect" => inspect::inspect(&client, &opts),
        _ => watch::watch(&client, &opts),
    };
    client.close();
    result.map(|()| 0)
}

fn zk_failure(e: &Error, what: &str) -> Exit {
    Exit::new(EX_SOFTWARE, format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn parse(a: &[&str]) -> Result<Parsed, Exit> {
        super::parse(&args(a), &Env::default())
    }

    fn run_opts(a: &[&str]) -> Opts {
        match parse(a) {
            Ok(Parsed::Run(o)) => *o,
            other => panic!("{a:?}: {other:?}"),
        }
    }

    #[test]
    fn parses_and_refuses() {
        let o = run_opts(&["inspect", "/a", "--json", "--connect", "h:1"]);
        assert!(o.json && o.path == "/a" && o.conn.connect == "h:1");
        let o = run_opts(&["inspect", "/s", "--leases", "3"]);
        assert_eq!(o.leases, Some(3));
        let o = run_opts(&["inspect", "/q", "--limit", "0"]);
        assert_eq!(o.limit, Some(0));
        let o = run_opts(&["watch", "/q", "--count=2", "--connect=h:2"]);
        assert_eq!((o.count, o.conn.connect.as_str()), (Some(2), "h:2"));
        for bad in [
            &["watch", "/a", "--json"][..],
            &["inspect", "a"],
            &["watch", "/a", "--leases", "2"],
            &["inspect", "/a", "--leases", "0"],
            &["inspect", "/a", "--leases", "-1"],
            &["inspect", "/a", "--leases", "4294967296"],
            &["inspect", "/a", "--leases"],
            &["inspect", "/a", "--limit"],
            &["inspect", "/a", "--limit", "-1"],
            &["inspect", "/a", "--limit", "x"],
            &["watch", "/a", "--limit", "2"],
            &["inspect", "/a", "--json=yes"],
            &["frobnicate", "/a"],
            &["--connect", "h:1", "lock", "/a"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn inspect_and_watch_take_the_connection_options() {
        for command in ["inspect", "watch"] {
            let o = run_opts(&[
                command,
                "/a",
                "--connection-timeout",
                "1s",
                "--session-timeout=4",
            ]);
            assert_eq!(o.conn.connection_timeout, Duration::from_secs(1));
            assert_eq!(o.conn.session_timeout, Duration::from_secs(4));
            let o = run_opts(&[command, "/a"]);
            assert_eq!(o.conn.connection_timeout, Duration::from_secs(15));
            for bad in [
                &[command, "/a", "--connection-timeout", "soon"][..],
                &[command, "/a", "--connection-timeout"],
                &[command, "/a", "--session-timeout", "0"],
                &[command, "/a", "--tls-cert", "c.pem"],
                &[command, "/a", "--sasl-user", "bob"],
            ] {
                let e = parse(bad).unwrap_err();
                assert_eq!(e.code, EX_USAGE, "{bad:?}");
                assert!(e.message.contains(bad[2]), "{bad:?}: {}", e.message);
            }
        }
    }

    #[test]
    fn help_is_per_command() {
        assert_eq!(parse(&["--help"]).unwrap(), Parsed::Help(None));
        assert_eq!(
            parse(&["inspect", "--help"]).unwrap(),
            Parsed::Help(Some("inspect".into()))
        );
        for usage in [USAGE, INSPECT_USAGE, WATCH_USAGE] {
            for option in [
                "--connect",
                "--connection-timeout",
                "--session-timeout",
                "--tls-ca",
                "--tls-cert",
                "--tls-key",
                "--tls-server-name",
                "--sasl-user",
                "--sasl-password-file",
            ] {
                assert!(usage.contains(option), "{option}: {usage}");
            }
        }
    }
}

//! The `latchkey` command: run a command under a ZooKeeper lock, and an
//! operator's view of recipe nodes.
//!
//! ```text
//! latchkey lock [OPTIONS] PATH [OPTIONS] [--] CMD [ARGS...]
//! latchkey inspect PATH [--connect HOSTS] [--json] [--leases N] [--limit N]
//! latchkey watch PATH [--connect HOSTS] [--count N]
//! ```
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
use std::time::Duration;

use latchkey_framework::{Client, Error, ExponentialBackoffRetry};

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

const USAGE: &str = "\
Usage: latchkey lock [OPTIONS] PATH [OPTIONS] [--] CMD [ARGS...]
       latchkey inspect PATH [--connect HOSTS] [--json] [--leases N] [--limit N]
       latchkey watch PATH [--connect HOSTS] [--count N]

Commands:
  lock      run CMD while holding a ZooKeeper lock on PATH (Curator's
            InterProcessMutex, read-write lock or semaphore), as flock does
            with a file; 'latchkey lock --help' tells its options
  inspect   print the lock, lease and latch nodes under PATH in queue order
            (holders first), with owner session, age and data; a queue's
            kind, depth and first items; a service discovery path's
            services and instances; read-only
  watch     print each change under PATH as it happens, until Ctrl-C or
            N changes (--count N); nodes there at the start are shown
            as `exists`, then `initialized`; a change undone before the
            cache reads it may not show

Options:
  --connect HOSTS   ZooKeeper hosts, host:port[,host:port...][/chroot]
                    (default: $LATCHKEY_CONNECT, else 127.0.0.1:2181)
  --json            (inspect) print one JSON object instead of a table
  --leases N        (inspect) PATH is a semaphore of N leases: the first N
                    leases are holders, the others waiters
  --limit N         (inspect) queue items shown, first in queue order
                    (default 10; the depth counts them all)
  --count N         (watch) exit after N changes
  -h, --help        print this help
  -V, --version     print the version
";

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
                eprintln!("Try 'latchkey --help'.");
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
    connect: String,
    json: bool,
    count: Option<u64>,
    /// `--leases N`: the semaphore's number of leases.
    leases: Option<u32>,
    /// `--limit N`: how many queue items to show.
    limit: Option<u32>,
}

/// Parses the command line; `None` for `--help` or `--version`.
fn parse(args: &[String]) -> Result<Option<Opts>, Exit> {
    let mut command = None;
    let mut path = None;
    let mut connect = None;
    let mut json = false;
    let mut count = None;
    let mut leases = None;
    let mut limit = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "-V" | "--version" => {
                println!("latchkey {}", env!("CARGO_PKG_VERSION"));
                return Ok(None);
            }
            "--json" => json = true,
            "--connect" => {
                connect = Some(
                    it.next()
                        .ok_or_else(|| Exit::usage("--connect needs HOSTS"))?,
                )
            }
            "--count" => {
                let n = it.next().ok_or_else(|| Exit::usage("--count needs N"))?;
                count = Some(
                    n.parse::<u64>()
                        .map_err(|_| Exit::usage(format!("--count {n:?}: not a number")))?,
                );
            }
            "--leases" => {
                let n = it.next().ok_or_else(|| Exit::usage("--leases needs N"))?;
                leases = Some(n.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    Exit::usage(format!(
                        "--leases needs a number of leases of at least 1, not {n:?}"
                    ))
                })?);
            }
            "--limit" => {
                let n = it.next().ok_or_else(|| Exit::usage("--limit needs N"))?;
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
    let connect = connect
        .cloned()
        .or_else(|| std::env::var("LATCHKEY_CONNECT").ok())
        .unwrap_or_else(|| "127.0.0.1:2181".into());
    Ok(Some(Opts {
        command,
        path,
        connect,
        json,
        count,
        leases,
        limit,
    }))
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
    let Some(opts) = parse(&args)? else {
        if !args.iter().any(|a| a == "-V" || a == "--version") {
            print!("{USAGE}");
        }
        return Ok(0);
    };
    let client = connect(&opts.connect)?;
    let result = match opts.command.as_str() {
        "inspect" => inspect::inspect(&client, &opts),
        _ => watch::watch(&client, &opts),
    };
    client.close();
    result.map(|()| 0)
}

fn connect(hosts: &str) -> Result<Client, Exit> {
    let timeout = Duration::from_secs(15);
    let client = Client::builder()
        .connect_string(hosts)
        .session_timeout(timeout)
        .connection_timeout(timeout)
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 3))
        .build()
        .map_err(|e| Exit::usage(format!("--connect {hosts:?}: {e}")))?;
    client
        .start()
        .map_err(|e| Exit::new(EX_UNAVAILABLE, format!("cannot start a client: {e}")))?;
    if !client.block_until_connected(timeout).unwrap_or(false) {
        client.close();
        return Err(Exit::new(
            EX_UNAVAILABLE,
            format!("cannot reach ZooKeeper at {hosts} within {timeout:?}"),
        ));
    }
    Ok(client)
}

fn zk_failure(e: &Error, what: &str) -> Exit {
    Exit::new(EX_SOFTWARE, format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_and_refuses() {
        let o = parse(&args(&["inspect", "/a", "--json", "--connect", "h:1"]))
            .ok()
            .flatten()
            .unwrap();
        assert!(o.json && o.path == "/a" && o.connect == "h:1");
        let o = parse(&args(&["inspect", "/s", "--leases", "3"]))
            .ok()
            .flatten()
            .unwrap();
        assert_eq!(o.leases, Some(3));
        let o = parse(&args(&["inspect", "/q", "--limit", "0"]))
            .ok()
            .flatten()
            .unwrap();
        assert_eq!(o.limit, Some(0));
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
            &["frobnicate", "/a"],
            &["--connect", "h:1", "lock", "/a"],
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?}");
        }
    }
}

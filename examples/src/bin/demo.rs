//! The quick-start demo: several processes take one distributed lock in turn.
//!
//! With no arguments it starts an embedded ZooKeeper (Debian's, through the
//! test harness) and four worker processes of itself. Each worker opens its
//! own session, takes `/demo/lock` three times and says when it holds it.
//! A shared file counts holders: it must never see two at once.
//!
//! `demo --port N` makes the embedded ZooKeeper listen on 127.0.0.1:N, so
//! that other programs (`latchkey watch /demo --connect 127.0.0.1:N`) can
//! follow along; `demo --connect HOST:PORT[,HOST:PORT...]` runs the workers
//! against an existing ensemble instead.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use latchkey_framework::{Client, ExponentialBackoffRetry};
use latchkey_recipes::InterProcessMutex;
use latchkey_test::{ServerConfig, TestingServer};

const WORKERS: usize = 4;
const ROUNDS: usize = 3;
const LOCK_PATH: &str = "/demo/lock";

const USAGE: &str = "\
Usage: demo [--port N | --connect HOST:PORT[,HOST:PORT...]]

The quick-start demo: four processes take one ZooKeeper lock (/demo/lock)
in turn, three times each, and a file they share checks that no two ever
hold it at once. Without --connect it starts an embedded ZooKeeper.

Options:
  --port N          the embedded ZooKeeper listens on 127.0.0.1:N (default:
                    a free port, printed when it serves)
  --connect HOSTS   run against this ensemble instead of an embedded ZooKeeper
  -h, --help        print this help
";

/// Where the demo finds ZooKeeper.
enum Target {
    /// An embedded server, on this port or a free one.
    Embedded(Option<u16>),
    /// An existing ensemble.
    Connect(String),
}

/// Bad usage: the message, then the usage's first line; exit 2.
fn usage_error(message: &str) -> ! {
    eprintln!(
        "demo: {message}\n{}",
        USAGE.lines().next().unwrap_or_default()
    );
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        if args.len() != 3 {
            usage_error("worker takes CONNECT and ID");
        }
        return finish(worker(&args[1], &args[2]));
    }
    let target = match parse(&args) {
        Ok(Some(target)) => target,
        Ok(None) => {
            print!("{USAGE}");
            return;
        }
        Err(e) => usage_error(&e),
    };
    finish(match target {
        Target::Embedded(port) => embedded(port),
        Target::Connect(connect) => run_workers(&connect),
    });
}

fn finish(result: Result<(), String>) {
    if let Err(e) = result {
        eprintln!("demo: {e}");
        std::process::exit(1);
    }
}

/// Reads the command line; `None` for `--help`.
fn parse(args: &[String]) -> Result<Option<Target>, String> {
    let mut port = None;
    let mut connect = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{name} needs {what}"))
        };
        match name {
            "-h" | "--help" => return Ok(None),
            "--port" => {
                let v = value("a port number")?;
                port = Some(match v.parse::<u16>() {
                    Ok(0) => {
                        return Err("--port 0: give a port from 1 to 65535 \
                                    (without --port the embedded ZooKeeper takes a free one)"
                            .into())
                    }
                    Ok(p) => p,
                    Err(_) => {
                        return Err(format!("--port needs a port from 1 to 65535, not {v:?}"))
                    }
                });
            }
            "--connect" => connect = Some(value("HOST:PORT[,HOST:PORT...]")?),
            other => return Err(format!("unknown argument {other:?}; try --help")),
        }
    }
    match (port, connect) {
        (Some(_), Some(_)) => Err(
            "--port sets the embedded ZooKeeper's port, --connect replaces it: give one of them"
                .into(),
        ),
        (_, Some(connect)) => Ok(Some(Target::Connect(connect))),
        (port, None) => Ok(Some(Target::Embedded(port))),
    }
}

fn embedded(port: Option<u16>) -> Result<(), String> {
    println!("starting an embedded ZooKeeper ...");
    let server = match port {
        None => TestingServer::start().map_err(|e| format!("cannot start ZooKeeper: {e}"))?,
        Some(port) => TestingServer::start_on_port(port, ServerConfig::default()).map_err(|e| {
            match e.kind() {
                std::io::ErrorKind::AddrInUse => format!(
                    "--port {port}: 127.0.0.1:{port} is already in use by another program; \
                     choose another port, or leave out --port for a free one"
                ),
                std::io::ErrorKind::PermissionDenied => format!(
                    "--port {port}: not allowed to listen on 127.0.0.1:{port} \
                     (ports below 1024 need privileges); choose a port above 1023"
                ),
                _ => format!("cannot start ZooKeeper on port {port}: {e}"),
            }
        })?,
    };
    println!("ZooKeeper is serving at {}", server.connect_string());
    let outcome = run_workers(&server.connect_string());
    if outcome.is_err() {
        eprintln!("server log tail:\n{}", server.log_tail(40));
    }
    outcome
}

fn run_workers(connect: &str) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let children: Vec<(usize, Child)> = (1..=WORKERS)
        .map(|id| {
            Command::new(&me)
                .args(["worker", connect, &id.to_string()])
                .spawn()
                .map(|c| (id, c))
                .map_err(|e| format!("cannot start worker {id}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let mut failed = Vec::new();
    for (id, mut child) in children {
        match child.wait() {
            Ok(status) if status.success() => {}
            Ok(status) => failed.push(format!("worker {id}: {status}")),
            Err(e) => failed.push(format!("worker {id}: {e}")),
        }
    }
    if !failed.is_empty() {
        return Err(failed.join("; "));
    }
    println!(
        "{WORKERS} processes took {LOCK_PATH} {} times in {:.1?}, never two at once",
        WORKERS * ROUNDS,
        started.elapsed()
    );
    Ok(())
}

fn worker(connect: &str, id: &str) -> Result<(), String> {
    let client = Client::builder()
        .connect_string(connect)
        .session_timeout(Duration::from_secs(10))
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 5))
        .build()
        .map_err(|e| e.to_string())?;
    client.start().map_err(|e| e.to_string())?;
    if !client
        .block_until_connected(Duration::from_secs(20))
        .map_err(|e| e.to_string())?
    {
        return Err(format!("worker {id} could not connect to {connect}"));
    }
    let mutex = InterProcessMutex::new(&client, LOCK_PATH).map_err(|e| e.to_string())?;
    let pid = std::process::id();
    // The independent witness: a holder count in a file next to the demo.
    let witness = std::env::temp_dir().join(format!(
        "latchkey-demo-{}.holders",
        connect.replace([':', ',', '/'], "_")
    ));
    for round in 1..=ROUNDS {
        let guard = mutex.lock().map_err(|e| e.to_string())?;
        let before = std::fs::read_to_string(&witness).unwrap_or_default();
        if before.trim() == "1" {
            return Err(format!("worker {id} entered while another held the lock"));
        }
        std::fs::write(&witness, "1").map_err(|e| e.to_string())?;
        println!(
            "worker {id} (pid {pid}) holds {LOCK_PATH} [round {round}, fencing token {}]",
            guard.fencing_token()
        );
        std::thread::sleep(Duration::from_millis(150));
        std::fs::write(&witness, "0").map_err(|e| e.to_string())?;
        drop(guard);
    }
    client.close();
    Ok(())
}

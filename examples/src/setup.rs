//! Where the example programs find ZooKeeper, and how they connect to it.
//!
//! The Curator-style examples (`locking`, `semaphore`, `read_write`,
//! `handoff`) share one command line, `[--connect HOST:PORT[,...]]`, and
//! one kind of client, so that each program's source is about its recipe
//! and not about getting a session.

use std::thread::JoinHandle;
use std::time::Duration;

use latchkey_framework::{Client, ClientBuilder, ExponentialBackoffRetry};
use latchkey_test::TestingServer;

/// How many lines of the embedded server's log a failed run shows.
const LOG_TAIL_LINES: usize = 30;

/// The ZooKeeper a program runs against.
///
/// It owns the embedded server, if one was started, so that the server
/// outlives the run and a failed run can still show the server's log.
pub struct Zk {
    /// The embedded server; `None` when `--connect` named an ensemble.
    pub server: Option<TestingServer>,
    /// The connect string for clients.
    pub connect: String,
}

/// Reads the command line: `--connect HOSTS` names an existing ensemble,
/// no arguments start an embedded server, `-h`/`--help` prints the usage and
/// exits 0.
///
/// An embedded server is the default so that every example runs with no
/// setup at all; `program` names the program in the usage line.
pub fn zookeeper(program: &str) -> Result<Zk, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    zookeeper_from(program, &args)
}

/// Like [`zookeeper()`], reading `args` (the command line without the
/// program name) instead, for a program that takes options of its own
/// besides `--connect`.
pub fn zookeeper_from(program: &str, args: &[&str]) -> Result<Zk, String> {
    match args {
        [] => {
            println!("starting an embedded ZooKeeper ...");
            let server =
                TestingServer::start().map_err(|e| format!("cannot start ZooKeeper: {e}"))?;
            println!("ZooKeeper is serving at {}", server.connect_string());
            Ok(Zk {
                connect: server.connect_string(),
                server: Some(server),
            })
        }
        ["--connect", hosts] => Ok(Zk {
            server: None,
            connect: (*hosts).to_owned(),
        }),
        ["-h" | "--help"] => {
            println!("{}", usage(program));
            std::process::exit(0);
        }
        _ => Err(usage(program)),
    }
}

fn usage(program: &str) -> String {
    format!("usage: {program} [--connect HOST:PORT[,HOST:PORT...]]")
}

/// The whole `main` of an example: finds ZooKeeper with [`zookeeper()`], then
/// runs `run` with its connect string.
///
/// On failure it prints the embedded server's log tail (a lock that was
/// never granted is often explained there), then `program: error`, and
/// exits 1. The server is dropped, and so stopped, before that exit, since
/// `std::process::exit` runs no destructors.
pub fn run_example(program: &str, run: impl FnOnce(&str) -> Result<(), String>) {
    let outcome = zookeeper(program).and_then(|zk| {
        let result = run(&zk.connect);
        if result.is_err() {
            if let Some(server) = &zk.server {
                eprintln!("server log tail:\n{}", server.log_tail(LOG_TAIL_LINES));
            }
        }
        result
    });
    if let Err(e) = outcome {
        eprintln!("{program}: {e}");
        std::process::exit(1);
    }
}

/// A started client with its own session, connected within 20 s.
///
/// Each participant in an example calls this for a session of its own, as
/// separate processes would have: its lock nodes then belong to it alone
/// and go only with its own session.
pub fn new_client(connect: &str) -> Result<Client, String> {
    start_client(
        Client::builder()
            .connect_string(connect)
            .session_timeout(Duration::from_secs(10))
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 3)),
        connect,
    )
}

/// Builds and starts the client `builder` describes, and waits (20 s at
/// most) until it is connected to `connect`.
pub fn start_client(builder: ClientBuilder, connect: &str) -> Result<Client, String> {
    let client = builder.build().map_err(|e| e.to_string())?;
    client.start().map_err(|e| e.to_string())?;
    match client.block_until_connected(Duration::from_secs(20)) {
        Ok(true) => Ok(client),
        Ok(false) => Err(format!("cannot reach ZooKeeper at {connect}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Waits for every thread and gathers their errors into one, so that one
/// failed worker does not hide another's. `who` names a thread in the
/// message for one that panicked ("a worker").
pub fn join_all(handles: Vec<JoinHandle<Result<(), String>>>, who: &str) -> Result<(), String> {
    let mut errors = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(_) => errors.push(format!("{who} panicked")),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

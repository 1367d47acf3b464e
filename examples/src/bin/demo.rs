//! The quick-start demo: several processes take one distributed lock in turn.
//!
//! With no arguments it starts an embedded ZooKeeper (Debian's, through the
//! test harness) and four worker processes of itself. Each worker opens its
//! own session, takes `/demo/lock` three times and says when it holds it.
//! A shared file counts holders: it must never see two at once.
//!
//! `demo --connect HOST:PORT[,HOST:PORT...]` runs the workers against an
//! existing ensemble instead.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use latchkey_framework::{Client, ExponentialBackoffRetry};
use latchkey_recipes::InterProcessMutex;

const WORKERS: usize = 4;
const ROUNDS: usize = 3;
const LOCK_PATH: &str = "/demo/lock";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("worker") => worker(&args[2], &args[3]),
        Some("--connect") => match args.get(2) {
            Some(connect) => run_workers(connect),
            None => Err("--connect needs HOST:PORT".into()),
        },
        Some(other) => Err(format!(
            "unknown argument {other:?}; try --connect HOST:PORT"
        )),
        None => embedded(),
    };
    if let Err(e) = result {
        eprintln!("demo: {e}");
        std::process::exit(1);
    }
}

fn embedded() -> Result<(), String> {
    println!("starting an embedded ZooKeeper ...");
    let server = latchkey_test::TestingServer::start().map_err(|e| e.to_string())?;
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

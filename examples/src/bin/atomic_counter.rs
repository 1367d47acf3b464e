//! `DistributedAtomicLong`: five clients, each with its own ZooKeeper
//! session, count to 100 together on one counter (20 increments each, by
//! optimistic compare-and-set, promoted to a lock when contention makes
//! the optimistic attempts give up). Exits 1 unless the counter ends at
//! exactly the number of increments that succeeded.
//!
//! ```text
//! cargo run -p latchkey-examples --bin atomic_counter                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin atomic_counter -- --connect HOST:PORT
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use latchkey_examples::setup::{join_all, new_client, run_example};
use latchkey_framework::RetryNTimes;
use latchkey_recipes::{DistributedAtomicLong, PromotedToLock};

/// How many clients count.
const CLIENTS: usize = 5;
/// How many increments each makes.
const INCREMENTS: usize = 20;
/// The counter's path.
const PATH: &str = "/examples/counter";

fn main() {
    run_example("atomic_counter", run);
}

fn run(connect: &str) -> Result<(), String> {
    let started = Instant::now();
    let client = new_client(connect)?;
    let counter = open(&client)?;
    counter.force_set(0).map_err(|e| e.to_string())?;
    let succeeded = Arc::new(AtomicU64::new(0));
    println!("{CLIENTS} clients increment {PATH} {INCREMENTS} times each");
    let handles: Vec<_> = (1..=CLIENTS)
        .map(|n| {
            let (connect, succeeded) = (connect.to_owned(), Arc::clone(&succeeded));
            thread::spawn(move || worker(n, &connect, &succeeded))
        })
        .collect();
    join_all(handles, "a client")?;
    let value = counter.get().map_err(|e| e.to_string())?.post_value;
    let ok = succeeded.load(Ordering::SeqCst);
    println!(
        "done in {:.1?}: counter {value}, {ok} increments succeeded",
        started.elapsed()
    );
    if value != ok as i64 {
        return Err(format!(
            "the counter is {value}, but {ok} increments succeeded"
        ));
    }
    Ok(())
}

fn open(client: &latchkey_framework::Client) -> Result<DistributedAtomicLong, String> {
    DistributedAtomicLong::new(client, PATH, RetryNTimes::new(3, Duration::from_millis(5)))
        .and_then(|c| {
            c.promoted_to_lock(
                PromotedToLock::new("/examples/counter-lock")
                    .timeout(Duration::from_secs(10))
                    .retry_policy(RetryNTimes::new(10, Duration::from_millis(5))),
            )
        })
        .map_err(|e| e.to_string())
}

fn worker(n: usize, connect: &str, succeeded: &AtomicU64) -> Result<(), String> {
    let client = new_client(connect)?;
    let counter = open(&client)?;
    for _ in 0..INCREMENTS {
        let v = counter
            .increment()
            .map_err(|e| format!("client #{n}: {e}"))?;
        if v.succeeded {
            succeeded.fetch_add(1, Ordering::SeqCst);
            if v.stats.promoted_tries > 0 {
                println!(
                    "client #{n}: {} -> {} (under the lock)",
                    v.pre_value, v.post_value
                );
            }
        } else {
            println!("client #{n}: gave up on an increment");
        }
    }
    client.close();
    Ok(())
}

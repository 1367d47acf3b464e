//! `InterProcessSemaphoreV2`: N workers, each with its own ZooKeeper
//! session, share M leases. Each worker takes a lease a few times, uses it
//! briefly and gives it back; the program prints how many leases are held
//! after every change and exits 1 if that count ever went above M.
//!
//! ```text
//! cargo run -p latchkey-examples --bin semaphore                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin semaphore -- --connect HOST:PORT
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use latchkey_examples::setup::{join_all, new_client, run_example};
use latchkey_recipes::InterProcessSemaphoreV2;

/// How many workers.
const WORKERS: usize = 5;
/// How many leases they share.
const LEASES: u32 = 2;
/// How many times each worker takes a lease.
const ROUNDS: usize = 3;
/// How long a worker keeps its lease.
const USE_FOR: Duration = Duration::from_millis(100);
/// How long a worker waits for a lease at most.
const LEASE_WAIT: Duration = Duration::from_secs(10);
/// The semaphore path.
const PATH: &str = "/examples/semaphore";

fn main() {
    run_example("semaphore", run);
}

/// Holders right now, and the most ever seen.
#[derive(Default)]
struct Count {
    holders: AtomicUsize,
    max: AtomicUsize,
    leases_taken: AtomicUsize,
}

fn run(connect: &str) -> Result<(), String> {
    let started = Instant::now();
    let count = Arc::new(Count::default());
    println!("{WORKERS} workers share {LEASES} leases of {PATH}, {ROUNDS} times each");
    let handles: Vec<_> = (1..=WORKERS)
        .map(|id| {
            let connect = connect.to_owned();
            let count = Arc::clone(&count);
            thread::spawn(move || worker(id, &connect, started, &count))
        })
        .collect();
    join_all(handles, "a worker")?;
    let max = count.max.load(Ordering::Relaxed);
    println!(
        "done in {:.1?}: {} leases taken, at most {max} held at once (the limit is {LEASES})",
        started.elapsed(),
        count.leases_taken.load(Ordering::Relaxed)
    );
    if max > LEASES as usize {
        return Err(format!(
            "{max} leases were held at once, more than {LEASES}"
        ));
    }
    Ok(())
}

fn worker(id: usize, connect: &str, started: Instant, count: &Count) -> Result<(), String> {
    let client = new_client(connect)?;
    let semaphore =
        InterProcessSemaphoreV2::new(&client, PATH, LEASES).map_err(|e| e.to_string())?;
    let at = || started.elapsed().as_secs_f64();
    for round in 1..=ROUNDS {
        let lease = semaphore
            .acquire_timeout(LEASE_WAIT)
            .map_err(|e| format!("worker {id}: {e}"))?
            .ok_or_else(|| format!("worker {id} got no lease within {LEASE_WAIT:?}"))?;
        let now = count.holders.fetch_add(1, Ordering::AcqRel) + 1;
        count.max.fetch_max(now, Ordering::AcqRel);
        count.leases_taken.fetch_add(1, Ordering::Relaxed);
        let flag = if now > LEASES as usize {
            "  <-- TOO MANY"
        } else {
            ""
        };
        println!(
            "[{:>5.2}s] worker {id} holds {} (round {round}); holders now {now}/{LEASES}{flag}",
            at(),
            lease.node_name()
        );
        thread::sleep(USE_FOR);
        let now = count.holders.fetch_sub(1, Ordering::AcqRel) - 1;
        println!(
            "[{:>5.2}s] worker {id} returns its lease; holders now {now}/{LEASES}",
            at()
        );
        semaphore
            .return_lease(lease)
            .map_err(|e| format!("worker {id} returning a lease: {e}"))?;
    }
    client.close();
    Ok(())
}

//! `DistributedDoubleBarrier` and `DistributedBarrier`: four workers, each
//! with its own ZooKeeper session, wait at a start gate (a barrier the
//! coordinator removes), then enter a double barrier together, work for
//! different lengths of time, and leave together. Exits 1 if a worker got
//! through the gate before it opened, entered before everyone arrived, or
//! left before everyone was done.
//!
//! ```text
//! cargo run -p latchkey-examples --bin double_barrier                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin double_barrier -- --connect HOST:PORT
//! ```

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use latchkey_examples::setup::{join_all, new_client, run_example};
use latchkey_recipes::{DistributedBarrier, DistributedDoubleBarrier};

/// How many workers.
const WORKERS: usize = 4;
/// How long any wait may take.
const WAIT: Duration = Duration::from_secs(30);
/// The start gate and the double barrier.
const GATE: &str = "/examples/barrier/gate";
const ROUND: &str = "/examples/barrier/round";

fn main() {
    run_example("double_barrier", run);
}

#[derive(Default)]
struct Board {
    gate_open: AtomicBool,
    arrived: AtomicUsize,
    done: AtomicUsize,
}

fn run(connect: &str) -> Result<(), String> {
    let started = Instant::now();
    let coordinator = new_client(connect)?;
    let gate = DistributedBarrier::new(&coordinator, GATE).map_err(|e| e.to_string())?;
    gate.set_barrier().map_err(|e| e.to_string())?;
    let board = Arc::new(Board::default());
    let handles: Vec<_> = (1..=WORKERS)
        .map(|n| {
            let (connect, board) = (connect.to_owned(), Arc::clone(&board));
            thread::spawn(move || worker(n, &connect, started, &board))
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    println!("{:6.2}s opening the gate", started.elapsed().as_secs_f64());
    board.gate_open.store(true, Ordering::SeqCst);
    gate.remove_barrier().map_err(|e| e.to_string())?;
    join_all(handles, "a worker")?;
    println!("done in {:.1?}", started.elapsed());
    Ok(())
}

fn worker(n: usize, connect: &str, started: Instant, board: &Board) -> Result<(), String> {
    let client = new_client(connect)?;
    let at = || started.elapsed().as_secs_f64();
    let err = |e: latchkey_framework::Error| format!("worker {n}: {e}");
    let gate = DistributedBarrier::new(&client, GATE).map_err(err)?;
    if !gate.wait_on_barrier(WAIT).map_err(err)? {
        return Err(format!("worker {n}: the gate did not open within {WAIT:?}"));
    }
    if !board.gate_open.load(Ordering::SeqCst) {
        return Err(format!("worker {n} passed the gate before it opened"));
    }
    // Arrive at different times.
    thread::sleep(Duration::from_millis(50 * n as u64));
    println!("{:6.2}s worker {n} arrives", at());
    board.arrived.fetch_add(1, Ordering::SeqCst);
    let round = DistributedDoubleBarrier::new(&client, ROUND, WORKERS).map_err(err)?;
    if !round.enter(WAIT).map_err(err)? {
        return Err(format!("worker {n}: not everyone arrived within {WAIT:?}"));
    }
    if board.arrived.load(Ordering::SeqCst) != WORKERS {
        return Err(format!("worker {n} entered before everyone arrived"));
    }
    println!("{:6.2}s worker {n} entered, working", at());
    thread::sleep(Duration::from_millis(100 * n as u64));
    board.done.fetch_add(1, Ordering::SeqCst);
    if !round.leave(WAIT).map_err(err)? {
        return Err(format!("worker {n}: not everyone left within {WAIT:?}"));
    }
    if board.done.load(Ordering::SeqCst) != WORKERS {
        return Err(format!("worker {n} left before everyone was done"));
    }
    println!("{:6.2}s worker {n} left", at());
    client.close();
    Ok(())
}

//! `LeaderLatch`: Curator's leader example with a latch instead of a
//! selector. Five clients, each with its own ZooKeeper session, join one
//! election; whoever leads works for a moment, then leaves the election
//! (closing its latch) and joins again at the back of the queue. Every
//! client leads once per round; the program exits 1 if two ever led at
//! once, or if a round found no new leader within the bound.
//!
//! ```text
//! cargo run -p latchkey-examples --bin leader_latch                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin leader_latch -- --connect HOST:PORT
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use latchkey_examples::setup::{join_all, new_client, run_example};
use latchkey_recipes::{CloseMode, LatchEvent, LeaderLatch};

/// How many clients take part.
const CLIENTS: usize = 5;
/// How many times each client leads.
const ROUNDS: usize = 2;
/// How long a leader works before it steps down.
const LEAD_FOR: Duration = Duration::from_millis(200);
/// How long a client waits to lead at most (everyone ahead of it leads first).
const LEAD_WAIT: Duration = Duration::from_secs(30);
/// The election's path.
const PATH: &str = "/examples/leader";

fn main() {
    run_example("leader_latch", run);
}

fn run(connect: &str) -> Result<(), String> {
    let started = Instant::now();
    let leading = Arc::new(AtomicUsize::new(0));
    println!("{CLIENTS} clients take turns leading {PATH}, {ROUNDS} times each");
    let handles: Vec<_> = (1..=CLIENTS)
        .map(|n| {
            let (connect, leading) = (connect.to_owned(), Arc::clone(&leading));
            thread::spawn(move || participant(n, &connect, started, &leading))
        })
        .collect();
    join_all(handles, "a client")?;
    println!("done in {:.1?}", started.elapsed());
    Ok(())
}

fn participant(
    n: usize,
    connect: &str,
    started: Instant,
    leading: &AtomicUsize,
) -> Result<(), String> {
    let client = new_client(connect)?;
    let id = format!("client #{n}");
    let at = || started.elapsed().as_secs_f64();
    for round in 1..=ROUNDS {
        // Steps down with a NotLeader event, which the listener prints.
        let latch = LeaderLatch::with_close_mode(&client, PATH, &id, CloseMode::NotifyLeader)
            .map_err(|e| e.to_string())?;
        let events = latch.listen();
        latch.start().map_err(|e| e.to_string())?;
        if !latch
            .await_leadership(LEAD_WAIT)
            .map_err(|e| e.to_string())?
        {
            return Err(format!(
                "{id} did not lead within {LEAD_WAIT:?} in round {round}"
            ));
        }
        if leading.fetch_add(1, Ordering::SeqCst) != 0 {
            return Err(format!("{id} leads while another client does"));
        }
        let others = latch.participants().map_err(|e| e.to_string())?.len() - 1;
        println!("{:6.2}s {id} is now the leader ({others} waiting)", at());
        thread::sleep(LEAD_FOR);
        let still = latch.has_leadership();
        leading.fetch_sub(1, Ordering::SeqCst);
        if !still {
            println!("{:6.2}s {id} lost leadership while working", at());
        }
        latch.close().map_err(|e| e.to_string())?;
        for event in events.try_iter() {
            if event == LatchEvent::NotLeader {
                println!("{:6.2}s {id} stepped down", at());
            }
        }
    }
    client.close();
    Ok(())
}

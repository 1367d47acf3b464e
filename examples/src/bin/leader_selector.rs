//! `LeaderSelector`: Curator's `LeaderSelectorExample`, ported. Five
//! clients, each with its own ZooKeeper session, run a selector with
//! auto-requeue on one path; the leader says so, leads for a moment,
//! counts its terms and relinquishes leadership, after which another takes
//! over. The program ends after every client has led twice, and exits 1 if
//! two ever led at once.
//!
//! ```text
//! cargo run -p latchkey-examples --bin leader_selector                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin leader_selector -- --connect HOST:PORT
//! ```

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use latchkey_examples::setup::{new_client, run_example};
use latchkey_framework::Client;
use latchkey_recipes::LeaderSelector;

/// How many clients take part.
const CLIENTS: usize = 5;
/// How many terms each client leads before the program ends.
const TERMS: usize = 2;
/// How long a leader leads.
const LEAD_FOR: Duration = Duration::from_millis(200);
/// How long the whole run may take.
const RUN_FOR_AT_MOST: Duration = Duration::from_secs(60);
/// The election's path.
const PATH: &str = "/examples/leader-selector";

fn main() {
    run_example("leader_selector", run);
}

/// What the leaders share in this process, to check the example itself.
#[derive(Default)]
struct Board {
    leading: AtomicUsize,
    overlap: AtomicBool,
    terms: Vec<AtomicUsize>,
}

fn run(connect: &str) -> Result<(), String> {
    let started = Instant::now();
    let board = Arc::new(Board {
        terms: (0..CLIENTS).map(|_| AtomicUsize::new(0)).collect(),
        ..Board::default()
    });
    println!("{CLIENTS} clients elect a leader on {PATH}; each leads {TERMS} times");
    let mut clients: Vec<Client> = Vec::new();
    let mut selectors = Vec::new();
    for n in 0..CLIENTS {
        let client = new_client(connect)?;
        let name = format!("Client #{n}");
        let (b, id) = (Arc::clone(&board), name.clone());
        let selector = LeaderSelector::new(&client, PATH, &id, move |leadership| {
            let before = b.terms[n].fetch_add(1, Ordering::SeqCst);
            if b.leading.fetch_add(1, Ordering::SeqCst) != 0 {
                b.overlap.store(true, Ordering::SeqCst);
            }
            let at = started.elapsed().as_secs_f64();
            println!("{at:6.2}s {name} is now the leader. Waiting {LEAD_FOR:?}...");
            println!("{at:6.2}s {name} has been leader {before} time(s) before.");
            let still = leadership.wait(LEAD_FOR);
            b.leading.fetch_sub(1, Ordering::SeqCst);
            let at = started.elapsed().as_secs_f64();
            match still {
                true => println!("{at:6.2}s {name} is relinquishing leadership."),
                false => println!("{at:6.2}s {name} was interrupted."),
            }
        })
        .map_err(|e| e.to_string())?;
        selector.auto_requeue();
        selector.start().map_err(|e| e.to_string())?;
        selectors.push(selector);
        clients.push(client);
    }
    while board.terms.iter().any(|t| t.load(Ordering::SeqCst) < TERMS) {
        if started.elapsed() > RUN_FOR_AT_MOST {
            return Err(format!(
                "not every client led {TERMS} times within {RUN_FOR_AT_MOST:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("Shutting down...");
    drop(selectors);
    for c in &clients {
        c.close();
    }
    if board.overlap.load(Ordering::SeqCst) {
        return Err("two clients led at once".into());
    }
    Ok(())
}

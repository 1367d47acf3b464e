//! A leader-style handoff of one lock between workers, each with its own
//! ZooKeeper session, with Curator's revocation to ask the holder to hand
//! over.
//!
//! Every worker would like to keep the lock (be the "leader") for a long
//! stretch, but holds it revocably (`make_revocable`). A worker that has
//! waited its patience out asks the current holder to let go with
//! `Revoker::attempt_revoke`, which writes `__REVOKE__` into the holder's
//! lock node; the holder's revocation listener fires, it finishes what it
//! was doing (at least a short minimum term) and releases, and the next worker in the queue takes over.
//! Each worker leads a bounded number of times, so the run ends by itself.
//!
//! ```text
//! cargo run -p latchkey-examples --bin handoff                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin handoff -- --connect HOST:PORT
//! ```

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use latchkey_examples::setup::{join_all, new_client, run_example};
use latchkey_framework::Client;
use latchkey_recipes::{InterProcessMutex, Revoker};

/// The workers.
const WORKERS: [&str; 3] = ["alpha", "beta", "gamma"];
/// How many times each worker leads.
const TERMS: usize = 2;
/// The lock path.
const PATH: &str = "/examples/handoff/leader";
/// How long a leader would like to lead when nobody asks it to hand over.
const TERM: Duration = Duration::from_millis(1500);
/// What a leader finishes before it honours a request to hand over.
const MIN_TERM: Duration = Duration::from_millis(200);
/// How long a waiting worker waits before it asks the leader to hand over.
const PATIENCE: Duration = Duration::from_millis(300);
/// How long a worker waits for the lock at most.
const LOCK_WAIT: Duration = Duration::from_secs(15);

fn main() {
    run_example("handoff", run);
}

/// Counts and checks: never two leaders at once.
#[derive(Default)]
struct Tally {
    leaders: AtomicUsize,
    revoked: AtomicUsize,
    natural: AtomicUsize,
    overlaps: AtomicUsize,
}

fn run(connect: &str) -> Result<(), String> {
    let started = Instant::now();
    let tally = Arc::new(Tally::default());
    println!(
        "{} workers lead {PATH} {TERMS} times each; a leader leads up to {TERM:?}, \
         a worker asks for a handover after waiting {PATIENCE:?}",
        WORKERS.len()
    );
    let handles: Vec<_> = WORKERS
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let connect = connect.to_owned();
            let tally = Arc::clone(&tally);
            thread::spawn(move || {
                // Stagger the start a little so the first queue is readable.
                thread::sleep(Duration::from_millis(50 * i as u64));
                worker(name, &connect, started, &tally)
            })
        })
        .collect();
    join_all(handles, "a worker")?;
    let overlaps = tally.overlaps.load(Ordering::Relaxed);
    println!(
        "done in {:.1?}: {} terms, {} ended by a revocation request, {} ran their full length; \
         {} times two leaders at once",
        started.elapsed(),
        WORKERS.len() * TERMS,
        tally.revoked.load(Ordering::Relaxed),
        tally.natural.load(Ordering::Relaxed),
        overlaps
    );
    if overlaps > 0 {
        return Err("two workers led at the same time".into());
    }
    Ok(())
}

fn say(started: Instant, who: &str, what: String) {
    println!(
        "[{:>5.2}s] {who:<5} {what}",
        started.elapsed().as_secs_f64()
    );
}

fn worker(
    name: &'static str,
    connect: &str,
    started: Instant,
    tally: &Tally,
) -> Result<(), String> {
    let client = new_client(connect)?;
    let mutex = InterProcessMutex::new(&client, PATH).map_err(|e| e.to_string())?;
    // Set by the revocation listener, which runs on a thread of its own.
    let asked = Arc::new(AtomicBool::new(false));

    for term in 1..=TERMS {
        asked.store(false, Ordering::Release);
        // Revocability ends with each release (as in Curator): renew it.
        let flag = Arc::clone(&asked);
        mutex.make_revocable(move || flag.store(true, Ordering::Release));
        say(started, name, "queues for the lock".into());
        // While we wait, someone else leads: ask it to hand over once our
        // patience runs out.
        let (cancel, cancelled) = mpsc::channel::<()>();
        let asker = {
            let client = client.clone();
            let mutex = mutex.clone();
            thread::spawn(move || ask_for_handover(name, &client, &mutex, started, cancelled))
        };
        let guard = mutex.try_lock_for(LOCK_WAIT);
        drop(cancel);
        let _ = asker.join();
        let guard = guard
            .map_err(|e| format!("{name}: {e}"))?
            .ok_or_else(|| format!("{name} did not get the lock within {LOCK_WAIT:?}"))?;

        if tally.leaders.fetch_add(1, Ordering::AcqRel) != 0 {
            tally.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        say(
            started,
            name,
            format!(
                "leads (term {term}, fencing token {})",
                guard.fencing_token()
            ),
        );
        let since = Instant::now();
        // Lead until the term is over, or until asked to hand over and the
        // work already started (at least MIN_TERM of it) is done.
        let mut asked_after = None;
        while since.elapsed() < TERM {
            if asked_after.is_none() && asked.load(Ordering::Acquire) {
                asked_after = Some(since.elapsed());
            }
            if asked_after.is_some() && since.elapsed() >= MIN_TERM {
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        tally.leaders.fetch_sub(1, Ordering::AcqRel);
        match asked_after {
            Some(after) => {
                tally.revoked.fetch_add(1, Ordering::Relaxed);
                say(
                    started,
                    name,
                    format!(
                        "was asked to hand over {:.2?} into its term; hands over after {:.2?}",
                        after,
                        since.elapsed()
                    ),
                );
            }
            None => {
                tally.natural.fetch_add(1, Ordering::Relaxed);
                say(
                    started,
                    name,
                    format!("ends its term after {:.2?}; releasing", since.elapsed()),
                );
            }
        }
        drop(guard);
        // Give the others a moment before queueing again.
        thread::sleep(Duration::from_millis(30));
    }
    client.close();
    Ok(())
}

/// Runs while `me` waits: after each [`PATIENCE`] without the lock, asks the
/// current holder (the head of the queue) to hand over. Stops when the
/// waiter is done waiting (the channel closes).
fn ask_for_handover(
    me: &str,
    client: &Client,
    mutex: &InterProcessMutex,
    started: Instant,
    cancelled: mpsc::Receiver<()>,
) {
    // Bounded: at most as many requests as fit in the longest wait.
    let max_requests = (LOCK_WAIT.as_millis() / PATIENCE.as_millis()) as usize;
    for _ in 0..max_requests {
        match cancelled.recv_timeout(PATIENCE) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let Ok(nodes) = mutex.participant_nodes() else {
            continue;
        };
        let Some(holder) = nodes.first() else {
            continue;
        };
        // Our own node may have just become the head: never revoke ourselves.
        match client.exists(holder) {
            Ok(Some(stat)) if stat.ephemeral_owner != client.session_id() => {}
            _ => continue,
        }
        let node = holder.rsplit('/').next().unwrap_or(holder);
        say(
            started,
            me,
            format!("has waited {PATIENCE:?}; asks the holder of {node} to hand over"),
        );
        if let Err(e) = Revoker::attempt_revoke(client, holder) {
            say(started, me, format!("could not ask: {e}"));
        }
    }
}

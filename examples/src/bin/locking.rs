//! Curator's `LockingExample`, ported: several clients, each with its own
//! ZooKeeper session, take turns with a resource that must never be used by
//! two at once, guarded by one `InterProcessMutex`.
//!
//! The resource (`FakeLimitedResource`) notices when it is used while in use
//! and reports it; the program then exits 1. Each client uses it a bounded
//! number of times, so the run ends by itself in a few seconds.
//!
//! ```text
//! cargo run -p latchkey-examples --bin locking                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin locking -- --connect HOST:PORT
//! ```

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use latchkey_examples::setup::{join_all, new_client, run_example};
use latchkey_recipes::InterProcessMutex;

/// How many clients (sessions) compete, as in Curator's example.
const QTY: usize = 5;
/// How many times each client uses the resource.
const REPETITIONS: usize = 10;
/// The lock path.
const PATH: &str = "/examples/locking/lock";
/// How long a client waits for the lock before giving up (Curator: 10 s).
const LOCK_WAIT: Duration = Duration::from_secs(10);

fn main() {
    run_example("locking", run);
}

/// A resource that must be used by one client at a time, and says so when
/// it is not (Curator's `FakeLimitedResource`).
#[derive(Default)]
struct FakeLimitedResource {
    in_use: AtomicBool,
    uses: AtomicUsize,
}

impl FakeLimitedResource {
    /// Uses the resource for a few milliseconds; fails if someone else is
    /// using it right now.
    fn use_it(&self, who: &str, pause: Duration) -> Result<(), String> {
        if self
            .in_use
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(format!(
                "{who} found the resource in use: it needs to be used by one client at a time"
            ));
        }
        self.uses.fetch_add(1, Ordering::Relaxed);
        thread::sleep(pause);
        self.in_use.store(false, Ordering::Release);
        Ok(())
    }
}

/// One client, its own session and its own mutex object on the shared path
/// (Curator's `ExampleClientThatLocks`).
struct ExampleClientThatLocks {
    name: String,
    lock: InterProcessMutex,
    resource: Arc<FakeLimitedResource>,
}

impl ExampleClientThatLocks {
    fn do_work(&self, started: Instant, pause: Duration) -> Result<(), String> {
        let guard = self
            .lock
            .try_lock_for(LOCK_WAIT)
            .map_err(|e| format!("{}: {e}", self.name))?
            .ok_or_else(|| {
                format!(
                    "{} could not acquire the lock within {LOCK_WAIT:?}",
                    self.name
                )
            })?;
        println!(
            "[{:>5.2}s] {} has the lock (fencing token {})",
            started.elapsed().as_secs_f64(),
            self.name,
            guard.fencing_token()
        );
        let used = self.resource.use_it(&self.name, pause);
        println!(
            "[{:>5.2}s] {} releasing the lock",
            started.elapsed().as_secs_f64(),
            self.name
        );
        drop(guard);
        used
    }
}

fn run(connect: &str) -> Result<(), String> {
    let resource = Arc::new(FakeLimitedResource::default());
    let started = Instant::now();
    println!("{QTY} clients, each with its own session, use the resource {REPETITIONS} times each, guarded by {PATH}");
    let handles: Vec<_> = (0..QTY)
        .map(|index| {
            let resource = Arc::clone(&resource);
            let connect = connect.to_owned();
            thread::spawn(move || -> Result<(), String> {
                let client = new_client(&connect)?;
                let example = ExampleClientThatLocks {
                    name: format!("Client {index}"),
                    lock: InterProcessMutex::new(&client, PATH).map_err(|e| e.to_string())?,
                    resource,
                };
                let mut rng = Rng::new(index as u64 + 1);
                let mut result = Ok(());
                for _ in 0..REPETITIONS {
                    // Curator sleeps up to 3 ms inside the resource.
                    let pause = Duration::from_millis(1 + rng.below(3));
                    result = example.do_work(started, pause);
                    if result.is_err() {
                        break;
                    }
                }
                client.close();
                result
            })
        })
        .collect();
    join_all(handles, "a client thread")?;
    println!(
        "done in {:.1?}: the resource was used {} times, never by two clients at once",
        started.elapsed(),
        resource.uses.load(Ordering::Relaxed)
    );
    Ok(())
}

/// A tiny xorshift generator: random pauses without a dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::from(d.subsec_nanos()));
        Rng((seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ nanos) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

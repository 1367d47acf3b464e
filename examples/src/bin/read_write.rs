//! `InterProcessReadWriteLock` in three scenes, each participant with its
//! own ZooKeeper session:
//!
//! 1. readers overlap: three readers hold the read lock at the same time;
//! 2. a writer is alone: it waits for the readers in front of it, and a
//!    reader that comes after it waits for it (no writer starvation);
//! 3. downgrade: a writer takes the read lock while holding the write lock,
//!    releases the write lock and keeps reading, side by side with another
//!    reader; upgrading (read, then write) is refused.
//!
//! The guarded data is a real ZooKeeper node that the writer changes and
//! the readers read. An in-process board counts readers and writers and
//! the program exits 1 if a writer ever shared the lock.
//!
//! ```text
//! cargo run -p latchkey-examples --bin read_write                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin read_write -- --connect HOST:PORT
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use latchkey_examples::setup::{join_all, new_client, run_example};
use latchkey_framework::Client;
use latchkey_recipes::{InterProcessMutex, InterProcessReadWriteLock, MutexGuard};

/// The lock path.
const PATH: &str = "/examples/read_write/lock";
/// The data the lock guards.
const DATA: &str = "/examples/read_write/config";
/// How long anyone waits for a lock at most.
const LOCK_WAIT: Duration = Duration::from_secs(10);

fn main() {
    run_example("read_write", run);
}

/// Who holds the lock right now, as the participants report it.
struct Board {
    started: Instant,
    readers: AtomicUsize,
    writers: AtomicUsize,
    max_readers: AtomicUsize,
    violations: AtomicUsize,
}

impl Board {
    fn say(&self, who: &str, what: &str) {
        println!(
            "[{:>5.2}s] {who:<8} {what:<52} (readers {}, writers {})",
            self.started.elapsed().as_secs_f64(),
            self.readers.load(Ordering::Acquire),
            self.writers.load(Ordering::Acquire)
        );
    }

    fn enter_read(&self, who: &str, what: &str) {
        if self.writers.load(Ordering::Acquire) > 0 {
            self.violations.fetch_add(1, Ordering::Relaxed);
            self.say(who, "VIOLATION: reading while a writer holds the lock");
        }
        let n = self.readers.fetch_add(1, Ordering::AcqRel) + 1;
        self.max_readers.fetch_max(n, Ordering::AcqRel);
        self.say(who, what);
    }

    fn leave_read(&self, who: &str) {
        self.readers.fetch_sub(1, Ordering::AcqRel);
        self.say(who, "releases the read lock");
    }

    fn enter_write(&self, who: &str) {
        if self.readers.load(Ordering::Acquire) > 0 || self.writers.load(Ordering::Acquire) > 0 {
            self.violations.fetch_add(1, Ordering::Relaxed);
            self.say(who, "VIOLATION: writing while others hold the lock");
        }
        self.writers.fetch_add(1, Ordering::AcqRel);
    }

    fn leave_write(&self) {
        self.writers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A participant: its own session and its own lock object on [`PATH`].
struct Participant {
    name: String,
    client: Client,
    rw: InterProcessReadWriteLock,
}

impl Participant {
    fn join(name: &str, connect: &str) -> Result<Self, String> {
        let client = new_client(connect)?;
        let rw = InterProcessReadWriteLock::new(&client, PATH).map_err(|e| e.to_string())?;
        Ok(Participant {
            name: name.to_owned(),
            client,
            rw,
        })
    }

    fn take<'a>(&self, side: &'a InterProcessMutex) -> Result<MutexGuard<'a>, String> {
        side.try_lock_for(LOCK_WAIT)
            .map_err(|e| format!("{}: {e}", self.name))?
            .ok_or_else(|| format!("{} did not get the lock within {LOCK_WAIT:?}", self.name))
    }

    fn read_data(&self) -> Result<String, String> {
        let (data, _) = self.client.get_data(DATA).map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&data).into_owned())
    }

    /// Takes the read lock, reads, holds it for `hold`, releases.
    fn read_for(&self, board: &Board, hold: Duration) -> Result<(), String> {
        let guard = self.take(self.rw.read_lock())?;
        let value = self.read_data()?;
        board.enter_read(&self.name, &format!("reads {value:?}"));
        thread::sleep(hold);
        board.leave_read(&self.name);
        drop(guard);
        Ok(())
    }

    /// Takes the write lock, writes `value`, holds it for `hold`, releases.
    fn write_for(&self, board: &Board, value: &str, hold: Duration) -> Result<(), String> {
        let guard = self.take(self.rw.write_lock())?;
        board.enter_write(&self.name);
        self.client
            .set_data(DATA, value.as_bytes(), None)
            .map_err(|e| e.to_string())?;
        board.say(&self.name, &format!("writes {value:?}, alone"));
        thread::sleep(hold);
        board.leave_write();
        board.say(&self.name, "releases the write lock");
        drop(guard);
        Ok(())
    }
}

fn run(connect: &str) -> Result<(), String> {
    let board = Arc::new(Board {
        started: Instant::now(),
        readers: AtomicUsize::new(0),
        writers: AtomicUsize::new(0),
        max_readers: AtomicUsize::new(0),
        violations: AtomicUsize::new(0),
    });
    let readers: Vec<Arc<Participant>> = (1..=3)
        .map(|i| Participant::join(&format!("reader-{i}"), connect).map(Arc::new))
        .collect::<Result<_, _>>()?;
    let writer = Arc::new(Participant::join("writer", connect)?);
    writer
        .client
        .create()
        .creating_parents_if_needed()
        .for_path(DATA, b"version 1")
        .or_else(|e| {
            if e.is(latchkey_framework::ErrorCode::NodeExists) {
                writer
                    .client
                    .set_data(DATA, b"version 1", None)
                    .map(|_| String::new())
            } else {
                Err(e)
            }
        })
        .map_err(|e| e.to_string())?;

    println!("\n== 1. readers overlap ==");
    let gate = Arc::new(Barrier::new(readers.len()));
    let handles: Vec<_> = readers
        .iter()
        .map(|r| {
            let (r, board, gate) = (Arc::clone(r), Arc::clone(&board), Arc::clone(&gate));
            thread::spawn(move || {
                gate.wait();
                r.read_for(&board, Duration::from_millis(400))
            })
        })
        .collect();
    join_all(handles, "a participant")?;
    println!(
        "-> at most {} readers held the read lock at the same time",
        board.max_readers.load(Ordering::Relaxed)
    );

    println!("\n== 2. a writer is alone; a reader behind it waits ==");
    // Readers 1 and 2 read for a while; the writer queues behind them;
    // reader 3 arrives after the writer and so waits for it.
    let mut handles = Vec::new();
    for r in &readers[..2] {
        let (r, board) = (Arc::clone(r), Arc::clone(&board));
        handles.push(thread::spawn(move || {
            r.read_for(&board, Duration::from_millis(500))
        }));
    }
    wait_for_nodes(&writer.client, 2)?;
    {
        let (w, board) = (Arc::clone(&writer), Arc::clone(&board));
        board.say("writer", "queues for the write lock");
        handles.push(thread::spawn(move || {
            w.write_for(&board, "version 2", Duration::from_millis(300))
        }));
    }
    wait_for_nodes(&writer.client, 3)?;
    {
        let (r, board) = (Arc::clone(&readers[2]), Arc::clone(&board));
        board.say("reader-3", "queues for the read lock, behind the writer");
        handles.push(thread::spawn(move || {
            r.read_for(&board, Duration::from_millis(100))
        }));
    }
    join_all(handles, "a participant")?;

    println!("\n== 3. downgrade: write, then read, then let go of the write ==");
    {
        let write = writer.take(writer.rw.write_lock())?;
        board.enter_write("writer");
        writer
            .client
            .set_data(DATA, b"version 3", None)
            .map_err(|e| e.to_string())?;
        board.say("writer", "writes \"version 3\", alone");
        // Allowed: the thread that holds the write lock may also read.
        let read = writer.take(writer.rw.read_lock())?;
        board.leave_write();
        drop(write);
        board.enter_read("writer", "downgraded: holds only the read lock now");
        // Another reader can now join the downgraded writer.
        let (r, b) = (Arc::clone(&readers[0]), Arc::clone(&board));
        let joiner = thread::spawn(move || r.read_for(&b, Duration::from_millis(200)));
        join_all(vec![joiner], "a participant")?;

        // Upgrading is refused: a reader asking for the write lock would
        // wait for itself, so the timed attempt gives up.
        board.say("writer", "tries to upgrade back to the write lock (0.5 s)");
        match writer
            .rw
            .write_lock()
            .try_lock_for(Duration::from_millis(500))
        {
            Ok(None) => board.say("writer", "upgrade refused, as it should be"),
            Ok(Some(_)) => return Err("an upgrade from read to write succeeded".into()),
            Err(e) => return Err(format!("upgrade attempt failed: {e}")),
        }
        board.leave_read("writer");
        drop(read);
    }

    for p in readers.iter().chain(std::iter::once(&writer)) {
        p.client.close();
    }
    let violations = board.violations.load(Ordering::Relaxed);
    println!(
        "\ndone in {:.1?}: at most {} readers at once, {violations} violations",
        board.started.elapsed(),
        board.max_readers.load(Ordering::Relaxed)
    );
    if violations > 0 {
        return Err("a writer shared the lock".into());
    }
    Ok(())
}

/// Waits (at most 10 s) until `n` nodes queue on the lock.
fn wait_for_nodes(client: &Client, n: usize) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = client.get_children(PATH).map(|c| c.len()).unwrap_or(0);
        if now >= n {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{n} nodes did not queue on {PATH} within 10 s (saw {now})"
            ));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

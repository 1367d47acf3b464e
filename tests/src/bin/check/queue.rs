//! The queue workload: each session runs a producer thread putting
//! uniquely named items on one lock-safe `DistributedQueue`, and a
//! consumer (the same queue, with a callback) taking them. At the end the
//! queue is drained (faults healed) and the oracle checks that every item
//! whose put returned `Ok` was taken, that nothing was taken that was never
//! put, and that no item was taken twice unless a fault came between the
//! first take's start and the last take's end (a consumer whose session
//! ends while it holds an item, or that cannot remove the item it consumed,
//! gives it up to another: lock-safe consumption is at least once, and
//! exactly once while nothing fails), or its put was retried (a create
//! applied whose reply was lost is sent again on the next connection and
//! makes a second node: a sequential create is not idempotent, in Curator
//! either).
//!
//! The `--broken-queue` control takes items without the lock path's lock
//! nodes (read, consume, then delete), so two consumers take one item
//! without any fault; the checker must catch it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use latchkey_framework::{Client, ErrorCode};
use latchkey_recipes::{DistributedQueue, QueueBuilder, StringSerializer};
use parking_lot::Mutex;

use crate::rng::Rng;
use crate::session::Session;
use crate::workload::World;

/// One take of an item: by whom, and the fault epoch around it.
struct Take {
    who: String,
    epoch_before: u64,
    epoch_after: u64,
}

/// What the queue workload saw.
#[derive(Default)]
struct Seen {
    /// Items whose put returned `Ok`.
    put: BTreeSet<String>,
    /// Items whose put failed: in ZooKeeper or not, nobody knows.
    put_in_doubt: BTreeSet<String>,
    /// Items whose put was retried (its client counted a retry meanwhile):
    /// its create may have been applied and then sent again on the next
    /// connection (a sequential create is not idempotent, in Curator
    /// either), so the item may be in the queue twice.
    put_maybe_twice: BTreeSet<String>,
    takes: BTreeMap<String, Vec<Take>>,
}

/// The running queue workload.
pub struct QueueLoad {
    path: String,
    seen: Arc<Mutex<Seen>>,
    stop_producers: Arc<AtomicBool>,
    producers: Vec<JoinHandle<()>>,
    consumers: Vec<Consumer>,
}

enum Consumer {
    Recipe(DistributedQueue<String>),
    Broken(Arc<AtomicBool>, JoinHandle<()>),
}

impl QueueLoad {
    /// Starts a producer and a consumer on every session.
    pub fn start(
        world: &Arc<World>,
        sessions: &[Arc<Session>],
        seed: u64,
        broken: bool,
    ) -> Result<QueueLoad, String> {
        let path = world.paths.queue.clone();
        let locks = format!("{path}-locks");
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let stop_producers = Arc::new(AtomicBool::new(false));
        let mut load = QueueLoad {
            path: path.clone(),
            seen: Arc::clone(&seen),
            stop_producers: Arc::clone(&stop_producers),
            producers: Vec::new(),
            consumers: Vec::new(),
        };
        for (i, session) in sessions.iter().enumerate() {
            let who = format!("{}.queue", session.name);
            load.consumers.push(if broken {
                let stop = Arc::new(AtomicBool::new(false));
                let (client, world, seen, path, stopped) = (
                    session.client.clone(),
                    Arc::clone(world),
                    Arc::clone(&seen),
                    path.clone(),
                    Arc::clone(&stop),
                );
                let who = who.clone();
                let handle = thread::Builder::new()
                    .name(format!("{who}.broken"))
                    .spawn(move || broken_consumer(&client, &world, &seen, &path, &who, &stopped))
                    .map_err(|e| format!("spawn a queue consumer: {e}"))?;
                Consumer::Broken(stop, handle)
            } else {
                let (world, seen, client, who) = (
                    Arc::clone(world),
                    Arc::clone(&seen),
                    session.client.clone(),
                    who.clone(),
                );
                let queue = QueueBuilder::new(&session.client, StringSerializer, &path)
                    .consumer(move |item: String| {
                        let epoch_before = world.fault_epoch.load(Ordering::SeqCst);
                        world.history.record(
                            &who,
                            format!("take {item} (session {:#x})", client.session_id()),
                        );
                        thread::sleep(Duration::from_millis(2)); // the work
                        let epoch_after = world.fault_epoch.load(Ordering::SeqCst);
                        seen.lock().takes.entry(item).or_default().push(Take {
                            who: who.clone(),
                            epoch_before,
                            epoch_after,
                        });
                        Ok(())
                    })
                    .lock_path(&locks)
                    .build_queue()
                    .map_err(|e| format!("build a queue consumer: {e}"))?;
                start_with_retries(&queue)?;
                Consumer::Recipe(queue)
            });
            let producer = QueueBuilder::new(&session.client, StringSerializer, &path)
                .build_queue()
                .map_err(|e| format!("build a queue producer: {e}"))?;
            start_with_retries(&producer)?;
            let mut rng = Rng::stream(seed, 3000 + i as u64);
            let (world, seen, stop, client) = (
                Arc::clone(world),
                Arc::clone(&seen),
                Arc::clone(&stop_producers),
                session.client.clone(),
            );
            let who = format!("{}.producer", session.name);
            let handle = thread::Builder::new()
                .name(who.clone())
                .spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        let item = format!("{who}-{n}");
                        n += 1;
                        world.history.record(&who, format!("put {item}"));
                        // Sent again only if an attempt failed: the
                        // client counts each retry before it is made.
                        let retries_before = client.metrics().retries;
                        let put = producer.put(&item);
                        if client.metrics().retries != retries_before {
                            seen.lock().put_maybe_twice.insert(item.clone());
                        }
                        match put {
                            Ok(()) => {
                                seen.lock().put.insert(item);
                            }
                            Err(e) => {
                                world
                                    .history
                                    .record(&who, format!("put {item} failed: {e}"));
                                seen.lock().put_in_doubt.insert(item);
                            }
                        }
                        thread::sleep(rng.millis(5, 60));
                    }
                    producer.close();
                })
                .map_err(|e| format!("spawn a queue producer: {e}"))?;
            load.producers.push(handle);
        }
        Ok(load)
    }

    /// Stops the producers, lets the consumers empty the queue (within
    /// `drain_within`), stops them and checks what was put and taken.
    /// Prints a `check: queue ...` line. Call while the sessions are open
    /// and the faults healed.
    pub fn finish(self, world: &World, direct: &Client, drain_within: Duration) {
        self.stop_producers.store(true, Ordering::SeqCst);
        for p in self.producers {
            let _ = p.join();
        }
        world.history.record("checker", "queue: producers stopped");
        let deadline = Instant::now() + drain_within;
        let mut left = usize::MAX;
        while Instant::now() < deadline {
            match direct.get_children(&self.path) {
                Ok(children) if children.is_empty() => {
                    left = 0;
                    break;
                }
                Ok(children) => left = children.len(),
                Err(e) if e.is(ErrorCode::NoNode) => {
                    left = 0;
                    break;
                }
                Err(_) => {}
            }
            thread::sleep(Duration::from_millis(50));
        }
        for c in self.consumers {
            match c {
                Consumer::Recipe(q) => q.close(),
                Consumer::Broken(stop, handle) => {
                    stop.store(true, Ordering::SeqCst);
                    let _ = handle.join();
                }
            }
        }
        let seen = self.seen.lock();
        if left != 0 {
            world.oracle.violation(format!(
                "{}: {left} items still queued {drain_within:?} after the producers stopped",
                self.path
            ));
        }
        let mut lost = 0;
        for item in &seen.put {
            if !seen.takes.contains_key(item) {
                lost += 1;
                if lost <= 5 {
                    world
                        .oracle
                        .violation(format!("{}: {item} was put but never taken", self.path));
                }
            }
        }
        let (mut twice, mut twice_in_doubt) = (0, 0);
        for (item, takes) in &seen.takes {
            if !seen.put.contains(item) && !seen.put_in_doubt.contains(item) {
                world
                    .oracle
                    .violation(format!("{}: {item} was taken but never put", self.path));
            }
            if takes.len() < 2 {
                continue;
            }
            let first = takes.iter().map(|t| t.epoch_before).min().unwrap_or(0);
            let last = takes.iter().map(|t| t.epoch_after).max().unwrap_or(0);
            // A fault was on (odd epoch) or came and went meanwhile, or
            // the put may have made two nodes.
            if first != last || first % 2 == 1 || seen.put_maybe_twice.contains(item) {
                twice_in_doubt += 1;
                continue;
            }
            twice += 1;
            let by: Vec<&str> = takes.iter().map(|t| t.who.as_str()).collect();
            world.oracle.violation(format!(
                "{}: {item} was taken {} times without a fault, by {by:?}",
                self.path,
                takes.len()
            ));
        }
        let taken: usize = seen.takes.values().map(Vec::len).sum();
        println!(
            "check: queue puts={} puts_in_doubt={} puts_maybe_twice={} takes={taken} lost={lost} \
             taken_twice={twice} taken_twice_in_doubt={twice_in_doubt} left={left}",
            seen.put.len(),
            seen.put_in_doubt.len(),
            seen.put_maybe_twice.len(),
        );
        world.history.record(
            "checker",
            format!(
                "queue: {} puts, {taken} takes, {lost} lost, {twice} taken twice, {twice_in_doubt} taken twice in doubt",
                seen.put.len()
            ),
        );
    }
}

/// Starts a queue, trying again while a fault keeps ZooKeeper away.
fn start_with_retries(queue: &DistributedQueue<String>) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match queue.start() {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() < deadline && !e.to_string().contains("started already") => {
                thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(format!("start a queue: {e}")),
        }
    }
}

/// The `--broken-queue` control: takes the first item by reading it,
/// consuming it, then deleting it, with no lock node (two consumers take
/// one item).
fn broken_consumer(
    client: &Client,
    world: &World,
    seen: &Mutex<Seen>,
    path: &str,
    who: &str,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::SeqCst) {
        let mut children = match client.get_children(path) {
            Ok(c) => c,
            Err(_) => {
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        children.sort();
        let Some(first) = children.first() else {
            thread::sleep(Duration::from_millis(5));
            continue;
        };
        let node = format!("{path}/{first}");
        let Ok((data, _)) = client.get_data(&node) else {
            continue;
        };
        let epoch_before = world.fault_epoch.load(Ordering::SeqCst);
        let items = latchkey_recipes::ItemSerializer::deserialize(&data).unwrap_or_default();
        thread::sleep(Duration::from_millis(5)); // the work
        for item in items {
            let item = String::from_utf8_lossy(&item).into_owned();
            world.history.record(who, format!("take {item} (no lock)"));
            seen.lock().takes.entry(item).or_default().push(Take {
                who: who.to_string(),
                epoch_before,
                epoch_after: world.fault_epoch.load(Ordering::SeqCst),
            });
        }
        let _ = client.delete().for_path(&node);
    }
}

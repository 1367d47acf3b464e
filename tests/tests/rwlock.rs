//! The read-write lock's downgrade against a real server, as current Curator
//! does it: the downgrade read node sorts with the holder's write node, so a
//! writer queued behind that write node stays out until the read goes.
//! Ports Curator's downgrade tests (`TestInterProcessReadWriteLock`) and
//! checks exclusion with an oracle outside ZooKeeper. Also: a mutex with a
//! custom lock driver.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::*;
use latchkey_framework::{Client, CreateMode};
use latchkey_recipes::{InterProcessReadWriteLock, READ_LOCK_NAME, WRITE_LOCK_NAME};

const SESSION: Duration = Duration::from_secs(10);
/// Bound on any wait that should end quickly when the lock works.
const BOUND: Duration = Duration::from_secs(20);

fn clients(n: usize) -> Vec<Client> {
    common::clients(n, SESSION)
}

fn children(c: &Client, path: &str) -> Vec<String> {
    sorted_children(c, path)
}

/// What Curator 5.5+ puts on the wire for a downgrade, for tests beside
/// Curator versions that predate it: the read node is EPHEMERAL (not
/// sequential), protected, and named `__READ__` followed by the sequence
/// of the holder's write node, so it sorts with that write node.
mod curator55 {
    use super::*;

    /// Creates the downgrade read node for the write node `write_node` (a
    /// full path) in `client`'s session; returns its path.
    pub fn create_downgrade_node(client: &Client, write_node: &str) -> String {
        let (base, name) = write_node.rsplit_once('/').expect("a full path");
        let at = name.rfind(WRITE_LOCK_NAME).expect("a write node") + WRITE_LOCK_NAME.len();
        let sequence = &name[at..];
        client
            .create()
            .creating_parent_containers_if_needed()
            .with_protection()
            .mode(CreateMode::Ephemeral)
            .for_path(&format!("{base}/{READ_LOCK_NAME}{sequence}"), &[])
            .expect("create the downgrade read node")
    }
}

/// Waits until `n` writers queue on `path`.
fn wait_for_writers(c: &Client, path: &str, n: usize) {
    wait_until(
        BOUND,
        || {
            children(c, path)
                .iter()
                .filter(|ch| ch.contains(WRITE_LOCK_NAME))
                .count()
                == n
        },
        || format!("children: {:?}", children(c, path)),
    );
}

/// P1 holds the write lock, P2 queues for it, P1 downgrades (read, then
/// release the write) and holds the read a while: P2 must not get the write
/// lock until P1 releases the read. Returns whether P2 overlapped P1's read.
///
/// `how` says who makes P1's read hold.
fn contending_downgrade(p1: &Client, p2: &Client, path: &str, how: Downgrade) -> bool {
    let rw1 = InterProcessReadWriteLock::new(p1, path).unwrap();
    let reading = AtomicBool::new(false);
    let overlap = AtomicBool::new(false);
    rw1.write_lock().acquire().unwrap();
    thread::scope(|s| {
        let (acquired_tx, acquired_rx) = mpsc::channel();
        let (reading, overlap) = (&reading, &overlap);
        let writer = s.spawn(move || {
            let rw2 = InterProcessReadWriteLock::new(p2, path).unwrap();
            let got = rw2.write_lock().acquire_timeout(BOUND).unwrap();
            if got {
                if reading.load(Ordering::SeqCst) {
                    overlap.store(true, Ordering::SeqCst);
                }
                let _ = acquired_tx.send(());
                rw2.write_lock().release().unwrap();
            }
            got
        });
        wait_for_writers(p1, path, 2);
        let read_node = how.take_read(p1, &rw1);
        reading.store(true, Ordering::SeqCst);
        rw1.write_lock().release().unwrap();
        // P2 hears of the write node's deletion within milliseconds; give it
        // the chance to take the lock while the read is held.
        let early = acquired_rx.recv_timeout(Duration::from_millis(100)).is_ok();
        reading.store(false, Ordering::SeqCst);
        how.release_read(p1, &rw1, read_node);
        let late = early || acquired_rx.recv_timeout(BOUND).is_ok();
        assert!(late, "the queued writer never got the lock");
        assert!(writer.join().unwrap());
    });
    wait_until(
        BOUND,
        || children(p1, path).is_empty(),
        || format!("nodes left: {:?}", children(p1, path)),
    );
    overlap.load(Ordering::SeqCst)
}

/// Who takes the read lock under the write lock.
#[derive(Clone, Copy, Debug)]
enum Downgrade {
    /// latchkey's own read lock.
    Latchkey,
    /// A raw node as Curator 5.5+ creates it, in P1's session.
    Curator55,
}

impl Downgrade {
    fn take_read(self, p1: &Client, rw: &InterProcessReadWriteLock) -> Option<String> {
        match self {
            Downgrade::Latchkey => {
                assert!(rw.read_lock().acquire_timeout(BOUND).unwrap());
                None
            }
            Downgrade::Curator55 => {
                let write_node = rw.write_lock().lock_node_path().expect("P1 writes");
                Some(curator55::create_downgrade_node(p1, &write_node))
            }
        }
    }

    fn release_read(self, p1: &Client, rw: &InterProcessReadWriteLock, node: Option<String>) {
        match node {
            None => rw.read_lock().release().unwrap(),
            Some(node) => p1.delete().for_path(&node).unwrap(),
        }
    }
}

/// Runs the downgrade scenario `runs` times (at most `budget` long) and
/// returns how many runs saw the writer overlap the downgraded reader.
fn downgrade_runs(
    runs: usize,
    budget: Duration,
    same_client: bool,
    how: Downgrade,
) -> (usize, usize) {
    let cs = clients(2);
    let p2 = if same_client { &cs[0] } else { &cs[1] };
    let started = std::time::Instant::now();
    let mut done = 0;
    let mut overlaps = 0;
    while done < runs && started.elapsed() < budget {
        let path = unique("rw-downgrade");
        if contending_downgrade(&cs[0], p2, &path, how) {
            overlaps += 1;
        }
        done += 1;
    }
    cs.iter().for_each(Client::close);
    (done, overlaps)
}

/// Curator's `testContendingDowngrading`, on two sessions and on one, a few
/// dozen times each.
#[test]
fn contending_downgrade_keeps_the_queued_writer_out() {
    for same_client in [false, true] {
        let (runs, overlaps) = downgrade_runs(
            20,
            Duration::from_secs(60),
            same_client,
            Downgrade::Latchkey,
        );
        eprintln!("downgrade (same client: {same_client}): {runs} runs, {overlaps} overlaps");
        assert!(runs >= 5, "only {runs} runs in the time budget");
        assert_eq!(overlaps, 0, "{overlaps} of {runs} runs overlapped");
    }
}

/// The acceptance count: 200 runs against latchkey's downgrade and 200
/// against the Curator 5.5+ wire emulation.
/// `cargo test -p latchkey-test --test rwlock -- --ignored`.
#[test]
#[ignore]
fn contending_downgrade_200_runs() {
    for how in [Downgrade::Latchkey, Downgrade::Curator55] {
        let (runs, overlaps) = downgrade_runs(200, Duration::from_secs(600), false, how);
        eprintln!("downgrade ({how:?}): {runs} runs, {overlaps} overlaps");
        assert_eq!(runs, 200);
        assert_eq!(overlaps, 0, "{how:?}: {overlaps} of {runs} runs overlapped");
    }
}

/// A latchkey writer queued behind a write holder that downgrades the way
/// Curator 5.5+ does (emulated on the wire, in the holder's session): the
/// writer must wait for the read node that joined ahead of it.
#[test]
fn a_writer_waits_for_a_curator55_downgrade_node() {
    let (runs, overlaps) = downgrade_runs(10, Duration::from_secs(60), false, Downgrade::Curator55);
    eprintln!("downgrade (Curator 5.5+ emulated): {runs} runs, {overlaps} overlaps");
    assert!(runs >= 3, "only {runs} runs in the time budget");
    assert_eq!(
        overlaps, 0,
        "{overlaps} of {runs} runs: the writer held beside a 5.5 read node"
    );
}

/// Curator's `testDowngrading`, with reentrancy across the downgrade: the
/// read lock taken twice under the write lock stays held after the write
/// goes, and other writers stay out until the last read release.
#[test]
fn downgrade_is_reentrant_and_keeps_writers_out() {
    let path = unique("rw-reentrant-downgrade");
    let cs = clients(2);
    let rw = InterProcessReadWriteLock::new(&cs[0], &path).unwrap();
    let other = InterProcessReadWriteLock::new(&cs[1], &path).unwrap();
    rw.write_lock().acquire().unwrap();
    assert!(rw.read_lock().acquire_timeout(BOUND).unwrap());
    assert!(rw.read_lock().acquire_timeout(BOUND).unwrap());
    // On the wire as Curator 5.5+: the read node carries the write node's
    // sequence and is not sequential itself (one node for both holds).
    let write_node = rw.write_lock().lock_node_path().unwrap();
    let read_node = rw.read_lock().lock_node_path().unwrap();
    let seq = &write_node[write_node.rfind(WRITE_LOCK_NAME).unwrap() + WRITE_LOCK_NAME.len()..];
    assert!(
        read_node.ends_with(&format!("-{READ_LOCK_NAME}{seq}")) && read_node.contains("/_c_"),
        "{read_node} beside {write_node}"
    );
    let (_, stat) = cs[0].get_data(&read_node).unwrap();
    assert_eq!(stat.ephemeral_owner, cs[0].session_id());
    assert_eq!(rw.read_lock().participant_nodes().unwrap(), vec![read_node]);
    // The write lock is still reentrant beside the read.
    assert!(rw.write_lock().acquire_timeout(BOUND).unwrap());
    rw.write_lock().release().unwrap();
    assert!(rw.write_lock().is_owned_by_current_thread());
    rw.write_lock().release().unwrap();
    assert!(rw.read_lock().is_owned_by_current_thread());
    assert!(!other
        .write_lock()
        .acquire_timeout(Duration::from_millis(300))
        .unwrap());
    // Other readers share the downgraded hold.
    assert!(other.read_lock().acquire_timeout(BOUND).unwrap());
    other.read_lock().release().unwrap();
    rw.read_lock().release().unwrap();
    assert!(!other
        .write_lock()
        .acquire_timeout(Duration::from_millis(300))
        .unwrap());
    rw.read_lock().release().unwrap();
    assert!(other.write_lock().acquire_timeout(BOUND).unwrap());
    other.write_lock().release().unwrap();
    cs.iter().for_each(Client::close);
}

/// Curator's `testThatUpgradingIsDisallowed`, and after a downgrade too.
#[test]
fn upgrading_is_refused_even_after_a_downgrade() {
    let path = unique("rw-upgrade");
    let cs = clients(1);
    let rw = InterProcessReadWriteLock::new(&cs[0], &path).unwrap();
    rw.read_lock().acquire().unwrap();
    assert!(!rw
        .write_lock()
        .acquire_timeout(Duration::from_millis(500))
        .unwrap());
    rw.read_lock().release().unwrap();
    rw.write_lock().acquire().unwrap();
    rw.read_lock().acquire().unwrap();
    rw.write_lock().release().unwrap();
    assert!(!rw
        .write_lock()
        .acquire_timeout(Duration::from_millis(500))
        .unwrap());
    rw.read_lock().release().unwrap();
    wait_until(
        BOUND,
        || children(&cs[0], &path).is_empty(),
        || format!("{:?}", children(&cs[0], &path)),
    );
    cs.iter().for_each(Client::close);
}

/// Curator's `testThatDowngradingRespectsThreads`: another thread of the
/// process holding the write lock is an ordinary reader and waits.
#[test]
fn downgrading_respects_threads() {
    let path = unique("rw-threads");
    let cs = clients(1);
    let rw = InterProcessReadWriteLock::new(&cs[0], &path).unwrap();
    rw.write_lock().acquire().unwrap();
    let waited = AtomicUsize::new(0);
    thread::scope(|s| {
        s.spawn(|| {
            if !rw
                .read_lock()
                .acquire_timeout(Duration::from_millis(500))
                .unwrap()
            {
                waited.fetch_add(1, Ordering::SeqCst);
            } else {
                rw.read_lock().release().unwrap();
            }
        });
    });
    assert_eq!(waited.load(Ordering::SeqCst), 1, "the other thread read");
    rw.write_lock().release().unwrap();
    cs.iter().for_each(Client::close);
}

/// A custom `LockDriver` (Curator's `InterProcessMutex(client, path,
/// driver)`): this one lets the first two nodes hold at once; a third
/// waits until one of them goes.
#[test]
fn a_mutex_with_a_custom_driver_follows_it() {
    use latchkey_framework::Result;
    use latchkey_recipes::{Decision, InterProcessMutex, LockDriver, StandardDriver};

    struct FirstTwo(AtomicUsize);
    impl LockDriver for FirstTwo {
        fn decide(&self, children: &[String], ours: &str, _max: usize) -> Result<Decision> {
            self.0.fetch_add(1, Ordering::SeqCst);
            StandardDriver.decide(children, ours, 2)
        }
    }

    let path = unique("custom-driver");
    let cs = clients(3);
    let driver = std::sync::Arc::new(FirstTwo(AtomicUsize::new(0)));
    let mutexes: Vec<_> = cs
        .iter()
        .map(|c| InterProcessMutex::with_lock_driver(c, &path, driver.clone()).unwrap())
        .collect();
    assert!(mutexes[0].acquire_timeout(BOUND).unwrap());
    assert!(mutexes[1].acquire_timeout(BOUND).unwrap());
    assert!(!mutexes[2]
        .acquire_timeout(Duration::from_millis(300))
        .unwrap());
    mutexes[0].release().unwrap();
    assert!(mutexes[2].acquire_timeout(BOUND).unwrap());
    assert!(driver.0.load(Ordering::SeqCst) >= 4);
    let nodes = mutexes[2].participant_nodes().unwrap();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    assert!(nodes.iter().all(|n| n.contains("-lock-")), "{nodes:?}");
    mutexes[1].release().unwrap();
    mutexes[2].release().unwrap();
    cs.iter().for_each(Client::close);
}

/// A thread whose write hold went with its session is no longer a write
/// holder: its "downgrade" is an ordinary read that waits for the writer
/// that took over, instead of sorting ahead of it and reading beside it.
#[test]
fn a_lost_write_hold_does_not_downgrade() {
    let path = unique("rw-lost-downgrade");
    let cs = clients(2);
    let rw1 = InterProcessReadWriteLock::new(&cs[0], &path).unwrap();
    let rw2 = InterProcessReadWriteLock::new(&cs[1], &path).unwrap();
    rw1.write_lock().acquire().unwrap();
    let states = cs[0].listen();
    cs[0].expire_session_for_testing().unwrap();
    let ctx = Ctx::new(shared_server(), &cs[0]);
    ctx.expect(&states, latchkey_framework::ConnectionState::Lost, BOUND);
    assert!(rw1.write_lock().is_lost());
    assert!(rw2.write_lock().acquire_timeout(BOUND).unwrap());
    wait_until(
        BOUND,
        || {
            cs[0]
                .block_until_connected(Duration::from_millis(100))
                .unwrap_or(false)
        },
        || ctx.dump(),
    );
    // P2 writes; P1's read must wait.
    let read = rw1
        .read_lock()
        .acquire_timeout(Duration::from_millis(500))
        .unwrap();
    assert!(!read, "a lost write hold downgraded beside the new writer");
    rw2.write_lock().release().unwrap();
    assert!(rw1.read_lock().acquire_timeout(BOUND).unwrap());
    rw1.read_lock().release().unwrap();
    rw1.write_lock().release().unwrap();
    cs.iter().for_each(Client::close);
}

/// Readers, writers and downgrading writers on four sessions, mixed: a
/// writer never overlaps anyone. Each hold is counted from its acquire to
/// just before its release, a window inside the real hold.
#[test]
fn mixed_reads_writes_and_downgrades_never_overlap() {
    use std::sync::atomic::AtomicI64;
    let path = unique("rw-mixed");
    let cs = clients(4);
    let readers = AtomicI64::new(0);
    let writers = AtomicI64::new(0);
    let violations = AtomicUsize::new(0);
    let downgrades = AtomicUsize::new(0);
    let started = std::time::Instant::now();
    let budget = Duration::from_secs(60);
    thread::scope(|s| {
        for (i, c) in cs.iter().enumerate() {
            let (path, readers, writers, violations, downgrades) =
                (&path, &readers, &writers, &violations, &downgrades);
            s.spawn(move || {
                let rw = InterProcessReadWriteLock::new(c, path).unwrap();
                let read = |held: &dyn Fn()| {
                    readers.fetch_add(1, Ordering::SeqCst);
                    if writers.load(Ordering::SeqCst) != 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    held();
                    readers.fetch_sub(1, Ordering::SeqCst);
                };
                for round in 0..12 {
                    if started.elapsed() > budget {
                        break;
                    }
                    let pause = || thread::sleep(Duration::from_millis(3));
                    match (i + round) % 3 {
                        0 => {
                            assert!(rw.read_lock().acquire_timeout(BOUND).unwrap());
                            read(&pause);
                            rw.read_lock().release().unwrap();
                        }
                        kind => {
                            assert!(rw.write_lock().acquire_timeout(BOUND).unwrap());
                            if writers.fetch_add(1, Ordering::SeqCst) != 0
                                || readers.load(Ordering::SeqCst) != 0
                            {
                                violations.fetch_add(1, Ordering::SeqCst);
                            }
                            pause();
                            if kind == 1 {
                                // Downgrade: read under the write, drop the
                                // write, read on alone.
                                assert!(rw.read_lock().acquire_timeout(BOUND).unwrap());
                                readers.fetch_add(1, Ordering::SeqCst);
                                writers.fetch_sub(1, Ordering::SeqCst);
                                rw.write_lock().release().unwrap();
                                pause();
                                readers.fetch_sub(1, Ordering::SeqCst);
                                rw.read_lock().release().unwrap();
                                downgrades.fetch_add(1, Ordering::SeqCst);
                            } else {
                                writers.fetch_sub(1, Ordering::SeqCst);
                                rw.write_lock().release().unwrap();
                            }
                        }
                    }
                }
            });
        }
    });
    assert_eq!(violations.load(Ordering::SeqCst), 0, "holders overlapped");
    assert!(downgrades.load(Ordering::SeqCst) > 0);
    wait_until(
        BOUND,
        || children(&cs[0], &path).is_empty(),
        || format!("nodes left: {:?}", children(&cs[0], &path)),
    );
    cs.iter().for_each(Client::close);
}

//! The read-write lock's std-style guards (`read()`, `write()`, their
//! `try_` forms) against a real server. Exclusion is checked by an oracle
//! outside ZooKeeper: counters of readers and writers that each holder
//! updates while its guard is alive and not in doubt.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::Client;
use latchkey_recipes::{HoldEvent, InterProcessReadWriteLock, WRITE_LOCK_NAME};
use latchkey_test::FaultProxy;

const SESSION: Duration = Duration::from_secs(10);
/// Bound on any wait that should end quickly when the lock works.
const BOUND: Duration = Duration::from_secs(20);

fn clients(n: usize) -> Vec<Client> {
    common::clients(n, SESSION)
}

fn children(c: &Client, path: &str) -> Vec<String> {
    sorted_children(c, path)
}

fn wait_for_children(c: &Client, path: &str, n: usize) {
    wait_until(
        BOUND,
        || children(c, path).len() == n,
        || format!("want {n} children, have {:?}", children(c, path)),
    );
}

/// Who holds the lock, as the holders report it; any overlap of a writer
/// with anyone is counted.
#[derive(Default)]
struct Oracle {
    readers: AtomicUsize,
    writers: AtomicUsize,
    max_readers: AtomicUsize,
    violations: AtomicUsize,
}

impl Oracle {
    fn enter_read(&self) {
        let n = self.readers.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_readers.fetch_max(n, Ordering::SeqCst);
        if self.writers.load(Ordering::SeqCst) > 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave_read(&self) {
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }

    fn enter_write(&self) {
        let w = self.writers.fetch_add(1, Ordering::SeqCst);
        if w > 0 || self.readers.load(Ordering::SeqCst) > 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave_write(&self) {
        self.writers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Three sessions take `read()` at the same time and all hold it together.
#[test]
fn readers_overlap() {
    let path = unique("rw-guards");
    let cs = clients(3);
    let oracle = Oracle::default();
    let all_in = Barrier::new(3);
    thread::scope(|s| {
        for c in &cs {
            let (path, oracle, all_in) = (&path, &oracle, &all_in);
            s.spawn(move || {
                let rw = InterProcessReadWriteLock::new(c, path).unwrap();
                let guard = rw.read().unwrap();
                assert!(!guard.is_in_doubt() && !guard.is_lost());
                assert!(guard.node_path().contains("__READ__"));
                oracle.enter_read();
                // Everyone holds before anyone lets go; a reader kept out
                // would leave the others here, so the test bounds it.
                wait_until(
                    BOUND,
                    || oracle.max_readers.load(Ordering::SeqCst) == 3,
                    || "three readers never held at once".into(),
                );
                all_in.wait();
                oracle.leave_read();
                drop(guard);
            });
        }
    });
    assert_eq!(oracle.max_readers.load(Ordering::SeqCst), 3);
    assert_eq!(oracle.violations.load(Ordering::SeqCst), 0);
    wait_for_children(&cs[0], &path, 0);
}

/// Four sessions mix `write()` and `read()` for a bounded while: a writer
/// never shares the lock, and readers still overlap.
#[test]
fn writer_excludes_readers_and_writers() {
    let path = unique("rw-guards");
    let cs = clients(4);
    let oracle = Oracle::default();
    let started = Instant::now();
    let budget = Duration::from_secs(8);
    let rounds = AtomicUsize::new(0);
    thread::scope(|s| {
        for (i, c) in cs.iter().enumerate() {
            let (path, oracle, rounds) = (&path, &oracle, &rounds);
            s.spawn(move || {
                let rw = InterProcessReadWriteLock::new(c, path).unwrap();
                for round in 0..30 {
                    if started.elapsed() > budget {
                        break;
                    }
                    if (round + i) % 3 == 0 {
                        let guard = rw.try_write_for(BOUND).unwrap().expect("write in time");
                        oracle.enter_write();
                        thread::sleep(Duration::from_millis(5));
                        oracle.leave_write();
                        drop(guard);
                    } else {
                        let guard = rw.try_read_for(BOUND).unwrap().expect("read in time");
                        oracle.enter_read();
                        thread::sleep(Duration::from_millis(5));
                        oracle.leave_read();
                        drop(guard);
                    }
                    rounds.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    let rounds = rounds.load(Ordering::SeqCst);
    eprintln!(
        "{rounds} rounds, at most {} readers at once",
        oracle.max_readers.load(Ordering::SeqCst)
    );
    assert!(rounds >= 20, "only {rounds} rounds in {budget:?}");
    assert_eq!(oracle.violations.load(Ordering::SeqCst), 0);
    wait_for_children(&cs[0], &path, 0);
}

/// The downgrade with guards: write, read on the same thread, drop the
/// write guard. A writer that queued meanwhile stays out until the read
/// guard drops.
#[test]
fn downgrade_via_guards_keeps_the_queued_writer_out() {
    let path = unique("rw-guards");
    let cs = clients(2);
    let oracle = Oracle::default();
    let rw1 = InterProcessReadWriteLock::new(&cs[0], &path).unwrap();
    let write = rw1.write().unwrap();
    oracle.enter_write();
    let token = write.fencing_token();
    thread::scope(|s| {
        let (got_tx, got_rx) = mpsc::channel();
        let (path, oracle, p2) = (&path, &oracle, &cs[1]);
        let writer = s.spawn(move || {
            let rw2 = InterProcessReadWriteLock::new(p2, path).unwrap();
            let guard = rw2.try_write_for(BOUND).unwrap().expect("write in time");
            oracle.enter_write();
            let _ = got_tx.send(guard.fencing_token());
            oracle.leave_write();
        });
        wait_until(
            BOUND,
            || {
                children(&cs[0], path)
                    .iter()
                    .filter(|c| c.contains(WRITE_LOCK_NAME))
                    .count()
                    == 2
            },
            || format!("children: {:?}", children(&cs[0], path)),
        );
        let read = rw1
            .try_read_for(Duration::ZERO)
            .unwrap()
            .expect("downgrade read");
        oracle.leave_write();
        oracle.enter_read();
        drop(write);
        // The queued writer hears of the write node's deletion within
        // milliseconds; give it the chance to break in while we read.
        assert!(
            got_rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "the queued writer got the lock beside the downgraded read"
        );
        assert!(!read.is_in_doubt());
        oracle.leave_read();
        drop(read);
        let later = got_rx
            .recv_timeout(BOUND)
            .expect("writer never got the lock");
        assert!(later > token, "fencing token {later} not above {token}");
        writer.join().unwrap();
    });
    assert_eq!(oracle.violations.load(Ordering::SeqCst), 0);
    wait_for_children(&cs[0], &path, 0);
}

/// With a writer holding, every `try_` form of another session says `None`
/// (the timed ones after their timeout, well before the bound) and leaves
/// no node; once the writer drops, `try_read` gets the lock and `try_write`
/// of a third session does not.
#[test]
fn try_forms_with_a_held_writer() {
    let path = unique("rw-guards");
    let cs = clients(3);
    let rw1 = InterProcessReadWriteLock::new(&cs[0], &path).unwrap();
    let rw2 = InterProcessReadWriteLock::new(&cs[1], &path).unwrap();
    let rw3 = InterProcessReadWriteLock::new(&cs[2], &path).unwrap();
    let write = rw1.write().unwrap();
    thread::scope(|s| {
        s.spawn(|| {
            assert!(rw2.try_read().unwrap().is_none());
            assert!(rw2.try_write().unwrap().is_none());
            for timed in [Duration::ZERO, Duration::from_millis(300)] {
                let t = Instant::now();
                assert!(rw2.try_read_for(timed).unwrap().is_none());
                assert!(rw2.try_write_for(timed).unwrap().is_none());
                let took = t.elapsed();
                assert!(
                    took >= timed * 2,
                    "gave up after {took:?}, before {timed:?} twice"
                );
                assert!(took < BOUND, "took {took:?}");
            }
        })
        .join()
        .unwrap();
    });
    assert_eq!(children(&cs[0], &path).len(), 1, "a try_ left a node");
    drop(write);
    let read = rw2
        .try_read()
        .unwrap()
        .expect("try_read after the writer left");
    assert!(rw3.try_write().unwrap().is_none());
    assert!(rw3
        .try_write_for(Duration::from_millis(200))
        .unwrap()
        .is_none());
    // Readers still join a reader.
    let other_read = rw3.try_read().unwrap().expect("a second reader");
    drop((read, other_read));
    wait_for_children(&cs[0], &path, 0);
}

/// Guards are reentrant per thread, and each guard releases one hold.
#[test]
fn guards_are_reentrant_per_thread() {
    let path = unique("rw-guards");
    let cs = clients(2);
    let rw = InterProcessReadWriteLock::new(&cs[0], &path).unwrap();
    let w1 = rw.write().unwrap();
    let w2 = rw.try_write().unwrap().expect("reentrant write");
    assert_eq!(w1.node_path(), w2.node_path());
    drop(w1);
    assert!(rw.write_lock().is_owned_by_current_thread());
    let other = InterProcessReadWriteLock::new(&cs[1], &path).unwrap();
    assert!(
        other.try_read().unwrap().is_none(),
        "read beside a held write"
    );
    drop(w2);
    assert!(!rw.write_lock().is_owned_by_current_thread());
    let r = other
        .try_read()
        .unwrap()
        .expect("read once the writer is gone");
    drop(r);
    wait_for_children(&cs[0], &path, 0);
}

/// A guard's `events()` and `is_in_doubt()` follow the connection: in doubt
/// while it is down, restored when it comes back in the same session.
#[test]
fn guards_tell_their_standing() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let client = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(SESSION)
            .connection_timeout(Duration::from_secs(2))
            .retry_policy(latchkey_framework::ExponentialBackoffRetry::new(
                Duration::from_millis(50),
                3,
            )),
    );
    let ctx = Ctx::new(server, &client);
    let path = unique("rw-guards");
    let rw = InterProcessReadWriteLock::new(&client, &path).unwrap();
    let write = rw.write().unwrap();
    let read = rw.read().unwrap();
    let (write_events, read_events) = (write.events(), read.events());
    proxy.set_refuse(true);
    proxy.cut();
    for (side, events) in [("write", &write_events), ("read", &read_events)] {
        let event = events.recv_timeout(BOUND);
        assert_eq!(event, Ok(HoldEvent::InDoubt), "{side}\n{}", ctx.dump());
    }
    assert!(write.is_in_doubt() && read.is_in_doubt());
    assert!(!write.is_lost() && !read.is_lost());
    proxy.set_refuse(false);
    for (side, events) in [("write", &write_events), ("read", &read_events)] {
        let event = events.recv_timeout(BOUND);
        assert_eq!(event, Ok(HoldEvent::Restored), "{side}\n{}", ctx.dump());
    }
    assert!(!write.is_in_doubt() && !read.is_in_doubt());
    drop(write);
    drop(read);
    assert!(
        read_events.recv_timeout(BOUND).is_err(),
        "the channel outlived its hold"
    );
    client.close();
}

//! The recipes against a real ZooKeeper server, with an independent oracle
//! (a shared holder count) deciding whether exclusion held.

mod common;

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::{Client, ConnectionState, Error};
use latchkey_recipes::{
    CancelToken, InterProcessLock, InterProcessMultiLock, InterProcessMutex,
    InterProcessReadWriteLock, InterProcessSemaphoreMutex, InterProcessSemaphoreV2, Lease,
    SharedCount,
};

const SESSION: Duration = Duration::from_secs(10);

/// Counts holders; records the most ever seen at once.
#[derive(Default)]
struct Oracle {
    now: AtomicUsize,
    max: AtomicUsize,
    total: AtomicUsize,
}

impl Oracle {
    /// Counts a new holder; returns how many hold now.
    fn enter(&self) -> usize {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
        self.total.fetch_add(1, Ordering::SeqCst);
        n
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
    fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
}

fn clients(n: usize) -> Vec<Client> {
    common::clients(n, SESSION)
}

fn children(c: &Client, path: &str) -> Vec<String> {
    c.get_children(path).unwrap_or_default()
}

#[test]
fn mutex_excludes_eight_sessions() {
    let path = unique("mutex8");
    let oracle = Arc::new(Oracle::default());
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let cs = clients(8);
    thread::scope(|s| {
        for c in &cs {
            let (oracle, tokens, path) = (Arc::clone(&oracle), Arc::clone(&tokens), path.clone());
            s.spawn(move || {
                let m = InterProcessMutex::new(c, &path).unwrap();
                for _ in 0..15 {
                    let g = m.lock().unwrap();
                    oracle.enter();
                    tokens.lock().unwrap().push(g.fencing_token());
                    thread::sleep(Duration::from_millis(1));
                    oracle.leave();
                }
            });
        }
    });
    assert_eq!(oracle.max(), 1, "two holders overlapped");
    assert_eq!(oracle.total.load(Ordering::SeqCst), 120);
    // Fencing tokens grow with each successive holder.
    let tokens = tokens.lock().unwrap();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert!(children(&cs[0], &path).is_empty(), "orphaned lock nodes");
    cs.iter().for_each(Client::close);
}

#[test]
fn mutex_excludes_ten_threads_sharing_one_object() {
    let path = unique("mutex10");
    let c = &clients(1)[0];
    let m = InterProcessMutex::new(c, &path).unwrap();
    let oracle = Oracle::default();
    thread::scope(|s| {
        for _ in 0..10 {
            s.spawn(|| {
                for _ in 0..10 {
                    // Bounded: a thread that fails while holding must not
                    // leave the others waiting for ever.
                    assert!(
                        m.acquire_timeout(Duration::from_secs(30)).unwrap(),
                        "no turn within 30 s"
                    );
                    oracle.enter();
                    assert!(m.is_owned_by_current_thread());
                    oracle.leave();
                    m.release().unwrap();
                }
            });
        }
    });
    assert_eq!(oracle.max(), 1);
    assert_eq!(oracle.total.load(Ordering::SeqCst), 100);
    assert!(!m.is_acquired_in_this_process());
    assert!(children(c, &path).is_empty());
    c.close();
}

#[test]
fn mutex_is_reentrant_per_thread() {
    let path = unique("reentrant");
    let c = &clients(1)[0];
    let m = InterProcessMutex::new(c, &path).unwrap();
    let g1 = m.lock().unwrap();
    let g2 = m.lock().unwrap();
    let g3 = m.lock().unwrap();
    assert_eq!(
        m.participant_nodes().unwrap().len(),
        1,
        "one node for three holds"
    );
    // Another thread of the same process is blocked meanwhile.
    let other = m.clone();
    let got = thread::spawn(move || other.acquire_timeout(Duration::from_millis(500)).unwrap())
        .join()
        .unwrap();
    assert!(!got);
    drop(g3);
    drop(g2);
    assert!(m.is_owned_by_current_thread());
    drop(g1);
    assert!(!m.is_owned_by_current_thread());
    let err = m.release().unwrap_err();
    assert!(matches!(err, Error::IllegalState(_)), "{err}");
    assert!(children(c, &path).is_empty());
    c.close();
}

#[test]
fn a_timed_out_acquire_leaves_no_node() {
    let path = unique("timeout");
    let cs = clients(2);
    let holder = InterProcessMutex::new(&cs[0], &path).unwrap();
    let waiter = InterProcessMutex::new(&cs[1], &path).unwrap();
    let _g = holder.lock().unwrap();
    assert!(!waiter.acquire_timeout(Duration::from_millis(300)).unwrap());
    wait_until(
        Duration::from_secs(10),
        || children(&cs[0], &path).len() == 1,
        || format!("{:?}", children(&cs[0], &path)),
    );
    drop(_g);
    cs.iter().for_each(Client::close);
}

/// If someone deletes the waiter's own node while it waits, it must notice
/// when the holder's node goes, queue again and never claim a lock it has
/// no node for.
#[test]
fn a_waiter_whose_node_was_deleted_queues_again() {
    let path = unique("own-node");
    let cs = clients(3);
    let holder = InterProcessMutex::new(&cs[0], &path).unwrap();
    holder.acquire().unwrap();
    let waiter = InterProcessMutex::new(&cs[1], &path).unwrap();
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            assert!(waiter.acquire_timeout(Duration::from_secs(30)).unwrap());
            // Holding: our node is there, the holder's is gone.
            let nodes = waiter.participant_nodes().unwrap();
            waiter.release().unwrap();
            nodes
        });
        wait_until(
            Duration::from_secs(10),
            || children(&cs[2], &path).len() == 2,
            || format!("{:?}", children(&cs[2], &path)),
        );
        let queue = holder.participant_nodes().unwrap();
        assert_eq!(queue.len(), 2, "{queue:?}");
        let doomed = &queue[1];
        // Once the server shows the waiter's watch on the holder's node,
        // pull the waiter's node from under it and release at once: the
        // holder's node goes right after the waiter's.
        let watched = || shared_server().four_letter("wchp").unwrap_or_default();
        wait_until(
            Duration::from_secs(10),
            || watched().contains(&queue[0]),
            watched,
        );
        cs[2].delete().for_path(doomed).unwrap();
        holder.release().unwrap();
        let nodes = waiting.join().unwrap();
        assert_eq!(
            nodes.len(),
            1,
            "the waiter held the lock with nodes {nodes:?}"
        );
        assert_ne!(&nodes[0], doomed, "it queued again with a new node");
    });
    cs.iter().for_each(Client::close);
}

#[test]
fn waiters_get_the_lock_in_fifo_order_even_when_one_gives_up() {
    let path = unique("fifo");
    let cs = clients(5);
    let holder = InterProcessMutex::new(&cs[0], &path).unwrap();
    holder.acquire().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for (i, c) in cs.iter().enumerate().skip(1) {
        let (c, lock_path, order) = (c.clone(), path.clone(), Arc::clone(&order));
        handles.push(thread::spawn(move || {
            let m = InterProcessMutex::new(&c, &lock_path).unwrap();
            // Waiter 2 gives up while queued; the others must still proceed in order.
            let timeout = if i == 2 {
                Duration::from_millis(800)
            } else {
                Duration::from_secs(60)
            };
            if m.acquire_timeout(timeout).unwrap() {
                order.lock().unwrap().push(i);
                thread::sleep(Duration::from_millis(50));
                m.release().unwrap();
            }
        }));
        // Queue in a known order.
        let want = i + 1;
        wait_until(
            Duration::from_secs(10),
            || children(&cs[0], &path).len() == want,
            String::new,
        );
    }
    // Waiter 2 times out and must take its node with it.
    wait_until(
        Duration::from_secs(10),
        || children(&cs[0], &path).len() == 4,
        String::new,
    );
    holder.release().unwrap();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![1, 3, 4]);
    assert!(children(&cs[0], &path).is_empty());
    cs.iter().for_each(Client::close);
}

#[test]
fn a_holder_that_loses_its_session_learns_it_and_the_next_waiter_gets_in() {
    let path = unique("expiry");
    let cs = clients(2);
    let holder = InterProcessMutex::new(&cs[0], &path).unwrap();
    let g = holder.lock().unwrap();
    let states = cs[0].listen();
    let next = {
        let (c, path) = (cs[1].clone(), path.clone());
        thread::spawn(move || {
            let m = InterProcessMutex::new(&c, &path).unwrap();
            let got = m.acquire_timeout(Duration::from_secs(30)).unwrap();
            if got {
                m.release().unwrap();
            }
            got
        })
    };
    wait_until(
        Duration::from_secs(10),
        || children(&cs[1], &path).len() == 2,
        String::new,
    );
    cs[0].expire_session_for_testing().unwrap();
    assert!(next.join().unwrap(), "the waiter never got the lock");
    let ctx = Ctx::new(shared_server(), &cs[0]);
    ctx.expect(&states, ConnectionState::Lost, Duration::from_secs(20));
    assert!(g.is_lost(), "{}", ctx.dump());
    drop(g); // releasing a lost lock does not fail
    cs.iter().for_each(Client::close);
}

#[test]
fn multi_lock_is_all_or_nothing() {
    let (a, b) = (unique("multi-a"), unique("multi-b"));
    let cs = clients(2);
    let blocker = InterProcessMutex::new(&cs[1], &b).unwrap();
    let multi = InterProcessMultiLock::from_paths(&cs[0], &[&a, &b]).unwrap();
    // b is taken elsewhere: a must be rolled back.
    blocker.acquire().unwrap();
    assert!(!multi.acquire_timeout(Duration::from_millis(500)).unwrap());
    assert!(!multi.is_acquired_in_this_process());
    assert!(children(&cs[0], &a).is_empty(), "a was not rolled back");
    blocker.release().unwrap();
    multi.acquire().unwrap();
    assert!(multi.is_acquired_in_this_process());
    multi.release().unwrap();
    assert!(multi.release().is_err(), "double release is refused");
    assert!(children(&cs[0], &a).is_empty() && children(&cs[0], &b).is_empty());
    assert!(InterProcessMultiLock::new(Vec::new()).is_err());
    // Semaphore mutexes combine too.
    let sm: Vec<Box<dyn InterProcessLock>> = vec![
        Box::new(InterProcessSemaphoreMutex::new(&cs[0], &unique("multi-s1")).unwrap()),
        Box::new(InterProcessSemaphoreMutex::new(&cs[0], &unique("multi-s2")).unwrap()),
    ];
    let multi = InterProcessMultiLock::new(sm).unwrap();
    assert!(multi.acquire_timeout(Duration::from_secs(10)).unwrap());
    multi.release().unwrap();
    cs.iter().for_each(Client::close);
}

#[test]
fn semaphore_mutex_is_not_reentrant_and_releases_from_any_thread() {
    let path = unique("semmutex");
    let c = &clients(1)[0];
    let m = InterProcessSemaphoreMutex::new(c, &path).unwrap();
    m.acquire().unwrap();
    assert!(!m.acquire_timeout(Duration::from_millis(300)).unwrap());
    thread::scope(|s| s.spawn(|| m.release().unwrap()).join().unwrap());
    assert!(matches!(m.release(), Err(Error::IllegalState(_))));

    // The guard: its lease node (with the data set for it), its standing,
    // and the release on drop.
    m.set_node_data(b"job 7").unwrap();
    let g = m.lock().unwrap();
    let nodes = m.participant_nodes().unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert!(g.node_path().ends_with(&format!("/{}", nodes[0])));
    assert_eq!(c.get_data(&g.node_path()).unwrap().0, b"job 7");
    assert!(!g.is_lost() && !g.is_in_doubt());
    drop(g);
    assert!(!m.is_acquired_in_this_process());
    wait_until(
        Duration::from_secs(10),
        || m.participant_nodes().unwrap().is_empty(),
        || format!("left after the guard's drop: {:?}", m.participant_nodes()),
    );
    c.close();
}

#[test]
fn read_write_lock_rules() {
    let path = unique("rw");
    let cs = clients(4);
    let rws: Vec<_> = cs
        .iter()
        .map(|c| InterProcessReadWriteLock::new(c, &path).unwrap())
        .collect();
    // Readers overlap.
    assert!(
        rws[0]
            .read_lock()
            .acquire_timeout(Duration::from_secs(10))
            .unwrap(),
        "a reader on a free lock"
    );
    assert!(rws[1]
        .read_lock()
        .acquire_timeout(Duration::from_secs(10))
        .unwrap());
    // A writer waits behind earlier readers.
    assert!(!rws[2]
        .write_lock()
        .acquire_timeout(Duration::from_millis(400))
        .unwrap());
    rws[0].read_lock().release().unwrap();
    rws[1].read_lock().release().unwrap();
    // A writer is alone; a reader waits behind an earlier writer.
    assert!(
        rws[2]
            .write_lock()
            .acquire_timeout(Duration::from_secs(10))
            .unwrap(),
        "a writer once the readers left"
    );
    assert!(!rws[3]
        .read_lock()
        .acquire_timeout(Duration::from_millis(400))
        .unwrap());
    assert!(!rws[0]
        .write_lock()
        .acquire_timeout(Duration::from_millis(400))
        .unwrap());
    // Downgrade: write, then read, then release the write.
    assert!(
        rws[2]
            .read_lock()
            .acquire_timeout(Duration::from_secs(10))
            .unwrap(),
        "the write lock's holder did not get the read lock (downgrade)"
    );
    rws[2].write_lock().release().unwrap();
    assert!(rws[3]
        .read_lock()
        .acquire_timeout(Duration::from_secs(10))
        .unwrap());
    assert!(!rws[0]
        .write_lock()
        .acquire_timeout(Duration::from_millis(400))
        .unwrap());
    rws[3].read_lock().release().unwrap();
    // Upgrade is refused.
    assert!(!rws[2]
        .write_lock()
        .acquire_timeout(Duration::from_millis(400))
        .unwrap());
    assert_eq!(rws[2].read_lock().participant_nodes().unwrap().len(), 1);
    rws[2].read_lock().release().unwrap();
    wait_until(
        Duration::from_secs(10),
        || children(&cs[0], &path).is_empty(),
        || format!("{:?}", children(&cs[0], &path)),
    );
    cs.iter().for_each(Client::close);
}

#[test]
fn read_write_lock_under_contention_keeps_writers_alone() {
    let path = unique("rw-load");
    let cs = clients(6);
    let readers = AtomicI64::new(0);
    let writers = AtomicI64::new(0);
    let max_readers = AtomicI64::new(0);
    let violations = AtomicUsize::new(0);
    thread::scope(|s| {
        for (i, c) in cs.iter().enumerate() {
            let rw = InterProcessReadWriteLock::new(c, &path).unwrap();
            let (readers, writers, max_readers, violations) =
                (&readers, &writers, &max_readers, &violations);
            s.spawn(move || {
                for round in 0..8 {
                    if (i + round) % 3 == 0 {
                        let _g = rw.write_lock().lock().unwrap();
                        if writers.fetch_add(1, Ordering::SeqCst) != 0
                            || readers.load(Ordering::SeqCst) != 0
                        {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        thread::sleep(Duration::from_millis(5));
                        writers.fetch_sub(1, Ordering::SeqCst);
                    } else {
                        let _g = rw.read_lock().lock().unwrap();
                        let n = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        max_readers.fetch_max(n, Ordering::SeqCst);
                        if writers.load(Ordering::SeqCst) != 0 {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        thread::sleep(Duration::from_millis(20));
                        readers.fetch_sub(1, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    assert_eq!(violations.load(Ordering::SeqCst), 0);
    assert!(
        max_readers.load(Ordering::SeqCst) >= 2,
        "readers never overlapped"
    );
    assert!(children(&cs[0], &path).is_empty());
    cs.iter().for_each(Client::close);
}

/// Takes a lease, failing the test once no thread at all has been granted
/// one for [`STALL`] (a semaphore that lets nobody in fails within seconds
/// instead of hanging the suite). Waits in short timed rounds: a healthy
/// semaphore under this load grants one every few tens of milliseconds.
fn acquire_while_others_progress(sem: &InterProcessSemaphoreV2, oracle: &Oracle) -> Lease {
    const STALL: Duration = Duration::from_secs(15);
    let mut seen = oracle.total.load(Ordering::SeqCst);
    let mut since = Instant::now();
    loop {
        if let Some(lease) = sem.acquire_timeout(Duration::from_secs(3)).unwrap() {
            return lease;
        }
        let total = oracle.total.load(Ordering::SeqCst);
        if total != seen {
            (seen, since) = (total, Instant::now());
        }
        assert!(
            since.elapsed() < STALL,
            "no lease granted to any thread for {STALL:?} ({total} so far): the semaphore is stuck"
        );
    }
}

fn semaphore_load(threads: usize, max: u32, sessions: usize) {
    let path = unique(&format!("sem-{threads}-{max}"));
    let cs = clients(sessions);
    let oracle = Oracle::default();
    let start = Barrier::new(threads);
    let target = (max as usize).min(threads);
    thread::scope(|s| {
        for t in 0..threads {
            let c = &cs[t % sessions];
            let (oracle, start, path) = (&oracle, &start, &path);
            s.spawn(move || {
                let sem = InterProcessSemaphoreV2::new(c, path, max).unwrap();
                start.wait();
                for _ in 0..2 {
                    let lease = acquire_while_others_progress(&sem, oracle);
                    let holders = oracle.enter();
                    assert!(holders <= max as usize, "{holders} holders for max {max}");
                    // Hold on until `target` holders were seen at once (or a
                    // deadline): on a slow machine grants can be slower than
                    // a fixed hold, and the maximum would then go unreached
                    // for reasons that are not the semaphore's.
                    let until = Instant::now() + Duration::from_secs(10);
                    thread::sleep(Duration::from_millis(30));
                    while oracle.max() < target && Instant::now() < until {
                        thread::sleep(Duration::from_millis(5));
                    }
                    oracle.leave();
                    drop(lease);
                }
            });
        }
    });
    assert!(
        oracle.max() <= max as usize,
        "{} holders for max {max}",
        oracle.max()
    );
    assert_eq!(oracle.max(), target, "the maximum was never reached");
    assert!(children(&cs[0], &format!("{path}/leases")).is_empty());
    cs.iter().for_each(Client::close);
}

#[test]
fn semaphore_holders_never_exceed_the_maximum_10_threads() {
    for max in [1, 3, 11] {
        semaphore_load(10, max, 5);
    }
}

#[test]
fn semaphore_holders_never_exceed_the_maximum_100_threads() {
    for max in [1, 3, 11] {
        semaphore_load(100, max, 10);
    }
}

#[test]
fn semaphore_bad_input_and_lease_lifecycle() {
    let path = unique("sem-misc");
    let cs = clients(2);
    assert!(matches!(
        InterProcessSemaphoreV2::new(&cs[0], &path, 0),
        Err(Error::InvalidArgument(_))
    ));
    let sem = InterProcessSemaphoreV2::new(&cs[0], &path, 2).unwrap();
    // Refused at once (with a timeout, so that a semaphore that took three
    // of two for a real request fails the test instead of hanging it).
    for n in [0, 3] {
        let got = sem.acquire_many_timeout(n, Duration::from_secs(10));
        assert!(
            matches!(got, Err(Error::InvalidArgument(_))),
            "{n}: {got:?}"
        );
    }
    // The call without a timeout, on a thread the test bounds.
    let (tx, rx) = crossbeam_channel::bounded(1);
    {
        let sem = sem.clone();
        thread::spawn(move || {
            let _ = tx.send(sem.acquire_many(2));
        });
    }
    let mut leases = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("two free leases within 10 s")
        .unwrap();
    assert_eq!(sem.participant_nodes().unwrap().len(), 2);
    // A timed acquire that cannot complete gives back what it took.
    let other = InterProcessSemaphoreV2::new(&cs[1], &path, 2).unwrap();
    assert!(other
        .acquire_timeout(Duration::from_millis(300))
        .unwrap()
        .is_none());
    sem.return_lease(leases.pop().unwrap()).unwrap();
    assert!(other
        .acquire_many_timeout(2, Duration::from_millis(500))
        .unwrap()
        .is_none());
    wait_until(
        Duration::from_secs(10),
        || sem.participant_nodes().unwrap().len() == 1,
        String::new,
    );
    // Closing a client frees its leases.
    let held = other
        .acquire_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap();
    assert!(held.path().ends_with(&format!("/{}", held.node_name())));
    // No data given: the lease node says who holds it.
    let who = String::from_utf8(held.data().unwrap()).unwrap();
    assert!(
        who.contains(&format!("pid={}", std::process::id())),
        "{who}"
    );
    assert_eq!(sem.participant_nodes().unwrap().len(), 2);
    cs[1].close();
    wait_until(
        Duration::from_secs(10),
        || sem.participant_nodes().unwrap().len() == 1,
        String::new,
    );
    drop(held);
    drop(leases);
    assert!(sem.participant_nodes().unwrap().is_empty());
    cs[0].close();
}

/// Receives from `changes` until `want` arrives (earlier counts may come
/// first) or 10 s pass.
fn expect_count(changes: &crossbeam_channel::Receiver<i32>, want: i32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while let Ok(count) = changes.recv_deadline(deadline) {
        if count == want {
            return;
        }
        seen.push(count);
    }
    panic!("count {want} never arrived; saw {seen:?}");
}

#[test]
fn shared_count_seed_set_and_compare_and_set_across_sessions() {
    let path = unique("count");
    let cs = clients(2);
    let a = SharedCount::new(&cs[0], &path, 7).unwrap();
    assert_eq!(a.count(), 7);
    // Curator's format: a 4-byte big-endian int.
    assert_eq!(cs[0].get_data(&path).unwrap().0, 7i32.to_be_bytes());
    // The seed only applies to a node that does not exist yet.
    let b = SharedCount::new(&cs[1], &path, 99).unwrap();
    assert_eq!(b.count(), 7);
    assert_eq!(b.versioned_value(), a.versioned_value());

    let changes = b.listen();
    a.set_count(-3).unwrap();
    assert_eq!(a.count(), -3);
    expect_count(&changes, -3);
    assert_eq!(b.count(), -3);

    // Compare-and-set: a stale version loses, and refreshes the cache.
    let stale = a.versioned_value();
    assert!(b.try_set_count(&b.versioned_value(), 40).unwrap());
    assert!(!a.try_set_count(&stale, 41).unwrap());
    assert_eq!(
        a.count(),
        40,
        "a lost compare-and-set reads the count again"
    );
    assert!(a.try_set_count(&a.versioned_value(), 41).unwrap());
    expect_count(&changes, 41);
    assert_eq!(b.count(), 41);
    assert_eq!(b.versioned_value(), a.versioned_value());
    assert_eq!(cs[1].get_data(&path).unwrap().0, 41i32.to_be_bytes());

    // A version never read from the node (ZooKeeper's "any") is refused.
    let mut any = a.versioned_value();
    any.version = -1;
    assert!(matches!(
        a.try_set_count(&any, 1),
        Err(Error::InvalidArgument(_))
    ));
    // Closed: the last count stays, setting fails; clones share the close.
    let b2 = b.clone();
    b.close();
    assert!(matches!(b2.set_count(1), Err(Error::IllegalState(_))));
    assert_eq!(b2.count(), 41);
    assert!(matches!(
        SharedCount::new(&cs[0], "/", 1),
        Err(Error::InvalidPath { .. })
    ));
    drop(a);
    cs.iter().for_each(Client::close);
}

#[test]
fn shared_count_rejects_malformed_data_and_follows_a_recreated_node() {
    let path = unique("count-bad");
    let cs = clients(2);
    let c = &cs[0];
    c.create()
        .creating_parents_if_needed()
        .for_path(&path, b"12345")
        .unwrap();
    match SharedCount::new(c, &path, 1) {
        Err(Error::IllegalState(m)) => assert!(m.contains("5 bytes"), "{m}"),
        other => panic!("five bytes read as a count: {other:?}"),
    }
    c.set_data(&path, b"", None).unwrap();
    assert!(matches!(
        SharedCount::new(c, &path, 1),
        Err(Error::IllegalState(_))
    ));

    // Bad data written later leaves the count as it was.
    c.set_data(&path, &5i32.to_be_bytes(), None).unwrap();
    let count = SharedCount::new(&cs[1], &path, 1).unwrap();
    assert_eq!(count.count(), 5);
    let changes = count.listen();
    c.set_data(&path, b"xy", None).unwrap();
    c.set_data(&path, &6i32.to_be_bytes(), None).unwrap();
    expect_count(&changes, 6);
    assert_eq!(count.count(), 6);

    // A deleted and re-created node starts again at version 0. While it
    // is gone the count watches for its return (one watch, on the reader's
    // client, which nothing else uses).
    let events_before = cs[1].metrics().watch_events;
    c.delete().for_path(&path).unwrap();
    wait_until(
        Duration::from_secs(10),
        || cs[1].metrics().watch_events > events_before && cs[1].pending_watches() == 1,
        || {
            format!(
                "the count's watches while its node is gone: {}",
                cs[1].pending_watches()
            )
        },
    );
    c.create().for_path(&path, &9i32.to_be_bytes()).unwrap();
    expect_count(&changes, 9);
    let v = count.versioned_value();
    assert_eq!((v.version, v.value), (0, 9));

    // Closed, it stops watching: the next change is its watch's last event.
    count.close();
    let events_before = cs[1].metrics().watch_events;
    c.set_data(&path, &10i32.to_be_bytes(), None).unwrap();
    // The event is counted before its watch leaves the table: wait for
    // both.
    wait_until(
        Duration::from_secs(10),
        || cs[1].metrics().watch_events > events_before && cs[1].pending_watches() == 0,
        || format!("watches after the change: {}", cs[1].pending_watches()),
    );
    let window = std::time::Instant::now();
    while window.elapsed() < Duration::from_secs(1) {
        let watches = cs[1].pending_watches();
        assert_eq!(watches, 0, "a closed count watches again");
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(count.count(), 9, "a closed count keeps its last value");
    cs.iter().for_each(Client::close);
}

#[test]
fn a_shared_count_semaphore_waits_for_more_than_the_current_maximum() {
    let path = unique("sem-count-many");
    let cs = clients(2);
    let limit = SharedCount::new(&cs[0], &unique("sem-count-many-max"), 1).unwrap();
    let sem = InterProcessSemaphoreV2::with_shared_count(&cs[1], &path, &limit).unwrap();
    assert_eq!(sem.max_leases(), 1);
    // Two leases of one: a wait that times out, not a refusal.
    assert!(sem
        .acquire_many_timeout(2, Duration::from_millis(300))
        .unwrap()
        .is_none());
    wait_until(
        Duration::from_secs(10),
        || sem.participant_nodes().unwrap().is_empty(),
        String::new,
    );
    thread::scope(|s| {
        let waiting = s.spawn(|| sem.acquire_many_timeout(2, Duration::from_secs(30)));
        wait_until(
            Duration::from_secs(10),
            || sem.participant_nodes().unwrap().len() == 2,
            String::new,
        );
        limit.set_count(2).unwrap();
        let leases = waiting
            .join()
            .unwrap()
            .unwrap()
            .expect("woken by the count");
        assert_eq!(leases.len(), 2);
    });
    assert_eq!(sem.max_leases(), 2);
    // A count below 1 lets nobody in.
    limit.set_count(-5).unwrap();
    wait_until(
        Duration::from_secs(10),
        || sem.max_leases() == 0,
        String::new,
    );
    assert!(sem
        .acquire_timeout(Duration::from_millis(300))
        .unwrap()
        .is_none());
    wait_until(
        Duration::from_secs(10),
        || sem.participant_nodes().unwrap().is_empty(),
        String::new,
    );
    cs.iter().for_each(Client::close);
}

/// Holders against a limit the test moves: an entry that makes more holders
/// than the limit is a violation.
#[derive(Default)]
struct LimitOracle {
    holders: Oracle,
    limit: AtomicUsize,
    violations: Mutex<Vec<(usize, usize)>>,
}

impl LimitOracle {
    fn enter(&self) {
        let limit = self.limit.load(Ordering::SeqCst);
        let n = self.holders.enter();
        if n > limit {
            self.violations.lock().unwrap().push((n, limit));
        }
    }
    fn leave(&self) {
        self.holders.leave();
    }
    fn now(&self) -> usize {
        self.holders.now.load(Ordering::SeqCst)
    }
    fn total(&self) -> usize {
        self.holders.total.load(Ordering::SeqCst)
    }
}

#[test]
fn semaphore_maximum_follows_a_shared_count() {
    const WORKERS: usize = 5;
    let path = unique("sem-count");
    let count_path = unique("sem-count-max");
    let cs = clients(WORKERS + 1);
    let admin = SharedCount::new(&cs[0], &count_path, 1).unwrap();
    // Each session follows the count through its own watch.
    let counts: Vec<SharedCount> = cs[1..]
        .iter()
        .map(|c| SharedCount::new(c, &count_path, 1).unwrap())
        .collect();
    let oracle = LimitOracle::default();
    oracle.limit.store(1, Ordering::SeqCst);
    // One token lets one holder return its lease.
    let (release, may_release) = crossbeam_channel::unbounded::<()>();
    let leases_path = format!("{path}/leases");
    let dump = || {
        format!(
            "holders {}, total {}, leases {:?}, violations {:?}",
            oracle.now(),
            oracle.total(),
            children(&cs[0], &leases_path),
            oracle.violations.lock().unwrap()
        )
    };
    // Cancelled if this thread panics, so that a failed step ends the
    // workers still queued at once, not at their 60 s timeout.
    let gave_up = CancelToken::new();
    struct CancelOnDrop<'a>(&'a CancelToken);
    impl Drop for CancelOnDrop<'_> {
        fn drop(&mut self) {
            self.0.cancel();
        }
    }
    thread::scope(|s| {
        // Dropped if this thread panics, so that no worker waits forever.
        let release = release;
        let _give_up = CancelOnDrop(&gave_up);
        for (c, count) in cs[1..].iter().zip(&counts) {
            let (oracle, may_release, path) = (&oracle, may_release.clone(), &path);
            let gave_up = &gave_up;
            s.spawn(move || {
                let sem = InterProcessSemaphoreV2::with_shared_count(c, path, count).unwrap();
                let lease = sem
                    .acquire_many_cancellable(1, Duration::from_secs(60), gave_up)
                    .unwrap()
                    .expect("a lease within 60 s");
                oracle.enter();
                may_release.recv().unwrap();
                oracle.leave();
                drop(lease);
            });
        }
        // `holders` hold, none has returned a lease yet, and one more waits
        // with its node among the leases.
        let settled = |holders: usize| {
            wait_until(Duration::from_secs(20), || oracle.now() == holders, dump);
            wait_until(
                Duration::from_secs(10),
                || children(&cs[0], &leases_path).len() == holders + 1,
                dump,
            );
            assert_eq!(oracle.total(), holders, "{}", dump());
        };
        // Maximum 1: one holder, the others wait.
        settled(1);

        // Raise to 3: nobody returns a lease, so only the count can wake
        // the waiter.
        oracle.limit.store(3, Ordering::SeqCst);
        admin.set_count(3).unwrap();
        settled(3);

        // Lower to 1 with 3 holders: none loses its lease, and nobody new
        // gets one until all three are back.
        oracle.limit.store(1, Ordering::SeqCst);
        admin.set_count(1).unwrap();
        // Until a session has heard of the change it may still grant by the
        // old maximum (so may Curator); the rule holds from then on.
        wait_until(
            Duration::from_secs(10),
            || counts.iter().all(|c| c.count() == 1),
            dump,
        );
        for holders in [2, 1] {
            release.send(()).unwrap();
            wait_until(
                Duration::from_secs(10),
                || children(&cs[0], &leases_path).len() == holders + 1,
                dump,
            );
            assert_eq!(
                oracle.total(),
                3,
                "a lease beyond the new maximum: {}",
                dump()
            );
        }
        release.send(()).unwrap();
        // The last of the three is back: the next waiter gets in, alone.
        wait_until(
            Duration::from_secs(20),
            || oracle.total() == 4 && oracle.now() == 1,
            dump,
        );
        release.send(()).unwrap();
        wait_until(Duration::from_secs(20), || oracle.total() == 5, dump);
        release.send(()).unwrap();
    });
    assert_eq!(oracle.total(), WORKERS);
    assert_eq!(oracle.holders.max(), 3);
    assert!(
        oracle.violations.lock().unwrap().is_empty(),
        "more holders than the maximum: {}",
        dump()
    );
    wait_until(
        Duration::from_secs(10),
        || children(&cs[0], &leases_path).is_empty(),
        dump,
    );
    cs.iter().for_each(Client::close);
}

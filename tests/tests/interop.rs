//! Rust and Apache Curator (Java, Debian's libcurator-recipes-java) share
//! locks on one real server: they exclude each other, queue in order and
//! see each other's nodes.

mod common;

use std::time::Duration;

use common::*;
use latchkey_recipes::{
    InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2, SharedCount,
};
use latchkey_test::peers::{peer_available, Peer, PeerKind};

const STEP: Duration = Duration::from_secs(60);

fn curator() -> Option<Peer> {
    if let Err(why) = peer_available(PeerKind::Curator) {
        eprintln!("SKIPPED: Curator peer unavailable: {why}");
        return None;
    }
    Some(
        Peer::start(PeerKind::Curator, &shared_server().connect_string())
            .expect("start Curator peer"),
    )
}

fn ok(peer: &mut Peer, cmd: &str) -> String {
    let reply = peer.command(cmd, STEP).expect("peer answered");
    assert!(reply.starts_with("OK"), "{cmd} -> {reply}");
    reply
}

#[test]
fn rust_and_curator_mutexes_exclude_each_other_and_queue_in_order() {
    let Some(mut java) = curator() else { return };
    let path = unique("interop-mutex");
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let m = InterProcessMutex::new(&c, &path).unwrap();

    assert_eq!(
        ok(&mut java, &format!("mutex {path} acquire 10000")),
        "OK acquired"
    );
    assert!(!m.acquire_timeout(Duration::from_millis(300)).unwrap());
    let nodes = m.participant_nodes().unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert!(
        nodes[0].contains("/_c_") && nodes[0].contains("-lock-"),
        "{nodes:?}"
    );

    // Rust queues behind Java; Java sees both nodes, its own first.
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let got = m.acquire_timeout(Duration::from_secs(30)).unwrap();
            if got {
                m.release().unwrap();
            }
            got
        });
        wait_until(
            Duration::from_secs(10),
            || m.participant_nodes().unwrap().len() == 2,
            String::new,
        );
        let listed = ok(&mut java, &format!("mutex {path} participants"));
        let rust_nodes = m.participant_nodes().unwrap();
        let java_view: Vec<&str> = listed.trim_start_matches("OK ").split(',').collect();
        let rust_view: Vec<&str> = rust_nodes
            .iter()
            .map(|p| p.rsplit('/').next().unwrap())
            .collect();
        assert_eq!(
            java_view, rust_view,
            "both sides list the queue in the same order"
        );
        assert_eq!(
            ok(&mut java, &format!("mutex {path} release")),
            "OK released"
        );
        assert!(
            waiter.join().unwrap(),
            "Rust never got the lock after Java released it"
        );
    });
    let g = m.lock().unwrap();
    assert_eq!(
        ok(&mut java, &format!("mutex {path} acquire 300")),
        "OK timeout"
    );
    drop(g);
    assert_eq!(
        ok(&mut java, &format!("mutex {path} acquire 10000")),
        "OK acquired"
    );
    ok(&mut java, &format!("mutex {path} release"));
    ok(&mut java, "quit");
    c.close();
}

#[test]
fn rust_and_curator_read_write_locks_follow_the_rules() {
    let Some(mut java) = curator() else { return };
    let path = unique("interop-rw");
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();

    // Readers from both sides overlap; writers from either side wait.
    assert_eq!(
        ok(&mut java, &format!("read {path} acquire 10000")),
        "OK acquired"
    );
    assert!(rw
        .read_lock()
        .acquire_timeout(Duration::from_secs(10))
        .unwrap());
    assert!(!rw
        .write_lock()
        .acquire_timeout(Duration::from_millis(300))
        .unwrap());
    assert_eq!(
        ok(&mut java, &format!("write {path} acquire 300")),
        "OK timeout"
    );
    ok(&mut java, &format!("read {path} release"));
    rw.read_lock().release().unwrap();

    // A Rust writer is alone: Java readers and writers wait.
    rw.write_lock().acquire().unwrap();
    assert_eq!(
        ok(&mut java, &format!("read {path} acquire 300")),
        "OK timeout"
    );
    assert_eq!(
        ok(&mut java, &format!("write {path} acquire 300")),
        "OK timeout"
    );
    let listed = ok(&mut java, &format!("write {path} participants"));
    assert!(listed.contains("__WRIT__"), "{listed}");
    rw.write_lock().release().unwrap();

    // A Java writer holds; a Rust reader waits.
    assert_eq!(
        ok(&mut java, &format!("write {path} acquire 10000")),
        "OK acquired"
    );
    assert!(!rw
        .read_lock()
        .acquire_timeout(Duration::from_millis(300))
        .unwrap());
    ok(&mut java, &format!("write {path} release"));
    assert!(rw
        .read_lock()
        .acquire_timeout(Duration::from_secs(10))
        .unwrap());
    rw.read_lock().release().unwrap();
    ok(&mut java, "quit");
    c.close();
}

#[test]
fn rust_and_curator_semaphores_share_one_maximum() {
    let Some(mut java) = curator() else { return };
    let path = unique("interop-sem");
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let sem = InterProcessSemaphoreV2::new(&c, &path, 2).unwrap();

    assert_eq!(
        ok(&mut java, &format!("sem {path} 2 acquire 1 10000")),
        "OK acquired 1"
    );
    let lease = sem
        .acquire_timeout(Duration::from_secs(10))
        .unwrap()
        .expect("second lease");
    assert!(sem
        .acquire_timeout(Duration::from_millis(300))
        .unwrap()
        .is_none());
    assert_eq!(
        ok(&mut java, &format!("sem {path} 2 acquire 1 300")),
        "OK timeout"
    );
    let listed = ok(&mut java, &format!("sem {path} 2 participants"));
    assert_eq!(
        listed.trim_start_matches("OK ").split(',').count(),
        2,
        "{listed}"
    );
    assert_eq!(sem.participant_nodes().unwrap().len(), 2);
    ok(&mut java, &format!("sem {path} 2 release"));
    let again = sem.acquire_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        again.is_some(),
        "the lease Java returned was not available to Rust"
    );
    drop((lease, again));
    ok(&mut java, "quit");
    c.close();
}

/// Rust sessions and two Curator JVMs hammer one mutex; an oracle in this
/// process counts holders. A Java hold is counted from its "acquired"
/// reply to the moment we ask it to release, a window inside its real hold,
/// so any overlap the oracle sees is a real one.
#[test]
fn rust_and_curator_mutexes_never_overlap_under_contention() {
    let Some(java_a) = curator() else { return };
    let java_b = Peer::start(PeerKind::Curator, &shared_server().connect_string())
        .expect("start a second Curator peer");
    let path = unique("interop-contended");
    let holders = std::sync::atomic::AtomicUsize::new(0);
    let overlaps = std::sync::atomic::AtomicUsize::new(0);
    let java_cycles = std::sync::atomic::AtomicUsize::new(0);
    let rust_cycles = std::sync::atomic::AtomicUsize::new(0);
    let enter_and_leave = || {
        use std::sync::atomic::Ordering::SeqCst;
        if holders.fetch_add(1, SeqCst) != 0 {
            overlaps.fetch_add(1, SeqCst);
        }
        std::thread::sleep(Duration::from_millis(2));
        holders.fetch_sub(1, SeqCst);
    };
    const CYCLES: usize = 25;
    std::thread::scope(|s| {
        for mut java in [java_a, java_b] {
            let (path, enter_and_leave, java_cycles) = (&path, &enter_and_leave, &java_cycles);
            s.spawn(move || {
                for _ in 0..CYCLES {
                    assert_eq!(
                        ok(&mut java, &format!("mutex {path} acquire 60000")),
                        "OK acquired"
                    );
                    enter_and_leave();
                    ok(&mut java, &format!("mutex {path} release"));
                    java_cycles.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                ok(&mut java, "quit");
            });
        }
        for _ in 0..3 {
            let (path, enter_and_leave, rust_cycles) = (&path, &enter_and_leave, &rust_cycles);
            s.spawn(move || {
                let c = connect(&shared_server().connect_string(), Duration::from_secs(10));
                let m = InterProcessMutex::new(&c, path).unwrap();
                for _ in 0..CYCLES {
                    let g = m.try_lock_for(Duration::from_secs(60)).unwrap();
                    assert!(g.is_some(), "a Rust contender starved");
                    enter_and_leave();
                    drop(g);
                    rust_cycles.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                c.close();
            });
        }
    });
    use std::sync::atomic::Ordering::SeqCst;
    assert_eq!(java_cycles.load(SeqCst), 2 * CYCLES);
    assert_eq!(rust_cycles.load(SeqCst), 3 * CYCLES);
    assert_eq!(overlaps.load(SeqCst), 0, "Rust and Java holders overlapped");
    let observer = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let left = InterProcessMutex::new(&observer, &path)
        .unwrap()
        .participant_nodes()
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    observer.close();
}

#[test]
fn rust_and_curator_shared_counts_see_each_others_sets() {
    let Some(mut java) = curator() else { return };
    let path = unique("interop-count");
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));
    // Curator creates the node with its seed; Rust reads Curator's bytes.
    assert_eq!(ok(&mut java, &format!("count {path} 12 get")), "OK 12");
    let count = SharedCount::new(&c, &path, 99).unwrap();
    assert_eq!(count.count(), 12);

    ok(&mut java, &format!("count {path} 12 set -7"));
    wait_until(
        Duration::from_secs(10),
        || count.count() == -7,
        || format!("Rust sees {count:?}"),
    );
    count.set_count(1_234_567).unwrap();
    wait_until(
        Duration::from_secs(10),
        || ok(&mut java, &format!("count {path} 12 get")) == "OK 1234567",
        String::new,
    );
    ok(&mut java, "quit");
    c.close();
}

/// Debian's Curator (5.4) holds the write lock, a Rust writer queues, and
/// the Java process downgrades the way Curator 5.5+ does (its read node
/// emulated on the wire by the peer's `read55`): the Rust writer must stay
/// out while that read node exists. The oracle is a flag in this process,
/// set from the peer's "acquired" reply to the moment we ask it to release,
/// a window inside its real read hold.
#[test]
fn a_rust_writer_waits_for_a_curator55_downgrade_read() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let Some(mut java) = curator() else { return };
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let started = std::time::Instant::now();
    let (mut runs, mut overlaps) = (0, 0);
    while runs < 10 && started.elapsed() < Duration::from_secs(60) {
        let path = unique("interop-rw55");
        let reading = AtomicBool::new(false);
        let overlap = AtomicBool::new(false);
        ok(&mut java, &format!("write {path} acquire 10000"));
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let (c, path, reading, overlap) = (&c, &path, &reading, &overlap);
            let writer = s.spawn(move || {
                let rw = InterProcessReadWriteLock::new(c, path).unwrap();
                let got = rw.write_lock().acquire_timeout(STEP).unwrap();
                if got {
                    overlap.store(reading.load(SeqCst), SeqCst);
                    let _ = tx.send(());
                    rw.write_lock().release().unwrap();
                }
                got
            });
            wait_until(
                STEP,
                || c.get_children(path).map(|v| v.len() == 2).unwrap_or(false),
                || format!("{:?}", c.get_children(path)),
            );
            let reply = ok(&mut java, &format!("read55 {path} acquire"));
            assert!(reply.contains("__READ__"), "{reply}");
            reading.store(true, SeqCst);
            ok(&mut java, &format!("write {path} release"));
            let early = rx.recv_timeout(Duration::from_millis(300)).is_ok();
            reading.store(false, SeqCst);
            ok(&mut java, &format!("read55 {path} release"));
            assert!(early || rx.recv_timeout(STEP).is_ok(), "the writer starved");
            assert!(writer.join().unwrap());
        });
        runs += 1;
        overlaps += usize::from(overlap.load(SeqCst));
    }
    eprintln!("Curator 5.5+ downgrade emulated: {runs} runs, {overlaps} overlaps");
    assert!(runs >= 3, "only {runs} runs in the time budget");
    assert_eq!(overlaps, 0, "{overlaps} of {runs} runs overlapped");
    c.close();
}

/// The other way round: a Rust holder downgrades while Debian's Curator
/// writer queues. Curator (any version) sorts the Rust read node with the
/// Rust write node, so its writer waits for the read to go.
#[test]
fn a_curator_writer_waits_for_a_rust_downgrade_read() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let Some(mut java) = curator() else { return };
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));
    for _ in 0..5 {
        let path = unique("interop-rw-downgrade");
        let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();
        let reading = AtomicBool::new(false);
        rw.write_lock().acquire().unwrap();
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let (java, path, reading) = (&mut java, &path, &reading);
            s.spawn(move || {
                let reply = ok(java, &format!("write {path} acquire 60000"));
                let _ = tx.send((reply, reading.load(SeqCst)));
                ok(java, &format!("write {path} release"));
            });
            wait_until(
                STEP,
                || c.get_children(path).map(|v| v.len() == 2).unwrap_or(false),
                || format!("{:?}", c.get_children(path)),
            );
            assert!(rw.read_lock().acquire_timeout(STEP).unwrap());
            reading.store(true, SeqCst);
            rw.write_lock().release().unwrap();
            if let Ok((reply, _)) = rx.recv_timeout(Duration::from_millis(300)) {
                panic!("the Curator writer got in beside the Rust read: {reply}");
            }
            reading.store(false, SeqCst);
            rw.read_lock().release().unwrap();
            let (reply, overlapped) = rx.recv_timeout(STEP).expect("the Curator writer starved");
            assert_eq!(reply, "OK acquired");
            assert!(!overlapped);
        });
    }
    c.close();
}

/// Queue order agrees with Curator's for children latchkey did not make
/// and for a sequence counter that wrapped (Curator compares the text after
/// the lock name, not a number). The children are made by hand on a real
/// server; both libraries list them through their own participant lists.
#[test]
fn rust_and_curator_sort_foreign_and_wrapped_children_alike() {
    let Some(mut java) = curator() else { return };
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let odd_tails = [
        "0000000002",
        "5",
        "-2147483648",
        "-2147483647",
        "-000000001",
        "2147483647",
        "abc",
        "",
        "!",
        "0",
        "\u{FF61}",
        "\u{e9}",
    ];
    let lists = |java: &mut Peer, kind: &str, path: &str, rust: Vec<String>| {
        let reply = ok(java, &format!("{kind} {path} participants"));
        let theirs: Vec<&str> = reply["OK ".len()..]
            .split(',')
            .filter(|s| !s.is_empty())
            .collect();
        let ours: Vec<&str> = rust.iter().map(|p| p.rsplit('/').next().unwrap()).collect();
        assert_eq!(ours, theirs, "{kind} queue order differs from Curator's");
    };

    let path = unique("interop-sort-mutex");
    for (i, tail) in odd_tails.iter().enumerate() {
        c.create()
            .creating_parents_if_needed()
            .for_path(&format!("{path}/_c_{i}-lock-{tail}"), &[])
            .unwrap();
    }
    let m = InterProcessMutex::new(&c, &path).unwrap();
    lists(&mut java, "mutex", &path, m.participant_nodes().unwrap());
    // "!" sorts first for both: neither takes the lock past it.
    assert!(!m.acquire_timeout(Duration::from_millis(300)).unwrap());
    assert_eq!(
        ok(&mut java, &format!("mutex {path} acquire 300")),
        "OK timeout"
    );

    let path = unique("interop-sort-rw");
    for (i, tail) in odd_tails.iter().enumerate() {
        let name = if i % 2 == 0 { "__READ__" } else { "__WRIT__" };
        c.create()
            .creating_parents_if_needed()
            .for_path(&format!("{path}/_c_{i}-{name}{tail}"), &[])
            .unwrap();
    }
    let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();
    lists(
        &mut java,
        "read",
        &path,
        rw.read_lock().participant_nodes().unwrap(),
    );
    lists(
        &mut java,
        "write",
        &path,
        rw.write_lock().participant_nodes().unwrap(),
    );
    c.close();
}

/// Curator's `Revoker` reaches a revocable Rust holder: the listener runs,
/// on its own thread, and the holder lets go.
#[test]
fn curators_revoker_reaches_a_revocable_rust_holder() {
    let Some(mut java) = curator() else { return };
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let path = unique("interop-revoke");
    let m = InterProcessMutex::new(&c, &path).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    m.make_revocable(move || {
        let _ = tx.lock().unwrap().send(());
    });
    m.acquire().unwrap();
    let node = m.lock_node_path().unwrap();
    assert_eq!(ok(&mut java, &format!("revoke {node}")), "OK revoked");
    rx.recv_timeout(STEP).expect("the listener never ran");
    m.release().unwrap();
    assert_eq!(
        ok(&mut java, &format!("mutex {path} acquire 10000")),
        "OK acquired"
    );
    ok(&mut java, &format!("mutex {path} release"));
    c.close();
}

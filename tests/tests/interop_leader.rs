//! Rust and Apache Curator (Java) in the same elections, counters and
//! barriers on one real server, each side seeing the other.

mod common;

use std::time::Duration;

use common::*;
use latchkey_recipes::LeaderLatch;
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
    reply.trim_start_matches("OK").trim().to_owned()
}

#[test]
fn rust_and_curator_latches_share_one_election() {
    let Some(mut java) = curator() else { return };
    let path = unique("interop-latch");
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));

    // Java first: it leads, Rust waits and sees Java as leader.
    ok(&mut java, &format!("latch {path} java start"));
    assert_eq!(
        ok(&mut java, &format!("latch {path} java await 10000")),
        "true"
    );
    let rust = LeaderLatch::with_id(&c, &path, "rust").unwrap();
    rust.start().unwrap();
    wait_until(
        Duration::from_secs(10),
        || rust.participants().map(|p| p.len() == 2).unwrap_or(false),
        String::new,
    );
    assert!(!rust.await_leadership(Duration::from_millis(500)).unwrap());
    assert_eq!(rust.leader().unwrap().id, "java");
    let ids: Vec<String> = rust
        .participants()
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, ["java", "rust"]);
    // Java reads the same queue from Rust's node.
    assert_eq!(
        ok(&mut java, &format!("latch {path} java participants")),
        "java,rust"
    );
    assert_eq!(ok(&mut java, &format!("latch {path} java has")), "true");

    // Java leaves: Rust leads, and Java sees it.
    ok(&mut java, &format!("latch {path} java close"));
    assert!(rust.await_leadership(Duration::from_secs(10)).unwrap());
    ok(&mut java, &format!("latch {path} java start"));
    wait_until(
        Duration::from_secs(10),
        || rust.participants().map(|p| p.len() == 2).unwrap_or(false),
        String::new,
    );
    assert_eq!(ok(&mut java, &format!("latch {path} java leader")), "rust");
    assert_eq!(
        ok(&mut java, &format!("latch {path} java await 300")),
        "false"
    );
    assert_eq!(
        ok(&mut java, &format!("latch {path} java participants")),
        "rust,java"
    );

    // Rust leaves: Java leads.
    rust.close().unwrap();
    assert_eq!(
        ok(&mut java, &format!("latch {path} java await 10000")),
        "true"
    );
    ok(&mut java, &format!("latch {path} java close"));
    java.quit(STEP).unwrap();
}

#[test]
fn rust_and_curator_selectors_take_turns_on_one_lock() {
    use latchkey_recipes::LeaderSelector;
    let Some(mut java) = curator() else { return };
    let path = unique("interop-selector");
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));

    ok(&mut java, &format!("selector {path} java start"));
    assert_eq!(
        ok(&mut java, &format!("selector {path} java await 10000")),
        "true"
    );
    let (tx, rx) = crossbeam_channel::unbounded();
    let rust = LeaderSelector::new(&c, &path, "rust", move |l| {
        let _ = tx.send("lead");
        l.wait(Duration::from_millis(500));
    })
    .unwrap();
    rust.start().unwrap();
    wait_until(
        Duration::from_secs(10),
        || rust.participants().map(|p| p.len() == 2).unwrap_or(false),
        String::new,
    );
    // Each side sees the other, Java leading.
    let ids: Vec<String> = rust
        .participants()
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, ["java", "rust"]);
    assert_eq!(rust.leader().unwrap().id, "java");
    assert_eq!(
        ok(&mut java, &format!("selector {path} java participants")),
        "java,rust"
    );
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "Rust led beside Java"
    );

    // Java's term ends: Rust leads, Java (requeued) sees it, and gets its
    // next term once Rust's ends.
    ok(&mut java, &format!("selector {path} java release"));
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("lead"));
    assert_eq!(
        ok(&mut java, &format!("selector {path} java leader")),
        "rust"
    );
    assert_eq!(ok(&mut java, &format!("selector {path} java has")), "false");
    assert_eq!(
        ok(&mut java, &format!("selector {path} java await 10000")),
        "true"
    );
    assert_eq!(ok(&mut java, &format!("selector {path} java terms")), "2");
    rust.close();
    ok(&mut java, &format!("selector {path} java release"));
    ok(&mut java, &format!("selector {path} java close"));
    java.quit(STEP).unwrap();
}

#[test]
fn rust_and_curator_count_on_one_atomic_long() {
    use latchkey_framework::RetryNTimes;
    use latchkey_recipes::{DistributedAtomicInteger, DistributedAtomicLong};
    let Some(mut java) = curator() else { return };
    let path = unique("interop-atomic");
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let counter =
        DistributedAtomicLong::new(&c, &path, RetryNTimes::new(1000, Duration::from_millis(1)))
            .unwrap();

    // Each side reads what the other wrote: Curator's 8-byte format.
    assert_eq!(ok(&mut java, &format!("atomic {path} add 41")), "true 0 41");
    let v = counter.increment().unwrap();
    assert_eq!((v.succeeded, v.pre_value, v.post_value), (true, 41, 42));
    assert_eq!(ok(&mut java, &format!("atomic {path} get")), "42");
    assert_eq!(c.get_data(&path).unwrap().0, 42i64.to_be_bytes());

    // Both increment at once; none is lost.
    let per_side = 100;
    let rust_ok = std::thread::scope(|s| {
        let rust = s.spawn(|| {
            (0..per_side)
                .filter(|_| counter.increment().unwrap().succeeded)
                .count()
        });
        let java_ok: usize = ok(&mut java, &format!("atomic {path} bump {per_side}"))
            .parse()
            .unwrap();
        assert_eq!(java_ok, per_side, "Curator's increments all succeeded");
        rust.join().unwrap()
    });
    assert_eq!(rust_ok, per_side);
    assert_eq!(counter.get().unwrap().post_value, 42 + 2 * per_side as i64);
    assert_eq!(
        ok(&mut java, &format!("atomic {path} get")),
        (42 + 2 * per_side).to_string()
    );

    // A 4-byte integer is not a long: both sides refuse to misread it.
    let int_path = unique("interop-atomic-int");
    let int =
        DistributedAtomicInteger::new(&c, &int_path, RetryNTimes::new(3, Duration::ZERO)).unwrap();
    int.add(7).unwrap();
    assert_eq!(c.get_data(&int_path).unwrap().0, 7i32.to_be_bytes());
    let reply = java
        .command(&format!("atomic {int_path} get"), STEP)
        .unwrap();
    assert!(
        reply.starts_with("ERR") && reply.contains("Corrupted"),
        "{reply}"
    );
    java.quit(STEP).unwrap();
}

#[test]
fn rust_and_curator_share_barriers() {
    use latchkey_recipes::{DistributedBarrier, DistributedDoubleBarrier};
    let Some(mut java) = curator() else { return };
    let c = connect(&shared_server().connect_string(), Duration::from_secs(10));

    // Java sets, Rust waits; Rust removes, Java passes.
    let path = unique("interop-barrier");
    ok(&mut java, &format!("barrier {path} set"));
    let gate = DistributedBarrier::new(&c, &path).unwrap();
    assert!(!gate.wait_on_barrier(Duration::from_millis(300)).unwrap());
    gate.remove_barrier().unwrap();
    assert_eq!(ok(&mut java, &format!("barrier {path} wait 5000")), "true");
    gate.set_barrier().unwrap();
    assert_eq!(ok(&mut java, &format!("barrier {path} wait 300")), "false");
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            gate.remove_barrier().unwrap();
        });
        assert_eq!(ok(&mut java, &format!("barrier {path} wait 30000")), "true");
    });

    // Two Rust members and one Java member enter and leave together.
    let path = unique("interop-double-barrier");
    let cs = clients(2, Duration::from_secs(10));
    std::thread::scope(|s| {
        let rust: Vec<_> = cs
            .iter()
            .map(|c| {
                let path = &path;
                s.spawn(move || {
                    let b = DistributedDoubleBarrier::new(c, path, 3).unwrap();
                    let entered = b.enter(Duration::from_secs(30)).unwrap();
                    let left = b.leave(Duration::from_secs(30)).unwrap();
                    (entered, left)
                })
            })
            .collect();
        // Both Rust members join and wait for Java.
        wait_until(
            Duration::from_secs(10),
            || c.get_children(&path).is_ok_and(|ch| ch.len() == 2),
            || format!("barrier nodes: {:?}", c.get_children(&path)),
        );
        assert_eq!(
            ok(&mut java, &format!("dbarrier {path} 3 enter 30000")),
            "true"
        );
        assert_eq!(
            ok(&mut java, &format!("dbarrier {path} 3 leave 30000")),
            "true"
        );
        for r in rust {
            assert_eq!(r.join().unwrap(), (true, true));
        }
    });
    java.quit(STEP).unwrap();
}

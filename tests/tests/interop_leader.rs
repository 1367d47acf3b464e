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

/// Issue 27: mixed Java/Rust groups on a three-member ensemble keep one
/// leader and lose no update through two kills of the ensemble's leader.
/// A Rust and a Curator `LeaderLatch` share one election, a Rust and a
/// Curator `LeaderSelector` one lock, a Rust and a Curator `GroupMember`
/// one group, and both sides increment one `DistributedAtomicLong` all
/// along. After each kill, once both clients are back, exactly one latch
/// and one selector lead, both sides name the same leader, both group
/// members list both, and the counter holds at least every increment
/// reported successful and at most every attempt, plus what Curator may
/// apply twice: its `DistributedAtomicLong` sets inside its framework's
/// retry loop, so an increment whose reply was lost is sent again,
/// refused as `BadVersion`, read again, applied a second time and
/// reported once (latchkey's writes once per attempt; see
/// `DistributedAtomic`). The peer increments on one thread, so each of
/// its connection losses adds at most one: two are allowed per kill.
#[test]
fn mixed_groups_keep_one_leader_and_every_update_through_two_leader_kills() {
    use latchkey_framework::{ConnectionState, ExponentialBackoffRetry, RetryNTimes};
    use latchkey_recipes::{DistributedAtomicLong, GroupMember, LeaderSelector};
    use latchkey_test::TestingCluster;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const KILLS: usize = 2;

    if let Err(why) = peer_available(PeerKind::Curator) {
        eprintln!("SKIPPED: Curator peer unavailable: {why}");
        return;
    }
    let _watchdog = Watchdog::new(
        "mixed groups through leader kills",
        Duration::from_secs(240),
    );
    let mut cluster = TestingCluster::start(3).unwrap();
    let session = Duration::from_secs(10);
    let connect = cluster.connect_string();
    let mut java = Peer::start_with_session_timeout(PeerKind::Curator, &connect, session).unwrap();
    let mut java_counter =
        Peer::start_with_session_timeout(PeerKind::Curator, &connect, session).unwrap();
    let c = start_connected(
        latchkey_framework::Client::builder()
            .connect_string(&connect)
            .session_timeout(session)
            .connection_timeout(Duration::from_secs(3))
            .retry_policy(ExponentialBackoffRetry::with_max_sleep(
                Duration::from_millis(50),
                29,
                Duration::from_millis(500),
            )),
    );
    let dump = |cluster: &TestingCluster| {
        let members: Vec<String> = (0..3)
            .map(|i| format!("member {i}:\n{}", cluster.log_tail(i, 8)))
            .collect();
        format!(
            "client states: {:?}\n{}",
            c.state_history(),
            members.join("\n")
        )
    };
    let (latch_path, selector_path, counter_path, group_path) = (
        unique("mixed-latch"),
        unique("mixed-selector"),
        unique("mixed-counter"),
        unique("mixed-group"),
    );
    let member = GroupMember::new(&c, &group_path, "rust", b"rust").unwrap();
    member.start().unwrap();
    ok(&mut java, &format!("group {group_path} java start"));

    let latch = LeaderLatch::with_id(&c, &latch_path, "rust").unwrap();
    latch.start().unwrap();
    ok(&mut java, &format!("latch {latch_path} java start"));
    let rust_leads = std::sync::Arc::new(AtomicBool::new(false));
    let leads = std::sync::Arc::clone(&rust_leads);
    let selector = LeaderSelector::new(&c, &selector_path, "rust", move |l| {
        leads.store(true, Ordering::SeqCst);
        while l.wait(Duration::from_millis(50)) {}
        leads.store(false, Ordering::SeqCst);
    })
    .unwrap();
    selector.auto_requeue();
    selector.start().unwrap();
    ok(&mut java, &format!("selector {selector_path} java start"));

    let counter = DistributedAtomicLong::new(
        &c,
        &counter_path,
        RetryNTimes::new(1000, Duration::from_millis(1)),
    )
    .unwrap();
    let stop = AtomicBool::new(false);
    let (rust_ok, rust_tries) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let (java_ok, java_tries) = (AtomicUsize::new(0), AtomicUsize::new(0));

    // Exactly one latch and one selector lead, and both sides agree.
    let mut one_leader_each = |what: &str, cluster: &TestingCluster| {
        let java_says = |java: &mut Peer, cmd: String| {
            java.command(&cmd, STEP)
                .unwrap_or_default()
                .trim_start_matches("OK")
                .trim()
                .to_owned()
        };
        let last = std::cell::RefCell::new(String::new());
        wait_until(
            Duration::from_secs(60),
            || {
                if !c.state().is_some_and(ConnectionState::is_connected) {
                    return false;
                }
                let java_latch = java_says(&mut java, format!("latch {latch_path} java has"));
                let java_latch_sees =
                    java_says(&mut java, format!("latch {latch_path} java leader"));
                let java_sel = java_says(&mut java, format!("selector {selector_path} java has"));
                let java_sel_sees =
                    java_says(&mut java, format!("selector {selector_path} java leader"));
                let rust_latch = latch.has_leadership();
                let rust_sel = rust_leads.load(Ordering::SeqCst) && selector.has_leadership();
                let rust_latch_sees = latch.leader().map(|p| p.id).unwrap_or_default();
                let rust_sel_sees = selector.leader().map(|p| p.id).unwrap_or_default();
                let java_members = java_says(&mut java, format!("group {group_path} java members"));
                let rust_members: Vec<String> = member.current_members().into_keys().collect();
                *last.borrow_mut() = format!(
                    "latch: rust {rust_latch} (sees {rust_latch_sees}), java {java_latch} \
                     (sees {java_latch_sees}); selector: rust {rust_sel} (sees \
                     {rust_sel_sees}), java {java_sel} (sees {java_sel_sees}); group: \
                     rust lists {rust_members:?}, java lists {java_members}"
                );
                if rust_members != ["java", "rust"] || java_members != "java,rust" {
                    return false;
                }
                let latch_leader = match (rust_latch, java_latch.as_str()) {
                    (true, "false") => "rust",
                    (false, "true") => "java",
                    _ => return false,
                };
                let selector_leader = match (rust_sel, java_sel.as_str()) {
                    (true, "false") => "rust",
                    (false, "true") => "java",
                    _ => return false,
                };
                rust_latch_sees == latch_leader
                    && java_latch_sees == latch_leader
                    && rust_sel_sees == selector_leader
                    && java_sel_sees == selector_leader
            },
            || {
                format!(
                    "{what}: not one agreed leader each: {}\n{}",
                    last.borrow(),
                    dump(cluster)
                )
            },
        );
        eprintln!("{what}: {}", last.borrow());
    };

    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                rust_tries.fetch_add(1, Ordering::SeqCst);
                if counter.increment().is_ok_and(|v| v.succeeded) {
                    rust_ok.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                java_tries.fetch_add(10, Ordering::SeqCst);
                let reply = java_counter.command(&format!("atomic {counter_path} bump 10"), STEP);
                if let Some(n) = reply
                    .ok()
                    .and_then(|r| r.strip_prefix("OK ").and_then(|n| n.trim().parse().ok()))
                {
                    java_ok.fetch_add(n, Ordering::SeqCst);
                }
            }
        });
        let _stop = StopOnDrop(&stop);
        one_leader_each("at the start", &cluster);
        for kill in 1..=KILLS {
            let leader = cluster.leader().expect("the ensemble has a leader");
            cluster.kill(leader).unwrap();
            cluster.wait_for_quorum(Duration::from_secs(60)).unwrap();
            one_leader_each(&format!("after leader kill {kill}"), &cluster);
            cluster.restart(leader).unwrap();
            cluster.wait_for_quorum(Duration::from_secs(60)).unwrap();
        }
        stop.store(true, Ordering::SeqCst);
    });

    let succeeded = rust_ok.load(Ordering::SeqCst) + java_ok.load(Ordering::SeqCst);
    let tried = rust_tries.load(Ordering::SeqCst) + java_tries.load(Ordering::SeqCst);
    let value = counter.get().unwrap().post_value as usize;
    let curator_doubles = 2 * KILLS;
    eprintln!("counter: {value}, {succeeded} increments reported, {tried} tried");
    assert!(
        succeeded > 0 && (succeeded..=tried + curator_doubles).contains(&value),
        "counter {value}: want between {succeeded} reported and {tried} tried \
         (+ {curator_doubles} Curator may apply twice)\n{}",
        dump(&cluster)
    );
    selector.close();
    latch.close().unwrap();
    member.close();
    let _ = java.quit(STEP);
    let _ = java_counter.quit(STEP);
    c.close();
}

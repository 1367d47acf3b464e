//! `NodeCache` and `CuratorCache` on a 3-member ensemble while a writer
//! keeps creating, changing and deleting nodes in the cached subtree:
//! after each fault (two leader kills and restarts, then every member's
//! restart in turn), once the writer pauses, both caches converge to the
//! ensemble's state as a fresh client reads it, and replaying what their
//! listeners told gives exactly their content. Every wait is bounded.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use crossbeam_channel::Receiver;
use latchkey_framework::{Client, ConnectionState, ExponentialBackoffRetry};
use latchkey_recipes::{CacheEvent, ChildData, CuratorCache, NodeCache};
use latchkey_test::TestingCluster;

const SESSION: Duration = Duration::from_secs(10);
/// How long the caches may take to converge once the writer paused.
const CONVERGE_WITHIN: Duration = Duration::from_secs(30);
/// The nodes the writer works on, below the cached root (`n` is also the
/// node cache's).
const NAMES: [&str; 14] = [
    "n", "a", "b", "c", "d", "a/1", "a/2", "a/3", "b/1", "b/2", "b/1/x", "b/1/y", "c/1", "d/1",
];

/// A node as compared: data, and the zxids that created and last changed it.
type Seen = (String, i64, i64);

fn seen(n: &ChildData) -> Seen {
    (
        String::from_utf8_lossy(&n.data).into_owned(),
        n.stat.czxid,
        n.stat.mzxid,
    )
}

/// The curator cache's content as compared.
fn cached(cache: &CuratorCache) -> BTreeMap<String, Seen> {
    cache
        .entries()
        .iter()
        .map(|n| (n.path.clone(), seen(n)))
        .collect()
}

fn client(cluster: &TestingCluster) -> Client {
    start_connected(
        Client::builder()
            .connect_string(cluster.connect_string())
            .session_timeout(SESSION)
            .connection_timeout(Duration::from_secs(3))
            .retry_policy(ExponentialBackoffRetry::with_max_sleep(
                Duration::from_millis(50),
                29,
                Duration::from_millis(500),
            )),
    )
}

/// The subtree as the ensemble has it, after a sync; `None` if a read
/// failed (the caller asks again).
fn server_state(c: &Client, root: &str) -> Option<BTreeMap<String, Seen>> {
    c.sync(root).ok()?;
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_string()];
    while let Some(path) = todo.pop() {
        let (data, stat) = c.get_data(&path).ok()?;
        let data = String::from_utf8_lossy(&data).into_owned();
        out.insert(path.clone(), (data, stat.czxid, stat.mzxid));
        for child in c.get_children(&path).ok()? {
            todo.push(format!("{path}/{child}"));
        }
    }
    Some(out)
}

/// Creates, changes and deletes nodes below `root` until `stop`, counting
/// the writes that succeeded (errors during faults are expected).
fn write_until(writer: &Client, root: &str, seed: u64, stop: &AtomicBool, writes: &AtomicUsize) {
    let mut r = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    for i in 0..100_000u64 {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        r = r
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let path = format!("{root}/{}", NAMES[(r >> 33) as usize % NAMES.len()]);
        let data = format!("{seed}.{i}");
        let done = match (r >> 20) % 3 {
            0 => writer
                .create()
                .creating_parents_if_needed()
                .for_path(&path, data.as_bytes())
                .map(|_| ()),
            1 => writer.set_data(&path, data.as_bytes(), None).map(|_| ()),
            _ => writer
                .delete()
                .deleting_children_if_needed()
                .for_path(&path),
        };
        if done.is_ok() {
            writes.fetch_add(1, Ordering::SeqCst);
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// A fault of the ensemble.
#[derive(Clone, Copy)]
enum Fault {
    /// Kills the leader (SIGKILL).
    KillLeader,
    /// Stops a member (SIGTERM).
    Stop(usize),
    /// Restarts the member that is down.
    Restart,
}

/// What the listeners told, replayed: the node cache's last report, and
/// the curator cache's events applied to a map. Nodes are compared by
/// data and zxids: a re-read that finds only the children changed
/// updates the copy's stat without an event, as in Curator.
#[derive(Default)]
struct Replay {
    node: Option<ChildData>,
    tree: BTreeMap<String, Seen>,
    events: usize,
}

impl Replay {
    /// Applies the events told so far; an event that does not fit what
    /// was told before fails the test.
    fn drain(&mut self, node: &Receiver<Option<ChildData>>, tree: &Receiver<CacheEvent>) {
        for n in node.try_iter() {
            assert_ne!(n, self.node, "the node cache told a non-change");
            self.node = n;
        }
        for e in tree.try_iter() {
            self.events += 1;
            let fits = match &e {
                CacheEvent::Created(n) => self.tree.insert(n.path.clone(), seen(n)).is_none(),
                CacheEvent::Changed { old, new } => {
                    old.path == new.path
                        && seen(old) != seen(new)
                        && self.tree.insert(new.path.clone(), seen(new)) == Some(seen(old))
                }
                CacheEvent::Deleted(n) => self.tree.remove(&n.path) == Some(seen(n)),
                CacheEvent::Initialized => true,
                _ => false, // a kind of event this replay does not know
            };
            assert!(fits, "event {e:?} does not fit the events told before it");
        }
    }
}

/// Caches on a 3-member ensemble converge to its state through leader
/// kills and a rolling restart (Curator's TestCuratorCacheEdges.testServerLoss,
/// which kills the member the cache's client is connected to: the
/// rolling restart stops each member in turn).
#[test]
fn caches_converge_to_the_ensembles_state_after_leader_kills_and_a_rolling_restart() {
    let mut cluster = TestingCluster::start(3).unwrap();
    let root = unique("/cache-faults");
    let node = format!("{root}/n");
    let writer = client(&cluster);
    writer.create().for_path(&root, b"root").unwrap();
    let (node_client, tree_client) = (client(&cluster), client(&cluster));
    let node_cache = NodeCache::new(&node_client, &node).unwrap();
    let node_events = node_cache.listen();
    node_cache.start().unwrap();
    let tree_cache = CuratorCache::new(&tree_client, &root).unwrap();
    let tree_events = tree_cache.listen();
    let dog = Watchdog::new("CuratorCache::start", Duration::from_secs(30));
    tree_cache.start().unwrap();
    drop(dog);
    let mut replay = Replay::default();
    let states = [node_client.listen(), tree_client.listen()];
    let mut reconnects = [0; 2];

    // Two leader kills and restarts, then a rolling restart; the caches
    // are checked once the member is down and again once it is back.
    let mut faults = vec![
        Fault::KillLeader,
        Fault::Restart,
        Fault::KillLeader,
        Fault::Restart,
    ];
    for member in 0..cluster.size() {
        faults.extend([Fault::Stop(member), Fault::Restart]);
    }
    let mut down = None;
    for (round, fault) in faults.into_iter().enumerate() {
        let stop = AtomicBool::new(false);
        let writes = AtomicUsize::new(0);
        let wrote = |more: usize, what: &str, cluster: &TestingCluster| {
            let want = writes.load(Ordering::SeqCst) + more;
            wait_until(
                Duration::from_secs(60),
                || writes.load(Ordering::SeqCst) >= want,
                || format!("the writer is stuck {what}\n{}", cluster.describe(15)),
            );
        };
        let fault = thread::scope(|s| {
            let _stop = StopOnDrop(&stop);
            let writer = s.spawn(|| write_until(&writer, &root, round as u64, &stop, &writes));
            wrote(10, "before the fault", &cluster);
            let fault = match fault {
                Fault::KillLeader => {
                    let leader = cluster.leader().expect("an ensemble leader");
                    cluster.kill(leader).unwrap();
                    down = Some(leader);
                    format!("kill of member {leader} (the leader)")
                }
                Fault::Stop(member) => {
                    cluster.stop(member).unwrap();
                    down = Some(member);
                    format!("stop of member {member}")
                }
                Fault::Restart => {
                    let member = down.take().expect("a member is down");
                    cluster.restart(member).unwrap();
                    format!("restart of member {member}")
                }
            };
            // The last changes are made around the caches' clients'
            // reconnections: a few writes once they are back, then a pause.
            wait_until(
                Duration::from_secs(60),
                || {
                    [&node_client, &tree_client]
                        .iter()
                        .all(|c| c.state().is_some_and(ConnectionState::is_connected))
                },
                || format!("the caches' clients are not back\n{}", cluster.describe(15)),
            );
            wrote(3, &format!("after the {fault}"), &cluster);
            stop.store(true, Ordering::SeqCst);
            writer.join().unwrap();
            fault
        });
        let paused = Instant::now();
        let fresh = client(&cluster);
        let dump = |replay: &Replay, server: &Option<BTreeMap<String, Seen>>| {
            format!(
                "after the {fault}:\nserver: {server:?}\ncurator cache: {:?}\n\
                 replayed events: {:?}\nnode cache: {:?}\nnode events: {:?}\n\
                 node cache client: {:?}\ncurator cache client: {:?}\n{}",
                cached(&tree_cache),
                replay.tree.keys().collect::<Vec<_>>(),
                node_cache.current_data(),
                replay.node,
                node_client.state_history(),
                tree_client.state_history(),
                cluster.describe(15)
            )
        };
        loop {
            replay.drain(&node_events, &tree_events);
            let server = server_state(&fresh, &root);
            if let Some(now) = &server {
                let node_now = node_cache.current_data();
                if cached(&tree_cache) == *now
                    && replay.tree == *now
                    && node_now.as_ref().map(seen).as_ref() == now.get(&node)
                    && replay.node == node_now
                {
                    break;
                }
            }
            assert!(
                paused.elapsed() < CONVERGE_WITHIN,
                "the caches did not converge within {CONVERGE_WITHIN:?}\n{}",
                dump(&replay, &server)
            );
            thread::sleep(Duration::from_millis(20));
        }
        for (count, states) in reconnects.iter_mut().zip(&states) {
            *count += states
                .try_iter()
                .filter(|s| *s == ConnectionState::Reconnected)
                .count();
        }
        println!(
            "{fault}: {} writes; caches converged {:?} after the writer paused \
             ({} nodes, {} cache events, reconnections {reconnects:?} so far)",
            writes.load(Ordering::SeqCst),
            paused.elapsed(),
            tree_cache.size(),
            replay.events
        );
        fresh.close();
    }
    assert!(
        reconnects.iter().all(|&n| n > 0),
        "the faults reached both caches' clients: {reconnects:?} reconnections"
    );
}

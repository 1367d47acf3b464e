//! How many threads a session costs. Its own test binary: it counts the
//! process' threads by name, which other tests running beside it in the
//! same process would disturb.

mod common;

use std::time::Duration;

use common::{clients, unique, wait_until};
use latchkey_recipes::InterProcessMutex;

/// The client's threads alive in this process: those named `latchkey-*`,
/// except the process' own, which serve every session and stay once
/// started: the engine (every connection) and the timer thread (every
/// session's states).
fn client_threads() -> usize {
    client_thread_names()
        .iter()
        .filter(|name| !matches!(name.as_str(), "latchkey-engine" | "latchkey-timers"))
        .count()
}

fn client_thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("read /proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .filter(|name| name.starts_with("latchkey-"))
        .collect()
}

/// A session holding a lock (with a revocation watch) needs no thread of
/// its own: one engine thread serves every session's connection, one timer
/// thread every session's states, and the event, listener and cleanup
/// threads start when there is something for them to run. A watch that
/// fires still reaches its watcher.
#[test]
fn a_session_holding_a_lock_runs_on_no_thread_of_its_own() {
    const SESSIONS: usize = 10;
    let before = client_threads();
    let cs = clients(SESSIONS, Duration::from_secs(10));
    let base = unique("threads");
    let mutexes: Vec<InterProcessMutex> = cs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let m = InterProcessMutex::new(c, &format!("{base}/l{i}")).unwrap();
            m.make_revocable(|| {});
            assert!(m.acquire_timeout(Duration::from_secs(10)).unwrap());
            m
        })
        .collect();
    // Connect threads end once their connection is handed to the engine.
    wait_until(
        Duration::from_secs(10),
        || client_threads() == before,
        || {
            format!(
                "{} threads for {SESSIONS} sessions holding a lock (want none): {:?}",
                client_threads() - before,
                client_thread_names()
            )
        },
    );
    let engines = client_thread_names()
        .iter()
        .filter(|n| n.as_str() == "latchkey-engine")
        .count();
    assert_eq!(engines, 1, "one engine for every session");

    // A plain watch still runs (on a watcher thread started for it).
    let (tx, rx) = crossbeam_channel::bounded(1);
    let node = format!("{base}/watched");
    cs[0]
        .create()
        .creating_parents_if_needed()
        .for_path(&node, b"")
        .unwrap();
    cs[0]
        .get_data_watch(&node, move |ev| {
            let _ = tx.send(ev);
        })
        .unwrap();
    cs[0].set_data(&node, b"x", None).unwrap();
    let ev = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the watch fired");
    assert_eq!(ev.path, node);
    wait_until(
        Duration::from_secs(5),
        || client_threads() - before == 1,
        || {
            format!(
                "want one more thread, for the watcher: {}",
                client_threads() - before
            )
        },
    );

    for m in &mutexes {
        m.release().unwrap();
    }
    cs.iter().for_each(latchkey_framework::Client::close);
    wait_until(
        Duration::from_secs(10),
        || client_threads() == before,
        || {
            format!(
                "{} client threads left after close",
                client_threads() - before
            )
        },
    );
}

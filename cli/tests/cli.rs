//! Integration tests of `latchkey inspect` and `latchkey watch` against a
//! real ZooKeeper.
//!
//! One server serves the whole binary (`common::server`). Every wait has a
//! deadline, and every `latchkey` process is killed if a test fails.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::{client, eventually, server, LATCHKEY};
use latchkey_recipes::{
    InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2, LeaderLatch,
};

/// Runs `latchkey ARGS --connect <server>` to the end (at most 60 s).
fn latchkey(args: &[&str]) -> Output {
    common::run_latchkey(args, Duration::from_secs(60))
}

/// Kills the child if the test fails before it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The values of `"key":"..."` in `json`, in order.
fn strings<'a>(json: &'a str, key: &str) -> Vec<&'a str> {
    let pat = format!("\"{key}\":\"");
    json.match_indices(&pat)
        .map(|(i, _)| {
            let rest = &json[i + pat.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect()
}

#[test]
fn inspect_lists_holder_then_waiter() {
    let path = latchkey_test::unique_path("cli-inspect");
    let holder_client = client();
    let holder = InterProcessMutex::new(&holder_client, &path).unwrap();
    holder.acquire().unwrap();
    let holder_node = holder.lock_node_path().unwrap();

    let waiter_client = client();
    let waiter_session = waiter_client.session_id();
    let waiter_path = path.clone();
    let waiter = thread::spawn(move || {
        let m = InterProcessMutex::new(&waiter_client, &waiter_path).unwrap();
        assert!(m.acquire_timeout(Duration::from_secs(60)).unwrap());
        m.release().unwrap();
        waiter_client.close();
    });
    eventually("the waiter's node", || {
        holder.participant_nodes().map(|n| n.len()).unwrap_or(0) == 2
    });

    let out = latchkey(&["inspect", &path, "--json"]);
    let json = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{json}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json.lines().count(), 1, "one JSON object: {json}");
    assert!(json.contains("\"recipe\":\"mutex\""), "{json}");
    assert_eq!(strings(&json, "role"), ["holder", "waiter"], "{json}");
    let paths = strings(&json, "path");
    assert_eq!(paths[0], path, "{json}");
    assert_eq!(paths.len(), 3, "{json}");
    assert_eq!(paths[1], holder_node, "{json}");
    assert!(paths[2].starts_with(&format!("{path}/_c_")), "{json}");
    assert_eq!(
        strings(&json, "session"),
        [
            format!("0x{:x}", holder_client.session_id()),
            format!("0x{waiter_session:x}")
        ],
        "{json}"
    );
    assert!(!json.contains("\"persistent\":true"), "{json}");
    // latchkey writes who holds (host, pid, thread) when given no data.
    assert!(json.contains("\"data\":\"host="), "{json}");

    // The table: a header, then the holder's row first.
    let out = latchkey(&["inspect", &path]);
    let table = String::from_utf8(out.stdout).unwrap();
    eprintln!("{json}{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].contains("(mutex): 2 node(s)"), "{table}");
    assert!(lines[1].starts_with("ROLE"), "{table}");
    assert!(
        lines[2].starts_with("holder") && lines[2].contains(&holder_node),
        "{table}"
    );
    assert!(lines[3].starts_with("waiter"), "{table}");
    // Aligned: the NODE column starts at the same place on every row.
    let col = lines[1].find("NODE").unwrap();
    assert_eq!(lines[2].find(&format!("{path}/")), Some(col), "{table}");

    holder.release().unwrap();
    waiter.join().unwrap();
    holder_client.close();
}

#[test]
fn watch_sees_a_create_and_a_delete() {
    let path = latchkey_test::unique_path("cli-watch");
    let c = client();
    c.create()
        .creating_parents_if_needed()
        .for_path(&path, b"")
        .unwrap();
    let mut child = Killed(
        Command::new(LATCHKEY)
            .args(["watch", &path, "--count", "2"])
            .args(["--connect", &server().connect_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start latchkey watch"),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let mut next = || {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("a line from watch");
        lines.push(line.clone());
        line
    };
    while !next().ends_with(" initialized") {}
    let node = format!("{path}/x");
    // One change at a time: a cache tells the states it reads, so a node
    // created and deleted between two reads would show no event at all.
    c.create().for_path(&node, b"hello").unwrap();
    let created = next();
    c.delete().for_path(&node).unwrap();
    let deleted = next();
    assert!(
        created.contains(&format!("created {node} ")) && created.contains("data=\"hello\""),
        "{lines:?}"
    );
    assert!(deleted.contains(&format!("deleted {node} ")), "{lines:?}");
    eprintln!("{}", lines.join("\n"));
    eventually("watch to exit after --count 2", || {
        child.0.try_wait().unwrap().is_some()
    });
    assert!(child.0.wait().unwrap().success());
    c.close();
}

#[test]
fn inspect_shows_a_curator_holder_before_a_latchkey_waiter() {
    use latchkey_test::peers::{peer_available, Peer, PeerKind};
    if let Err(why) = peer_available(PeerKind::Curator) {
        eprintln!("SKIPPED: Curator peer unavailable: {why}");
        return;
    }
    let step = Duration::from_secs(60);
    let mut java =
        Peer::start(PeerKind::Curator, &server().connect_string()).expect("start Curator peer");
    let path = latchkey_test::unique_path("cli-curator");
    let reply = java
        .command(&format!("mutex {path} acquire 10000"), step)
        .unwrap();
    assert_eq!(reply, "OK acquired");

    let waiter_client = client();
    let waiter_session = waiter_client.session_id();
    let m = InterProcessMutex::new(&waiter_client, &path).unwrap();
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let got = m.acquire_timeout(Duration::from_secs(60)).unwrap();
            if got {
                m.release().unwrap();
            }
            got
        });
        eventually("the waiter's node", || {
            m.participant_nodes().map(|n| n.len()).unwrap_or(0) == 2
        });
        let out = latchkey(&["inspect", &path, "--json"]);
        let json = String::from_utf8(out.stdout).unwrap();
        eprintln!("{json}");
        assert!(out.status.success(), "{json}");
        assert_eq!(strings(&json, "role"), ["holder", "waiter"], "{json}");
        let sessions = strings(&json, "session");
        assert_ne!(sessions[0], format!("0x{waiter_session:x}"), "{json}");
        assert_eq!(sessions[1], format!("0x{waiter_session:x}"), "{json}");
        // Curator writes the holder's IP address; latchkey host, pid, thread.
        let data = strings(&json, "data");
        assert!(
            !data[0].is_empty() && !data[0].starts_with("host="),
            "{json}"
        );
        assert!(data[1].starts_with("host="), "{json}");

        let reply = java
            .command(&format!("mutex {path} release"), step)
            .unwrap();
        assert!(reply.starts_with("OK"), "{reply}");
        assert!(waiter.join().unwrap());
    });
    let _ = java.command("quit", step);
    waiter_client.close();
}

#[test]
fn inspect_tells_read_write_locks_semaphores_latches_and_persistent_nodes() {
    let c = client();
    let other = client();

    // A reader holds, a writer waits behind it.
    let path = latchkey_test::unique_path("cli-rw");
    let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();
    let read = rw.read().unwrap();
    let writer_rw = InterProcessReadWriteLock::new(&other, &path).unwrap();
    thread::scope(|s| {
        let writer = s.spawn(|| {
            let w = writer_rw.try_write_for(Duration::from_secs(60)).unwrap();
            w.is_some()
        });
        eventually("the writer's node", || {
            c.get_children(&path).map(|n| n.len()).unwrap_or(0) == 2
        });
        let json = String::from_utf8(latchkey(&["inspect", &path, "--json"]).stdout).unwrap();
        assert!(json.contains("\"recipe\":\"read-write lock\""), "{json}");
        assert_eq!(strings(&json, "role"), ["holder", "waiter"], "{json}");
        assert_eq!(strings(&json, "kind"), ["read", "write"], "{json}");
        drop(read);
        assert!(writer.join().unwrap());
    });

    // A semaphore's lease, under PATH/leases.
    let path = latchkey_test::unique_path("cli-sem");
    let sem = InterProcessSemaphoreV2::new(&c, &path, 2).unwrap();
    let lease = sem.acquire().unwrap();
    let json = String::from_utf8(latchkey(&["inspect", &path, "--json"]).stdout).unwrap();
    assert!(json.contains("\"recipe\":\"semaphore\""), "{json}");
    assert_eq!(strings(&json, "role"), ["lease"], "{json}");
    assert!(json.contains(&format!("{path}/leases/")), "{json}");
    drop(lease);

    // A leader latch: the leader first.
    let path = latchkey_test::unique_path("cli-latch");
    let latch = LeaderLatch::new(&c, &path).unwrap();
    latch.start().unwrap();
    eventually("leadership", || latch.has_leadership());
    let json = String::from_utf8(latchkey(&["inspect", &path, "--json"]).stdout).unwrap();
    assert!(json.contains("\"recipe\":\"leader latch\""), "{json}");
    assert_eq!(strings(&json, "role"), ["leader"], "{json}");
    latch.close().unwrap();

    // A persistent lock node (left by hand, or by a bug): session 0, flagged.
    let path = latchkey_test::unique_path("cli-persistent");
    c.create()
        .creating_parents_if_needed()
        .for_path(&format!("{path}/lock-0000000007"), b"\x00\x01")
        .unwrap();
    let json = String::from_utf8(latchkey(&["inspect", &path, "--json"]).stdout).unwrap();
    assert!(json.contains("\"persistent\":true"), "{json}");
    assert!(json.contains("\"data\":null,\"data_length\":2"), "{json}");
    assert_eq!(strings(&json, "session"), ["0x0"], "{json}");
    let table = String::from_utf8(latchkey(&["inspect", &path]).stdout).unwrap();
    assert!(
        table.contains("0x0 (persistent)") && table.contains("<2 bytes>"),
        "{table}"
    );

    // No such path.
    let out = latchkey(&["inspect", "/cli-no-such-path-here", "--json"]);
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("\"exists\":false"));

    other.close();
    c.close();
}

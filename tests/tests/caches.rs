//! `NodeCache` against a real ZooKeeper: it follows every change, and
//! converges to the server's state after a partition, a server restart and
//! a session expiry, with one watch at a time however often it reconnects.
//! Every wait is bounded, so a broken cache fails within seconds.

mod common;

use std::time::Duration;

use common::*;
use latchkey_framework::Client;
use latchkey_recipes::{CacheEvent, ChildData, CuratorCache, NodeCache};
use latchkey_test::{FaultProxy, TestingServer};

fn data_of(cache: &NodeCache) -> Option<Vec<u8>> {
    cache.current_data().map(|n| n.data)
}

/// The watches the server holds on `path` (from `wchp`).
fn server_watches_on(server: &TestingServer, path: &str) -> usize {
    let report = server.four_letter("wchp").unwrap_or_default();
    let mut lines = report.lines();
    let mut count = 0;
    while let Some(line) = lines.next() {
        if line.trim() == path {
            // The sessions watching it follow, one per line, indented.
            count += lines
                .clone()
                .take_while(|l| l.starts_with(char::is_whitespace))
                .count();
        }
    }
    count
}

/// Waits until `client` holds `want` watch callbacks and `server` `want`
/// watches on `root` (the cache's one persistent watch, or none).
fn expect_watches(
    server: &TestingServer,
    client: &Client,
    root: &str,
    want: usize,
    what: &str,
    ctx: &Ctx,
) {
    wait_until(
        Duration::from_secs(10),
        || client.pending_watches() == want && server_watches_on(server, root) == want,
        || {
            format!(
                "{what}: {} watch callbacks, {} watches on the server, want {want}\n{}",
                client.pending_watches(),
                server_watches_on(server, root),
                ctx.dump()
            )
        },
    )
}

/// A client for a cache, one that writes, and the cache client's context.
fn cache_and_writer() -> (Client, Client, Ctx) {
    let mut c = clients(2, Duration::from_secs(20));
    let (cache_client, writer) = (c.remove(0), c.remove(0));
    let ctx = Ctx::new(shared_server(), &cache_client);
    (cache_client, writer, ctx)
}

/// A node cache follows a node's create, changes and delete, and tells
/// each (Curator's TestNodeCache.testBasics).
#[test]
fn a_node_cache_follows_creates_changes_and_deletes() {
    let (cache_client, writer, ctx) = cache_and_writer();
    let path = unique("/caches/follows");
    let cache = NodeCache::new(&cache_client, &path).unwrap();
    cache.start().unwrap();
    assert_eq!(cache.current_data(), None, "no node yet");
    let changes = cache.listen();

    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&path, b"one")
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        || data_of(&cache).as_deref() == Some(b"one"),
        || ctx.dump(),
    );
    for (i, value) in [b"two", b"tri"].iter().enumerate() {
        writer.set_data(&path, *value, None).unwrap();
        wait_until(
            Duration::from_secs(10),
            || data_of(&cache).as_deref() == Some(&value[..]),
            || format!("change {i}\n{}", ctx.dump()),
        );
    }
    let seen = cache.current_data().unwrap();
    assert_eq!(seen.path, path);
    assert_eq!(seen.stat, writer.exists(&path).unwrap().unwrap());
    writer.delete().for_path(&path).unwrap();
    wait_until(
        Duration::from_secs(10),
        || cache.current_data().is_none(),
        || ctx.dump(),
    );
    // The channel told every state in order (quick changes may merge, but
    // these came one at a time).
    let told: Vec<Option<Vec<u8>>> = changes.try_iter().map(|n| n.map(|n| n.data)).collect();
    assert_eq!(
        told,
        vec![
            Some(b"one".to_vec()),
            Some(b"two".to_vec()),
            Some(b"tri".to_vec()),
            None
        ]
    );
    cache.close();
    assert!(
        changes.recv_timeout(Duration::from_secs(5)).is_err(),
        "the channel disconnects when the cache closes"
    );
}

#[test]
fn a_node_cache_converges_after_a_partition_a_restart_and_an_expiry() {
    let mut server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let cache_client = connect(&proxy.connect_string(), Duration::from_secs(4));
    let writer = connect(&server.connect_string(), Duration::from_secs(20));
    let ctx = Ctx::new(&server, &cache_client);
    let path = unique("/caches/converges");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&path, b"start")
        .unwrap();
    let cache = NodeCache::new(&cache_client, &path).unwrap();
    cache.start().unwrap();
    assert_eq!(data_of(&cache).as_deref(), Some(&b"start"[..]));

    // A partition shorter than the session: changes made meanwhile arrive.
    proxy.pause();
    writer.set_data(&path, b"during partition", None).unwrap();
    proxy.cut();
    proxy.resume();
    wait_until(
        Duration::from_secs(20),
        || data_of(&cache).as_deref() == Some(&b"during partition"[..]),
        || ctx.dump(),
    );

    // A server restart: the session survives, and so does the cache.
    server.stop().unwrap();
    server.restart().unwrap();
    let writer = connect(&server.connect_string(), Duration::from_secs(20));
    writer.set_data(&path, b"after restart", None).unwrap();
    wait_until(
        Duration::from_secs(30),
        || data_of(&cache).as_deref() == Some(&b"after restart"[..]),
        || ctx.dump(),
    );

    // A partition longer than the session: the watch goes with the
    // session; the cache reads again on the new one, and follows the node
    // from there.
    let old_session = cache_client.session_id();
    let states = cache_client.listen();
    proxy.pause();
    writer.delete().for_path(&path).unwrap();
    ctx.expect(
        &states,
        latchkey_framework::ConnectionState::Lost,
        Duration::from_secs(30),
    );
    proxy.resume();
    wait_until(
        Duration::from_secs(30),
        || cache_client.session_id() != old_session && cache.current_data().is_none(),
        || ctx.dump(),
    );
    writer.create().for_path(&path, b"new session").unwrap();
    wait_until(
        Duration::from_secs(20),
        || data_of(&cache).as_deref() == Some(&b"new session"[..]),
        || ctx.dump(),
    );
}

/// Reconnecting does not add watches: the cache keeps one pending watch of
/// its session, which the client re-arms itself after a reconnection.
#[test]
fn a_node_cache_keeps_one_watch_however_often_it_reconnects() {
    let server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let cache_client = connect(&proxy.connect_string(), Duration::from_secs(20));
    let ctx = Ctx::new(&server, &cache_client);
    let path = unique("/caches/one-watch");
    cache_client
        .create()
        .creating_parents_if_needed()
        .for_path(&path, b"x")
        .unwrap();
    let cache = NodeCache::new(&cache_client, &path).unwrap();
    cache.start().unwrap();
    let reconnected = cache_client.listen();
    let pending = |want: usize, what: &str| {
        wait_until(
            Duration::from_secs(5),
            || cache_client.pending_watches() == want,
            || {
                format!(
                    "{what}: {} watch callbacks wait on the client, want {want}\n{}",
                    cache_client.pending_watches(),
                    ctx.dump()
                )
            },
        )
    };
    // Each reconnection makes the cache read the node again; its watch,
    // re-armed by the client, is still pending, so it adds none.
    for _ in 0..10 {
        proxy.cut();
        ctx.expect(
            &reconnected,
            latchkey_framework::ConnectionState::Reconnected,
            Duration::from_secs(20),
        );
    }
    pending(1, "after 10 reconnections");
    cache_client.set_data(&path, b"changed", None).unwrap();
    wait_until(
        Duration::from_secs(10),
        || data_of(&cache).as_deref() == Some(&b"changed"[..]),
        || ctx.dump(),
    );
    pending(1, "after the watch fired and was set again");
    wait_until(
        Duration::from_secs(10),
        || server_watches_on(&server, &path) == 1,
        || {
            format!(
                "watches on {path}: {}\n{}",
                server_watches_on(&server, &path),
                ctx.dump()
            )
        },
    );
    // Dropping the cache ends its thread and its channels.
    let changes = cache.listen();
    drop(cache);
    assert!(changes.recv_timeout(Duration::from_secs(5)).is_err());
}

#[test]
fn a_node_cache_refuses_bad_paths_and_a_second_start() {
    let client = &clients(1, Duration::from_secs(20))[0];
    for bad in ["", "no-slash", "/trailing/", "/a//b"] {
        let err = NodeCache::new(client, bad).unwrap_err();
        assert!(
            err.to_string().contains(bad),
            "{bad:?}: the error names the path: {err}"
        );
    }
    let huge = format!("/{}", "x".repeat(2 * 1024 * 1024));
    let cache = NodeCache::new(client, &huge).unwrap();
    let err = cache.start().unwrap_err();
    assert!(
        matches!(
            err,
            latchkey_framework::Error::RequestTooLarge { .. }
                | latchkey_framework::Error::Operation { .. }
        ),
        "a 2 MB path fails alone with a clear error: {err}"
    );
    assert!(
        client.exists("/").unwrap().is_some(),
        "the client still works"
    );
    let root = NodeCache::new(client, "/").unwrap();
    root.start().unwrap();
    assert!(root.current_data().is_some(), "the root can be cached");
    assert!(root.start().is_err(), "a second start is refused");
    let _: Option<ChildData> = root.current_data();
}

/// A started `CuratorCache` of `root`; a start that has not returned
/// within 30 s ends the test process (its first pass loops until the
/// subtree is read).
fn started_cache(client: &latchkey_framework::Client, root: &str) -> CuratorCache {
    let cache = CuratorCache::new(client, root).unwrap();
    let _dog = Watchdog::new("CuratorCache::start", Duration::from_secs(30));
    cache.start().unwrap();
    cache
}

/// A second start of a node cache is refused with an error naming it. A
/// closed (or dropped) node cache stops: its channel disconnects, it reads
/// no more (a later change costs it no request), and a closed one keeps
/// its last copy.
#[test]
fn a_closed_or_dropped_node_cache_stops_and_keeps_its_last_copy() {
    let (cache_client, writer, ctx) = cache_and_writer();
    for dropped in [false, true] {
        let path = unique("/caches/node-closed");
        writer
            .create()
            .creating_parents_if_needed()
            .for_path(&path, b"1")
            .unwrap();
        let cache = NodeCache::new(&cache_client, &path).unwrap();
        assert_eq!(cache.path(), path);
        let events = cache.listen();
        cache.start().unwrap();
        match cache.start() {
            Err(latchkey_framework::Error::IllegalState(why)) if why.contains(&path) => {}
            other => panic!("a second start: want IllegalState naming {path}, got {other:?}"),
        }
        wait_until(
            Duration::from_secs(10),
            || data_of(&cache).is_some_and(|d| d == b"1"),
            || ctx.dump(),
        );
        // Both join the cache's thread: one that never ends ends the test.
        let dog = Watchdog::new("closing a NodeCache", Duration::from_secs(30));
        let kept = if dropped {
            drop(cache);
            None
        } else {
            cache.close();
            Some(cache)
        };
        drop(dog);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match events.recv_deadline(deadline) {
                Ok(_) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
                Err(timeout) => panic!("dropped {dropped}: the cache's channel: {timeout:?}"),
            }
        }
        // An open cache reads the change within milliseconds, so a second
        // is a wide margin.
        let sent = requests_sent_around(
            &cache_client,
            || {
                writer.set_data(&path, b"2", None).unwrap();
            },
            Duration::from_secs(1),
        );
        assert_eq!(
            sent,
            0,
            "dropped {dropped}: the cache read again\n{}",
            ctx.dump()
        );
        if let Some(closed) = kept {
            assert_eq!(data_of(&closed).as_deref(), Some(&b"1"[..]));
        }
    }
}

/// A snapshot of a `CuratorCache`: path → data.
fn tree(cache: &CuratorCache) -> Vec<(String, Vec<u8>)> {
    cache
        .entries()
        .into_iter()
        .map(|n| (n.path, n.data))
        .collect()
}

/// The subtree as the server has it, path → data, sorted by path.
fn server_tree(client: &latchkey_framework::Client, root: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_string()];
    while let Some(path) = todo.pop() {
        let Ok((data, _)) = client.get_data(&path) else {
            continue;
        };
        out.push((path.clone(), data));
        for child in client.get_children(&path).unwrap_or_default() {
            todo.push(format!("{path}/{child}"));
        }
    }
    out.sort();
    out
}

fn short(event: &CacheEvent) -> String {
    match event {
        CacheEvent::Created(n) => format!("+{}", n.path.rsplit('/').next().unwrap()),
        CacheEvent::Changed { new, .. } => format!("~{}", new.path.rsplit('/').next().unwrap()),
        CacheEvent::Deleted(n) => format!("-{}", n.path.rsplit('/').next().unwrap()),
        CacheEvent::Initialized => "initialized".into(),
        other => format!("{other:?}"),
    }
}

/// `Initialized` comes once, after the `Created` events of the nodes there
/// were at the start and before the events of later changes; a full
/// re-read after a reconnection tells no second one. A cache of a root
/// that does not exist tells it too, with nothing before it.
#[test]
fn a_curator_cache_tells_initialized_once_after_its_first_read() {
    let proxy = FaultProxy::start(shared_server().addr()).expect("start the proxy");
    let cache_client = connect(&proxy.connect_string(), Duration::from_secs(20));
    let writer = connect(&shared_server().connect_string(), Duration::from_secs(20));
    let ctx = Ctx::new(shared_server(), &cache_client);
    let root = unique("/caches/initialized");
    let name = root.rsplit('/').next().unwrap().to_string();
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&format!("{root}/a/b"), b"b")
        .unwrap();
    writer
        .create()
        .for_path(&format!("{root}/c"), b"c")
        .unwrap();
    let cache = CuratorCache::new(&cache_client, &root).unwrap();
    let events = cache.listen();
    {
        let _dog = Watchdog::new("CuratorCache::start", Duration::from_secs(30));
        cache.start().unwrap();
    }
    // A reconnection: the cache reads the whole subtree again.
    let reconnects = cache_client.metrics().reconnects;
    proxy.cut();
    wait_until(
        Duration::from_secs(10),
        || {
            cache_client.metrics().reconnects > reconnects
                && cache_client.state().is_some_and(|s| s.is_connected())
        },
        || ctx.dump(),
    );
    writer
        .create()
        .for_path(&format!("{root}/d"), b"d")
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        || cache.get(&format!("{root}/d")).is_some(),
        || format!("{:?}\n{}", tree(&cache), ctx.dump()),
    );
    let told: Vec<String> = events.try_iter().map(|e| short(&e)).collect();
    assert_eq!(
        told,
        [
            format!("+{name}"),
            "+a".into(),
            "+b".into(),
            "+c".into(),
            "initialized".into(),
            "+d".into(),
        ],
        "the first read's nodes, initialized, then the later change"
    );

    // No root yet: initialized alone, then the root's creation.
    let missing = unique("/caches/initialized-missing");
    let cache = CuratorCache::new(&cache_client, &missing).unwrap();
    let events = cache.listen();
    {
        let _dog = Watchdog::new("CuratorCache::start", Duration::from_secs(30));
        cache.start().unwrap();
    }
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&missing, b"")
        .unwrap();
    wait_until(Duration::from_secs(10), || cache.size() == 1, || ctx.dump());
    let told: Vec<String> = events.try_iter().map(|e| short(&e)).collect();
    let name = missing.rsplit('/').next().unwrap();
    assert_eq!(told, ["initialized".to_string(), format!("+{name}")]);
}

#[test]
fn a_curator_cache_follows_a_subtree_parents_first() {
    let (cache_client, writer, ctx) = cache_and_writer();
    let root = unique("/caches/tree");
    // The root does not exist yet: the cache waits for it.
    let cache = started_cache(&cache_client, &root);
    assert_eq!(cache.size(), 0);
    let events = cache.listen();
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&format!("{root}/a/b"), b"b1")
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        || cache.size() == 3,
        || format!("{:?}\n{}", tree(&cache), ctx.dump()),
    );
    writer
        .set_data(&format!("{root}/a/b"), b"b2", None)
        .unwrap();
    writer
        .create()
        .for_path(&format!("{root}/c"), b"c1")
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        || tree(&cache) == server_tree(&writer, &root),
        || format!("{:?}\n{}", tree(&cache), ctx.dump()),
    );
    writer
        .delete()
        .deleting_children_if_needed()
        .for_path(&format!("{root}/a"))
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        || cache.size() == 2,
        || format!("{:?}\n{}", tree(&cache), ctx.dump()),
    );
    let told: Vec<String> = events.try_iter().map(|e| short(&e)).collect();
    let name = root.rsplit('/').next().unwrap().to_string();
    assert_eq!(
        told,
        [
            format!("+{name}"),
            "+a".into(),
            "+b".into(),
            "~b".into(),
            "+c".into(),
            "-b".into(),
            "-a".into()
        ],
        "events in order, parents created first and deleted last"
    );
    assert_eq!(cache.get(&format!("{root}/c")).unwrap().data, b"c1");
}

#[test]
fn a_curator_cache_converges_after_a_partition_and_a_lost_session() {
    let server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let cache_client = connect(&proxy.connect_string(), Duration::from_secs(4));
    let writer = connect(&server.connect_string(), Duration::from_secs(20));
    let ctx = Ctx::new(&server, &cache_client);
    let root = unique("/caches/tree-faults");
    for p in ["x/1", "x/2", "y"] {
        writer
            .create()
            .creating_parents_if_needed()
            .for_path(&format!("{root}/{p}"), p.as_bytes())
            .unwrap();
    }
    let cache = started_cache(&cache_client, &root);
    assert_eq!(tree(&cache), server_tree(&writer, &root));
    let events = cache.listen();

    // Changes during a short partition arrive once it heals.
    proxy.pause();
    writer
        .set_data(&format!("{root}/x/1"), b"changed", None)
        .unwrap();
    writer
        .create()
        .for_path(&format!("{root}/x/3"), b"3")
        .unwrap();
    writer.delete().for_path(&format!("{root}/y")).unwrap();
    proxy.cut();
    proxy.resume();
    wait_until(
        Duration::from_secs(20),
        || tree(&cache) == server_tree(&writer, &root),
        || format!("{:?}\n{}", tree(&cache), ctx.dump()),
    );

    // Changes while the session is lost: the cache reads everything on
    // the new session and tells the differences.
    let states = cache_client.listen();
    proxy.pause();
    writer.delete().for_path(&format!("{root}/x/2")).unwrap();
    writer
        .create()
        .for_path(&format!("{root}/z"), b"z")
        .unwrap();
    writer
        .set_data(&format!("{root}/x/3"), b"33", None)
        .unwrap();
    ctx.expect(
        &states,
        latchkey_framework::ConnectionState::Lost,
        Duration::from_secs(30),
    );
    proxy.resume();
    wait_until(
        Duration::from_secs(30),
        || tree(&cache) == server_tree(&writer, &root),
        || format!("{:?}\n{}", tree(&cache), ctx.dump()),
    );
    let mut told: Vec<String> = events.try_iter().map(|e| short(&e)).collect();
    told.sort();
    let mut want = vec!["~1", "+3", "-y", "-2", "+z", "~3"];
    want.sort();
    assert_eq!(told, want, "one event per change, none twice");
    // The watches: one persistent recursive watch on the root, on the
    // client and on the server, after all that.
    let watches = |want, what| expect_watches(&server, &cache_client, &root, want, what, &ctx);
    watches(1, "after a partition and a lost session");
    for _ in 0..5 {
        proxy.cut();
        ctx.expect(
            &states,
            latchkey_framework::ConnectionState::Reconnected,
            Duration::from_secs(20),
        );
    }
    writer.set_data(&format!("{root}/z"), b"zz", None).unwrap();
    wait_until(
        Duration::from_secs(10),
        || {
            cache
                .get(&format!("{root}/z"))
                .is_some_and(|n| n.data == b"zz")
        },
        || ctx.dump(),
    );
    watches(1, "after 5 reconnections");
    // Closing the cache removes its watch.
    cache.close();
    watches(0, "after close");
}

/// A second start is refused with an error that names the cache; dropping
/// the cache does what closing it does: its watch goes, on the client and
/// on the server, and its listeners' channels disconnect.
#[test]
fn a_curator_cache_refuses_a_second_start_and_a_dropped_one_stops_watching() {
    let server = shared_server();
    let c = &clients(1, Duration::from_secs(20))[0];
    let ctx = Ctx::new(server, c);
    let root = unique("/caches/dropped");
    let cache = started_cache(c, &root);
    match cache.start() {
        Err(latchkey_framework::Error::IllegalState(why)) if why.contains(&root) => {}
        other => panic!("a second start: want IllegalState naming {root}, got {other:?}"),
    }
    let events = cache.listen();
    let watches = |want, what| expect_watches(server, c, &root, want, what, &ctx);
    watches(1, "started");
    drop(cache);
    watches(0, "dropped");
    assert!(
        matches!(
            events.recv_timeout(Duration::from_secs(10)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        ),
        "the listener's channel of a dropped cache"
    );
}

/// A change to one node of a subtree is read alone: the cache sends a
/// request or two for it, not a read of the whole subtree (which it does
/// only on a new session or connection).
#[test]
fn a_curator_cache_reads_a_changed_node_alone() {
    let (cache_client, writer, ctx) = cache_and_writer();
    let root = unique("/caches/one-change");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&root, b"")
        .unwrap();
    for i in 0..20 {
        writer
            .create()
            .for_path(&format!("{root}/n{i:02}"), b"")
            .unwrap();
    }
    // Last in the cache's order of reads: a whole re-read reaches it last.
    let changed = format!("{root}/z");
    writer.create().for_path(&changed, b"before").unwrap();
    let cache = started_cache(&cache_client, &root);
    wait_until(
        Duration::from_secs(10),
        || tree(&cache) == server_tree(&writer, &root),
        || ctx.dump(),
    );
    let before = cache_client.metrics().requests_sent;
    writer.set_data(&changed, b"after", None).unwrap();
    wait_until(
        Duration::from_secs(10),
        || cache.get(&changed).is_some_and(|n| n.data == b"after"),
        || ctx.dump(),
    );
    let sent = cache_client.metrics().requests_sent - before;
    // One read of the node; a ping may fall in between.
    assert!(
        sent <= 4,
        "the cache sent {sent} requests for one changed node of 22\n{}",
        ctx.dump()
    );
}

/// A cache whose watch goes while it runs (removed through its client
/// here) adds it again, and goes on following the subtree.
#[test]
fn a_curator_cache_whose_watch_is_removed_adds_it_again() {
    use latchkey_framework::WatcherType;
    let server = shared_server();
    let (cache_client, writer, ctx) = cache_and_writer();
    let root = unique("/caches/watch-removed");
    let cache = started_cache(&cache_client, &root);
    cache_client
        .remove_watches(&root, WatcherType::Any)
        .unwrap();
    let added = format!("{root}/added");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&added, b"seen")
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        || cache.get(&added).is_some_and(|n| n.data == b"seen"),
        || format!("the cache has {:?}\n{}", tree(&cache), ctx.dump()),
    );
    expect_watches(server, &cache_client, &root, 1, "one watch", &ctx);
}

/// A read that fails (the connection is lost just as a changed node is
/// read, and the client does not retry) is tried again later: the node is
/// not taken for deleted.
#[test]
fn a_curator_cache_does_not_take_a_failed_read_for_a_deletion() {
    let cut = CutOff::new();
    let writer = &clients(1, Duration::from_secs(20))[0];
    let root = unique("/caches/failed-read");
    let child = format!("{root}/child");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&child, b"1")
        .unwrap();
    let cache = started_cache(&cut.client, &root);
    let events = cache.listen();
    cut.fail_request(&request_path(&child), || {
        writer.set_data(&child, b"2", None).unwrap();
    });
    wait_until(
        Duration::from_secs(20),
        || cache.get(&child).is_some_and(|n| n.data == b"2"),
        || format!("the cache has {:?}\n{}", tree(&cache), cut.ctx.dump()),
    );
    let deleted: Vec<String> = events
        .try_iter()
        .filter(|e| matches!(e, CacheEvent::Deleted(_)))
        .map(|e| short(&e))
        .collect();
    assert!(
        deleted.is_empty(),
        "told deleted although never deleted: {deleted:?}\n{}",
        cut.ctx.dump()
    );
}

/// The node cache's twin: its read of the node's data (after the watched
/// `exists`) fails, and the node is not taken for deleted.
#[test]
fn a_node_cache_does_not_take_a_failed_read_for_a_deletion() {
    let cut = CutOff::new();
    let writer = &clients(1, Duration::from_secs(20))[0];
    let path = unique("/caches/node-failed-read");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&path, b"1")
        .unwrap();
    let cache = NodeCache::new(&cut.client, &path).unwrap();
    cache.start().unwrap();
    let events = cache.listen();
    // getData (op code 4) of the node, not its exists (3).
    cut.fail_request(&request_on(4, &path), || {
        writer.set_data(&path, b"2", None).unwrap();
    });
    wait_until(
        Duration::from_secs(20),
        || data_of(&cache).is_some_and(|d| d == b"2"),
        || format!("the cache has {:?}\n{}", data_of(&cache), cut.ctx.dump()),
    );
    let told: Vec<Option<Vec<u8>>> = events.try_iter().map(|n| n.map(|n| n.data)).collect();
    assert!(
        told.iter().all(Option::is_some),
        "told deleted although never deleted: {told:?}\n{}",
        cut.ctx.dump()
    );
}

/// After a reconnection the client re-arms the cache's persistent watch
/// (SetWatches2) just after `Reconnected` is told, and ZooKeeper sends no
/// catch-up event for persistent watches: a change made in between raises
/// no event. The cache reads its subtree again after every reconnection,
/// so it still converges. A delay on the cache's link widens the window.
#[test]
fn a_curator_cache_sees_changes_made_before_its_rearmed_watch_reaches_the_server() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let cache_client = connect(&proxy.connect_string(), Duration::from_secs(30));
    let writer = connect(&server.connect_string(), Duration::from_secs(30));
    let ctx = Ctx::new(server, &cache_client);
    let root = unique("/caches/rearm-window");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&format!("{root}/x"), b"start")
        .unwrap();
    let cache = started_cache(&cache_client, &root);
    let states = cache_client.listen();
    proxy.set_delay(Duration::from_millis(300));
    for i in 0..3 {
        proxy.cut();
        ctx.expect(
            &states,
            latchkey_framework::ConnectionState::Reconnected,
            Duration::from_secs(20),
        );
        // The re-arm is still on its way to the server.
        writer
            .set_data(&format!("{root}/x"), format!("{i}").as_bytes(), None)
            .unwrap();
        writer
            .create()
            .for_path(&format!("{root}/new-{i}"), b"")
            .unwrap();
        wait_until(
            Duration::from_secs(10),
            || tree(&cache) == server_tree(&writer, &root),
            || {
                format!(
                    "reconnection {i}: the cache has {:?}, the server {:?}\n{}",
                    tree(&cache),
                    server_tree(&writer, &root),
                    ctx.dump()
                )
            },
        );
    }
    // One watch after all that, here and on the server: re-reading adds
    // none.
    expect_watches(server, &cache_client, &root, 1, "one watch", &ctx);
    proxy.set_delay(Duration::ZERO);
    writer
        .set_data(&format!("{root}/x"), b"watched", None)
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        || {
            cache
                .get(&format!("{root}/x"))
                .is_some_and(|n| n.data == b"watched")
        },
        || ctx.dump(),
    );
}

/// A server without `addWatch` (before ZooKeeper 3.6) answers it with
/// `Unimplemented`: the cache watches with classic watches instead, and
/// does not ask again after a reconnection. A fake server, as ZooKeeper
/// 3.8 has `addWatch`.
#[test]
fn a_curator_cache_falls_back_to_classic_watches_without_add_watch() {
    use latchkey_test::fake_server::{op, FakeServer, Reply, Script};
    const GET_DATA: i32 = 4;
    const ADD_WATCH: i32 = 106;
    for (add_watch, classic) in [(Reply::Error(-6), true), (Reply::Ok(Vec::new()), false)] {
        let mut script = Script::default().reply(ADD_WATCH, add_watch.clone());
        // Every read finds no node.
        script.default_reply = Reply::Error(-101);
        let fake = FakeServer::start(script).expect("start the fake server");
        let client = connect(&fake.connect_string(), Duration::from_secs(30));
        let cache = CuratorCache::new(&client, "/absent").unwrap();
        cache
            .start()
            .unwrap_or_else(|e| panic!("addWatch answered {add_watch:?}: {e}"));
        let seen = fake.seen();
        assert_eq!(seen.count(ADD_WATCH), 1, "{add_watch:?}: {seen:?}");
        assert!(seen.count(GET_DATA) >= 1, "{add_watch:?}: {seen:?}");
        // Classic watches: an exists watch waits for the missing root.
        assert_eq!(
            seen.count(op::EXISTS) > 0,
            classic,
            "addWatch answered {add_watch:?}: {seen:?}"
        );
        let states = client.listen();
        fake.cut();
        wait_until(
            Duration::from_secs(20),
            || {
                states
                    .try_iter()
                    .any(|s| s == latchkey_framework::ConnectionState::Reconnected)
            },
            || format!("no reconnection: {:?}", client.state_history()),
        );
        if !classic {
            // Under a persistent watch the cache reads again after a
            // reconnection.
            wait_until(
                Duration::from_secs(10),
                || fake.seen().count(GET_DATA) > seen.count(GET_DATA),
                || format!("no re-read after the reconnection: {:?}", fake.seen()),
            );
        }
        assert_eq!(
            fake.seen().count(ADD_WATCH),
            1,
            "addWatch answered {add_watch:?}, and asked again after a reconnection"
        );
        cache.close();
        client.close();
    }
}

/// A node deleted and created again between two reads of the cache (its
/// connection paused meanwhile, so both events come to one read) is told
/// as deleted, subtree first, then created: a new czxid is a new node,
/// not a change. The copy holds the new nodes.
#[test]
fn a_curator_cache_tells_a_node_deleted_and_created_again_as_such() {
    let proxy = FaultProxy::start(shared_server().addr()).expect("start the proxy");
    let cache_client = connect(&proxy.connect_string(), Duration::from_secs(20));
    let writer = connect(&shared_server().connect_string(), Duration::from_secs(20));
    let ctx = Ctx::new(shared_server(), &cache_client);
    let root = unique("/caches/recreated");
    let (x, y) = (format!("{root}/x"), format!("{root}/x/y"));
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&y, b"old y")
        .unwrap();
    writer.set_data(&x, b"old x", None).unwrap();
    let cache = started_cache(&cache_client, &root);
    let events = cache.listen();

    proxy.pause();
    writer
        .delete()
        .deleting_children_if_needed()
        .for_path(&x)
        .unwrap();
    writer.create().for_path(&x, b"new x").unwrap();
    writer.create().for_path(&y, b"new y").unwrap();
    proxy.resume();
    wait_until(
        Duration::from_secs(10),
        || tree(&cache) == server_tree(&writer, &root),
        || format!("{:?}\n{}", tree(&cache), ctx.dump()),
    );
    let told: Vec<String> = events.try_iter().map(|e| short(&e)).collect();
    // The old x goes (after its child), the new x comes, and x is never
    // told as changed. How the events of y interleave before that depends
    // on when the cache reads which node (a run under load told the new y
    // once under the old x: -y +y -y -x +x +y); it always ends this way.
    let told_str: Vec<&str> = told.iter().map(String::as_str).collect();
    assert!(
        told_str.ends_with(&["-y", "-x", "+x", "+y"]) && !told_str.contains(&"~x"),
        "told {told:?}\n{}",
        ctx.dump()
    );
    assert_eq!(
        cache.get(&x).unwrap().stat,
        writer.exists(&x).unwrap().unwrap(),
        "the new node's stat"
    );
    assert_eq!(cache.get(&y).unwrap().data, b"new y");
}

/// Built with `single_node`, a cache holds the root alone: its creation,
/// changes and deletion are told, its children are not cached, and it
/// holds one watch on the server.
#[test]
fn a_single_node_curator_cache_holds_the_root_alone() {
    let server = shared_server();
    let (cache_client, writer, ctx) = cache_and_writer();
    let root = unique("/caches/single");
    let name = root.rsplit('/').next().unwrap().to_string();
    let cache = CuratorCache::builder(&cache_client, &root)
        .single_node()
        .build()
        .unwrap();
    let events = cache.listen();
    {
        let _dog = Watchdog::new("CuratorCache::start", Duration::from_secs(30));
        cache.start().unwrap();
    }
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&format!("{root}/a/b"), b"b")
        .unwrap();
    writer.set_data(&root, b"one", None).unwrap();
    wait_until(
        Duration::from_secs(10),
        || cache.get(&root).is_some_and(|n| n.data == b"one"),
        || format!("{:?}\n{}", tree(&cache), ctx.dump()),
    );
    // A child created after the root's change, whose event comes first.
    writer
        .create()
        .for_path(&format!("{root}/c"), b"c")
        .unwrap();
    writer.set_data(&root, b"two", None).unwrap();
    wait_until(
        Duration::from_secs(10),
        || cache.get(&root).is_some_and(|n| n.data == b"two"),
        || format!("{:?}\n{}", tree(&cache), ctx.dump()),
    );
    assert_eq!(tree(&cache), [(root.clone(), b"two".to_vec())]);
    expect_watches(server, &cache_client, &root, 1, "one watch", &ctx);
    writer
        .delete()
        .deleting_children_if_needed()
        .for_path(&root)
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        || cache.size() == 0,
        || format!("{:?}\n{}", tree(&cache), ctx.dump()),
    );
    let told: Vec<String> = events.try_iter().map(|e| short(&e)).collect();
    assert_eq!(
        told,
        [
            "initialized".to_string(),
            format!("+{name}"),
            format!("~{name}"),
            format!("~{name}"),
            format!("-{name}"),
        ]
    );
    cache.close();
    expect_watches(server, &cache_client, &root, 0, "no watch", &ctx);
}

/// Built with `data_not_cached`, a cache keeps the nodes' stats without
/// their data; as in Curator, a created node and the new side of a change
/// are told with the data read.
#[test]
fn a_curator_cache_without_data_keeps_stats_only() {
    let (cache_client, writer, ctx) = cache_and_writer();
    let root = unique("/caches/no-data");
    let a = format!("{root}/a");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&a, b"a1")
        .unwrap();
    let cache = CuratorCache::builder(&cache_client, &root)
        .data_not_cached()
        .build()
        .unwrap();
    let events = cache.listen();
    {
        let _dog = Watchdog::new("CuratorCache::start", Duration::from_secs(30));
        cache.start().unwrap();
    }
    assert_eq!(cache.size(), 2);
    writer.set_data(&a, b"a2", None).unwrap();
    let stat = writer.exists(&a).unwrap().unwrap();
    wait_until(
        Duration::from_secs(10),
        || cache.get(&a).is_some_and(|n| n.stat == stat),
        || format!("{:?}\n{}", cache.entries(), ctx.dump()),
    );
    for node in cache.entries() {
        assert!(node.data.is_empty(), "{node:?} keeps its data");
    }
    writer.delete().for_path(&a).unwrap();
    wait_until(
        Duration::from_secs(10),
        || cache.get(&a).is_none(),
        || format!("{:?}\n{}", cache.entries(), ctx.dump()),
    );
    let told: Vec<CacheEvent> = events.try_iter().collect();
    let a_events: Vec<&CacheEvent> = told
        .iter()
        .filter(|e| match e {
            CacheEvent::Created(n) | CacheEvent::Deleted(n) => n.path == a,
            CacheEvent::Changed { new, .. } => new.path == a,
            _ => false,
        })
        .collect();
    match a_events[..] {
        [CacheEvent::Created(created), CacheEvent::Changed { old, new }, CacheEvent::Deleted(deleted)] =>
        {
            assert_eq!(created.data, b"a1");
            assert_eq!((old.data.as_slice(), old.stat.version), (&b""[..], 0));
            assert_eq!((new.data.as_slice(), &new.stat), (&b"a2"[..], &stat));
            assert_eq!((deleted.data.as_slice(), &deleted.stat), (&b""[..], &stat));
        }
        _ => panic!("events of {a}: {a_events:?}"),
    }
}

/// Built with `clear_on_close`, a closed cache is empty; by default it
/// keeps its copy as last seen.
#[test]
fn a_curator_cache_cleared_on_close_is_empty_once_closed() {
    let (cache_client, writer, _ctx) = cache_and_writer();
    let root = unique("/caches/cleared");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&format!("{root}/a"), b"a")
        .unwrap();
    for clear in [false, true] {
        let mut builder = CuratorCache::builder(&cache_client, &root);
        if clear {
            builder = builder.clear_on_close();
        }
        let cache = builder.build().unwrap();
        {
            let _dog = Watchdog::new("CuratorCache::start", Duration::from_secs(30));
            cache.start().unwrap();
        }
        assert_eq!(cache.size(), 2);
        cache.close();
        let want = if clear { 0 } else { 2 };
        assert_eq!(cache.size(), want, "clear_on_close: {clear}");
        assert_eq!(cache.entries().len(), want, "clear_on_close: {clear}");
    }
}

/// `NodeCache::rebuild` (Curator's `rebuild()`) reads the node on the
/// caller's thread: a change the cache's watch could not tell yet (the
/// cache's link partitioned while another client made it) is in the copy
/// as soon as `rebuild` returns after the partition heals, a deletion too.
/// A rebuild tells listeners nothing, as in Curator; the cache follows
/// later changes as before. Not started or closed: `IllegalState`.
#[test]
fn a_node_cache_rebuild_reads_the_node_at_once() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let cache_client = connect(&proxy.connect_string(), Duration::from_secs(20));
    let writer = connect(&server.connect_string(), Duration::from_secs(20));
    let ctx = Ctx::new(server, &cache_client);
    let path = unique("/caches/node-rebuild");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&path, b"1")
        .unwrap();
    let cache = NodeCache::new(&cache_client, &path).unwrap();
    match cache.rebuild() {
        Err(latchkey_framework::Error::IllegalState(why)) if why.contains("not started") => {}
        other => panic!("rebuild before start: {other:?}"),
    }
    cache.start().unwrap();
    let events = cache.listen();
    // Unchanged: the same copy, and no event.
    let before = cache.current_data();
    cache.rebuild().unwrap();
    assert_eq!(cache.current_data(), before);
    assert_eq!(events.try_iter().count(), 0, "an unchanged rebuild told");

    for (change, want) in [(Some(&b"2"[..]), Some(&b"2"[..])), (None, None)] {
        // The watch's event waits in the paused proxy.
        proxy.pause();
        match change {
            Some(data) => {
                writer.set_data(&path, data, None).unwrap();
            }
            None => writer.delete().for_path(&path).unwrap(),
        }
        let stale = data_of(&cache);
        assert_ne!(stale.as_deref(), want, "the cache saw it through the pause");
        proxy.resume();
        let t = std::time::Instant::now();
        cache.rebuild().unwrap();
        let took = t.elapsed();
        assert_eq!(
            data_of(&cache).as_deref(),
            want,
            "just after rebuild (the cache had {stale:?})\n{}",
            ctx.dump()
        );
        assert!(took < Duration::from_secs(2), "rebuild took {took:?}");
    }
    // Still followed by the watch: a new create is seen and told.
    writer.create().for_path(&path, b"3").unwrap();
    wait_until(
        Duration::from_secs(10),
        || data_of(&cache).as_deref() == Some(&b"3"[..]),
        || ctx.dump(),
    );
    // (The copy is set before the event is sent.)
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut told = Vec::new();
    while told.last() != Some(&Some(b"3".to_vec())) {
        match events.recv_deadline(deadline) {
            Ok(node) => told.push(node.map(|n| n.data)),
            Err(e) => panic!("no event for the create: {e:?}, told {told:?}"),
        }
    }
    cache.close();
    match cache.rebuild() {
        Err(latchkey_framework::Error::IllegalState(why)) if why.contains("closed") => {}
        other => panic!("rebuild after close: {other:?}"),
    }
    assert_eq!(data_of(&cache).as_deref(), Some(&b"3"[..]));
}

/// Curator's `Options.COMPRESSED_DATA`: a cache built with
/// `compressed_data()` keeps gzipped nodes' data gunzipped, whichever
/// library wrote it (Curator's `create().compressed()` through the Curator
/// peer, latchkey's `create().compressed()`), and Curator reads latchkey's
/// compressed node back. A node whose data is not gzip is kept as it is.
/// Without the option the cache keeps the bytes as they are on the server.
#[test]
fn a_compressed_data_cache_reads_what_curator_and_latchkey_compress() {
    use latchkey_test::peers::{peer_available, Peer, PeerKind};
    let (c, writer, ctx) = cache_and_writer();
    let root = unique("/cache-gzip");
    let text = "a config value ".repeat(40);
    writer
        .create()
        .compressed()
        .creating_parents_if_needed()
        .for_path(&format!("{root}/rust"), text.as_bytes())
        .unwrap();
    writer
        .create()
        .for_path(&format!("{root}/plain"), b"not gzip")
        .unwrap();
    let stored = writer.get_data(&format!("{root}/rust")).unwrap().0;
    assert!(
        stored.starts_with(&[0x1f, 0x8b]) && stored.len() < text.len(),
        "stored gzipped"
    );
    let mut java = match peer_available(PeerKind::Curator) {
        Ok(()) => Some(Peer::start(PeerKind::Curator, &shared_server().connect_string()).unwrap()),
        Err(why) => {
            eprintln!("SKIPPED the Curator half: {why}");
            None
        }
    };
    if let Some(java) = java.as_mut() {
        let reply = java
            .command(
                &format!("cachenode createz {root}/java {}", "java-side"),
                Duration::from_secs(30),
            )
            .unwrap();
        assert_eq!(reply, "OK created");
        let reply = java
            .command(
                &format!("cachenode getz {root}/rust"),
                Duration::from_secs(30),
            )
            .unwrap();
        assert_eq!(
            reply,
            format!("OK {text}"),
            "Curator reads latchkey's compressed node"
        );
    }

    let cache = CuratorCache::builder(&c, &root)
        .compressed_data()
        .build()
        .unwrap();
    cache.start().unwrap();
    let raw = CuratorCache::new(&c, &root).unwrap();
    raw.start().unwrap();
    let data =
        |cache: &CuratorCache, name: &str| cache.get(&format!("{root}/{name}")).map(|n| n.data);
    wait_until(
        Duration::from_secs(10),
        || data(&cache, "rust").is_some() && data(&cache, "plain").is_some(),
        || ctx.dump(),
    );
    assert_eq!(data(&cache, "rust").unwrap(), text.as_bytes());
    assert_eq!(data(&cache, "plain").unwrap(), b"not gzip", "kept as it is");
    assert_eq!(
        data(&raw, "rust").unwrap(),
        stored,
        "without the option: as stored"
    );
    if let Some(mut java) = java {
        assert_eq!(data(&cache, "java").unwrap(), b"java-side");
        let _ = java.quit(Duration::from_secs(30));
    }
    cache.close();
    raw.close();
    c.close();
    writer.close();
}

/// Issue 38 (9), kept as a regression test: a watch read just as the
/// session changes is recorded with the id seen after the reply, which
/// may be the next session's; the review feared the watch would then
/// never be set on the new session. It is: the old session's watch fires
/// `SessionExpired` and its callback clears it. Here the node cache's
/// session expires five times, each time with a write right after the new
/// session connects: every write is seen, and the cache's client ends
/// with one watch callback, not two.
#[test]
fn a_node_cache_sees_each_write_after_repeated_session_expiries() {
    let (cache_client, writer, ctx) = cache_and_writer();
    let path = unique("/caches/expiries");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&path, b"0")
        .unwrap();
    let cache = NodeCache::new(&cache_client, &path).unwrap();
    cache.start().unwrap();
    wait_until(
        Duration::from_secs(10),
        || data_of(&cache).as_deref() == Some(b"0"),
        || ctx.dump(),
    );
    for round in 1..=5u8 {
        let before = cache_client.session_id();
        cache_client.expire_session_for_testing().unwrap();
        wait_until(
            Duration::from_secs(20),
            || {
                let s = cache_client.session_id();
                s != 0 && s != before
            },
            || format!("round {round}: no new session\n{}", ctx.dump()),
        );
        let value = [b'0' + round];
        writer.set_data(&path, &value, None).unwrap();
        wait_until(
            Duration::from_secs(10),
            || data_of(&cache).as_deref() == Some(&value[..]),
            || format!("round {round}: the write was not seen\n{}", ctx.dump()),
        );
    }
    wait_until(
        Duration::from_secs(10),
        || cache_client.pending_watches() == 1,
        || {
            format!(
                "{} watch callbacks, want 1\n{}",
                cache_client.pending_watches(),
                ctx.dump()
            )
        },
    );
    cache.close();
}

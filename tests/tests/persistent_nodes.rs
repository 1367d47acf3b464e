//! `PersistentNode` and `GroupMember` against a real ZooKeeper: the node
//! stays present through a lost session and a delete by someone else,
//! keeps its latest data and its first name, and goes when closed. Every
//! wait is bounded, so a broken recipe fails within seconds.

mod common;

use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::{ConnectionState, CreateMode};
use latchkey_recipes::{GroupMember, PersistentNode};
use latchkey_test::{FaultProxy, TestingServer};

#[test]
fn an_ephemeral_node_comes_back_after_its_session_is_lost_and_after_a_delete() {
    let server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let owner = connect(&proxy.connect_string(), Duration::from_secs(4));
    let other = connect(&server.connect_string(), Duration::from_secs(20));
    let ctx = Ctx::new(&server, &owner);
    let base = unique("/persistent/comes-back");
    for (mode, protected) in [
        (CreateMode::Ephemeral, false),
        (CreateMode::EphemeralSequential, true),
    ] {
        let path = format!("{base}/{mode:?}-{protected}");
        let node = PersistentNode::new(&owner, mode, protected, &path, b"first").unwrap();
        node.start().unwrap();
        assert!(
            node.wait_for_initial_create(Duration::from_secs(10))
                .unwrap(),
            "{mode:?}: not created within 10 s\n{}",
            ctx.dump()
        );
        let actual = node.actual_path().unwrap();
        if protected {
            let name = actual.rsplit('/').next().unwrap();
            assert!(name.starts_with("_c_"), "protected name: {actual}");
        }
        assert_eq!(other.get_data(&actual).unwrap().0, b"first");
        assert_eq!(node.data(), b"first");

        // Someone deletes it: it is back, under the same name.
        other.delete().for_path(&actual).unwrap();
        wait_until(
            Duration::from_secs(10),
            || other.exists(&actual).unwrap().is_some(),
            || format!("{mode:?}: not back after a delete\n{}", ctx.dump()),
        );

        // New data, then the session goes (a partition longer than it):
        // back on the new session, with the new data.
        node.set_data(b"second").unwrap();
        assert_eq!(node.data(), b"second");
        wait_until(
            Duration::from_secs(10),
            || other.get_data(&actual).is_ok_and(|(d, _)| d == b"second"),
            || ctx.dump(),
        );
        let old_session = owner.session_id();
        let states = owner.listen();
        proxy.pause();
        ctx.expect(&states, ConnectionState::Lost, Duration::from_secs(30));
        wait_until(
            Duration::from_secs(20),
            || other.exists(&actual).unwrap().is_none(),
            || "the server did not expire the session".to_string(),
        );
        proxy.resume();
        wait_until(
            Duration::from_secs(20),
            || {
                owner.session_id() != old_session
                    && other
                        .exists(&actual)
                        .ok()
                        .flatten()
                        .is_some_and(|stat| stat.ephemeral_owner == owner.session_id())
            },
            || format!("{mode:?}: not back on the new session\n{}", ctx.dump()),
        );
        assert_eq!(other.get_data(&actual).unwrap().0, b"second");
        assert_eq!(node.actual_path().as_deref(), Some(actual.as_str()));

        // Closing deletes it for good.
        node.close();
        wait_until(
            Duration::from_secs(10),
            || other.exists(&actual).unwrap().is_none(),
            || ctx.dump(),
        );
        assert!(node.set_data(b"late").is_err(), "set_data after close");
        assert!(node.start().is_err(), "start after close");
    }
}

/// A node started while ZooKeeper is down is created once it is up
/// (Curator's TestPersistentEphemeralNode.testNoServerAtStart), and a wait
/// for its first create keeps its deadline meanwhile.
#[test]
fn waiting_for_the_first_create_keeps_its_deadline_while_zookeeper_is_down() {
    let mut server = TestingServer::start().expect("start ZooKeeper");
    let client = connect(&server.connect_string(), Duration::from_secs(20));
    let ctx = Ctx::new(&server, &client);
    let path = unique("/persistent/down");
    server.stop().unwrap();
    let node = PersistentNode::new(&client, CreateMode::Persistent, false, &path, b"x").unwrap();
    node.start().unwrap();
    let started = Instant::now();
    let created = node
        .wait_for_initial_create(Duration::from_secs(1))
        .unwrap();
    let took = started.elapsed();
    assert!(!created, "created with the server down?");
    assert!(
        took < Duration::from_millis(1500),
        "waited {took:?} for a 1 s timeout"
    );
    server.restart().unwrap();
    assert!(
        node.wait_for_initial_create(Duration::from_secs(30))
            .unwrap(),
        "not created within 30 s of the restart\n{}",
        ctx.dump()
    );
    // Dropping closes: the node is deleted, also a persistent one.
    drop(node);
    wait_until(
        Duration::from_secs(10),
        || client.exists(&path).unwrap().is_none(),
        || ctx.dump(),
    );
}

/// A node that is there with its data costs nothing: no request while
/// nothing changes (its watch waits), beyond setting that watch again.
#[test]
fn a_kept_node_sends_nothing_while_nothing_changes() {
    let c = &clients(1, Duration::from_secs(20))[0];
    let path = unique("/persistent/quiet");
    let node = PersistentNode::new(c, CreateMode::Ephemeral, false, &path, b"data").unwrap();
    node.start().unwrap();
    assert!(node
        .wait_for_initial_create(Duration::from_secs(10))
        .unwrap());
    node.set_data(b"new").unwrap();
    wait_until(
        Duration::from_secs(10),
        || c.get_data(&path).is_ok_and(|(d, _)| d == b"new"),
        || format!("{:?}", c.state_history()),
    );
    // The node's work takes milliseconds, so a second is a wide margin.
    // The watch that the write fired may be set again in the window.
    let sent = requests_sent_around(c, || {}, Duration::from_secs(1));
    assert!(sent <= 2, "an unchanged node sent {sent} requests in 1 s");
}

/// A plain node that is there already (someone's, or ours from an earlier
/// session) is kept, with our data; a create that ZooKeeper refuses (a
/// parent nobody may create under) is not taken for one.
#[test]
fn a_node_there_already_is_adopted_and_a_refused_create_is_not() {
    use latchkey_framework::{Acl, Perms};
    let c = &clients(1, Duration::from_secs(20))[0];
    let there = unique("/persistent/there");
    c.create()
        .creating_parents_if_needed()
        .for_path(&there, b"theirs")
        .unwrap();
    let adopted = PersistentNode::new(c, CreateMode::Persistent, false, &there, b"ours").unwrap();
    adopted.start().unwrap();
    assert!(adopted
        .wait_for_initial_create(Duration::from_secs(10))
        .unwrap());
    assert_eq!(adopted.actual_path().as_deref(), Some(there.as_str()));
    wait_until(
        Duration::from_secs(10),
        || c.get_data(&there).is_ok_and(|(d, _)| d == b"ours"),
        || format!("{:?}", c.state_history()),
    );
    let closed = unique("/persistent/closed-parent");
    c.create().for_path(&closed, b"").unwrap();
    c.set_acl(&closed, &[Acl::new(Perms::READ, "world", "anyone")], None)
        .unwrap();
    let refused =
        PersistentNode::new(c, CreateMode::Ephemeral, false, &format!("{closed}/n"), b"").unwrap();
    refused.start().unwrap();
    assert!(
        !refused
            .wait_for_initial_create(Duration::from_secs(2))
            .unwrap(),
        "created under a parent that refuses creates: {:?}",
        refused.actual_path()
    );
}

/// A write of new data that fails (its connection cut while the request
/// is held, on a client that does not retry) is written again later.
#[test]
fn new_data_whose_write_fails_is_written_again() {
    let cut = CutOff::new();
    let other = &clients(1, Duration::from_secs(20))[0];
    let path = unique("/persistent/rewritten");
    let node =
        PersistentNode::new(&cut.client, CreateMode::Persistent, false, &path, b"old").unwrap();
    node.start().unwrap();
    assert!(node
        .wait_for_initial_create(Duration::from_secs(10))
        .unwrap());
    // The setData request (op code 5) of the node.
    cut.fail_request(&request_on(5, &path), || node.set_data(b"new").unwrap());
    wait_until(
        Duration::from_secs(20),
        || other.get_data(&path).is_ok_and(|(d, _)| d == b"new"),
        || {
            format!(
                "the node holds {:?}\n{}",
                other.get_data(&path).map(|(d, _)| d),
                cut.ctx.dump()
            )
        },
    );
}

/// A node whose re-create ZooKeeper refuses (its parent now lets nobody
/// create) tries again after a pause, not in a loop.
#[test]
fn a_refused_re_create_is_retried_after_a_pause() {
    use latchkey_framework::{Acl, Perms};
    let (c, other) = {
        let mut cs = clients(2, Duration::from_secs(20));
        (cs.remove(0), cs.remove(0))
    };
    let parent = unique("/persistent/refusing");
    let path = format!("{parent}/n");
    c.create()
        .creating_parents_if_needed()
        .for_path(&parent, b"")
        .unwrap();
    let node = PersistentNode::new(&c, CreateMode::Persistent, false, &path, b"").unwrap();
    node.start().unwrap();
    assert!(node
        .wait_for_initial_create(Duration::from_secs(10))
        .unwrap());
    other
        .set_acl(
            &parent,
            &[Acl::new(
                Perms::READ | Perms::DELETE | Perms::ADMIN,
                "world",
                "anyone",
            )],
            None,
        )
        .unwrap();
    let sent = requests_sent_around(
        &c,
        || other.delete().for_path(&path).unwrap(),
        Duration::from_secs(2),
    );
    // A look and a refused create each second or so.
    assert!(
        sent <= 12,
        "a refused re-create sent {sent} requests in 2 s"
    );
    assert!(other.exists(&path).unwrap().is_none());
    other.set_acl(&parent, &Acl::open_unsafe(), None).unwrap();
    wait_until(
        Duration::from_secs(10),
        || other.exists(&path).is_ok_and(|s| s.is_some()),
        || format!("not created again once allowed: {:?}", c.state_history()),
    );
}

/// Bad arguments are refused with an error naming the path (Curator's
/// TestPersistentEphemeralNode.testNullPath: a path Rust cannot make null
/// is empty or invalid here).
#[test]
fn bad_arguments_are_refused_naming_the_path() {
    let client = &clients(1, Duration::from_secs(20))[0];
    for bad in ["", "x", "/a/", "/"] {
        let err = PersistentNode::new(client, CreateMode::Ephemeral, false, bad, b"").unwrap_err();
        assert!(err.to_string().contains(bad), "{bad:?}: {err}");
    }
    let err = PersistentNode::new(client, CreateMode::Container, false, "/c", b"").unwrap_err();
    assert!(err.to_string().contains("/c"), "{err}");
    for id in ["", "a/b"] {
        let err = GroupMember::new(client, "/g", id, b"").unwrap_err();
        assert!(err.to_string().contains("/g"), "{id:?}: {err}");
    }
    let path = unique("/persistent/twice");
    let node = PersistentNode::new(client, CreateMode::Ephemeral, false, &path, b"").unwrap();
    node.start().unwrap();
    let second = node.start().unwrap_err();
    assert!(
        second.to_string().contains(&path),
        "a second start is refused, naming the node: {second}"
    );
    // Unbounded, so run where a node never created fails the test.
    let created = call_within(
        "wait_for_initial_create(Duration::MAX)",
        Duration::from_secs(30),
        move || node.wait_for_initial_create(Duration::MAX),
    );
    assert!(created.unwrap(), "Duration::MAX waits as long as it takes");
}

#[test]
fn group_members_see_each_other_join_change_and_leave() {
    let server = shared_server();
    let cs = clients(3, Duration::from_secs(20));
    let ctx = Ctx::new(server, &cs[0]);
    let group = unique("/persistent/group");
    let members: Vec<GroupMember> = cs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let m =
                GroupMember::new(c, &group, &format!("m{i}"), format!("p{i}").as_bytes()).unwrap();
            m.start().unwrap();
            assert!(m.wait_joined(Duration::from_secs(10)).unwrap());
            m
        })
        .collect();
    let ids = |m: &GroupMember| -> Vec<String> { members_now(m).into_keys().collect() };
    // The members come from each one's cache, kept by watches: all are
    // there within a few seconds.
    for m in &members {
        wait_until(
            Duration::from_secs(10),
            || ids(m) == ["m0", "m1", "m2"],
            || format!("{} sees {:?}\n{}", m.id(), ids(m), ctx.dump()),
        );
    }
    members[1].set_this_data(b"changed").unwrap();
    wait_until(
        Duration::from_secs(10),
        || members_now(&members[0]).get("m1").map(Vec::as_slice) == Some(&b"changed"[..]),
        || ctx.dump(),
    );
    members[2].close();
    wait_until(
        Duration::from_secs(10),
        || ids(&members[0]) == ["m0", "m1"],
        || format!("m0 sees {:?}\n{}", ids(&members[0]), ctx.dump()),
    );
    assert_eq!(members[0].id(), "m0");
}

/// `current_members`, which must answer from the member's cache at once:
/// fails the test if it takes 100 ms or more.
fn members_now(m: &GroupMember) -> std::collections::BTreeMap<String, Vec<u8>> {
    // A call that blocks on the network fails the binary within 10 s.
    let _dog = Watchdog::new("GroupMember::current_members", Duration::from_secs(10));
    let began = Instant::now();
    let members = m.current_members();
    let took = began.elapsed();
    assert!(
        took < Duration::from_millis(100),
        "current_members of {} took {took:?}",
        m.id()
    );
    members
}

/// `GroupMember::current_members` is Curator's: a cache of the group,
/// kept by watches, that never waits on ZooKeeper and always lists this
/// member with its own data. It lists itself before it has started and
/// while its node cannot be created yet (requests paused), sees other
/// members join and leave within seconds, and while partitioned answers
/// at once with the members it knew. Before, it read ZooKeeper on every
/// call: before its node existed it left itself out, and partitioned it
/// waited on the network (Watchdog: no answer within 10 s).
#[test]
fn group_members_come_from_a_cache_that_always_lists_this_member() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = connect(&proxy.connect_string(), Duration::from_secs(30));
    let others = clients(2, Duration::from_secs(20));
    let ctx = Ctx::new(server, &c);
    let group = unique("/persistent/cached-group");
    let m0 = GroupMember::new(&others[0], &group, "m0", b"p0").unwrap();
    m0.start().unwrap();
    assert!(m0.wait_joined(Duration::from_secs(10)).unwrap());

    let me = GroupMember::new(&c, &group, "me", b"mine").unwrap();
    let only_me = std::collections::BTreeMap::from([("me".to_owned(), b"mine".to_vec())]);
    assert_eq!(members_now(&me), only_me, "before start");
    // Its node cannot be created until the requests go through.
    proxy.pause_requests();
    me.start().unwrap();
    assert_eq!(members_now(&me), only_me, "started, its node not created");
    me.set_this_data(b"mine2").unwrap();
    assert_eq!(
        members_now(&me).get("me").map(Vec::as_slice),
        Some(&b"mine2"[..]),
        "its own data, as set"
    );
    proxy.resume();
    let ids = |m: &GroupMember| -> Vec<String> { members_now(m).into_keys().collect() };
    wait_until(
        Duration::from_secs(10),
        || ids(&me) == ["m0", "me"],
        || format!("me sees {:?}\n{}", ids(&me), ctx.dump()),
    );

    // Another member joins, and leaves.
    let m1 = GroupMember::new(&others[1], &group, "m1", b"p1").unwrap();
    m1.start().unwrap();
    wait_until(
        Duration::from_secs(5),
        || ids(&me) == ["m0", "m1", "me"],
        || format!("m1 joined; me sees {:?}\n{}", ids(&me), ctx.dump()),
    );
    m1.close();
    wait_until(
        Duration::from_secs(5),
        || ids(&me) == ["m0", "me"],
        || format!("m1 left; me sees {:?}\n{}", ids(&me), ctx.dump()),
    );

    // Partitioned: at once, what it knew and itself.
    proxy.pause();
    let partitioned = members_now(&me);
    assert_eq!(
        partitioned,
        std::collections::BTreeMap::from([
            ("m0".to_owned(), b"p0".to_vec()),
            ("me".to_owned(), b"mine2".to_vec()),
        ]),
        "partitioned"
    );
    // Still at once after the connection is suspended.
    wait_until(
        Duration::from_secs(30),
        || c.state() == Some(ConnectionState::Suspended),
        || format!("not suspended\n{}", ctx.dump()),
    );
    assert_eq!(members_now(&me), partitioned, "suspended");
    proxy.resume();
}

/// Spins until `c` has sent more than `before` requests; fails the test
/// after 10 s.
fn until_sent_more_than(c: &latchkey_framework::Client, before: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.metrics().requests_sent <= before {
        assert!(Instant::now() < deadline, "{what}: no request within 10 s");
        std::hint::spin_loop();
    }
}

/// A `set_data` that comes while the node's thread writes the one before
/// reaches the node too. Before, the thread copied the data, looked at the
/// node (a round trip), then cleared the mark of new data, also the mark
/// of a `set_data` made meanwhile: that one was never written.
#[test]
fn a_set_data_during_the_write_of_the_one_before_is_written_too() {
    const ROUNDS: usize = 50;
    let (c, other) = {
        let mut cs = clients(2, Duration::from_secs(20));
        (cs.remove(0), cs.remove(0))
    };
    let path = unique("/persistent/quick-data");
    let node = PersistentNode::new(&c, CreateMode::Persistent, false, &path, b"").unwrap();
    node.start().unwrap();
    assert!(node
        .wait_for_initial_create(Duration::from_secs(10))
        .unwrap());
    for round in 0..ROUNDS {
        let before = c.metrics().requests_sent;
        node.set_data(format!("a{round}").as_bytes()).unwrap();
        // The node's thread has sent its first request for "a": the
        // second value comes while that pass is under way.
        until_sent_more_than(&c, before, &format!("round {round}"));
        node.set_data(format!("b{round}").as_bytes()).unwrap();
        wait_until(
            Duration::from_secs(5),
            || other.get_data(&path).is_ok_and(|(d, _)| d == node.data()),
            || {
                format!(
                    "round {round}: the node holds {:?}, data() is {:?}",
                    other
                        .get_data(&path)
                        .map(|(d, _)| String::from_utf8_lossy(&d).into_owned()),
                    String::from_utf8_lossy(&node.data())
                )
            },
        );
    }
}

/// A node deleted by someone else after its create but before its watch
/// is set comes back, as a `GroupMember`'s does. The node's client goes
/// through a proxy that holds its `exists` request (op code 3) on the
/// node until the other client has deleted it. Before, the watch found
/// the node missing and nothing created it again.
#[test]
fn a_node_deleted_before_its_watch_is_set_comes_back() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = connect(&proxy.connect_string(), Duration::from_secs(20));
    let other = &clients(1, Duration::from_secs(20))[0];
    let ctx = Ctx::new(server, &c);
    let base = unique("/persistent/early-delete");
    let group = format!("{base}/group");
    other
        .create()
        .creating_parents_if_needed()
        .for_path(&group, b"")
        .unwrap();
    for (kind, path) in [
        ("ephemeral", format!("{base}/ephemeral")),
        ("persistent", format!("{base}/persistent")),
        ("member", format!("{group}/m1")),
    ] {
        proxy.pause_requests_at(&request_on(3, &path));
        let (node, member);
        match kind {
            "member" => {
                member = Some(GroupMember::new(&c, &group, "m1", b"m").unwrap());
                node = None;
                member.as_ref().unwrap().start().unwrap();
            }
            _ => {
                let mode = match kind {
                    "ephemeral" => CreateMode::Ephemeral,
                    _ => CreateMode::Persistent,
                };
                node = Some(PersistentNode::new(&c, mode, false, &path, b"n").unwrap());
                member = None;
                node.as_ref().unwrap().start().unwrap();
            }
        }
        wait_until(
            Duration::from_secs(10),
            || proxy.requests_paused(),
            || format!("{kind}: no exists request on {path}\n{}", ctx.dump()),
        );
        other.delete().for_path(&path).unwrap();
        proxy.resume();
        let deleted = Instant::now();
        wait_until(
            Duration::from_secs(5),
            || other.exists(&path).unwrap().is_some(),
            || {
                format!(
                    "{kind}: {path} not back 5 s after the delete\n{}",
                    ctx.dump()
                )
            },
        );
        println!("{kind}: back {:?} after the delete", deleted.elapsed());
        if let Some(m) = &member {
            assert_eq!(members_now(m).into_keys().collect::<Vec<_>>(), ["m1"]);
        }
        drop((node, member));
        wait_until(
            Duration::from_secs(10),
            || other.exists(&path).unwrap().is_none(),
            || format!("{kind}: {path} not deleted on close\n{}", ctx.dump()),
        );
    }
}

/// A sequential TTL node is re-created under its first name (as a
/// `PersistentWithTtl` node, as Curator maps sequential modes once the
/// node exists): one node under the parent after each delete, none after
/// close. Before, each re-create made a new sequential node beside the
/// name, and those strays outlived the close.
#[test]
fn a_sequential_ttl_node_comes_back_under_its_first_name() {
    let config = latchkey_test::ServerConfig {
        system_properties: vec![("zookeeper.extendedTypesEnabled".into(), "true".into())],
        ..Default::default()
    };
    let server = TestingServer::start_with(config).expect("start ZooKeeper");
    let c = connect(&server.connect_string(), Duration::from_secs(20));
    let other = connect(&server.connect_string(), Duration::from_secs(20));
    let ctx = Ctx::new(&server, &c);
    let parent = unique("/persistent/ttl-seq");
    let ttl = CreateMode::PersistentSequentialWithTtl(Duration::from_secs(600));
    let node = PersistentNode::new(&c, ttl, false, &format!("{parent}/n-"), b"t").unwrap();
    node.start().unwrap();
    assert!(
        node.wait_for_initial_create(Duration::from_secs(10))
            .unwrap(),
        "not created\n{}",
        ctx.dump()
    );
    let actual = node.actual_path().unwrap();
    let name = actual.rsplit('/').next().unwrap().to_owned();
    for delete in 1..=2 {
        other.delete().for_path(&actual).unwrap();
        wait_until(
            Duration::from_secs(5),
            || !sorted_children(&other, &parent).is_empty(),
            || {
                format!(
                    "delete {delete}: nothing back under {parent}: {:?}\n{}",
                    other.get_children(&parent),
                    ctx.dump()
                )
            },
        );
        assert_eq!(
            sorted_children(&other, &parent),
            [name.as_str()],
            "delete {delete}: the nodes under {parent}"
        );
    }
    node.close();
    wait_until(
        Duration::from_secs(10),
        || sorted_children(&other, &parent).is_empty(),
        || format!("left after close: {:?}", sorted_children(&other, &parent)),
    );
}

/// Nodes closed while their first create is under way are deleted all
/// the same (Curator's TestPersistentNode.testQuickClose, 150 times). Each node is closed
/// right after its client sent the create; before, a create that the
/// server applied after the close left its node for good.
#[test]
fn a_node_closed_while_its_create_is_under_way_is_deleted() {
    const NODES: usize = 150;
    let (c, other) = {
        let mut cs = clients(2, Duration::from_secs(20));
        (cs.remove(0), cs.remove(0))
    };
    let parent = unique("/persistent/quick-close");
    other
        .create()
        .creating_parents_if_needed()
        .for_path(&parent, b"")
        .unwrap();
    for i in 0..NODES {
        let (mode, protected) = match i % 3 {
            0 => (CreateMode::Persistent, false),
            1 => (CreateMode::Ephemeral, false),
            _ => (CreateMode::PersistentSequential, true),
        };
        let path = format!("{parent}/n{i}-");
        let node = PersistentNode::new(&c, mode, protected, &path, b"").unwrap();
        let before = c.metrics().requests_sent;
        node.start().unwrap();
        // Every other node: closed once its create is sent, else at once.
        if i % 2 == 0 {
            until_sent_more_than(&c, before, &format!("node {i}"));
        }
        node.close();
    }
    let started = Instant::now();
    wait_until(
        Duration::from_secs(10),
        || sorted_children(&other, &parent).is_empty(),
        || {
            let left = sorted_children(&other, &parent);
            format!("{} of {NODES} nodes left after close: {left:?}", left.len())
        },
    );
    println!("all gone {:?} after the last close", started.elapsed());
}

/// `PersistentNode::listen` (Curator's `getListenable()` and
/// `nodeCreated(path)`): one event with the node's path when it is first
/// created, another each time it is created again after someone deletes
/// it; nothing for new data or for a node adopted as found; the channel
/// disconnects on close.
#[test]
fn listeners_hear_each_create_with_the_nodes_path() {
    let cs = clients(2, Duration::from_secs(20));
    let (owner, other) = (&cs[0], &cs[1]);
    let base = unique("/persistent/listen");
    for (mode, protected) in [
        (CreateMode::Ephemeral, false),
        (CreateMode::EphemeralSequential, true),
    ] {
        let path = format!("{base}/{mode:?}-{protected}");
        let node = PersistentNode::new(owner, mode, protected, &path, b"1").unwrap();
        let created = node.listen();
        node.start().unwrap();
        assert!(node
            .wait_for_initial_create(Duration::from_secs(10))
            .unwrap());
        let actual = node.actual_path().unwrap();
        // Told before the first create is visible to waiters.
        let told: Vec<String> = created.try_iter().collect();
        assert_eq!(
            told,
            std::slice::from_ref(&actual),
            "{mode:?}: after the first create"
        );
        assert!(other.exists(&actual).unwrap().is_some());

        // New data: nothing told.
        node.set_data(b"2").unwrap();
        wait_until(
            Duration::from_secs(10),
            || other.get_data(&actual).is_ok_and(|(d, _)| d == b"2"),
            || format!("{mode:?}: new data not written"),
        );
        assert_eq!(created.try_iter().count(), 0, "{mode:?}: told for set_data");

        // Deleted by someone else: created again, and told, with the path.
        other.delete().for_path(&actual).unwrap();
        let again = created.recv_timeout(Duration::from_secs(10));
        assert_eq!(again.as_deref(), Ok(actual.as_str()), "{mode:?}: re-create");
        assert!(other.exists(&actual).unwrap().is_some());
        assert_eq!(other.get_data(&actual).unwrap().0, b"2");
        assert_eq!(created.try_iter().count(), 0, "{mode:?}: told twice");

        node.close();
        assert_eq!(
            created.recv_timeout(Duration::from_secs(10)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected),
            "{mode:?}: the channel after close"
        );
        assert!(matches!(
            node.listen().try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        ));
    }

    // A node found there already is adopted without a create: not told.
    let there = format!("{base}/there");
    other.create().for_path(&there, b"theirs").unwrap();
    let adopted =
        PersistentNode::new(owner, CreateMode::Persistent, false, &there, b"ours").unwrap();
    let created = adopted.listen();
    adopted.start().unwrap();
    assert!(adopted
        .wait_for_initial_create(Duration::from_secs(10))
        .unwrap());
    wait_until(
        Duration::from_secs(10),
        || other.get_data(&there).is_ok_and(|(d, _)| d == b"ours"),
        || "the adopted node never got our data".to_string(),
    );
    assert_eq!(created.try_iter().count(), 0, "told for an adopted node");
}

/// Data no ZooKeeper request can carry is refused when the node is made,
/// naming the path, instead of a node that is never created (the server
/// drops the connection of each oversized create, and only
/// `wait_for_initial_create` timing out would tell).
#[test]
fn data_too_large_for_one_request_is_refused_when_the_node_is_made() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let path = unique("/persistent_nodes/too_large");
    let big = vec![7u8; 2 << 20];
    for mode in [
        CreateMode::Ephemeral,
        CreateMode::Persistent,
        CreateMode::EphemeralSequential,
    ] {
        match PersistentNode::new(&c, mode, false, &path, &big) {
            Err(e) => {
                let message = e.to_string();
                assert!(message.contains(&path), "{mode:?}: {message}");
            }
            Ok(node) => {
                let _ = node.start();
                let created = node.wait_for_initial_create(Duration::from_secs(2));
                node.close();
                panic!("{mode:?}: accepted 2 MiB of data; created within 2 s: {created:?}");
            }
        }
    }
    // Just under the limit is fine.
    let node = PersistentNode::new(
        &c,
        CreateMode::Ephemeral,
        false,
        &path,
        &vec![7u8; 1000 << 10],
    )
    .expect("1000 KiB fits in one request");
    node.start().unwrap();
    assert!(node
        .wait_for_initial_create(Duration::from_secs(10))
        .unwrap());
    node.close();
}

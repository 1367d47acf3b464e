//! ZooKeeper 3.5+ operations against a real server: getChildren2, getACL
//! and setACL, getEphemerals, getAllChildrenNumber, whoAmI, getConfig, and
//! TTL nodes on a server with extended types enabled.

mod common;

use std::time::Duration;

use common::*;
use latchkey_framework::{Acl, Client, CreateMode, Error, ErrorCode, Perms};
use latchkey_test::{ServerConfig, TestingServer};

fn namespaced(server: &TestingServer, ns: &str) -> Client {
    start_connected(
        Client::builder()
            .connect_string(server.connect_string())
            .namespace(ns.trim_start_matches('/')),
    )
}

#[test]
fn children_with_stat_and_the_number_of_all_children() {
    let server = shared_server();
    let c = namespaced(server, &unique("ext-children"));
    let ctx = Ctx::new(server, &c);
    for p in ["/p/a/x", "/p/b"] {
        c.create()
            .creating_parents_if_needed()
            .for_path(p, b"")
            .unwrap();
    }
    let (mut children, stat) = c.get_children_with_stat("/p").unwrap();
    children.sort();
    assert_eq!(children, ["a", "b"], "{}", ctx.dump());
    assert_eq!((stat.num_children, stat.cversion), (2, 2));
    assert_eq!(c.get_all_children_number("/p").unwrap(), 3);
    assert_eq!(c.get_all_children_number("/p/b").unwrap(), 0);
    for err in [
        c.get_children_with_stat("/missing").unwrap_err(),
        c.get_all_children_number("/missing")
            .map(|_| ())
            .unwrap_err(),
    ] {
        assert!(err.is(ErrorCode::NoNode), "{err}");
        assert!(err.to_string().contains("/missing"), "{err}");
    }
    let err = c.get_all_children_number("bad").unwrap_err();
    assert!(matches!(err, Error::InvalidPath { .. }), "{err}");
    c.close();
}

#[test]
fn acls_are_read_and_set_with_their_version() {
    let server = shared_server();
    let c = namespaced(server, &unique("ext-acl"));
    c.create().for_path("/n", b"").unwrap();
    let (acl, stat) = c.get_acl("/n").unwrap();
    assert_eq!(acl, Acl::open_unsafe());
    assert_eq!(stat.aversion, 0);

    let err = c.set_acl("/n", &Acl::open_unsafe(), Some(5)).unwrap_err();
    assert!(err.is(ErrorCode::BadVersion), "{err}");
    assert!(err.to_string().contains("set_acl /n"), "{err}");
    let stat = c.set_acl("/n", &Acl::read_unsafe(), Some(0)).unwrap();
    assert_eq!(stat.aversion, 1);
    let (acl, _) = c.get_acl("/n").unwrap();
    assert_eq!(acl, vec![Acl::new(Perms::READ, "world", "anyone")]);
    let err = c.set_data("/n", b"x", None).unwrap_err();
    assert!(err.is(ErrorCode::NoAuth), "{err}");
    // Without ADMIN the ACL cannot be changed back.
    let err = c.set_acl("/n", &Acl::open_unsafe(), None).unwrap_err();
    assert!(err.is(ErrorCode::NoAuth), "{err}");

    let err = c.set_acl("/n", &[], None).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("set_acl /n")),
        "{err}"
    );
    let err = c.get_acl("/missing").unwrap_err();
    assert!(
        err.is(ErrorCode::NoNode) && err.to_string().contains("/missing"),
        "{err}"
    );
    c.close();
}

#[test]
fn ephemerals_of_this_session_only_within_the_namespace() {
    let server = shared_server();
    let ns = unique("ext-eph");
    let c = namespaced(server, &ns);
    let other = namespaced(server, &ns);
    // A sibling namespace whose name the first one prefixes as text.
    let sibling = namespaced(server, &format!("{ns}x"));
    c.create().for_path("/p", b"").unwrap();
    c.create().for_path("/p/a", b"").unwrap();
    for (client, path) in [
        (&c, "/p/e1"),
        (&c, "/p/a/e2"),
        (&other, "/p/o"),
        (&sibling, "/s"),
    ] {
        client
            .create()
            .mode(CreateMode::Ephemeral)
            .for_path(path, b"")
            .unwrap();
    }
    let mut all = c.get_ephemerals("/").unwrap();
    all.sort();
    assert_eq!(all, ["/p/a/e2", "/p/e1"]);
    assert_eq!(c.get_ephemerals("/p/a").unwrap(), ["/p/a/e2"]);
    assert!(c.get_ephemerals("/q").unwrap().is_empty());
    let err = c.get_ephemerals("").unwrap_err();
    assert!(matches!(err, Error::InvalidPath { .. }), "{err}");
    for client in [c, other, sibling] {
        client.close();
    }
}

#[test]
fn who_am_i_and_the_ensemble_config() {
    let server = shared_server();
    let plain = connect(&server.connect_string(), Duration::from_secs(10));
    let infos = plain.who_am_i().unwrap();
    assert!(
        infos
            .iter()
            .any(|i| i.auth_scheme == "ip" && i.user == "127.0.0.1"),
        "{infos:?}"
    );
    let authed = start_connected(
        Client::builder()
            .connect_string(server.connect_string())
            .authorization("digest", b"alice:secret"),
    );
    let infos = authed.who_am_i().unwrap();
    assert!(
        infos
            .iter()
            .any(|i| i.auth_scheme == "digest" && i.user == "alice"),
        "{infos:?}"
    );
    // A standalone server has no dynamic configuration; the node is there.
    let (_config, stat) = plain.get_config().unwrap();
    assert!(stat.czxid >= 0);
    plain.close();
    authed.close();
}

#[test]
fn ttl_nodes_go_after_their_ttl_and_bad_ttls_are_refused() {
    let config = ServerConfig {
        system_properties: vec![
            ("zookeeper.extendedTypesEnabled".into(), "true".into()),
            ("znode.container.checkIntervalMs".into(), "100".into()),
        ],
        ..Default::default()
    };
    let server = TestingServer::start_with(config).unwrap();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(&server, &c);
    let ttl = Duration::from_millis(300);
    c.create()
        .mode(CreateMode::PersistentWithTtl(ttl))
        .for_path("/ttl", b"")
        .unwrap();
    let seq = c
        .create()
        .mode(CreateMode::PersistentSequentialWithTtl(ttl))
        .for_path("/ttl-seq-", b"")
        .unwrap();
    assert_eq!(seq.len(), "/ttl-seq-".len() + 10, "{seq}");
    let results = c
        .transaction()
        .create_with_mode("/ttl-txn", b"", CreateMode::PersistentWithTtl(ttl))
        .commit()
        .unwrap();
    assert_eq!(results[0].result_path.as_deref(), Some("/ttl-txn"));
    c.create().for_path("/plain", b"").unwrap();
    wait_until(
        Duration::from_secs(20),
        || {
            ["/ttl", seq.as_str(), "/ttl-txn"]
                .iter()
                .all(|p| c.exists(p).unwrap().is_none())
        },
        || ctx.dump(),
    );
    assert!(c.exists("/plain").unwrap().is_some());

    for bad in [Duration::ZERO, Duration::from_micros(999), Duration::MAX] {
        let err = c
            .create()
            .mode(CreateMode::PersistentWithTtl(bad))
            .for_path("/bad-ttl", b"")
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.contains("create /bad-ttl") && m.contains("TTL")),
            "{err}"
        );
        let err = c
            .transaction()
            .create_with_mode("/bad-ttl", b"", CreateMode::PersistentWithTtl(bad))
            .commit()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
    assert!(c.exists("/bad-ttl").unwrap().is_none());
    c.close();
}

/// A server without extended types refuses TTL nodes; the error names the
/// operation and the path.
#[test]
fn ttl_nodes_on_a_server_without_extended_types_fail_clearly() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let path = unique("ext-ttl-off");
    let err = c
        .create()
        .mode(CreateMode::PersistentWithTtl(Duration::from_secs(1)))
        .for_path(&path, b"")
        .unwrap_err();
    assert!(err.to_string().contains(&format!("create {path}")), "{err}");
    assert!(err.is(ErrorCode::Unimplemented), "{err}");
    assert!(c.exists(&path).unwrap().is_none());
    c.close();
}

/// Auth added at run time opens nodes at once and is sent again on every
/// reconnect.
#[test]
fn auth_added_at_run_time_is_used_now_and_after_a_reconnect() {
    let server = shared_server();
    let owner = start_connected(
        Client::builder()
            .connect_string(server.connect_string())
            .authorization("digest", b"alice:secret"),
    );
    let path = unique("ext-auth");
    owner
        .create()
        .with_acl(Acl::creator_all())
        .for_path(&path, b"private")
        .unwrap();
    let proxy = latchkey_test::FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let err = c.get_data(&path).unwrap_err();
    assert!(err.is(ErrorCode::NoAuth), "{err}");

    c.add_auth("digest", b"alice:secret").unwrap();
    assert_eq!(c.get_data(&path).unwrap().0, b"private");
    let infos = c.who_am_i().unwrap();
    assert!(infos.iter().any(|i| i.user == "alice"), "{infos:?}");

    let states = c.listen();
    proxy.cut();
    ctx.expect(
        &states,
        latchkey_framework::ConnectionState::Reconnected,
        Duration::from_secs(20),
    );
    assert_eq!(c.get_data(&path).unwrap().0, b"private", "{}", ctx.dump());

    let err = c.add_auth("", b"x").unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    c.close();
    owner.close();
}

/// A scheme the server does not know is rejected: a clear error naming
/// the call and the scheme; the client then gets a new session without it.
#[test]
fn a_rejected_auth_at_run_time_fails_clearly_and_is_not_sent_again() {
    let server = shared_server();
    let c = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &c);
    let err = c.add_auth("nosuchscheme", b"x").unwrap_err();
    assert!(err.is(ErrorCode::AuthFailed), "{err}\n{}", ctx.dump());
    assert!(err.to_string().contains("add_auth nosuchscheme"), "{err}");
    wait_until(
        Duration::from_secs(30),
        || c.exists("/").map(|s| s.is_some()).unwrap_or(false),
        || ctx.dump(),
    );
    c.close();
}

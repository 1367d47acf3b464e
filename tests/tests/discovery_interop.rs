//! latchkey-discovery and Apache Curator's `curator-x-discovery` 5.4 (Java,
//! Debian's `libcurator-discovery-java`) on the same ZooKeeper: instances
//! registered by Curator are read here with every field, ours are read by
//! Curator with every field, each side's `ServiceCache` sees the other
//! side's instances come and go, and Curator's cache sees a latchkey
//! instance back within 2 s of latchkey's new session after an expiry.
//!
//! The Java side is `tests/peers/DiscoveryPeer.java` (the `disc` commands
//! of `latchkey_test::peers`). One peer serves the whole binary.

mod common;

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use common::*;
use latchkey_discovery::{
    JsonInstanceSerializer, ServiceCacheEvent, ServiceDiscovery, ServiceInstance, ServiceType,
    UriSpec,
};
use latchkey_framework::Client;
use latchkey_test::peers::{Peer, PeerKind};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

const ANSWER: Duration = Duration::from_secs(30);
/// The peer's payload class.
const DETAILS: &str = "DiscoveryPeer$Details";
const URI: &str = "{scheme}://{address}:{port}/x{[}y{]}";

fn peer() -> MutexGuard<'static, Peer> {
    static PEER: OnceLock<Mutex<Peer>> = OnceLock::new();
    PEER.get_or_init(|| {
        Mutex::new(
            Peer::start(
                PeerKind::CuratorDiscovery,
                &shared_server().connect_string(),
            )
            .expect("start the Curator discovery peer"),
        )
    })
    .lock()
    .unwrap_or_else(|p| p.into_inner())
}

fn java(line: &str) -> String {
    peer()
        .command_ok(line, ANSWER)
        .unwrap_or_else(|e| panic!("{line}: {e}"))
}

fn client() -> Client {
    connect(&shared_server().connect_string(), Duration::from_secs(10))
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Details {
    region: String,
    weight: i32,
}

/// One instance spec for the peer, every field set, and what Rust should
/// read back for its payload.
struct Case {
    id: &'static str,
    kind: &'static str,
    payload: Value,
    class: Option<&'static str>,
    service_type: &'static str,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            id: "none",
            kind: "none",
            payload: Value::Null,
            class: None,
            service_type: "DYNAMIC",
        },
        Case {
            id: "string",
            kind: "string",
            payload: json!("thing"),
            class: None,
            service_type: "STATIC",
        },
        Case {
            id: "long",
            kind: "long",
            payload: json!(12345),
            class: Some("java.lang.Long"),
            service_type: "PERMANENT",
        },
        Case {
            id: "details",
            kind: "details",
            payload: json!({"region": "eu", "weight": 7}),
            class: Some(DETAILS),
            service_type: "DYNAMIC",
        },
        Case {
            id: "map",
            kind: "map",
            payload: json!({"k": "v"}),
            class: Some("java.util.HashMap"),
            service_type: "DYNAMIC",
        },
        Case {
            id: "list",
            kind: "list",
            payload: json!(["a", "b"]),
            class: Some("java.util.ArrayList"),
            service_type: "DYNAMIC",
        },
    ]
}

#[test]
fn curators_instances_are_read_with_every_field() {
    let c = client();
    for compatible in [true, false] {
        let base = unique("/discovery-interop/from-java");
        java(&format!("disc open {base} {compatible}"));
        for case in cases() {
            let spec = json!({
                "name": "svc", "id": case.id, "address": "10.1.2.3", "port": 8080,
                "sslPort": 8443, "registrationTimeUTC": 1_700_000_000_123_i64,
                "serviceType": case.service_type, "uriSpec": URI, "enabled": false,
                "payloadKind": case.kind, "payload": case.payload,
            });
            assert_eq!(java(&format!("disc register {base} {spec}")), case.id);
        }
        let d = ServiceDiscovery::<Value>::builder(&c)
            .base_path(&base)
            .build()
            .unwrap();
        assert_eq!(d.query_for_names().unwrap(), vec!["svc"]);
        let read = d.query_for_instances("svc").unwrap();
        assert_eq!(read.len(), cases().len(), "{read:?}");
        for case in cases() {
            let i = read.iter().find(|i| i.id == case.id).unwrap();
            assert_eq!(i.name, "svc");
            assert_eq!(i.address.as_deref(), Some("10.1.2.3"));
            assert_eq!(i.port, Some(8080));
            assert_eq!(i.ssl_port, Some(8443));
            assert_eq!(i.registration_time_utc, 1_700_000_000_123);
            assert_eq!(i.service_type.as_str(), case.service_type);
            assert_eq!(i.uri_spec, Some(UriSpec::parse(URI).unwrap()));
            assert_eq!(i.build_uri_spec(), "https://10.1.2.3:8080/x{y}");
            // Curator's compatible mode does not write `enabled`.
            assert_eq!(i.enabled, compatible, "{}", case.id);
            assert_eq!(
                i.payload.clone().unwrap_or(Value::Null),
                case.payload,
                "{}",
                case.id
            );
            assert_eq!(i.payload_class.as_deref(), case.class, "{}", case.id);
            assert!(i.extra.is_empty());
        }
        // The typed payload.
        let typed = ServiceDiscovery::<Details>::builder(&c)
            .base_path(&base)
            .build()
            .unwrap();
        let details = typed.query_for_instance("svc", "details").unwrap().unwrap();
        assert_eq!(
            details.payload,
            Some(Details {
                region: "eu".into(),
                weight: 7
            })
        );
        // The others are not Details: skipped by a query, one bad instance each.
        assert_eq!(
            typed.query_for_instances("svc").unwrap().len(),
            2,
            "details and none"
        );
        java(&format!("disc close {base}"));
        assert!(
            d.query_for_instances("svc").unwrap().is_empty(),
            "Curator's close unregisters all"
        );
    }
}

/// What Java says about an instance, from its getters.
fn java_instances(base: &str, name: &str) -> Vec<Value> {
    let answer = java(&format!("disc query {base} {name}"));
    serde_json::from_str::<Vec<Value>>(&answer).unwrap_or_else(|e| panic!("{answer}: {e}"))
}

#[test]
fn latchkeys_instances_are_read_by_curator_with_every_field() {
    let c = client();
    let base = unique("/discovery-interop/from-rust");
    java(&format!("disc open {base} true"));
    for compatible in [true, false] {
        let d = ServiceDiscovery::<Value>::builder(&c)
            .base_path(&base)
            .serializer(JsonInstanceSerializer::new().compatible_serialization(compatible))
            .build()
            .unwrap();
        d.start().unwrap();
        let types = [
            ServiceType::Dynamic,
            ServiceType::Static,
            ServiceType::Permanent,
            ServiceType::Dynamic,
            ServiceType::Dynamic,
            ServiceType::Dynamic,
        ];
        let payloads: [(Option<Value>, Option<&str>, &str); 6] = [
            (None, None, "none"),
            (Some(json!("thing")), None, "java.lang.String"),
            (Some(json!(12345)), Some("java.lang.Long"), "java.lang.Long"),
            (
                Some(json!({"region": "eu", "weight": 7})),
                Some(DETAILS),
                DETAILS,
            ),
            (Some(json!({"k": "v"})), None, "java.util.LinkedHashMap"),
            (Some(json!(["a", "b"])), None, "java.util.ArrayList"),
        ];
        let mut mine = Vec::new();
        for (n, ((payload, class, _), t)) in payloads.iter().zip(types).enumerate() {
            let mut i = ServiceInstance::<Value>::builder("svc")
                .id(&format!("i{n}-{compatible}"))
                .address("10.9.8.7")
                .port(80)
                .ssl_port(443)
                .registration_time_utc(1_600_000_000_000 + n as i64)
                .service_type(t)
                .uri_spec(UriSpec::parse(URI).unwrap())
                .enabled(false)
                .build();
            i.payload = payload.clone();
            i.payload_class = class.map(str::to_owned);
            d.register_service(&i).unwrap();
            mine.push(i);
        }
        let seen = java_instances(&base, "svc");
        for (i, (payload, _, java_class)) in mine.iter().zip(&payloads) {
            let j = seen
                .iter()
                .find(|j| j["id"] == json!(i.id))
                .unwrap_or_else(|| panic!("Curator does not list {}: {seen:?}", i.id));
            assert_eq!(j["name"], json!("svc"));
            assert_eq!(j["address"], json!("10.9.8.7"));
            assert_eq!(j["port"], json!(80));
            assert_eq!(j["sslPort"], json!(443));
            assert_eq!(j["registrationTimeUTC"], json!(i.registration_time_utc));
            assert_eq!(j["serviceType"], json!(i.service_type.as_str()));
            let parts: Vec<Value> = i
                .uri_spec
                .as_ref()
                .unwrap()
                .parts()
                .iter()
                .map(|p| json!([p.value, p.variable]))
                .collect();
            assert_eq!(j["uriParts"], Value::Array(parts));
            assert_eq!(j["uri"], json!(i.build_uri_spec()));
            assert_eq!(
                j["enabled"],
                json!(compatible),
                "compatible mode leaves enabled out"
            );
            match payload {
                None => assert_eq!(j["payloadClass"], Value::Null),
                Some(p) => {
                    assert_eq!(j["payloadClass"], json!(java_class), "{}", i.id);
                    assert_eq!(&j["payload"], p, "{}", i.id);
                }
            }
            // And one by one.
            let one: Value =
                serde_json::from_str(&java(&format!("disc get {base} svc {}", i.id))).unwrap();
            assert_eq!(&one, j);
        }
        d.close();
        assert!(java_instances(&base, "svc").is_empty());
    }

    // A typed payload: Java makes its own class of it.
    let typed = ServiceDiscovery::<Details>::builder(&c)
        .base_path(&base)
        .serializer(JsonInstanceSerializer::new().payload_class(DETAILS))
        .build()
        .unwrap();
    let i = ServiceInstance::builder("typed")
        .payload(Details {
            region: "us".into(),
            weight: -3,
        })
        .build();
    typed.register_service(&i).unwrap();
    let seen = java_instances(&base, "typed");
    assert_eq!(seen[0]["payloadClass"], json!(DETAILS));
    assert_eq!(seen[0]["payload"], json!({"region": "us", "weight": -3}));
    assert_eq!(seen[0]["address"], json!(i.address));
    assert_eq!(seen[0]["enabled"], json!(true));
}

#[test]
fn caches_see_the_other_sides_instances_come_and_go() {
    let c = client();
    let base = unique("/discovery-interop/caches");
    java(&format!("disc open {base} true"));
    java(&format!("disc cache {base} svc start"));
    let d = ServiceDiscovery::<Value>::builder(&c)
        .base_path(&base)
        .build()
        .unwrap();
    d.start().unwrap();
    let cache = d.service_cache_builder().name("svc").build().unwrap();
    cache.start().unwrap();
    let events = cache.listen();

    // Ours, in Curator's cache.
    let mine = ServiceInstance::<Value>::builder("svc")
        .id("rust-1")
        .port(1)
        .build();
    d.register_service(&mine).unwrap();
    wait_until(
        Duration::from_secs(10),
        || java(&format!("disc cache {base} svc ids")) == "rust-1",
        || "Curator's cache never listed the latchkey instance".into(),
    );
    // Curator's, in ours.
    let spec = json!({"name": "svc", "id": "java-1", "address": "10.0.0.1", "port": 2,
        "payloadKind": "details", "payload": {"region": "eu", "weight": 1}});
    java(&format!("disc register {base} {spec}"));
    let added = loop {
        match events.recv_timeout(Duration::from_secs(10)) {
            Ok(ServiceCacheEvent::Added(i)) if i.id == "java-1" => break i,
            Ok(_) => {}
            Err(e) => panic!("no Added event for Curator's instance: {e}"),
        }
    };
    assert_eq!(added.payload_class.as_deref(), Some(DETAILS));
    assert_eq!(added.port, Some(2));
    wait_until(
        Duration::from_secs(10),
        || java(&format!("disc cache {base} svc ids")) == "java-1,rust-1",
        || "Curator's cache does not list both".into(),
    );
    // Both go.
    d.unregister_service(&mine).unwrap();
    java(&format!("disc unregister {base} java-1"));
    let mut removed = Vec::new();
    while removed.len() < 2 {
        match events.recv_timeout(Duration::from_secs(10)) {
            Ok(ServiceCacheEvent::Removed(i)) => removed.push(i.id),
            Ok(_) => {}
            Err(e) => panic!("missing Removed events (got {removed:?}): {e}"),
        }
    }
    removed.sort();
    assert_eq!(removed, vec!["java-1", "rust-1"]);
    assert!(cache.instances().is_empty());
    wait_until(
        Duration::from_secs(10),
        || java(&format!("disc cache {base} svc ids")).is_empty(),
        || "Curator's cache still lists instances".into(),
    );
    assert!(
        java(&format!("disc cache {base} svc changes"))
            .parse::<u32>()
            .unwrap()
            >= 3
    );
    java(&format!("disc cache {base} svc close"));
    java(&format!("disc close {base}"));
}

/// A latchkey instance whose session expires is back in Curator's cache
/// within 2 s of latchkey's new session.
#[test]
fn curators_cache_sees_a_latchkey_instance_back_after_an_expiry() {
    let c = connect(&shared_server().connect_string(), Duration::from_secs(2));
    let base = unique("/discovery-interop/expiry");
    java(&format!("disc open {base} true"));
    java(&format!("disc cache {base} svc start"));
    let d = ServiceDiscovery::<Value>::builder(&c)
        .base_path(&base)
        .build()
        .unwrap();
    d.start().unwrap();
    let mine = ServiceInstance::<Value>::builder("svc")
        .id("rust-x")
        .build();
    d.register_service(&mine).unwrap();
    wait_until(
        Duration::from_secs(10),
        || java(&format!("disc cache {base} svc ids")) == "rust-x",
        || "Curator's cache never listed the latchkey instance".into(),
    );
    let changes = |java_changes: String| java_changes.parse::<u32>().unwrap();
    let before = changes(java(&format!("disc cache {base} svc changes")));
    let old_session = c.session_id();
    c.expire_session_for_testing().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while c.session_id() == old_session || !c.state().is_some_and(|s| s.is_connected()) {
        assert!(
            std::time::Instant::now() < deadline,
            "no new session: {:?}",
            c.state_history()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Curator's cache saw it go and come back (or at least change).
    wait_until(
        Duration::from_secs(2),
        || {
            changes(java(&format!("disc cache {base} svc changes"))) >= before + 2
                && java(&format!("disc cache {base} svc ids")) == "rust-x"
        },
        || {
            format!(
                "Curator's cache after the expiry: ids {:?}, {} changes",
                java(&format!("disc cache {base} svc ids")),
                java(&format!("disc cache {base} svc changes"))
            )
        },
    );
    java(&format!("disc cache {base} svc close"));
    java(&format!("disc close {base}"));
}

/// Nodes written raw, read by Curator (Jackson) and by latchkey: both read
/// each the same way, or both refuse it. What Curator 5.4 makes of them:
/// `"enabled": null` is `false` (a JSON null into Java's primitive
/// `boolean`), a missing `enabled` is `true`; a port is an `Integer`, so
/// 70,000 or -1 are ports (here `None`, the number kept in `extra`), one
/// beyond Java's `int` makes the node unreadable.
#[test]
fn edge_values_are_read_as_curator_reads_them() {
    let c = client();
    let base = unique("/discovery-interop/edges");
    java(&format!("disc open {base} true"));
    let cases: &[(&str, &str)] = &[
        (
            "enabled-null",
            r#"{"name":"svc","id":"enabled-null","enabled":null}"#,
        ),
        (
            "enabled-missing",
            r#"{"name":"svc","id":"enabled-missing"}"#,
        ),
        (
            "enabled-true",
            r#"{"name":"svc","id":"enabled-true","enabled":true}"#,
        ),
        (
            "enabled-false",
            r#"{"name":"svc","id":"enabled-false","enabled":false}"#,
        ),
        (
            "port-big",
            r#"{"name":"svc","id":"port-big","port":70000,"sslPort":-1,"uriSpec":{"parts":[{"value":"scheme","variable":true},{"value":"://h:","variable":false},{"value":"port","variable":true},{"value":"/","variable":false},{"value":"ssl-port","variable":true}]}}"#,
        ),
        (
            "port-string",
            r#"{"name":"svc","id":"port-string","port":"70000"}"#,
        ),
        (
            "port-int-max",
            r#"{"name":"svc","id":"port-int-max","port":2147483647}"#,
        ),
        (
            "port-beyond-int",
            r#"{"name":"svc","id":"port-beyond-int","port":3000000000}"#,
        ),
        (
            "ssl-beyond-int",
            r#"{"name":"svc","id":"ssl-beyond-int","sslPort":-2147483649}"#,
        ),
    ];
    let d = ServiceDiscovery::<Value>::builder(&c)
        .base_path(&base)
        .build()
        .unwrap();
    for (id, raw) in cases {
        c.create()
            .creating_parent_containers_if_needed()
            .for_path(&format!("{base}/svc/{id}"), raw.as_bytes())
            .unwrap();
        let line = format!("disc get {base} svc {id}");
        let answer = peer()
            .command(&line, ANSWER)
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        let ours = d.query_for_instance("svc", id);
        match answer.strip_prefix("OK ") {
            Some(json) => {
                let j: Value = serde_json::from_str(json).unwrap();
                let i = ours
                    .unwrap_or_else(|e| panic!("{raw}: Curator reads {j}, latchkey refuses: {e}"))
                    .unwrap();
                assert_eq!(json!(i.enabled), j["enabled"], "{raw}: enabled");
                // A port that is no u16 is kept in `extra`, as written.
                for (ours, field) in [(i.port, "port"), (i.ssl_port, "sslPort")] {
                    let number = match ours {
                        Some(p) => json!(p),
                        None => match i.extra.get(field) {
                            Some(Value::String(s)) => json!(s.parse::<i64>().unwrap()),
                            Some(v) => v.clone(),
                            None => Value::Null,
                        },
                    };
                    assert_eq!(number, j[field], "{raw}: {field}");
                }
                assert_eq!(json!(i.build_uri_spec()), j["uri"], "{raw}: uri");
            }
            None => assert!(
                answer.starts_with("ERR") && ours.is_err(),
                "{raw}: Curator refuses it ({answer:?}), latchkey reads {ours:?}"
            ),
        }
    }
    java(&format!("disc close {base}"));
}

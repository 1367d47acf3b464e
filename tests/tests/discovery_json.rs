//! latchkey-discovery without a server: the instance JSON (byte for byte
//! what Curator 5.4's `JsonInstanceSerializer` writes, checked against
//! Debian's jar), `UriSpec`, the provider strategies and the down-instance
//! manager; and bad input, which must be an error and never a panic.
//!
//! Curator's test classes, method by method:
//!
//! | Curator | here |
//! |---|---|
//! | `TestJsonInstanceSerializer.testBasic` | `json_round_trip_keeps_every_field` |
//! | `TestJsonInstanceSerializer.testWrongPayloadType` | `a_payload_of_another_type_is_an_error` |
//! | `TestJsonInstanceSerializer.testNoPayload` | `no_payload_round_trips` |
//! | `TestJsonInstanceSerializer.testNoEnabledState` | `an_empty_object_is_an_enabled_instance_with_defaults` |
//! | `TestJsonInstanceSerializer.testPayloadAsList` | `list_and_map_payloads_round_trip_with_jacksons_type_ids` |
//! | `TestJsonInstanceSerializer.testPayloadAsMap` | `list_and_map_payloads_round_trip_with_jacksons_type_ids` |
//! | `TestJsonInstanceSerializer.testPayloadClass` | `a_payload_class_round_trips_with_its_class` |
//! | `TestJsonInstanceSerializerCompatibility.testCompatibilityMode` | `compatible_mode_writes_curators_bytes` |
//! | `TestJsonInstanceSerializerCompatibility.testBackwardCompatibility` | `compatible_mode_drops_enabled` |
//! | `TestJsonInstanceSerializerCompatibility.testForwardCompatibility` | `old_json_without_enabled_reads_as_enabled` |
//! | `TestJsonInstanceSerializerCompatibility.testFutureChanges` | `unknown_fields_are_kept_and_written_back` |
//! | `TestUriSpec.testScheme` | `uri_spec_scheme` |
//! | `TestUriSpec.testFromInstance` | `uri_spec_from_instance` |
//! | `TestUriSpec.testEscapes` | `uri_spec_escapes` |
//! | `TestUriSpec.testBasic` | `uri_spec_basic` |
//! | `TestStrategies.testRandom` | `random_strategy_spreads_evenly` |
//! | `TestStrategies.testRoundRobin` | `round_robin_strategy_takes_turns` |
//! | `TestStrategies.testSticky` | `sticky_strategy_sticks_until_its_instance_goes` |
//! | `TestDownInstanceManager.testBasic` | `down_instance_manager_basic` |
//! | `TestDownInstanceManager.testThreshold` | `down_instance_manager_threshold` |
//! | `TestDownInstanceManager.testExpiration` | `down_instance_manager_expiration` |
//! | `TestLocalIpFilter.testFilterEverything` | not applicable: the builder's default address comes from the routing table (the standard library cannot list interfaces), with no filter to replace |

use std::collections::HashMap;
use std::time::Duration;

use latchkey_discovery::{
    DownInstanceManager, DownInstancePolicy, Error, InstanceSerializer, JsonInstanceSerializer,
    Part, ProviderStrategy, RandomStrategy, RoundRobinStrategy, ServiceInstance, ServiceType,
    StickyStrategy, UriSpec,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Payload {
    val: String,
}

fn instance<T>(payload: Option<T>, enabled: bool) -> ServiceInstance<T> {
    let mut b = ServiceInstance::builder("name")
        .id("id")
        .address("address")
        .port(10)
        .ssl_port(20)
        .registration_time_utc(0)
        .service_type(ServiceType::Dynamic)
        .uri_spec(UriSpec::parse("{a}/b/{c}").unwrap())
        .enabled(enabled);
    if let Some(p) = payload {
        b = b.payload(p);
    }
    b.build()
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

/// Curator's TestJsonInstanceSerializer.testBasic
#[test]
fn json_round_trip_keeps_every_field() {
    let json = JsonInstanceSerializer::<String>::new().compatible_serialization(false);
    let i = instance(Some("payload".to_string()), true);
    let bytes = json.serialize(&i).unwrap();
    let back = json.deserialize(&bytes).unwrap();
    assert_eq!(back, i);
    // And in the default (compatible) mode, all but `enabled`.
    let json = JsonInstanceSerializer::<String>::new();
    let back = json.deserialize(&json.serialize(&i).unwrap()).unwrap();
    assert_eq!(back, i);
}

/// Curator's TestJsonInstanceSerializer.testWrongPayloadType
#[test]
fn a_payload_of_another_type_is_an_error() {
    let strings = JsonInstanceSerializer::<String>::new();
    let doubles = JsonInstanceSerializer::<f64>::new();
    let bytes = strings
        .serialize(&instance(Some("payload".to_string()), true))
        .unwrap();
    match doubles.deserialize(&bytes) {
        Err(Error::BadInstance { reason, .. }) => assert!(reason.contains("payload"), "{reason}"),
        other => panic!("expected a bad payload, got {other:?}"),
    }
}

/// Curator's TestJsonInstanceSerializer.testNoPayload
#[test]
fn no_payload_round_trips() {
    let json = JsonInstanceSerializer::<()>::new();
    let i = instance::<()>(None, true);
    let bytes = json.serialize(&i).unwrap();
    assert!(
        text(&bytes).contains("\"payload\":null"),
        "{}",
        text(&bytes)
    );
    assert_eq!(json.deserialize(&bytes).unwrap(), i);
}

/// Curator's TestJsonInstanceSerializer.testNoEnabledState
#[test]
fn an_empty_object_is_an_enabled_instance_with_defaults() {
    let i = JsonInstanceSerializer::<()>::new()
        .deserialize(b"{}")
        .unwrap();
    assert!(i.enabled, "an instance without `enabled` is enabled");
    assert_eq!(i, ServiceInstance::<()>::empty());
}

/// Curator's TestJsonInstanceSerializer.testPayloadAsList and testPayloadAsMap
#[test]
fn list_and_map_payloads_round_trip_with_jacksons_type_ids() {
    let json = JsonInstanceSerializer::<Value>::new().compatible_serialization(false);
    let list = instance(Some(json!(["Test value 1", "Test value 2"])), false);
    let bytes = json.serialize(&list).unwrap();
    assert!(
        text(&bytes)
            .contains(r#""payload":["java.util.ArrayList",["Test value 1","Test value 2"]]"#),
        "{}",
        text(&bytes)
    );
    let back = json.deserialize(&bytes).unwrap();
    assert_eq!(back.payload, list.payload);
    assert_eq!(back.payload_class.as_deref(), Some("java.util.ArrayList"));
    assert!(!back.enabled);

    // As Curator writes a HashMap.
    let curator = br#"{"name":"name","id":"id","address":"address","port":10,"sslPort":20,"payload":{"@class":"java.util.HashMap","1":"Test value 1","2":"Test value 2"},"registrationTimeUTC":0,"serviceType":"DYNAMIC","uriSpec":{"parts":[{"value":"a","variable":true},{"value":"/b/","variable":false},{"value":"c","variable":true}]},"enabled":false}"#;
    let map = json.deserialize(curator).unwrap();
    assert_eq!(
        map.payload,
        Some(json!({"1": "Test value 1", "2": "Test value 2"}))
    );
    assert_eq!(map.payload_class.as_deref(), Some("java.util.HashMap"));
    assert_eq!(
        map.uri_spec.as_ref().unwrap(),
        &UriSpec::parse("{a}/b/{c}").unwrap()
    );
    // Written back as Curator wrote it.
    assert_eq!(text(&json.serialize(&map).unwrap()), text(curator));
}

/// Curator's TestJsonInstanceSerializer.testPayloadClass
#[test]
fn a_payload_class_round_trips_with_its_class() {
    let json = JsonInstanceSerializer::<Payload>::new()
        .payload_class("org.apache.curator.x.discovery.TestJsonInstanceSerializer$Payload");
    let i = instance(
        Some(Payload {
            val: "Test value".into(),
        }),
        true,
    );
    let bytes = json.serialize(&i).unwrap();
    assert!(
        text(&bytes).contains(
            r#""payload":{"@class":"org.apache.curator.x.discovery.TestJsonInstanceSerializer$Payload","val":"Test value"}"#
        ),
        "{}",
        text(&bytes)
    );
    let back = json.deserialize(&bytes).unwrap();
    assert_eq!(back.payload, i.payload);
    assert_eq!(
        back.payload_class.as_deref(),
        Some("org.apache.curator.x.discovery.TestJsonInstanceSerializer$Payload")
    );
}

/// Curator's TestJsonInstanceSerializerCompatibility.testCompatibilityMode:
/// the bytes are exactly Curator 5.4's (taken from Debian's jar) for each
/// kind of payload.
#[test]
fn compatible_mode_writes_curators_bytes() {
    const URI: &str = r#"{"parts":[{"value":"scheme","variable":true},{"value":"://","variable":false},{"value":"address","variable":true},{"value":":","variable":false},{"value":"port","variable":true},{"value":"/x","variable":false}]}"#;
    let spec = UriSpec::parse("{scheme}://{address}:{port}/x").unwrap();
    let base = |payload: Option<Value>, class: Option<&str>| {
        let mut i = ServiceInstance::<Value>::builder("name")
            .id("id")
            .address("1.2.3.4")
            .port(10)
            .registration_time_utc(123)
            .uri_spec(spec.clone())
            .enabled(false)
            .build();
        i.payload = payload;
        i.payload_class = class.map(str::to_owned);
        i
    };
    let cases: [(Option<Value>, Option<&str>, &str); 9] = [
        (Some(json!("thing")), None, r#""thing""#),
        (Some(json!(42)), None, "42"),
        (
            Some(json!(42)),
            Some("java.lang.Long"),
            r#"["java.lang.Long",42]"#,
        ),
        (Some(json!(1.5)), None, "1.5"),
        (Some(json!(true)), None, "true"),
        (
            Some(json!({"val": "v"})),
            Some("Probe$Payload"),
            r#"{"@class":"Probe$Payload","val":"v"}"#,
        ),
        (
            Some(json!({"k": "v"})),
            Some("java.util.HashMap"),
            r#"{"@class":"java.util.HashMap","k":"v"}"#,
        ),
        (
            Some(json!(["a", "b"])),
            None,
            r#"["java.util.ArrayList",["a","b"]]"#,
        ),
        (None, None, "null"),
    ];
    for (payload, class, written) in cases {
        let i = base(payload, class);
        for compatible in [true, false] {
            let json = JsonInstanceSerializer::<Value>::new().compatible_serialization(compatible);
            let enabled = if compatible {
                ""
            } else {
                r#","enabled":false"#
            };
            let want = format!(
                r#"{{"name":"name","id":"id","address":"1.2.3.4","port":10,"sslPort":null,"payload":{written},"registrationTimeUTC":123,"serviceType":"DYNAMIC","uriSpec":{URI}{enabled}}}"#
            );
            let bytes = json.serialize(&i).unwrap();
            assert_eq!(text(&bytes), want);
            let back = json.deserialize(&bytes).unwrap();
            assert_eq!(back.payload, i.payload, "{want}");
            // The natural class of a bare scalar is not recorded.
            if class.is_some() {
                assert_eq!(back.payload_class.as_deref(), class);
            }
        }
    }
}

/// Curator's TestJsonInstanceSerializerCompatibility.testBackwardCompatibility
#[test]
fn compatible_mode_drops_enabled() {
    let json = JsonInstanceSerializer::<Payload>::new();
    let i = instance(Some(Payload { val: "test".into() }), false);
    let bytes = json.serialize(&i).unwrap();
    assert!(!text(&bytes).contains("enabled"), "{}", text(&bytes));
    let back = json.deserialize(&bytes).unwrap();
    assert!(
        back.enabled,
        "enabled is lost in compatible mode, read as true"
    );
    assert_eq!(back.name, i.name);
    assert_eq!(back.payload, i.payload);
    assert_eq!(back.uri_spec, i.uri_spec);
}

/// Curator's TestJsonInstanceSerializerCompatibility.testForwardCompatibility
#[test]
fn old_json_without_enabled_reads_as_enabled() {
    // Curator's OldServiceInstance, as Jackson writes it.
    let old = br#"{"name":"name","id":"id","address":"address","port":10,"sslPort":20,"payload":{"@class":"org.apache.curator.x.discovery.TestJsonInstanceSerializer$Payload","val":"test"},"registrationTimeUTC":0,"serviceType":"DYNAMIC","uriSpec":{"parts":[{"value":"a","variable":true},{"value":"/b/","variable":false},{"value":"c","variable":true}]}}"#;
    let i = JsonInstanceSerializer::<Payload>::new()
        .deserialize(old)
        .unwrap();
    assert!(i.enabled);
    assert_eq!(i.port, Some(10));
    assert_eq!(i.ssl_port, Some(20));
    assert_eq!(i.payload, Some(Payload { val: "test".into() }));
}

/// Curator's TestJsonInstanceSerializerCompatibility.testFutureChanges
#[test]
fn unknown_fields_are_kept_and_written_back() {
    let newer = br#"{"name":"name","id":"id","address":"address","port":10,"sslPort":20,"payload":"hey","registrationTimeUTC":0,"serviceType":"DYNAMIC","uriSpec":{"parts":[]},"enabled":false,"new1":"what","new2":10101,"new3":1700000000000,"new4":"http://hey"}"#;
    let json = JsonInstanceSerializer::<String>::new().compatible_serialization(false);
    let i = json.deserialize(newer).unwrap();
    assert_eq!(i.name, "name");
    assert_eq!(i.payload.as_deref(), Some("hey"));
    assert!(!i.enabled);
    assert_eq!(i.extra.get("new1"), Some(&json!("what")));
    assert_eq!(i.extra.len(), 4);
    let again: Value = serde_json::from_slice(&json.serialize(&i).unwrap()).unwrap();
    let before: Value = serde_json::from_slice(newer).unwrap();
    assert_eq!(again, before);
}

/// Curator's `enabled` is a `boolean`, and Jackson reads a JSON `null`
/// into a primitive as its default, `false`: `"enabled": null` is a
/// disabled instance to Curator 5.4 (checked with the Java peer in
/// `discovery_interop.rs`), while a missing field keeps the constructor's
/// `true`.
#[test]
fn enabled_null_reads_as_disabled_as_in_curator() {
    let json = JsonInstanceSerializer::<Value>::new();
    let null = json
        .deserialize(br#"{"name":"n","id":"i","enabled":null}"#)
        .unwrap();
    assert!(!null.enabled, "Curator reads \"enabled\": null as false");
    let missing = json.deserialize(br#"{"name":"n","id":"i"}"#).unwrap();
    assert!(missing.enabled, "a missing field stays enabled");
}

/// Curator's ports are Java `Integer`s: a node with a port that is no
/// `u16` (above 65,535, or negative) is an instance to Curator 5.4
/// (checked with the Java peer in `discovery_interop.rs`), one beyond
/// Java's `int` is not. Such a node reads here with the port `None`, its
/// number kept in `extra` and written back where it was.
#[test]
fn a_port_curator_takes_keeps_the_node_readable() {
    let json = JsonInstanceSerializer::<Value>::new();
    let raw = br#"{"name":"n","id":"i","address":null,"port":70000,"sslPort":-1,"payload":null,"registrationTimeUTC":0,"serviceType":"DYNAMIC","uriSpec":null}"#;
    let i = json
        .deserialize(raw)
        .unwrap_or_else(|e| panic!("Curator reads this node: {e}"));
    assert_eq!((i.name.as_str(), i.id.as_str()), ("n", "i"));
    assert_eq!((i.port, i.ssl_port), (None, None));
    assert_eq!(i.extra.get("port"), Some(&json!(70000)));
    assert_eq!(i.extra.get("sslPort"), Some(&json!(-1)));
    assert_eq!(
        text(&json.serialize(&i).unwrap()),
        text(raw),
        "written back as read"
    );
    // In a string, as Jackson takes it too.
    let s = json.deserialize(br#"{"port":"70000"}"#).unwrap();
    assert_eq!(s.port, None);
    assert_eq!(s.extra.get("port"), Some(&json!("70000")));
    // A port set on the instance wins over the kept number.
    let mut set = i.clone();
    set.port = Some(8080);
    let written: Value = serde_json::from_slice(&json.serialize(&set).unwrap()).unwrap();
    assert_eq!(written["port"], json!(8080));
    assert_eq!(written["sslPort"], json!(-1));
    // Beyond Java's int: Curator refuses the node, and so do we.
    for raw in [
        &br#"{"port":3000000000}"#[..],
        br#"{"sslPort":-2147483649}"#,
    ] {
        assert!(
            matches!(json.deserialize(raw), Err(Error::BadInstance { .. })),
            "{}",
            text(raw)
        );
    }
}

#[test]
fn bad_input_is_an_error_naming_why_never_a_panic() {
    let json = JsonInstanceSerializer::<Value>::new();
    let deep = "[".repeat(100_000);
    let cases: Vec<(&[u8], &str)> = vec![
        (b"", "no data"),
        (b"{", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1,2]", "not a JSON object"),
        (b"null", "not a JSON object"),
        (br#"{"name":5}"#, "name"),
        (br#"{"port":3000000000}"#, "port"),
        (br#"{"port":true}"#, "port"),
        (br#"{"sslPort":"x"}"#, "sslPort"),
        (br#"{"serviceType":"BOGUS"}"#, "serviceType"),
        (br#"{"registrationTimeUTC":1.5}"#, "registrationTimeUTC"),
        (br#"{"uriSpec":[1]}"#, "uriSpec"),
        (br#"{"uriSpec":{"parts":[1]}}"#, "uriSpec"),
        (br#"{"enabled":"yes"}"#, "enabled"),
        (deep.as_bytes(), "not JSON"),
    ];
    for (bytes, why) in cases {
        match json.deserialize(bytes) {
            Err(Error::BadInstance { reason, .. }) => {
                assert!(
                    reason.contains(why),
                    "{:?}: {reason}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
                )
            }
            other => panic!(
                "{:?}: expected an error, got {other:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
            ),
        }
    }
    // Jackson's leniencies are taken: a port in a string, nulls.
    let i = json
        .deserialize(
            br#"{"port":"12","name":null,"serviceType":null,"enabled":null,"uriSpec":null}"#,
        )
        .unwrap();
    assert_eq!(i.port, Some(12));
    assert_eq!(i.service_type, ServiceType::Dynamic);
    // A huge payload is read (ZooKeeper bounds it, not the decoder).
    let big = format!(r#"{{"name":"n","payload":"{}"}}"#, "x".repeat(2 << 20));
    let i = json.deserialize(big.as_bytes()).unwrap();
    assert_eq!(i.payload.unwrap().as_str().unwrap().len(), 2 << 20);
}

#[test]
fn extreme_values_round_trip() {
    let json = JsonInstanceSerializer::<Value>::new();
    let mut i = ServiceInstance::<Value>::builder("n\u{1F600}\"\\")
        .id("i\n")
        .port(u16::MAX)
        .ssl_port(0)
        .registration_time_utc(i64::MIN)
        .payload(json!({"@class": 5, "n": u64::MAX}))
        .build();
    i.extra.insert("x".into(), json!([null, {"y": -1e300}]));
    let back = json.deserialize(&json.serialize(&i).unwrap()).unwrap();
    assert_eq!(back, i);
    assert_eq!(i.registration_time(), None);
}

/// Curator's TestUriSpec.testScheme
#[test]
fn uri_spec_scheme() {
    let spec = UriSpec::parse("{scheme}://foo.com").unwrap();
    let i = ServiceInstance::<()>::builder("foo")
        .id("x")
        .port(5)
        .build();
    assert_eq!(spec.build(Some(&i), &HashMap::new()), "http://foo.com");
    let i = ServiceInstance::<()>::builder("foo")
        .id("x")
        .port(5)
        .ssl_port(5)
        .build();
    assert_eq!(spec.build(Some(&i), &HashMap::new()), "https://foo.com");
}

/// Curator's TestUriSpec.testFromInstance
#[test]
fn uri_spec_from_instance() {
    let i = ServiceInstance::<()>::builder("foo")
        .address("1.2.3.4")
        .id("bar")
        .port(5)
        .ssl_port(6)
        .registration_time_utc(789)
        .service_type(ServiceType::Permanent)
        .build();
    let spec = UriSpec::parse(
        "{scheme}://{address}:{port}:{ssl-port}/{name}/{id}/{registration-time-utc}/{service-type}",
    )
    .unwrap();
    let vars = HashMap::from([("scheme".to_string(), "test".to_string())]);
    assert_eq!(
        spec.build(Some(&i), &vars),
        "test://1.2.3.4:5:6/foo/bar/789/permanent"
    );
}

/// Curator's TestUriSpec.testEscapes
#[test]
fn uri_spec_escapes() {
    let spec = UriSpec::parse("{one}two-three-{[}four{]}-five{six}").unwrap();
    let want = [
        ("one", true),
        ("two-three-", false),
        ("[", true),
        ("four", false),
        ("]", true),
        ("-five", false),
        ("six", true),
    ];
    let got: Vec<(&str, bool)> = spec
        .parts()
        .iter()
        .map(|p| (p.value.as_str(), p.variable))
        .collect();
    assert_eq!(got, want);
    let vars = HashMap::from([
        ("one".to_string(), "1".to_string()),
        ("six".to_string(), "6".to_string()),
    ]);
    assert_eq!(spec.build::<()>(None, &vars), "1two-three-{four}-five6");
    assert_eq!(
        UriSpec::parse(&spec.to_string()).unwrap(),
        spec,
        "Display parses back"
    );
}

/// Curator's TestUriSpec.testBasic
#[test]
fn uri_spec_basic() {
    let spec = UriSpec::parse("{one}{two}three-four-five{six}seven{eight}").unwrap();
    let got: Vec<Part> = spec.parts().to_vec();
    assert_eq!(
        got,
        vec![
            Part::new("one", true),
            Part::new("two", true),
            Part::new("three-four-five", false),
            Part::new("six", true),
            Part::new("seven", false),
            Part::new("eight", true),
        ]
    );
    for bad in ["{a{b}}", "a}", "{open", "}"] {
        assert!(
            matches!(UriSpec::parse(bad), Err(Error::InvalidArgument(_))),
            "{bad}"
        );
    }
    assert_eq!(
        UriSpec::parse("{ padded }").unwrap().parts()[0].value,
        "padded"
    );
    assert!(UriSpec::parse("").unwrap().parts().is_empty());
}

fn instances(qty: usize, starting_at: usize) -> Vec<ServiceInstance<()>> {
    (0..qty)
        .map(|i| {
            ServiceInstance::builder("foo")
                .id(&(i + starting_at).to_string())
                .build()
        })
        .collect()
}

/// Curator's TestStrategies.testRandom
#[test]
fn random_strategy_spreads_evenly() {
    const QTY: usize = 10;
    const ITERATIONS: usize = 1000;
    let list = instances(QTY, 0);
    let strategy = RandomStrategy::new();
    let mut counts = [0f64; QTY];
    for _ in 0..ITERATIONS {
        let i = strategy.choose(&list).unwrap();
        counts[list[i].id.parse::<usize>().unwrap()] += 1.0;
    }
    let mean = counts.iter().sum::<f64>() / QTY as f64;
    let var = counts.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / (QTY as f64 - 1.0);
    assert!(var.sqrt() <= (QTY * 2) as f64, "{counts:?}");
    assert_eq!(ProviderStrategy::<()>::choose(&strategy, &[]), None);
}

/// Curator's TestStrategies.testRoundRobin
#[test]
fn round_robin_strategy_takes_turns() {
    const QTY: usize = 10;
    let list = instances(QTY, 0);
    let strategy = RoundRobinStrategy::new();
    for i in 0..QTY {
        assert_eq!(list[strategy.choose(&list).unwrap()].id, i.to_string());
    }
    for i in 0..1234 * QTY {
        assert_eq!(
            list[strategy.choose(&list).unwrap()].id,
            (i % QTY).to_string()
        );
    }
    assert_eq!(ProviderStrategy::<()>::choose(&strategy, &[]), None);
}

/// Curator's TestStrategies.testSticky
#[test]
fn sticky_strategy_sticks_until_its_instance_goes() {
    const QTY: usize = 10;
    let mut list = instances(QTY, 0);
    let strategy = StickyStrategy::new(RandomStrategy::new());
    let the = list[strategy.choose(&list).unwrap()].id.clone();
    let number = strategy.instance_number();
    for _ in 0..1000 {
        assert_eq!(list[strategy.choose(&list).unwrap()].id, the);
    }
    // Its instance goes.
    list = instances(QTY, QTY);
    let other = list[strategy.choose(&list).unwrap()].id.clone();
    assert_ne!(other, the);
    assert_ne!(strategy.instance_number(), number);
    for _ in 0..1000 {
        assert_eq!(list[strategy.choose(&list).unwrap()].id, other);
    }
}

/// Curator's TestDownInstanceManager.testBasic
#[test]
fn down_instance_manager_basic() {
    let list = instances(2, 1);
    let down = DownInstanceManager::new(DownInstancePolicy::new(Duration::from_secs(1), 1));
    assert!(down.is_up(&list[0]) && down.is_up(&list[1]));
    down.add(&list[0]);
    assert!(!down.is_up(&list[0]));
    assert!(down.is_up(&list[1]));
}

/// Curator's TestDownInstanceManager.testThreshold
#[test]
fn down_instance_manager_threshold() {
    let list = instances(2, 1);
    let down = DownInstanceManager::new(DownInstancePolicy::new(Duration::from_secs(1), 2));
    down.add(&list[0]);
    assert!(down.is_up(&list[0]) && down.is_up(&list[1]));
    down.add(&list[0]);
    assert!(!down.is_up(&list[0]));
    assert!(down.is_up(&list[1]));
}

/// Curator's TestDownInstanceManager.testExpiration
#[test]
fn down_instance_manager_expiration() {
    let list = instances(2, 1);
    let policy = DownInstancePolicy::new(Duration::from_millis(300), 1);
    let down = DownInstanceManager::new(policy);
    down.add(&list[0]);
    assert!(!down.is_up(&list[0]));
    assert!(down.is_up(&list[1]));
    std::thread::sleep(policy.timeout);
    assert!(down.is_up(&list[0]));
    assert!(down.is_up(&list[1]));
    // A zero timeout forgets errors at once, as Curator's purge does.
    let zero = DownInstanceManager::new(DownInstancePolicy::new(Duration::ZERO, 0));
    zero.add(&list[0]);
    assert!(zero.is_up(&list[0]));
    let forever = DownInstanceManager::new(DownInstancePolicy::new(Duration::MAX, 1));
    forever.add(&list[0]);
    assert!(!forever.is_up(&list[0]));
}

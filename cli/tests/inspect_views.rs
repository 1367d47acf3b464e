//! `latchkey inspect` of queues and service discovery against a real
//! ZooKeeper: items put by latchkey's queues (and by Curator's, through the
//! Java peer), a lock-safe queue's lock nodes, and instances registered by
//! latchkey-discovery (and by Curator's discovery), as text and as JSON.
//!
//! Curator has no inspect command, so no Curator test class is ported
//! here; the recipes' own suites port Curator's queue and discovery tests.
//!
//! One server serves the whole binary (`common::server`); every run of
//! `latchkey` and every wait has a deadline.

mod common;

use std::process::Output;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{client, eventually, server};
use latchkey_discovery::{ServiceDiscovery, ServiceInstance, ServiceType};
use latchkey_recipes::{QueueBuilder, SimpleDistributedQueue, StringSerializer};
use serde_json::{json, Value};

/// Runs `latchkey ARGS --connect <server>` to the end (at most 30 s).
fn latchkey(args: &[&str]) -> Output {
    common::run_latchkey(args, Duration::from_secs(30))
}

/// `latchkey inspect PATH [MORE]` as text; it must succeed.
fn text(path: &str, more: &[&str]) -> String {
    let mut args = vec!["inspect", path];
    args.extend(more);
    let out = latchkey(&args);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    text
}

/// `latchkey inspect PATH --json [MORE]`, parsed; one JSON object on one
/// line.
fn json(path: &str, more: &[&str]) -> Value {
    let mut args = vec!["inspect", path, "--json"];
    args.extend(more);
    let out = latchkey(&args);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.lines().count(), 1, "one JSON object: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The field `key` of every node of an inspect JSON.
fn field(v: &Value, key: &str) -> Vec<Value> {
    v["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("no nodes: {v}"))
        .iter()
        .map(|n| n[key].clone())
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn queues_show_kind_depth_and_first_items_in_queue_order() {
    let c = client();
    let base = latchkey_test::unique_path("cli-queues");

    // Plain: three nodes, the second holding two messages.
    let path = format!("{base}/plain");
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .build_queue()
        .unwrap();
    q.start().unwrap();
    q.put(&"a".to_string()).unwrap();
    q.put_multi(&["b".to_string(), "c".to_string()]).unwrap();
    q.put(&"d".to_string()).unwrap();
    let v = json(&path, &[]);
    assert_eq!(v["recipe"], "queue", "{v}");
    assert_eq!(v["queue"], json!({"kind": "plain", "depth": 3, "shown": 3}));
    assert_eq!(
        field(&v, "data"),
        [json!("a"), json!("b"), json!("d")],
        "{v}"
    );
    assert_eq!(field(&v, "messages"), [json!(1), json!(2), json!(1)], "{v}");
    assert_eq!(field(&v, "role"), vec![json!("item"); 3], "{v}");
    assert_eq!(field(&v, "persistent"), vec![json!(true); 3], "{v}");
    assert!(v["nodes"][0]["name"]
        .as_str()
        .unwrap()
        .starts_with("queue-"));
    // --limit: the depth counts all, the first N are shown.
    let v = json(&path, &["--limit", "1"]);
    assert_eq!(v["queue"], json!({"kind": "plain", "depth": 3, "shown": 1}));
    assert_eq!(field(&v, "data"), [json!("a")]);
    let t = text(&path, &["--limit", "2"]);
    let lines: Vec<&str> = t.lines().collect();
    assert!(
        lines[0]
            .ends_with("(plain queue): depth 3 (item nodes waiting), the first 2 in queue order"),
        "{t}"
    );
    assert!(lines[1].starts_with("#  NODE"), "{t}");
    assert!(
        lines[2].starts_with("0  queue-") && lines[2].ends_with(" a"),
        "{t}"
    );
    assert!(lines[3].ends_with(" b (+1 more)"), "{t}");
    assert_eq!(lines.len(), 4, "{t}");
    q.close();

    // Priority: lowest first, whatever the order of the puts.
    let path = format!("{base}/priority");
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .build_priority_queue(0)
        .unwrap();
    q.start().unwrap();
    q.put(&"p5".to_string(), 5).unwrap();
    q.put(&"pm3".to_string(), -3).unwrap();
    q.put(&"pmax".to_string(), i32::MAX).unwrap();
    let v = json(&path, &[]);
    assert_eq!(v["queue"]["kind"], "priority", "{v}");
    assert_eq!(
        field(&v, "priority"),
        [json!(-3), json!(5), json!(i32::MAX)],
        "{v}"
    );
    assert_eq!(
        field(&v, "data"),
        [json!("pm3"), json!("p5"), json!("pmax")]
    );
    let t = text(&path, &[]);
    assert!(t.contains("(priority queue): depth 3"), "{t}");
    let rows: Vec<&str> = t.lines().skip(2).collect();
    assert!(rows[0].contains(" -3 ") && rows[0].ends_with("pm3"), "{t}");
    assert!(t.lines().nth(1).unwrap().contains("PRIORITY"), "{t}");
    q.close();

    // Delay: by due time, with the time.
    let path = format!("{base}/delay");
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .build_delay_queue()
        .unwrap();
    q.start().unwrap();
    let now = now_ms();
    let later = now + 600_000;
    let sooner = now + 300_000;
    let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
    q.put(&"later".to_string(), at(later)).unwrap();
    q.put(&"sooner".to_string(), at(sooner)).unwrap();
    let v = json(&path, &[]);
    assert_eq!(v["queue"]["kind"], "delay", "{v}");
    assert_eq!(field(&v, "data"), [json!("sooner"), json!("later")], "{v}");
    assert_eq!(field(&v, "due_ms"), [json!(sooner), json!(later)], "{v}");
    let left = v["nodes"][0]["due_in_ms"].as_i64().unwrap();
    assert!((290_000..=300_000).contains(&left), "{v}");
    let t = text(&path, &[]);
    assert!(t.contains("DUE") && t.contains("Z (in "), "{t}");
    q.close();

    // Id: in the order put (by sequence), with the id.
    let path = format!("{base}/id");
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .build_id_queue()
        .unwrap();
    q.start().unwrap();
    q.put(&"x".to_string(), "job-b").unwrap();
    q.put(&"y".to_string(), "job-a").unwrap();
    q.put(&"z".to_string(), "a/b|c").unwrap();
    let v = json(&path, &[]);
    assert_eq!(v["queue"]["kind"], "id", "{v}");
    assert_eq!(
        field(&v, "id"),
        [json!("job-b"), json!("job-a"), json!("a_b_c")],
        "{v}"
    );
    assert!(text(&path, &[]).contains("(id queue): depth 3"));
    q.close();

    // Simple: raw data, no framing.
    let path = format!("{base}/simple");
    let s = SimpleDistributedQueue::new(&c, &path).unwrap();
    s.offer(b"s1").unwrap();
    s.offer(b"\x00\x01").unwrap();
    let v = json(&path, &[]);
    assert_eq!(
        v["queue"],
        json!({"kind": "simple", "depth": 2, "shown": 2})
    );
    assert_eq!(field(&v, "data"), [json!("s1"), Value::Null], "{v}");
    assert_eq!(field(&v, "messages"), [Value::Null, Value::Null], "{v}");
    assert_eq!(field(&v, "data_length"), [json!(2), json!(2)], "{v}");
    let t = text(&path, &[]);
    assert!(
        t.contains("(simple queue): depth 2") && t.contains("<2 bytes>"),
        "{t}"
    );
    assert!(t.lines().nth(2).unwrap().contains("qn-"), "{t}");

    // Bad data in a distributed queue's node: told, not a failure.
    let path = format!("{base}/bad");
    c.create()
        .creating_parents_if_needed()
        .for_path(&format!("{path}/queue-0000000001"), b"junk")
        .unwrap();
    let v = json(&path, &[]);
    assert_eq!(field(&v, "messages"), [Value::Null], "{v}");
    assert!(text(&path, &[]).contains("not Curator's item framing"));
    c.close();
}

#[test]
fn a_lock_safe_queues_lock_path_shows_the_items_being_processed() {
    let c = client();
    let path = latchkey_test::unique_path("cli-lock-safe");
    let locks = format!("{path}-locks");
    // A channel consumer holds its item's lock node until a receiver
    // takes the item: nobody receives here, so the item stays locked.
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .channel_consumer()
        .lock_path(&locks)
        .build_queue()
        .unwrap();
    q.start().unwrap();
    q.put(&"job-1".to_string()).unwrap();
    eventually("the consumer's lock node", || {
        c.get_children(&locks).map(|n| n.len()).unwrap_or(0) == 1
    });
    let v = json(&locks, &[]);
    assert_eq!(v["recipe"], "queue locks", "{v}");
    assert_eq!(v["queue"]["depth"], 1, "{v}");
    assert_eq!(field(&v, "role"), [json!("processing")], "{v}");
    assert_eq!(
        field(&v, "session"),
        [json!(format!("0x{:x}", c.session_id()))],
        "{v}"
    );
    assert_eq!(field(&v, "persistent"), [json!(false)], "{v}");
    let t = text(&locks, &[]);
    assert!(
        t.contains("(plain queue locks): 1 item(s) being processed"),
        "{t}"
    );
    assert!(t.contains("SESSION"), "{t}");
    // The item itself stays in the queue while it is processed.
    let v = json(&path, &[]);
    assert_eq!(v["recipe"], "queue", "{v}");
    assert_eq!(field(&v, "data"), [json!("job-1")], "{v}");

    let items = q.receiver().unwrap();
    assert_eq!(
        items.recv_timeout(Duration::from_secs(10)).unwrap(),
        "job-1"
    );
    eventually("the item and its lock node to go", || {
        // (A container node the server removed counts as empty.)
        c.get_children(&locks).map_or(true, |n| n.is_empty())
            && c.get_children(&path).map_or(true, |n| n.is_empty())
    });
    q.close();
    c.close();
}

#[test]
fn discovery_shows_services_and_instances_and_tells_malformed_ones() {
    let c = client();
    let base = latchkey_test::unique_path("cli-discovery");
    let d = ServiceDiscovery::<Value>::builder(&c)
        .base_path(&base)
        .build()
        .unwrap();
    d.start().unwrap();
    let o1 = ServiceInstance::<Value>::builder("orders")
        .id("o1")
        .address("10.0.0.1")
        .port(8080)
        .ssl_port(8443)
        .registration_time_utc(1_700_000_000_123)
        .payload(json!({"region": "eu"}))
        .build();
    let o2 = ServiceInstance::<Value>::builder("orders")
        .id("o2")
        .address("10.0.0.2")
        .port(8081)
        .enabled(false)
        .build();
    let b1 = ServiceInstance::<Value>::builder("billing")
        .id("b1")
        .no_address()
        .port(9000)
        .service_type(ServiceType::Static)
        .build();
    for i in [&o1, &o2, &b1] {
        d.register_service(i).unwrap();
    }
    // Written by another process: not JSON, and a dynamic instance in a
    // persistent node (no session will remove it).
    let orders = format!("{base}/orders");
    c.create()
        .for_path(&format!("{orders}/bad"), b"{not json")
        .unwrap();
    c.create()
        .for_path(
            &format!("{orders}/ghost"),
            br#"{"name":"orders","id":"ghost","address":"10.0.0.9","port":1,"sslPort":null,"payload":null,"registrationTimeUTC":0,"serviceType":"DYNAMIC","uriSpec":null}"#,
        )
        .unwrap();

    let v = json(&base, &[]);
    assert_eq!(v["recipe"], "service discovery", "{v}");
    let services = v["services"].as_array().unwrap();
    let names: Vec<&Value> = services.iter().map(|s| &s["name"]).collect();
    assert_eq!(names, [&json!("billing"), &json!("orders")], "{v}");
    let billing = &services[0]["instances"][0];
    assert_eq!(billing["id"], "b1", "{v}");
    assert_eq!(billing["address"], Value::Null, "{v}");
    assert_eq!(billing["serviceType"], "STATIC", "{v}");
    assert_eq!(billing["persistent"], true, "{v}");
    assert_eq!(billing["session_gone"], false, "{v}");
    let instances = services[1]["instances"].as_array().unwrap();
    let nodes: Vec<&Value> = instances.iter().map(|i| &i["node"]).collect();
    assert_eq!(nodes, ["bad", "ghost", "o1", "o2"], "{v}");
    let (bad, ghost, o1j, o2j) = (&instances[0], &instances[1], &instances[2], &instances[3]);
    assert!(
        bad["malformed"].as_str().unwrap().starts_with("not JSON"),
        "{v}"
    );
    assert_eq!(bad["data"], "{not json", "{v}");
    assert_eq!(ghost["session_gone"], true, "{v}");
    assert_eq!(ghost["session"], "0x0", "{v}");
    assert_eq!(o1j["malformed"], Value::Null, "{v}");
    assert_eq!(o1j["address"], "10.0.0.1", "{v}");
    assert_eq!(o1j["port"], 8080, "{v}");
    assert_eq!(o1j["sslPort"], 8443, "{v}");
    assert_eq!(o1j["serviceType"], "DYNAMIC", "{v}");
    assert_eq!(o1j["registrationTimeUTC"], 1_700_000_000_123_i64, "{v}");
    assert_eq!(o1j["registered"], "2023-11-14T22:13:20.123Z", "{v}");
    assert_eq!(o1j["payload"], json!({"region": "eu"}), "{v}");
    assert_eq!(o1j["session"], format!("0x{:x}", c.session_id()), "{v}");
    assert_eq!(o1j["session_gone"], false, "{v}");
    assert_eq!(o1j["enabled"], true, "{v}");
    // The serializer's compatible mode does not write `enabled`, so
    // readers take true; Curator's does the same.
    assert_eq!(o2j["enabled"], true, "{v}");

    let t = text(&base, &[]);
    assert!(
        t.starts_with(&format!(
            "{base} (service discovery): 2 service(s), 5 instance(s)\n"
        )),
        "{t}"
    );
    assert!(t.contains("\norders: 4 instance(s)\n"), "{t}");
    assert!(t.contains("\n  bad: malformed (9 bytes): not JSON"), "{t}");
    assert!(t.contains("0x0 (no session"), "{t}");
    let o1_row = t
        .lines()
        .find(|l| l.trim_start().starts_with("o1 "))
        .unwrap();
    assert!(
        o1_row.contains("10.0.0.1")
            && o1_row.contains("8443")
            && o1_row.contains("2023-11-14T22:13:20.123Z"),
        "{t}"
    );

    // One service's path: its instances.
    let v = json(&orders, &[]);
    assert_eq!(v["recipe"], "discovery service", "{v}");
    assert_eq!(v["services"][0]["name"], "orders", "{v}");
    assert_eq!(v["services"][0]["instances"].as_array().unwrap().len(), 4);
    let t = text(&orders, &[]);
    assert!(
        t.starts_with(&format!(
            "{orders} (discovery service orders): 4 instance(s)\n"
        )),
        "{t}"
    );
    // A service whose first instances are all malformed is still one.
    let odd = format!("{base}/odd");
    for n in ["a", "b", "c", "d"] {
        c.create()
            .creating_parents_if_needed()
            .for_path(&format!("{odd}/{n}"), b"[]")
            .unwrap();
    }
    d.register_service(
        &ServiceInstance::<Value>::builder("odd")
            .id("z")
            .port(1)
            .build(),
    )
    .unwrap();
    let v = json(&odd, &[]);
    assert_eq!(v["recipe"], "discovery service", "{v}");
    let malformed: Vec<bool> = v["services"][0]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["malformed"].is_string())
        .collect();
    assert_eq!(malformed, [true, true, true, true, false], "{v}");

    d.close();
    c.close();
}

#[test]
fn curators_queue_items_and_discovery_instances_are_read() {
    use latchkey_test::peers::{peer_available, Peer, PeerKind};
    let step = Duration::from_secs(60);
    if let Err(why) = peer_available(PeerKind::Curator) {
        eprintln!("SKIPPED: Curator peer unavailable: {why}");
        return;
    }
    let mut java =
        Peer::start(PeerKind::Curator, &server().connect_string()).expect("start Curator peer");
    let path = latchkey_test::unique_path("cli-curator-queue");
    for line in [
        format!("queue priority {path} put p5 5"),
        format!("queue priority {path} put pm -7"),
        format!("queue priority {path} putmulti x,y 0"),
    ] {
        java.command_ok(&line, step)
            .unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    let v = json(&path, &[]);
    eprintln!("{v}");
    assert_eq!(v["queue"]["kind"], "priority", "{v}");
    assert_eq!(
        field(&v, "priority"),
        [json!(-7), json!(0), json!(5)],
        "{v}"
    );
    assert_eq!(
        field(&v, "data"),
        [json!("pm"), json!("x"), json!("p5")],
        "{v}"
    );
    assert_eq!(field(&v, "messages"), [json!(1), json!(2), json!(1)], "{v}");
    let _ = java.command("quit", step);

    if let Err(why) = peer_available(PeerKind::CuratorDiscovery) {
        eprintln!("SKIPPED: Curator discovery peer unavailable: {why}");
        return;
    }
    let mut java = Peer::start(PeerKind::CuratorDiscovery, &server().connect_string())
        .expect("start the Curator discovery peer");
    let base = latchkey_test::unique_path("cli-curator-discovery");
    java.command_ok(&format!("disc open {base} true"), step)
        .unwrap();
    let spec = json!({
        "name": "svc", "id": "j1", "address": "10.1.2.3", "port": 8080,
        "sslPort": 8443, "registrationTimeUTC": 1_700_000_000_123_i64,
        "serviceType": "DYNAMIC", "uriSpec": "{scheme}://{address}:{port}",
        "payloadKind": "string", "payload": "thing",
    });
    assert_eq!(
        java.command_ok(&format!("disc register {base} {spec}"), step)
            .unwrap(),
        "j1"
    );
    let v = json(&base, &[]);
    eprintln!("{v}");
    assert_eq!(v["recipe"], "service discovery", "{v}");
    let i = &v["services"][0]["instances"][0];
    assert_eq!(i["id"], "j1", "{v}");
    assert_eq!(i["address"], "10.1.2.3", "{v}");
    assert_eq!(i["sslPort"], 8443, "{v}");
    assert_eq!(i["uri"], "https://10.1.2.3:8080", "{v}");
    assert_eq!(i["payload"], "thing", "{v}");
    assert_eq!(i["persistent"], false, "{v}");
    assert_eq!(i["session_gone"], false, "{v}");
    let _ = java.command_ok(&format!("disc close {base}"), step);
    let _ = java.command("quit", step);
}

#[test]
fn a_sharders_path_shows_each_shards_depth() {
    use latchkey_recipes::{QueueSharder, QueueSharderPolicies};
    let c = client();
    let path = latchkey_test::unique_path("cli-sharder");
    let sharder = QueueSharder::new(
        &c,
        |client, shard| QueueBuilder::new(client, StringSerializer, shard).build_queue(),
        &path,
        &format!("{path}-leader"),
        QueueSharderPolicies::default(),
    )
    .unwrap();
    sharder.start().unwrap();
    let shard = sharder.queue().unwrap();
    for item in ["a", "b", "c"] {
        shard.put(&item.to_string()).unwrap();
    }
    let v = json(&path, &[]);
    assert_eq!(v["recipe"], "sharded queue", "{v}");
    assert_eq!(v["queue"]["depth"], 3, "{v}");
    let shards = v["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 1, "{v}");
    assert_eq!(shards[0]["path"], shard.path(), "{v}");
    assert_eq!(shards[0]["depth"], 3, "{v}");
    let t = text(&path, &[]);
    assert!(t.contains("(sharded queue): 1 shard(s), depth 3"), "{t}");
    assert!(t.contains(&format!("    3  {}", shard.path())), "{t}");
    // A shard is a queue of its own.
    let v = json(shard.path(), &[]);
    assert_eq!(
        field(&v, "data"),
        [json!("a"), json!("b"), json!("c")],
        "{v}"
    );
    sharder.close();
    c.close();
}

//! Service discovery with a Java neighbour: a Rust service registers
//! itself with `latchkey-discovery`, a Java service built on Curator's
//! `curator-x-discovery` (the test harness's discovery peer, when Java and
//! Debian's `libcurator-discovery-java` are installed) registers itself
//! too, and each finds the other: the Rust side through a
//! `ServiceProvider`, the Java side through Curator's `ServiceDiscovery`.
//! Exits 1 if either side does not find the other.
//!
//! ```text
//! cargo run -p latchkey-examples --bin discovery                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin discovery -- --connect HOST:PORT
//! ```

use std::time::{Duration, Instant};

use latchkey_discovery::{JsonInstanceSerializer, ServiceDiscovery, ServiceInstance, UriSpec};
use latchkey_examples::setup::{new_client, run_example};
use latchkey_test::peers::{peer_available, Peer, PeerKind};
use serde::{Deserialize, Serialize};

/// Where the services live.
const BASE: &str = "/examples/discovery";
/// How long either side may take to see the other.
const SEE_WITHIN: Duration = Duration::from_secs(20);

/// The Rust service's payload; Java reads it as the peer's `Details`.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Details {
    region: String,
    weight: i32,
}

fn main() {
    run_example("discovery", run);
}

fn run(connect: &str) -> Result<(), String> {
    let client = new_client(connect)?;
    let err = |e: latchkey_discovery::Error| e.to_string();

    // Register: an ephemeral node, back by itself after a lost session.
    let me = ServiceInstance::builder("orders")
        .address("127.0.0.1")
        .port(8080)
        .payload(Details {
            region: "eu-west".into(),
            weight: 3,
        })
        .uri_spec(UriSpec::parse("{scheme}://{address}:{port}/orders").map_err(err)?)
        .build();
    let discovery = ServiceDiscovery::builder(&client)
        .base_path(BASE)
        .serializer(JsonInstanceSerializer::new().payload_class("DiscoveryPeer$Details"))
        .this_instance(me.clone())
        .build()
        .map_err(err)?;
    discovery.start().map_err(err)?;
    println!(
        "rust: registered orders/{} at {}",
        me.id,
        me.build_uri_spec()
    );

    if let Err(why) = peer_available(PeerKind::CuratorDiscovery) {
        println!("no Java discovery peer ({why}); the Rust half only");
        let found = discovery.query_for_instances("orders").map_err(err)?;
        return match found.iter().any(|i| i.id == me.id) {
            true => Ok(()),
            false => Err("the Rust service does not find itself".into()),
        };
    }

    let mut java = Peer::start(PeerKind::CuratorDiscovery, connect).map_err(|e| e.to_string())?;
    let mut ask = |line: &str| java.command_ok(line, SEE_WITHIN).map_err(|e| e.to_string());
    ask(&format!("disc open {BASE} true"))?;
    let spec = serde_json::json!({
        "name": "billing", "id": "java-billing-1", "address": "127.0.0.1", "port": 9090,
        "uriSpec": "{scheme}://{address}:{port}/billing",
        "payloadKind": "details", "payload": {"region": "eu-west", "weight": 1},
    });
    ask(&format!("disc register {BASE} {spec}"))?;
    println!("java: registered billing/java-billing-1");

    // The Rust side finds the Java service.
    let billing = discovery
        .service_provider_builder()
        .service_name("billing")
        .build()
        .map_err(err)?;
    billing.start().map_err(err)?;
    let deadline = Instant::now() + SEE_WITHIN;
    let found = loop {
        if let Some(i) = billing.get_instance() {
            break i;
        }
        if Instant::now() >= deadline {
            return Err("the Rust service did not find the Java one".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    println!(
        "rust: found billing/{} at {} (payload {:?})",
        found.id,
        found.build_uri_spec(),
        found.payload
    );

    // The Java side finds the Rust service, every field as Curator reads it.
    let seen = ask(&format!("disc query {BASE} orders"))?;
    println!("java: found orders: {seen}");
    if !seen.contains(&me.id) || !seen.contains("\"port\":8080") {
        return Err(format!(
            "the Java service did not find the Rust one: {seen}"
        ));
    }
    ask(&format!("disc close {BASE}"))?;
    let _ = java.quit(Duration::from_secs(5));
    billing.close();
    discovery.close();
    Ok(())
}

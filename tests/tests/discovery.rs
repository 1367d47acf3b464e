//! latchkey-discovery against a real ZooKeeper: registration of each
//! service type, queries, `ServiceCache` and `ServiceProvider`, bad nodes
//! written by another process, and dynamic instances through a lost
//! session and a server restart. Every wait is bounded.
//!
//! Curator's test classes, method by method:
//!
//! | Curator | here |
//! |---|---|
//! | `TestServiceDiscovery.testCrashedServerMultiInstances` | `instances_are_back_after_a_restart_and_an_expiry` |
//! | `TestServiceDiscovery.testCrashedServer` | `instances_are_back_after_a_restart_and_an_expiry` |
//! | `TestServiceDiscovery.testCrashedInstance` | `a_dynamic_instance_is_back_within_2s_of_a_new_session` |
//! | `TestServiceDiscovery.testMultipleInstances` | `multiple_services_and_instances` |
//! | `TestServiceDiscovery.testBasic` | `basic_register_and_query` |
//! | `TestServiceDiscovery.testNoServerOnStart` | `start_without_a_server_registers_once_it_is_up`, `start_while_zookeeper_is_unreachable_returns_at_once` |
//! | `TestServiceDiscovery.testUnregisterService` | `unregister_during_a_restart_stays_unregistered` |
//! | `TestServiceDiscovery.testCleaning` | `basic_register_and_query` (unregister leaves no registration) |
//! | `TestServiceDiscoveryBuilder.testDefaultSerializer` | `the_builder_takes_a_serializer` |
//! | `TestServiceDiscoveryBuilder.testSetSerializer` | `the_builder_takes_a_serializer` |
//! | `TestServiceCache.testInitialLoad` | `cache_initial_load` |
//! | `TestServiceCache.testViaProvider` | `provider_sees_instances_as_they_come` |
//! | `TestServiceCache.testUpdate` | `cache_sees_an_update` |
//! | `TestServiceCache.testCache` | `cache_events_only_for_its_service` |
//! | `TestServiceCache.testExecutorServiceIsInvoked` | not applicable: no executor option; events go to channels from `listen()` |
//! | `TestServiceProvider.testBasic` | `provider_basic_and_note_error` |
//! | `TestServiceProvider.testDisabledInstance` | `provider_leaves_out_disabled_instances` |
//! | `TestServiceCacheRace.testRaceOnInitialLoad` | `cache_start_while_instances_register` (Curator's debug latches have no equivalent; the race is driven by registering during `start`) |
//! | `TestWatchedInstances.testWatchedInstances` | `watched_instances_take_what_another_process_writes` |
//! | `ServiceCacheLeakTester` | not applicable: a manual leak check (`main`), not a test |
//!
//! Beyond Curator's: `a_cache_drops_a_gone_instance_within_2s`,
//! `bad_nodes_are_skipped_and_never_hide_valid_ones`,
//! `service_types_are_kept_as_curator_keeps_them`, `update_and_re_register`,
//! `bad_names_are_refused`, `close_and_drop_at_any_moment`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use latchkey_discovery::{
    DownInstancePolicy, Error, InstanceSerializer, JsonInstanceSerializer, RoundRobinStrategy,
    ServiceCacheEvent, ServiceDiscovery, ServiceInstance, ServiceType, StickyStrategy,
};
use latchkey_framework::{Client, CreateMode};
use latchkey_test::{FaultProxy, TestingServer};

fn discovery<T: latchkey_discovery::Payload>(client: &Client, base: &str) -> ServiceDiscovery<T> {
    let d = ServiceDiscovery::builder(client)
        .base_path(base)
        .build()
        .unwrap();
    d.start().unwrap();
    d
}

fn thing(name: &str, port: u16) -> ServiceInstance<String> {
    ServiceInstance::builder(name)
        .payload("thing".to_string())
        .port(port)
        .build()
}

fn ids<T>(list: &[ServiceInstance<T>]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|i| i.id.clone()).collect();
    v.sort();
    v
}

/// Curator's TestServiceDiscovery.testBasic and testCleaning
#[test]
fn basic_register_and_query() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let base = unique("/discovery/basic");
    let instance = thing("test", 10064);
    let d = ServiceDiscovery::builder(&client)
        .base_path(&base)
        .this_instance(instance.clone())
        .build()
        .unwrap();
    d.start().unwrap();
    assert_eq!(d.query_for_names().unwrap(), vec!["test"]);
    assert_eq!(
        d.query_for_instances("test").unwrap(),
        vec![instance.clone()]
    );
    assert_eq!(
        d.query_for_instance("test", &instance.id).unwrap(),
        Some(instance.clone())
    );
    assert_eq!(d.query_for_instance("test", "nope").unwrap(), None);
    assert_eq!(d.registered_service(&instance.id), Some(instance.clone()));
    // The node is ephemeral, at Curator's path.
    let path = format!("{base}/test/{}", instance.id);
    let stat = client.exists(&path).unwrap().expect("the instance node");
    assert_eq!(stat.ephemeral_owner, client.session_id());

    d.unregister_service(&instance).unwrap();
    assert!(d.registered_services().is_empty(), "testCleaning");
    assert!(client.exists(&path).unwrap().is_none());
    assert!(d.query_for_instances("test").unwrap().is_empty());
    // Starting twice is refused; so is anything after close.
    assert!(matches!(d.start(), Err(Error::IllegalState(_))));
    d.close();
    assert!(matches!(
        d.register_service(&instance),
        Err(Error::IllegalState(_))
    ));
    // Nothing there yet is an empty answer, not an error.
    let empty = discovery::<()>(&client, &unique("/discovery/none"));
    assert!(empty.query_for_names().unwrap().is_empty());
    assert!(empty.query_for_instances("x").unwrap().is_empty());
}

/// Curator's TestServiceDiscovery.testMultipleInstances
#[test]
fn multiple_services_and_instances() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let d = discovery::<()>(&client, &unique("/discovery/multi"));
    let s1 = [
        ServiceInstance::builder("one").build(),
        ServiceInstance::builder("one").build(),
    ];
    let s2 = [
        ServiceInstance::builder("two").build(),
        ServiceInstance::builder("two").build(),
    ];
    for i in s1.iter().chain(&s2) {
        d.register_service(i).unwrap();
    }
    assert_eq!(d.query_for_names().unwrap(), vec!["one", "two"]);
    assert_eq!(ids(&d.query_for_instances("one").unwrap()), ids(&s1));
    assert_eq!(ids(&d.query_for_instances("two").unwrap()), ids(&s2));
    let mut got = d.query_for_instances("one").unwrap();
    got.sort_by(|a, b| a.id.cmp(&b.id));
    let mut want = s1.to_vec();
    want.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(got, want);
}

#[test]
fn service_types_are_kept_as_curator_keeps_them() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let other = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let base = unique("/discovery/types");
    let d = discovery::<()>(&client, &base);
    let make = |t| {
        ServiceInstance::<()>::builder("svc")
            .service_type(t)
            .build()
    };
    let dynamic = make(ServiceType::Dynamic);
    let stat = make(ServiceType::Static);
    let perm = make(ServiceType::Permanent);
    let seq = make(ServiceType::DynamicSequential);
    for i in [&dynamic, &stat, &perm, &seq] {
        d.register_service(i).unwrap();
    }
    let owner = |id: &str| {
        let path = d.registered_path(id).unwrap();
        other.exists(&path).unwrap().unwrap().ephemeral_owner
    };
    assert_eq!(owner(&dynamic.id), client.session_id());
    assert_eq!(owner(&seq.id), client.session_id());
    assert_eq!(owner(&stat.id), 0);
    assert_eq!(owner(&perm.id), 0);
    // The sequential node's name is the id and a sequence number; its JSON
    // has the plain id.
    let seq_path = d.registered_path(&seq.id).unwrap();
    let seq_name = seq_path.rsplit('/').next().unwrap();
    assert!(
        seq_name.starts_with(&seq.id) && seq_name.len() == seq.id.len() + 10,
        "{seq_path}"
    );
    assert_eq!(
        ids(&d.query_for_instances("svc").unwrap()),
        ids(&[dynamic.clone(), stat.clone(), perm.clone(), seq.clone()])
    );

    // A static node deleted by someone else comes back on the next
    // connection; a dynamic one at once.
    other
        .delete()
        .for_path(&d.registered_path(&dynamic.id).unwrap())
        .unwrap();
    wait_until(
        Duration::from_secs(5),
        || {
            other
                .exists(&d.registered_path(&dynamic.id).unwrap())
                .unwrap()
                .is_some()
        },
        || "the dynamic instance was not re-created".into(),
    );

    // Unregistering the sequential one deletes its own node (Curator's
    // deletes the unsuffixed path and leaves the node to its session).
    d.unregister_service(&seq).unwrap();
    assert!(other.exists(&seq_path).unwrap().is_none());

    // Closing removes static and permanent instances too, as Curator's does.
    let stat_path = d.registered_path(&stat.id).unwrap();
    d.close();
    assert!(other.exists(&stat_path).unwrap().is_none());
    assert!(sorted_children(&other, &format!("{base}/svc")).is_empty());
}

#[test]
fn update_and_re_register() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let d = discovery::<String>(&client, &unique("/discovery/update"));
    let mut i = thing("svc", 1);
    assert!(matches!(
        d.update_service(&i),
        Err(Error::NotRegistered { .. })
    ));
    d.register_service(&i).unwrap();
    i.payload = Some("changed".into());
    d.update_service(&i).unwrap();
    assert_eq!(d.query_for_instance("svc", &i.id).unwrap(), Some(i.clone()));
    // Registering again with new contents is an update too.
    i.port = Some(2);
    d.register_service(&i).unwrap();
    assert_eq!(d.query_for_instance("svc", &i.id).unwrap(), Some(i.clone()));
    // ... and with another type, the node is made again as that type.
    i.service_type = ServiceType::Static;
    d.register_service(&i).unwrap();
    let stat = client
        .exists(&d.registered_path(&i.id).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(stat.ephemeral_owner, 0);
    let mut renamed = i.clone();
    renamed.name = "other".into();
    assert!(matches!(
        d.update_service(&renamed),
        Err(Error::InvalidArgument(_))
    ));
    d.close();
}

#[test]
fn bad_names_are_refused() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let d = discovery::<()>(&client, &unique("/discovery/names"));
    for (name, id) in [
        ("", "x"),
        ("a/b", "x"),
        ("ok", ""),
        ("ok", "x/y"),
        ("..", "x"),
        ("ok", "."),
        ("ok", "nul\0"),
    ] {
        let i = ServiceInstance::<()>::builder(name).id(id).build();
        assert!(
            matches!(d.register_service(&i), Err(Error::InvalidArgument(_))),
            "{name:?}/{id:?}"
        );
        assert!(d.query_for_instance(name, id).is_err());
    }
    for base in ["", "relative", "/trailing/", "/a//b"] {
        let r = ServiceDiscovery::<()>::builder(&client)
            .base_path(base)
            .build();
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{base:?}");
    }
    assert!(ServiceDiscovery::<()>::builder(&client).build().is_err());
}

/// Curator's TestServiceDiscoveryBuilder.testDefaultSerializer and testSetSerializer
#[test]
fn the_builder_takes_a_serializer() {
    struct Upper;
    impl InstanceSerializer<()> for Upper {
        fn serialize(&self, i: &ServiceInstance<()>) -> latchkey_discovery::Result<Vec<u8>> {
            Ok(format!("{}|{}", i.name, i.id).into_bytes())
        }
        fn deserialize(&self, bytes: &[u8]) -> latchkey_discovery::Result<ServiceInstance<()>> {
            let s = String::from_utf8_lossy(bytes);
            let (name, id) = s.split_once('|').ok_or(Error::BadInstance {
                path: String::new(),
                reason: "no |".into(),
            })?;
            Ok(ServiceInstance::builder(name).id(id).no_address().build())
        }
    }
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let base = unique("/discovery/serializer");
    let d = ServiceDiscovery::builder(&client)
        .base_path(&base)
        .serializer(Upper)
        .build()
        .unwrap();
    d.start().unwrap();
    let i = ServiceInstance::<()>::builder("svc").id("a").build();
    d.register_service(&i).unwrap();
    assert_eq!(
        client.get_data(&format!("{base}/svc/a")).unwrap().0,
        b"svc|a"
    );
    assert_eq!(d.query_for_instance("svc", "a").unwrap().unwrap().id, "a");
    // The default is Curator's JSON.
    let json = discovery::<()>(&client, &base);
    let j = ServiceInstance::<()>::builder("json").id("b").build();
    json.register_service(&j).unwrap();
    let data = client.get_data(&format!("{base}/json/b")).unwrap().0;
    assert_eq!(
        data,
        JsonInstanceSerializer::<()>::new().serialize(&j).unwrap()
    );
}

/// Nodes another process wrote badly are skipped, with the reason logged;
/// the valid instances beside them are still listed, by queries and caches.
#[test]
fn bad_nodes_are_skipped_and_never_hide_valid_ones() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let base = unique("/discovery/bad");
    let d = discovery::<String>(&client, &base);
    let good = thing("svc", 1);
    d.register_service(&good).unwrap();
    let parent = format!("{base}/svc");
    let huge = format!(r#"{{"name":"svc","payload":"{}"}}"#, "x".repeat(900_000));
    let deep = "[".repeat(5000);
    let bad: [(&str, &[u8]); 6] = [
        ("empty", b""),
        ("garbage", b"{not json"),
        ("array", b"[1,2,3]"),
        ("wrong-payload", br#"{"name":"svc","payload":42}"#),
        ("wrong-type", br#"{"name":"svc","serviceType":"NOPE"}"#),
        ("deep", deep.as_bytes()),
    ];
    for (name, data) in bad {
        client
            .create()
            .for_path(&format!("{parent}/{name}"), data)
            .unwrap();
    }
    // A huge payload of the right type is an instance like any other.
    client
        .create()
        .for_path(&format!("{parent}/huge"), huge.as_bytes())
        .unwrap();
    // A child of an instance node is not an instance.
    client
        .create()
        .for_path(&format!("{parent}/huge/child"), b"{}")
        .unwrap();

    let listed = d.query_for_instances("svc").unwrap();
    assert_eq!(listed.len(), 2, "{:?}", ids(&listed));
    assert!(listed.contains(&good));
    assert!(matches!(
        d.query_for_instance("svc", "garbage"),
        Err(Error::BadInstance { ref path, .. }) if path.ends_with("/garbage")
    ));

    let cache = d.service_cache_builder().name("svc").build().unwrap();
    let events = cache.listen();
    cache.start().unwrap();
    assert_eq!(cache.instances().len(), 2);
    let added = events
        .try_iter()
        .filter(|e| matches!(e, ServiceCacheEvent::Added(_)))
        .count();
    assert_eq!(added, 2);
    // A valid instance turned bad leaves the cache; made good again, it is back.
    let good_path = format!("{parent}/{}", good.id);
    client.set_data(&good_path, b"nonsense", None).unwrap();
    wait_until(
        Duration::from_secs(5),
        || cache.instances().len() == 1,
        || format!("{:?}", ids(&cache.instances())),
    );
    let json = JsonInstanceSerializer::<String>::new();
    client
        .set_data(&good_path, &json.serialize(&good).unwrap(), None)
        .unwrap();
    wait_until(
        Duration::from_secs(5),
        || cache.instances().contains(&good),
        || format!("{:?}", ids(&cache.instances())),
    );
    cache.close();
    d.close();
}

/// Curator's TestServiceCache.testInitialLoad
#[test]
fn cache_initial_load() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let d = discovery::<String>(&client, &unique("/discovery/initial"));
    let cache = d.service_cache_builder().name("test").build().unwrap();
    let events = cache.listen();
    cache.start().unwrap();
    assert_eq!(
        events.recv_timeout(Duration::from_secs(5)),
        Ok(ServiceCacheEvent::Initialized)
    );
    let list: Vec<_> = (0..3).map(|i| thing("test", 10064 + i)).collect();
    for i in &list {
        d.register_service(i).unwrap();
    }
    for _ in 0..3 {
        match events.recv_timeout(Duration::from_secs(10)) {
            Ok(ServiceCacheEvent::Added(i)) => assert!(list.contains(&i)),
            other => panic!("expected an Added event, got {other:?}"),
        }
    }
    let cache2 = d.service_cache_builder().name("test").build().unwrap();
    cache2.start().unwrap();
    assert_eq!(ids(&cache2.instances()), ids(&list));
}

/// Curator's TestServiceCache.testViaProvider
#[test]
fn provider_sees_instances_as_they_come() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let d = discovery::<String>(&client, &unique("/discovery/via-provider"));
    let provider = d
        .service_provider_builder()
        .service_name("test")
        .build()
        .unwrap();
    provider.start().unwrap();
    assert_eq!(provider.get_instance(), None);
    let instance = thing("test", 10064);
    d.register_service(&instance).unwrap();
    wait_until(
        Duration::from_secs(5),
        || provider.get_instance().is_some(),
        || "the provider never saw the instance".into(),
    );
    assert_eq!(provider.get_instance(), Some(instance));
    let instance2 = ServiceInstance::builder("test")
        .address("foo")
        .payload("thing".to_string())
        .port(10064)
        .build();
    d.register_service(&instance2).unwrap();
    wait_until(
        Duration::from_secs(5),
        || provider.all_instances().len() == 2,
        || format!("{:?}", ids(&provider.all_instances())),
    );
}

/// Curator's TestServiceCache.testUpdate
#[test]
fn cache_sees_an_update() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let instance = thing("test", 10064);
    let d = ServiceDiscovery::builder(&client)
        .base_path(&unique("/discovery/cache-update"))
        .this_instance(instance.clone())
        .build()
        .unwrap();
    d.start().unwrap();
    let cache = d.service_cache_builder().name("test").build().unwrap();
    cache.start().unwrap();
    let events = cache.listen();
    let mut changed = instance.clone();
    changed.payload = Some("changed".into());
    d.update_service(&changed).unwrap();
    match events.recv_timeout(Duration::from_secs(10)) {
        Ok(ServiceCacheEvent::Updated(i)) => assert_eq!(i, changed),
        other => panic!("expected an Updated event, got {other:?}"),
    }
    assert_eq!(cache.instances(), vec![changed]);
    // The same bytes written again are no change.
    assert!(events.recv_timeout(Duration::from_millis(300)).is_err());
}

/// Curator's TestServiceCache.testCache
#[test]
fn cache_events_only_for_its_service() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let d = discovery::<String>(&client, &unique("/discovery/cache-events"));
    let cache = d.service_cache_builder().name("test").build().unwrap();
    cache.start().unwrap();
    let events = cache.listen();
    let i1 = thing("test", 10064);
    let i2 = thing("test", 10065);
    d.register_service(&i1).unwrap();
    assert_eq!(
        events.recv_timeout(Duration::from_secs(10)),
        Ok(ServiceCacheEvent::Added(i1.clone()))
    );
    d.register_service(&i2).unwrap();
    assert_eq!(
        events.recv_timeout(Duration::from_secs(3)),
        Ok(ServiceCacheEvent::Added(i2.clone()))
    );
    d.register_service(&thing("another", 10064)).unwrap();
    assert!(
        events.recv_timeout(Duration::from_secs(1)).is_err(),
        "no event for another service"
    );
    d.unregister_service(&i1).unwrap();
    assert_eq!(
        events.recv_timeout(Duration::from_secs(3)),
        Ok(ServiceCacheEvent::Removed(i1))
    );
    cache.close();
    assert!(
        events.recv_timeout(Duration::from_secs(3)).is_err(),
        "disconnected on close"
    );
    assert_eq!(cache.instances(), vec![i2], "kept as last seen");
}

/// Curator's TestServiceCacheRace.testRaceOnInitialLoad, driven by
/// registrations during the cache's start.
#[test]
fn cache_start_while_instances_register() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let base = unique("/discovery/race");
    let d = Arc::new(discovery::<String>(&client, &base));
    let cache = d.service_cache_builder().name("test").build().unwrap();
    let registered = Arc::new(AtomicUsize::new(0));
    let writer = {
        let d = Arc::clone(&d);
        let registered = Arc::clone(&registered);
        std::thread::spawn(move || {
            let mut list = Vec::new();
            for port in 0..20 {
                let i = thing("test", port);
                d.register_service(&i).unwrap();
                registered.fetch_add(1, Ordering::SeqCst);
                list.push(i);
            }
            list
        })
    };
    cache.start().unwrap();
    let list = writer.join().unwrap();
    wait_until(
        Duration::from_secs(5),
        || cache.instances().len() == list.len(),
        || format!("{} of {}", cache.instances().len(), list.len()),
    );
    assert_eq!(ids(&cache.instances()), ids(&list));
}

/// Curator's TestServiceProvider.testBasic, and note_error with a policy
#[test]
fn provider_basic_and_note_error() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let instance = thing("test", 10064);
    let d = ServiceDiscovery::builder(&client)
        .base_path(&unique("/discovery/provider"))
        .this_instance(instance.clone())
        .build()
        .unwrap();
    d.start().unwrap();
    let provider = d
        .service_provider_builder()
        .service_name("test")
        .down_instance_policy(DownInstancePolicy::new(Duration::from_secs(60), 2))
        .build()
        .unwrap();
    provider.start().unwrap();
    assert_eq!(provider.get_instance(), Some(instance.clone()));
    assert_eq!(provider.all_instances(), vec![instance.clone()]);

    let second = thing("test", 10065);
    d.register_service(&second).unwrap();
    wait_until(
        Duration::from_secs(5),
        || provider.all_instances().len() == 2,
        || "second instance not seen".into(),
    );
    // Round robin: both, in turn.
    let a = provider.get_instance().unwrap();
    let b = provider.get_instance().unwrap();
    assert_ne!(a.id, b.id);
    // Two errors within the policy's window: down.
    provider.note_error(&instance);
    assert_eq!(provider.all_instances().len(), 2);
    provider.note_error(&instance);
    assert_eq!(provider.all_instances(), vec![second.clone()]);
    for _ in 0..5 {
        assert_eq!(provider.get_instance().unwrap().id, second.id);
    }

    // Sticky, with a filter.
    let sticky = d
        .service_provider_builder()
        .service_name("test")
        .provider_strategy(StickyStrategy::new(RoundRobinStrategy::new()))
        .additional_filter(|i: &ServiceInstance<String>| i.port == Some(10064))
        .build()
        .unwrap();
    sticky.start().unwrap();
    for _ in 0..5 {
        assert_eq!(sticky.get_instance().unwrap().id, instance.id);
    }
}

/// Curator's TestServiceProvider.testDisabledInstance
#[test]
fn provider_leaves_out_disabled_instances() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let instance = ServiceInstance::builder("test")
        .payload("thing".to_string())
        .port(10064)
        .enabled(false)
        .build();
    let d = ServiceDiscovery::builder(&client)
        .base_path(&unique("/discovery/disabled"))
        .serializer(JsonInstanceSerializer::new().compatible_serialization(false))
        .this_instance(instance)
        .build()
        .unwrap();
    d.start().unwrap();
    let provider = d
        .service_provider_builder()
        .service_name("test")
        .build()
        .unwrap();
    provider.start().unwrap();
    assert_eq!(provider.cache().instances().len(), 1);
    assert_eq!(provider.get_instance(), None);
    assert!(provider.all_instances().is_empty());
}

/// Curator's TestServiceDiscovery.testCrashedInstance, with the issue's
/// bound: listed again within 2 s of the new session, and a cache never
/// lists an instance gone for longer than that.
#[test]
fn a_dynamic_instance_is_back_within_2s_of_a_new_session() {
    let server = shared_server();
    let client = connect(&server.connect_string(), Duration::from_secs(2));
    let watcher = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &client);
    let base = unique("/discovery/crashed-instance");
    let instance = thing("test", 10064);
    let d = ServiceDiscovery::builder(&client)
        .base_path(&base)
        .this_instance(instance.clone())
        .build()
        .unwrap();
    d.start().unwrap();
    let other = discovery::<String>(&watcher, &base);
    let cache = other.service_cache_builder().name("test").build().unwrap();
    cache.start().unwrap();
    assert_eq!(cache.instances(), vec![instance.clone()]);
    let events = cache.listen();

    let old_session = client.session_id();
    client.expire_session_for_testing().unwrap();
    // The cache drops it once the server deletes it ...
    match events.recv_timeout(Duration::from_secs(10)) {
        Ok(ServiceCacheEvent::Removed(i)) => assert_eq!(i.id, instance.id),
        // ... unless it is back before the cache reads it again.
        Ok(ServiceCacheEvent::Updated(i) | ServiceCacheEvent::Added(i)) => {
            assert_eq!(i.id, instance.id)
        }
        other => panic!("no event for the expiry: {other:?}\n{}", ctx.dump()),
    }
    // A new session, then the instance within 2 s of it.
    let deadline = Instant::now() + Duration::from_secs(15);
    while client.session_id() == old_session || !client.state().is_some_and(|s| s.is_connected()) {
        assert!(Instant::now() < deadline, "no new session\n{}", ctx.dump());
        std::thread::sleep(Duration::from_millis(5));
    }
    let new_session = Instant::now();
    wait_until(
        Duration::from_secs(2),
        || {
            d.query_for_instances("test")
                .is_ok_and(|l| l == vec![instance.clone()])
        },
        || format!("not back within 2 s of the new session\n{}", ctx.dump()),
    );
    wait_until(
        Duration::from_secs(2).saturating_sub(new_session.elapsed()) + Duration::from_millis(500),
        || cache.instances() == vec![instance.clone()],
        || {
            format!(
                "the cache has {:?}\n{}",
                ids(&cache.instances()),
                ctx.dump()
            )
        },
    );
    let path = d.registered_path(&instance.id).unwrap();
    assert_eq!(
        watcher.exists(&path).unwrap().unwrap().ephemeral_owner,
        client.session_id()
    );
}

/// Curator's TestServiceDiscovery.testCrashedServer and
/// testCrashedServerMultiInstances: a session expiry and a server restart;
/// every instance (static ones too) is listed again within 2 s of the new
/// session, and a cache on another client follows.
#[test]
fn instances_are_back_after_a_restart_and_an_expiry() {
    let mut server = TestingServer::start().expect("start ZooKeeper");
    let client = connect(&server.connect_string(), Duration::from_secs(2));
    let watcher = connect(&server.connect_string(), Duration::from_secs(30));
    let ctx = Ctx::new(&server, &client);
    let base = unique("/discovery/crashed-server");
    let i1 = thing("test", 10064);
    let i2 = thing("test", 10065);
    let i3 = ServiceInstance::builder("test")
        .payload("static".to_string())
        .service_type(ServiceType::Static)
        .build();
    let d = ServiceDiscovery::builder(&client)
        .base_path(&base)
        .this_instance(i1.clone())
        .build()
        .unwrap();
    d.start().unwrap();
    d.register_service(&i2).unwrap();
    d.register_service(&i3).unwrap();
    assert_eq!(d.query_for_instances("test").unwrap().len(), 3);
    let other = discovery::<String>(&watcher, &base);
    let cache = other.service_cache_builder().name("test").build().unwrap();
    cache.start().unwrap();
    assert_eq!(cache.instances().len(), 3);

    let old_session = client.session_id();
    client.expire_session_for_testing().unwrap();
    server.stop().unwrap();
    // A static instance deleted while we are away is written again.
    server.restart().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.session_id() == old_session || !client.state().is_some_and(|s| s.is_connected()) {
        assert!(Instant::now() < deadline, "no new session\n{}", ctx.dump());
        std::thread::sleep(Duration::from_millis(5));
    }
    let want = ids(&[i1.clone(), i2.clone(), i3.clone()]);
    wait_until(
        Duration::from_secs(2),
        || d.query_for_instances("test").is_ok_and(|l| ids(&l) == want),
        || format!("not all back within 2 s of the new session\n{}", ctx.dump()),
    );
    wait_until(
        Duration::from_secs(10),
        || ids(&cache.instances()) == want,
        || format!("cache: {:?}\n{}", ids(&cache.instances()), ctx.dump()),
    );
    // The static node, deleted by someone, is written again on the next
    // reconnection.
    watcher
        .delete()
        .for_path(&d.registered_path(&i3.id).unwrap())
        .unwrap();
    server.stop().unwrap();
    server.restart().unwrap();
    wait_until(
        Duration::from_secs(15),
        || d.query_for_instances("test").is_ok_and(|l| ids(&l) == want),
        || format!("the static instance was not written again\n{}", ctx.dump()),
    );
    d.close();
    other.close();
}

/// Curator's TestServiceDiscovery.testNoServerOnStart
#[test]
fn start_without_a_server_registers_once_it_is_up() {
    let mut server = TestingServer::start().expect("start ZooKeeper");
    let client = connect(&server.connect_string(), Duration::from_secs(4));
    server.stop().unwrap();
    let instance = thing("test", 10064);
    let d = ServiceDiscovery::builder(&client)
        .base_path("/discovery/no-server")
        .this_instance(instance.clone())
        .register_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    // As Curator's `start`: not an error, registered once it can be.
    d.start().unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    server.restart().unwrap();
    wait_until(
        Duration::from_secs(15),
        || {
            d.query_for_instances("test")
                .is_ok_and(|l| l == vec![instance.clone()])
        },
        || format!("never registered: {:?}", client.state_history()),
    );
    assert_eq!(d.query_for_names().unwrap(), vec!["test"]);
}

/// Curator's `start()` logs a registration that ZooKeeper cannot take and
/// registers again on the next connection. Here `start`, with the default
/// 15 s register timeout, returns `Ok` at once while the client cannot
/// reach ZooKeeper; once it can, the dynamic instance's node is this
/// session's (the node a dead session left at its path taken over) and
/// the static instance's node has its contents (a stale one overwritten).
#[test]
fn start_while_zookeeper_is_unreachable_returns_at_once() {
    let server = shared_server();
    let observer = connect(&server.connect_string(), Duration::from_secs(30));
    let base = unique("/discovery/start-unreachable");
    // What an earlier run left: a dead session's dynamic node, partitioned
    // and not expired (20 s), and a static node with old contents.
    let dead_proxy = FaultProxy::start(server.addr()).expect("start a proxy");
    let dead = connect(&dead_proxy.connect_string(), Duration::from_secs(20));
    let d_old = ServiceDiscovery::builder(&dead)
        .base_path(&base)
        .this_instance(
            ServiceInstance::builder("worker")
                .id("w-1")
                .payload("old".to_string())
                .build(),
        )
        .build()
        .unwrap();
    let d_old = DeadWorker(Some(d_old), dead.clone());
    d_old.0.as_ref().unwrap().start().unwrap();
    let static_path = format!("{base}/worker/s-1");
    observer.create().for_path(&static_path, b"{}").unwrap();
    dead_proxy.pause();

    let proxy = FaultProxy::start(server.addr()).expect("start a proxy");
    let client = connect(&proxy.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &client);
    proxy.set_refuse(true);
    proxy.cut();
    wait_until(
        Duration::from_secs(5),
        || !client.state().is_some_and(|s| s.is_connected()),
        || format!("still connected\n{}", ctx.dump()),
    );
    let dynamic = ServiceInstance::builder("worker")
        .id("w-1")
        .payload("new".to_string())
        .build();
    let fixed = ServiceInstance::builder("worker")
        .id("s-1")
        .payload("new".to_string())
        .service_type(ServiceType::Static)
        .build();
    let mut started = Vec::new();
    for instance in [&dynamic, &fixed] {
        let d = ServiceDiscovery::builder(&client)
            .base_path(&base)
            .this_instance(instance.clone())
            .build()
            .unwrap();
        let (d, result) = call_within(
            "start while unreachable",
            Duration::from_secs(3),
            move || {
                let result = d.start();
                (d, result)
            },
        );
        assert!(result.is_ok(), "{}: {result:?}", instance.id);
        started.push(d);
    }
    assert_eq!(started[0].registered_path("w-1"), None, "not created yet");

    proxy.set_refuse(false);
    let dyn_path = format!("{base}/worker/w-1");
    wait_until(
        Duration::from_secs(10),
        || {
            observer
                .exists(&dyn_path)
                .ok()
                .flatten()
                .is_some_and(|s| s.ephemeral_owner == client.session_id())
        },
        || {
            format!(
                "the dynamic node is {:?}, not our session's {:#x}\n{}",
                observer.exists(&dyn_path),
                client.session_id(),
                ctx.dump()
            )
        },
    );
    let reader = discovery::<String>(&observer, &base);
    wait_until(
        Duration::from_secs(10),
        || {
            reader.query_for_instance("worker", "w-1").ok().flatten() == Some(dynamic.clone())
                && reader.query_for_instance("worker", "s-1").ok().flatten() == Some(fixed.clone())
        },
        || {
            format!(
                "read {:?} and {:?}\n{}",
                reader.query_for_instance("worker", "w-1"),
                reader.query_for_instance("worker", "s-1"),
                ctx.dump()
            )
        },
    );
    assert_eq!(
        started[0].registered_path("w-1").as_deref(),
        Some(dyn_path.as_str())
    );
    for d in started {
        d.close();
    }
}

/// Curator's TestServiceDiscovery.testUnregisterService (CURATOR-164): an
/// unregister while a restart is under way stays unregistered.
#[test]
fn unregister_during_a_restart_stays_unregistered() {
    let mut server = TestingServer::start().expect("start ZooKeeper");
    let client = connect(&server.connect_string(), Duration::from_secs(4));
    let observer = connect(&server.connect_string(), Duration::from_secs(30));
    let instance = thing("name", 10064);
    let d = ServiceDiscovery::builder(&client)
        .base_path("/discovery/unregister")
        .this_instance(instance.clone())
        .build()
        .unwrap();
    d.start().unwrap();
    assert!(!d.query_for_instances("name").unwrap().is_empty());
    server.stop().unwrap();
    server.restart().unwrap();
    d.unregister_service(&instance).unwrap();
    let path = format!("/discovery/unregister/name/{}", instance.id);
    // It stays gone (the node's keeper has stopped).
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        assert!(
            observer.exists(&path).unwrap_or(None).is_none(),
            "the instance came back after its unregister"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn close_and_drop_at_any_moment() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let base = unique("/discovery/drop");
    {
        let d = discovery::<String>(&client, &base);
        d.register_service(&thing("svc", 1)).unwrap();
        let cache = d.service_cache_builder().name("svc").build().unwrap();
        let _events = cache.listen();
        // Dropped unstarted, started, and closed twice.
        let provider = d
            .service_provider_builder()
            .service_name("svc")
            .build()
            .unwrap();
        drop(provider);
        cache.start().unwrap();
        cache.close();
        cache.close();
        assert!(cache.start().is_err(), "a second start is refused");
        // The discovery is dropped with its cache alive: its instance goes.
        drop(d);
        assert!(sorted_children(&client, &format!("{base}/svc")).is_empty());
    }
    // Extreme timeouts and policies are taken without a panic.
    let patient = ServiceDiscovery::<()>::builder(&client)
        .base_path(&base)
        .register_timeout(Duration::MAX)
        .build()
        .unwrap();
    patient
        .register_service(&ServiceInstance::builder("patient").build())
        .unwrap();
    let zero = ServiceDiscovery::<()>::builder(&client)
        .base_path(&base)
        .register_timeout(Duration::ZERO)
        .build()
        .unwrap();
    // Not yet created, or created at once: either way no panic, and the
    // instance is there soon.
    let _ = zero.register_service(&ServiceInstance::builder("zero").id("z").build());
    wait_until(
        Duration::from_secs(5),
        || {
            zero.query_for_instance("zero", "z")
                .is_ok_and(|i| i.is_some())
        },
        || "the zero-timeout registration never happened".into(),
    );
    let provider = patient
        .service_provider_builder()
        .service_name("patient")
        .down_instance_policy(DownInstancePolicy::new(Duration::MAX, u32::MAX))
        .build()
        .unwrap();
    provider.start().unwrap();
    let one = provider.get_instance().unwrap();
    provider.note_error(&one);
    assert!(provider.get_instance().is_some());
    // A closed client: errors, no panics, no hangs.
    let gone = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let d = discovery::<()>(&gone, &base);
    gone.close();
    let started = Instant::now();
    assert!(d
        .register_service(&ServiceInstance::builder("svc").build())
        .is_err());
    assert!(d.query_for_instances("svc").is_err());
    assert!(started.elapsed() < Duration::from_secs(20));
    let _ = CreateMode::Persistent;
}

/// A cache never lists an instance gone for longer than 2 s: its owner's
/// session ends (the server deletes the node), and, while the cache's own
/// session is being replaced, an instance is unregistered (the cache reads
/// the service again on its new session).
#[test]
fn a_cache_drops_a_gone_instance_within_2s() {
    let server = shared_server();
    let owner = connect(&server.connect_string(), Duration::from_secs(2));
    let keeper = connect(&server.connect_string(), Duration::from_secs(10));
    let watcher = connect(&server.connect_string(), Duration::from_secs(2));
    let ctx = Ctx::new(server, &watcher);
    let base = unique("/discovery/cache-gone");
    let mine = discovery::<String>(&owner, &base);
    let kept = discovery::<String>(&keeper, &base);
    let a = thing("svc", 1);
    let b = thing("svc", 2);
    mine.register_service(&a).unwrap();
    kept.register_service(&b).unwrap();
    let d = discovery::<String>(&watcher, &base);
    let cache = d.service_cache_builder().name("svc").build().unwrap();
    cache.start().unwrap();
    assert_eq!(ids(&cache.instances()), ids(&[a.clone(), b.clone()]));

    // The owner's session ends for good: the server deletes its node.
    owner.close();
    let gone = Instant::now();
    wait_until(
        Duration::from_secs(2),
        || ids(&cache.instances()) == vec![b.id.clone()],
        || {
            format!(
                "still listed after 2 s: {:?}\n{}",
                ids(&cache.instances()),
                ctx.dump()
            )
        },
    );
    println!("dropped {:?} after its owner closed", gone.elapsed());

    // The cache's session is replaced; meanwhile `b` goes.
    let old_session = watcher.session_id();
    watcher.expire_session_for_testing().unwrap();
    kept.unregister_service(&b).unwrap();
    let gone = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(15);
    while watcher.session_id() == old_session || !watcher.state().is_some_and(|s| s.is_connected())
    {
        assert!(Instant::now() < deadline, "no new session\n{}", ctx.dump());
        std::thread::sleep(Duration::from_millis(5));
    }
    let new_session = Instant::now();
    wait_until(
        Duration::from_secs(2),
        || cache.instances().is_empty(),
        || {
            format!(
                "still listed 2 s after the new session: {:?}\n{}",
                ids(&cache.instances()),
                ctx.dump()
            )
        },
    );
    println!(
        "dropped {:?} after its unregister, {:?} after the new session",
        gone.elapsed(),
        new_session.elapsed()
    );
    // And an instance registered now is seen on the new session.
    let c = thing("svc", 3);
    kept.register_service(&c).unwrap();
    wait_until(
        Duration::from_secs(2),
        || cache.instances() == vec![c.clone()],
        || format!("{:?}\n{}", ids(&cache.instances()), ctx.dump()),
    );
}

/// Curator's TestWatchedInstances.testWatchedInstances, and the rewritten
/// contents surviving a lost session.
#[test]
fn watched_instances_take_what_another_process_writes() {
    let client = connect(&shared_server().connect_string(), Duration::from_secs(2));
    let other = connect(&shared_server().connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(shared_server(), &client);
    let base = unique("/discovery/watched");
    let instance = thing("test", 10064);
    let d = ServiceDiscovery::builder(&client)
        .base_path(&base)
        .this_instance(instance.clone())
        .watch_instances(true)
        .build()
        .unwrap();
    d.start().unwrap();
    assert_eq!(d.query_for_names().unwrap(), vec!["test"]);
    assert_eq!(
        d.query_for_instances("test").unwrap(),
        vec![instance.clone()]
    );

    let mut changed = instance.clone();
    changed.payload = Some("different".into());
    let path = format!("{base}/test/{}", instance.id);
    let json = JsonInstanceSerializer::<String>::new();
    other
        .set_data(&path, &json.serialize(&changed).unwrap(), None)
        .unwrap();
    wait_until(
        Duration::from_secs(5),
        || d.registered_service(&instance.id).and_then(|i| i.payload) == Some("different".into()),
        || format!("{:?}\n{}", d.registered_service(&instance.id), ctx.dump()),
    );
    // Re-created with the new contents after a lost session.
    let old_session = client.session_id();
    client.expire_session_for_testing().unwrap();
    wait_until(
        Duration::from_secs(15),
        || {
            client.session_id() != old_session
                && other
                    .exists(&path)
                    .ok()
                    .flatten()
                    .is_some_and(|s| s.ephemeral_owner == client.session_id())
        },
        || ctx.dump(),
    );
    assert_eq!(
        d.query_for_instance("test", &instance.id).unwrap(),
        Some(changed)
    );
    // A rewrite that is not an instance, or another one, is not taken.
    other.set_data(&path, b"garbage", None).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        d.registered_service(&instance.id).and_then(|i| i.payload),
        Some("different".into())
    );
    d.close();
    assert!(other.exists(&path).unwrap().is_none());
}

/// A worker restarted with the same instance ids while its dead session
/// (partitioned, not yet expired) still holds their nodes. As Curator's
/// `internalRegisterService` does on `NodeExists`, registering deletes
/// such a node and creates it again: the dynamic instance's node is the
/// new session's at once with the new contents, and the static one is a
/// persistent node at once. Neither goes when the dead session expires.
#[test]
fn re_registering_over_a_dead_sessions_node_takes_it_over_at_once() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start a proxy");
    let dead = connect(&proxy.connect_string(), Duration::from_secs(4));
    let base = unique("/discovery/dead-session");
    let old = |id: &str| {
        ServiceInstance::builder("worker")
            .id(id)
            .payload("old".to_string())
            .port(1)
            .build()
    };
    let d_old = ServiceDiscovery::builder(&dead)
        .base_path(&base)
        .this_instance(old("w-dynamic"))
        .build()
        .unwrap();
    // Its client closed first, however the test ends: the discovery's
    // unregister on drop then fails at once instead of retrying through
    // the partition.
    let d_old = DeadWorker(Some(d_old), dead.clone());
    let d_old = d_old.0.as_ref().unwrap();
    d_old.start().unwrap();
    d_old.register_service(&old("w-static")).unwrap();
    let marker = format!("{base}/marker");
    dead.create()
        .mode(CreateMode::Ephemeral)
        .for_path(&marker, b"")
        .unwrap();
    let dead_session = dead.session_id();
    // The worker dies: its session lives on in the server until it expires.
    proxy.pause();

    let client = connect(&server.connect_string(), Duration::from_secs(10));
    let ctx = Ctx::new(server, &client);
    let dynamic = ServiceInstance::builder("worker")
        .id("w-dynamic")
        .payload("new".to_string())
        .port(2)
        .build();
    let fixed = ServiceInstance::builder("worker")
        .id("w-static")
        .payload("new".to_string())
        .service_type(ServiceType::Static)
        .build();
    let d = ServiceDiscovery::builder(&client)
        .base_path(&base)
        .this_instance(dynamic.clone())
        .build()
        .unwrap();
    d.start().unwrap();
    d.register_service(&fixed).unwrap();
    let dyn_path = format!("{base}/worker/w-dynamic");
    let static_path = format!("{base}/worker/w-static");
    let dyn_stat = client.exists(&dyn_path).unwrap().expect("the dynamic node");
    assert_eq!(
        dyn_stat.ephemeral_owner,
        client.session_id(),
        "the dynamic node is still the dead session's ({dead_session:#x}), not ours\n{}",
        ctx.dump()
    );
    let static_stat = client
        .exists(&static_path)
        .unwrap()
        .expect("the static node");
    assert_eq!(
        static_stat.ephemeral_owner, 0,
        "the static node is still the dead session's ephemeral node ({dead_session:#x})"
    );
    assert_eq!(
        d.query_for_instance("worker", "w-dynamic").unwrap(),
        Some(dynamic.clone())
    );
    assert_eq!(
        d.query_for_instance("worker", "w-static").unwrap(),
        Some(fixed.clone())
    );
    // Watched from now on: the dead session's expiry must not touch them.
    let deleted = Arc::new(AtomicUsize::new(0));
    for path in [&dyn_path, &static_path] {
        let seen = Arc::clone(&deleted);
        client
            .exists_watch(path, move |e| {
                if e.event_type == latchkey_framework::EventType::NodeDeleted {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            })
            .unwrap();
    }
    wait_until(
        Duration::from_secs(20),
        || client.exists(&marker).is_ok_and(|m| m.is_none()),
        || format!("the dead session never expired\n{}", ctx.dump()),
    );
    // The expiry's deletes are one transaction: the marker gone, so are
    // the dead session's other nodes, and their events came before the
    // reply to this read.
    let after = |path: &str| client.exists(path).unwrap();
    assert_eq!(
        after(&dyn_path).map(|s| (s.czxid, s.ephemeral_owner)),
        Some((dyn_stat.czxid, client.session_id())),
        "the dynamic node went with the dead session"
    );
    assert_eq!(
        after(&static_path).map(|s| s.czxid),
        Some(static_stat.czxid),
        "the static node went with the dead session"
    );
    assert_eq!(deleted.load(Ordering::SeqCst), 0, "a node was deleted");
    d.close();
}

/// A discovery whose client is closed before the discovery is dropped.
struct DeadWorker<T>(Option<ServiceDiscovery<T>>, Client);

impl<T> Drop for DeadWorker<T> {
    fn drop(&mut self) {
        self.1.close();
        self.0.take();
    }
}

/// `close` while ZooKeeper cannot be reached, on a client that retries
/// for ever, returns within seconds (it used to wait, instance by
/// instance, as long as the retry policy allows: here for ever); the
/// deletes go on in the client's background and take the nodes, static
/// and dynamic, once ZooKeeper is back.
#[test]
fn close_while_zookeeper_is_unreachable_returns_within_seconds() {
    let mut server = TestingServer::start().expect("start ZooKeeper");
    let client = start_connected(
        Client::builder()
            .connect_string(server.connect_string())
            .session_timeout(Duration::from_secs(30))
            .connection_timeout(Duration::from_secs(2))
            .retry_policy(latchkey_framework::RetryForever::new(
                Duration::from_millis(100),
            )),
    );
    let ctx = Ctx::new(&server, &client);
    let base = unique("/discovery/close-unreachable");
    let dynamic = thing("svc", 1);
    let fixed = ServiceInstance::builder("svc")
        .payload("static".to_string())
        .service_type(ServiceType::Static)
        .build();
    let d = discovery::<String>(&client, &base);
    d.register_service(&dynamic).unwrap();
    d.register_service(&fixed).unwrap();
    let paths = [
        d.registered_path(&dynamic.id).expect("the dynamic node"),
        d.registered_path(&fixed.id).expect("the static node"),
    ];
    server.stop().unwrap();
    wait_until(
        Duration::from_secs(10),
        || !client.state().is_some_and(|s| s.is_connected()),
        || format!("still connected\n{}", ctx.dump()),
    );
    let started = Instant::now();
    call_within(
        "close while ZooKeeper is unreachable",
        Duration::from_secs(6),
        move || d.close(),
    );
    let took = started.elapsed();
    server.restart().unwrap();
    let observer = connect(&server.connect_string(), Duration::from_secs(30));
    wait_until(
        Duration::from_secs(20),
        || {
            paths
                .iter()
                .all(|p| observer.exists(p).is_ok_and(|s| s.is_none()))
        },
        || {
            let left: Vec<_> = paths.iter().map(|p| (p, observer.exists(p))).collect();
            format!(
                "not deleted in the background (close took {took:?}): {left:?}\n{}",
                ctx.dump()
            )
        },
    );
    client.close();
}

//! The distributed queues against a real server: Curator's queue tests
//! ported, lock-safe consumption when a consumer dies mid-item, bad input,
//! and Rust and Curator (Java) producers and consumers on the same queues.
//! The rows of TestSimpleDistributedQueue and TestBoundedDistributedQueue
//! below are quicker versions (cut sizes and timeouts); their ports with
//! Curator's own sizes and timeouts are in curator_ports_queues.rs.
//!
//! | Curator test | here |
//! |---|---|
//! | TestSimpleDistributedQueue.testHangFromContainerLoss | `simple_queue_survives_its_container_being_removed` |
//! | TestSimpleDistributedQueue.testPollWithTimeout | `simple_poll_on_an_empty_queue_ends_at_its_timeout` |
//! | TestSimpleDistributedQueue.testOffer1, testOffer2 | `simple_offer_then_remove_on_the_same_and_another_client` |
//! | TestSimpleDistributedQueue.testTake1 | `simple_take_returns_an_item_there` |
//! | TestSimpleDistributedQueue.testRemova1 | `simple_remove_and_element_on_an_empty_queue_are_errors` |
//! | TestSimpleDistributedQueue.testRemove2, testRemove3 | `simple_remove_takes_items_in_order` (1000 items cut to 300) |
//! | TestSimpleDistributedQueue.testElement1 … testElement4 | `simple_element_is_the_head_after_removes` (1000 items cut to 300) |
//! | TestSimpleDistributedQueue.testTakeWait1, testTakeWait2 | `simple_take_waits_for_an_offer` |
//! | TestDistributedQueue.testSimple | `queue_items_come_out_in_order` |
//! | TestDistributedQueue.testPutMulti | `put_multi_items_come_out_in_order` |
//! | TestDistributedQueue.testMultiPutterSingleGetter | `two_producers_one_consumer_no_duplicates` |
//! | TestDistributedQueue.testSafetyBasic | `lock_safe_items_come_out_in_order` |
//! | TestDistributedQueue.testSafetyWithCrash | `a_failing_lock_safe_consumer_loses_nothing` |
//! | TestDistributedQueue.testNoDuplicateProcessing | `lock_safe_consumers_never_take_an_item_twice` (1000 items cut to 200) |
//! | TestDistributedQueue.testErrorMode | `error_mode_requeue_and_delete` |
//! | TestDistributedQueue.testRetryAfterFailure_Curator56 | `a_requeued_item_keeps_its_name_length` |
//! | TestDistributedQueue.testFlush | `flush_puts_after_foreground_puts` (only the part that applies: there are no background puts to hold back; a put returns once its node exists) |
//! | TestDistributedQueue.testPutListener | not applicable: puts here return only once the node exists, so there is no put listener; ordering of the items is `queue_items_come_out_in_order` |
//! | TestDistributedQueue.testCustomExecutor | not applicable: a queue has one consumer thread and no executor; "no item processed twice" is `lock_safe_consumers_never_take_an_item_twice` |
//! | TestDistributedIdQueue.testDeletingWithLock | `id_queue_cannot_remove_an_item_being_consumed` |
//! | TestDistributedIdQueue.testOrdering | `id_queue_items_come_out_in_put_order` |
//! | TestDistributedIdQueue.testRequeuingWithLock | `id_queue_requeues_under_the_same_id` |
//! | TestDistributedPriorityQueue.testMinItemsBeforeRefresh | `priority_queue_lists_again_after_min_items` |
//! | TestDistributedPriorityQueue.testSortingWhileTaking | `priority_queue_sorts_while_taking` |
//! | TestDistributedPriorityQueue.testSimple | `priority_queue_takes_lowest_first` |
//! | TestDistributedPriorityQueue.testAdditions | not ported: its order depends on whether the consumer's first listing already held the urgent item (a race in the original); an urgent item overtaking is `priority_queue_lists_again_after_min_items` |
//! | TestDistributedDelayQueue.testLateAddition | `delay_queue_late_addition_overtakes` |
//! | TestDistributedDelayQueue.testBasic | `delay_queue_holds_an_item_until_due` |
//! | TestDistributedDelayQueue.testSimple | `delay_queue_takes_in_due_order` |
//! | TestDistributedDelayQueue.testSorting | `delay_queue_sorts_items_put_in_random_order` (1000 items cut to 200) |
//! | TestBoundedDistributedQueue.testSimple | `bounded_queue_put_waits_for_room` |
//! | TestBoundedDistributedQueue.testMulti | `bounded_queue_stays_near_its_bound_with_many_producers` (4 × 1000 items cut to 4 × 40) |
//! | TestQueueSharder.testDistribution | `sharder_spreads_items_over_shards` (1000 items over a threshold of 100 cut to 200 over 40) |
//! | TestQueueSharder.testSharderWatchSync | `two_sharders_agree_on_the_shards` |
//! | TestQueueSharder.testSimpleDistributedQueue | `sharded_items_are_all_consumed_and_shards_found_again` |

mod common;

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use common::*;
use latchkey_framework::{Client, CreateMode};
use latchkey_recipes::{
    BytesSerializer, DistributedQueue, ErrorMode, ItemSerializer, QueueBuilder, QueueError,
    QueueSerializer, QueueSharder, QueueSharderPolicies, Receiver, SimpleDistributedQueue,
    StringSerializer,
};
use latchkey_test::peers::{peer_available, Peer, PeerKind};
use latchkey_test::{ServerConfig, TestingServer};

/// This binary's server: it removes empty containers every 100 ms, as
/// Curator's testHangFromContainerLoss sets up.
fn server() -> &'static TestingServer {
    static SERVER: OnceLock<TestingServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        TestingServer::start_with(ServerConfig {
            system_properties: vec![("znode.container.checkIntervalMs".into(), "100".into())],
            ..ServerConfig::default()
        })
        .expect("start ZooKeeper")
    })
}

fn client() -> Client {
    connect(&server().connect_string(), Duration::from_secs(10))
}

const WAIT: Duration = Duration::from_secs(10);

/// Integers as decimal text, as Curator's tests serialize them.
struct IntText;

impl QueueSerializer<i64> for IntText {
    fn serialize(&self, item: &i64) -> Vec<u8> {
        item.to_string().into_bytes()
    }
    fn deserialize(&self, bytes: &[u8]) -> Result<i64, QueueError> {
        Ok(std::str::from_utf8(bytes)?.parse()?)
    }
}

/// `n` items from `rx`, each within `WAIT`.
fn take_n<T>(rx: &Receiver<T>, n: usize) -> Vec<T> {
    (0..n)
        .map(|i| {
            rx.recv_timeout(WAIT)
                .unwrap_or_else(|_| panic!("item {i} of {n} did not come within {WAIT:?}"))
        })
        .collect()
}

// ---- SimpleDistributedQueue ----

/// Curator's TestSimpleDistributedQueue.testPollWithTimeout.
#[test]
fn simple_poll_on_an_empty_queue_ends_at_its_timeout() {
    let c = client();
    let q = SimpleDistributedQueue::new(&c, &unique("simple-poll")).unwrap();
    let started = Instant::now();
    assert_eq!(q.poll_timeout(Duration::from_millis(300)).unwrap(), None);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < WAIT,
        "{took:?}"
    );
    assert_eq!(q.poll_timeout(Duration::ZERO).unwrap(), None);
    assert_eq!(q.poll().unwrap(), None);
    assert_eq!(q.peek().unwrap(), None);
}

/// A timed poll longer than the recipes' request grace (1 s), as
/// Curator's own test's 3 s: an empty queue still answers `None` at the
/// timeout, not an error from a last listing sent past the deadline.
#[test]
fn simple_poll_past_the_request_grace_on_an_empty_queue_is_none() {
    let c = client();
    let q = SimpleDistributedQueue::new(&c, &unique("simple-poll-long")).unwrap();
    let started = Instant::now();
    let polled = q.poll_timeout(Duration::from_secs(2));
    let took = started.elapsed();
    assert!(
        matches!(polled, Ok(None)),
        "poll_timeout(2 s) on an empty queue: {polled:?} after {took:?}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(2) + WAIT,
        "{took:?}"
    );
}

/// Curator's TestSimpleDistributedQueue.testOffer1 and testOffer2.
#[test]
fn simple_offer_then_remove_on_the_same_and_another_client() {
    let (a, b) = (client(), client());
    let path = unique("simple-offer");
    let qa = SimpleDistributedQueue::new(&a, &path).unwrap();
    let qb = SimpleDistributedQueue::new(&b, &path).unwrap();
    let node = qa.offer(b"Hello World").unwrap();
    assert!(node.starts_with(&format!("{path}/qn-")), "{node}");
    assert_eq!(qa.remove().unwrap(), b"Hello World");
    qa.offer(b"Hello World").unwrap();
    assert_eq!(qb.remove().unwrap(), b"Hello World");
}

/// Curator's TestSimpleDistributedQueue.testTake1.
#[test]
fn simple_take_returns_an_item_there() {
    let c = client();
    let q = SimpleDistributedQueue::new(&c, &unique("simple-take")).unwrap();
    q.offer(b"Hello World").unwrap();
    assert_eq!(q.take().unwrap(), b"Hello World");
}

/// Curator's TestSimpleDistributedQueue.testRemova1 (and `element` alike).
#[test]
fn simple_remove_and_element_on_an_empty_queue_are_errors() {
    let c = client();
    let path = unique("simple-empty");
    let q = SimpleDistributedQueue::new(&c, &path).unwrap();
    for e in [q.remove().unwrap_err(), q.element().unwrap_err()] {
        assert!(e.to_string().contains(&path), "{e}");
        assert!(e.to_string().contains("empty"), "{e}");
    }
}

/// Curator's TestSimpleDistributedQueue.testRemove2 and testRemove3.
#[test]
fn simple_remove_takes_items_in_order() {
    for (n, m) in [(10, 2), (300, 300)] {
        let (a, b) = (client(), client());
        let path = unique("simple-remove");
        let qa = SimpleDistributedQueue::new(&a, &path).unwrap();
        let qb = SimpleDistributedQueue::new(&b, &path).unwrap();
        for i in 0..n {
            qa.offer(format!("Hello World{i}").as_bytes()).unwrap();
        }
        let mut last = Vec::new();
        for _ in 0..m {
            last = qb.remove().unwrap();
        }
        assert_eq!(
            String::from_utf8(last).unwrap(),
            format!("Hello World{}", m - 1)
        );
    }
}

/// Curator's TestSimpleDistributedQueue.testElement1 to testElement4.
#[test]
fn simple_element_is_the_head_after_removes() {
    let (a, b) = (client(), client());
    for (n, m) in [(1, 0), (10, 2), (300, 150), (300, 299)] {
        let path = unique("simple-element");
        let qa = SimpleDistributedQueue::new(&a, &path).unwrap();
        let qb = SimpleDistributedQueue::new(&b, &path).unwrap();
        for i in 0..n {
            qa.offer(format!("Hello World{i}").as_bytes()).unwrap();
        }
        for _ in 0..m {
            qb.remove().unwrap();
        }
        let head = String::from_utf8(qb.element().unwrap()).unwrap();
        assert_eq!(head, format!("Hello World{m}"));
        assert_eq!(
            qb.peek().unwrap().unwrap(),
            head.as_bytes(),
            "peek leaves it"
        );
    }
}

/// Curator's TestSimpleDistributedQueue.testTakeWait1 and testTakeWait2.
#[test]
fn simple_take_waits_for_an_offer() {
    let c = client();
    let path = unique("simple-wait");
    for attempt in 0..2 {
        let q = SimpleDistributedQueue::new(&c, &path).unwrap();
        let taker = thread::spawn(move || q.take());
        thread::sleep(Duration::from_millis(200)); // the taker is waiting
        let offered = format!("Hello World{attempt}");
        SimpleDistributedQueue::new(&c, &path)
            .unwrap()
            .offer(offered.as_bytes())
            .unwrap();
        let got = call_within("the take", WAIT, move || taker.join().unwrap()).unwrap();
        assert_eq!(got, offered.as_bytes());
    }
}

/// Curator's TestSimpleDistributedQueue.testHangFromContainerLoss
/// (CURATOR-308): the server removes the empty queue node between items;
/// neither the offers nor a waiting take hang.
#[test]
fn simple_queue_survives_its_container_being_removed() {
    let c = client();
    let path = unique("simple-container");
    let offerer = {
        let q = SimpleDistributedQueue::new(&c, &path).unwrap();
        thread::spawn(move || {
            for i in 0..6u8 {
                q.offer(&[i]).unwrap();
                // Longer than the server's container check: the emptied
                // queue node is removed between offers.
                thread::sleep(Duration::from_millis(250));
            }
        })
    };
    let q = SimpleDistributedQueue::new(&c, &path).unwrap();
    let got = call_within("six takes", Duration::from_secs(20), move || {
        (0..6).map(|_| q.take().unwrap()[0]).collect::<Vec<u8>>()
    });
    assert_eq!(got, [0, 1, 2, 3, 4, 5]);
    offerer.join().unwrap();
    // The container does go (so the test did test its loss).
    wait_until(
        WAIT,
        || c.exists(&path).unwrap().is_none(),
        || "the empty queue node stayed".into(),
    );
}

#[test]
fn simple_queue_refuses_bad_paths() {
    let c = client();
    for bad in ["", "no-slash", "/", "/a//b", "/trailing/", "/zookeeper"] {
        assert!(SimpleDistributedQueue::new(&c, bad).is_err(), "{bad:?}");
    }
}

/// A foreign node in the queue is skipped, not taken or fatal.
#[test]
fn simple_queue_skips_foreign_nodes() {
    let c = client();
    let path = unique("simple-foreign");
    let q = SimpleDistributedQueue::new(&c, &path).unwrap();
    q.offer(b"mine").unwrap();
    c.create()
        .for_path(&format!("{path}/aaa-foreign"), b"x")
        .unwrap();
    assert_eq!(q.poll().unwrap().unwrap(), b"mine");
    assert_eq!(q.poll().unwrap(), None);
    assert_eq!(sorted_children(&c, &path), ["aaa-foreign"]);
}

// ---- DistributedQueue ----

/// Curator's TestDistributedQueue.testSimple.
#[test]
fn queue_items_come_out_in_order() {
    let c = client();
    let path = unique("queue-simple");
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .channel_consumer()
        .build_queue()
        .unwrap();
    q.start().unwrap();
    let rx = q.receiver().unwrap();
    thread::scope(|s| {
        s.spawn(|| {
            for i in 0..10 {
                q.put(&i.to_string()).unwrap();
            }
        });
        let got = take_n(&rx, 10);
        assert_eq!(got, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
    });
    // Curator's names and framing on the wire.
    q.close();
    let producer = QueueBuilder::new(&c, StringSerializer, &path)
        .build_queue()
        .unwrap();
    producer.start().unwrap();
    producer.put(&"x".to_string()).unwrap();
    let names = sorted_children(&c, &path);
    assert_eq!(names.len(), 1);
    assert!(
        names[0].starts_with("queue-") && names[0].len() == 16,
        "{names:?}"
    );
    let (data, _) = c.get_data(&format!("{path}/{}", names[0])).unwrap();
    assert_eq!(data, [0, 1, 0, 1, 1, 0, 0, 0, 1, b'x', 2]);
}

/// Curator's TestDistributedQueue.testPutMulti.
#[test]
fn put_multi_items_come_out_in_order() {
    let c = client();
    let q = QueueBuilder::new(&c, StringSerializer, &unique("queue-multi"))
        .channel_consumer()
        .build_queue()
        .unwrap();
    q.start().unwrap();
    let items: Vec<String> = (0..100).map(|i| i.to_string()).collect();
    q.put_multi(&items).unwrap();
    assert_eq!(take_n(&q.receiver().unwrap(), 100), items);
}

/// Curator's TestDistributedQueue.testMultiPutterSingleGetter.
#[test]
fn two_producers_one_consumer_no_duplicates() {
    let c = client();
    let q = QueueBuilder::new(&c, StringSerializer, &unique("queue-two-producers"))
        .channel_consumer()
        .build_queue()
        .unwrap();
    q.start().unwrap();
    let rx = q.receiver().unwrap();
    thread::scope(|s| {
        s.spawn(|| (0..50).for_each(|i| q.put(&i.to_string()).unwrap()));
        s.spawn(|| (50..100).for_each(|i| q.put(&i.to_string()).unwrap()));
        let got = take_n(&rx, 100);
        let distinct: HashSet<_> = got.iter().collect();
        assert_eq!(distinct.len(), 100);
    });
}

/// Curator's TestDistributedQueue.testSafetyBasic.
#[test]
fn lock_safe_items_come_out_in_order() {
    let c = client();
    let path = unique("queue-safe");
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .channel_consumer()
        .lock_path(&format!("{path}-locks"))
        .build_queue()
        .unwrap();
    q.start().unwrap();
    for i in 0..10 {
        q.put(&i.to_string()).unwrap();
    }
    let got = take_n(&q.receiver().unwrap(), 10);
    assert_eq!(got, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
}

/// Curator's TestDistributedQueue.testSafetyWithCrash: one consumer fails
/// every item after its tenth; each item failed is put back and taken by
/// the other; no item is lost or taken by both.
#[test]
fn a_failing_lock_safe_consumer_loses_nothing() {
    const ITEMS: i64 = 100;
    let clients = [client(), client(), client()];
    let path = unique("queue-crash");
    let locks = format!("{path}-locks");
    let taken = Arc::new(Mutex::new(BTreeSet::new()));
    let by_first = Arc::new(Mutex::new(BTreeSet::new()));
    let by_second = Arc::new(Mutex::new(BTreeSet::new()));
    let thrown = Arc::new(Mutex::new(None));

    let producer = QueueBuilder::new(&clients[0], IntText, &path)
        .build_queue()
        .unwrap();
    producer.start().unwrap();
    let first = {
        let (taken, mine, thrown) = (taken.clone(), by_first.clone(), thrown.clone());
        QueueBuilder::new(&clients[1], IntText, &path)
            .consumer(move |item: i64| {
                if taken.lock().unwrap().len() > 10 {
                    thrown.lock().unwrap().get_or_insert(item);
                    return Err("dummy crash".into());
                }
                taken.lock().unwrap().insert(item);
                mine.lock().unwrap().insert(item);
                Ok(())
            })
            .lock_path(&locks)
            .build_queue()
            .unwrap()
    };
    let second = {
        let (taken, mine) = (taken.clone(), by_second.clone());
        QueueBuilder::new(&clients[2], IntText, &path)
            .consumer(move |item: i64| {
                taken.lock().unwrap().insert(item);
                mine.lock().unwrap().insert(item);
                Ok(())
            })
            .lock_path(&locks)
            .build_queue()
            .unwrap()
    };
    first.start().unwrap();
    second.start().unwrap();
    for i in 0..ITEMS {
        producer.put(&i).unwrap();
    }
    wait_until(
        Duration::from_secs(20),
        || taken.lock().unwrap().len() as i64 == ITEMS,
        || format!("taken: {:?}", taken.lock().unwrap()),
    );
    first.close();
    second.close();
    assert_eq!(*taken.lock().unwrap(), (0..ITEMS).collect::<BTreeSet<_>>());
    let thrown = thrown
        .lock()
        .unwrap()
        .expect("the first consumer failed an item");
    assert!(by_second.lock().unwrap().contains(&thrown));
    let both: Vec<_> = by_first
        .lock()
        .unwrap()
        .intersection(&by_second.lock().unwrap())
        .copied()
        .collect();
    assert!(both.is_empty(), "taken by both: {both:?}");
    assert!(sorted_children(&clients[0], &path).is_empty());
    assert!(sorted_children(&clients[0], &locks).is_empty());
}

/// Curator's TestDistributedQueue.testNoDuplicateProcessing.
#[test]
fn lock_safe_consumers_never_take_an_item_twice() {
    const ITEMS: usize = 200;
    let c = client();
    let path = unique("queue-no-dupes");
    let producer = QueueBuilder::new(&c, StringSerializer, &path)
        .build_queue()
        .unwrap();
    producer.start().unwrap();
    for i in 0..ITEMS {
        producer.put(&i.to_string()).unwrap();
    }
    assert!(producer.flush_puts(WAIT));
    producer.close();

    let seen = Arc::new(Mutex::new(HashSet::new()));
    let dupes = Arc::new(Mutex::new(Vec::new()));
    let consumer_clients: Vec<Client> = (0..4).map(|_| client()).collect();
    let consumers: Vec<_> = consumer_clients
        .iter()
        .map(|cc| {
            let (seen, dupes) = (seen.clone(), dupes.clone());
            QueueBuilder::new(cc, StringSerializer, &path)
                .consumer(move |item: String| {
                    if !seen.lock().unwrap().insert(item.clone()) {
                        dupes.lock().unwrap().push(item);
                    }
                    Ok(())
                })
                .lock_path(&format!("{path}-locks"))
                .build_queue()
                .unwrap()
        })
        .collect();
    for q in &consumers {
        q.start().unwrap();
    }
    wait_until(
        Duration::from_secs(20),
        || seen.lock().unwrap().len() == ITEMS,
        || format!("seen {}", seen.lock().unwrap().len()),
    );
    drop(consumers);
    assert!(
        dupes.lock().unwrap().is_empty(),
        "{:?}",
        dupes.lock().unwrap()
    );
}

/// Curator's TestDistributedQueue.testErrorMode.
#[test]
fn error_mode_requeue_and_delete() {
    let c = client();
    let path = unique("queue-error-mode");
    let calls = Arc::new(AtomicUsize::new(0));
    let fail_first = Arc::new(AtomicUsize::new(1));
    let q = {
        let (calls, fail_first) = (calls.clone(), fail_first.clone());
        QueueBuilder::new(&c, StringSerializer, &path)
            .consumer(move |_item: String| {
                calls.fetch_add(1, Ordering::SeqCst);
                if fail_first.swap(0, Ordering::SeqCst) == 1 {
                    return Err("fails once".into());
                }
                Ok(())
            })
            .lock_path(&format!("{path}-locks"))
            .build_queue()
            .unwrap()
    };
    q.start().unwrap();
    q.put(&"1".to_string()).unwrap();
    wait_until(
        WAIT,
        || calls.load(Ordering::SeqCst) == 2,
        || "not retried".into(),
    );

    q.set_error_mode(ErrorMode::Delete).unwrap();
    calls.store(0, Ordering::SeqCst);
    fail_first.store(1, Ordering::SeqCst);
    q.put(&"1".to_string()).unwrap();
    wait_until(
        WAIT,
        || calls.load(Ordering::SeqCst) == 1,
        || "not consumed".into(),
    );
    wait_until(
        WAIT,
        || sorted_children(&c, &path).is_empty(),
        || "the failed item stayed".into(),
    );
    thread::sleep(Duration::from_millis(300));
    assert_eq!(calls.load(Ordering::SeqCst), 1, "consumed only once");

    // Without a lock path there is no error mode to set.
    let plain = QueueBuilder::new(&c, StringSerializer, &path)
        .build_queue()
        .unwrap();
    assert!(plain.set_error_mode(ErrorMode::Delete).is_err());
}

/// Curator's TestDistributedQueue.testRetryAfterFailure_Curator56: a
/// requeued item's name does not grow.
#[test]
fn a_requeued_item_keeps_its_name_length() {
    let c = client();
    let path = unique("queue-curator56");
    let names = Arc::new(Mutex::new(Vec::new()));
    let q = {
        let (names, lister, listed) = (names.clone(), c.clone(), path.clone());
        QueueBuilder::new(&c, StringSerializer, &path)
            .consumer(move |_item: String| {
                let children = lister.get_children(&listed).map_err(|e| e.to_string())?;
                let mut names = names.lock().unwrap();
                names.push(children[0].clone());
                if names.len() == 1 {
                    return Err("something went wrong".into());
                }
                Ok(())
            })
            .lock_path(&format!("{path}-locks"))
            .build_queue()
            .unwrap()
    };
    q.start().unwrap();
    q.put(&"test".to_string()).unwrap();
    wait_until(
        WAIT,
        || names.lock().unwrap().len() == 2,
        || "not retried".into(),
    );
    let names = names.lock().unwrap();
    assert_eq!(names[0].len(), names[1].len(), "{names:?}");
    assert_ne!(names[0], names[1], "put back as a new node");
}

/// Curator's TestDistributedQueue.testFlush, the part that applies: a put
/// returns once its node exists, so nothing is left to flush.
#[test]
fn flush_puts_after_foreground_puts() {
    let c = client();
    let path = unique("queue-flush");
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .build_queue()
        .unwrap();
    q.start().unwrap();
    q.put(&"1".to_string()).unwrap();
    assert_eq!(
        sorted_children(&c, &path).len(),
        1,
        "in ZooKeeper on return"
    );
    assert!(q.flush_puts(Duration::ZERO));
    assert!(q.flush_puts(Duration::MAX));
}

#[test]
fn queue_lifecycle_and_bad_arguments() {
    let c = client();
    let path = unique("queue-lifecycle");
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .build_queue()
        .unwrap();
    let e = q.put(&"early".to_string()).unwrap_err();
    assert!(e.to_string().contains("not started"), "{e}");
    q.start().unwrap();
    assert!(q.start().is_err(), "started twice");
    q.close();
    q.close();
    let e = q.put(&"late".to_string()).unwrap_err();
    assert!(e.to_string().contains("closed"), "{e}");
    assert!(QueueBuilder::new(&c, StringSerializer, "bad")
        .build_queue()
        .is_err());
    assert!(QueueBuilder::new(&c, StringSerializer, &path)
        .lock_path("/bad/")
        .build_queue()
        .is_err());
    assert!(QueueBuilder::new(&c, StringSerializer, &path)
        .lock_path(&path)
        .build_queue()
        .is_err());
    assert!(QueueBuilder::new(&c, StringSerializer, &path)
        .max_items(0)
        .build_queue()
        .is_err());
    assert!(QueueBuilder::new(&c, StringSerializer, "/a|b")
        .build_id_queue()
        .is_err());
    // A closed client: start fails, naming nothing bogus, no panic.
    let gone = client();
    gone.close();
    let q = QueueBuilder::new(&gone, StringSerializer, &path)
        .build_queue()
        .unwrap();
    assert!(q.start().is_err());
    // A start that failed (here: the lock path's parent is a node that
    // cannot have children) may be tried again.
    let ephemeral_parent = unique("queue-ephemeral-parent");
    c.create()
        .mode(CreateMode::Ephemeral)
        .for_path(&ephemeral_parent, b"")
        .unwrap();
    let q = QueueBuilder::new(&c, StringSerializer, &unique("queue-retry-start"))
        .lock_path(&format!("{ephemeral_parent}/locks"))
        .build_queue()
        .unwrap();
    let e = q.start().unwrap_err();
    assert!(!e.to_string().contains("started already"), "{e}");
    c.delete().for_path(&ephemeral_parent).unwrap();
    q.start().unwrap();
}

/// Corrupt data written by another process is logged and removed; the
/// consumer goes on with the next item. A consumer that panics fails its
/// item like an error, and the queue goes on.
#[test]
fn corrupt_items_and_panicking_consumers_do_not_stop_the_queue() {
    let c = client();
    let path = unique("queue-corrupt");
    let calls = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = crossbeam_channel::unbounded();
    let q = {
        let calls = calls.clone();
        QueueBuilder::new(&c, StringSerializer, &path)
            .consumer(move |item: String| {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("a consumer bug");
                }
                tx.send(item).unwrap();
                Ok(())
            })
            .lock_path(&format!("{path}-locks"))
            .build_queue()
            .unwrap()
    };
    q.start().unwrap();
    for bad in [
        &b""[..],
        &[0, 1, 0, 1][..],
        &[0, 1, 0, 1, 1, 0x7f, 0xff, 0xff, 0xff][..],
        &[0, 2, 0, 2, 2][..],
    ] {
        c.create()
            .mode(CreateMode::PersistentSequential)
            .for_path(&format!("{path}/queue-"), bad)
            .unwrap();
    }
    // Not UTF-8: the item serializer's error.
    c.create()
        .mode(CreateMode::PersistentSequential)
        .for_path(
            &format!("{path}/queue-"),
            &ItemSerializer::serialize(&[[0xffu8]]),
        )
        .unwrap();
    q.put(&"good".to_string()).unwrap();
    assert_eq!(
        rx.recv_timeout(WAIT).unwrap(),
        "good",
        "after one panic, requeued"
    );
    wait_until(
        WAIT,
        || sorted_children(&c, &path).is_empty(),
        || format!("left: {:?}", sorted_children(&c, &path)),
    );
}

/// Lock-safe mode: a consumer whose session ends while it holds an item
/// loses nothing; another consumer takes the item (woken by the lock
/// node's removal, with no other change in the queue).
#[test]
fn an_item_held_by_a_consumer_that_dies_goes_to_another() {
    let path = unique("queue-dies");
    let locks = format!("{path}-locks");
    let dying = client();
    let (holding_tx, holding) = crossbeam_channel::bounded(1);
    let (release_tx, release) = crossbeam_channel::bounded::<()>(1);
    let first = QueueBuilder::new(&dying, StringSerializer, &path)
        .consumer(move |item: String| {
            let _ = holding_tx.send(item);
            let _ = release.recv_timeout(Duration::from_secs(30));
            Ok(())
        })
        .lock_path(&locks)
        .build_queue()
        .unwrap();
    let release_tx = release_tx; // dropped first: a failed test releases
    first.start().unwrap();
    first.put(&"precious".to_string()).unwrap();
    assert_eq!(holding.recv_timeout(WAIT).unwrap(), "precious");

    let survivor = client();
    let second = QueueBuilder::new(&survivor, StringSerializer, &path)
        .channel_consumer()
        .lock_path(&locks)
        .build_queue()
        .unwrap();
    second.start().unwrap();
    let rx = second.receiver().unwrap();
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "locked by the first"
    );
    dying.close(); // its session ends: its lock node goes, the item stays
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), "precious");
    release_tx.send(()).unwrap();
    first.close();
    wait_until(
        WAIT,
        || sorted_children(&survivor, &path).is_empty(),
        || "the item stayed".into(),
    );
}

// ---- DistributedIdQueue ----

/// Curator's TestDistributedIdQueue.testDeletingWithLock.
#[test]
fn id_queue_cannot_remove_an_item_being_consumed() {
    let c = client();
    let path = unique("id-deleting");
    let (consuming_tx, consuming) = crossbeam_channel::bounded(1);
    let (go_tx, go) = crossbeam_channel::bounded::<()>(1);
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .consumer(move |_item: String| {
            let _ = consuming_tx.send(());
            let _ = go.recv_timeout(Duration::from_secs(30));
            Ok(())
        })
        .lock_path(&format!("{path}-locks"))
        .build_id_queue()
        .unwrap();
    let go_tx = go_tx; // dropped first: a failed test releases
    q.start().unwrap();
    q.put(&"test".to_string(), "id").unwrap();
    consuming.recv_timeout(WAIT).unwrap();
    assert_eq!(q.remove("id").unwrap(), 0);
    go_tx.send(()).unwrap();
    // And an item not being consumed is removed.
    let producer = QueueBuilder::new(&c, StringSerializer, &unique("id-remove"))
        .build_id_queue()
        .unwrap();
    producer.start().unwrap();
    producer.put(&"a".to_string(), "x/y").unwrap();
    producer.put(&"b".to_string(), "x|y").unwrap();
    producer.put(&"c".to_string(), "other").unwrap();
    assert!(producer.is_queued("x_y").unwrap());
    assert_eq!(producer.remove("x/y").unwrap(), 2, "both stored as x_y");
    assert!(!producer.is_queued("x_y").unwrap());
    assert!(producer.is_queued("other").unwrap());
    assert!(producer.put(&"d".to_string(), "").is_err());
    assert!(producer.remove("").is_err());
}

/// Curator's TestDistributedIdQueue.testOrdering.
#[test]
fn id_queue_items_come_out_in_put_order() {
    let c = client();
    let q = QueueBuilder::new(&c, StringSerializer, &unique("id-ordering"))
        .channel_consumer()
        .build_id_queue()
        .unwrap();
    q.start().unwrap();
    let mut ids = Vec::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..50 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let id = format!("0.{seed}");
        q.put(&id, &id).unwrap();
        ids.push(id);
    }
    assert_eq!(take_n(&q.receiver().unwrap(), 50), ids);
}

/// Curator's TestDistributedIdQueue.testRequeuingWithLock.
#[test]
fn id_queue_requeues_under_the_same_id() {
    let c = client();
    let path = unique("id-requeue");
    let calls = Arc::new(AtomicUsize::new(0));
    let q = {
        let calls = calls.clone();
        QueueBuilder::new(&c, StringSerializer, &path)
            .consumer(move |_item: String| {
                calls.fetch_add(1, Ordering::SeqCst);
                Err("consumer failed".into())
            })
            .lock_path(&format!("{path}-locks"))
            .build_id_queue()
            .unwrap()
    };
    q.start().unwrap();
    q.put(&"test".to_string(), "id").unwrap();
    wait_until(
        WAIT,
        || calls.load(Ordering::SeqCst) >= 2,
        || "not retried".into(),
    );
    q.close();
    assert!(q.is_queued("id").unwrap());
    let names = sorted_children(&c, &path);
    assert_eq!(names.len(), 1);
    assert!(names[0].starts_with("queue-|id|"), "{names:?}");
}

/// A delete request's op code (`request_on`).
const DELETE: i32 = 2;

/// What `remove("id")` on a lock-safe id queue holding one item of `id`
/// returned when the first request matching `request(item, lock node)`
/// reached the server and its reply was lost (the connection cut, the
/// request retried on the next); then whether the item and its lock node
/// are still there, and what to print on failure. `applied(observer,
/// item, lock)` tells when the held request has been applied.
fn id_remove_across_a_lost_reply(
    prefix: &str,
    request: impl Fn(&str, &str) -> Vec<u8>,
    applied: impl Fn(&Client, &str, &str) -> bool,
) -> (latchkey_framework::Result<usize>, bool, bool, String) {
    let proxy = latchkey_test::FaultProxy::start(server().addr()).expect("start the proxy");
    let c = patient_client(&proxy);
    let observer = client();
    let ctx = Ctx::new(server(), &c);
    let path = unique(prefix);
    let locks = format!("{path}-locks");
    // Every call bounded, so that a broken one fails instead of hanging.
    let q = QueueBuilder::new(&c.with_timeout(WAIT * 2), StringSerializer, &path)
        .lock_path(&locks)
        .build_id_queue()
        .unwrap();
    q.start().unwrap();
    q.put(&"a".to_string(), "id").unwrap();
    let names = sorted_children(&observer, &path);
    assert_eq!(names.len(), 1, "{names:?}");
    let item = format!("{path}/{}", names[0]);
    let lock = format!("{locks}/{}", names[0]);
    proxy.pause_requests_at(&request(&item, &lock));
    let removed = thread::scope(|scope| {
        let remove = scope.spawn(|| q.remove("id"));
        wait_until(
            WAIT,
            || proxy.requests_paused(),
            || format!("the request never reached the proxy\n{}", ctx.dump()),
        );
        // It reaches the server; its reply does not.
        proxy.pause_replies();
        proxy.resume_requests();
        wait_until(
            WAIT,
            || applied(&observer, &item, &lock),
            || format!("the held request was not applied\n{}", ctx.dump()),
        );
        proxy.cut();
        proxy.resume();
        remove.join().expect("remove panicked")
    });
    let item_left = observer.exists(&item).unwrap().is_some();
    let lock_left = observer.exists(&lock).unwrap().is_some();
    let dump = format!(
        "lock node: {:?} (this session {:#x})\n{}",
        observer.exists(&lock),
        c.session_id(),
        ctx.dump()
    );
    q.close();
    c.close();
    (removed, item_left, lock_left, dump)
}

/// Finding 1(a): the lock node's create applied, its reply lost: the retry
/// meets the node this call made. That node is this call's, so the item is
/// removed and the lock node with it (it was left, holding the item from
/// every other session's consumers while this session lived).
#[test]
fn id_remove_whose_lock_create_reply_is_lost_removes_the_item() {
    let (removed, item_left, lock_left, dump) = id_remove_across_a_lost_reply(
        "id-remove-lost-lock",
        |_, lock| request_path(lock),
        |observer, _, lock| observer.exists(lock).is_ok_and(|s| s.is_some()),
    );
    assert_eq!(
        removed.as_ref().ok(),
        Some(&1),
        "removed: {removed:?}\n{dump}"
    );
    assert!(!item_left, "the item is still queued\n{dump}");
    assert!(!lock_left, "the lock node was left\n{dump}");
}

/// Finding 1(b): the item's delete applied, its reply lost: the retry meets
/// `NoNode`. The lock node, made with the item there and this session's
/// throughout, proves no other lock-safe party took it: counted.
#[test]
fn id_remove_whose_delete_reply_is_lost_counts_the_item() {
    let (removed, item_left, lock_left, dump) = id_remove_across_a_lost_reply(
        "id-remove-lost-delete",
        |item, _| request_on(DELETE, item),
        |observer, item, _| observer.exists(item).is_ok_and(|s| s.is_none()),
    );
    assert_eq!(
        removed.as_ref().ok(),
        Some(&1),
        "removed: {removed:?}\n{dump}"
    );
    assert!(!item_left, "the item is still queued\n{dump}");
    assert!(!lock_left, "the lock node was left\n{dump}");
}

// ---- DistributedPriorityQueue ----

/// Curator's TestDistributedPriorityQueue.testMinItemsBeforeRefresh. The
/// items are put before the consumer starts, so that its first listing
/// holds them all (in Curator's original the consumer may list after the
/// first put only, and then the count depends on timing).
#[test]
fn priority_queue_lists_again_after_min_items() {
    let c = client();
    let path = unique("priority-min");
    let producer = QueueBuilder::new(&c, IntText, &path)
        .build_priority_queue(3)
        .unwrap();
    producer.start().unwrap();
    for i in 0..10 {
        producer.put(&i, 10 + i as i32).unwrap();
    }
    let q = QueueBuilder::new(&c, IntText, &path)
        .channel_consumer()
        .build_priority_queue(3)
        .unwrap();
    q.start().unwrap();
    let rx = q.receiver().unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), 0);
    producer.put(&1000, 1).unwrap();
    let mut before: usize = 0;
    while rx.recv_timeout(WAIT).expect("1000 never came") < 1000 {
        before += 1;
        assert!(before < 10, "1000 did not overtake");
    }
    assert!(
        before.abs_diff(3) < 3,
        "{before} items before the urgent one"
    );
}

/// Curator's TestDistributedPriorityQueue.testSortingWhileTaking.
#[test]
fn priority_queue_sorts_while_taking() {
    let c = client();
    let path = unique("priority-taking");
    let q = QueueBuilder::new(&c, IntText, &path)
        .channel_consumer()
        .build_priority_queue(0)
        .unwrap();
    q.start().unwrap();
    let rx = q.receiver().unwrap();
    for i in 0..10 {
        q.put(&i, 10).unwrap();
    }
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), 0);
    // The consumer holds item 1 (removed, waiting to be handed over).
    wait_until(
        WAIT,
        || sorted_children(&c, &path).len() == 8,
        || "item 1 not in hand".into(),
    );
    q.put(&1000, 1).unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), 1, "in the consumer already");
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), 1000);
}

/// Curator's TestDistributedPriorityQueue.testSimple.
#[test]
fn priority_queue_takes_lowest_first() {
    let c = client();
    let path = unique("priority-simple");
    let q = QueueBuilder::new(&c, IntText, &path)
        .channel_consumer()
        .build_priority_queue(0)
        .unwrap();
    q.start().unwrap();
    let rx = q.receiver().unwrap();
    q.put(&(i32::MIN as i64), i32::MIN).unwrap();
    // The consumer holds the first item until we take it.
    wait_until(
        WAIT,
        || sorted_children(&c, &path).is_empty(),
        || "not taken".into(),
    );
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..100 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let p = seed as i32;
        q.put(&(p as i64), p).unwrap();
    }
    let got = take_n(&rx, 101);
    assert!(got.windows(2).all(|w| w[0] <= w[1]), "{got:?}");
}

// ---- DistributedDelayQueue ----

/// Curator's TestDistributedDelayQueue.testLateAddition.
#[test]
fn delay_queue_late_addition_overtakes() {
    let c = client();
    let q = QueueBuilder::new(&c, IntText, &unique("delay-late"))
        .channel_consumer()
        .build_delay_queue()
        .unwrap();
    q.start().unwrap();
    let rx = q.receiver().unwrap();
    let never = SystemTime::now() + Duration::from_millis(i32::MAX as u64);
    q.put(&1, never).unwrap();
    assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
    q.put(&2, SystemTime::now()).unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), 2);
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
}

/// Curator's TestDistributedDelayQueue.testBasic.
#[test]
fn delay_queue_holds_an_item_until_due() {
    let c = client();
    let q = QueueBuilder::new(&c, IntText, &unique("delay-basic"))
        .channel_consumer()
        .build_delay_queue()
        .unwrap();
    q.start().unwrap();
    let rx = q.receiver().unwrap();
    let due = SystemTime::now() + Duration::from_millis(700);
    q.put(&1, due).unwrap();
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "not due yet"
    );
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), 1);
    assert!(SystemTime::now() >= due, "taken before it was due");
    assert!(
        q.put(&2, SystemTime::UNIX_EPOCH).is_err(),
        "Curator refuses 0"
    );
}

/// Curator's TestDistributedDelayQueue.testSimple.
#[test]
fn delay_queue_takes_in_due_order() {
    let c = client();
    let q = QueueBuilder::new(&c, IntText, &unique("delay-simple"))
        .channel_consumer()
        .build_delay_queue()
        .unwrap();
    q.start().unwrap();
    let mut seed = 0x1234_5678_9abc_def1u64;
    for _ in 0..10 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let due = SystemTime::now() + Duration::from_millis(seed % 100);
        let ms = due
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        q.put(&ms, due).unwrap();
    }
    let got = take_n(&q.receiver().unwrap(), 10);
    assert!(got.windows(2).all(|w| w[0] <= w[1]), "{got:?}");
}

/// Curator's TestDistributedDelayQueue.testSorting.
#[test]
fn delay_queue_sorts_items_put_in_random_order() {
    const ITEMS: u64 = 200;
    let c = client();
    let path = unique("delay-sorting");
    let producer = QueueBuilder::new(&c, IntText, &path)
        .build_delay_queue()
        .unwrap();
    producer.start().unwrap();
    let first_due = SystemTime::now() + Duration::from_millis(100);
    let mut order: Vec<u64> = (0..ITEMS).collect();
    let mut seed = 0xdead_beef_cafe_f00du64;
    for i in (1..order.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        order.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    for i in order {
        producer
            .put(&(i as i64), first_due + Duration::from_millis(i))
            .unwrap();
    }
    let consumer = QueueBuilder::new(&c, IntText, &path)
        .channel_consumer()
        .build_delay_queue()
        .unwrap();
    consumer.start().unwrap();
    let got = take_n(&consumer.receiver().unwrap(), ITEMS as usize);
    assert_eq!(got, (0..ITEMS as i64).collect::<Vec<_>>());
}

// ---- bounded queues ----

/// Curator's TestBoundedDistributedQueue.testSimple.
/// A timed put into a full bounded queue, with a timeout longer than the
/// recipes' request grace (1 s): `Ok(false)` at the timeout, not an error
/// from a last listing sent past the deadline; nothing is created.
#[test]
fn a_full_bounded_queue_refuses_a_long_timed_put_with_false() {
    let c = client();
    let path = unique("bounded-long");
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .max_items(1)
        .build_queue()
        .unwrap();
    q.start().unwrap();
    assert!(q.put_timeout(&"1".into(), WAIT).unwrap(), "room for one");
    let started = Instant::now();
    let put = q.put_timeout(&"2".into(), Duration::from_secs(2));
    let took = started.elapsed();
    assert!(
        matches!(put, Ok(false)),
        "put_timeout(2 s) into a full queue: {put:?} after {took:?}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(2) + WAIT,
        "{took:?}"
    );
    assert_eq!(
        c.get_children(&path).unwrap().len(),
        1,
        "only the first item"
    );
    q.close();
}

#[test]
fn bounded_queue_put_waits_for_room() {
    let c = client();
    let messages = Arc::new(Mutex::new(Vec::new()));
    let (gate_tx, gate) = crossbeam_channel::unbounded::<()>();
    let q = {
        let messages = messages.clone();
        QueueBuilder::new(&c, StringSerializer, &unique("bounded-simple"))
            .consumer(move |m: String| {
                messages.lock().unwrap().push(m);
                let _ = gate.recv_timeout(Duration::from_secs(30));
                Ok(())
            })
            .max_items(1)
            .build_queue()
            .unwrap()
    };
    let gate_tx = gate_tx; // dropped first: a failed test opens the gate
    q.start().unwrap();
    assert!(
        q.put_timeout(&"1".into(), WAIT).unwrap(),
        "goes to the consumer"
    );
    wait_until(
        WAIT,
        || messages.lock().unwrap().len() == 1,
        || "not consumed".into(),
    );
    assert!(
        q.put_timeout(&"2".into(), WAIT).unwrap(),
        "sits in the queue"
    );
    let started = Instant::now();
    assert!(
        !q.put_timeout(&"3".into(), Duration::from_millis(300))
            .unwrap(),
        "full"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    for _ in 0..100 {
        gate_tx.send(()).unwrap();
    }
    for m in ["3", "4", "5"] {
        assert!(q.put_timeout(&m.to_string(), WAIT).unwrap());
    }
    wait_until(
        WAIT,
        || messages.lock().unwrap().len() == 5,
        || format!("{:?}", messages.lock().unwrap()),
    );
    assert_eq!(*messages.lock().unwrap(), ["1", "2", "3", "4", "5"]);
}

/// Curator's TestBoundedDistributedQueue.testMulti: four lock-safe
/// producer-consumers on a queue of at most 10; a watcher never sees more
/// than 10 per producer.
#[test]
fn bounded_queue_stays_near_its_bound_with_many_producers() {
    const CLIENTS: usize = 4;
    const MAX: usize = 10;
    const ITEMS: usize = 40;
    let c = client();
    let path = unique("bounded-multi");
    c.create().for_path(&path, b"").unwrap();
    let counts = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (c, path, counts, done) = (c.clone(), path.clone(), counts.clone(), done.clone());
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
                if let Ok(n) = c.get_children(&path) {
                    counts.lock().unwrap().push(n.len());
                }
                thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let consumed = Arc::new(AtomicUsize::new(0));
    thread::scope(|s| {
        for index in 0..CLIENTS {
            let (path, consumed) = (path.clone(), consumed.clone());
            s.spawn(move || {
                let cc = client();
                let q = QueueBuilder::new(&cc, StringSerializer, &path)
                    .consumer(move |_m: String| {
                        consumed.fetch_add(1, Ordering::SeqCst);
                        thread::sleep(Duration::from_millis(2));
                        Ok(())
                    })
                    .max_items(MAX)
                    .lock_path(&format!("{path}-locks"))
                    .build_queue()
                    .unwrap();
                q.start().unwrap();
                for i in 0..ITEMS {
                    assert!(q.put_timeout(&format!("{index}-{i}"), WAIT).unwrap());
                }
            });
        }
    });
    done.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    let counts = counts.lock().unwrap();
    assert!(!counts.is_empty());
    assert!(counts.iter().all(|n| *n <= MAX * CLIENTS), "{counts:?}");
}

// ---- interop with Curator ----

fn curator() -> Option<Peer> {
    if let Err(why) = peer_available(PeerKind::Curator) {
        eprintln!("SKIPPED: Curator peer unavailable: {why}");
        return None;
    }
    Some(Peer::start(PeerKind::Curator, &server().connect_string()).expect("start Curator peer"))
}

fn ok(peer: &mut Peer, cmd: &str) -> String {
    let reply = peer
        .command(cmd, Duration::from_secs(60))
        .expect("peer answered");
    assert!(reply.starts_with("OK"), "{cmd} -> {reply}");
    reply
}

/// Waits until the peer's consumer of `kind path` took `n` items; its
/// items in order.
fn java_taken(java: &mut Peer, kind: &str, path: &str, n: usize) -> Vec<String> {
    assert_eq!(
        ok(java, &format!("queue {kind} {path} await {n} 10000")),
        "OK true"
    );
    let reply = ok(java, &format!("queue {kind} {path} taken"));
    reply["OK ".len()..].split(',').map(str::to_owned).collect()
}

/// One Java peer for every queue kind, in turn: Java produces and Rust
/// consumes, then Rust produces and Java consumes (lock-safe on the
/// plain queue), on the same paths.
#[test]
fn rust_and_curator_share_every_queue_kind() {
    let Some(mut java) = curator() else { return };
    let c = client();
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    // Simple queue.
    let path = unique("interop-simple");
    let simple = SimpleDistributedQueue::new(&c, &path).unwrap();
    ok(&mut java, &format!("queue simple {path} offer from-java"));
    assert_eq!(simple.poll_timeout(WAIT).unwrap().unwrap(), b"from-java");
    simple.offer(b"from-rust").unwrap();
    assert_eq!(
        ok(&mut java, &format!("queue simple {path} poll 5000")),
        "OK item from-rust"
    );

    // Plain queue: single and multi puts, lock-safe consumers both ways.
    let path = unique("interop-plain");
    let locks = format!("{path}-locks");
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .channel_consumer()
        .lock_path(&locks)
        .build_queue()
        .unwrap();
    q.start().unwrap();
    ok(&mut java, &format!("queue plain {path} put j1"));
    ok(&mut java, &format!("queue plain {path} putmulti j2,j3,j4"));
    assert_eq!(
        take_n(&q.receiver().unwrap(), 4),
        strings(&["j1", "j2", "j3", "j4"])
    );
    q.close();
    ok(&mut java, &format!("queue plain {path} consume {locks}"));
    let producer = QueueBuilder::new(&c, StringSerializer, &path)
        .build_queue()
        .unwrap();
    producer.start().unwrap();
    producer.put(&"r1".to_string()).unwrap();
    producer.put_multi(&strings(&["r2", "r3"])).unwrap();
    assert_eq!(java_taken(&mut java, "plain", &path, 3), ["r1", "r2", "r3"]);
    ok(&mut java, &format!("queue plain {path} close"));

    // Priority queue: lowest first, negative priorities included.
    let path = unique("interop-priority");
    ok(&mut java, &format!("queue priority {path} put p5 5"));
    ok(&mut java, &format!("queue priority {path} put pminus -3"));
    ok(
        &mut java,
        &format!("queue priority {path} putmulti p0a,p0b 0"),
    );
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .channel_consumer()
        .build_priority_queue(0)
        .unwrap();
    q.start().unwrap();
    assert_eq!(
        take_n(&q.receiver().unwrap(), 4),
        strings(&["pminus", "p0a", "p0b", "p5"])
    );
    q.close();
    let producer = QueueBuilder::new(&c, StringSerializer, &path)
        .build_priority_queue(0)
        .unwrap();
    producer.start().unwrap();
    producer.put(&"r9".to_string(), 9).unwrap();
    producer.put(&"rmin".to_string(), i32::MIN).unwrap();
    producer.put(&"r1".to_string(), 1).unwrap();
    ok(&mut java, &format!("queue priority {path} consume"));
    assert_eq!(
        java_taken(&mut java, "priority", &path, 3),
        ["rmin", "r1", "r9"]
    );
    ok(&mut java, &format!("queue priority {path} close"));

    // Delay queue: Java's due times in epoch ms, Rust's as SystemTime.
    let path = unique("interop-delay");
    let now_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    ok(
        &mut java,
        &format!("queue delay {path} put later {}", now_ms + 600),
    );
    ok(
        &mut java,
        &format!("queue delay {path} put sooner {}", now_ms + 300),
    );
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .channel_consumer()
        .build_delay_queue()
        .unwrap();
    q.start().unwrap();
    let rx = q.receiver().unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), "sooner");
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), "later");
    let after = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(after >= now_ms + 600, "taken before due");
    q.close();
    let producer = QueueBuilder::new(&c, StringSerializer, &path)
        .build_delay_queue()
        .unwrap();
    producer.start().unwrap();
    producer
        .put(
            &"rlater".to_string(),
            SystemTime::now() + Duration::from_millis(400),
        )
        .unwrap();
    producer
        .put(&"rnow".to_string(), SystemTime::now())
        .unwrap();
    ok(&mut java, &format!("queue delay {path} consume"));
    assert_eq!(java_taken(&mut java, "delay", &path, 2), ["rnow", "rlater"]);
    ok(&mut java, &format!("queue delay {path} close"));

    // Id queue: put order, removal by id across languages.
    let path = unique("interop-id");
    ok(&mut java, &format!("queue id {path} put j-a ida"));
    ok(&mut java, &format!("queue id {path} put j-drop gone"));
    ok(&mut java, &format!("queue id {path} put j-b idb"));
    let producer = QueueBuilder::new(&c, StringSerializer, &path)
        .build_id_queue()
        .unwrap();
    producer.start().unwrap();
    assert_eq!(
        producer.remove("gone").unwrap(),
        1,
        "a Java item removed by Rust"
    );
    producer.put(&"r-c".to_string(), "idc").unwrap();
    producer.put(&"r-drop".to_string(), "gone2").unwrap();
    assert_eq!(
        ok(&mut java, &format!("queue id {path} remove gone2")),
        "OK 1"
    );
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .channel_consumer()
        .build_id_queue()
        .unwrap();
    q.start().unwrap();
    assert_eq!(
        take_n(&q.receiver().unwrap(), 3),
        strings(&["j-a", "j-b", "r-c"])
    );
    q.close();
    producer.put(&"r-d".to_string(), "idd").unwrap();
    ok(&mut java, &format!("queue id {path} consume"));
    assert_eq!(java_taken(&mut java, "id", &path, 1), ["r-d"]);
    ok(&mut java, &format!("queue id {path} close"));
    java.quit(Duration::from_secs(10)).unwrap();
}

/// Byte items pass through unchanged (empty ones included).
#[test]
fn byte_items_round_trip() {
    let c = client();
    let q = QueueBuilder::new(&c, BytesSerializer, &unique("queue-bytes"))
        .channel_consumer()
        .build_queue()
        .unwrap();
    q.start().unwrap();
    let items = vec![vec![], vec![0u8, 255, 10], vec![7; 10_000]];
    q.put_multi(&items).unwrap();
    assert_eq!(take_n(&q.receiver().unwrap(), 3), items);
}

/// Lock-safe mode: an item no receiver took before the queue closed stays
/// in ZooKeeper for the next consumer (it was once removed as failed).
#[test]
fn closing_a_channel_consumer_keeps_an_item_not_taken() {
    let c = client();
    let path = unique("queue-close-keeps");
    let locks = format!("{path}-locks");
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .channel_consumer()
        .lock_path(&locks)
        .build_queue()
        .unwrap();
    q.start().unwrap();
    q.put(&"kept".to_string()).unwrap();
    // The consumer holds the item's lock, waiting for a receiver.
    wait_until(
        WAIT,
        || sorted_children(&c, &locks).len() == 1,
        || "the consumer did not lock the item".into(),
    );
    q.close();
    assert_eq!(sorted_children(&c, &path).len(), 1, "the item went");
    assert!(sorted_children(&c, &locks).is_empty(), "its lock stayed");
    let next = QueueBuilder::new(&c, StringSerializer, &path)
        .channel_consumer()
        .lock_path(&locks)
        .build_queue()
        .unwrap();
    next.start().unwrap();
    assert_eq!(next.receiver().unwrap().recv_timeout(WAIT).unwrap(), "kept");
}

/// A delay queue's item due in the far future, written by another process
/// (the largest time Curator can write), neither stops the consumer nor
/// holds back the items due now.
#[test]
fn delay_queue_survives_an_item_due_at_the_end_of_time() {
    let c = client();
    let path = unique("delay-end-of-time");
    let q = QueueBuilder::new(&c, IntText, &path)
        .channel_consumer()
        .build_delay_queue()
        .unwrap();
    q.start().unwrap();
    let rx = q.receiver().unwrap();
    c.create()
        .mode(CreateMode::PersistentSequential)
        .for_path(
            &format!("{path}/queue-|7FFFFFFFFFFFFFFF|"),
            &ItemSerializer::serialize(&[b"-1"]),
        )
        .unwrap();
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    q.put(&7, SystemTime::now()).unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), 7);
}

/// A blocked `take` ends with an error when its client closes; a consumer
/// thread stops with its client, and closing the queue then returns.
#[test]
fn a_closed_client_ends_blocked_calls() {
    let c = client();
    let q = SimpleDistributedQueue::new(&c, &unique("simple-closed")).unwrap();
    let taker = thread::spawn(move || q.take());
    let consumer = QueueBuilder::new(&c, StringSerializer, &unique("queue-closed"))
        .channel_consumer()
        .build_queue()
        .unwrap();
    consumer.start().unwrap();
    thread::sleep(Duration::from_millis(200)); // both are waiting
    c.close();
    let taken = call_within("the take", WAIT, move || taker.join().unwrap());
    assert!(taken.is_err(), "{taken:?}");
    call_within("closing the queue", WAIT, move || consumer.close());
}

/// Data too large for a node fails the put with an error, naming the
/// queue; nothing hangs or panics.
#[test]
fn an_oversized_put_fails() {
    let c = client();
    let path = unique("queue-oversized");
    let q = QueueBuilder::new(&c, BytesSerializer, &path)
        .build_queue()
        .unwrap();
    q.start().unwrap();
    let e = call_within("the put", WAIT, move || q.put(&vec![0u8; 2 << 20])).unwrap_err();
    assert!(!e.to_string().is_empty());
    let simple = SimpleDistributedQueue::new(&c, &unique("simple-oversized")).unwrap();
    assert!(simple.offer(&vec![0u8; 2 << 20]).is_err());
}

// ---- QueueSharder ----

/// A sharder of string queues whose consumer sends each item to `tx`
/// once `gate` lets it (Curator's test allocator).
fn string_sharder(
    c: &Client,
    path: &str,
    threshold: usize,
    gate: Receiver<()>,
    tx: crossbeam_channel::Sender<String>,
) -> QueueSharder<DistributedQueue<String>> {
    QueueSharder::new(
        c,
        move |client: &Client, shard: &str| {
            let (gate, tx) = (gate.clone(), tx.clone());
            QueueBuilder::new(client, StringSerializer, shard)
                .consumer(move |item: String| {
                    // Open once the gate's sender is gone.
                    let _ = gate.recv_timeout(Duration::from_secs(30));
                    let _ = tx.send(item);
                    Ok(())
                })
                .build_queue()
        },
        path,
        &format!("{path}-leader"),
        QueueSharderPolicies::default()
            .new_queue_threshold(threshold)
            .threshold_check(Duration::from_millis(1)),
    )
    .unwrap()
}

/// Curator's TestQueueSharder.testDistribution: ten times the threshold
/// of items spread over the (at most ten) shards.
#[test]
fn sharder_spreads_items_over_shards() {
    const THRESHOLD: usize = 20;
    const ITEMS: usize = 10 * THRESHOLD;
    let c = client();
    let path = unique("sharder-distribution");
    let (gate_tx, gate) = crossbeam_channel::bounded::<()>(0);
    let (tx, rx) = crossbeam_channel::unbounded();
    let sharder = string_sharder(&c, &path, THRESHOLD, gate, tx);
    let gate_tx = gate_tx; // dropped first: a failed test opens the gate
    sharder.start().unwrap();
    for i in 0..ITEMS {
        sharder.queue().unwrap().put(&i.to_string()).unwrap();
        thread::sleep(Duration::from_millis(2));
    }
    thread::sleep(Duration::from_millis(200)); // the last check
    let sizes: Vec<usize> = sharder
        .queue_paths()
        .iter()
        .map(|p| c.exists(p).unwrap().unwrap().num_children as usize)
        .collect();
    assert!(sizes.len() > 1, "{sizes:?}");
    // One item per shard is in its consumer's hands.
    assert!(sizes.iter().all(|n| *n + 1 >= THRESHOLD / 10), "{sizes:?}");
    let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
    assert!(mean >= THRESHOLD as f64 * 0.9 - 1.0, "{sizes:?}");
    drop(gate_tx);
    take_n(&rx, ITEMS);
}

/// Curator's TestQueueSharder.testSharderWatchSync.
#[test]
fn two_sharders_agree_on_the_shards() {
    let c = client();
    let path = unique("sharder-sync");
    let (gate_tx, gate) = crossbeam_channel::bounded::<()>(0);
    let (tx, rx) = crossbeam_channel::unbounded();
    let one = string_sharder(&c, &path, 2, gate.clone(), tx.clone());
    let two = string_sharder(&c, &path, 2, gate, tx);
    let gate_tx = gate_tx; // dropped first: a failed test opens the gate
    one.start().unwrap();
    two.start().unwrap();
    for i in 0..20 {
        one.queue().unwrap().put(&i.to_string()).unwrap();
    }
    wait_until(
        WAIT,
        || one.shard_qty() > 1 || two.shard_qty() > 1,
        || "no shard added".into(),
    );
    drop(gate_tx);
    take_n(&rx, 20);
    wait_until(
        WAIT,
        || one.queue_paths() == two.queue_paths(),
        || format!("{:?} vs {:?}", one.queue_paths(), two.queue_paths()),
    );
}

/// Curator's TestQueueSharder.testSimpleDistributedQueue.
#[test]
fn sharded_items_are_all_consumed_and_shards_found_again() {
    let c = client();
    let path = unique("sharder-simple");
    let (gate_tx, gate) = crossbeam_channel::bounded::<()>(0);
    let (tx, rx) = crossbeam_channel::unbounded();
    let sharder = string_sharder(&c, &path, 2, gate.clone(), tx.clone());
    let gate_tx = gate_tx; // dropped first: a failed test opens the gate
    sharder.start().unwrap();
    let items = [
        "one", "two", "three", "four", "five", "six", "seven", "eight",
    ];
    for item in &items[..4] {
        sharder.queue().unwrap().put(&item.to_string()).unwrap();
    }
    wait_until(WAIT, || sharder.shard_qty() > 1, || "no shard added".into());
    for item in &items[4..] {
        sharder.queue().unwrap().put(&item.to_string()).unwrap();
    }
    drop(gate_tx);
    let consumed: BTreeSet<String> = take_n(&rx, 8).into_iter().collect();
    assert_eq!(consumed, items.iter().map(|s| s.to_string()).collect());
    let shards = sharder.shard_qty();
    sharder.close();
    // The sharder's check may have added one more shard as it closed.
    let nodes = sorted_children(&c, &path);
    assert!(nodes.len() >= shards, "{nodes:?}");
    let again = string_sharder(&c, &path, 2, gate, tx);
    again.start().unwrap();
    let mut found = again.queue_paths();
    found.sort();
    let nodes: Vec<String> = nodes.iter().map(|n| format!("{path}/{n}")).collect();
    assert_eq!(found, nodes, "the shards are found again");
}

// ---- faults ----

/// A consumer whose session expires while it waits for items sets its
/// watch again in the new session and takes the next item; a simple
/// queue's poll waiting across the expiry does too.
#[test]
fn consumers_go_on_after_their_session_expires() {
    let (c, producer_client) = (client(), client());
    let path = unique("queue-expiry");
    let q = QueueBuilder::new(&c, StringSerializer, &path)
        .channel_consumer()
        .lock_path(&format!("{path}-locks"))
        .build_queue()
        .unwrap();
    q.start().unwrap();
    let simple_path = unique("simple-expiry");
    let simple = SimpleDistributedQueue::new(&c, &simple_path).unwrap();
    let poller = thread::spawn(move || simple.poll_timeout(Duration::from_secs(20)));
    thread::sleep(Duration::from_millis(200)); // both are waiting
    let before = c.session_id();
    c.expire_session_for_testing().unwrap();
    wait_until(
        WAIT,
        || c.session_id() != before && c.session_id() != 0,
        || format!("no new session: {:?}", c.state_history()),
    );
    let producer = QueueBuilder::new(&producer_client, StringSerializer, &path)
        .build_queue()
        .unwrap();
    producer.start().unwrap();
    producer.put(&"after".to_string()).unwrap();
    assert_eq!(q.receiver().unwrap().recv_timeout(WAIT).unwrap(), "after");
    SimpleDistributedQueue::new(&producer_client, &simple_path)
        .unwrap()
        .offer(b"after")
        .unwrap();
    let polled = call_within("the poll", WAIT * 3, move || poller.join().unwrap());
    assert_eq!(polled.unwrap().unwrap(), b"after");
}

/// Rust and Curator consumers take from one lock-safe queue at once: every
/// item is taken, none by both.
#[test]
fn rust_and_curator_consumers_share_a_lock_safe_queue() {
    const ITEMS: usize = 60;
    let Some(mut java) = curator() else { return };
    let c = client();
    let path = unique("interop-shared-consumers");
    let locks = format!("{path}-locks");
    let rust_taken = Arc::new(Mutex::new(Vec::new()));
    let q = {
        let taken = rust_taken.clone();
        QueueBuilder::new(&c, StringSerializer, &path)
            .consumer(move |item: String| {
                taken.lock().unwrap().push(item);
                thread::sleep(Duration::from_millis(2));
                Ok(())
            })
            .lock_path(&locks)
            .build_queue()
            .unwrap()
    };
    q.start().unwrap();
    ok(&mut java, &format!("queue plain {path} consume {locks}"));
    let producer = QueueBuilder::new(&client(), StringSerializer, &path)
        .build_queue()
        .unwrap();
    producer.start().unwrap();
    for i in 0..ITEMS {
        producer.put(&i.to_string()).unwrap();
    }
    wait_until(
        Duration::from_secs(20),
        || sorted_children(&c, &path).is_empty() && sorted_children(&c, &locks).is_empty(),
        || format!("left: {:?}", sorted_children(&c, &path)),
    );
    q.close();
    let reply = ok(&mut java, &format!("queue plain {path} taken"));
    let java_taken: Vec<String> = reply["OK ".len()..]
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let rust_taken = rust_taken.lock().unwrap().clone();
    let mut all: Vec<String> = rust_taken.iter().chain(&java_taken).cloned().collect();
    all.sort_by_key(|s| s.parse::<usize>().unwrap());
    assert_eq!(
        all,
        (0..ITEMS).map(|i| i.to_string()).collect::<Vec<_>>(),
        "rust {rust_taken:?} java {java_taken:?}"
    );
    eprintln!(
        "rust took {}, java took {}",
        rust_taken.len(),
        java_taken.len()
    );
    java.quit(Duration::from_secs(10)).unwrap();
}

/// A lock-safe priority item put back after its consumer failed keeps its
/// priority in its name (Curator puts it back as a plain `queue-` item).
#[test]
fn a_requeued_priority_item_keeps_its_priority() {
    let c = client();
    let path = unique("priority-requeue");
    let calls = Arc::new(AtomicUsize::new(0));
    let q = {
        let calls = calls.clone();
        QueueBuilder::new(&c, StringSerializer, &path)
            .consumer(move |_item: String| {
                calls.fetch_add(1, Ordering::SeqCst);
                Err("always fails".into())
            })
            .lock_path(&format!("{path}-locks"))
            .build_priority_queue(0)
            .unwrap()
    };
    q.start().unwrap();
    q.put(&"x".to_string(), 5).unwrap();
    wait_until(
        WAIT,
        || calls.load(Ordering::SeqCst) >= 3,
        || "not retried".into(),
    );
    q.close();
    let names = sorted_children(&c, &path);
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("queue-100000005"), "{names:?}");
    assert_eq!(names[0].len(), "queue-100000005".len() + 10, "{names:?}");
}

/// A consumer whose session expired while it held an item does not
/// remove, when it lets the item go, the lock node that another consumer
/// has since taken on the same item (Curator deletes it regardless, and a
/// third consumer may then take the item too).
#[test]
fn a_consumer_does_not_remove_another_consumers_lock() {
    let path = unique("queue-foreign-lock");
    let locks = format!("{path}-locks");
    let (first_client, second_client) = (client(), client());
    let first = QueueBuilder::new(&first_client, StringSerializer, &path)
        .channel_consumer()
        .lock_path(&locks)
        .build_queue()
        .unwrap();
    first.start().unwrap();
    first.put(&"item".to_string()).unwrap();
    // The first consumer holds the item's lock, waiting for a receiver.
    wait_until(
        WAIT,
        || sorted_children(&second_client, &locks).len() == 1,
        || "the first consumer did not lock the item".into(),
    );
    let before = first_client.session_id();
    first_client.expire_session_for_testing().unwrap();
    wait_until(
        WAIT,
        || first_client.session_id() != before && first_client.session_id() != 0,
        || format!("no new session: {:?}", first_client.state_history()),
    );
    let (holding_tx, holding) = crossbeam_channel::bounded(1);
    let (release_tx, release) = crossbeam_channel::bounded::<()>(1);
    let second = QueueBuilder::new(&second_client, StringSerializer, &path)
        .consumer(move |item: String| {
            let _ = holding_tx.send(item);
            let _ = release.recv_timeout(Duration::from_secs(30));
            Ok(())
        })
        .lock_path(&locks)
        .build_queue()
        .unwrap();
    let release_tx = release_tx; // dropped first: a failed test releases
    second.start().unwrap();
    assert_eq!(holding.recv_timeout(WAIT).unwrap(), "item");
    let lock = sorted_children(&second_client, &locks);
    assert_eq!(lock.len(), 1);
    let (_, stat) = second_client
        .get_data(&format!("{locks}/{}", lock[0]))
        .unwrap();
    assert_eq!(stat.ephemeral_owner, second_client.session_id());
    first.close(); // lets its item go
    assert_eq!(
        sorted_children(&second_client, &locks),
        lock,
        "the second consumer's lock node was removed"
    );
    release_tx.send(()).unwrap();
    wait_until(
        WAIT,
        || sorted_children(&second_client, &path).is_empty(),
        || "the item stayed".into(),
    );
}

/// A lock-safe consumer closed at any moment leaves no lock node of its
/// session behind (one left would hold its item from every other consumer
/// for as long as the client lives): a close that cuts a lock node's
/// create short removes the node if the server made it.
#[test]
fn closing_a_lock_safe_consumer_at_any_moment_leaves_no_lock_node() {
    let c = client();
    let path = unique("queue-close-anytime");
    let locks = format!("{path}-locks");
    let producer = QueueBuilder::new(&c, StringSerializer, &path)
        .build_queue()
        .unwrap();
    producer.start().unwrap();
    for round in 0..30u64 {
        for i in 0..3 {
            producer.put(&format!("{round}-{i}")).unwrap();
        }
        let q = QueueBuilder::new(&c, StringSerializer, &path)
            .consumer(|_item: String| Ok(()))
            .lock_path(&locks)
            .build_queue()
            .unwrap();
        q.start().unwrap();
        thread::sleep(Duration::from_micros(round * 150));
        q.close();
        let left = sorted_children(&c, &locks);
        assert!(left.is_empty(), "round {round}: lock nodes left: {left:?}");
    }
}

/// The benchmark's Curator queue run answers with its figures.
#[test]
fn the_curator_queue_bench_command_answers() {
    let Some(mut java) = curator() else { return };
    let reply = ok(
        &mut java,
        &format!("queue bench {} 2 50", unique("queue-bench")),
    );
    let n: Vec<u64> = reply["OK ".len()..]
        .split(' ')
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(n.len(), 4, "{reply}");
    assert_eq!(n[0], 50, "{reply}");
    assert!(n[2] <= n[3], "p50 above p99: {reply}");
    java.quit(Duration::from_secs(10)).unwrap();
}

/// Finding 3: a size check whose read waits for a ZooKeeper that does not
/// answer (its listing of the shards held at the proxy, the client retrying
/// for ever) when the sharder closes: the close cancels the check and
/// returns within seconds (it used to wait for the check, as long as the
/// retry policy allows).
#[test]
fn sharder_close_during_a_size_check_returns_within_seconds() {
    let proxy = latchkey_test::FaultProxy::start(server().addr()).expect("start the proxy");
    let c = patient_client(&proxy);
    let ctx = Ctx::new(server(), &c);
    let path = unique("sharder-close-check");
    let (gate_tx, gate) = crossbeam_channel::bounded::<()>(0);
    let (tx, _rx) = crossbeam_channel::unbounded();
    let sharder = string_sharder(&c, &path, 100, gate, tx);
    let gate_tx = gate_tx; // dropped first: a failed test opens the gate
    sharder.start().unwrap();
    // The next check's listing of the shards reaches the proxy and stays.
    proxy.pause_requests_at(&request_path(&path));
    wait_until(
        WAIT,
        || proxy.requests_paused(),
        || format!("no size check reached the proxy\n{}", ctx.dump()),
    );
    call_within(
        "closing the sharder during a size check",
        Duration::from_secs(5),
        move || sharder.close(),
    );
    proxy.resume();
    drop(gate_tx);
    c.close();
}

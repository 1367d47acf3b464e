//! Ports of Apache Curator's `TestSimpleDistributedQueue` and
//! `TestBoundedDistributedQueue`, method by method, with Curator's own
//! sizes and timeouts: its 3 s poll, its 10 s puts (`timing.milliseconds()`)
//! and the 5 s put that must run out (`timing.multiple(.5)`), its 1000
//! items, its 1 s between offers while the server removes the emptied
//! queue node. queues.rs holds quicker versions of the same methods (cut
//! sizes and timeouts) beside the other queue tests.
//!
//! Curator's clients use `RetryOneTime(1)`, with its default 60 s session
//! for the simple queue and `timing.session()` (15 s) and
//! `timing.connection()` (10 s) for the bounded one; so do these. Curator's
//! sleeps that only let another thread get somewhere ("sleepABit", the
//! 1 s before an offer that a taker is waiting for) are bounded waits for
//! that state here; the offerer's 1 s between offers in
//! testHangFromContainerLoss is what that test tests (time for the server
//! to remove the empty queue node) and stays a pause. Every wait Curator
//! makes without a bound (`take()`, `put()`, a semaphore) has one here, so
//! a broken queue fails the test with a message instead of hanging it.
//!
//! ## TestSimpleDistributedQueue
//!
//! | Curator method | Rust test |
//! |---|---|
//! | testHangFromContainerLoss | `simple_hang_from_container_loss` |
//! | testPollWithTimeout | `simple_poll_with_timeout` |
//! | testOffer1 | `simple_offer1` |
//! | testOffer2 | `simple_offer2` |
//! | testTake1 | `simple_take1` |
//! | testRemova1 | `simple_remove1` (Curator's `NoSuchElementException` is an error naming the queue and saying it is empty) |
//! | testRemove2 | `simple_remove2` |
//! | testRemove3 | `simple_remove3` |
//! | testElement1 | `simple_element1` |
//! | testElement2 | `simple_element2` |
//! | testElement3 | `simple_element3` |
//! | testElement4 | `simple_element4` |
//! | testTakeWait1 | `simple_take_wait1` |
//! | testTakeWait2 | `simple_take_wait2` |
//!
//! ## TestBoundedDistributedQueue
//!
//! | Curator method | Rust test |
//! |---|---|
//! | testMulti | `bounded_multi` (Curator's unbounded `put`; the test fails once no put has returned for 10 s) |
//! | testSimple | `bounded_simple` (Curator's `QueuePutListener` latch is not applicable: a put here returns once its node exists, as with Curator's `putInBackground(false)`, so the latch's "both puts done" is the two puts returning) |

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::{Client, RetryOneTime};
use latchkey_recipes::{QueueBuilder, SimpleDistributedQueue, StringSerializer};
use latchkey_test::{ServerConfig, TestingServer};

/// This binary's server: it removes empty containers every 100 ms, as
/// Curator's testHangFromContainerLoss sets up
/// (`znode.container.checkIntervalMs`).
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

/// Curator's `newClient(connectString, session, connection, new RetryOneTime(1))`.
fn curator_client(session: Duration, connection: Duration) -> Client {
    start_connected(
        Client::builder()
            .connect_string(server().connect_string())
            .session_timeout(session)
            .connection_timeout(connection)
            .retry_policy(RetryOneTime::new(Duration::from_millis(1))),
    )
}

/// Curator's `newClient(connectString, new RetryOneTime(1))`: its default
/// 60 s session and 15 s connection timeout.
fn simple_client() -> Client {
    curator_client(Duration::from_secs(60), Duration::from_secs(15))
}

/// Curator's `Timing`: `timing.milliseconds()`.
const TIMING: Duration = Duration::from_secs(10);
/// `timing.multiple(.5)`.
const HALF_TIMING: Duration = Duration::from_secs(5);
/// `timing.sleepABit()` (a quarter of the 10 s base, in whole seconds).
const A_BIT: Duration = Duration::from_secs(2);
/// A bound for what Curator waits for without one.
const WAIT: Duration = Duration::from_secs(10);

/// `clients` clients, each with a queue handle on `dir`.
fn handles(dir: &str, clients: usize) -> Vec<(Client, SimpleDistributedQueue)> {
    (0..clients)
        .map(|_| {
            let c = simple_client();
            let q = SimpleDistributedQueue::new(&c, dir).unwrap();
            (c, q)
        })
        .collect()
}

// ---- TestSimpleDistributedQueue ----

/// testHangFromContainerLoss (CURATOR-308): one thread offers 10 items 1 s
/// apart (`Timing().multiple(.1)`), another takes them as they come
/// (`multiple(.5)` of 1 s is 0 s in Curator's integer timing), while the
/// server removes the emptied queue node between offers; both are done
/// within Curator's 20 s (`ITEM_COUNT * 2 * 1 s`).
#[test]
fn simple_hang_from_container_loss() {
    const ITEM_COUNT: u8 = 10;
    let c = simple_client();
    let path = unique("queue");
    // The queue node's creation zxids seen before the offers: a new one
    // is a queue node the server removed and a taker or offer made again.
    let queue_nodes = Arc::new(Mutex::new(Vec::<i64>::new()));
    let offerer = {
        let q = SimpleDistributedQueue::new(&c, &path).unwrap();
        let (c, path, queue_nodes) = (c.clone(), path.clone(), queue_nodes.clone());
        thread::spawn(move || -> latchkey_framework::Result<()> {
            for i in 0..ITEM_COUNT {
                if let Some(stat) = c.exists(&path)? {
                    let mut seen = queue_nodes.lock().unwrap();
                    if seen.last() != Some(&stat.czxid) {
                        seen.push(stat.czxid);
                    }
                }
                q.offer(&[i])?;
                // Curator's pause between offers, the point of the test:
                // the taker waits on an empty queue node the server removes.
                thread::sleep(Duration::from_secs(1));
            }
            Ok(())
        })
    };
    let taker = {
        let q = SimpleDistributedQueue::new(&c, &path).unwrap();
        thread::spawn(move || -> latchkey_framework::Result<Vec<u8>> {
            (0..ITEM_COUNT)
                .map(|_| q.take().map(|item| item[0]))
                .collect()
        })
    };
    let both = call_within(
        "10 offers and 10 takes",
        Duration::from_secs(2 * u64::from(ITEM_COUNT)),
        move || (offerer.join().unwrap(), taker.join().unwrap()),
    );
    both.0.expect("the offers");
    assert_eq!(
        both.1.expect("the takes"),
        (0..ITEM_COUNT).collect::<Vec<_>>()
    );
    // The test did test the container's loss: the server removed the
    // emptied queue node between offers (and it was made again).
    let seen = queue_nodes.lock().unwrap();
    assert!(
        seen.len() >= 2,
        "the queue node was never removed between offers: {seen:?}"
    );
}

/// testPollWithTimeout: a 3 s poll of an empty queue answers none.
#[test]
fn simple_poll_with_timeout() {
    let clients = handles(&unique("testOffer1"), 1);
    let started = Instant::now();
    let polled = clients[0].1.poll_timeout(Duration::from_secs(3));
    let took = started.elapsed();
    assert!(
        matches!(polled, Ok(None)),
        "poll(3 s) of an empty queue: {polled:?} after {took:?}"
    );
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(3) + WAIT,
        "poll(3 s) returned after {took:?}"
    );
}

/// testOffer1: offered and removed on one client.
#[test]
fn simple_offer1() {
    let clients = handles(&unique("testOffer1"), 1);
    clients[0].1.offer(b"Hello World").unwrap();
    assert_eq!(clients[0].1.remove().unwrap(), b"Hello World");
}

/// testOffer2: offered on one client, removed on another.
#[test]
fn simple_offer2() {
    let clients = handles(&unique("testOffer2"), 2);
    clients[0].1.offer(b"Hello World").unwrap();
    assert_eq!(clients[1].1.remove().unwrap(), b"Hello World");
}

/// testTake1: take returns the item there.
#[test]
fn simple_take1() {
    let clients = handles(&unique("testTake1"), 1);
    clients[0].1.offer(b"Hello World").unwrap();
    let q = SimpleDistributedQueue::new(&clients[0].0, clients[0].1.path()).unwrap();
    let taken = call_within("take", WAIT, move || q.take()).unwrap();
    assert_eq!(taken, b"Hello World");
}

/// testRemova1 (sic): remove on an empty queue fails.
#[test]
fn simple_remove1() {
    let dir = unique("testRemove1");
    let clients = handles(&dir, 1);
    match clients[0].1.remove() {
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains(&dir) && text.contains("empty"),
                "the error names the queue and says it is empty: {text}"
            );
        }
        Ok(item) => panic!("remove on an empty queue gave {item:?}"),
    }
}

/// Curator's createNremoveMtest: `n` offers on one client, `m` removes on
/// another; the last removed is the `m`th offered.
fn create_n_remove_m(dir: &str, n: usize, m: usize) {
    let clients = handles(&unique(dir), 2);
    for i in 0..n {
        clients[0]
            .1
            .offer(format!("Hello World{i}").as_bytes())
            .unwrap();
    }
    let mut data = Vec::new();
    for _ in 0..m {
        data = clients[1].1.remove().unwrap();
    }
    assert_eq!(
        String::from_utf8(data).unwrap(),
        format!("Hello World{}", m - 1)
    );
}

/// testRemove2.
#[test]
fn simple_remove2() {
    create_n_remove_m("testRemove2", 10, 2);
}

/// testRemove3.
#[test]
fn simple_remove3() {
    create_n_remove_m("testRemove3", 1000, 1000);
}

/// Curator's createNremoveMelementTest: `n` offers on one client, `m`
/// removes on another; then `element` is the item after them.
fn create_n_remove_m_element(dir: &str, n: usize, m: usize) {
    let clients = handles(&unique(dir), 2);
    for i in 0..n {
        clients[0]
            .1
            .offer(format!("Hello World{i}").as_bytes())
            .unwrap();
    }
    for _ in 0..m {
        clients[1].1.remove().unwrap();
    }
    assert_eq!(
        String::from_utf8(clients[1].1.element().unwrap()).unwrap(),
        format!("Hello World{m}")
    );
}

/// testElement1.
#[test]
fn simple_element1() {
    create_n_remove_m_element("testElement1", 1, 0);
}

/// testElement2.
#[test]
fn simple_element2() {
    create_n_remove_m_element("testElement2", 10, 2);
}

/// testElement3.
#[test]
fn simple_element3() {
    create_n_remove_m_element("testElement3", 1000, 500);
}

/// testElement4.
#[test]
fn simple_element4() {
    create_n_remove_m_element("testElement4", 1000, 1000 - 1);
}

/// One round of testTakeWait1 and testTakeWait2: a take started on an
/// empty queue gets the item offered (on the same client) while it waits.
/// Curator's 1 s before the offer is a bounded wait for the taker to be
/// waiting (its watch on the queue's children, the client's only watch).
fn take_waits_for(c: &Client, dir: &str, item: String) {
    let taker = {
        let q = SimpleDistributedQueue::new(c, dir).unwrap();
        thread::spawn(move || q.take())
    };
    wait_until(
        WAIT,
        || c.pending_watches() > 0 || taker.is_finished(),
        || "the take never waited".into(),
    );
    assert!(!taker.is_finished(), "the take ended on an empty queue");
    let offerer = {
        let q = SimpleDistributedQueue::new(c, dir).unwrap();
        let item = item.clone();
        thread::spawn(move || q.offer(item.as_bytes()))
    };
    call_within("the offer", WAIT, move || offerer.join().unwrap()).unwrap();
    let taken =
        call_within("the take", WAIT, move || taker.join().unwrap()).expect("the take's result");
    assert_eq!(String::from_utf8(taken).unwrap(), item);
}

/// testTakeWait1.
#[test]
fn simple_take_wait1() {
    let c = simple_client();
    take_waits_for(&c, &unique("testTakeWait1"), "Hello World".into());
}

/// testTakeWait2: two rounds on one queue.
#[test]
fn simple_take_wait2() {
    let c = simple_client();
    let dir = unique("testTakeWait2");
    for i in 0..2 {
        take_waits_for(&c, &dir, format!("Hello World{i}"));
    }
}

// ---- TestBoundedDistributedQueue ----

/// `timing.session()` and `timing.connection()`.
fn bounded_client() -> Client {
    curator_client(Duration::from_secs(15), TIMING)
}

/// testMulti: four clients each put 1000 items into one lock-safe queue of
/// at most 10 items whose consumers (one per client) take 10 ms per item;
/// a watcher of the queue's children never counts more than 10 per client.
#[test]
fn bounded_multi() {
    const CLIENT_QTY: usize = 4;
    const MAX_ITEMS: usize = 10;
    const ADD_ITEMS: usize = MAX_ITEMS * 100;
    let client = bounded_client();
    let path = unique("queue");
    let locks = unique("locks");
    client.create().for_path(&path, b"").unwrap();

    let is_done = Arc::new(AtomicBool::new(false));
    let (wake_tx, wake) = crossbeam_channel::unbounded::<()>();
    let (waiting_tx, is_waiting) = crossbeam_channel::bounded::<()>(1);
    let watcher = {
        let (client, path, is_done, wake_tx) = (
            client.clone(),
            path.clone(),
            is_done.clone(),
            wake_tx.clone(),
        );
        thread::spawn(move || -> Vec<usize> {
            let mut counts = Vec::new();
            // Bounded: the producers' own bound, with room to spare.
            let deadline = Instant::now() + Duration::from_secs(600);
            while !is_done.load(Ordering::SeqCst) && Instant::now() < deadline {
                let wake_tx = wake_tx.clone();
                let size = client
                    .get_children_watch(&path, move |_| {
                        let _ = wake_tx.send(());
                    })
                    .expect("the watcher's listing")
                    .len();
                counts.push(size);
                let _ = waiting_tx.try_send(());
                // Until the watch fires or the test is done.
                let _ = wake.recv_deadline(deadline);
            }
            counts
        })
    };
    is_waiting
        .recv_timeout(WAIT)
        .expect("the watcher's first listing");

    /// Ends the watcher when the producers are done, also when one failed.
    struct Done(Arc<AtomicBool>, crossbeam_channel::Sender<()>);
    impl Drop for Done {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
            let _ = self.1.send(());
        }
    }
    let done = Done(is_done, wake_tx);
    let started = Instant::now();
    let puts_done = Arc::new(AtomicUsize::new(0));
    let producers: Vec<_> = (0..CLIENT_QTY)
        .map(|index| {
            let (path, locks, puts_done) = (path.clone(), locks.clone(), puts_done.clone());
            thread::spawn(move || -> latchkey_framework::Result<()> {
                let client = bounded_client();
                let queue = QueueBuilder::new(&client, StringSerializer, &path)
                    .consumer(|_message: String| {
                        thread::sleep(Duration::from_millis(10));
                        Ok(())
                    })
                    .max_items(MAX_ITEMS)
                    .lock_path(&locks)
                    .build_queue()?;
                queue.start()?;
                for i in 0..ADD_ITEMS {
                    // Curator's put, which waits for room without a bound;
                    // the test's bound is on the progress of all puts.
                    queue.put(&format!("{index}-{i}"))?;
                    puts_done.fetch_add(1, Ordering::SeqCst);
                }
                queue.close();
                Ok(())
            })
        })
        .collect();
    // Bounded: fails once no put has returned for `WAIT`.
    let (mut last, mut last_change) = (0, Instant::now());
    while !producers.iter().all(|p| p.is_finished()) {
        let now = puts_done.load(Ordering::SeqCst);
        if now != last {
            (last, last_change) = (now, Instant::now());
        } else if last_change.elapsed() > WAIT {
            panic!(
                "no put returned for {WAIT:?}: {now} of {} done, the queue holds {}",
                CLIENT_QTY * ADD_ITEMS,
                client.get_children(&path).map_or(0, |c| c.len())
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
    for (index, producer) in producers.into_iter().enumerate() {
        producer
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("client {index}: {e}"));
    }
    let took = started.elapsed();
    drop(done);
    let counts = call_within("the watcher", WAIT, move || watcher.join().unwrap());
    assert!(!counts.is_empty());
    let most = counts.iter().copied().max().unwrap_or(0);
    assert!(
        counts.iter().all(|&count| count <= MAX_ITEMS * CLIENT_QTY),
        "a count above {}: most {most} of {} counts",
        MAX_ITEMS * CLIENT_QTY,
        counts.len()
    );
    eprintln!(
        "bounded_multi: {} items in {took:?}; {} counts, most {most}",
        CLIENT_QTY * ADD_ITEMS,
        counts.len()
    );
}

/// testSimple: a queue of at most one item whose consumer blocks in the
/// first: a second put waits for the first to be taken, a third put runs
/// out after 5 s; once the consumer goes on, three more puts go in and all
/// five come out in order.
#[test]
fn bounded_simple() {
    let client = bounded_client();
    let path = unique("queue");
    let messages = Arc::new(Mutex::new(Vec::<String>::new()));
    // Curator's `Semaphore(0)`: the consumer takes a permit per item.
    let (permits, semaphore) = crossbeam_channel::unbounded::<()>();
    let queue = {
        let messages = messages.clone();
        QueueBuilder::new(&client, StringSerializer, &path)
            .consumer(move |message: String| {
                messages.lock().unwrap().push(message);
                // Bounded (Curator's `acquire()` is not); a failed test
                // drops the sender, which ends the wait at once.
                let _ = semaphore.recv_timeout(Duration::from_secs(60));
                Ok(())
            })
            .max_items(1)
            .build_queue()
            .unwrap()
    };
    let permits = permits; // dropped before the queue: a failed test frees the consumer
    queue.start().unwrap();

    assert!(
        queue.put_timeout(&"1".into(), TIMING).unwrap(),
        "should end up in the consumer"
    );
    assert!(
        queue.put_timeout(&"2".into(), TIMING).unwrap(),
        "should sit in the queue"
    );
    // Curator's sleepABit (2 s): until the consumer holds "1" and "2" is
    // the one item in the queue.
    wait_until(
        A_BIT + WAIT,
        || {
            *messages.lock().unwrap() == ["1"]
                && client.get_children(&path).map(|c| c.len()).unwrap_or(0) == 1
        },
        || {
            format!(
                "consumed {:?}, queue {:?}",
                messages.lock().unwrap(),
                sorted_children(&client, &path)
            )
        },
    );
    let started = Instant::now();
    let put = queue.put_timeout(&"3".into(), HALF_TIMING);
    let took = started.elapsed();
    assert!(
        matches!(put, Ok(false)),
        "a put into the full queue: {put:?} after {took:?}"
    );
    assert!(
        took >= HALF_TIMING && took < HALF_TIMING + WAIT,
        "the put ran out after {took:?}"
    );
    assert_eq!(client.get_children(&path).unwrap().len(), 1, "nothing put");

    for _ in 0..100 {
        permits.send(()).unwrap();
    }
    for m in ["3", "4", "5"] {
        let put = queue.put_timeout(&m.to_string(), TIMING);
        assert!(matches!(put, Ok(true)), "put {m}: {put:?}");
    }
    // Curator's up to six sleepABits (12 s) for the rest to come out.
    wait_until(
        6 * A_BIT,
        || messages.lock().unwrap().len() >= 5,
        || format!("consumed {:?}", messages.lock().unwrap()),
    );
    assert_eq!(*messages.lock().unwrap(), ["1", "2", "3", "4", "5"]);
    queue.close();
}

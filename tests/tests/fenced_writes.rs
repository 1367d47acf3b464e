//! Fenced writes against a real ZooKeeper: `Client::set_data_fenced` and
//! the `fenced` views of `SharedCount` and `SharedValue`, fenced by a
//! `MutexGuard`, a `Leadership` and a `LeaderLatch`. A fenced write lands
//! while its hold stands and never after it ended (`FenceGone`, nothing
//! changed); a fenced compare-and-set applied but whose reply was lost is
//! never reported refused; a latch's fencing token grows with every
//! leader. Curator has no fenced writes, so there is no test class to
//! port. Each wait has a deadline; a broken fence fails within seconds.

mod common;

use std::thread;
use std::time::Duration;

use common::*;
use crossbeam_channel::bounded;
use latchkey_framework::{Client, Error, ErrorCode, RetryNTimes};
use latchkey_recipes::{
    DistributedAtomicLong, DistributedAtomicValue, Fence, InterProcessMutex, LeaderLatch,
    LeaderSelector, QueueBuilder, SharedCount, SharedValue, SimpleDistributedQueue,
    StringSerializer,
};
use latchkey_test::FaultProxy;

const WAIT: Duration = Duration::from_secs(10);

fn count_at(c: &Client, path: &str) -> i32 {
    let data = c.get_data(path).unwrap().0;
    i32::from_be_bytes(data.try_into().expect("4 bytes"))
}

fn is_fence_gone(r: &Result<impl std::fmt::Debug, Error>) -> bool {
    matches!(r, Err(Error::FenceGone { .. }))
}

/// The hold's node deleted by another session (an operator, or the
/// server after an expiry): the hold is over, and someone else may take
/// the lock.
fn delete_hold(other: &Client, fence: &dyn Fence) {
    other
        .delete()
        .for_path(&fence.fence_path().unwrap())
        .unwrap();
}

#[test]
fn a_fenced_set_lands_while_the_guard_holds_and_never_after() {
    let c = connect(&shared_server().connect_string(), WAIT);
    let other = connect(&shared_server().connect_string(), WAIT);
    let base = unique("/fenced/guard");
    let count = SharedCount::new(&c, &format!("{base}/count"), 1).unwrap();
    let mutex = InterProcessMutex::new(&c, &format!("{base}/lock")).unwrap();
    let guard = mutex.lock().unwrap();

    count.fenced(&guard).set_count(2).unwrap();
    assert_eq!(count_at(&other, count.path()), 2);
    let seen = count.versioned_value();
    assert_eq!(seen.value, 2);
    assert!(count.fenced(&guard).try_set_count(&seen, 3).unwrap());
    assert_eq!(count_at(&other, count.path()), 3);

    delete_hold(&other, &guard);
    let set = count.fenced(&guard).set_count(4);
    assert!(is_fence_gone(&set), "a set after the hold ended: {set:?}");
    let message = set.unwrap_err().to_string();
    assert!(
        message.contains(count.path()) && message.contains(&guard.node_path()),
        "the error names the write and the fence: {message}"
    );
    let seen = count.versioned_value();
    let cas = count.fenced(&guard).try_set_count(&seen, 5);
    assert!(is_fence_gone(&cas), "a CAS after the hold ended: {cas:?}");
    assert_eq!(count_at(&other, count.path()), 3, "nothing was written");
    // Unfenced writes are untouched by the fence.
    count.set_count(6).unwrap();
    assert_eq!(count_at(&other, count.path()), 6);
    drop(guard);
    count.close();
}

#[test]
fn a_fenced_compare_and_set_beaten_by_another_write_is_refused() {
    let c = connect(&shared_server().connect_string(), WAIT);
    let other = connect(&shared_server().connect_string(), WAIT);
    let base = unique("/fenced/beaten");
    let value = SharedValue::new(&c, &format!("{base}/value"), b"a").unwrap();
    value.start().unwrap();
    let mutex = InterProcessMutex::new(&c, &format!("{base}/lock")).unwrap();
    let guard = mutex.lock().unwrap();
    let seen = value.versioned_value();
    other.set_data(value.path(), b"b", None).unwrap();
    assert!(!value.fenced(&guard).try_set_value(&seen, b"c").unwrap());
    assert_eq!(other.get_data(value.path()).unwrap().0, b"b");
    value.fenced(&guard).set_value(b"d").unwrap();
    assert_eq!(other.get_data(value.path()).unwrap().0, b"d");
    drop(guard);
    value.close();
}

/// `DistributedAtomicLong` and `DistributedAtomicValue` through a fence:
/// every change lands while the guard holds (a missing node included);
/// once the hold has ended each is `FenceGone`, not a refused attempt
/// retried until the policy gives up, and nothing changes.
#[test]
fn fenced_atomic_changes_land_while_the_guard_holds_and_never_after() {
    let c = connect(&shared_server().connect_string(), WAIT);
    let other = connect(&shared_server().connect_string(), WAIT);
    let base = unique("/fenced/atomic");
    let retry = || RetryNTimes::new(3, Duration::from_millis(10));
    let long = DistributedAtomicLong::new(&c, &format!("{base}/long"), retry()).unwrap();
    let value = DistributedAtomicValue::new(&c, &format!("{base}/value"), retry()).unwrap();
    let mutex = InterProcessMutex::new(&c, &format!("{base}/lock")).unwrap();
    let guard = mutex.lock().unwrap();

    let fenced = long.fenced(&guard);
    assert!(fenced.increment().unwrap().succeeded, "on a missing node");
    assert!(fenced.add(4).unwrap().succeeded);
    assert!(fenced.compare_and_set(5, 7).unwrap().succeeded);
    assert!(!fenced.compare_and_set(5, 8).unwrap().succeeded);
    assert!(fenced.try_set(9).unwrap().succeeded);
    assert!(fenced.decrement().unwrap().succeeded);
    assert_eq!(long.get().unwrap().post_value, 8);
    value.fenced(&guard).force_set(b"a").unwrap();
    assert!(
        value
            .fenced(&guard)
            .compare_and_set(b"a", b"b")
            .unwrap()
            .succeeded
    );
    assert!(value.fenced(&guard).try_set(b"c").unwrap().succeeded);
    long.fenced(&guard).force_set(10).unwrap();

    delete_hold(&other, &guard);
    let fenced = long.fenced(&guard);
    let attempts = [
        ("increment", fenced.increment()),
        ("compare_and_set", fenced.compare_and_set(10, 11)),
        ("try_set", fenced.try_set(12)),
        ("subtract", fenced.subtract(1)),
    ];
    for (what, got) in attempts {
        assert!(is_fence_gone(&got), "{what} after the hold ended: {got:?}");
    }
    let forced = fenced.force_set(13);
    assert!(
        is_fence_gone(&forced),
        "force_set after the hold ended: {forced:?}"
    );
    let forced = value.fenced(&guard).force_set(b"d");
    assert!(
        is_fence_gone(&forced),
        "force_set after the hold ended: {forced:?}"
    );
    let missing = DistributedAtomicLong::new(&c, &format!("{base}/missing"), retry()).unwrap();
    let forced = missing.fenced(&guard).force_set(1);
    assert!(
        is_fence_gone(&forced),
        "force_set of a missing node: {forced:?}"
    );
    assert_eq!(long.get().unwrap().post_value, 10, "nothing was written");
    assert_eq!(value.get().unwrap().post_value, b"c");
    assert_eq!(missing.get().unwrap().post_value, 0);
}

/// Queue puts through a fence: each kind of put adds its item while the
/// guard holds (a simple queue's missing node included); after the hold
/// ended each is `FenceGone` and the queues hold what they held.
#[test]
fn fenced_puts_add_items_while_the_guard_holds_and_never_after() {
    let c = connect(&shared_server().connect_string(), WAIT);
    let other = connect(&shared_server().connect_string(), WAIT);
    let base = unique("/fenced/queues");
    let queue = QueueBuilder::new(&c, StringSerializer, &format!("{base}/queue"))
        .build_queue()
        .unwrap();
    queue.start().unwrap();
    let ids = QueueBuilder::new(&c, StringSerializer, &format!("{base}/ids"))
        .build_id_queue()
        .unwrap();
    ids.start().unwrap();
    let prio = QueueBuilder::new(&c, StringSerializer, &format!("{base}/prio"))
        .build_priority_queue(0)
        .unwrap();
    prio.start().unwrap();
    let simple = SimpleDistributedQueue::new(&c, &format!("{base}/simple")).unwrap();
    let mutex = InterProcessMutex::new(&c, &format!("{base}/lock")).unwrap();
    let guard = mutex.lock().unwrap();
    let item = |s: &str| s.to_string();

    queue.fenced(&guard).put(&item("a")).unwrap();
    queue
        .fenced(&guard)
        .put_multi(&[item("b"), item("c")])
        .unwrap();
    assert!(queue
        .fenced(&guard)
        .put_timeout(&item("d"), Duration::from_secs(1))
        .unwrap());
    ids.fenced(&guard).put(&item("e"), "job-1").unwrap();
    prio.fenced(&guard).put(&item("f"), -1).unwrap();
    let offered = simple.fenced(&guard).offer(b"g").unwrap();
    assert!(
        offered.starts_with(&format!("{base}/simple/qn-")),
        "{offered}"
    );
    let counts = || {
        ["queue", "ids", "prio", "simple"]
            .map(|q| other.get_children(&format!("{base}/{q}")).unwrap().len())
    };
    assert_eq!(counts(), [3, 1, 1, 1]);

    delete_hold(&other, &guard);
    let puts = [
        ("put", queue.fenced(&guard).put(&item("x"))),
        ("put_multi", queue.fenced(&guard).put_multi(&[item("y")])),
        ("id put", ids.fenced(&guard).put(&item("x"), "job-2")),
        ("priority put", prio.fenced(&guard).put(&item("x"), 1)),
    ];
    for (what, got) in puts {
        assert!(is_fence_gone(&got), "{what} after the hold ended: {got:?}");
    }
    let offered = simple.fenced(&guard).offer(b"x");
    assert!(
        is_fence_gone(&offered),
        "offer after the hold ended: {offered:?}"
    );
    assert_eq!(counts(), [3, 1, 1, 1], "nothing was added");
    queue.close();
    ids.close();
    prio.close();
}

/// A discovery update fenced by a guard, for a dynamic and a static
/// instance: written while the guard holds; after the hold ended it is
/// `FenceGone`, and neither the node nor the registration changes. Both
/// kinds, and the persistent node under the dynamic one, on one path each.
#[test]
fn a_fenced_discovery_update_lands_while_the_guard_holds_and_never_after() {
    use latchkey_discovery::{ServiceDiscovery, ServiceInstance, ServiceType};
    let c = connect(&shared_server().connect_string(), WAIT);
    let other = connect(&shared_server().connect_string(), WAIT);
    let base = unique("/fenced/discovery");
    let d = ServiceDiscovery::<String>::builder(&c)
        .base_path(&format!("{base}/services"))
        .build()
        .unwrap();
    d.start().unwrap();
    let mutex = InterProcessMutex::new(&c, &format!("{base}/lock")).unwrap();
    let guard = mutex.lock().unwrap();
    for kind in [ServiceType::Dynamic, ServiceType::Static] {
        let mut me = ServiceInstance::builder("worker")
            .payload("v1".to_string())
            .service_type(kind)
            .build();
        d.register_service(&me).unwrap();
        let node = d.registered_path(&me.id).unwrap();
        me.payload = Some("v2".into());
        d.update_service_fenced(&me, &guard).unwrap();
        let written = String::from_utf8(other.get_data(&node).unwrap().0).unwrap();
        assert!(written.contains("v2"), "{kind:?}: {written}");
        assert_eq!(
            d.registered_service(&me.id).unwrap().payload.as_deref(),
            Some("v2")
        );
    }
    delete_hold(&other, &guard);
    for registered in d.registered_services() {
        let mut me = registered.clone();
        me.payload = Some("v3".into());
        let got = d.update_service_fenced(&me, &guard);
        assert!(
            matches!(
                &got,
                Err(latchkey_discovery::Error::ZooKeeper(
                    Error::FenceGone { .. }
                ))
            ),
            "{:?} after the hold ended: {got:?}",
            me.service_type
        );
        let node = d.registered_path(&me.id).unwrap();
        let written = String::from_utf8(other.get_data(&node).unwrap().0).unwrap();
        assert!(
            written.contains("v2") && !written.contains("v3"),
            "{written}"
        );
        assert_eq!(registered, d.registered_service(&me.id).unwrap());
    }
    d.close();
}

/// A leader's write fenced by its `Leadership` lands during its term; the
/// same write after the term's node went is refused.
#[test]
fn a_leaders_fenced_write_is_refused_once_its_term_is_over() {
    let c = connect(&shared_server().connect_string(), WAIT);
    let other = connect(&shared_server().connect_string(), WAIT);
    let base = unique("/fenced/selector");
    let count = SharedCount::new(&c, &format!("{base}/epoch"), 0).unwrap();
    let (tx, rx) = bounded(1);
    let selector = {
        let (count, other) = (count.clone(), other.clone());
        LeaderSelector::new(&c, &format!("{base}/leader"), "a", move |leadership| {
            let first = count.fenced(leadership).set_count(1);
            other.delete().for_path(leadership.node_path()).unwrap();
            let after = count.fenced(leadership).set_count(2);
            let _ = tx.send((first, after));
        })
        .unwrap()
    };
    selector.start().unwrap();
    let (first, after) = rx.recv_timeout(WAIT).expect("never led");
    assert!(first.is_ok(), "a write during the term: {first:?}");
    assert!(is_fence_gone(&after), "a write after the term: {after:?}");
    assert_eq!(count_at(&other, count.path()), 1);
    selector.close();
    count.close();
}

/// A latch leads with a token and fences with its node; once it no longer
/// leads (closed) it refuses to fence at all, and the next leader's token
/// is larger.
#[test]
fn a_latch_fences_while_it_leads_and_its_successor_has_a_larger_token() {
    let c = connect(&shared_server().connect_string(), WAIT);
    let c2 = connect(&shared_server().connect_string(), WAIT);
    let base = unique("/fenced/latch");
    let count = SharedCount::new(&c, &format!("{base}/epoch"), 0).unwrap();
    let first = LeaderLatch::new(&c, &format!("{base}/leader")).unwrap();
    assert_eq!(first.fencing_token(), None, "not started");
    assert!(matches!(first.fence_path(), Err(Error::IllegalState(_))));
    first.start().unwrap();
    assert!(first.await_leadership(WAIT).unwrap(), "the first never led");
    let token = first.fencing_token().expect("a leader's token");
    count.fenced(&first).set_count(1).unwrap();

    let second = LeaderLatch::new(&c2, &format!("{base}/leader")).unwrap();
    second.start().unwrap();
    wait_until(
        WAIT,
        || second.participants().is_ok_and(|p| p.len() == 2),
        || "the second latch never queued".into(),
    );
    assert_eq!(second.fencing_token(), None, "a latch that does not lead");
    let refused = count.fenced(&second).set_count(9);
    assert!(
        matches!(refused, Err(Error::IllegalState(_))),
        "a write fenced by a latch that does not lead: {refused:?}"
    );
    first.close().unwrap();
    assert!(
        second.await_leadership(WAIT).unwrap(),
        "the second never led"
    );
    let next = second.fencing_token().expect("the next leader's token");
    assert!(next > token, "tokens grow: {token} then {next}");
    count.fenced(&second).set_count(2).unwrap();
    assert!(matches!(
        count.fenced(&first).set_count(3),
        Err(Error::IllegalState(_))
    ));
    assert_eq!(count_at(&c2, count.path()), 2);
    second.close().unwrap();
    count.close();
}

/// `multi` with a check first: the op code, then the check's header
/// (type 13, not done, no error), so only a fenced write matches.
fn fenced_multi() -> Vec<u8> {
    let mut bytes = 14i32.to_be_bytes().to_vec();
    bytes.extend(13i32.to_be_bytes());
    bytes.push(0);
    bytes.extend((-1i32).to_be_bytes());
    bytes
}

/// A fenced compare-and-set of the count from 1 to 2 that the server
/// applied, whose reply the cut connection lost; `after_applied` runs
/// (with the other session and the fence node) before the cut. Returns
/// what the call said and the count the server holds.
fn fenced_cas_whose_reply_is_lost(
    after_applied: impl FnOnce(&Client, &str),
) -> (latchkey_framework::Result<bool>, i32, Ctx) {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = patient_client(&proxy);
    let other = connect(&server.connect_string(), WAIT);
    let ctx = Ctx::new(server, &c);
    let base = unique("/fenced/lost-reply");
    let count = SharedCount::new(&c.with_timeout(WAIT * 2), &format!("{base}/count"), 1).unwrap();
    // The guard on a client of its own: the cut must not end the hold.
    let mutex = InterProcessMutex::new(&other, &format!("{base}/lock")).unwrap();
    let guard = mutex.lock().unwrap();
    let fence = NodeFence(guard.fence_path().unwrap());
    let seen = count.versioned_value();
    proxy.pause_requests_at(&fenced_multi());
    let result = thread::scope(|scope| {
        let cas = scope.spawn(|| count.fenced(&fence).try_set_count(&seen, 2));
        wait_until(
            WAIT,
            || proxy.requests_paused(),
            || "the fenced write never reached the proxy".into(),
        );
        proxy.pause_replies();
        proxy.resume_requests();
        wait_until(
            WAIT,
            || count_at(&other, count.path()) == 2,
            || "the held write was not applied".into(),
        );
        after_applied(&other, &fence.0);
        proxy.cut();
        proxy.resume();
        cas.join().expect("try_set_count panicked")
    });
    let now = count_at(&other, count.path());
    drop(guard);
    count.close();
    (result, now, ctx)
}

/// Applied, reply lost, the hold still standing: the retry meets its own
/// write (`BadVersion`); it must not be reported refused, as a "retry on
/// false" loop would then write twice. `true`, or an error that it may or
/// may not have run.
#[test]
fn an_applied_fenced_compare_and_set_whose_reply_is_lost_is_not_reported_refused() {
    let (result, now, ctx) = fenced_cas_whose_reply_is_lost(|_, _| {});
    assert_eq!(now, 2, "{}", ctx.dump());
    assert!(
        matches!(result, Ok(true))
            || result
                .as_ref()
                .is_err_and(|e| e.is(ErrorCode::ConnectionLoss)),
        "applied, reply lost: {result:?} (want true, or that it may or may not have run)\n{}",
        ctx.dump()
    );
}

/// Applied, reply lost, and the hold ended before the retry: the retry
/// finds the fence gone, but the write did land, so the answer is that it
/// may or may not have run, never `FenceGone` ("nothing was changed").
#[test]
fn an_applied_fenced_write_whose_hold_ended_before_the_retry_is_in_doubt() {
    let (result, now, ctx) = fenced_cas_whose_reply_is_lost(|other, fence| {
        other.delete().for_path(fence).unwrap();
    });
    assert_eq!(now, 2, "{}", ctx.dump());
    assert!(
        result
            .as_ref()
            .is_err_and(|e| e.is(ErrorCode::ConnectionLoss)),
        "applied, reply lost, fence gone on the retry: {result:?} (want that it may or may \
         not have run)\n{}",
        ctx.dump()
    );
}

/// A fence given as a node's full path: what a process holding a lock
/// node elsewhere passes on.
struct NodeFence(String);

impl Fence for NodeFence {
    fn fence_path(&self) -> latchkey_framework::Result<String> {
        Ok(self.0.clone())
    }
}

/// `set_data_fenced` itself: a missing fence is `FenceGone`, a missing
/// node `NoNode` on the node, a bad fence path an invalid path, and a
/// fence outside a namespaced client's namespace is refused by the
/// recipes before anything is sent.
#[test]
fn set_data_fenced_names_each_failure() {
    let c = connect(&shared_server().connect_string(), WAIT);
    let base = unique("/fenced/plain");
    c.create()
        .creating_parents_if_needed()
        .for_path(&format!("{base}/fence"), b"")
        .unwrap();
    c.create().for_path(&format!("{base}/node"), b"").unwrap();
    let fence = format!("{base}/fence");
    let node = format!("{base}/node");
    let stat = c.set_data_fenced(&fence, &node, b"1", None).unwrap();
    assert_eq!(stat.version, 1);
    let cas = c.set_data_fenced(&fence, &node, b"2", Some(0));
    assert!(
        cas.as_ref().is_err_and(|e| e.is(ErrorCode::BadVersion)),
        "{cas:?}"
    );
    assert!(c.set_data_fenced(&fence, &node, b"2", Some(1)).is_ok());
    let missing = c.set_data_fenced(&fence, &format!("{base}/missing"), b"", None);
    assert!(
        missing.as_ref().is_err_and(|e| e.is(ErrorCode::NoNode)) && !is_fence_gone(&missing),
        "{missing:?}"
    );
    let bad = c.set_data_fenced("no-slash", &node, b"", None);
    assert!(matches!(bad, Err(Error::InvalidPath { .. })), "{bad:?}");
    c.delete().for_path(&fence).unwrap();
    let gone = c.set_data_fenced(&fence, &node, b"3", None);
    assert!(is_fence_gone(&gone), "{gone:?}");
    assert!(gone.unwrap_err().is(ErrorCode::NoNode));
    assert_eq!(c.get_data(&node).unwrap().0, b"2");

    // A namespaced count fenced by a node outside its namespace.
    let ns = start_connected(
        Client::builder()
            .connect_string(shared_server().connect_string())
            .session_timeout(WAIT)
            .namespace(base[1..].to_owned()),
    );
    let count = SharedCount::new(&ns, "/count", 0).unwrap();
    c.create().for_path(&fence, b"").unwrap();
    let inside = format!("{base}/count");
    count
        .fenced(&NodeFence(inside.clone()))
        .set_count(1)
        .unwrap();
    let outside = unique("/fenced/elsewhere");
    c.create().for_path(&outside, b"").unwrap();
    let refused = count.fenced(&NodeFence(outside)).set_count(2);
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
    assert_eq!(count_at(&c, &inside), 1);
    count.close();
}

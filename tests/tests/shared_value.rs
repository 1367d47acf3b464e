//! `SharedValue` and `DistributedAtomicValue` (bytes) against a real
//! ZooKeeper: Curator's semantics, any bytes, versioned compare-and-set
//! across sessions, listeners of values and connection states, contended
//! compare-and-set without a lost update, and a Java (Curator) process
//! sharing each of them.
//!
//! Curator has no `TestSharedValue` (its `SharedValue` is tested through
//! `TestSharedCount`, whose methods are ported for [`SharedCount`], a thin
//! layer on the same machinery, in `recipes.rs` and `recipe_edges.rs`).
//! The tests below cover `SharedValue` itself.
//!
//! Curator's `TestDistributedAtomicLong`, for `DistributedAtomicValue`
//! (the long's own ports are in `atomic.rs`):
//!
//! | Curator method | here |
//! |---|---|
//! | `testCorruptedValue` | not applicable: every byte string is a value (`corrupted_data_and_bad_paths_are_errors` in `atomic.rs` ports it for numbers) |
//! | `testCompareAndSetWithFreshInstance` | `atomic_value_compare_and_set_with_a_fresh_instance` |
//! | `testCompareAndSet` | `atomic_value_compare_and_set` (the forced `BadVersion` between read and write is what `contended_compare_and_set_loses_no_update` hits many times) |
//! | `testForceSet` | `atomic_value_force_set_races_try_set` |
//! | `testSimulation` | `contended_compare_and_set_loses_no_update` |
//! | `testBasic` | not applicable: increments of a number (`atomic.rs`) |

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::{Client, ConnectionState, Error, RetryNTimes};
use latchkey_recipes::{
    DistributedAtomicValue, PromotedToLock, SharedCount, SharedValue, SharedValueEvent,
    VersionedValue,
};
use latchkey_test::peers::{peer_available, Peer, PeerKind};
use latchkey_test::FaultProxy;

const SESSION: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_secs(10);

fn retries(n: u32) -> RetryNTimes {
    RetryNTimes::new(n, Duration::from_millis(1))
}

fn started(c: &Client, path: &str, seed: &[u8]) -> SharedValue {
    let v = SharedValue::new(c, path, seed).unwrap();
    v.start().unwrap();
    v
}

/// The next value change on `events`, skipping state changes.
fn next_value(events: &latchkey_recipes::Receiver<SharedValueEvent>) -> VersionedValue<Vec<u8>> {
    let deadline = Instant::now() + WAIT;
    loop {
        match events.recv_deadline(deadline) {
            Ok(SharedValueEvent::Changed(v)) => return v,
            Ok(_) => {} // a state change
            Err(e) => panic!("no value change within {WAIT:?}: {e}"),
        }
    }
}

/// Waits for `want` on `events`, skipping other values and states.
fn expect_value(events: &latchkey_recipes::Receiver<SharedValueEvent>, want: &[u8]) {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        match events.recv_deadline(deadline) {
            Ok(SharedValueEvent::Changed(v)) if v.value == want => return,
            Ok(other) => seen.push(other),
            Err(e) => panic!("no value {want:?} within {WAIT:?} ({e}); seen {seen:?}"),
        }
    }
}

/// Seeds, sets and versioned compare-and-set between two sessions, as
/// `TestSharedCount.testSimpleVersioned` and `testMultiClientVersioned`
/// do for counts.
#[test]
fn seed_set_and_versioned_compare_and_set_across_sessions() {
    let cs = clients(2, SESSION);
    let path = unique("shared-value");
    let a = SharedValue::new(&cs[0], &path, b"seed").unwrap();
    assert_eq!(a.value(), b"seed", "the seed before start");
    assert_eq!(a.versioned_value().version, -1);
    assert!(
        matches!(a.set_value(b"x"), Err(Error::IllegalState(m)) if m.contains("not started")),
        "a set before start is refused"
    );
    a.start().unwrap();
    assert!(matches!(a.start(), Err(Error::IllegalState(_))), "twice");
    assert_eq!(cs[1].get_data(&path).unwrap().0, b"seed");
    // The second one's seed is not written: the node exists.
    let b = started(&cs[1], &path, b"other seed");
    assert_eq!(b.value(), b"seed");

    let seen = a.versioned_value();
    assert_eq!((seen.version, seen.value.as_slice()), (0, &b"seed"[..]));
    assert!(a.try_set_value(&seen, b"first").unwrap());
    assert_eq!(a.value(), b"first");
    // b's copy is older: its compare-and-set is refused, and its cache
    // is current afterwards.
    let mut stale = seen.clone();
    stale.value = b"seed".to_vec();
    assert!(!b.try_set_value(&stale, b"lost").unwrap());
    assert_eq!(b.value(), b"first", "refreshed by the refused set");
    let fresh = b.versioned_value();
    assert_eq!(fresh.version, 1);
    assert!(b.try_set_value(&fresh, b"second").unwrap());
    // The same bytes written again by a later change are a different value.
    a.set_value(b"second").unwrap();
    assert!(!b.try_set_value(&fresh, b"third").unwrap());
    let mut any = b.versioned_value();
    any.version = -1;
    assert!(matches!(
        b.try_set_value(&any, b"x"),
        Err(Error::InvalidArgument(m)) if m.contains(&path)
    ));
    wait_until(WAIT, || b.value() == b"second", || format!("{b:?}"));

    a.close();
    a.close();
    assert!(matches!(a.set_value(b"x"), Err(Error::IllegalState(m)) if m.contains("closed")));
    assert!(matches!(a.start(), Err(Error::IllegalState(_))));
    assert_eq!(a.value(), b"second", "the last value stays after close");
    assert!(SharedValue::new(&cs[0], "/", b"").is_err());
    assert!(SharedValue::new(&cs[0], "no-slash", b"").is_err());
}

/// Listeners hear every value in order with its version, and the
/// client's connection states; the channels disconnect on close.
#[test]
fn listeners_hear_values_and_connection_states() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = connect(&proxy.connect_string(), SESSION);
    let other = connect(&server.connect_string(), SESSION);
    let ctx = Ctx::new(server, &c);
    let path = unique("shared-value-listen");
    let v = SharedValue::new(&c, &path, b"0").unwrap();
    let events = v.listen();
    v.start().unwrap();
    for i in 1..=5u8 {
        other.set_data(&path, &[i], None).unwrap();
        let got = next_value(&events);
        assert_eq!(got.value, [i], "{}", ctx.dump());
        assert_eq!(got.version, i32::from(i));
    }
    v.set_value(b"mine").unwrap();
    assert_eq!(next_value(&events).value, b"mine");

    // A cut connection: Suspended, then Reconnected; no value change is
    // told for the re-read of an unchanged node.
    proxy.cut();
    let deadline = Instant::now() + WAIT;
    let mut states = Vec::new();
    while !states.contains(&ConnectionState::Reconnected) {
        match events.recv_deadline(deadline) {
            Ok(SharedValueEvent::StateChanged(s)) => states.push(s),
            Ok(other) => panic!("{other:?} with the value unchanged"),
            Err(_) => panic!("no Reconnected: {states:?}\n{}", ctx.dump()),
        }
    }
    assert_eq!(states[0], ConnectionState::Suspended, "{states:?}");
    other.set_data(&path, b"after", None).unwrap();
    assert_eq!(next_value(&events).value, b"after");
    v.close();
    assert!(
        events.recv_timeout(WAIT).is_err(),
        "the channel disconnects on close"
    );
    assert!(v.listen().recv_timeout(WAIT).is_err(), "closed already");
}

/// Any bytes are a value: none, binary, large. A deleted node keeps the
/// last value, and a re-created one is followed.
#[test]
fn any_bytes_are_a_value_and_a_recreated_node_is_followed() {
    let cs = clients(2, SESSION);
    let path = unique("shared-value-bytes");
    let v = started(&cs[0], &path, b"");
    assert_eq!(v.value(), b"");
    let large: Vec<u8> = (0..500_000u32).map(|i| (i % 251) as u8).collect();
    for value in [&[0xff, 0, 0x80][..], &large, b""] {
        v.set_value(value).unwrap();
        assert_eq!(v.value(), value);
        assert_eq!(cs[1].get_data(&path).unwrap().0, value);
    }
    let too_large = vec![7u8; 2 << 20];
    let err = v.set_value(&too_large).unwrap_err();
    assert!(err.to_string().contains(&path), "{err}");
    assert_eq!(v.value(), b"", "nothing changed");

    cs[1].delete().for_path(&path).unwrap();
    assert!(v.set_value(b"x").is_err(), "no node to set");
    cs[1].create().for_path(&path, b"back").unwrap();
    wait_until(WAIT, || v.value() == b"back", || format!("{v:?}"));
    let seen = v.versioned_value();
    assert_eq!(seen.version, 0, "the re-created node's version");
    assert!(v.try_set_value(&seen, b"again").unwrap());
}

/// Every compare-and-set a listener or a holder of a stale value makes is
/// refused or applied exactly once: sessions append one byte each by
/// compare-and-set, and the value's length is the number that succeeded.
#[test]
fn contended_compare_and_set_loses_no_update() {
    let cs = clients(4, SESSION);
    let path = unique("atomic-value-contended");
    let succeeded = AtomicU64::new(0);
    let ends = Instant::now() + Duration::from_secs(30);
    thread::scope(|s| {
        for (i, c) in cs.iter().enumerate() {
            let (path, succeeded) = (&path, &succeeded);
            s.spawn(move || {
                let a = DistributedAtomicValue::new(c, path, retries(0)).unwrap();
                a.initialize(b"").unwrap();
                for _ in 0..40 {
                    assert!(Instant::now() < ends, "not done within 30 s");
                    let now = a.get().unwrap().post_value;
                    let mut next = now.clone();
                    next.push(i as u8);
                    let v = a.compare_and_set(&now, &next).unwrap();
                    if v.succeeded {
                        assert_eq!((v.pre_value, v.post_value), (now, next));
                        succeeded.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    let n = succeeded.load(Ordering::SeqCst);
    let value = cs[0].get_data(&path).unwrap().0;
    assert_eq!(value.len() as u64, n, "one byte per successful set");
    assert!(n >= 40, "at least one session's first tries succeed: {n}");
}

/// Curator's TestDistributedAtomicLong.testCompareAndSetWithFreshInstance,
/// for bytes: a missing node matches nothing; `initialize` creates it once.
#[test]
fn atomic_value_compare_and_set_with_a_fresh_instance() {
    let c = connect(&shared_server().connect_string(), SESSION);
    let path = unique("atomic-value-fresh");
    let a = DistributedAtomicValue::new(&c, &path, retries(1)).unwrap();
    let v = a.get().unwrap();
    assert!(v.succeeded && v.post_value.is_empty(), "{v:?}");
    assert!(c.exists(&path).unwrap().is_none(), "get creates nothing");
    assert!(!a.compare_and_set(b"", b"1").unwrap().succeeded);
    assert!(c.exists(&path).unwrap().is_none());
    assert!(a.initialize(b"0").unwrap());
    let v = a.compare_and_set(b"0", b"1").unwrap();
    assert!(v.succeeded);
    assert_eq!((v.pre_value, v.post_value), (b"0".to_vec(), b"1".to_vec()));
    assert!(!a.initialize(b"0").unwrap());
    assert_eq!(a.get().unwrap().post_value, b"1");
}

/// Curator's TestDistributedAtomicLong.testCompareAndSet, for bytes.
#[test]
fn atomic_value_compare_and_set() {
    let c = connect(&shared_server().connect_string(), SESSION);
    let path = unique("atomic-value-cas");
    let a = DistributedAtomicValue::new(&c, &path, retries(1)).unwrap();
    a.force_set(b"1").unwrap();
    assert!(a.compare_and_set(b"1", b"5").unwrap().succeeded);
    let miss = a.compare_and_set(b"1", b"5").unwrap();
    assert!(!miss.succeeded);
    assert_eq!(miss.pre_value, b"5", "the value found");
    // Another session changes it to the same bytes: compared as bytes, a
    // set made by someone else in between does not matter.
    let b = DistributedAtomicValue::new(&c, &path, retries(1)).unwrap();
    b.force_set(b"5").unwrap();
    assert!(a.compare_and_set(b"5", b"10").unwrap().succeeded);
    assert_eq!(c.get_data(&path).unwrap().0, b"10");

    // try_set creates a missing node and sets any value; with a lock to
    // promote to, its stats say how it went.
    let fresh = unique("atomic-value-tryset");
    let t = DistributedAtomicValue::new(&c, &fresh, retries(0))
        .unwrap()
        .promoted_to_lock(PromotedToLock::new(&format!("{fresh}-lock")))
        .unwrap();
    let v = t.try_set(b"made").unwrap();
    assert!(v.succeeded);
    assert_eq!(
        (v.pre_value.as_slice(), v.post_value.as_slice()),
        (&b""[..], &b"made"[..])
    );
    assert_eq!((v.stats.optimistic_tries, v.stats.promoted_tries), (1, 0));
    assert_eq!(c.get_data(&fresh).unwrap().0, b"made");
    for bad in ["", "/", "x"] {
        assert!(
            DistributedAtomicValue::new(&c, bad, retries(0)).is_err(),
            "{bad:?}"
        );
    }
}

/// Curator's TestDistributedAtomicLong.testForceSet, for bytes: forced
/// sets racing compare-and-set retries never fail, and the last forced
/// value is what stays.
#[test]
fn atomic_value_force_set_races_try_set() {
    let cs = clients(2, SESSION);
    let path = unique("atomic-value-force");
    let setter = DistributedAtomicValue::new(&cs[0], &path, retries(3)).unwrap();
    let forcer = DistributedAtomicValue::new(&cs[1], &path, retries(0)).unwrap();
    thread::scope(|s| {
        s.spawn(|| {
            for i in 0..100u32 {
                setter.try_set(&i.to_be_bytes()).unwrap();
            }
        });
        s.spawn(|| {
            for _ in 0..100 {
                forcer.force_set(b"").unwrap();
            }
        });
    });
    forcer.force_set(b"last").unwrap();
    assert_eq!(setter.get().unwrap().post_value, b"last");
}

fn curator() -> Option<Peer> {
    if let Err(why) = peer_available(PeerKind::Curator) {
        eprintln!("SKIPPED: Curator peer unavailable: {why}");
        return None;
    }
    Some(
        Peer::start(PeerKind::Curator, &shared_server().connect_string())
            .expect("start Curator peer"),
    )
}

fn ok(peer: &mut Peer, cmd: &str) -> String {
    let reply = peer
        .command(cmd, Duration::from_secs(60))
        .expect("peer answered");
    assert!(reply.starts_with("OK"), "{cmd} -> {reply}");
    reply
}

fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".into();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A Java (Curator 5.4) `SharedValue` and a Rust one on the same path
/// see each other's seeds, sets and compare-and-sets; and Curator's
/// `DistributedAtomicValue` and ours share one node.
#[test]
fn rust_and_curator_share_values() {
    let Some(mut java) = curator() else { return };
    let c = connect(&shared_server().connect_string(), SESSION);
    let path = unique("interop-value");
    let binary = [0u8, 0xff, 0x10, b'\n'];
    // Curator creates the node with its seed; Rust reads Curator's bytes.
    assert_eq!(
        ok(
            &mut java,
            &format!("value {path} {} get", hex(b"java seed"))
        ),
        format!("OK {}", hex(b"java seed"))
    );
    let v = SharedValue::new(&c, &path, b"rust seed").unwrap();
    let events = v.listen();
    v.start().unwrap();
    assert_eq!(v.value(), b"java seed");

    ok(&mut java, &format!("value {path} - set {}", hex(&binary)));
    expect_value(&events, &binary);
    v.set_value(b"from rust").unwrap();
    wait_until(
        WAIT,
        || ok(&mut java, &format!("value {path} - get")) == format!("OK {}", hex(b"from rust")),
        String::new,
    );
    // Java's compare-and-set on its current copy; Rust's stale one is refused.
    let stale = v.versioned_value();
    let java_version = ok(&mut java, &format!("value {path} - versioned"));
    assert_eq!(
        java_version,
        format!("OK {} {}", stale.version, hex(b"from rust"))
    );
    assert_eq!(
        ok(
            &mut java,
            &format!("value {path} - tryset {}", hex(b"java cas"))
        ),
        "OK true"
    );
    expect_value(&events, b"java cas");
    assert!(!v.try_set_value(&stale, b"lost").unwrap());
    assert!(v.try_set_value(&v.versioned_value(), b"").unwrap());
    wait_until(
        WAIT,
        || ok(&mut java, &format!("value {path} - get")) == "OK -",
        String::new,
    );
    ok(&mut java, &format!("value {path} - close"));
    v.close();

    let apath = unique("interop-atomic-value");
    let a = DistributedAtomicValue::new(&c, &apath, retries(10)).unwrap();
    assert_eq!(ok(&mut java, &format!("value atomic {apath} get")), "OK -");
    assert_eq!(
        ok(&mut java, &format!("value atomic {apath} cas - 01")),
        "OK false - -"
    );
    assert!(a.initialize(b"r").unwrap());
    assert_eq!(
        ok(&mut java, &format!("value atomic {apath} init 00")),
        "OK false"
    );
    assert_eq!(
        ok(
            &mut java,
            &format!("value atomic {apath} cas {} {}", hex(b"r"), hex(&binary))
        ),
        format!("OK true {} {}", hex(b"r"), hex(&binary))
    );
    assert_eq!(a.get().unwrap().post_value, binary);
    assert!(a.compare_and_set(&binary, b"rust").unwrap().succeeded);
    assert_eq!(
        ok(
            &mut java,
            &format!("value atomic {apath} tryset {}", hex(b"java"))
        ),
        format!("OK true {} {}", hex(b"rust"), hex(b"java"))
    );
    assert_eq!(a.try_set(b"x").unwrap().pre_value, b"java");
    ok(&mut java, &format!("value atomic {apath} force -"));
    assert_eq!(a.get().unwrap().post_value, b"");
    ok(&mut java, "quit");
    c.close();
}

/// ZooKeeper's `setData` op code, to hold that request at the proxy.
const SET_DATA: i32 = 5;

/// What a `try_set_count` (from 1 to 2) whose connection is cut mid-request
/// returned, and the count the server holds after it: `hold` sets the
/// proxy up before the call, `meanwhile` runs while the call waits, then
/// the connection is cut and the proxy let go.
fn count_cas_across_a_cut(
    hold: impl FnOnce(&FaultProxy, &str),
    meanwhile: impl FnOnce(&FaultProxy, &Client, &str),
) -> (Result<bool, Error>, i32, Ctx) {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = patient_client(&proxy);
    let other = connect(&server.connect_string(), SESSION);
    let ctx = Ctx::new(server, &c);
    let path = unique("shared-count-cut");
    // Every call bounded, so that a broken one fails instead of hanging.
    let count = SharedCount::new(&c.with_timeout(WAIT * 2), &path, 1).unwrap();

    let seen = count.versioned_value();
    assert_eq!(seen.value, 1);
    hold(&proxy, &path);
    let result = thread::scope(|scope| {
        let cas = scope.spawn(|| count.try_set_count(&seen, 2));
        meanwhile(&proxy, &other, &path);
        proxy.cut();
        proxy.resume();
        cas.join().expect("try_set_count panicked")
    });
    let data = other.get_data(&path).unwrap().0;
    let now = i32::from_be_bytes(data.try_into().expect("4 bytes"));
    count.close();
    c.close();
    other.close();
    (result, now, ctx)
}

/// Issue 38, item 1: a compare-and-set that the server applied, whose
/// reply the cut connection lost, must not be reported refused (a "retry
/// on false" loop would then increment twice). Its outcome cannot be told
/// from the server's state (another session's write of the same value at
/// the same version would leave the same), so it is an error that says it
/// may or may not have run, or `true`; never `false`.
#[test]
fn an_applied_compare_and_set_whose_reply_is_lost_is_not_reported_refused() {
    let (result, now, ctx) = count_cas_across_a_cut(
        |proxy, path| proxy.pause_requests_at(&request_on(SET_DATA, path)),
        |proxy, other, path| {
            // The setData reaches the server; its reply does not.
            wait_until(
                WAIT,
                || proxy.requests_paused(),
                || "the compare-and-set never reached the proxy".to_owned(),
            );
            proxy.pause_replies();
            proxy.resume_requests();
            wait_until(
                WAIT,
                || {
                    other
                        .get_data(path)
                        .is_ok_and(|(d, _)| d == 2i32.to_be_bytes())
                },
                || "the held write was not applied".to_owned(),
            );
        },
    );
    assert_eq!(now, 2, "{}", ctx.dump());
    let in_doubt = |e: &Error| e.is(latchkey_framework::ErrorCode::ConnectionLoss);
    assert!(
        matches!(result, Ok(true)) || result.as_ref().is_err_and(in_doubt),
        "try_set_count applied, reply lost: {result:?} (want true, or an error that it may or \
         may not have run)\n{}",
        ctx.dump()
    );
}

/// The other side: a compare-and-set held at the proxy, never reaching the
/// server, while another session sets the count; then cut. The node holds
/// another value one version on, so the call was certainly refused:
/// `false`, as before.
#[test]
fn a_compare_and_set_another_write_beat_is_still_refused_after_a_cut() {
    let (result, now, ctx) = count_cas_across_a_cut(
        |proxy, path| proxy.pause_requests_at(&request_on(SET_DATA, path)),
        |proxy, other, path| {
            wait_until(
                WAIT,
                || proxy.requests_paused(),
                || "the compare-and-set never reached the proxy".to_owned(),
            );
            other.set_data(path, &7i32.to_be_bytes(), Some(0)).unwrap();
        },
    );
    assert_eq!(now, 7, "{}", ctx.dump());
    assert!(
        matches!(result, Ok(false)),
        "try_set_count beaten by another write: {result:?}\n{}",
        ctx.dump()
    );
}

/// Curator's `SharedValue.close()` removes its watch (through
/// `newWatcherRemoveCuratorFramework`); each value opened and closed here
/// must not leave a watch behind either, or a process that opens values
/// on a quiet path piles them up until the node changes.
#[test]
fn closed_values_and_counts_leave_no_watch_behind() {
    let c = connect(&shared_server().connect_string(), SESSION);
    let path = unique("shared-closed-watches");
    let keep = SharedCount::new(&c, &path, 0).unwrap();
    let before = c.pending_watches();
    for _ in 0..20 {
        let count = SharedCount::new(&c, &path, 0).unwrap();
        count.close();
        let value = SharedValue::new(&c, &path, b"").unwrap();
        value.start().unwrap();
        value.close();
    }
    wait_until(
        WAIT,
        || c.pending_watches() <= before,
        || {
            format!(
                "{} watches pending after 40 values were closed, {before} before",
                c.pending_watches()
            )
        },
    );
    // The one still open keeps its own and still hears changes.
    let changes = keep.listen();
    c.set_data(&path, &5i32.to_be_bytes(), None).unwrap();
    assert_eq!(changes.recv_timeout(WAIT), Ok(5));
    keep.close();
}

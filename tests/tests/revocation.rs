//! Lock revocation as Curator does it, against a real server: the watch is
//! set on the lock node before the wait, the listener runs on its own
//! thread (never inside `acquire`, never on a client thread), revocability
//! ends with the release, and a watch that cannot be set fails the acquire.
//! Ports Curator's `TestInterProcessMutex.testRevoking`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::*;
use latchkey_framework::{Acl, AclProvider, Client, ExponentialBackoffRetry, Perms};
use latchkey_recipes::{InterProcessMutex, Revoker};

const SESSION: Duration = Duration::from_secs(10);
const BOUND: Duration = Duration::from_secs(20);

fn client() -> Client {
    connect(&shared_server().connect_string(), SESSION)
}

/// What the listener saw when it ran.
struct Call {
    thread: thread::ThreadId,
    name: Option<String>,
}

/// A listener that reports each call on a channel.
fn reporting_listener() -> (impl Fn() + Send + Sync + 'static, mpsc::Receiver<Call>) {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let listener = move || {
        let me = thread::current();
        let _ = tx.lock().unwrap().send(Call {
            thread: me.id(),
            name: me.name().map(str::to_owned),
        });
    };
    (listener, rx)
}

/// Curator's `testRevoking`: the holder is asked to let go, lets go, and
/// another mutex on the same client gets the lock.
#[test]
fn a_revoked_holder_lets_go() {
    let c = client();
    let path = unique("revoke-basic");
    let lock = InterProcessMutex::new(&c, &path).unwrap();
    let (listener, calls) = reporting_listener();
    lock.make_revocable(listener);
    thread::scope(|s| {
        let (held_tx, held_rx) = mpsc::channel();
        let lock = &lock;
        let holder = s.spawn(move || {
            lock.acquire().unwrap();
            held_tx.send(()).unwrap();
            let asked = calls.recv_timeout(BOUND).is_ok();
            lock.release().unwrap();
            asked
        });
        held_rx
            .recv_timeout(BOUND)
            .expect("the holder got the lock");
        let nodes = lock.participant_nodes().unwrap();
        assert_eq!(nodes.len(), 1, "{nodes:?}");
        Revoker::attempt_revoke(&c, &nodes[0]).unwrap();
        let l2 = InterProcessMutex::new(&c, &path).unwrap();
        assert!(l2.acquire_timeout(Duration::from_secs(5)).unwrap());
        l2.release().unwrap();
        assert!(holder.join().unwrap(), "the listener never ran");
    });
    c.close();
}

/// A revoke requested while the revocable mutex still waits reaches the
/// listener at once, on a thread of its own, while `acquire` goes on
/// waiting (the watch is set before the wait, as Curator sets it).
#[test]
fn a_revoke_while_waiting_runs_the_listener_beside_the_wait() {
    let c = client();
    let path = unique("revoke-waiting");
    let holder = InterProcessMutex::new(&c, &path).unwrap();
    let waiter = InterProcessMutex::new(&c, &path).unwrap();
    let (listener, calls) = reporting_listener();
    waiter.make_revocable(listener);
    holder.acquire().unwrap();
    let acquired = AtomicBool::new(false);
    thread::scope(|s| {
        let (acquired, waiter) = (&acquired, &waiter);
        let waiting = s.spawn(move || {
            let got = waiter.acquire_timeout(BOUND).unwrap();
            acquired.store(got, Ordering::SeqCst);
            if got {
                waiter.release().unwrap();
            }
            thread::current().id()
        });
        wait_until(
            BOUND,
            || {
                waiter
                    .participant_nodes()
                    .map(|n| n.len() == 2)
                    .unwrap_or(false)
            },
            || format!("{:?}", waiter.participant_nodes()),
        );
        let waiting_node = waiter.participant_nodes().unwrap()[1].clone();
        Revoker::attempt_revoke(&c, &waiting_node).unwrap();
        let call = calls
            .recv_timeout(Duration::from_secs(5))
            .expect("the listener did not run while the mutex waited");
        assert!(
            !acquired.load(Ordering::SeqCst),
            "the mutex got the lock first"
        );
        holder.release().unwrap();
        let acquiring_thread = waiting.join().unwrap();
        assert!(acquired.load(Ordering::SeqCst));
        assert_ne!(
            call.thread, acquiring_thread,
            "the listener ran inside acquire"
        );
        let name = call.name.unwrap_or_default();
        assert!(
            !name.starts_with("latchkey-engine") && !name.starts_with("latchkey-watch"),
            "the listener ran on the client's thread {name}"
        );
    });
    c.close();
}

/// Curator clears revocability on release: a later hold is not revocable
/// until `make_revocable` is called again.
#[test]
fn revocability_ends_with_the_release() {
    let c = client();
    let path = unique("revoke-cleared");
    let lock = InterProcessMutex::new(&c, &path).unwrap();
    let (listener, calls) = reporting_listener();
    lock.make_revocable(listener);
    lock.acquire().unwrap();
    lock.release().unwrap();

    lock.acquire().unwrap();
    Revoker::attempt_revoke(&c, &lock.lock_node_path().unwrap()).unwrap();
    // Nothing can prove a call will never come; a revocable hold answers
    // within milliseconds (the next test), so a second is a wide margin.
    assert!(
        calls.recv_timeout(Duration::from_secs(1)).is_err(),
        "a hold after the release was still revocable"
    );
    lock.release().unwrap();

    // Made revocable again, the next hold is.
    let (listener, calls) = reporting_listener();
    lock.make_revocable(listener);
    lock.acquire().unwrap();
    Revoker::attempt_revoke(&c, &lock.lock_node_path().unwrap()).unwrap();
    assert!(calls.recv_timeout(BOUND).is_ok(), "the listener never ran");
    lock.release().unwrap();
    c.close();
}

/// A listener that blocks holds up neither the client's other watches nor
/// the holder's release.
#[test]
fn a_blocking_listener_does_not_stall_the_client() {
    let c = client();
    let path = unique("revoke-blocking");
    let lock = InterProcessMutex::new(&c, &path).unwrap();
    let (unblock_tx, unblock_rx) = mpsc::channel::<()>();
    let (ran_tx, ran_rx) = mpsc::channel();
    let unblock_rx = std::sync::Mutex::new(unblock_rx);
    let ran_tx = std::sync::Mutex::new(ran_tx);
    lock.make_revocable(move || {
        let _ = ran_tx.lock().unwrap().send(());
        let _ = unblock_rx.lock().unwrap().recv_timeout(BOUND);
    });
    lock.acquire().unwrap();
    Revoker::attempt_revoke(&c, &lock.lock_node_path().unwrap()).unwrap();
    ran_rx.recv_timeout(BOUND).expect("the listener never ran");
    // While the listener blocks, a waiter on the same client still hears
    // of the release.
    let other = InterProcessMutex::new(&c, &path).unwrap();
    thread::scope(|s| {
        let w = s.spawn(|| {
            let got = other.acquire_timeout(BOUND).unwrap();
            if got {
                other.release().unwrap();
            }
            got
        });
        wait_until(
            BOUND,
            || {
                lock.participant_nodes()
                    .map(|n| n.len() == 2)
                    .unwrap_or(false)
            },
            || format!("{:?}", lock.participant_nodes()),
        );
        lock.release().unwrap();
        assert!(w.join().unwrap());
    });
    unblock_tx.send(()).unwrap();
    c.close();
}

/// Lock nodes that this client may not read: the revocation watch (a read
/// with a watch) cannot be set on them.
struct UnreadableLockNodes;

impl AclProvider for UnreadableLockNodes {
    fn default_acl(&self) -> Vec<Acl> {
        Acl::open_unsafe()
    }

    fn acl_for_path(&self, path: &str) -> Vec<Acl> {
        if path.rsplit('/').next().unwrap_or("").contains("lock-") {
            vec![Acl::new(
                Perms::WRITE | Perms::CREATE | Perms::DELETE | Perms::ADMIN,
                "world",
                "anyone",
            )]
        } else {
            self.default_acl()
        }
    }
}

/// A revocable acquire whose watch cannot be set fails with the reason and
/// leaves no node (as Curator's does), instead of holding a lock that
/// silently is not revocable.
#[test]
fn a_revocation_watch_that_cannot_be_set_fails_the_acquire() {
    let c = start_connected(
        Client::builder()
            .connect_string(shared_server().connect_string())
            .session_timeout(SESSION)
            .connection_timeout(Duration::from_secs(5))
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 3))
            .acl_provider(UnreadableLockNodes),
    );
    let path = unique("revoke-unwatchable");
    let lock = InterProcessMutex::new(&c, &path).unwrap();
    // Not revocable: the first holder reads nothing of its own node.
    lock.acquire().unwrap();
    lock.release().unwrap();

    lock.make_revocable(|| {});
    let err = lock
        .acquire_timeout(BOUND)
        .expect_err("a revocable hold without its watch");
    assert!(
        err.is(latchkey_framework::ErrorCode::NoAuth),
        "unexpected error: {err}"
    );
    assert!(!lock.is_owned_by_current_thread());
    wait_until(
        BOUND,
        || c.get_children(&path).map(|v| v.is_empty()).unwrap_or(false),
        || format!("nodes left: {:?}", c.get_children(&path)),
    );
    c.close();
}

/// As in Curator, `make_revocable` during a hold replaces the listener
/// that a later request reaches.
#[test]
fn a_new_listener_replaces_the_old_one_for_a_held_node() {
    let c = client();
    let path = unique("revoke-replaced");
    let lock = InterProcessMutex::new(&c, &path).unwrap();
    let (first, first_calls) = reporting_listener();
    let (second, second_calls) = reporting_listener();
    lock.make_revocable(first);
    lock.acquire().unwrap();
    lock.make_revocable(second);
    Revoker::attempt_revoke(&c, &lock.lock_node_path().unwrap()).unwrap();
    assert!(
        second_calls.recv_timeout(BOUND).is_ok(),
        "the new listener never ran"
    );
    assert!(first_calls.try_recv().is_err(), "the old listener ran");
    lock.release().unwrap();
    c.close();
}

//! Behaviours of the lock driver that mutation testing showed no other test
//! pinned: which errors of a wait reach the caller and which queue again,
//! that a re-queue keeps the call's deadline, that a waiter blocks instead
//! of polling, and that a participant listing does not turn a lost
//! connection into an empty queue. Each test fails within seconds, with a
//! message, when the behaviour breaks.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use crossbeam_channel::bounded;
use latchkey_framework::{Client, CreateMode, Error, ErrorCode, Result, RetryNTimes};
use latchkey_recipes::{
    CancelToken, Decision, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2,
    LeaderLatch, LeaderSelector, LockDriver, LockInternals, Revoker, StandardDriver,
};
use latchkey_test::{FaultProxy, TestingServer};

const SESSION: Duration = Duration::from_secs(10);

/// How long any call of these tests may take before the test gives up on
/// it: far above what a working lock needs, far below a hung suite.
const CALL_BOUND: Duration = Duration::from_secs(30);

/// A client of `connect_string` with `policy` as its retry policy.
fn client_with(connect_string: &str, policy: RetryNTimes) -> Client {
    start_connected(
        Client::builder()
            .connect_string(connect_string)
            .session_timeout(SESSION)
            .connection_timeout(Duration::from_secs(2))
            .retry_policy(policy),
    )
}

/// Runs `f` on a thread and returns its result and how long it took, or
/// fails the test if it has not returned within [`CALL_BOUND`].
fn bounded_call<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
    dump: impl Fn() -> String,
) -> (T, Duration) {
    let (tx, rx) = bounded(1);
    let started = Instant::now();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(CALL_BOUND) {
        Ok(v) => (v, started.elapsed()),
        Err(_) => panic!(
            "{what} did not return within {CALL_BOUND:?} (or panicked)\n{}",
            dump()
        ),
    }
}

/// A driver that fails its first `failures` decisions with `error`, then
/// decides as the standard driver does; counts the decisions asked for.
struct FailingDriver {
    failures: usize,
    error: fn(&str) -> Error,
    asked: AtomicUsize,
}

impl FailingDriver {
    fn new(failures: usize, error: fn(&str) -> Error) -> Arc<Self> {
        Arc::new(FailingDriver {
            failures,
            error,
            asked: AtomicUsize::new(0),
        })
    }

    fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }
}

impl LockDriver for FailingDriver {
    fn decide(&self, children: &[String], ours: &str, max_leases: usize) -> Result<Decision> {
        if self.asked.fetch_add(1, Ordering::SeqCst) < self.failures {
            return Err((self.error)(ours));
        }
        StandardDriver.decide(children, ours, max_leases)
    }
}

/// What the standard driver says when our node is gone.
fn no_node(ours: &str) -> Error {
    Error::Zk {
        code: ErrorCode::NoNode,
        path: Some(ours.to_owned()),
    }
}

fn refused(_: &str) -> Error {
    Error::InvalidArgument("refused by the test's driver".into())
}

/// Waits until `path` has no children left (the background delete of an
/// abandoned node is asynchronous).
fn wait_empty(c: &Client, path: &str, dump: impl Fn() -> String) {
    wait_until(
        Duration::from_secs(10),
        || sorted_children(c, path).is_empty(),
        || format!("left behind: {:?}\n{}", sorted_children(c, path), dump()),
    );
}

#[test]
fn an_error_during_the_wait_reaches_the_caller_instead_of_queueing_again() {
    // Curator queues again only when its node vanished (NoNode); any other
    // error of the wait ends the attempt, its node deleted.
    let server = shared_server();
    let c = client_with(
        &server.connect_string(),
        RetryNTimes::new(3, Duration::from_millis(10)),
    );
    let ctx = Arc::new(Ctx::new(server, &c));
    let path = unique("/pinned/wait-error");
    let driver = FailingDriver::new(1, refused);
    let mutex = InterProcessMutex::with_lock_driver(&c, &path, driver.clone()).unwrap();
    let dump = {
        let ctx = Arc::clone(&ctx);
        move || ctx.dump()
    };
    let (got, _) = bounded_call(
        "acquire with a failing driver",
        move || {
            let got = mutex.acquire_timeout(Duration::from_secs(10));
            if matches!(got, Ok(true)) {
                let _ = mutex.release();
            }
            got
        },
        &dump,
    );
    match got {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("refused"), "{m}"),
        other => panic!(
            "want the driver's error, got {other:?} after {} decisions",
            driver.asked()
        ),
    }
    assert_eq!(driver.asked(), 1, "the failed attempt queued again");
    wait_empty(&c, &path, &dump);
}

#[test]
fn a_vanished_node_queues_again_while_time_allows() {
    let server = shared_server();
    let c = client_with(
        &server.connect_string(),
        RetryNTimes::new(3, Duration::from_millis(10)),
    );
    let ctx = Arc::new(Ctx::new(server, &c));
    let dump = {
        let ctx = Arc::clone(&ctx);
        move || ctx.dump()
    };
    // Once with a deadline, once without.
    for timeout in [Some(Duration::from_secs(20)), None] {
        let path = unique("/pinned/requeue");
        let driver = FailingDriver::new(1, no_node);
        let mutex = InterProcessMutex::with_lock_driver(&c, &path, driver.clone()).unwrap();
        let (got, _) = bounded_call(
            "acquire whose first node vanishes",
            move || {
                let got = match timeout {
                    Some(t) => mutex.acquire_timeout(t),
                    None => mutex.acquire().map(|()| true),
                };
                if matches!(got, Ok(true)) {
                    mutex.release().expect("release");
                }
                got
            },
            &dump,
        );
        assert!(
            matches!(got, Ok(true)),
            "timeout {timeout:?}: want the lock on the second node, got {got:?} after {} decisions",
            driver.asked()
        );
        assert_eq!(driver.asked(), 2, "timeout {timeout:?}");
        wait_empty(&c, &path, &dump);
    }
}

#[test]
fn a_node_that_keeps_vanishing_gives_up_after_the_policys_retries() {
    let server = shared_server();
    let c = client_with(
        &server.connect_string(),
        RetryNTimes::new(2, Duration::from_millis(300)),
    );
    let ctx = Arc::new(Ctx::new(server, &c));
    let dump = {
        let ctx = Arc::clone(&ctx);
        move || ctx.dump()
    };
    let path = unique("/pinned/vanishing");
    let driver = FailingDriver::new(usize::MAX, no_node);
    let mutex = InterProcessMutex::with_lock_driver(&c, &path, driver.clone()).unwrap();
    let (got, took) = bounded_call(
        "acquire whose nodes all vanish",
        move || mutex.acquire(),
        &dump,
    );
    assert!(
        matches!(&got, Err(e) if e.is(ErrorCode::NoNode)),
        "want NoNode once the policy gives up, got {got:?}"
    );
    // The first attempt and the policy's two retries, each after its pause.
    assert_eq!(driver.asked(), 3);
    assert!(
        took >= Duration::from_millis(600),
        "two retries after 300 ms pauses took only {took:?}"
    );
    wait_empty(&c, &path, &dump);
}

#[test]
fn a_requeue_whose_backoff_would_pass_the_deadline_ends_the_call_in_time() {
    // The policy would queue again after 20 s; the call's deadline is 2 s
    // away: not acquired, and returned by the deadline, not after the sleep.
    let server = shared_server();
    let c = client_with(
        &server.connect_string(),
        RetryNTimes::new(5, Duration::from_secs(20)),
    );
    let ctx = Arc::new(Ctx::new(server, &c));
    let dump = {
        let ctx = Arc::clone(&ctx);
        move || ctx.dump()
    };
    let path = unique("/pinned/backoff");
    let driver = FailingDriver::new(usize::MAX, no_node);
    let mutex = InterProcessMutex::with_lock_driver(&c, &path, driver.clone()).unwrap();
    let timeout = Duration::from_secs(2);
    let (got, took) = bounded_call(
        "acquire_timeout(2 s) with a 20 s backoff",
        move || mutex.acquire_timeout(timeout),
        &dump,
    );
    assert!(matches!(got, Ok(false)), "want Ok(false), got {got:?}");
    assert!(
        took < timeout + Duration::from_secs(1),
        "returned after {took:?}, past its {timeout:?} deadline"
    );
    assert_eq!(
        driver.asked(),
        1,
        "queued again although the sleep ends past the deadline"
    );
    wait_empty(&c, &path, &dump);
}

#[test]
fn a_waiter_blocks_between_wake_ups_instead_of_polling() {
    // Holder H, then X, then waiter W, who watches X. X gives up: W wakes,
    // lists, and watches H. From then on W must send nothing until H goes.
    let server = shared_server();
    let s = server.connect_string();
    let (h, x, w) = (
        connect(&s, SESSION),
        connect(&s, SESSION),
        connect(&s, SESSION),
    );
    let ctx = Arc::new(Ctx::new(server, &w));
    let path = unique("/pinned/blocking");
    let hm = InterProcessMutex::new(&h, &path).unwrap();
    assert!(hm.acquire_timeout(Duration::from_secs(10)).unwrap());

    // X queues and stays until told to give up.
    let x_cancel = CancelToken::new();
    let xm = InterProcessMutex::new(&x, &path).unwrap();
    let x_thread = {
        let cancel = x_cancel.clone();
        thread::spawn(move || xm.acquire_cancellable(Duration::from_secs(60), &cancel))
    };
    wait_until(
        Duration::from_secs(10),
        || sorted_children(&h, &path).len() == 2,
        || ctx.dump(),
    );

    let wm = Arc::new(InterProcessMutex::new(&w, &path).unwrap());
    let w_cancel = CancelToken::new();
    let (w_tx, w_rx) = bounded(1);
    {
        let (wm, cancel) = (Arc::clone(&wm), w_cancel.clone());
        thread::spawn(move || {
            let got = wm.acquire_cancellable(Duration::from_secs(60), &cancel);
            if matches!(got, Ok(true)) {
                let _ = wm.release();
            }
            let _ = w_tx.send(got);
        });
    }
    wait_until(
        Duration::from_secs(10),
        || sorted_children(&h, &path).len() == 3,
        || ctx.dump(),
    );

    x_cancel.cancel();
    let x_got = x_thread.join().expect("X's thread");
    assert!(matches!(x_got, Err(Error::Cancelled)), "X: {x_got:?}");
    wait_until(
        Duration::from_secs(10),
        || sorted_children(&h, &path).len() == 2,
        || ctx.dump(),
    );

    // W has woken at X's deletion and settled on H. Over a second it may
    // send the few requests of one more look (its wake-up may still be on
    // its way) and a ping, not one listing after another.
    let sent = requests_sent_around(&w, || {}, Duration::from_secs(1));
    assert!(
        sent <= 10,
        "the waiter sent {sent} requests in 1 s while the lock stayed held\n{}",
        ctx.dump()
    );

    // W still waits, and takes the lock once H releases it.
    assert!(w_rx.try_recv().is_err(), "W's wait ended while H held");
    hm.release().unwrap();
    match w_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(true)) => {}
        other => panic!("W after H's release: {other:?}\n{}", ctx.dump()),
    }
    drop(w_cancel);
}

#[test]
fn participant_nodes_fails_on_a_lost_connection_instead_of_listing_none() {
    let mut server = TestingServer::start().expect("start ZooKeeper");
    let c = client_with(
        &server.connect_string(),
        RetryNTimes::new(1, Duration::from_millis(10)),
    );
    let ctx = Arc::new(Ctx::new(&server, &c));
    let dump = {
        let ctx = Arc::clone(&ctx);
        move || ctx.dump()
    };
    let path = unique("/pinned/participants");
    let mutex = Arc::new(InterProcessMutex::new(&c, &path).unwrap());
    let sem_path = unique("/pinned/participants-sem");
    let sem = Arc::new(InterProcessSemaphoreV2::new(&c, &sem_path, 2).unwrap());
    let latch = Arc::new(LeaderLatch::new(&c, &unique("/pinned/participants-latch")).unwrap());
    let selector = Arc::new(
        LeaderSelector::new(&c, &unique("/pinned/participants-selector"), "s", |_| {}).unwrap(),
    );

    // A lock path nobody has used has no participants, and that is no error.
    assert_eq!(mutex.participant_nodes().unwrap(), Vec::<String>::new());
    assert_eq!(sem.participant_nodes().unwrap(), Vec::<String>::new());
    assert!(latch.participants().unwrap().is_empty());
    assert!(selector.participants().unwrap().is_empty());

    assert!(mutex.acquire_timeout(Duration::from_secs(10)).unwrap());
    let held = mutex.participant_nodes().unwrap();
    assert_eq!(held.len(), 1, "{held:?}");
    let lease = sem
        .acquire_timeout(Duration::from_secs(10))
        .unwrap()
        .expect("a free lease");
    assert_eq!(sem.participant_nodes().unwrap().len(), 1);

    server.stop().expect("stop ZooKeeper");
    // Each listing, as a count: an error wanted, not "nobody".
    type Ask = Box<dyn FnOnce() -> Result<usize> + Send>;
    let asks: [(&str, Ask); 4] = [
        (
            "the mutex's participant_nodes",
            Box::new(move || mutex.participant_nodes().map(|n| n.len())),
        ),
        (
            "the semaphore's participant_nodes",
            Box::new(move || sem.participant_nodes().map(|n| n.len())),
        ),
        (
            "a leader latch's participants",
            Box::new(move || latch.participants().map(|p| p.len())),
        ),
        (
            "a leader selector's participants",
            Box::new(move || selector.participants().map(|p| p.len())),
        ),
    ];
    for (what, ask) in asks {
        let (got, _) = bounded_call(&format!("{what} with ZooKeeper stopped"), ask, &dump);
        assert!(
            got.is_err(),
            "with ZooKeeper stopped, {what} answered {got:?}"
        );
    }
    drop(lease);
    c.close();
}

#[test]
fn lock_internals_used_directly_acquires_times_out_and_releases() {
    // The driver's own API, as a recipe built outside this crate uses it.
    let server = shared_server();
    let s = server.connect_string();
    let (a, b) = (connect(&s, SESSION), connect(&s, SESSION));
    let ctx = Arc::new(Ctx::new(server, &a));
    let path = unique("/pinned/internals");
    let first =
        LockInternals::new(&a, &path, "lock-", &["lock-"], 1, Arc::new(StandardDriver)).unwrap();
    let second =
        LockInternals::new(&b, &path, "lock-", &["lock-"], 1, Arc::new(StandardDriver)).unwrap();

    let held = first
        .attempt_lock(None, b"first")
        .unwrap()
        .expect("an uncontended attempt_lock without a deadline holds the lock");
    assert_eq!(first.participant_nodes().unwrap(), vec![held.path.clone()]);
    assert_eq!(a.get_data(&held.path).unwrap().0, b"first");

    let deadline = Instant::now() + Duration::from_millis(300);
    let got = second.attempt_lock(Some(deadline), b"second").unwrap();
    assert_eq!(got, None, "a second holder while the first holds");

    first.release(&held);
    let next = second
        .attempt_lock(Some(Instant::now() + Duration::from_secs(10)), b"second")
        .unwrap()
        .expect("the lock once released");
    assert!(next.czxid > held.czxid, "fencing tokens go up");
    second.release(&next);
    wait_empty(&a, &path, || ctx.dump());
}

#[test]
fn a_read_write_lock_tells_its_path() {
    let c = connect(&shared_server().connect_string(), SESSION);
    let path = unique("/pinned/rw-path");
    let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();
    assert_eq!(rw.path(), path);
    c.close();
}

#[test]
fn a_create_refused_by_zookeeper_reaches_the_caller() {
    // A lock path under an ephemeral node: ZooKeeper refuses the lock node
    // (NoChildrenForEphemerals). That is an error for the caller, timed
    // call or not, never "not acquired in time".
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION);
    let ctx = Arc::new(Ctx::new(server, &c));
    let parent = unique("/pinned/ephemeral-parent");
    c.create()
        .creating_parent_containers_if_needed()
        .mode(CreateMode::Ephemeral)
        .for_path(&parent, b"")
        .unwrap();
    let mutex = Arc::new(InterProcessMutex::new(&c, &format!("{parent}/lock")).unwrap());
    let dump = {
        let ctx = Arc::clone(&ctx);
        move || ctx.dump()
    };
    let timed = {
        let mutex = Arc::clone(&mutex);
        bounded_call(
            "acquire_timeout under an ephemeral node",
            move || mutex.acquire_timeout(Duration::from_secs(5)),
            &dump,
        )
        .0
    };
    assert!(
        matches!(&timed, Err(e) if e.is(ErrorCode::NoChildrenForEphemerals)),
        "acquire_timeout: {timed:?}"
    );
    let untimed = bounded_call(
        "acquire under an ephemeral node",
        move || mutex.acquire(),
        &dump,
    )
    .0;
    assert!(
        matches!(&untimed, Err(e) if e.is(ErrorCode::NoChildrenForEphemerals)),
        "acquire: {untimed:?}"
    );
    c.close();
}

#[test]
fn a_timed_acquire_whose_create_gets_no_answer_is_not_acquired_rather_than_an_error() {
    // ZooKeeper silent (blackholed) and a policy that never gives up: the
    // call's time runs out in the create, which is "not acquired", as a
    // wait that reaches its deadline is (Curator's acquire returns false).
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = patient_client(&proxy);
    let ctx = Arc::new(Ctx::new(server, &c));
    let dump = {
        let ctx = Arc::clone(&ctx);
        move || ctx.dump()
    };
    let mutex = Arc::new(InterProcessMutex::new(&c, &unique("/pinned/silent-create")).unwrap());
    proxy.pause();
    for timeout in [Duration::ZERO, Duration::from_millis(1500)] {
        let mutex = Arc::clone(&mutex);
        let (got, _) = bounded_call(
            "acquire_timeout with ZooKeeper blackholed",
            move || mutex.acquire_timeout(timeout),
            &dump,
        );
        assert!(
            matches!(got, Ok(false)),
            "timeout {timeout:?}: want Ok(false), got {got:?}"
        );
    }
    proxy.resume();
    c.close();
}

#[test]
fn a_revocable_hold_is_not_revoked_until_someone_asks() {
    let c = connect(&shared_server().connect_string(), SESSION);
    let lock = InterProcessMutex::new(&c, &unique("/pinned/revocable")).unwrap();
    let (tx, calls) = bounded(16);
    lock.make_revocable(move || {
        let _ = tx.try_send(());
    });
    assert!(lock.acquire_timeout(Duration::from_secs(10)).unwrap());
    // Other data written into the node is no revocation request either.
    c.set_data(&lock.lock_node_path().unwrap(), b"not a request", None)
        .unwrap();
    // Nothing can prove a call will never come; a revocation request is
    // answered within milliseconds, so a second is a wide margin.
    assert!(
        calls.recv_timeout(Duration::from_secs(1)).is_err(),
        "the listener ran although nobody asked"
    );
    Revoker::attempt_revoke(&c, &lock.lock_node_path().unwrap()).unwrap();
    assert!(
        calls.recv_timeout(CALL_BOUND).is_ok(),
        "the listener never ran"
    );
    lock.release().unwrap();
    c.close();
}

#[test]
fn attempt_revoke_ignores_a_node_gone_but_reports_other_errors() {
    let c = connect(&shared_server().connect_string(), SESSION);
    // Gone (or never there): nothing to revoke, no error (Curator's).
    Revoker::attempt_revoke(&c, &unique("/pinned/no-such-lock-node")).unwrap();
    // Any other failure reaches the caller.
    let got = Revoker::attempt_revoke(&c, "not-an-absolute-path");
    assert!(got.is_err(), "an invalid path answered {got:?}");
    c.close();
}

#[test]
fn lock_internals_delete_node_removes_a_node_for_good() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION);
    let ctx = Arc::new(Ctx::new(server, &c));
    let path = unique("/pinned/delete-node");
    let internals =
        LockInternals::new(&c, &path, "lock-", &["lock-"], 1, Arc::new(StandardDriver)).unwrap();
    let node = internals
        .attempt_lock(Some(Instant::now() + Duration::from_secs(10)), b"")
        .unwrap()
        .expect("an uncontended lock");
    internals.delete_node(&node.path, node.owner);
    wait_empty(&c, &path, || ctx.dump());
    c.close();
}

/// A driver that first waits for a node that is not there (as when the
/// node ahead goes between the listing and the watch), then decides as the
/// standard driver does.
struct WaitsForAGoneNodeOnce {
    asked: AtomicUsize,
}

impl LockDriver for WaitsForAGoneNodeOnce {
    fn decide(&self, children: &[String], ours: &str, max_leases: usize) -> Result<Decision> {
        if self.asked.fetch_add(1, Ordering::SeqCst) == 0 {
            return Ok(Decision::WaitFor {
                node: "gone-before-the-watch".into(),
            });
        }
        StandardDriver.decide(children, ours, max_leases)
    }
}

#[test]
fn a_node_ahead_gone_before_the_watch_means_look_again_not_queue_again() {
    // No retries: a waiter that took the vanished node ahead for its own
    // would fail with NoNode instead of looking again.
    let server = shared_server();
    let c = client_with(
        &server.connect_string(),
        RetryNTimes::new(0, Duration::from_millis(10)),
    );
    let ctx = Arc::new(Ctx::new(server, &c));
    let dump = {
        let ctx = Arc::clone(&ctx);
        move || ctx.dump()
    };
    let path = unique("/pinned/gone-ahead");
    let driver = Arc::new(WaitsForAGoneNodeOnce {
        asked: AtomicUsize::new(0),
    });
    let mutex = InterProcessMutex::with_lock_driver(&c, &path, driver.clone()).unwrap();
    let (got, _) = bounded_call(
        "acquire whose node ahead is gone before the watch",
        move || {
            let got = mutex.acquire_timeout(Duration::from_secs(10));
            if matches!(got, Ok(true)) {
                mutex.release().expect("release");
            }
            got
        },
        &dump,
    );
    assert!(matches!(got, Ok(true)), "want the lock, got {got:?}");
    assert_eq!(driver.asked.load(Ordering::SeqCst), 2);
    wait_empty(&c, &path, &dump);
}

/// Acquire and release, then the cancellable acquire and `release_by`,
/// each checked against `rival`, a lock of another session on the same path.
fn lock_trait_rounds(
    name: &str,
    lock: &dyn latchkey_recipes::InterProcessLock,
    rival: &dyn latchkey_recipes::InterProcessLock,
) {
    for round in 0..2 {
        if round == 0 {
            lock.acquire().unwrap();
        } else {
            let token = CancelToken::new();
            assert!(lock
                .acquire_cancellable(Duration::from_secs(10), &token)
                .unwrap());
        }
        assert!(
            lock.is_acquired_in_this_process(),
            "{name} {round}: not held"
        );
        assert!(
            !rival.acquire_timeout(Duration::from_millis(200)).unwrap(),
            "{name} {round}: two holders"
        );
        if round == 0 {
            lock.release().unwrap();
        } else {
            lock.release_by(None).unwrap();
        }
        assert!(
            !lock.is_acquired_in_this_process(),
            "{name} {round}: still held"
        );
        assert!(
            rival.acquire_timeout(Duration::from_secs(10)).unwrap(),
            "{name} {round}: not released for another session"
        );
        rival.release().unwrap();
    }
}

/// The `InterProcessLock` trait, as generic code calls it, on each lock of
/// the crate that implements it: acquire, held in this process, release;
/// then another session takes the lock at once. (Every lock overrides some
/// of the trait's defaults, so these calls reach the locks' own code.)
#[test]
fn the_lock_trait_acquires_and_releases_each_lock_of_the_crate() {
    use latchkey_recipes::{InterProcessLock, InterProcessMultiLock, InterProcessSemaphoreMutex};
    let server = shared_server();
    let (mine, other) = (
        connect(&server.connect_string(), Duration::from_secs(10)),
        connect(&server.connect_string(), Duration::from_secs(10)),
    );
    let base = unique("/pinned/lock-trait");
    let path = |name: &str| format!("{base}/{name}");
    type Make = fn(&Client, &str) -> Box<dyn InterProcessLock>;
    let kinds: [(&str, Make); 3] = [
        ("mutex", |c, p| {
            Box::new(InterProcessMutex::new(c, p).unwrap())
        }),
        ("semaphore mutex", |c, p| {
            Box::new(InterProcessSemaphoreMutex::new(c, p).unwrap())
        }),
        ("multi-lock", |c, p| {
            let (a, b) = (format!("{p}/a"), format!("{p}/b"));
            Box::new(InterProcessMultiLock::from_paths(c, &[&a, &b]).unwrap())
        }),
    ];
    for (name, make) in kinds {
        let (lock, rival) = (make(&mine, &path(name)), make(&other, &path(name)));
        // On a thread of its own, for the unbounded acquire: a lock that
        // never grants fails the test instead of hanging it.
        bounded_call(
            &format!("{name}: the trait's calls"),
            move || lock_trait_rounds(name, &*lock, &*rival),
            String::new,
        );
    }
    mine.close();
    other.close();
}

/// One token shared by several waits cancels every one of them, not only
/// the last to register (the token keeps a wake-up per wait).
#[test]
fn one_token_shared_by_several_waits_cancels_each() {
    let server = shared_server();
    let s = server.connect_string();
    let (h, w) = (connect(&s, SESSION), connect(&s, SESSION));
    let ctx = Arc::new(Ctx::new(server, &w));
    let paths = [
        unique("/pinned/shared-token-a"),
        unique("/pinned/shared-token-b"),
        unique("/pinned/shared-token-c"),
    ];
    let holders: Vec<_> = paths
        .iter()
        .map(|p| {
            let m = InterProcessMutex::new(&h, p).unwrap();
            assert!(m.acquire_timeout(Duration::from_secs(10)).unwrap());
            m
        })
        .collect();
    let token = CancelToken::new();
    let (tx, rx) = bounded(paths.len());
    for p in &paths {
        let (m, token, tx) = (
            InterProcessMutex::new(&w, p).unwrap(),
            token.clone(),
            tx.clone(),
        );
        thread::spawn(move || {
            let got = m.acquire_cancellable(Duration::from_secs(60), &token);
            let _ = tx.send((got, Instant::now()));
        });
    }
    for p in &paths {
        wait_until(
            Duration::from_secs(10),
            || sorted_children(&h, p).len() == 2,
            || ctx.dump(),
        );
    }
    let cancelled_at = Instant::now();
    token.cancel();
    for _ in &paths {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok((Err(Error::Cancelled), at)) => {
                let took = at - cancelled_at;
                assert!(took < Duration::from_secs(2), "a wait took {took:?} to end");
            }
            Ok((other, _)) => panic!("a cancelled wait ended with {other:?}\n{}", ctx.dump()),
            Err(_) => panic!(
                "a wait sharing the cancelled token still waits after 10 s\n{}",
                ctx.dump()
            ),
        }
    }
    for p in &paths {
        wait_until(
            Duration::from_secs(10),
            || sorted_children(&h, p).len() == 1,
            || format!("left behind under {p}: {:?}", sorted_children(&h, p)),
        );
    }
    for m in holders {
        m.release().unwrap();
    }
}

/// Waiters of one lock that wait for the same node share one watch on it
/// (the herd of readers behind a writer sets one watch, not one each),
/// and all get in when it goes.
#[test]
fn waiters_for_the_same_node_share_one_watch() {
    const READERS: usize = 8;
    let server = shared_server();
    let s = server.connect_string();
    let (h, w) = (connect(&s, SESSION), connect(&s, SESSION));
    let ctx = Arc::new(Ctx::new(server, &w));
    let path = unique("/pinned/shared-watch");
    let writer = InterProcessReadWriteLock::new(&h, &path).unwrap();
    assert!(writer
        .write_lock()
        .acquire_timeout(Duration::from_secs(10))
        .unwrap());
    let readers = InterProcessReadWriteLock::new(&w, &path).unwrap();
    let before = w.pending_watches();
    let (tx, rx) = bounded(READERS);
    for reader in 0..READERS {
        let (rw, tx) = (readers.clone(), tx.clone());
        thread::spawn(move || {
            let got = rw.read_lock().acquire_timeout(Duration::from_secs(30));
            if matches!(got, Ok(true)) {
                let _ = rw.read_lock().release();
            }
            let _ = tx.send(got);
        });
        if reader == 0 {
            // The first sets the watch; the others find it set. (Two that
            // arrive within the same microseconds may each set one.)
            wait_until(
                Duration::from_secs(10),
                || w.pending_watches() == before + 1,
                || ctx.dump(),
            );
        }
    }
    wait_until(
        Duration::from_secs(10),
        || sorted_children(&h, &path).len() == READERS + 1,
        || ctx.dump(),
    );
    // Each reader lists, then watches the writer's node: once all have
    // joined, the client holds one watch for them.
    wait_until(
        Duration::from_secs(10),
        || w.pending_watches() == before + 1,
        || {
            format!(
                "{} readers of one client hold {} watches (want 1)\n{}",
                READERS,
                w.pending_watches().saturating_sub(before),
                ctx.dump()
            )
        },
    );
    // And stays one while they wait: none sets a watch of its own later.
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(1) {
        let held = w.pending_watches().saturating_sub(before);
        assert!(
            held <= 1,
            "{READERS} waiting readers hold {held} watches\n{}",
            ctx.dump()
        );
        thread::sleep(Duration::from_millis(20));
    }
    writer.write_lock().release().unwrap();
    for _ in 0..READERS {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(true)) => {}
            other => panic!("a reader after the writer left: {other:?}\n{}", ctx.dump()),
        }
    }
    assert_eq!(w.pending_watches(), before, "watches left behind");
}

/// A hold is lost when the session ends by a rejected auth, though no new
/// session follows (no retries allowed): the session id the client still
/// reports is the lost one's, so only the `Lost` state can tell.
#[test]
fn a_hold_is_lost_when_a_rejected_auth_ends_the_session() {
    let server = shared_server();
    let c = client_with(
        &server.connect_string(),
        RetryNTimes::new(0, Duration::from_millis(10)),
    );
    let ctx = Arc::new(Ctx::new(server, &c));
    let path = unique("/pinned/lost-by-auth");
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let guard = mutex
        .try_lock_for(Duration::from_secs(10))
        .unwrap()
        .expect("a free lock");
    assert!(!guard.is_lost());
    let lease = InterProcessSemaphoreV2::new(&c, &unique("/pinned/lost-by-auth-sem"), 1)
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .unwrap()
        .expect("a free lease");
    let sm =
        latchkey_recipes::InterProcessSemaphoreMutex::new(&c, &unique("/pinned/lost-by-auth-sm"))
            .unwrap();
    assert!(sm.acquire_timeout(Duration::from_secs(10)).unwrap());
    assert!(!lease.is_lost() && !sm.is_lost());
    let err = c.add_auth("nosuchscheme", b"x").unwrap_err();
    assert!(err.is(ErrorCode::AuthFailed), "{err}\n{}", ctx.dump());
    wait_until(
        Duration::from_secs(10),
        || c.state() == Some(latchkey_framework::ConnectionState::Lost),
        || ctx.dump(),
    );
    wait_until(
        Duration::from_secs(10),
        || guard.is_lost(),
        || {
            format!(
                "the hold is not lost after the rejected auth\n{}",
                ctx.dump()
            )
        },
    );
    assert!(guard.is_in_doubt());
    // Leases too: the semaphore's, and the semaphore mutex's.
    assert!(
        lease.is_lost() && sm.is_lost(),
        "lease lost: {}, semaphore mutex lost: {}\n{}",
        lease.is_lost(),
        sm.is_lost(),
        ctx.dump()
    );
    assert!(lease.is_in_doubt() && sm.is_in_doubt());
    drop((guard, lease));
    c.close();
}

/// Listeners share a thread, and one ahead of the mutex's may block: the
/// mutex may hear `Lost` only after the next session began. That late
/// `Lost` must not mark a hold taken in the new session.
#[test]
fn a_late_lost_does_not_mark_a_hold_of_the_next_session() {
    use latchkey_framework::ConnectionState;
    let server = shared_server();
    let c = client_with(
        &server.connect_string(),
        RetryNTimes::new(10, Duration::from_millis(100)),
    );
    let ctx = Arc::new(Ctx::new(server, &c));
    let (unblock, blocked) = bounded::<()>(1);
    let _blocker = c.add_listener(move |state| {
        if state == ConnectionState::Lost {
            let _ = blocked.recv_timeout(CALL_BOUND);
        }
    });
    let path = unique("/pinned/late-lost");
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let (seen_tx, seen) = bounded(16);
    let _after = c.add_listener(move |state| {
        let _ = seen_tx.try_send(state);
    });
    let old = c.session_id();
    c.expire_session_for_testing().unwrap();
    wait_until(
        Duration::from_secs(20),
        || {
            let id = c.session_id();
            id != old && id != 0 && c.state().is_some_and(ConnectionState::is_connected)
        },
        || ctx.dump(),
    );
    let guard = mutex
        .try_lock_for(Duration::from_secs(10))
        .unwrap()
        .expect("the lock is free in the new session");
    let before: Vec<_> = seen.try_iter().collect();
    assert!(
        !before.contains(&ConnectionState::Lost),
        "the listeners were not held up: {before:?}"
    );
    unblock.send(()).unwrap();
    // The listener after the mutex's hears Lost once the mutex's has.
    loop {
        match seen.recv_timeout(Duration::from_secs(10)) {
            Ok(ConnectionState::Lost) => break,
            Ok(_) => {}
            Err(_) => panic!("no Lost reached the listeners\n{}", ctx.dump()),
        }
    }
    assert!(
        !guard.is_lost(),
        "a hold of the new session was marked lost by the old session's Lost\n{}",
        ctx.dump()
    );
    drop(guard);
    assert!(sorted_children(&c, &path).is_empty());
    c.close();
}

/// A one-lease semaphore at a fresh path: `h`'s session holds the lease,
/// and a thread of `w`'s session waits for it (60 s at most) with its node
/// queued; the wait's result arrives on `waited`.
struct FullSemaphore {
    h: Client,
    w: Client,
    ctx: Ctx,
    leases: String,
    held: latchkey_recipes::Lease,
    waited: crossbeam_channel::Receiver<Result<Option<latchkey_recipes::Lease>>>,
}

impl FullSemaphore {
    fn new(prefix: &str) -> FullSemaphore {
        let server = shared_server();
        let s = server.connect_string();
        let (h, w) = (connect(&s, SESSION), connect(&s, SESSION));
        let ctx = Ctx::new(server, &w);
        let path = unique(prefix);
        let held = InterProcessSemaphoreV2::new(&h, &path, 1)
            .unwrap()
            .acquire_timeout(Duration::from_secs(10))
            .unwrap()
            .expect("a free lease");
        let sem = InterProcessSemaphoreV2::new(&w, &path, 1).unwrap();
        let (done, waited) = bounded(1);
        thread::spawn(move || {
            let _ = done.send(sem.acquire_timeout(Duration::from_secs(60)));
        });
        let leases = format!("{path}/leases");
        wait_until(
            Duration::from_secs(10),
            || sorted_children(&h, &leases).len() == 2,
            || ctx.dump(),
        );
        FullSemaphore {
            h,
            w,
            ctx,
            leases,
            held,
            waited,
        }
    }
}

/// An error while a lease waiter lists the leases reaches the caller; it
/// is not taken for the end of the wait's time (`Ok(None)`).
#[test]
fn a_lease_wait_that_fails_is_an_error_not_a_timeout() {
    let full = FullSemaphore::new("/pinned/lease-wait-error");
    // Both lease nodes and their parent go in one step: the waiter's next
    // listing finds no leases path.
    let mut tx = full.h.transaction();
    for child in sorted_children(&full.h, &full.leases) {
        tx = tx.delete(&format!("{}/{child}", full.leases));
    }
    tx.delete(&full.leases).commit().unwrap();
    match full.waited.recv_timeout(CALL_BOUND) {
        Ok(Err(e)) if e.is(ErrorCode::NoNode) => {}
        Ok(other) => panic!(
            "the waiter whose leases path went: {other:?}\n{}",
            full.ctx.dump()
        ),
        Err(_) => panic!(
            "the waiter still waits after {CALL_BOUND:?}\n{}",
            full.ctx.dump()
        ),
    }
}

/// A lease waiter blocks while the semaphore is full: over a second it
/// sends a ping or so, not one attempt after another.
#[test]
fn a_lease_waiter_blocks_while_the_semaphore_is_full() {
    let full = FullSemaphore::new("/pinned/lease-blocks");
    let sent = requests_sent_around(&full.w, || {}, Duration::from_secs(1));
    assert!(
        sent <= 10,
        "the lease waiter sent {sent} requests in 1 s while the semaphore was full\n{}",
        full.ctx.dump()
    );
    assert!(full.waited.try_recv().is_err(), "the wait ended while full");
    drop(full.held);
    match full.waited.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(Some(_))) => {}
        other => panic!(
            "the waiter after the lease was returned: {other:?}\n{}",
            full.ctx.dump()
        ),
    }
}

/// A one-lease semaphore of `c` at a fresh path, used once, and its
/// leases path. `direct` first creates the leases node (and its parent) as
/// plain persistent nodes. The recipe creates them as containers, which
/// ZooKeeper's container manager deletes whenever a check (every 60 s by
/// default) finds them empty, as they are between these tests' steps: the
/// recipe then creates the leases node again, without the ACL a test set,
/// and with a create request that carries the path the proxy waits for.
fn semaphore_with_leases(
    c: &Client,
    direct: &Client,
    prefix: &str,
) -> (Arc<InterProcessSemaphoreV2>, String) {
    let path = unique(prefix);
    let leases = format!("{path}/leases");
    direct
        .create()
        .creating_parents_if_needed()
        .for_path(&leases, &[])
        .expect("create the leases node");
    let sem = Arc::new(InterProcessSemaphoreV2::new(c, &path, 1).unwrap());
    drop(
        sem.acquire_timeout(Duration::from_secs(10))
            .unwrap()
            .expect("a free lease"),
    );
    (sem, leases)
}

/// ZooKeeper falls silent once the semaphore's internal lock is granted,
/// just as the lease is created, or just as the leases are listed: the
/// call's time runs out in that request, which is "not acquired"
/// (`Ok(None)`, as for a wait that reaches its deadline), not an error.
/// After the resume the lease node (created late, or left by the
/// listing) goes.
#[test]
fn a_timed_lease_whose_create_or_listing_gets_no_answer_is_not_acquired() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = patient_client(&proxy);
    let direct = connect(&server.connect_string(), SESSION);
    let ctx = Arc::new(Ctx::new(server, &c));
    let dump = {
        let ctx = Arc::clone(&ctx);
        move || ctx.dump()
    };
    // The semaphore's nodes exist from here on: no parent is created below.
    let (sem, leases) = semaphore_with_leases(&c, &direct, "/pinned/lease-silent");
    let create = format!("{leases}/").into_bytes();
    for (step, bytes) in [("create", create), ("listing", request_path(&leases))] {
        proxy.pause_requests_at(&bytes);
        let sem = Arc::clone(&sem);
        let (got, _) = bounded_call(
            "acquire_timeout with ZooKeeper silent from the lease on",
            move || {
                sem.acquire_timeout(Duration::from_millis(1500))
                    .map(|lease| lease.is_some())
            },
            &dump,
        );
        assert!(
            matches!(got, Ok(false)),
            "silent from the lease's {step} on: want Ok(None), got {got:?}\n{}",
            dump()
        );
        proxy.resume();
        wait_empty(&direct, &leases, &dump);
    }
    c.close();
}

/// A lease create or listing that ZooKeeper refuses is an error, not "not
/// acquired": the leases node lets nobody create, then nobody read.
#[test]
fn a_timed_lease_whose_create_or_listing_is_refused_is_an_error() {
    use latchkey_framework::{Acl, Perms};
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION);
    let ctx = Ctx::new(server, &c);
    // The semaphore's nodes exist from here on: no parent is created below.
    let (sem, leases) = semaphore_with_leases(&c, &c, "/pinned/lease-refused");
    let steps = [
        ("create", Perms::READ | Perms::ADMIN),
        ("listing", Perms::CREATE | Perms::DELETE | Perms::ADMIN),
    ];
    for (step, perms) in steps {
        c.set_acl(&leases, &[Acl::new(perms, "world", "anyone")], None)
            .unwrap();
        let got = sem
            .acquire_timeout(Duration::from_secs(10))
            .map(|lease| lease.is_some());
        assert!(
            matches!(&got, Err(e) if e.is(ErrorCode::NoAuth)),
            "the lease's {step} refused: want NoAuth, got {got:?}\n{}",
            ctx.dump()
        );
        c.set_acl(&leases, &Acl::open_unsafe(), None).unwrap();
        wait_empty(&c, &leases, || ctx.dump());
    }
    c.close();
}

/// A lease whose node another client deletes between its create and the
/// listing that follows (ZooKeeper held silent at that listing while the
/// test deletes it) queues again while the retry policy allows, like a
/// lock node that vanishes: a timed acquire then gets the lease, and an
/// untimed one whose node vanishes at every attempt gives up after the
/// policy's retries, with an error.
#[test]
fn a_lease_node_that_keeps_vanishing_queues_again_then_gives_up() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = client_with(
        &proxy.connect_string(),
        RetryNTimes::new(2, Duration::from_millis(100)),
    );
    let direct = connect(&server.connect_string(), SESSION);
    let ctx = Arc::new(Ctx::new(server, &c));
    // The semaphore's nodes exist from here on: no parent is created below.
    let (sem, leases) = semaphore_with_leases(&c, &direct, "/pinned/lease-vanishing");
    let (done, result) = bounded(1);
    let listing = request_path(&leases);
    // Deletes the lease node of the next `times` attempts, each while its
    // listing is held, then lets the call go on. The first attempt's mark
    // is set before the call starts (a call started first could list the
    // leases before the mark is set); each later one right after the
    // resume, while the call sleeps out its retry policy's 100 ms.
    let vanish = |times: usize| {
        for attempt in 0..times {
            if attempt > 0 {
                proxy.pause_requests_at(&listing);
            }
            wait_until(
                CALL_BOUND,
                || proxy.requests_paused(),
                || format!("attempt {attempt} never listed the leases\n{}", ctx.dump()),
            );
            for child in sorted_children(&direct, &leases) {
                direct
                    .delete()
                    .for_path(&format!("{leases}/{child}"))
                    .expect("delete the lease node");
            }
            proxy.resume();
        }
    };
    proxy.pause_requests_at(&listing);
    {
        let (sem, done) = (Arc::clone(&sem), done.clone());
        thread::spawn(move || {
            let got = sem.acquire_timeout(Duration::from_secs(60));
            let _ = done.send(got.map(|lease| lease.is_some()));
        });
    }
    vanish(1);
    match result.recv_timeout(CALL_BOUND) {
        Ok(Ok(true)) => {}
        other => panic!(
            "a timed acquire whose node vanished once: {other:?}\n{}",
            ctx.dump()
        ),
    }
    wait_empty(&direct, &leases, || ctx.dump());
    proxy.pause_requests_at(&listing);
    {
        let sem = Arc::clone(&sem);
        thread::spawn(move || {
            let _ = done.send(sem.acquire().map(|_| true));
        });
    }
    // The first attempt and the policy's two retries.
    vanish(3);
    match result.recv_timeout(CALL_BOUND) {
        Ok(Err(Error::IllegalState(_))) => {}
        other => panic!(
            "an acquire whose node vanished at every attempt: {other:?}\n{}",
            ctx.dump()
        ),
    }
    wait_empty(&direct, &leases, || ctx.dump());
    c.close();
}

/// An acquire with a token cancelled already fails with `Cancelled` at
/// once, as a later call of a cancelled operation does, and sends nothing:
/// no node is created, nothing is left to clean up.
#[test]
fn an_acquire_with_a_cancelled_token_fails_without_a_request() {
    let c = connect(&shared_server().connect_string(), SESSION);
    let path = unique("/pinned/cancelled-first");
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let cancel = CancelToken::new();
    cancel.cancel();
    let before = c.metrics().requests_sent;
    let got = mutex.acquire_cancellable(Duration::from_secs(5), &cancel);
    assert!(matches!(got, Err(Error::Cancelled)), "{got:?}");
    let sent = c.metrics().requests_sent - before;
    assert_eq!(sent, 0, "a cancelled acquire sent requests");
    assert!(
        c.exists(&path).unwrap().is_none(),
        "a cancelled acquire left {path}"
    );
}

//! Whatever may wake a lock waiter must wake it at once: a close, a cut,
//! a shared watch, a failed arming, a semaphore beside a mutex, TLS.
//! Written when non-cancellable waiters read their client's connection
//! themselves (a read waited 5 s at most); the engine now reads for every
//! waiter, and these pin that it still wakes each at once. Each test
//! times the waiter from the wake to its return.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use latchkey_framework::{CancelToken, Client, Error, ExponentialBackoffRetry, TlsConfig};
use latchkey_recipes::{InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2};
use latchkey_test::{ClientAuth, FaultProxy, ServerConfig, TestCerts, TestingServer};

use common::{
    call_within, connect, shared_server, start_connected, unique, wait_for_a_watch, wait_until,
    Watchdog,
};

const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// A wake that comes at once takes well under this; one that waited on
/// the socket for the read's 5 s cap takes more.
const PROMPT: Duration = Duration::from_millis(2500);

fn warm_up(c: &Client) {
    for _ in 0..5 {
        c.get_data("/").unwrap();
    }
}

/// The client of a waiter reading its connection closes: the acquire
/// (which has no timeout) ends with `Closed` at once.
#[test]
fn closing_the_client_of_a_reading_waiter_ends_its_acquire_at_once() {
    let server = shared_server();
    let holder = connect(&server.connect_string(), SESSION_TIMEOUT);
    let waiter = connect(&server.connect_string(), SESSION_TIMEOUT);
    warm_up(&waiter);
    let path = unique("/lock_waiter_reads/close");
    let held = InterProcessMutex::new(&holder, &path).unwrap();
    assert!(held.acquire_timeout(Duration::from_secs(10)).unwrap());
    let waiting = InterProcessMutex::new(&waiter, &path).unwrap();
    let acquire = thread::spawn(move || waiting.acquire());
    wait_for_a_watch(&waiter);
    let started = Instant::now();
    waiter.close();
    let got = call_within("the acquire", Duration::from_secs(10), move || {
        acquire.join().unwrap()
    });
    let took = started.elapsed();
    assert!(
        matches!(got, Err(Error::Closed)),
        "the acquire ended with {got:?}"
    );
    assert!(took < PROMPT, "the acquire ended {took:?} after the close");
    held.release().unwrap();
}

/// The connection of a waiter with no deadline (`Duration::MAX`) is cut
/// while it reads; after the reconnection, the holder's release still
/// reaches it at once.
#[test]
fn a_waiter_with_no_deadline_whose_connection_is_cut_gets_the_lock_at_once() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let holder = connect(&server.connect_string(), SESSION_TIMEOUT);
    let waiter = connect(&proxy.connect_string(), SESSION_TIMEOUT);
    warm_up(&waiter);
    let path = unique("/lock_waiter_reads/cut");
    let held = InterProcessMutex::new(&holder, &path).unwrap();
    assert!(held.acquire_timeout(Duration::from_secs(10)).unwrap());
    let waiting = InterProcessMutex::new(&waiter, &path).unwrap();
    let acquire = thread::spawn(move || {
        let got = waiting.acquire_timeout(Duration::MAX);
        let at = Instant::now();
        if let Ok(true) = got {
            waiting.release().unwrap();
        }
        (got, at)
    });
    wait_for_a_watch(&waiter);
    proxy.cut();
    wait_until(
        Duration::from_secs(10),
        || waiter.metrics().suspensions > 0 && waiter.state().is_some_and(|s| s.is_connected()),
        || format!("no reconnection: {:?}", waiter.state_history()),
    );
    wait_for_a_watch(&waiter);
    let released = Instant::now();
    held.release().unwrap();
    let (got, at) = call_within("the acquire", Duration::from_secs(10), move || {
        acquire.join().unwrap()
    });
    assert!(matches!(got, Ok(true)), "{got:?}");
    let took = at.saturating_duration_since(released);
    assert!(
        took < PROMPT,
        "the waiter got the lock {took:?} after the release"
    );
}

/// Two readers of one read-write lock object, on one client, behind a
/// writer of another client: they share one watch on the writer's node
/// (one arms it, the other joins), and both get in at once when it goes.
#[test]
fn readers_sharing_a_watch_both_get_in_at_once() {
    let server = shared_server();
    let holder = connect(&server.connect_string(), SESSION_TIMEOUT);
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    warm_up(&c);
    let path = unique("/lock_waiter_reads/readers");
    let writer = InterProcessReadWriteLock::new(&holder, &path).unwrap();
    assert!(writer
        .write_lock()
        .acquire_timeout(Duration::from_secs(10))
        .unwrap());
    let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();
    let _watchdog = Watchdog::new("the readers", Duration::from_secs(30));
    thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let got = rw.read_lock().acquire_timeout(Duration::from_secs(10));
                    let at = Instant::now();
                    if let Ok(true) = got {
                        rw.read_lock().release().unwrap();
                    }
                    (got, at)
                })
            })
            .collect();
        wait_until(
            Duration::from_secs(10),
            || c.get_children(&path).map(|k| k.len()).unwrap_or(0) == 3,
            || "the readers never queued".into(),
        );
        wait_for_a_watch(&c);
        let released = Instant::now();
        writer.write_lock().release().unwrap();
        for r in readers {
            let (got, at) = r.join().unwrap();
            assert!(matches!(got, Ok(true)), "{got:?}");
            let took = at.saturating_duration_since(released);
            assert!(took < PROMPT, "a reader got in {took:?} after the release");
        }
    });
}

/// A reader joins the watch another reader of the same lock object is
/// arming, and waits reading the connection; the arming reader's request
/// fails (the writer's node went between its listing and its watch), so
/// it is the arming reader's thread, not an event, that wakes the joined
/// one, possibly while it sleeps on the socket. It must not sleep there
/// for long: the arming reader's next listing is read by it. A latency
/// proxy spreads the steps out:
///
/// - t = 0: reader 1 (cancellable, so it never reads the connection
///   itself) sends its create and listing;
/// - t = D: reader 2 sends its own, which the server answers at 2D;
/// - t = 2D: reader 1 hears the writer is before it, arms the watch and
///   sends its getData (at the server at 3D);
/// - t = 2.5D: the writer releases (straight to the server);
/// - t = 3D: reader 2 hears the writer, joins reader 1's watch, and
///   waits reading the connection;
/// - t = 4D: reader 1's getData fails with NoNode; reader 2 reads the
///   reply, reader 1 gives up the watch, wakes reader 2 and lists again.
#[test]
fn a_reader_that_joined_a_watch_whose_arming_failed_is_woken_at_once() {
    const D: Duration = Duration::from_millis(200);
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let holder = connect(&server.connect_string(), SESSION_TIMEOUT);
    let c = connect(&proxy.connect_string(), SESSION_TIMEOUT);
    warm_up(&c);
    let path = unique("/lock_waiter_reads/joined");
    let writer = InterProcessReadWriteLock::new(&holder, &path).unwrap();
    assert!(writer
        .write_lock()
        .acquire_timeout(Duration::from_secs(10))
        .unwrap());
    let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();
    proxy.set_delay(D);
    let sent = c.metrics().requests_sent;
    let token = CancelToken::new();
    let _watchdog = Watchdog::new("the readers", Duration::from_secs(40));
    let timed_read = |cancel: Option<&CancelToken>| {
        let started = Instant::now();
        let lock = rw.read_lock();
        let got = match cancel {
            Some(t) => lock.acquire_cancellable(Duration::from_secs(15), t),
            None => lock.acquire_timeout(Duration::from_secs(15)),
        };
        let took = started.elapsed();
        if let Ok(true) = got {
            lock.release().unwrap();
        }
        (got, took)
    };
    let (timed_read, token) = (&timed_read, &token);
    let (first, second) = thread::scope(|s| {
        let r1 = s.spawn(move || timed_read(Some(token)));
        wait_until(
            Duration::from_secs(10),
            || c.metrics().requests_sent > sent,
            || "reader 1 sent nothing".into(),
        );
        let t0 = Instant::now();
        thread::sleep(D);
        let r2 = s.spawn(move || timed_read(None));
        thread::sleep((t0 + D * 5 / 2).saturating_duration_since(Instant::now()));
        writer.write_lock().release().unwrap();
        (r1.join().unwrap(), r2.join().unwrap())
    });
    proxy.set_delay(Duration::ZERO);
    assert!(matches!(first.0, Ok(true)), "reader 1: {first:?}");
    assert!(matches!(second.0, Ok(true)), "reader 2: {second:?}");
    // About 6 D each (1.2-1.6 s seen): two round trips, then another
    // listing; a wake slept through on the socket adds up to 5 s.
    assert!(
        second.1 < PROMPT && first.1 < PROMPT,
        "reader 1 took {:?}, reader 2 {:?}: {:?}",
        first.1,
        second.1,
        c.metrics()
    );
}

/// Over TLS a lock waiter is woken by the engine at once, as over TCP.
#[test]
fn over_tls_a_waiter_is_woken_at_once() {
    let certs = TestCerts::generate().unwrap();
    let server = TestingServer::start_with(ServerConfig::default().tls(&certs, ClientAuth::None))
        .expect("start a TLS ZooKeeper");
    let secure = server.secure_connect_string().expect("server serves TLS");
    let tls_client = || {
        start_connected(
            Client::builder()
                .connect_string(&secure)
                .session_timeout(SESSION_TIMEOUT)
                .connection_timeout(Duration::from_secs(5))
                .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 10))
                .tls(TlsConfig::new(certs.ca_file())),
        )
    };
    let (holder, waiter) = (tls_client(), tls_client());
    warm_up(&waiter);
    let path = unique("/lock_waiter_reads/tls");
    let held = InterProcessMutex::new(&holder, &path).unwrap();
    assert!(held.acquire_timeout(Duration::from_secs(10)).unwrap());
    let waiting = InterProcessMutex::new(&waiter, &path).unwrap();
    let acquire = thread::spawn(move || {
        let got = waiting.acquire_timeout(Duration::from_secs(15));
        let at = Instant::now();
        if let Ok(true) = got {
            waiting.release().unwrap();
        }
        (got, at)
    });
    wait_for_a_watch(&waiter);
    let released = Instant::now();
    held.release().unwrap();
    let (got, at) = call_within("the acquire", Duration::from_secs(20), move || {
        acquire.join().unwrap()
    });
    assert!(matches!(got, Ok(true)), "{got:?}");
    let took = at.saturating_duration_since(released);
    assert!(
        took < PROMPT,
        "the waiter got the lock {took:?} after the release"
    );
}

/// A semaphore waiter and a mutex waiter on one client: the mutex waiter
/// reads the connection, so the semaphore's event (its waker) is read and
/// run on the mutex waiter's thread; the semaphore waiter must still get
/// its lease at once, and the mutex waiter its lock after.
#[test]
fn a_semaphore_waiter_beside_a_reading_mutex_waiter_gets_in_at_once() {
    let server = shared_server();
    let holder = connect(&server.connect_string(), SESSION_TIMEOUT);
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    warm_up(&c);
    let base = unique("/lock_waiter_reads/beside");
    let (mutex_path, sem_path) = (format!("{base}/mutex"), format!("{base}/sem"));
    let held = InterProcessMutex::new(&holder, &mutex_path).unwrap();
    assert!(held.acquire_timeout(Duration::from_secs(10)).unwrap());
    let sem = InterProcessSemaphoreV2::new(&holder, &sem_path, 1).unwrap();
    let lease = sem
        .acquire_timeout(Duration::from_secs(10))
        .unwrap()
        .expect("the holder's lease");
    let waiting_mutex = InterProcessMutex::new(&c, &mutex_path).unwrap();
    let waiting_sem = InterProcessSemaphoreV2::new(&c, &sem_path, 1).unwrap();
    let _watchdog = Watchdog::new("the waiters", Duration::from_secs(40));
    thread::scope(|s| {
        let m = s.spawn(|| {
            let got = waiting_mutex.acquire_timeout(Duration::from_secs(15));
            let at = Instant::now();
            if let Ok(true) = got {
                waiting_mutex.release().unwrap();
            }
            (got, at)
        });
        let l = s.spawn(|| {
            let got = waiting_sem.acquire_timeout(Duration::from_secs(15));
            (got.map(|l| l.is_some()), Instant::now())
        });
        wait_until(
            Duration::from_secs(10),
            || c.pending_watches() >= 2,
            || format!("the waiters set no watches: {}", c.pending_watches()),
        );
        let released = Instant::now();
        drop(lease);
        let (got, at) = l.join().unwrap();
        assert!(matches!(got, Ok(true)), "semaphore: {got:?}");
        let took = at.saturating_duration_since(released);
        assert!(took < PROMPT, "the lease came {took:?} after the release");
        let released = Instant::now();
        held.release().unwrap();
        let (got, at) = m.join().unwrap();
        assert!(matches!(got, Ok(true)), "mutex: {got:?}");
        let took = at.saturating_duration_since(released);
        assert!(took < PROMPT, "the lock came {took:?} after the release");
    });
}

/// The session of a waiter that was reading is lost (a partition longer
/// than the session timeout): its acquire ends as soon as the client
/// declares the session `Lost`, with the node's session gone, not at its
/// deadline.
///
/// Fails before and after the waiter-read change alike (not a fault of
/// it): the acquire returns `Ok(false)` at its 30 s deadline, 28 s after
/// `Lost`, because `wait_for_lock` only gives up its node when
/// `session_id()` changes, which needs a new session, which the
/// partition prevents (with `acquire()` it waits until the partition
/// heals). Curator's waiter is woken by the disconnection, lists again
/// and fails with the connection's loss once its retry policy gives up.
/// Ignored until the wanted behaviour is decided (it also takes 30 s).
#[test]
#[ignore = "pre-existing: a waiter whose session is Lost waits to its deadline; behaviour to decide"]
fn a_waiter_whose_session_is_lost_ends_its_acquire_at_once() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let holder = connect(&server.connect_string(), SESSION_TIMEOUT);
    let waiter = connect(&proxy.connect_string(), Duration::from_secs(2));
    warm_up(&waiter);
    let path = unique("/lock_waiter_reads/lost");
    let held = InterProcessMutex::new(&holder, &path).unwrap();
    assert!(held.acquire_timeout(Duration::from_secs(10)).unwrap());
    let waiting = InterProcessMutex::new(&waiter, &path).unwrap();
    let acquire = thread::spawn(move || {
        let got = waiting.acquire_timeout(Duration::from_secs(30));
        (got, Instant::now())
    });
    wait_for_a_watch(&waiter);
    let lost = waiter.listen();
    proxy.pause();
    let lost_at = {
        let until = Instant::now() + Duration::from_secs(15);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match lost.recv_timeout(left) {
                Ok(latchkey_framework::ConnectionState::Lost) => break Instant::now(),
                Ok(_) => {}
                Err(_) => panic!("never Lost: {:?}", waiter.state_history()),
            }
        }
    };
    let (got, at) = call_within("the acquire", Duration::from_secs(35), move || {
        acquire.join().unwrap()
    });
    proxy.resume();
    assert!(
        !matches!(got, Ok(true)),
        "acquired with a lost session: {got:?}"
    );
    let took = at.saturating_duration_since(lost_at);
    assert!(
        took < PROMPT,
        "the acquire ended {took:?} after Lost ({got:?}): {:?}",
        waiter.state_history()
    );
    held.release().unwrap();
}

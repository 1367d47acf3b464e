//! Acceptance tests for the wire engine: two promises a call makes
//! whatever the connection does underneath.
//!
//! - **Deadlines hold on a stalled server.** A server that completes the
//!   handshake and then neither reads nor writes lets one large write fill
//!   the socket buffers and block. Every other call with a deadline, every
//!   timed recipe acquire, `close()` and the getters must still return on
//!   time: nothing may wait, unbounded, behind the stuck write. The session
//!   and connection timeouts are long (30 s, 10 s) so that silence
//!   detection cannot rescue a call within the test's bounds.
//! - **One call, one effect.** When a reply comes later than the per-attempt
//!   timeout (the connection timeout, 1 s here) but before the call's
//!   deadline, the call must not have been sent twice: one sequential
//!   create makes one node, one watch registration is one watch, a
//!   versioned write reports its own success, and a call that returned an
//!   error leaves no live watch behind. The replies are held back by a
//!   [`FaultProxy`] in front of a real ZooKeeper; the effects are checked
//!   with a second client connected to ZooKeeper directly.
//!
//! No test hangs if the client is broken: each call runs on a thread of its
//! own and the test gives up after a bound, with what it saw.

mod common;

use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver};
use latchkey_framework::{
    AddWatchMode, Client, ConnectionState, CreateMode, ErrorCode, EventType, RetryForever,
    WatchedEvent, WatcherType,
};
use latchkey_recipes::{
    InterProcessMultiLock, InterProcessMutex, InterProcessReadWriteLock,
    InterProcessSemaphoreMutex, InterProcessSemaphoreV2, REQUEST_GRACE,
};
use latchkey_test::fake_server::{AfterHandshake, FakeServer, Script};
use latchkey_test::FaultProxy;

use common::{shared_server, start_connected, unique, wait_until, Watchdog};

// ---------------------------------------------------------------------------
// A. A stalled server: deadlines hold.
// ---------------------------------------------------------------------------

/// The stalled client's session timeout: silence detection (2/3 of it)
/// comes far too late to rescue any call under test.
const STALL_SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// The stalled client's connection timeout (a write may block this long).
const STALL_CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// The size of the write that gets stuck: far more than the socket
/// buffers take while the server reads nothing. On Linux loopback they
/// take over 4 MB (a 900 KB write goes through whole), so the write is
/// 16 MiB and the client's request limit is raised to let it out (the
/// fake reads nothing, so it enforces no jute.maxbuffer).
const BIG_WRITE: usize = 16 << 20;
/// The deadline of each call made behind the stuck write.
const SHORT_DEADLINE: Duration = Duration::from_millis(500);
/// When a call with [`SHORT_DEADLINE`] must have returned.
const SHORT_DEADLINE_BOUND: Duration = Duration::from_millis(1100);
/// What a timed recipe call (or a getter) may overrun its bound by on a
/// loaded 2-core machine (as in `deadlines.rs`).
const SLACK: Duration = Duration::from_millis(300);
/// When the test stops waiting for calls stuck behind the write,
/// reporting those that did not return (an engine that frees them only
/// when silence detection drops the connection does so 20 s in).
const GIVE_UP: Duration = Duration::from_secs(30);

/// A client whose connection is stalled: the fake server answered the
/// handshake and then reads and writes nothing, and a 16 MiB `set_data`
/// with no deadline is stuck writing on it. Dropping it stops the fake
/// (which breaks the stuck write) and closes the client on a thread of its
/// own, so a broken client cannot hang the test's end.
struct Stalled {
    fake: Option<FakeServer>,
    client: Client,
    /// The stuck write's outcome, if it ever ends.
    big: Receiver<(String, Duration)>,
}

impl Stalled {
    /// Connects a client to a serving fake, runs `prepare` on it, then
    /// moves it to a stalled connection and starts the big write.
    fn new(prepare: impl FnOnce(&Client)) -> Stalled {
        let fake = FakeServer::start(Script::default()).expect("start the fake server");
        let client = start_connected(
            Client::builder()
                .connect_string(fake.connect_string())
                .session_timeout(STALL_SESSION_TIMEOUT)
                .connection_timeout(STALL_CONNECTION_TIMEOUT)
                .retry_policy(RetryForever::new(Duration::from_millis(100)))
                .max_request_size(2 * BIG_WRITE),
        );
        prepare(&client);
        // Every connection from now on stalls after its handshake; cut the
        // serving one so that the client moves to a stalled one.
        let states = client.listen();
        fake.update(|s| s.after_handshake = AfterHandshake::Stall);
        fake.cut();
        let by = Instant::now() + Duration::from_secs(15);
        loop {
            match states.recv_deadline(by) {
                Ok(ConnectionState::Reconnected) => break,
                Ok(_) => {}
                Err(_) => panic!(
                    "no reconnect to the stalled fake within 15 s: {:?}",
                    client.state_history()
                ),
            }
        }
        assert!(
            fake.seen().handshakes.len() >= 2,
            "the client did not hand-shake again: {:?}",
            fake.seen().handshakes
        );
        let (tx, big) = bounded(1);
        let writer = client.clone();
        thread::spawn(move || {
            let started = Instant::now();
            let result = writer.set_data("/big", &vec![7u8; BIG_WRITE], None);
            let _ = tx.send((format!("{result:?}"), started.elapsed()));
        });
        // Nothing tells when a write blocks (the fake reads nothing, and
        // an engine may count a request as sent when it queues it); the
        // write is four times what the buffers take, and one that was not
        // stuck after this long would have failed by now.
        if let Ok((result, took)) = big.recv_timeout(Duration::from_millis(500)) {
            panic!("the {BIG_WRITE}-byte write did not stall: {result} after {took:?}");
        }
        Stalled {
            fake: Some(fake),
            client,
            big,
        }
    }

    /// What to print on failure.
    fn dump(&self) -> String {
        format!(
            "big write: {}\nclient states: {:?}\nmetrics: {:?}",
            match self.big.try_recv() {
                Ok((result, took)) => format!("ended after {took:?} with {result}"),
                Err(_) => "still stuck".into(),
            },
            self.client.state_history(),
            self.client.metrics()
        )
    }
}

impl Drop for Stalled {
    fn drop(&mut self) {
        // Stopping the fake ends the stalled connection (and its stuck write).
        drop(self.fake.take());
        let client = self.client.clone();
        thread::spawn(move || client.close());
    }
}

/// A call to time: its name and what it does (`Ok` if it succeeded).
type Timed = (&'static str, Box<dyn FnOnce() -> Result<(), String> + Send>);

/// A timed call's name, outcome and how long it took.
type Timing = (&'static str, Result<(), String>, Duration);

/// Runs every call at once, each on a thread of its own; returns the
/// timings of those that returned within [`GIVE_UP`], and the names of
/// those that did not.
fn time_all(calls: Vec<Timed>) -> (Vec<Timing>, Vec<&'static str>) {
    let names: Vec<&'static str> = calls.iter().map(|(n, _)| *n).collect();
    let (tx, rx) = unbounded();
    for (name, call) in calls {
        let tx = tx.clone();
        thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let started = Instant::now();
                let outcome = call();
                let _ = tx.send((name, outcome, started.elapsed()));
            })
            .expect("spawn");
    }
    let give_up = Instant::now() + GIVE_UP;
    let mut done = Vec::new();
    while done.len() < names.len() {
        match rx.recv_deadline(give_up) {
            Ok(one) => done.push(one),
            Err(_) => break,
        }
    }
    let missing = names
        .into_iter()
        .filter(|n| !done.iter().any(|(d, _, _)| d == n))
        .collect();
    (done, missing)
}

/// Prints how long each call took (for `--nocapture`).
fn report(done: &[Timing]) {
    for (name, outcome, took) in done {
        eprintln!("{name}: {took:?} -> {outcome:?}");
    }
}

/// The node whose watch A1 removes.
const WATCHED: &str = "/watched";

/// A1: behind a write stuck on a stalled server, every call with a 500 ms
/// deadline fails within 1.1 s.
#[test]
fn calls_with_a_deadline_return_on_time_behind_a_stuck_write() {
    let _watchdog = Watchdog::new("calls behind a stuck write", Duration::from_secs(120));
    // A watch this client holds, so that remove_watches has one to remove
    // on the server (the fake answers exists with NoNode: an exist watch).
    let stalled = Stalled::new(|c| {
        c.exists_watch(WATCHED, |_| {}).expect("watch /watched");
    });
    let c = &stalled.client;
    let bounded_client = |c: &Client| c.with_timeout(SHORT_DEADLINE);
    let call = |name: &'static str, f: fn(&Client) -> Result<(), latchkey_framework::Error>| {
        let c = c.clone();
        let call: Timed = (
            name,
            Box::new(move || f(&bounded_client(&c)).map_err(|e| e.to_string())),
        );
        call
    };
    let calls = vec![
        call("get_data", |c| c.get_data("/a").map(drop)),
        call("exists", |c| c.exists("/a").map(drop)),
        call("set_data", |c| c.set_data("/a", b"small", None).map(drop)),
        call("create", |c| c.create().for_path("/b", b"").map(drop)),
        call("get_children", |c| c.get_children("/").map(drop)),
        call("add_watch", |c| {
            c.add_watch("/c", AddWatchMode::Persistent, |_| {})
        }),
        call("get_data_watch", |c| {
            c.get_data_watch("/d", |_| {}).map(drop)
        }),
        call("remove_watches", |c| {
            c.remove_watches(WATCHED, WatcherType::Data)
        }),
    ];
    let (done, missing) = time_all(calls);
    report(&done);
    let mut failures: Vec<String> = done
        .iter()
        .filter(|(_, outcome, took)| outcome.is_ok() || *took > SHORT_DEADLINE_BOUND)
        .map(|(name, outcome, took)| format!("{name}: {took:?} -> {outcome:?}"))
        .collect();
    failures.extend(
        missing
            .iter()
            .map(|name| format!("{name}: did not return within {GIVE_UP:?}")),
    );
    assert!(
        failures.is_empty(),
        "with a {BIG_WRITE}-byte write stuck on a stalled server, calls with a {SHORT_DEADLINE:?} \
         deadline did not fail within {SHORT_DEADLINE_BOUND:?}:\n  {}\nall: {done:?}\n{}",
        failures.join("\n  "),
        stalled.dump()
    );
}

/// The recipes of A2, built before the stall.
struct Recipes {
    mutex: InterProcessMutex,
    rw: InterProcessReadWriteLock,
    sem: InterProcessSemaphoreV2,
    sem_mutex: InterProcessSemaphoreMutex,
    multi: InterProcessMultiLock,
}

/// A2: behind a write stuck on a stalled server, timed recipe acquires
/// with a 500 ms timeout return, not holding, within max(500 ms,
/// REQUEST_GRACE) + 300 ms.
#[test]
fn timed_recipe_acquires_return_on_time_behind_a_stuck_write() {
    let _watchdog = Watchdog::new("recipes behind a stuck write", Duration::from_secs(120));
    let recipes = Arc::new(parking_lot::Mutex::new(None));
    let stalled = Stalled::new(|c| {
        let base = unique("/engine-recipes");
        let p = |name: &str| format!("{base}/{name}");
        *recipes.lock() = Some(Recipes {
            mutex: InterProcessMutex::new(c, &p("mutex")).unwrap(),
            rw: InterProcessReadWriteLock::new(c, &p("rw")).unwrap(),
            sem: InterProcessSemaphoreV2::new(c, &p("sem"), 2).unwrap(),
            sem_mutex: InterProcessSemaphoreMutex::new(c, &p("sem-mutex")).unwrap(),
            multi: InterProcessMultiLock::from_paths(c, &[&p("m1"), &p("m2")]).unwrap(),
        });
    });
    let recipes = Arc::new(recipes.lock().take().expect("recipes built"));
    // Ok(()) means "did not take it": the assertion below wants Ok.
    let call = |name: &'static str, f: fn(&Recipes) -> bool| {
        let r = Arc::clone(&recipes);
        let call: Timed = (
            name,
            Box::new(move || match f(&r) {
                true => Err("took the lock".into()),
                false => Ok(()),
            }),
        );
        call
    };
    let t = SHORT_DEADLINE;
    let calls = vec![
        call("mutex.try_lock_for", |r| {
            matches!(r.mutex.try_lock_for(SHORT_DEADLINE), Ok(Some(_)))
        }),
        call("semaphore.acquire_timeout", |r| {
            matches!(r.sem.acquire_timeout(SHORT_DEADLINE), Ok(Some(_)))
        }),
        call("read_lock.try_lock_for", |r| {
            matches!(r.rw.read_lock().try_lock_for(SHORT_DEADLINE), Ok(Some(_)))
        }),
        call("write_lock.try_lock_for", |r| {
            matches!(r.rw.write_lock().try_lock_for(SHORT_DEADLINE), Ok(Some(_)))
        }),
        call("semaphore_mutex.try_lock_for", |r| {
            matches!(r.sem_mutex.try_lock_for(SHORT_DEADLINE), Ok(Some(_)))
        }),
        call("multi_lock.try_lock_for", |r| {
            matches!(r.multi.try_lock_for(SHORT_DEADLINE), Ok(Some(_)))
        }),
    ];
    let allowed = t.max(REQUEST_GRACE) + SLACK;
    let (done, missing) = time_all(calls);
    report(&done);
    let mut failures: Vec<String> = done
        .iter()
        .filter(|(_, outcome, took)| outcome.is_err() || *took > allowed)
        .map(|(name, outcome, took)| {
            let what = outcome
                .as_ref()
                .map_or_else(String::clone, |()| "not holding".into());
            format!("{name}: {took:?} -> {what}")
        })
        .collect();
    failures.extend(
        missing
            .iter()
            .map(|name| format!("{name}: did not return within {GIVE_UP:?}")),
    );
    assert!(
        failures.is_empty(),
        "with a {BIG_WRITE}-byte write stuck on a stalled server, timed acquires with a {t:?} \
         timeout did not return (not holding) within {allowed:?}:\n  {}\nall: {done:?}\n{}",
        failures.join("\n  "),
        stalled.dump()
    );
}

/// A3: `close()` while a write is stuck returns within min(connection
/// timeout, 1 s) + 500 ms, and a getter called while the close is under
/// way returns within 100 ms (+ slack): getters never wait on a close.
#[test]
fn close_and_getters_return_on_time_behind_a_stuck_write() {
    let _watchdog = Watchdog::new("close behind a stuck write", Duration::from_secs(120));
    let stalled = Stalled::new(|_| {});
    let close_bound =
        STALL_CONNECTION_TIMEOUT.min(Duration::from_secs(1)) + Duration::from_millis(500);
    let getter_bound = Duration::from_millis(100) + SLACK;
    let (closed_tx, closed_rx) = bounded(1);
    let closer = stalled.client.clone();
    let close_started = Instant::now();
    thread::spawn(move || {
        let started = Instant::now();
        closer.close();
        let _ = closed_tx.send(started.elapsed());
    });
    // close() marks the client closed first: from then on it is under way.
    wait_until(
        Duration::from_secs(5),
        || stalled.client.is_closed(),
        || format!("close() did not start\n{}", stalled.dump()),
    );
    let (getter_tx, getter_rx) = bounded(1);
    let getter = stalled.client.clone();
    let close_running = closed_rx.is_empty();
    thread::spawn(move || {
        let started = Instant::now();
        let id = getter.session_id();
        let _ = getter_tx.send((id, started.elapsed()));
    });
    let getter_took = getter_rx.recv_timeout(GIVE_UP).ok();
    let close_took = closed_rx.recv_timeout(GIVE_UP.saturating_sub(close_started.elapsed()));
    eprintln!("close() took {close_took:?}; session_id() during it {getter_took:?}");
    let mut failures = Vec::new();
    match close_took {
        Ok(took) if took <= close_bound => {}
        Ok(took) => failures.push(format!("close() took {took:?} (bound {close_bound:?})")),
        Err(_) => failures.push(format!("close() did not return within {GIVE_UP:?}")),
    }
    match getter_took {
        Some((_, took)) if took <= getter_bound => {}
        Some((id, took)) => failures.push(format!(
            "session_id() during close() took {took:?} (bound {getter_bound:?}), returned {id:#x}; \
             close() was {}running when it was called",
            if close_running { "" } else { "no longer " }
        )),
        None => failures.push(format!(
            "session_id() during close() did not return within {GIVE_UP:?}"
        )),
    }
    assert!(
        failures.is_empty(),
        "with a {BIG_WRITE}-byte write stuck on a stalled server:\n  {}\n{}",
        failures.join("\n  "),
        stalled.dump()
    );
}

// ---------------------------------------------------------------------------
// B. Late replies: one call, one effect.
// ---------------------------------------------------------------------------

/// The client's connection timeout, which is also how long one attempt
/// waits for its reply.
const LATE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// How long replies are held back: longer than one attempt's wait, far
/// shorter than silence detection (2/3 of the 20 s session timeout).
const REPLY_DELAY: Duration = Duration::from_millis(1300);
/// The deadline of a call whose reply is late: long enough for the reply.
const CALL_DEADLINE: Duration = Duration::from_secs(10);
/// How long to wait after the last expected callback for an extra one.
/// Nothing can prove a callback will never come; this bounds the look.
const QUIET: Duration = Duration::from_millis(500);

/// A client of the shared server through its own proxy (whose replies a
/// test holds back), and a second client connected directly, which sees
/// the calls' effects and makes the changes.
struct LateReplies {
    proxy: FaultProxy,
    client: Client,
    direct: Client,
}

/// Resumes the proxy when dropped, also when a test fails while replies
/// are held back.
struct ResumeOnDrop<'a>(&'a FaultProxy);

impl Drop for ResumeOnDrop<'_> {
    fn drop(&mut self) {
        self.0.resume();
    }
}

impl LateReplies {
    fn new() -> LateReplies {
        let server = shared_server();
        let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
        let client = start_connected(
            Client::builder()
                .connect_string(proxy.connect_string())
                .session_timeout(Duration::from_secs(20))
                .connection_timeout(LATE_CONNECTION_TIMEOUT)
                .retry_policy(RetryForever::new(Duration::from_millis(100))),
        );
        let direct = common::connect(&server.connect_string(), Duration::from_secs(20));
        LateReplies {
            proxy,
            client,
            direct,
        }
    }

    fn dump(&self) -> String {
        format!(
            "client states: {:?}\nmetrics: {:?}\npending watches: {}",
            self.client.state_history(),
            self.client.metrics(),
            self.client.pending_watches()
        )
    }

    /// Runs `call` on the proxied client, on a thread of its own, with the
    /// replies held back from when its first request goes out until
    /// [`REPLY_DELAY`] later; returns its outcome and how long it took.
    fn late<T: Debug + Send + 'static>(
        &self,
        what: &str,
        call: impl FnOnce(&Client) -> T + Send + 'static,
    ) -> (T, Duration) {
        let before = self.client.metrics().requests_sent;
        self.proxy.pause_replies();
        let resume = ResumeOnDrop(&self.proxy);
        let (tx, rx) = bounded(1);
        let c = self.client.clone();
        thread::spawn(move || {
            let started = Instant::now();
            let outcome = call(&c);
            let _ = tx.send((outcome, started.elapsed()));
        });
        wait_until(
            Duration::from_secs(10),
            || self.client.metrics().requests_sent > before,
            || format!("{what} sent no request\n{}", self.dump()),
        );
        // The fault's length, not a synchronisation: the replies stay
        // held back this long after the request went out.
        thread::sleep(REPLY_DELAY);
        drop(resume);
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(done) => done,
            Err(_) => panic!(
                "{what} did not return within 30 s of its replies\n{}",
                self.dump()
            ),
        }
    }

    /// A fresh node (created directly) with version 0.
    fn node(&self, prefix: &str) -> String {
        let path = unique(prefix);
        self.direct
            .create()
            .for_path(&path, b"v0")
            .expect("create the node");
        path
    }

    /// A one-shot data watch on `path` through the proxied client, set
    /// after everything before it was answered: once it fires for a change,
    /// every watch of this client on `path` has had that change's event.
    fn control_watch(&self, path: &str) -> Arc<AtomicUsize> {
        let fired = Arc::new(AtomicUsize::new(0));
        let f = Arc::clone(&fired);
        self.client
            .with_timeout(CALL_DEADLINE)
            .get_data_watch(path, move |_| {
                f.fetch_add(1, Ordering::SeqCst);
            })
            .expect("set the control watch");
        fired
    }

    /// Changes `path`'s data directly and waits until `control` has fired
    /// for it, then a further [`QUIET`] for stragglers.
    fn change_and_settle(&self, path: &str, control: &AtomicUsize, data: &[u8]) {
        let seen = control.load(Ordering::SeqCst);
        self.direct
            .set_data(path, data, None)
            .expect("change the node");
        wait_until(
            Duration::from_secs(10),
            || control.load(Ordering::SeqCst) > seen,
            || format!("the control watch never fired\n{}", self.dump()),
        );
        thread::sleep(QUIET);
    }
}

/// Counts the node events a watcher gets (removal and session events
/// apart).
fn counting() -> (
    Arc<AtomicUsize>,
    impl Fn(WatchedEvent) + Send + Sync + Clone + 'static,
) {
    let n = Arc::new(AtomicUsize::new(0));
    let m = Arc::clone(&n);
    let watcher = move |ev: WatchedEvent| {
        if matches!(
            ev.event_type,
            EventType::NodeCreated
                | EventType::NodeDeleted
                | EventType::NodeDataChanged
                | EventType::NodeChildrenChanged
        ) {
            m.fetch_add(1, Ordering::SeqCst);
        }
    };
    (n, watcher)
}

/// B1: one sequential create whose reply comes late makes one node.
#[test]
fn a_sequential_create_with_a_late_reply_makes_one_node() {
    let t = LateReplies::new();
    let parent = t.node("/engine-seq");
    let prefix = format!("{parent}/n-");
    let (created, took) = t.late("create", move |c| {
        c.with_timeout(CALL_DEADLINE)
            .create()
            .mode(CreateMode::PersistentSequential)
            .for_path(&prefix, b"")
    });
    let children = common::sorted_children(&t.direct, &parent);
    assert!(
        created.is_ok() && children.len() == 1,
        "one sequential create (replies {REPLY_DELAY:?} late) returned {created:?} after \
         {took:?}; {} has {} children: {children:?}\n{}",
        parent,
        children.len(),
        t.dump()
    );
}

/// B2: one persistent watch added with a late reply is one watch: two
/// changes, two callbacks.
#[test]
fn a_persistent_watch_added_with_a_late_reply_fires_once_per_change() {
    let t = LateReplies::new();
    let path = t.node("/engine-add-watch");
    let (fired, watcher) = counting();
    let p = path.clone();
    let (added, took) = t.late("add_watch", move |c| {
        c.with_timeout(CALL_DEADLINE)
            .add_watch(&p, AddWatchMode::Persistent, watcher)
    });
    assert!(
        added.is_ok(),
        "add_watch (reply {REPLY_DELAY:?} late) returned {added:?} after {took:?}\n{}",
        t.dump()
    );
    let watches_after_add = t.client.pending_watches();
    t.direct.set_data(&path, b"v1", None).expect("change 1");
    wait_until(
        Duration::from_secs(10),
        || fired.load(Ordering::SeqCst) >= 1,
        || format!("the watch never fired\n{}", t.dump()),
    );
    let control = t.control_watch(&path);
    t.change_and_settle(&path, &control, b"v2");
    let n = fired.load(Ordering::SeqCst);
    assert_eq!(
        n,
        2,
        "one add_watch (reply {REPLY_DELAY:?} late, returned after {took:?}) then two changes \
         gave {n} callbacks; pending watches after the add: {watches_after_add}\n{}",
        t.dump()
    );
}

/// B3: one data watch set by a read with a late reply is one registration,
/// and fires once.
#[test]
fn a_data_watch_set_with_a_late_reply_is_registered_once() {
    let t = LateReplies::new();
    let path = t.node("/engine-get-watch");
    let (fired, watcher) = counting();
    let p = path.clone();
    let (read, took) = t.late("get_data_watch", move |c| {
        c.with_timeout(CALL_DEADLINE).get_data_watch(&p, watcher)
    });
    let registered = t.client.pending_watches();
    let control = t.control_watch(&path);
    t.change_and_settle(&path, &control, b"v1");
    let n = fired.load(Ordering::SeqCst);
    let left = t.client.pending_watches();
    assert!(
        read.is_ok() && registered == 1 && n == 1 && left == 0,
        "one get_data_watch (reply {REPLY_DELAY:?} late) returned {read:?} after {took:?}; \
         pending watches after it: {registered} (want 1); callbacks for one change: {n} \
         (want 1); pending watches after the change: {left} (want 0)\n{}",
        t.dump()
    );
}

/// B4: a remove_watches whose reply comes late succeeds, and the watch it
/// removed stays removed: after a reconnect a change fires nothing.
#[test]
fn a_watch_removed_with_a_late_reply_stays_removed_after_a_reconnect() {
    let t = LateReplies::new();
    let path = t.node("/engine-remove");
    let (fired, watcher) = counting();
    t.client
        .with_timeout(CALL_DEADLINE)
        .get_data_watch(&path, watcher)
        .expect("set the watch");
    let p = path.clone();
    let (removed, took) = t.late("remove_watches", move |c| {
        c.with_timeout(CALL_DEADLINE)
            .remove_watches(&p, WatcherType::Data)
    });
    let after_remove = t.client.pending_watches();
    // A reconnect re-arms the watches the client believes it holds.
    let states = t.client.listen();
    t.proxy.cut();
    let by = Instant::now() + Duration::from_secs(15);
    loop {
        match states.recv_deadline(by) {
            Ok(ConnectionState::Reconnected) => break,
            Ok(_) => {}
            Err(_) => panic!("no reconnect after the cut\n{}", t.dump()),
        }
    }
    let control = t.control_watch(&path);
    t.change_and_settle(&path, &control, b"v1");
    let n = fired.load(Ordering::SeqCst);
    assert!(
        removed.is_ok() && n == 0,
        "remove_watches (reply {REPLY_DELAY:?} late) returned {removed:?} after {took:?} \
         (want Ok); pending watches after it: {after_remove}; after a reconnect one change \
         fired the removed watch {n} times (want 0)\n{}",
        t.dump()
    );
}

/// B5: an add_watch that returned an error (its deadline passed before the
/// late reply) leaves no live watch: a later change fires nothing.
#[test]
fn an_add_watch_that_failed_leaves_no_watch() {
    let t = LateReplies::new();
    let path = t.node("/engine-failed-watch");
    let (fired, watcher) = counting();
    let p = path.clone();
    let (added, took) = t.late("add_watch", move |c| {
        c.with_timeout(Duration::from_millis(300))
            .add_watch(&p, AddWatchMode::Persistent, watcher)
    });
    assert!(
        added.is_err(),
        "add_watch with a 300 ms deadline (reply {REPLY_DELAY:?} late) returned {added:?} \
         after {took:?}\n{}",
        t.dump()
    );
    // The first round trip's reply comes after the late one, which the
    // client has read by then; the second's comes after whatever the
    // client sent in answer to the late reply (say, a removeWatches).
    for _ in 0..2 {
        t.client
            .with_timeout(CALL_DEADLINE)
            .exists(&path)
            .expect("a round trip");
    }
    let after_reply = t.client.pending_watches();
    let control = t.control_watch(&path);
    t.change_and_settle(&path, &control, b"v1");
    let n = fired.load(Ordering::SeqCst);
    assert_eq!(
        n,
        0,
        "add_watch returned {added:?} after {took:?}, yet a later change fired its watcher \
         {n} times; pending watches once its late reply was in: {after_reply}\n{}",
        t.dump()
    );
}

/// B6: a versioned set_data whose reply comes late reports its own
/// success, not a BadVersion from a second attempt.
#[test]
fn a_versioned_set_data_with_a_late_reply_succeeds() {
    let t = LateReplies::new();
    let path = t.node("/engine-set-version");
    let p = path.clone();
    let (set, took) = t.late("set_data", move |c| {
        c.with_timeout(CALL_DEADLINE).set_data(&p, b"v1", Some(0))
    });
    let version = t.direct.exists(&path).expect("exists").map(|s| s.version);
    let bad_version = matches!(&set, Err(e) if e.is(ErrorCode::BadVersion));
    assert!(
        set.as_ref().is_ok_and(|s| s.version == 1) && version == Some(1),
        "set_data at version 0 (reply {REPLY_DELAY:?} late) returned {set:?} after {took:?}{}; \
         the node's version is {version:?} (want 1)\n{}",
        if bad_version {
            " (BadVersion: its own earlier attempt)"
        } else {
            ""
        },
        t.dump()
    );
}

// ---------------------------------------------------------------------------
// C. Writes larger than the socket takes at once.
// ---------------------------------------------------------------------------

/// Many large writes at once, more than the loopback socket buffers take
/// in one go, so the connection's output is written in parts as the
/// socket drains (`WouldBlock` on the way): every write arrives whole and
/// in order, and the connection is never dropped for it. Mutation testing
/// showed nothing pinned this: a `WouldBlock` taken for an error, or a
/// partly written buffer cleared, passed every other test.
#[test]
fn large_writes_in_parts_arrive_whole_on_one_connection() {
    let _watchdog = Watchdog::new("large writes", Duration::from_secs(120));
    let server = shared_server();
    let c = start_connected(
        Client::builder()
            .connect_string(server.connect_string())
            .session_timeout(Duration::from_secs(30))
            .connection_timeout(Duration::from_secs(10))
            .retry_policy(RetryForever::new(Duration::from_millis(50))),
    );
    let base = unique("/engine-large");
    c.create().for_path(&base, b"").unwrap();
    let writers = 12;
    let rounds = 3;
    let size = 900 * 1024;
    thread::scope(|s| {
        for w in 0..writers {
            let (c, base) = (&c, &base);
            s.spawn(move || {
                let path = format!("{base}/w{w}");
                c.create().for_path(&path, b"").unwrap();
                for round in 0..rounds {
                    let byte = (w * rounds + round) as u8;
                    c.set_data(&path, &vec![byte; size], None)
                        .unwrap_or_else(|e| panic!("set_data {path} round {round}: {e}"));
                }
            });
        }
    });
    for w in 0..writers {
        let path = format!("{base}/w{w}");
        let (data, _) = c.get_data(&path).unwrap();
        let last = (w * rounds + rounds - 1) as u8;
        assert!(
            data.len() == size && data.iter().all(|b| *b == last),
            "{path}: {} bytes, not {size} of {last}",
            data.len()
        );
    }
    let states: Vec<ConnectionState> = c.state_history().into_iter().map(|(_, s)| s).collect();
    assert_eq!(
        states,
        [ConnectionState::Connected],
        "the connection was dropped on the way"
    );
    c.delete()
        .deleting_children_if_needed()
        .for_path(&base)
        .unwrap();
    c.close();
}

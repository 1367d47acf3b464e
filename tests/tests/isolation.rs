//! Isolation of sessions and callers from one another: a caller thread
//! the scheduler starves (a lock waiter made `SCHED_IDLE` on a busy CPU)
//! must not delay its session's other calls or watch events; a user's
//! watcher dropped after its call gave up must not be dropped, and so
//! call the client, on the engine thread that serves every session; idle
//! sessions must not keep waking threads (or need a thread each); a call
//! that gave up must not leave its frame to be sent later, nor be sent
//! at all once its deadline has passed; and the library's threads must
//! not take the scheduling (policy, CPU pinning) of whichever user thread
//! happened to start them. Each test fails within seconds, with its
//! figures, on an engine that does any of this; scheduling is changed with
//! `chrt` and `taskset` and read from `/proc`. Each prints one `ISOLATION`
//! line of figures (`-- --nocapture --test-threads=1 2>&1 | grep ISOLATION`).

mod common;
mod isolation_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use latchkey_framework::{
    AddWatchMode, CancelToken, Client, Error, ErrorCode, EventType, WatcherType,
};
use latchkey_recipes::InterProcessMutex;
use latchkey_test::FaultProxy;

use common::{call_within, connect, patient_client, shared_server, unique, wait_until, StopOnDrop};
use isolation_support::*;

const SESSION: Duration = Duration::from_secs(30);

/// How long a thread spins on the starved CPU at most.
const SPIN_LIMIT: Duration = Duration::from_secs(20);

/// The most the starved session's p99 may be, given the other session's
/// `p99`: twice it, or 20 ms over it if that is more. On a loaded 2-core
/// machine a normal thread's wake-up takes a few ms at worst; a reader
/// running `SCHED_IDLE` behind a busy CPU takes up to hundreds.
fn allowance(p99: Duration) -> Duration {
    (p99 * 2).max(p99 + Duration::from_millis(20))
}

/// Latencies of a run of calls, and the calls that failed.
#[derive(Default)]
struct Samples {
    took: Vec<Duration>,
    failed: Vec<String>,
}

impl Samples {
    fn show(&self) -> String {
        format!(
            "{} ok, p99 {:?}: {}; {} failed: {:?}",
            self.took.len(),
            p99(&self.took),
            show_ms(&self.took),
            self.failed.len(),
            self.failed
        )
    }
}

/// Why `starved` is not comparable with `other`, if it is not: a failure,
/// or a p99 past the [`allowance`].
fn compare(what: &str, starved: &Samples, other: &Samples) -> Option<String> {
    let (Some(s), Some(o)) = (p99(&starved.took), p99(&other.took)) else {
        return Some(format!("{what}: nothing measured"));
    };
    let bad = !starved.failed.is_empty() || !other.failed.is_empty() || s > allowance(o);
    bad.then(|| {
        format!(
            "{what}: the starved waiter's session: {}\n  the other session: {}\n  (p99 allowed: {:?})",
            starved.show(),
            other.show(),
            allowance(o)
        )
    })
}

/// 40 `get_data` calls on `c`, each with a 250 ms deadline.
fn timed_reads(c: &Client, path: &str) -> Samples {
    let mut s = Samples::default();
    for _ in 0..40 {
        let started = Instant::now();
        match c.with_timeout(Duration::from_millis(250)).get_data(path) {
            Ok(_) => s.took.push(started.elapsed()),
            Err(e) => s.failed.push(format!("{e} after {:?}", started.elapsed())),
        }
    }
    s
}

/// A persistent watch on `path` of `c` that sends when each data change
/// reaches its callback.
fn watch_changes(c: &Client, path: &str) -> Receiver<Instant> {
    let (tx, rx) = unbounded();
    c.add_watch(path, AddWatchMode::Persistent, move |ev| {
        if ev.event_type == EventType::NodeDataChanged {
            let _ = tx.send(Instant::now());
        }
    })
    .unwrap();
    rx
}

/// Changes `path` up to 20 times with `writer`, by `until`, and times each
/// change from the write's start until it reaches each watch; stops at the
/// first event missing after 1 s (later ones could not be told apart).
fn timed_events(
    writer: &Client,
    path: &str,
    watches: [&Receiver<Instant>; 2],
    until: Instant,
) -> [Samples; 2] {
    let mut samples = [Samples::default(), Samples::default()];
    for round in 0..20 {
        if Instant::now() >= until {
            break;
        }
        let started = Instant::now();
        writer
            .set_data(path, format!("{round}").as_bytes(), None)
            .unwrap();
        let mut missed = false;
        for (rx, s) in watches.iter().zip(samples.iter_mut()) {
            match rx.recv_deadline(started + Duration::from_secs(1)) {
                Ok(at) => s.took.push(at - started),
                Err(_) => {
                    s.failed.push(format!("round {round}: no event within 1 s"));
                    missed = true;
                }
            }
        }
        if missed {
            break;
        }
    }
    samples
}

/// Spins on `cpu` until `stop` is set, for [`SPIN_LIMIT`] at most.
fn spin_on(cpu: usize, stop: &AtomicBool) {
    pin(tid(), cpu);
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) && started.elapsed() < SPIN_LIMIT {
        std::hint::spin_loop();
    }
}

/// A lock waiter (thread W) made `SCHED_IDLE` and pinned to CPU 1, where
/// a thread spins, must not delay the other calls and the watch events of
/// its session: W waits in `acquire`, and thread M's reads on W's client
/// and the events of its watch come as promptly as a second client's.
#[test]
fn a_starved_lock_waiter_does_not_delay_its_sessions_calls_or_events() {
    let _serial = serial();
    let cs = shared_server().connect_string();
    let (a, b, holder) = (
        connect(&cs, SESSION),
        connect(&cs, SESSION),
        connect(&cs, SESSION),
    );
    let base = unique("/isolation/starved");
    let (lock, data) = (format!("{base}/lock"), format!("{base}/data"));
    holder
        .create()
        .creating_parents_if_needed()
        .for_path(&data, b"")
        .unwrap();
    let held = InterProcessMutex::new(&holder, &lock).unwrap();
    assert!(held.acquire_timeout(Duration::from_secs(10)).unwrap());
    let events = [watch_changes(&a, &data), watch_changes(&b, &data)];
    let watches_before = a.pending_watches();

    let (tid_tx, tid_rx) = bounded(1);
    let (wc, wl) = (a.clone(), lock.clone());
    let waiter = thread::Builder::new()
        .name("starved-waiter".into())
        .spawn(move || {
            let me = tid();
            make_idle_on(me, 1);
            let _ = tid_tx.send(me);
            let m = InterProcessMutex::new(&wc, &wl)?;
            let got = m.acquire_timeout(Duration::from_secs(40))?;
            if got {
                m.release()?;
            }
            Ok::<bool, Error>(got)
        })
        .expect("spawn the waiter");
    let w = tid_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter thread did not start");
    wait_until(
        Duration::from_secs(20),
        || a.pending_watches() > watches_before,
        || format!("the waiter set no watch: {:?}", a.state_history()),
    );
    // Asleep after setting its watch: in its wait.
    wait_until(
        Duration::from_secs(10),
        || sched_of(w).is_some_and(|s| s.state == 'S'),
        || format!("the waiter is not asleep: {:?}", sched_of(w)),
    );

    let waiting = sched_of(w);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let (reads, [ev_a, ev_b]) = thread::scope(|scope| {
        let _stop = StopOnDrop(&stop);
        scope.spawn(|| spin_on(1, &stop));
        let reads = (timed_reads(&a, &data), timed_reads(&b, &data));
        // All measured while the other thread spins.
        let until = started + SPIN_LIMIT - Duration::from_secs(2);
        (
            reads,
            timed_events(&holder, &data, [&events[0], &events[1]], until),
        )
    });
    let measured = started.elapsed();
    held.release().unwrap();
    let waited = call_within("the waiter", Duration::from_secs(20), move || {
        waiter.join().expect("the waiter panicked")
    });
    for c in [&a, &b, &holder] {
        c.close();
    }
    eprintln!(
        "ISOLATION starved-waiter: get_data p99 {:?} (other client {:?}), {} failed; \
         events p99 {:?} (other client {:?}), {} missed",
        p99(&reads.0.took),
        p99(&reads.1.took),
        reads.0.failed.len() + reads.1.failed.len(),
        p99(&ev_a.took),
        p99(&ev_b.took),
        ev_a.failed.len() + ev_b.failed.len()
    );
    let problems: Vec<String> = [
        compare("get_data with 250 ms deadlines", &reads.0, &reads.1),
        compare("data-change events", &ev_a, &ev_b),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(
        problems.is_empty(),
        "measured over {measured:?} (the waiter: {waiting:?}, its acquire: {waited:?}):\n{}",
        problems.join("\n")
    );
    assert!(
        matches!(waited, Ok(true)),
        "the waiter's acquire: {waited:?}"
    );
}

/// What a [`DropProbe`] saw as it was dropped.
#[derive(Debug)]
struct Dropped {
    thread: Option<String>,
    took: Duration,
    result: std::result::Result<bool, String>,
}

/// A value a watcher closure captures: when dropped it calls the client
/// (`exists`, 5 s deadline) and tells where and how that went.
struct DropProbe {
    client: Client,
    path: String,
    report: Sender<Dropped>,
}

impl Drop for DropProbe {
    fn drop(&mut self) {
        let started = Instant::now();
        let result = self
            .client
            .with_timeout(Duration::from_secs(5))
            .exists(&self.path)
            .map(|s| s.is_some())
            .map_err(|e| e.to_string());
        let _ = self.report.send(Dropped {
            thread: thread::current().name().map(str::to_owned),
            took: started.elapsed(),
            result,
        });
    }
}

/// A watcher whose `exists_watch` gave up (its reply held by a proxy past
/// the 300 ms deadline) is dropped when the late reply comes: not on the
/// engine thread, where its `Drop`, which calls the client, would hold up
/// every session. The call in the drop succeeds within 1 s, and another
/// session's calls meanwhile all succeed (cancellable ones, whose replies
/// the engine reads).
#[test]
fn a_watcher_of_a_call_that_gave_up_is_not_dropped_on_the_engine_thread() {
    let _serial = serial();
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let a = patient_client(&proxy);
    let c = connect(&server.connect_string(), SESSION);
    let path = unique("/isolation/dropped_watcher");
    c.create()
        .creating_parents_if_needed()
        .for_path(&path, b"")
        .unwrap();
    let (tx, dropped) = bounded(1);
    let probe = DropProbe {
        client: a.clone(),
        path: path.clone(),
        report: tx,
    };
    // Another session's calls, from before the stall until well after it.
    let other = {
        let (c, path) = (c.clone(), path.clone());
        thread::spawn(move || {
            let cancellable = c.with_cancel(Some(&CancelToken::new()));
            let started = Instant::now();
            let mut failed = Vec::new();
            for i in 0..50u32 {
                if started.elapsed() > Duration::from_secs(20) {
                    break;
                }
                let call = Instant::now();
                if let Err(e) = cancellable
                    .with_timeout(Duration::from_secs(1))
                    .get_data(&path)
                {
                    let code = e.code();
                    failed.push(format!("call {i}: {code:?} after {:?}", call.elapsed()));
                }
                // Spread over 5 s.
                let next = started + Duration::from_millis(100) * (i + 1);
                thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            failed
        })
    };
    proxy.pause_replies();
    let deadline = Duration::from_millis(300);
    // Healed from another thread 200 ms after the call's deadline: an
    // engine that drops the watcher as the call gives up, on the caller's
    // thread, then finds the connection working for the call in the drop.
    let heal_at = Instant::now() + deadline + Duration::from_millis(200);
    let gave_up = thread::scope(|scope| {
        scope.spawn(|| {
            thread::sleep(heal_at.saturating_duration_since(Instant::now()));
            proxy.resume();
        });
        a.with_timeout(deadline).exists_watch(&path, move |_| {
            let _kept = &probe;
        })
    });
    let seen = dropped.recv_timeout(Duration::from_secs(15));
    let other_failed = call_within(
        "the other session's calls",
        Duration::from_secs(30),
        move || other.join().expect("the other session's thread panicked"),
    );
    a.close();
    c.close();

    assert!(
        matches!(&gave_up, Err(e) if e.is(ErrorCode::OperationTimeout)),
        "exists_watch did not give up: {gave_up:?}"
    );
    let seen = seen.expect("the watcher was not dropped within 15 s of the late reply");
    eprintln!(
        "ISOLATION dropped-watcher: dropped on {:?}, its client call {} after {:?}; \
         the other session: {} of 50 calls failed",
        seen.thread,
        if seen.result.is_ok() { "ok" } else { "failed" },
        seen.took,
        other_failed.len()
    );
    let mut problems = Vec::new();
    if seen.thread.as_deref() == Some("latchkey-engine") {
        problems.push("the watcher was dropped on the engine thread".to_owned());
    }
    if seen.result.is_err() || seen.took > Duration::from_secs(1) {
        problems.push(format!(
            "the client call in its drop: {:?} after {:?}",
            seen.result, seen.took
        ));
    }
    if !other_failed.is_empty() {
        problems.push(format!(
            "{} of the other session's calls failed: {other_failed:?}",
            other_failed.len()
        ));
    }
    assert!(
        problems.is_empty(),
        "{}\n(drop seen: {seen:?})",
        problems.join("\n")
    );
}

/// 300 idle sessions (30 s timeouts, so a ping each 10 s) wake the
/// library's threads at most twice per session per ping interval, plus
/// 100, over 10 s (one ping interval, so every session pings in it), and
/// need at most 15 threads. Run in a child process of its own, whose
/// every `latchkey` thread is theirs.
#[test]
fn idle_sessions_do_not_keep_waking_threads() {
    let _serial = serial();
    run_in_child("child_idle_sessions", Duration::from_secs(120));
}

#[test]
#[ignore = "run by idle_sessions_do_not_keep_waking_threads in a child process"]
fn child_idle_sessions() {
    const SESSIONS: usize = 300;
    const WINDOW: Duration = Duration::from_secs(10);
    let Some(cs) = child_server() else {
        eprintln!("only run in a child process");
        return;
    };
    let clients: Vec<Client> = (0..SESSIONS)
        .map(|_| {
            let c = Client::builder()
                .connect_string(cs.as_str())
                .session_timeout(SESSION)
                .connection_timeout(Duration::from_secs(10))
                .build()
                .unwrap();
            c.start().unwrap();
            c
        })
        .collect();
    for c in &clients {
        assert!(
            c.block_until_connected(Duration::from_secs(30)).unwrap(),
            "a session did not connect: {:?}",
            c.state_history()
        );
    }
    // Settled: no thread left connecting.
    wait_until(
        Duration::from_secs(20),
        || {
            !latchkey_threads()
                .values()
                .any(|s| s.name == "latchkey-connect")
        },
        || format!("connect threads remain: {:?}", latchkey_threads()),
    );
    let before = latchkey_threads();
    thread::sleep(WINDOW); // the measurement's window
    let after = latchkey_threads();
    let (wakeups, per_name) = window_switches(&before, &after);
    thread::scope(|scope| {
        for chunk in clients.chunks(SESSIONS / 6) {
            scope.spawn(move || chunk.iter().for_each(Client::close));
        }
    });
    // At most 2 wake-ups per session per 10 s ping interval, plus 100.
    let allowed = (SESSIONS as f64 * WINDOW.as_secs_f64() * 0.2) as u64 + 100;
    println!(
        "ISOLATION idle-sessions: {SESSIONS} sessions, {wakeups} wake-ups in {WINDOW:?}, {} \
         threads: {per_name}",
        after.len()
    );
    assert!(
        wakeups <= allowed && after.len() <= 15,
        "{SESSIONS} idle sessions: {wakeups} context switches of latchkey threads in {WINDOW:?} \
         (allowed {allowed}), {} latchkey threads (allowed 15); by name (name, threads, \
         switches in the window): {per_name}",
        after.len()
    );
}

/// The context switches of `after`'s threads since `before` (all of a
/// thread's for one started since), in all and by thread name: (name,
/// threads, switches).
fn window_switches(
    before: &std::collections::HashMap<u32, Sched>,
    after: &std::collections::HashMap<u32, Sched>,
) -> (u64, String) {
    let mut names: Vec<(&str, usize, u64)> = Vec::new();
    for s in after.values() {
        let n = s.switches - before.get(&s.tid).map_or(0, |b| b.switches.min(s.switches));
        match names.iter_mut().find(|(name, ..)| *name == s.name) {
            Some((_, count, switches)) => {
                *count += 1;
                *switches += n;
            }
            None => names.push((&s.name, 1, n)),
        }
    }
    names.sort();
    (names.iter().map(|n| n.2).sum(), format!("{names:?}"))
}

/// On a connection stalled client to server (the session kept), 256 KiB
/// `set_data` calls with 20 ms deadlines give up; what they leave must
/// stay bounded (RSS growth below 64 MiB) and must not be sent later:
/// at most what a 16 MiB cap and the kernel's socket buffers hold may be
/// applied. (`isolation_api.rs` pins the same with `Error::is_unsent` and
/// `ClientBuilder::max_unsent_bytes`.)
#[test]
fn writes_that_gave_up_on_a_stalled_connection_do_not_pile_up() {
    let _serial = serial();
    let f = flood(|b| b);
    let cap = 16 << 20;
    let allowed = (cap + kernel_buffers()) / FRAME + 1;
    eprintln!("ISOLATION abandoned-writes: {}", f.figures());
    assert!(
        f.rss_growth < 64 << 20 && f.applied <= allowed as i64,
        "{}\n(allowed: RSS growth < 64 MiB, at most {allowed} applied: a 16 MiB cap plus \
         {} KiB of kernel buffers)",
        f.figures(),
        kernel_buffers() >> 10
    );
}

/// A call whose deadline has already passed is not sent: 20 creates with
/// a zero timeout all fail with a timeout, and none is applied.
#[test]
fn a_call_past_its_deadline_is_not_sent() {
    let _serial = serial();
    let (results, mut children) = zero_timeout_creates();
    children.sort();
    eprintln!(
        "ISOLATION past-deadline: {} of {ZERO_CREATES} zero-timeout creates applied",
        children.len()
    );
    let not_timeouts: Vec<_> = results
        .iter()
        .filter(|r| !matches!(r, Err(e) if e.is(ErrorCode::OperationTimeout)))
        .collect();
    assert!(
        not_timeouts.is_empty() && children.is_empty(),
        "{} of {ZERO_CREATES} zero-timeout creates applied ({children:?}); outcomes not a \
         timeout: {not_timeouts:?}",
        children.len()
    );
}

/// Where a watch callback ran, and with what scheduling.
fn callback_sched() -> Option<Sched> {
    sched_of(tid())
}

/// The thread that runs a session's watch callbacks does not take the
/// scheduling of the thread that happens to start it: a client started on
/// a `SCHED_IDLE` thread pinned to CPU 0, whose first watcher runs because
/// that thread removed the watch (its `DataWatchRemoved` is queued there,
/// which starts the event thread), still has the watcher run unpinned and
/// not `SCHED_IDLE`.
#[test]
fn the_watch_thread_does_not_take_the_scheduling_of_the_thread_that_started_it() {
    let _serial = serial();
    let cs = shared_server().connect_string();
    let writer = connect(&cs, SESSION);
    let path = unique("/isolation/watch_thread");
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&path, b"")
        .unwrap();
    let (seen_tx, seen) = bounded(1);
    let p = path.clone();
    let idle = thread::spawn(move || {
        make_idle_on(tid(), 0);
        let a = connect(&cs, SESSION);
        a.get_data_watch(&p, move |_| {
            let _ = seen_tx.send(callback_sched());
        })?;
        a.remove_watches(&p, WatcherType::Data)?;
        Ok::<Client, Error>(a)
    });
    let ran = seen.recv_timeout(Duration::from_secs(10));
    let a = call_within("the idle thread", Duration::from_secs(15), move || {
        idle.join().expect("the idle thread panicked")
    })
    .unwrap();
    a.close();
    writer.close();
    let ran = ran
        .expect("the watcher did not run within 10 s")
        .expect("the watcher's thread has no /proc entry");
    let want = process_cpus();
    eprintln!("ISOLATION watch-thread: the watcher ran on {ran:?}, the process' CPUs {want}");
    assert!(
        ran.policy != SCHED_IDLE && ran.cpus == want,
        "the watcher ran on {ran:?}, want policy not SCHED_IDLE ({SCHED_IDLE}) and CPUs {want}"
    );
}

/// The engine thread does not take the scheduling of the thread that
/// started the process' first client (`SCHED_IDLE`, pinned to CPU 0). Run
/// in a child process, whose first client that is.
#[test]
fn the_engine_thread_does_not_take_the_scheduling_of_the_first_clients_starter() {
    let _serial = serial();
    run_in_child("child_engine_of_an_idle_starter", Duration::from_secs(60));
}

#[test]
#[ignore = "run by the_engine_thread_does_not_take_the_scheduling_of_the_first_clients_starter \
            in a child process"]
fn child_engine_of_an_idle_starter() {
    let Some(cs) = child_server() else {
        eprintln!("only run in a child process");
        return;
    };
    let engine = || {
        latchkey_threads()
            .into_values()
            .find(|s| s.name == "latchkey-engine")
    };
    assert!(engine().is_none(), "an engine thread before any client");
    let c = call_within(
        "starting the first client",
        Duration::from_secs(30),
        move || {
            make_idle_on(tid(), 0);
            connect(&cs, SESSION)
        },
    );
    let engine = engine().expect("no latchkey-engine thread once a client connected");
    c.close();
    let want = process_cpus();
    println!("ISOLATION engine-thread: {engine:?}, the process' CPUs {want}");
    assert!(
        engine.policy != SCHED_IDLE && engine.cpus == want,
        "the engine thread is {engine:?}, want policy not SCHED_IDLE ({SCHED_IDLE}) and CPUs \
         {want}"
    );
}

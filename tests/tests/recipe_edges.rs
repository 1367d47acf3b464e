//! The recipes at their edges, against a real ZooKeeper server: extreme
//! arguments, repeated timed attempts, stale compare-and-set, lost holds,
//! cancellation and holds in doubt. Every call that could wait runs on a
//! thread with a join deadline, so a broken recipe fails within seconds.

mod common;

use std::thread;
use std::time::Duration;

use common::*;
use latchkey_framework::{Client, Error};
use latchkey_recipes::{
    InterProcessMultiLock, InterProcessMutex, InterProcessSemaphoreMutex, InterProcessSemaphoreV2,
    SharedCount,
};

const SESSION: Duration = Duration::from_secs(10);

/// How long any single call of these tests may take before it counts as hung.
const CALL_BOUND: Duration = Duration::from_secs(20);

/// Tests of this binary run one at a time: the memory test measures the
/// whole process, and the machine is small.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The process's resident set, in bytes (`/proc/self/statm`).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn client() -> Client {
    connect(&shared_server().connect_string(), SESSION)
}

/// Runs `f` on its own thread and returns its result; fails the test if it
/// panics or does not return within `within`.
fn bounded<T: Send + 'static>(
    what: &str,
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let handle = thread::Builder::new()
        .name(what.chars().take(40).collect())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn");
    match rx.recv_timeout(within) {
        Ok(v) => {
            let _ = handle.join();
            v
        }
        Err(_) if handle.is_finished() => match handle.join() {
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                panic!("{what} panicked: {msg:?}")
            }
            Ok(()) => panic!("{what} returned nothing"),
        },
        Err(_) => panic!("{what} did not return within {within:?}"),
    }
}

/// Asserts a clear, typed refusal (not a ZooKeeper round-trip failure).
fn assert_refused<T: std::fmt::Debug>(what: &str, r: latchkey_framework::Result<T>) {
    match r {
        Err(Error::InvalidArgument(_) | Error::InvalidPath { .. }) => {}
        other => {
            let shown: String = format!("{other:?}").chars().take(300).collect();
            panic!("{what}: expected a clear refusal, got {shown}")
        }
    }
}

/// Every public recipe API with extreme arguments: each gives a clear error
/// or a correct wait, never a panic, an abort or a hang.
#[test]
fn extreme_arguments_never_panic_or_abort() {
    let _serial = serial();
    let c = client();
    let huge_path = format!("/{}", "x".repeat(2 * 1024 * 1024));
    let bad_paths: Vec<String> = vec![
        String::new(),
        "relative".into(),
        "/".into(),
        "/a/".into(),
        "//a".into(),
        "/a/./b".into(),
        "/a\u{0}b".into(),
        huge_path.clone(),
    ];
    for p in &bad_paths {
        let short: String = p.chars().take(20).collect();
        assert_refused(&format!("mutex {short:?}"), InterProcessMutex::new(&c, p));
        assert_refused(
            &format!("semaphore {short:?}"),
            InterProcessSemaphoreV2::new(&c, p, 1),
        );
        assert_refused(
            &format!("semaphore mutex {short:?}"),
            InterProcessSemaphoreMutex::new(&c, p),
        );
        assert_refused(
            &format!("multi-lock {short:?}"),
            InterProcessMultiLock::from_paths(&c, &["/ok", p]),
        );
        assert_refused(&format!("count {short:?}"), SharedCount::new(&c, p, 0));
    }
    assert_refused("no locks", InterProcessMultiLock::from_paths(&c, &[]));
    assert_refused(
        "zero leases",
        InterProcessSemaphoreV2::new(&c, &unique("edge-sem0"), 0),
    );
    assert_refused(
        "huge lock data",
        InterProcessMutex::with_lock_data(&c, &unique("edge-data"), &vec![7u8; 2 << 20]),
    );
    assert_refused(
        "huge lease data",
        InterProcessSemaphoreV2::with_lease_data(&c, &unique("edge-data"), 1, &vec![7; 2 << 20]),
    );

    // Odd but valid paths work.
    for odd in ["/edge odd/ü-ñ", "/edge-dots/..a/a..", "/edge_\u{2603}"] {
        let m = InterProcessMutex::new(&c, odd).expect(odd);
        let got = bounded(odd, CALL_BOUND, move || m.acquire_timeout(Duration::ZERO));
        assert!(matches!(got, Ok(true)), "{odd}: {got:?}");
    }

    // Durations: zero and huge on a free lock take it; huge means no deadline.
    for d in [Duration::ZERO, Duration::from_nanos(1), Duration::MAX] {
        let m = InterProcessMutex::new(&c, &unique("edge-mutex")).unwrap();
        let r = bounded(&format!("mutex {d:?}"), CALL_BOUND, move || {
            let first = m.acquire_timeout(d)?;
            // A reentrant acquire with the same duration.
            let again = m.acquire_timeout(d)?;
            let guard = m.try_lock_for(d)?.is_some();
            m.release()?;
            m.release()?;
            Ok::<_, Error>((first, again, guard, m.is_acquired_in_this_process()))
        });
        assert!(
            matches!(r, Ok((true, true, true, false))),
            "mutex {d:?}: {r:?}"
        );

        let sem = InterProcessSemaphoreV2::new(&c, &unique("edge-sem"), 2).unwrap();
        let r = bounded(&format!("semaphore {d:?}"), CALL_BOUND, move || {
            let one = sem.acquire_timeout(d)?;
            let two = sem.acquire_many_timeout(1, d)?;
            // Both leases are held: a third attempt must time out.
            let none = sem.acquire_timeout(d.min(Duration::from_millis(50)))?;
            Ok::<_, Error>((one.is_some(), two.map(|v| v.len()), none.is_none()))
        });
        assert!(
            matches!(r, Ok((true, Some(1), true))),
            "semaphore {d:?}: {r:?}"
        );

        let sm = InterProcessSemaphoreMutex::new(&c, &unique("edge-smutex")).unwrap();
        let r = bounded(&format!("semaphore mutex {d:?}"), CALL_BOUND, move || {
            let got = sm.acquire_timeout(d)?;
            sm.release()?;
            Ok::<_, Error>(got)
        });
        assert!(matches!(r, Ok(true)), "semaphore mutex {d:?}: {r:?}");

        let paths = [unique("edge-ml-a"), unique("edge-ml-b")];
        let ml = InterProcessMultiLock::from_paths(&c, &[&paths[0], &paths[1]]).unwrap();
        let r = bounded(&format!("multi-lock {d:?}"), CALL_BOUND, move || {
            let got = ml.acquire_timeout(d)?;
            ml.release()?;
            Ok::<_, Error>(got)
        });
        assert!(matches!(r, Ok(true)), "multi-lock {d:?}: {r:?}");
    }

    // Lease counts: zero, more than the maximum, u32::MAX, fixed and shared.
    let sem = InterProcessSemaphoreV2::new(&c, &unique("edge-many"), 3).unwrap();
    for n in [0, 4, u32::MAX] {
        let s = sem.clone();
        let r = bounded(
            &format!("acquire_many_timeout({n})"),
            CALL_BOUND,
            move || s.acquire_many_timeout(n, Duration::MAX),
        );
        assert_refused(&format!("acquire_many_timeout({n})"), r);
        let s = sem.clone();
        let r = bounded(&format!("acquire_many({n})"), CALL_BOUND, move || {
            s.acquire_many(n)
        });
        assert_refused(&format!("acquire_many({n})"), r);
    }
    let count = SharedCount::new(&c, &unique("edge-count"), 2).unwrap();
    let shared =
        InterProcessSemaphoreV2::with_shared_count(&c, &unique("edge-shared"), &count).unwrap();
    for n in [0, u32::MAX, i32::MAX as u32 + 1] {
        let s = shared.clone();
        let r = bounded(
            &format!("shared acquire_many({n})"),
            CALL_BOUND,
            move || s.acquire_many_timeout(n, Duration::MAX),
        );
        assert_refused(&format!("shared acquire_many_timeout({n})"), r);
    }
    // More than the shared maximum now is a correct (bounded) wait.
    let s = shared.clone();
    let r = bounded("shared acquire_many(3) for 200 ms", CALL_BOUND, move || {
        s.acquire_many_timeout(3, Duration::from_millis(200))
    });
    assert!(matches!(r, Ok(None)), "{r:?}");

    // Shared count values at the ends of i32.
    for v in [i32::MIN, -1, 0, i32::MAX] {
        count.set_count(v).unwrap();
        assert_eq!(count.count(), v);
        let seen = count.versioned_value();
        assert!(count.try_set_count(&seen, v).unwrap());
    }
    for version in [-1, i32::MIN] {
        let stale = latchkey_recipes::VersionedValue { version, value: 0 };
        assert_refused(
            &format!("try_set_count version {version}"),
            count.try_set_count(&stale, 1),
        );
    }
}

/// Polls `attempt` (which must fail: the lock is held elsewhere) `n` times
/// and returns how much the process grew, in bytes, after a warm-up and
/// once the client's background deletes are done. Bounded by `within`.
fn growth_over_failed_attempts(
    c: &Client,
    n: usize,
    within: Duration,
    mut attempt: impl FnMut() -> bool,
) -> i64 {
    let started = std::time::Instant::now();
    let settle = || {
        wait_until(
            Duration::from_secs(30),
            || c.pending_background_work() == 0,
            || format!("background work left: {}", c.pending_background_work()),
        )
    };
    for _ in 0..2_000 {
        assert!(!attempt(), "a held lock was taken");
    }
    settle();
    let before = rss_bytes();
    for i in 0..n {
        assert!(!attempt(), "a held lock was taken at attempt {i}");
        assert!(
            started.elapsed() < within,
            "only {i} of {n} attempts within {within:?}"
        );
    }
    settle();
    let after = rss_bytes();
    eprintln!(
        "{n} failed attempts in {:?}: RSS {before} -> {after} bytes",
        started.elapsed()
    );
    after as i64 - before as i64
}

/// Item: timed attempts against a held lock must not pile up watch
/// callbacks on the holder's node (Curator keeps one watcher per lock).
/// Measured as the growth of the resident set over 20,000 attempts.
#[test]
fn failed_timed_attempts_do_not_grow_memory() {
    let _serial = serial();
    let (holder, poller) = (client(), client());
    let path = unique("edge-poll");
    let held = InterProcessMutex::new(&holder, &path).unwrap();
    held.acquire().unwrap();
    let m = InterProcessMutex::new(&poller, &path).unwrap();
    let grew = growth_over_failed_attempts(&poller, 20_000, Duration::from_secs(240), || {
        m.acquire_timeout(Duration::from_millis(1))
            .expect("attempt")
    });
    assert!(grew < 100 * 1024, "the process grew by {grew} bytes");
    assert_eq!(
        m.participant_nodes().unwrap().len(),
        1,
        "only the holder is left"
    );
    held.release().unwrap();
}

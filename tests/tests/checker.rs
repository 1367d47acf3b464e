//! The randomized checker (`src/bin/check`) on a short budget: the controls
//! (no locks; a mutex that lets two holders in; a leader latch that lets two
//! lead and a counter without a version check; queue consumers without
//! lock nodes; a compare-and-set that answers an applied write refused,
//! and a correct history against a wrong model, both caught by the
//! linearizability check) must fail, and a run on a
//! single server and one on a 3-member ensemble, with faults, must pass. About a minute in all; the
//! runs take turns so that they do not load the machine together.
//!
//! Longer runs: `LATCHKEY_CHECK_SECONDS=1800 LATCHKEY_CHECK_SEED=7 cargo
//! test -p latchkey-test --test checker -- --nocapture`, or the binary itself:
//! `cargo run -p latchkey-test --bin check -- --seed 7 --seconds 1800 --ensemble`.

use std::fs::File;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// One checker run at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// What a run printed and how it ended.
struct Run {
    code: Option<i32>,
    output: String,
}

/// Runs the checker with `args`, killing it (and failing) if it runs more
/// than `seconds` plus a generous margin for starting servers and healing.
fn check(args: &[&str], seconds: u64) -> Run {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let log = tempfile::NamedTempFile::new().expect("temp file for the checker's output");
    let out = File::create(log.path()).expect("open the output file");
    let err = out.try_clone().expect("clone the output file");
    let seconds_arg = seconds.to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_check"))
        .args(args)
        .args(["--seconds", &seconds_arg])
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .expect("start the checker");
    let bound = Duration::from_secs(seconds + 240);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the checker") {
            break Some(status);
        }
        if started.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(100));
    };
    let output = std::fs::read_to_string(log.path()).unwrap_or_default();
    eprintln!("{output}");
    let Some(status) = status else {
        panic!("the checker ran past {bound:?}; its output:\n{output}");
    };
    Run {
        code: status.code(),
        output,
    }
}

fn seed(default: u64) -> String {
    std::env::var("LATCHKEY_CHECK_SEED").unwrap_or_else(|_| default.to_string())
}

fn seconds(default: u64) -> u64 {
    std::env::var("LATCHKEY_CHECK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The summary's `name=value` figure.
fn figure(output: &str, name: &str) -> Option<u64> {
    let summary = output
        .lines()
        .find(|l| l.starts_with("check: PASSED") || l.starts_with("check: FAILED"))?;
    summary
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
}

#[test]
fn the_control_without_locks_reports_violations_and_how_to_replay_them() {
    let run = check(
        &[
            "--seed",
            "11",
            "--single",
            "--no-lock",
            "--no-faults",
            "--curator",
            "0",
        ],
        4,
    );
    assert_eq!(run.code, Some(1), "the control must fail:\n{}", run.output);
    assert!(run.output.contains("check: seed=11"), "{}", run.output);
    assert!(
        figure(&run.output, "violations").is_some_and(|v| v > 0),
        "{}",
        run.output
    );
    assert!(
        run.output
            .contains("replay with: cargo run -p latchkey-test --bin check -- --seed 11"),
        "{}",
        run.output
    );
    assert!(run.output.contains("history written to"), "{}", run.output);
}

#[test]
fn a_mutex_that_lets_two_holders_in_is_caught_through_real_grants() {
    let run = check(
        &[
            "--seed",
            "12",
            "--single",
            "--broken-lock",
            "--no-faults",
            "--curator",
            "0",
        ],
        5,
    );
    assert_eq!(
        run.code,
        Some(1),
        "the broken lock must fail:\n{}",
        run.output
    );
    assert!(
        run.output.contains("granted Exclusive beside"),
        "no overlap reported:\n{}",
        run.output
    );
}

#[test]
fn a_latch_that_lets_two_lead_and_a_counter_that_loses_updates_are_caught() {
    let run = check(
        &[
            "--seed",
            "13",
            "--single",
            "--broken-leader",
            "--broken-counter",
            "--no-faults",
            "--curator",
            "0",
        ],
        5,
    );
    assert_eq!(
        run.code,
        Some(1),
        "the broken latch and counter must fail:\n{}",
        run.output
    );
    assert!(
        run.output.contains("/latch: ") && run.output.contains("leads beside"),
        "no two leaders reported:\n{}",
        run.output
    );
    assert!(
        run.output.contains("lost update"),
        "no lost update reported:\n{}",
        run.output
    );
}

/// Curator's queue recipes promise at-least-once; the checker holds the
/// lock-safe queue to exactly once while nothing fails, and catches
/// consumers that take items without lock nodes.
#[test]
fn a_queue_whose_consumers_take_items_twice_is_caught() {
    let run = check(
        &[
            "--seed",
            "13",
            "--single",
            "--broken-queue",
            "--no-faults",
            "--curator",
            "0",
            "--latches",
            "0",
        ],
        4,
    );
    assert_eq!(
        run.code,
        Some(1),
        "the broken queue must fail:\n{}",
        run.output
    );
    assert!(
        run.output.contains("times without a fault"),
        "no item taken twice reported:\n{}",
        run.output
    );
}

/// Issue 38's bug 1 put back (`--broken-cas`: an applied compare-and-set
/// whose reply was lost answered as refused), with a nemesis that loses
/// replies: the linearizability check finds it in the shared count's
/// history. One session, so that its threads' compare-and-sets are the
/// ones in flight when its replies are held.
#[test]
fn a_compare_and_set_that_reports_an_applied_write_refused_is_caught() {
    let run = check(
        &[
            "--seed",
            "13",
            "--single",
            "--broken-cas",
            "--lost-replies",
            "--clients",
            "1",
            "--curator",
            "0",
            "--latches",
            "0",
        ],
        8,
    );
    assert_eq!(
        run.code,
        Some(1),
        "the broken compare-and-set must fail:\n{}",
        run.output
    );
    assert!(
        run.output.contains("cas-count: not linearizable"),
        "no unlinearizable count history reported:\n{}",
        run.output
    );
}

/// The check's own control: a correct history against a deliberately
/// wrong model (a compare-and-set that skips a version) must fail.
#[test]
fn the_linearizability_check_fails_a_correct_history_against_a_wrong_model() {
    let run = check(
        &[
            "--seed",
            "13",
            "--single",
            "--wrong-model",
            "--no-faults",
            "--curator",
            "0",
            "--latches",
            "0",
        ],
        4,
    );
    assert_eq!(
        run.code,
        Some(1),
        "the wrong model must fail:\n{}",
        run.output
    );
    assert!(
        run.output.contains("cas-count: not linearizable"),
        "no unlinearizable count history reported:\n{}",
        run.output
    );
}

/// The fixed code under the same nemesis and workload as the
/// `--broken-cas` control: compare-and-sets whose replies were lost answer
/// "may or may not have run" (`count_unknown`), and every answer of the
/// shared count and the counter is explained by some order.
#[test]
fn lost_replies_leave_the_shared_count_and_counter_linearizable() {
    let seed = seed(5);
    let run = check(
        &[
            "--seed",
            &seed,
            "--single",
            "--cas-workload",
            "--lost-replies",
            "--clients",
            "1",
            "--curator",
            "0",
            "--latches",
            "0",
        ],
        seconds(8),
    );
    assert_eq!(run.code, Some(0), "the checker failed:\n{}", run.output);
    assert_linearizable(&run);
    assert!(
        figure(&run.output, "count_unknown").is_some_and(|n| n > 0),
        "no compare-and-set was in doubt:\n{}",
        run.output
    );
}

/// The summary's `name=word` value.
fn word<'a>(output: &'a str, name: &str) -> Option<&'a str> {
    let summary = output
        .lines()
        .find(|l| l.starts_with("check: PASSED") || l.starts_with("check: FAILED"))?;
    summary
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

fn assert_linearizable(run: &Run) {
    for history in ["linearizable_count", "linearizable_counter"] {
        assert_eq!(
            word(&run.output, history),
            Some("yes"),
            "{history}:\n{}",
            run.output
        );
    }
    assert!(
        figure(&run.output, "count_ops").is_some_and(|n| n > 0),
        "no compare-and-sets:\n{}",
        run.output
    );
}

/// The queue line's `name=value` figure.
fn queue_figure(output: &str, name: &str) -> Option<u64> {
    let line = output.lines().find(|l| l.starts_with("check: queue "))?;
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
}

fn assert_passes(run: &Run) {
    assert_eq!(run.code, Some(0), "the checker failed:\n{}", run.output);
    assert_eq!(figure(&run.output, "violations"), Some(0), "{}", run.output);
    assert_eq!(
        figure(&run.output, "orphaned_nodes"),
        Some(0),
        "{}",
        run.output
    );
    for exercised in ["grants", "leader_terms", "increments"] {
        assert!(
            figure(&run.output, exercised).is_some_and(|g| g > 0),
            "no {exercised}:\n{}",
            run.output
        );
    }
    assert!(
        queue_figure(&run.output, "takes").is_some_and(|t| t > 0),
        "no queue takes:\n{}",
        run.output
    );
    assert_linearizable(run);
}

#[test]
fn random_locking_on_a_single_server_with_faults_passes_the_checker() {
    let seed = seed(1);
    let run = check(&["--seed", &seed, "--single"], seconds(17));
    assert_passes(&run);
}

#[test]
fn random_locking_on_an_ensemble_with_faults_passes_the_checker() {
    let seed = seed(3);
    let run = check(&["--seed", &seed, "--ensemble"], seconds(22));
    assert_passes(&run);
}

/// Found by the checker (seed 1, single server, 15 s:
/// `cargo run -p latchkey-test --bin check -- --seed 1 --seconds 15 --single`
/// reported `worst_deadline_overrun_ms=5691`, a semaphore acquire with a
/// 1 ms timeout that returned "timed out" 5.7 s later, while the server was
/// stopped). An acquire with a timeout should return within its timeout
/// plus one connection timeout, also when ZooKeeper cannot be reached; today
/// the retry loop of the node's create runs on past the deadline. Ignored
/// until acquires took their deadline into the retry loop (they do now:
/// every timed recipe call sends its requests under its deadline).
#[test]
fn an_acquire_with_a_timeout_returns_within_the_connection_timeout_while_the_server_is_down() {
    use latchkey_framework::{Client, ExponentialBackoffRetry};
    use latchkey_recipes::{InterProcessMutex, InterProcessSemaphoreV2};

    let mut server = latchkey_test::TestingServer::start().expect("start ZooKeeper");
    let connection_timeout = Duration::from_secs(1);
    let client = Client::builder()
        .connect_string(server.connect_string())
        .session_timeout(Duration::from_secs(10))
        .connection_timeout(connection_timeout)
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 3))
        .build()
        .expect("build client");
    client.start().expect("start client");
    assert!(client
        .block_until_connected(Duration::from_secs(30))
        .unwrap());
    let path = latchkey_test::unique_path("deadline");
    let mutex = InterProcessMutex::new(&client, &format!("{path}/mutex")).unwrap();
    let sem = InterProcessSemaphoreV2::new(&client, &format!("{path}/sem"), 1).unwrap();
    server.stop().expect("stop ZooKeeper");

    let timeout = Duration::from_millis(1);
    let bound = timeout + connection_timeout + Duration::from_millis(500);
    let start = Instant::now();
    let got = mutex.acquire_timeout(timeout);
    let mutex_took = start.elapsed();
    let start = Instant::now();
    let leased = sem.acquire_timeout(timeout).map(|l| l.is_some());
    let sem_took = start.elapsed();
    client.close();
    assert!(
        mutex_took <= bound && sem_took <= bound,
        "with a {timeout:?} timeout and a {connection_timeout:?} connection timeout: \
         mutex acquire returned {got:?} after {mutex_took:?}, semaphore acquire {leased:?} \
         after {sem_took:?} (bound {bound:?})"
    );
}

/// Found by the checker (seed 101, ensemble, 600 s:
/// `cargo run -p latchkey-test --bin check -- --seed 101 --seconds 600 --ensemble`
/// logged 76 acquires in its history that failed with `NoNode` for their
/// own lock node, e.g. a read with a 100 ms timeout failing after 91 ms).
/// A waiter whose session expires while it waits gets
/// `Err(NoNode for <its own lock node>)` when the retry policy's next sleep
/// would pass the acquire's deadline. Curator retries (its sleeper does not
/// look at the deadline), queues again, sees the time is up and returns
/// `false`; a caller of `acquire_timeout` expects the same "not acquired",
/// not an error about a node it never named. It now returns `false`.
#[test]
fn a_waiter_whose_session_expires_near_its_deadline_times_out_instead_of_failing_with_no_node() {
    use latchkey_framework::{Client, ExponentialBackoffRetry};
    use latchkey_recipes::InterProcessMutex;

    let server = latchkey_test::TestingServer::start().expect("start ZooKeeper");
    let connect = |retry_base: Duration| {
        let c = Client::builder()
            .connect_string(server.connect_string())
            .session_timeout(Duration::from_secs(10))
            .connection_timeout(Duration::from_secs(2))
            .retry_policy(ExponentialBackoffRetry::new(retry_base, 3))
            .build()
            .expect("build client");
        c.start().expect("start client");
        assert!(c.block_until_connected(Duration::from_secs(30)).unwrap());
        c
    };
    let holder = connect(Duration::from_millis(50));
    // A first retry sleep of at least 1 s: longer than what is left of the
    // waiter's 1 s timeout once its session is gone.
    let waiter = connect(Duration::from_secs(1));
    let path = latchkey_test::unique_path("expire-near-deadline");
    let held = InterProcessMutex::new(&holder, &path).unwrap();
    held.acquire().unwrap();
    let waiting = InterProcessMutex::new(&waiter, &path).unwrap();
    let got = thread::scope(|s| {
        let wait = s.spawn(|| waiting.acquire_timeout(Duration::from_secs(1)));
        let queued = Instant::now() + Duration::from_secs(10);
        while held.participant_nodes().map_or(0, |n| n.len()) < 2 && Instant::now() < queued {
            thread::sleep(Duration::from_millis(10));
        }
        waiter
            .expire_session_for_testing()
            .expect("expire the waiter's session");
        wait.join().expect("the waiter panicked")
    });
    held.release().unwrap();
    waiter.close();
    holder.close();
    assert!(
        matches!(got, Ok(false)),
        "the waiter's acquire_timeout(1 s) returned {got:?}; Curator returns false here"
    );
}

/// Found by the checker (seed 103, ensemble, 600 s:
/// `cargo run -p latchkey-test --bin check -- --seed 103 --seconds 600 --ensemble`
/// reported, 524.5 s in, `rw: s1.t1 granted Exclusive beside s2.t1
/// (Shared)`: s1.t1 held a read and waited for the write (a refused
/// upgrade), the nemesis expired s1's session through another member, and
/// s1.t1's write was granted, with the node of the expired session, the
/// same millisecond s2 got a read; s1 saw `Suspended` right after).
///
/// When a session ends on the server while its connection to a member is
/// still open (the close arrives through the leader: forced expiry through
/// another member, or a leader expiring a session whose follower is slow),
/// the member deletes all of the session's ephemeral nodes in no particular
/// order and sends their watch events before it closes the connection. A
/// waiter whose only blocker is a node of its own session (another thread's
/// hold, or its own read before an upgrade) sees the blocker's deletion
/// first and takes the lock on it without listing again (the `only_blocker`
/// fast path), although its own node went in the same transaction. Curator
/// always lists again and finds its node gone. Here: two threads of one
/// client on one mutex, the client connected to member 1, the session
/// closed through member 0; a granted waiter must hold a node of its
/// current session once the client reconnected. Two runs of 100 attempts
/// saw 2 and 0 such grants (`Ok(true)` with node `...-lock-0000000001`, the
/// waiter's node of the ended session); two runs of this test failed at
/// attempts 41 and 3.
#[test]
#[ignore = "stress test, up to 300 attempts and 120 s on an ensemble: run by hand with --ignored"]
fn a_waiter_is_not_granted_when_its_own_session_ends_with_its_blocker() {
    use latchkey_framework::{Client, ExponentialBackoffRetry};
    use latchkey_recipes::InterProcessMutex;
    use latchkey_test::{FaultProxy, TestingCluster};

    let cluster = TestingCluster::start(3).expect("start a 3-member ensemble");
    // The client may not connect to member 0 (refused), so it connects to
    // member 1; the forced expiry then goes through member 0.
    let member0 = FaultProxy::start(cluster.member_addr(0).unwrap()).unwrap();
    member0.set_refuse(true);
    let client = Client::builder()
        .connect_string(format!(
            "{},{}",
            member0.connect_string(),
            cluster.member_connect_string(1)
        ))
        .session_timeout(Duration::from_secs(10))
        .connection_timeout(Duration::from_secs(2))
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 3))
        .build()
        .expect("build client");
    client.start().expect("start client");
    // The window is narrow (the waiter must wake between the two deletion
    // events): about 1 attempt in 100 hits it, so up to 300 attempts, for
    // at most 120 s.
    let mut stale_grants = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(120);
    for attempt in 0..300 {
        if !stale_grants.is_empty() || Instant::now() > give_up {
            break;
        }
        assert!(client
            .block_until_connected(Duration::from_secs(30))
            .unwrap());
        member0.set_refuse(false);
        let path = latchkey_test::unique_path("own-session-blocker");
        let mutex = InterProcessMutex::new(&client, &path).unwrap();
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let outcome = thread::scope(|s| {
            let mutex_ref = &mutex;
            s.spawn(move || {
                mutex_ref.acquire().expect("first thread takes the lock");
                held_tx.send(()).unwrap();
                let _ = done_rx.recv_timeout(Duration::from_secs(60));
                let _ = mutex_ref.release();
            });
            held_rx
                .recv_timeout(Duration::from_secs(30))
                .expect("first hold");
            let waiter = s.spawn(|| {
                let got = mutex.acquire_timeout(Duration::from_secs(15));
                if !matches!(got, Ok(true)) {
                    return format!("{got:?}");
                }
                let node = mutex.lock_node_path();
                let _ = client.block_until_connected(Duration::from_secs(30));
                let stale = mutex.is_lost();
                let _ = mutex.release();
                format!("Ok(true) with node {node:?}, of an ended session: {stale}")
            });
            let queued = Instant::now() + Duration::from_secs(10);
            while mutex.participant_nodes().map_or(0, |n| n.len()) < 2 && Instant::now() < queued {
                thread::sleep(Duration::from_millis(10));
            }
            client
                .expire_session_for_testing()
                .expect("expire the session");
            let outcome = waiter.join().expect("the waiter panicked");
            done_tx.send(()).unwrap();
            outcome
        });
        member0.set_refuse(true);
        if outcome.ends_with("true") {
            stale_grants.push(format!("attempt {attempt}: {outcome}"));
        }
    }
    client.close();
    assert!(
        stale_grants.is_empty(),
        "a waiter was granted the lock by the deletion of its blocker, with its own node \
         gone with its session:\n{}",
        stale_grants.join("\n")
    );
}

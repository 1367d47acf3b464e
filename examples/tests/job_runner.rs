//! Runs the `job_runner` example as a user would: with its embedded
//! ZooKeeper, which it cuts one worker off from, then stops, each time for
//! longer than the session timeout. Its oracle must see no violation,
//! every job must be done, and the holds must really have been lost and
//! taken again. With exclusion broken on purpose, or with workers that
//! ignore doubt and loss, the same oracle must object.
//!
//! The runs take one at a time (each starts a ZooKeeper and three worker
//! processes), so that they do not slow each other down.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

const JOB_RUNNER: &str = env!("CARGO_BIN_EXE_job_runner");
/// The run takes about 20-40 s; a hung run fails the test well after that.
const BOUND: Duration = Duration::from_secs(240);

/// Runs `job_runner ARGS`, killing it past [`BOUND`]; its status and output.
fn run(args: &[&str]) -> (ExitStatus, String) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut child = Command::new(JOB_RUNNER)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn job_runner");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out = thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + BOUND;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            // Its workers end when they see it gone.
            let _ = child.kill();
            let _ = child.wait();
            panic!("job_runner did not end within {BOUND:?}");
        }
        thread::sleep(Duration::from_millis(100));
    };
    let output = format!(
        "{}\n--- stderr ---\n{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    // A failed run keeps its oracle files for inspection; not in a test.
    for line in output.lines() {
        if let Some(dir) = line.strip_prefix("the oracle's files stay in ") {
            let _ = std::fs::remove_dir_all(dir.trim());
        }
    }
    (status, output)
}

/// The number after `label` on its line of the summary.
fn figure(output: &str, label: &str) -> u32 {
    output
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.split('/').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in the output:\n{output}"))
}

#[test]
fn the_job_runner_survives_a_partition_and_an_outage_longer_than_the_session() {
    let (status, output) = run(&[]);
    assert!(status.success(), "job_runner failed ({status}):\n{output}");
    assert!(
        output.contains("worker 0 CUT OFF"),
        "no partition:\n{output}"
    );
    assert!(output.contains("ZooKeeper STOPS"), "no outage:\n{output}");
    assert_eq!(figure(&output, "jobs finished:"), 20, "{output}");
    assert_eq!(figure(&output, "steps done:"), 200, "{output}");
    assert!(output.contains("\n0 violations"), "{output}");
    // The outage outlasted the session: holds were lost, and their jobs
    // taken up again, by the thread that lost one or, when another process
    // asked first (as on a loaded machine), by that process.
    assert!(figure(&output, "holds gone in doubt:") >= 1, "{output}");
    assert!(figure(&output, "holds lost:") >= 1, "{output}");
    assert!(
        figure(&output, "jobs taken again:")
            + figure(&output, "jobs worked on by more than one process:")
            >= 1,
        "{output}"
    );
    eprintln!("{output}");
}

#[test]
fn the_job_runner_oracle_catches_broken_exclusion() {
    let (status, output) = run(&["--break-exclusion"]);
    assert_eq!(status.code(), Some(1), "{output}");
    assert!(output.contains("VIOLATION: "), "{output}");
    assert!(output.contains("violations of exclusion"), "{output}");
}

/// Workers that never look at `is_in_doubt()` or `events()` go on as
/// holders after their session expired; the oracle meets them beside the
/// new holders.
#[test]
fn the_job_runner_oracle_catches_workers_that_ignore_doubt() {
    let (status, output) = run(&["--ignore-doubt"]);
    assert_eq!(status.code(), Some(1), "{output}");
    assert!(output.contains("VIOLATION: "), "{output}");
    assert!(output.contains("violations of exclusion"), "{output}");
}

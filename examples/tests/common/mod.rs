//! Runs an example program as a user would, with its embedded ZooKeeper.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A run takes a few seconds; a hung run fails the test after this.
const BOUND: Duration = Duration::from_secs(120);

/// Runs the example at `path` to its end and returns what it printed;
/// fails the test if it does not end within two minutes or exits with an
/// error.
pub fn run_to_end(path: &str) -> String {
    let mut child = Command::new(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {path}: {e}"));
    let deadline = Instant::now() + BOUND;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{path} did not end within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n--- stderr ---\n{stderr}");
    stdout
}

//! Runs the `node_cache` example as a user would, with its embedded
//! ZooKeeper: the cache must follow the data changes and see the node come
//! back in the keeper's new session.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const EXAMPLE: &str = env!("CARGO_BIN_EXE_node_cache");
/// The run takes a few seconds; a hung run fails the test after this.
const BOUND: Duration = Duration::from_secs(120);

#[test]
fn the_node_cache_example_sees_the_node_come_back() {
    let mut child = Command::new(EXAMPLE)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the node_cache example");
    let deadline = Instant::now() + BOUND;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the node_cache example did not end within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n--- stderr ---\n{stderr}");
    for line in [
        "cache: \"version 2\"",
        "cache: \"version 3\"",
        "cache: no node",
        "is back, owned by the new session",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
}

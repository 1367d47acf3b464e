//! Runs the `cache` example as a user would, with its embedded ZooKeeper:
//! it must print events and end with the cache matching ZooKeeper.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CACHE: &str = env!("CARGO_BIN_EXE_cache");
/// The run takes a few seconds; a hung run fails the test after this.
const BOUND: Duration = Duration::from_secs(120);

#[test]
fn the_cache_example_ends_matching_zookeeper() {
    let mut child = Command::new(CACHE)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the cache example");
    let deadline = Instant::now() + BOUND;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the cache example did not end within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n--- stderr ---\n{stderr}");
    assert!(stdout.contains("members of"), "{stdout}");
    assert!(stdout.contains("created /examples/cache/"), "{stdout}");
    assert!(stdout.contains("the cache matches ZooKeeper"), "{stdout}");
}

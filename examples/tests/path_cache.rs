//! Runs the `path_cache` example as a user would, with its embedded
//! ZooKeeper, feeding it commands: it must tell each child added, changed
//! and removed, and list the cache.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A run takes a few seconds; a hung run fails the test after this.
const BOUND: Duration = Duration::from_secs(120);

#[test]
fn the_path_cache_example_follows_its_commands() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_path_cache"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn path_cache");
    let script = "set a one\nset b two\nlist\nset a uno\nremove b\nlist\nbogus\nquit\n";
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("write the commands");
    let deadline = Instant::now() + BOUND;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("path_cache did not end within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let at = |want: &str| {
        lines
            .iter()
            .position(|l| *l == want)
            .unwrap_or_else(|| panic!("{want:?} in {stdout}"))
    };
    assert!(at("Node added: a") < at("Node added: b"));
    assert!(at("a = one") < at("Node changed: a"));
    assert!(at("Node changed: a") < at("Node removed: b"));
    assert!(at("a = uno") > at("Node removed: b"));
    at("b = two");
    at("syntax error: bogus");
}

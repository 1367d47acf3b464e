//! What the `latchkey` command's test binaries share: one ZooKeeper per
//! test binary, started by the first test that asks for it, connected
//! clients of it, unique paths, and waits with a deadline.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use latchkey_framework::{Client, ExponentialBackoffRetry};
use latchkey_test::TestingServer;

/// The `latchkey` program under test.
pub const LATCHKEY: &str = env!("CARGO_BIN_EXE_latchkey");
/// The `lock` program, the same as `latchkey lock`.
pub const LOCK_ALIAS: &str = env!("CARGO_BIN_EXE_lock");

/// The server this test binary shares.
pub fn server() -> &'static TestingServer {
    static SERVER: OnceLock<TestingServer> = OnceLock::new();
    SERVER.get_or_init(|| TestingServer::start().expect("start the shared ZooKeeper"))
}

/// A started, connected client of the shared server.
pub fn client() -> Client {
    let c = Client::builder()
        .connect_string(server().connect_string())
        .session_timeout(Duration::from_secs(10))
        .connection_timeout(Duration::from_secs(5))
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 10))
        .build()
        .expect("build client");
    c.start().expect("start client");
    assert!(
        c.block_until_connected(Duration::from_secs(20)).unwrap(),
        "cannot connect to {}",
        server().connect_string()
    );
    c
}

/// A path no other test uses.
pub fn unique() -> String {
    latchkey_test::unique_path("cli")
}

/// Polls `cond` every 20 ms until it holds; panics past `within`, with the
/// server's log tail.
pub fn wait_until(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "not within {within:?}: {what}\nserver log:\n{}",
            server().log_tail(20)
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (at most 20 s) for `cond`.
pub fn eventually(what: &str, cond: impl FnMut() -> bool) {
    wait_until(Duration::from_secs(20), what, cond);
}

/// Runs `latchkey ARGS --connect <server>` to the end; kills it and
/// panics if it has not ended `within`.
pub fn run_latchkey(args: &[&str], within: Duration) -> Output {
    let mut cmd = Command::new(LATCHKEY);
    cmd.args(args)
        .args(["--connect", &server().connect_string()]);
    output_within(cmd, args, within)
}

/// Runs `cmd` (latchkey with `args`) to the end and returns its output;
/// kills it and panics if it has not ended `within`.
pub fn output_within(mut cmd: Command, args: &[&str], within: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start latchkey");
    let deadline = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("latchkey {args:?} did not end within {within:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

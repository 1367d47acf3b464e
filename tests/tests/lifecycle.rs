//! The client's session life cycle against real ZooKeeper: rejected auth,
//! listeners off the session's critical path, close on the last handle,
//! deadlines that hold whatever the server does.

mod common;

use std::time::{Duration, Instant};

use latchkey_framework::{Client, ErrorCode, ExponentialBackoffRetry};
use latchkey_test::TestingServer;

/// Sessions the server holds now (`mntr`'s `zk_global_sessions`).
fn live_sessions(server: &TestingServer) -> usize {
    let mntr = server.four_letter("mntr").expect("mntr");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_global_sessions"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no zk_global_sessions in mntr:\n{mntr}"))
}

/// The Java client treats a rejected auth as final (`AUTH_FAILED`); a
/// client must not answer it by opening session after session.
#[test]
fn rejected_auth_fails_calls_with_auth_failed_and_opens_few_sessions() {
    let server = TestingServer::start().unwrap();
    let before = live_sessions(&server);
    let c = Client::builder()
        .connect_string(server.connect_string())
        .session_timeout(Duration::from_secs(10))
        .connection_timeout(Duration::from_secs(2))
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 3))
        .authorization("no-such-scheme", b"whoever")
        .build()
        .unwrap();
    c.start().unwrap();
    let started = Instant::now();
    let mut codes = Vec::new();
    while started.elapsed() < Duration::from_secs(3) && codes.len() < 50 {
        match c.exists("/") {
            Ok(_) => codes.push(None),
            Err(e) => codes.push(e.code()),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let opened = live_sessions(&server) - before;
    let history = c.state_history();
    let auth_failed = codes
        .iter()
        .filter(|c| **c == Some(ErrorCode::AuthFailed))
        .count();
    println!("sessions opened in 3 s: {opened}; call results: {codes:?}");
    assert!(
        opened <= 5,
        "{opened} sessions opened in 3 s\nstates: {history:?}\n{}",
        server.log_tail(20)
    );
    assert!(
        auth_failed >= codes.len() / 2 && !codes.contains(&None),
        "calls should fail with AuthFailed: {codes:?}"
    );
    assert!(
        !codes.contains(&Some(ErrorCode::ConnectionLoss)),
        "{codes:?}"
    );
    c.close();
}

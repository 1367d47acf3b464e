//! The wire client's session lifecycle under protocol faults: real
//! ZooKeeper where it can show the fault, the scripted fake server where a
//! real server will not produce it on demand.

mod common;

use std::time::Duration;

use latchkey_framework::{Client, ClientBuilder, RetryNTimes};
use latchkey_test::fake_server::{op, FakeServer, Script};

/// A client of `fake`, started (not waited for).
fn fake_client(fake: &FakeServer, session_timeout: Duration) -> Client {
    fake_builder(fake, session_timeout)
        .build()
        .expect("build client")
}

fn fake_builder(fake: &FakeServer, session_timeout: Duration) -> ClientBuilder {
    Client::builder()
        .connect_string(fake.connect_string())
        .session_timeout(session_timeout)
        .connection_timeout(Duration::from_secs(2))
        .retry_policy(RetryNTimes::new(0, Duration::ZERO))
}

fn connected(c: Client) -> Client {
    c.start().expect("start client");
    assert!(
        c.block_until_connected(Duration::from_secs(10)).unwrap(),
        "no connection: {:?}",
        c.state_history()
    );
    c
}

#[test]
fn fake_server_speaks_the_handshake_and_records_requests() {
    let fake = FakeServer::start(Script::default().session_id(0x77)).unwrap();
    let c = connected(fake_client(&fake, Duration::from_secs(3)));
    assert_eq!(c.session_id(), 0x77);
    assert_eq!(c.negotiated_session_timeout(), Duration::from_secs(3));
    // The fake answers NoNode to exists by default.
    assert_eq!(c.exists("/x").unwrap(), None);
    c.close();
    let seen = fake.seen();
    assert_eq!(seen.connections, 1, "{seen:?}");
    assert_eq!(seen.handshakes[0].session_id, 0);
    assert_eq!(seen.handshakes[0].timeout_ms, 3000);
    assert_eq!(seen.count(op::EXISTS), 1, "{seen:?}");
    assert_eq!(seen.count(op::CLOSE_SESSION), 1, "{seen:?}");
}

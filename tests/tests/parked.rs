//! A parked connection: once a caller has read its reply and nothing is
//! due from the server (every request answered, no watch set), the
//! engine's poll hears of hang-ups only, and the next caller reads its
//! reply without switching the poll's interest off and on. These tests pin
//! what parking must not lose:
//!
//! - the server hanging up an idle connection is noticed at once, not at
//!   the next ping;
//! - a request whose caller does not read (a cancellable handle) is still
//!   answered: the engine reads for it, whether the handle writes to a
//!   parked connection or a reader lets go with the handle's reply due;
//!   and such a caller waits where its cancel reaches it;
//! - pings on an idle connection are answered, so it is not dropped as
//!   silent.
//!
//! Each test first has a caller read its own replies, so that the
//! connection is parked when the test's fault comes.
//!
//! Written for the engine of 2026-11-26, whose callers read their own
//! replies; the engine now reads every reply (`isolation.rs`), and these
//! tests pin the same outcomes against it.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use latchkey_framework::CancelToken;
use latchkey_test::FaultProxy;

use common::{
    assert_connection_kept, call_within, connect, read_a_few_times, shared_server, wait_until,
};

/// Long enough that no ping (every 10 s at most) or silence check comes
/// along within a test's bounds.
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn a_parked_connection_hears_the_server_hang_up() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&c, "/");
    let suspended = c.metrics().suspensions;
    let cut_at = Instant::now();
    assert_eq!(proxy.cut(), 1, "one connection to cut");
    // The next ping is 10 s away: only the hang-up itself can tell.
    wait_until(
        Duration::from_secs(3),
        || c.metrics().suspensions > suspended,
        || format!("the hang-up went unnoticed: {:?}", c.state_history()),
    );
    println!("noticed {:?} after the cut", cut_at.elapsed());
    // The session goes on over a new connection.
    assert!(c.block_until_connected(Duration::from_secs(10)).unwrap());
    c.get_data("/").unwrap();
}

#[test]
fn a_cancellable_call_on_a_parked_connection_is_answered() {
    let server = shared_server();
    let c = connect(&server.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&c, "/");
    let token = CancelToken::new();
    let handle = c.with_cancel(Some(&token));
    // The handle's call waits on its reply slot, never on the socket:
    // the engine must be the one reading.
    let (result, took) = call_within("the cancellable call", Duration::from_secs(3), move || {
        let started = Instant::now();
        (handle.get_data("/").map(drop), started.elapsed())
    });
    assert!(result.is_ok(), "{result:?} after {took:?}");
    // Still parked afterwards or not, the next plain call is answered too.
    c.get_data("/").unwrap();
}

/// A cancellable call written to a parked connection leaves the reading
/// to the engine and waits on its reply slot, where a cancel reaches it:
/// cancelled while its request and reply are held up, it returns at once
/// instead of reading the socket until the reply comes.
#[test]
fn a_cancellable_call_on_a_parked_connection_ends_at_its_cancel() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&c, "/");
    // Each chunk waits 3 s in the proxy: the reply is 6 s away.
    proxy.set_delay(Duration::from_secs(3));
    let sent = c.metrics().requests_sent;
    let token = CancelToken::new();
    let handle = c.with_cancel(Some(&token));
    let (tx, rx) = crossbeam_channel::bounded(1);
    thread::spawn(move || {
        let _ = tx.send(handle.get_data("/").map(drop));
    });
    wait_until(
        Duration::from_secs(10),
        || c.metrics().requests_sent > sent,
        || format!("the call was never sent: {:?}", c.state_history()),
    );
    let cancelled_at = Instant::now();
    token.cancel();
    let result = rx
        .recv_timeout(Duration::from_secs(2))
        .expect("the cancelled call did not return within 2 s of its cancel");
    println!("returned {:?} after the cancel", cancelled_at.elapsed());
    assert!(
        matches!(result, Err(latchkey_framework::Error::Cancelled)),
        "{result:?}"
    );
    proxy.set_delay(Duration::ZERO);
}

/// A reader that has its own reply while another thread's is still due
/// does not park: the engine reads the rest.
#[test]
fn a_reader_that_lets_go_with_another_reply_due_leaves_it_to_the_engine() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = connect(&proxy.connect_string(), SESSION_TIMEOUT);
    read_a_few_times(&c, "/");
    // Each chunk waits 300 ms in the proxy: the plain call's reply comes
    // alone, well before the cancellable call's.
    proxy.set_delay(Duration::from_millis(300));
    let sent = c.metrics().requests_sent;
    let reader = c.clone();
    let plain = thread::spawn(move || reader.get_data("/").map(drop));
    wait_until(
        Duration::from_secs(10),
        || c.metrics().requests_sent > sent,
        || format!("the plain call was never sent: {:?}", c.state_history()),
    );
    let token = CancelToken::new();
    let handle = c.with_cancel(Some(&token));
    let (result, took) = call_within("the cancellable call", Duration::from_secs(4), move || {
        let started = Instant::now();
        (handle.get_data("/").map(drop), started.elapsed())
    });
    assert!(result.is_ok(), "{result:?} after {took:?}");
    plain.join().unwrap().unwrap();
}

#[test]
fn pings_keep_a_parked_connection_alive() {
    let server = shared_server();
    // Negotiated 2 s: silence drops the connection after 1.33 s, a ping
    // goes out every 667 ms.
    let c = connect(&server.connect_string(), Duration::from_secs(2));
    read_a_few_times(&c, "/");
    let before = c.metrics();
    // Idle for three silence bounds; only answered pings keep it up.
    thread::sleep(Duration::from_secs(4));
    assert_connection_kept(&c, &before, "an idle connection was dropped");
    c.get_data("/").unwrap();
}

//! Reconnecting to a server that takes connections before it answers them
//! (one still starting): a connect attempt's wait for the handshake reply
//! starts short and grows per attempt that ran out of it, up to the
//! connection timeout, so a client is back soon after the server serves
//! and a slow but healthy server is still reached.

mod common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{start_connected, wait_until};
use latchkey_framework::{Client, ConnectionState, ListenerHandle};
use latchkey_test::fake_server::{FakeServer, Script};
use latchkey_test::{FaultProxy, TestingServer};
use parking_lot::Mutex;

/// The connection timeouts the issue measured, and one below them.
const TIMEOUTS: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(3),
    Duration::from_secs(15),
];

/// A client of `connect` with `connection_timeout`, and a session that
/// outlives the outages here.
fn client(connect: &str, connection_timeout: Duration) -> Client {
    start_connected(
        Client::builder()
            .connect_string(connect)
            .session_timeout(Duration::from_secs(30))
            .connection_timeout(connection_timeout),
    )
}

/// When `c` next reports `Reconnected`, stamped on its listener thread
/// (while the handle lives).
fn reconnected_at(c: &Client) -> (ListenerHandle, Arc<Mutex<Option<Instant>>>) {
    let at = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&at);
    let handle = c.add_listener(move |s| {
        if s == ConnectionState::Reconnected {
            slot.lock().get_or_insert_with(Instant::now);
        }
    });
    (handle, at)
}

fn histories(clients: &[Client]) -> String {
    let lines: Vec<String> = clients
        .iter()
        .map(|c| format!("{:?}: {:?}", c.connection_timeout(), c.state_history()))
        .collect();
    lines.join("\n")
}

/// The proxy plays a restart: every connection is cut and, for a second,
/// new ones are accepted and never answered; then the server serves. Before
/// the fix each client waited out its whole connection timeout on the
/// connection the starting server took (3 s and 15 s here: about 2 s and
/// 14 s after it served); now each is back within 1 s.
#[test]
fn clients_reconnect_within_1_s_of_a_starting_server_serving() {
    let server = TestingServer::start().unwrap();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let clients: Vec<Client> = TIMEOUTS
        .iter()
        .map(|t| client(&proxy.connect_string(), *t))
        .collect();
    let back: Vec<_> = clients.iter().map(reconnected_at).collect();

    let accepted = proxy.accepted_count();
    proxy.set_starting(true);
    let cut = Instant::now();
    proxy.cut();
    // Every client has met the starting server at least once.
    wait_until(
        Duration::from_secs(10),
        || proxy.accepted_count() >= accepted + clients.len(),
        || histories(&clients),
    );
    let phase = Duration::from_secs(1);
    thread::sleep(phase.saturating_sub(cut.elapsed()));
    proxy.set_starting(false);
    let serving = Instant::now();

    wait_until(
        Duration::from_secs(30),
        || back.iter().all(|(_, b)| b.lock().is_some()),
        || histories(&clients),
    );
    let late: Vec<(Duration, Duration)> = clients
        .iter()
        .zip(&back)
        .map(|(c, (_, b))| {
            let at = b.lock().expect("reconnected");
            (
                c.connection_timeout(),
                at.saturating_duration_since(serving),
            )
        })
        .collect();
    println!("(connection timeout, reconnected after the server served): {late:?}");
    for (timeout, after) in &late {
        assert!(
            *after < Duration::from_secs(1),
            "connection timeout {timeout:?}: reconnected {after:?} after the server served\n{late:?}\n{}",
            histories(&clients)
        );
    }
    for c in clients {
        c.close();
    }
}

/// A server that answers every handshake 1.5 times the first wait late is
/// slow, not gone: the wait grows until it covers the reply, and the client
/// connects after a few attempts rather than dropping it in a loop.
#[test]
fn a_slow_but_healthy_server_is_connected_to() {
    let first_wait = Duration::from_millis(250);
    let fake = FakeServer::start(Script::default().handshake_delay(first_wait * 3 / 2)).unwrap();
    let c = Client::builder()
        .connect_string(fake.connect_string())
        .session_timeout(Duration::from_secs(30))
        .connection_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    c.start().unwrap();
    let connected = c.block_until_connected(Duration::from_secs(20)).unwrap();
    let seen = fake.seen();
    assert!(connected, "never connected: {seen:?}");
    println!("connected after {} handshakes", seen.handshakes.len());
    // 250, 375, 562 ms: the third wait covers the reply; a loaded machine
    // may need one or two more.
    assert!(
        seen.handshakes.len() <= 5,
        "{} handshakes: {seen:?}",
        seen.handshakes.len()
    );
    c.close();
}

/// The measurement behind docs/RELIABILITY.md: 20 restarts of a real
/// server on its port, with three clients of each connection timeout
/// (1, 3 and 15 s); prints how long after the server served each client
/// was back (`Reconnected`), and the median, p90 and max per timeout.
/// The server counts as serving from the first `srvr` it answers with a
/// mode, polled every 5 ms with a 50 ms timeout. Each restart comes 2 s
/// after the last client was back, so it meets connections the client
/// counts as healthy (a connection dropped within 1 s keeps the pause
/// between attempts growing, up to 1 s with jitter of 50%).
///
/// `cargo test -p latchkey-test --test reconnect_wait -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, run by hand: about 2 to 5 minutes"]
fn measure_reconnects_over_real_server_restarts() {
    const ROUNDS: usize = 20;
    const PER_TIMEOUT: usize = 3;
    const HOLD: Duration = Duration::from_secs(2);
    let mut server = TestingServer::start().unwrap();
    let addr = server.addr();
    let clients: Vec<Client> = TIMEOUTS
        .iter()
        .flat_map(|t| (0..PER_TIMEOUT).map(|_| *t))
        .map(|t| client(&server.connect_string(), t))
        .collect();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); TIMEOUTS.len()];
    for round in 1..=ROUNDS {
        let back: Vec<_> = clients.iter().map(reconnected_at).collect();
        server.stop().unwrap();
        wait_until(
            Duration::from_secs(20),
            || {
                clients
                    .iter()
                    .all(|c| c.state() != Some(ConnectionState::Connected))
            },
            || histories(&clients),
        );
        let poller = thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                let reply =
                    latchkey_test::four_letter_word(addr, "srvr", Duration::from_millis(50));
                if reply.is_ok_and(|r| r.contains("Mode:")) {
                    return Some(Instant::now());
                }
                thread::sleep(Duration::from_millis(5));
            }
            None
        });
        server.restart().unwrap();
        let serving = poller.join().unwrap().expect("the server never served");
        wait_until(
            Duration::from_secs(40),
            || back.iter().all(|(_, b)| b.lock().is_some()),
            || histories(&clients),
        );
        let mut line = format!("round {round:2}:");
        for (i, (_, b)) in back.iter().enumerate() {
            let at = b.lock().expect("reconnected");
            // Negative when a client was back before the poller saw the
            // server serve.
            let after = match at.checked_duration_since(serving) {
                Some(d) => d.as_secs_f64(),
                None => -serving.duration_since(at).as_secs_f64(),
            };
            samples[i / PER_TIMEOUT].push(after);
            line += &format!(" {:.2}", after);
        }
        println!("{line}");
        thread::sleep(HOLD);
    }
    println!("connection timeout | reconnects | median | p90 | max (s after the server served)");
    for (t, s) in TIMEOUTS.iter().zip(&mut samples) {
        s.sort_by(f64::total_cmp);
        let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
        println!(
            "{:?} | {} | {:.2} | {:.2} | {:.2}",
            t,
            s.len(),
            at(0.5),
            at(0.9),
            at(1.0)
        );
    }
    for c in clients {
        c.close();
    }
}

/// A connection that went silent (a partition, a blackhole: the proxy
/// still takes connections but forwards nothing) is not a server restart:
/// short handshake waits there only send ConnectRequests that the network
/// delivers once it heals, and each of those, processed after the client
/// is back, moves the session to a dead connection and closes the live
/// one (a second disconnect, and a leader interrupted twice). After a
/// silent connection the client waits its whole connection timeout per
/// attempt, as before the short waits.
#[test]
fn after_a_silent_connection_attempts_wait_their_whole_timeout() {
    let server = TestingServer::start().unwrap();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let c = start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(12))
            .connection_timeout(Duration::from_secs(5)),
    );
    let states = c.listen();
    proxy.pause();
    let paused = Instant::now();
    let accepted = proxy.accepted_count();
    wait_until(
        Duration::from_secs(20),
        || states.try_iter().any(|s| s == ConnectionState::Suspended),
        || format!("never suspended: {:?}", c.state_history()),
    );
    // The read timeout is 8 s; the first attempt after it waits the 5 s
    // connection timeout, so at most two attempts fit in 4 s past it.
    wait_until(
        Duration::from_secs(20),
        || paused.elapsed() >= Duration::from_secs(12),
        || "time does not pass".into(),
    );
    let attempts = proxy.accepted_count() - accepted;
    proxy.resume();
    wait_until(
        Duration::from_secs(20),
        || c.state() == Some(ConnectionState::Reconnected),
        || format!("never reconnected: {:?}", c.state_history()),
    );
    assert!(
        attempts <= 2,
        "{attempts} connection attempts within 4 s of a silent connection's end (each a \
         ConnectRequest delivered late once the network heals): {:?}",
        c.state_history()
    );
    c.close();
}

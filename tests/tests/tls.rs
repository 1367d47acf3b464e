//! TLS on ZooKeeper's secure client port, against a real server with
//! certificates made for the test: operations, mutual TLS, certificates
//! that must be refused (clearly, and without a reconnect storm), the lock
//! recipes and a server restart, all over TLS.

mod common;

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use latchkey_framework::{Client, ClientBuilder, Error, ExponentialBackoffRetry, TlsConfig};
use latchkey_recipes::InterProcessMutex;
use latchkey_test::{ClientAuth, ServerConfig, TestCerts, TestingServer};

const SESSION: Duration = Duration::from_secs(10);

/// A server serving TLS with `certs`; the certificates must outlive it.
fn tls_server(certs: &TestCerts, auth: ClientAuth) -> TestingServer {
    TestingServer::start_with(ServerConfig::default().tls(certs, auth))
        .expect("start a TLS ZooKeeper")
}

fn builder(connect_string: &str, tls: TlsConfig) -> ClientBuilder {
    Client::builder()
        .connect_string(connect_string)
        .session_timeout(SESSION)
        .connection_timeout(Duration::from_secs(5))
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 10))
        .tls(tls)
}

fn secure(server: &TestingServer) -> String {
    server.secure_connect_string().expect("server serves TLS")
}

/// Why a client that never connects cannot: the `NotConnected` reason of
/// an operation.
fn not_connected_reason(c: &Client) -> String {
    let err = match c.get_data("/") {
        Err(Error::Operation { source, .. }) => *source,
        other => panic!("expected the get_data to fail, got {other:?}"),
    };
    match err {
        Error::NotConnected {
            last_attempt: Some(why),
        } => why,
        other => panic!("expected NotConnected with a reason, got {other:?}"),
    }
}

#[test]
fn operations_over_tls() {
    let certs = TestCerts::generate().unwrap();
    let server = tls_server(&certs, ClientAuth::None);
    // The connect string names 127.0.0.1: verified against the IP SAN.
    let c = start_connected(builder(&secure(&server), TlsConfig::new(certs.ca_file())));
    let ctx = Ctx::new(&server, &c);
    let path = unique("tls-ops");
    c.create().for_path(&path, b"one").unwrap();
    c.set_data(&path, b"two", None).unwrap();
    assert_eq!(c.get_data(&path).unwrap().0, b"two", "{}", ctx.dump());
    // A reply of several TLS records (up to 16 KiB each) arrives whole.
    let big = vec![7u8; 900 * 1024];
    c.set_data(&path, &big, None).unwrap();
    assert_eq!(c.get_data(&path).unwrap().0, big, "{}", ctx.dump());
    for i in 0..50 {
        c.create()
            .for_path(&format!("{path}/child-{i:03}"), b"")
            .unwrap();
    }
    assert_eq!(c.get_children(&path).unwrap().len(), 50);
    c.delete()
        .deleting_children_if_needed()
        .for_path(&path)
        .unwrap();
    assert!(c.exists(&path).unwrap().is_none());
    c.close();
}

/// Forwards each connection to `target` and counts them: how often a
/// client tried.
struct CountingRelay {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl CountingRelay {
    fn start(target: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, stopped) = (Arc::clone(&accepted), Arc::clone(&stop));
        let acceptor = thread::spawn(move || {
            for client in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
                    continue;
                };
                // Each direction ends when its source closes.
                for (mut from, mut to) in [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ]
                .into_iter()
                .filter_map(|(a, b)| Some((a.ok()?, b.ok()?)))
                {
                    thread::spawn(move || {
                        let _ = io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Ok(CountingRelay {
            addr,
            accepted,
            stop,
            acceptor: Some(acceptor),
        })
    }

    fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for CountingRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}

/// How long a refused client is watched, and the most connections it may
/// make meanwhile: its back-off starts at 20 ms and grows to 1 s (jittered
/// ±50%), at most 12 attempts in 6 s once grown; the Java client, pausing
/// up to 1 s between attempts, makes about as many. Without back-off a
/// refused handshake (a few ms on loopback) repeats about 1,100 times in
/// 6 s.
const REFUSED_WATCH: Duration = Duration::from_secs(6);
const REFUSED_MAX_CONNECTIONS: usize = 20;

/// A client with `tls` never connects to `server`: its attempts fail with
/// a reason containing `expected` and naming the host, and it keeps trying
/// at a back-off pace, not in a storm.
fn refused_without_storm(server: &TestingServer, tls: TlsConfig, expected: &str) {
    let target: SocketAddr = secure(server).parse().unwrap();
    let relay = CountingRelay::start(target).unwrap();
    let c = Client::builder()
        .connect_string(relay.connect_string())
        .session_timeout(SESSION)
        .connection_timeout(Duration::from_secs(2))
        .retry_policy(latchkey_framework::RetryNTimes::new(0, Duration::ZERO))
        .tls(tls)
        .build()
        .unwrap();
    c.start().unwrap();
    // On a loaded machine an attempt may time out before the server
    // answers: wait for one that got the verdict.
    let deadline = Instant::now() + Duration::from_secs(30);
    let reason = loop {
        let reason = not_connected_reason(&c);
        if reason.contains(expected) || Instant::now() >= deadline {
            break reason;
        }
    };
    assert!(
        reason.contains(expected) && reason.contains(&relay.connect_string()),
        "reason {reason:?} should name {} and say {expected:?}",
        relay.connect_string()
    );
    let before = relay.accepted();
    assert!(
        !c.block_until_connected(REFUSED_WATCH).unwrap(),
        "connected with a certificate that must be refused"
    );
    let tries = relay.accepted() - before;
    println!("{expected}: {tries} connections in {REFUSED_WATCH:?}");
    assert!(
        tries >= 2,
        "gave up: {tries} connection(s) in {REFUSED_WATCH:?}"
    );
    assert!(
        tries <= REFUSED_MAX_CONNECTIONS,
        "{tries} connections in {REFUSED_WATCH:?}: a reconnect storm\n{}",
        server.log_tail(20)
    );
    c.close();
}

/// `Duration::MAX` as the connection timeout means no bound on connecting,
/// over TLS as without: the handshake's deadline must not overflow.
#[test]
fn an_unbounded_connection_timeout_connects_over_tls() {
    let certs = TestCerts::generate().unwrap();
    let server = tls_server(&certs, ClientAuth::None);
    let c = start_connected(
        builder(&secure(&server), TlsConfig::new(certs.ca_file()))
            .connection_timeout(Duration::MAX),
    );
    c.exists("/").unwrap();
    c.close();
}

#[test]
fn untrusted_server_certificate_is_refused_clearly_without_storm() {
    let certs = TestCerts::generate().unwrap();
    let other_ca = TestCerts::generate().unwrap();
    let server = tls_server(&certs, ClientAuth::None);
    refused_without_storm(
        &server,
        TlsConfig::new(other_ca.ca_file()),
        "invalid peer certificate: UnknownIssuer",
    );
}

#[test]
fn mismatched_server_name_is_refused_clearly_without_storm() {
    let certs = TestCerts::generate().unwrap();
    let server = tls_server(&certs, ClientAuth::None);
    refused_without_storm(
        &server,
        TlsConfig::new(certs.ca_file()).server_name("zk.example.com"),
        "not valid for name \"zk.example.com\"",
    );
    // The name the certificate carries passes.
    let c = start_connected(builder(
        &secure(&server),
        TlsConfig::new(certs.ca_file()).server_name("localhost"),
    ));
    c.create().for_path(&unique("tls-name"), b"").unwrap();
    c.close();
}

#[test]
fn mutual_tls_required_by_the_server() {
    let certs = TestCerts::generate().unwrap();
    let server = tls_server(&certs, ClientAuth::Need);
    let with_cert = TlsConfig::new(certs.ca_file())
        .client_cert(certs.client_cert_file(), certs.client_key_file());
    let c = start_connected(builder(&secure(&server), with_cert));
    let path = unique("mtls");
    c.create().for_path(&path, b"mutual").unwrap();
    assert_eq!(c.get_data(&path).unwrap().0, b"mutual");
    c.close();
    // Without a certificate the server ends the handshake.
    refused_without_storm(
        &server,
        TlsConfig::new(certs.ca_file()),
        "received fatal alert: BadCertificate",
    );
}

#[test]
fn unreadable_tls_files_fail_the_build_naming_the_file() {
    let certs = TestCerts::generate().unwrap();
    let missing = certs.dir().join("missing.pem");
    let err = Client::builder()
        .connect_string("127.0.0.1:2281")
        .tls(TlsConfig::new(&missing))
        .build()
        .expect_err("a missing CA file fails the build");
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
    // A key file that holds a certificate, not a key.
    let err = Client::builder()
        .connect_string("127.0.0.1:2281")
        .tls(
            TlsConfig::new(certs.ca_file())
                .client_cert(certs.client_cert_file(), certs.client_cert_file()),
        )
        .build()
        .expect_err("a key file without a key fails the build");
    assert!(err.to_string().contains("client key file"), "{err}");
}

#[test]
fn mutex_excludes_two_clients_over_tls() {
    let certs = TestCerts::generate().unwrap();
    let server = tls_server(&certs, ClientAuth::Need);
    let tls = TlsConfig::new(certs.ca_file())
        .client_cert(certs.client_cert_file(), certs.client_key_file());
    let cs: Vec<Client> = (0..2)
        .map(|_| start_connected(builder(&secure(&server), tls.clone())))
        .collect();
    let path = unique("tls-mutex");
    let holders = AtomicUsize::new(0);
    let overlaps = AtomicUsize::new(0);
    let cycles = AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    thread::scope(|s| {
        for c in &cs {
            let (path, holders, overlaps, cycles) = (&path, &holders, &overlaps, &cycles);
            s.spawn(move || {
                let m = InterProcessMutex::new(c, path).unwrap();
                for _ in 0..25 {
                    if Instant::now() >= deadline {
                        return;
                    }
                    let Some(guard) = m.try_lock_for(Duration::from_secs(10)).unwrap() else {
                        continue;
                    };
                    if holders.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    thread::sleep(Duration::from_millis(2));
                    holders.fetch_sub(1, Ordering::SeqCst);
                    cycles.fetch_add(1, Ordering::SeqCst);
                    drop(guard);
                }
            });
        }
    });
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    assert_eq!(cycles.load(Ordering::SeqCst), 50, "{}", server.log_tail(20));
    assert!(
        cs[0].get_children(&path).unwrap_or_default().is_empty(),
        "orphaned lock nodes"
    );
    cs.iter().for_each(Client::close);
}

#[test]
fn server_restart_over_tls_resumes_the_session() {
    let certs = TestCerts::generate().unwrap();
    let mut server = tls_server(&certs, ClientAuth::Need);
    let tls = TlsConfig::new(certs.ca_file())
        .client_cert(certs.client_cert_file(), certs.client_key_file());
    let c =
        start_connected(builder(&secure(&server), tls).session_timeout(Duration::from_secs(40)));
    let ctx = Ctx::new(&server, &c);
    let session = c.session_id();
    let path = unique("tls-restart");
    c.create()
        .mode(latchkey_framework::CreateMode::Ephemeral)
        .for_path(&path, b"mine")
        .unwrap();
    server.restart().unwrap();
    wait_until(
        Duration::from_secs(30),
        || c.exists(&path).is_ok_and(|s| s.is_some()),
        || ctx.dump(),
    );
    assert_eq!(c.session_id(), session, "a new session\n{}", ctx.dump());
    let history = c.state_history();
    assert!(
        history
            .iter()
            .any(|(_, s)| *s == latchkey_framework::ConnectionState::Reconnected),
        "no reconnect over TLS: {history:?}"
    );
    c.close();
}

/// `expire_session_for_testing` reaches the server the way the client
/// does: over TLS.
#[test]
fn a_test_expiry_goes_over_tls() {
    let certs = TestCerts::generate().unwrap();
    let server = tls_server(&certs, ClientAuth::None);
    let c = start_connected(builder(&secure(&server), TlsConfig::new(certs.ca_file())));
    let ctx = Ctx::new(&server, &c);
    let states = c.listen();
    let session = c.session_id();
    c.expire_session_for_testing()
        .unwrap_or_else(|e| panic!("expiry over TLS: {e}\n{}", ctx.dump()));
    ctx.expect(
        &states,
        latchkey_framework::ConnectionState::Lost,
        Duration::from_secs(20),
    );
    wait_until(
        Duration::from_secs(20),
        || c.exists("/").is_ok() && c.session_id() != session,
        || ctx.dump(),
    );
    c.close();
}

/// Connected read-only over TLS, the client looks for a read-write server
/// (`isro`) over TLS too, and moves there. The read-only server is the
/// survivor of a 3-member TLS ensemble whose other members are down; the
/// read-write one is a standalone TLS server behind a relay that refuses
/// connections until the client is read-only.
#[test]
fn a_read_only_client_over_tls_finds_a_read_write_server() {
    read_only_over_tls_finds_read_write(&TestCerts::generate().unwrap(), "127.0.0.1");
}

/// The same with certificates for the host name only, as certificates
/// usually are, and the name in the connect string: the move to the
/// read-write server the probe found must verify that server under the
/// name it was probed by (as the session's own connections do), not
/// under its address.
#[test]
fn a_read_only_client_over_tls_moves_under_the_host_name() {
    let resolved: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs("localhost:1")
        .map(Iterator::collect)
        .unwrap_or_default();
    if resolved.iter().any(|a| a.ip().to_string() != "127.0.0.1") {
        println!("skipped: localhost resolves to {resolved:?}, not 127.0.0.1 alone");
        return;
    }
    let certs = TestCerts::generate_for(&["localhost"]).unwrap();
    read_only_over_tls_finds_read_write(&certs, "localhost");
}

/// Connected read-only over TLS to the survivor of a 3-member ensemble,
/// with `host` (127.0.0.1 or localhost) in the connect string, the client
/// finds the read-write server and writes there.
fn read_only_over_tls_finds_read_write(certs: &TestCerts, host: &str) {
    let config = ServerConfig {
        system_properties: vec![("readonlymode.enabled".into(), "true".into())],
        // A read-only server serves local sessions only.
        extra: vec![("localSessionsEnabled".into(), "true".into())],
        ..Default::default()
    }
    .tls(certs, ClientAuth::None);
    let mut cluster = latchkey_test::TestingCluster::start_with(3, config).unwrap();
    // A write, so that the read-only member's zxid is surely of epoch 1.
    let early = connect(&cluster.member_connect_string(0), SESSION);
    early
        .create()
        .for_path(&unique("tls-ro-epoch"), b"")
        .unwrap();
    early.close();
    cluster.kill(1).unwrap();
    cluster.kill(2).unwrap();
    // The read-write server is a one-member ensemble in quorum mode, not a
    // standalone server: a server refuses a client that has seen a newer
    // zxid than its own (the client must try another server), and once
    // the 3-member ensemble has begun its epoch (zxid 0x100000000, which
    // the read-only member's replies carry), a standalone server (epoch
    // 0) refuses the move for good. Its own epoch 1 and a few writes put
    // it ahead of the read-only member, as a real ensemble's majority is.
    let read_write = latchkey_test::TestingCluster::start_with(
        1,
        ServerConfig::default()
            .tls(certs, ClientAuth::None)
            .extra("standaloneEnabled", "false"),
    )
    .unwrap();
    let writer = connect(&read_write.member_connect_string(0), SESSION);
    for i in 0..3 {
        writer
            .create()
            .for_path(&unique(&format!("tls-ro-ahead-{i}")), b"")
            .unwrap();
    }
    writer.close();
    let relay = latchkey_test::FaultProxy::start(
        read_write
            .member_secure_connect_string(0)
            .unwrap()
            .parse()
            .unwrap(),
    )
    .unwrap();
    relay.set_refuse(true);
    let read_only = cluster
        .member_secure_connect_string(0)
        .unwrap()
        .replace("127.0.0.1", host);
    let c = Client::builder()
        .connect_string(format!(
            "{read_only},{}",
            relay.connect_string().replace("127.0.0.1", host)
        ))
        .session_timeout(SESSION)
        .connection_timeout(Duration::from_secs(4))
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 10))
        .can_be_read_only(true)
        .tls(TlsConfig::new(certs.ca_file()))
        .build()
        .unwrap();
    c.start().unwrap();
    let dump = |c: &Client| {
        format!(
            "client states: {:?}\nmember 0:\n{}\nread-write server:\n{}",
            c.state_history(),
            cluster.log_tail(0, 20),
            read_write.log_tail(0, 20)
        )
    };
    wait_until(
        Duration::from_secs(90),
        || c.state() == Some(latchkey_framework::ConnectionState::ReadOnly),
        || dump(&c),
    );
    let before = relay.accepted_count();
    relay.set_refuse(false);
    // Writes succeed once the client is on the read-write server, which it
    // finds only by asking it `isro` over TLS: within a few seconds (the
    // probe's interval doubles for the session, up to 60 s, as the Java
    // client's; the bound leaves room for that).
    let path = unique("tls-ro");
    wait_until(
        Duration::from_secs(150),
        || c.create().for_path(&path, b"rw").is_ok(),
        || dump(&c),
    );
    assert!(
        relay.accepted_count() > before,
        "the write went elsewhere\n{}",
        dump(&c)
    );
    c.close();
}

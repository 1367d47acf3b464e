//! Tests of the harness itself, against real ZooKeeper JVMs. No ZooKeeper
//! client library: four-letter words and raw TCP only.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use latchkey_test::{four_letter_word, unique_path, FaultProxy, TestingCluster, TestingServer};

/// Deadline for every wait on a condition.
const WAIT: Duration = Duration::from_secs(30);

/// Polls `cond` until it holds; panics with `context()` after `timeout`.
fn wait_until(
    timeout: Duration,
    what: &str,
    mut cond: impl FnMut() -> bool,
    context: impl Fn() -> String,
) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "timed out after {timeout:?} waiting for {what}\n{}",
        context()
    );
}

fn srvr(addr: SocketAddr) -> io::Result<String> {
    four_letter_word(addr, "srvr", Duration::from_secs(5))
}

#[test]
fn server_starts_stops_restarts_on_the_same_port_and_is_killed() {
    let t0 = Instant::now();
    let mut server = TestingServer::start().expect("start ZooKeeper");
    let started = t0.elapsed();
    let log = |s: &TestingServer| format!("server log tail:\n{}", s.log_tail(40));
    let port = server.port();
    assert_eq!(server.connect_string(), format!("127.0.0.1:{port}"));
    assert_eq!(server.addr().port(), port);
    assert!(server.is_running());

    let reply = server.four_letter("srvr").unwrap();
    assert!(
        reply.contains("Mode: standalone"),
        "{reply}\n{}",
        log(&server)
    );
    let mntr = server.four_letter("mntr").unwrap();
    assert!(mntr.contains("zk_version"), "{mntr}\n{}", log(&server));
    let conf = server.four_letter("conf").unwrap();
    assert!(conf.contains("minSessionTimeout=400"), "{conf}");
    assert!(conf.contains("maxSessionTimeout=60000"), "{conf}");
    assert!(conf.contains("tickTime=200"), "{conf}");
    assert!(server.four_letter("nope").is_err());

    let t1 = Instant::now();
    server.stop().unwrap();
    let stopped = t1.elapsed();
    assert!(!server.is_running());
    assert!(
        TcpStream::connect_timeout(&server.addr(), Duration::from_secs(2)).is_err(),
        "nothing listens after stop"
    );
    server.stop().unwrap(); // idempotent

    let t2 = Instant::now();
    server.restart().expect("restart");
    let restarted = t2.elapsed();
    assert_eq!(server.port(), port);
    assert!(server.is_running());
    let reply = srvr(server.addr()).unwrap();
    assert!(
        reply.contains("Mode: standalone"),
        "{reply}\n{}",
        log(&server)
    );

    server.kill().unwrap();
    assert!(!server.is_running());
    assert!(
        srvr(server.addr()).is_err(),
        "a killed server does not answer"
    );

    // Restart after a crash, and restart while running (stop + start).
    server.restart().expect("restart after kill");
    server.restart().expect("restart while running");
    assert!(srvr(server.addr()).unwrap().contains("Mode:"));
    let tail = server.log_tail(5);
    assert!(!tail.is_empty() && tail.lines().count() <= 5, "{tail}");
    assert!(
        server
            .log_tail(10_000)
            .matches("starting ZooKeeper")
            .count()
            >= 4
    );

    let dir = server.dir().to_path_buf();
    assert!(dir.join("zoo.cfg").is_file());
    drop(server);
    assert!(!dir.exists(), "drop removes {}", dir.display());
    eprintln!(
        "start {started:?}, graceful stop {stopped:?}, restart {restarted:?}, total {:?}",
        t0.elapsed()
    );
}

#[test]
fn restart_on_a_taken_port_fails_clearly_then_works_once_it_is_free() {
    let mut server = TestingServer::start().expect("start ZooKeeper");
    server.stop().unwrap();
    let squatter = TcpListener::bind(server.addr()).expect("take the port");
    let t = Instant::now();
    let err = server.restart().expect_err("the port is taken");
    assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("Address already in use"),
        "the log tail is in the error: {msg}"
    );
    assert!(!server.is_running());
    assert!(t.elapsed() < WAIT, "gave up in {:?}", t.elapsed());
    drop(squatter);
    server.restart().expect("restart once the port is free");
    assert!(server.four_letter("srvr").unwrap().contains("Mode:"));
}

#[test]
fn two_servers_get_different_ports() {
    let (a, b) = thread::scope(|s| {
        let a = s.spawn(TestingServer::start);
        let b = s.spawn(TestingServer::start);
        (a.join().unwrap().unwrap(), b.join().unwrap().unwrap())
    });
    assert_ne!(a.port(), b.port());
    assert!(a.four_letter("ruok").unwrap().contains("imok"));
    assert!(b.four_letter("ruok").unwrap().contains("imok"));
}

/// Runs only as a child of `missing_java_fails_fast_with_install_advice`.
#[test]
#[ignore = "child process of missing_java_fails_fast_with_install_advice"]
fn child_start_without_java() {
    if std::env::var_os("LATCHKEY_HARNESS_CHILD").is_none() {
        return;
    }
    let t = Instant::now();
    let err = TestingServer::start().expect_err("no java, no server");
    assert!(t.elapsed() < Duration::from_secs(5), "failed fast");
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
    let msg = err.to_string();
    assert!(msg.contains("apt-get install -y zookeeper"), "{msg}");
    assert!(msg.contains("openjdk-17-jre-headless"), "{msg}");
    let err = TestingCluster::start(3).expect_err("no java, no cluster");
    assert!(err.to_string().contains("apt-get install"), "{err}");
}

#[test]
fn missing_java_fails_fast_with_install_advice() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_start_without_java",
            "--ignored",
            "--nocapture",
        ])
        .env("LATCHKEY_HARNESS_CHILD", "1")
        .env("LATCHKEY_JAVA", "/nonexistent/bin/java")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

/// Runs only as a child of `jvm_dies_with_an_aborted_test_process`: a
/// server in a `static` is never dropped, and abort skips every destructor.
#[test]
#[ignore = "child process of jvm_dies_with_an_aborted_test_process"]
fn child_abort_with_static_server() {
    if std::env::var_os("LATCHKEY_HARNESS_CHILD").is_none() {
        return;
    }
    static SERVER: std::sync::OnceLock<TestingServer> = std::sync::OnceLock::new();
    let s = SERVER.get_or_init(|| TestingServer::start().expect("start ZooKeeper"));
    println!("CHILD pid={} dir={}", s.pid().unwrap(), s.dir().display());
    std::process::abort();
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn jvm_dies_with_an_aborted_test_process() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_abort_with_static_server",
            "--ignored",
            "--nocapture",
        ])
        .env("LATCHKEY_HARNESS_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CHILD "))
        .unwrap_or_else(|| {
            panic!(
                "child output:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let (pid, dir) = line.split_once(' ').unwrap();
    let pid: u32 = pid.strip_prefix("pid=").unwrap().parse().unwrap();
    let dir = std::path::PathBuf::from(dir.strip_prefix("dir=").unwrap());
    assert!(!out.status.success(), "the child aborted");
    wait_until(
        WAIT,
        "the orphaned JVM to be killed",
        || process_gone(pid),
        || format!("pid {pid}"),
    );
    wait_until(
        WAIT,
        "its temp dir to be removed",
        || !dir.exists(),
        || dir.display().to_string(),
    );
}

#[test]
fn cluster_elects_fails_over_and_the_old_leader_rejoins_as_follower() {
    let t0 = Instant::now();
    let mut cluster = TestingCluster::start(3).expect("start a 3-member ensemble");
    let started = t0.elapsed();
    assert_eq!(cluster.size(), 3);
    assert_eq!(cluster.connect_string().split(',').count(), 3);
    let modes: Vec<Option<String>> = (0..3).map(|i| cluster.mode(i)).collect();
    assert_eq!(
        modes
            .iter()
            .filter(|m| m.as_deref() == Some("leader"))
            .count(),
        1,
        "{modes:?}\n{}",
        cluster.describe(20)
    );
    assert_eq!(
        modes
            .iter()
            .filter(|m| m.as_deref() == Some("follower"))
            .count(),
        2,
        "{modes:?}"
    );
    for i in 0..3 {
        let addr: SocketAddr = cluster.member_connect_string(i).parse().unwrap();
        assert!(srvr(addr).unwrap().contains("Mode:"));
        assert!(cluster
            .four_letter(i, "mntr")
            .unwrap()
            .contains("zk_server_state"));
    }
    let old = cluster.leader().expect("a leader after start");

    let t1 = Instant::now();
    cluster.kill(old).unwrap();
    assert!(!cluster.is_running(old));
    let mut new = None;
    wait_until(
        WAIT,
        "a new leader among the other two",
        || {
            new = cluster.leader().filter(|&l| l != old);
            new.is_some()
        },
        || cluster.describe(30),
    );
    let failover = t1.elapsed();
    let new = new.unwrap();
    cluster
        .wait_for_quorum(WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    let follower = (0..3).find(|&i| i != old && i != new).unwrap();
    assert_eq!(cluster.mode(follower).as_deref(), Some("follower"));

    let t2 = Instant::now();
    cluster.restart(old).unwrap_or_else(|e| panic!("{e}"));
    let rejoined = t2.elapsed();
    assert_eq!(
        cluster.mode(old).as_deref(),
        Some("follower"),
        "{}",
        cluster.describe(30)
    );
    assert_eq!(cluster.leader(), Some(new));
    cluster
        .wait_for_quorum(WAIT)
        .unwrap_or_else(|e| panic!("{e}"));

    // A graceful stop of a follower keeps the quorum.
    cluster.stop(follower).unwrap();
    cluster
        .wait_for_quorum(WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(cluster.kill(7).is_err());
    assert!(cluster.log_tail(old, 5).lines().count() <= 5);

    let dir = cluster.member_dir(0).unwrap().to_path_buf();
    drop(cluster);
    assert!(!dir.exists());
    eprintln!(
        "cluster start {started:?}, failover {failover:?}, rejoin {rejoined:?}, total {:?}",
        t0.elapsed()
    );
}

/// An echo server that counts the bytes it received.
struct Echo {
    addr: SocketAddr,
    received: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Echo {
    fn start() -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let (received, stop) = (received.clone(), stop.clone());
            thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(120);
                while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                    match listener.accept() {
                        Ok((s, _)) => {
                            let (received, stop) = (received.clone(), stop.clone());
                            thread::spawn(move || echo(s, received, stop));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        Echo {
            addr,
            received,
            stop,
            acceptor: Some(acceptor),
        }
    }

    fn received(&self) -> usize {
        self.received.load(Ordering::SeqCst)
    }
}

fn echo(mut s: TcpStream, received: Arc<AtomicUsize>, stop: Arc<AtomicBool>) {
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                received.fetch_add(n, Ordering::SeqCst);
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}

fn client(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads exactly `n` bytes (10 s read timeout).
fn read_n(s: &mut TcpStream, n: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf)?;
    Ok(buf)
}

/// Whether nothing arrives on `s` within `d`.
fn silent_for(s: &mut TcpStream, d: Duration) -> bool {
    s.set_read_timeout(Some(d)).unwrap();
    let mut b = [0u8; 64];
    let silent = matches!(
        s.read(&mut b),
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
    );
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    silent
}

/// Whether the peer closed `s` (EOF or an error other than a timeout)
/// within `d`.
fn closed_within(s: &mut TcpStream, d: Duration) -> bool {
    let deadline = Instant::now() + d;
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut b = [0u8; 64];
    while Instant::now() < deadline {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn proxy_forwards_bytes_both_ways() {
    let echo = Echo::start();
    let proxy = FaultProxy::start(echo.addr).unwrap();
    assert_eq!(proxy.target(), echo.addr);
    assert_eq!(proxy.connect_string(), proxy.addr().to_string());
    assert!(proxy.addr().ip().is_loopback());
    let mut c = client(proxy.addr());
    for i in 0..20u8 {
        let msg = vec![i; 1000 + i as usize * 100];
        c.write_all(&msg).unwrap();
        assert_eq!(read_n(&mut c, msg.len()).unwrap(), msg);
    }
    let mut c2 = client(proxy.addr());
    c2.write_all(b"second").unwrap();
    assert_eq!(read_n(&mut c2, 6).unwrap(), b"second");
    assert_eq!(proxy.connection_count(), 2);
    drop(c2);
    wait_until(
        WAIT,
        "the closed connection to go",
        || proxy.connection_count() == 1,
        String::new,
    );
}

#[test]
fn proxy_pause_blackholes_both_ways_and_resume_delivers() {
    let echo = Echo::start();
    let proxy = FaultProxy::start(echo.addr).unwrap();
    let mut c = client(proxy.addr());
    c.write_all(b"hello").unwrap();
    assert_eq!(read_n(&mut c, 5).unwrap(), b"hello");
    let before = echo.received();

    proxy.pause();
    c.write_all(b"ping").unwrap();
    assert!(
        silent_for(&mut c, Duration::from_millis(300)),
        "nothing comes back while paused"
    );
    assert_eq!(
        echo.received(),
        before,
        "nothing reaches the target while paused"
    );
    // New connections are accepted, and blackholed too.
    let mut late = client(proxy.addr());
    late.write_all(b"late").unwrap();
    assert!(silent_for(&mut late, Duration::from_millis(300)));
    assert_eq!(echo.received(), before);
    wait_until(
        WAIT,
        "both connections counted",
        || proxy.connection_count() == 2,
        String::new,
    );

    proxy.resume();
    assert_eq!(
        read_n(&mut c, 4).unwrap(),
        b"ping",
        "bytes sent during the pause are delivered"
    );
    assert_eq!(read_n(&mut late, 4).unwrap(), b"late");
    c.write_all(b"after").unwrap();
    assert_eq!(read_n(&mut c, 5).unwrap(), b"after");
}

#[test]
fn proxy_pause_replies_lets_requests_through() {
    let echo = Echo::start();
    let proxy = FaultProxy::start(echo.addr).unwrap();
    let mut c = client(proxy.addr());
    c.write_all(b"x").unwrap();
    assert_eq!(read_n(&mut c, 1).unwrap(), b"x");
    proxy.pause_replies();
    c.write_all(b"request").unwrap();
    wait_until(
        WAIT,
        "the request to reach the target",
        || echo.received() == 8,
        String::new,
    );
    assert!(
        silent_for(&mut c, Duration::from_millis(300)),
        "the reply is held"
    );
    proxy.resume();
    assert_eq!(read_n(&mut c, 7).unwrap(), b"request");

    proxy.pause_requests();
    c.write_all(b"held").unwrap();
    assert!(silent_for(&mut c, Duration::from_millis(300)));
    assert_eq!(echo.received(), 8);
    proxy.resume();
    assert_eq!(read_n(&mut c, 4).unwrap(), b"held");
}

#[test]
fn proxy_pause_requests_at_holds_the_request_carrying_the_bytes_and_after() {
    let echo = Echo::start();
    let proxy = FaultProxy::start(echo.addr).unwrap();
    let mut c = client(proxy.addr());
    proxy.pause_requests_at(b"STOP");
    c.write_all(b"go").unwrap();
    assert_eq!(
        read_n(&mut c, 2).unwrap(),
        b"go",
        "bytes without the mark pass"
    );
    assert!(!proxy.requests_paused());
    c.write_all(b"a STOP here").unwrap();
    wait_until(
        WAIT,
        "the mark to pause requests",
        || proxy.requests_paused(),
        String::new,
    );
    assert!(
        silent_for(&mut c, Duration::from_millis(300)),
        "the request carrying the mark is held"
    );
    c.write_all(b"later").unwrap();
    assert!(
        silent_for(&mut c, Duration::from_millis(300)),
        "so is the next"
    );
    assert_eq!(echo.received(), 2);
    proxy.resume();
    assert!(!proxy.requests_paused());
    assert_eq!(read_n(&mut c, 16).unwrap(), b"a STOP herelater");
    // One shot: the mark passes freely after the resume.
    c.write_all(b"STOP").unwrap();
    assert_eq!(read_n(&mut c, 4).unwrap(), b"STOP");
}

#[test]
fn proxy_cut_closes_the_clients_connection_and_accepts_new_ones() {
    let echo = Echo::start();
    let proxy = FaultProxy::start(echo.addr).unwrap();
    let mut a = client(proxy.addr());
    let mut b = client(proxy.addr());
    for s in [&mut a, &mut b] {
        s.write_all(b"hi").unwrap();
        assert_eq!(read_n(s, 2).unwrap(), b"hi");
    }
    assert_eq!(proxy.cut(), 2);
    assert!(
        closed_within(&mut a, Duration::from_secs(5)),
        "client sees EOF after cut"
    );
    assert!(closed_within(&mut b, Duration::from_secs(5)));
    assert_eq!(proxy.connection_count(), 0);

    let mut c = client(proxy.addr());
    c.write_all(b"again").unwrap();
    assert_eq!(read_n(&mut c, 5).unwrap(), b"again");

    // Cutting a paused connection works too.
    proxy.pause();
    assert_eq!(proxy.cut(), 1);
    assert!(closed_within(&mut c, Duration::from_secs(5)));
    proxy.resume();
}

#[test]
fn proxy_refuse_and_delay() {
    let echo = Echo::start();
    let proxy = FaultProxy::start(echo.addr).unwrap();
    let mut kept = client(proxy.addr());
    kept.write_all(b"k").unwrap();
    assert_eq!(read_n(&mut kept, 1).unwrap(), b"k");

    proxy.set_refuse(true);
    let mut refused = client(proxy.addr());
    assert!(
        closed_within(&mut refused, Duration::from_secs(5)),
        "refused connections close"
    );
    kept.write_all(b"still").unwrap();
    assert_eq!(
        read_n(&mut kept, 5).unwrap(),
        b"still",
        "existing connections keep working"
    );
    proxy.set_refuse(false);

    proxy.set_delay(Duration::from_millis(200));
    let t = Instant::now();
    kept.write_all(b"slow").unwrap();
    assert_eq!(read_n(&mut kept, 4).unwrap(), b"slow");
    let rtt = t.elapsed();
    assert!(
        rtt >= Duration::from_millis(390),
        "two delayed chunks: {rtt:?}"
    );
    proxy.set_delay(Duration::ZERO);
}

#[test]
fn proxy_drop_closes_connections_promptly() {
    let echo = Echo::start();
    let proxy = FaultProxy::start(echo.addr).unwrap();
    let addr = proxy.addr();
    let mut c = client(addr);
    c.write_all(b"x").unwrap();
    assert_eq!(read_n(&mut c, 1).unwrap(), b"x");
    proxy.pause();
    let t = Instant::now();
    drop(proxy);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "drop took {:?}",
        t.elapsed()
    );
    assert!(closed_within(&mut c, Duration::from_secs(5)));
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err());
}

#[test]
fn proxy_in_front_of_zookeeper() {
    let server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let reply = srvr(proxy.addr()).unwrap_or_else(|e| panic!("{e}\n{}", server.log_tail(30)));
    assert!(reply.contains("Mode: standalone"), "{reply}");

    proxy.pause();
    let e = four_letter_word(proxy.addr(), "srvr", Duration::from_millis(300)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    proxy.resume();
    assert!(srvr(proxy.addr()).unwrap().contains("Mode:"));

    // A server restart behind the proxy: new connections reach it again.
    let mut server = server;
    server.restart().unwrap();
    assert!(srvr(proxy.addr()).unwrap().contains("Mode:"));
}

#[test]
fn unique_paths_differ() {
    let a = unique_path("lock");
    let b = unique_path("/lock/");
    assert!(a.starts_with("/lock-"), "{a}");
    assert!(b.starts_with("/lock-"), "{b}");
    assert_ne!(a, b);
    assert!(a.contains(&format!("-{}-", std::process::id())));
    assert_eq!(a.matches('/').count(), 1);
}

//! [`TestingCluster`]: a real N-member ZooKeeper ensemble on loopback.

use std::fmt::Write as _;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tempfile::TempDir;

use crate::jvm::{self, WaitError, ZkProcess};
use crate::server::ServerConfig;

/// How many times a start is retried when another process took a port.
const START_ATTEMPTS: u32 = 3;

/// One ensemble member.
struct Member {
    /// `myid`, index + 1.
    id: usize,
    client_port: u16,
    quorum_port: u16,
    election_port: u16,
    /// `secureClientPort`, when the config serves TLS.
    secure_port: Option<u16>,
    dir: PathBuf,
    process: Mutex<Option<ZkProcess>>,
}

impl Member {
    fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.client_port))
    }

    fn cfg_path(&self) -> PathBuf {
        self.dir.join("zoo.cfg")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("zookeeper.log")
    }

    fn is_alive(&self) -> bool {
        self.process.lock().as_mut().is_some_and(|p| p.is_alive())
    }

    /// `Mode:` from `srvr`, if it answers and serves.
    fn mode(&self) -> Option<String> {
        jvm::four_letter_word(self.addr(), "srvr", Duration::from_secs(2))
            .ok()
            .and_then(|r| jvm::mode_of(&r))
    }
}

/// Modes of a member that serves as part of a quorum.
fn in_quorum(mode: &str) -> bool {
    matches!(mode, "leader" | "follower" | "standalone")
}

/// A real ZooKeeper 3.8 ensemble of N members on 127.0.0.1, each with its
/// own client, quorum and election ports, data dir and `myid`.
///
/// Members are numbered from 0 (member `i` has `myid` `i + 1`). Stopping,
/// killing and restarting a member keeps its ports and data. Dropping the
/// cluster kills every member and removes all files; each JVM also dies with
/// the test process (see [`TestingServer`](crate::TestingServer)).
///
/// ```no_run
/// use std::time::Duration;
/// let mut cluster = latchkey_test::TestingCluster::start(3)?;
/// let leader = cluster.leader().expect("elected at start");
/// cluster.kill(leader)?;
/// cluster.wait_for_quorum(Duration::from_secs(30))?;
/// cluster.restart(leader)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TestingCluster {
    config: ServerConfig,
    members: Vec<Member>,
    dir: Option<TempDir>,
    root: PathBuf,
}

impl std::fmt::Debug for TestingCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestingCluster")
            .field("connect_string", &self.connect_string())
            .field("dir", &self.root)
            .finish_non_exhaustive()
    }
}

impl TestingCluster {
    /// Starts an `n`-member ensemble with [`ServerConfig::default`] and waits
    /// until a leader is elected and every member is leader or follower.
    pub fn start(n: usize) -> io::Result<TestingCluster> {
        Self::start_with(n, ServerConfig::default())
    }

    /// Starts an `n`-member ensemble with `config` (`tickTime`, session
    /// bounds, `initLimit`, `syncLimit`, start timeout) and waits until a
    /// leader is elected and every member is leader or follower. Retries on
    /// fresh ports, up to 3 times, when another process takes a port first.
    ///
    /// A one-member "ensemble" runs standalone (`standaloneEnabled=true`).
    pub fn start_with(n: usize, config: ServerConfig) -> io::Result<TestingCluster> {
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a cluster needs at least one member",
            ));
        }
        jvm::launcher()?;
        let dir = tempfile::Builder::new()
            .prefix("latchkey-zk-cluster-")
            .tempdir()?;
        let root = dir.path().to_path_buf();
        let mut cluster = TestingCluster {
            config,
            members: Vec::new(),
            dir: Some(dir),
            root,
        };
        let mut last_err = None;
        for attempt in 1..=START_ATTEMPTS {
            match cluster.try_start(n, attempt) {
                Ok(()) => return Ok(cluster),
                Err((e, clash)) => {
                    cluster.kill_all();
                    if !clash {
                        return Err(e);
                    }
                    log::info!("a ZooKeeper cluster port was taken; retrying ({e})");
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("ZooKeeper cluster did not start")))
    }

    /// Lays out fresh members on fresh ports, starts them all and waits for
    /// the quorum.
    fn try_start(&mut self, n: usize, attempt: u32) -> Result<(), (io::Error, bool)> {
        let per_member = 3 + usize::from(self.config.tls.is_some());
        let ports = jvm::free_ports(per_member * n).map_err(|e| (e, false))?;
        let base = self.root.join(format!("attempt-{attempt}"));
        self.members = (0..n)
            .map(|i| Member {
                id: i + 1,
                client_port: ports[per_member * i],
                quorum_port: ports[per_member * i + 1],
                election_port: ports[per_member * i + 2],
                secure_port: self.config.tls.as_ref().map(|_| ports[per_member * i + 3]),
                dir: base.join(format!("member-{i}")),
                process: Mutex::new(None),
            })
            .collect();
        let mut peers = String::new();
        for m in &self.members {
            let _ = writeln!(
                peers,
                "server.{}=127.0.0.1:{}:{}",
                m.id, m.quorum_port, m.election_port
            );
        }
        for m in &self.members {
            self.write_member(m, &peers).map_err(|e| (e, false))?;
        }
        for i in 0..n {
            self.spawn_member(i, "start").map_err(|e| (e, false))?;
        }
        let deadline = Instant::now() + self.config.start_timeout;
        // Bounded by the deadline.
        while Instant::now() < deadline {
            for (i, m) in self.members.iter().enumerate() {
                if let Some(status) = m.process.lock().as_mut().and_then(|p| p.exited()) {
                    let clash = jvm::failed_on_port_clash(&m.log_path());
                    let e = io::Error::new(
                        if clash {
                            io::ErrorKind::AddrInUse
                        } else {
                            io::ErrorKind::Other
                        },
                        format!(
                            "cluster member {i} exited ({status}) during start; log:\n{}",
                            self.log_tail(i, 40)
                        ),
                    );
                    return Err((e, clash));
                }
            }
            if self.quorum_formed() {
                return Ok(());
            }
            thread::sleep(jvm::POLL);
        }
        Err((
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "ZooKeeper cluster formed no quorum within {:?}:\n{}",
                    self.config.start_timeout,
                    self.describe(30)
                ),
            ),
            false,
        ))
    }

    fn write_member(&self, m: &Member, peers: &str) -> io::Result<()> {
        let data = m.dir.join("data");
        std::fs::create_dir_all(&data)?;
        std::fs::write(data.join("myid"), format!("{}\n", m.id))?;
        let mut cfg = self.config.common_cfg();
        let _ = writeln!(cfg, "initLimit={}", self.config.init_limit);
        let _ = writeln!(cfg, "syncLimit={}", self.config.sync_limit);
        let _ = writeln!(cfg, "dataDir={}", data.display());
        let _ = writeln!(cfg, "clientPort={}", m.client_port);
        cfg.push_str("clientPortAddress=127.0.0.1\n");
        if let Some(port) = m.secure_port {
            let _ = writeln!(cfg, "secureClientPort={port}");
            cfg.push_str(&self.config.tls_cfg());
        }
        cfg.push_str(peers);
        std::fs::write(m.cfg_path(), cfg)
    }

    fn spawn_member(&self, i: usize, label: &str) -> io::Result<()> {
        let m = &self.members[i];
        let p = ZkProcess::spawn(
            &m.cfg_path(),
            &m.log_path(),
            &m.dir,
            Some(&m.dir),
            &format!("cluster member {i} {label}"),
            &self.config,
        )?;
        *m.process.lock() = Some(p);
        Ok(())
    }

    fn member(&self, i: usize) -> io::Result<&Member> {
        self.members.get(i).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no member {i} in a {}-member cluster", self.members.len()),
            )
        })
    }

    fn member_mut(&mut self, i: usize) -> io::Result<&mut Member> {
        let n = self.members.len();
        self.members.get_mut(i).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no member {i} in a {n}-member cluster"),
            )
        })
    }

    fn kill_all(&mut self) {
        for m in &mut self.members {
            if let Some(p) = m.process.get_mut().take() {
                let _ = p.kill();
            }
        }
    }

    /// Every running member serves as leader or follower, there is exactly
    /// one leader, and the running members are a majority.
    fn quorum_formed(&self) -> bool {
        let running: Vec<&Member> = self.members.iter().filter(|m| m.is_alive()).collect();
        if running.len() * 2 <= self.members.len() {
            return false;
        }
        let mut leaders = 0;
        for m in &running {
            match m.mode() {
                Some(mode) if in_quorum(&mode) => {
                    if mode != "follower" {
                        leaders += 1;
                    }
                }
                _ => return false,
            }
        }
        leaders == 1
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// All members' client addresses, comma-separated, for a client's
    /// connect string.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(|m| m.addr().to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Member `i`'s client address as a connect string (`"127.0.0.1:PORT"`);
    /// empty if there is no member `i`.
    pub fn member_connect_string(&self, i: usize) -> String {
        self.member_addr(i)
            .map(|a| a.to_string())
            .unwrap_or_default()
    }

    /// Member `i`'s TLS address as a connect string, when the cluster
    /// serves TLS (see [`ServerConfig::tls`]); the plain port stays open
    /// for the harness's four-letter words.
    pub fn member_secure_connect_string(&self, i: usize) -> Option<String> {
        let port = self.members.get(i)?.secure_port?;
        Some(format!("127.0.0.1:{port}"))
    }

    /// Member `i`'s client address.
    pub fn member_addr(&self, i: usize) -> Option<SocketAddr> {
        self.members.get(i).map(Member::addr)
    }

    /// Member `i`'s directory (`zoo.cfg`, `data/myid`, `zookeeper.log`).
    pub fn member_dir(&self, i: usize) -> Option<&Path> {
        self.members.get(i).map(|m| m.dir.as_path())
    }

    /// Stops member `i` gracefully (SIGTERM, SIGKILL after 5 s). A no-op if
    /// it is already stopped.
    pub fn stop(&mut self, i: usize) -> io::Result<()> {
        match self.member_mut(i)?.process.get_mut().take() {
            Some(p) => p.terminate(jvm::STOP_GRACE),
            None => Ok(()),
        }
    }

    /// Kills member `i` with SIGKILL. A no-op if it is already stopped.
    pub fn kill(&mut self, i: usize) -> io::Result<()> {
        match self.member_mut(i)?.process.get_mut().take() {
            Some(p) => p.kill(),
            None => Ok(()),
        }
    }

    /// Starts member `i` again with its ports and data (stopping it first if
    /// it runs) and waits until it serves as leader or follower, which needs
    /// a quorum of the others.
    pub fn restart(&mut self, i: usize) -> io::Result<()> {
        self.stop(i)?;
        let mut last_err = None;
        for attempt in 1..=START_ATTEMPTS {
            let data = self.member(i)?.dir.join("data");
            for log in jvm::remove_headerless_logs(&data)? {
                eprintln!(
                    "latchkey-test: member {i}: removed {} (killed before its header was written)",
                    log.display()
                );
            }
            self.spawn_member(i, &format!("restart, attempt {attempt}"))?;
            let m = self.member(i)?;
            let waited = jvm::wait_until_serving(
                &m.process,
                m.addr(),
                &m.log_path(),
                self.config.start_timeout,
                in_quorum,
            );
            let (what, clash) = match waited {
                Ok(()) => return Ok(()),
                Err(WaitError::Exited { status, clash }) => {
                    (format!("exited ({status}) during restart"), clash)
                }
                Err(WaitError::TimedOut) => (
                    format!("did not rejoin within {:?}", self.config.start_timeout),
                    false,
                ),
            };
            if let Some(p) = m.process.lock().take() {
                let _ = p.kill();
            }
            let kind = if clash {
                io::ErrorKind::AddrInUse
            } else {
                io::ErrorKind::Other
            };
            let e = io::Error::new(
                kind,
                format!("cluster member {i} {what}:\n{}", self.describe(30)),
            );
            if !clash {
                return Err(e);
            }
            last_err = Some(e);
            thread::sleep(Duration::from_millis(500));
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("member did not restart")))
    }

    /// Whether member `i`'s JVM is alive (not necessarily serving).
    pub fn is_running(&self, i: usize) -> bool {
        self.members.get(i).is_some_and(Member::is_alive)
    }

    /// Member `i`'s JVM process id while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        let m = self.members.get(i)?;
        let mut guard = m.process.lock();
        let p = guard.as_mut()?;
        p.is_alive().then(|| p.pid())
    }

    /// Member `i`'s `Mode:` as `srvr` reports it (`"leader"`, `"follower"`,
    /// `"standalone"`), or `None` if it is down or not serving (e.g. during
    /// an election).
    pub fn mode(&self, i: usize) -> Option<String> {
        self.members.get(i).and_then(Member::mode)
    }

    /// The member that currently reports `Mode: leader` (asking each with
    /// `srvr`), if any.
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().position(|m| {
            m.mode()
                .is_some_and(|mode| mode == "leader" || mode == "standalone")
        })
    }

    /// Waits until every running member serves as leader or follower, there
    /// is exactly one leader, and the running members are a majority. Fails
    /// after `timeout` with every member's mode and log tail.
    pub fn wait_for_quorum(&self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        // Bounded by the deadline.
        loop {
            if self.quorum_formed() {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no quorum within {timeout:?}:\n{}", self.describe(30)),
                ));
            }
            thread::sleep(jvm::POLL.min(left));
        }
    }

    /// The last `n` lines of member `i`'s log.
    pub fn log_tail(&self, i: usize, n: usize) -> String {
        match self.members.get(i) {
            Some(m) => jvm::tail_file(&m.log_path(), n),
            None => format!("(no member {i})"),
        }
    }

    /// Sends a four-letter word to member `i` (5 s timeout).
    pub fn four_letter(&self, i: usize, cmd: &str) -> io::Result<String> {
        jvm::four_letter_word(self.member(i)?.addr(), cmd, Duration::from_secs(5))
    }

    /// Every member's address, state and last `n` log lines, for failure
    /// messages.
    pub fn describe(&self, n: usize) -> String {
        let mut s = String::new();
        for (i, m) in self.members.iter().enumerate() {
            let state = if !m.is_alive() {
                "down".to_string()
            } else {
                m.mode().unwrap_or_else(|| "not serving".to_string())
            };
            let _ = writeln!(
                s,
                "=== member {i} (myid {}, {}): {state}\n{}",
                m.id,
                m.addr(),
                jvm::tail_file(&m.log_path(), n)
            );
        }
        s
    }
}

impl Drop for TestingCluster {
    fn drop(&mut self) {
        self.kill_all();
        if let Some(dir) = self.dir.take() {
            if let Err(e) = dir.close() {
                log::warn!("could not remove {}: {e}", self.root.display());
            }
        }
    }
}

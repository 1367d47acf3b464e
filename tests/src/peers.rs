//! Foreign lock peers: Apache Curator (Java) and kazoo (Python) processes
//! that take the same ZooKeeper locks as latchkey, driven over a line
//! protocol on stdin/stdout.
//!
//! The peers' sources are compiled into this crate (`tests/peers/`) and
//! written out, once per process, to
//! `std::env::temp_dir()/latchkey-peers-<hash of the source>/` (the Java one
//! is compiled there with `javac`), so any binary that links `latchkey-test`
//! can start them.
//!
//! # Protocol
//!
//! A peer prints `READY` once its client is connected, then answers every
//! command line with exactly one line that starts with `OK` or
//! `ERR <message>`. Paths are absolute ZooKeeper paths; each lock object is
//! created once per (kind, path) in the peer and reused (Curator's locks are
//! reentrant per thread, and every command runs on the peer's one command
//! thread; kazoo's are not reentrant and answer `ERR` to a second acquire).
//!
//! | command | answer |
//! |---|---|
//! | `mutex <path> acquire [timeout_ms]` | `OK acquired` / `OK timeout` |
//! | `mutex <path> release` | `OK released` |
//! | `mutex <path> participants` | `OK <node,node,…>` in queue order |
//! | `read\|write <path> acquire [timeout_ms]` / `release` / `participants` | as for `mutex`, on one read/write lock per path; participants of one side only |
//! | `revoke <node path>` | `OK revoked`: Curator's `Revoker.attemptRevoke` (Curator peer only) |
//! | `read55 <path> acquire` / `release` | `OK acquired <node>` / `OK released`: Curator 5.5+'s downgrade read node on the wire (ephemeral, protected, `__READ__` + the sequence of the peer's write node), for Curator jars older than 5.5; needs the peer to hold the write lock (Curator peer only) |
//! | `sem <path> <max> acquire [n] [timeout_ms]` | `OK acquired <n>` / `OK timeout` |
//! | `sem <path> <max> release` | `OK released` (returns one lease) |
//! | `sem <path> <max> participants` | `OK <lease,lease,…>` in queue order |
//! | `children <path>` | `OK <child,child,…>` sorted by name |
//! | `count <path> <seed> get` / `count <path> <seed> set <n>` | `OK <count>` / `OK set`, on one started `SharedCount` per path (seeded if the node is new; Curator peer only) |
//! | `value <path> <seed> get` / `versioned` / `set <hex>` / `tryset <hex>` / `close` | `OK <hex>` / `OK <version> <hex>` / `OK set` / `OK true\|false` (`trySetValue` on the peer's current versioned value) / `OK closed`, on one started Curator `SharedValue` per path, seeded with `<seed>` if the node is new; bytes as lowercase hex, `-` for none (Curator peer only) |
//! | `value atomic <path> get` / `cas <expected> <new>` / `tryset <hex>` / `force <hex>` / `init <hex>` | `OK <hex>` / `OK <succeeded> <pre> <post>` / same / `OK set` / `OK true\|false`, on a Curator `DistributedAtomicValue` with `RetryNTimes(1000, 1)`; hex as for `value` (Curator peer only) |
//! | `latch <path> <id> start` / `has` / `await <ms>` / `leader` / `participants` / `close` | `OK started` / `OK true\|false` / `OK true\|false` / `OK <id>` / `OK <id,id,…>` (queue order, leader first) / `OK closed`, on one Curator `LeaderLatch` per path (Curator peer only) |
//! | `group <path> <id> start` / `members` / `close` | `OK started` / `OK <id,id,…>` sorted / `OK closed`, on one Curator `GroupMember` per path with the id as payload (Curator peer only) |
//! | `selector <path> <id> start` / `await <ms>` / `has` / `release` / `terms` / `leader` / `participants` / `close` | on one auto-requeued Curator `LeaderSelector` per path whose `takeLeadership` leads until `release`: `OK started` / `OK true\|false` / `OK true\|false` / `OK released` / `OK <terms begun>` / as for `latch` (Curator peer only) |
//! | `atomic <path> get` / `add <delta>` / `bump <n>` | `OK <value>` / `OK <succeeded> <pre> <post>` / `OK <successes>`, on a Curator `DistributedAtomicLong` with `RetryNTimes(1000, 1)` (Curator peer only) |
//! | `barrier <path> set` / `remove` / `wait <ms>` | `OK set` / `OK removed` / `OK true\|false`, Curator's `DistributedBarrier` (Curator peer only) |
//! | `dbarrier <path> <members> enter <ms>` / `leave <ms>` | `OK true\|false`, on one Curator `DistributedDoubleBarrier` per path (Curator peer only) |
//! | `bench floor <path> <cycles>` | `OK <cycles> <total_us> <p50_us> <p99_us>`: raw create (ephemeral sequential) + getChildren + delete on the peer's own client |
//! | `bench mutex <path> <cycles>` | `OK <cycles> <total_us> <p50_us> <p99_us>` (per acquire+release cycle) |
//! | `bench contended <path> <sessions> <seconds> [mntr_host:port]` | `OK <cycles> <elapsed_us> <handoff_p50_us> <handoff_p99_us>`, then with `mntr_host:port` ` <handoffs> <requests> <watch_events>` counted between 1/4 and 3/4 of the run from the server's `mntr` (`zk_packets_received`, `zk_sum_node_*_watch_count`) |
//! | `bench rw <path> <sessions> <seconds> <write_every>` | `OK <ops> <elapsed_us> <acquire_p50_us> <acquire_p99_us> <writes>`: read lock, write lock every `write_every`-th turn |
//! | `bench sem <path> <sessions> <max_leases> <seconds>` | `OK <ops> <elapsed_us> <acquire_p50_us> <acquire_p99_us>`: one lease at a time |
//! | `bench hold <path> <sessions>` / `bench unhold` | `OK <sessions>` once each new session holds a mutex on `<path>/s<i>` / `OK released` |
//! | `cachenode create\|ephemeral\|createz <path> [data]` / `set <path> <data>` / `getz <path>` / `delete <path>` / `fill <path> <n>` | `OK created` (`createz`: Curator's `create().compressed()`) / `OK set` / `OK <data>` (`getData().decompressed()`) / `OK deleted` (children first) / `OK filled` (children `0`..`n-1`, each with its index as data): plain node changes, parents created as containers (Curator peer only) |
//! | `disc open <base> <compatible>` | `OK opened`: a started Curator `ServiceDiscovery<Object>` on `<base>` with `JsonInstanceSerializer(Object.class, compatible)` (discovery peer only, as are all `disc` commands) |
//! | `disc register <base> <spec>` / `disc update <base> <spec>` | `OK <id>`: `registerService` / `updateService` of the instance built with Curator's builder from `<spec>`, a one-line JSON object of fields (`name`, `id`, `address`, `port`, `sslPort`, `registrationTimeUTC`, `serviceType`, `uriSpec` as a raw spec, `enabled`, `payload` and `payloadKind`: `none`, `string`, `long`, `details` (the peer's `DiscoveryPeer$Details {region, weight}`), `map`, `list`) |
//! | `disc unregister <base> <id>` | `OK unregistered` |
//! | `disc names <base>` | `OK <name,name,…>` sorted |
//! | `disc query <base> <name>` / `disc get <base> <name> <id>` | `OK <json>`: the instances (sorted by id) / the instance or `null`, each described from Java's getters as `{name, id, address, port, sslPort, registrationTimeUTC, serviceType, uriParts: [[value, variable], …], uri (buildUriSpec()), enabled, payloadClass, payload}` |
//! | `disc cache <base> <name> start` / `ids` / `changes` / `close` | a Curator `ServiceCache` of the service: `OK started` / `OK <id,id,…>` sorted / `OK <cacheChanged calls>` / `OK closed` |
//! | `disc close <base>` | `OK closed` (unregisters the peer's instances) |
//! | `queue <kind> <path> put <item> [arg]` / `putmulti <a,b,…> [arg]` | `OK put`: on a producer-only Curator queue per kind and path (`plain`, `priority`, `delay`, `id`; `arg` the priority, the due time in epoch ms, or the id; `putmulti` one node of several items, not for `id`), string items as UTF-8, `putInBackground(false)` (Curator peer only) |
//! | `queue <kind> <path> consume [lock_path]` / `taken` / `await <n> <ms>` / `close` | `OK started` / `OK <item,item,…>` consumed so far in order / `OK true\|false` (n items consumed within ms) / `OK closed`, on one consumer queue per kind and path, lock-safe with `lock_path` (priority queues with `minItemsBeforeRefresh` 0; Curator peer only) |
//! | `queue id <path> remove <id>` | `OK <count>`: Curator's `DistributedIdQueue.remove` (Curator peer only) |
//! | `queue simple <path> offer <item>` / `poll <ms>` | `OK offered` / `OK item <item>` or `OK none`: Curator's `SimpleDistributedQueue` (Curator peer only) |
//! | `queue bench <path> <consumers> <items>` | `OK <items> <elapsed_us> <p50_us> <p99_us>`: the peer's client puts `items` one by one on a `DistributedQueue`, `consumers` sessions of their own take them; latency from a put's start to the item's consumer (Curator peer only) |
//! | `version` | `OK <library version> <runtime>-<version>` |
//! | `ping` | `OK pong` |
//! | `quit` | `OK bye`, then the peer exits |
//!
//! Lists are node names (last path segment) joined by commas; an empty list
//! is `OK ` (with the space). Without a timeout an acquire blocks the peer
//! until it gets the lock. A handoff is the time from one holder's
//! `release()` returning to the next holder's `acquire()` returning (each
//! bench session is its own client and session). The timed benches
//! (`contended`, `rw`, `sem`) answer `ERR` if two holders of an exclusive
//! lock, a reader and a writer, or more than `max_leases` leases are ever
//! seen at once.
//!
//! The discovery peer ([`PeerKind::CuratorDiscovery`], `DiscoveryPeer.java`)
//! answers `disc`, `ping` and `quit` only; it needs Debian's
//! `libcurator-discovery-java` (and the Jackson it depends on).
//!
//! The Curator peer runs Debian's `libcurator-recipes-java` 5.4 on the Java
//! found through `LATCHKEY_JAVA`, `JAVA_HOME` or `PATH`; the kazoo peer runs
//! Debian's `python3-kazoo` on `/usr/bin/python3`. Both exit when the
//! process that started them dies, and [`Peer`] kills its child on drop.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The Curator peer's source.
const CURATOR_SOURCE: &str = include_str!("../peers/CuratorPeer.java");
/// The Curator service discovery peer's source.
const DISCOVERY_SOURCE: &str = include_str!("../peers/DiscoveryPeer.java");
/// Jars the discovery peer needs beyond [`CURATOR_JARS`]:
/// `libcurator-discovery-java` and the Jackson it serializes with.
const DISCOVERY_JARS: [&str; 4] = [
    "curator-x-discovery.jar",
    "jackson-databind.jar",
    "jackson-core.jar",
    "jackson-annotations.jar",
];
/// What to install for the discovery peer.
const DISCOVERY_HINT: &str =
    "apt-get install -y libcurator-discovery-java libcurator-recipes-java default-jdk-headless";
/// The kazoo peer's source.
const KAZOO_SOURCE: &str = include_str!("../peers/kazoo_peer.py");

/// Where Debian puts its jars.
const JAVA_LIB: &str = "/usr/share/java";
/// Every jar the Curator peer loads classes from (checked with
/// `-verbose:class`), named explicitly rather than through the jars'
/// manifest `Class-Path` chains.
const CURATOR_JARS: [&str; 7] = [
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "guava.jar",
    "slf4j-api.jar",
];
/// The SLF4J binding: the peer's warnings go to stderr, whose tail ends up
/// in errors. Optional; without it SLF4J logs nothing.
const SLF4J_BINDING: &str = "slf4j-simple.jar";
/// Debian's Python, the one `python3-kazoo` is installed for.
const PYTHON: &str = "/usr/bin/python3";

/// What to install for the Curator peer.
const CURATOR_HINT: &str = "apt-get install -y libcurator-recipes-java default-jdk-headless";
/// What to install for the kazoo peer.
const KAZOO_HINT: &str = "apt-get install -y python3-kazoo";

/// How long [`Peer::start`] waits for `READY`.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How many of the peer's last stderr lines (stack frames left out) are
/// kept for error messages.
const STDERR_TAIL_LINES: usize = 40;
/// How long to wait for a dying peer's exit status and last stderr lines.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// How long `javac` and the kazoo import check may take.
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// How many unexpected stdout lines before `READY` are kept for the error.
const MAX_LINES_BEFORE_READY: usize = 20;
/// Poll interval of the bounded waits.
const POLL: Duration = Duration::from_millis(20);

/// Which foreign client a [`Peer`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerKind {
    /// Apache Curator 5.4 (Java), whose lock nodes latchkey names alike.
    Curator,
    /// kazoo 2.8 (Python), whose lock nodes are named differently; a
    /// benchmark peer.
    Kazoo,
    /// Apache Curator 5.4's service discovery (`curator-x-discovery`,
    /// Java): the `disc` commands only.
    CuratorDiscovery,
}

impl fmt::Display for PeerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PeerKind::Curator => "Curator",
            PeerKind::Kazoo => "kazoo",
            PeerKind::CuratorDiscovery => "Curator discovery",
        })
    }
}

/// A running peer process and the pipes to talk to it.
pub struct Peer {
    kind: PeerKind,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    stderr_reader: Option<JoinHandle<()>>,
    /// Answers still owed to commands that timed out here; they arrive
    /// first (the peer answers in order) and are skipped.
    stale: usize,
    /// Set once the child is known to be gone (killed, quit or died).
    dead: bool,
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer")
            .field("kind", &self.kind)
            .field("pid", &self.child.id())
            .field("stale", &self.stale)
            .field("dead", &self.dead)
            .finish()
    }
}

impl Peer {
    /// Compiles (once per process; cache the classes under
    /// `std::env::temp_dir()/latchkey-peers-<hash of source>`) and starts a
    /// peer; waits for `READY` with a deadline ([`START_TIMEOUT`], 60 s).
    ///
    /// The peer's session timeout is `PEER_SESSION_MS` from this process's
    /// environment, else 10 s; see [`Peer::start_with_session_timeout`].
    pub fn start(kind: PeerKind, connect_string: &str) -> io::Result<Peer> {
        Self::spawn(kind, connect_string, None)
    }

    /// [`Peer::start`] with the peer's ZooKeeper session timeout (the test
    /// server must allow it: see its `minSessionTimeout`).
    pub fn start_with_session_timeout(
        kind: PeerKind,
        connect_string: &str,
        session_timeout: Duration,
    ) -> io::Result<Peer> {
        Self::spawn(kind, connect_string, Some(session_timeout))
    }

    fn spawn(
        kind: PeerKind,
        connect_string: &str,
        session_timeout: Option<Duration>,
    ) -> io::Result<Peer> {
        let started = Instant::now();
        let mut cmd = launch_command(kind)?;
        cmd.arg(connect_string)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(t) = session_timeout {
            cmd.env("PEER_SESSION_MS", t.as_millis().max(1).to_string());
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start the {kind} peer: {e}")))?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other(format!(
                "the {kind} peer's pipes are missing"
            )));
        };

        let (tx, lines) = mpsc::channel();
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail = Arc::clone(&stderr_tail);
        let readers = thread::Builder::new()
            .name(format!("{kind}-peer-{pid}-stdout"))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
            .and_then(|_| {
                thread::Builder::new()
                    .name(format!("{kind}-peer-{pid}-stderr"))
                    .spawn(move || read_stderr(kind, pid, stderr, &tail))
            });
        let stderr_reader = match readers {
            Ok(reader) => reader,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };

        let mut peer = Peer {
            kind,
            child,
            stdin,
            lines,
            stderr_tail,
            stderr_reader: Some(stderr_reader),
            stale: 0,
            dead: false,
        };
        let deadline = started + START_TIMEOUT;
        let mut before_ready = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match peer.lines.recv_timeout(left) {
                Ok(line) if line.trim() == "READY" => break,
                Ok(line) => {
                    if before_ready.len() < MAX_LINES_BEFORE_READY {
                        before_ready.push(line);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    peer.kill();
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the {kind} peer (pid {pid}) was not READY within {START_TIMEOUT:?}{}",
                            peer.stderr_report()
                        ),
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let mut err = peer.died("starting");
                    if !before_ready.is_empty() {
                        err = io::Error::new(
                            err.kind(),
                            format!("{err}\nstdout: {}", before_ready.join("\n")),
                        );
                    }
                    return Err(err);
                }
            }
        }
        log::debug!(
            target: "latchkey_test::peers",
            "{kind} peer {pid} ready after {:?}",
            started.elapsed()
        );
        Ok(peer)
    }

    /// Which client this peer runs.
    pub fn kind(&self) -> PeerKind {
        self.kind
    }

    /// The peer's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one command line and returns the response line without the
    /// trailing newline; Err on timeout (deadline given) or if the peer died
    /// (include its stderr tail in the error).
    ///
    /// After a timeout the peer is still busy with that command; its late
    /// answer is skipped when it arrives, so later commands get their own
    /// answers. A line containing a line break is refused.
    pub fn command(&mut self, line: &str, timeout: Duration) -> io::Result<String> {
        if line.contains(['\n', '\r']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a peer command is one line: {line:?}"),
            ));
        }
        if self.dead {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                format!(
                    "the {} peer (pid {}) is no longer running",
                    self.kind,
                    self.pid()
                ),
            ));
        }
        let deadline = Instant::now() + timeout;
        // Late answers already here are skipped now, the rest on arrival.
        while self.stale > 0 {
            match self.lines.try_recv() {
                Ok(_) => self.stale -= 1,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Err(self.died(line)),
            }
        }
        let sent = match self.stdin.as_mut() {
            Some(stdin) => stdin
                .write_all(format!("{line}\n").as_bytes())
                .and_then(|()| stdin.flush()),
            None => Err(io::Error::from(io::ErrorKind::BrokenPipe)),
        };
        if sent.is_err() {
            return Err(self.died(line));
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(_) if self.stale > 0 => self.stale -= 1,
                Ok(reply) => return Ok(reply),
                Err(RecvTimeoutError::Timeout) => {
                    self.stale += 1;
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the {} peer (pid {}) did not answer `{line}` within {timeout:?}",
                            self.kind,
                            self.pid()
                        ),
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.died(line)),
            }
        }
    }

    /// [`Peer::command`] that also requires an `OK` answer: returns what
    /// follows `OK ` (empty for a bare `OK`), or an error carrying the `ERR`
    /// line.
    pub fn command_ok(&mut self, line: &str, timeout: Duration) -> io::Result<String> {
        let reply = self.command(line, timeout)?;
        match reply.strip_prefix("OK") {
            Some(rest) if rest.is_empty() || rest.starts_with(' ') => {
                Ok(rest.strip_prefix(' ').unwrap_or(rest).to_string())
            }
            _ => Err(io::Error::other(format!(
                "the {} peer answered `{line}` with `{reply}`",
                self.kind
            ))),
        }
    }

    /// Sends `quit` (the peer returns its leases and closes its session, so
    /// its nodes go at once) and waits up to `timeout` for it to exit; kills
    /// it if it does not.
    pub fn quit(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        let answer = self.command("quit", timeout);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                self.dead = true;
                self.stdin = None;
                return answer.map(|_| ());
            }
            thread::sleep(POLL);
        }
        self.kill();
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the {} peer did not quit within {timeout:?} (killed); answer: {answer:?}",
                self.kind
            ),
        ))
    }

    /// Kills the peer at once (SIGKILL: its session is left to expire, its
    /// ephemeral nodes stay until then) and reaps it. Idempotent.
    pub fn kill(&mut self) {
        self.stdin = None;
        if !self.dead {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.dead = true;
        }
    }

    /// The peer's last stderr lines (warnings and errors, without Java
    /// stack frames), oldest first.
    pub fn stderr_tail(&self) -> Vec<String> {
        lock_tail(&self.stderr_tail).iter().cloned().collect()
    }

    /// The error for a peer found dead while doing `what`: its exit status
    /// and stderr tail.
    fn died(&mut self, what: &str) -> io::Error {
        self.stdin = None;
        let deadline = Instant::now() + EXIT_GRACE;
        let mut status = None;
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(s)) => {
                    status = Some(s);
                    break;
                }
                Ok(None) => thread::sleep(POLL),
                Err(_) => break,
            }
        }
        if status.is_none() {
            // Its stdout closed but it lingers: make it gone.
            let _ = self.child.kill();
            status = self.child.wait().ok();
        }
        self.dead = true;
        // The stderr reader finishes at the child's EOF; give it a moment so
        // the tail is complete.
        if let Some(reader) = self.stderr_reader.take() {
            while !reader.is_finished() && Instant::now() < deadline {
                thread::sleep(POLL);
            }
            if reader.is_finished() {
                let _ = reader.join();
            }
        }
        let status = status.map_or_else(|| "unknown status".to_string(), |s| s.to_string());
        io::Error::new(
            io::ErrorKind::BrokenPipe,
            format!(
                "the {} peer (pid {}) died ({status}) during `{what}`{}",
                self.kind,
                self.child.id(),
                self.stderr_report()
            ),
        )
    }

    fn stderr_report(&self) -> String {
        let tail = lock_tail(&self.stderr_tail);
        if tail.is_empty() {
            "; its stderr was empty".to_string()
        } else {
            let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
            format!("; its stderr ends with:\n{}", lines.join("\n"))
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn lock_tail(tail: &Mutex<VecDeque<String>>) -> std::sync::MutexGuard<'_, VecDeque<String>> {
    tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn read_stderr(kind: PeerKind, pid: u32, stderr: impl Read, tail: &Mutex<VecDeque<String>>) {
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        log::debug!(target: "latchkey_test::peers", "{kind} peer {pid}: {line}");
        // Java stack frames would crowd the messages out of the tail.
        if line.starts_with("\tat ") || line.starts_with("\t... ") {
            continue;
        }
        let mut tail = lock_tail(tail);
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
}

/// Ok(()) if javac/java and the Curator jars (or python3 + kazoo) are
/// present, else Err(message saying what to install:
/// `apt-get install -y libcurator-recipes-java default-jdk-headless` /
/// `python3-kazoo`).
pub fn peer_available(kind: PeerKind) -> Result<(), String> {
    match kind {
        PeerKind::Curator => curator_tools().map(|_| ()),
        PeerKind::Kazoo => kazoo_available(),
        PeerKind::CuratorDiscovery => discovery_tools().map(|_| ()),
    }
}

/// `java`, `javac` and the classpath of the Curator peer.
#[derive(Clone, Debug)]
struct CuratorTools {
    java: PathBuf,
    javac: PathBuf,
    classpath: String,
}

fn curator_tools() -> Result<CuratorTools, String> {
    static TOOLS: OnceLock<Result<CuratorTools, String>> = OnceLock::new();
    TOOLS.get_or_init(find_curator_tools).clone()
}

/// `java`, `javac` and the classpath of the discovery peer.
fn discovery_tools() -> Result<CuratorTools, String> {
    static TOOLS: OnceLock<Result<CuratorTools, String>> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            let mut tools = curator_tools()?;
            let mut jars = Vec::new();
            for jar in DISCOVERY_JARS {
                let path = Path::new(JAVA_LIB).join(jar);
                if !path.is_file() {
                    return Err(format!(
                        "the Curator discovery peer needs {}; `{DISCOVERY_HINT}`",
                        path.display()
                    ));
                }
                jars.push(path.display().to_string());
            }
            tools.classpath = format!("{}:{}", jars.join(":"), tools.classpath);
            Ok(tools)
        })
        .clone()
}

fn find_curator_tools() -> Result<CuratorTools, String> {
    let missing = |what: &str| format!("the Curator peer needs {what}; `{CURATOR_HINT}`");
    let java = find_java().ok_or_else(|| missing("`java` (LATCHKEY_JAVA, JAVA_HOME or PATH)"))?;
    let javac = find_javac(&java).ok_or_else(|| missing("`javac` (a JDK, not only a JRE)"))?;
    let mut jars = Vec::new();
    for jar in CURATOR_JARS {
        let path = Path::new(JAVA_LIB).join(jar);
        if !path.is_file() {
            return Err(missing(&path.display().to_string()));
        }
        jars.push(path.display().to_string());
    }
    let binding = Path::new(JAVA_LIB).join(SLF4J_BINDING);
    if binding.is_file() {
        jars.push(binding.display().to_string());
    }
    Ok(CuratorTools {
        java,
        javac,
        classpath: jars.join(":"),
    })
}

fn is_executable_file(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable_file(p))
}

/// The same search as the server harness: `LATCHKEY_JAVA`, `JAVA_HOME`,
/// `PATH`.
fn find_java() -> Option<PathBuf> {
    if let Some(j) = std::env::var_os("LATCHKEY_JAVA") {
        let j = PathBuf::from(j);
        return is_executable_file(&j).then_some(j);
    }
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let j = Path::new(&home).join("bin/java");
        if is_executable_file(&j) {
            return Some(j);
        }
    }
    on_path("java")
}

/// `javac` next to the chosen `java` (following symlinks such as Debian's
/// alternatives), else from `JAVA_HOME` or `PATH`.
fn find_javac(java: &Path) -> Option<PathBuf> {
    let beside = |p: &Path| p.parent().map(|d| d.join("javac"));
    let mut candidates = Vec::new();
    candidates.extend(beside(java));
    if let Ok(real) = std::fs::canonicalize(java) {
        candidates.extend(beside(&real));
    }
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        candidates.push(Path::new(&home).join("bin/javac"));
    }
    candidates
        .into_iter()
        .find(|p| is_executable_file(p))
        .or_else(|| on_path("javac"))
}

fn kazoo_available() -> Result<(), String> {
    static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
    AVAILABLE
        .get_or_init(|| {
            let missing = |why: String| format!("the kazoo peer needs {why}; `{KAZOO_HINT}`");
            if !is_executable_file(Path::new(PYTHON)) {
                return Err(missing(PYTHON.to_string()));
            }
            let mut check = Command::new(PYTHON);
            check.args(["-c", "import kazoo.client, kazoo.recipe.lock"]);
            let (status, output) = run_bounded(check, TOOL_TIMEOUT)
                .map_err(|e| missing(format!("a runnable {PYTHON} ({e})")))?;
            if status.success() {
                Ok(())
            } else {
                Err(missing(format!(
                    "kazoo importable by {PYTHON} ({})",
                    output.trim()
                )))
            }
        })
        .clone()
}

/// The command that runs a peer, minus its connect string argument.
fn launch_command(kind: PeerKind) -> io::Result<Command> {
    let unavailable = |msg: String| io::Error::new(io::ErrorKind::NotFound, msg);
    match kind {
        PeerKind::Curator => {
            let tools = curator_tools().map_err(unavailable)?;
            let dir = prepared(kind, || compile_curator(&tools))?;
            let mut cmd = Command::new(&tools.java);
            cmd.arg("-XX:+UseSerialGC")
                .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
                .arg("-cp")
                .arg(format!("{}:{}", tools.classpath, dir.display()))
                .arg("CuratorPeer");
            Ok(cmd)
        }
        PeerKind::CuratorDiscovery => {
            let tools = discovery_tools().map_err(unavailable)?;
            let dir = prepared(kind, || {
                compile_java(&tools, "discovery", "DiscoveryPeer", DISCOVERY_SOURCE)
            })?;
            let mut cmd = Command::new(&tools.java);
            cmd.arg("-XX:+UseSerialGC")
                .arg("-XX:TieredStopAtLevel=1")
                .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
                .arg("-cp")
                .arg(format!("{}:{}", tools.classpath, dir.display()))
                .arg("DiscoveryPeer");
            Ok(cmd)
        }
        PeerKind::Kazoo => {
            kazoo_available().map_err(unavailable)?;
            let dir = prepared(kind, || {
                write_cache_dir("kazoo", KAZOO_SOURCE, "kazoo_peer.py", |staging| {
                    std::fs::write(staging.join("kazoo_peer.py"), KAZOO_SOURCE)
                })
            })?;
            let mut cmd = Command::new(PYTHON);
            // -u: unbuffered; -B: no .pyc next to the cached source.
            cmd.arg("-u").arg("-B").arg(dir.join("kazoo_peer.py"));
            Ok(cmd)
        }
    }
}

/// The peer's cache directory, made at most once per process (a failure is
/// retried on the next start).
fn prepared(kind: PeerKind, make: impl FnOnce() -> io::Result<PathBuf>) -> io::Result<PathBuf> {
    static CURATOR: Mutex<Option<PathBuf>> = Mutex::new(None);
    static KAZOO: Mutex<Option<PathBuf>> = Mutex::new(None);
    static DISCOVERY: Mutex<Option<PathBuf>> = Mutex::new(None);
    let slot = match kind {
        PeerKind::Curator => &CURATOR,
        PeerKind::Kazoo => &KAZOO,
        PeerKind::CuratorDiscovery => &DISCOVERY,
    };
    let mut slot = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(dir) = slot.as_ref() {
        return Ok(dir.clone());
    }
    let dir = make()?;
    *slot = Some(dir.clone());
    Ok(dir)
}

fn compile_curator(tools: &CuratorTools) -> io::Result<PathBuf> {
    compile_java(tools, "curator", "CuratorPeer", CURATOR_SOURCE)
}

/// Compiles the peer class `class` from `source` into its cache directory.
fn compile_java(
    tools: &CuratorTools,
    tag: &str,
    class: &str,
    source_text: &str,
) -> io::Result<PathBuf> {
    let key = format!(
        "{source_text}\0{}\0{}",
        tools.classpath,
        tools.javac.display()
    );
    write_cache_dir(tag, &key, &format!("{class}.class"), |staging| {
        let source = staging.join(format!("{class}.java"));
        std::fs::write(&source, source_text)?;
        let started = Instant::now();
        let mut javac = Command::new(&tools.javac);
        javac
            .arg("-nowarn")
            .arg("-d")
            .arg(staging)
            .arg("-cp")
            .arg(&tools.classpath)
            .arg(&source);
        let (status, output) = run_bounded(javac, TOOL_TIMEOUT).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot run {}: {e}", tools.javac.display()),
            )
        })?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "javac {class}.java failed ({status}):\n{output}"
            )));
        }
        log::debug!(
            target: "latchkey_test::peers",
            "compiled {class}.java in {:?}",
            started.elapsed()
        );
        Ok(())
    })
}

/// Runs a short-lived tool to completion, killing it after `timeout`;
/// returns its exit status and its stdout and stderr together.
fn run_bounded(mut cmd: Command, timeout: Duration) -> io::Result<(ExitStatus, String)> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("did not finish within {timeout:?}"),
            ));
        }
        thread::sleep(POLL);
    };
    let mut output = stdout.join().unwrap_or_default();
    output.push_str(&stderr.join().unwrap_or_default());
    Ok((status, output))
}

/// `temp_dir()/latchkey-peers-<hash of key>`, filled by `fill` in a private
/// staging directory and renamed into place, so concurrent test processes
/// never see a half-written one; an existing directory that holds `marker`
/// is reused.
fn write_cache_dir(
    tag: &str,
    key: &str,
    marker: &str,
    fill: impl FnOnce(&Path) -> io::Result<()>,
) -> io::Result<PathBuf> {
    let tmp = std::env::temp_dir();
    let dir = tmp.join(format!("latchkey-peers-{:016x}", fnv1a(tag, key)));
    if dir.join(marker).is_file() {
        return Ok(dir);
    }
    if dir.exists() {
        // Emptied by a temp cleaner, say; make it again.
        let _ = std::fs::remove_dir_all(&dir);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let staging = tmp.join(format!(
        "latchkey-peers-staging-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&staging)?;
    let filled = fill(&staging);
    let result = filled.and_then(|()| match std::fs::rename(&staging, &dir) {
        Ok(()) => Ok(()),
        // Another process won the race; its directory is as good as ours.
        Err(_) if dir.join(marker).is_file() => Ok(()),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot create {}: {e}", dir.display()),
        )),
    });
    let _ = std::fs::remove_dir_all(&staging);
    result.map(|()| dir)
}

/// 64-bit FNV-1a: a hash that stays the same across Rust releases, so the
/// cache survives toolchain updates.
fn fnv1a(tag: &str, key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in tag.bytes().chain([0]).chain(key.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

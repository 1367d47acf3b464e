//! Finding Java and Debian's ZooKeeper, and running one ZooKeeper JVM.
//!
//! Shared by [`crate::TestingServer`] and [`crate::TestingCluster`]: the
//! launch command, the parent-death watchdog, graceful and hard stops, the
//! four-letter-word client, free ports and log tails.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::server::ServerConfig;

/// Debian's ZooKeeper server jar.
pub(crate) const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";

/// What to tell the user when something is missing.
const INSTALL_HINT: &str = "install Debian's ZooKeeper 3.8 and Java 17: \
     `apt-get install -y zookeeper openjdk-17-jre-headless` \
     (set LATCHKEY_JAVA / LATCHKEY_ZK_CLASSPATH to use another Java or ZooKeeper)";

/// Written to the log before every start, so a start's own lines can be told
/// from the previous run's.
pub(crate) const START_MARKER: &str = "----- latchkey-test: starting ZooKeeper";

/// The main class; `QuorumPeerMain` runs standalone when `zoo.cfg` has no
/// `server.N` lines.
const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// How long a graceful stop waits after SIGTERM before SIGKILL.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(5);

/// How often waits poll.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// The java binary and the classpath that runs ZooKeeper.
#[derive(Clone, Debug)]
pub(crate) struct Launcher {
    java: PathBuf,
    classpath: String,
}

/// Finds `java` and ZooKeeper once per process; the error explains what to
/// install.
pub(crate) fn launcher() -> io::Result<Launcher> {
    static CACHE: OnceLock<Result<Launcher, String>> = OnceLock::new();
    CACHE
        .get_or_init(find_launcher)
        .clone()
        .map_err(|msg| io::Error::new(io::ErrorKind::NotFound, msg))
}

fn find_launcher() -> Result<Launcher, String> {
    let java = find_java().ok_or_else(|| {
        format!("cannot start a ZooKeeper test server: no `java` found (LATCHKEY_JAVA, JAVA_HOME, PATH); {INSTALL_HINT}")
    })?;
    let classpath = match std::env::var("LATCHKEY_ZK_CLASSPATH") {
        Ok(cp) if !cp.trim().is_empty() => cp,
        _ => debian_classpath().ok_or_else(|| {
            format!(
                "cannot start a ZooKeeper test server: {ZOOKEEPER_JAR} not found; {INSTALL_HINT}"
            )
        })?,
    };
    Ok(Launcher { java, classpath })
}

fn is_executable_file(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

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
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("java"))
        .find(|j| is_executable_file(j))
}

/// `zookeeper.jar` (its manifest's Class-Path names netty, jute, slf4j-api
/// and the rest) plus an SLF4J binding so the server's log reaches stderr,
/// which we send to a file.
fn debian_classpath() -> Option<String> {
    if !Path::new(ZOOKEEPER_JAR).is_file() {
        return None;
    }
    let mut cp = vec![ZOOKEEPER_JAR.to_string()];
    // Named again in case the manifest is ever trimmed; duplicates are
    // harmless. Debian's manifest lacks the Netty jars that the Netty
    // connection factory (TLS) needs beyond the ones it names.
    for jar in [
        "zookeeper-jute.jar",
        "slf4j-api.jar",
        "netty-codec.jar",
        "netty-resolver.jar",
        "netty-transport-native-unix-common.jar",
    ] {
        let p = format!("/usr/share/java/{jar}");
        if Path::new(&p).is_file() {
            cp.push(p);
        }
    }
    // The first binding found wins; without one SLF4J logs nothing (the
    // server still runs).
    if let Some(binding) = ["slf4j-simple.jar", "slf4j-jdk14.jar"]
        .iter()
        .map(|j| format!("/usr/share/java/{j}"))
        .find(|p| Path::new(p).is_file())
    {
        cp.push(binding);
    }
    Some(cp.join(":"))
}

/// JVM flags: a small heap and a fast start; ZooKeeper's own switches as
/// system properties too (zoo.cfg sets them again).
fn jvm_flags() -> Vec<String> {
    [
        "-Xmx256m",
        "-Xms32m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-XX:-UsePerfData",
        "-Djava.awt.headless=true",
        "-Djava.net.preferIPv4Stack=true",
        "-Dzookeeper.admin.enableServer=false",
        "-Dzookeeper.4lw.commands.whitelist=*",
        "-Djute.maxbuffer=1048575",
        "-Dzookeeper.jmx.log4j.disable=true",
        // Leader election re-sends notifications at most every second
        // instead of backing off to a minute when peers start slowly.
        "-Dzookeeper.fastleader.maxNotificationInterval=1000",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// One running ZooKeeper JVM and its watchdog.
///
/// The watchdog is a tiny `sh` whose stdin is a pipe we hold: when this
/// process ends in any way (including a `static` server that is never
/// dropped, a panic with `panic = "abort"`, or SIGKILL), the pipe closes and
/// the watchdog SIGKILLs the JVM and removes `cleanup_dir`.
pub(crate) struct ZkProcess {
    child: Child,
    watchdog: Option<Child>,
    log: PathBuf,
}

impl ZkProcess {
    /// Starts `QuorumPeerMain cfg`, appending stdout and stderr to `log`.
    pub(crate) fn spawn(
        cfg: &Path,
        log: &Path,
        cwd: &Path,
        cleanup_dir: Option<&Path>,
        label: &str,
        config: &ServerConfig,
    ) -> io::Result<ZkProcess> {
        let launcher = launcher()?;
        let mut out = OpenOptions::new().create(true).append(true).open(log)?;
        writeln!(out, "{START_MARKER} ({label}) at {} UTC -----", clock())?;
        let err = out.try_clone()?;
        let mut jaas = Vec::new();
        if let Some(text) = config.jaas() {
            let path = cwd.join("jaas.conf");
            std::fs::write(&path, text)?;
            jaas.push(format!(
                "-Djava.security.auth.login.config={}",
                path.display()
            ));
        }
        let child = Command::new(&launcher.java)
            .args(jvm_flags())
            .args(&config.jvm_args)
            .args(&jaas)
            .args(
                config
                    .system_properties
                    .iter()
                    .map(|(k, v)| format!("-D{k}={v}")),
            )
            .arg("-cp")
            .arg(&launcher.classpath)
            .arg(MAIN_CLASS)
            .arg(cfg)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot run {}: {e}; {INSTALL_HINT}",
                        launcher.java.display()
                    ),
                )
            })?;
        let pid = child.id();
        log::debug!("{label}: ZooKeeper JVM pid {pid}, config {}", cfg.display());
        let watchdog = match spawn_watchdog(pid, cleanup_dir) {
            Ok(w) => Some(w),
            Err(e) => {
                log::warn!(
                    "{label}: no watchdog for JVM {pid} ({e}); it may outlive an aborted test"
                );
                None
            }
        };
        Ok(ZkProcess {
            child,
            watchdog,
            log: log.to_path_buf(),
        })
    }

    /// The JVM's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The JVM's exit status if it has exited.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Whether the JVM is still alive.
    pub(crate) fn is_alive(&mut self) -> bool {
        self.exited().is_none()
    }

    /// Notes in the server log what the harness did, so log tails show it.
    fn note(&self, what: &str) {
        if let Ok(mut f) = OpenOptions::new().append(true).open(&self.log) {
            let _ = writeln!(
                f,
                "----- latchkey-test: {what} (pid {}) at {} UTC -----",
                self.child.id(),
                clock()
            );
        }
    }

    /// Disarms the watchdog without letting it kill or delete anything.
    fn disarm(&mut self) {
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL; reaps the JVM.
    pub(crate) fn terminate(mut self, grace: Duration) -> io::Result<()> {
        self.disarm();
        if self.exited().is_some() {
            return Ok(());
        }
        self.note("stopping with SIGTERM");
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if sent {
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if self.exited().is_some() {
                    return Ok(());
                }
                thread::sleep(Duration::from_millis(20));
            }
            log::warn!(
                "ZooKeeper JVM {} ignored SIGTERM for {grace:?}; killing it",
                self.child.id()
            );
        }
        self.kill_now()
    }

    /// SIGKILL and reap.
    pub(crate) fn kill(mut self) -> io::Result<()> {
        self.disarm();
        if self.exited().is_none() {
            self.note("killing with SIGKILL");
        }
        self.kill_now()
    }

    fn kill_now(&mut self) -> io::Result<()> {
        if self.exited().is_some() {
            return Ok(());
        }
        match self.child.kill() {
            Ok(()) => {}
            // Already exited between the check and the kill.
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {}
            Err(e) => return Err(e),
        }
        self.child.wait().map(|_| ())
    }
}

impl Drop for ZkProcess {
    fn drop(&mut self) {
        self.disarm();
        let _ = self.kill_now();
    }
}

fn spawn_watchdog(pid: u32, cleanup_dir: Option<&Path>) -> io::Result<Child> {
    // `read` returns at EOF, which comes only when every copy of the pipe's
    // write end is closed; ours is close-on-exec, so only this process holds it.
    let script = r#"read -r _ || true
kill -KILL "$1" 2>/dev/null
if [ -n "$2" ]; then sleep 0.2; rm -rf -- "$2"; fi"#;
    let dir = cleanup_dir
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("latchkey-zk-watchdog")
        .arg(pid.to_string())
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// The time of day as `HH:MM:SS.mmm` (UTC), like the server log's stamps.
fn clock() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        now.subsec_millis()
    )
}

/// Sends a four-letter word (`srvr`, `mntr`, `cons`, `wchs`, `ruok`, ...) and
/// returns the whole reply; the server closes the connection after it.
pub(crate) fn four_letter_word(
    addr: SocketAddr,
    cmd: &str,
    timeout: Duration,
) -> io::Result<String> {
    if cmd.len() != 4 || !cmd.bytes().all(|b| b.is_ascii_lowercase()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{cmd:?} is not a four-letter word"),
        ));
    }
    let timeout = timeout.max(Duration::from_millis(10));
    let deadline = Instant::now() + timeout;
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(cmd.as_bytes())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 8192];
    // Bounded by the deadline and by the reply size.
    while reply.len() < 16 << 20 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{cmd} to {addr}: no complete reply within {timeout:?}"),
            ));
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{cmd} to {addr}: no complete reply within {timeout:?}"),
                ));
            }
            // The server closes right after writing; a reset after a reply
            // still means the reply is complete.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e),
        }
    }
    if reply.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{cmd} to {addr}: connection closed without a reply (unknown or not whitelisted word?)"),
        ));
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// The `Mode:` line of a `srvr` reply (`standalone`, `leader`, `follower`,
/// `observer`), if the server is serving.
pub(crate) fn mode_of(srvr_reply: &str) -> Option<String> {
    srvr_reply
        .lines()
        .find_map(|l| l.strip_prefix("Mode:"))
        .map(|m| m.trim().to_string())
}

/// `n` distinct free ports on 127.0.0.1, none handed out before by this
/// process. The ports are released before returning, so another process may
/// still take one: callers retry on a clash.
pub(crate) fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut handed = HANDED_OUT.lock();
    let handed = handed.get_or_insert_with(HashSet::new);
    let mut held = Vec::with_capacity(n);
    let mut ports = Vec::with_capacity(n);
    for _ in 0..(n * 20 + 20) {
        if ports.len() == n {
            break;
        }
        let l = TcpListener::bind(("127.0.0.1", 0))?;
        let p = l.local_addr()?.port();
        if handed.insert(p) {
            ports.push(p);
        }
        // Keep it bound until all are chosen so the kernel does not hand
        // the same port out twice.
        held.push(l);
    }
    if ports.len() < n {
        return Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            "could not find free ports on 127.0.0.1",
        ));
    }
    Ok(ports)
}

/// The last `n` lines of `path` (reads at most its last 1 MiB).
pub(crate) fn tail_file(path: &Path, n: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(1 << 20);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    if f.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The log written since the last start marker.
fn since_last_start(path: &Path) -> String {
    let text = tail_file(path, 5000);
    match text.rfind(START_MARKER) {
        Some(i) => text[i..].to_string(),
        None => text,
    }
}

/// Whether the last start failed because a port was taken.
pub(crate) fn failed_on_port_clash(log: &Path) -> bool {
    let text = since_last_start(log);
    text.contains("Address already in use") || text.contains("BindException")
}

/// Why a wait for a JVM to serve failed.
pub(crate) enum WaitError {
    /// The JVM exited; `clash` when it could not bind a port.
    Exited {
        /// Its exit status.
        status: ExitStatus,
        /// Whether a port was taken.
        clash: bool,
    },
    /// The deadline passed.
    TimedOut,
}

/// Polls `srvr` until `accept(mode)` holds, the JVM exits or `timeout` passes.
pub(crate) fn wait_until_serving(
    process: &Mutex<Option<ZkProcess>>,
    addr: SocketAddr,
    log: &Path,
    timeout: Duration,
    accept: impl Fn(&str) -> bool,
) -> Result<(), WaitError> {
    let deadline = Instant::now() + timeout;
    // Bounded by the deadline; the count is a second belt.
    for _ in 0..100_000 {
        if let Some(p) = process.lock().as_mut() {
            if let Some(status) = p.exited() {
                return Err(WaitError::Exited {
                    status,
                    clash: failed_on_port_clash(log),
                });
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        if let Ok(reply) = four_letter_word(addr, "srvr", left.min(Duration::from_secs(2))) {
            if mode_of(&reply).is_some_and(|m| accept(&m)) {
                return Ok(());
            }
        }
        thread::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())));
    }
    Err(WaitError::TimedOut)
}

/// Removes transaction logs under `data_dir` that lack a whole header.
///
/// A server killed (SIGKILL) right after it created a new transaction log
/// leaves the file without its 16-byte header (magic `ZKLG`, version,
/// database id), and ZooKeeper 3.8 then refuses to start ("Unable to run
/// quorum server", an `EOFException` in `FileHeader.deserialize`; the
/// ZOOKEEPER-1621 family). Such a file holds no transaction, so removing it
/// before a restart loses nothing; it is what an operator does. Returns the
/// files removed.
pub(crate) fn remove_headerless_logs(data_dir: &Path) -> io::Result<Vec<PathBuf>> {
    let dir = data_dir.join("version-2");
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut removed = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let is_log = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("log."));
        if !is_log {
            continue;
        }
        let mut header = [0u8; 16];
        let whole = std::fs::File::open(&path)
            .and_then(|mut f| f.read_exact(&mut header))
            .is_ok();
        if !whole || &header[..4] != b"ZKLG" {
            std::fs::remove_file(&path)?;
            removed.push(path);
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod log_tests {
    use super::*;

    #[test]
    fn only_logs_without_a_whole_header_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let v2 = dir.path().join("version-2");
        std::fs::create_dir_all(&v2).unwrap();
        let mut good = b"ZKLG".to_vec();
        good.extend([0u8; 12]);
        good.extend(b"transactions");
        std::fs::write(v2.join("log.1"), &good).unwrap();
        std::fs::write(v2.join("log.2"), b"").unwrap();
        std::fs::write(v2.join("log.3"), [0u8; 64]).unwrap();
        std::fs::write(v2.join("snapshot.1"), b"").unwrap();
        let mut removed = remove_headerless_logs(dir.path()).unwrap();
        removed.sort();
        assert_eq!(removed, [v2.join("log.2"), v2.join("log.3")]);
        assert!(v2.join("log.1").exists() && v2.join("snapshot.1").exists());
        assert!(remove_headerless_logs(&dir.path().join("none"))
            .unwrap()
            .is_empty());
    }
}

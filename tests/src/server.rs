//! [`TestingServer`]: one real standalone ZooKeeper on 127.0.0.1.

use std::fmt::Write as _;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tempfile::TempDir;

use crate::jvm::{self, WaitError, ZkProcess};
use crate::tls::ClientAuth;

/// How many times a start is retried when another process took the port.
const START_ATTEMPTS: u32 = 3;

/// Settings for [`TestingServer::start_with`] and
/// [`TestingCluster::start_with`](crate::TestingCluster::start_with).
///
/// The defaults suit tests: a 200 ms tick and a 400 ms minimum session
/// timeout, so a client may ask for short sessions (ZooKeeper clamps a
/// requested timeout into `[min_session_timeout, max_session_timeout]`).
///
/// ```
/// use std::time::Duration;
/// use latchkey_test::ServerConfig;
///
/// let cfg = ServerConfig::default()
///     .tick_time(Duration::from_millis(100))
///     .min_session_timeout(Duration::from_millis(200));
/// assert_eq!(cfg.max_session_timeout, Duration::from_secs(60));
/// ```
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// `tickTime`, ZooKeeper's time unit (heartbeats, limits). Default 200 ms.
    pub tick_time: Duration,
    /// `minSessionTimeout`. Default 400 ms.
    pub min_session_timeout: Duration,
    /// `maxSessionTimeout`. Default 60 s.
    pub max_session_timeout: Duration,
    /// `initLimit` in ticks (ensembles only). Default 10.
    pub init_limit: u32,
    /// `syncLimit` in ticks (ensembles only). Default 5.
    pub sync_limit: u32,
    /// How long a start or restart waits for the server to serve. Default 30 s.
    pub start_timeout: Duration,
    /// Extra `key=value` lines appended to `zoo.cfg`.
    pub extra: Vec<(String, String)>,
    /// Extra Java system properties (`-Dkey=value`), for switches ZooKeeper
    /// reads only there, such as `znode.container.checkIntervalMs`.
    pub system_properties: Vec<(String, String)>,
    /// Extra JVM arguments, after the harness's own (a later `-XX` flag
    /// wins): `-XX:TieredStopAtLevel=4`, say, for the full JIT that a
    /// benchmark wants, where tests prefer the faster start of C1 alone.
    pub jvm_args: Vec<String>,
    /// TLS on a second, secure client port (see [`ServerConfig::tls`]).
    /// Default none.
    pub tls: Option<ServerTls>,
    /// Users (name, password) of the SASL DIGEST-MD5 login (see
    /// [`ServerConfig::sasl_digest`]). Default none: no SASL.
    pub sasl_users: Vec<(String, String)>,
}

/// The TLS settings of a [`TestingServer`]: PEM key and trust stores and
/// whether client certificates are required.
#[derive(Clone, Debug)]
pub struct ServerTls {
    /// `ssl.keyStore.location`: the server's key and certificate (PEM).
    pub keystore: PathBuf,
    /// `ssl.trustStore.location`: the CA certificates that client
    /// certificates must chain to (PEM).
    pub truststore: PathBuf,
    /// `ssl.clientAuth`.
    pub client_auth: ClientAuth,
}

/// The connection factory that serves TLS (the default NIO one does not).
pub const NETTY_FACTORY: &str = "org.apache.zookeeper.server.NettyServerCnxnFactory";

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            tick_time: Duration::from_millis(200),
            min_session_timeout: Duration::from_millis(400),
            max_session_timeout: Duration::from_secs(60),
            init_limit: 10,
            sync_limit: 5,
            start_timeout: Duration::from_secs(30),
            extra: Vec::new(),
            system_properties: Vec::new(),
            jvm_args: Vec::new(),
            tls: None,
            sasl_users: Vec::new(),
        }
    }
}

impl ServerConfig {
    /// Sets `tickTime`.
    pub fn tick_time(mut self, d: Duration) -> Self {
        self.tick_time = d;
        self
    }

    /// Sets `minSessionTimeout`.
    pub fn min_session_timeout(mut self, d: Duration) -> Self {
        self.min_session_timeout = d;
        self
    }

    /// Sets `maxSessionTimeout`.
    pub fn max_session_timeout(mut self, d: Duration) -> Self {
        self.max_session_timeout = d;
        self
    }

    /// Sets `initLimit` (ticks).
    pub fn init_limit(mut self, ticks: u32) -> Self {
        self.init_limit = ticks;
        self
    }

    /// Sets `syncLimit` (ticks).
    pub fn sync_limit(mut self, ticks: u32) -> Self {
        self.sync_limit = ticks;
        self
    }

    /// Sets how long starts wait for the server to serve.
    pub fn start_timeout(mut self, d: Duration) -> Self {
        self.start_timeout = d;
        self
    }

    /// Appends a JVM argument (see [`ServerConfig::jvm_args`]).
    pub fn jvm_arg(mut self, arg: impl Into<String>) -> Self {
        self.jvm_args.push(arg.into());
        self
    }

    /// Serves TLS with `certs` on a second port,
    /// [`TestingServer::secure_port`], beside the plain one (which the
    /// harness keeps for its four-letter words): the Netty connection
    /// factory (`-Dzookeeper.serverCnxnFactory`), `secureClientPort` and
    /// PEM stores. `certs` must outlive the server.
    ///
    /// ```no_run
    /// use latchkey_test::{ClientAuth, ServerConfig, TestCerts, TestingServer};
    ///
    /// let certs = TestCerts::generate()?;
    /// let server = TestingServer::start_with(ServerConfig::default().tls(&certs, ClientAuth::Need))?;
    /// println!("TLS at {}", server.secure_connect_string().unwrap());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn tls(mut self, certs: &crate::TestCerts, client_auth: ClientAuth) -> Self {
        self.tls = Some(ServerTls {
            keystore: certs.server_keystore(),
            truststore: certs.ca_file(),
            client_auth,
        });
        self.jvm_arg(format!("-Dzookeeper.serverCnxnFactory={NETTY_FACTORY}"))
    }

    /// The `zoo.cfg` lines of the TLS settings, without the port.
    pub(crate) fn tls_cfg(&self) -> String {
        let Some(tls) = &self.tls else {
            return String::new();
        };
        format!(
            "ssl.keyStore.location={}\n\
             ssl.keyStore.type=PEM\n\
             ssl.trustStore.location={}\n\
             ssl.trustStore.type=PEM\n\
             ssl.clientAuth={}\n",
            tls.keystore.display(),
            tls.truststore.display(),
            tls.client_auth.as_cfg()
        )
    }

    /// Takes SASL DIGEST-MD5 logins from `users` (name, password), as
    /// ZooKeeper's JAAS digest login does: a `Server` section with
    /// `DigestLoginModule` in a JAAS file the JVM is given
    /// (`-Djava.security.auth.login.config`), and the SASL auth provider in
    /// `zoo.cfg`. A client that does not log in is still served, as
    /// anonymous; nodes with a `sasl:<user>` ACL are its own.
    ///
    /// ```no_run
    /// use latchkey_test::{ServerConfig, TestingServer};
    ///
    /// let server = TestingServer::start_with(ServerConfig::default().sasl_digest(&[("bob", "bobsecret")]))?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn sasl_digest(mut self, users: &[(&str, &str)]) -> Self {
        self.sasl_users = users
            .iter()
            .map(|(u, p)| ((*u).to_owned(), (*p).to_owned()))
            .collect();
        self.extra(
            "authProvider.sasl",
            "org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
        )
    }

    /// The JAAS file's text for [`ServerConfig::sasl_digest`], or `None`.
    pub(crate) fn jaas(&self) -> Option<String> {
        if self.sasl_users.is_empty() {
            return None;
        }
        let quote = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
        let mut s =
            String::from("Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required");
        for (user, password) in &self.sasl_users {
            let _ = write!(s, "\n  user_{user}=\"{}\"", quote(password));
        }
        s.push_str(";\n};\n");
        Some(s)
    }

    /// Appends a `key=value` line to `zoo.cfg`.
    pub fn extra(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.extra.push((key.into(), value.into()));
        self
    }

    /// The `zoo.cfg` lines every server gets (no ports, dirs or peers).
    pub(crate) fn common_cfg(&self) -> String {
        let ms = |d: Duration| d.as_millis().max(1);
        let mut s = String::new();
        let _ = writeln!(s, "tickTime={}", ms(self.tick_time));
        let _ = writeln!(s, "minSessionTimeout={}", ms(self.min_session_timeout));
        let _ = writeln!(s, "maxSessionTimeout={}", ms(self.max_session_timeout));
        s.push_str(
            "standaloneEnabled=true\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             jute.maxbuffer=1048575\n\
             maxClientCnxns=0\n\
             forceSync=no\n\
             preAllocSize=4096\n\
             snapCount=100000\n",
        );
        for (k, v) in &self.extra {
            let _ = writeln!(s, "{k}={v}");
        }
        s
    }
}

/// A real standalone ZooKeeper 3.8 (Debian's `zookeeper` package) on
/// `127.0.0.1:<free port>`, in its own temp dir.
///
/// Stopping and restarting keep the port and the data, so sessions can
/// survive a restart. Dropping it kills the JVM and removes its files. The
/// JVM also dies with the test process even when the server is never dropped
/// (a `static`): a watchdog process holding a pipe from this process kills
/// it when the pipe closes.
///
/// Runs `java ... org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg`
/// with `-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1`; the server log
/// goes to `zookeeper.log` in the temp dir (see [`log_tail`](Self::log_tail)).
///
/// ```no_run
/// let server = latchkey_test::TestingServer::start()?;
/// println!("ZooKeeper at {}", server.connect_string());
/// assert!(server.four_letter("srvr")?.contains("Mode: standalone"));
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TestingServer {
    config: ServerConfig,
    port: u16,
    secure_port: Option<u16>,
    process: Mutex<Option<ZkProcess>>,
    dir: Option<TempDir>,
    root: PathBuf,
}

impl std::fmt::Debug for TestingServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestingServer")
            .field("addr", &self.addr())
            .field("dir", &self.root)
            .finish_non_exhaustive()
    }
}

impl TestingServer {
    /// Starts a server with [`ServerConfig::default`] and waits until it serves.
    ///
    /// Fails (never hangs) when Java or ZooKeeper is missing, with a message
    /// naming the packages to install, or when the server does not serve
    /// within 30 s, with the log's tail.
    pub fn start() -> io::Result<TestingServer> {
        Self::start_with(ServerConfig::default())
    }

    /// Starts a server with `config` and waits until it serves. Retries on a
    /// fresh port, up to 3 times, when another process takes the port first.
    pub fn start_with(config: ServerConfig) -> io::Result<TestingServer> {
        let mut server = Self::unstarted(config)?;
        let mut last_err = None;
        for attempt in 1..=START_ATTEMPTS {
            let ports = jvm::free_ports(1 + usize::from(server.config.tls.is_some()))?;
            server.port = ports[0];
            server.secure_port = ports.get(1).copied();
            server.write_cfg()?;
            match server.launch(&format!("start, attempt {attempt}")) {
                Ok(()) => return Ok(server),
                Err((e, true)) => {
                    log::info!("ZooKeeper port {} was taken; retrying ({e})", server.port);
                    last_err = Some(e);
                }
                Err((e, false)) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("ZooKeeper did not start")))
    }

    /// Starts a server with `config` on 127.0.0.1:`port` (the client port;
    /// a TLS server takes a free port for its secure one) and waits until it
    /// serves: for a program whose users must know the port in advance.
    /// Unlike [`start_with`](Self::start_with) it does not move to another
    /// port: when another process holds `port`, it fails with
    /// [`io::ErrorKind::AddrInUse`]. Port 0 is refused
    /// ([`io::ErrorKind::InvalidInput`]); `start_with` picks a free port.
    pub fn start_on_port(port: u16, config: ServerConfig) -> io::Result<TestingServer> {
        if port == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "port 0 is no port: use TestingServer::start_with for a free one",
            ));
        }
        // Another server on the port would answer the wait for this one.
        std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot listen on 127.0.0.1:{port}: {e}"))
        })?;
        let mut server = Self::unstarted(config)?;
        server.port = port;
        if server.config.tls.is_some() {
            server.secure_port = Some(jvm::free_ports(1)?[0]);
        }
        server.write_cfg()?;
        server.launch("start").map_err(|(e, _)| e)?;
        Ok(server)
    }

    /// A server in its own temp dir, not started, on no port yet.
    fn unstarted(config: ServerConfig) -> io::Result<TestingServer> {
        jvm::launcher()?;
        let dir = tempfile::Builder::new().prefix("latchkey-zk-").tempdir()?;
        let root = dir.path().to_path_buf();
        std::fs::create_dir_all(root.join("data"))?;
        Ok(TestingServer {
            config,
            port: 0,
            secure_port: None,
            process: Mutex::new(None),
            dir: Some(dir),
            root,
        })
    }

    fn write_cfg(&self) -> io::Result<()> {
        let mut cfg = self.config.common_cfg();
        let _ = writeln!(cfg, "dataDir={}", self.data_dir().display());
        let _ = writeln!(cfg, "clientPort={}", self.port);
        cfg.push_str("clientPortAddress=127.0.0.1\n");
        if let Some(port) = self.secure_port {
            let _ = writeln!(cfg, "secureClientPort={port}");
            cfg.push_str(&self.config.tls_cfg());
        }
        std::fs::write(self.cfg_path(), cfg)
    }

    /// Spawns the JVM and waits until it serves; the flag says whether the
    /// failure was a port clash (worth retrying).
    fn launch(&self, label: &str) -> Result<(), (io::Error, bool)> {
        let process = ZkProcess::spawn(
            &self.cfg_path(),
            &self.log_path(),
            &self.root,
            Some(&self.root),
            &format!("server {} {label}", self.addr()),
            &self.config,
        )
        .map_err(|e| (e, false))?;
        *self.process.lock() = Some(process);
        let waited = jvm::wait_until_serving(
            &self.process,
            self.addr(),
            &self.log_path(),
            self.config.start_timeout,
            |_| true,
        );
        match waited {
            Ok(()) => Ok(()),
            Err(why) => {
                if let Some(p) = self.process.lock().take() {
                    let _ = p.kill();
                }
                let (what, clash) = match why {
                    WaitError::Exited { status, clash } => {
                        (format!("exited ({status}) during {label}"), clash)
                    }
                    WaitError::TimedOut => (
                        format!(
                            "did not serve within {:?} ({label})",
                            self.config.start_timeout
                        ),
                        false,
                    ),
                };
                let kind = if clash {
                    io::ErrorKind::AddrInUse
                } else {
                    io::ErrorKind::Other
                };
                Err((
                    io::Error::new(
                        kind,
                        format!(
                            "ZooKeeper at {} {what}; log {}:\n{}",
                            self.addr(),
                            self.log_path().display(),
                            self.log_tail(40)
                        ),
                    ),
                    clash,
                ))
            }
        }
    }

    /// `"127.0.0.1:PORT"`, for a client's connect string.
    pub fn connect_string(&self) -> String {
        self.addr().to_string()
    }

    /// `"127.0.0.1:SECURE_PORT"` when the server serves TLS
    /// ([`ServerConfig::tls`]), for a TLS client's connect string.
    pub fn secure_connect_string(&self) -> Option<String> {
        self.secure_port.map(|p| format!("127.0.0.1:{p}"))
    }

    /// The TLS client port, when the server serves TLS.
    pub fn secure_port(&self) -> Option<u16> {
        self.secure_port
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The client address, `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The server's temp dir (holds `zoo.cfg`, `data/` and `zookeeper.log`).
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// The data dir (snapshots and transaction logs).
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    /// The server log file (appended to across restarts).
    pub fn log_path(&self) -> PathBuf {
        self.root.join("zookeeper.log")
    }

    fn cfg_path(&self) -> PathBuf {
        self.root.join("zoo.cfg")
    }

    /// The settings it runs with.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Changes the settings the next [`restart`](Self::restart) runs with
    /// (the port and the data stay), such as the SASL users' passwords.
    pub fn reconfigure(&mut self, change: impl FnOnce(ServerConfig) -> ServerConfig) {
        self.config = change(self.config.clone());
    }

    /// Stops the server gracefully: SIGTERM, then SIGKILL after 5 s. Sessions
    /// and data stay on disk for [`restart`](Self::restart). A no-op when
    /// already stopped.
    pub fn stop(&mut self) -> io::Result<()> {
        match self.process.get_mut().take() {
            Some(p) => p.terminate(jvm::STOP_GRACE),
            None => Ok(()),
        }
    }

    /// Kills the server with SIGKILL, as a crash would. A no-op when already
    /// stopped.
    pub fn kill(&mut self) -> io::Result<()> {
        match self.process.get_mut().take() {
            Some(p) => p.kill(),
            None => Ok(()),
        }
    }

    /// Starts the server again on the same port with the same data (stopping
    /// it first if it runs) and waits until it serves. Retries a few times if
    /// the port is briefly taken.
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop()?;
        let mut last_err = None;
        for attempt in 1..=START_ATTEMPTS {
            for log in jvm::remove_headerless_logs(&self.data_dir())? {
                eprintln!(
                    "latchkey-test: removed {} (killed before its header was written)",
                    log.display()
                );
            }
            match self.launch(&format!("restart, attempt {attempt}")) {
                Ok(()) => return Ok(()),
                Err((e, true)) => {
                    last_err = Some(e);
                    thread::sleep(Duration::from_millis(500));
                }
                Err((e, false)) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("ZooKeeper did not restart")))
    }

    /// Whether the JVM is alive (it may still be starting; [`start`](Self::start)
    /// and [`restart`](Self::restart) return only once it serves).
    pub fn is_running(&self) -> bool {
        self.process.lock().as_mut().is_some_and(|p| p.is_alive())
    }

    /// The JVM's process id while it runs, e.g. to freeze it with
    /// `kill -STOP` (a long GC pause) and thaw it with `kill -CONT`.
    pub fn pid(&self) -> Option<u32> {
        let mut guard = self.process.lock();
        let p = guard.as_mut()?;
        p.is_alive().then(|| p.pid())
    }

    /// The last `n_lines` of the server log, for failure messages.
    pub fn log_tail(&self, n_lines: usize) -> String {
        jvm::tail_file(&self.log_path(), n_lines)
    }

    /// Sends a four-letter word (`srvr`, `mntr`, `cons`, `wchs`, `stat`,
    /// `ruok`, `dump`, ...) and returns the reply (5 s timeout).
    pub fn four_letter(&self, cmd: &str) -> io::Result<String> {
        four_letter_word(self.addr(), cmd, Duration::from_secs(5))
    }
}

impl Drop for TestingServer {
    fn drop(&mut self) {
        if let Some(p) = self.process.get_mut().take() {
            let _ = p.kill();
        }
        if let Some(dir) = self.dir.take() {
            if let Err(e) = dir.close() {
                log::warn!("could not remove {}: {e}", self.root.display());
            }
        }
    }
}

/// Sends the four-letter word `cmd` to a ZooKeeper at `addr` and returns
/// its whole reply; fails if none arrives within `timeout`.
///
/// Only four lowercase ASCII letters are accepted. The server must whitelist
/// the word (the harness's servers allow all of them).
pub fn four_letter_word(addr: SocketAddr, cmd: &str, timeout: Duration) -> io::Result<String> {
    jvm::four_letter_word(addr, cmd, timeout)
}

/// A ZooKeeper path no other test uses: `"/<prefix>-<counter>-<pid>-<nanos>"`.
///
/// Leading and trailing `/` of `prefix` are dropped.
///
/// ```
/// let a = latchkey_test::unique_path("locks");
/// let b = latchkey_test::unique_path("locks");
/// assert!(a.starts_with("/locks-"));
/// assert_ne!(a, b);
/// ```
pub fn unique_path(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let prefix = prefix.trim_matches('/');
    let prefix = if prefix.is_empty() { "path" } else { prefix };
    format!("/{prefix}-{n}-{}-{nanos}", std::process::id())
}

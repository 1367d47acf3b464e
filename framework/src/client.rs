//! The client: its builder, its life cycle, the state machine that turns
//! session events into Curator's connection states (run on the process'
//! timer thread), and the retry loop.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver};
use parking_lot::{Mutex, RwLock};

use crate::acl::{AclProvider, DefaultAclProvider};
use crate::background::{self, Background};
use crate::cancel::{self, CancelToken};
use crate::deadline::instant_after;
use crate::error::{Error, ErrorCode, Result};
use crate::metrics::{self, ClientMetrics, Counters};
use crate::ops;
use crate::paths;
use crate::retry::{ExponentialBackoffRetry, RetryPolicy};
use crate::state::{
    ConnectionState, ConnectionStateErrorPolicy, ListenerHandle,
    StandardConnectionStateErrorPolicy, StateBoard,
};
use crate::trace;
use crate::types::CreateMode;
use crate::wire::clock::Timers;
use crate::wire::{WatchGroup, WireConfig, WireEvent, WireSession};

/// Builds a [`Client`]; Curator's `CuratorFrameworkFactory.builder()`.
///
/// ```no_run
/// use std::time::Duration;
/// use latchkey_framework::{Client, ExponentialBackoffRetry};
///
/// let client = Client::builder()
///     .connect_string("127.0.0.1:2181")
///     .session_timeout(Duration::from_secs(10))
///     .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 3))
///     .namespace("myapp")
///     .build()?;
/// client.start()?;
/// client.block_until_connected_or_err(Duration::from_secs(5))?;
/// # Ok::<(), latchkey_framework::Error>(())
/// ```
pub struct ClientBuilder {
    connect_string: String,
    session_timeout: Duration,
    connection_timeout: Duration,
    retry: Arc<dyn RetryPolicy>,
    error_policy: Arc<dyn ConnectionStateErrorPolicy>,
    namespace: Option<String>,
    acl_provider: Arc<dyn AclProvider>,
    auth: Vec<(String, Vec<u8>)>,
    can_be_read_only: bool,
    max_reply_size: usize,
    max_request_size: usize,
    max_unsent_bytes: usize,
    tls: Option<crate::TlsConfig>,
    sasl: Option<crate::wire::SaslDigest>,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            connect_string: String::new(),
            // Curator's defaults.
            session_timeout: Duration::from_secs(60),
            connection_timeout: Duration::from_secs(15),
            retry: Arc::new(ExponentialBackoffRetry::new(Duration::from_millis(100), 3)),
            error_policy: Arc::new(StandardConnectionStateErrorPolicy),
            namespace: None,
            acl_provider: Arc::new(DefaultAclProvider),
            auth: Vec::new(),
            can_be_read_only: false,
            max_reply_size: crate::wire::DEFAULT_MAX_REPLY,
            max_request_size: crate::wire::JUTE_MAXBUFFER,
            max_unsent_bytes: crate::wire::DEFAULT_MAX_UNSENT,
            tls: None,
            sasl: None,
        }
    }
}

impl ClientBuilder {
    /// Comma-separated `host:port` list, optionally followed by a chroot
    /// (`/path`), which then prefixes the namespace.
    pub fn connect_string(mut self, s: impl Into<String>) -> Self {
        self.connect_string = s.into();
        self
    }

    /// The session timeout to ask for; the server may grant another (see
    /// [`Client::negotiated_session_timeout`]). Default 60 s.
    pub fn session_timeout(mut self, d: Duration) -> Self {
        self.session_timeout = d;
        self
    }

    /// How long one attempt of an operation waits for a connection before
    /// it counts as connection loss, and how long connecting to one server
    /// may take (shared by the hosts of the connect string). Default 15 s.
    ///
    /// A connect attempt does not wait that long at once: its wait for the
    /// server (the TCP connect, the TLS handshake and the handshake reply)
    /// is 250 ms at first, and each attempt that runs out of it waits half
    /// as long again as the one before (375 ms, 562 ms, ...), up to the
    /// connection timeout divided by the number of hosts (at least
    /// 200 ms). A server still starting, which takes connections before it
    /// answers them, then holds the client up for about a wait rather than
    /// the whole timeout, while a slow server is still reached once the
    /// wait covers its reply. A handshake answered starts the wait over at
    /// 250 ms; refused or reset connections leave it as it is. After a
    /// connection that went silent (a partition, a stalled server) every
    /// attempt waits the whole share instead: short waits there would only
    /// send handshakes that arrive once the network heals and move the
    /// session away from the connection the client is back on.
    ///
    /// A request sent on a live connection waits for its reply until the
    /// operation's deadline ([`Client::with_timeout`]), or, without one,
    /// until the reply comes or silence detection (2/3 of the session
    /// timeout) drops the connection, as in the Java client: it is never
    /// given up early and sent again, which could apply it twice.
    /// `Duration::MAX` means no bound on the wait for a connection.
    pub fn connection_timeout(mut self, d: Duration) -> Self {
        self.connection_timeout = d;
        self
    }

    /// The policy of the retry loop. Default `ExponentialBackoffRetry(100 ms, 3)`.
    pub fn retry_policy(mut self, policy: impl RetryPolicy + 'static) -> Self {
        self.retry = Arc::new(policy);
        self
    }

    /// Like [`ClientBuilder::retry_policy`], for a shared policy.
    pub fn retry_policy_arc(mut self, policy: Arc<dyn RetryPolicy>) -> Self {
        self.retry = policy;
        self
    }

    /// Which connection states end what a leader recipe holds (Curator's
    /// `connectionStateErrorPolicy`). Default
    /// [`StandardConnectionStateErrorPolicy`]: `Suspended` and `Lost` end a
    /// `LeaderLatch`'s leadership and interrupt a `LeaderSelector`'s term.
    /// With [`SessionConnectionStateErrorPolicy`](crate::SessionConnectionStateErrorPolicy)
    /// only `Lost` does: leadership survives a short outage that the session
    /// outlives.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use latchkey_framework::{Client, ConnectionState, SessionConnectionStateErrorPolicy};
    ///
    /// let client = Client::builder()
    ///     .connect_string("127.0.0.1:2181")
    ///     .session_timeout(Duration::from_secs(10))
    ///     .connection_state_error_policy(SessionConnectionStateErrorPolicy)
    ///     .build()?;
    /// assert!(!client.is_error_state(ConnectionState::Suspended));
    /// assert!(client.is_error_state(ConnectionState::Lost));
    /// # Ok::<(), latchkey_framework::Error>(())
    /// ```
    pub fn connection_state_error_policy(
        mut self,
        policy: impl ConnectionStateErrorPolicy + 'static,
    ) -> Self {
        self.error_policy = Arc::new(policy);
        self
    }

    /// Like [`ClientBuilder::connection_state_error_policy`], for a shared
    /// policy.
    pub fn connection_state_error_policy_arc(
        mut self,
        policy: Arc<dyn ConnectionStateErrorPolicy>,
    ) -> Self {
        self.error_policy = policy;
        self
    }

    /// Every path the client uses is under `/<namespace>` on the server,
    /// transparently (`"app"` or `"app/sub"`). As in Curator, a leading or
    /// trailing `/` makes [`ClientBuilder::build`] fail; an empty namespace
    /// means none. The namespace's nodes are created on first use.
    pub fn namespace(mut self, ns: impl Into<String>) -> Self {
        self.namespace = Some(ns.into());
        self
    }

    /// Chooses the ACL of nodes the client creates. Default: `OPEN_ACL_UNSAFE`.
    pub fn acl_provider(mut self, p: impl AclProvider + 'static) -> Self {
        self.acl_provider = Arc::new(p);
        self
    }

    /// Adds authentication, sent on every (re)connect; for example
    /// `("digest", b"user:password")`.
    pub fn authorization(mut self, scheme: &str, auth: &[u8]) -> Self {
        self.auth.push((scheme.to_owned(), auth.to_vec()));
        self
    }

    /// Whether a server in read-only mode may serve this client.
    pub fn can_be_read_only(mut self, yes: bool) -> Self {
        self.can_be_read_only = yes;
        self
    }

    /// The largest reply frame accepted from a server, in bytes; a longer
    /// one drops the connection. Default 4 MiB (ZooKeeper's `jute.maxbuffer`
    /// of 1 MiB, with headroom for large children listings).
    pub fn max_reply_size(mut self, bytes: usize) -> Self {
        self.max_reply_size = bytes;
        self
    }

    /// The largest request the servers accept, in bytes: their
    /// `jute.maxbuffer`, 1 MiB - 1 by default. A larger request fails alone
    /// with [`Error::RequestTooLarge`] before it is sent; the server would
    /// drop the whole connection.
    pub fn max_request_size(mut self, bytes: usize) -> Self {
        self.max_request_size = bytes;
        self
    }

    /// The most bytes of requests that may wait, per connection, to be
    /// written to a server that is slow to take them: 16 MiB by default. A
    /// call that finds them at the cap waits for room until its deadline,
    /// then fails with [`Error::Unsent`] naming the cap; nothing of it was
    /// sent. A call whose deadline passes while its request still waits is
    /// taken back the same way, so requests given up on never pile up. A
    /// single request larger than the cap is sent alone, once nothing else
    /// waits.
    ///
    /// ```no_run
    /// # fn f() -> latchkey_framework::Result<()> {
    /// let client = latchkey_framework::Client::builder()
    ///     .connect_string("127.0.0.1:2181")
    ///     .max_unsent_bytes(4 << 20)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn max_unsent_bytes(mut self, bytes: usize) -> Self {
        self.max_unsent_bytes = bytes;
        self
    }

    /// Connects with TLS, to servers' secure client port
    /// (`secureClientPort`): see [`TlsConfig`](crate::TlsConfig) for the
    /// verification and the README for the matching server settings. The
    /// certificate files are read by [`ClientBuilder::build`], which fails
    /// naming a file it cannot use. Default: plain TCP.
    ///
    /// ```no_run
    /// use latchkey_framework::{Client, TlsConfig};
    ///
    /// let client = Client::builder()
    ///     .connect_string("127.0.0.1:2281")
    ///     .tls(TlsConfig::new("ca.pem"))
    ///     .build()?;
    /// # Ok::<(), latchkey_framework::Error>(())
    /// ```
    pub fn tls(mut self, config: crate::TlsConfig) -> Self {
        self.tls = Some(config);
        self
    }

    /// Logs in as `user` with SASL DIGEST-MD5 on every connection, before
    /// any request: ZooKeeper's JAAS digest login (`DigestLoginModule`,
    /// the server's `SASLAuthenticationProvider`); nodes with a
    /// `sasl:<user>` ACL are then the client's. The README shows the
    /// matching server settings. Kerberos (GSSAPI) is not supported.
    ///
    /// A server that refuses the login (a wrong password, an unknown
    /// user) ends the session with `AuthFailed`, as a rejected
    /// [`authorization`](Self::authorization) does: calls fail with
    /// `AuthFailed`, the state goes `Lost`, and new sessions are tried only
    /// as the retry policy allows, at least 1 s apart, before the client
    /// gives up for good. The policy counts refusals since the last login
    /// that succeeded. A server without SASL configured refuses it too.
    ///
    /// ```no_run
    /// use latchkey_framework::Client;
    ///
    /// let client = Client::builder()
    ///     .connect_string("127.0.0.1:2181")
    ///     .sasl_digest("bob", "bobsecret")
    ///     .build()?;
    /// # Ok::<(), latchkey_framework::Error>(())
    /// ```
    pub fn sasl_digest(mut self, user: &str, password: &str) -> Self {
        self.sasl = Some(crate::wire::SaslDigest {
            user: user.to_owned(),
            password: password.to_owned(),
        });
        self
    }

    /// Checks the settings and makes the client (not started yet).
    pub fn build(self) -> Result<Client> {
        let (hosts, chroot) = parse_connect_string(&self.connect_string)?;
        if self.session_timeout < Duration::from_millis(1) {
            return Err(Error::InvalidArgument(
                "session timeout must be positive".into(),
            ));
        }
        if self.connection_timeout < Duration::from_millis(1) {
            return Err(Error::InvalidArgument(
                "connection timeout must be positive".into(),
            ));
        }
        if let Some(ns) = self.namespace.as_deref() {
            if ns.starts_with('/') || ns.ends_with('/') {
                return Err(Error::InvalidArgument(format!(
                    "namespace {ns:?} must be a relative path such as \"app\" or \"app/sub\" \
                     (no leading or trailing '/')"
                )));
            }
        }
        let namespace = match (chroot, self.namespace) {
            (None, None) => None,
            (c, n) => {
                let joined = [c.as_deref(), n.as_deref()]
                    .into_iter()
                    .flatten()
                    .map(|s| s.trim_matches('/'))
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join("/");
                if joined.is_empty() {
                    None
                } else {
                    paths::validate_path(&format!("/{joined}")).map_err(|e| {
                        Error::InvalidArgument(format!("invalid namespace {joined:?}: {e}"))
                    })?;
                    Some(joined)
                }
            }
        };
        let tls = self.tls.as_ref().map(crate::TlsConfig::load).transpose()?;
        let counters = Arc::new(Counters::default());
        Ok(Client {
            deadline: None,
            cancel: None,
            watch_group: None,
            shared: Arc::new_cyclic(|me| Shared {
                me: me.clone(),
                cfg: Config {
                    connect_string: self.connect_string,
                    wire: WireConfig {
                        hosts,
                        session_timeout: self.session_timeout,
                        connection_timeout: self.connection_timeout,
                        can_be_read_only: self.can_be_read_only,
                        auth: Arc::new(Mutex::new(self.auth)),
                        max_reply: self.max_reply_size,
                        max_request: self.max_request_size,
                        max_unsent: self.max_unsent_bytes,
                        counters: Arc::clone(&counters),
                        tls,
                        sasl: self.sasl,
                    },
                    retry: self.retry,
                    error_policy: self.error_policy,
                    namespace: namespace.clone(),
                    acl_provider: self.acl_provider,
                },
                board: Arc::new(StateBoard::new()),
                session: RwLock::new(None),
                generation: AtomicU64::new(0),
                machine: Mutex::new(StateMachine::default()),
                started: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                auth_failed: AtomicBool::new(false),
                auth_failure: Mutex::new(String::new()),
                lost_session: AtomicI64::new(0),
                namespace_ready: AtomicBool::new(namespace.is_none()),
                background: Arc::new(Background::default()),
                counters,
            }),
        })
    }
}

fn parse_connect_string(s: &str) -> Result<(Vec<String>, Option<String>)> {
    let (hosts, chroot) = match s.find('/') {
        Some(i) => (&s[..i], Some(s[i..].to_owned())),
        None => (s, None),
    };
    let hosts: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(with_default_port)
        .collect();
    if hosts.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "connect string {s:?} names no server (expected host:port[,host:port...])"
        )));
    }
    for h in &hosts {
        let port_ok = h
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(Error::InvalidArgument(format!(
                "connect string entry {h:?} is not host:port"
            )));
        }
    }
    Ok((hosts, chroot.filter(|c| c != "/")))
}

/// `host` as given, or `host:2181` when it names no port (as the Java client).
fn with_default_port(host: &str) -> String {
    let has_port = match host.rsplit_once(':') {
        // An IPv6 literal has colons of its own: only `[..]:port` has a port.
        Some((h, _)) => !h.contains(':') || h.ends_with(']'),
        None => false,
    };
    if has_port {
        host.to_owned()
    } else {
        format!("{host}:2181")
    }
}

pub(crate) struct Config {
    /// As given to the builder, for error messages.
    pub connect_string: String,
    pub wire: WireConfig,
    pub retry: Arc<dyn RetryPolicy>,
    pub error_policy: Arc<dyn ConnectionStateErrorPolicy>,
    pub namespace: Option<String>,
    pub acl_provider: Arc<dyn AclProvider>,
}

pub(crate) struct Shared {
    pub cfg: Config,
    pub board: Arc<StateBoard>,
    /// This client, for the sessions' event sinks and the timers, which
    /// must not keep it open.
    me: Weak<Shared>,
    session: RwLock<Option<WireSession>>,
    generation: AtomicU64,
    /// What the session's events have said so far; changed on the
    /// process' timer thread only.
    machine: Mutex<StateMachine>,
    started: AtomicBool,
    closed: AtomicBool,
    /// Set while the server has rejected the client's auth and no new
    /// session has been started since: calls fail with `AuthFailed`.
    auth_failed: AtomicBool,
    /// What the server refused, for the `AuthFailed` errors meanwhile.
    auth_failure: Mutex<String>,
    /// The id of the last session declared `Lost` (0: none yet), set
    /// before `Lost` is posted.
    lost_session: AtomicI64,
    /// Whether the namespace's nodes are known to exist (see
    /// `Shared::ensure_namespace`).
    pub(crate) namespace_ready: AtomicBool,
    pub background: Arc<Background>,
    /// Shared with every session's wire config, which counts requests.
    pub(crate) counters: Arc<Counters>,
}

/// A ZooKeeper client with Curator's connection handling; cheap to clone
/// (clones share one session). The session closes when [`Client::close`]
/// is called or the last clone is dropped: its ephemeral nodes go at once
/// and the client's threads end.
///
/// The client's own threads hold no `Client`, but a callback you give it
/// (a watcher, a listener) that captures a `Client` keeps the session open
/// until the callback is dropped; a watch may never fire. A callback that
/// needs the client should capture a [`WeakClient`] from
/// [`Client::downgrade`] instead:
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// let weak = client.downgrade();
/// client.get_data_watch("/config", move |_event| {
///     if let Some(client) = weak.upgrade() {
///         let _ = client.get_data("/config");
///     }
/// })?;
/// # Ok(()) }
/// ```
///
/// Every operation validates its path, applies the namespace and runs in the
/// retry loop. See [`ClientBuilder`] for an example.
#[derive(Clone)]
pub struct Client {
    pub(crate) shared: Arc<Shared>,
    /// Every operation on this handle ends by then; see [`Client::with_deadline`].
    pub(crate) deadline: Option<Instant>,
    /// Every operation on this handle ends once it is cancelled; see
    /// [`Client::with_cancel`].
    pub(crate) cancel: Option<CancelToken>,
    /// The watches set through this handle are removed together; see
    /// [`Client::with_watcher_removal`].
    pub(crate) watch_group: Option<Arc<WatchGroup>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("hosts", &self.shared.cfg.wire.hosts)
            .field("namespace", &self.shared.cfg.namespace)
            .field("state", &self.state())
            .finish()
    }
}

/// A handle on a [`Client`] that does not keep its session open; see
/// [`Client::downgrade`].
#[derive(Clone, Debug)]
pub struct WeakClient {
    shared: Weak<Shared>,
    watch_group: Option<Arc<WatchGroup>>,
}

impl WeakClient {
    /// The client, unless every [`Client`] handle has been dropped.
    pub fn upgrade(&self) -> Option<Client> {
        self.shared.upgrade().map(|shared| Client {
            shared,
            deadline: None,
            cancel: None,
            watch_group: self.watch_group.clone(),
        })
    }
}

impl Client {
    /// A handle for callbacks the client itself holds (watchers,
    /// listeners): unlike a clone, it does not keep the session open once
    /// every `Client` handle is dropped.
    pub fn downgrade(&self) -> WeakClient {
        WeakClient {
            shared: Arc::downgrade(&self.shared),
            watch_group: self.watch_group.clone(),
        }
    }

    /// A builder with Curator's defaults.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A client for `connect_string` with default settings (not started).
    pub fn new(connect_string: &str) -> Result<Client> {
        Client::builder().connect_string(connect_string).build()
    }

    /// Starts connecting in the background. Calling it twice is an error.
    pub fn start(&self) -> Result<()> {
        let s = &self.shared;
        if s.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if s.started.swap(true, Ordering::AcqRel) {
            return Err(Error::IllegalState("client already started".into()));
        }
        s.new_session()?;
        // The cleanup thread (as the listener and watcher threads) starts
        // with its first job: a session that only holds locks needs none.
        let (weak, background) = (Arc::downgrade(s), Arc::downgrade(&s.background));
        s.background.start_with_first_job(move || {
            let (weak, background) = (weak.clone(), background.clone());
            crate::sched::spawn("latchkey-background", move || {
                if let Some(background) = background.upgrade() {
                    background::run(weak, background);
                }
            })
        });
        Ok(())
    }

    /// Waits until connected. `Ok(false)` when `timeout` passes first (or
    /// this handle's deadline, see [`Client::with_deadline`]). A timeout too
    /// large for the clock, such as `Duration::MAX`, waits without limit.
    /// Check the `bool`: [`Client::block_until_connected_or_err`] fails
    /// instead, saying why the client could not connect.
    pub fn block_until_connected(&self, timeout: Duration) -> Result<bool> {
        self.shared.check_usable()?;
        let deadline = earliest(Instant::now().checked_add(timeout), self.deadline);
        Ok(self.shared.board.wait_connected(deadline))
    }

    /// Waits until connected, like [`Client::block_until_connected`], but
    /// fails when `timeout` (or this handle's deadline) passes first, with
    /// [`Error::ConnectTimeout`], which names the connect string and why
    /// the last attempt to connect failed (for example `connection to
    /// 127.0.0.1:2181 refused`). The client goes on trying in the
    /// background; close it (or drop it) to stop. A rejected auth fails
    /// with [`Error::AuthFailed`] instead, a closed client with
    /// [`Error::Closed`].
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use latchkey_framework::Client;
    ///
    /// let client = Client::new("127.0.0.1:2181")?;
    /// client.start()?;
    /// client.block_until_connected_or_err(Duration::from_secs(10))?;
    /// # Ok::<(), latchkey_framework::Error>(())
    /// ```
    pub fn block_until_connected_or_err(&self, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        if self.block_until_connected(timeout)? {
            return Ok(());
        }
        let s = &self.shared;
        if s.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if s.auth_failed.load(Ordering::Acquire) {
            return Err(s.auth_error());
        }
        let waited = match self.deadline {
            Some(d) => timeout.min(d.saturating_duration_since(started)),
            None => timeout,
        };
        Err(Error::ConnectTimeout {
            connect_string: s.cfg.connect_string.clone(),
            waited,
            last_attempt: s
                .session()
                .and_then(|session| session.last_connect_error())
                .map(|why| why.to_string()),
        })
    }

    /// A handle on this client whose every operation returns by `deadline`
    /// (`None`: no deadline), retries, back-off sleeps and waits for a
    /// connection included. An operation still running at the deadline
    /// fails with [`Error::Timeout`], which names the operation and the path
    /// and carries the last error as its `source()`; whether a write that
    /// timed out took effect is unknown, as with connection loss.
    ///
    /// Operations return within a few milliseconds of the deadline (the
    /// time to wake a thread; 50 ms covers a loaded machine). The handle
    /// shares the client's session, like a clone; the client's own
    /// background work (guaranteed deletes) is not bounded by it.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use std::time::{Duration, Instant};
    /// let bounded = client.with_deadline(Some(Instant::now() + Duration::from_secs(2)));
    /// match bounded.get_data("/config") {
    ///     Err(latchkey_framework::Error::Timeout { .. }) => { /* not within 2 s */ }
    ///     other => { other?; }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn with_deadline(&self, deadline: Option<Instant>) -> Client {
        Client {
            shared: Arc::clone(&self.shared),
            deadline,
            cancel: self.cancel.clone(),
            watch_group: self.watch_group.clone(),
        }
    }

    /// A handle on this client whose every operation fails with
    /// [`Error::Cancelled`] once `cancel` is cancelled (`None`: not
    /// cancellable), at once even while it waits for a reply, a connection
    /// or a retry's pause (see [`CancelToken`]). It keeps this handle's
    /// deadline and shares the client's session, like a clone; the client's
    /// background work (guaranteed deletes, protected-create cleanup) goes
    /// on regardless, and a guaranteed delete or protected create that is
    /// cancelled leaves its work to it.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) {
    /// use latchkey_framework::CancelToken;
    /// let shutdown = CancelToken::new();
    /// let worker = client.with_cancel(Some(&shutdown));
    /// // ... worker.get_data(..) on one thread, shutdown.cancel() on another
    /// # }
    /// ```
    pub fn with_cancel(&self, cancel: Option<&CancelToken>) -> Client {
        Client {
            shared: Arc::clone(&self.shared),
            deadline: self.deadline,
            cancel: cancel.cloned(),
            watch_group: self.watch_group.clone(),
        }
    }

    /// This handle's cancel token, if it has one (see [`Client::with_cancel`]).
    pub fn cancel_token(&self) -> Option<&CancelToken> {
        self.cancel.as_ref()
    }

    /// [`Client::with_deadline`] `timeout` from now; a timeout too large for
    /// the clock (such as `Duration::MAX`) means no deadline.
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        self.with_deadline(Instant::now().checked_add(timeout))
    }

    /// This handle's deadline, if it has one (see [`Client::with_deadline`]).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Closes the session on the server (waiting at most the connection
    /// timeout, or 1 s, whichever is less) and stops the client's threads.
    /// Idempotent; later calls on any clone fail with [`Error::Closed`].
    pub fn close(&self) {
        self.shared.close();
    }

    /// Whether [`Client::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// The current connection state; `None` before the first connection
    /// and after [`Client::close`].
    pub fn state(&self) -> Option<ConnectionState> {
        self.shared.board.current()
    }

    /// Every state the client has been in, with the time since it was built.
    /// Handy in a failing test's output.
    pub fn state_history(&self) -> Vec<(Duration, ConnectionState)> {
        self.shared.board.history()
    }

    /// Calls `listener` with every new state, in order, on the client's
    /// listener thread (shared by all listeners of the client, as in
    /// Curator). The listener may call the client, block or panic without
    /// holding up the session: the client keeps reconnecting and starting
    /// new sessions meanwhile; only later listeners wait. Removed when the
    /// handle drops.
    pub fn add_listener(
        &self,
        listener: impl Fn(ConnectionState) + Send + Sync + 'static,
    ) -> ListenerHandle {
        let id = self.shared.board.add_listener(Arc::new(listener));
        self.handle(id)
    }

    /// A channel ([`Receiver`](crate::Receiver), re-exported from
    /// `crossbeam-channel`) that receives every new state, in order; use
    /// `recv_timeout` to wait with a bound, or `select!` over several.
    /// The listener goes away with the receiver (at the next state change
    /// after it is dropped).
    pub fn listen(&self) -> Receiver<ConnectionState> {
        let (tx, rx) = unbounded();
        let board = Arc::downgrade(&self.shared.board);
        let own_id = Arc::new(std::sync::OnceLock::new());
        let id_slot = Arc::clone(&own_id);
        let id = self.shared.board.add_listener(Arc::new(move |s| {
            if tx.send(s).is_err() {
                if let (Some(board), Some(id)) = (board.upgrade(), id_slot.get()) {
                    board.remove(*id);
                }
            }
        }));
        let _ = own_id.set(id);
        rx
    }

    /// For recipe authors: calls `wake` on every state change and once when
    /// the client closes, so that a thread sleeping on a watch re-checks.
    /// Called right away if the client is already closed. A waker runs on
    /// the process' timer thread (which every client's state changes go
    /// through) as the state changes, so it must return at once and must
    /// not call the client: set a flag, notify a condvar.
    pub fn add_waker(&self, wake: impl Fn() + Send + Sync + 'static) -> ListenerHandle {
        let id = self.shared.board.add_waker(Arc::new(wake));
        self.handle(id)
    }

    fn handle(&self, id: u64) -> ListenerHandle {
        ListenerHandle {
            board: Arc::downgrade(&self.shared.board),
            id,
        }
    }

    /// The namespace, without slashes, if one is set.
    pub fn namespace(&self) -> Option<&str> {
        self.shared.cfg.namespace.as_deref()
    }

    /// The server's id of the current session (0 before connecting).
    ///
    /// After a session is lost the client starts the next one at once
    /// (after a rejected auth, once the retry policy allows), and from then
    /// on this is the next session's id: 0 until it connects. A `Lost`
    /// listener runs on the listener thread, after the state changed, so
    /// it may see the lost session's id, 0 or already the next session's
    /// id. To know which session a listener's `Lost` ended, read
    /// [`lost_session_id`](Self::lost_session_id); the recipes compare ids
    /// kept while connected with this one to tell whether what they hold
    /// is of the current session.
    pub fn session_id(&self) -> i64 {
        self.shared.session().map_or(0, |s| s.session_id())
    }

    /// The id of the last session this client declared `Lost` (`None`
    /// while none has been). It is recorded before listeners hear `Lost`,
    /// so a `Lost` listener always reads the session that just ended here,
    /// whatever the next session has done by then.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) {
    /// use latchkey_framework::ConnectionState;
    /// let c = client.clone();
    /// let _listener = client.add_listener(move |state| {
    ///     if state == ConnectionState::Lost {
    ///         eprintln!("session {:#x} lost", c.lost_session_id().unwrap_or(0));
    ///     }
    /// });
    /// # }
    /// ```
    pub fn lost_session_id(&self) -> Option<i64> {
        match self.shared.lost_session.load(Ordering::Acquire) {
            0 => None,
            id => Some(id),
        }
    }

    /// Registers the ephemeral node at `path` (which session `owner`
    /// created) for removal if that session is declared lost: the client
    /// then deletes it in the background from its next session, once
    /// connected, and only if the node is still that session's (its
    /// `ephemeral_owner` is `owner`; it is deleted with the version read).
    /// A node of any other session is never touched. If `owner` was
    /// declared lost already, the deletion is queued at once.
    ///
    /// This is how the recipes give up the nodes of lost holds without
    /// waiting for the server to expire the old session, which it may
    /// have kept alive (a server restarted within the session timeout
    /// restores its sessions); Curator leaves them to the server's expiry.
    /// Unregister the node with [`Client::keep_when_session_lost`] when
    /// it is deleted or handed on.
    pub fn delete_when_session_lost(&self, path: &str, owner: i64) -> Result<()> {
        let server_path = self.shared.server_path(path)?;
        self.shared.background.delete_when_lost(server_path, owner);
        Ok(())
    }

    /// Forgets a node registered with [`Client::delete_when_session_lost`]
    /// (any owner); a deletion already queued goes on.
    pub fn keep_when_session_lost(&self, path: &str) {
        if let Ok(server_path) = self.shared.server_path(path) {
            self.shared.background.forget_owned(&server_path);
        }
    }

    /// The session timeout the server granted to the current session,
    /// clamped to the requested one (the client times its pings and
    /// silence detection by it).
    pub fn negotiated_session_timeout(&self) -> Duration {
        self.shared
            .session()
            .map_or(self.shared.cfg.wire.session_timeout, |s| {
                s.negotiated_timeout()
            })
    }

    /// The retry policy of the retry loop.
    pub fn retry_policy(&self) -> Arc<dyn RetryPolicy> {
        Arc::clone(&self.shared.cfg.retry)
    }

    /// The connection-state error policy set on the builder (Curator's
    /// `getConnectionStateErrorPolicy`).
    pub fn connection_state_error_policy(&self) -> Arc<dyn ConnectionStateErrorPolicy> {
        Arc::clone(&self.shared.cfg.error_policy)
    }

    /// Whether `state` ends what a leader recipe holds, by this client's
    /// [`ConnectionStateErrorPolicy`] (see
    /// [`ClientBuilder::connection_state_error_policy`]).
    pub fn is_error_state(&self, state: ConnectionState) -> bool {
        self.shared.cfg.error_policy.is_error_state(state)
    }

    /// The connection timeout: how long an attempt waits for a connection.
    pub fn connection_timeout(&self) -> Duration {
        self.shared.cfg.wire.connection_timeout
    }

    /// What the client has done so far (requests, retries, reconnects,
    /// sessions, watch events), for a service to export; see
    /// [`ClientMetrics`]. Cheap: a handful of relaxed atomic loads.
    pub fn metrics(&self) -> ClientMetrics {
        self.shared.counters.snapshot()
    }

    /// How many watch callbacks (every kind, every path) wait for an event
    /// on the current session, as the Java client's `getDataWatches`,
    /// `getExistWatches` and `getChildWatches` count them: for tests and
    /// monitoring (a number that only grows is a leak).
    pub fn pending_watches(&self) -> usize {
        self.shared.session().map_or(0, |s| s.pending_watches())
    }

    /// Makes the server expire this client's session, as Curator's
    /// `KillSession` does: a second connection takes over the session with
    /// its id and password and closes it. For tests.
    pub fn expire_session_for_testing(&self) -> Result<()> {
        let session = self.shared.session().ok_or(Error::Closed)?;
        session.expire_for_testing(
            self.shared
                .cfg
                .wire
                .connection_timeout
                .min(Duration::from_secs(60)),
        )
    }
}

impl Shared {
    /// The error of calls while the server's rejection of the client's
    /// auth stands.
    fn auth_error(&self) -> Error {
        Error::AuthFailed {
            reason: self.auth_failure.lock().clone(),
        }
    }

    pub(crate) fn session(&self) -> Option<WireSession> {
        self.session.read().clone()
    }

    /// Creates the namespace's nodes, once per client, before its first
    /// operation (Curator's `NamespaceImpl`), so that a create directly under
    /// a fresh namespace does not fail with NoNode. Unlike Curator, which
    /// makes them containers, they are persistent: the server would remove
    /// an emptied container, and later creates would fail again.
    pub(crate) fn ensure_namespace(&self, s: &WireSession, deadline: Instant) -> Result<()> {
        if self
            .namespace_ready
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Ok(());
        }
        let Some(ns) = &self.cfg.namespace else {
            return Ok(());
        };
        let root = format!("/{ns}");
        if ops::wire_exists(s, &root, None, deadline)?.is_none() {
            let nodes = ops::ancestors(&root).chain([root.as_str()]);
            let acl_for = |node: &str| self.cfg.acl_provider.acl_for_path(node);
            ops::create_missing(s, nodes, CreateMode::Persistent, &acl_for, deadline)?;
        }
        self.namespace_ready
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    pub(crate) fn check_usable(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if !self.started.load(Ordering::Acquire) {
            return Err(Error::IllegalState(
                "client not started: call start() first".into(),
            ));
        }
        Ok(())
    }

    fn new_session(&self) -> Result<()> {
        let gen = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let me = self.me.clone();
        // Told on the engine's or a connect thread: handled on the timer
        // thread, in order, with every other session's.
        let sink = Box::new(move |ev| {
            let me = me.clone();
            Timers::get().run(Box::new(move || on_wire_event(&me, gen, ev)));
        });
        let fresh = WireSession::start(self.cfg.wire.clone(), sink)?;
        let mut slot = self.session.write();
        // `close` marks the client closed before it takes the session out
        // of this slot: a session started meanwhile (the timer thread
        // replacing a lost one) must not be installed behind its back,
        // where nothing would ever close it.
        if self.closed.load(Ordering::Acquire) {
            drop(slot);
            fresh.abandon();
            return Ok(());
        }
        if let Some(old) = slot.replace(fresh) {
            old.abandon();
        }
        Ok(())
    }

    fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let timeout = self.cfg.wire.connection_timeout.min(Duration::from_secs(1));
        // Taken out first: getters must not wait on the session's close.
        let session = self.session.write().take();
        if let Some(s) = session {
            s.close(timeout);
        }
        self.board.close();
        self.background.wake();
    }

    /// Curator's retry loop: runs `attempt` on the current session, retrying
    /// retryable errors as the policy allows. Each attempt waits at most the
    /// connection timeout for a connection, then for its reply until
    /// `deadline` or the connection's loss (see [`reply_deadline`]), and
    /// nothing waits past `deadline`: then the loop fails with [`Error::Timeout`]
    /// (its operation and path are filled in by the caller). `op` and
    /// `path` name the operation in its trace span.
    pub(crate) fn with_retry<T>(
        &self,
        op: &'static str,
        path: &str,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
        attempt: impl FnMut(&WireSession, Instant) -> Result<T>,
    ) -> Result<T> {
        let span = trace::OpSpan::start(op, path);
        let mut retries = 0u32;
        let _cancel = cancel::enter(cancel);
        let result = self.retry_loop(deadline, cancel, &mut retries, attempt);
        span.finish(retries.saturating_add(1), &result);
        result
    }

    fn retry_loop<T>(
        &self,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
        count: &mut u32,
        mut attempt: impl FnMut(&WireSession, Instant) -> Result<T>,
    ) -> Result<T> {
        self.check_usable()?;
        let started = Instant::now();
        loop {
            if let Some(cancel) = cancel {
                cancel.check()?;
            }
            if self.auth_failed.load(Ordering::Acquire) {
                return Err(self.auth_error());
            }
            let reply_by = reply_deadline(deadline);
            let result = match self.session() {
                None => Err(Error::Closed),
                Some(session) => {
                    if session.wait_connected(self.connect_deadline(deadline)) {
                        self.ensure_namespace(&session, reply_by)
                            .and_then(|()| attempt(&session, reply_by))
                    } else {
                        Err(not_connected(&session))
                    }
                }
            };
            let err = match result {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            if let Some(cancel) = cancel {
                cancel.check()?;
            }
            let retryable = err.is_retryable()
                && (!err.is(ErrorCode::SessionExpired)
                    || self.cfg.retry.allow_session_expired_retry());
            if !retryable {
                return Err(err);
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Err(Error::timeout(err)),
                },
                None => None,
            };
            match self.cfg.retry.allow_retry(*count, started.elapsed()) {
                Some(sleep) => {
                    log::debug!("retry {count} after {err} in {sleep:?}");
                    let pause = |d| match cancel {
                        Some(cancel) => cancel.sleep(d),
                        None => {
                            thread::sleep(d);
                            true
                        }
                    };
                    match left {
                        Some(left) if left <= sleep => {
                            if !pause(left) {
                                return Err(Error::Cancelled);
                            }
                            return Err(Error::timeout(err));
                        }
                        _ if !pause(sleep) => return Err(Error::Cancelled),
                        _ => {}
                    }
                    *count += 1;
                    metrics::add(&self.counters.retries, 1);
                }
                None => return Err(err),
            }
        }
    }

    /// When an attempt stops waiting for a connection: a connection timeout
    /// from now, or the operation's deadline if that comes first.
    fn connect_deadline(&self, deadline: Option<Instant>) -> Instant {
        let by_timeout = instant_after(self.cfg.wire.connection_timeout);
        deadline.map_or(by_timeout, |d| d.min(by_timeout))
    }

    /// One attempt, only if connected right now; no retries, no waiting for
    /// a connection. For work that has somewhere else to go on failure.
    pub(crate) fn try_once<T>(
        &self,
        op: &'static str,
        path: &str,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
        attempt: impl FnOnce(&WireSession, Instant) -> Result<T>,
    ) -> Result<T> {
        let span = trace::OpSpan::start(op, path);
        let _cancel = cancel::enter(cancel);
        let result = cancel
            .map_or(Ok(()), CancelToken::check)
            .and_then(|()| self.one_attempt(deadline, attempt));
        span.finish(1, &result);
        result
    }

    fn one_attempt<T>(
        &self,
        deadline: Option<Instant>,
        attempt: impl FnOnce(&WireSession, Instant) -> Result<T>,
    ) -> Result<T> {
        self.check_usable()?;
        if self.auth_failed.load(Ordering::Acquire) {
            return Err(self.auth_error());
        }
        let session = self.session().ok_or(Error::Closed)?;
        if !session.wait_connected(Instant::now()) {
            return Err(not_connected(&session));
        }
        match attempt(&session, reply_deadline(deadline)) {
            Err(e) if e.is_retryable() && deadline.is_some_and(|d| Instant::now() >= d) => {
                Err(Error::timeout(e))
            }
            other => other,
        }
    }

    /// The server path for a namespace-relative path, validated.
    pub(crate) fn server_path(&self, path: &str) -> Result<String> {
        paths::validate_path(path).map_err(|e| Error::InvalidPath {
            path: path.to_owned(),
            reason: e.kind().to_string(),
        })?;
        Ok(paths::fix_for_namespace(
            self.cfg.namespace.as_deref(),
            path,
        ))
    }

    /// The namespace-relative path for a server path.
    pub(crate) fn user_path(&self, server_path: &str) -> String {
        paths::strip_namespace(self.cfg.namespace.as_deref(), server_path)
    }
}

impl background::Owner for Shared {
    fn session(&self) -> Option<WireSession> {
        Shared::session(self)
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn connection_timeout(&self) -> Duration {
        self.cfg.wire.connection_timeout
    }
}

/// The earlier of two optional deadlines (`None`: no deadline).
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// How long an attempt on a live connection waits for its reply: until the
/// operation's deadline, and without one until the reply comes or the
/// connection is lost (silence drops it after 2/3 of the session timeout).
/// A request on a live connection is never sent twice: giving up on it
/// early and retrying would apply it twice when its reply is only late.
fn reply_deadline(deadline: Option<Instant>) -> Instant {
    deadline.unwrap_or_else(|| instant_after(Duration::MAX))
}

/// The error of an attempt that found no connection: connection loss,
/// saying why the session's last attempt to connect failed.
fn not_connected(session: &WireSession) -> Error {
    Error::NotConnected {
        last_attempt: session.last_connect_error().map(|why| why.to_string()),
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.close();
    }
}

/// What a client's session events have said, for the next one: when the
/// session is to be declared lost, and the rejected auths so far.
#[derive(Default)]
struct StateMachine {
    /// When a suspended session is declared lost (Curator's simulated
    /// expiration), and the timer's number: a timer whose number is not
    /// the current one was overtaken, and does nothing.
    lost_at: Option<(Instant, u64)>,
    timers: u64,
    auth: AuthFailures,
    /// Whether a session has logged in (SASL) since the last rejected auth.
    logged_in: bool,
    /// The session whose first connection was counted last.
    connected_gen: u64,
}

/// Runs `job` with the client, on the timer thread, unless it is gone or
/// closed. The timer thread serves every client: it never drops a client's
/// last handle itself (closing waits for the server), but hands it to a
/// thread of its own.
fn with_client(weak: &Weak<Shared>, job: impl FnOnce(&Shared)) {
    let Some(shared) = weak.upgrade() else { return };
    if !shared.closed.load(Ordering::Acquire) {
        job(&shared);
    }
    if Arc::strong_count(&shared) == 1 {
        let _ = crate::sched::spawn("latchkey-close", move || drop(shared));
    }
}

/// Turns a session event into connection states; on a disconnection, sets
/// the timer that declares the session lost when it stays suspended for
/// the session timeout (Curator's simulated expiration), which then starts
/// a new one.
fn on_wire_event(weak: &Weak<Shared>, gen: u64, event: WireEvent) {
    with_client(weak, |shared| {
        if gen != shared.generation.load(Ordering::Acquire) {
            return; // from a session already replaced
        }
        let mut m = shared.machine.lock();
        let current = shared.board.current();
        match event {
            WireEvent::Connected { read_only } => {
                m.lost_at = None;
                // With SASL, Connected comes only after the login.
                m.logged_in |= shared.cfg.wire.sasl.is_some();
                let next = if read_only {
                    ConnectionState::ReadOnly
                } else if current.is_none() {
                    ConnectionState::Connected
                } else {
                    ConnectionState::Reconnected
                };
                if gen != m.connected_gen {
                    m.connected_gen = gen;
                    metrics::add(&shared.counters.sessions_started, 1);
                }
                if current != Some(next) {
                    shared.post(next);
                }
                // Cleanup waiting for a connection goes now.
                shared.background.wake();
            }
            WireEvent::Disconnected { silent_for } => {
                if current.is_some_and(ConnectionState::is_connected) {
                    let timeout = shared
                        .session()
                        .map_or(shared.cfg.wire.session_timeout, |s| s.negotiated_timeout());
                    // Lost must come no later than the server's expiry,
                    // which is at least the session timeout after our last
                    // reply (the server heard our request before it
                    // answered): a little early, for the timer's own delay.
                    let margin =
                        (timeout / 20).clamp(Duration::from_millis(5), Duration::from_millis(100));
                    let left = timeout.saturating_sub(silent_for).saturating_sub(margin);
                    m.timers += 1;
                    let (at, number) = (instant_after(left), m.timers);
                    m.lost_at = Some((at, number));
                    let weak = weak.clone();
                    Timers::get().at(at, Box::new(move || lost_timer(&weak, number)));
                    shared.post(ConnectionState::Suspended);
                }
            }
            WireEvent::Expired => {
                m.lost_at = None;
                drop(m);
                shared.lose_session();
            }
            WireEvent::AuthFailed { reason, at_login } => {
                m.lost_at = None;
                // A refused login after one that succeeded is a new run
                // of refusals: the policy bounds refusals in a row.
                if std::mem::take(&mut m.logged_in) && at_login {
                    m.auth = AuthFailures::default();
                }
                *shared.auth_failure.lock() = reason;
                shared.auth_failed.store(true, Ordering::Release);
                metrics::add(&shared.counters.auth_failures, 1);
                if shared.board.current() != Some(ConnectionState::Lost) {
                    shared.declare_lost();
                }
                m.timers += 1;
                let number = m.timers;
                if let Some(at) = m.auth.failed(&*shared.cfg.retry, number) {
                    let weak = weak.clone();
                    Timers::get().at(at, Box::new(move || auth_retry_timer(&weak, number)));
                }
            }
            WireEvent::Closed => {}
        }
    });
}

/// The session stayed suspended for the whole session timeout: lost.
fn lost_timer(weak: &Weak<Shared>, number: u64) {
    with_client(weak, |shared| {
        let mut m = shared.machine.lock();
        if m.lost_at.is_some_and(|(_, n)| n == number)
            && shared.board.current() == Some(ConnectionState::Suspended)
        {
            m.lost_at = None;
            drop(m);
            log::warn!("suspended for the whole session timeout: session lost");
            shared.lose_session();
        }
    });
}

/// The pause after a rejected auth is over: a new session.
fn auth_retry_timer(weak: &Weak<Shared>, number: u64) {
    with_client(weak, |shared| {
        if shared.machine.lock().auth.retry_due(number) {
            log::info!("starting a new session after the rejected auth");
            shared.auth_failed.store(false, Ordering::Release);
            shared.start_new_session();
        }
    });
}

/// The shortest pause between a rejected auth and the next session, so
/// that even a policy that never sleeps cannot open sessions in a loop.
const AUTH_RETRY_FLOOR: Duration = Duration::from_secs(1);

/// Rejected auths over the client's life, or since the last SASL login
/// that succeeded. The Java client treats one as final (`AUTH_FAILED`);
/// latchkey tries a new session as the retry policy allows (at least
/// [`AUTH_RETRY_FLOOR`] apart) and then gives up for good.
#[derive(Default)]
struct AuthFailures {
    count: u32,
    first: Option<Instant>,
    /// The number of the timer that starts the next session.
    retry: Option<u64>,
}

impl AuthFailures {
    /// Counts a refusal; returns when to start the next session, if the
    /// policy allows one (its timer is `number`).
    fn failed(&mut self, policy: &dyn RetryPolicy, number: u64) -> Option<Instant> {
        let first = *self.first.get_or_insert_with(Instant::now);
        match policy.allow_retry(self.count, first.elapsed()) {
            Some(sleep) => {
                let sleep = sleep.max(AUTH_RETRY_FLOOR);
                log::error!(
                    "the server rejected the client's auth; new session in {sleep:?} \
                     (attempt {})",
                    self.count + 1
                );
                self.count += 1;
                self.retry = Some(number);
                Some(instant_after(sleep))
            }
            None => {
                log::error!(
                    "the server rejected the client's auth {} times; giving up: \
                     calls fail with AuthFailed until the client is closed",
                    self.count + 1
                );
                self.retry = None;
                None
            }
        }
    }

    /// Whether timer `number` is the one to start the next session (then
    /// it is no longer pending).
    fn retry_due(&mut self, number: u64) -> bool {
        if self.retry == Some(number) {
            self.retry = None;
            return true;
        }
        false
    }
}

impl Shared {
    /// Posts `Lost` for the current session, after recording its id for
    /// `lost_session_id`, and has its registered nodes deleted from the
    /// next session (the server may have kept this one: restored after a
    /// restart, not expired yet, or left to expire after a refused auth).
    fn declare_lost(&self) {
        let lost = self.session().map_or(0, |s| s.session_id());
        if lost != 0 {
            self.lost_session.store(lost, Ordering::Release);
        }
        self.post(ConnectionState::Lost);
        if lost != 0 {
            self.background.session_lost(lost);
        }
    }

    /// Makes `state` the current state: counted, traced, and told to
    /// listeners and wakers.
    fn post(&self, state: ConnectionState) {
        self.counters.state(state);
        trace::state_changed(state);
        self.board.post(state);
    }

    fn lose_session(&self) {
        self.declare_lost();
        self.start_new_session();
    }

    /// Starts a new session, trying again every 100 ms (on the timer
    /// thread) until it starts or the client closes.
    fn start_new_session(&self) {
        if let Err(e) = self.new_session() {
            log::error!("cannot start a new session: {e}; trying again in 100 ms");
            let weak = self.me.clone();
            Timers::get().at(
                instant_after(Duration::from_millis(100)),
                Box::new(move || with_client(&weak, Shared::start_new_session)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_listen_channel_unregisters_itself() {
        let c = Client::new("127.0.0.1:1").unwrap();
        let kept = c.listen();
        drop(c.listen());
        assert_eq!(c.shared.board.listener_count(), 2);
        c.shared.board.post(ConnectionState::Suspended);
        assert_eq!(
            kept.recv_timeout(Duration::from_secs(5)),
            Ok(ConnectionState::Suspended)
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while c.shared.board.listener_count() != 1 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(c.shared.board.listener_count(), 1);
    }

    #[test]
    fn connect_strings() {
        let (h, c) = parse_connect_string("127.0.0.1:2181,localhost:2182/app").unwrap();
        assert_eq!(h, vec!["127.0.0.1:2181", "localhost:2182"]);
        assert_eq!(c.as_deref(), Some("/app"));
        assert!(parse_connect_string("").is_err());
        let (h, _) = parse_connect_string("zk1,zk2:2182,[::1],[::1]:2183").unwrap();
        assert_eq!(h, vec!["zk1:2181", "zk2:2182", "[::1]:2181", "[::1]:2183"]);
        assert!(parse_connect_string(":2181").is_err());
        assert!(parse_connect_string("h:99999").is_err());
    }

    #[test]
    fn the_error_policy_defaults_to_curator_s_standard_one() {
        use crate::SessionConnectionStateErrorPolicy;
        use ConnectionState::*;
        let b = || Client::builder().connect_string("127.0.0.1:2181");
        let standard = b().build().unwrap();
        let session = b()
            .connection_state_error_policy(SessionConnectionStateErrorPolicy)
            .build()
            .unwrap();
        for state in [Connected, Suspended, Reconnected, Lost, ReadOnly] {
            assert_eq!(
                standard.is_error_state(state),
                matches!(state, Suspended | Lost),
                "{state:?}"
            );
            assert_eq!(session.is_error_state(state), state == Lost, "{state:?}");
        }
    }

    #[test]
    fn builder_rejects_bad_settings() {
        assert!(Client::builder().build().is_err());
        let b = || Client::builder().connect_string("127.0.0.1:1");
        assert!(b().session_timeout(Duration::ZERO).build().is_err());
        assert!(b().namespace("bad//ns").build().is_err());
        assert!(b().namespace("/app").build().is_err());
        assert!(b().namespace("app/").build().is_err());
        let c = b().namespace("app").build().unwrap();
        assert_eq!(c.namespace(), Some("app"));
    }

    #[test]
    fn unstarted_and_closed_clients_refuse_work() {
        let c = Client::new("127.0.0.1:1").unwrap();
        assert!(matches!(c.exists("/x"), Err(Error::IllegalState(_))));
        c.close();
        assert!(matches!(c.exists("/x"), Err(Error::Closed)));
        assert!(matches!(c.start(), Err(Error::Closed)));
    }
}

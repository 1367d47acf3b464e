//! The client: its builder, its life cycle, the state thread that turns
//! session events into Curator's connection states, and the retry loop.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::{Mutex, RwLock};

use crate::acl::{AclProvider, DefaultAclProvider};
use crate::background::Background;
use crate::error::{Error, ErrorCode, Result};
use crate::paths;
use crate::retry::{ExponentialBackoffRetry, RetryPolicy};
use crate::state::{ConnectionState, ListenerHandle, StateBoard};
use crate::wire::{WireConfig, WireEvent, WireSession};

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
/// client.block_until_connected(Duration::from_secs(5))?;
/// # Ok::<(), latchkey_framework::Error>(())
/// ```
pub struct ClientBuilder {
    connect_string: String,
    session_timeout: Duration,
    connection_timeout: Duration,
    retry: Arc<dyn RetryPolicy>,
    namespace: Option<String>,
    acl_provider: Arc<dyn AclProvider>,
    auth: Vec<(String, Vec<u8>)>,
    can_be_read_only: bool,
    max_reply_size: usize,
    max_request_size: usize,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            connect_string: String::new(),
            // Curator's defaults.
            session_timeout: Duration::from_secs(60),
            connection_timeout: Duration::from_secs(15),
            retry: Arc::new(ExponentialBackoffRetry::new(Duration::from_millis(100), 3)),
            namespace: None,
            acl_provider: Arc::new(DefaultAclProvider),
            auth: Vec::new(),
            can_be_read_only: false,
            max_reply_size: crate::wire::DEFAULT_MAX_REPLY,
            max_request_size: crate::wire::JUTE_MAXBUFFER,
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

    /// How long one attempt of an operation waits for a connection and a
    /// reply before it counts as connection loss. Default 15 s.
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

    /// Every path the client uses is under `/<namespace>` on the server,
    /// transparently (`"app"` or `"app/sub"`, no leading slash).
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
        let (events_tx, events_rx) = unbounded();
        Ok(Client {
            shared: Arc::new(Shared {
                cfg: Config {
                    wire: WireConfig {
                        hosts,
                        session_timeout: self.session_timeout,
                        connection_timeout: self.connection_timeout,
                        can_be_read_only: self.can_be_read_only,
                        auth: self.auth,
                        max_reply: self.max_reply_size,
                        max_request: self.max_request_size,
                    },
                    retry: self.retry,
                    namespace,
                    acl_provider: self.acl_provider,
                },
                board: Arc::new(StateBoard::new()),
                session: RwLock::new(None),
                generation: AtomicU64::new(0),
                events_tx,
                events_rx: Mutex::new(Some(events_rx)),
                started: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                background: Background::default(),
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
    pub wire: WireConfig,
    pub retry: Arc<dyn RetryPolicy>,
    pub namespace: Option<String>,
    pub acl_provider: Arc<dyn AclProvider>,
}

pub(crate) struct Shared {
    pub cfg: Config,
    pub board: Arc<StateBoard>,
    session: RwLock<Option<WireSession>>,
    generation: AtomicU64,
    events_tx: Sender<(u64, WireEvent)>,
    events_rx: Mutex<Option<Receiver<(u64, WireEvent)>>>,
    started: AtomicBool,
    closed: AtomicBool,
    pub background: Background,
}

/// A ZooKeeper client with Curator's connection handling; cheap to clone
/// (clones share one session). The session closes when [`Client::close`]
/// is called or the last clone is dropped.
///
/// Every operation validates its path, applies the namespace and runs in the
/// retry loop. See [`ClientBuilder`] for an example.
#[derive(Clone)]
pub struct Client {
    pub(crate) shared: Arc<Shared>,
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

impl Client {
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
        let Some(events) = s.events_rx.lock().take() else {
            return Err(Error::IllegalState("client already started".into()));
        };
        s.new_session()?;
        let weak = Arc::downgrade(s);
        thread::Builder::new()
            .name("latchkey-state".into())
            .spawn(move || state_thread(weak, events))?;
        let weak = Arc::downgrade(s);
        thread::Builder::new()
            .name("latchkey-background".into())
            .spawn(move || crate::background::run(weak))?;
        Ok(())
    }

    /// Waits until connected. `Ok(false)` when `timeout` passes first.
    pub fn block_until_connected(&self, timeout: Duration) -> Result<bool> {
        self.shared.check_usable()?;
        Ok(self.shared.board.wait_connected(Instant::now() + timeout))
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

    /// The current connection state; `None` before the first connection.
    pub fn state(&self) -> Option<ConnectionState> {
        self.shared.board.current()
    }

    /// Every state the client has been in, with the time since it was built.
    /// Handy in a failing test's output.
    pub fn state_history(&self) -> Vec<(Duration, ConnectionState)> {
        self.shared.board.history()
    }

    /// Calls `listener` with every new state, in order, on the client's
    /// state thread. The listener may call the client; it should not block
    /// for long. Removed when the handle drops.
    pub fn add_listener(
        &self,
        listener: impl Fn(ConnectionState) + Send + Sync + 'static,
    ) -> ListenerHandle {
        let id = self.shared.board.add_listener(Arc::new(listener));
        self.handle(id)
    }

    /// A channel that receives every new state, in order.
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
    /// Called right away if the client is already closed.
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
    pub fn session_id(&self) -> i64 {
        self.shared.session().map_or(0, |s| s.session_id())
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

    /// The connection timeout of one attempt.
    pub fn connection_timeout(&self) -> Duration {
        self.shared.cfg.wire.connection_timeout
    }

    /// Makes the server expire this client's session, as Curator's
    /// `KillSession` does: a second connection takes over the session with
    /// its id and password and closes it. For tests.
    pub fn expire_session_for_testing(&self) -> Result<()> {
        let session = self.shared.session().ok_or(Error::Closed)?;
        session.expire_for_testing(self.shared.cfg.wire.connection_timeout)
    }
}

impl Shared {
    pub(crate) fn session(&self) -> Option<WireSession> {
        self.session.read().clone()
    }

    pub(crate) fn closed_flag(&self) -> &AtomicBool {
        &self.closed
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
        let tx = self.events_tx.clone();
        let sink = Box::new(move |ev| {
            let _ = tx.send((gen, ev));
        });
        let fresh = WireSession::start(self.cfg.wire.clone(), sink)?;
        if let Some(old) = self.session.write().replace(fresh) {
            old.abandon();
        }
        Ok(())
    }

    fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let timeout = self.cfg.wire.connection_timeout.min(Duration::from_secs(1));
        if let Some(s) = self.session.write().take() {
            s.close(timeout);
        }
        self.board.close();
        self.background.wake();
    }

    /// Curator's retry loop: runs `attempt` on the current session, retrying
    /// retryable errors as the policy allows. Each attempt waits at most the
    /// connection timeout for a connection and for its reply.
    pub(crate) fn with_retry<T>(
        &self,
        mut attempt: impl FnMut(&WireSession, Instant) -> Result<T>,
    ) -> Result<T> {
        self.check_usable()?;
        let started = Instant::now();
        let mut count = 0u32;
        loop {
            let result = match self.session() {
                None => Err(Error::Closed),
                Some(session) => {
                    let deadline = Instant::now() + self.cfg.wire.connection_timeout;
                    if session.wait_connected(deadline) {
                        attempt(&session, deadline)
                    } else {
                        Err(Error::from_code(ErrorCode::ConnectionLoss))
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
            let retryable = err.is_retryable()
                && (!err.is(ErrorCode::SessionExpired)
                    || self.cfg.retry.allow_session_expired_retry());
            if !retryable {
                return Err(err);
            }
            match self.cfg.retry.allow_retry(count, started.elapsed()) {
                Some(sleep) => {
                    log::debug!("retry {count} after {err} in {sleep:?}");
                    thread::sleep(sleep);
                    count += 1;
                }
                None => return Err(err),
            }
        }
    }

    /// One attempt, only if connected right now; no retries, no waiting for
    /// a connection. For work that has somewhere else to go on failure.
    pub(crate) fn try_once<T>(
        &self,
        attempt: impl FnOnce(&WireSession, Instant) -> Result<T>,
    ) -> Result<T> {
        self.check_usable()?;
        let session = self.session().ok_or(Error::Closed)?;
        if !session.wait_connected(Instant::now()) {
            return Err(Error::from_code(ErrorCode::ConnectionLoss));
        }
        attempt(&session, Instant::now() + self.cfg.wire.connection_timeout)
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

impl Drop for Shared {
    fn drop(&mut self) {
        self.close();
    }
}

/// Turns session events into connection states; declares the session lost
/// when it stays suspended for the session timeout (Curator's simulated
/// expiration) and then starts a new one.
fn state_thread(weak: Weak<Shared>, events: Receiver<(u64, WireEvent)>) {
    let mut lost_at: Option<Instant> = None;
    loop {
        let tick = match weak.upgrade() {
            Some(s) => (s.cfg.wire.session_timeout / 20)
                .clamp(Duration::from_millis(5), Duration::from_millis(100)),
            None => return,
        };
        let received = events.recv_timeout(tick);
        let Some(shared) = weak.upgrade() else { return };
        if shared.closed.load(Ordering::Acquire) {
            return;
        }
        let current = shared.board.current();
        match received {
            Ok((gen, event)) if gen == shared.generation.load(Ordering::Acquire) => match event {
                WireEvent::Connected { read_only } => {
                    lost_at = None;
                    let next = if read_only {
                        ConnectionState::ReadOnly
                    } else if current.is_none() {
                        ConnectionState::Connected
                    } else {
                        ConnectionState::Reconnected
                    };
                    if current != Some(next) {
                        shared.board.post(next);
                    }
                }
                WireEvent::Disconnected { silent_for } => {
                    if current.is_some_and(ConnectionState::is_connected) {
                        let timeout = shared
                            .session()
                            .map_or(shared.cfg.wire.session_timeout, |s| s.negotiated_timeout());
                        // Lost must come no later than the server's expiry,
                        // which is at least the session timeout after our last
                        // reply (the server heard our request before it
                        // answered). This loop checks once a tick, so aim
                        // two ticks early.
                        let left = timeout.saturating_sub(silent_for).saturating_sub(tick * 2);
                        lost_at = Some(Instant::now() + left);
                        shared.board.post(ConnectionState::Suspended);
                    }
                }
                WireEvent::Expired | WireEvent::AuthFailed => {
                    lost_at = None;
                    shared.lose_session();
                }
                WireEvent::Closed => {}
            },
            Ok(_) => {} // from a session already replaced
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if lost_at.is_some_and(|t| Instant::now() >= t)
            && shared.board.current() == Some(ConnectionState::Suspended)
        {
            lost_at = None;
            log::warn!("suspended for the whole session timeout: session lost");
            shared.lose_session();
        }
    }
}

impl Shared {
    fn lose_session(&self) {
        self.board.post(ConnectionState::Lost);
        loop {
            match self.new_session() {
                Ok(()) => return,
                Err(e) => {
                    log::error!("cannot start a new session: {e}");
                    if self.closed.load(Ordering::Acquire) {
                        return;
                    }
                    thread::sleep(Duration::from_millis(100));
                }
            }
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
        assert_eq!(c.shared.board.listener_count(), 1);
        assert_eq!(kept.try_recv(), Ok(ConnectionState::Suspended));
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
    fn builder_rejects_bad_settings() {
        assert!(Client::builder().build().is_err());
        let b = || Client::builder().connect_string("127.0.0.1:1");
        assert!(b().session_timeout(Duration::ZERO).build().is_err());
        assert!(b().namespace("bad//ns").build().is_err());
        let c = b().namespace("/app/").build().unwrap();
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

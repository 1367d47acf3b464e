//! One checker client session: a latchkey `Client` (behind its own fault
//! proxies), the count of times its locks fell in doubt, and when it last
//! got a lock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use latchkey_framework::{Client, ConnectionState, ExponentialBackoffRetry, ListenerHandle};
use latchkey_test::FaultProxy;

use crate::history::History;

/// Client settings shared by every session of a run.
#[derive(Clone, Copy, Debug)]
pub struct ClientSettings {
    pub session_timeout: Duration,
    pub connection_timeout: Duration,
}

pub struct Session {
    pub name: String,
    pub client: Client,
    /// The proxies this client connects through (none for a direct client).
    pub proxies: Vec<FaultProxy>,
    /// Bumped on every `Suspended` or `Lost`, and before the checker
    /// expires or closes the session itself: a hold granted at another
    /// value is in doubt (Curator's rule) and no longer counts.
    doubt: Arc<AtomicU64>,
    /// While the checker has the server expire the session: holds granted
    /// meanwhile never count (see [`Session::expiry_starts`]).
    expiring: AtomicBool,
    /// Milliseconds since the run started of the latest counted grant.
    last_grant_ms: AtomicU64,
    _listener: ListenerHandle,
}

impl Session {
    /// Builds, starts and connects a client to `connect_string` (waiting at
    /// most `connect_within`); `None` if it does not connect in time.
    pub fn connect(
        name: String,
        connect_string: &str,
        proxies: Vec<FaultProxy>,
        settings: ClientSettings,
        history: &Arc<History>,
        connect_within: Duration,
    ) -> Result<Session, String> {
        let client = Client::builder()
            .connect_string(connect_string)
            .session_timeout(settings.session_timeout)
            .connection_timeout(settings.connection_timeout)
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 3))
            .build()
            .map_err(|e| format!("{name}: build client: {e}"))?;
        let doubt = Arc::new(AtomicU64::new(0));
        let listener = {
            let doubt = Arc::clone(&doubt);
            let history = Arc::clone(history);
            let who = name.clone();
            client.add_listener(move |state| {
                if matches!(state, ConnectionState::Suspended | ConnectionState::Lost) {
                    doubt.fetch_add(1, Ordering::SeqCst);
                }
                history.record(&who, format!("state {state:?}"));
            })
        };
        client
            .start()
            .map_err(|e| format!("{name}: start client: {e}"))?;
        match client.block_until_connected(connect_within) {
            Ok(true) => {}
            Ok(false) => {
                client.close();
                return Err(format!("{name}: not connected within {connect_within:?}"));
            }
            Err(e) => return Err(format!("{name}: connect: {e}")),
        }
        Ok(Session {
            name,
            client,
            proxies,
            doubt,
            expiring: AtomicBool::new(false),
            last_grant_ms: AtomicU64::new(0),
            _listener: listener,
        })
    }

    /// The value a new hold is granted at.
    pub fn doubt_epoch(&self) -> u64 {
        self.doubt.load(Ordering::SeqCst)
    }

    /// A handle the oracle keeps to tell whether a hold still counts;
    /// `None`: a hold already in doubt when granted, which never counts.
    pub fn claim(&self, epoch: Option<u64>) -> Claim {
        let expiring = self.expiring.load(Ordering::SeqCst);
        Claim::Client {
            doubt: Arc::clone(&self.doubt),
            epoch: epoch.filter(|_| !expiring),
            client: self.client.clone(),
        }
    }

    /// Puts every current hold in doubt (before the checker closes this
    /// session on purpose).
    pub fn mark_in_doubt(&self) {
        self.doubt.fetch_add(1, Ordering::SeqCst);
    }

    /// Puts every current hold in doubt, and every hold granted until
    /// [`Session::expiry_seen`], before the checker has the server expire
    /// this session: the server may close the session (and delete its
    /// nodes) before the client hears of it, so a grant that completes
    /// meanwhile is in doubt too, until [`Session::expiry_seen`].
    pub fn expiry_starts(&self) {
        self.expiring.store(true, Ordering::SeqCst);
        self.doubt.fetch_add(1, Ordering::SeqCst);
    }

    /// The client has heard of the expiry (or given up waiting): holds
    /// granted from now on count again. A grant whose epoch was read
    /// before this (while expiring) is in doubt: the epoch moves on first.
    pub fn expiry_seen(&self) {
        self.doubt.fetch_add(1, Ordering::SeqCst);
        self.expiring.store(false, Ordering::SeqCst);
    }

    pub fn note_grant(&self, at: Duration) {
        let ms = u64::try_from(at.as_millis()).unwrap_or(u64::MAX);
        self.last_grant_ms.fetch_max(ms, Ordering::SeqCst);
    }

    pub fn last_grant(&self) -> Duration {
        Duration::from_millis(self.last_grant_ms.load(Ordering::SeqCst))
    }
}

/// What the oracle needs to decide whether a hold still counts.
pub enum Claim {
    /// A latchkey hold counts while its client is connected and has not
    /// been `Suspended` or `Lost` since the grant.
    Client {
        doubt: Arc<AtomicU64>,
        epoch: Option<u64>,
        client: Client,
    },
    /// A peer's hold (whose connection states the checker cannot see)
    /// counts while no fault has been injected since before its acquire
    /// was sent: the nemesis makes the count odd while a fault is on.
    Quiet { faults: Arc<AtomicU64>, epoch: u64 },
}

impl Claim {
    pub fn counts(&self) -> bool {
        match self {
            Claim::Client {
                doubt,
                epoch,
                client,
            } => {
                *epoch == Some(doubt.load(Ordering::SeqCst))
                    && client.state().is_some_and(ConnectionState::is_connected)
            }
            Claim::Quiet { faults, epoch } => {
                epoch % 2 == 0 && faults.load(Ordering::SeqCst) == *epoch
            }
        }
    }
}

//! Counters of what a client did, for a service to export: relaxed atomic
//! increments where things happen, read together by [`Client::metrics`].

use std::sync::atomic::{AtomicU64, Ordering};

use crate::state::ConnectionState;

#[cfg(doc)]
use crate::Client;

/// What a [`Client`] has done since it was built; all counts only grow.
/// Clones of a client share one set. Read with [`Client::metrics`].
///
/// Each count is read on its own (relaxed), so a snapshot taken while the
/// client works may be a request or two apart between fields; counts are
/// never lost.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) {
/// let m = client.metrics();
/// println!(
///     "zk_requests_total {} zk_retries_total {} zk_sessions_lost_total {}",
///     m.requests_sent, m.retries, m.sessions_lost
/// );
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientMetrics {
    /// Requests written to ZooKeeper (pings, auth and watch re-arming not
    /// included); an operation with retries or parents to create sends
    /// several.
    pub requests_sent: u64,
    /// Retries of operations by the retry loop (not counting the first try).
    pub retries: u64,
    /// Times the connection was lost or went silent (`Suspended`).
    pub suspensions: u64,
    /// Times the client connected again after `Suspended` or `Lost`
    /// (`Reconnected`).
    pub reconnects: u64,
    /// Sessions that ZooKeeper granted, the first included.
    pub sessions_started: u64,
    /// Sessions lost (`Lost`): expired on the server, suspended for the
    /// whole session timeout, or ended by a rejected auth.
    pub sessions_lost: u64,
    /// Times the server rejected the client's auth.
    pub auth_failures: u64,
    /// Watch events received from ZooKeeper.
    pub watch_events: u64,
}

/// The live counters behind [`ClientMetrics`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub requests_sent: AtomicU64,
    pub retries: AtomicU64,
    suspensions: AtomicU64,
    reconnects: AtomicU64,
    pub sessions_started: AtomicU64,
    sessions_lost: AtomicU64,
    pub auth_failures: AtomicU64,
    pub watch_events: AtomicU64,
}

/// Adds `n` to `counter`; counts need no ordering with anything else.
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// Counts a new connection state.
    pub(crate) fn state(&self, state: ConnectionState) {
        match state {
            ConnectionState::Suspended => add(&self.suspensions, 1),
            ConnectionState::Reconnected => add(&self.reconnects, 1),
            ConnectionState::Lost => add(&self.sessions_lost, 1),
            ConnectionState::Connected | ConnectionState::ReadOnly => {}
        }
    }

    pub(crate) fn snapshot(&self) -> ClientMetrics {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ClientMetrics {
            requests_sent: get(&self.requests_sent),
            retries: get(&self.retries),
            suspensions: get(&self.suspensions),
            reconnects: get(&self.reconnects),
            sessions_started: get(&self.sessions_started),
            sessions_lost: get(&self.sessions_lost),
            auth_failures: get(&self.auth_failures),
            watch_events: get(&self.watch_events),
        }
    }
}

//! The ZooKeeper under test: one standalone server or a 3-member ensemble
//! on loopback, and the fault proxies in front of each session.

use std::net::SocketAddr;
use std::time::Duration;

use latchkey_test::{FaultProxy, TestingCluster, TestingServer};

pub enum Servers {
    Single(TestingServer),
    Ensemble(TestingCluster),
}

/// How long a quorum may take to form again after a restart.
pub const QUORUM_WITHIN: Duration = Duration::from_secs(60);

impl Servers {
    pub fn start(ensemble: bool) -> Result<Servers, String> {
        if ensemble {
            TestingCluster::start(3)
                .map(Servers::Ensemble)
                .map_err(|e| format!("start a 3-member ensemble: {e}"))
        } else {
            TestingServer::start()
                .map(Servers::Single)
                .map_err(|e| format!("start a server: {e}"))
        }
    }

    /// The servers' client addresses.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        match self {
            Servers::Single(s) => vec![s.addr()],
            Servers::Ensemble(c) => (0..c.size()).filter_map(|i| c.member_addr(i)).collect(),
        }
    }

    /// A connect string straight to the servers (no proxy).
    pub fn connect_string(&self) -> String {
        match self {
            Servers::Single(s) => s.connect_string(),
            Servers::Ensemble(c) => c.connect_string(),
        }
    }

    /// One fresh proxy in front of each server, and the connect string
    /// through them.
    pub fn proxies(&self) -> Result<(Vec<FaultProxy>, String), String> {
        let proxies = self
            .addrs()
            .into_iter()
            .map(FaultProxy::start)
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| format!("start a fault proxy: {e}"))?;
        let connect = proxies
            .iter()
            .map(FaultProxy::connect_string)
            .collect::<Vec<_>>()
            .join(",");
        Ok((proxies, connect))
    }

    /// The servers' log tails, for a failing run.
    pub fn log_tails(&self, lines: usize) -> String {
        match self {
            Servers::Single(s) => s.log_tail(lines),
            Servers::Ensemble(c) => c.describe(lines),
        }
    }
}

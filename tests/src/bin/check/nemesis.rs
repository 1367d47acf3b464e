//! The nemesis: one random fault at a time, each healed within bounds, and
//! after each heal a check that every session gets a lock again in time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::env::{Servers, QUORUM_WITHIN};
use crate::history::History;
use crate::oracle::Oracle;
use crate::rng::Rng;
use crate::session::Session;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// Ensemble: SIGKILL the leader, restart it.
    KillLeader,
    /// Ensemble: SIGKILL any member, restart it.
    KillMember,
    /// Ensemble: restart every member in turn.
    RollingRestart,
    /// Ensemble: stop two of three members (no quorum: the whole service is
    /// down), restart them.
    QuorumLoss,
    /// Single server: SIGKILL, restart.
    KillServer,
    /// Single server: stop for about a session timeout, start.
    StopServer,
    /// One session's proxies forward nothing (connections stay open).
    Blackhole,
    /// One session's proxies forward one direction only (requests, or
    /// replies): the server may keep the session while the client cannot
    /// hear it.
    OneWayPause,
    /// One session's connections are closed.
    Cut,
    /// One session's replies held longer than its read timeout, so the
    /// connection is given up with requests applied and their replies
    /// lost (the `--lost-replies` nemesis, for in-doubt writes).
    LostReplies,
    /// One session's traffic is delayed.
    Delay,
    /// One session is expired on the server.
    Expire,
}

pub struct Nemesis<'a> {
    pub servers: &'a mut Servers,
    pub sessions: &'a [Arc<Session>],
    pub history: &'a History,
    pub oracle: &'a Oracle,
    pub fault_epoch: &'a AtomicU64,
    pub rng: Rng,
    pub session_timeout: Duration,
    /// How long after a heal every session must have got a lock again.
    pub progress_bound: Duration,
    /// Whether sessions are expected to get locks (not in the control).
    pub expect_progress: bool,
    /// When a counted leader was last seen leading (ms into the run).
    pub last_leader: &'a AtomicU64,
    /// Whether some latch participant is expected to lead after each heal.
    pub expect_leader: bool,
    pub faults: BTreeMap<String, u64>,
    /// Only [`Fault::LostReplies`] (`--lost-replies`).
    pub lost_replies: bool,
    pub worst_recovery: Duration,
    pub worst_leader_recovery: Duration,
}

impl Nemesis<'_> {
    /// Injects faults until `until`, then leaves everything healed.
    pub fn run(&mut self, until: Instant) {
        let ensemble = matches!(self.servers, Servers::Ensemble(_));
        let choices: &[(u64, Fault)] = if self.lost_replies {
            &[(1, Fault::LostReplies)]
        } else if ensemble {
            &[
                (3, Fault::KillLeader),
                (2, Fault::KillMember),
                (1, Fault::QuorumLoss),
                (1, Fault::RollingRestart),
                (2, Fault::Blackhole),
                (1, Fault::OneWayPause),
                (2, Fault::Cut),
                (2, Fault::Delay),
                (2, Fault::Expire),
            ]
        } else {
            &[
                (2, Fault::KillServer),
                (1, Fault::StopServer),
                (2, Fault::Blackhole),
                (1, Fault::OneWayPause),
                (2, Fault::Cut),
                (2, Fault::Delay),
                (2, Fault::Expire),
            ]
        };
        loop {
            let quiet = self.rng.millis(300, 1500);
            if Instant::now() + quiet >= until {
                break;
            }
            thread::sleep(quiet);
            let fault = self.rng.weighted(choices);
            crate::curator::fault_started(self.fault_epoch);
            let injected = self.inject(fault);
            crate::curator::fault_healed(self.fault_epoch);
            let label = match injected {
                Ok(label) => label,
                Err(e) => {
                    self.oracle
                        .violation(format!("nemesis could not heal {fault:?}: {e}"));
                    return;
                }
            };
            *self.faults.entry(format!("{fault:?}")).or_default() += 1;
            if !self.await_progress(&label) {
                return;
            }
        }
    }

    /// Injects `fault` and heals it; returns what was done, for the history.
    fn inject(&mut self, fault: Fault) -> Result<String, String> {
        let history = self.history;
        let t = self.session_timeout;
        let t_ms = u64::try_from(t.as_millis()).unwrap_or(u64::MAX);
        let s = self.rng.index(self.sessions.len());
        let session = Arc::clone(&self.sessions[s]);
        let label = match fault {
            Fault::KillLeader | Fault::KillMember => {
                let Servers::Ensemble(c) = &mut *self.servers else {
                    return Err("not an ensemble".into());
                };
                let leader = c.leader();
                let i = match (fault, leader) {
                    (Fault::KillLeader, Some(l)) => l,
                    _ => self.rng.index(c.size()),
                };
                let down = self.rng.millis(200, t_ms);
                note(
                    history,
                    format!("kill member {i} (leader: {leader:?}) for {down:?}"),
                );
                c.kill(i).map_err(|e| e.to_string())?;
                thread::sleep(down);
                c.restart(i).map_err(|e| e.to_string())?;
                c.wait_for_quorum(QUORUM_WITHIN)
                    .map_err(|e| e.to_string())?;
                format!("kill member {i}")
            }
            Fault::QuorumLoss => {
                let Servers::Ensemble(c) = &mut *self.servers else {
                    return Err("not an ensemble".into());
                };
                let keep = self.rng.index(c.size());
                let stopped: Vec<usize> = (0..c.size()).filter(|&i| i != keep).collect();
                let down = self.rng.millis(t_ms / 2, t_ms * 3 / 2);
                note(
                    history,
                    format!("stop members {stopped:?} (no quorum) for {down:?}"),
                );
                for &i in &stopped {
                    c.stop(i).map_err(|e| e.to_string())?;
                }
                thread::sleep(down);
                for &i in &stopped {
                    c.restart(i).map_err(|e| e.to_string())?;
                }
                c.wait_for_quorum(QUORUM_WITHIN)
                    .map_err(|e| e.to_string())?;
                format!("quorum loss, members {stopped:?}")
            }
            Fault::RollingRestart => {
                let Servers::Ensemble(c) = &mut *self.servers else {
                    return Err("not an ensemble".into());
                };
                note(history, "rolling restart".into());
                for i in 0..c.size() {
                    c.restart(i).map_err(|e| e.to_string())?;
                    c.wait_for_quorum(QUORUM_WITHIN)
                        .map_err(|e| e.to_string())?;
                    note(history, format!("member {i} restarted"));
                }
                "rolling restart".into()
            }
            Fault::KillServer | Fault::StopServer => {
                let Servers::Single(server) = &mut *self.servers else {
                    return Err("not a single server".into());
                };
                let down = if fault == Fault::KillServer {
                    self.rng.millis(100, t_ms / 2)
                } else {
                    self.rng.millis(t_ms / 2, t_ms * 3 / 2)
                };
                note(history, format!("{fault:?} for {down:?}"));
                if fault == Fault::KillServer {
                    server.kill().map_err(|e| e.to_string())?;
                } else {
                    server.stop().map_err(|e| e.to_string())?;
                }
                thread::sleep(down);
                server.restart().map_err(|e| e.to_string())?;
                format!("{fault:?}")
            }
            Fault::Blackhole => {
                let down = self.rng.millis(t_ms / 4, t_ms * 3 / 2);
                note(history, format!("blackhole {} for {down:?}", session.name));
                session.proxies.iter().for_each(|p| p.pause());
                thread::sleep(down);
                session.proxies.iter().for_each(|p| p.resume());
                format!("blackhole {}", session.name)
            }
            Fault::OneWayPause => {
                let replies = self.rng.percent(50);
                let down = self.rng.millis(t_ms / 4, t_ms * 3 / 2);
                let which = if replies { "replies" } else { "requests" };
                note(
                    history,
                    format!("pause the {which} of {} for {down:?}", session.name),
                );
                for p in &session.proxies {
                    if replies {
                        p.pause_replies();
                    } else {
                        p.pause_requests();
                    }
                }
                thread::sleep(down);
                session.proxies.iter().for_each(|p| p.resume());
                format!("one-way pause ({which}) {}", session.name)
            }
            Fault::LostReplies => {
                // The read timeout is two thirds of the session timeout.
                let down = self.rng.millis(t_ms * 3 / 4, t_ms * 5 / 4);
                note(
                    history,
                    format!("hold the replies of {} for {down:?}", session.name),
                );
                session.proxies.iter().for_each(|p| p.pause_replies());
                thread::sleep(down);
                session.proxies.iter().for_each(|p| p.resume());
                format!("lost replies {}", session.name)
            }
            Fault::Cut => {
                let n: usize = session.proxies.iter().map(|p| p.cut()).sum();
                note(history, format!("cut {n} connections of {}", session.name));
                format!("cut {}", session.name)
            }
            Fault::Delay => {
                let delay = self.rng.millis(20, 400);
                let during = self.rng.millis(500, 3000);
                note(
                    history,
                    format!("delay {} by {delay:?} for {during:?}", session.name),
                );
                session.proxies.iter().for_each(|p| p.set_delay(delay));
                thread::sleep(during);
                session
                    .proxies
                    .iter()
                    .for_each(|p| p.set_delay(Duration::ZERO));
                format!("delay {}", session.name)
            }
            Fault::Expire => {
                // The checker knows before the client does: holds are in
                // doubt from here on, and so are grants until the client
                // has heard of the expiry (the server deletes the nodes
                // first).
                let old = session.client.session_id();
                session.expiry_starts();
                let r = session.client.expire_session_for_testing();
                note(
                    history,
                    format!("expire session of {}: {r:?}", session.name),
                );
                let heard_by = Instant::now() + 2 * self.session_timeout;
                while session.client.session_id() == old && Instant::now() < heard_by {
                    thread::sleep(Duration::from_millis(10));
                }
                session.expiry_seen();
                format!("expire {}", session.name)
            }
        };
        note(history, format!("healed: {label}"));
        Ok(label)
    }

    /// Waits until every session got a lock, and some latch participant
    /// led (counted by the oracle), after the heal; records the times it
    /// took. False (and a violation) if either did not in time.
    fn await_progress(&mut self, label: &str) -> bool {
        let healed = self.history.now();
        let deadline = Instant::now() + self.progress_bound;
        let mut locks_done = !self.expect_progress;
        let mut leader_done = !self.expect_leader;
        loop {
            let behind: Vec<&Arc<Session>> = self
                .sessions
                .iter()
                .filter(|s| s.last_grant() < healed)
                .collect();
            let took = self.history.now().saturating_sub(healed);
            if !locks_done && behind.is_empty() {
                locks_done = true;
                self.worst_recovery = self.worst_recovery.max(took);
                note(
                    self.history,
                    format!("every session got a lock {took:?} after: {label}"),
                );
            }
            let led_ms = self.last_leader.load(Ordering::SeqCst);
            if !leader_done && Duration::from_millis(led_ms) >= healed {
                leader_done = true;
                self.worst_leader_recovery = self.worst_leader_recovery.max(took);
                note(
                    self.history,
                    format!("a leader led {took:?} after: {label}"),
                );
            }
            if locks_done && leader_done {
                return true;
            }
            if Instant::now() >= deadline {
                if !locks_done {
                    for s in behind {
                        self.oracle.violation(format!(
                            "{} got no lock within {:?} after healing: {label}; states {:?}",
                            s.name,
                            self.progress_bound,
                            s.client.state_history()
                        ));
                    }
                }
                if !leader_done {
                    self.oracle.violation(format!(
                        "no latch participant led within {:?} after healing: {label}",
                        self.progress_bound
                    ));
                }
                return false;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

fn note(history: &History, what: String) {
    history.record("nemesis", what);
}

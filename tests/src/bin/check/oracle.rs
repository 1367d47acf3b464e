//! The oracle outside ZooKeeper: who holds what on each path right now, as
//! the holders themselves report it. It counts only holds that are not in
//! doubt and reports every overlap, every lease beyond the maximum and every
//! fencing token out of grant order.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::history::History;
use crate::session::Claim;

/// What a hold claims on its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A mutex, a write lock or one lock of a multi-lock: alone on the path.
    Exclusive,
    /// A read lock: beside other readers, never beside a writer.
    Shared,
    /// Leadership of a leader latch: alone on the path, like `Exclusive`.
    Leader,
    /// `n` leases of a semaphore with `max` leases.
    Leases { n: u32, max: u32 },
}

struct Hold {
    id: u64,
    who: String,
    mode: Mode,
    /// `None` for the `--no-lock` control: always counted.
    claim: Option<Claim>,
}

impl Hold {
    fn counts(&self) -> bool {
        self.claim.as_ref().is_none_or(Claim::counts)
    }
}

#[derive(Default)]
struct PathState {
    holds: Vec<Hold>,
    /// Token of the latest counted exclusive grant.
    last_exclusive_token: Option<i64>,
}

pub struct Oracle {
    history: Arc<History>,
    state: Mutex<(u64, HashMap<String, PathState>)>,
    violations: Mutex<Vec<String>>,
}

/// A hold in the oracle, to leave (or downgrade) later.
#[derive(Debug)]
pub struct HoldId {
    path: String,
    id: u64,
}

impl Oracle {
    pub fn new(history: Arc<History>) -> Oracle {
        Oracle {
            history,
            state: Mutex::new((0, HashMap::new())),
            violations: Mutex::new(Vec::new()),
        }
    }

    /// Enters a hold granted with `token` (a lock node's czxid). A hold
    /// whose claim does not count at entry is recorded, not checked.
    pub fn enter(
        &self,
        path: &str,
        who: &str,
        mode: Mode,
        claim: Option<Claim>,
        token: Option<i64>,
    ) -> HoldId {
        let mut guard = self.state.lock();
        let (next_id, paths) = &mut *guard;
        *next_id += 1;
        let id = *next_id;
        let st = paths.entry(path.to_string()).or_default();
        let hold = Hold {
            id,
            who: who.to_string(),
            mode,
            claim,
        };
        if hold.counts() {
            self.check_entry(path, &hold, st, token);
        }
        st.holds.push(hold);
        HoldId {
            path: path.to_string(),
            id,
        }
    }

    fn check_entry(&self, path: &str, hold: &Hold, st: &mut PathState, token: Option<i64>) {
        let counted: Vec<&Hold> = st.holds.iter().filter(|h| h.counts()).collect();
        let clash: Vec<String> = match hold.mode {
            Mode::Exclusive | Mode::Leader => counted.iter().map(|h| describe(h)).collect(),
            Mode::Shared => counted
                .iter()
                .filter(|h| matches!(h.mode, Mode::Exclusive | Mode::Leader))
                .map(|h| describe(h))
                .collect(),
            Mode::Leases { n, max } => {
                let held: u32 = counted
                    .iter()
                    .map(|h| match h.mode {
                        Mode::Leases { n, .. } => n,
                        _ => max,
                    })
                    .sum();
                if held + n > max {
                    counted.iter().map(|h| describe(h)).collect()
                } else {
                    Vec::new()
                }
            }
        };
        if !clash.is_empty() {
            let what = match hold.mode {
                Mode::Leader => "leads".to_string(),
                mode => format!("granted {mode:?}"),
            };
            self.violation(format!(
                "{path}: {} {what} beside {}",
                hold.who,
                clash.join(", ")
            ));
        }
        let Some(token) = token else { return };
        match hold.mode {
            Mode::Exclusive => {
                if let Some(last) = st.last_exclusive_token.filter(|&last| token <= last) {
                    self.violation(format!(
                        "{path}: {} granted with fencing token {token}, not above the previous exclusive grant's {last}",
                        hold.who
                    ));
                }
                st.last_exclusive_token = Some(token);
            }
            // A reader granted after a writer queued after it.
            Mode::Shared => {
                if let Some(last) = st.last_exclusive_token.filter(|&last| token <= last) {
                    self.violation(format!(
                        "{path}: reader {} granted with fencing token {token}, below the previous writer's {last}",
                        hold.who
                    ));
                }
            }
            Mode::Leases { .. } | Mode::Leader => {}
        }
    }

    /// A write hold that now holds the read lock too gives up the write:
    /// it stays on the path as a reader.
    pub fn downgrade(&self, hold: &HoldId) {
        let mut guard = self.state.lock();
        if let Some(h) = guard
            .1
            .get_mut(&hold.path)
            .and_then(|st| st.holds.iter_mut().find(|h| h.id == hold.id))
        {
            h.mode = Mode::Shared;
        }
    }

    /// Leaves a hold (before the lock is released in ZooKeeper).
    pub fn exit(&self, hold: HoldId) {
        let mut guard = self.state.lock();
        if let Some(st) = guard.1.get_mut(&hold.path) {
            st.holds.retain(|h| h.id != hold.id);
        }
    }

    pub fn violation(&self, what: String) {
        self.history.record("oracle", format!("VIOLATION {what}"));
        let mut all = self.violations.lock();
        // The first few as they happen; all of them are in the history.
        if all.len() < 10 {
            eprintln!("VIOLATION {what}");
        }
        all.push(what);
    }

    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().clone()
    }
}

fn describe(h: &Hold) -> String {
    format!("{} ({:?})", h.who, h.mode)
}

//! Leader election: `LeaderLatch` participants on one shared latch path,
//! several per session, each joining for a random while, leaving, and
//! joining again. A participant tells the oracle when it believes it leads
//! (`has_leadership`) and when it stops; the oracle counts a leadership
//! term only while its client is connected and has not been `Suspended` or
//! `Lost` since the term began (Curator's rule), and reports two counted
//! leaders at once.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use latchkey_recipes::LeaderLatch;

use crate::oracle::{HoldId, Mode};
use crate::rng::Rng;
use crate::session::Session;
use crate::workload::World;

/// How often a participant looks at its latch.
const POLL: Duration = Duration::from_millis(2);

/// A leadership term as the oracle has it.
struct Term {
    hold: HoldId,
    /// The session's doubt epoch when the term began.
    epoch: u64,
    counted: bool,
    since: Instant,
}

/// One participant: joins, watches its latch, leaves, until the stop flag
/// (or `until`).
pub struct Participant<'a> {
    pub world: &'a World,
    pub session: &'a Session,
    pub who: String,
    pub rng: Rng,
}

impl Participant<'_> {
    pub fn run(mut self, until: Instant) {
        let w = self.world;
        let path = &w.paths.latch;
        let mut joins = 0u64;
        while !w.stop.load(Ordering::SeqCst) && Instant::now() < until {
            let id = format!("{}#{joins}", self.who);
            joins += 1;
            let latch = match LeaderLatch::with_id(&self.session.client, path, &id) {
                Ok(l) => l,
                Err(e) => {
                    return w
                        .oracle
                        .violation(format!("{}: leader latch: {e}", self.who))
                }
            };
            let stay = self.rng.millis(200, 3000);
            match latch.start() {
                Ok(()) => self.record(format!("join election {path} as {id} for {stay:?}")),
                Err(e) => {
                    return w
                        .oracle
                        .violation(format!("{}: start latch: {e}", self.who))
                }
            }
            let leave_at = Instant::now() + stay;
            let mut term = None;
            while !w.stop.load(Ordering::SeqCst) && Instant::now() < leave_at.min(until) {
                self.observe(&latch, &mut term);
                thread::sleep(POLL);
            }
            // Out of the oracle before the latch lets go, as a lock holder
            // leaves before it releases.
            if let Some(t) = term.take() {
                self.end(t, "leaving");
            }
            match latch.close() {
                Ok(()) => self.record(format!("leave election {path} as {id}")),
                Err(e) => self.record(format!("leave election {path} as {id} failed: {e}")),
            }
        }
    }

    /// One look: begins a term when the latch leads, ends it when it no
    /// longer does or its client fell in doubt (a term that outlives a
    /// `Suspended` is a new term, counted afresh).
    fn observe(&mut self, latch: &LeaderLatch, term: &mut Option<Term>) {
        let before = self.session.doubt_epoch();
        let leads = self.leads(latch);
        let after = self.session.doubt_epoch();
        if let Some(t) = term.take() {
            if leads && t.epoch == after {
                if t.counted && self.connected() {
                    self.world.note_leader();
                }
                *term = Some(t);
                return;
            }
            self.end(t, if leads { "in doubt" } else { "no longer leads" });
        }
        if leads && before == after {
            *term = Some(self.begin(latch, before));
        }
    }

    /// Whether this participant believes it leads: the latch's own answer,
    /// or (the `--broken-leader` control) whether its node is one of the
    /// first two in the queue, as ZooKeeper lists them.
    fn leads(&self, latch: &LeaderLatch) -> bool {
        if !self.world.broken_leader {
            return latch.has_leadership();
        }
        latch
            .participants()
            .is_ok_and(|all| all.iter().take(2).any(|p| p.id == latch.id()))
    }

    fn begin(&self, latch: &LeaderLatch, epoch: u64) -> Term {
        let w = self.world;
        let claim = self.session.claim(Some(epoch));
        let counted = claim.counts();
        let counter = match counted {
            true => &w.stats.leader_terms,
            false => &w.stats.leader_terms_in_doubt,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.record(format!(
            "leads {} node={}{}",
            w.paths.latch,
            latch.our_path().unwrap_or_default(),
            if counted { "" } else { " IN-DOUBT" }
        ));
        let hold = w
            .oracle
            .enter(&w.paths.latch, &self.who, Mode::Leader, Some(claim), None);
        if counted {
            w.note_leader();
        }
        Term {
            hold,
            epoch,
            counted,
            since: Instant::now(),
        }
    }

    fn end(&self, term: Term, why: &str) {
        self.world.oracle.exit(term.hold);
        self.record(format!(
            "stops leading {} ({why}) after {:?}",
            self.world.paths.latch,
            term.since.elapsed()
        ));
    }

    fn connected(&self) -> bool {
        self.session
            .client
            .state()
            .is_some_and(latchkey_framework::ConnectionState::is_connected)
    }

    fn record(&self, what: String) {
        self.world.history.record(&self.who, what);
    }
}

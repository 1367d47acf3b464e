//! The shared counter: `DistributedAtomicLong` increments from every
//! session. Each succeeded increment must return a post value no other
//! succeeded increment returned (two alike is a lost update), one above its
//! pre value; at the end the counter must hold at least the number of
//! succeeded increments and at most that plus the failed ones (a write sent
//! as the connection broke may or may not have been applied).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use latchkey_framework::Result;
use latchkey_recipes::AtomicValue;
use parking_lot::Mutex;

use crate::history::History;
use crate::oracle::Oracle;

#[derive(Default)]
pub struct Counter {
    /// Post value of every succeeded increment, and who got it.
    posts: Mutex<HashMap<i64, String>>,
    pub succeeded: AtomicU64,
    /// `Ok` with `succeeded: false`: nothing was written.
    pub unsucceeded: AtomicU64,
    /// `Err`: written or not, nobody knows.
    pub errors: AtomicU64,
}

impl Counter {
    /// Records and checks one increment's outcome.
    pub fn completed(
        &self,
        history: &History,
        oracle: &Oracle,
        who: &str,
        path: &str,
        got: Result<AtomicValue<i64>>,
    ) {
        let v = match got {
            Ok(v) if v.succeeded => v,
            Ok(v) => {
                self.unsucceeded.fetch_add(1, Ordering::Relaxed);
                let tries = v.stats.optimistic_tries;
                return history.record(who, format!("increment {path}: not done ({tries} tries)"));
            }
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                return history.record(who, format!("increment {path} failed: {e}"));
            }
        };
        self.succeeded.fetch_add(1, Ordering::Relaxed);
        history.record(
            who,
            format!("increment {path}: {} -> {}", v.pre_value, v.post_value),
        );
        if v.post_value != v.pre_value.wrapping_add(1) {
            oracle.violation(format!(
                "{path}: {who}'s increment went from {} to {}",
                v.pre_value, v.post_value
            ));
        }
        if let Some(earlier) = self.posts.lock().insert(v.post_value, who.to_string()) {
            oracle.violation(format!(
                "{path}: lost update: {who} and {earlier} both incremented to {}",
                v.post_value
            ));
        }
    }

    /// Checks the value the counter ended with.
    pub fn check_final(&self, history: &History, oracle: &Oracle, path: &str, value: i64) {
        let ok = self.succeeded.load(Ordering::Relaxed) as i64;
        let failed = self.errors.load(Ordering::Relaxed) as i64;
        let highest = self.posts.lock().keys().copied().max().unwrap_or(0);
        history.record(
            "checker",
            format!("{path} ends at {value}: {ok} increments succeeded, {failed} failed, highest returned {highest}"),
        );
        if value < ok || value > ok + failed {
            oracle.violation(format!(
                "{path} ends at {value}, outside [{ok}, {}]: {ok} increments succeeded, {failed} failed",
                ok + failed
            ));
        }
        if highest > value {
            oracle.violation(format!(
                "{path} ends at {value}, below the {highest} an increment returned"
            ));
        }
    }
}

//! The recorded history: every invocation and completion, every grant with
//! its fencing token and node, every connection-state change, every fault
//! and every violation, with the time since the run started.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Keeps at most this many events; later ones are counted, not kept, so a
/// run of hours stays within memory.
const MAX_EVENTS: usize = 2_000_000;

pub struct History {
    started: Instant,
    events: Mutex<Vec<(Duration, String, String)>>,
    dropped: std::sync::atomic::AtomicU64,
}

impl History {
    pub fn new() -> History {
        History {
            started: Instant::now(),
            events: Mutex::new(Vec::new()),
            dropped: Default::default(),
        }
    }

    /// Time since the run started.
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// Records `what` done by `who` (`s2.t1`, `nemesis`, `oracle`, ...).
    pub fn record(&self, who: &str, what: impl Into<String>) {
        let at = self.now();
        let mut events = self.events.lock();
        if events.len() < MAX_EVENTS {
            events.push((at, who.to_string(), what.into()));
        } else {
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub fn len(&self) -> usize {
        self.events.lock().len()
    }

    /// Writes the history as text, one event a line:
    /// `   12.345s  s1.t2     grant mutex /m0 token=... node=...`.
    pub fn write_to(&self, path: &Path, header: &str) -> std::io::Result<()> {
        let events = self.events.lock();
        let mut text = String::with_capacity(events.len() * 80);
        text.push_str(header);
        text.push('\n');
        for (at, who, what) in events.iter() {
            let _ = writeln!(text, "{:>10.3}s  {who:<8} {what}", at.as_secs_f64());
        }
        let dropped = self.dropped.load(std::sync::atomic::Ordering::Relaxed);
        if dropped > 0 {
            let _ = writeln!(text, "({dropped} later events not kept)");
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, text)
    }
}

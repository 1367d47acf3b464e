//! Command-line arguments, and the command that replays a run.

use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str =
    "usage: check [--seed N] [--seconds S] [--single|--ensemble] [--no-lock] [--broken-lock] \
[--broken-leader] [--broken-counter] [--broken-cas] [--cas-workload] [--wrong-model] [--broken-queue] [--no-faults] [--lost-replies] [--clients N] [--curator N] [--threads N] [--latches N] [--session-timeout-ms MS] [--progress-bound-s S] \
[--strict-deadlines] [--history FILE]";

#[derive(Clone, Debug)]
pub struct Args {
    pub seed: u64,
    pub duration: Duration,
    pub ensemble: bool,
    pub no_lock: bool,
    pub broken_lock: bool,
    pub broken_leader: bool,
    pub broken_counter: bool,
    /// Issue 38's bug 1 put back: an applied compare-and-set whose reply
    /// was lost answered as refused.
    pub broken_cas: bool,
    /// Most operations compare-and-sets of the shared count, and no sets
    /// (on with `--broken-cas`).
    pub cas_workload: bool,
    /// The linearizability check's model deliberately wrong.
    pub wrong_model: bool,
    /// Queue consumers that take items without lock nodes.
    pub broken_queue: bool,
    pub faults: bool,
    /// The nemesis only loses replies (held past the read timeout).
    pub lost_replies: bool,
    pub clients: usize,
    /// Curator peer processes beside the latchkey sessions.
    pub curator: usize,
    pub threads: usize,
    /// Leader latch participants per session.
    pub latches: usize,
    pub session_timeout: Duration,
    pub connection_timeout: Duration,
    pub progress_bound: Duration,
    pub strict_deadlines: bool,
    pub history: Option<PathBuf>,
}

impl Args {
    pub fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut a = Args {
            seed: fresh_seed(),
            duration: Duration::from_secs(30),
            ensemble: false,
            no_lock: false,
            broken_lock: false,
            broken_leader: false,
            broken_counter: false,
            broken_cas: false,
            cas_workload: false,
            wrong_model: false,
            broken_queue: false,
            faults: true,
            lost_replies: false,
            clients: 3,
            curator: 1,
            threads: 3,
            latches: 2,
            session_timeout: Duration::ZERO,
            connection_timeout: Duration::from_secs(2),
            progress_bound: Duration::from_secs(45),
            strict_deadlines: false,
            history: None,
        };
        let mut session_ms = None;
        while let Some(flag) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .ok_or_else(|| format!("{name} needs a value"))
                    .and_then(|v| v.parse::<u64>().map_err(|e| format!("{name} {v}: {e}")))
            };
            match flag.as_str() {
                "--seed" => a.seed = value("--seed")?,
                "--seconds" => a.duration = Duration::from_secs(value("--seconds")?),
                "--single" => a.ensemble = false,
                "--ensemble" => a.ensemble = true,
                "--no-lock" => a.no_lock = true,
                "--broken-lock" => a.broken_lock = true,
                "--broken-leader" => a.broken_leader = true,
                "--broken-counter" => a.broken_counter = true,
                "--broken-cas" => {
                    a.broken_cas = true;
                    a.cas_workload = true;
                }
                "--cas-workload" => a.cas_workload = true,
                "--wrong-model" => a.wrong_model = true,
                "--broken-queue" => a.broken_queue = true,
                "--no-faults" => a.faults = false,
                "--lost-replies" => a.lost_replies = true,
                "--clients" => a.clients = bounded("--clients", value("--clients")?, 1, 32)?,
                "--curator" => a.curator = bounded("--curator", value("--curator")?, 0, 8)?,
                "--threads" => a.threads = bounded("--threads", value("--threads")?, 1, 16)?,
                "--latches" => a.latches = bounded("--latches", value("--latches")?, 0, 8)?,
                "--session-timeout-ms" => session_ms = Some(value("--session-timeout-ms")?),
                "--progress-bound-s" => {
                    a.progress_bound = Duration::from_secs(value("--progress-bound-s")?)
                }
                "--strict-deadlines" => a.strict_deadlines = true,
                "--history" => {
                    a.history = Some(PathBuf::from(it.next().ok_or("--history needs a file")?))
                }
                other => return Err(format!("unknown argument {other}")),
            }
        }
        let default_ms = if a.ensemble { 4000 } else { 3000 };
        let ms = bounded(
            "--session-timeout-ms",
            session_ms.unwrap_or(default_ms),
            1000,
            60_000,
        )?;
        a.session_timeout = Duration::from_millis(ms as u64);
        Ok(a)
    }

    /// The one command that runs this configuration again.
    pub fn replay_command(&self) -> String {
        let mut cmd = format!(
            "cargo run -p latchkey-test --bin check -- --seed {} --seconds {} {} --clients {} --curator {} --threads {} --latches {} --session-timeout-ms {} --progress-bound-s {}",
            self.seed,
            self.duration.as_secs(),
            if self.ensemble { "--ensemble" } else { "--single" },
            self.clients,
            self.curator,
            self.threads,
            self.latches,
            self.session_timeout.as_millis(),
            self.progress_bound.as_secs(),
        );
        for (on, flag) in [
            (self.no_lock, " --no-lock"),
            (self.broken_lock, " --broken-lock"),
            (self.broken_leader, " --broken-leader"),
            (self.broken_counter, " --broken-counter"),
            (self.broken_cas, " --broken-cas"),
            (self.cas_workload && !self.broken_cas, " --cas-workload"),
            (self.wrong_model, " --wrong-model"),
            (self.broken_queue, " --broken-queue"),
            (!self.faults, " --no-faults"),
            (self.lost_replies, " --lost-replies"),
            (self.strict_deadlines, " --strict-deadlines"),
        ] {
            if on {
                cmd.push_str(flag);
            }
        }
        cmd
    }

    /// Where the history goes: `--history`, or a file named by the seed in
    /// the temp directory.
    pub fn history_path(&self) -> PathBuf {
        self.history.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!(
                "latchkey-check-{}-{}.log",
                self.seed,
                if self.ensemble { "ensemble" } else { "single" }
            ))
        })
    }
}

fn bounded(name: &str, v: u64, lo: u64, hi: u64) -> Result<usize, String> {
    if (lo..=hi).contains(&v) {
        Ok(v as usize)
    } else {
        Err(format!("{name} {v}: must be between {lo} and {hi}"))
    }
}

/// A seed from the clock, for runs that do not name one.
fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

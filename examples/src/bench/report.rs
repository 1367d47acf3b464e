//! Benchmark results: samples per round, medians, ratios, the targets of
//! issue 8, and the tables that show them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::stats::median;

/// A library under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Library {
    /// This project, in the bench process.
    Latchkey,
    /// Apache Curator, through the Java peer.
    Curator,
    /// kazoo, through the Python peer.
    Kazoo,
    /// The `zookeeper` crate (0.8), in the bench process: a client without
    /// recipes, so it takes part in the raw floor only.
    Zookeeper08,
    /// No library: a lock's requests on bare blocking sockets (see
    /// [`super::bare`]), the floor of the floor, CPU and contended rows.
    Bare,
    /// No library: the bare socket with a reader thread per session (see
    /// [`super::reader`]), the Java client's shape; the floor the CPU,
    /// uncontended p50 and contended throughput targets are set against.
    Reader,
    /// No library: the bare socket owned both ways by an I/O thread per
    /// session (see [`super::io_thread`]), which callers hand their
    /// requests to: the Java client's shape and latchkey's; the same
    /// targets' ratios to it are shown for information.
    IoThread,
}

impl Library {
    /// Every library, in table order.
    pub const ALL: [Library; 7] = [
        Library::Latchkey,
        Library::Curator,
        Library::Kazoo,
        Library::Zookeeper08,
        Library::Bare,
        Library::Reader,
        Library::IoThread,
    ];

    /// The name shown in tables and legends.
    pub fn name(self) -> &'static str {
        match self {
            Library::Latchkey => "latchkey",
            Library::Curator => "Curator",
            Library::Kazoo => "kazoo",
            Library::Zookeeper08 => "zookeeper 0.8",
            Library::Bare => "bare socket",
            Library::Reader => "reader thread",
            Library::IoThread => "I/O thread",
        }
    }

    /// The color of its lines in plots.
    pub fn color(self) -> &'static str {
        match self {
            Library::Latchkey => "#d62728",
            Library::Curator => "#1f77b4",
            Library::Kazoo => "#2ca02c",
            Library::Zookeeper08 => "#9467bd",
            Library::Bare => "#7f7f7f",
            Library::Reader => "#8c564b",
            Library::IoThread => "#17becf",
        }
    }

    /// Whether it has lock recipes: it runs every scenario, not only the
    /// raw floor (and, for the bare sockets, the lock cycles).
    pub fn has_recipes(self) -> bool {
        matches!(self, Library::Latchkey | Library::Curator | Library::Kazoo)
    }

    /// Whether it runs the lock's cycles: uncontended (with its CPU time)
    /// and contended.
    pub fn runs_lock_cycle(self) -> bool {
        self.has_recipes() || matches!(self, Library::Bare | Library::Reader | Library::IoThread)
    }
}

/// Which way a metric improves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// Throughput and the like.
    Higher,
    /// Latency, cost.
    Lower,
}

/// One measured quantity, with one sample per round and library.
#[derive(Clone, Debug)]
pub struct Metric {
    /// A stable key, such as `contended.8.throughput`.
    pub key: String,
    /// The row's text.
    pub label: String,
    /// The unit shown next to the label.
    pub unit: String,
    /// Which way is better.
    pub better: Better,
    samples: BTreeMap<Library, Vec<f64>>,
}

impl Metric {
    /// The median over rounds for `lib`.
    pub fn median(&self, lib: Library) -> Option<f64> {
        self.samples.get(&lib).and_then(|v| median(v))
    }

    /// The samples for `lib`, one per round, in order.
    pub fn samples(&self, lib: Library) -> &[f64] {
        self.samples.get(&lib).map_or(&[], Vec::as_slice)
    }

    /// latchkey's median divided by `other`'s.
    pub fn ratio(&self, other: Library) -> Option<f64> {
        let ours = self.median(Library::Latchkey)?;
        let theirs = self.median(other)?;
        (theirs != 0.0).then(|| ours / theirs)
    }
}

/// Every metric of a run, in the order first recorded.
#[derive(Clone, Debug, Default)]
pub struct Results {
    metrics: Vec<Metric>,
}

impl Results {
    /// Records one round's `value` of metric `key` for `lib`.
    pub fn add(
        &mut self,
        key: &str,
        label: &str,
        unit: &str,
        better: Better,
        lib: Library,
        value: f64,
    ) {
        let i = match self.metrics.iter().position(|m| m.key == key) {
            Some(i) => i,
            None => {
                self.metrics.push(Metric {
                    key: key.to_owned(),
                    label: label.to_owned(),
                    unit: unit.to_owned(),
                    better,
                    samples: BTreeMap::new(),
                });
                self.metrics.len() - 1
            }
        };
        self.metrics[i].samples.entry(lib).or_default().push(value);
    }

    /// The metric with `key`.
    pub fn get(&self, key: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.key == key)
    }

    /// The median of `key` for `lib`.
    pub fn median(&self, key: &str, lib: Library) -> Option<f64> {
        self.get(key)?.median(lib)
    }

    /// Every metric.
    pub fn metrics(&self) -> &[Metric] {
        &self.metrics
    }

    /// The libraries with at least one sample.
    pub fn libraries(&self) -> Vec<Library> {
        Library::ALL
            .into_iter()
            .filter(|l| self.metrics.iter().any(|m| !m.samples(*l).is_empty()))
            .collect()
    }
}

/// A value with three significant digits (at least the integer part).
pub fn fmt_value(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if !v.is_finite() => "–".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// A ratio as `1.23x` (`120x` when large, `<0.01x` when tiny).
pub fn fmt_ratio(r: Option<f64>) -> String {
    match r {
        Some(r) if r.is_finite() && r >= 100.0 => format!("{r:.0}x"),
        Some(r) if r.is_finite() && r > 0.0 && r < 0.01 => "<0.01x".into(),
        Some(r) if r.is_finite() => format!("{r:.2}x"),
        _ => "–".into(),
    }
}

/// The rows of the results table: label, unit, one value per library, then
/// latchkey's ratio to each other library.
pub fn rows(results: &Results) -> (Vec<String>, Vec<Vec<String>>) {
    let libs = results.libraries();
    let mut header = vec!["scenario".to_string(), "unit".to_string()];
    header.extend(libs.iter().map(|l| l.name().to_string()));
    let others: Vec<Library> = libs
        .iter()
        .copied()
        .filter(|l| *l != Library::Latchkey)
        .collect();
    if libs.contains(&Library::Latchkey) {
        header.extend(others.iter().map(|l| format!("latchkey ÷ {}", l.name())));
    }
    let rows = results
        .metrics()
        .iter()
        .map(|m| {
            let arrow = match m.better {
                Better::Higher => "↑",
                Better::Lower => "↓",
            };
            let mut row = vec![m.label.clone(), format!("{} {arrow}", m.unit)];
            row.extend(libs.iter().map(|l| fmt_value(m.median(*l))));
            if libs.contains(&Library::Latchkey) {
                row.extend(others.iter().map(|l| fmt_ratio(m.ratio(*l))));
            }
            row
        })
        .collect();
    (header, rows)
}

/// A Markdown table.
pub fn markdown_table(header: &[String], rows: &[Vec<String>]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| {} |", header.join(" | "));
    let aligns: Vec<&str> = (0..header.len())
        .map(|i| if i < 2 { "---" } else { "---:" })
        .collect();
    let _ = writeln!(s, "|{}|", aligns.join("|"));
    for row in rows {
        let _ = writeln!(s, "| {} |", row.join(" | "));
    }
    s
}

/// The same table as aligned plain text, for the terminal.
pub fn text_table(header: &[String], rows: &[Vec<String>]) -> String {
    let width = |i: usize| {
        std::iter::once(header)
            .chain(rows.iter().map(Vec::as_slice))
            .filter_map(|r| r.get(i))
            .map(|c| c.chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let line = |r: &[String]| {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let pad = widths[i].saturating_sub(c.chars().count());
                if i < 2 {
                    format!("{c}{}", " ".repeat(pad))
                } else {
                    format!("{}{c}", " ".repeat(pad))
                }
            })
            .collect();
        cells.join("  ").trim_end().to_string()
    };
    let mut s = line(header);
    s.push('\n');
    for r in rows {
        s.push_str(&line(r));
        s.push('\n');
    }
    s
}

/// A Markdown table of every round's sample of the metrics with `keys`
/// (those recorded), one row per metric and library, then the median.
pub fn samples_table(results: &Results, keys: &[&str]) -> String {
    let metrics: Vec<&Metric> = keys.iter().filter_map(|k| results.get(k)).collect();
    let libs = results.libraries();
    let rounds = metrics
        .iter()
        .flat_map(|m| libs.iter().map(|l| m.samples(*l).len()))
        .max()
        .unwrap_or(0);
    let mut header = vec!["scenario".to_string(), "library".to_string()];
    header.extend((1..=rounds).map(|r| format!("round {r}")));
    header.push("median".into());
    let mut rows = Vec::new();
    for m in metrics {
        for &lib in &libs {
            let samples = m.samples(lib);
            if samples.is_empty() {
                continue;
            }
            let mut row = vec![format!("{} ({})", m.label, m.unit), lib.name().to_string()];
            row.extend((0..rounds).map(|r| fmt_value(samples.get(r).copied())));
            row.push(fmt_value(m.median(lib)));
            rows.push(row);
        }
    }
    markdown_table(&header, &rows)
}

/// One of the targets, judged from the medians.
#[derive(Clone, Debug)]
pub struct Target {
    /// What is compared.
    pub what: String,
    /// The goal, in words.
    pub goal: String,
    /// The measured figure.
    pub measured: String,
    /// Met, missed, or `None` when it could not be judged (a library or a
    /// figure is missing).
    pub met: Option<bool>,
    /// Shown for information, against no goal: its verdict is "info".
    pub info: bool,
}

impl Target {
    /// "info" for information, else [`verdict`] of whether it was met.
    pub fn verdict(&self) -> &'static str {
        if self.info {
            "info"
        } else {
            verdict(self.met)
        }
    }
}

/// The metric keys the targets read.
pub mod keys {
    /// Floor: mean microseconds per raw cycle.
    pub const FLOOR: &str = "floor.cycle";
    /// Uncontended mutex: mean microseconds per cycle.
    pub const MUTEX: &str = "mutex.cycle";
    /// Uncontended mutex: the median cycle, in microseconds.
    pub const MUTEX_P50: &str = "mutex.p50";
    /// CPU per 1,000 uncontended cycles.
    pub const CPU: &str = "mutex.cpu";
    /// Resident memory with the held sessions.
    pub const MEMORY: &str = "memory.rss";

    /// Contended handoffs per second with `n` sessions.
    pub fn throughput(n: usize) -> String {
        format!("contended.{n}.throughput")
    }
    /// Contended handoff latency p50 with `n` sessions.
    pub fn p50(n: usize) -> String {
        format!("contended.{n}.p50")
    }
    /// Contended handoff latency p99 with `n` sessions.
    pub fn p99(n: usize) -> String {
        format!("contended.{n}.p99")
    }
    /// Requests per handoff with `n` waiters.
    pub fn requests(n: usize) -> String {
        format!("herd.{n}.requests")
    }
    /// Watch events per handoff with `n` waiters.
    pub fn events(n: usize) -> String {
        format!("herd.{n}.events")
    }
}

/// How much the requests per handoff may grow from the fewest to the most
/// waiters and still count as flat.
pub const FLAT_TOLERANCE: f64 = 1.10;

/// The targets. `waiters` are the contended session counts run,
/// ascending; `target_sessions` is the count for the throughput and p99
/// targets (8).
pub fn targets(results: &Results, waiters: &[usize], target_sessions: usize) -> Vec<Target> {
    use Library::{Bare, Curator, IoThread, Latchkey, Reader};
    let med = |k: &str, l: Library| results.median(k, l);
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    };
    let judge = |r: Option<f64>, ok: &dyn Fn(f64) -> bool| r.map(ok);
    let mut out = Vec::new();

    // The floors: the targets are set against the reader thread's (the
    // Java client's shape with no library); the bare socket's ratio (one
    // thread per session that reads its own replies) is shown beside it.
    let floor_ratio = |key: &str| ratio(med(key, Latchkey), med(key, Reader));
    let beside = |r: Option<f64>, key: &str| match ratio(med(key, Latchkey), med(key, Bare)) {
        Some(bare) => format!(
            "{} (latchkey ÷ bare socket: {})",
            fmt_ratio(r),
            fmt_ratio(Some(bare))
        ),
        None => fmt_ratio(r),
    };

    let r = floor_ratio(keys::MUTEX_P50);
    out.push(Target {
        what: "uncontended mutex cycle p50, latchkey ÷ reader thread".into(),
        goal: "≤ 1.10x".into(),
        measured: beside(r, keys::MUTEX_P50),
        met: judge(r, &|r| r <= 1.10),
        info: false,
    });

    let n = target_sessions;
    let key = keys::throughput(n);
    let r = floor_ratio(&key);
    out.push(Target {
        what: format!("contended throughput, {n} sessions, latchkey ÷ reader thread"),
        goal: "≥ 0.95x".into(),
        measured: beside(r, &key),
        met: judge(r, &|r| r >= 0.95),
        info: false,
    });
    let r = ratio(med(&key, Latchkey), med(&key, Curator));
    out.push(Target {
        what: format!("contended throughput, {n} sessions, latchkey ÷ Curator"),
        goal: "≥ 1.4x".into(),
        measured: fmt_ratio(r),
        met: judge(r, &|r| r >= 1.4),
        info: false,
    });

    let (ours, theirs) = (med(&keys::p99(n), Latchkey), med(&keys::p99(n), Curator));
    out.push(Target {
        what: format!("p99 handoff latency, {n} sessions"),
        goal: "below Curator's".into(),
        measured: format!(
            "{} µs vs {} µs ({})",
            fmt_value(ours),
            fmt_value(theirs),
            fmt_ratio(ratio(ours, theirs))
        ),
        met: match (ours, theirs) {
            (Some(a), Some(b)) => Some(a < b),
            _ => None,
        },
        info: false,
    });

    let per_n: Vec<Option<f64>> = waiters
        .iter()
        .map(|&n| med(&keys::requests(n), Latchkey))
        .collect();
    let known: Vec<f64> = per_n.iter().flatten().copied().collect();
    let (lo, hi) = (
        known.iter().copied().fold(f64::INFINITY, f64::min),
        known.iter().copied().fold(0.0, f64::max),
    );
    let spread = (known.len() >= 2 && lo > 0.0).then(|| hi / lo);
    let listed: Vec<String> = waiters
        .iter()
        .zip(&per_n)
        .map(|(n, v)| format!("{n}: {}", fmt_value(*v)))
        .collect();
    out.push(Target {
        what: format!(
            "requests per handoff, {} to {} waiters (latchkey)",
            waiters.first().copied().unwrap_or(0),
            waiters.last().copied().unwrap_or(0)
        ),
        goal: format!("flat (largest ≤ {FLAT_TOLERANCE:.2}x smallest)"),
        measured: format!("{} (spread {})", listed.join(", "), fmt_ratio(spread)),
        met: spread.map(|s| s <= FLAT_TOLERANCE),
        info: false,
    });

    let r = floor_ratio(keys::CPU);
    out.push(Target {
        what: "client CPU per 1,000 uncontended cycles, latchkey ÷ reader thread".into(),
        goal: "≤ 1.15x".into(),
        measured: beside(r, keys::CPU),
        met: judge(r, &|r| r <= 1.15),
        info: false,
    });

    let r = ratio(med(keys::MEMORY, Latchkey), med(keys::MEMORY, Curator));
    out.push(Target {
        what: "resident memory with 100 sessions, latchkey ÷ Curator".into(),
        goal: "≤ 0.10x".into(),
        measured: fmt_ratio(r),
        met: judge(r, &|r| r <= 0.10),
        info: false,
    });

    // The I/O thread's floor (the Java client's shape and latchkey's:
    // callers hand each request to the thread that writes it) for the same
    // three, for information, with its own ratio to the reader thread.
    let io_ratio = |key: &str| ratio(med(key, Latchkey), med(key, IoThread));
    let io_beside = |r: Option<f64>, key: &str| match ratio(med(key, IoThread), med(key, Reader)) {
        Some(reader) => format!(
            "{} (I/O thread ÷ reader thread: {})",
            fmt_ratio(r),
            fmt_ratio(Some(reader))
        ),
        None => fmt_ratio(r),
    };
    for (what, key) in [
        (
            "uncontended mutex cycle p50".to_owned(),
            keys::MUTEX_P50.to_owned(),
        ),
        (
            format!("contended throughput, {n} sessions"),
            keys::throughput(n),
        ),
        (
            "client CPU per 1,000 uncontended cycles".to_owned(),
            keys::CPU.to_owned(),
        ),
    ] {
        let r = io_ratio(&key);
        out.push(Target {
            what: format!("{what}, latchkey ÷ I/O thread"),
            goal: "none: for information".into(),
            measured: io_beside(r, &key),
            met: None,
            info: true,
        });
    }
    out
}

/// "met", "MISSED" or "n/a".
pub fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "n/a",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Results {
        let mut r = Results::default();
        for (lib, floor, mutex, cpu, mem) in [
            (Library::Latchkey, 1000.0, 1050.0, 40.0, 13.0),
            (Library::Curator, 1200.0, 1500.0, 400.0, 120.0),
        ] {
            for round in 0..3 {
                let wobble = round as f64;
                r.add(
                    keys::FLOOR,
                    "floor",
                    "µs",
                    Better::Lower,
                    lib,
                    floor + wobble,
                );
                r.add(
                    keys::MUTEX,
                    "mutex",
                    "µs",
                    Better::Lower,
                    lib,
                    mutex + wobble,
                );
                r.add(keys::CPU, "cpu", "ms", Better::Lower, lib, cpu);
                r.add(keys::MEMORY, "rss", "MiB", Better::Lower, lib, mem);
            }
        }
        for (n, ours, theirs) in [(2, 5.0, 5.0), (8, 5.2, 5.0), (64, 5.3, 5.0)] {
            r.add(
                &keys::requests(n),
                "req",
                "",
                Better::Lower,
                Library::Latchkey,
                ours,
            );
            r.add(
                &keys::requests(n),
                "req",
                "",
                Better::Lower,
                Library::Curator,
                theirs,
            );
        }
        r.add(
            &keys::throughput(8),
            "tp",
            "/s",
            Better::Higher,
            Library::Latchkey,
            900.0,
        );
        r.add(
            &keys::throughput(8),
            "tp",
            "/s",
            Better::Higher,
            Library::Curator,
            500.0,
        );
        r.add(
            &keys::p99(8),
            "p99",
            "µs",
            Better::Lower,
            Library::Latchkey,
            900.0,
        );
        r.add(
            &keys::p99(8),
            "p99",
            "µs",
            Better::Lower,
            Library::Curator,
            2000.0,
        );
        r
    }

    /// `sample()` with the floors: the reader thread's, the bare
    /// socket's and the I/O thread's CPU, uncontended p50 and throughput
    /// with 8 sessions.
    fn with_floors(mut r: Results) -> Results {
        for (lib, cpu, p50, tp) in [
            (Library::Reader, 36.0, 1000.0, 900.0),
            (Library::Bare, 30.0, 950.0, 950.0),
            (Library::IoThread, 38.0, 1020.0, 880.0),
        ] {
            for _ in 0..3 {
                r.add(keys::CPU, "cpu", "ms", Better::Lower, lib, cpu);
                r.add(keys::MUTEX_P50, "p50", "µs", Better::Lower, lib, p50);
                let key = keys::throughput(8);
                r.add(&key, "tp", "/s", Better::Higher, lib, tp);
            }
        }
        for _ in 0..3 {
            let lib = Library::Latchkey;
            r.add(keys::MUTEX_P50, "p50", "µs", Better::Lower, lib, 1050.0);
        }
        r
    }

    #[test]
    fn medians_ratios_and_targets() {
        let r = with_floors(sample());
        assert_eq!(r.median(keys::FLOOR, Library::Latchkey), Some(1001.0));
        assert_eq!(
            r.libraries(),
            vec![
                Library::Latchkey,
                Library::Curator,
                Library::Bare,
                Library::Reader,
                Library::IoThread
            ]
        );
        let t = targets(&r, &[2, 8, 64], 8);
        let verdicts: Vec<Option<bool>> = t.iter().map(|t| t.met).collect();
        assert_eq!(
            verdicts,
            vec![
                Some(true),  // p50 1050 ÷ 1000
                Some(true),  // throughput 900 ÷ 900
                Some(true),  // throughput 900 ÷ Curator's 500
                Some(true),  // p99
                Some(true),  // flat
                Some(true),  // CPU 40 ÷ 36
                Some(false), // memory
                None,        // p50 ÷ I/O thread: information
                None,        // throughput ÷ I/O thread: information
                None,        // CPU ÷ I/O thread: information
            ]
        );
        let shown: Vec<&str> = t.iter().map(Target::verdict).collect();
        assert_eq!(
            shown,
            ["met", "met", "met", "met", "met", "met", "MISSED", "info", "info", "info"]
        );
        assert_eq!(t[2].measured, "1.80x");
        assert_eq!(t[5].measured, "1.11x (latchkey ÷ bare socket: 1.33x)");
    }

    #[test]
    fn the_targets_are_against_the_reader_thread_with_the_bare_socket_beside() {
        let r = with_floors(sample());
        let t = targets(&r, &[2, 8, 64], 8);
        assert!(t[0].what.contains("÷ reader thread"), "{t:?}");
        assert_eq!(t[0].measured, "1.05x (latchkey ÷ bare socket: 1.11x)");
        assert_eq!(t[1].measured, "1.00x (latchkey ÷ bare socket: 0.95x)");
        // Without the floors the targets set against them cannot be judged.
        let t = targets(&sample(), &[2, 8, 64], 8);
        assert_eq!((t[0].met, t[1].met, t[5].met), (None, None, None));
        assert_eq!(t[2].met, Some(true));
    }

    #[test]
    fn the_i_o_thread_is_shown_for_information_beside_the_targets_floors() {
        let r = with_floors(sample());
        let t = targets(&r, &[2, 8, 64], 8);
        let io: Vec<(&str, &str, &str)> = t[7..]
            .iter()
            .map(|t| (t.what.as_str(), t.measured.as_str(), t.verdict()))
            .collect();
        assert_eq!(
            io,
            [
                (
                    "uncontended mutex cycle p50, latchkey ÷ I/O thread",
                    "1.03x (I/O thread ÷ reader thread: 1.02x)",
                    "info"
                ),
                (
                    "contended throughput, 8 sessions, latchkey ÷ I/O thread",
                    "1.02x (I/O thread ÷ reader thread: 0.98x)",
                    "info"
                ),
                (
                    "client CPU per 1,000 uncontended cycles, latchkey ÷ I/O thread",
                    "1.05x (I/O thread ÷ reader thread: 1.06x)",
                    "info"
                ),
            ]
        );
        // The targets stay against the reader thread.
        assert_eq!(t[0].measured, "1.05x (latchkey ÷ bare socket: 1.11x)");
        // Without the floors the lines are there, with nothing measured.
        let t = targets(&sample(), &[2, 8, 64], 8);
        assert_eq!(t.len(), 10);
        assert!(t[7..].iter().all(|t| t.info && t.measured == "–"), "{t:?}");
        // The results table has the I/O thread's column and its ratio.
        let (header, rows) = rows(&r);
        assert!(header.contains(&"I/O thread".to_owned()), "{header:?}");
        let at = header
            .iter()
            .position(|h| h == "latchkey ÷ I/O thread")
            .expect("a ratio column for the I/O thread");
        let cpu = rows.iter().find(|row| row[0] == "cpu").unwrap();
        assert_eq!(cpu[at], "1.05x");
        let samples = samples_table(&r, &[keys::CPU]);
        assert!(
            samples.contains("| cpu (ms) | I/O thread | 38.0 |"),
            "{samples}"
        );
    }

    #[test]
    fn tables_have_a_cell_per_column() {
        let r = sample();
        let (header, rows) = rows(&r);
        assert_eq!(header.len(), 2 + 2 + 1);
        assert!(rows.iter().all(|row| row.len() == header.len()));
        let md = markdown_table(&header, &rows);
        assert!(md.starts_with("| scenario | unit | latchkey | Curator | latchkey ÷ Curator |"));
        assert!(
            md.contains("| floor | µs ↓ | 1001 | 1201 | 0.83x |"),
            "{md}"
        );
        let text = text_table(&header, &rows);
        assert_eq!(text.lines().count(), rows.len() + 1);
        let samples = samples_table(&r, &[keys::CPU, "no such key"]);
        assert!(
            samples.contains("| round 1 | round 2 | round 3 | median |"),
            "{samples}"
        );
        assert_eq!(samples.lines().count(), 2 + 2, "{samples}");
    }

    #[test]
    fn formats() {
        assert_eq!(fmt_value(Some(1234.4)), "1234");
        assert_eq!(fmt_value(Some(12.34)), "12.3");
        assert_eq!(fmt_value(Some(1.234)), "1.23");
        assert_eq!(fmt_value(None), "–");
        assert_eq!(fmt_ratio(Some(0.5)), "0.50x");
        assert_eq!(fmt_ratio(Some(7220.0)), "7220x");
        assert_eq!(fmt_ratio(Some(0.002)), "<0.01x");
    }
}

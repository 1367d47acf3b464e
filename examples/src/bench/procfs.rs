//! What Linux's `/proc` says about a process and the machine.

use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// CPU time used so far by the live threads of process `pid`: the sum of
/// the first field of `/proc/<pid>/task/*/schedstat` (nanoseconds on CPU).
/// Threads that have already exited are not counted, so take both readings
/// around work that starts and ends no threads.
pub fn cpu_time(pid: u32) -> io::Result<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = task?.path().join("schedstat");
        // A thread may end between the listing and the read.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let ns = text
            .split_whitespace()
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .ok_or_else(|| bad(&path.display().to_string()))?;
        total += ns;
    }
    Ok(Duration::from_nanos(total))
}

/// Context switches so far of the live threads of process `pid`: the sum
/// of `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` in
/// `/proc/<pid>/task/*/status`, each one a time a thread went off its CPU
/// (to sleep, or preempted), so about as many wake-ups. As with
/// [`cpu_time`], threads that have exited are not counted.
pub fn context_switches(pid: u32) -> io::Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = task?.path().join("status");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for key in ["voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"] {
            total += status_field(&text, key).ok_or_else(|| bad(&path.display().to_string()))?;
        }
    }
    Ok(total)
}

/// The resident set size of process `pid` (`VmRSS` in `/proc/<pid>/status`).
pub fn rss_bytes(pid: u32) -> io::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path)?;
    status_field(&text, "VmRSS:")
        .map(|kib| kib * 1024)
        .ok_or_else(|| bad(&path))
}

/// How many threads process `pid` has (`Threads` in `/proc/<pid>/status`).
pub fn threads(pid: u32) -> io::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path)?;
    status_field(&text, "Threads:").ok_or_else(|| bad(&path))
}

fn status_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("cannot read {what}"))
}

/// One line about the machine: CPU model, cores, memory, kernel.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map_or("unknown CPU", |(_, m)| m.trim())
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = status_field(&meminfo, "MemTotal:").map_or(0.0, |kib| kib as f64 / 1048576.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{model}, {cores} cores, {mem_gib:.0} GiB memory, Linux {}",
        kernel.trim()
    )
}

/// `YYYY-MM-DD HH:MM UTC` for a time.
pub fn utc(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60
    )
}

/// Year, month, day of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00 UTC");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_723); // 2000-02-29 01:02:03
        assert_eq!(utc(t), "2000-02-29 01:02 UTC");
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert!(rss_bytes(me).unwrap() > 0);
        assert!(threads(me).unwrap() >= 1);
        cpu_time(me).unwrap();
        let before = context_switches(me).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(context_switches(me).unwrap() > before);
    }
}

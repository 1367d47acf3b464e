//! The counters the herd measurement reads from ZooKeeper's `mntr`.

/// The `mntr` summaries whose sums count the watch events a server fired.
pub const WATCH_SUMS: [&str; 4] = [
    "zk_sum_node_created_watch_count",
    "zk_sum_node_deleted_watch_count",
    "zk_sum_node_changed_watch_count",
    "zk_sum_node_children_watch_count",
];

/// Requests received and watch events fired, as counted by one server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// `zk_packets_received`: every request, ping and four-letter word.
    pub requests: u64,
    /// The sum of [`WATCH_SUMS`]: watches triggered (one event each).
    pub watch_events: u64,
}

impl Counters {
    /// What happened between `self` (earlier) and `later`.
    pub fn until(self, later: Counters) -> Counters {
        Counters {
            requests: later.requests.saturating_sub(self.requests),
            watch_events: later.watch_events.saturating_sub(self.watch_events),
        }
    }
}

/// Reads the counters from a `mntr` reply (`key<TAB>value` lines); `None`
/// without `zk_packets_received` (an older server, or `mntr` not allowed).
pub fn parse(text: &str) -> Option<Counters> {
    let mut requests = None;
    let mut watch_events = 0;
    for line in text.lines() {
        let Some((key, value)) = line.trim().split_once('\t') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<u64>() else {
            continue;
        };
        if key == "zk_packets_received" {
            requests = Some(value);
        } else if WATCH_SUMS.contains(&key) {
            watch_events += value;
        }
    }
    Some(Counters {
        requests: requests?,
        watch_events,
    })
}

/// One numeric value of a `mntr` reply, such as `zk_watch_count`.
pub fn value(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .filter_map(|l| l.trim().split_once('\t'))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_requests_and_watch_sums() {
        let text = "zk_version\t3.8.0\nzk_packets_received\t120\n\
                    zk_avg_node_deleted_watch_count\t1.0\n\
                    zk_sum_node_deleted_watch_count\t7\n\
                    zk_sum_node_children_watch_count\t2\n";
        let c = parse(text).unwrap();
        assert_eq!(
            c,
            Counters {
                requests: 120,
                watch_events: 9
            }
        );
        let later = Counters {
            requests: 150,
            watch_events: 10,
        };
        assert_eq!(c.until(later).requests, 30);
        assert_eq!(parse("imok"), None);
        assert_eq!(value(text, "zk_sum_node_deleted_watch_count"), Some(7));
        assert_eq!(value(text, "zk_watch_count"), None);
    }
}

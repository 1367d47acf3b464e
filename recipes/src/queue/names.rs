//! Item node names, as Curator encodes them: every item is
//! `queue-<encoding><10-digit sequence>`, where the encoding is empty
//! (`DistributedQueue`), a priority (`DistributedPriorityQueue`), a time
//! (`DistributedDelayQueue`) or an id (`DistributedIdQueue`); and the
//! order in which each kind takes its items.

use std::cmp::Ordering;

/// The prefix of every item node (Curator's `QUEUE_ITEM_NAME`).
pub const QUEUE_ITEM_PREFIX: &str = "queue-";

/// The separator around a delay queue's time and an id queue's id.
pub(crate) const SEPARATOR: char = '|';

/// Which kind of Curator queue reads the item names (exported as
/// `QueueKind`), for [`sort_queue_items`](crate::sort_queue_items).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// `DistributedQueue`: `queue-<sequence>`.
    Plain,
    /// `DistributedPriorityQueue`: `queue-<priority><sequence>`.
    Priority,
    /// `DistributedDelayQueue`: `queue-|<due time>|<sequence>`.
    Delay,
    /// `DistributedIdQueue`: `queue-|<id>|<sequence>`.
    Id,
}

/// Curator's `priorityToString`: `1` then 8 hex digits for priorities of
/// zero and more, `0` then the two's complement for negative ones, so
/// that names sort as priorities do (lowest first).
pub(crate) fn priority_to_string(priority: i32) -> String {
    let sign = if priority >= 0 { '1' } else { '0' };
    format!("{sign}{:08X}", priority as u32)
}

/// Curator's `epochToString`: `|<hex millis since the epoch, at least 8
/// digits>|`.
pub(crate) fn epoch_to_string(epoch_ms: u64) -> String {
    format!("{SEPARATOR}{epoch_ms:08X}{SEPARATOR}")
}

/// The time a delay queue's item waits for, in millis since the epoch
/// (Curator's `getEpoch`: between the last two separators; 0 when the name
/// has none, so such an item is due at once).
pub(crate) fn epoch_of(name: &str) -> u64 {
    let Some(second) = name.rfind(SEPARATOR) else {
        return 0;
    };
    let Some(first) = name[..second].rfind(SEPARATOR) else {
        return 0;
    };
    if first == 0 || second <= first + 1 {
        return 0;
    }
    // Curator parses a signed long: more than 63 bits is no time.
    i64::from_str_radix(&name[first + 1..second], 16)
        .ok()
        .and_then(|v| u64::try_from(v).ok())
        .unwrap_or(0)
}

/// Curator's `fixId`: `/` and `|` cannot be in an id's name, and become `_`.
pub(crate) fn fix_id(id: &str) -> String {
    id.replace(['/', SEPARATOR], "_")
}

/// An id queue's item name: its id, and its name without the id (which
/// orders the queue). A name without two separators is its own id, as in
/// Curator (which logs it as a bad node).
pub(crate) fn parse_id(name: &str) -> (&str, String) {
    let Some(first) = name.find(SEPARATOR) else {
        return (name, name.to_owned());
    };
    let Some(len) = name[first + 1..].find(SEPARATOR) else {
        return (name, name.to_owned());
    };
    let second = first + 1 + len;
    (
        &name[first + 1..second],
        format!("{}{}", &name[..first], &name[second + 1..]),
    )
}

/// Sorts item node names into the order a consumer of `kind` takes them
/// (exported as `sort_queue_items`): by name (plain and priority queues),
/// by name without the id (id queues), by due time and then name (delay
/// queues; Curator sorts by due time only). Tools that show a queue use it
/// to list items as consumers will take them.
///
/// ```
/// use latchkey_recipes::{sort_queue_items, QueueKind};
/// let mut names = vec!["queue-|0000000A|0000000001".to_owned(), "queue-|00000002|0000000002".to_owned()];
/// sort_queue_items(QueueKind::Delay, &mut names);
/// assert_eq!(names[0], "queue-|00000002|0000000002");
/// ```
pub fn sort(kind: Kind, names: &mut [String]) {
    match kind {
        Kind::Plain | Kind::Priority => names.sort(),
        Kind::Id => names.sort_by_cached_key(|n| parse_id(n).1),
        Kind::Delay => names.sort_by(|a, b| match epoch_of(a).cmp(&epoch_of(b)) {
            Ordering::Equal => a.cmp(b),
            other => other,
        }),
    }
}

/// The path to put an item back under when its consumer failed in
/// lock-safe mode: the item's own name without its sequence, so that it
/// keeps its id, as Curator does for id queues. (Curator puts priority and
/// delay items back as plain `queue-` items; keeping the encoding keeps
/// the priority, and a delay already passed.)
pub(crate) fn requeue_name(name: &str) -> &str {
    let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
    &name[..name.len() - digits.min(10)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_encode_as_curator_and_sort_by_value() {
        assert_eq!(priority_to_string(0), "100000000");
        assert_eq!(priority_to_string(10), "10000000A");
        assert_eq!(priority_to_string(-1), "0FFFFFFFF");
        assert_eq!(priority_to_string(i32::MIN), "080000000");
        assert_eq!(priority_to_string(i32::MAX), "17FFFFFFF");
        let mut values = [5, -3, 0, i32::MIN, i32::MAX, -1, 1];
        let mut names: Vec<_> = values.iter().map(|p| priority_to_string(*p)).collect();
        names.sort();
        values.sort();
        let sorted: Vec<_> = values.iter().map(|p| priority_to_string(*p)).collect();
        assert_eq!(names, sorted);
    }

    #[test]
    fn delays_encode_and_parse_as_curator() {
        assert_eq!(epoch_to_string(1), "|00000001|");
        let name = format!("queue-{}0000000007", epoch_to_string(1_700_000_000_000));
        assert_eq!(name, "queue-|18BCFE56800|0000000007");
        assert_eq!(epoch_of(&name), 1_700_000_000_000);
        for plain in ["queue-0000000001", "|1|", "queue-||01", "queue-|zz|01", ""] {
            assert_eq!(epoch_of(plain), 0, "{plain}");
        }
        assert_eq!(epoch_of(&format!("q|{:X}|1", u64::MAX)), 0);
    }

    #[test]
    fn ids_parse_as_curator() {
        assert_eq!(fix_id("a/b|c"), "a_b_c");
        assert_eq!(
            parse_id("queue-|id-1|0000000003"),
            ("id-1", "queue-0000000003".to_owned())
        );
        assert_eq!(parse_id("queue-||0000000003").0, "");
        assert_eq!(parse_id("queue-|x").0, "queue-|x");
        let mut names = vec![
            "queue-|b|0000000002".to_owned(),
            "queue-|a|0000000003".to_owned(),
            "queue-|c|0000000001".to_owned(),
        ];
        sort(Kind::Id, &mut names);
        assert_eq!(names[0], "queue-|c|0000000001");
    }

    #[test]
    fn requeue_keeps_the_encoding() {
        assert_eq!(requeue_name("queue-0000000012"), "queue-");
        assert_eq!(requeue_name("queue-|id|0000000012"), "queue-|id|");
        assert_eq!(requeue_name("queue-1000000050000000012"), "queue-100000005");
        assert_eq!(requeue_name("x"), "x");
    }
}

//! `inspect` of a queue: Curator's item nodes, whichever library put them.
//!
//! The node names tell the queue's kind, as Curator encodes them:
//! `qn-<sequence>` (`SimpleDistributedQueue`), `queue-<sequence>`
//! (`DistributedQueue`), `queue-<sign><8 hex digits><sequence>` (a
//! priority, `DistributedPriorityQueue`), `queue-|<hex millis>|<sequence>`
//! (a due time, `DistributedDelayQueue`) and `queue-|<id>|<sequence>`
//! (`DistributedIdQueue`). A delay queue's names are id queue names whose
//! id is 8 or more upper-case hex digits; an id queue holding only such ids
//! shows as a delay queue. A lock-safe queue's lock path holds ephemeral
//! nodes named as the items being processed; a sharder's path holds
//! `queue-<uuid>` shards, each a queue.

use latchkey_framework::{Client, ErrorCode, Stat};
use latchkey_recipes::{
    sort_queue_items, ItemSerializer, QueueKind, QUEUE_ITEM_PREFIX, SIMPLE_QUEUE_PREFIX,
};
use serde_json::{json, Value};

use crate::format::{now_ms, secs, table, utc_or_ms};
use crate::inspect::{join, printable};
use crate::{zk_failure, Exit, Opts};

/// Items shown unless `--limit` says otherwise.
const DEFAULT_LIMIT: u32 = 10;

/// The digits of a sequential node's sequence number.
const SEQUENCE_DIGITS: usize = 10;

/// A queue's kind, as its node names tell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Simple,
    Plain,
    Priority,
    Delay,
    Id,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Simple => "simple",
            Kind::Plain => "plain",
            Kind::Priority => "priority",
            Kind::Delay => "delay",
            Kind::Id => "id",
        }
    }
}

/// What is under a queue path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Item nodes (or a lock-safe queue's lock nodes) of a queue of this kind.
    Items(Kind),
    /// A `QueueSharder`'s shards.
    Shards,
}

/// What one `queue-` name encodes between the prefix and the sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Shape {
    Plain,
    Priority(i32),
    /// `|<hex>|`: a due time, or an id that looks like one.
    Delay(i64, String),
    Id(String),
    Unknown,
}

fn is_upper_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
}

/// The sequence number at the end of `name`, if it has one.
fn sequence(name: &str) -> Option<&str> {
    let at = name.len().checked_sub(SEQUENCE_DIGITS)?;
    let tail = name.get(at..)?;
    tail.bytes().all(|b| b.is_ascii_digit()).then_some(tail)
}

fn shape(name: &str) -> Shape {
    let (Some(rest), Some(seq)) = (name.strip_prefix(QUEUE_ITEM_PREFIX), sequence(name)) else {
        return Shape::Unknown;
    };
    let Some(encoding) = rest.get(..rest.len().saturating_sub(seq.len())) else {
        return Shape::Unknown;
    };
    if encoding.is_empty() {
        return Shape::Plain;
    }
    // Curator's priorityToString: `1` and the value's 8 hex digits for
    // zero and more, `0` and the two's complement for less.
    // (`get`: the first character may be more than a byte.)
    if let Some(hex) = encoding
        .get(1..)
        .filter(|h| encoding.len() == 9 && is_upper_hex(h))
    {
        if let Ok(bits) = u32::from_str_radix(hex, 16) {
            let value = bits as i32;
            match encoding.as_bytes()[0] {
                b'1' if value >= 0 => return Shape::Priority(value),
                b'0' if value < 0 => return Shape::Priority(value),
                _ => {}
            }
        }
    }
    if let Some(inner) = encoding
        .strip_prefix('|')
        .and_then(|e| e.strip_suffix('|'))
        .filter(|inner| !inner.contains('|'))
    {
        // Curator's epochToString: at least 8 upper-case hex digits.
        if inner.len() >= 8 && is_upper_hex(inner) {
            if let Ok(ms) = i64::from_str_radix(inner, 16) {
                return Shape::Delay(ms, inner.to_owned());
            }
        }
        return Shape::Id(inner.to_owned());
    }
    Shape::Unknown
}

/// The layout of a path's children, if they are a queue's nodes: all
/// `qn-`, or all `queue-` (all `queue-<uuid>`: a sharder's shards).
pub(crate) fn detect(children: &[String]) -> Option<Layout> {
    if children.is_empty() {
        return None;
    }
    if children.iter().all(|c| c.starts_with(SIMPLE_QUEUE_PREFIX)) {
        return Some(Layout::Items(Kind::Simple));
    }
    if !children.iter().all(|c| c.starts_with(QUEUE_ITEM_PREFIX)) {
        return None;
    }
    if children
        .iter()
        .all(|c| is_uuid(&c[QUEUE_ITEM_PREFIX.len()..]))
    {
        return Some(Layout::Shards);
    }
    let shapes: Vec<Shape> = children.iter().map(|c| shape(c)).collect();
    let any = |f: fn(&Shape) -> bool| shapes.iter().any(f);
    Some(Layout::Items(if any(|s| matches!(s, Shape::Id(_))) {
        Kind::Id
    } else if any(|s| matches!(s, Shape::Delay(..))) {
        Kind::Delay
    } else if any(|s| matches!(s, Shape::Priority(_))) {
        Kind::Priority
    } else {
        Kind::Plain
    }))
}

/// `8-4-4-4-12` lower-case hex digits, as Java's `UUID.toString()`.
fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
}

/// What a name tells in a queue of `kind`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Encoded {
    priority: Option<i32>,
    due_ms: Option<i64>,
    id: Option<String>,
}

fn encoded(kind: Kind, name: &str) -> Encoded {
    let mut e = Encoded::default();
    match (kind, shape(name)) {
        (Kind::Priority, Shape::Priority(p)) => e.priority = Some(p),
        (Kind::Delay, Shape::Delay(ms, _)) => e.due_ms = Some(ms),
        (Kind::Id, Shape::Delay(_, id) | Shape::Id(id)) => e.id = Some(id),
        _ => {}
    }
    e
}

/// Sorts `names` as the queue's consumer takes them, by the recipes' own
/// order (a simple queue's `qn-` names: by name).
fn sort(kind: Kind, names: &mut [String]) {
    let kind = match kind {
        Kind::Simple => return names.sort(),
        Kind::Plain => QueueKind::Plain,
        Kind::Priority => QueueKind::Priority,
        Kind::Delay => QueueKind::Delay,
        Kind::Id => QueueKind::Id,
    };
    sort_queue_items(kind, names);
}

/// One node read.
struct Item {
    name: String,
    path: String,
    encoded: Encoded,
    stat: Stat,
    data: Vec<u8>,
}

impl Item {
    /// The messages in a distributed queue item's data (Curator's framing
    /// holds one or more); `None` for simple queues and lock nodes, or when
    /// the data is not so framed.
    fn messages(&self, kind: Kind, lock: bool) -> Option<Vec<Vec<u8>>> {
        if kind == Kind::Simple || lock {
            return None;
        }
        ItemSerializer::deserialize(&self.data).ok()
    }

    /// What to show of the data: the (first) message if it is text; the
    /// data itself if it is text, in a simple queue's item or a lock node.
    fn text(&self, kind: Kind, lock: bool, messages: &Option<Vec<Vec<u8>>>) -> Option<String> {
        match messages {
            Some(m) => m.first().and_then(|m| printable(m)).map(str::to_owned),
            None if kind == Kind::Simple || lock => printable(&self.data).map(str::to_owned),
            None => None,
        }
    }
}

/// Prints the queue under `opts.path` whose children are `children`.
pub(crate) fn inspect(
    client: &Client,
    opts: &Opts,
    layout: Layout,
    children: Vec<String>,
) -> Result<(), Exit> {
    match layout {
        Layout::Shards => shards(client, opts, children),
        Layout::Items(kind) => items(client, opts, kind, children),
    }
}

fn items(client: &Client, opts: &Opts, kind: Kind, mut children: Vec<String>) -> Result<(), Exit> {
    let limit = opts.limit.unwrap_or(DEFAULT_LIMIT) as usize;
    let now = now_ms();
    sort(kind, &mut children);
    let depth = children.len();
    let mut items = Vec::new();
    for name in &children {
        if items.len() >= limit {
            break;
        }
        let path = join(&opts.path, name);
        // Taken between the listing and this read: skip it.
        let (data, stat) = match client.get_data(&path) {
            Ok(v) => v,
            Err(e) if e.is(ErrorCode::NoNode) => continue,
            Err(e) => return Err(zk_failure(&e, &format!("cannot read {path}"))),
        };
        items.push(Item {
            encoded: encoded(kind, name),
            name: name.clone(),
            path,
            stat,
            data,
        });
    }
    // Items are persistent nodes; a lock-safe consumer's lock nodes, named
    // as the items they hold, are ephemeral.
    let lock = items.iter().any(|i| i.stat.ephemeral_owner != 0);
    let mut out = if opts.json {
        let nodes: Vec<Value> = items
            .iter()
            .enumerate()
            .map(|(position, i)| {
                let messages = i.messages(kind, lock);
                json!({
                    "position": position,
                    "role": if lock { "processing" } else { "item" },
                    "kind": kind.as_str(),
                    "name": i.name,
                    "path": i.path,
                    "sequence": sequence(&i.name),
                    "priority": i.encoded.priority,
                    "due_ms": i.encoded.due_ms,
                    "due_in_ms": i.encoded.due_ms.map(|d| d.saturating_sub(now)),
                    "id": i.encoded.id,
                    "session": format!("0x{:x}", i.stat.ephemeral_owner),
                    "persistent": i.stat.ephemeral_owner == 0,
                    "age_ms": now.saturating_sub(i.stat.ctime).max(0),
                    "data_length": i.data.len(),
                    "messages": messages.as_ref().map(Vec::len),
                    "data": i.text(kind, lock, &messages),
                })
            })
            .collect();
        json!({
            "path": opts.path,
            "exists": true,
            "recipe": if lock { "queue locks" } else { "queue" },
            "queue": {"kind": kind.as_str(), "depth": depth, "shown": items.len()},
            "nodes": nodes,
        })
        .to_string()
    } else {
        text(opts, kind, lock, depth, &items, now)
    };
    if opts.json {
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}

fn text(opts: &Opts, kind: Kind, lock: bool, depth: usize, items: &[Item], now: i64) -> String {
    let shown = if items.len() < depth {
        format!(", the first {} in queue order", items.len())
    } else {
        String::new()
    };
    let mut out = if lock {
        format!(
            "{} ({} queue locks): {depth} item(s) being processed{shown}\n",
            opts.path,
            kind.as_str()
        )
    } else {
        format!(
            "{} ({} queue): depth {depth} (item nodes waiting){shown}\n",
            opts.path,
            kind.as_str()
        )
    };
    if items.is_empty() {
        return out;
    }
    let encoded_column = match kind {
        Kind::Priority => Some("PRIORITY"),
        Kind::Delay => Some("DUE"),
        Kind::Id => Some("ID"),
        Kind::Simple | Kind::Plain => None,
    };
    let mut header = vec!["#", "NODE"];
    header.extend(encoded_column);
    if lock {
        header.push("SESSION");
    }
    header.extend(["AGE", "SIZE", "MSGS", "DATA"]);
    let rows: Vec<Vec<String>> = items
        .iter()
        .enumerate()
        .map(|(position, i)| {
            let messages = i.messages(kind, lock);
            let mut row = vec![position.to_string(), i.name.clone()];
            if encoded_column.is_some() {
                row.push(match (&i.encoded, kind) {
                    (
                        Encoded {
                            priority: Some(p), ..
                        },
                        _,
                    ) => p.to_string(),
                    (
                        Encoded {
                            due_ms: Some(due), ..
                        },
                        _,
                    ) => {
                        let left = due.saturating_sub(now);
                        if left > 0 {
                            format!("{} (in {})", utc_or_ms(*due), secs(left))
                        } else {
                            format!("{} (due)", utc_or_ms(*due))
                        }
                    }
                    (Encoded { id: Some(id), .. }, _) => id.clone(),
                    (_, Kind::Delay) => "now (no time)".to_owned(),
                    _ => "-".to_owned(),
                });
            }
            if lock {
                row.push(format!("0x{:x}", i.stat.ephemeral_owner));
            }
            row.push(secs(now.saturating_sub(i.stat.ctime).max(0)));
            row.push(i.data.len().to_string());
            row.push(
                messages
                    .as_ref()
                    .map_or("-".to_owned(), |m| m.len().to_string()),
            );
            let more = messages.as_ref().map_or(0, |m| m.len().saturating_sub(1));
            row.push(match (i.text(kind, lock, &messages), more) {
                (Some(t), 0) => t,
                (Some(t), n) => format!("{t} (+{n} more)"),
                (None, _) if messages.is_none() && kind != Kind::Simple && !lock => {
                    format!("<{} bytes, not Curator's item framing>", i.data.len())
                }
                (None, _) => format!("<{} bytes>", i.data.len()),
            });
            row
        })
        .collect();
    let age = header.iter().position(|h| *h == "AGE").unwrap_or(0);
    out.push_str(&table(&header, &rows, &[0, age, age + 1, age + 2], ""));
    out
}

fn shards(client: &Client, opts: &Opts, mut children: Vec<String>) -> Result<(), Exit> {
    children.sort();
    let mut shards = Vec::new();
    for name in children {
        let path = join(&opts.path, &name);
        match client.exists(&path) {
            Ok(Some(stat)) => shards.push((name, path, stat.num_children.max(0) as usize)),
            Ok(None) => {}
            Err(e) => return Err(zk_failure(&e, &format!("cannot read {path}"))),
        }
    }
    let total: usize = shards.iter().map(|s| s.2).sum();
    let out = if opts.json {
        let list: Vec<Value> = shards
            .iter()
            .map(|(name, path, depth)| json!({"name": name, "path": path, "depth": depth}))
            .collect();
        let mut s = json!({
            "path": opts.path,
            "exists": true,
            "recipe": "sharded queue",
            "queue": {"kind": "sharded", "depth": total, "shown": 0},
            "shards": list,
            "nodes": [],
        })
        .to_string();
        s.push('\n');
        s
    } else {
        let rows: Vec<Vec<String>> = shards
            .iter()
            .map(|(_, path, depth)| vec![depth.to_string(), path.clone()])
            .collect();
        format!(
            "{} (sharded queue): {} shard(s), depth {total} (item nodes waiting); \
             inspect a shard for its items\n{}",
            opts.path,
            shards.len(),
            table(&["DEPTH", "SHARD"], &rows, &[0], "")
        )
    };
    print!("{out}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn shapes_of_curator_names() {
        assert_eq!(shape("queue-0000000001"), Shape::Plain);
        assert_eq!(shape("queue-1000000050000000012"), Shape::Priority(5));
        assert_eq!(shape("queue-0FFFFFFFF0000000012"), Shape::Priority(-1));
        // Nine characters after the prefix: no sequence.
        assert_eq!(shape("queue-080000000"), Shape::Unknown);
        assert_eq!(
            shape("queue-17FFFFFFF0000000001"),
            Shape::Priority(i32::MAX)
        );
        // The sign does not match the value: not a priority.
        assert_eq!(shape("queue-0000000050000000012"), Shape::Unknown);
        assert_eq!(
            shape("queue-|18BCFE56800|0000000007"),
            Shape::Delay(1_700_000_000_000, "18BCFE56800".into())
        );
        assert_eq!(shape("queue-|job-1|0000000003"), Shape::Id("job-1".into()));
        assert_eq!(shape("queue-||0000000003"), Shape::Id(String::new()));
        for odd in [
            "queue-",
            "queue-12",
            "queue-|a|b|0000000001",
            "qn-0000000001",
            "",
            "queue-é0000000001",
            "queue-é12345670000000001",
        ] {
            assert_eq!(shape(odd), Shape::Unknown, "{odd}");
        }
        // More hex digits than a long holds: an id.
        assert!(matches!(
            shape("queue-|FFFFFFFFFFFFFFFFFF|0000000001"),
            Shape::Id(_)
        ));
    }

    #[test]
    fn detects_kinds_and_sorts_as_consumers_take() {
        let mut c = names(&[
            "queue-1000000050000000002",
            "queue-0FFFFFFFD0000000003",
            "queue-10000000A0000000001",
        ]);
        assert_eq!(detect(&c), Some(Layout::Items(Kind::Priority)));
        sort(Kind::Priority, &mut c);
        let p: Vec<_> = c
            .iter()
            .map(|n| encoded(Kind::Priority, n).priority.unwrap())
            .collect();
        assert_eq!(p, [-3, 5, 10]);

        let mut c = names(&[
            "queue-|0000000A|0000000001",
            "queue-|00000002|0000000002",
            "queue-0000000003",
        ]);
        assert_eq!(detect(&c), Some(Layout::Items(Kind::Delay)));
        sort(Kind::Delay, &mut c);
        assert_eq!(
            c,
            [
                "queue-0000000003",
                "queue-|00000002|0000000002",
                "queue-|0000000A|0000000001"
            ]
        );

        let mut c = names(&[
            "queue-|b|0000000002",
            "queue-|a|0000000003",
            "queue-|DEADBEEF|0000000001",
        ]);
        assert_eq!(detect(&c), Some(Layout::Items(Kind::Id)));
        sort(Kind::Id, &mut c);
        assert_eq!(encoded(Kind::Id, &c[0]).id.as_deref(), Some("DEADBEEF"));
        assert_eq!(encoded(Kind::Id, &c[2]).id.as_deref(), Some("a"));

        assert_eq!(
            detect(&names(&["qn-0000000001"])),
            Some(Layout::Items(Kind::Simple))
        );
        assert_eq!(
            detect(&names(&["queue-0000000001"])),
            Some(Layout::Items(Kind::Plain))
        );
        assert_eq!(
            detect(&names(&["queue-0f8fad5b-d9cb-469f-a165-70867728950e"])),
            Some(Layout::Shards)
        );
        assert_eq!(
            detect(&names(&["queue-0000000001", "lock-0000000002"])),
            None
        );
        assert_eq!(detect(&names(&["qn-0000000001", "queue-0000000002"])), None);
        assert_eq!(detect(&[]), None);
    }
}

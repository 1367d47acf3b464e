//! `latchkey inspect PATH`: the recipe nodes under a path, in queue order;
//! queues and service discovery have views of their own (`queue_view`,
//! `discovery_view`).

use std::time::{SystemTime, UNIX_EPOCH};

use latchkey_framework::{Client, ErrorCode, Stat};
use latchkey_recipes::{
    sort_key, LATCH_NAME, LEASE_NAME, LOCK_NAME, READ_LOCK_NAME, WRITE_LOCK_NAME,
};

use crate::{discovery_view, queue_view, zk_failure, Exit, Opts};

/// kazoo's `Lock` and `WriteLock` node name.
const KAZOO_LOCK: &str = "__lock__";
/// kazoo's `ReadLock` node name.
const KAZOO_READ: &str = "__rlock__";

/// The node names the recipes queue with, in the order the sort key is cut
/// at them (as the read-write lock's sorter cuts at each of its names).
/// No name occurs inside another's node: `__rlock__` does not contain
/// `__lock__`, nor `__lock__0…` `lock-`.
const NAMES: [&str; 7] = [
    READ_LOCK_NAME,
    WRITE_LOCK_NAME,
    LOCK_NAME,
    LATCH_NAME,
    LEASE_NAME,
    KAZOO_LOCK,
    KAZOO_READ,
];

/// Sorts as the recipes do: by sort key as text, stable.
fn sort_children(children: &mut [String]) {
    children.sort_by(|a, b| sort_key(a, &NAMES).cmp(sort_key(b, &NAMES)));
}

fn kind_of(name: &str) -> &'static str {
    if name.contains(WRITE_LOCK_NAME) {
        "write"
    } else if name.contains(READ_LOCK_NAME) || name.contains(KAZOO_READ) {
        "read"
    } else if name.contains(LEASE_NAME) {
        "lease"
    } else if name.contains(LATCH_NAME) {
        "latch"
    } else if name.contains(LOCK_NAME) || name.contains(KAZOO_LOCK) {
        "mutex"
    } else {
        "other"
    }
}

/// One node under PATH, as read.
struct Row {
    role: &'static str,
    kind: &'static str,
    path: String,
    name: String,
    stat: Stat,
    age_ms: i64,
    data: Vec<u8>,
}

/// The data as text, if it is printable (UTF-8 without control characters).
pub(crate) fn printable(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data)
        .ok()
        .filter(|s| !s.chars().any(char::is_control))
}

pub(crate) fn join(parent: &str, child: &str) -> String {
    format!("{}/{child}", parent.trim_end_matches('/'))
}

/// Children of `path` in queue order, or `None` if it does not exist.
fn sorted_children(client: &Client, path: &str) -> Result<Option<Vec<String>>, Exit> {
    match client.get_children(path) {
        Ok(mut c) => {
            sort_children(&mut c);
            Ok(Some(c))
        }
        Err(e) if e.is(ErrorCode::NoNode) => Ok(None),
        Err(e) => Err(zk_failure(&e, &format!("cannot list {path}"))),
    }
}

/// The kind of a node in a queue of `what`: in a read-write lock, every
/// node that is not a reader is a writer (kazoo's writers are `__lock__`).
fn kind_in(name: &str, what: &str) -> &'static str {
    match kind_of(name) {
        "read" => "read",
        _ if what == "read-write lock" => "write",
        kind => kind,
    }
}

/// Who holds: for a read-write lock, the readers before the first writer,
/// or the writer at the head; else the head of the queue.
fn roles(names: &[String], what: &str) -> Vec<&'static str> {
    let first_writer = names.iter().position(|n| kind_in(n, what) == "write");
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let holds = match what {
                "read-write lock" => match first_writer {
                    Some(0) => i == 0,
                    Some(w) => i < w && kind_in(n, what) == "read",
                    None => kind_in(n, what) == "read",
                },
                _ => i == 0,
            };
            match (holds, what) {
                (true, "leader latch") => "leader",
                (false, "leader latch") => "candidate",
                (true, _) => "holder",
                (false, _) => "waiter",
            }
        })
        .collect()
}

pub(crate) fn inspect(client: &Client, opts: &Opts) -> Result<(), Exit> {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let Some(children) = sorted_children(client, &opts.path)? else {
        return print_inspect(opts, "none", false, &[]);
    };
    if opts.leases.is_none() {
        if let Some(layout) = queue_view::detect(&children) {
            return queue_view::inspect(client, opts, layout, children);
        }
        // Instance ids are any names: probe unless every child is a
        // recipe's node.
        if children.iter().any(|c| kind_of(c) == "other")
            && discovery_view::inspect(client, opts, &children)?
        {
            return Ok(());
        }
    }
    // (role, full path) in queue order.
    let mut queue: Vec<(&'static str, String)> = Vec::new();
    let what;
    let semaphore_layout = children.iter().any(|c| c == "leases" || c == "locks")
        && !children.iter().any(|c| kind_of(c) != "other");
    if semaphore_layout || opts.leases.is_some() {
        // A semaphore: its leases, then those queued on its internal mutex
        // to add a lease. Which leases hold depends on the semaphore's
        // count, which the nodes do not tell: with `--leases N`, the first
        // N in queue order (a lease is added, then waits until at most N
        // are ahead of it and itself).
        what = "semaphore";
        let leases_path = join(&opts.path, "leases");
        let leases = sorted_children(client, &leases_path)?.unwrap_or_default();
        for (i, name) in leases.iter().enumerate() {
            let role = match opts.leases {
                Some(max) if i < max as usize => "holder",
                Some(_) => "waiter",
                None => "lease",
            };
            queue.push((role, join(&leases_path, name)));
        }
        let locks_path = join(&opts.path, "locks");
        for name in sorted_children(client, &locks_path)?.unwrap_or_default() {
            queue.push(("queued", join(&locks_path, &name)));
        }
    } else {
        what = if children
            .iter()
            .any(|c| matches!(kind_of(c), "read" | "write"))
        {
            "read-write lock"
        } else if children.iter().any(|c| kind_of(c) == "latch") {
            "leader latch"
        } else if children
            .iter()
            .any(|c| matches!(kind_of(c), "mutex" | "lease"))
        {
            "mutex"
        } else {
            "other"
        };
        for (role, name) in roles(&children, what).into_iter().zip(&children) {
            queue.push((role, join(&opts.path, name)));
        }
    }
    let mut rows = Vec::new();
    for (role, path) in queue {
        // A node may go between the listing and this read: then skip it.
        let (data, stat) = match client.get_data(&path) {
            Ok(v) => v,
            Err(e) if e.is(ErrorCode::NoNode) => continue,
            Err(e) => return Err(zk_failure(&e, &format!("cannot read {path}"))),
        };
        let name = path.rsplit('/').next().unwrap_or_default().to_owned();
        rows.push(Row {
            role,
            kind: kind_in(&name, what),
            age_ms: now_ms.saturating_sub(stat.ctime).max(0),
            path,
            name,
            stat,
            data,
        });
    }
    print_inspect(opts, what, true, &rows)
}

fn print_inspect(opts: &Opts, what: &str, exists: bool, rows: &[Row]) -> Result<(), Exit> {
    let mut out = String::new();
    if opts.json {
        out.push_str(&format!(
            "{{\"path\":{},\"exists\":{exists},\"recipe\":{},\"nodes\":[",
            json_str(&opts.path),
            json_str(what)
        ));
        for (i, r) in rows.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&format!(
                "{{\"position\":{i},\"role\":{},\"kind\":{},\"name\":{},\"path\":{},\
                 \"sequence\":{},\"session\":\"0x{:x}\",\"persistent\":{},\"age_ms\":{},\
                 \"data\":{},\"data_length\":{}}}",
                json_str(r.role),
                json_str(r.kind),
                json_str(&r.name),
                json_str(&r.path),
                json_str(sort_key(&r.name, &NAMES)),
                r.stat.ephemeral_owner,
                r.stat.ephemeral_owner == 0,
                r.age_ms,
                printable(&r.data).map_or("null".to_owned(), json_str),
                r.data.len()
            ));
        }
        out.push_str("]}\n");
    } else if !exists {
        out.push_str(&format!("{}: no such node\n", opts.path));
    } else if rows.is_empty() {
        out.push_str(&format!("{}: no recipe nodes\n", opts.path));
    } else {
        out.push_str(&format!("{} ({what}): {} node(s)\n", opts.path, rows.len()));
        let table: Vec<[String; 6]> = rows
            .iter()
            .map(|r| {
                [
                    r.role.to_owned(),
                    r.kind.to_owned(),
                    format!(
                        "0x{:x}{}",
                        r.stat.ephemeral_owner,
                        if r.stat.ephemeral_owner == 0 {
                            " (persistent)"
                        } else {
                            ""
                        }
                    ),
                    format!("{:.1}s", r.age_ms as f64 / 1000.0),
                    r.path.clone(),
                    match printable(&r.data) {
                        Some(s) => s.to_owned(),
                        None => format!("<{} bytes>", r.data.len()),
                    },
                ]
            })
            .collect();
        let header = ["ROLE", "KIND", "SESSION", "AGE", "NODE", "DATA"].map(String::from);
        let mut width = [0usize; 6];
        for line in std::iter::once(&header).chain(&table) {
            for (w, cell) in width.iter_mut().zip(line) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for line in std::iter::once(&header).chain(&table) {
            let mut text = String::new();
            for (i, (w, cell)) in width.iter().zip(line).enumerate() {
                match i {
                    3 => text.push_str(&format!("{cell:>w$}  ")),
                    5 => text.push_str(cell),
                    _ => text.push_str(&format!("{cell:<w$}  ")),
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
    }
    print!("{out}");
    Ok(())
}

/// `s` as a JSON string.
pub(crate) fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sorts_by_sequence_after_the_name() {
        let mut c = args(&[
            "_c_b-lock-0000000003",
            "lock-0000000001",
            "_c_a-lock-0000000002",
        ]);
        sort_children(&mut c);
        assert_eq!(
            c,
            args(&[
                "lock-0000000001",
                "_c_a-lock-0000000002",
                "_c_b-lock-0000000003"
            ])
        );
    }

    #[test]
    fn read_write_roles() {
        let c = args(&[
            "_c_a-__READ__01",
            "_c_b-__READ__02",
            "_c_c-__WRIT__03",
            "_c_d-__READ__04",
        ]);
        assert_eq!(
            roles(&c, "read-write lock"),
            ["holder", "holder", "waiter", "waiter"]
        );
    }

    #[test]
    fn kazoo_read_write_roles() {
        let c = args(&[
            "a__rlock__0000000002",
            "b__lock__0000000001",
            "c__rlock__0000000003",
        ]);
        let mut sorted = c.clone();
        sort_children(&mut sorted);
        assert_eq!(sorted, [c[1].as_str(), &c[0], &c[2]]);
        let what = "read-write lock";
        assert_eq!(roles(&sorted, what), ["holder", "waiter", "waiter"]);
        assert_eq!(kind_in(&sorted[0], what), "write");
        assert_eq!(kind_in(&sorted[1], what), "read");
        assert_eq!(kind_of("b__lock__0000000001"), "mutex");
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }
}

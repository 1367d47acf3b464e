//! `latchkey`: an operator's view of ZooKeeper recipe nodes.
//!
//! ```text
//! latchkey inspect PATH [--connect HOSTS] [--json]
//! latchkey watch PATH [--connect HOSTS] [--count N]
//! ```
//!
//! `inspect` reads the lock, lease and latch nodes under PATH, whichever
//! library made them (Curator and latchkey name them alike; kazoo's
//! `__lock__` and `__rlock__` nodes are read too), and
//! prints them in queue order with their owner session, age and data.
//! It only reads (`get_children`, `get_data`). `watch` prints each change
//! under PATH as it happens, one line per change, from a `CuratorCache`:
//! like any cache it tells the states it reads, so a node created and
//! deleted between two reads may show no line at all.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use latchkey_framework::{Client, Error, ErrorCode, ExponentialBackoffRetry, Stat};
use latchkey_recipes::{
    sort_key, CacheEvent, ChildData, CuratorCache, LATCH_NAME, LEASE_NAME, LOCK_NAME,
    READ_LOCK_NAME, WRITE_LOCK_NAME,
};

/// Bad usage (sysexits' EX_USAGE).
const EX_USAGE: i32 = 64;
/// ZooKeeper unreachable (EX_UNAVAILABLE).
const EX_UNAVAILABLE: i32 = 69;
/// ZooKeeper refused an operation (EX_SOFTWARE).
const EX_SOFTWARE: i32 = 70;

const USAGE: &str = "\
Usage: latchkey inspect PATH [--connect HOSTS] [--json]
       latchkey watch PATH [--connect HOSTS] [--count N]

Commands:
  inspect   print the lock, lease and latch nodes under PATH in queue order
            (holders first), with owner session, age and data; read-only
  watch     print each change under PATH as it happens, until Ctrl-C or
            N changes (--count N); nodes there at the start are shown
            as `exists`, then `initialized`; a change undone before the
            cache reads it may not show

Options:
  --connect HOSTS   ZooKeeper hosts, host:port[,host:port...][/chroot]
                    (default: $LATCHKEY_CONNECT, else 127.0.0.1:2181)
  --json            (inspect) print one JSON object instead of a table
  --count N         (watch) exit after N changes
  -h, --help        print this help
  -V, --version     print the version

Running a command under a lock is the `lock` program for now (see README).
";

/// A failure: the exit code and what to say on stderr.
struct Exit(i32, String);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match run(&args) {
        Ok(code) => code,
        Err(Exit(code, msg)) => {
            eprintln!("latchkey: {msg}");
            if code == EX_USAGE {
                eprintln!("Try 'latchkey --help'.");
            }
            code
        }
    };
    std::process::exit(code);
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
struct Opts {
    command: String,
    path: String,
    connect: String,
    json: bool,
    count: Option<u64>,
}

fn usage(msg: impl Into<String>) -> Exit {
    Exit(EX_USAGE, msg.into())
}

fn parse(args: &[String]) -> Result<Option<Opts>, Exit> {
    let mut command = None;
    let mut path = None;
    let mut connect = None;
    let mut json = false;
    let mut count = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "-V" | "--version" => {
                println!("latchkey {}", env!("CARGO_PKG_VERSION"));
                return Ok(None);
            }
            "--json" => json = true,
            "--connect" => connect = Some(it.next().ok_or_else(|| usage("--connect needs HOSTS"))?),
            "--count" => {
                let n = it.next().ok_or_else(|| usage("--count needs N"))?;
                count = Some(
                    n.parse::<u64>()
                        .map_err(|_| usage(format!("--count {n:?}: not a number")))?,
                );
            }
            a if a.starts_with('-') && a != "-" => {
                return Err(usage(format!("unknown option {a}")))
            }
            a if command.is_none() => command = Some(a.to_owned()),
            a if path.is_none() => path = Some(a.to_owned()),
            a => return Err(usage(format!("unexpected argument {a:?}"))),
        }
    }
    let command = command.ok_or_else(|| usage("no command given"))?;
    match command.as_str() {
        "inspect" | "watch" => {}
        "lock" => {
            return Err(usage(
                "`latchkey lock` is not there yet; use the `lock` program (cargo run -p latchkey-examples --bin lock)",
            ))
        }
        other => return Err(usage(format!("unknown command {other:?}"))),
    }
    let path = path.ok_or_else(|| usage(format!("{command} needs PATH")))?;
    if !path.starts_with('/') {
        return Err(usage(format!("PATH {path:?} must start with '/'")));
    }
    if json && command != "inspect" {
        return Err(usage("--json applies to inspect only"));
    }
    if count.is_some() && command != "watch" {
        return Err(usage("--count applies to watch only"));
    }
    let connect = connect
        .cloned()
        .or_else(|| std::env::var("LATCHKEY_CONNECT").ok())
        .unwrap_or_else(|| "127.0.0.1:2181".into());
    Ok(Some(Opts {
        command,
        path,
        connect,
        json,
        count,
    }))
}

fn run(args: &[String]) -> Result<i32, Exit> {
    let Some(opts) = parse(args)? else {
        if !args.iter().any(|a| a == "-V" || a == "--version") {
            print!("{USAGE}");
        }
        return Ok(0);
    };
    let client = connect(&opts.connect)?;
    let result = match opts.command.as_str() {
        "inspect" => inspect(&client, &opts),
        _ => watch(&client, &opts),
    };
    client.close();
    result.map(|()| 0)
}

fn connect(hosts: &str) -> Result<Client, Exit> {
    let timeout = Duration::from_secs(15);
    let client = Client::builder()
        .connect_string(hosts)
        .session_timeout(timeout)
        .connection_timeout(timeout)
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 3))
        .build()
        .map_err(|e| usage(format!("--connect {hosts:?}: {e}")))?;
    client
        .start()
        .map_err(|e| Exit(EX_UNAVAILABLE, format!("cannot start a client: {e}")))?;
    if !client.block_until_connected(timeout).unwrap_or(false) {
        client.close();
        return Err(Exit(
            EX_UNAVAILABLE,
            format!("cannot reach ZooKeeper at {hosts} within {timeout:?}"),
        ));
    }
    Ok(client)
}

fn zk_failure(e: &Error, what: &str) -> Exit {
    Exit(EX_SOFTWARE, format!("{what}: {e}"))
}

// ---------------------------------------------------------------------------
// inspect

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
fn printable(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data)
        .ok()
        .filter(|s| !s.chars().any(char::is_control))
}

fn join(parent: &str, child: &str) -> String {
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

fn inspect(client: &Client, opts: &Opts) -> Result<(), Exit> {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let Some(children) = sorted_children(client, &opts.path)? else {
        return print_inspect(opts, "none", false, &[]);
    };
    // (role, full path) in queue order.
    let mut queue: Vec<(&'static str, String)> = Vec::new();
    let what;
    if children.iter().any(|c| c == "leases" || c == "locks")
        && !children.iter().any(|c| kind_of(c) != "other")
    {
        // A semaphore: its leases, then those queued on its internal mutex
        // to add a lease. Which leases hold depends on the semaphore's
        // count, which the nodes do not tell.
        what = "semaphore";
        for (sub, role) in [("leases", "lease"), ("locks", "queued")] {
            let sub_path = join(&opts.path, sub);
            for name in sorted_children(client, &sub_path)?.unwrap_or_default() {
                queue.push((role, join(&sub_path, &name)));
            }
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
fn json_str(s: &str) -> String {
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

// ---------------------------------------------------------------------------
// watch

fn describe(node: &ChildData) -> String {
    let data = match printable(&node.data) {
        Some(s) if !s.is_empty() => format!(" data={}", json_str(s)),
        Some(_) => String::new(),
        None => format!(" data=<{} bytes>", node.data.len()),
    };
    format!(
        "{} session=0x{:x} version={}{data}",
        node.path, node.stat.ephemeral_owner, node.stat.version
    )
}

fn watch(client: &Client, opts: &Opts) -> Result<(), Exit> {
    let cache = CuratorCache::new(client, &opts.path)
        .map_err(|e| zk_failure(&e, &format!("cannot watch {}", opts.path)))?;
    let events = cache.listen();
    cache
        .start()
        .map_err(|e| zk_failure(&e, &format!("cannot watch {}", opts.path)))?;
    let mut initialized = false;
    let mut seen = 0u64;
    let mut stdout = std::io::stdout();
    while opts.count.is_none_or(|n| seen < n) {
        let Ok(event) = events.recv() else {
            break; // The cache closed.
        };
        // The nodes there at the start are told as "exists", not counted.
        let line = match event {
            CacheEvent::Initialized => {
                initialized = true;
                "initialized".to_owned()
            }
            CacheEvent::Created(n) if !initialized => format!("exists {}", describe(&n)),
            CacheEvent::Created(n) => format!("created {}", describe(&n)),
            CacheEvent::Changed { new, .. } => format!("changed {}", describe(&new)),
            CacheEvent::Deleted(n) => format!("deleted {}", describe(&n)),
        };
        if initialized && !line.starts_with("initialized") {
            seen += 1;
        }
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        if writeln!(stdout, "{stamp:.3} {line}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break; // stdout closed (a pipe's reader went).
        }
    }
    cache.close();
    Ok(())
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

    #[test]
    fn parses_and_refuses() {
        let o = parse(&args(&["inspect", "/a", "--json", "--connect", "h:1"]))
            .ok()
            .flatten()
            .unwrap();
        assert!(o.json && o.path == "/a" && o.connect == "h:1");
        assert!(parse(&args(&["watch", "/a", "--json"])).is_err());
        assert!(parse(&args(&["inspect", "a"])).is_err());
        assert!(parse(&args(&["lock", "/a"])).is_err());
    }
}

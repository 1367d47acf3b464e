//! `latchkey watch PATH`: each change under a path, from a `CuratorCache`.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use latchkey_framework::Client;
use latchkey_recipes::{CacheEvent, ChildData, CuratorCache};

use crate::inspect::{json_str, printable};
use crate::{zk_failure, Exit, Opts};

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

pub(crate) fn watch(client: &Client, opts: &Opts) -> Result<(), Exit> {
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
            // A kind of event this command does not know yet: not shown.
            _ => continue,
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

//! After every client closed: ephemeral nodes still under the checked
//! paths (sessions that ended without a clean close may keep theirs until
//! the server expires them, so this waits up to a bound for them to go), and
//! the shared counter's final value.

use std::thread;
use std::time::{Duration, Instant};

use latchkey_framework::{Client, ErrorCode, ExponentialBackoffRetry, RetryNTimes};
use latchkey_recipes::DistributedAtomicLong;

use crate::workload::Paths;

/// Ephemeral nodes left under `paths` once `within` has passed (or none
/// as soon as there are none).
pub fn remaining(connect: &str, paths: &Paths, within: Duration) -> Result<Vec<String>, String> {
    let client = direct_client(connect)?;
    let roots: Vec<&str> = paths
        .mutexes
        .iter()
        .chain([&paths.rw, &paths.sem, &paths.shared_sem, &paths.latch])
        .map(String::as_str)
        .collect();
    let deadline = Instant::now() + within;
    loop {
        let mut found = Vec::new();
        for root in &roots {
            ephemerals_under(&client, root, &mut found, 0)?;
        }
        if found.is_empty() || Instant::now() >= deadline {
            client.close();
            return Ok(found);
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// The value of the shared counter at `path` (0 if it was never created).
pub fn counter_value(connect: &str, path: &str) -> Result<i64, String> {
    let client = direct_client(connect)?;
    // The server may be a follower behind the leader: sync before reading.
    let value = client
        .sync(path)
        .and_then(|()| {
            DistributedAtomicLong::new(&client, path, RetryNTimes::new(0, Duration::ZERO))
        })
        .and_then(|c| c.get())
        .map(|v| v.post_value)
        .map_err(|e| format!("read the counter {path}: {e}"));
    client.close();
    value
}

/// A client straight to the servers, connected.
pub(crate) fn direct_client(connect: &str) -> Result<Client, String> {
    let client = Client::builder()
        .connect_string(connect)
        .session_timeout(Duration::from_secs(10))
        .connection_timeout(Duration::from_secs(5))
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 5))
        .build()
        .map_err(|e| format!("check client: {e}"))?;
    client.start().map_err(|e| format!("check client: {e}"))?;
    if !client
        .block_until_connected(Duration::from_secs(30))
        .unwrap_or(false)
    {
        return Err("check client did not connect".into());
    }
    Ok(client)
}

/// Lock trees are two levels deep (a semaphore's `leases/` and `locks/`).
fn ephemerals_under(
    client: &Client,
    path: &str,
    found: &mut Vec<String>,
    depth: u32,
) -> Result<(), String> {
    let children = match client.get_children(path) {
        Ok(c) => c,
        Err(e) if e.is(ErrorCode::NoNode) => return Ok(()),
        Err(e) => return Err(format!("list {path}: {e}")),
    };
    for child in children {
        let full = format!("{path}/{child}");
        match client.exists(&full) {
            Ok(Some(stat)) if stat.ephemeral_owner != 0 => {
                found.push(format!("{full} (session {:#x})", stat.ephemeral_owner))
            }
            Ok(Some(_)) if depth < 3 => ephemerals_under(client, &full, found, depth + 1)?,
            Ok(_) => {}
            Err(e) => return Err(format!("stat {full}: {e}")),
        }
    }
    Ok(())
}

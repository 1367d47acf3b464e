//! `PersistentNode` and `NodeCache`: one session keeps an ephemeral
//! "config" node present with a `PersistentNode` and changes its data; a
//! second session follows it with a `NodeCache` and prints each change.
//! Then the keeper's session is ended on the server: the node goes with
//! it, and the `PersistentNode` creates it again in the new session, with
//! its latest data. Exits 1 if the cache does not see the node come back
//! with that data.
//!
//! ```text
//! cargo run -p latchkey-examples --bin node_cache                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin node_cache -- --connect HOST:PORT
//! ```

use std::time::{Duration, Instant};

use latchkey_examples::setup::{new_client, run_example};
use latchkey_framework::CreateMode;
use latchkey_recipes::{ChildData, NodeCache, PersistentNode, Receiver};

/// The node kept present and cached.
const PATH: &str = "/examples/node-cache/config";
/// How long the cache may take to see a change.
const SEE_WITHIN: Duration = Duration::from_secs(20);

fn main() {
    run_example("node_cache", run);
}

fn run(connect: &str) -> Result<(), String> {
    let (keeper, follower) = (new_client(connect)?, new_client(connect)?);
    let err = |e: latchkey_framework::Error| e.to_string();

    let node = PersistentNode::new(&keeper, CreateMode::Ephemeral, false, PATH, b"version 1")
        .map_err(err)?;
    node.start().map_err(err)?;
    if !node.wait_for_initial_create(SEE_WITHIN).map_err(err)? {
        return Err(format!("{PATH} was not created within {SEE_WITHIN:?}"));
    }
    let cache = NodeCache::new(&follower, PATH).map_err(err)?;
    cache.start().map_err(err)?;
    let changes = cache.listen();
    println!("cached: {}", shown(&cache.current_data()));

    for version in 2..=3 {
        let data = format!("version {version}");
        node.set_data(data.as_bytes()).map_err(err)?;
        await_data(&changes, data.as_bytes())?;
    }

    // The server ends the keeper's session: its ephemeral node goes, and
    // the PersistentNode creates it again once the client has a new one.
    let old_session = keeper.session_id();
    keeper.expire_session_for_testing().map_err(err)?;
    println!("the keeper's session {old_session:#x} was ended on the server");
    await_data(&changes, b"version 3")?;
    let owner = cache
        .current_data()
        .map(|n| n.stat.ephemeral_owner)
        .unwrap_or_default();
    if owner == old_session || owner != keeper.session_id() {
        return Err(format!(
            "the node's owner is {owner:#x}, not the keeper's new session {:#x}",
            keeper.session_id()
        ));
    }
    println!("{PATH} is back, owned by the new session {owner:#x}");
    cache.close();
    node.close();
    Ok(())
}

/// Prints the cache's changes until it shows `want`; an error after
/// [`SEE_WITHIN`].
fn await_data(changes: &Receiver<Option<ChildData>>, want: &[u8]) -> Result<(), String> {
    let deadline = Instant::now() + SEE_WITHIN;
    loop {
        match changes.recv_deadline(deadline) {
            Ok(now) => {
                println!("cache: {}", shown(&now));
                if now.as_ref().is_some_and(|n| n.data == want) {
                    return Ok(());
                }
            }
            Err(_) => {
                return Err(format!(
                    "the cache did not show {:?} within {SEE_WITHIN:?}",
                    String::from_utf8_lossy(want)
                ))
            }
        }
    }
}

fn shown(node: &Option<ChildData>) -> String {
    match node {
        Some(n) => format!(
            "{:?} (version {})",
            String::from_utf8_lossy(&n.data),
            n.stat.version
        ),
        None => "no node".into(),
    }
}

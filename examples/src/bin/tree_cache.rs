//! Curator's `TreeCacheExample`, ported: prints the client's connection
//! states and every event of a `TreeCache` of the whole tree (`/`,
//! without data) until a line (or the end) of standard input. Unlike
//! Curator's, it waits for the cache's first full read (`INITIALIZED`,
//! 10 s at most) before reading the input, so that a run with no input
//! still shows the tree.
//!
//! ```text
//! cargo run -p latchkey-examples --bin tree_cache                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin tree_cache -- --connect HOST:PORT
//! ```

use std::io::BufRead;
use std::time::Duration;

use latchkey_examples::setup::{new_client, run_example};
use latchkey_recipes::{TreeCache, TreeCacheEvent};

fn main() {
    run_example("tree_cache", run);
}

fn run(connect: &str) -> Result<(), String> {
    let client = new_client(connect)?;
    let states = client.listen();
    std::thread::spawn(move || {
        for state in states {
            println!("state={state:?}");
        }
    });
    let err = |e: latchkey_framework::Error| e.to_string();
    let cache = TreeCache::builder(&client, "/")
        .cache_data(false)
        .build()
        .map_err(err)?;
    let events = cache.listen();
    let (initialized, on_initialized) = std::sync::mpsc::channel();
    let printer = std::thread::spawn(move || {
        for event in events {
            let (kind, node) = match &event {
                TreeCacheEvent::NodeAdded(n) => ("NODE_ADDED", Some(n)),
                TreeCacheEvent::NodeUpdated { new, .. } => ("NODE_UPDATED", Some(new)),
                TreeCacheEvent::NodeRemoved(n) => ("NODE_REMOVED", Some(n)),
                TreeCacheEvent::Initialized => ("INITIALIZED", None),
                TreeCacheEvent::ConnectionSuspended => ("CONNECTION_SUSPENDED", None),
                TreeCacheEvent::ConnectionReconnected => ("CONNECTION_RECONNECTED", None),
                TreeCacheEvent::ConnectionLost => ("CONNECTION_LOST", None),
                // The enum is non-exhaustive: a later version may tell more.
                _ => continue,
            };
            match node {
                Some(n) => println!("type={kind} path={}", n.path),
                None => println!("type={kind}"),
            }
            if event == TreeCacheEvent::Initialized {
                let _ = initialized.send(());
            }
        }
    });
    cache.start().map_err(err)?;
    on_initialized
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| "the tree was not read within 10 s".to_owned())?;
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    cache.close();
    let _ = printer.join();
    Ok(())
}

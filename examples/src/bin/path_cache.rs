//! Curator's `PathCacheExample`, ported: a `PathChildrenCache` of
//! `/example/cache` prints each child added, changed and removed while
//! commands read from standard input change the children:
//!
//! ```text
//! set <name> <value>   create or change the child <name>
//! remove <name>        delete it
//! list                 print the cache's children
//! help                 print this
//! quit                 end (as does the end of the input)
//! ```
//!
//! Unlike Curator's, which sleeps a second after each command for the
//! listener's output to catch up, each command waits until the cache has
//! seen its change (10 s at most; exits 1 otherwise).
//!
//! ```text
//! cargo run -p latchkey-examples --bin path_cache                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin path_cache -- --connect HOST:PORT
//! ```

use std::io::BufRead;
use std::time::{Duration, Instant};

use latchkey_examples::setup::{new_client, run_example};
use latchkey_framework::{paths, Client, ErrorCode};
use latchkey_recipes::{PathChildrenCache, PathChildrenCacheEvent};

const PATH: &str = "/example/cache";
/// How long the cache may take to see a command's change.
const SEE_WITHIN: Duration = Duration::from_secs(10);

fn main() {
    run_example("path_cache", run);
}

fn run(connect: &str) -> Result<(), String> {
    let client = new_client(connect)?;
    let err = |e: latchkey_framework::Error| e.to_string();
    // In this example the data is cached; that is optional.
    let cache = PathChildrenCache::new(&client, PATH, true).map_err(err)?;
    let events = cache.listen();
    cache.start().map_err(err)?;
    let printer = std::thread::spawn(move || {
        for event in events {
            match event {
                PathChildrenCacheEvent::ChildAdded(n) => {
                    println!("Node added: {}", paths::get_node_from_path(&n.path))
                }
                PathChildrenCacheEvent::ChildUpdated(n) => {
                    println!("Node changed: {}", paths::get_node_from_path(&n.path))
                }
                PathChildrenCacheEvent::ChildRemoved(n) => {
                    println!("Node removed: {}", paths::get_node_from_path(&n.path))
                }
                _ => {}
            }
        }
    });
    print_help();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            [] => {}
            ["help" | "?"] => print_help(),
            ["q" | "quit"] => break,
            ["set", name, value] => set_value(&client, &cache, name, value)?,
            ["remove", name] => remove(&client, &cache, name)?,
            ["list"] => list(&cache),
            _ => println!("syntax error: {line}"),
        }
    }
    cache.close();
    let _ = printer.join();
    Ok(())
}

fn print_help() {
    println!("An example of using PathChildrenCache. This example is driven by entering commands at the prompt:");
    println!("set <name> <value>: Adds or updates a node with the given name");
    println!("remove <name>: Deletes the node with the given name");
    println!("list: List the nodes/values in the cache");
    println!("quit: Quit the example");
}

fn child(name: &str) -> Result<String, String> {
    let path = paths::make_path(PATH, name);
    if paths::get_node_from_path(&path) != name {
        return Err(format!("invalid node name: {name}"));
    }
    Ok(path)
}

fn set_value(
    client: &Client,
    cache: &PathChildrenCache,
    name: &str,
    value: &str,
) -> Result<(), String> {
    let path = child(name)?;
    let written = match client.set_data(&path, value.as_bytes(), None) {
        Err(e) if e.is(ErrorCode::NoNode) => client
            .create()
            .creating_parents_if_needed()
            .for_path_with_stat(&path, value.as_bytes())
            .map(|(_, stat)| stat),
        other => other,
    }
    .map_err(|e| e.to_string())?;
    wait_for(&format!("{path} = {value}"), || {
        cache
            .current_data_for(&path)
            .is_some_and(|n| n.stat.mzxid >= written.mzxid)
    })
}

fn remove(client: &Client, cache: &PathChildrenCache, name: &str) -> Result<(), String> {
    let path = child(name)?;
    match client.delete().for_path(&path) {
        Err(e) if e.is(ErrorCode::NoNode) => {}
        other => other.map_err(|e| e.to_string())?,
    }
    wait_for(&format!("{path} removed"), || {
        cache.current_data_for(&path).is_none()
    })
}

fn list(cache: &PathChildrenCache) {
    let nodes = cache.current_data();
    if nodes.is_empty() {
        println!("* empty *");
    }
    for node in nodes {
        println!(
            "{} = {}",
            paths::get_node_from_path(&node.path),
            String::from_utf8_lossy(&node.data)
        );
    }
}

/// Waits until the cache shows what a command did.
fn wait_for(what: &str, seen: impl Fn() -> bool) -> Result<(), String> {
    let started = Instant::now();
    while !seen() {
        if started.elapsed() > SEE_WITHIN {
            return Err(format!(
                "the cache did not see {what} within {SEE_WITHIN:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

//! Curator's `CuratorCacheExample`, ported: a `CuratorCache` of
//! `/examples/cache` prints every event while another session makes random
//! changes under it (creates, data changes, deletes). Then it checks the
//! cache against ZooKeeper and exits 1 if they differ. A `GroupMember` per
//! session shows who is taking part.
//!
//! ```text
//! cargo run -p latchkey-examples --bin cache                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin cache -- --connect HOST:PORT
//! ```

use std::time::{Duration, Instant};

use latchkey_examples::setup::{new_client, run_example};
use latchkey_framework::{Client, ErrorCode};
use latchkey_recipes::{CacheEvent, CuratorCache, GroupMember};

/// The cached subtree.
const PATH: &str = "/examples/cache";
/// The group the two sessions join.
const GROUP: &str = "/examples/cache-members";
/// How many random changes.
const CHANGES: usize = 100;
/// How long the cache may take to catch up with the last change.
const CATCH_UP: Duration = Duration::from_secs(10);

fn main() {
    run_example("cache", run);
}

fn run(connect: &str) -> Result<(), String> {
    let (reader, writer) = (new_client(connect)?, new_client(connect)?);
    let err = |e: latchkey_framework::Error| e.to_string();
    // Start from an empty subtree, as the Java example does.
    match writer.delete().deleting_children_if_needed().for_path(PATH) {
        Err(e) if !e.is(ErrorCode::NoNode) => return Err(e.to_string()),
        _ => {}
    }
    let members = [("reader", &reader), ("writer", &writer)]
        .into_iter()
        .map(|(id, client)| {
            let member = GroupMember::new(client, GROUP, id, b"cache example").map_err(err)?;
            member.start().map_err(err)?;
            member.wait_joined(Duration::from_secs(10)).map_err(err)?;
            Ok(member)
        })
        .collect::<Result<Vec<_>, String>>()?;
    // Answered from the member's cache of the group: the other member
    // shows up as soon as its watch tells (5 s at most here).
    let seen = std::time::Instant::now();
    while members[0].current_members().len() < members.len()
        && seen.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let ids: Vec<String> = members[0].current_members().into_keys().collect();
    println!("members of {GROUP}: {ids:?}");

    let cache = CuratorCache::new(&reader, PATH).map_err(err)?;
    cache.start().map_err(err)?;
    let events = cache.listen();
    let printer = std::thread::spawn(move || {
        for event in events {
            match event {
                CacheEvent::Created(n) => println!("created {} = {:?}", n.path, text(&n.data)),
                CacheEvent::Changed { old, new } => println!(
                    "changed {} from {:?} to {:?}",
                    new.path,
                    text(&old.data),
                    text(&new.data)
                ),
                CacheEvent::Deleted(n) => println!("deleted {}", n.path),
                // `Initialized`, and any kind of event a later version adds.
                _ => {}
            }
        }
    });

    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..CHANGES {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let path = format!("{PATH}/{}", seed % 10);
        let data = format!("{}", seed % 1000);
        change(&writer, &path, data.as_bytes(), seed.is_multiple_of(3)).map_err(err)?;
    }
    let started = Instant::now();
    let server = tree(&writer).map_err(err)?;
    while cached(&cache) != server {
        if started.elapsed() > CATCH_UP {
            return Err(format!(
                "the cache did not catch up within {CATCH_UP:?}:\ncache  {:?}\nserver {server:?}",
                cached(&cache)
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "the cache matches ZooKeeper: {} nodes under {PATH}",
        server.len()
    );
    cache.close();
    let _ = printer.join();
    Ok(())
}

/// Creates, changes or (when `delete`) deletes the node at `path`.
fn change(
    client: &Client,
    path: &str,
    data: &[u8],
    delete: bool,
) -> latchkey_framework::Result<()> {
    if delete {
        return match client.delete().for_path(path) {
            Err(e) if e.is(ErrorCode::NoNode) => Ok(()),
            other => other,
        };
    }
    match client.set_data(path, data, None) {
        Err(e) if e.is(ErrorCode::NoNode) => client
            .create()
            .creating_parents_if_needed()
            .for_path(path, data)
            .map(|_| ()),
        other => other.map(|_| ()),
    }
}

/// The subtree on the server, path and data, sorted.
fn tree(client: &Client) -> latchkey_framework::Result<Vec<(String, Vec<u8>)>> {
    let mut nodes = vec![(PATH.to_owned(), client.get_data(PATH)?.0)];
    let mut children = client.get_children(PATH)?;
    children.sort();
    for child in children {
        let path = format!("{PATH}/{child}");
        nodes.push((path.clone(), client.get_data(&path)?.0));
    }
    nodes.sort();
    Ok(nodes)
}

fn cached(cache: &CuratorCache) -> Vec<(String, Vec<u8>)> {
    cache
        .entries()
        .into_iter()
        .map(|n| (n.path, n.data))
        .collect()
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

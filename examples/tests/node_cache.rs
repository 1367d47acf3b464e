//! Runs the `node_cache` example as a user would, with its embedded
//! ZooKeeper: the cache must follow the data changes and see the node come
//! back in the keeper's new session.

mod common;

#[test]
fn the_node_cache_example_sees_the_node_come_back() {
    let stdout = common::run_to_end(env!("CARGO_BIN_EXE_node_cache"));
    for line in [
        "cache: \"version 2\"",
        "cache: \"version 3\"",
        "cache: no node",
        "is back, owned by the new session",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
}

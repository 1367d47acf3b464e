//! Runs the `tree_cache` example as a user would, with its embedded
//! ZooKeeper and no input: it must print the tree's nodes, then
//! `INITIALIZED`.

mod common;

#[test]
fn the_tree_cache_example_prints_the_tree() {
    let stdout = common::run_to_end(env!("CARGO_BIN_EXE_tree_cache"));
    for want in [
        "type=NODE_ADDED path=/\n",
        "type=NODE_ADDED path=/zookeeper\n",
        "type=INITIALIZED",
    ] {
        assert!(stdout.contains(want), "{want:?} in {stdout}");
    }
    let root = stdout.find("path=/\n").unwrap();
    assert!(root < stdout.find("path=/zookeeper\n").unwrap(), "{stdout}");
}

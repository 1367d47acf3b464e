//! Runs the `cache` example as a user would, with its embedded ZooKeeper:
//! it must print events and end with the cache matching ZooKeeper.

mod common;

#[test]
fn the_cache_example_ends_matching_zookeeper() {
    let stdout = common::run_to_end(env!("CARGO_BIN_EXE_cache"));
    assert!(stdout.contains("members of"), "{stdout}");
    assert!(stdout.contains("created /examples/cache/"), "{stdout}");
    assert!(stdout.contains("the cache matches ZooKeeper"), "{stdout}");
}

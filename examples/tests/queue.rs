//! Runs the `queue` example as a user would, with its embedded ZooKeeper:
//! the job of the worker that dies is done by another, every job once.

mod common;

#[test]
fn the_queue_example_loses_no_job_when_a_worker_dies() {
    let stdout = common::run_to_end(env!("CARGO_BIN_EXE_queue"));
    for line in [
        "worker 0 dies in the middle of job-",
        "all 30 jobs done exactly once",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("was done by worker 0"), "{stdout}");
}

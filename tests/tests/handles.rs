//! Recipe handles shared between threads and cloned, as the crate docs
//! ("Sharing a recipe between threads") describe. That every handle is
//! `Send + Sync` is checked when the recipes crate compiles; these tests
//! check what a clone and a shared handle mean at run time.

mod common;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use latchkey_framework::RetryNTimes;
use latchkey_recipes::{DistributedAtomicLong, InterProcessSemaphoreMutex, LeaderLatch};

const SESSION: Duration = Duration::from_secs(10);

/// A clone of an `InterProcessSemaphoreMutex` is the same lock object: a
/// lock taken through one is held by the other, which may release it, on
/// another thread.
#[test]
fn semaphore_mutex_clones_share_one_lock() {
    let client = connect(&shared_server().connect_string(), SESSION);
    let path = unique("/handles-semaphore-mutex");
    let mutex = InterProcessSemaphoreMutex::new(&client, &path).unwrap();
    let clone = mutex.clone();
    assert!(mutex.acquire_timeout(Duration::from_secs(10)).unwrap());
    assert!(clone.is_acquired_in_this_process());
    // One lease between them: the clone cannot take it again.
    assert!(!clone.acquire_timeout(Duration::from_millis(200)).unwrap());
    thread::spawn(move || clone.release())
        .join()
        .unwrap()
        .unwrap();
    assert!(!mutex.is_acquired_in_this_process());
    // Released for good: another process's lock gets it.
    let other = InterProcessSemaphoreMutex::new(&client, &path).unwrap();
    assert!(other.acquire_timeout(Duration::from_secs(10)).unwrap());
    other.release().unwrap();
    client.close();
}

/// Clones of a `DistributedAtomicLong` on several threads count one number.
#[test]
fn atomic_long_clones_count_one_number() {
    let client = connect(&shared_server().connect_string(), SESSION);
    let path = unique("/handles-atomic");
    let counter = DistributedAtomicLong::new(
        &client,
        &path,
        RetryNTimes::new(100, Duration::from_millis(5)),
    )
    .unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let counter = counter.clone();
            thread::spawn(move || {
                (0..5)
                    .filter(|_| counter.increment().unwrap().succeeded)
                    .count()
            })
        })
        .collect();
    let done: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(counter.get().unwrap().post_value, done as i64);
    assert_eq!(done, 20, "some increments gave up");
    client.close();
}

/// A `LeaderLatch` shared with an `Arc`: another thread sees its
/// leadership, and a close through one `Arc` closes it for all.
#[test]
fn a_latch_shared_with_an_arc() {
    let client = connect(&shared_server().connect_string(), SESSION);
    let path = unique("/handles-latch");
    let latch = Arc::new(LeaderLatch::new(&client, &path).unwrap());
    latch.start().unwrap();
    let shared = Arc::clone(&latch);
    let leads = thread::spawn(move || shared.await_leadership(Duration::from_secs(10)))
        .join()
        .unwrap()
        .unwrap();
    assert!(leads);
    latch.close().unwrap();
    assert!(!latch.has_leadership());
    wait_until(
        Duration::from_secs(10),
        || sorted_children(&client, &path).is_empty(),
        || format!("latch nodes left: {:?}", sorted_children(&client, &path)),
    );
    client.close();
}

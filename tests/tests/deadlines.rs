//! Every timed recipe call returns by its deadline (plus a small slack),
//! retries and reconnects included, whether ZooKeeper is blackholed,
//! refusing connections or stopped.

mod common;

use crossbeam_channel::unbounded;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{patient_client, unique};
use latchkey_framework::Client;
use latchkey_recipes::{
    CancelToken, InterProcessMultiLock, InterProcessMutex, InterProcessReadWriteLock,
    InterProcessSemaphoreMutex, InterProcessSemaphoreV2, REQUEST_GRACE,
};
use latchkey_test::{FaultProxy, TestingServer};

/// What a timed call may overrun its deadline by: the documented few
/// milliseconds, with room for a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(300);

/// When a call with `timeout` must have returned by: its timeout, or the
/// grace its requests get when the timeout is shorter, plus [`SLACK`].
fn allowed(timeout: Duration) -> Duration {
    timeout.max(REQUEST_GRACE) + SLACK
}

/// The recipes under test, built while ZooKeeper was reachable.
struct Recipes {
    mutex: InterProcessMutex,
    rw: InterProcessReadWriteLock,
    sem: InterProcessSemaphoreV2,
    sem_mutex: InterProcessSemaphoreMutex,
    multi: InterProcessMultiLock,
}

impl Recipes {
    fn new(client: &Client) -> Recipes {
        let base = unique("/deadlines");
        let p = |name: &str| format!("{base}/{name}");
        Recipes {
            mutex: InterProcessMutex::new(client, &p("mutex")).unwrap(),
            rw: InterProcessReadWriteLock::new(client, &p("rw")).unwrap(),
            sem: InterProcessSemaphoreV2::new(client, &p("sem"), 2).unwrap(),
            sem_mutex: InterProcessSemaphoreMutex::new(client, &p("sem-mutex")).unwrap(),
            multi: InterProcessMultiLock::from_paths(client, &[&p("m1"), &p("m2")]).unwrap(),
        }
    }

    /// Every timed call with `timeout`, all at once, each on a thread of
    /// its own (they use different paths), so that a call that never
    /// returns fails the test after 30 s instead of hanging it. Returns
    /// (call, how long it took) for each; panics if a call took a lock.
    fn time_every_call(self: &Arc<Self>, timeout: Duration) -> Vec<(&'static str, Duration)> {
        type Call = (&'static str, fn(&Recipes, Duration) -> bool);
        let calls: [Call; 9] = [
            ("mutex.acquire_timeout", |r, t| {
                r.mutex.acquire_timeout(t).unwrap_or(false)
            }),
            ("mutex.try_lock_for", |r, t| {
                matches!(r.mutex.try_lock_for(t), Ok(Some(_)))
            }),
            ("mutex.acquire_cancellable", |r, t| {
                r.mutex
                    .acquire_cancellable(t, &CancelToken::new())
                    .unwrap_or(false)
            }),
            ("read_lock.try_lock_for", |r, t| {
                matches!(r.rw.read_lock().try_lock_for(t), Ok(Some(_)))
            }),
            ("write_lock.try_lock_for", |r, t| {
                matches!(r.rw.write_lock().try_lock_for(t), Ok(Some(_)))
            }),
            ("semaphore.acquire_timeout", |r, t| {
                matches!(r.sem.acquire_timeout(t), Ok(Some(_)))
            }),
            ("semaphore.acquire_many_timeout", |r, t| {
                matches!(r.sem.acquire_many_timeout(2, t), Ok(Some(_)))
            }),
            ("semaphore_mutex.try_lock_for", |r, t| {
                matches!(r.sem_mutex.try_lock_for(t), Ok(Some(_)))
            }),
            ("multi_lock.try_lock_for", |r, t| {
                matches!(r.multi.try_lock_for(t), Ok(Some(_)))
            }),
        ];
        let (tx, rx) = unbounded();
        for (name, call) in calls {
            let (tx, recipes) = (tx.clone(), Arc::clone(self));
            std::thread::spawn(move || {
                let started = Instant::now();
                let took = call(&recipes, timeout);
                let _ = tx.send((name, took, started.elapsed()));
            });
        }
        let give_up = Instant::now() + Duration::from_secs(30);
        let mut timings = Vec::new();
        while timings.len() < calls.len() {
            let Ok((name, took, elapsed)) = rx.recv_deadline(give_up) else {
                panic!("calls with a {timeout:?} timeout did not return within 30 s; these did: {timings:?}");
            };
            assert!(!took, "{name} took a lock with ZooKeeper unreachable");
            timings.push((name, elapsed));
        }
        timings
    }
}

/// Runs every timed call with a zero and a 1.5 s timeout and checks that
/// each returned in time (see [`allowed`]).
fn assert_deadlines_hold(what: &str, recipes: &Arc<Recipes>, client: &Client) {
    for timeout in [Duration::ZERO, Duration::from_millis(1500)] {
        let late: Vec<String> = recipes
            .time_every_call(timeout)
            .into_iter()
            .filter(|(_, took)| *took > allowed(timeout))
            .map(|(name, took)| format!("{name}: {took:?}"))
            .collect();
        assert!(
            late.is_empty(),
            "with ZooKeeper {what}, calls with a {timeout:?} timeout took longer than {:?}: \
             {late:?}\nclient states: {:?}",
            allowed(timeout),
            client.state_history()
        );
    }
}

#[test]
fn timed_recipe_calls_keep_their_deadline_when_zookeeper_is_unreachable() {
    let mut server = TestingServer::start().expect("start ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    // A long connection timeout and a policy that never gives up: without
    // deadlines each call would wait seconds per attempt, for ever.
    let client = patient_client(&proxy);
    let recipes = Arc::new(Recipes::new(&client));

    proxy.pause();
    assert_deadlines_hold("blackholed", &recipes, &client);

    proxy.resume();
    proxy.set_refuse(true);
    proxy.cut();
    assert_deadlines_hold("refusing connections", &recipes, &client);

    proxy.set_refuse(false);
    server.stop().expect("stop ZooKeeper");
    assert_deadlines_hold("stopped", &recipes, &client);
    client.close();
}

//! A lock-safe work queue: a producer puts 30 jobs on a `DistributedQueue`
//! (Curator's node names and framing, so Java producers and workers could
//! share it), three workers, each with a session of its own, take them.
//! One worker dies in the middle of a job (its session ends): the job was
//! locked, not removed, and another worker does it. Exits 1 unless every
//! job is done exactly once.
//!
//! ```text
//! cargo run -p latchkey-examples --bin queue                      # embedded ZooKeeper
//! cargo run -p latchkey-examples --bin queue -- --connect HOST:PORT
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use latchkey_examples::setup::{new_client, run_example};
use latchkey_recipes::{DistributedQueue, QueueBuilder, StringSerializer};

/// The queue, and the lock nodes of the jobs being done.
const QUEUE: &str = "/examples/queue/jobs";
const LOCKS: &str = "/examples/queue/locks";
const JOBS: usize = 30;
/// The job during which the doomed worker dies.
const FATAL_JOB: usize = 5;
/// How long all the jobs may take.
const DONE_WITHIN: Duration = Duration::from_secs(30);

fn main() {
    run_example("queue", run);
}

fn run(connect: &str) -> Result<(), String> {
    let err = |e: latchkey_framework::Error| e.to_string();
    let producer_client = new_client(connect)?;
    // A run against a shared server starts from an empty queue.
    for path in [QUEUE, LOCKS] {
        let _ = producer_client
            .delete()
            .deleting_children_if_needed()
            .for_path(path);
    }
    let producer = QueueBuilder::new(&producer_client, StringSerializer, QUEUE)
        .build_queue()
        .map_err(err)?;
    producer.start().map_err(err)?;
    let jobs: Vec<String> = (0..JOBS).map(|i| format!("job-{i:02}")).collect();
    producer.put_multi(&jobs[..3]).map_err(err)?; // one node, three jobs
    for job in &jobs[3..] {
        producer.put(job).map_err(err)?; // in ZooKeeper when this returns
    }
    println!("put {JOBS} jobs on {QUEUE}");

    // Who did which job, in order.
    let done: Arc<Mutex<Vec<(usize, String)>>> = Arc::default();
    let (dying_tx, dying) = std::sync::mpsc::sync_channel::<String>(1);
    // The dead worker's thread stays in its job until this goes.
    let (bury, buried) = std::sync::mpsc::channel::<()>();
    let buried = Arc::new(Mutex::new(buried));
    let mut workers = Vec::new();
    for id in 0..3 {
        let client = new_client(connect)?;
        let (done, dying_tx, buried) = (done.clone(), dying_tx.clone(), buried.clone());
        let started = Arc::new(Mutex::new(0usize));
        let queue: DistributedQueue<String> = QueueBuilder::new(&client, StringSerializer, QUEUE)
            .consumer(move |job: String| {
                let n = {
                    let mut started = started.lock().unwrap();
                    *started += 1;
                    *started
                };
                if id == 0 && n == FATAL_JOB {
                    // Dies in the middle of this job: its session ends
                    // while it holds the job's lock node.
                    let _ = dying_tx.send(job);
                    let _ = buried.lock().unwrap().recv_timeout(Duration::from_secs(60));
                    return Err("dead".into());
                }
                std::thread::sleep(Duration::from_millis(20)); // the work
                done.lock().unwrap().push((id, job));
                Ok(())
            })
            .lock_path(LOCKS)
            .build_queue()
            .map_err(err)?;
        queue.start().map_err(err)?;
        workers.push((client, queue));
    }

    let lost = dying
        .recv_timeout(DONE_WITHIN)
        .map_err(|_| "worker 0 never got to its fatal job".to_string())?;
    println!("worker 0 dies in the middle of {lost}");
    workers[0].0.close(); // the session ends: its lock node goes, the job stays

    let deadline = Instant::now() + DONE_WITHIN;
    while done.lock().unwrap().len() < JOBS && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let done = done.lock().unwrap().clone();
    let mut times: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (worker, job) in &done {
        times.entry(job.as_str()).or_default().push(*worker);
    }
    for id in 0..3 {
        println!(
            "worker {id} did {} jobs",
            done.iter().filter(|(w, _)| *w == id).count()
        );
    }
    if let Some((worker, _)) = done.iter().find(|(_, job)| *job == lost) {
        println!("{lost} was done by worker {worker}");
    }
    drop(bury);
    for (_, queue) in &workers {
        queue.close();
    }
    let missing: Vec<&String> = jobs
        .iter()
        .filter(|j| !times.contains_key(j.as_str()))
        .collect();
    let twice: Vec<_> = times.iter().filter(|(_, w)| w.len() > 1).collect();
    if !missing.is_empty() || !twice.is_empty() {
        return Err(format!(
            "missing jobs {missing:?}, jobs done twice {twice:?}"
        ));
    }
    println!("all {JOBS} jobs done exactly once");
    Ok(())
}

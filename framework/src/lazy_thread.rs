//! A thread that starts with its first job.
//!
//! A client has work that only some clients ever have: state listeners,
//! watch callbacks, guaranteed deletes. Each runs on a thread of its own so
//! that user code cannot hold up the session, but a session holding locks
//! with none of it needs none of those threads. Starting each at its first
//! job keeps such a session on the process' engine and timer threads
//! alone.

use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::Mutex;

/// A queue of jobs and the thread that runs them in order, started when the
/// first job is queued. The thread ends once [`LazyThread::close`] was
/// called (or this is dropped) and every queued job has run.
pub(crate) struct LazyThread<T: Send + 'static> {
    name: &'static str,
    run: fn(T),
    /// `None` once closed.
    tx: Mutex<Option<Sender<T>>>,
    /// The thread's end of the queue until the thread starts.
    idle: Mutex<Option<Receiver<T>>>,
}

impl<T: Send + 'static> LazyThread<T> {
    /// A thread named `name` that will call `run` with each job.
    pub(crate) fn new(name: &'static str, run: fn(T)) -> Self {
        let (tx, rx) = unbounded();
        LazyThread {
            name,
            run,
            tx: Mutex::new(Some(tx)),
            idle: Mutex::new(Some(rx)),
        }
    }

    /// Queues `job`, starting the thread if it is the first; false (and
    /// the job dropped) once closed.
    pub(crate) fn send(&self, job: T) -> bool {
        let Some(tx) = self.tx.lock().clone() else {
            return false;
        };
        if tx.send(job).is_err() {
            return false;
        }
        self.start();
        true
    }

    fn start(&self) {
        let mut idle = self.idle.lock();
        let Some(rx) = idle.take() else { return };
        let (run, thread_rx) = (self.run, rx.clone());
        let spawned = crate::sched::spawn(self.name, move || thread_rx.iter().for_each(run));
        if let Err(e) = spawned {
            // Out of threads: run what is queued here rather than lose it,
            // and try the thread again with the next job.
            log::error!(
                "cannot start thread {}: {e}; running its job in place",
                self.name
            );
            let pending: Vec<T> = rx.try_iter().collect();
            *idle = Some(rx);
            drop(idle);
            pending.into_iter().for_each(self.run);
        }
    }

    /// Takes no more jobs; a started thread runs those queued, then ends.
    pub(crate) fn close(&self) {
        self.tx.lock().take();
        self.idle.lock().take();
    }

    /// Whether the thread has been started.
    #[cfg(test)]
    pub(crate) fn is_started(&self) -> bool {
        self.idle.lock().is_none() && self.tx.lock().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    static RAN: AtomicUsize = AtomicUsize::new(0);

    fn count(n: usize) {
        RAN.fetch_add(n, Ordering::SeqCst);
    }

    #[test]
    fn starts_with_the_first_job_and_runs_every_job() {
        let t = LazyThread::new("latchkey-test-lazy", count);
        assert!(!t.is_started(), "no thread before a job");
        assert!(t.send(1) && t.send(2));
        assert!(t.is_started());
        let deadline = Instant::now() + Duration::from_secs(10);
        while RAN.load(Ordering::SeqCst) < 3 {
            assert!(Instant::now() < deadline, "the jobs did not run");
            std::thread::sleep(Duration::from_millis(1));
        }
        t.close();
        assert!(!t.send(4), "closed: no more jobs");
    }
}

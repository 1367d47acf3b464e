//! Time, as the library keeps it: each live connection's clocks (when to
//! ping, when silence ends it), which the engine folds into its poll's
//! timeout, and the process' one timer thread for every session's state
//! (connection states, Curator's simulated expiry, retries after a
//! refused auth). No session has a thread of its own that wakes to look
//! at the time: an idle session costs its pings and nothing else.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// The longest an idle connection goes without a ping.
const MAX_PING_INTERVAL: Duration = Duration::from_secs(10);

/// A live connection's clocks, in the engine's hands.
pub(crate) struct Clocks {
    pub last_recv: Instant,
    pub last_send: Instant,
    /// No reply for this long (2/3 of the session timeout) drops the connection.
    pub read_timeout: Duration,
    /// An idle connection pings after this long.
    ping_every: Duration,
}

impl Clocks {
    pub(crate) fn new(negotiated: Duration) -> Self {
        let read_timeout = negotiated * 2 / 3;
        let now = Instant::now();
        Clocks {
            last_recv: now,
            last_send: now,
            read_timeout,
            // Half the read timeout, and at least every 10 s as the Java
            // client (`MAX_SEND_PING_INTERVAL`), so idle connections look
            // alive to whatever sits between client and server.
            ping_every: (read_timeout / 2).min(MAX_PING_INTERVAL),
        }
    }

    pub(crate) fn silent(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_recv) >= self.read_timeout
    }

    pub(crate) fn ping_due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_send) >= self.ping_every
    }

    /// When the engine must serve the connection next: when silence would
    /// drop it, or, when nothing waits to be written, when a ping is due,
    /// whichever comes first. (With bytes stuck in the write buffer a ping
    /// would only queue behind them; silence decides then.)
    pub(crate) fn next_wake(&self, writing: bool) -> Instant {
        let silence = self.last_recv + self.read_timeout;
        match writing {
            true => silence,
            false => silence.min(self.last_send + self.ping_every),
        }
    }
}

/// Library work for the timer thread: it must not block for long, as it
/// runs every session's state changes in turn. No user code runs here
/// (listeners have a thread of their own).
pub(crate) type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Due {
    now: Vec<Job>,
    /// By time, then by order of arrival.
    later: BinaryHeap<Reverse<(Instant, u64)>>,
    jobs: std::collections::HashMap<u64, Job>,
    next_id: u64,
    started: bool,
}

/// The process' timer thread, started with its first job.
pub(crate) struct Timers {
    due: Mutex<Due>,
    wake: Condvar,
}

impl Timers {
    pub(crate) fn get() -> &'static Timers {
        static TIMERS: OnceLock<Timers> = OnceLock::new();
        TIMERS.get_or_init(|| Timers {
            due: Mutex::new(Due::default()),
            wake: Condvar::new(),
        })
    }

    /// Runs `job` on the timer thread soon, after the jobs queued before it.
    pub(crate) fn run(&'static self, job: Job) {
        let mut due = self.due.lock();
        due.now.push(job);
        self.start(&mut due);
        self.wake.notify_one();
    }

    /// Runs `job` on the timer thread at `at` (at once if it has passed).
    pub(crate) fn at(&'static self, at: Instant, job: Job) {
        let mut due = self.due.lock();
        let id = due.next_id;
        due.next_id += 1;
        due.jobs.insert(id, job);
        due.later.push(Reverse((at, id)));
        self.start(&mut due);
        self.wake.notify_one();
    }

    fn start(&'static self, due: &mut Due) {
        if due.started {
            return;
        }
        match crate::sched::spawn("latchkey-timers", move || self.serve()) {
            Ok(()) => due.started = true,
            // Tried again with the next job; what waits is not lost.
            Err(e) => log::error!("cannot start the timer thread: {e}"),
        }
    }

    fn serve(&self) {
        let mut ready = Vec::new();
        loop {
            {
                let mut due = self.due.lock();
                loop {
                    let now = Instant::now();
                    while let Some(&Reverse((at, id))) = due.later.peek() {
                        if at > now {
                            break;
                        }
                        due.later.pop();
                        if let Some(job) = due.jobs.remove(&id) {
                            due.now.push(job);
                        }
                    }
                    if !due.now.is_empty() {
                        std::mem::swap(&mut due.now, &mut ready);
                        break;
                    }
                    match due.later.peek() {
                        Some(&Reverse((at, _))) => {
                            self.wake.wait_until(&mut due, at);
                        }
                        None => self.wake.wait(&mut due),
                    }
                }
            }
            for job in ready.drain(..) {
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                    log::error!("a session's state change panicked");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn timers_run_in_time_order_and_jobs_at_once() {
        let (tx, rx) = mpsc::channel();
        let now = Instant::now();
        for (i, ms) in [(1, 60u64), (2, 20), (3, 40)] {
            let tx = tx.clone();
            Timers::get().at(
                now + Duration::from_millis(ms),
                Box::new(move || tx.send(i).unwrap_or_default()),
            );
        }
        let tx0 = tx.clone();
        Timers::get().run(Box::new(move || tx0.send(0).unwrap_or_default()));
        let got: Vec<i32> = (0..4)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).expect("a job ran"))
            .collect();
        assert_eq!(got, [0, 2, 3, 1]);
        assert!(now.elapsed() >= Duration::from_millis(60));
    }
}

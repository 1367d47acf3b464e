//! Histories checked for linearizability: every compare-and-set and set of
//! a shared count (`SharedCount`) and every increment of the shared
//! counter (`DistributedAtomicLong`), each with its call and return time
//! and its answer, or "unknown" when it failed after it may have been
//! sent; at the end, after every fault is healed, one read of each node.
//! Each history is checked against its sequential model (Wing and Gong's
//! search, `latchkey_test::linearizable`); a history with no order that
//! explains every answer is a violation.

use latchkey_test::linearizable::{
    check, CountAnswer, CountOp, Counter, CounterAnswer, CounterOp, Model, Operation, Verdict,
    VersionedCount,
};
use parking_lot::Mutex;

use crate::history::History;
use crate::oracle::Oracle;

/// Search steps per history: a run of minutes stays within seconds of
/// checking; past it, the history is reported undecided, not passed.
const BUDGET: u64 = 50_000_000;

/// One object's operations, each recorded once its outcome is known.
pub struct Recorder<I, O> {
    ops: Mutex<Vec<Operation<I, O>>>,
}

impl<I, O> Default for Recorder<I, O> {
    fn default() -> Self {
        Recorder {
            ops: Mutex::new(Vec::new()),
        }
    }
}

impl<I: Clone, O: Clone> Recorder<I, O> {
    /// The time to give as an operation's call, taken right before it.
    pub fn now(&self, history: &History) -> u64 {
        micros(history)
    }

    /// Records `input`, called at `call`, answered `output` now, or with
    /// an unknown outcome when `output` is `None` (it failed after it may
    /// have been sent).
    pub fn record(&self, history: &History, call: u64, input: I, output: Option<O>) {
        let ret = output.is_some().then(|| micros(history));
        self.ops.lock().push(Operation {
            call,
            ret,
            input,
            output,
        });
    }

    pub fn len(&self) -> usize {
        self.ops.lock().len()
    }

    /// How many have unknown outcomes.
    pub fn unknown(&self) -> usize {
        self.ops.lock().iter().filter(|o| o.ret.is_none()).count()
    }

    fn snapshot(&self) -> Vec<Operation<I, O>> {
        self.ops.lock().clone()
    }
}

fn micros(history: &History) -> u64 {
    u64::try_from(history.now().as_micros()).unwrap_or(u64::MAX)
}

/// The histories of one run.
#[derive(Default)]
pub struct Histories {
    pub count: Recorder<CountOp, CountAnswer>,
    pub counter: Recorder<CounterOp, CounterAnswer>,
}

impl Histories {
    /// Ends both histories with one read of each node, synced with the
    /// leader first, through a client of its own.
    pub fn read_finals(
        &self,
        history: &History,
        connect: &str,
        count_path: &str,
        counter_path: &str,
    ) -> Result<(), String> {
        let client = crate::orphans::direct_client(connect)?;
        let read = |path: &str| {
            client
                .sync(path)
                .and_then(|()| client.get_data(path))
                .map_err(|e| format!("read {path}: {e}"))
        };
        let call = self.count.now(history);
        let (data, stat) = read(count_path)?;
        let value = <[u8; 4]>::try_from(data.as_slice())
            .map(i32::from_be_bytes)
            .map_err(|_| format!("{count_path} holds {} bytes, not a count", data.len()))?;
        let answer = CountAnswer::Read(value, stat.version);
        self.count
            .record(history, call, CountOp::Read, Some(answer));
        let call = self.counter.now(history);
        let value = match read(counter_path) {
            Ok((data, _)) if data.is_empty() => 0,
            Ok((data, _)) => <[u8; 8]>::try_from(data.as_slice())
                .map(i64::from_be_bytes)
                .map_err(|_| format!("{counter_path} holds {} bytes", data.len()))?,
            Err(_) if client.exists(counter_path).ok().flatten().is_none() => 0,
            Err(e) => return Err(e),
        };
        self.counter.record(
            history,
            call,
            CounterOp::Read,
            Some(CounterAnswer::Read(value)),
        );
        client.close();
        Ok(())
    }

    /// Checks both histories (the count's with the deliberately wrong
    /// model when `wrong_model`); records each verdict and reports
    /// violations and undecided histories to the oracle. Returns the
    /// summary's words.
    pub fn check(
        &self,
        history: &History,
        oracle: &Oracle,
        count_path: &str,
        counter_path: &str,
        wrong_model: bool,
    ) -> String {
        let count = verdict(
            history,
            oracle,
            count_path,
            &VersionedCount { wrong: wrong_model },
            &self.count.snapshot(),
        );
        let counter = verdict(
            history,
            oracle,
            counter_path,
            &Counter,
            &self.counter.snapshot(),
        );
        format!(
            "linearizable_count={count} count_ops={} count_unknown={} linearizable_counter={counter} \
             counter_ops={} counter_unknown={}",
            self.count.len(),
            self.count.unknown(),
            self.counter.len(),
            self.counter.unknown()
        )
    }
}

fn verdict<M: Model>(
    history: &History,
    oracle: &Oracle,
    path: &str,
    model: &M,
    ops: &[Operation<M::Input, M::Output>],
) -> &'static str
where
    M::Input: std::fmt::Debug,
    M::Output: std::fmt::Debug,
{
    let started = std::time::Instant::now();
    let found = check(model, ops, BUDGET);
    let took = started.elapsed();
    match found {
        Verdict::Linearizable => {
            history.record(
                "checker",
                format!("{path}: {} operations linearizable ({took:?})", ops.len()),
            );
            "yes"
        }
        Verdict::Violation { stuck, placed } => {
            let op = &ops[stuck];
            oracle.violation(format!(
                "{path}: not linearizable: no order of its {} operations explains them; the \
                 search placed {placed} in order at most, and then none could place {:?} \
                 answered {:?} (called at {} µs, returned at {:?} µs)",
                ops.len(),
                op.input,
                op.output,
                op.call,
                op.ret
            ));
            "no"
        }
        Verdict::Undecided { steps } => {
            oracle.violation(format!(
                "{path}: linearizability undecided after {steps} search steps over {} \
                 operations ({took:?}); shorten the run or raise the budget",
                ops.len()
            ));
            "undecided"
        }
    }
}

//! Linearizability of a recorded history against a sequential model, for
//! one object at a time: Wing and Gong's search with Lowe's memoisation
//! (the algorithm of Porcupine). Each operation has a call time and, if
//! its outcome is known, a return time and an output; it must take effect
//! at one instant in between, in an order the model accepts. An operation
//! whose outcome is unknown (sent, then the connection lost) may take
//! effect at any instant after its call, or never.
//!
//! [`check`] is exhaustive within a budget of search steps: a history it
//! calls [`Verdict::Violation`] has no linearization at all. The models
//! the randomized checker uses are here too, with their own tests.

use std::collections::HashSet;
use std::hash::Hash;

/// A sequential specification.
pub trait Model {
    /// The object's state; equal states must behave alike from then on.
    type State: Clone + Eq + Hash;
    /// An operation and its arguments.
    type Input;
    /// What an operation answered.
    type Output;
    /// The state before any operation.
    fn init(&self) -> Self::State;
    /// The state after the operation `input` answered `output` from
    /// `state`, or `None` if the model does not allow that answer there.
    /// `output` is `None` for an operation whose outcome is unknown: the
    /// state after it took effect (its answer unseen), or `None` if it
    /// could not have.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State>;
}

/// One operation of a history. Times are in any one clock's units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation<I, O> {
    /// When it was called.
    pub call: u64,
    /// When it returned with a known outcome; `None` when its outcome is
    /// unknown (then `output` is `None` too).
    pub ret: Option<u64>,
    /// The operation.
    pub input: I,
    /// Its answer, if known.
    pub output: Option<O>,
}

/// What [`check`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Some order of the operations agrees with the model and real time.
    Linearizable,
    /// No order of the operations agrees with both the model and the real
    /// time. `stuck` is the operation (an index into the history) that no
    /// search could place before its return, at the deepest point reached
    /// with `placed` operations in order.
    Violation {
        /// The operation that could not be placed.
        stuck: usize,
        /// How many operations were in order at the deepest point.
        placed: usize,
    },
    /// The budget of search steps ran out first.
    Undecided {
        /// The steps searched.
        steps: u64,
    },
}

/// An entry of the event list: an operation's call or return.
#[derive(Clone, Copy)]
struct Entry {
    op: usize,
    call: bool,
    prev: usize,
    next: usize,
    /// For a call: its return's entry, if it has one.
    ret: Option<usize>,
}

const NIL: usize = usize::MAX;

/// The history's calls and returns as a doubly linked list in time order
/// (a call before a return at the same instant: the lenient order),
/// behind a head entry at index 0.
struct Events {
    entries: Vec<Entry>,
    /// Return entries still in the list.
    returns: usize,
}

impl Events {
    fn new<I, O>(ops: &[Operation<I, O>]) -> Events {
        let mut points: Vec<(u64, bool, usize)> = Vec::with_capacity(ops.len() * 2);
        for (i, op) in ops.iter().enumerate() {
            points.push((op.call, true, i));
            if let Some(ret) = op.ret {
                // A return before its own call (a clock step) counts at the call.
                points.push((ret.max(op.call), false, i));
            }
        }
        // Calls first at equal times: `false < true`, so sort on `!call`.
        points.sort_by_key(|&(t, call, i)| (t, !call, i));
        let head = Entry {
            op: NIL,
            call: false,
            prev: NIL,
            next: NIL,
            ret: None,
        };
        let mut entries = vec![head];
        let mut ret_of = vec![None; ops.len()];
        for &(_, call, op) in &points {
            let at = entries.len();
            let prev = at - 1;
            entries[prev].next = at;
            entries.push(Entry {
                op,
                call,
                prev,
                next: NIL,
                ret: None,
            });
            if !call {
                ret_of[op] = Some(at);
            }
        }
        for e in entries.iter_mut().skip(1) {
            if e.call {
                e.ret = ret_of[e.op];
            }
        }
        let returns = ret_of.iter().flatten().count();
        Events { entries, returns }
    }

    fn unlink(&mut self, at: usize) {
        let Entry { prev, next, .. } = self.entries[at];
        self.entries[prev].next = next;
        if next != NIL {
            self.entries[next].prev = prev;
        }
    }

    fn relink(&mut self, at: usize) {
        let Entry { prev, next, .. } = self.entries[at];
        self.entries[prev].next = at;
        if next != NIL {
            self.entries[next].prev = at;
        }
    }

    /// Takes a call and its return out of the list (the operation placed).
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        if let Some(ret) = self.entries[call].ret {
            self.unlink(ret);
            self.returns -= 1;
        }
    }

    /// Puts them back, in the reverse order of [`lift`](Self::lift).
    fn unlift(&mut self, call: usize) {
        if let Some(ret) = self.entries[call].ret {
            self.relink(ret);
            self.returns += 1;
        }
        self.relink(call);
    }
}

/// Whether `ops` is linearizable under `model`, searching at most `budget`
/// steps.
pub fn check<M: Model>(model: &M, ops: &[Operation<M::Input, M::Output>], budget: u64) -> Verdict {
    let mut events = Events::new(ops);
    let words = ops.len().div_ceil(64);
    let mut placed = vec![0u64; words];
    let mut seen: HashSet<(Vec<u64>, M::State)> = HashSet::new();
    let mut stack: Vec<(usize, M::State)> = Vec::new();
    let mut state = model.init();
    let mut entry = events.entries[0].next;
    let (mut deepest, mut stuck) = (0, 0);
    let mut steps = 0u64;
    loop {
        // Done once every operation with a known outcome is placed; those
        // left may never have taken effect.
        if events.returns == 0 {
            return Verdict::Linearizable;
        }
        steps += 1;
        if steps > budget {
            return Verdict::Undecided { steps };
        }
        let e = events.entries[entry];
        if e.call {
            let op = &ops[e.op];
            if let Some(next) = model.step(&state, &op.input, op.output.as_ref()) {
                placed[e.op / 64] |= 1 << (e.op % 64);
                if seen.insert((placed.clone(), next.clone())) {
                    stack.push((entry, std::mem::replace(&mut state, next)));
                    events.lift(entry);
                    entry = events.entries[0].next;
                    continue;
                }
                placed[e.op / 64] &= !(1 << (e.op % 64));
            }
            entry = e.next;
        } else {
            // A return whose operation is not placed: undo the last choice.
            if stack.len() >= deepest {
                (deepest, stuck) = (stack.len(), e.op);
            }
            let Some((call, before)) = stack.pop() else {
                return Verdict::Violation {
                    stuck,
                    placed: deepest,
                };
            };
            let op = events.entries[call].op;
            placed[op / 64] &= !(1 << (op % 64));
            state = before;
            events.unlift(call);
            entry = events.entries[call].next;
        }
    }
}

/// `SharedCount` (and any versioned register): the count and the node's
/// version. Versions only grow, one per write applied; a set retried
/// after a lost reply may be applied more than once, so after a set the
/// version is known only from below until a compare-and-set or a read
/// pins it.
#[derive(Clone, Copy, Debug, Default)]
pub struct VersionedCount {
    /// The control: a model that is deliberately wrong (a successful
    /// compare-and-set skips a version), so a real history fails it.
    pub wrong: bool,
}

/// An operation on a [`VersionedCount`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CountOp {
    /// `set_count(value)`.
    Set(i32),
    /// `try_set_count(previous, value)`: applied only if the node holds
    /// `previous` (count, version).
    CompareAndSet {
        /// The count and version it expects.
        previous: (i32, i32),
        /// The count it sets.
        value: i32,
    },
    /// A read of the node: its count and version.
    Read,
}

/// What a [`CountOp`] answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CountAnswer {
    /// A set returned.
    Set,
    /// `try_set_count`'s `true` (applied) or `false` (refused).
    Applied(bool),
    /// A read's count and version.
    Read(i32, i32),
}

/// A [`VersionedCount`]'s state: the count, and the node's version, known
/// exactly or only from below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CountState {
    /// The count.
    pub value: i32,
    /// The version, or its least value when not `exact`.
    pub version: i32,
    /// Whether `version` is known exactly.
    pub exact: bool,
}

impl CountState {
    /// Whether the node may hold `(value, version)` now.
    fn may_be(&self, (value, version): (i32, i32)) -> bool {
        self.value == value
            && match self.exact {
                true => self.version == version,
                false => self.version <= version,
            }
    }

    /// Whether the node may hold something other than `(value, version)`.
    fn may_differ(&self, (value, version): (i32, i32)) -> bool {
        self.value != value || !self.exact || self.version != version
    }
}

impl Model for VersionedCount {
    type State = CountState;
    type Input = CountOp;
    type Output = CountAnswer;

    fn init(&self) -> CountState {
        CountState {
            value: 0,
            version: 0,
            exact: true,
        }
    }

    fn step(&self, s: &CountState, op: &CountOp, out: Option<&CountAnswer>) -> Option<CountState> {
        let skip = if self.wrong { 2 } else { 1 };
        match (op, out) {
            // A set is retried after a lost reply, and then applied again:
            // the version grows by one or more.
            (CountOp::Set(v), _) => Some(CountState {
                value: *v,
                version: s.version + 1,
                exact: false,
            }),
            (
                CountOp::CompareAndSet { previous, value },
                None | Some(CountAnswer::Applied(true)),
            ) => s.may_be(*previous).then_some(CountState {
                value: *value,
                version: previous.1 + skip,
                exact: true,
            }),
            (CountOp::CompareAndSet { previous, .. }, Some(CountAnswer::Applied(false))) => {
                s.may_differ(*previous).then_some(*s)
            }
            (CountOp::Read, Some(CountAnswer::Read(v, version))) => {
                s.may_be((*v, *version)).then_some(CountState {
                    value: *v,
                    version: *version,
                    exact: true,
                })
            }
            (CountOp::Read, None) => Some(*s),
            _ => None,
        }
    }
}

/// `DistributedAtomicLong` increments: the value. An increment that
/// answered "not succeeded" changed nothing and is left out of histories.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counter;

/// An operation on a [`Counter`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CounterOp {
    /// Adds one.
    Increment,
    /// Reads the value.
    Read,
}

/// What a [`CounterOp`] answered: an increment's pre and post values, a
/// read's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CounterAnswer {
    /// An increment succeeded, from `pre` to `post`.
    Incremented {
        /// The value before.
        pre: i64,
        /// The value after.
        post: i64,
    },
    /// A read's value.
    Read(i64),
}

impl Model for Counter {
    type State = i64;
    type Input = CounterOp;
    type Output = CounterAnswer;

    fn init(&self) -> i64 {
        0
    }

    fn step(&self, s: &i64, op: &CounterOp, out: Option<&CounterAnswer>) -> Option<i64> {
        match (op, out) {
            (CounterOp::Increment, None) => Some(s.wrapping_add(1)),
            (CounterOp::Increment, Some(CounterAnswer::Incremented { pre, post })) => {
                (s == pre && *post == pre.wrapping_add(1)).then_some(*post)
            }
            (CounterOp::Read, Some(CounterAnswer::Read(v))) => (s == v).then_some(*s),
            (CounterOp::Read, None) => Some(*s),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: u64 = 1_000_000;

    fn op<I, O>(call: u64, ret: Option<u64>, input: I, output: Option<O>) -> Operation<I, O> {
        Operation {
            call,
            ret,
            input,
            output,
        }
    }

    fn cas(previous: (i32, i32), value: i32) -> CountOp {
        CountOp::CompareAndSet { previous, value }
    }

    #[test]
    fn sequential_and_overlapping_histories_that_have_an_order_pass() {
        let m = VersionedCount::default();
        let ops = vec![
            op(
                0,
                Some(10),
                cas((0, 0), 1),
                Some(CountAnswer::Applied(true)),
            ),
            // Overlaps the first: refused, placed before it or after.
            op(
                5,
                Some(20),
                cas((0, 0), 7),
                Some(CountAnswer::Applied(false)),
            ),
            op(30, Some(40), CountOp::Read, Some(CountAnswer::Read(1, 1))),
        ];
        assert_eq!(check(&m, &ops, BUDGET), Verdict::Linearizable);
        // Real time forces the order here: the read follows the set.
        let ops = vec![
            op(0, Some(10), CountOp::Set(5), Some(CountAnswer::Set)),
            op(20, Some(30), CountOp::Read, Some(CountAnswer::Read(5, 1))),
        ];
        assert_eq!(check(&m, &ops, BUDGET), Verdict::Linearizable);
    }

    #[test]
    fn a_read_of_the_past_is_a_violation() {
        let m = VersionedCount::default();
        let ops = vec![
            op(0, Some(10), CountOp::Set(5), Some(CountAnswer::Set)),
            op(20, Some(30), CountOp::Read, Some(CountAnswer::Read(0, 0))),
        ];
        assert!(matches!(
            check(&m, &ops, BUDGET),
            Verdict::Violation { stuck: 1, .. }
        ));
    }

    /// Issue 38's bug 1: a compare-and-set applied but answered `false`.
    /// Nobody else wrote, yet the node moved: no order explains it.
    #[test]
    fn an_applied_compare_and_set_answered_refused_is_a_violation() {
        let m = VersionedCount::default();
        let ops = vec![
            op(
                0,
                Some(10),
                cas((0, 0), 1),
                Some(CountAnswer::Applied(false)),
            ),
            op(20, Some(30), CountOp::Read, Some(CountAnswer::Read(1, 1))),
        ];
        assert!(matches!(check(&m, &ops, BUDGET), Verdict::Violation { .. }));
        // Answered "may or may not have run" instead: linearizable.
        let ops = vec![
            op(0, None, cas((0, 0), 1), None),
            op(20, Some(30), CountOp::Read, Some(CountAnswer::Read(1, 1))),
        ];
        assert_eq!(check(&m, &ops, BUDGET), Verdict::Linearizable);
    }

    #[test]
    fn an_unknown_outcome_may_land_late_or_never() {
        let m = VersionedCount::default();
        let unknown = op(0, None, CountOp::Set(9), None);
        // Never: the reads see nothing of it.
        let ops = vec![
            unknown.clone(),
            op(50, Some(60), CountOp::Read, Some(CountAnswer::Read(0, 0))),
        ];
        assert_eq!(check(&m, &ops, BUDGET), Verdict::Linearizable);
        // Late: between two later reads.
        let ops = vec![
            unknown.clone(),
            op(50, Some(60), CountOp::Read, Some(CountAnswer::Read(0, 0))),
            op(70, Some(80), CountOp::Read, Some(CountAnswer::Read(9, 1))),
        ];
        assert_eq!(check(&m, &ops, BUDGET), Verdict::Linearizable);
        // But not before its own call.
        let ops = vec![
            op(0, Some(10), CountOp::Read, Some(CountAnswer::Read(9, 1))),
            op(20, None, CountOp::Set(9), None),
        ];
        assert!(matches!(check(&m, &ops, BUDGET), Verdict::Violation { .. }));
    }

    /// A set whose reply was lost is sent again and applied twice: the
    /// version moves by two. Not a violation; a compare-and-set that
    /// claims an exact version no write made is.
    #[test]
    fn a_set_applied_twice_moves_the_version_by_more_than_one() {
        let m = VersionedCount::default();
        let ops = vec![
            op(0, Some(10), CountOp::Set(5), Some(CountAnswer::Set)),
            op(
                20,
                Some(30),
                cas((5, 2), 6),
                Some(CountAnswer::Applied(true)),
            ),
            op(40, Some(50), CountOp::Read, Some(CountAnswer::Read(6, 3))),
        ];
        assert_eq!(check(&m, &ops, BUDGET), Verdict::Linearizable);
        let ops = vec![
            op(
                0,
                Some(10),
                cas((0, 0), 1),
                Some(CountAnswer::Applied(true)),
            ),
            op(
                20,
                Some(30),
                cas((1, 2), 2),
                Some(CountAnswer::Applied(true)),
            ),
        ];
        assert!(matches!(check(&m, &ops, BUDGET), Verdict::Violation { .. }));
    }

    #[test]
    fn the_wrong_model_fails_a_correct_history() {
        let ops = vec![
            op(
                0,
                Some(10),
                cas((0, 0), 1),
                Some(CountAnswer::Applied(true)),
            ),
            op(
                20,
                Some(30),
                cas((1, 1), 2),
                Some(CountAnswer::Applied(true)),
            ),
        ];
        assert_eq!(
            check(&VersionedCount::default(), &ops, BUDGET),
            Verdict::Linearizable
        );
        assert!(matches!(
            check(&VersionedCount { wrong: true }, &ops, BUDGET),
            Verdict::Violation { .. }
        ));
    }

    #[test]
    fn counter_increments_and_a_lost_update() {
        let inc = |pre, post| Some(CounterAnswer::Incremented { pre, post });
        let ops = vec![
            op(0, Some(10), CounterOp::Increment, inc(0, 1)),
            op(5, None, CounterOp::Increment, None),
            op(20, Some(30), CounterOp::Increment, inc(2, 3)),
            op(40, Some(50), CounterOp::Read, Some(CounterAnswer::Read(3))),
        ];
        assert_eq!(check(&Counter, &ops, BUDGET), Verdict::Linearizable);
        // Two increments from 0 to 1: a lost update.
        let ops = vec![
            op(0, Some(10), CounterOp::Increment, inc(0, 1)),
            op(5, Some(15), CounterOp::Increment, inc(0, 1)),
        ];
        assert!(matches!(
            check(&Counter, &ops, BUDGET),
            Verdict::Violation { .. }
        ));
    }

    /// Many concurrent operations with unknown outcomes: the memo keeps
    /// the search within its budget, or it says it could not decide.
    #[test]
    fn a_budget_too_small_is_undecided_not_a_verdict() {
        let mut ops: Vec<_> = (0..40)
            .map(|i| op(i, None, CounterOp::Increment, None))
            .collect();
        ops.push(op(
            100,
            Some(110),
            CounterOp::Read,
            Some(CounterAnswer::Read(41)),
        ));
        assert!(matches!(
            check(&Counter, &ops, 1_000),
            Verdict::Undecided { .. }
        ));
    }

    /// A long history, every operation overlapping its neighbours, is
    /// decided quickly.
    #[test]
    fn a_long_history_of_overlapping_cas_is_decided() {
        let m = VersionedCount::default();
        let mut ops = Vec::new();
        let mut state = (0, 0);
        for i in 0..2_000u64 {
            let next = (state.0 + 1, state.1 + 1);
            let t = i * 10;
            ops.push(op(
                t,
                Some(t + 15),
                cas(state, next.0),
                Some(CountAnswer::Applied(true)),
            ));
            ops.push(op(
                t + 1,
                Some(t + 14),
                cas((-1, -1), 0),
                Some(CountAnswer::Applied(false)),
            ));
            state = next;
        }
        assert_eq!(check(&m, &ops, 10_000_000), Verdict::Linearizable);
    }
}

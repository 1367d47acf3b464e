//! The threads latchkey starts, and the scheduling they run with.
//!
//! A thread inherits its scheduling (policy, CPU affinity) from the thread
//! that spawns it, and latchkey starts some of its threads lazily, from
//! whichever thread happens to need one: a lock waiter that was given the
//! idle policy and pinned to a busy CPU would hand both to the engine that
//! serves every session, or to a session's event thread. So every thread
//! latchkey starts takes, as it starts, the scheduling of the process'
//! main thread instead: its CPU affinity, and its policy where that is one
//! of the normal ones (`SCHED_OTHER`, `SCHED_BATCH`, `SCHED_IDLE`) and
//! differs (the thread's nice value is kept). Real-time policies are not
//! copied. What cannot be changed (no permission) is logged and left.

use std::io;

use nix::sched::{sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;
use thread_priority::{
    set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy, ThreadPriority,
    ThreadPriorityValue, ThreadSchedulePolicy,
};

/// Starts a thread named `name` running `f`, with the main thread's
/// scheduling (see the module doc).
pub(crate) fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            adopt_main_thread_scheduling();
            f()
        })
        .map(drop)
}

/// Gives the calling thread the main thread's CPU affinity and normal
/// policy.
pub(crate) fn adopt_main_thread_scheduling() {
    let main = Pid::this();
    match sched_getaffinity(main) {
        Ok(cpus) => {
            if sched_getaffinity(Pid::from_raw(0)).ok() != Some(cpus) {
                if let Err(e) = sched_setaffinity(Pid::from_raw(0), &cpus) {
                    log::warn!("cannot give a latchkey thread the main thread's CPUs: {e}");
                }
            }
        }
        Err(e) => log::debug!("cannot read the main thread's CPU affinity: {e}"),
    }
    let (Some(main), Some(own)) = (stat_of("self"), stat_of("thread-self")) else {
        return;
    };
    if main.policy == own.policy {
        return;
    }
    let Some(policy) = normal_policy(main.policy) else {
        return;
    };
    let Some(priority) = priority_for_nice(own.nice) else {
        return;
    };
    if let Err(e) = set_thread_priority_and_policy(thread_native_id(), priority, policy) {
        log::warn!("cannot give a latchkey thread the main thread's scheduling policy: {e:?}");
    }
}

/// What `/proc/<which>/stat` says of a thread's scheduling.
struct Sched {
    nice: i32,
    policy: u32,
}

/// Reads `/proc/self/stat` (the main thread) or `/proc/thread-self/stat`.
fn stat_of(which: &str) -> Option<Sched> {
    let stat = std::fs::read_to_string(format!("/proc/{which}/stat")).ok()?;
    // The name (field 2) is in parentheses and may hold spaces: count
    // fields from after it; field 3 is the first.
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    Some(Sched {
        nice: fields.get(19 - 3)?.parse().ok()?,
        policy: fields.get(41 - 3)?.parse().ok()?,
    })
}

/// The normal policy numbered `policy` by the kernel.
fn normal_policy(policy: u32) -> Option<ThreadSchedulePolicy> {
    let normal = match policy {
        0 => NormalThreadSchedulePolicy::Other,
        3 => NormalThreadSchedulePolicy::Batch,
        5 => NormalThreadSchedulePolicy::Idle,
        _ => return None,
    };
    Some(ThreadSchedulePolicy::Normal(normal))
}

/// The priority that `thread_priority` sets as nice value `nice` for a
/// normal policy (it maps 0..=99 onto the nice values 19..=-20).
fn priority_for_nice(nice: i32) -> Option<ThreadPriority> {
    (0u8..=99).find_map(|p| {
        let ratio = 1f32 - f32::from(p) / 99.0;
        let mapped = (39.0 * ratio) as i32 - 20;
        (mapped == nice)
            .then(|| ThreadPriorityValue::try_from(p).ok())
            .flatten()
            .map(ThreadPriority::Crossplatform)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nice_value_has_a_priority() {
        for nice in -20..=19 {
            assert!(priority_for_nice(nice).is_some(), "nice {nice}");
        }
    }

    /// The mapping is `thread_priority`'s, not ours: set on a thread of its
    /// own (nice only rising, which needs no privilege), each priority must
    /// give the nice value it was chosen for, or a new version of the crate
    /// has changed its mapping.
    #[test]
    fn each_priority_sets_the_nice_value_it_was_chosen_for() {
        std::thread::spawn(|| {
            let start = stat_of("thread-self").expect("readable").nice;
            let other = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Other);
            for nice in start.max(0)..=19 {
                let priority = priority_for_nice(nice).expect("a priority");
                set_thread_priority_and_policy(thread_native_id(), priority, other)
                    .expect("set the thread's priority");
                let got = stat_of("thread-self").expect("readable").nice;
                assert_eq!(got, nice, "{priority:?} gave nice {got}, not {nice}");
            }
        })
        .join()
        .expect("the mapping holds");
    }

    #[test]
    fn the_main_thread_s_stat_reads() {
        let own = stat_of("thread-self").expect("readable");
        assert!(normal_policy(own.policy).is_some());
    }
}

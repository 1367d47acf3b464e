//! The command's process group: supervising it, stopping it, and lending
//! it the terminal.

use std::io::IsTerminal;
use std::process::{Child, ExitStatus};
use std::sync::atomic::Ordering;
use std::time::Instant;

use latchkey_framework::Client;
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::unistd::Pid;

use super::release::Progress;
use super::{interrupted, Held, LossWatch, OnLost, Opts, CHILD_GROUP, GRACE, POLL};

/// How the command's run ended.
pub(super) enum Outcome {
    /// It exited by itself with the lock held all along.
    Exited(ExitStatus),
    /// The lock was lost and the command killed (`--on-lost kill`).
    Lost,
    /// The lock was lost, the command went on and exited (`--on-lost warn`).
    LostThenExited(ExitStatus),
    /// Ctrl-C: the command was stopped.
    Interrupted,
    /// Waiting for the command failed.
    WaitFailed(std::io::Error),
}

/// Polls the command every [`POLL`] until it exits, Ctrl-C comes or the
/// lock is lost.
pub(super) fn supervise(
    mut child: Child,
    opts: &Opts,
    client: &Client,
    held: &Held,
    watch: &LossWatch,
    progress: &Progress,
    terminal: Option<&Terminal>,
) -> Outcome {
    let mut warned = false;
    loop {
        if interrupted() {
            stop_gently(&mut child);
            return Outcome::Interrupted;
        }
        if !warned && watch.lost(client, held) {
            progress.flush();
            match opts.on_lost {
                OnLost::Kill => {
                    eprintln!(
                        "lock: lost the lock on {} (the ZooKeeper session was lost); killing the command",
                        opts.path
                    );
                    // No grace: another process may hold the lock already.
                    kill_group(&mut child);
                    return Outcome::Lost;
                }
                OnLost::Warn => {
                    eprintln!(
                        "lock: WARNING: lost the lock on {} (the ZooKeeper session was lost); \
                         the command keeps running WITHOUT the lock (--on-lost warn)",
                        opts.path
                    );
                    warned = true;
                }
            }
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                // What the command left running must not go on once the
                // lock is released.
                if group_alive() {
                    if opts.verbose {
                        eprintln!("lock: the command exited; stopping what it left running");
                    }
                    stop_rest_of_group();
                }
                return if warned {
                    Outcome::LostThenExited(status)
                } else {
                    Outcome::Exited(status)
                };
            }
            Ok(None) => {
                if let Some(terminal) = terminal {
                    terminal.follow_stop();
                }
            }
            Err(e) => {
                kill_group(&mut child);
                return Outcome::WaitFailed(e);
            }
        }
        std::thread::sleep(POLL);
    }
}

/// SIGTERM to the command's process group, up to [`GRACE`] for all of it
/// to exit, then SIGKILL to what is left.
fn stop_gently(child: &mut Child) {
    signal_group(Signal::SIGTERM);
    let deadline = Instant::now() + GRACE;
    let mut reaped = false;
    while Instant::now() < deadline {
        // Reap the command as soon as it exits: a zombie still counts as a
        // member of its group.
        reaped = reaped || matches!(child.try_wait(), Ok(Some(_)));
        if reaped && !group_alive() {
            return;
        }
        std::thread::sleep(POLL);
    }
    kill_group(child);
}

/// SIGTERM to what is left of the group once the command has exited, up to
/// [`GRACE`] for it to exit, then SIGKILL.
fn stop_rest_of_group() {
    signal_group(Signal::SIGTERM);
    let deadline = Instant::now() + GRACE;
    while group_alive() && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    if group_alive() {
        signal_group(Signal::SIGKILL);
    }
}

/// SIGKILL to the command's whole process group, then reaps the command.
fn kill_group(child: &mut Child) {
    signal_group(Signal::SIGKILL);
    let _ = child.kill();
    let _ = child.wait();
}

/// The running command's process group, if there is one.
fn child_group() -> Option<Pid> {
    let pid = CHILD_GROUP.load(Ordering::Acquire);
    i32::try_from(pid)
        .ok()
        .filter(|pid| *pid > 0)
        .map(Pid::from_raw)
}

/// Sends `signal` to every process of the running command's group. (`nix`
/// comes with `ctrlc` already; it sends a signal without `unsafe`.)
pub(super) fn signal_group(signal: Signal) {
    if let Some(group) = child_group() {
        let _ = killpg(group, signal);
    }
}

/// Whether a process of the command's group still exists.
fn group_alive() -> bool {
    child_group().is_some_and(|group| killpg(group, None).is_ok())
}

/// The controlling terminal, lent to the command's process group while it
/// runs when `lock` runs in the foreground of one, so that the command can
/// read from it and gets the terminal's Ctrl-C and Ctrl-Z itself, as a job
/// of the shell would. Dropping it takes the terminal back.
pub(super) struct Terminal {
    /// `lock`'s own process group.
    ours: Pid,
    /// The command's.
    theirs: Pid,
}

impl Terminal {
    pub(super) fn hand_to(group: u32) -> Option<Terminal> {
        let stdin = std::io::stdin();
        let ours = nix::unistd::getpgrp();
        if !stdin.is_terminal() || nix::unistd::tcgetpgrp(&stdin).ok() != Some(ours) {
            return None;
        }
        let theirs = Pid::from_raw(i32::try_from(group).ok()?);
        nix::unistd::tcsetpgrp(&stdin, theirs).ok()?;
        // The command may have touched the terminal before it was its own
        // and been stopped for that (SIGTTIN): let it go on.
        let _ = killpg(theirs, Signal::SIGCONT);
        Some(Terminal { ours, theirs })
    }

    /// When the command was stopped from the terminal (Ctrl-Z), stops
    /// `lock`'s own job too, so that the shell sees the job stopped and
    /// gets its prompt back; once continued (`fg` or `bg`), lends the
    /// terminal again if `lock` is in the foreground, and continues the
    /// command.
    pub(super) fn follow_stop(&self) {
        let leader = self.theirs.as_raw();
        if process_state(leader) != Some('T') {
            return;
        }
        self.take_back();
        // Returns once the job is continued.
        let _ = killpg(self.ours, Signal::SIGTSTP);
        let stdin = std::io::stdin();
        if nix::unistd::tcgetpgrp(&stdin).ok() == Some(self.ours) {
            let _ = nix::unistd::tcsetpgrp(&stdin, self.theirs);
        }
        let _ = killpg(self.theirs, Signal::SIGCONT);
    }

    fn take_back(&self) {
        // A background group that sets the foreground group gets SIGTTOU,
        // which would stop `lock`, unless it blocks that signal.
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let _ = ttou.thread_block();
        let _ = nix::unistd::tcsetpgrp(std::io::stdin(), self.ours);
        let _ = ttou.thread_unblock();
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.take_back();
    }
}

/// The state letter of a process (`T` when stopped), from /proc.
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name, which is in parentheses.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

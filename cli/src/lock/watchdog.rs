//! The watchdog: the command must not outlive `lock`.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{killpg, SigSet, Signal};
use nix::unistd::Pid;

/// The first argument that makes `lock` the watchdog of another `lock`.
pub(crate) const WATCHDOG_ARG: &str = "--internal-watchdog";

/// A second `lock` process that kills the command's process group when
/// this `lock` dies without stopping it (SIGKILL, the OOM killer, a crash):
/// else the command would run on without the lock once the session expires,
/// beside the next holder. `flock` has no such gap because the command holds
/// the lock's file descriptor itself; a ZooKeeper lock belongs to `lock`'s
/// session.
///
/// `lock` holds the write end of a pipe that is the watchdog's stdin (the
/// end is close-on-exec, so the command does not inherit it). The watchdog
/// reads the command's process group, then waits: `done` (written by `lock`
/// once the group is stopped) disarms it; end of file without `done` means
/// that `lock` died, and the watchdog sends the group SIGKILL. It runs in a
/// process group of its own, so that signals to `lock`'s job (or to the
/// command's) do not reach it, and blocks the terminal's and the
/// termination signals. (PR_SET_PDEATHSIG would need `unsafe` in
/// `pre_exec`, which the workspace forbids, and kills one process, not the
/// group.)
pub(super) struct Watchdog {
    child: Child,
    pipe: Option<std::process::ChildStdin>,
}

impl Watchdog {
    pub(super) fn start() -> std::io::Result<Watchdog> {
        // /proc/self/exe runs this very binary even if its file was replaced
        // or deleted since `lock` started.
        let exe = if std::path::Path::new("/proc/self/exe").exists() {
            std::path::PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe()?
        };
        let mut child = Command::new(exe)
            .arg0("lock (watchdog)")
            .arg(WATCHDOG_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pipe = child.stdin.take();
        Ok(Watchdog { child, pipe })
    }

    /// Tells the watchdog the command's process group.
    pub(super) fn arm(&mut self, group: u32) {
        let sent = self.pipe.as_mut().map(|p| {
            p.write_all(format!("{group}\n").as_bytes())
                .and_then(|()| p.flush())
        });
        if let Some(Err(e)) = sent {
            eprintln!(
                "lock: warning: the watchdog is gone ({e}); if lock is killed, the command runs on"
            );
        }
    }

    /// Once the command's group is stopped: the watchdog exits and is reaped.
    pub(super) fn disarm(&mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = pipe.write_all(b"done\n");
        }
        let _ = self.child.wait();
    }
}

/// `lock --internal-watchdog`: see [`Watchdog`]. Returns the exit code.
pub(super) fn watchdog() -> i32 {
    let mut blocked = SigSet::empty();
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
        Signal::SIGPIPE,
    ] {
        blocked.add(signal);
    }
    let _ = blocked.thread_block();
    let mut said = Vec::new();
    // Returns at end of file: `lock` closed the pipe, or died.
    let _ = std::io::stdin().lock().read_to_end(&mut said);
    let said = String::from_utf8_lossy(&said);
    let mut lines = said.lines();
    let group = lines
        .next()
        .and_then(|l| l.trim().parse::<i32>().ok())
        .filter(|g| *g > 1);
    if lines.any(|l| l == "done") {
        return 0;
    }
    if let Some(group) = group {
        if killpg(Pid::from_raw(group), Signal::SIGKILL).is_ok() {
            // Not eprintln!, which panics when stderr is gone (a closed pipe).
            let _ = writeln!(
                std::io::stderr(),
                "lock: lock ended while its command ran; killed the command's process group {group}"
            );
        }
    }
    0
}

//! Progress under `-v`, the release, and what `lock` says at the end.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

use latchkey_framework::{Client, ConnectionState};

use super::{interrupted, Held, Kind, LossWatch, POLL};
use crate::EX_SOFTWARE;

/// Under `-v`, prints every connection state the client goes through, in
/// order and each once, from the client's state history: a background
/// thread keeps up while `lock` waits or the command runs, and
/// [`Progress::flush`] catches up before a final message, so that a state
/// the client reached before the release is always told before it.
#[derive(Clone)]
pub(super) struct Progress {
    client: Client,
    verbose: bool,
    /// When the last printed state was recorded (on the client's clock).
    printed: Arc<std::sync::Mutex<Option<Duration>>>,
}

impl Progress {
    /// Starts after the states the client has been in so far (`connect`
    /// already said it connected).
    pub(super) fn start(client: &Client, verbose: bool) -> Progress {
        let last = client.state_history().last().map(|(at, _)| *at);
        let progress = Progress {
            client: client.clone(),
            verbose,
            printed: Arc::new(std::sync::Mutex::new(last)),
        };
        if verbose {
            let background = progress.clone();
            let spawned = std::thread::Builder::new()
                .name("lock-progress".into())
                .spawn(move || loop {
                    background.flush();
                    std::thread::sleep(POLL);
                });
            if let Err(e) = spawned {
                eprintln!("lock: warning: cannot follow the connection state: {e}");
            }
        }
        progress
    }

    /// Prints the states not printed yet.
    pub(super) fn flush(&self) {
        if !self.verbose {
            return;
        }
        let mut printed = self.printed.lock().unwrap_or_else(|e| e.into_inner());
        for (at, state) in self.client.state_history() {
            if printed.is_none_or(|p| at > p) {
                eprintln!("lock: connection state {state:?}");
                *printed = Some(at);
            }
        }
    }
}

pub(super) fn is_connected(client: &Client) -> bool {
    client.state().is_some_and(ConnectionState::is_connected)
}

/// Releases the lock and closes the client.
///
/// When the command is done while ZooKeeper is out of reach but the session
/// may still live, this waits for the connection to come back, at most
/// until the session would be lost, so that the lock is released and not
/// left to the session's expiry. When the lock was lost, or ZooKeeper stays
/// out of reach, the client is closed first (the release then does not wait
/// out the retry policy) and the message says where the node stands.
pub(super) fn close_and_release(
    client: &Client,
    held: Held,
    lost: bool,
    progress: &Progress,
    watch: Option<&LossWatch>,
) {
    let lost_now =
        |held: &Held| lost || held.is_lost() || watch.is_some_and(|w| w.lost(client, held));
    if !lost_now(&held) && !is_connected(client) && !interrupted() {
        let session = client.negotiated_session_timeout();
        if progress.verbose {
            eprintln!(
                "lock: ZooKeeper is out of reach; waiting up to {} for it, to release the lock",
                human(session)
            );
        }
        let deadline = Instant::now() + session + POLL;
        while !is_connected(client)
            && !lost_now(&held)
            && !interrupted()
            && Instant::now() < deadline
        {
            std::thread::sleep(POLL);
        }
    }
    progress.flush();
    let node = held.node_path().unwrap_or_default();
    let lost = lost_now(&held);
    if lost || !is_connected(client) {
        let fate = node_fate(client, &node);
        client.close();
        drop(held.release());
        if !lost {
            eprintln!("lock: warning: cannot release the lock: {fate}");
        } else if progress.verbose {
            eprintln!("lock: {fate}");
        }
        return;
    }
    match held.release() {
        Ok(()) => {
            if progress.verbose {
                eprintln!("lock: released {node}");
            }
        }
        Err(e) => {
            eprintln!("lock: warning: releasing the lock: {e} (closing the session removes it)")
        }
    }
    client.close();
}

/// Where a lock node stands that `lock` cannot delete: with ZooKeeper in
/// reach (on a new session) it looks; otherwise the node stays until the
/// server expires the session that owns it.
fn node_fate(client: &Client, node: &str) -> String {
    // A server that restarts restores its sessions with a whole timeout
    // ahead of each, counted from when it is back; one that is down expires
    // nothing.
    let timeout = human(client.negotiated_session_timeout());
    let expiry = format!(
        "until ZooKeeper expires the session that owns it: {timeout} after ZooKeeper last heard \
         from it, or, if ZooKeeper restarts meanwhile, {timeout} after it is back"
    );
    if !is_connected(client) {
        return format!("ZooKeeper is out of reach; the lock node {node} stays {expiry}");
    }
    match client.exists(node) {
        Ok(None) => format!("the lock node {node} is gone with the session that owned it"),
        Ok(Some(_)) => format!("the lock node {node} stays {expiry}"),
        Err(e) => format!(
            "cannot tell whether the lock node {node} is gone ({e}); if not, it stays {expiry}"
        ),
    }
}

/// A duration as people write it: `250 ms`, `1.5 s`, `2 min 30 s`, `3 h 5 min`.
pub(super) fn human(d: Duration) -> String {
    let secs = d.as_secs();
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if secs < 60 {
        // Tenths, without a trailing ".0".
        let tenths = d.as_millis().div_ceil(100);
        if tenths.is_multiple_of(10) {
            format!("{} s", tenths / 10)
        } else {
            format!("{}.{} s", tenths / 10, tenths % 10)
        }
    } else if secs < 3600 {
        format!("{} min {} s", secs / 60, secs % 60)
    } else {
        format!("{} h {} min", secs / 3600, secs % 3600 / 60)
    }
}

/// The exit code that stands for a command's status, as shells report it.
pub(super) fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => EX_SOFTWARE,
    }
}

pub(super) fn describe(kind: Kind) -> String {
    match kind {
        Kind::Mutex => "mutex".into(),
        Kind::Read => "read lock".into(),
        Kind::Write => "write lock".into(),
        Kind::Semaphore(n) => format!("one of {n} semaphore leases"),
    }
}

//! Integration tests of `latchkey lock` (and of `lock`, its alias) against
//! a real ZooKeeper.
//!
//! One server serves the whole binary (`common::server`); tests that break
//! connections do it through their own `FaultProxy`, so the shared server
//! stays healthy. Every wait has a deadline, and every `lock` process is
//! killed if a test fails.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{client, server, unique, wait_until, LATCHKEY, LOCK_ALIAS};
use latchkey_framework::{Client, ExponentialBackoffRetry};
use latchkey_recipes::{InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2};
use latchkey_test::{FaultProxy, TestingServer};

/// A fresh scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "latchkey-cli-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `lock` process; killed on drop if still running.
struct Proc {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    stderr_lines: Receiver<String>,
    readers: Vec<thread::JoinHandle<()>>,
}

/// `latchkey lock ARGS...`, with `LATCHKEY_CONNECT` cleared.
fn lock(args: &[&str]) -> Proc {
    run(&[LATCHKEY, "lock"], args)
}

/// `lock ARGS...` (the alias program), with `LATCHKEY_CONNECT` cleared.
fn lock_alias(args: &[&str]) -> Proc {
    run(&[LOCK_ALIAS], args)
}

/// `program` (its path, then its first words) with `args`.
fn run(program: &[&str], args: &[&str]) -> Proc {
    let mut child = Command::new(program[0])
        .args(&program[1..])
        .args(args)
        .env_remove("LATCHKEY_CONNECT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lock");
    let stdout = Arc::new(Mutex::new(String::new()));
    let stderr = Arc::new(Mutex::new(String::new()));
    let (tx, stderr_lines) = mpsc::channel();
    let mut out = child.stdout.take().expect("stdout");
    let err = child.stderr.take().expect("stderr");
    let (o, e) = (Arc::clone(&stdout), Arc::clone(&stderr));
    let readers = vec![
        thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            o.lock().unwrap().push_str(&s);
        }),
        thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                e.lock().unwrap().push_str(&format!("{line}\n"));
                let _ = tx.send(line);
            }
        }),
    ];
    Proc {
        child,
        stdout,
        stderr,
        stderr_lines,
        readers,
    }
}

impl Proc {
    /// Waits for the process to exit; panics (and kills it) past `within`.
    fn wait(mut self, within: Duration) -> Finished {
        let deadline = Instant::now() + within;
        let status = loop {
            match self.child.try_wait().expect("try_wait") {
                Some(status) => break status,
                None if Instant::now() >= deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!(
                        "lock did not exit within {within:?}\nstdout:\n{}\nstderr:\n{}\nserver log:\n{}",
                        self.stdout.lock().unwrap(),
                        self.stderr.lock().unwrap(),
                        server().log_tail(20)
                    );
                }
                None => thread::sleep(Duration::from_millis(20)),
            }
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let stdout = self.stdout.lock().unwrap().clone();
        let stderr = self.stderr.lock().unwrap().clone();
        Finished {
            status,
            stdout,
            stderr,
        }
    }

    fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid")
    }

    /// Waits for a stderr line containing `needle`.
    fn wait_stderr(&self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr_lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(_) => panic!(
                    "no stderr line with {needle:?} within {within:?}; stderr:\n{}",
                    self.stderr.lock().unwrap()
                ),
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.is_running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An exited `lock` process.
struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Finished {
    fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }

    fn expect_code(&self, want: i32) -> &Self {
        assert_eq!(
            self.code(),
            want,
            "exit status {:?}\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }
}

fn participants(c: &Client, path: &str) -> Vec<String> {
    InterProcessMutex::new(c, path)
        .unwrap()
        .participant_nodes()
        .unwrap()
}

fn read_pid(file: &Path) -> Option<i32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Whether `pid` runs: a zombie (dead, not yet reaped by whoever adopted
/// it) counts as gone.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// A shell script that starts `sleep 30` in the background, writes that
/// grandchild's pid to `pidfile` and waits for it: the pattern a wrapper
/// script without `exec` has. (The grandchild does not hold lock's output
/// pipes, so that the test sees lock's exit at once.)
fn grandchild_script(pidfile: &Path) -> String {
    format!(
        "sleep 30 </dev/null >/dev/null 2>&1 & echo $! > {}; wait",
        pidfile.display()
    )
}

fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).expect("send signal");
}

const QUICK: Duration = Duration::from_secs(15);

#[test]
fn exit_code_passes_through() {
    let cs = server().connect_string();
    let path = unique();
    let c = client();
    lock(&["--connect", &cs, &path, "--", "sh", "-c", "exit 3"])
        .wait(QUICK)
        .expect_code(3);
    lock(&["--connect", &cs, &path, "--", "true"])
        .wait(QUICK)
        .expect_code(0);
    // Death by a signal reads as 128 + signal, as in a shell.
    lock(&["--connect", &cs, &path, "--", "sh", "-c", "kill -TERM $$"])
        .wait(QUICK)
        .expect_code(128 + 15);
    // The command sees the lock in its environment, while it is held.
    let check = format!(
        "test \"$LATCHKEY_LOCK_PATH\" = {path} && test -n \"$LATCHKEY_FENCING_TOKEN\" \
         && case \"$LATCHKEY_LOCK_NODE\" in {path}/_c_*-lock-*) exit 0;; *) exit 9;; esac"
    );
    lock(&["--connect", &cs, &path, "--", "sh", "-c", &check])
        .wait(QUICK)
        .expect_code(0);
    // LATCHKEY_CONNECT is the default host list.
    let out = Command::new(LATCHKEY)
        .args(["lock", &path, "--", "true"])
        .env("LATCHKEY_CONNECT", &cs)
        .output()
        .expect("run lock");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // A command that does not exist: 127, and the lock is released.
    lock(&["--connect", &cs, &path, "--", "/nonexistent/latchkey-cmd"])
        .wait(QUICK)
        .expect_code(127);
    wait_until(QUICK, "no lock node left", || {
        participants(&c, &path).is_empty()
    });
    c.close();
}

#[test]
fn timeout_exits_75_and_leaves_no_node() {
    let cs = server().connect_string();
    let path = unique();
    let c = client();
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let guard = mutex.lock().unwrap();
    let started = Instant::now();
    let done = lock(&["--connect", &cs, "--timeout", "1", &path, "--", "true"]).wait(QUICK);
    done.expect_code(75);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "gave up too early"
    );
    assert!(done.stderr.contains("not taken within"), "{}", done.stderr);
    // --timeout 0 tries once.
    lock(&["--connect", &cs, "--timeout", "0", &path, "--", "true"])
        .wait(QUICK)
        .expect_code(75);
    let holder = guard.node_path();
    wait_until(QUICK, "only the holder's node left", || {
        participants(&c, &path) == [holder.clone()]
    });
    drop(guard);
    c.close();
}

#[test]
fn two_processes_never_interleave() {
    let cs = server().connect_string();
    let path = unique();
    let scratch = Scratch::new();
    let log = scratch.file("log");
    let script = format!(
        "echo \"start $$\" >> {0}; sleep 0.2; echo \"end $$\" >> {0}",
        log.display()
    );
    const RUNS: usize = 3;
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (cs, path, script) = (cs.clone(), path.clone(), script.clone());
            thread::spawn(move || {
                for _ in 0..RUNS {
                    lock(&["--connect", &cs, &path, "--", "sh", "-c", &script])
                        .wait(QUICK)
                        .expect_code(0);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let text = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * 2 * RUNS, "{text}");
    for pair in lines.chunks(2) {
        let (start, end) = (pair[0], pair[1]);
        let pid = start.strip_prefix("start ").expect(&text);
        assert_eq!(end, format!("end {pid}"), "interleaved:\n{text}");
    }
}

/// `latchkey inspect ARGS --connect <the shared server>`, to its end.
fn inspect(args: &[&str]) -> Finished {
    let cs = server().connect_string();
    let mut all = vec!["inspect", "--connect", cs.as_str()];
    all.extend_from_slice(args);
    run(&[LATCHKEY], &all).wait(QUICK)
}

/// The words of `table`, line by line, without the ages (`1.5s`), which
/// move between two reads.
fn without_ages(table: &str) -> Vec<Vec<&str>> {
    let age = |w: &str| {
        w.strip_suffix('s')
            .is_some_and(|n| n.contains('.') && n.parse::<f64>().is_ok())
    };
    table
        .lines()
        .map(|l| l.split_whitespace().filter(|w| !age(w)).collect())
        .collect()
}

/// `lock --list PATH` prints what `latchkey inspect PATH` prints: holders
/// and waiters in the recipes' queue order (`sort_key`), with the data the
/// waiting `lock` wrote in its node.
#[test]
fn list_prints_what_inspect_prints() {
    let cs = server().connect_string();
    let path = unique();
    let c = client();

    let none = lock(&["--connect", &cs, "--list", &path]).wait(QUICK);
    none.expect_code(0);
    assert_eq!(none.stdout, inspect(&[&path]).stdout);
    assert!(none.stdout.contains("no such node"), "{}", none.stdout);

    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let guard = mutex.lock().unwrap();
    let holder = guard.node_path();
    let waiter = lock(&["--connect", &cs, &path, "--", "true"]);
    wait_until(QUICK, "the lock process queues", || {
        participants(&c, &path).len() == 2
    });
    let listed = lock(&["--connect", &cs, "--list", &path]).wait(QUICK);
    listed.expect_code(0);
    let inspected = inspect(&[&path]);
    inspected.expect_code(0);
    assert_eq!(
        without_ages(&listed.stdout),
        without_ages(&inspected.stdout),
        "lock --list:\n{}\ninspect:\n{}",
        listed.stdout,
        inspected.stdout
    );
    // The alias program lists the same.
    let aliased = lock_alias(&["--connect", &cs, "--list", &path]).wait(QUICK);
    assert_eq!(without_ages(&aliased.stdout), without_ages(&listed.stdout));
    let lines: Vec<&str> = listed.stdout.lines().collect();
    let holder_line = lines
        .iter()
        .position(|l| l.starts_with("holder"))
        .unwrap_or_else(|| panic!("no holder line:\n{}", listed.stdout));
    assert!(lines[holder_line].contains(&holder), "{}", listed.stdout);
    let waiter_line = lines
        .iter()
        .position(|l| l.starts_with("waiter"))
        .unwrap_or_else(|| panic!("no waiter line:\n{}", listed.stdout));
    // The waiting lock process says who it is in its node.
    assert!(
        lines[waiter_line].contains(&format!("pid {}", waiter.pid())),
        "{}",
        listed.stdout
    );
    // Holder first, in queue order.
    assert!(holder_line < waiter_line, "{}", listed.stdout);

    drop(guard);
    waiter.wait(QUICK).expect_code(0);
    c.close();
}

/// Queues a `lock` (with `extra` options) behind a lock the test holds,
/// and returns the data of its node and the `--list` output.
fn queued_node_data(extra: &[&str], command: &[&str]) -> (String, String) {
    let cs = server().connect_string();
    let path = unique();
    let c = client();
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let guard = mutex.lock().unwrap();
    let mut args = vec!["--connect", cs.as_str()];
    args.extend_from_slice(extra);
    args.push(&path);
    args.push("--");
    args.extend_from_slice(command);
    let waiter = lock(&args);
    wait_until(QUICK, "the lock process queues", || {
        participants(&c, &path).len() == 2
    });
    let node = participants(&c, &path).pop().unwrap();
    let data = String::from_utf8(c.get_data(&node).expect("read the node").0).unwrap();
    let listed = lock(&["--connect", &cs, "--list", &path]).wait(QUICK);
    listed.expect_code(0);
    assert!(
        data.contains(&format!("pid {}", waiter.pid())),
        "node data {data:?}"
    );
    drop(guard);
    waiter.wait(QUICK).expect_code(0);
    c.close();
    (data, listed.stdout)
}

#[test]
fn node_data_names_the_program_not_its_arguments() {
    // The default ACL lets anyone read the node: no arguments go there.
    let (data, listed) = queued_node_data(&[], &["/bin/sh", "-c", "true", "hunter2-password"]);
    assert!(!data.contains("hunter2"), "arguments leaked: {data:?}");
    assert!(data.ends_with(": sh"), "the program name: {data:?}");
    assert!(!listed.contains("hunter2"), "{listed}");
    // --data TEXT says more, on purpose.
    let (data, listed) = queued_node_data(
        &["--data", "nightly backup of db-1"],
        &["sh", "-c", "true", "hunter2-password"],
    );
    assert!(data.ends_with(": nightly backup of db-1"), "{data:?}");
    assert!(!data.contains("hunter2"), "{data:?}");
    assert!(listed.contains("nightly backup of db-1"), "{listed}");
}

#[test]
fn list_shows_readers_writers_and_leases() {
    let cs = server().connect_string();
    let c = client();

    let rw_path = unique();
    let rw = InterProcessReadWriteLock::new(&c, &rw_path).unwrap();
    let read = rw.read_lock().lock().unwrap();
    // A second reader shares the lock; a writer must wait.
    lock(&[
        "--connect",
        &cs,
        "--read",
        "--timeout",
        "5",
        &rw_path,
        "--",
        "true",
    ])
    .wait(QUICK)
    .expect_code(0);
    lock(&[
        "--connect",
        &cs,
        "--write",
        "--timeout",
        "0.5",
        &rw_path,
        "--",
        "true",
    ])
    .wait(QUICK)
    .expect_code(75);
    let writer = lock(&["--connect", &cs, "--write", &rw_path, "--", "true"]);
    wait_until(QUICK, "the writer queues", || {
        c.get_children(&rw_path).map(|v| v.len()).unwrap_or(0) == 2
    });
    let listed = lock(&["--connect", &cs, "--list", &rw_path]).wait(QUICK);
    listed.expect_code(0);
    let out = &listed.stdout;
    assert!(out.contains("read-write lock"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("holder") && l.contains(" read ")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("waiter") && l.contains(" write ")),
        "{out}"
    );
    drop(read);
    writer.wait(QUICK).expect_code(0);

    let sem_path = unique();
    let sem = InterProcessSemaphoreV2::new(&c, &sem_path, 2).unwrap();
    let lease = sem.acquire().unwrap();
    // One lease is left for the lock command.
    lock(&[
        "--connect",
        &cs,
        "--semaphore",
        "2",
        "--timeout",
        "5",
        &sem_path,
        "--",
        "true",
    ])
    .wait(QUICK)
    .expect_code(0);
    let listed = lock(&["--connect", &cs, "--list", "--semaphore", "2", &sem_path]).wait(QUICK);
    listed.expect_code(0);
    let out = &listed.stdout;
    assert!(out.contains("semaphore"), "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("holder") && l.contains(" lease "))
        .unwrap_or_else(|| panic!("no lease holder:\n{out}"));
    assert!(line.contains(lease.node_name()), "{out}");
    drop(lease);
    c.close();
}

#[test]
fn bad_usage_exits_64() {
    let cases: &[&[&str]] = &[
        &[],
        &["--bogus", "/a", "--", "true"],
        &["/a"],
        &["/a", "--"],
        &["relative/path", "--", "true"],
        &["--semaphore", "0", "/a", "--", "true"],
        &["--read", "--write", "/a", "--", "true"],
        &["--timeout", "soon", "/a", "--", "true"],
        &["--timeout"],
        &["--on-lost", "sometimes", "/a", "--", "true"],
        &["--connect", "host:no-port", "/a", "--", "true"],
        &["--list", "/a", "--", "true"],
    ];
    for args in cases {
        let done = lock(args).wait(QUICK);
        done.expect_code(64);
        assert!(
            done.stderr.starts_with("lock: "),
            "{args:?}: {}",
            done.stderr
        );
        assert!(done.stderr.contains("--help"), "{args:?}: {}", done.stderr);
    }
    let help = lock(&["--help"]).wait(QUICK);
    help.expect_code(0);
    for needle in [
        "Usage: latchkey lock",
        "--on-lost",
        "Exit codes",
        "75",
        "78",
        "130",
    ] {
        assert!(help.stdout.contains(needle), "{needle}: {}", help.stdout);
    }
}

#[test]
fn unreachable_server_exits_69() {
    let scratch = Scratch::new();
    let ran = scratch.file("ran");
    let started = Instant::now();
    let done = lock(&[
        "--connect",
        "127.0.0.1:1",
        "--connection-timeout",
        "1",
        "--session-timeout",
        "2",
        "/a",
        "--",
        "touch",
        ran.to_str().unwrap(),
    ])
    .wait(QUICK);
    done.expect_code(69);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(
        done.stderr.contains("cannot reach ZooKeeper"),
        "{}",
        done.stderr
    );
    assert!(!ran.exists(), "the command ran without the lock");
}

/// Starts `lock` through a proxy, running a command that writes its pid to
/// `pidfile`, and waits until it holds the lock and the command runs.
fn hold_through_proxy(
    proxy: &FaultProxy,
    c: &Client,
    path: &str,
    extra: &[&str],
    script: &str,
    pidfile: &Path,
) -> (Proc, i32) {
    let pcs = proxy.connect_string();
    let mut args = vec![
        "--connect",
        &pcs,
        "--session-timeout",
        "2",
        "--connection-timeout",
        "2",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[path, "--", "sh", "-c", script]);
    let proc = lock(&args);
    wait_until(QUICK, "lock holds and the command runs", || {
        participants(c, path).len() == 1 && read_pid(pidfile).is_some()
    });
    let pid = read_pid(pidfile).unwrap();
    (proc, pid)
}

#[test]
fn lost_lock_kills_the_command() {
    let path = unique();
    let c = client();
    let scratch = Scratch::new();
    let pidfile = scratch.file("pid");
    let proxy = FaultProxy::start(server().addr()).expect("proxy");
    let script = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    let (proc, pid) = hold_through_proxy(&proxy, &c, &path, &[], &script, &pidfile);
    assert!(alive(pid));

    proxy.pause();
    let paused = Instant::now();
    let done = proc.wait(Duration::from_secs(12));
    done.expect_code(78);
    eprintln!("lock exited 78 {:?} after the pause", paused.elapsed());
    assert!(done.stderr.contains("lost the lock"), "{}", done.stderr);
    wait_until(Duration::from_secs(2), "the command is killed", || {
        !alive(pid)
    });
    // The server expires the cut-off session, and its node with it.
    wait_until(QUICK, "the lost node expires", || {
        participants(&c, &path).is_empty()
    });
    proxy.resume();
    c.close();
}

#[test]
fn lost_lock_with_warn_keeps_the_command() {
    let path = unique();
    let c = client();
    let scratch = Scratch::new();
    let pidfile = scratch.file("pid");
    let stop = scratch.file("stop");
    let proxy = FaultProxy::start(server().addr()).expect("proxy");
    // Runs until `stop` appears (at most 30 s), then exits 5.
    let script = format!(
        "echo $$ > {}; i=0; while [ ! -e {} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; exit 5",
        pidfile.display(),
        stop.display()
    );
    let (mut proc, pid) =
        hold_through_proxy(&proxy, &c, &path, &["--on-lost", "warn"], &script, &pidfile);

    proxy.pause();
    let line = proc.wait_stderr("WARNING", Duration::from_secs(12));
    assert!(line.contains("lost the lock"), "{line}");
    assert!(proc.is_running(), "lock exited on a warning");
    assert!(alive(pid), "the command was killed despite --on-lost warn");

    std::fs::write(&stop, b"").unwrap();
    proc.wait(QUICK).expect_code(5);
    proxy.resume();
    c.close();
}

#[test]
fn ctrl_c_stops_the_command_and_releases() {
    let cs = server().connect_string();
    let path = unique();
    let c = client();
    let scratch = Scratch::new();
    let pidfile = scratch.file("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    let proc = lock(&["--connect", &cs, &path, "--", "sh", "-c", &script]);
    wait_until(QUICK, "lock holds and the command runs", || {
        participants(&c, &path).len() == 1 && read_pid(&pidfile).is_some()
    });
    let pid = read_pid(&pidfile).unwrap();
    signal(proc.pid(), nix::sys::signal::Signal::SIGINT);
    let done = proc.wait(QUICK);
    done.expect_code(130);
    assert!(!alive(pid), "the command outlived lock");
    wait_until(QUICK, "the lock is released", || {
        participants(&c, &path).is_empty()
    });
    c.close();
}

#[test]
fn ctrl_c_stops_the_commands_whole_process_group() {
    let cs = server().connect_string();
    let path = unique();
    let c = client();
    let scratch = Scratch::new();
    let pidfile = scratch.file("pid");
    let script = grandchild_script(&pidfile);
    let proc = lock(&["--connect", &cs, &path, "--", "sh", "-c", &script]);
    wait_until(QUICK, "lock holds and the grandchild runs", || {
        participants(&c, &path).len() == 1 && read_pid(&pidfile).is_some()
    });
    let grandchild = read_pid(&pidfile).unwrap();
    assert!(alive(grandchild));
    signal(proc.pid(), nix::sys::signal::Signal::SIGINT);
    proc.wait(QUICK).expect_code(130);
    let outlived = wait_for_exit(grandchild, Duration::from_secs(5));
    // Clean up before failing, so that no sleep outlives the test.
    if outlived {
        signal(grandchild, nix::sys::signal::Signal::SIGKILL);
    }
    assert!(
        !outlived,
        "the command's background process {grandchild} outlived lock's Ctrl-C"
    );
    c.close();
}

#[test]
fn lost_lock_kills_the_commands_whole_process_group() {
    let path = unique();
    let c = client();
    let scratch = Scratch::new();
    let pidfile = scratch.file("pid");
    let proxy = FaultProxy::start(server().addr()).expect("proxy");
    let script = grandchild_script(&pidfile);
    let (proc, grandchild) = hold_through_proxy(&proxy, &c, &path, &[], &script, &pidfile);
    assert!(alive(grandchild));
    proxy.pause();
    let done = proc.wait(Duration::from_secs(12));
    done.expect_code(78);
    let outlived = wait_for_exit(grandchild, Duration::from_secs(5));
    if outlived {
        signal(grandchild, nix::sys::signal::Signal::SIGKILL);
    }
    assert!(
        !outlived,
        "the command's background process {grandchild} kept running without the lock"
    );
    proxy.resume();
    c.close();
}

#[test]
fn processes_left_by_the_command_stop_before_the_release() {
    let cs = server().connect_string();
    let path = unique();
    let scratch = Scratch::new();
    let pidfile = scratch.file("pid");
    // Leaves a background process behind and exits at once.
    let script = format!(
        "sleep 30 </dev/null >/dev/null 2>&1 & echo $! > {}",
        pidfile.display()
    );
    lock(&["--connect", &cs, &path, "--", "sh", "-c", &script])
        .wait(QUICK)
        .expect_code(0);
    let grandchild = read_pid(&pidfile).expect("the script wrote its pid");
    let outlived = wait_for_exit(grandchild, Duration::from_secs(5));
    if outlived {
        signal(grandchild, nix::sys::signal::Signal::SIGKILL);
    }
    assert!(
        !outlived,
        "the command's background process {grandchild} kept running after the release"
    );
}

/// Waits up to `within` for `pid` to exit; true if it still runs then.
fn wait_for_exit(pid: i32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while alive(pid) {
        if Instant::now() >= deadline {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn ctrl_c_while_waiting_leaves_no_node() {
    let cs = server().connect_string();
    let path = unique();
    let c = client();
    let scratch = Scratch::new();
    let ran = scratch.file("ran");
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let guard = mutex.lock().unwrap();
    let proc = lock(&[
        "--connect",
        &cs,
        &path,
        "--",
        "touch",
        ran.to_str().unwrap(),
    ]);
    wait_until(QUICK, "lock queues", || participants(&c, &path).len() == 2);
    signal(proc.pid(), nix::sys::signal::Signal::SIGINT);
    proc.wait(QUICK).expect_code(130);
    let holder = guard.node_path();
    wait_until(QUICK, "the waiter's node is gone", || {
        participants(&c, &path) == [holder.clone()]
    });
    drop(guard);
    assert!(!ran.exists(), "the command ran after Ctrl-C");
    c.close();
}

/// Against a three-member ensemble: the lock survives the loss of the
/// leader while a command runs under it, and a second `lock` then gets in.
#[test]
fn works_against_an_ensemble_through_a_leader_kill() {
    let mut cluster = latchkey_test::TestingCluster::start(3).expect("ensemble");
    let cs = cluster.connect_string();
    let path = unique();
    let scratch = Scratch::new();
    let pidfile = scratch.file("pid");
    let stop = scratch.file("stop");
    let script = format!(
        "echo $$ > {}; i=0; while [ ! -e {} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done",
        pidfile.display(),
        stop.display()
    );
    let args = [
        "--connect",
        &cs,
        "--session-timeout",
        "10",
        &path,
        "--",
        "sh",
        "-c",
    ];
    let holder = lock(&[&args[..], &[script.as_str()]].concat());
    wait_until(QUICK, "the command runs", || read_pid(&pidfile).is_some());
    let leader = cluster.leader().expect("a leader");
    cluster.kill(leader).expect("kill the leader");
    // A second lock waits while the first command still holds.
    let waiter = lock(&["--connect", &cs, "--timeout", "60", &path, "--", "true"]);
    let c = Client::builder()
        .connect_string(&cs)
        .session_timeout(Duration::from_secs(10))
        .build()
        .expect("build client");
    c.start().expect("start client");
    assert!(c.block_until_connected(QUICK).unwrap());
    wait_until(QUICK, "the second lock queues", || {
        participants(&c, &path).len() == 2
    });
    cluster.restart(leader).expect("restart the old leader");
    std::fs::write(&stop, b"").unwrap();
    holder.wait(Duration::from_secs(60)).expect_code(0);
    waiter.wait(Duration::from_secs(60)).expect_code(0);
    wait_until(QUICK, "no node left", || participants(&c, &path).is_empty());
    c.close();
}

#[test]
fn options_after_the_path_apply() {
    let cs = server().connect_string();
    let path = unique();
    let c = client();
    lock(&[
        &path,
        "--connect",
        &cs,
        "--timeout",
        "5",
        "--",
        "sh",
        "-c",
        "exit 7",
    ])
    .wait(QUICK)
    .expect_code(7);
    // Without `--`, the first word that is not an option starts the command.
    lock(&[&path, "--connect", &cs, "-v", "sh", "-c", "exit 8"])
        .wait(QUICK)
        .expect_code(8);
    // An option lock does not know, after the path, is refused by name.
    let done = lock(&[&path, "--connect", &cs, "--bogus", "--", "true"]).wait(QUICK);
    done.expect_code(64);
    assert!(done.stderr.contains("--bogus"), "{}", done.stderr);
    wait_until(QUICK, "no lock node left", || {
        participants(&c, &path).is_empty()
    });
    c.close();
}

#[test]
fn timeout_messages_read_as_durations() {
    let cs = server().connect_string();
    let path = unique();
    let c = client();
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let guard = mutex.lock().unwrap();
    let once = lock(&["--connect", &cs, "--timeout", "0", &path, "--", "true"]).wait(QUICK);
    once.expect_code(75);
    assert!(
        once.stderr.contains("not taken: the lock is held"),
        "{}",
        once.stderr
    );
    let timed = lock(&["--connect", &cs, "--timeout", "0.5", &path, "--", "true"]).wait(QUICK);
    timed.expect_code(75);
    assert!(
        timed.stderr.contains("not taken within 500 ms"),
        "{}",
        timed.stderr
    );
    drop(guard);
    c.close();
}

#[test]
fn a_huge_timeout_means_no_timeout() {
    let cs = server().connect_string();
    let path = unique();
    let c = client();
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let guard = mutex.lock().unwrap();
    let mut waiter = lock(&["--connect", &cs, "--timeout", "1e30", &path, "--", "true"]);
    wait_until(QUICK, "the lock process queues", || {
        participants(&c, &path).len() == 2 || !waiter.is_running()
    });
    assert!(waiter.is_running(), "lock gave up on --timeout 1e30");
    drop(guard);
    waiter.wait(QUICK).expect_code(0);
    c.close();
}

#[test]
fn a_loss_with_zookeeper_down_says_where_the_node_goes() {
    let path = unique();
    let c = client();
    let scratch = Scratch::new();
    let pidfile = scratch.file("pid");
    let proxy = FaultProxy::start(server().addr()).expect("proxy");
    let script = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    let (proc, _) = hold_through_proxy(&proxy, &c, &path, &["-v"], &script, &pidfile);
    // ZooKeeper goes away for lock: connections refused.
    proxy.set_refuse(true);
    proxy.cut();
    let done = proc.wait(Duration::from_secs(12));
    done.expect_code(78);
    assert!(
        !done.stderr.contains("goes with it"),
        "claims the node is gone with the session:\n{}",
        done.stderr
    );
    assert!(
        done.stderr.contains("until ZooKeeper expires"),
        "does not say the node waits for the session to expire:\n{}",
        done.stderr
    );
    // The session's expiry is not bounded by when ZooKeeper last heard
    // from it: a restarted server gives every session it restores a whole
    // timeout again, and a server that is down expires nothing.
    assert!(
        !done.stderr.contains("at most"),
        "promises a bound that a server restart breaks:\n{}",
        done.stderr
    );
    assert!(
        done.stderr.contains("if ZooKeeper restarts"),
        "does not say what a server restart does to the expiry:\n{}",
        done.stderr
    );
    // ... which the server does.
    wait_until(QUICK, "the server expires the session", || {
        participants(&c, &path).is_empty()
    });
    c.close();
}

#[test]
fn verbose_tells_reconnected_and_released_after_an_outage() {
    let path = unique();
    let c = client();
    let scratch = Scratch::new();
    let pidfile = scratch.file("pid");
    let stop = scratch.file("stop");
    let proxy = FaultProxy::start(server().addr()).expect("proxy");
    let script = format!(
        "echo $$ > {}; i=0; while [ ! -e {} ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done",
        pidfile.display(),
        stop.display()
    );
    let pcs = proxy.connect_string();
    let proc = lock(&[
        "-v",
        "--connect",
        &pcs,
        "--session-timeout",
        "8",
        &path,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    wait_until(QUICK, "lock holds and the command runs", || {
        participants(&c, &path).len() == 1 && read_pid(&pidfile).is_some()
    });
    // The command ends while ZooKeeper is out of reach, and it comes back
    // within the session timeout: lock reconnects and releases.
    proxy.set_refuse(true);
    proxy.cut();
    proc.wait_stderr("Suspended", QUICK);
    std::fs::write(&stop, b"").unwrap();
    thread::sleep(Duration::from_millis(300)); // the outage goes on a moment after the command ended
    proxy.set_refuse(false);
    let done = proc.wait(QUICK);
    done.expect_code(0);
    let at = |needle: &str| {
        done.stderr
            .find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in:\n{}", done.stderr))
    };
    assert!(at("Suspended") < at("Reconnected"), "{}", done.stderr);
    assert!(at("Reconnected") < at("lock: released"), "{}", done.stderr);
    wait_until(QUICK, "no lock node left", || {
        participants(&c, &path).is_empty()
    });
    c.close();
}

/// The state letter of `pid` in /proc (`R`, `S`, `T` for stopped, ...).
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// At an interactive shell on a terminal (bash in a pty from `script`),
/// the command gets the terminal: it reads from it, and a Ctrl-Z typed
/// there stops `lock` with the command, so that the shell reports the job
/// stopped; `fg` resumes both.
#[test]
fn at_a_terminal_the_command_reads_it_and_ctrl_z_stops_lock_too() {
    use std::io::Write;
    let cs = server().connect_string();
    let path = unique();
    let c = client();
    let scratch = Scratch::new();
    let (ready, out) = (scratch.file("ready"), scratch.file("out"));
    let mut term = Command::new("script")
        .args(["-qec", "bash --norc --noprofile -i", "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("script(1) from util-linux runs the terminal");
    let mut keys = term.stdin.take().expect("stdin");
    let mut typed = |text: &str| {
        keys.write_all(text.as_bytes()).unwrap();
        keys.flush().unwrap();
    };
    let fail = |term: &mut Child, why: &str| -> ! {
        let _ = term.kill();
        let _ = term.wait();
        panic!("{why}");
    };
    typed(&format!(
        "{LATCHKEY} lock --connect {cs} {path} -- sh -c 'echo x > {}; exec head -n1 > {}'\n",
        ready.display(),
        out.display()
    ));
    let deadline = Instant::now() + QUICK;
    while !ready.exists() {
        if Instant::now() > deadline {
            fail(&mut term, "the command did not start under the lock");
        }
        thread::sleep(Duration::from_millis(20));
    }
    let node = participants(&c, &path).pop().expect("lock's node");
    let data = String::from_utf8(c.get_data(&node).unwrap().0).unwrap();
    let lock_pid: i32 = data
        .split_whitespace()
        .skip_while(|w| *w != "pid")
        .nth(1)
        .and_then(|p| p.trim_end_matches(':').parse().ok())
        .unwrap_or_else(|| panic!("no pid in {data:?}"));

    typed("\x1a"); // Ctrl-Z
    let deadline = Instant::now() + QUICK;
    while proc_state(lock_pid) != Some('T') {
        if Instant::now() > deadline {
            fail(&mut term, "lock did not stop with its command on Ctrl-Z");
        }
        thread::sleep(Duration::from_millis(20));
    }
    typed("fg\n");
    let deadline = Instant::now() + QUICK;
    while proc_state(lock_pid) == Some('T') {
        if Instant::now() > deadline {
            fail(&mut term, "lock did not run again on fg");
        }
        thread::sleep(Duration::from_millis(20));
    }
    typed("hello\n");
    let deadline = Instant::now() + QUICK;
    while !std::fs::read_to_string(&out).is_ok_and(|s| s.contains("hello")) {
        if Instant::now() > deadline {
            fail(
                &mut term,
                "the command did not read the line from the terminal",
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    wait_until(QUICK, "the lock is released", || {
        participants(&c, &path).is_empty()
    });
    typed("exit\n");
    let deadline = Instant::now() + QUICK;
    while matches!(term.try_wait(), Ok(None)) {
        if Instant::now() > deadline {
            fail(&mut term, "the shell did not exit");
        }
        thread::sleep(Duration::from_millis(20));
    }
    c.close();
}

/// Kills `pids` that are still alive (cleanup before an assertion fails).
fn kill_leftovers(pids: &[i32]) {
    for &pid in pids {
        if alive(pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

#[test]
fn sigkill_of_lock_kills_the_command_within_a_second() {
    sigkill_kills_the_command_within_a_second(lock);
}

/// The same through the `lock` alias program, whose watchdog is `lock`
/// itself.
#[test]
fn sigkill_of_the_lock_alias_kills_the_command_within_a_second() {
    sigkill_kills_the_command_within_a_second(lock_alias);
}

fn sigkill_kills_the_command_within_a_second(lock: fn(&[&str]) -> Proc) {
    let cs = server().connect_string();
    let path = unique();
    let c = client();
    let scratch = Scratch::new();
    let pidfile = scratch.file("pid");
    let gpidfile = scratch.file("gpid");
    // The command (a shell) writes its pid, starts a background process in
    // its group that writes its own, and waits.
    let script = format!(
        "sleep 30 </dev/null >/dev/null 2>&1 & echo $! > {}; echo $$ > {}; wait",
        gpidfile.display(),
        pidfile.display()
    );
    let mut proc = lock(&[
        "--connect",
        &cs,
        "--session-timeout",
        "2",
        &path,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    wait_until(QUICK, "lock holds and the command runs", || {
        participants(&c, &path).len() == 1
            && read_pid(&pidfile).is_some()
            && read_pid(&gpidfile).is_some()
    });
    let (pid, grandchild) = (read_pid(&pidfile).unwrap(), read_pid(&gpidfile).unwrap());
    assert!(alive(pid) && alive(grandchild));

    // SIGKILL: lock gets no chance to stop the command itself.
    proc.child.kill().expect("SIGKILL lock");
    let killed = Instant::now();
    let _ = proc.child.wait();
    let command_outlived = wait_for_exit(pid, Duration::from_secs(1));
    let grandchild_outlived = wait_for_exit(grandchild, Duration::from_millis(100));
    let after = killed.elapsed();
    eprintln!("checked {after:?} after the SIGKILL");
    kill_leftovers(&[pid, grandchild]);
    assert!(
        !command_outlived,
        "the command {pid} still ran {after:?} after lock was SIGKILLed"
    );
    assert!(
        !grandchild_outlived,
        "the command's background process {grandchild} still ran {after:?} after lock was SIGKILLed"
    );
    // The watchdog did it, and said so on lock's stderr.
    proc.wait_stderr("killed the command's process group", QUICK);
    // The node goes with the session; then another holder may come.
    wait_until(QUICK, "the killed lock's session expires", || {
        participants(&c, &path).is_empty()
    });
    lock(&["--connect", &cs, "--timeout", "0", &path, "--", "true"])
        .wait(QUICK)
        .expect_code(0);
    c.close();
}

/// `flock`'s own options mean the same to `lock`: -n, -w SECS, -c CMD, -s
/// and -x, also bundled (`-xn`) and with the value attached (`-w1`).
#[test]
fn flock_options_work() {
    let cs = server().connect_string();
    let c = client();

    // -c CMD runs CMD with `sh -c`, before or after PATH.
    let path = unique();
    lock(&["--connect", &cs, &path, "-c", "test x = x && exit 3"])
        .wait(QUICK)
        .expect_code(3);
    lock(&["--connect", &cs, "-c", "exit 4", &path])
        .wait(QUICK)
        .expect_code(4);
    // -c and a command as well: which one?
    lock(&["--connect", &cs, &path, "-c", "true", "--", "true"])
        .wait(QUICK)
        .expect_code(64);

    // -n: don't wait; -w SECS: wait that long.
    let mutex = InterProcessMutex::new(&c, &path).unwrap();
    let guard = mutex.lock().unwrap();
    let started = Instant::now();
    let done = lock(&["--connect", &cs, "-n", &path, "true"]).wait(QUICK);
    done.expect_code(75);
    assert!(done.stderr.contains("the lock is held"), "{}", done.stderr);
    assert!(started.elapsed() < Duration::from_secs(5));
    let started = Instant::now();
    lock(&["--connect", &cs, "-w", "1", &path, "true"])
        .wait(QUICK)
        .expect_code(75);
    assert!(started.elapsed() >= Duration::from_secs(1), "gave up early");
    lock(&["--connect", &cs, "-w0.5", &path, "-c", "true"])
        .wait(QUICK)
        .expect_code(75);
    drop(guard);
    lock(&["--connect", &cs, "-n", &path, "-c", "exit 0"])
        .wait(QUICK)
        .expect_code(0);

    // -s: the read side of a read-write lock; -x: the write side.
    let rw_path = unique();
    let rw = InterProcessReadWriteLock::new(&c, &rw_path).unwrap();
    let read = rw.read_lock().lock().unwrap();
    lock(&["--connect", &cs, "-s", "-n", &rw_path, "true"])
        .wait(QUICK)
        .expect_code(0);
    lock(&["--connect", &cs, "-sn", &rw_path, "-c", "exit 0"])
        .wait(QUICK)
        .expect_code(0);
    lock(&["--connect", &cs, "-x", "-n", &rw_path, "true"])
        .wait(QUICK)
        .expect_code(75);
    lock(&["--connect", &cs, "-xn", &rw_path, "true"])
        .wait(QUICK)
        .expect_code(75);
    drop(read);
    let write = rw.write_lock().lock().unwrap();
    lock(&["--connect", &cs, "-s", "-n", &rw_path, "true"])
        .wait(QUICK)
        .expect_code(75);
    lock(&["--connect", &cs, "-x", "-n", &rw_path, "true"])
        .wait(QUICK)
        .expect_code(75);
    drop(write);
    lock(&["--connect", &cs, "-x", "-n", &rw_path, "true"])
        .wait(QUICK)
        .expect_code(0);

    // They go with the long options as before, and clash as those do.
    for bad in [
        &["-s", "-x", "/a", "true"][..],
        &["-s", "--write", "/a", "true"],
        &["-x", "--semaphore", "2", "/a", "true"],
        &["-n", "--timeout", "3", "/a", "true"],
        &["-w", "soon", "/a", "true"],
        &["-c"],
        &["-nq", "/a", "true"],
    ] {
        let done = lock(bad).wait(QUICK);
        done.expect_code(64);
    }
    c.close();
}

/// The message after a loss with ZooKeeper down holds across a restart: the
/// node outlives "a session timeout after ZooKeeper last heard from it" (the
/// old message's "at most" bound), and goes about a session timeout after
/// the server is back.
#[test]
fn a_lost_node_outlives_a_server_restart_as_the_message_says() {
    let mut zk = TestingServer::start().expect("start a ZooKeeper of its own");
    let cs = zk.connect_string();
    let path = unique();
    let scratch = Scratch::new();
    let pidfile = scratch.file("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    // 4 s: the test server's largest session timeout (20 ticks of 200 ms).
    let proc = lock(&[
        "--connect",
        &cs,
        "--session-timeout",
        "4",
        "--connection-timeout",
        "2",
        "-v",
        &path,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    // The command runs only once the lock is held.
    wait_until(QUICK, "the command runs", || read_pid(&pidfile).is_some());
    zk.stop().expect("stop ZooKeeper");
    let stopped = Instant::now();
    let done = proc.wait(Duration::from_secs(20));
    done.expect_code(78);
    assert!(
        done.stderr
            .contains("if ZooKeeper restarts meanwhile, 4 s after it is back"),
        "{}",
        done.stderr
    );
    // Past the old bound, then the server comes back.
    thread::sleep(Duration::from_millis(4500).saturating_sub(stopped.elapsed()));
    zk.restart().expect("restart ZooKeeper");
    let back = Instant::now();
    let c = Client::builder()
        .connect_string(&cs)
        .session_timeout(Duration::from_secs(4))
        .connection_timeout(Duration::from_secs(5))
        .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 10))
        .build()
        .expect("build client");
    c.start().expect("start client");
    assert!(c.block_until_connected(QUICK).unwrap(), "cannot reconnect");
    let there = participants(&c, &path).len();
    let looked = back.elapsed();
    eprintln!(
        "{there} node(s) {:?} after the server last heard from lock, {looked:?} after the restart",
        stopped.elapsed()
    );
    // (Only while well within the new session timeout, so that a slow
    // machine does not fail this.)
    if looked < Duration::from_secs(3) {
        assert_eq!(
            there,
            1,
            "the node is gone {looked:?} after the restart, {:?} after the stop",
            stopped.elapsed()
        );
    }
    wait_until(
        Duration::from_secs(12),
        "the node expires after the restart",
        || participants(&c, &path).is_empty(),
    );
    let gone = back.elapsed();
    eprintln!("the node went {gone:?} after the restart");
    assert!(
        gone < Duration::from_secs(4) + Duration::from_secs(3),
        "{gone:?}"
    );
    c.close();
}

/// `--semaphore N` (or `--leases N`) takes one lease of an
/// `InterProcessSemaphoreV2` with N leases: of three `lock` processes
/// with two leases, two run their command and the third waits, its lease
/// queued (`inspect --leases 2` tells it as the waiter), until a lease
/// comes back.
#[test]
fn leases_admit_at_most_n_commands() {
    let cs = server().connect_string();
    let path = unique();
    let c = client();
    let scratch = Scratch::new();
    let dir = scratch.0.display().to_string();
    // Each command marks itself running, waits for `go`, unmarks itself.
    let script = format!(
        "touch {dir}/run.$$; i=0; while [ ! -e {dir}/go ] && [ $i -lt 600 ]; do \
         sleep 0.05; i=$((i+1)); done; rm {dir}/run.$$"
    );
    let running = || {
        std::fs::read_dir(&scratch.0)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("run."))
            })
            .count()
    };
    let leases = |c: &Client| {
        c.get_children(&format!("{path}/leases"))
            .map(|v| v.len())
            .unwrap_or(0)
    };
    let procs: Vec<Proc> = ["--semaphore", "--leases", "--leases"]
        .iter()
        .map(|option| lock(&["--connect", &cs, option, "2", &path, "-c", &script]))
        .collect();
    // The third lease node exists only once its process waits behind two
    // holders (it adds its lease, sees three, and waits).
    wait_until(QUICK, "two commands run and a third lease waits", || {
        running() == 2 && leases(&c) == 3
    });
    assert_eq!(running(), 2, "a third command ran with two leases");
    let listed = inspect(&["--leases", "2", &path]);
    listed.expect_code(0);
    let roles: Vec<&str> = listed
        .stdout
        .lines()
        .filter(|l| l.contains(" lease "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(roles, ["holder", "holder", "waiter"], "{}", listed.stdout);
    // Without --leases, inspect cannot tell holders from waiters.
    let unsure = inspect(&[&path]);
    assert!(
        unsure
            .stdout
            .lines()
            .filter(|l| l.starts_with("lease "))
            .count()
            == 3,
        "{}",
        unsure.stdout
    );
    std::fs::write(scratch.file("go"), b"").unwrap();
    for p in procs {
        p.wait(QUICK).expect_code(0);
    }
    assert_eq!(running(), 0);
    wait_until(QUICK, "no lease left", || leases(&c) == 0);
    c.close();
}

/// The `lock` program is `latchkey lock` under its older name: the same
/// options, exit codes and help (which names the program it runs as).
#[test]
fn the_lock_alias_is_latchkey_lock() {
    let cs = server().connect_string();
    let path = unique();
    lock_alias(&["--connect", &cs, "-n", &path, "-c", "exit 3"])
        .wait(QUICK)
        .expect_code(3);
    lock_alias(&["--bogus", &path, "true"])
        .wait(QUICK)
        .expect_code(64);
    let help = lock_alias(&["--help"]).wait(QUICK);
    help.expect_code(0);
    assert!(help.stdout.starts_with("Usage: lock "), "{}", help.stdout);
    let help = lock(&["--help"]).wait(QUICK);
    help.expect_code(0);
    assert!(
        help.stdout.starts_with("Usage: latchkey lock "),
        "{}",
        help.stdout
    );
    // `latchkey --help` tells the lock command.
    let top = run(&[LATCHKEY], &["--help"]).wait(QUICK);
    assert!(top.stdout.contains("latchkey lock"), "{}", top.stdout);
}

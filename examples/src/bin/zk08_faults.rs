//! `zk08_faults`: the same connection faults against a client built on the
//! `zookeeper` crate (0.8) and against latchkey, side by side.
//!
//! ```text
//! cargo run --release -p latchkey-examples --bin zk08_faults
//! ```
//!
//! latchkey speaks ZooKeeper's protocol itself because the `zookeeper`
//! crate could not carry a lock through a connection fault (see the
//! README). This program makes that evidence reproducible, so that the
//! choice can be checked again when that crate changes. It starts its own
//! ZooKeeper (Debian's, through the test harness) on 127.0.0.1, puts a
//! `FaultProxy` between each client and the server, and prints a Markdown
//! table of what each client did:
//!
//! - a silent partition (the proxy forwards nothing) for twice the session
//!   timeout: is it noticed, what happens to a read sent at its start, and
//!   is the handle usable after it;
//! - one connection cut while the session lives: does an ephemeral node
//!   survive, and does a watch set before the cut still fire;
//! - ZooKeeper out of reach (connections refused) for twice the session
//!   timeout: is the handle usable once it is back;
//! - a busy client (reads back to back for longer than the session
//!   timeout) whose connection is cut once: is it usable after that.
//!
//! Every step is bounded in time; the whole run takes about a minute and a
//! half. docs/RELIABILITY.md shows the table of the last run.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use latchkey_framework::{Client, CreateMode, ExponentialBackoffRetry};
use latchkey_test::{unique_path, FaultProxy, TestingServer};

/// The session timeout both clients ask for.
const SESSION: Duration = Duration::from_secs(3);
/// How long the partition and the outage last: twice the session timeout.
const FAULT: Duration = Duration::from_secs(6);
/// How long the busy client reads back to back before its connection is cut.
const BUSY: Duration = Duration::from_secs(4);
/// How long a client has to be usable again after a fault ends.
const RECOVERY: Duration = Duration::from_secs(8);
/// Bound on one call.
const CALL: Duration = Duration::from_secs(2);

type Res<T> = Result<T, String>;

/// A client under test, as the scenarios use it.
trait Subject: Send + Sync {
    /// Its state, in its own words.
    fn state(&self) -> String;
    /// The states it reported to its listener.
    fn states(&self) -> &Recorder;
    /// Reads a node (`/`), and says how it went.
    fn read(&self) -> Res<()>;
    /// Creates an ephemeral node.
    fn create_ephemeral(&self, path: &str) -> Res<()>;
    /// Sets a watch on `path` that sends on `fired` when it fires.
    fn watch(&self, path: &str, fired: mpsc::Sender<()>) -> Res<()>;
    /// Ends the session.
    fn close(&self);
}

/// The states a client reported, with when.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(Instant, String)>>>);

impl Recorder {
    fn push(&self, state: String) {
        if let Ok(mut v) = self.0.lock() {
            v.push((Instant::now(), state));
        }
    }

    /// The states reported after `since`, as `Suspended at 2.0 s, Lost at 3.0 s`.
    fn since(&self, since: Instant) -> String {
        let v = self.0.lock().map(|v| v.clone()).unwrap_or_default();
        let seen: Vec<String> = v
            .into_iter()
            .filter(|(at, _)| *at >= since)
            .map(|(at, s)| format!("{s} at {:.1} s", (at - since).as_secs_f64()))
            .collect();
        if seen.is_empty() {
            "no state change".into()
        } else {
            seen.join(", ")
        }
    }
}

/// A client on the `zookeeper` crate 0.8.
struct Zk08 {
    zk: zookeeper::ZooKeeper,
    states: Recorder,
}

impl Zk08 {
    fn connect(connect: &str) -> Res<Arc<dyn Subject>> {
        let states = Recorder::default();
        let zk = zookeeper::ZooKeeper::connect(connect, SESSION, |_| {})
            .map_err(|e| format!("zookeeper 0.8 connect: {e:?}"))?;
        let rec = states.clone();
        zk.add_listener(move |s| rec.push(format!("{s:?}")));
        let subject: Arc<dyn Subject> = Arc::new(Zk08 { zk, states });
        wait_usable(&subject, Duration::from_secs(20))?;
        Ok(subject)
    }
}

impl Subject for Zk08 {
    fn state(&self) -> String {
        // The crate has no state getter; its last reported state.
        let v = self.states.0.lock().map(|v| v.clone()).unwrap_or_default();
        v.last()
            .map_or_else(|| "Connected".into(), |(_, s)| s.clone())
    }

    fn states(&self) -> &Recorder {
        &self.states
    }

    fn read(&self) -> Res<()> {
        self.zk
            .exists("/", false)
            .map(drop)
            .map_err(|e| format!("{e:?}"))
    }

    fn create_ephemeral(&self, path: &str) -> Res<()> {
        self.zk
            .create(
                path,
                Vec::new(),
                zookeeper::Acl::open_unsafe().clone(),
                zookeeper::CreateMode::Ephemeral,
            )
            .map(drop)
            .map_err(|e| format!("{e:?}"))
    }

    fn watch(&self, path: &str, fired: mpsc::Sender<()>) -> Res<()> {
        let fired = Mutex::new(fired);
        self.zk
            .exists_w(path, move |_| {
                if let Ok(tx) = fired.lock() {
                    let _ = tx.send(());
                }
            })
            .map(drop)
            .map_err(|e| format!("{e:?}"))
    }

    fn close(&self) {
        let _ = self.zk.close();
    }
}

/// A latchkey client.
struct Latchkey {
    client: Client,
    states: Recorder,
    _listener: latchkey_framework::ListenerHandle,
}

impl Latchkey {
    fn connect(connect: &str) -> Res<Arc<dyn Subject>> {
        let client = Client::builder()
            .connect_string(connect)
            .session_timeout(SESSION)
            .connection_timeout(CALL)
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 3))
            .build()
            .map_err(|e| e.to_string())?;
        let states = Recorder::default();
        let rec = states.clone();
        let listener = client.add_listener(move |s| rec.push(format!("{s:?}")));
        client.start().map_err(|e| e.to_string())?;
        let subject: Arc<dyn Subject> = Arc::new(Latchkey {
            client,
            states,
            _listener: listener,
        });
        wait_usable(&subject, Duration::from_secs(20))?;
        Ok(subject)
    }
}

impl Subject for Latchkey {
    fn state(&self) -> String {
        match self.client.state() {
            Some(s) => format!("{s:?}"),
            None => "none".into(),
        }
    }

    fn states(&self) -> &Recorder {
        &self.states
    }

    fn read(&self) -> Res<()> {
        self.client.exists("/").map(drop).map_err(|e| e.to_string())
    }

    fn create_ephemeral(&self, path: &str) -> Res<()> {
        self.client
            .create()
            .mode(CreateMode::Ephemeral)
            .for_path(path, b"")
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn watch(&self, path: &str, fired: mpsc::Sender<()>) -> Res<()> {
        self.client
            .exists_watch(path, move |_| {
                let _ = fired.send(());
            })
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn close(&self) {
        self.client.close();
    }
}

fn main() {
    if std::env::args()
        .nth(1)
        .is_some_and(|a| a == "-h" || a == "--help")
    {
        println!("usage: zk08_faults   (starts its own ZooKeeper on 127.0.0.1)");
        return;
    }
    if let Err(e) = run() {
        eprintln!("zk08_faults: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let started = Instant::now();
    println!("starting ZooKeeper ...");
    let server = TestingServer::start().map_err(|e| format!("cannot start ZooKeeper: {e}"))?;
    let observer = latchkey_examples::setup::new_client(&server.connect_string())?;
    type Connect = fn(&str) -> Res<Arc<dyn Subject>>;
    let subjects: [(&str, Connect); 2] = [
        ("`zookeeper` 0.8", Zk08::connect),
        ("latchkey", Latchkey::connect),
    ];
    let mut columns = Vec::new();
    for (name, connect) in subjects {
        println!("running the faults against {name} ...");
        let env = Env {
            server: &server,
            observer: &observer,
            connect,
        };
        let mut cells = Vec::new();
        cells.extend(silent_partition(&env)?);
        cells.extend(cut_within_session(&env)?);
        cells.push(outage_longer_than_session(&env)?);
        cells.push(busy_client_cut_once(&env)?);
        columns.push((name, cells));
    }
    observer.close();
    let rows = [
        format!(
            "silent partition of {} s (session {} s): what the client reports",
            FAULT.as_secs(),
            SESSION.as_secs()
        ),
        "silent partition: a read sent at its start".into(),
        "silent partition: the handle after it ends".into(),
        "one connection cut, session alive: an ephemeral node".into(),
        "one connection cut, session alive: a watch set before it".into(),
        format!(
            "ZooKeeper refused for {} s (> session): the handle once it is back",
            FAULT.as_secs()
        ),
        format!(
            "busy client (back-to-back reads for {} s), one connection cut",
            BUSY.as_secs()
        ),
    ];
    println!();
    println!("| fault | {} | {} |", columns[0].0, columns[1].0);
    println!("|---|---|---|");
    for (i, row) in rows.iter().enumerate() {
        println!("| {row} | {} | {} |", columns[0].1[i], columns[1].1[i]);
    }
    println!("\ndone in {:.0?}", started.elapsed());
    Ok(())
}

/// What a scenario needs.
struct Env<'a> {
    server: &'a TestingServer,
    observer: &'a Client,
    connect: fn(&str) -> Res<Arc<dyn Subject>>,
}

impl Env<'_> {
    /// A proxy to the server and a client through it.
    fn client(&self) -> Res<(FaultProxy, Arc<dyn Subject>)> {
        let proxy = FaultProxy::start(self.server.addr()).map_err(|e| e.to_string())?;
        let subject = (self.connect)(&proxy.connect_string())?;
        Ok((proxy, subject))
    }
}

/// Runs `f` on its own thread and waits at most `limit` for it. A call
/// that never returns is left behind (the program ends soon after).
fn within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<(T, Duration)> {
    let (tx, rx) = mpsc::channel();
    let t0 = Instant::now();
    thread::spawn(move || {
        let out = f();
        let _ = tx.send((out, t0.elapsed()));
    });
    rx.recv_timeout(limit).ok()
}

/// Reads until one succeeds; false past `limit`.
fn wait_usable(subject: &Arc<dyn Subject>, limit: Duration) -> Res<()> {
    match first_ok_read(subject, limit) {
        Some(_) => Ok(()),
        None => Err(format!("the client is not usable within {limit:?}")),
    }
}

/// Reads (each bounded by [`CALL`]) until one succeeds within `limit`;
/// when it did, after how long.
fn first_ok_read(subject: &Arc<dyn Subject>, limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        let s = Arc::clone(subject);
        if let Some((Ok(()), _)) = within(CALL, move || s.read()) {
            return Some(t0.elapsed());
        }
        thread::sleep(Duration::from_millis(100));
    }
    None
}

/// What happens after the fault ends: usable within [`RECOVERY`], or not.
fn recovery(subject: &Arc<dyn Subject>) -> String {
    match first_ok_read(subject, RECOVERY) {
        Some(after) => format!(
            "usable: a read succeeds {:.1} s later ({})",
            after.as_secs_f64(),
            subject.state()
        ),
        None => {
            let s = Arc::clone(subject);
            let last = match within(CALL, move || s.read()) {
                Some((Err(e), _)) => e,
                Some((Ok(()), _)) => "Ok".into(),
                None => format!("no answer in {} s", CALL.as_secs()),
            };
            format!(
                "**unusable**: no read succeeds in {} s (state {}; a read: {last})",
                RECOVERY.as_secs(),
                subject.state()
            )
        }
    }
}

fn silent_partition(env: &Env) -> Res<Vec<String>> {
    let (proxy, subject) = env.client()?;
    let t0 = Instant::now();
    proxy.pause();
    let (tx, rx) = mpsc::channel();
    let reader = Arc::clone(&subject);
    thread::spawn(move || {
        let out = reader.read();
        let _ = tx.send((out, t0.elapsed()));
    });
    // The fault's length, not a wait for a condition.
    thread::sleep(FAULT);
    let reported = subject.states().since(t0);
    let during = rx.try_recv().ok();
    proxy.resume();
    let read = match during {
        Some((out, at)) => format!("{} after {:.1} s", show(out), at.as_secs_f64()),
        None => match rx.recv_timeout(Duration::from_secs(3)) {
            Ok((out, at)) => format!(
                "no answer during the partition; {} {:.1} s after it was sent, once the partition ended",
                show(out),
                at.as_secs_f64()
            ),
            Err(_) => "**no answer** during the partition nor 3 s after it".into(),
        },
    };
    let after = recovery(&subject);
    subject.close();
    Ok(vec![reported, read, after])
}

fn show(out: Res<()>) -> String {
    match out {
        Ok(()) => "Ok".into(),
        Err(e) => format!("Err({e})"),
    }
}

fn cut_within_session(env: &Env) -> Res<Vec<String>> {
    let (proxy, subject) = env.client()?;
    let ephemeral = unique_path("zk08-ephemeral");
    subject.create_ephemeral(&ephemeral)?;
    let watched = unique_path("zk08-watched");
    env.observer
        .create()
        .for_path(&watched, b"")
        .map_err(|e| e.to_string())?;
    let (tx, fired) = mpsc::channel();
    subject.watch(&watched, tx)?;
    proxy.cut();
    if first_ok_read(&subject, RECOVERY).is_none() {
        subject.close();
        return Ok(vec![
            format!("no read succeeds {} s after the cut", RECOVERY.as_secs()),
            "–".into(),
        ]);
    }
    let kept = match env.observer.exists(&ephemeral) {
        Ok(Some(_)) => "kept (the session was resumed)".to_owned(),
        Ok(None) => "**gone**".to_owned(),
        Err(e) => format!("cannot tell: {e}"),
    };
    env.observer
        .set_data(&watched, b"changed", None)
        .map_err(|e| e.to_string())?;
    let watch = match fired.recv_timeout(Duration::from_secs(3)) {
        Ok(()) => "fires on the next change".to_owned(),
        Err(_) => "**never fires** (not set again after the reconnect)".to_owned(),
    };
    subject.close();
    let _ = env.observer.delete().for_path(&watched);
    Ok(vec![kept, watch])
}

fn outage_longer_than_session(env: &Env) -> Res<String> {
    let (proxy, subject) = env.client()?;
    proxy.set_refuse(true);
    proxy.cut();
    thread::sleep(FAULT); // the outage's length
    proxy.set_refuse(false);
    let after = recovery(&subject);
    subject.close();
    Ok(after)
}

fn busy_client_cut_once(env: &Env) -> Res<String> {
    let (proxy, subject) = env.client()?;
    let t0 = Instant::now();
    let mut reads = 0u64;
    // Bounded in count and time.
    while t0.elapsed() < BUSY && reads < 1_000_000 {
        let s = Arc::clone(&subject);
        match within(CALL, move || s.read()) {
            Some((Ok(()), _)) => reads += 1,
            other => {
                let why = other.map_or("no answer".into(), |(r, _)| show(r));
                subject.close();
                return Ok(format!("reads failed before the cut: {why}"));
            }
        }
    }
    proxy.cut();
    let after = recovery(&subject);
    subject.close();
    Ok(format!("{reads} reads, then the cut: {after}"))
}

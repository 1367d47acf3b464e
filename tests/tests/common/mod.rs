//! Helpers shared by the integration suites: one server per test binary
//! where a test does not break it, clients, unique paths, and waits with
//! deadlines that print the server's log and the client's states on failure.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use latchkey_framework::{
    Client, ClientBuilder, ClientMetrics, ConnectionState, ExponentialBackoffRetry, RetryForever,
    RetryNTimes,
};
use latchkey_test::{FaultProxy, TestingServer};

/// The server this test binary shares; tests that stop or restart a server
/// start their own.
pub fn shared_server() -> &'static TestingServer {
    static SERVER: OnceLock<TestingServer> = OnceLock::new();
    SERVER.get_or_init(|| TestingServer::start().expect("start the shared ZooKeeper"))
}

/// A started, connected client.
pub fn connect(connect_string: &str, session_timeout: Duration) -> Client {
    start_connected(
        Client::builder()
            .connect_string(connect_string)
            .session_timeout(session_timeout)
            .connection_timeout(Duration::from_secs(5))
            .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(50), 10)),
    )
}

/// Builds and starts a client, and waits (30 s at most) until it connects.
pub fn start_connected(builder: ClientBuilder) -> Client {
    let c = builder.build().expect("build client");
    c.start().expect("start client");
    assert!(
        c.block_until_connected(Duration::from_secs(30)).unwrap(),
        "could not connect: {:?}",
        c.state_history()
    );
    c
}

/// `n` started, connected clients of the shared server.
pub fn clients(n: usize, session_timeout: Duration) -> Vec<Client> {
    let s = shared_server().connect_string();
    (0..n).map(|_| connect(&s, session_timeout)).collect()
}

/// The children of `path`, sorted by name; none if it is gone.
pub fn sorted_children(c: &Client, path: &str) -> Vec<String> {
    let mut v = c.get_children(path).unwrap_or_default();
    v.sort();
    v
}

/// A path no other test uses.
pub fn unique(prefix: &str) -> String {
    latchkey_test::unique_path(prefix)
}

/// What to print when a test fails.
/// Holds the server's log path rather than the server, so a test can stop
/// and restart its server while the context is alive.
pub struct Ctx {
    server_log: std::path::PathBuf,
    client: Client,
}

impl Ctx {
    pub fn new(server: &TestingServer, client: &Client) -> Self {
        Ctx {
            server_log: server.log_path(),
            client: client.clone(),
        }
    }

    pub fn dump(&self) -> String {
        format!(
            "client state history: {:?}\nserver log tail:\n{}",
            self.client.state_history(),
            log_tail(&self.server_log, 30)
        )
    }

    /// Waits for `want` on a state channel, skipping other states.
    pub fn expect(
        &self,
        states: &Receiver<ConnectionState>,
        want: ConnectionState,
        within: Duration,
    ) {
        let deadline = Instant::now() + within;
        loop {
            match states.recv_deadline(deadline) {
                Ok(s) if s == want => return,
                Ok(_) => {}
                Err(_) => panic!("no {want:?} within {within:?}\n{}", self.dump()),
            }
        }
    }
}

/// Polls `cond` until it holds or the deadline passes.
pub fn wait_until(within: Duration, mut cond: impl FnMut() -> bool, dump: impl Fn() -> String) {
    let deadline = Instant::now() + within;
    while !cond() {
        if Instant::now() >= deadline {
            panic!("condition not met within {within:?}\n{}", dump());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `n` lines of a log file, or why it could not be read.
pub fn log_tail(path: &std::path::Path, n: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Sets its flag when dropped: threads that loop until the flag is set
/// stop when a test's scope ends, also when it fails (a panic inside
/// `thread::scope` waits for every thread before it propagates, so threads
/// left looping would hang the test instead of failing it).
pub struct StopOnDrop<'a>(pub &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// How many requests `c` sends from before `act` until `window` after it.
/// Nothing can prove a request will never come: this bounds what a
/// client does in the background by measuring it over a window.
pub fn requests_sent_around(c: &Client, act: impl FnOnce(), window: Duration) -> u64 {
    let before = c.metrics().requests_sent;
    act();
    thread::sleep(window);
    c.metrics().requests_sent - before
}

/// Runs `f` on its own thread and returns its result; fails the test if it
/// panics or does not return within `within`.
pub fn call_within<T: Send + 'static>(
    what: &str,
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let handle = thread::Builder::new()
        .name(what.chars().take(40).collect())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn");
    match rx.recv_timeout(within) {
        Ok(v) => {
            let _ = handle.join();
            v
        }
        Err(_) if handle.is_finished() => match handle.join() {
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                panic!("{what} panicked: {msg:?}")
            }
            Ok(()) => panic!("{what} returned nothing"),
        },
        Err(_) => panic!("{what} did not return within {within:?}"),
    }
}

/// Ends the test process with a message unless dropped within `bound`:
/// bounds a call that borrows (and so cannot move to a thread of its own
/// as with [`call_within`]), so that if it hangs the binary fails in
/// bounded time instead of stalling.
pub struct Watchdog(crossbeam_channel::Sender<()>);

impl Watchdog {
    pub fn new(what: &str, bound: Duration) -> Watchdog {
        let (dropped, watched) = crossbeam_channel::bounded::<()>(0);
        let what = what.to_owned();
        thread::spawn(move || {
            if let Err(crossbeam_channel::RecvTimeoutError::Timeout) = watched.recv_timeout(bound) {
                // Past the test harness's capture, which exit would lose.
                let message =
                    format!("{what} did not return within {bound:?}: ending the test process\n");
                let _ = std::io::Write::write_all(&mut std::io::stderr(), message.as_bytes());
                std::process::exit(101);
            }
        });
        Watchdog(dropped)
    }
}

/// A path as a request carries it: its length (big-endian `i32`), then its
/// bytes; matches the requests on that node and not on its children.
pub fn request_path(path: &str) -> Vec<u8> {
    let len = i32::try_from(path.len()).expect("a short path");
    let mut bytes = len.to_be_bytes().to_vec();
    bytes.extend_from_slice(path.as_bytes());
    bytes
}

/// A client through `proxy` whose every attempt may wait 5 s for a reply,
/// retrying for ever: only the call's own deadline can bound its calls.
pub fn patient_client(proxy: &FaultProxy) -> Client {
    start_connected(
        Client::builder()
            .connect_string(proxy.connect_string())
            .session_timeout(Duration::from_secs(30))
            .connection_timeout(Duration::from_secs(5))
            .retry_policy(RetryForever::new(Duration::from_millis(100))),
    )
}

/// A request's op code, then the path it is on as [`request_path`] lays it
/// out: matches only that kind of request on that node.
pub fn request_on(op: i32, path: &str) -> Vec<u8> {
    let mut bytes = op.to_be_bytes().to_vec();
    bytes.extend(request_path(path));
    bytes
}

/// A client of the shared server behind its own proxy that does not retry:
/// a request cut off fails, and the recipe has to try it again itself.
pub struct CutOff {
    pub proxy: FaultProxy,
    pub client: Client,
    pub states: Receiver<ConnectionState>,
    pub ctx: Ctx,
}

impl CutOff {
    pub fn new() -> CutOff {
        let server = shared_server();
        let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
        let client = start_connected(
            Client::builder()
                .connect_string(proxy.connect_string())
                .session_timeout(Duration::from_secs(20))
                .connection_timeout(Duration::from_secs(5))
                .retry_policy(RetryNTimes::new(0, Duration::ZERO)),
        );
        let states = client.listen();
        let ctx = Ctx::new(server, &client);
        CutOff {
            proxy,
            client,
            states,
            ctx,
        }
    }

    /// Runs `start`, holds the first request carrying `bytes` that it
    /// causes, then cuts the connection (the request fails) and lets the
    /// client connect again.
    pub fn fail_request(&self, bytes: &[u8], start: impl FnOnce()) {
        self.proxy.pause_requests_at(bytes);
        start();
        wait_until(
            Duration::from_secs(10),
            || self.proxy.requests_paused(),
            || format!("the request was never sent\n{}", self.ctx.dump()),
        );
        self.proxy.cut();
        self.ctx.expect(
            &self.states,
            ConnectionState::Suspended,
            Duration::from_secs(10),
        );
        self.proxy.resume();
    }
}

/// Checks that `c`'s connection was neither suspended nor replaced since
/// `before` (its metrics then), printing its state history if it was.
pub fn assert_connection_kept(c: &Client, before: &ClientMetrics, what: &str) {
    let after = c.metrics();
    assert_eq!(
        (after.suspensions, after.reconnects),
        (before.suspensions, before.reconnects),
        "{what}: {:?}",
        c.state_history()
    );
}

/// Reads `path` a few times on `c`, so that its connection has carried
/// requests and replies before a test's fault comes.
pub fn read_a_few_times(c: &Client, path: &str) {
    for _ in 0..5 {
        c.get_data(path).unwrap();
    }
}

/// Waits (at most 10 s) until `waiter` watches a node, as a lock waiter
/// does its predecessor.
pub fn wait_for_a_watch(waiter: &Client) {
    wait_until(
        Duration::from_secs(10),
        || waiter.pending_watches() > 0,
        || format!("the waiter set no watch: {:?}", waiter.state_history()),
    );
}

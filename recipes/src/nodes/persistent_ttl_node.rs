//! Curator's `PersistentTtlNode`: a TTL node kept alive by a
//! [`PersistentNode`] of mode `PersistentWithTtl` and a TTL child (`touch`)
//! that a thread of its own sets or creates again every TTL / factor.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use latchkey_framework::paths;
use latchkey_framework::{CancelToken, Client, CreateMode, Error, ErrorCode, Result};
use parking_lot::Mutex;

use crate::locks::lock_internals::{validate_any_path, Signal};
use crate::nodes::persistent_node::{NodeOptions, PersistentNode};

/// The touch thread's name.
const TOUCH_THREAD_NAME: &str = "latchkey-ttl-touch";

/// The largest TTL ZooKeeper takes: 2^40 - 1 ms.
const MAX_TTL: Duration = Duration::from_millis((1 << 40) - 1);

/// A TTL node kept present while this object lives, and deleted by the
/// server some TTL after it stops (Curator's `PersistentTtlNode`): a
/// [`PersistentNode`] of mode [`CreateMode::PersistentWithTtl`], with a
/// TTL child (`touch`) that a thread of its own sets, or creates again,
/// every TTL / 2.
///
/// A TTL node with a child is never deleted; a TTL child not touched for
/// a TTL is. So if this process dies, the child goes after a TTL and the
/// parent a TTL after that; while it lives, the parent is kept without
/// touching it, so watchers of the parent see no events from the
/// keep-alive. Curator makes the parent a container instead, which the
/// server never deletes if the process dies before the first touch
/// creates the child (Curator issue 1258); a TTL parent goes a TTL later
/// either way. Closing stops the touches and leaves the node to its TTL
/// (another `PersistentTtlNode` of the same path keeps it).
///
/// The server must allow TTL nodes (`zookeeper.extendedTypesEnabled=true`);
/// it checks TTLs every `znode.container.checkIntervalMs` (one minute by
/// default), so nodes outlive their TTL by up to that.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_recipes::PersistentTtlNode;
///
/// let node = PersistentTtlNode::new(client, "/jobs/running/job-7", Duration::from_secs(30), b"host-1")?;
/// node.start()?;
/// if !node.wait_for_initial_create(Duration::from_secs(10))? {
///     eprintln!("not created yet; it keeps trying");
/// }
/// // ... work; if this process dies, the node goes within about a minute ...
/// node.close(); // stops the touches; the node goes after its TTL
/// # Ok(()) }
/// ```
///
/// # In-doubt writes and close
///
/// The node is a plain [`PersistentNode`], with its in-doubt writes (a
/// create retried after a lost reply meets the node it made, and keeps
/// it). A touch is a `set_data` without a version, or a create of the
/// child that takes `NodeExists` as done: repeating one after a lost reply
/// changes nothing but the child's version. [`close`](Self::close) (or
/// drop) waits for the touch thread, whose requests it cancels, and for the
/// node's thread; it deletes neither the node nor the child, which go
/// after their TTLs. The node's watch stays until the node changes or
/// goes, waking nobody.
pub struct PersistentTtlNode {
    node: PersistentNode,
    /// The touches' requests; they end at once on close.
    client: Client,
    path: String,
    child_path: String,
    ttl: Duration,
    touch_every: Duration,
    touching: bool,
    toucher: Mutex<Option<JoinHandle<()>>>,
    stop: Arc<Stop>,
}

/// What ends the touch thread.
#[derive(Default)]
struct Stop {
    closed: AtomicBool,
    signal: Signal,
    cancel: CancelToken,
}

/// Options of a [`PersistentTtlNode`] (Curator's longer constructors).
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use std::time::Duration;
/// use latchkey_recipes::PersistentTtlNode;
///
/// let node = PersistentTtlNode::builder(client, "/jobs/running/job-7", Duration::from_secs(30), b"")
///     .child_node_name("alive")
///     .touch_schedule_factor(3) // every 10 s
///     .use_parent_creation(false) // /jobs/running must exist
///     .build()?;
/// node.start()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PersistentTtlNodeBuilder {
    client: Client,
    path: String,
    ttl: Duration,
    data: Vec<u8>,
    child_node_name: String,
    touch_schedule_factor: u32,
    use_parent_creation: bool,
    touching: bool,
}

impl PersistentTtlNodeBuilder {
    /// The touch child's name ([`PersistentTtlNode::DEFAULT_CHILD_NODE_NAME`] by default).
    pub fn child_node_name(mut self, name: &str) -> Self {
        self.child_node_name = name.to_owned();
        self
    }

    /// Touches the child every TTL / `factor`
    /// ([`PersistentTtlNode::DEFAULT_TOUCH_SCHEDULE_FACTOR`] by default); at least 1.
    pub fn touch_schedule_factor(mut self, factor: u32) -> Self {
        self.touch_schedule_factor = factor;
        self
    }

    /// Whether missing parents are created, as containers
    /// ([`PersistentTtlNode::DEFAULT_USE_PARENT_CREATION`] by default). Without, a missing
    /// parent stops the node from being created (again) until the next
    /// connection-state change, and [`PersistentTtlNode::set_data`] fails
    /// meanwhile, as in Curator.
    pub fn use_parent_creation(mut self, create: bool) -> Self {
        self.use_parent_creation = create;
        self
    }

    /// Never touches the child: the node is kept only by its own TTL. For
    /// tests of what happens when the keeper stops (Curator's tests
    /// override `touch()` for this).
    #[doc(hidden)]
    pub fn without_touches_for_testing(mut self) -> Self {
        self.touching = false;
        self
    }

    /// The node, not created until [`PersistentTtlNode::start`]. Fails on
    /// a bad path or child name, a TTL outside 1 ms to 2^40 - 1 ms, or a
    /// factor of 0.
    pub fn build(self) -> Result<PersistentTtlNode> {
        let what = |reason: String| {
            Error::InvalidArgument(format!("a persistent TTL node at {}: {reason}", self.path))
        };
        if self.ttl < Duration::from_millis(1) || self.ttl > MAX_TTL {
            return Err(what(format!(
                "a TTL of {:?} is outside 1 ms to 2^40 - 1 ms",
                self.ttl
            )));
        }
        if self.touch_schedule_factor == 0 {
            return Err(what("a touch schedule factor of 0".into()));
        }
        let name = &self.child_node_name;
        if name.is_empty() || name.contains('/') {
            return Err(what(format!(
                "the child node name {name:?} must be a non-empty name without '/'"
            )));
        }
        let child_path = paths::make_path(&self.path, name);
        validate_any_path(&child_path)?;
        let node = PersistentNode::with_options(
            &self.client,
            CreateMode::PersistentWithTtl(self.ttl),
            false,
            &self.path,
            &self.data,
            NodeOptions {
                create_parents: self.use_parent_creation,
                delete_on_close: false,
            },
        )?;
        let touch_every = (self.ttl / self.touch_schedule_factor).max(Duration::from_millis(1));
        let stop = Arc::new(Stop::default());
        Ok(PersistentTtlNode {
            node,
            client: self.client.with_cancel(Some(&stop.cancel)),
            path: self.path.clone(),
            child_path,
            ttl: self.ttl,
            touch_every,
            touching: self.touching,
            toucher: Mutex::new(None),
            stop,
        })
    }
}

impl PersistentTtlNode {
    /// The touch child's name (Curator's `DEFAULT_CHILD_NODE_NAME`).
    pub const DEFAULT_CHILD_NODE_NAME: &'static str = "touch";
    /// The child is touched every TTL / this (Curator's
    /// `DEFAULT_TOUCH_SCHEDULE_FACTOR`).
    pub const DEFAULT_TOUCH_SCHEDULE_FACTOR: u32 = 2;
    /// Missing parents are created, as containers (Curator's
    /// `DEFAULT_USE_PARENT_CREATION`).
    pub const DEFAULT_USE_PARENT_CREATION: bool = true;

    /// A node at `path` holding `data`, kept with a TTL of `ttl`, with
    /// Curator's defaults; not created until [`start`](Self::start).
    pub fn new(client: &Client, path: &str, ttl: Duration, data: &[u8]) -> Result<Self> {
        Self::builder(client, path, ttl, data).build()
    }

    /// A builder, for the child's name, the touch schedule and parent
    /// creation.
    pub fn builder(
        client: &Client,
        path: &str,
        ttl: Duration,
        data: &[u8],
    ) -> PersistentTtlNodeBuilder {
        PersistentTtlNodeBuilder {
            client: client.clone(),
            path: path.to_owned(),
            ttl,
            data: data.to_vec(),
            child_node_name: Self::DEFAULT_CHILD_NODE_NAME.to_owned(),
            touch_schedule_factor: Self::DEFAULT_TOUCH_SCHEDULE_FACTOR,
            use_parent_creation: Self::DEFAULT_USE_PARENT_CREATION,
            touching: true,
        }
    }

    /// Starts keeping the node and touching its child, each on a thread
    /// of its own; returns at once. The first touch comes one touch
    /// interval after the start, as in Curator. Starting twice, or after
    /// closing, is an error.
    pub fn start(&self) -> Result<()> {
        let mut toucher = self.toucher.lock();
        self.node.start()?;
        if !self.touching {
            return Ok(());
        }
        let (client, child, ttl, every, stop) = (
            self.client.clone(),
            self.child_path.clone(),
            self.ttl,
            self.touch_every,
            Arc::clone(&self.stop),
        );
        *toucher = Some(
            std::thread::Builder::new()
                .name(TOUCH_THREAD_NAME.into())
                .spawn(move || touch_loop(&client, &child, ttl, every, &stop))?,
        );
        Ok(())
    }

    /// Waits until the node has been created once, at most `timeout`
    /// (`Duration::MAX`: as long as it takes); false if not by then.
    pub fn wait_for_initial_create(&self, timeout: Duration) -> Result<bool> {
        self.node.wait_for_initial_create(timeout)
    }

    /// Sets the node's data (see [`PersistentNode::set_data`]).
    pub fn set_data(&self, data: &[u8]) -> Result<()> {
        self.node.set_data(data)
    }

    /// The data the node is kept at.
    pub fn data(&self) -> Vec<u8> {
        self.node.data()
    }

    /// The node's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The touch child's path.
    pub fn child_path(&self) -> &str {
        &self.child_path
    }

    /// Stops touching and keeping the node, without deleting it: it goes
    /// after its TTL unless another `PersistentTtlNode` of the same path
    /// keeps it. A touch under way ends at once. Idempotent; dropping does
    /// the same.
    pub fn close(&self) {
        if !self.stop.closed.swap(true, Ordering::AcqRel) {
            self.stop.cancel.cancel();
            self.stop.signal.notify();
        }
        if let Some(toucher) = self.toucher.lock().take() {
            if toucher.thread().id() != std::thread::current().id() {
                let _ = toucher.join();
            }
        }
        self.node.close();
    }
}

impl Drop for PersistentTtlNode {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for PersistentTtlNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentTtlNode")
            .field("path", &self.path())
            .field("ttl", &self.ttl)
            .field("touch_every", &self.touch_every)
            .finish()
    }
}

/// Touches the child every `every` (at a fixed rate; ticks missed while a
/// touch was slow are skipped) until stopped.
fn touch_loop(client: &Client, child: &str, ttl: Duration, every: Duration, stop: &Stop) {
    let mut next = Instant::now() + every;
    loop {
        let epoch = stop.signal.epoch();
        if stop.closed.load(Ordering::Acquire) {
            return;
        }
        if stop.signal.wait(epoch, Some(next)) {
            // Woken before the tick: only a close wakes us.
            continue;
        }
        touch(client, child, ttl);
        next += every;
        let now = Instant::now();
        if next <= now {
            next = now + every;
        }
    }
}

/// Sets the child's data, or creates it as a TTL node (Curator's
/// `touch()`); a missing parent is left to the node's own keeper.
fn touch(client: &Client, child: &str, ttl: Duration) {
    let set = || client.set_data(child, b"", None).map(|_| ());
    let touched = match set() {
        Err(e) if e.is(ErrorCode::NoNode) => {
            match client
                .create()
                .mode(CreateMode::PersistentWithTtl(ttl))
                .for_path(child, b"")
            {
                Err(e) if e.is(ErrorCode::NodeExists) => set(),
                other => other.map(|_| ()),
            }
        }
        other => other,
    };
    match touched {
        Ok(()) => {}
        Err(e) if e.is(ErrorCode::NoNode) => {}
        Err(e) => log::debug!("touching {child}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Client {
        Client::builder()
            .connect_string("127.0.0.1:1")
            .build()
            .unwrap()
    }

    #[test]
    fn bad_arguments_are_refused_with_the_path() {
        let c = client();
        for ttl in [Duration::ZERO, Duration::from_micros(999), Duration::MAX] {
            match PersistentTtlNode::new(&c, "/t", ttl, b"") {
                Err(Error::InvalidArgument(m)) => assert!(m.contains("/t"), "{m}"),
                other => panic!("{ttl:?}: {other:?}"),
            }
        }
        let b = || PersistentTtlNode::builder(&c, "/t", Duration::from_secs(1), b"");
        assert!(b().touch_schedule_factor(0).build().is_err());
        assert!(b().child_node_name("").build().is_err());
        assert!(b().child_node_name("a/b").build().is_err());
        assert!(PersistentTtlNode::new(&c, "t", Duration::from_secs(1), b"").is_err());
        assert!(PersistentTtlNode::new(&c, "/", Duration::from_secs(1), b"").is_err());
        let n = b().touch_schedule_factor(u32::MAX).build().unwrap();
        assert_eq!(n.touch_every, Duration::from_millis(1), "at least 1 ms");
        assert_eq!(n.path(), "/t");
        assert_eq!(n.child_path(), "/t/touch");
    }
}

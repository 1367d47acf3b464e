//! Curator's `PersistentWatcher`: a persistent (optionally recursive) watch
//! kept set through reconnections and lost sessions, with a thread of its
//! own that sets it again and tells its listeners each time it does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use latchkey_framework::{AddWatchMode, Client, ErrorCode, EventType, Result, WatchedEvent};
use parking_lot::Mutex;

use crate::armed::WatchArms;
use crate::keeper::{Keeper, Kept};
use crate::locks::lock_internals::validate_any_path;

/// How long [`PersistentWatcher::close`] waits at most to remove the watch.
const REMOVE_WITHIN: Duration = Duration::from_secs(2);

/// Why a [`PersistentWatcher`]'s watch was (re)set: events in the gap
/// before it may have been missed, so read again what matters (Curator's
/// `getResetListenable()`, told on each of these).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WatchReset {
    /// The watch was set for the first time after [`PersistentWatcher::start`].
    Started,
    /// The session that held the watch was lost (or the watch was removed
    /// by someone else); it was added again on the current session.
    NewSession,
    /// The connection came back within the same session; the client set
    /// the watch again (with its others) before any later request. Changes
    /// made while disconnected raised no event.
    Reconnected,
}

/// A persistent watch on a node, or on a node and its whole subtree
/// (`recursive`), that stays set for as long as this object lives
/// (Curator's `PersistentWatcher`, over [`Client::add_watch`]; ZooKeeper
/// 3.6+).
///
/// The client sets its watches again itself after a reconnection within
/// the session; a lost session takes them with it. This recipe adds the
/// watch again on every new session, and tells each (re)set on
/// [`listen_resets`](Self::listen_resets): ZooKeeper sends no event for
/// changes made while the watch was not set, so a reset is the moment to
/// read again.
///
/// [`listen`](Self::listen) receives the node events (`NodeCreated`,
/// `NodeDeleted`, `NodeDataChanged`, and `NodeChildrenChanged` when not
/// recursive), with namespace-relative paths. Both channels disconnect when
/// the watcher is closed, or when its client is closed (Curator tells its
/// listeners `Closed` then). A server without `addWatch` (before 3.6) is
/// logged and also disconnects them.
///
/// ZooKeeper 3.8 keeps one watch mode per client and path: a plain and a
/// recursive watch on the same path through one client interfere (the
/// plain one's child events were not delivered); use two clients, or
/// ZooKeeper 3.9.
///
/// Closing removes its own watch only, at once here (Curator's
/// `removeWatchers()`): another watcher or cache of the same client on the
/// path keeps its own, and hears nothing of it. The server's watch goes
/// once none of this client's is left on the path (on ZooKeeper before
/// 3.9, which removes only all of a path's watches at once, once no watch
/// of any kind of this client is left there). Closed while disconnected,
/// the watch is not set again when the client reconnects.
///
/// The watcher writes nothing to ZooKeeper, so no write of it can be left
/// in doubt; [`close`](Self::close) waits for its thread, whose requests it
/// cancels, and at most 2 s for the watch's removal.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::{select, PersistentWatcher};
///
/// let watcher = PersistentWatcher::new(client, "/config", true)?;
/// let (events, resets) = (watcher.listen(), watcher.listen_resets());
/// watcher.start()?;
/// loop {
///     select! {
///         recv(events) -> event => match event {
///             Ok(event) => println!("{:?} {}", event.event_type, event.path),
///             Err(_) => break, // closed
///         },
///         recv(resets) -> reset => match reset {
///             Ok(why) => println!("watch (re)set ({why:?}): read /config again"),
///             Err(_) => break,
///         },
///     }
/// }
/// # Ok(()) }
/// ```
pub struct PersistentWatcher {
    inner: Arc<Inner>,
}

struct Inner {
    /// The keeper's requests; they end at once when the watcher is closed.
    client: Client,
    /// For removing the watch on close, which must not be cancelled.
    plain: Client,
    path: String,
    recursive: bool,
    /// The watch set and its session.
    armed: Arc<WatchArms<()>>,
    /// The client's reconnections when the watch was last (re)set.
    reconnects: AtomicU64,
    /// The watch was set once.
    started: AtomicBool,
    events: Arc<Mutex<Vec<Sender<WatchedEvent>>>>,
    resets: Mutex<Vec<Sender<WatchReset>>>,
    keeper: Keeper,
}

impl PersistentWatcher {
    /// A watch on `path` (and, if `recursive`, every node below it), not
    /// set until [`start`](Self::start). The node need not exist.
    pub fn new(client: &Client, path: &str, recursive: bool) -> Result<PersistentWatcher> {
        validate_any_path(path)?;
        let keeper = Keeper::default();
        // Its own watch group, so that closing removes its watch alone.
        let grouped = client.with_watcher_removal();
        Ok(PersistentWatcher {
            inner: Arc::new(Inner {
                client: grouped.with_cancel(Some(keeper.cancel_token())),
                plain: grouped.with_cancel(None),
                path: path.to_owned(),
                recursive,
                armed: Arc::default(),
                reconnects: AtomicU64::new(0),
                started: AtomicBool::new(false),
                events: Arc::default(),
                resets: Mutex::new(Vec::new()),
                keeper,
            }),
        })
    }

    /// Sets the watch, on a thread of its own; returns at once (see
    /// [`listen_resets`](Self::listen_resets) for when it is set).
    /// Starting twice, or after closing, is an error.
    pub fn start(&self) -> Result<()> {
        let inner = &self.inner;
        Keeper::start(inner, "latchkey-persistent-watcher", &inner.client, None)
    }

    /// The watched path.
    pub fn path(&self) -> &str {
        &self.inner.path
    }

    /// Whether the subtree below the path is watched too.
    pub fn is_recursive(&self) -> bool {
        self.inner.recursive
    }

    /// A channel that receives every node event of the watch, in order
    /// (Curator's `getListenable()`). It disconnects when the watcher or
    /// its client is closed; dropping the receiver removes it. Listen
    /// before [`start`](Self::start) to miss nothing.
    pub fn listen(&self) -> Receiver<WatchedEvent> {
        let (tx, rx) = unbounded();
        let mut events = self.inner.events.lock();
        // Under the lock `close` clears them with, after marking closed.
        if !self.inner.keeper.is_closed() {
            events.push(tx);
        }
        rx
    }

    /// A channel told each time the watch is set, or set again after a
    /// reconnection or on a new session (Curator's `getResetListenable()`).
    /// It disconnects as [`listen`](Self::listen)'s does.
    pub fn listen_resets(&self) -> Receiver<WatchReset> {
        let (tx, rx) = unbounded();
        let mut resets = self.inner.resets.lock();
        if !self.inner.keeper.is_closed() {
            resets.push(tx);
        }
        rx
    }

    /// Stops keeping the watch and removes it (waiting 2 s at most, and
    /// only if the client is connected; else it goes with the session);
    /// the channels disconnect. Idempotent; dropping does the same.
    pub fn close(&self) {
        let inner = &self.inner;
        if !inner.keeper.close() {
            return;
        }
        inner.hang_up();
        let client = inner
            .plain
            .with_deadline(Some(Instant::now() + REMOVE_WITHIN));
        if let Err(e) = client.remove_watchers() {
            log::debug!("{}: removing its watch: {e}", inner.what());
        }
    }
}

impl Drop for PersistentWatcher {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for PersistentWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentWatcher")
            .field("path", &self.inner.path)
            .field("recursive", &self.inner.recursive)
            .finish()
    }
}

impl Kept for Inner {
    fn keeper(&self) -> &Keeper {
        &self.keeper
    }
    fn work(&self) -> Result<()> {
        self.keep()
    }
    fn what(&self) -> String {
        format!("the persistent watcher of {}", self.path)
    }
}

impl Inner {
    /// Sets the watch if the current session has none, or tells a
    /// reconnection the client re-armed it on.
    fn keep(&self) -> Result<()> {
        if self.client.is_closed() {
            // Curator tells its listeners `Closed`: the channels end.
            self.keeper.close();
            self.hang_up();
            return Ok(());
        }
        if !self.client.state().is_some_and(|s| s.is_connected()) {
            // The next state change wakes us.
            return Ok(());
        }
        let session = self.client.session_id();
        if !self.armed.is_armed(&(), session) {
            // Counted before the add: a reconnection during it is told by
            // the next pass.
            let reconnects = self.client.metrics().reconnects;
            match self.add() {
                Ok(()) => {}
                Err(e) if e.is(ErrorCode::Unimplemented) => {
                    log::error!(
                        "{}: the server has no addWatch (ZooKeeper 3.6+); stopped",
                        self.what()
                    );
                    self.keeper.close();
                    self.hang_up();
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
            self.reconnects.store(reconnects, Ordering::Release);
            let why = match self.started.swap(true, Ordering::AcqRel) {
                false => WatchReset::Started,
                true => WatchReset::NewSession,
            };
            self.tell_reset(why);
            return Ok(());
        }
        let reconnects = self.client.metrics().reconnects;
        if self.reconnects.load(Ordering::Acquire) != reconnects {
            // The client re-armed the watch before any request it sends
            // after reconnecting: once this reply is in, the watch is set.
            self.client.exists(&self.path)?;
            self.reconnects.store(reconnects, Ordering::Release);
            self.tell_reset(WatchReset::Reconnected);
        }
        Ok(())
    }

    /// Adds the watch; its end (a lost session, a removal) wakes the
    /// keeper to add it again.
    fn add(&self) -> Result<()> {
        let token = self.armed.arm(&());
        let (arms, events, wake) = (
            Arc::downgrade(&self.armed),
            Arc::downgrade(&self.events),
            Arc::downgrade(self.keeper.signal()),
        );
        let watcher = move |event: WatchedEvent| match event.event_type {
            EventType::SessionExpired | EventType::PersistentWatchRemoved => {
                if let Some(arms) = arms.upgrade() {
                    arms.fired(&(), token);
                }
                if let Some(wake) = wake.upgrade() {
                    wake.notify();
                }
            }
            _ => forward(&events, event),
        };
        let mode = match self.recursive {
            true => AddWatchMode::PersistentRecursive,
            false => AddWatchMode::Persistent,
        };
        match self.client.add_watch(&self.path, mode, watcher) {
            Ok(()) => {
                self.armed.confirm(&(), token, self.client.session_id());
                Ok(())
            }
            Err(e) => {
                self.armed.fired(&(), token);
                Err(e)
            }
        }
    }

    fn tell_reset(&self, why: WatchReset) {
        self.resets.lock().retain(|tx| tx.send(why).is_ok());
    }

    /// Disconnects every channel.
    fn hang_up(&self) {
        self.events.lock().clear();
        self.resets.lock().clear();
    }
}

/// Sends `event` to every listener still there.
fn forward(events: &Weak<Mutex<Vec<Sender<WatchedEvent>>>>, event: WatchedEvent) {
    if let Some(events) = events.upgrade() {
        events.lock().retain(|tx| tx.send(event.clone()).is_ok());
    }
}

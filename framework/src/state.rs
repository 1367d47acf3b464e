//! Connection states with Curator's meanings, their history, and the
//! listeners and wakers that hear about them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::lazy_thread::LazyThread;

/// The state of a client's connection, as Curator's `ConnectionState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectionState {
    /// First connection of the client.
    Connected,
    /// The connection was lost or has gone silent. The session may still be
    /// alive: locks held are in doubt until `Reconnected` or `Lost`.
    Suspended,
    /// Connected again after `Suspended` (same session) or after `Lost` (a
    /// new session).
    Reconnected,
    /// The session is gone: expired on the server, or the client stayed
    /// suspended for the whole session timeout. Everything ephemeral it
    /// created, locks included, must be taken as lost.
    Lost,
    /// Connected to a server in read-only mode; writes fail.
    ReadOnly,
}

impl ConnectionState {
    /// Whether the client can talk to ZooKeeper in this state.
    pub fn is_connected(self) -> bool {
        matches!(
            self,
            ConnectionState::Connected | ConnectionState::Reconnected | ConnectionState::ReadOnly
        )
    }
}

/// Which connection states a recipe takes as the loss of what it holds
/// (Curator's `ConnectionStateErrorPolicy`), set with
/// [`ClientBuilder::connection_state_error_policy`](crate::ClientBuilder::connection_state_error_policy)
/// and read by [`Client::is_error_state`](crate::Client::is_error_state).
///
/// The leader recipes (`LeaderLatch`, `LeaderSelector`) consult it: in an
/// error state leadership ends. `Lost` should always be one: the session,
/// and every ephemeral node with it, is gone.
pub trait ConnectionStateErrorPolicy: Send + Sync {
    /// Whether `state` should make a recipe act as though the connection
    /// has been lost (leadership ends).
    fn is_error_state(&self, state: ConnectionState) -> bool;
}

/// Curator's default policy: `Suspended` and `Lost` are errors. Leadership
/// ends as soon as the connection is in doubt, before another process may
/// take over, at the price of ending it on every short outage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StandardConnectionStateErrorPolicy;

impl ConnectionStateErrorPolicy for StandardConnectionStateErrorPolicy {
    fn is_error_state(&self, state: ConnectionState) -> bool {
        matches!(state, ConnectionState::Suspended | ConnectionState::Lost)
    }
}

/// Curator's session policy: only `Lost` is an error. Leadership survives a
/// `Suspended` connection that comes back within the session; the leader
/// must accept that, near the end of a long outage, another process may
/// already lead while it still believes it does (the client declares the
/// session `Lost` only after the session timeout, and the server may
/// expire it a little earlier by its own clock). Fence writes (a fencing
/// token, or a transaction that checks the leader's node).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SessionConnectionStateErrorPolicy;

impl ConnectionStateErrorPolicy for SessionConnectionStateErrorPolicy {
    fn is_error_state(&self, state: ConnectionState) -> bool {
        state == ConnectionState::Lost
    }
}

type Listener = Arc<dyn Fn(ConnectionState) + Send + Sync>;
type Waker = Arc<dyn Fn() + Send + Sync>;

/// States for the listener thread, with the listeners to tell.
type Delivery = (Vec<Listener>, ConnectionState);

/// The state, its history and who to tell about changes.
///
/// Listeners are user code that may block, panic or call the client, so
/// they run on a thread of their own (as Curator's do): posting a state
/// never waits for them, and they still hear every state in order. That
/// thread starts with the first state there is a listener to tell.
pub(crate) struct StateBoard {
    started: Instant,
    inner: Mutex<Board>,
    changed: Condvar,
    next_id: AtomicU64,
    /// The listener thread; closed with the board.
    deliveries: LazyThread<Delivery>,
}

struct Board {
    current: Option<ConnectionState>,
    history: Vec<(Duration, ConnectionState)>,
    listeners: Vec<(u64, Listener)>,
    wakers: Vec<(u64, Waker)>,
    closed: bool,
}

/// Keeps at most this many history entries (the oldest go first).
const HISTORY_LIMIT: usize = 1000;

impl StateBoard {
    pub(crate) fn new() -> Self {
        StateBoard {
            deliveries: LazyThread::new("latchkey-listeners", deliver),
            started: Instant::now(),
            inner: Mutex::new(Board {
                current: None,
                history: Vec::new(),
                listeners: Vec::new(),
                wakers: Vec::new(),
                closed: false,
            }),
            changed: Condvar::new(),
            next_id: AtomicU64::new(1),
        }
    }

    /// The current state; none once closed.
    pub(crate) fn current(&self) -> Option<ConnectionState> {
        let b = self.inner.lock();
        if b.closed {
            return None;
        }
        b.current
    }

    pub(crate) fn history(&self) -> Vec<(Duration, ConnectionState)> {
        self.inner.lock().history.clone()
    }

    /// Records a new state, runs the wakers on the calling thread and hands
    /// the listeners to the listener thread.
    pub(crate) fn post(&self, state: ConnectionState) {
        let (listeners, wakers) = {
            let mut b = self.inner.lock();
            if b.closed {
                return;
            }
            b.current = Some(state);
            if b.history.len() == HISTORY_LIMIT {
                b.history.remove(0);
            }
            let at = self.started.elapsed();
            b.history.push((at, state));
            (
                b.listeners
                    .iter()
                    .map(|(_, l)| Arc::clone(l))
                    .collect::<Vec<_>>(),
                b.wakers
                    .iter()
                    .map(|(_, w)| Arc::clone(w))
                    .collect::<Vec<_>>(),
            )
        };
        self.changed.notify_all();
        log::info!("connection state: {state:?}");
        for w in wakers {
            run_waker(&w);
        }
        if !listeners.is_empty() {
            self.deliveries.send((listeners, state));
        }
    }

    /// Marks the board closed and wakes every waiter one last time.
    pub(crate) fn close(&self) {
        let wakers = {
            let mut b = self.inner.lock();
            b.closed = true;
            b.listeners.clear();
            std::mem::take(&mut b.wakers)
        };
        // The listener thread ends once it has delivered what is queued.
        self.deliveries.close();
        self.changed.notify_all();
        for (_, w) in wakers {
            run_waker(&w);
        }
    }

    /// Waits until connected; false when the deadline (if any) passes or
    /// the client closes.
    pub(crate) fn wait_connected(&self, deadline: Option<Instant>) -> bool {
        let mut b = self.inner.lock();
        loop {
            if b.current.is_some_and(ConnectionState::is_connected) {
                return true;
            }
            if b.closed {
                return false;
            }
            match deadline {
                Some(d) => {
                    if self.changed.wait_until(&mut b, d).timed_out() {
                        return b.current.is_some_and(ConnectionState::is_connected);
                    }
                }
                None => self.changed.wait(&mut b),
            }
        }
    }

    pub(crate) fn add_listener(&self, l: Listener) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.inner.lock().listeners.push((id, l));
        id
    }

    pub(crate) fn add_waker(&self, w: Waker) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut b = self.inner.lock();
        if b.closed {
            drop(b);
            w();
            return id;
        }
        b.wakers.push((id, w));
        id
    }

    #[cfg(test)]
    pub(crate) fn listener_count(&self) -> usize {
        self.inner.lock().listeners.len()
    }

    pub(crate) fn remove(&self, id: u64) {
        let mut b = self.inner.lock();
        b.listeners.retain(|(i, _)| *i != id);
        b.wakers.retain(|(i, _)| *i != id);
    }
}

/// A waker only wakes a thread; one that panics must not stop the others.
fn run_waker(w: &Waker) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w())).is_err() {
        log::error!("a connection-state waker panicked");
    }
}

/// The listener thread's job: runs each listener with a state, in order.
fn deliver((listeners, state): Delivery) {
    for l in listeners {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l(state))).is_err() {
            log::error!("a connection-state listener panicked on {state:?}");
        }
    }
}

/// Removes a listener or waker when dropped.
#[must_use = "the listener is removed when this handle is dropped"]
pub struct ListenerHandle {
    pub(crate) board: std::sync::Weak<StateBoard>,
    pub(crate) id: u64,
}

impl ListenerHandle {
    /// Keeps the listener for the client's whole life.
    pub fn forget(self) {
        std::mem::forget(self);
    }
}

impl Drop for ListenerHandle {
    fn drop(&mut self) {
        if let Some(board) = self.board.upgrade() {
            board.remove(self.id);
        }
    }
}

impl std::fmt::Debug for ListenerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ListenerHandle({})", self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use ConnectionState::*;

    #[test]
    fn only_connected_reconnected_and_read_only_are_connected() {
        for (state, connected) in [
            (Connected, true),
            (Reconnected, true),
            (ReadOnly, true),
            (Suspended, false),
            (Lost, false),
        ] {
            assert_eq!(state.is_connected(), connected, "{state:?}");
        }
    }

    #[test]
    fn the_history_keeps_every_state_in_order() {
        let board = StateBoard::new();
        for state in [Connected, Suspended, Reconnected] {
            board.post(state);
        }
        let states: Vec<ConnectionState> = board.history().into_iter().map(|(_, s)| s).collect();
        assert_eq!(states, [Connected, Suspended, Reconnected]);
    }

    /// Listeners and wakers share one id space: removing one waker leaves
    /// every other waker and listener in place.
    #[test]
    fn removing_a_waker_keeps_the_others_and_the_listeners() {
        let board = StateBoard::new();
        let woken = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
        let listener = board.add_listener(Arc::new(|_| {}));
        let ids: Vec<u64> = woken
            .iter()
            .map(|count| {
                let count = Arc::clone(count);
                board.add_waker(Arc::new(move || {
                    count.fetch_add(1, Ordering::SeqCst);
                }))
            })
            .collect();
        assert!(
            ids[0] != ids[1] && !ids.contains(&listener),
            "ids {ids:?}, listener {listener}"
        );
        board.remove(ids[0]);
        assert_eq!(board.listener_count(), 1);
        board.post(Connected);
        let counts: Vec<usize> = woken.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        assert_eq!(counts, [0, 1], "wakes after removing the first waker");
    }

    /// A dropped handle removes its listener; a forgotten one keeps it.
    #[test]
    fn a_listener_handle_removes_on_drop_unless_forgotten() {
        let board = Arc::new(StateBoard::new());
        let handle = |board: &Arc<StateBoard>| ListenerHandle {
            board: Arc::downgrade(board),
            id: board.add_listener(Arc::new(|_| {})),
        };
        drop(handle(&board));
        assert_eq!(board.listener_count(), 0, "a dropped handle's listener");
        handle(&board).forget();
        assert_eq!(board.listener_count(), 1, "a forgotten handle's listener");
    }
}

//! One-shot watch bookkeeping, with ZooKeeper's rules for which watches an
//! event triggers and which paths are re-armed after a reconnect.

use std::collections::HashMap;

use crate::{EventType, WatchedEvent};

/// A one-shot watch callback.
pub(crate) type WatchFn = Box<dyn FnOnce(WatchedEvent) + Send>;

/// A registered watch callback, and where it runs.
pub(crate) struct Watcher {
    pub run: WatchFn,
    /// A waker only wakes a thread, so it runs on the I/O thread as the
    /// event is read, one thread hop sooner than on the watcher thread.
    pub waker: bool,
}

/// Which server-side watch table a watch sits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchKind {
    /// Set by getData, or by exists on a node that exists.
    Data,
    /// Set by exists on a node that does not exist.
    Exist,
    /// Set by getChildren.
    Child,
}

/// What to register once a request's reply arrives, depending on its result.
pub(crate) struct WatchRegistration {
    pub path: String,
    pub on_ok: WatchKind,
    /// exists registers an Exist watch when the node is missing; other reads none.
    pub on_no_node: Option<WatchKind>,
    pub watcher: Watcher,
}

#[derive(Default)]
pub(crate) struct Watches {
    data: HashMap<String, Vec<Watcher>>,
    exist: HashMap<String, Vec<Watcher>>,
    child: HashMap<String, Vec<Watcher>>,
    /// Set once the session is gone and its watches fired: a watch whose
    /// reply is read after that must fire at once, not wait in a table.
    ended: bool,
}

impl Watches {
    fn table(&mut self, kind: WatchKind) -> &mut HashMap<String, Vec<Watcher>> {
        match kind {
            WatchKind::Data => &mut self.data,
            WatchKind::Exist => &mut self.exist,
            WatchKind::Child => &mut self.child,
        }
    }

    pub(crate) fn add(&mut self, kind: WatchKind, path: String, watcher: Watcher) {
        self.table(kind).entry(path).or_default().push(watcher);
    }

    /// Removes and returns the watches an event triggers (ZooKeeper's
    /// `ZKWatchManager.materialize`).
    pub(crate) fn triggered(&mut self, event: EventType, path: &str) -> Vec<Watcher> {
        let kinds: &[WatchKind] = match event {
            EventType::NodeCreated | EventType::NodeDataChanged => {
                &[WatchKind::Data, WatchKind::Exist]
            }
            EventType::NodeChildrenChanged => &[WatchKind::Child],
            EventType::NodeDeleted => &[WatchKind::Data, WatchKind::Exist, WatchKind::Child],
            _ => &[],
        };
        let mut fired = Vec::new();
        for &kind in kinds {
            if let Some(list) = self.table(kind).remove(path) {
                fired.extend(list);
            }
        }
        fired
    }

    /// The paths to re-arm with SetWatches after a reconnect: data, exist, child.
    pub(crate) fn paths(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let keys = |m: &HashMap<String, Vec<Watcher>>| m.keys().cloned().collect();
        (keys(&self.data), keys(&self.exist), keys(&self.child))
    }

    /// How many callbacks wait, over every kind and path.
    pub(crate) fn len(&self) -> usize {
        [&self.data, &self.exist, &self.child]
            .iter()
            .map(|m| m.values().map(Vec::len).sum::<usize>())
            .sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty() && self.exist.is_empty() && self.child.is_empty()
    }

    /// Every watch, removed, and the table marked ended: the session that
    /// held them is gone.
    pub(crate) fn end(&mut self) -> Vec<(String, Watcher)> {
        self.ended = true;
        self.drain()
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.ended
    }

    /// Every watch, removed: the session that held them is gone.
    pub(crate) fn drain(&mut self) -> Vec<(String, Watcher)> {
        let mut all = Vec::new();
        for table in [&mut self.data, &mut self.exist, &mut self.child] {
            for (path, list) in table.drain() {
                all.extend(list.into_iter().map(|w| (path.clone(), w)));
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watcher() -> Watcher {
        Watcher {
            run: Box::new(|_| {}),
            waker: false,
        }
    }

    #[test]
    fn an_ended_table_hands_back_every_watch_and_says_so() {
        let mut w = Watches::default();
        w.add(WatchKind::Data, "/a".into(), watcher());
        w.add(WatchKind::Child, "/a".into(), watcher());
        assert!(!w.is_ended());
        let ended = w.end();
        assert_eq!(ended.len(), 2);
        assert!(w.is_ended() && w.is_empty());
    }
}

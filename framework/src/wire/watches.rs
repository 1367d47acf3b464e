//! Watch bookkeeping (one-shot and persistent), with ZooKeeper's rules for
//! which watches an event triggers and which paths are re-armed after a
//! reconnect.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::proto::{self, op, xid};
use crate::{EventType, WatchedEvent};

/// A one-shot watch callback.
pub(crate) type WatchFn = Box<dyn FnOnce(WatchedEvent) + Send>;

/// A persistent watch callback: runs for every event until removed.
pub(crate) type PersistentFn = Arc<dyn Fn(WatchedEvent) + Send + Sync>;

/// The watches set through one client handle, to be removed together
/// (`Client::with_watcher_removal`). Each removal starts a new epoch: a
/// watch marked in an earlier one whose reply comes later is let go of
/// instead of registered, while the handle's later watches are kept.
#[derive(Debug, Default)]
pub(crate) struct WatchGroup {
    epoch: AtomicU64,
}

impl WatchGroup {
    /// A mark for a watch about to be requested through this group.
    pub(crate) fn mark(self: &Arc<Self>) -> GroupMark {
        GroupMark {
            group: Arc::clone(self),
            epoch: self.epoch.load(Ordering::Acquire),
        }
    }
}

/// A watch's group, and the group's epoch when the watch was requested.
#[derive(Clone, Debug)]
pub(crate) struct GroupMark {
    group: Arc<WatchGroup>,
    epoch: u64,
}

impl GroupMark {
    /// Whether the group was removed since this mark was taken.
    pub(crate) fn is_stale(&self) -> bool {
        self.group.epoch.load(Ordering::Acquire) != self.epoch
    }
}

/// A watcher taken out of the table, the event that tells it so, and its
/// path.
pub(crate) type Removed = (Watcher, EventType, String);

/// A registered watch callback, and where it runs.
pub(crate) struct Watcher {
    pub run: WatchFn,
    /// A waker only wakes a thread, so it runs on the engine thread as the
    /// event is read, one thread hop sooner than on the watcher thread.
    pub waker: bool,
    /// Set for a persistent watch: `run` calls it once, and the table
    /// keeps it to make a fresh one-shot `run` for every event.
    pub persistent: Option<PersistentFn>,
    /// The group it was set in, if any.
    pub group: Option<GroupMark>,
}

impl Watcher {
    /// A persistent watch's callback; it runs on the watcher thread.
    pub(crate) fn persistent(f: PersistentFn) -> Self {
        Watcher {
            run: once(&f),
            waker: false,
            persistent: Some(f),
            group: None,
        }
    }

    /// This watcher, set in `group`.
    pub(crate) fn in_group(mut self, group: Option<GroupMark>) -> Self {
        self.group = group;
        self
    }

    /// Whether its group was removed since the watch was requested.
    pub(crate) fn in_removed_group(&self) -> bool {
        self.group.as_ref().is_some_and(GroupMark::is_stale)
    }

    fn is_in(&self, group: &Arc<WatchGroup>) -> bool {
        self.group
            .as_ref()
            .is_some_and(|m| Arc::ptr_eq(&m.group, group))
    }

    /// A one-shot copy of a persistent watcher, for one event.
    fn fire_copy(&self) -> Option<Watcher> {
        self.persistent
            .as_ref()
            .map(|f| Watcher::persistent(Arc::clone(f)))
    }
}

fn once(f: &PersistentFn) -> WatchFn {
    let f = Arc::clone(f);
    Box::new(move |ev| f(ev))
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
    /// Set by addWatch in PERSISTENT mode: the node's own events, kept.
    Persistent,
    /// Set by addWatch in PERSISTENT_RECURSIVE mode: events of the node and
    /// every descendant (no child events), kept.
    PersistentRecursive,
}

/// Which watches a removeWatches removes (ZooKeeper's `WatcherType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RemoveKind {
    Children,
    Data,
    Any,
    Persistent,
    PersistentRecursive,
}

impl RemoveKind {
    /// The type on the wire.
    pub(crate) fn wire(self) -> i32 {
        match self {
            RemoveKind::Children => 1,
            RemoveKind::Data => 2,
            RemoveKind::Any => 3,
            RemoveKind::Persistent => 4,
            RemoveKind::PersistentRecursive => 5,
        }
    }

    pub(crate) fn is_persistent(self) -> bool {
        matches!(
            self,
            RemoveKind::Persistent | RemoveKind::PersistentRecursive
        )
    }

    fn tables(self) -> &'static [WatchKind] {
        use WatchKind::*;
        match self {
            RemoveKind::Children => &[Child],
            RemoveKind::Data => &[Data, Exist],
            RemoveKind::Any => &[Data, Exist, Child, Persistent, PersistentRecursive],
            RemoveKind::Persistent => &[Persistent],
            RemoveKind::PersistentRecursive => &[PersistentRecursive],
        }
    }
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
    persistent: HashMap<String, Vec<Watcher>>,
    recursive: HashMap<String, Vec<Watcher>>,
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
            WatchKind::Persistent => &mut self.persistent,
            WatchKind::PersistentRecursive => &mut self.recursive,
        }
    }

    fn tables(&mut self) -> [&mut HashMap<String, Vec<Watcher>>; 5] {
        [
            &mut self.data,
            &mut self.exist,
            &mut self.child,
            &mut self.persistent,
            &mut self.recursive,
        ]
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
        // Persistent watches stay; each fires a copy of itself.
        let copies = |list: Option<&Vec<Watcher>>| {
            list.into_iter()
                .flatten()
                .filter_map(Watcher::fire_copy)
                .collect::<Vec<_>>()
        };
        use EventType::*;
        if !matches!(
            event,
            NodeCreated | NodeDeleted | NodeDataChanged | NodeChildrenChanged
        ) {
            return fired;
        }
        fired.extend(copies(self.persistent.get(path)));
        // A recursive watch sees its subtree's node events, not child events.
        if event != EventType::NodeChildrenChanged {
            let mut at = path;
            loop {
                fired.extend(copies(self.recursive.get(at)));
                match at.rfind('/') {
                    _ if at == "/" => break,
                    Some(0) => at = "/",
                    Some(i) => at = &at[..i],
                    None => break,
                }
            }
        }
        fired
    }

    /// Removes the watches of `kind` at `path`, each with the event that
    /// tells its callback it was removed (ZooKeeper's `*WatchRemoved`).
    pub(crate) fn remove(&mut self, path: &str, kind: RemoveKind) -> Vec<(Watcher, EventType)> {
        let mut removed = Vec::new();
        for &table in kind.tables() {
            let event = match table {
                WatchKind::Child => EventType::ChildWatchRemoved,
                WatchKind::Data | WatchKind::Exist => EventType::DataWatchRemoved,
                WatchKind::Persistent | WatchKind::PersistentRecursive => {
                    EventType::PersistentWatchRemoved
                }
            };
            if let Some(list) = self.table(table).remove(path) {
                removed.extend(list.into_iter().map(|w| (w, event)));
            }
        }
        removed
    }

    /// Removes every watch of `group` (and starts its next epoch, so that
    /// one requested before and registered later is not kept), each with
    /// the event that tells its callback it was removed, and its path. Also returns the persistent
    /// watches' paths and kinds left with no watcher, which the server may
    /// now drop.
    pub(crate) fn remove_group(
        &mut self,
        group: &Arc<WatchGroup>,
    ) -> (Vec<Removed>, Vec<(String, WatchKind)>) {
        group.epoch.fetch_add(1, Ordering::AcqRel);
        let mut removed = Vec::new();
        let mut emptied = Vec::new();
        use WatchKind::*;
        for kind in [Data, Exist, Child, Persistent, PersistentRecursive] {
            let event = match kind {
                Child => EventType::ChildWatchRemoved,
                Data | Exist => EventType::DataWatchRemoved,
                Persistent | PersistentRecursive => EventType::PersistentWatchRemoved,
            };
            let table = self.table(kind);
            let mut gone = Vec::new();
            for (path, list) in table.iter_mut() {
                let before = list.len();
                let mut i = 0;
                while i < list.len() {
                    if list[i].is_in(group) {
                        removed.push((list.swap_remove(i), event, path.clone()));
                    } else {
                        i += 1;
                    }
                }
                if list.is_empty() && before > 0 {
                    gone.push(path.clone());
                }
            }
            for path in gone {
                table.remove(&path);
                if matches!(kind, Persistent | PersistentRecursive) {
                    emptied.push((path, kind));
                }
            }
        }
        (removed, emptied)
    }

    /// How many callbacks wait, over every kind and path.
    pub(crate) fn len(&self) -> usize {
        [
            &self.data,
            &self.exist,
            &self.child,
            &self.persistent,
            &self.recursive,
        ]
        .iter()
        .map(|m| m.values().map(Vec::len).sum::<usize>())
        .sum()
    }

    /// Whether any watch of `kind` is set at `path`.
    pub(crate) fn has(&mut self, path: &str, kind: RemoveKind) -> bool {
        kind.tables()
            .iter()
            .any(|&t| self.table(t).get(path).is_some_and(|l| !l.is_empty()))
    }

    /// The frames that re-arm every watch after a reconnect: SetWatches
    /// (op 101), or SetWatches2 (op 105) once persistent watches exist, in
    /// batches as the Java client sends them.
    pub(crate) fn set_watches_frames(&self, last_zxid: i64) -> Vec<Vec<u8>> {
        let keys = |m: &HashMap<String, Vec<Watcher>>| m.keys().cloned().collect::<Vec<_>>();
        let tables = [
            keys(&self.data),
            keys(&self.exist),
            keys(&self.child),
            keys(&self.persistent),
            keys(&self.recursive),
        ];
        let persistent = !self.persistent.is_empty() || !self.recursive.is_empty();
        set_watches_batches(tables)
            .into_iter()
            .map(|batch| {
                let opcode = match persistent {
                    true => op::SET_WATCHES2,
                    false => op::SET_WATCHES,
                };
                let mut w = proto::request(xid::SET_WATCHES, opcode);
                w.i64(last_zxid);
                let tables = if persistent { &batch[..] } else { &batch[..3] };
                for paths in tables {
                    w.strings(paths);
                }
                w.finish_frame()
            })
            .collect()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
            && self.exist.is_empty()
            && self.child.is_empty()
            && self.persistent.is_empty()
            && self.recursive.is_empty()
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
        for table in self.tables() {
            for (path, list) in table.drain() {
                all.extend(list.into_iter().map(|w| (path.clone(), w)));
            }
        }
        all
    }
}

/// Paths per SetWatches frame: a batch closes once its paths add up to
/// this many bytes, as in the Java client (`SET_WATCHES_MAX_LENGTH`), so a
/// frame stays far below the server's jute.maxbuffer (1 MiB).
const SET_WATCHES_BATCH: usize = 128 * 1024;

/// Splits the watched paths (data, exist, child, persistent, recursive)
/// into SetWatches batches, the Java client's way: paths are taken in that
/// order and a batch closes once its paths reach [`SET_WATCHES_BATCH`]
/// bytes (so the last path may overshoot it a little).
fn set_watches_batches(tables: [Vec<String>; 5]) -> Vec<[Vec<String>; 5]> {
    let mut batches = Vec::new();
    let mut batch: [Vec<String>; 5] = Default::default();
    let mut length = 0;
    for (table, paths) in tables.into_iter().enumerate() {
        for path in paths {
            length += path.len();
            batch[table].push(path);
            if length >= SET_WATCHES_BATCH {
                batches.push(std::mem::take(&mut batch));
                length = 0;
            }
        }
    }
    if batch.iter().any(|b| !b.is_empty()) {
        batches.push(batch);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn watcher() -> Watcher {
        Watcher {
            group: None,
            run: Box::new(|_| {}),
            waker: false,
            persistent: None,
        }
    }

    /// A group's removal takes its watchers only, and names the persistent
    /// paths it left without any watcher (those the server may drop).
    #[test]
    fn removing_a_group_takes_its_watchers_alone() {
        let (a, b) = (
            Arc::new(WatchGroup::default()),
            Arc::new(WatchGroup::default()),
        );
        let persistent = || Watcher::persistent(Arc::new(|_| {}));
        let mut w = Watches::default();
        w.add(
            WatchKind::Persistent,
            "/p".into(),
            persistent().in_group(Some(a.mark())),
        );
        w.add(
            WatchKind::Persistent,
            "/p".into(),
            persistent().in_group(Some(b.mark())),
        );
        w.add(
            WatchKind::Persistent,
            "/q".into(),
            persistent().in_group(Some(a.mark())),
        );
        w.add(
            WatchKind::Data,
            "/p".into(),
            watcher().in_group(Some(a.mark())),
        );
        w.add(WatchKind::Child, "/p".into(), watcher());
        let (removed, emptied) = w.remove_group(&a);
        let mut paths: Vec<(String, EventType)> =
            removed.into_iter().map(|(_, e, p)| (p, e)).collect();
        paths.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(paths.len(), 3, "{paths:?}");
        assert!(paths.contains(&("/p".into(), EventType::DataWatchRemoved)));
        assert!(paths.contains(&("/q".into(), EventType::PersistentWatchRemoved)));
        assert_eq!(emptied, vec![("/q".to_owned(), WatchKind::Persistent)]);
        assert_eq!(
            w.len(),
            2,
            "b's persistent watch and the ungrouped one stay"
        );
        assert!(!watcher().in_group(Some(b.mark())).in_removed_group());
    }

    /// A watch requested before its group's removal is stale when its
    /// reply comes; one requested after it is not, nor after a second
    /// removal does the first removal's mark become fresh again.
    #[test]
    fn a_mark_is_stale_once_its_group_was_removed_since() {
        let g = Arc::new(WatchGroup::default());
        let before = watcher().in_group(Some(g.mark()));
        assert!(!before.in_removed_group());
        let mut w = Watches::default();
        w.remove_group(&g);
        assert!(before.in_removed_group());
        let after = g.mark();
        assert!(!after.is_stale());
        w.remove_group(&g);
        assert!(after.is_stale() && before.in_removed_group());
        assert!(!g.mark().is_stale());
    }

    #[test]
    fn set_watches_batches_stay_near_128_kb() {
        let paths = |n: usize, tag: &str| -> Vec<String> {
            (0..n).map(|i| format!("/{tag}/{i:0100}")).collect()
        };
        let batches = set_watches_batches([
            paths(3000, "d"),
            paths(3000, "e"),
            paths(10, "c"),
            paths(5, "p"),
            paths(5, "r"),
        ]);
        let total: usize = batches.iter().flatten().map(Vec::len).sum();
        assert_eq!(total, 6020);
        // Every batch but the last closes at the Java client's 128 KiB.
        for (i, b) in batches.iter().enumerate() {
            let bytes: usize = b.iter().flatten().map(String::len).sum();
            assert!(bytes < 128 * 1024 + 200, "batch {i}: {bytes} bytes");
            if i + 1 < batches.len() {
                assert!(bytes >= 128 * 1024, "batch {i}: {bytes} bytes");
            }
        }
        assert_eq!(batches.len(), 5);
        assert!(set_watches_batches(Default::default()).is_empty());
    }

    #[test]
    fn persistent_watches_stay_and_recursive_ones_see_their_subtree() {
        let count = Arc::new(AtomicUsize::new(0));
        let counting = || {
            let count = Arc::clone(&count);
            Watcher::persistent(Arc::new(move |_| {
                count.fetch_add(1, Ordering::SeqCst);
            }))
        };
        let mut w = Watches::default();
        w.add(WatchKind::Persistent, "/a".into(), counting());
        w.add(WatchKind::PersistentRecursive, "/".into(), counting());
        w.add(WatchKind::PersistentRecursive, "/a".into(), counting());
        for _ in 0..3 {
            for f in w.triggered(EventType::NodeDataChanged, "/a") {
                (f.run)(WatchedEvent {
                    event_type: EventType::NodeDataChanged,
                    path: "/a".into(),
                });
            }
        }
        assert_eq!(count.load(Ordering::SeqCst), 9);
        // Child events: the persistent watch only; a deeper node: recursive only.
        assert_eq!(w.triggered(EventType::NodeChildrenChanged, "/a").len(), 1);
        assert_eq!(w.triggered(EventType::NodeCreated, "/a/b/c").len(), 2);
        assert_eq!(w.triggered(EventType::NodeCreated, "/b").len(), 1);
        assert_eq!(w.triggered(EventType::NodeCreated, "/ab").len(), 1);
        assert!(w.has("/a", RemoveKind::Persistent));
        assert_eq!(w.remove("/a", RemoveKind::Any).len(), 2);
        assert!(!w.has("/a", RemoveKind::Any));
        let frames = w.set_watches_frames(7);
        assert_eq!(frames.len(), 1);
        assert_eq!(&frames[0][8..12], &op::SET_WATCHES2.to_be_bytes());
    }

    /// The walk from a node up to the root ends there, within a bound
    /// (a broken walk loops: the test fails instead of hanging).
    #[test]
    fn the_walk_up_to_a_recursive_watch_ends_at_the_root() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut w = Watches::default();
            w.add(
                WatchKind::PersistentRecursive,
                "/".into(),
                Watcher::persistent(Arc::new(|_| {})),
            );
            let counts: Vec<usize> = ["/", "/a", "/a/b/c"]
                .iter()
                .map(|p| w.triggered(EventType::NodeDataChanged, p).len())
                .collect();
            let _ = tx.send(counts);
        });
        let counts = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the walk up to the root did not end within 10 s");
        assert_eq!(counts, [1, 1, 1]);
    }

    #[test]
    fn an_ended_table_hands_back_every_watch_and_says_so() {
        let mut w = Watches::default();
        w.add(WatchKind::Data, "/a".into(), watcher());
        w.add(WatchKind::Child, "/a".into(), watcher());
        w.add(WatchKind::Child, "/a".into(), watcher());
        assert_eq!(w.len(), 3);
        assert!(!w.is_ended());
        let ended = w.end();
        assert_eq!(ended.len(), 3);
        assert!(w.is_ended() && w.is_empty());
        assert_eq!(w.len(), 0);
    }
}

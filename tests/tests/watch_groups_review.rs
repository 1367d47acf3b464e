//! A review of watch groups (`Client::with_watcher_removal` and
//! `Client::remove_watchers`) against a real ZooKeeper 3.8: watches set
//! through a handle after its removal, a persistent watch whose reply is
//! on its way while its group is removed, a persistent watch kept on the
//! server for another handle's one-shot watch, removal on a closed client,
//! from a watcher callback and from many threads, and through a namespace.
//! Each wait has a deadline; a broken behaviour fails within seconds.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use crossbeam_channel::{unbounded, Receiver, Sender};
use latchkey_framework::{AddWatchMode, Client, Error, EventType, WatchedEvent};
use latchkey_test::FaultProxy;

const WAIT: Duration = Duration::from_secs(10);
const ADD_WATCH: i32 = 106;

fn node(c: &Client, prefix: &str) -> String {
    let path = unique(prefix);
    c.create()
        .creating_parents_if_needed()
        .for_path(&path, b"")
        .unwrap();
    path
}

/// A watcher that sends its events' types and paths.
fn sender(tx: &Sender<(EventType, String)>) -> impl Fn(WatchedEvent) + Send + Sync + 'static {
    let tx = tx.clone();
    move |e: WatchedEvent| {
        let _ = tx.send((e.event_type, e.path));
    }
}

fn expect(rx: &Receiver<(EventType, String)>, want: EventType, path: &str, what: &str) {
    match rx.recv_timeout(WAIT) {
        Ok(got) => assert_eq!(got, (want, path.to_owned()), "{what}"),
        Err(_) => panic!("{what}: no {want:?} {path} within {WAIT:?}"),
    }
}

/// How many watch events `c` reads from the server while `act` runs; a
/// read after `act` is the sync point (events come before its reply).
fn events_during(c: &Client, sync_path: &str, act: impl FnOnce()) -> u64 {
    let before = c.metrics().watch_events;
    act();
    c.get_data(sync_path).unwrap();
    c.metrics().watch_events - before
}

/// Curator's `WatcherRemoveCuratorFramework` stays usable after
/// `removeWatchers()`: watches set through it later are kept (and removed
/// by the next `removeWatchers()`). Here a one-shot and a persistent watch
/// set through the handle after its removal must fire.
#[test]
fn a_handle_watches_again_after_removing_its_watchers() {
    let c = connect(&shared_server().connect_string(), WAIT);
    let writer = connect(&shared_server().connect_string(), WAIT);
    let path = node(&writer, "/wgroups/again");
    let mine = c.with_watcher_removal();
    let (tx, rx) = unbounded();
    let before = c.pending_watches();
    mine.get_data_watch(&path, sender(&tx)).unwrap();
    mine.remove_watchers().unwrap();
    expect(&rx, EventType::DataWatchRemoved, &path, "the first removal");

    mine.get_data_watch(&path, sender(&tx)).unwrap();
    assert_eq!(
        c.pending_watches(),
        before + 1,
        "a one-shot watch set through the handle after remove_watchers is not kept"
    );
    writer.set_data(&path, b"1", None).unwrap();
    expect(
        &rx,
        EventType::NodeDataChanged,
        &path,
        "a one-shot watch set after remove_watchers",
    );

    mine.add_watch(&path, AddWatchMode::Persistent, sender(&tx))
        .unwrap();
    assert_eq!(
        c.pending_watches(),
        before + 1,
        "a persistent watch set through the handle after remove_watchers is not kept"
    );
    writer.set_data(&path, b"2", None).unwrap();
    expect(
        &rx,
        EventType::NodeDataChanged,
        &path,
        "a persistent watch set after remove_watchers",
    );
    mine.remove_watchers().unwrap();
    expect(
        &rx,
        EventType::PersistentWatchRemoved,
        &path,
        "the second removal",
    );
    assert_eq!(c.pending_watches(), before);
}

/// A persistent watch whose addWatch reached the server only after its
/// group was removed (a `PersistentWatcher` or `CuratorCache` closed while
/// it starts): the client lets go of it when the reply comes, and then the
/// server must not keep the watch and send this session its events.
#[test]
fn a_persistent_watch_set_after_its_group_was_removed_leaves_none_on_the_server() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).expect("start the proxy");
    let c = patient_client(&proxy);
    let writer = connect(&server.connect_string(), WAIT);
    let path = node(&writer, "/wgroups/late-add");
    let mine = c.with_watcher_removal();
    proxy.pause_requests_at(&request_on(ADD_WATCH, &path));
    let adding = {
        let (mine, path) = (mine.clone(), path.clone());
        thread::spawn(move || mine.add_watch(&path, AddWatchMode::Persistent, |_| {}))
    };
    wait_until(
        WAIT,
        || proxy.requests_paused(),
        || "the addWatch was never sent".into(),
    );
    call_within("remove_watchers", WAIT, move || mine.remove_watchers()).unwrap();
    proxy.resume();
    wait_until(
        WAIT,
        || adding.is_finished(),
        || "add_watch did not return".into(),
    );
    adding.join().unwrap().unwrap();
    assert_eq!(c.pending_watches(), 0, "the client keeps the late watch");
    let events = events_during(&c, &path, || {
        for i in 0..3u8 {
            writer.set_data(&path, &[i], None).unwrap();
        }
    });
    assert_eq!(
        events, 0,
        "the server still holds the persistent watch of a removed group and sends its events"
    );
}

/// On ZooKeeper 3.8 a persistent watch is kept on the server while another
/// handle's one-shot watch remains on its path (only all of a path's
/// watches can be removed there). Once that one-shot watch has fired the
/// client has no watch left on the path, so the persistent watch must not
/// go on sending this session events for ever.
#[test]
#[ignore = "finding: the persistent watch kept on the server for another handle's one-shot \
            watch is never removed after that one fires; the server goes on sending its \
            events until the connection ends (not fixed: needs the one-shot watch's firing to \
            send the deferred removal)"]
fn a_persistent_watch_kept_for_a_one_shot_watch_goes_once_that_fires() {
    let c = connect(&shared_server().connect_string(), WAIT);
    let writer = connect(&shared_server().connect_string(), WAIT);
    let path = node(&writer, "/wgroups/kept");
    let mine = c.with_watcher_removal();
    let (tx, rx) = unbounded();
    mine.add_watch(&path, AddWatchMode::Persistent, |_| {})
        .unwrap();
    c.get_data_watch(&path, sender(&tx)).unwrap();
    mine.remove_watchers().unwrap();
    writer.set_data(&path, b"1", None).unwrap();
    expect(
        &rx,
        EventType::NodeDataChanged,
        &path,
        "the one-shot watch of the other handle",
    );
    c.get_data(&path).unwrap();
    assert_eq!(c.pending_watches(), 0);
    let events = events_during(&c, &path, || {
        for i in 0..3 {
            writer
                .create()
                .for_path(&format!("{path}/c{i}"), b"")
                .unwrap();
            writer.set_data(&path, &[i], None).unwrap();
        }
    });
    assert_eq!(
        events, 0,
        "with no watch left on the client, the server still sends the removed persistent \
         watch's events"
    );
}

/// `remove_watchers` on a handle without a group is refused; on a closed
/// client, and twice, it does nothing and fails not.
#[test]
fn remove_watchers_refuses_a_plain_handle_and_is_idempotent() {
    let c = connect(&shared_server().connect_string(), WAIT);
    assert!(
        matches!(c.remove_watchers(), Err(Error::InvalidArgument(_))),
        "a plain handle"
    );
    let path = node(&c, "/wgroups/closed");
    let mine = c.with_watcher_removal();
    let (tx, rx) = unbounded();
    mine.add_watch(&path, AddWatchMode::PersistentRecursive, sender(&tx))
        .unwrap();
    mine.remove_watchers().unwrap();
    expect(&rx, EventType::PersistentWatchRemoved, &path, "removed");
    mine.remove_watchers().unwrap();
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "told twice"
    );
    mine.get_data_watch(&path, sender(&tx)).unwrap();
    c.close();
    mine.remove_watchers().unwrap();
    mine.remove_watchers().unwrap();
    assert_eq!(c.pending_watches(), 0);
}

/// Many threads remove one group at once while a watcher of another group
/// removes its own from its callback (on the event thread): each watcher
/// is told once, none hangs, and an ungrouped watch still fires.
#[test]
fn concurrent_removals_and_one_from_a_callback_tell_each_watcher_once() {
    const NODES: usize = 20;
    let c = connect(&shared_server().connect_string(), WAIT);
    let writer = connect(&shared_server().connect_string(), WAIT);
    let root = node(&writer, "/wgroups/threads");
    let paths: Vec<String> = (0..NODES)
        .map(|i| {
            let p = format!("{root}/n{i}");
            writer.create().for_path(&p, b"").unwrap();
            p
        })
        .collect();
    let mine = c.with_watcher_removal();
    let told = Arc::new(AtomicUsize::new(0));
    for p in &paths {
        let once = Arc::clone(&told);
        mine.get_data_watch(p, move |e| {
            assert_eq!(e.event_type, EventType::DataWatchRemoved);
            once.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        let kept = Arc::clone(&told);
        mine.add_watch(p, AddWatchMode::Persistent, move |e| {
            if e.event_type == EventType::PersistentWatchRemoved {
                kept.fetch_add(1, Ordering::SeqCst);
            }
        })
        .unwrap();
    }
    // A watcher of another group that removes its group from its callback.
    let other = c.with_watcher_removal();
    other
        .add_watch(&root, AddWatchMode::Persistent, |_| {})
        .unwrap();
    let (done_tx, done_rx) = unbounded();
    {
        let other2 = other.clone();
        other
            .get_data_watch(&root, move |_| {
                let _ = done_tx.send(other2.remove_watchers());
            })
            .unwrap();
    }
    let (tx, rx) = unbounded();
    c.get_data_watch(&root, sender(&tx)).unwrap();
    let removers: Vec<_> = (0..4)
        .map(|_| {
            let mine = mine.clone();
            thread::spawn(move || mine.remove_watchers())
        })
        .collect();
    writer.set_data(&root, b"x", None).unwrap();
    for r in removers {
        r.join().unwrap().unwrap();
    }
    match done_rx.recv_timeout(WAIT) {
        Ok(r) => r.unwrap(),
        Err(_) => panic!("remove_watchers from a callback did not return"),
    }
    expect(
        &rx,
        EventType::NodeDataChanged,
        &root,
        "the ungrouped watch",
    );
    wait_until(
        WAIT,
        || told.load(Ordering::SeqCst) >= 2 * NODES,
        || format!("{} of {} told", told.load(Ordering::SeqCst), 2 * NODES),
    );
    // The removal events run on the event thread before a later event.
    let events = events_during(&c, &root, || {
        for p in &paths {
            writer.set_data(p, b"y", None).unwrap();
        }
    });
    assert_eq!(
        told.load(Ordering::SeqCst),
        2 * NODES,
        "a watcher told twice"
    );
    assert_eq!(events, 0, "a removed persistent watch still sends events");
    assert_eq!(c.pending_watches(), 0);
}

/// Through a namespace, the removal event carries the namespace-relative
/// path, and the persistent watch goes on the server (no events later).
#[test]
fn a_namespaced_handle_removes_its_persistent_watch_on_the_server() {
    let ns = unique("wgroups-ns")
        .trim_start_matches('/')
        .replace('/', "-");
    let c = start_connected(
        Client::builder()
            .connect_string(shared_server().connect_string())
            .session_timeout(WAIT)
            .namespace(ns.as_str()),
    );
    let writer = connect(&shared_server().connect_string(), WAIT);
    writer
        .create()
        .creating_parents_if_needed()
        .for_path(&format!("/{ns}/x"), b"")
        .unwrap();
    let mine = c.with_watcher_removal();
    let (tx, rx) = unbounded();
    mine.add_watch("/x", AddWatchMode::Persistent, sender(&tx))
        .unwrap();
    writer.set_data(&format!("/{ns}/x"), b"1", None).unwrap();
    expect(&rx, EventType::NodeDataChanged, "/x", "before removal");
    mine.remove_watchers().unwrap();
    expect(&rx, EventType::PersistentWatchRemoved, "/x", "the removal");
    let events = events_during(&c, "/x", || {
        writer.set_data(&format!("/{ns}/x"), b"2", None).unwrap();
    });
    assert_eq!(events, 0, "the namespaced watch stayed on the server");
}

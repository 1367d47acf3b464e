//! Watches kept set through connection and session loss (Curator's
//! `recipes.watch`): [`PersistentWatcher`](crate::PersistentWatcher), a
//! persistent or persistent recursive watch (ZooKeeper 3.6+ `addWatch`)
//! that is added again on every new session and tells when it is
//! (re)set, since changes made while it was not set raised no event.

pub(crate) mod persistent_watcher;

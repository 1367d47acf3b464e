//! The public operations: the create and delete builders, and the
//! client's other operations, each validated, namespaced and retried on
//! top of the session operations in `ops`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::acl::Acl;
use crate::background::Job;
use crate::client::{Client, Shared};
use crate::error::{Error, ErrorCode, Result};
use crate::ops::{self, wire_children, wire_create, wire_delete, wire_exists, wire_get_data};
use crate::paths;
use crate::types::{CreateMode, Stat, WatchedEvent};
use crate::wire::{WatchGroup, WatchKind, WatchRegistration, Watcher, WireSession};

/// A one-shot watcher that may be registered by several attempts of a
/// retried read; whichever registration fires first calls it.
type SharedWatcher = Arc<Mutex<Option<Box<dyn FnOnce(WatchedEvent) + Send>>>>;

impl Shared {
    fn registration(
        self: &Arc<Self>,
        server_path: &str,
        on_ok: WatchKind,
        on_no_node: Option<WatchKind>,
        watcher: &SharedWatcher,
        waker: bool,
        group: Option<crate::wire::GroupMark>,
    ) -> WatchRegistration {
        let slot = Arc::clone(watcher);
        let ns = self.cfg.namespace.clone();
        WatchRegistration {
            path: server_path.to_owned(),
            on_ok,
            on_no_node,
            watcher: Watcher {
                run: Box::new(move |ev: WatchedEvent| {
                    if let Some(f) = slot.lock().take() {
                        f(WatchedEvent {
                            event_type: ev.event_type,
                            path: paths::strip_namespace(ns.as_deref(), &ev.path),
                        });
                    }
                }),
                waker,
                persistent: None,
                group,
            },
        }
    }

    /// Creates every missing ancestor of `server_path` (not the node itself).
    fn create_parents(
        &self,
        s: &WireSession,
        server_path: &str,
        containers: bool,
        deadline: Instant,
    ) -> Result<()> {
        let mode = if containers {
            CreateMode::Container
        } else {
            CreateMode::Persistent
        };
        let acl_for = |node: &str| self.cfg.acl_provider.acl_for_path(&self.user_path(node));
        ops::create_missing(s, ops::ancestors(server_path), mode, &acl_for, deadline)
    }
}

/// Builds a create; Curator's `client.create()`.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_framework::CreateMode;
/// let path = client
///     .create()
///     .creating_parents_if_needed()
///     .with_protection()
///     .mode(CreateMode::EphemeralSequential)
///     .for_path("/jobs/job-", b"payload")?;
/// # Ok(()) }
/// ```
#[must_use = "a create does nothing until for_path is called"]
pub struct CreateBuilder<'a> {
    client: &'a Client,
    mode: CreateMode,
    parents: bool,
    parent_containers: bool,
    protected: bool,
    compressed: bool,
    acl: Option<Vec<Acl>>,
}

impl CreateBuilder<'_> {
    /// Writes the data gzipped, as Curator's `create().compressed()`
    /// (read it with [`compression::decompress`](crate::compression::decompress),
    /// or a `CuratorCache` built with `compressed_data()`).
    pub fn compressed(mut self) -> Self {
        self.compressed = true;
        self
    }

    /// The create mode (default persistent).
    pub fn mode(mut self, mode: CreateMode) -> Self {
        self.mode = mode;
        self
    }

    /// Creates missing parents as persistent nodes.
    pub fn creating_parents_if_needed(mut self) -> Self {
        self.parents = true;
        self
    }

    /// Creates missing parents as container nodes.
    pub fn creating_parent_containers_if_needed(mut self) -> Self {
        self.parents = true;
        self.parent_containers = true;
        self
    }

    /// Curator's protected mode: the node's name gets a `_c_<uuid>-` prefix,
    /// and when a create's reply is lost the retry finds the node by that
    /// prefix instead of creating a second one. A protected create that
    /// finally fails leaves a background job that deletes any such node.
    pub fn with_protection(mut self) -> Self {
        self.protected = true;
        self
    }

    /// The node's ACL, instead of the ACL provider's.
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = Some(acl);
        self
    }

    /// Creates the node and returns its (namespace-relative) path.
    pub fn for_path(self, path: &str, data: &[u8]) -> Result<String> {
        self.for_path_with_stat(path, data).map(|(p, _)| p)
    }

    /// Creates the node and returns its path and stat.
    pub fn for_path_with_stat(self, path: &str, data: &[u8]) -> Result<(String, Stat)> {
        self.create(path, data, false).map(|(p, stat, _)| (p, stat))
    }

    /// Like [`CreateBuilder::for_path_with_stat`], and lists the new node's
    /// parent in the same round trip: the listing is sent right behind the
    /// create and ZooKeeper answers a session's requests in order, so it
    /// shows the children just after the create (the new node among them).
    /// The listing is `None` when it could not ride along (say, the create
    /// was retried); list the parent yourself then.
    ///
    /// A lock recipe needs both to queue, so this saves it a round trip.
    pub fn for_path_listing_parent(
        self,
        path: &str,
        data: &[u8],
    ) -> Result<(String, Stat, Option<Vec<String>>)> {
        self.create(path, data, true)
    }

    fn create(
        self,
        path: &str,
        data: &[u8],
        list_parent: bool,
    ) -> Result<(String, Stat, Option<Vec<String>>)> {
        let packed;
        let data = match self.compressed {
            true => {
                packed = crate::compression::compress(data);
                &packed[..]
            }
            false => data,
        };
        let shared = &self.client.shared;
        let valid = if self.mode.is_sequential() {
            paths::validate_path_sequential(path)
        } else {
            paths::validate_path(path)
        };
        // The reason alone: `Error::InvalidPath` shows the path itself.
        valid.map_err(|e| Error::InvalidPath {
            path: path.to_owned(),
            reason: e.kind().to_string(),
        })?;
        if path == "/" && shared.cfg.namespace.is_none() {
            return Err(Error::InvalidPath {
                path: path.into(),
                reason: "cannot create the root".into(),
            });
        }
        let acl = self
            .acl
            .clone()
            .unwrap_or_else(|| shared.cfg.acl_provider.acl_for_path(path));
        if acl.is_empty() {
            return Err(Error::InvalidArgument(
                "an ACL needs at least one entry".into(),
            ));
        }
        self.mode
            .ttl_ms()
            .map_err(|why| Error::InvalidArgument(format!("create {path}: {why}")))?;
        let protection = self.protected.then(paths::new_protection_id);
        let user_path = match &protection {
            Some(id) => paths::protected_path(path, id),
            None => path.to_owned(),
        };
        let server_path = paths::fix_for_namespace(shared.cfg.namespace.as_deref(), &user_path);
        let (parent, _) = ops::split_parent(&server_path);
        let prefix = protection.as_ref().map(|id| paths::protected_prefix(id));
        let mut first = true;
        let create = |s: &WireSession, deadline| match list_parent {
            true => ops::wire_create_listing_parent(
                s,
                &server_path,
                data,
                &acl,
                self.mode,
                parent,
                deadline,
            ),
            false => wire_create(s, &server_path, data, &acl, self.mode, deadline)
                .map(|(p, stat)| (p, stat, None)),
        };
        let result = shared.with_retry(
            "create",
            path,
            self.client.deadline,
            self.client.cancel.as_ref(),
            |s, deadline| {
                if let (false, Some(prefix)) = (first, &prefix) {
                    if let Some((found, stat)) = ops::find_protected(s, parent, prefix, deadline)? {
                        // Curator's validateFoundNode: an ephemeral node of an
                        // earlier session goes with that session; remove it
                        // and create one for this session instead.
                        if self.mode.is_ephemeral() && stat.ephemeral_owner != s.session_id() {
                            log::info!(
                                "protected create found {found} of an earlier session; deleting it"
                            );
                            shared.background.push(Job::Delete {
                                path: found,
                                version: None,
                            });
                        } else {
                            return Ok((found, stat, None));
                        }
                    }
                }
                first = false;
                match create(s, deadline) {
                    Err(e) if e.is(ErrorCode::NoNode) && self.parents => {
                        shared.create_parents(s, &server_path, self.parent_containers, deadline)?;
                        create(s, deadline)
                    }
                    other => other,
                }
            },
        );
        match result {
            Ok((node, stat, children)) => Ok((shared.user_path(&node), stat, children)),
            Err(e) => {
                // A create cut short may have made its node all the same.
                let unsure = e.is_retryable() || matches!(e, Error::Cancelled);
                if let (Some(prefix), true) = (prefix, unsure) {
                    shared.background.push(Job::DeleteProtected {
                        parent: parent.to_owned(),
                        prefix,
                    });
                }
                Err(self.client.relative(e).for_op("create", path))
            }
        }
    }
}

/// How long a [`DeleteBuilder::in_background`] delete waits for
/// ZooKeeper's answer before leaving the delete to the background: far
/// above a healthy round trip, short enough that releasing a lock (a
/// guard's drop) never stalls on a connection that has gone silent.
pub const HANDOVER_AFTER: Duration = Duration::from_millis(200);

/// Builds a delete; Curator's `client.delete()`.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// client.delete().guaranteed().deleting_children_if_needed().for_path("/jobs")?;
/// # Ok(()) }
/// ```
#[must_use = "a delete does nothing until for_path is called"]
pub struct DeleteBuilder<'a> {
    client: &'a Client,
    guaranteed: bool,
    in_background: bool,
    version: Option<i32>,
    children: bool,
}

impl DeleteBuilder<'_> {
    /// Keeps trying in the background until the node is gone, even after
    /// this call returns an error (a missing node counts as deleted). As in
    /// Curator, the background retries only after connection problems; an
    /// error that retrying cannot fix (`NotEmpty`, `BadVersion`, `NoAuth`)
    /// ends the job with a warning in the log.
    pub fn guaranteed(mut self) -> Self {
        self.guaranteed = true;
        self
    }

    /// Curator's `guaranteed().inBackground()`: makes one attempt only if
    /// connected right now, and otherwise leaves the delete to the
    /// background (which retries until the node is gone), so the call never
    /// waits on a broken connection. A connection that has just gone silent
    /// looks connected until the client notices (two thirds of the session
    /// timeout), so the attempt waits for ZooKeeper's answer at most
    /// [`HANDOVER_AFTER`] (a plain delete, without
    /// [`deleting_children_if_needed`](Self::deleting_children_if_needed))
    /// before handing over. `Ok` then means deleted or handed over; errors
    /// that retrying cannot fix (such as `NotEmpty`) still return.
    /// Implies [`DeleteBuilder::guaranteed`].
    pub fn in_background(mut self) -> Self {
        self.guaranteed = true;
        self.in_background = true;
        self
    }

    /// Deletes only if the node's version matches.
    pub fn with_version(mut self, version: i32) -> Self {
        self.version = Some(version);
        self
    }

    /// Deletes the node's descendants first.
    pub fn deleting_children_if_needed(mut self) -> Self {
        self.children = true;
        self
    }

    /// Deletes the node. A guaranteed delete of a missing node succeeds.
    pub fn for_path(self, path: &str) -> Result<()> {
        let shared = &self.client.shared;
        let server_path = shared.server_path(path)?;
        if server_path == "/" {
            return Err(Error::InvalidPath {
                path: path.into(),
                reason: "cannot delete the root".into(),
            });
        }
        let attempt = |s: &WireSession, deadline: Instant| {
            if self.children {
                ops::delete_children(s, &server_path, deadline)?;
            }
            wire_delete(s, &server_path, self.version, deadline)
        };
        let result = match self.in_background {
            true => {
                let handover = (!self.children).then(|| Instant::now() + HANDOVER_AFTER);
                let deadline = match (handover, self.client.deadline) {
                    (Some(h), Some(d)) => Some(h.min(d)),
                    (h, d) => h.or(d),
                };
                let cancel = self.client.cancel.as_ref();
                shared.try_once("delete", path, deadline, cancel, attempt)
            }
            false => shared.with_retry(
                "delete",
                path,
                self.client.deadline,
                self.client.cancel.as_ref(),
                attempt,
            ),
        };
        match result {
            Err(e) if self.guaranteed && e.is(ErrorCode::NoNode) => Ok(()),
            Err(e)
                if self.guaranteed
                    && (e.is_retryable() || matches!(e, Error::Closed | Error::Cancelled)) =>
            {
                if !matches!(e, Error::Closed) {
                    shared.background.push(Job::Delete {
                        path: server_path,
                        version: self.version,
                    });
                }
                match self.in_background {
                    true => Ok(()),
                    false => Err(self.client.relative(e).for_op("delete", path)),
                }
            }
            other => other.map_err(|e| self.client.relative(e).for_op("delete", path)),
        }
    }
}

impl Client {
    /// Starts a create.
    pub fn create(&self) -> CreateBuilder<'_> {
        CreateBuilder {
            client: self,
            mode: CreateMode::Persistent,
            parents: false,
            parent_containers: false,
            protected: false,
            compressed: false,
            acl: None,
        }
    }

    /// Starts a delete.
    pub fn delete(&self) -> DeleteBuilder<'_> {
        DeleteBuilder {
            client: self,
            guaranteed: false,
            in_background: false,
            version: None,
            children: false,
        }
    }

    /// The node's stat, or `None` if it does not exist.
    pub fn exists(&self, path: &str) -> Result<Option<Stat>> {
        let sp = self.shared.server_path(path)?;
        self.retrying("exists", path, |s, d| wire_exists(s, &sp, None, d))
    }

    /// Like [`Client::exists`], and leaves a one-shot watch that fires when
    /// the node is created, deleted or its data changes.
    pub fn exists_watch(
        &self,
        path: &str,
        watcher: impl FnOnce(WatchedEvent) + Send + 'static,
    ) -> Result<Option<Stat>> {
        let tables = (WatchKind::Data, Some(WatchKind::Exist));
        self.watched_read(
            "exists",
            path,
            Box::new(watcher),
            false,
            tables,
            wire_exists,
        )
    }

    /// For recipe authors: [`Client::exists_watch`] with a waker (see
    /// [`Client::get_data_watch_waker`]). Wakers on one session run in the
    /// order ZooKeeper sent their events, which a waiter may rely on.
    pub fn exists_watch_waker(
        &self,
        path: &str,
        wake: impl FnOnce(WatchedEvent) + Send + 'static,
    ) -> Result<Option<Stat>> {
        let tables = (WatchKind::Data, Some(WatchKind::Exist));
        self.watched_read("exists", path, Box::new(wake), true, tables, wire_exists)
    }

    /// The node's data and stat.
    pub fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat)> {
        let sp = self.shared.server_path(path)?;
        self.retrying("get_data", path, |s, d| wire_get_data(s, &sp, None, d))
    }

    /// Like [`Client::get_data`], and leaves a one-shot watch that fires when
    /// the node is deleted or its data changes. No watch is left when the
    /// node does not exist (the call fails with `NoNode`).
    pub fn get_data_watch(
        &self,
        path: &str,
        watcher: impl FnOnce(WatchedEvent) + Send + 'static,
    ) -> Result<(Vec<u8>, Stat)> {
        let tables = (WatchKind::Data, None);
        self.watched_read(
            "get_data",
            path,
            Box::new(watcher),
            false,
            tables,
            wire_get_data,
        )
    }

    /// For recipe authors: [`Client::get_data_watch`] with a waker instead
    /// of a watcher. A waker runs as soon as the event is read, on the
    /// engine thread that serves every session's connection: a thread hop
    /// sooner than a watcher (which runs on the session's event thread),
    /// so it must return at once and must not call the client (such a call
    /// fails with `IllegalState`): set a flag, notify a condvar. Wakers run
    /// in the order of their events. A panicking waker is caught and
    /// logged. A lock waiter wakes this way when its predecessor goes. A
    /// waker that is never run (its call failed or timed out) is dropped
    /// on the session's event thread, not the engine's.
    pub fn get_data_watch_waker(
        &self,
        path: &str,
        wake: impl FnOnce(WatchedEvent) + Send + 'static,
    ) -> Result<(Vec<u8>, Stat)> {
        let tables = (WatchKind::Data, None);
        self.watched_read(
            "get_data",
            path,
            Box::new(wake),
            true,
            tables,
            wire_get_data,
        )
    }

    /// Sets the node's data, if `version` is `None` or matches.
    pub fn set_data(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<Stat> {
        let sp = self.shared.server_path(path)?;
        self.retrying("set_data", path, |s, d| {
            ops::wire_set_data(s, &sp, data, version, d)
        })
    }

    /// Compare-and-set: sets the node's data if its version is `version`,
    /// retried as [`Client::set_data`] is, but never reporting this call's
    /// own write as refused. A retried `set_data` meets `BadVersion` when an
    /// earlier attempt was applied and only its reply was lost; here, when
    /// an attempt was sent and its outcome lost, a later `BadVersion` makes
    /// the call read the node: holding other data one version on, another
    /// write won, and the error is `BadVersion`; otherwise (this data one
    /// version on, which an equal write of another session would leave
    /// too, or a later version) the outcome cannot be told, and the error
    /// is `ConnectionLoss`, "may or may not have run".
    ///
    /// ```no_run
    /// # use latchkey_framework::{Client, ErrorCode};
    /// # fn main() -> latchkey_framework::Result<()> {
    /// # let client = Client::new("127.0.0.1:2181")?;
    /// let (data, stat) = client.get_data("/config")?;
    /// match client.compare_and_set_data("/config", b"next", stat.version) {
    ///     Ok(_) => println!("written"),
    ///     Err(e) if e.is(ErrorCode::BadVersion) => println!("someone else wrote first"),
    ///     Err(e) => return Err(e), // ConnectionLoss: it may have been written
    /// }
    /// # let _ = data;
    /// # Ok(())
    /// # }
    /// ```
    pub fn compare_and_set_data(&self, path: &str, data: &[u8], version: i32) -> Result<Stat> {
        let sp = self.shared.server_path(path)?;
        let mut in_doubt = false;
        let written = self.retrying("set_data", path, |s, d| {
            let attempt = ops::wire_set_data(s, &sp, data, Some(version), d);
            if let Err(e) = &attempt {
                in_doubt |= e.is_retryable() && !e.is_unsent();
            }
            attempt
        });
        match written {
            Err(e) if in_doubt && e.is(ErrorCode::BadVersion) => {
                Err(match self.another_write_won(path, data, version)? {
                    true => e,
                    false => Error::from_code(ErrorCode::ConnectionLoss).for_op("set_data", path),
                })
            }
            other => other,
        }
    }

    /// After a compare-and-set of `data` at `version` was sent, its outcome
    /// lost, and a retry refused with `BadVersion`: whether the node proves
    /// that another write won (other data one version on). Anything else
    /// (this data one version on, or a later version) cannot be told from
    /// this write having been applied.
    pub(crate) fn another_write_won(&self, path: &str, data: &[u8], version: i32) -> Result<bool> {
        let (now, stat) = self.get_data(path)?;
        Ok(version.checked_add(1) == Some(stat.version) && now != data)
    }

    /// Sets the node's data in one attempt, outside the retry loop, for
    /// compare-and-set loops that must know whether their write was
    /// applied: with a `version`, `BadVersion` means that this write was
    /// refused (a retried [`Client::set_data`] can report `BadVersion` for
    /// its own earlier attempt, applied before the connection broke), and
    /// an error whose source is [`Error::NotConnected`] means that nothing
    /// was sent. After any other connection error the outcome is unknown.
    pub fn set_data_once(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<Stat> {
        let sp = self.shared.server_path(path)?;
        self.shared
            .try_once(
                "set_data",
                path,
                self.deadline,
                self.cancel.as_ref(),
                |s, d| ops::wire_set_data(s, &sp, data, version, d),
            )
            .map_err(|e| self.relative(e).for_op("set_data", path))
    }

    /// The names of the node's children, in the server's (unspecified) order.
    pub fn get_children(&self, path: &str) -> Result<Vec<String>> {
        let sp = self.shared.server_path(path)?;
        self.retrying("get_children", path, |s, d| wire_children(s, &sp, None, d))
    }

    /// Like [`Client::get_children`], and leaves a one-shot watch that fires
    /// when a child is added or removed, or the node is deleted.
    pub fn get_children_watch(
        &self,
        path: &str,
        watcher: impl FnOnce(WatchedEvent) + Send + 'static,
    ) -> Result<Vec<String>> {
        let tables = (WatchKind::Child, None);
        self.watched_read(
            "get_children",
            path,
            Box::new(watcher),
            false,
            tables,
            wire_children,
        )
    }

    /// Runs `read` on `path` leaving a one-shot watch: in the `tables.0`
    /// table when the read succeeds, in `tables.1` (if any) when the node is
    /// missing. A retried read registers the same watcher again; it runs at
    /// most once.
    fn watched_read<T>(
        &self,
        op: &'static str,
        path: &str,
        watcher: Box<dyn FnOnce(WatchedEvent) + Send>,
        waker: bool,
        (on_ok, on_no_node): (WatchKind, Option<WatchKind>),
        read: impl Fn(&WireSession, &str, Option<WatchRegistration>, Instant) -> Result<T>,
    ) -> Result<T> {
        let sp = self.shared.server_path(path)?;
        let w: SharedWatcher = Arc::new(Mutex::new(Some(watcher)));
        self.retrying(op, path, |s, d| {
            let group = self.watch_group.as_ref().map(WatchGroup::mark);
            let reg = self
                .shared
                .registration(&sp, on_ok, on_no_node, &w, waker, group);
            read(s, &sp, Some(reg), d)
        })
    }

    /// Creates every node of `path` that does not exist yet, as persistent
    /// nodes with the provider's ACL (Curator's `EnsurePath`).
    pub fn ensure_path(&self, path: &str) -> Result<()> {
        let sp = self.shared.server_path(path)?;
        if sp == "/" {
            return Ok(());
        }
        let shared = &self.shared;
        self.retrying("ensure_path", path, |s, d| {
            if wire_exists(s, &sp, None, d)?.is_some() {
                return Ok(());
            }
            shared.create_parents(s, &sp, false, d)?;
            let acl = shared.cfg.acl_provider.acl_for_path(path);
            match wire_create(s, &sp, &[], &acl, CreateMode::Persistent, d) {
                Err(e) if e.is(ErrorCode::NodeExists) => Ok(()),
                other => other.map(|_| ()),
            }
        })
    }

    /// Makes the connected server catch up with the leader for `path`.
    pub fn sync(&self, path: &str) -> Result<()> {
        let sp = self.shared.server_path(path)?;
        self.retrying("sync", path, |s, d| ops::wire_sync(s, &sp, d))
    }

    /// How many guaranteed deletes and protected-node cleanups are still
    /// waiting to be done in the background.
    pub fn pending_background_work(&self) -> usize {
        self.shared.background.pending()
    }

    /// Runs `attempt` in the retry loop under this handle's deadline.
    /// Errors name namespace-relative paths; a timeout names `op` and `path`.
    pub(crate) fn retrying<T>(
        &self,
        op: &'static str,
        path: &str,
        attempt: impl FnMut(&WireSession, Instant) -> Result<T>,
    ) -> Result<T> {
        self.shared
            .with_retry(op, path, self.deadline, self.cancel.as_ref(), attempt)
            .map_err(|e| self.relative(e).for_op(op, path))
    }

    /// Errors name namespace-relative paths, as the caller gave them.
    pub(crate) fn relative(&self, e: Error) -> Error {
        match e {
            Error::Zk {
                code,
                path: Some(p),
            } => Error::Zk {
                code,
                path: Some(self.shared.user_path(&p)),
            },
            other => other,
        }
    }
}

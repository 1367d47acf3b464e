//! Curator's `ServiceDiscovery`: registers this process's instances under
//! `<base path>/<name>/<id>` and queries everyone's.
//!
//! A dynamic instance is an ephemeral node kept by a recipes
//! [`PersistentNode`], so it comes back by itself on a new session (and
//! after a delete by someone else); a node of another session found at
//! its path when it registers is deleted and created again, as Curator
//! does. Static and permanent instances are
//! persistent nodes, written again on every (re)connection if they went
//! missing, and deleted when unregistered or when the discovery closes, as
//! Curator's are.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use latchkey_framework::{paths, Client, ConnectionState, CreateMode, ErrorCode, ListenerHandle};
use latchkey_recipes::{CacheEvent, CuratorCache, Fence, PersistentNode};
use parking_lot::Mutex;

use crate::cache::ServiceCacheBuilder;
use crate::error::{Error, Result};
use crate::instance::{ServiceInstance, ServiceType};
use crate::json::{InstanceSerializer, JsonInstanceSerializer};
use crate::provider::ServiceProviderBuilder;
use crate::Payload;

/// How long a registration waits for its node by default.
const DEFAULT_REGISTER_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the work after a reconnection may take.
const RECONNECT_WORK: Duration = Duration::from_secs(10);
/// How long [`ServiceDiscovery::close`] waits for ZooKeeper, for all its
/// instances together, before it leaves the deletes not done yet to the
/// client's background.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
/// How often a registration deletes a node in its way before leaving it
/// (Curator's `MAX_TRIES` is 2: one delete).
const MAX_TRIES: usize = 3;

/// Builds a [`ServiceDiscovery`] (Curator's `ServiceDiscoveryBuilder`),
/// from [`ServiceDiscovery::builder`].
#[must_use = "a builder does nothing until `build`"]
pub struct ServiceDiscoveryBuilder<T> {
    client: Client,
    base_path: Option<String>,
    serializer: Option<Arc<dyn InstanceSerializer<T>>>,
    this_instance: Option<ServiceInstance<T>>,
    register_timeout: Duration,
    watch_instances: bool,
}

impl<T: Payload> ServiceDiscoveryBuilder<T> {
    /// Watches the nodes of the instances registered here (Curator's
    /// `watchInstances`): when another process writes one, the
    /// registration takes its contents
    /// ([`registered_service`](ServiceDiscovery::registered_service)), and
    /// a dynamic instance is re-created with them after a lost session.
    /// Off by default; each watched instance has a cache and a thread.
    pub fn watch_instances(mut self, watch: bool) -> Self {
        self.watch_instances = watch;
        self
    }

    /// Required: the path the services live under (`/services`).
    pub fn base_path(mut self, path: &str) -> Self {
        self.base_path = Some(path.to_owned());
        self
    }

    /// The serializer (default: [`JsonInstanceSerializer::new`], Curator's
    /// default).
    pub fn serializer(mut self, serializer: impl InstanceSerializer<T> + 'static) -> Self {
        self.serializer = Some(Arc::new(serializer));
        self
    }

    /// The instance of this process, registered by
    /// [`start`](ServiceDiscovery::start).
    pub fn this_instance(mut self, instance: ServiceInstance<T>) -> Self {
        self.this_instance = Some(instance);
        self
    }

    /// How long [`register_service`](ServiceDiscovery::register_service)
    /// waits for a dynamic instance's node (default 15 s; `Duration::MAX`:
    /// as long as it takes); the node keeps being tried after that. Also
    /// the longest [`start`](ServiceDiscovery::start) waits for the
    /// builder's instance while connected (it returns at once while not).
    pub fn register_timeout(mut self, timeout: Duration) -> Self {
        self.register_timeout = timeout;
        self
    }

    /// The discovery, not started. Fails without a base path or with an
    /// invalid one.
    pub fn build(self) -> Result<ServiceDiscovery<T>> {
        let base = self.base_path.ok_or_else(|| {
            Error::InvalidArgument("a service discovery needs a base path".into())
        })?;
        paths::validate_path(&base).map_err(|e| {
            Error::InvalidArgument(format!(
                "base path {:?}: {}",
                base.chars().take(200).collect::<String>(),
                e.kind()
            ))
        })?;
        let serializer = self
            .serializer
            .unwrap_or_else(|| Arc::new(JsonInstanceSerializer::<T>::new()));
        Ok(ServiceDiscovery {
            inner: Arc::new(Inner {
                client: self.client,
                base_path: base.trim_end_matches('/').to_owned(),
                serializer,
                services: Mutex::new(BTreeMap::new()),
                this_instance: Mutex::new(self.this_instance),
                listener: Mutex::new(None),
                state: Mutex::new(State::Latent),
                register_timeout: self.register_timeout,
                watch_instances: self.watch_instances,
            }),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Latent,
    Started,
    Closed,
}

/// Registers and finds service instances (Curator's `ServiceDiscovery`),
/// in the same nodes and JSON as Curator, so Java services find the ones
/// registered here and the reverse.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_discovery::Result<()> {
/// use latchkey_discovery::{ServiceDiscovery, ServiceInstance};
///
/// let me = ServiceInstance::<serde_json::Value>::builder("orders").port(8080).build();
/// let discovery = ServiceDiscovery::builder(client)
///     .base_path("/services")
///     .this_instance(me)
///     .build()?;
/// discovery.start()?; // registers `me`: an ephemeral node, kept through lost sessions
/// for instance in discovery.query_for_instances("billing")? {
///     println!("billing at {:?}:{:?}", instance.address, instance.port);
/// }
/// discovery.close(); // unregisters (dropping it does too)
/// # Ok(()) }
/// ```
///
/// # In-doubt writes
///
/// Writes are retried after a lost reply. A dynamic instance's node is a
/// plain ephemeral node kept by a [`PersistentNode`]: a retried create
/// meets the node it made and keeps it. A `DynamicSequential` instance's
/// node is not protected, so a retried create makes a second node, and the
/// first, holding the same instance, stays listed until its session ends.
/// A static or permanent instance is created, or, on `NodeExists`, written
/// over with its contents (an ephemeral node there is deleted at the
/// version read, and created again), so repeating it changes nothing.
/// Deletes take `NoNode` on a retry as done. A write that fails after its
/// request was sent may have been applied; for
/// [`update_service_fenced`](Self::update_service_fenced), the instance as
/// this discovery knows it then stays the old one.
///
/// # Close
///
/// [`close`](Self::close) (or drop) unregisters each instance: it closes
/// the instance's watch and its node keeper (a delete that waits at most
/// [`HANDOVER_AFTER`](latchkey_framework::HANDOVER_AFTER) and then goes on
/// in the client's background), then deletes the node again with a
/// guaranteed delete. The close waits for ZooKeeper 2 s at most in all,
/// whatever the client's retry policy; the deletes not done by then go on
/// in the client's background until the nodes are gone (or the client
/// closes). [`unregister_service`](Self::unregister_service) waits as the
/// retry policy allows, and returns the delete's error. After a close,
/// registering, updating and [`start`](Self::start) fail with
/// [`Error::IllegalState`]; queries still work.
pub struct ServiceDiscovery<T> {
    inner: Arc<Inner<T>>,
}

pub(crate) struct Inner<T> {
    pub(crate) client: Client,
    pub(crate) base_path: String,
    pub(crate) serializer: Arc<dyn InstanceSerializer<T>>,
    /// This process's registrations, by id.
    services: Mutex<BTreeMap<String, Entry<T>>>,
    this_instance: Mutex<Option<ServiceInstance<T>>>,
    listener: Mutex<Option<ListenerHandle>>,
    state: Mutex<State>,
    register_timeout: Duration,
    watch_instances: bool,
}

struct Entry<T> {
    instance: ServiceInstance<T>,
    /// What was last written to, or read from, its node.
    bytes: Vec<u8>,
    /// The node of a dynamic instance.
    node: Option<PersistentNode>,
    /// The cache of its node ([`ServiceDiscoveryBuilder::watch_instances`]).
    watch: Option<CuratorCache>,
    /// A static instance whose node [`ServiceDiscovery::start`] could not
    /// write: written, over what is there, after the next (re)connection.
    pending: bool,
}

impl<T: Payload> ServiceDiscovery<T> {
    /// A builder of a discovery that works through `client`.
    pub fn builder(client: &Client) -> ServiceDiscoveryBuilder<T> {
        ServiceDiscoveryBuilder {
            client: client.clone(),
            base_path: None,
            serializer: None,
            this_instance: None,
            register_timeout: DEFAULT_REGISTER_TIMEOUT,
            watch_instances: false,
        }
    }

    /// Registers the builder's instance, if any, and from now on writes
    /// static instances again after every (re)connection. Starting twice,
    /// or after closing, is an error.
    ///
    /// Unlike [`register_service`](Self::register_service), `start` does
    /// not fail because ZooKeeper cannot be reached, as Curator's `start`
    /// logs such a failure and registers again on the next connection:
    /// while the client is not connected it returns at once, `Ok`, and
    /// otherwise it waits for the instance's node at most the
    /// [`register_timeout`](ServiceDiscoveryBuilder::register_timeout),
    /// then returns `Ok` all the same. A registration not done by then is
    /// logged and done as soon as ZooKeeper can be reached (a dynamic
    /// instance's node keeps being tried; a static one is written after
    /// the next (re)connection); until then queries do not list it, nor
    /// does [`registered_path`](Self::registered_path) give a dynamic
    /// instance's path. It still fails for what no retry mends: an
    /// instance whose name or id is not a path segment, one the
    /// serializer refuses, a closed client.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_discovery::Result<()> {
    /// use latchkey_discovery::{ServiceDiscovery, ServiceInstance};
    ///
    /// let me = ServiceInstance::<()>::builder("orders").id("orders-1").port(8080).build();
    /// let discovery = ServiceDiscovery::builder(client)
    ///     .base_path("/services")
    ///     .this_instance(me)
    ///     .build()?;
    /// discovery.start()?; // Ok also while ZooKeeper is down: registered once it is up
    /// if discovery.registered_path("orders-1").is_none() {
    ///     eprintln!("not registered yet; it will be once ZooKeeper can be reached");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn start(&self) -> Result<()> {
        {
            let mut state = self.inner.state.lock();
            match *state {
                State::Latent => *state = State::Started,
                State::Started => {
                    return Err(Error::IllegalState(format!(
                        "the service discovery on {} is started already",
                        self.inner.base_path
                    )))
                }
                State::Closed => return Err(self.inner.closed()),
            }
        }
        let weak: Weak<Inner<T>> = Arc::downgrade(&self.inner);
        let handle = self.inner.client.add_listener(move |state| {
            if matches!(
                state,
                ConnectionState::Connected | ConnectionState::Reconnected
            ) {
                if let Some(inner) = weak.upgrade() {
                    inner.after_connection();
                }
            }
        });
        *self.inner.listener.lock() = Some(handle);
        let this = self.inner.this_instance.lock().clone();
        if let Some(instance) = this {
            self.register(&instance, true)?;
        }
        Ok(())
    }

    /// Registers `instance`, or registers it again with its new contents
    /// if its id is registered already (Curator's `registerService`).
    ///
    /// A dynamic instance waits for its node at most the builder's
    /// [`register_timeout`](ServiceDiscoveryBuilder::register_timeout);
    /// past it, this fails but the node keeps being tried until
    /// [`unregister_service`](Self::unregister_service). A static or
    /// permanent instance is created (or its node overwritten) now.
    ///
    /// A node found at the instance's path that this registration cannot
    /// keep is deleted and created again, as Curator does on `NodeExists`:
    /// for a dynamic instance, any node not of this client's session (say
    /// the node of a worker that was restarted with the same id, whose old
    /// session has not expired yet), for a static or permanent one an
    /// ephemeral node. So the node is this session's (or persistent) when
    /// this returns, with these contents, and does not go when the old
    /// session expires; watchers see it deleted and created. If ZooKeeper
    /// cannot be reached for that now, it is done after the next
    /// (re)connection. A persistent node there already is overwritten in
    /// place, as is the node of an id registered here before.
    pub fn register_service(&self, instance: &ServiceInstance<T>) -> Result<()> {
        self.register(instance, false)
    }

    /// [`register_service`](Self::register_service); `at_start`: as
    /// [`start`](Self::start) registers, not failing for want of ZooKeeper.
    fn register(&self, instance: &ServiceInstance<T>, at_start: bool) -> Result<()> {
        // At start, nothing waits for a connection the client does not
        // have (the listener does the work once it has one).
        let connected = !at_start || self.inner.client.state().is_some_and(|s| s.is_connected());
        let deadline = Instant::now().checked_add(self.inner.register_timeout);
        if *self.inner.state.lock() == State::Closed {
            return Err(self.inner.closed());
        }
        let path = self.inner.path_for(&instance.name, &instance.id)?;
        let bytes = self.inner.serializer.serialize(instance)?;
        let mut services = self.inner.services.lock();
        // Checked again under the map's lock: a `close` since then has
        // taken the map already, and would miss this entry.
        if *self.inner.state.lock() == State::Closed {
            return Err(self.inner.closed());
        }
        // Another type than before: the old node goes first.
        if let Some(old) = services.get(&instance.id) {
            if old.instance.service_type != instance.service_type
                || old.instance.name != instance.name
            {
                let old = services.remove(&instance.id);
                if let Some(old) = old {
                    self.inner.remove_node(&self.inner.client, old)?;
                }
            }
        }
        match services.get_mut(&instance.id) {
            Some(entry) => {
                entry.instance = instance.clone();
                self.inner.write(entry, &bytes)
            }
            None => {
                let mut pending = false;
                let node = match instance.service_type {
                    ServiceType::Dynamic | ServiceType::DynamicSequential => {
                        let mode = match instance.service_type {
                            ServiceType::Dynamic => CreateMode::Ephemeral,
                            _ => CreateMode::EphemeralSequential,
                        };
                        if mode == CreateMode::Ephemeral && connected {
                            // Not now (ZooKeeper unreachable): after the
                            // next (re)connection.
                            if let Err(e) = self.inner.take_over(&path, deadline) {
                                log::debug!("service instance {path}: {e}; taken over later");
                            }
                        }
                        let node =
                            PersistentNode::new(&self.inner.client, mode, false, &path, &bytes)?;
                        node.start()?;
                        Some(node)
                    }
                    ServiceType::Static | ServiceType::Permanent => {
                        // At start, by the register timeout; else as
                        // the client's other calls.
                        let written = match (connected, at_start) {
                            (true, true) => {
                                self.inner.write_persistent_until(&path, &bytes, deadline)
                            }
                            (true, false) => self.inner.write_persistent(&path, &bytes),
                            (false, _) => {
                                Err(Error::IllegalState("not connected to ZooKeeper".into()))
                            }
                        };
                        match written {
                            Ok(()) => {}
                            Err(e) if at_start && !self.inner.client.is_closed() => {
                                log::warn!(
                                    "service instance {path} not registered at start: {e}; \
                                     it is written after the next (re)connection"
                                );
                                pending = true;
                            }
                            Err(e) => return Err(e),
                        }
                        None
                    }
                };
                let dynamic = node.is_some();
                services.insert(
                    instance.id.clone(),
                    Entry {
                        instance: instance.clone(),
                        bytes,
                        node,
                        watch: None,
                        pending,
                    },
                );
                drop(services);
                if !connected && self.inner.client.state().is_some_and(|s| s.is_connected()) {
                    // Connected since: the listener may have run before the
                    // entry was there.
                    self.inner.after_connection();
                }
                if dynamic {
                    // The wait happens without the map's lock.
                    match self.wait_created(&instance.id, &path, deadline, at_start) {
                        Err(e) if at_start && !self.inner.client.is_closed() => {
                            log::warn!("service instance {path} not registered at start: {e}")
                        }
                        other => other?,
                    }
                }
                if self.inner.watch_instances {
                    Inner::watch(&self.inner, &instance.id)?;
                }
                Ok(())
            }
        }
    }

    /// Waits until the dynamic instance `id`'s node is created, until
    /// `deadline` (`None`: as long as it takes), or with `at_start` until
    /// the client is not connected.
    fn wait_created(
        &self,
        id: &str,
        path: &str,
        deadline: Option<Instant>,
        at_start: bool,
    ) -> Result<()> {
        loop {
            let created = {
                let services = self.inner.services.lock();
                match services.get(id).and_then(|e| e.node.as_ref()) {
                    // Unregistered meanwhile.
                    None => return Ok(()),
                    Some(node) => node.actual_path().is_some(),
                }
            };
            if created {
                return Ok(());
            }
            if self.inner.client.is_closed() {
                return Err(Error::ZooKeeper(latchkey_framework::Error::Closed));
            }
            if at_start && !self.inner.client.state().is_some_and(|s| s.is_connected()) {
                return Err(Error::IllegalState(format!(
                    "the instance {path} is not registered yet: not connected to ZooKeeper; \
                     it is being tried"
                )));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::IllegalState(format!(
                    "the instance {path} was not registered within {:?} (ZooKeeper unreachable?); \
                     it is still being tried",
                    self.inner.register_timeout
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Writes an instance registered here with new contents (Curator's
    /// `updateService`); [`Error::NotRegistered`] if its id is not.
    pub fn update_service(&self, instance: &ServiceInstance<T>) -> Result<()> {
        self.updating(instance, |inner, entry, bytes| {
            entry.instance = instance.clone();
            inner.write(entry, bytes)
        })
    }

    /// Runs `write` with the registration of `instance`'s id and the
    /// instance's bytes, once the update is allowed: the discovery open,
    /// the id registered here, its name and type unchanged.
    fn updating(
        &self,
        instance: &ServiceInstance<T>,
        write: impl FnOnce(&Inner<T>, &mut Entry<T>, &[u8]) -> Result<()>,
    ) -> Result<()> {
        if *self.inner.state.lock() == State::Closed {
            return Err(self.inner.closed());
        }
        let mut services = self.inner.services.lock();
        let Some(entry) = services.get_mut(&instance.id) else {
            return Err(Error::NotRegistered {
                name: instance.name.clone(),
                id: instance.id.clone(),
            });
        };
        if entry.instance.name != instance.name
            || entry.instance.service_type != instance.service_type
        {
            return Err(Error::InvalidArgument(format!(
                "an update of {}/{} cannot change its name or service type; register it again",
                entry.instance.name, instance.id
            )));
        }
        let bytes = self.inner.serializer.serialize(instance)?;
        write(&self.inner, entry, &bytes)
    }

    /// [`update_service`](Self::update_service) fenced by `fence`, a hold
    /// such as a [`Leadership`](latchkey_recipes::Leadership) or a
    /// [`MutexGuard`](latchkey_recipes::MutexGuard): the instance's node
    /// is written now, in one transaction with a check of the hold's node,
    /// so a write delayed by an outage cannot land after the hold ended
    /// (see [`latchkey_recipes::Fence`]). It fails, keeping the instance
    /// as it was, with `FenceGone` (the framework's
    /// [`Error::FenceGone`](latchkey_framework::Error::FenceGone)) once
    /// the hold has ended, and with `NoNode` while the instance's node is
    /// missing (being registered again after a lost session: try again).
    /// After an error that it may or may not have run (`ConnectionLoss`),
    /// the node may hold the new contents while the registration keeps the
    /// old: call it again until it answers, or the hold ends.
    ///
    /// ```no_run
    /// # fn f(discovery: &latchkey_discovery::ServiceDiscovery<()>,
    /// #      me: &latchkey_discovery::ServiceInstance<()>,
    /// #      leadership: &latchkey_recipes::Leadership) -> latchkey_discovery::Result<()> {
    /// discovery.update_service_fenced(me, leadership)?; // only while leading
    /// # Ok(()) }
    /// ```
    pub fn update_service_fenced(
        &self,
        instance: &ServiceInstance<T>,
        fence: &dyn Fence,
    ) -> Result<()> {
        self.updating(instance, |inner, entry, bytes| {
            match &entry.node {
                Some(node) => node.fenced(fence).set_data(bytes)?,
                None => {
                    let client = &inner.client;
                    let path = inner.path_for(&instance.name, &instance.id)?;
                    let fence = fence.path_in(client)?;
                    client.set_data_fenced(&fence, &path, bytes, None)?;
                }
            }
            entry.instance = instance.clone();
            entry.bytes = bytes.to_vec();
            entry.pending = false;
            Ok(())
        })
    }

    /// Unregisters the instance with `instance`'s id and deletes its node
    /// (guaranteed: retried in the background if ZooKeeper cannot be
    /// reached). Nothing happens for an id not registered here.
    pub fn unregister_service(&self, instance: &ServiceInstance<T>) -> Result<()> {
        let entry = self.inner.services.lock().remove(&instance.id);
        match entry {
            Some(entry) => self.inner.remove_node(&self.inner.client, entry),
            None => Ok(()),
        }
    }

    /// The names of every service under the base path (Curator's
    /// `queryForNames`), sorted; empty if the base path does not exist.
    pub fn query_for_names(&self) -> Result<Vec<String>> {
        let mut names = match self.inner.client.get_children(&self.inner.base_path) {
            Ok(n) => n,
            Err(e) if e.is(ErrorCode::NoNode) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        names.sort();
        Ok(names)
    }

    /// Every instance of the service `name` (Curator's
    /// `queryForInstances`), sorted by node name. A node that is not a
    /// readable instance (bad JSON, no data, a payload of another type) is
    /// skipped with a warning in the log, never hiding the others.
    pub fn query_for_instances(&self, name: &str) -> Result<Vec<ServiceInstance<T>>> {
        self.inner.query_for_instances(name)
    }

    /// The instance `id` of the service `name` (Curator's
    /// `queryForInstance`), `None` if there is no such node; an error if
    /// its node is not a readable instance.
    pub fn query_for_instance(&self, name: &str, id: &str) -> Result<Option<ServiceInstance<T>>> {
        let path = self.inner.path_for(name, id)?;
        match self.inner.client.get_data(&path) {
            Ok((data, _)) => self.inner.decode(&path, &data).map(Some),
            Err(e) if e.is(ErrorCode::NoNode) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The instance registered here with `id`, as last registered or
    /// updated (Curator's `getRegisteredService`).
    pub fn registered_service(&self, id: &str) -> Option<ServiceInstance<T>> {
        self.inner
            .services
            .lock()
            .get(id)
            .map(|e| e.instance.clone())
    }

    /// The instances registered here.
    pub fn registered_services(&self) -> Vec<ServiceInstance<T>> {
        self.inner
            .services
            .lock()
            .values()
            .map(|e| e.instance.clone())
            .collect()
    }

    /// The node path of the instance registered here with `id` (with its
    /// sequence number for a `DynamicSequential` one, once created).
    pub fn registered_path(&self, id: &str) -> Option<String> {
        let services = self.inner.services.lock();
        let entry = services.get(id)?;
        match &entry.node {
            Some(node) => node.actual_path(),
            None => self
                .inner
                .path_for(&entry.instance.name, &entry.instance.id)
                .ok(),
        }
    }

    /// A builder of a [`ServiceCache`](crate::ServiceCache) of one service.
    pub fn service_cache_builder(&self) -> ServiceCacheBuilder<T> {
        ServiceCacheBuilder::new(Arc::clone(&self.inner))
    }

    /// A builder of a [`ServiceProvider`](crate::ServiceProvider) of one
    /// service (round robin by default).
    pub fn service_provider_builder(&self) -> ServiceProviderBuilder<T> {
        ServiceProviderBuilder::new(Arc::clone(&self.inner))
    }

    /// The base path.
    pub fn base_path(&self) -> &str {
        &self.inner.base_path
    }

    /// Unregisters every instance registered here (static and permanent
    /// ones too, as Curator does) and stops. Idempotent; dropping the
    /// discovery does the same.
    pub fn close(&self) {
        self.inner.close();
    }
}

impl<T> Drop for ServiceDiscovery<T> {
    fn drop(&mut self) {
        self.inner.close();
    }
}

impl<T> std::fmt::Debug for ServiceDiscovery<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceDiscovery")
            .field("base_path", &self.inner.base_path)
            .field("registered", &self.inner.services.lock().len())
            .finish()
    }
}

impl<T> Inner<T> {
    /// [`ServiceDiscovery::close`] (without the `Payload` bound, for drop
    /// too): every instance unregistered, waiting for ZooKeeper at most
    /// [`CLOSE_WAIT`] in all.
    fn close(&self) {
        {
            let mut state = self.state.lock();
            if *state == State::Closed {
                return;
            }
            *state = State::Closed;
        }
        self.listener.lock().take();
        let deadline = Instant::now() + CLOSE_WAIT;
        let client = self.client.with_deadline(Some(
            self.client.deadline().map_or(deadline, |d| d.min(deadline)),
        ));
        let entries = std::mem::take(&mut *self.services.lock());
        for (_, entry) in entries {
            let what = format!("{}/{}", entry.instance.name, entry.instance.id);
            match self.remove_node(&client, entry) {
                Ok(()) => {}
                // Out of time, or no connection: the guaranteed delete
                // goes on in the background.
                Err(Error::ZooKeeper(e)) if e.is_retryable() => log::info!(
                    "closing the service discovery: unregistering {what}: {e}; \
                     left to the client's background"
                ),
                Err(e) => log::warn!("closing the service discovery: unregistering {what}: {e}"),
            }
        }
    }

    fn closed(&self) -> Error {
        Error::IllegalState(format!(
            "the service discovery on {} is closed",
            self.base_path
        ))
    }

    /// `<base>/<name>`, refusing names that are not one path segment.
    pub(crate) fn path_for_name(&self, name: &str) -> Result<String> {
        check_segment("service name", name)?;
        Ok(format!("{}/{name}", self.base_path))
    }

    /// `<base>/<name>/<id>`.
    pub(crate) fn path_for(&self, name: &str, id: &str) -> Result<String> {
        check_segment("instance id", id)?;
        Ok(format!("{}/{id}", self.path_for_name(name)?))
    }

    /// Decodes a node's data, naming the node in the error.
    pub(crate) fn decode(&self, path: &str, data: &[u8]) -> Result<ServiceInstance<T>> {
        decode_with(&*self.serializer, path, data)
    }

    pub(crate) fn query_for_instances(&self, name: &str) -> Result<Vec<ServiceInstance<T>>> {
        let parent = self.path_for_name(name)?;
        let mut ids = match self.client.get_children(&parent) {
            Ok(ids) => ids,
            Err(e) if e.is(ErrorCode::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        ids.sort();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let path = format!("{parent}/{id}");
            match self.client.get_data(&path) {
                Ok((data, _)) => match self.decode(&path, &data) {
                    Ok(instance) => out.push(instance),
                    Err(e) => log::warn!("skipping a service instance: {e}"),
                },
                // Gone since the listing.
                Err(e) if e.is(ErrorCode::NoNode) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// Writes new bytes of a registered instance.
    fn write(&self, entry: &mut Entry<T>, bytes: &[u8]) -> Result<()> {
        let path = self.path_for(&entry.instance.name, &entry.instance.id)?;
        entry.bytes = bytes.to_vec();
        match &entry.node {
            Some(node) => {
                // Kept for re-creates; written now as well, so a query
                // right after sees it.
                node.set_data(bytes)?;
                if let Some(actual) = node.actual_path() {
                    match self.client.set_data(&actual, bytes, None) {
                        Err(e) if e.is(ErrorCode::NoNode) => {}
                        other => {
                            other?;
                        }
                    }
                }
                Ok(())
            }
            None => {
                self.write_persistent(&path, bytes)?;
                entry.pending = false;
                Ok(())
            }
        }
    }

    /// Creates a persistent instance node, or overwrites a persistent node
    /// there. An ephemeral node there (a dead session's, say) is deleted
    /// and the node created again, as Curator's `internalRegisterService`
    /// does on `NodeExists`: else it would go with that session.
    fn write_persistent(&self, path: &str, bytes: &[u8]) -> Result<()> {
        self.write_persistent_until(path, bytes, None)
    }

    /// [`write_persistent`](Self::write_persistent) by `deadline` (`None`:
    /// the client's own).
    fn write_persistent_until(
        &self,
        path: &str,
        bytes: &[u8],
        deadline: Option<Instant>,
    ) -> Result<()> {
        let client = match deadline {
            Some(_) => self.client.with_deadline(deadline),
            None => self.client.clone(),
        };
        self.ensure_persistent(&client, path, bytes, true)
            .map(|_| ())
    }

    /// Creates a persistent instance node; one there already is
    /// overwritten if `overwrite`, and if ephemeral deleted and created
    /// again. True if this created it.
    fn ensure_persistent(
        &self,
        client: &Client,
        path: &str,
        bytes: &[u8],
        overwrite: bool,
    ) -> Result<bool> {
        // Each turn but the last ends with the node gone (deleted
        // meanwhile, or by us); more turns than that: others are writing
        // it too, and theirs stays.
        for _ in 0..MAX_TRIES {
            let created = client
                .create()
                .creating_parent_containers_if_needed()
                .mode(CreateMode::Persistent)
                .for_path(path, bytes);
            match created {
                Ok(_) => return Ok(true),
                Err(e) if e.is(ErrorCode::NodeExists) => {}
                Err(e) => return Err(e.into()),
            }
            let Some(stat) = client.exists(path)? else {
                continue;
            };
            if stat.ephemeral_owner != 0 {
                // Changed meanwhile or not: the create tells.
                self.delete_at(client, path, stat.ephemeral_owner, stat.version)?;
                continue;
            }
            if !overwrite {
                return Ok(false);
            }
            match client.set_data(path, bytes, None) {
                Err(e) if e.is(ErrorCode::NoNode) => continue,
                other => return other.map(|_| false).map_err(Error::from),
            }
        }
        Ok(false)
    }

    /// Deletes the node at `path` in the way of a registration if it is
    /// still at `version`: an ephemeral node of the session `owner` (not
    /// ours), or a persistent one (`owner` 0). False if it changed
    /// meanwhile; gone is no error.
    fn delete_at(&self, client: &Client, path: &str, owner: i64, version: i32) -> Result<bool> {
        match client.delete().with_version(version).for_path(path) {
            Ok(()) => {
                log::info!(
                    "service instance {path}: deleted the node of {} to register it again",
                    match owner {
                        0 => "no session (persistent)".to_owned(),
                        o => format!("the session {o:#x}"),
                    }
                );
                Ok(true)
            }
            Err(e) if e.is(ErrorCode::NoNode) => Ok(true),
            Err(e) if e.is(ErrorCode::BadVersion) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Before and after a dynamic instance's node is kept at `path`: a node
    /// there that is not of our session (a dead session's, not expired
    /// yet; a persistent one) is deleted, so that our session creates it
    /// again at once, as Curator's `internalRegisterService` does on
    /// `NodeExists`. The node keeper would otherwise keep the node it
    /// finds, which goes when that session expires and only then comes
    /// back as ours.
    fn take_over(&self, path: &str, deadline: Option<Instant>) -> Result<()> {
        let client = self.client.with_deadline(deadline);
        for _ in 0..MAX_TRIES {
            let Some(stat) = client.exists(path)? else {
                return Ok(());
            };
            if stat.ephemeral_owner != 0 && stat.ephemeral_owner == client.session_id() {
                return Ok(());
            }
            // Else written meanwhile (our keeper's data, say): look again.
            if self.delete_at(&client, path, stat.ephemeral_owner, stat.version)? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Deletes an unregistered instance's node (a guaranteed delete through
    /// `client`, which may bound it).
    fn remove_node(&self, client: &Client, entry: Entry<T>) -> Result<()> {
        let path = match &entry.node {
            Some(node) => node.actual_path(),
            None => Some(self.path_for(&entry.instance.name, &entry.instance.id)?),
        };
        if let Some(watch) = entry.watch {
            // Its thread ends as its channel disconnects.
            watch.close();
        }
        if let Some(node) = entry.node {
            // Stops the keeping; its delete runs in the background.
            node.close();
        }
        if let Some(path) = path {
            // Also now, so that a query right after no longer lists it.
            match client.delete().guaranteed().for_path(&path) {
                Err(e) if e.is(ErrorCode::NoNode) => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// Starts watching the node of the instance registered as `id`.
    fn watch(inner: &Arc<Inner<T>>, id: &str) -> Result<()>
    where
        T: Payload,
    {
        let path = {
            let services = inner.services.lock();
            let Some(entry) = services.get(id) else {
                return Ok(());
            };
            match &entry.node {
                Some(node) => node.actual_path(),
                None => Some(inner.path_for(&entry.instance.name, &entry.instance.id)?),
            }
        };
        let Some(path) = path else {
            // A sequential node not created yet: its name is not known.
            log::debug!("service instance {id}: not created yet, not watched");
            return Ok(());
        };
        let cache = CuratorCache::builder(&inner.client, &path)
            .single_node()
            .build()?;
        let events = cache.listen();
        let weak = Arc::downgrade(inner);
        let owned_id = id.to_owned();
        std::thread::Builder::new()
            .name("latchkey-discovery-watch".into())
            .spawn(move || {
                let mut initialized = false;
                for event in events {
                    match event {
                        CacheEvent::Initialized => initialized = true,
                        CacheEvent::Created(node) | CacheEvent::Changed { new: node, .. }
                            if initialized =>
                        {
                            let Some(inner) = weak.upgrade() else { break };
                            inner.reload(&owned_id, &node.path, &node.data);
                        }
                        CacheEvent::Deleted(node) => {
                            log::debug!("service instance {}: its node was deleted", node.path)
                        }
                        _ => {}
                    }
                }
            })
            .map_err(|e| Error::IllegalState(format!("cannot start a thread: {e}")))?;
        cache.start()?;
        let mut services = inner.services.lock();
        match services.get_mut(id) {
            Some(entry) => {
                if let Some(old) = entry.watch.replace(cache) {
                    old.close();
                }
            }
            // Unregistered meanwhile.
            None => cache.close(),
        }
        Ok(())
    }

    /// Another process wrote the node of the instance registered as `id`:
    /// the registration takes its contents.
    fn reload(&self, id: &str, path: &str, data: &[u8])
    where
        T: Payload,
    {
        let mut services = self.services.lock();
        let Some(entry) = services.get_mut(id) else {
            return;
        };
        if entry.bytes == data {
            // Our own write.
            return;
        }
        match self.decode(path, data) {
            Ok(instance) if instance.id == id && instance.name == entry.instance.name => {
                entry.instance = instance;
                entry.bytes = data.to_vec();
                if let Some(node) = &entry.node {
                    // Kept for re-creates.
                    let _ = node.set_data(data);
                }
            }
            Ok(other) => log::warn!(
                "service instance {path}: rewritten as {}/{}, not taken",
                other.name,
                other.id
            ),
            Err(e) => log::warn!("service instance rewritten, not taken: {e}"),
        }
    }

    /// After a (re)connection: static instances whose nodes went missing
    /// (or are ephemeral nodes of another session) are written again, and
    /// the nodes of dynamic ones that another session holds are taken
    /// over (Curator re-registers every instance then; dynamic ones are
    /// kept by their persistent nodes here).
    fn after_connection(&self) {
        let deadline = Instant::now() + RECONNECT_WORK;
        let client = self.client.with_deadline(Some(deadline));
        let mut dynamic = Vec::new();
        {
            let mut services = self.services.lock();
            for entry in services.values_mut() {
                let Ok(path) = self.path_for(&entry.instance.name, &entry.instance.id) else {
                    continue;
                };
                if entry.node.is_some() {
                    if entry.instance.service_type == ServiceType::Dynamic {
                        dynamic.push(path);
                    }
                    continue;
                }
                let Ok(bytes) = self.serializer.serialize(&entry.instance) else {
                    continue;
                };
                // One `start` could not write is written over what is there.
                match self.ensure_persistent(&client, &path, &bytes, entry.pending) {
                    Ok(created) => {
                        if created || entry.pending {
                            log::info!("service instance {path} written after a (re)connection");
                        }
                        entry.pending = false;
                    }
                    Err(e) => log::warn!("writing the service instance {path} again: {e}"),
                }
            }
        }
        // Without the map's lock: the keepers may need it meanwhile.
        for path in dynamic {
            if let Err(e) = self.take_over(&path, Some(deadline)) {
                log::warn!("service instance {path}: taking over its node: {e}");
            }
        }
    }
}

/// Decodes `data`, naming `path` in the error; a panic in the payload's
/// `Deserialize` is a bad instance too.
pub(crate) fn decode_with<T>(
    serializer: &dyn InstanceSerializer<T>,
    path: &str,
    data: &[u8],
) -> Result<ServiceInstance<T>> {
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        serializer.deserialize(data)
    }));
    match decoded {
        Ok(Ok(instance)) => Ok(instance),
        Ok(Err(Error::BadInstance { reason, .. })) => Err(Error::BadInstance {
            path: path.to_owned(),
            reason,
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::BadInstance {
            path: path.to_owned(),
            reason: "the deserializer panicked".into(),
        }),
    }
}

/// One path segment: not empty, no `/`, not `.` or `..`, a valid path.
fn check_segment(what: &str, s: &str) -> Result<()> {
    let shown = || s.chars().take(200).collect::<String>();
    if s.is_empty() || s.contains('/') || s == "." || s == ".." {
        return Err(Error::InvalidArgument(format!(
            "{what} {:?} must be one non-empty path segment",
            shown()
        )));
    }
    paths::validate_path(&format!("/{s}"))
        .map_err(|e| Error::InvalidArgument(format!("{what} {:?}: {}", shown(), e.kind())))
}

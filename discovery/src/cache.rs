//! Curator's `ServiceCache`: the instances of one service, kept current by
//! a recipes [`CuratorCache`] of `<base path>/<name>`, with events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use latchkey_recipes::{CacheEvent, ChildData, CuratorCache};
use parking_lot::{Condvar, Mutex};

use crate::discovery::{decode_with, Inner as DiscoveryInner};
use crate::error::{Error, Result};
use crate::instance::ServiceInstance;
use crate::json::InstanceSerializer;
use crate::Payload;

/// How long [`ServiceCache::start`] waits for the first read to be
/// sorted into instances once the underlying cache has it.
const SORT_FIRST_READ: Duration = Duration::from_secs(30);

/// A change a [`ServiceCache`] saw.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ServiceCacheEvent<T> {
    /// An instance appeared (also each instance there when the cache
    /// started, for a channel taken before).
    Added(ServiceInstance<T>),
    /// An instance's node was written with new contents.
    Updated(ServiceInstance<T>),
    /// An instance went (as last seen): its node was deleted, or now
    /// holds something that is not an instance.
    Removed(ServiceInstance<T>),
    /// The first read is done (after its `Added` events); only a channel
    /// taken before [`ServiceCache::start`] returned gets it.
    Initialized,
}

/// Builds a [`ServiceCache`] (Curator's `ServiceCacheBuilder`), from
/// [`ServiceDiscovery::service_cache_builder`](crate::ServiceDiscovery::service_cache_builder).
#[must_use = "a builder does nothing until `build`"]
pub struct ServiceCacheBuilder<T> {
    discovery: Arc<DiscoveryInner<T>>,
    name: Option<String>,
}

impl<T: Payload> ServiceCacheBuilder<T> {
    pub(crate) fn new(discovery: Arc<DiscoveryInner<T>>) -> Self {
        ServiceCacheBuilder {
            discovery,
            name: None,
        }
    }

    /// Required: the service to cache.
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// The cache, not started.
    pub fn build(self) -> Result<ServiceCache<T>> {
        let name = self
            .name
            .ok_or_else(|| Error::InvalidArgument("a service cache needs a service name".into()))?;
        let path = self.discovery.path_for_name(&name)?;
        let cache = CuratorCache::new(&self.discovery.client, &path)?;
        Ok(ServiceCache {
            cache,
            shared: Arc::new(Shared {
                path,
                serializer: Arc::clone(&self.discovery.serializer),
                state: Mutex::new(CacheState {
                    instances: BTreeMap::new(),
                    initialized: false,
                    ended: false,
                }),
                changed: Condvar::new(),
                listeners: Mutex::new(Vec::new()),
            }),
            thread: Mutex::new(None),
        })
    }
}

/// The instances of one service (Curator's `ServiceCache`): a local copy
/// kept current by watches, read without waiting on ZooKeeper.
///
/// Instances are keyed by node name. A node that is not a readable
/// instance is left out with a warning in the log. After a lost session
/// or a reconnection the underlying [`CuratorCache`] reads the service
/// again, so an instance gone meanwhile is dropped then.
///
/// ```no_run
/// # fn f(discovery: &latchkey_discovery::ServiceDiscovery<serde_json::Value>) -> latchkey_discovery::Result<()> {
/// use std::time::Duration;
/// use latchkey_discovery::ServiceCacheEvent;
///
/// let cache = discovery.service_cache_builder().name("billing").build()?;
/// let events = cache.listen();
/// cache.start()?; // the instances there now are in the cache on return
/// println!("{} instances", cache.instances().len());
/// while let Ok(event) = events.recv_timeout(Duration::from_secs(60)) {
///     if let ServiceCacheEvent::Removed(gone) = event {
///         println!("{} went", gone.id);
///     }
/// }
/// # Ok(()) }
/// ```
///
/// The cache only reads. [`close`](Self::close) (or drop) closes its
/// [`CuratorCache`] (whose watch is removed) and waits for the thread that
/// sorts its events, which ends with it.
pub struct ServiceCache<T> {
    cache: CuratorCache,
    shared: Arc<Shared<T>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Shared<T> {
    path: String,
    serializer: Arc<dyn InstanceSerializer<T>>,
    state: Mutex<CacheState<T>>,
    changed: Condvar,
    listeners: Mutex<Vec<Sender<ServiceCacheEvent<T>>>>,
}

struct CacheState<T> {
    /// By node name.
    instances: BTreeMap<String, ServiceInstance<T>>,
    initialized: bool,
    /// The sorting thread has ended.
    ended: bool,
}

impl<T: Payload> ServiceCache<T> {
    /// Reads the service's instances (waiting for a connection as the
    /// client's retry policy allows) and keeps them current from then on.
    /// Starting twice is an error.
    pub fn start(&self) -> Result<()> {
        let mut thread = self.thread.lock();
        if thread.is_some() || self.shared.state.lock().ended {
            return Err(Error::IllegalState(format!(
                "the service cache of {} is started already, or closed",
                self.shared.path
            )));
        }
        let events = self.cache.listen();
        let shared = Arc::clone(&self.shared);
        let handle = std::thread::Builder::new()
            .name("latchkey-service-cache".into())
            .spawn(move || shared.sort(&events))
            .map_err(|e| Error::IllegalState(format!("cannot start a thread: {e}")))?;
        *thread = Some(handle);
        drop(thread);
        if let Err(e) = self.cache.start() {
            // Its channel disconnects: the sorting thread ends.
            self.close();
            return Err(e.into());
        }
        // The first read is in; wait for it to be sorted into instances.
        let deadline = Instant::now() + SORT_FIRST_READ;
        let mut state = self.shared.state.lock();
        while !state.initialized && !state.ended {
            if self
                .shared
                .changed
                .wait_until(&mut state, deadline)
                .timed_out()
            {
                return Err(Error::IllegalState(format!(
                    "the service cache of {} did not sort its first read within {SORT_FIRST_READ:?}",
                    self.shared.path
                )));
            }
        }
        Ok(())
    }

    /// The instances as last seen, sorted by node name (Curator's
    /// `getInstances`).
    pub fn instances(&self) -> Vec<ServiceInstance<T>> {
        self.shared
            .state
            .lock()
            .instances
            .values()
            .cloned()
            .collect()
    }

    /// A channel that receives every change from now on, in order. It
    /// disconnects when the cache closes.
    pub fn listen(&self) -> Receiver<ServiceCacheEvent<T>> {
        let (tx, rx) = unbounded();
        let state = self.shared.state.lock();
        if !state.ended {
            self.shared.listeners.lock().push(tx);
        }
        drop(state);
        rx
    }

    /// Stops keeping the copy (it stays as last seen); its channels
    /// disconnect. Idempotent; dropping does the same.
    pub fn close(&self) {
        self.cache.close();
        if let Some(thread) = self.thread.lock().take() {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
        self.shared.end();
    }
}

impl<T> Drop for ServiceCache<T> {
    fn drop(&mut self) {
        self.cache.close();
        if let Some(thread) = self.thread.lock().take() {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
        self.shared.end();
    }
}

impl<T> std::fmt::Debug for ServiceCache<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceCache")
            .field("path", &self.shared.path)
            .field("instances", &self.shared.state.lock().instances.len())
            .finish()
    }
}

impl<T> Shared<T> {
    fn end(&self) {
        let mut state = self.state.lock();
        state.ended = true;
        self.listeners.lock().clear();
        self.changed.notify_all();
    }
}

impl<T: Payload> Shared<T> {
    /// Turns the node cache's events into instances, until it closes.
    fn sort(&self, events: &Receiver<CacheEvent>) {
        for event in events {
            match event {
                CacheEvent::Created(node) => self.put(&node, None),
                CacheEvent::Changed { old, new } => self.put(&new, Some(&old)),
                CacheEvent::Deleted(node) => {
                    if let Some(id) = self.child_name(&node.path) {
                        let gone = self.state.lock().instances.remove(id);
                        if let Some(gone) = gone {
                            self.tell(ServiceCacheEvent::Removed(gone));
                        }
                    }
                }
                CacheEvent::Initialized => {
                    // Told under the state lock that `listen` takes: a
                    // channel taken once `start` has returned never gets it.
                    let mut state = self.state.lock();
                    state.initialized = true;
                    self.tell(ServiceCacheEvent::Initialized);
                    drop(state);
                    self.changed.notify_all();
                }
                // A kind of event added to `CacheEvent` later: nothing to
                // sort until this cache learns what it means.
                _ => {}
            }
        }
        self.end();
    }

    /// The node's name if it is an instance node (a child of the
    /// service's node).
    fn child_name<'a>(&self, path: &'a str) -> Option<&'a str> {
        let rest = path.strip_prefix(self.path.as_str())?.strip_prefix('/')?;
        (!rest.is_empty() && !rest.contains('/')).then_some(rest)
    }

    fn put(&self, node: &ChildData, old: Option<&ChildData>) {
        let Some(id) = self.child_name(&node.path) else {
            return;
        };
        if old.is_some_and(|o| o.data == node.data) {
            // Written with the same bytes: nothing changed.
            return;
        }
        match decode_with(&*self.serializer, &node.path, &node.data) {
            Ok(instance) => {
                let previous = self
                    .state
                    .lock()
                    .instances
                    .insert(id.to_owned(), instance.clone());
                self.changed.notify_all();
                self.tell(match previous {
                    None => ServiceCacheEvent::Added(instance),
                    Some(_) => ServiceCacheEvent::Updated(instance),
                });
            }
            Err(e) => {
                log::warn!("service cache: skipping an instance: {e}");
                let gone = self.state.lock().instances.remove(id);
                if let Some(gone) = gone {
                    self.tell(ServiceCacheEvent::Removed(gone));
                }
            }
        }
    }

    fn tell(&self, event: ServiceCacheEvent<T>) {
        self.listeners
            .lock()
            .retain(|tx| tx.send(event.clone()).is_ok());
    }
}

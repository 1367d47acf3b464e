//! Curator's `ServiceProvider`, `DownInstancePolicy` and
//! `DownInstanceManager`: one instance at a time from a [`ServiceCache`],
//! leaving out disabled instances and those that errored too often.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::cache::ServiceCache;
use crate::discovery::Inner as DiscoveryInner;
use crate::error::{Error, Result};
use crate::instance::ServiceInstance;
use crate::strategies::{ProviderStrategy, RoundRobinStrategy};
use crate::Payload;

/// When an instance counts as down (Curator's `DownInstancePolicy`): after
/// `error_threshold` errors noted within `timeout` of the first, until
/// `timeout` after the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DownInstancePolicy {
    /// How long an instance's errors are remembered.
    pub timeout: Duration,
    /// How many errors make it down.
    pub error_threshold: u32,
}

impl Default for DownInstancePolicy {
    /// Curator's: 30 s, 2 errors.
    fn default() -> Self {
        DownInstancePolicy {
            timeout: Duration::from_secs(30),
            error_threshold: 2,
        }
    }
}

impl DownInstancePolicy {
    /// A policy.
    pub fn new(timeout: Duration, error_threshold: u32) -> Self {
        DownInstancePolicy {
            timeout,
            error_threshold,
        }
    }
}

/// Counts errors per instance (Curator's `DownInstanceManager`), by
/// service name and id.
#[derive(Debug)]
pub struct DownInstanceManager {
    policy: DownInstancePolicy,
    state: Mutex<DownState>,
}

#[derive(Debug)]
struct DownState {
    statuses: HashMap<(String, String), Status>,
    last_purge: Instant,
}

#[derive(Debug)]
struct Status {
    since: Instant,
    errors: u32,
}

impl DownInstanceManager {
    /// A manager with `policy`.
    pub fn new(policy: DownInstancePolicy) -> Self {
        DownInstanceManager {
            policy,
            state: Mutex::new(DownState {
                statuses: HashMap::new(),
                last_purge: Instant::now(),
            }),
        }
    }

    /// Notes an error of `instance`.
    pub fn add<T>(&self, instance: &ServiceInstance<T>) {
        let mut state = self.state.lock();
        self.purge(&mut state);
        let status = state
            .statuses
            .entry((instance.name.clone(), instance.id.clone()))
            .or_insert_with(|| Status {
                since: Instant::now(),
                errors: 0,
            });
        status.errors = status.errors.saturating_add(1);
    }

    /// Whether `instance` is up: fewer errors than the threshold noted
    /// within the timeout (Curator's `apply`).
    pub fn is_up<T>(&self, instance: &ServiceInstance<T>) -> bool {
        let mut state = self.state.lock();
        self.purge(&mut state);
        state
            .statuses
            .get(&(instance.name.clone(), instance.id.clone()))
            .is_none_or(|s| s.errors < self.policy.error_threshold)
    }

    /// Forgets errors older than the timeout, at most every half timeout,
    /// as Curator does.
    fn purge(&self, state: &mut DownState) {
        let now = Instant::now();
        if now.duration_since(state.last_purge) < self.policy.timeout / 2 {
            return;
        }
        state.last_purge = now;
        let timeout = self.policy.timeout;
        state
            .statuses
            .retain(|_, s| now.duration_since(s.since) < timeout);
    }
}

/// An extra test an instance must pass to be handed out (Curator's
/// `InstanceFilter`).
pub type InstanceFilter<T> = Arc<dyn Fn(&ServiceInstance<T>) -> bool + Send + Sync>;

/// Builds a [`ServiceProvider`] (Curator's `ServiceProviderBuilder`), from
/// [`ServiceDiscovery::service_provider_builder`](crate::ServiceDiscovery::service_provider_builder).
#[must_use = "a builder does nothing until `build`"]
pub struct ServiceProviderBuilder<T> {
    discovery: Arc<DiscoveryInner<T>>,
    name: Option<String>,
    strategy: Box<dyn ProviderStrategy<T>>,
    policy: DownInstancePolicy,
    filters: Vec<InstanceFilter<T>>,
}

impl<T: Payload> ServiceProviderBuilder<T> {
    pub(crate) fn new(discovery: Arc<DiscoveryInner<T>>) -> Self {
        ServiceProviderBuilder {
            discovery,
            name: None,
            strategy: Box::new(RoundRobinStrategy::new()),
            policy: DownInstancePolicy::default(),
            filters: Vec::new(),
        }
    }

    /// Required: the service to provide.
    pub fn service_name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// The strategy (default: [`RoundRobinStrategy`]).
    pub fn provider_strategy(mut self, strategy: impl ProviderStrategy<T> + 'static) -> Self {
        self.strategy = Box::new(strategy);
        self
    }

    /// When an instance counts as down (default: 2 errors in 30 s).
    pub fn down_instance_policy(mut self, policy: DownInstancePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Adds a filter; instances must pass every filter, in the order added.
    pub fn additional_filter(
        mut self,
        filter: impl Fn(&ServiceInstance<T>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.filters.push(Arc::new(filter));
        self
    }

    /// The provider, not started.
    pub fn build(self) -> Result<ServiceProvider<T>> {
        let name = self.name.ok_or_else(|| {
            Error::InvalidArgument("a service provider needs a service name".into())
        })?;
        let cache = crate::cache::ServiceCacheBuilder::new(self.discovery)
            .name(&name)
            .build()?;
        Ok(ServiceProvider {
            cache,
            strategy: self.strategy,
            down: DownInstanceManager::new(self.policy),
            filters: self.filters,
        })
    }
}

/// Hands out instances of one service (Curator's `ServiceProvider`): from
/// a [`ServiceCache`], by a [`ProviderStrategy`], leaving out disabled
/// instances, instances reported down by [`note_error`](Self::note_error)
/// and those the filters refuse.
///
/// ```no_run
/// # fn f(discovery: &latchkey_discovery::ServiceDiscovery<serde_json::Value>) -> latchkey_discovery::Result<()> {
/// use latchkey_discovery::{RandomStrategy, StickyStrategy};
///
/// let provider = discovery
///     .service_provider_builder()
///     .service_name("billing")
///     .provider_strategy(StickyStrategy::new(RandomStrategy::new()))
///     .build()?;
/// provider.start()?;
/// if let Some(instance) = provider.get_instance() {
///     let url = instance.build_uri_spec();
///     // ... call it; on failure:
///     provider.note_error(&instance);
/// }
/// # Ok(()) }
/// ```
///
/// The provider only reads; [`close`](Self::close) (or drop) closes its
/// [`ServiceCache`].
pub struct ServiceProvider<T> {
    cache: ServiceCache<T>,
    strategy: Box<dyn ProviderStrategy<T>>,
    down: DownInstanceManager,
    filters: Vec<InstanceFilter<T>>,
}

impl<T: Payload> ServiceProvider<T> {
    /// Starts its cache: the instances there now are known on return.
    pub fn start(&self) -> Result<()> {
        self.cache.start()
    }

    /// Every instance that may be handed out now (Curator's
    /// `getAllInstances`), sorted by node name.
    pub fn all_instances(&self) -> Vec<ServiceInstance<T>> {
        self.cache
            .instances()
            .into_iter()
            .filter(|i| self.filters.iter().all(|f| f(i)) && self.down.is_up(i) && i.enabled)
            .collect()
    }

    /// One instance, by the strategy; `None` if none is available
    /// (Curator's `getInstance`).
    pub fn get_instance(&self) -> Option<ServiceInstance<T>> {
        let mut instances = self.all_instances();
        let i = self.strategy.choose(&instances)?;
        (i < instances.len()).then(|| instances.swap_remove(i))
    }

    /// Notes that `instance` failed; past the policy's threshold it is not
    /// handed out until the policy's timeout (Curator's `noteError`).
    pub fn note_error(&self, instance: &ServiceInstance<T>) {
        self.down.add(instance);
    }

    /// The cache the provider reads.
    pub fn cache(&self) -> &ServiceCache<T> {
        &self.cache
    }

    /// Closes its cache. Idempotent; dropping does the same.
    pub fn close(&self) {
        self.cache.close();
    }
}

impl<T> std::fmt::Debug for ServiceProvider<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceProvider")
            .field("cache", &self.cache)
            .finish()
    }
}

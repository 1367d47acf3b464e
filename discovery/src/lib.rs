//! Service discovery on ZooKeeper, interoperable with Apache Curator's
//! `curator-x-discovery` (5.4): Rust services register where Java services
//! look, and find what Java services register.
//!
//! Layout and format are Curator's: an instance of the service `name` is
//! the node `<base path>/<name>/<id>`, holding the instance as the JSON of
//! Curator's `JsonInstanceSerializer` (see [`JsonInstanceSerializer`] for
//! the exact form, payload type ids included).
//!
//! | Curator | latchkey-discovery |
//! |---|---|
//! | `ServiceInstance`, `ServiceInstanceBuilder`, `ServiceType` | [`ServiceInstance`], [`ServiceInstanceBuilder`], [`ServiceType`] |
//! | `JsonInstanceSerializer(payloadClass, compatibleSerializationMode)` | [`JsonInstanceSerializer::new`]`.payload_class(..).compatible_serialization(..)` |
//! | `ServiceDiscoveryBuilder.builder(cls).client(c).basePath(p).thisInstance(i).build()` | [`ServiceDiscovery::builder`]`(&client).base_path(p).this_instance(i).build()` |
//! | `registerService`, `updateService`, `unregisterService`, `queryForNames`, `queryForInstances`, `queryForInstance` | the same in snake case |
//! | `serviceCacheBuilder().name(n).build()`, `getInstances()`, `addListener(l)` | [`ServiceDiscovery::service_cache_builder`], [`ServiceCache::instances`], [`ServiceCache::listen`] |
//! | `serviceProviderBuilder().serviceName(n).providerStrategy(s).downInstancePolicy(p).additionalFilter(f)` | [`ServiceDiscovery::service_provider_builder`], the same in snake case |
//! | `getInstance()`, `getAllInstances()`, `noteError(i)` | [`ServiceProvider::get_instance`], [`ServiceProvider::all_instances`], [`ServiceProvider::note_error`] |
//! | `RoundRobinStrategy`, `RandomStrategy`, `StickyStrategy` | the same names |
//! | `UriSpec` | [`UriSpec`] |
//!
//! Dynamic instances are ephemeral nodes kept by the recipes'
//! `PersistentNode`: after a lost session the instance is back within a
//! round trip of the new session, without waiting for a listener.
//!
//! # Where it differs from Curator
//!
//! - Static and permanent instances are written again after a
//!   (re)connection only if their node is missing; Curator deletes and
//!   re-creates every instance then, which caches see as a removal and an
//!   addition.
//! - Unregistering a `DynamicSequential` instance deletes its own node
//!   (Curator deletes the path without the sequence number, leaving the
//!   node to its session).
//! - A node that is not a readable instance is skipped (logged) by
//!   queries and caches; Curator's query fails and its cache throws.
//! - The down-instance manager and the sticky strategy know instances by
//!   service name and id; Curator compares whole instances, so an
//!   instance whose payload changed counts as another one there.
//! - Cache events go to channels ([`ServiceCache::listen`]); connection
//!   states come from the client's own `listen()`, not from the cache's
//!   listeners, and there is no executor option.
//! - [`UriSpec`] is Curator's: `{[}` and `{]}` are literal braces; there
//!   are no optional sections.
//!
//! ```no_run
//! use std::time::Duration;
//! use latchkey_framework::Client;
//! use latchkey_discovery::{ServiceDiscovery, ServiceInstance, UriSpec};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::new("127.0.0.1:2181")?;
//! client.start()?;
//! client.block_until_connected_or_err(Duration::from_secs(10))?;
//!
//! let me = ServiceInstance::<serde_json::Value>::builder("orders")
//!     .port(8080)
//!     .uri_spec(UriSpec::parse("{scheme}://{address}:{port}")?)
//!     .build();
//! let discovery = ServiceDiscovery::builder(&client)
//!     .base_path("/services")
//!     .this_instance(me)
//!     .build()?;
//! discovery.start()?;
//!
//! let billing = discovery.service_provider_builder().service_name("billing").build()?;
//! billing.start()?;
//! if let Some(instance) = billing.get_instance() {
//!     println!("billing at {}", instance.build_uri_spec());
//! }
//! # Ok(()) }
//! ```

mod cache;
mod discovery;
mod error;
mod instance;
mod json;
mod provider;
mod strategies;
mod uri_spec;

pub use cache::{ServiceCache, ServiceCacheBuilder, ServiceCacheEvent};
pub use discovery::{ServiceDiscovery, ServiceDiscoveryBuilder};
pub use error::{Error, Result};
pub use instance::{ServiceInstance, ServiceInstanceBuilder, ServiceType};
pub use json::{InstanceSerializer, JsonInstanceSerializer};
pub use provider::{
    DownInstanceManager, DownInstancePolicy, InstanceFilter, ServiceProvider,
    ServiceProviderBuilder,
};
pub use strategies::{ProviderStrategy, RandomStrategy, RoundRobinStrategy, StickyStrategy};
pub use uri_spec::{
    Part, UriSpec, FIELD_ADDRESS, FIELD_CLOSE_BRACE, FIELD_ID, FIELD_NAME, FIELD_OPEN_BRACE,
    FIELD_PORT, FIELD_REGISTRATION_TIME_UTC, FIELD_SCHEME, FIELD_SERVICE_TYPE, FIELD_SSL_PORT,
};

/// What a payload type must be: any serde type that can be shared
/// between threads (`()` for none, `serde_json::Value` for any).
pub trait Payload:
    serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static
{
}

impl<T> Payload for T where
    T: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static
{
}

/// The crate's README, whose examples are compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

//! Curator's `ServiceInstance`, `ServiceType` and `ServiceInstanceBuilder`:
//! one registered instance of a service, as stored in its node.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::uri_spec::UriSpec;

/// How an instance's node is kept (Curator's `ServiceType`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServiceType {
    /// An ephemeral node, kept through lost sessions while registered
    /// (`DYNAMIC`, the default).
    #[default]
    Dynamic,
    /// A persistent node, deleted when unregistered or when the discovery
    /// closes (`STATIC`).
    Static,
    /// A persistent node, as `Static` in Curator 5.4 (`PERMANENT`).
    Permanent,
    /// An ephemeral sequential node: the node's name is the id and a
    /// sequence number (`DYNAMIC_SEQUENTIAL`).
    DynamicSequential,
}

impl ServiceType {
    /// Curator's name: `DYNAMIC`, `STATIC`, `PERMANENT`,
    /// `DYNAMIC_SEQUENTIAL`.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::Dynamic => "DYNAMIC",
            ServiceType::Static => "STATIC",
            ServiceType::Permanent => "PERMANENT",
            ServiceType::DynamicSequential => "DYNAMIC_SEQUENTIAL",
        }
    }

    /// The type of Curator's name, if it is one.
    pub fn from_name(name: &str) -> Option<ServiceType> {
        Some(match name {
            "DYNAMIC" => ServiceType::Dynamic,
            "STATIC" => ServiceType::Static,
            "PERMANENT" => ServiceType::Permanent,
            "DYNAMIC_SEQUENTIAL" => ServiceType::DynamicSequential,
            _ => return None,
        })
    }

    /// Whether the node is ephemeral (`Dynamic`, `DynamicSequential`).
    pub fn is_dynamic(self) -> bool {
        matches!(self, ServiceType::Dynamic | ServiceType::DynamicSequential)
    }
}

impl fmt::Display for ServiceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One instance of a service (Curator's `ServiceInstance`): what is stored,
/// as JSON, in the node `<base path>/<name>/<id>`.
///
/// `T` is the payload's type, any serde type; `serde_json::Value` takes
/// whatever payload another process wrote. Fields a newer (or another)
/// writer added are kept in [`extra`](Self::extra) and written back.
///
/// ```
/// use latchkey_discovery::{ServiceInstance, ServiceType, UriSpec};
///
/// let instance = ServiceInstance::<()>::builder("orders")
///     .address("10.0.0.7")
///     .port(8080)
///     .uri_spec(UriSpec::parse("{scheme}://{address}:{port}/v1").unwrap())
///     .build();
/// assert_eq!(instance.service_type, ServiceType::Dynamic);
/// assert_eq!(instance.build_uri_spec(), "http://10.0.0.7:8080/v1");
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ServiceInstance<T> {
    /// The service's name (the parent node's name).
    pub name: String,
    /// This instance's id, unique within the service (its node's name,
    /// with a sequence number after it for `DynamicSequential`).
    pub id: String,
    /// Where the instance is (Curator's builder defaults it to the first
    /// local address).
    pub address: Option<String>,
    /// Its port.
    ///
    /// Curator's port is a Java `Integer`, so another process may have
    /// written one no `u16` holds (above 65,535, or negative). Such a node
    /// still reads, as Curator reads it: the port is `None` here and the
    /// number is kept in [`extra`](Self::extra) under `"port"`, where
    /// [`build_uri_spec`](Self::build_uri_spec) finds it and from where
    /// the serializer writes it back while this field stays `None`. A port
    /// beyond Java's `int` makes the node unreadable, as it does to Curator.
    pub port: Option<u16>,
    /// Its TLS port; with one, `{scheme}` is `https`. One no `u16` holds is
    /// kept in [`extra`](Self::extra) under `"sslPort"`, as for
    /// [`port`](Self::port).
    pub ssl_port: Option<u16>,
    /// What else the service tells about itself.
    pub payload: Option<T>,
    /// Jackson's type id of the payload (`"@class"`): the Java class a
    /// Java reader makes of it. Read from the node; when writing, this or
    /// else the serializer's [`payload_class`](crate::JsonInstanceSerializer::payload_class).
    pub payload_class: Option<String>,
    /// When it registered, in milliseconds since the Unix epoch.
    pub registration_time_utc: i64,
    /// How its node is kept.
    pub service_type: ServiceType,
    /// A template of its address (`{scheme}://{address}:{port}`).
    pub uri_spec: Option<UriSpec>,
    /// Whether providers hand it out. Curator's default serializer does
    /// not write it (its compatible mode); readers then take `true`. A
    /// node with `"enabled": null` reads as `false`, as Curator reads it.
    pub enabled: bool,
    /// Fields of the node's JSON this version does not know, kept as read
    /// and written back after the known ones; also a `"port"` or
    /// `"sslPort"` that the port fields cannot hold, written back in its
    /// place.
    pub extra: Map<String, Value>,
}

impl<T> ServiceInstance<T> {
    /// A builder for an instance of the service `name`, with Curator's
    /// defaults: a random UUID as id, the first non-loopback local
    /// address, the current time, `Dynamic`, enabled.
    pub fn builder(name: &str) -> ServiceInstanceBuilder<T> {
        ServiceInstanceBuilder {
            instance: ServiceInstance {
                name: name.to_owned(),
                id: uuid::Uuid::new_v4().to_string(),
                address: local_address(),
                port: None,
                ssl_port: None,
                payload: None,
                payload_class: None,
                registration_time_utc: now_millis(),
                service_type: ServiceType::Dynamic,
                uri_spec: None,
                enabled: true,
                extra: Map::new(),
            },
        }
    }

    /// An instance with Curator's deserialization defaults: empty name
    /// and id, no address, ports or payload, time 0, `Dynamic`, enabled.
    pub fn empty() -> ServiceInstance<T> {
        ServiceInstance {
            name: String::new(),
            id: String::new(),
            address: None,
            port: None,
            ssl_port: None,
            payload: None,
            payload_class: None,
            registration_time_utc: 0,
            service_type: ServiceType::Dynamic,
            uri_spec: None,
            enabled: true,
            extra: Map::new(),
        }
    }

    /// The registration time as a `SystemTime` (`None` if before the
    /// epoch).
    pub fn registration_time(&self) -> Option<SystemTime> {
        u64::try_from(self.registration_time_utc)
            .ok()
            .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms)))
    }

    /// The uri spec filled in with this instance's fields, or `""`
    /// without one (Curator's `buildUriSpec()`).
    pub fn build_uri_spec(&self) -> String {
        self.build_uri_spec_with(&HashMap::new())
    }

    /// [`build_uri_spec`](Self::build_uri_spec) with more variables, which
    /// override the instance's own.
    pub fn build_uri_spec_with(&self, variables: &HashMap<String, String>) -> String {
        match &self.uri_spec {
            Some(spec) => spec.build(Some(self), variables),
            None => String::new(),
        }
    }

    /// A port as text, as Curator's `Integer` prints it: `port`, else the
    /// number a node held that a `u16` cannot (kept in `extra` under
    /// `field`).
    pub(crate) fn port_text(&self, port: Option<u16>, field: &str) -> Option<String> {
        match port {
            Some(p) => Some(p.to_string()),
            None => match self.extra.get(field)? {
                Value::Number(n) => Some(n.to_string()),
                Value::String(s) => s.trim().parse::<i32>().ok().map(|n| n.to_string()),
                _ => None,
            },
        }
    }

    /// The same instance with another payload type (the payload moved by
    /// `f`).
    pub fn map_payload<U>(self, f: impl FnOnce(T) -> U) -> ServiceInstance<U> {
        ServiceInstance {
            name: self.name,
            id: self.id,
            address: self.address,
            port: self.port,
            ssl_port: self.ssl_port,
            payload: self.payload.map(f),
            payload_class: self.payload_class,
            registration_time_utc: self.registration_time_utc,
            service_type: self.service_type,
            uri_spec: self.uri_spec,
            enabled: self.enabled,
            extra: self.extra,
        }
    }
}

/// Builds a [`ServiceInstance`] (Curator's `ServiceInstanceBuilder`), from
/// [`ServiceInstance::builder`].
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build`"]
pub struct ServiceInstanceBuilder<T> {
    instance: ServiceInstance<T>,
}

impl<T> ServiceInstanceBuilder<T> {
    /// The instance's id (default: a random UUID).
    pub fn id(mut self, id: &str) -> Self {
        self.instance.id = id.to_owned();
        self
    }
    /// Its address (default: the first non-loopback local address).
    pub fn address(mut self, address: &str) -> Self {
        self.instance.address = Some(address.to_owned());
        self
    }
    /// No address.
    pub fn no_address(mut self) -> Self {
        self.instance.address = None;
        self
    }
    /// Its port.
    pub fn port(mut self, port: u16) -> Self {
        self.instance.port = Some(port);
        self
    }
    /// Its TLS port.
    pub fn ssl_port(mut self, port: u16) -> Self {
        self.instance.ssl_port = Some(port);
        self
    }
    /// Its payload.
    pub fn payload(mut self, payload: T) -> Self {
        self.instance.payload = Some(payload);
        self
    }
    /// The Java class of its payload (Jackson's `"@class"`).
    pub fn payload_class(mut self, class: &str) -> Self {
        self.instance.payload_class = Some(class.to_owned());
        self
    }
    /// Its registration time in milliseconds since the epoch (default:
    /// now).
    pub fn registration_time_utc(mut self, millis: i64) -> Self {
        self.instance.registration_time_utc = millis;
        self
    }
    /// How its node is kept (default: `Dynamic`).
    pub fn service_type(mut self, service_type: ServiceType) -> Self {
        self.instance.service_type = service_type;
        self
    }
    /// Its uri spec.
    pub fn uri_spec(mut self, spec: UriSpec) -> Self {
        self.instance.uri_spec = Some(spec);
        self
    }
    /// Whether it is enabled (default: true).
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.instance.enabled = enabled;
        self
    }
    /// The instance.
    pub fn build(self) -> ServiceInstance<T> {
        self.instance
    }
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The local address the system would reach the internet from; found by
/// routing a UDP socket (nothing is sent). Curator takes the first address
/// of the first interface; the standard library cannot list interfaces.
fn local_address() -> Option<String> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    // TEST-NET-1: routable in the table, never answered.
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then(|| ip.to_string())
}

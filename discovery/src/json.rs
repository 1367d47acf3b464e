//! Curator's `InstanceSerializer` and `JsonInstanceSerializer`: an
//! instance as the JSON that Jackson writes and reads for Curator.
//!
//! What Curator 5.4 writes (checked against Debian's jar): the fields in
//! the order `name, id, address, port, sslPort, payload,
//! registrationTimeUTC, serviceType, uriSpec` (then `enabled` unless in
//! its default "compatible" mode), nulls written out, the uri spec as
//! `{"parts":[{"value":..,"variable":..}]}`. The payload carries Jackson's
//! type id (`@JsonTypeInfo(use = CLASS)`): an object as
//! `{"@class":"com.example.Details",...}`, an array or a non-natural
//! scalar (a `Long`) as `["java.lang.Long",42]`, and Jackson's natural
//! types (`String`, `Integer`, `Double`, `Boolean`) bare. Reading takes
//! all three forms, and the type id read is kept in
//! [`ServiceInstance::payload_class`].

use std::fmt::Write as _;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::instance::{ServiceInstance, ServiceType};
use crate::uri_spec::{Part, UriSpec};

/// The known fields, in the order Curator writes them.
const FIELDS: [&str; 10] = [
    "name",
    "id",
    "address",
    "port",
    "sslPort",
    "payload",
    "registrationTimeUTC",
    "serviceType",
    "uriSpec",
    "enabled",
];

/// Jackson's type id key for an object payload.
const CLASS_KEY: &str = "@class";

/// Turns instances into a node's bytes and back (Curator's
/// `InstanceSerializer`).
pub trait InstanceSerializer<T>: Send + Sync {
    /// The node's data for `instance`.
    fn serialize(&self, instance: &ServiceInstance<T>) -> Result<Vec<u8>>;
    /// The instance in a node's data; [`Error::BadInstance`] if it is not
    /// one.
    fn deserialize(&self, bytes: &[u8]) -> Result<ServiceInstance<T>>;
}

/// Curator's `JsonInstanceSerializer`: the JSON Java services read and
/// write.
///
/// By default it is in Curator's compatible mode, as Curator's default
/// serializer is: `enabled` is not written (readers take `true`); turn it
/// off with [`compatible_serialization(false)`](Self::compatible_serialization)
/// to write it. [`payload_class`](Self::payload_class) is the Java class a
/// Java reader should make of payloads that name none of their own.
///
/// ```
/// use latchkey_discovery::{InstanceSerializer, JsonInstanceSerializer, ServiceInstance};
///
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// struct Details { region: String }
///
/// let json = JsonInstanceSerializer::<Details>::new().payload_class("com.example.Details");
/// let instance = ServiceInstance::builder("orders")
///     .id("a1")
///     .no_address()
///     .registration_time_utc(0)
///     .payload(Details { region: "eu".into() })
///     .build();
/// let bytes = json.serialize(&instance).unwrap();
/// assert_eq!(
///     String::from_utf8(bytes.clone()).unwrap(),
///     r#"{"name":"orders","id":"a1","address":null,"port":null,"sslPort":null,"payload":{"@class":"com.example.Details","region":"eu"},"registrationTimeUTC":0,"serviceType":"DYNAMIC","uriSpec":null}"#
/// );
/// let back = json.deserialize(&bytes).unwrap();
/// assert_eq!(back.payload, instance.payload);
/// assert_eq!(back.payload_class.as_deref(), Some("com.example.Details"));
/// ```
pub struct JsonInstanceSerializer<T> {
    compatible: bool,
    payload_class: Option<String>,
    _payload: PhantomData<fn() -> T>,
}

impl<T> Clone for JsonInstanceSerializer<T> {
    fn clone(&self) -> Self {
        JsonInstanceSerializer {
            compatible: self.compatible,
            payload_class: self.payload_class.clone(),
            _payload: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for JsonInstanceSerializer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonInstanceSerializer")
            .field("compatible", &self.compatible)
            .field("payload_class", &self.payload_class)
            .finish()
    }
}

impl<T> Default for JsonInstanceSerializer<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> JsonInstanceSerializer<T> {
    /// Curator's default: compatible mode, no payload class.
    pub fn new() -> Self {
        JsonInstanceSerializer {
            compatible: true,
            payload_class: None,
            _payload: PhantomData,
        }
    }

    /// Curator's `compatibleSerializationMode`: `true` (the default)
    /// leaves `enabled` out, for Curator clients older than 2.9.1 (which
    /// refuse unknown fields); `false` writes it.
    pub fn compatible_serialization(mut self, compatible: bool) -> Self {
        self.compatible = compatible;
        self
    }

    /// The Java class written as the payload's type id when the instance
    /// names none ([`ServiceInstance::payload_class`]): a Java reader with
    /// `builder(Details.class)` needs `"com.example.Details"`. Without one,
    /// objects are written bare (Java reads a `LinkedHashMap`), arrays as
    /// `java.util.ArrayList`, scalars bare.
    pub fn payload_class(mut self, class: &str) -> Self {
        self.payload_class = Some(class.to_owned());
        self
    }
}

impl<T: Serialize + DeserializeOwned> InstanceSerializer<T> for JsonInstanceSerializer<T> {
    fn serialize(&self, instance: &ServiceInstance<T>) -> Result<Vec<u8>> {
        to_json(instance, self.compatible, self.payload_class.as_deref()).map(String::into_bytes)
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<ServiceInstance<T>> {
        from_json(bytes)
    }
}

fn bad(reason: impl Into<String>) -> Error {
    Error::BadInstance {
        path: "<bytes>".into(),
        reason: reason.into(),
    }
}

/// Writes `instance` in Curator's field order.
fn to_json<T: Serialize>(
    instance: &ServiceInstance<T>,
    compatible: bool,
    default_class: Option<&str>,
) -> Result<String> {
    let failed = |e: serde_json::Error| Error::Serialize {
        instance: format!("{}/{}", instance.name, instance.id),
        reason: e.to_string(),
    };
    let string = |s: &str| Value::String(s.to_owned()).to_string();
    let mut out = String::with_capacity(256);
    out.push('{');
    let _ = write!(out, "\"name\":{}", string(&instance.name));
    let _ = write!(out, ",\"id\":{}", string(&instance.id));
    let _ = write!(
        out,
        ",\"address\":{}",
        instance
            .address
            .as_deref()
            .map_or("null".to_owned(), string)
    );
    let _ = write!(
        out,
        ",\"port\":{}",
        port_json(instance.port, &instance.extra, "port")
    );
    let _ = write!(
        out,
        ",\"sslPort\":{}",
        port_json(instance.ssl_port, &instance.extra, "sslPort")
    );
    let payload = match &instance.payload {
        None => "null".to_owned(),
        Some(p) => {
            let bare = serde_json::to_string(p).map_err(failed)?;
            let class = instance.payload_class.as_deref().or(default_class);
            with_type_id(bare, class)
        }
    };
    let _ = write!(out, ",\"payload\":{payload}");
    let _ = write!(
        out,
        ",\"registrationTimeUTC\":{}",
        instance.registration_time_utc
    );
    let _ = write!(
        out,
        ",\"serviceType\":{}",
        string(instance.service_type.as_str())
    );
    let uri = match &instance.uri_spec {
        None => "null".to_owned(),
        Some(spec) => {
            let parts: Vec<Value> = spec
                .parts()
                .iter()
                .map(|p| {
                    let mut m = Map::new();
                    m.insert("value".into(), Value::String(p.value.clone()));
                    m.insert("variable".into(), Value::Bool(p.variable));
                    Value::Object(m)
                })
                .collect();
            format!("{{\"parts\":{}}}", Value::Array(parts))
        }
    };
    let _ = write!(out, ",\"uriSpec\":{uri}");
    if !compatible {
        let _ = write!(out, ",\"enabled\":{}", instance.enabled);
    }
    for (k, v) in &instance.extra {
        if !FIELDS.contains(&k.as_str()) {
            let _ = write!(out, ",{}:{v}", string(k));
        }
    }
    out.push('}');
    Ok(out)
}

/// The class Jackson gives a bare JSON scalar it reads into `Object`.
fn natural_class(bare: &str) -> Option<&'static str> {
    match bare.as_bytes().first()? {
        b'"' => Some("java.lang.String"),
        b't' | b'f' => Some("java.lang.Boolean"),
        b'-' | b'0'..=b'9' => {
            if bare.contains(['.', 'e', 'E']) {
                Some("java.lang.Double")
            } else if bare.parse::<i32>().is_ok() {
                Some("java.lang.Integer")
            } else if bare.parse::<i64>().is_ok() {
                Some("java.lang.Long")
            } else {
                Some("java.math.BigInteger")
            }
        }
        _ => None,
    }
}

/// The payload's JSON with Jackson's type id, as Jackson writes it.
fn with_type_id(bare: String, class: Option<&str>) -> String {
    let class_json = |c: &str| Value::String(c.to_owned()).to_string();
    match bare.as_bytes().first() {
        Some(b'{') => match class {
            // An object that names its class already is left alone.
            Some(c) if !bare.starts_with("{\"@class\"") => {
                if bare == "{}" {
                    format!("{{\"@class\":{}}}", class_json(c))
                } else {
                    format!("{{\"@class\":{},{}", class_json(c), &bare[1..])
                }
            }
            _ => bare,
        },
        Some(b'[') => format!(
            "[{},{bare}]",
            class_json(class.unwrap_or("java.util.ArrayList"))
        ),
        Some(b'n') => bare,
        _ => match class {
            Some(c) if Some(c) != natural_class(&bare) => {
                format!("[{},{bare}]", class_json(c))
            }
            _ => bare,
        },
    }
}

/// Reads an instance as Jackson does for Curator: missing fields take the
/// defaults of `ServiceInstance()`, unknown ones are kept.
fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<ServiceInstance<T>> {
    if bytes.is_empty() {
        return Err(bad("the node has no data"));
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    let Value::Object(mut map) = value else {
        return Err(bad(format!("not a JSON object but {}", kind(&value))));
    };
    let mut out = ServiceInstance::<T>::empty();
    if let Some(v) = map.remove("name") {
        out.name = opt_string(v, "name")?.unwrap_or_default();
    }
    if let Some(v) = map.remove("id") {
        out.id = opt_string(v, "id")?.unwrap_or_default();
    }
    if let Some(v) = map.remove("address") {
        out.address = opt_string(v, "address")?;
    }
    let mut unrepresentable = Map::new();
    for (field, port) in [("port", &mut out.port), ("sslPort", &mut out.ssl_port)] {
        if let Some(v) = map.remove(field) {
            match opt_port(&v, field)? {
                Port::Fits(p) => *port = p,
                // Kept, and written back where it was.
                Port::JavaOnly => {
                    unrepresentable.insert(field.to_owned(), v);
                }
            }
        }
    }
    if let Some(v) = map.remove("payload") {
        let (class, payload) = split_type_id(v);
        out.payload_class = class;
        out.payload = match payload {
            Value::Null => None,
            p => Some(serde_json::from_value(p).map_err(|e| {
                bad(format!(
                    "payload{}: {e}",
                    out.payload_class
                        .as_deref()
                        .map(|c| format!(" ({c})"))
                        .unwrap_or_default()
                ))
            })?),
        };
    }
    if let Some(v) = map.remove("registrationTimeUTC") {
        out.registration_time_utc = match &v {
            Value::Null => 0,
            _ => integer(&v).ok_or_else(|| {
                bad(format!(
                    "registrationTimeUTC is not a long but {}",
                    kind(&v)
                ))
            })?,
        };
    }
    if let Some(v) = map.remove("serviceType") {
        if let Some(name) = opt_string(v, "serviceType")? {
            out.service_type = ServiceType::from_name(&name).ok_or_else(|| {
                bad(format!(
                    "serviceType {name:?} is none of DYNAMIC, STATIC, PERMANENT, DYNAMIC_SEQUENTIAL"
                ))
            })?;
        }
    }
    if let Some(v) = map.remove("uriSpec") {
        out.uri_spec = uri_spec(v)?;
    }
    if let Some(v) = map.remove("enabled") {
        out.enabled = match v {
            // Jackson reads a null into Curator's primitive `boolean` as
            // its default: a disabled instance to Curator. A missing
            // field keeps the constructor's `true`.
            Value::Null => false,
            Value::Bool(b) => b,
            other => {
                return Err(bad(format!(
                    "enabled is not a boolean but {}",
                    kind(&other)
                )))
            }
        };
    }
    map.extend(unrepresentable);
    out.extra = map;
    Ok(out)
}

/// The payload's type id and its value, from Jackson's three forms.
fn split_type_id(v: Value) -> (Option<String>, Value) {
    match v {
        Value::Object(mut m) => match m.remove(CLASS_KEY) {
            Some(Value::String(c)) => (Some(c), Value::Object(m)),
            Some(other) => {
                // Not a type id after all: keep it as data.
                m.insert(CLASS_KEY.into(), other);
                (None, Value::Object(m))
            }
            None => (None, Value::Object(m)),
        },
        Value::Array(mut a) if a.len() == 2 && a[0].is_string() => {
            let value = a.pop().unwrap_or(Value::Null);
            let class = match a.pop() {
                Some(Value::String(c)) => Some(c),
                _ => None,
            };
            (class, value)
        }
        other => (None, other),
    }
}

fn uri_spec(v: Value) -> Result<Option<UriSpec>> {
    let parts = match v {
        Value::Null => return Ok(None),
        Value::Object(mut m) => m.remove("parts").unwrap_or(Value::Null),
        other => {
            return Err(bad(format!(
                "uriSpec is not an object but {}",
                kind(&other)
            )))
        }
    };
    let mut spec = UriSpec::new();
    let parts = match parts {
        Value::Null => Vec::new(),
        Value::Array(a) => a,
        other => {
            return Err(bad(format!(
                "uriSpec.parts is not an array but {}",
                kind(&other)
            )))
        }
    };
    for p in parts {
        let Value::Object(mut m) = p else {
            return Err(bad("uriSpec.parts holds something other than objects"));
        };
        let value = opt_string(
            m.remove("value").unwrap_or(Value::Null),
            "uriSpec part value",
        )?;
        let variable = match m.remove("variable") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => b,
            Some(other) => {
                return Err(bad(format!(
                    "uriSpec part variable is not a boolean but {}",
                    kind(&other)
                )))
            }
        };
        spec.add(Part {
            value: value.unwrap_or_default(),
            variable,
        });
    }
    Ok(Some(spec))
}

fn opt_string(v: Value, field: &str) -> Result<Option<String>> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        other => Err(bad(format!("{field} is not a string but {}", kind(&other)))),
    }
}

/// A port read: one a `u16` holds, or one only Java's `Integer` holds.
enum Port {
    Fits(Option<u16>),
    /// Outside 0 to 65,535 but within Java's `int`: Curator reads it.
    JavaOnly,
}

/// A port, as Jackson reads Curator's `Integer`: also a number in a
/// string; beyond Java's `int` it is an error, as in Curator.
fn opt_port(v: &Value, field: &str) -> Result<Port> {
    if v.is_null() {
        return Ok(Port::Fits(None));
    }
    let n = integer(v).ok_or_else(|| bad(format!("{field} is not an integer but {}", kind(v))))?;
    if let Ok(port) = u16::try_from(n) {
        return Ok(Port::Fits(Some(port)));
    }
    match i32::try_from(n) {
        Ok(_) => Ok(Port::JavaOnly),
        Err(_) => Err(bad(format!(
            "{field} {n} is out of range of Java's int, as Curator's port is"
        ))),
    }
}

/// The port to write: the instance's, else a number [`from_json`] kept in
/// `extra` because a `u16` cannot hold it, else `null`.
fn port_json(port: Option<u16>, extra: &Map<String, Value>, field: &str) -> String {
    match port {
        Some(p) => p.to_string(),
        None => match extra.get(field) {
            Some(v) if integer(v).is_some_and(|n| i32::try_from(n).is_ok()) => v.to_string(),
            _ => "null".to_owned(),
        },
    }
}

fn integer(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

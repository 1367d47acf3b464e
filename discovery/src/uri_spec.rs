//! Curator's `UriSpec`: a template such as `{scheme}://{address}:{port}`
//! filled in from an instance's fields.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::instance::ServiceInstance;

/// `http`, or `https` for an instance with a TLS port.
pub const FIELD_SCHEME: &str = "scheme";
/// The instance's name.
pub const FIELD_NAME: &str = "name";
/// The instance's id.
pub const FIELD_ID: &str = "id";
/// The instance's address.
pub const FIELD_ADDRESS: &str = "address";
/// The instance's port.
pub const FIELD_PORT: &str = "port";
/// The instance's TLS port.
pub const FIELD_SSL_PORT: &str = "ssl-port";
/// The instance's registration time (milliseconds since the epoch).
pub const FIELD_REGISTRATION_TIME_UTC: &str = "registration-time-utc";
/// The instance's service type, in lower case (`dynamic`, `static`, ...).
pub const FIELD_SERVICE_TYPE: &str = "service-type";
/// `{[}` is a literal `{`.
pub const FIELD_OPEN_BRACE: &str = "[";
/// `{]}` is a literal `}`.
pub const FIELD_CLOSE_BRACE: &str = "]";

/// One piece of a [`UriSpec`]: literal text, or a variable's name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Part {
    /// The text, or the variable's name.
    pub value: String,
    /// Whether `value` names a variable.
    pub variable: bool,
}

impl Part {
    /// A part.
    pub fn new(value: &str, variable: bool) -> Part {
        Part {
            value: value.to_owned(),
            variable,
        }
    }
}

/// A uri template (Curator's `UriSpec`): literal text and `{variable}`s.
///
/// The variables an instance fills in are `{scheme}` (`http`, or `https`
/// when it has a TLS port), `{name}`, `{id}`, `{address}`, `{port}`,
/// `{ssl-port}`, `{registration-time-utc}` and `{service-type}` (lower
/// case); a missing field is empty. `{[}` and `{]}` are literal braces.
/// A variable nobody sets is left out. Stored in the instance's JSON as
/// Curator stores it, as its parts.
///
/// ```
/// use std::collections::HashMap;
/// use latchkey_discovery::UriSpec;
///
/// let spec = UriSpec::parse("{scheme}://{host}{[}x{]}").unwrap();
/// let vars = HashMap::from([("host".to_string(), "example.com".to_string())]);
/// assert_eq!(spec.build::<()>(None, &vars), "http://example.com{x}");
/// assert_eq!(spec.to_string(), "{scheme}://{host}{[}x{]}");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct UriSpec {
    parts: Vec<Part>,
}

impl UriSpec {
    /// An empty spec (it builds `""`).
    pub fn new() -> UriSpec {
        UriSpec::default()
    }

    /// Parses a spec as Curator does: text between `{` and `}` (trimmed)
    /// is a variable. A `{` inside a variable, a `}` without its `{`, or a
    /// variable left open is an error.
    pub fn parse(raw: &str) -> Result<UriSpec> {
        let mut parts = Vec::new();
        let mut inside = false;
        let mut token = String::new();
        let bad = |why: &str| Error::InvalidArgument(format!("uri spec {raw:?}: {why}"));
        for c in raw.chars() {
            match c {
                '{' | '}' => {
                    if !token.is_empty() {
                        let text = std::mem::take(&mut token);
                        let value = if inside { text.trim().to_owned() } else { text };
                        parts.push(Part {
                            value,
                            variable: inside,
                        });
                    }
                    if c == '{' {
                        if inside {
                            return Err(bad("{ is not allowed inside of a variable specification"));
                        }
                        inside = true;
                    } else {
                        if !inside {
                            return Err(bad("} must be preceded by {"));
                        }
                        inside = false;
                    }
                }
                _ => token.push(c),
            }
        }
        if !token.is_empty() {
            let value = if inside {
                token.trim().to_owned()
            } else {
                token
            };
            parts.push(Part {
                value,
                variable: inside,
            });
        }
        if inside {
            return Err(bad("final variable not closed - expected }"));
        }
        Ok(UriSpec { parts })
    }

    /// Its parts, in order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Adds a part at the end.
    pub fn add(&mut self, part: Part) {
        self.parts.push(part);
    }

    /// Removes the first part equal to `part`.
    pub fn remove(&mut self, part: &Part) {
        if let Some(i) = self.parts.iter().position(|p| p == part) {
            self.parts.remove(i);
        }
    }

    /// Fills the spec in: from `instance`'s fields if given, then from
    /// `variables`, which override them (Curator's `build(instance,
    /// variables)`).
    pub fn build<T>(
        &self,
        instance: Option<&ServiceInstance<T>>,
        variables: &HashMap<String, String>,
    ) -> String {
        let mut local: HashMap<&str, String> = HashMap::new();
        local.insert(FIELD_OPEN_BRACE, "{".into());
        local.insert(FIELD_CLOSE_BRACE, "}".into());
        local.insert(FIELD_SCHEME, "http".into());
        if let Some(i) = instance {
            let opt = |v: Option<String>| v.unwrap_or_default();
            local.insert(FIELD_NAME, i.name.clone());
            local.insert(FIELD_ID, i.id.clone());
            local.insert(FIELD_ADDRESS, opt(i.address.clone()));
            let ssl_port = i.port_text(i.ssl_port, "sslPort");
            local.insert(FIELD_PORT, opt(i.port_text(i.port, "port")));
            local.insert(FIELD_SSL_PORT, opt(ssl_port.clone()));
            local.insert(
                FIELD_REGISTRATION_TIME_UTC,
                i.registration_time_utc.to_string(),
            );
            local.insert(FIELD_SERVICE_TYPE, i.service_type.as_str().to_lowercase());
            if ssl_port.is_some() {
                local.insert(FIELD_SCHEME, "https".into());
            }
        }
        let mut out = String::new();
        for p in &self.parts {
            if !p.variable {
                out.push_str(&p.value);
            } else if let Some(v) = variables.get(&p.value) {
                out.push_str(v);
            } else if let Some(v) = local.get(p.value.as_str()) {
                out.push_str(v);
            } else {
                log::debug!("uri spec variable not found: {}", p.value);
            }
        }
        out
    }
}

impl fmt::Display for UriSpec {
    /// The spec as it would be parsed back: `{variable}`s and text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.parts {
            if p.variable {
                write!(f, "{{{}}}", p.value)?;
            } else {
                // Literal braces written as their variables.
                for c in p.value.chars() {
                    match c {
                        '{' => f.write_str("{[}")?,
                        '}' => f.write_str("{]}")?,
                        c => write!(f, "{c}")?,
                    }
                }
            }
        }
        Ok(())
    }
}

impl FromStr for UriSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<UriSpec> {
        UriSpec::parse(s)
    }
}

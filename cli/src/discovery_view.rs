//! `inspect` of service discovery: Curator's layout `<base path>/<service
//! name>/<instance id>`, each instance node holding Curator's
//! `ServiceInstance` JSON (read with latchkey-discovery's serializer, so
//! what Curator, latchkey or anyone else wrote is read alike).
//!
//! A path is a service when one of its children holds an instance, and a
//! base path when one of the first few children of one of its first
//! children does; nodes that are not instances are then shown as
//! malformed, with the reason.
//!
//! Sessions: ZooKeeper deletes an ephemeral node with its session, so an
//! ephemeral instance listed belongs to a session the server still holds
//! (for up to the session timeout after its process died). What can be
//! seen is a dynamic instance whose node no session owns (a persistent
//! node, written by hand or left by a bug): nobody will remove it, and it
//! is flagged `session_gone`.

use latchkey_discovery::{Error, InstanceSerializer, JsonInstanceSerializer, ServiceInstance};
use latchkey_framework::{Client, ErrorCode, Stat};
use serde_json::{json, Value};

use crate::format::{ago, now_ms, table, utc_or_ms};
use crate::inspect::{join, printable};
use crate::{zk_failure, Exit, Opts};

/// Children of a candidate base path probed for a service, and of a
/// candidate service for an instance.
const PROBE_SERVICES: usize = 100;
/// Children of each service of a candidate base path probed for an
/// instance.
const PROBE_INSTANCES: usize = 3;

/// One instance node, read.
struct Instance {
    node: String,
    path: String,
    stat: Stat,
    data: Vec<u8>,
    parsed: Result<ServiceInstance<Value>, String>,
}

impl Instance {
    /// A dynamic instance in a node that no session owns.
    fn session_gone(&self) -> bool {
        matches!(&self.parsed, Ok(i) if i.service_type.is_dynamic() && self.stat.ephemeral_owner == 0)
    }

    fn session(&self) -> String {
        let owner = self.stat.ephemeral_owner;
        if self.session_gone() {
            "0x0 (no session: dynamic instance in a persistent node)".to_owned()
        } else if owner == 0 {
            "0x0 (persistent)".to_owned()
        } else {
            format!("0x{owner:x}")
        }
    }
}

/// One service and its instances.
struct Service {
    name: String,
    path: String,
    instances: Vec<Instance>,
}

/// Whether `data` looks like a service instance: a JSON object with a
/// `name` and an `id`.
fn looks_like_instance(data: &[u8]) -> bool {
    matches!(
        serde_json::from_slice::<Value>(data),
        Ok(Value::Object(map)) if map.contains_key("name") && map.contains_key("id")
    )
}

fn parse(data: &[u8]) -> Result<ServiceInstance<Value>, String> {
    JsonInstanceSerializer::<Value>::new()
        .deserialize(data)
        .map_err(|e| match e {
            Error::BadInstance { reason, .. } => reason,
            other => other.to_string(),
        })
}

/// The data of `path`, or `None` if it is gone.
fn read(client: &Client, path: &str) -> Result<Option<(Vec<u8>, Stat)>, Exit> {
    match client.get_data(path) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is(ErrorCode::NoNode) => Ok(None),
        Err(e) => Err(zk_failure(&e, &format!("cannot read {path}"))),
    }
}

/// The sorted children of `path` (none if it is gone).
fn list(client: &Client, path: &str) -> Result<Vec<String>, Exit> {
    match client.get_children(path) {
        Ok(mut c) => {
            c.sort();
            Ok(c)
        }
        Err(e) if e.is(ErrorCode::NoNode) => Ok(Vec::new()),
        Err(e) => Err(zk_failure(&e, &format!("cannot list {path}"))),
    }
}

/// The instances under the service path `path`.
fn service(client: &Client, path: &str) -> Result<Service, Exit> {
    let mut instances = Vec::new();
    for node in list(client, path)? {
        let node_path = join(path, &node);
        // Unregistered (or gone with its session) since the listing.
        let Some((data, stat)) = read(client, &node_path)? else {
            continue;
        };
        instances.push(Instance {
            parsed: parse(&data),
            node,
            path: node_path,
            stat,
            data,
        });
    }
    Ok(Service {
        name: path.rsplit('/').next().unwrap_or_default().to_owned(),
        path: path.to_owned(),
        instances,
    })
}

/// Whether one of the first `probe` children of `path` holds an instance.
fn holds_instances(
    client: &Client,
    path: &str,
    children: &[String],
    probe: usize,
) -> Result<bool, Exit> {
    for node in children.iter().take(probe) {
        if let Some((data, _)) = read(client, &join(path, node))? {
            if looks_like_instance(&data) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Prints the services under `opts.path` (whose children are `children`)
/// if it is a discovery base path or a service; false if it is neither.
pub(crate) fn inspect(client: &Client, opts: &Opts, children: &[String]) -> Result<bool, Exit> {
    let mut sorted = children.to_vec();
    sorted.sort();
    // A service's first instances may be malformed: probe more of them.
    let (recipe, services) = if holds_instances(client, &opts.path, &sorted, PROBE_SERVICES)? {
        ("discovery service", vec![service(client, &opts.path)?])
    } else {
        let mut base = false;
        for name in sorted.iter().take(PROBE_SERVICES) {
            let path = join(&opts.path, name);
            if holds_instances(client, &path, &list(client, &path)?, PROBE_INSTANCES)? {
                base = true;
                break;
            }
        }
        if !base {
            return Ok(false);
        }
        let mut services = Vec::new();
        for name in &sorted {
            services.push(service(client, &join(&opts.path, name))?);
        }
        ("service discovery", services)
    };
    let mut out = if opts.json {
        json(opts, recipe, &services)
    } else {
        text(opts, recipe, &services)
    };
    if opts.json {
        out.push('\n');
    }
    print!("{out}");
    Ok(true)
}

fn instance_json(i: &Instance, now: i64) -> Value {
    let mut map = json!({
        "node": i.node,
        "path": i.path,
        "session": format!("0x{:x}", i.stat.ephemeral_owner),
        "persistent": i.stat.ephemeral_owner == 0,
        "session_gone": i.session_gone(),
        "age_ms": now.saturating_sub(i.stat.ctime).max(0),
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    match &i.parsed {
        Ok(s) => {
            let fields = json!({
                "name": s.name,
                "id": s.id,
                "address": s.address,
                "port": s.port,
                "sslPort": s.ssl_port,
                "serviceType": s.service_type.as_str(),
                "registrationTimeUTC": s.registration_time_utc,
                "registered": crate::format::utc(s.registration_time_utc),
                "enabled": s.enabled,
                "uri": s.uri_spec.as_ref().map(|_| s.build_uri_spec()),
                "payload": s.payload,
                "payloadClass": s.payload_class,
                "malformed": null,
            });
            if let Value::Object(fields) = fields {
                map.extend(fields);
            }
        }
        Err(reason) => {
            map.insert("malformed".into(), Value::String(reason.clone()));
            map.insert(
                "data".into(),
                printable(&i.data).map_or(Value::Null, |s| Value::String(s.to_owned())),
            );
            map.insert("data_length".into(), i.data.len().into());
        }
    }
    Value::Object(map)
}

fn json(opts: &Opts, recipe: &str, services: &[Service]) -> String {
    let now = now_ms();
    let list: Vec<Value> = services
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "path": s.path,
                "instances": s.instances.iter().map(|i| instance_json(i, now)).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "path": opts.path,
        "exists": true,
        "recipe": recipe,
        "services": list,
        "nodes": [],
    })
    .to_string()
}

fn text(opts: &Opts, recipe: &str, services: &[Service]) -> String {
    let now = now_ms();
    let count: usize = services.iter().map(|s| s.instances.len()).sum();
    let mut out = if recipe == "service discovery" {
        format!(
            "{} ({recipe}): {} service(s), {count} instance(s)\n",
            opts.path,
            services.len()
        )
    } else {
        String::new()
    };
    let indent = if recipe == "service discovery" {
        "  "
    } else {
        ""
    };
    for s in services {
        if recipe == "service discovery" {
            out.push_str(&format!("{}: {} instance(s)\n", s.name, s.instances.len()));
        } else {
            out.push_str(&format!(
                "{} ({recipe} {}): {} instance(s)\n",
                s.path,
                s.name,
                s.instances.len()
            ));
        }
        if s.instances.is_empty() {
            continue;
        }
        let rows: Vec<Vec<String>> = s
            .instances
            .iter()
            .map(|i| {
                let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
                match &i.parsed {
                    Ok(p) => vec![
                        p.id.clone(),
                        opt(p.address.clone()),
                        opt(p.port.map(|p| p.to_string())),
                        opt(p.ssl_port.map(|p| p.to_string())),
                        p.service_type.as_str().to_owned(),
                        format!(
                            "{} ({} ago)",
                            utc_or_ms(p.registration_time_utc),
                            ago(now.saturating_sub(p.registration_time_utc))
                        ),
                        p.enabled.to_string(),
                        i.session(),
                    ],
                    // The reason follows the table.
                    Err(_) => vec![
                        i.node.clone(),
                        "(malformed)".to_owned(),
                        String::new(),
                        String::new(),
                        String::new(),
                        String::new(),
                        String::new(),
                        i.session(),
                    ],
                }
            })
            .collect();
        out.push_str(&table(
            &[
                "ID",
                "ADDRESS",
                "PORT",
                "SSL",
                "TYPE",
                "REGISTERED",
                "ENABLED",
                "SESSION",
            ],
            &rows,
            &[2, 3],
            indent,
        ));
        for i in &s.instances {
            if let Err(reason) = &i.parsed {
                out.push_str(&format!(
                    "{indent}{}: malformed ({} bytes): {reason}\n",
                    i.node,
                    i.data.len()
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_are_recognised_and_malformed_ones_told() {
        assert!(looks_like_instance(
            br#"{"name":"a","id":"1","address":null,"port":80}"#
        ));
        for not in [
            &b""[..],
            b"{",
            b"[]",
            b"{\"name\":\"a\"}",
            b"\xff\xfe",
            b"null",
        ] {
            assert!(!looks_like_instance(not));
        }
        let ok = parse(br#"{"name":"a","id":"1","port":80,"serviceType":"STATIC"}"#).unwrap();
        assert_eq!(ok.port, Some(80));
        assert!(parse(b"{not json").unwrap_err().starts_with("not JSON"));
        assert!(parse(br#"{"name":"a","id":"1","port":"x"}"#).is_err());
        // A port Curator reads (a Java int) but no u16 holds: readable,
        // the number kept in `extra`; beyond Java's int, refused.
        let big = parse(br#"{"name":"a","id":"1","port":70000}"#).unwrap();
        assert_eq!(big.port, None);
        assert_eq!(big.extra.get("port"), Some(&json!(70000)));
        assert!(parse(br#"{"name":"a","id":"1","port":3000000000}"#).is_err());
        assert!(parse(b"").is_err());
    }
}

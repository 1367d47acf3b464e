//! ZooKeeper 3.5+ operations beyond the basics: children with their
//! parent's stat, ACLs, a session's ephemeral nodes, subtree sizes, the
//! client's identities, the ensemble's configuration. Each is validated,
//! namespaced and retried like the client's other operations.

use crate::acl::Acl;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::ops::wire_get_data;
use crate::paths;
use crate::types::Stat;
use crate::wire::jute::Reader;
use crate::wire::proto::{self, op};

/// One identity the server knows the client by (ZooKeeper's `ClientInfo`,
/// from [`Client::who_am_i`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientInfo {
    /// The authentication scheme (`ip`, `digest`, `sasl`, `x509`, ...).
    pub auth_scheme: String,
    /// The identity in that scheme (an address, a user name).
    pub user: String,
}

/// ZooKeeper's node holding the ensemble's dynamic configuration.
const CONFIG_NODE: &str = "/zookeeper/config";

impl Client {
    /// The node's children and its own stat in one request (ZooKeeper's
    /// `getChildren2`; Curator's `getChildren().storingStatIn(stat)`).
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// let (children, stat) = client.get_children_with_stat("/jobs")?;
    /// assert_eq!(children.len(), stat.num_children as usize);
    /// # Ok(()) }
    /// ```
    pub fn get_children_with_stat(&self, path: &str) -> Result<(Vec<String>, Stat)> {
        let sp = self.shared.server_path(path)?;
        self.retrying("get_children", path, |s, deadline| {
            let body = s
                .call(
                    op::GET_CHILDREN2,
                    |w| {
                        w.string(&sp).bool(false);
                    },
                    None,
                    deadline,
                )
                .map_err(|e| e.with_path(&sp))?;
            let mut r = Reader::new(&body);
            Ok((r.strings()?, proto::read_stat(&mut r)?))
        })
    }

    /// The node's ACL and stat (Curator's `getACL()`).
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// let (acl, stat) = client.get_acl("/jobs")?;
    /// println!("{acl:?}, ACL version {}", stat.aversion);
    /// # Ok(()) }
    /// ```
    pub fn get_acl(&self, path: &str) -> Result<(Vec<Acl>, Stat)> {
        let sp = self.shared.server_path(path)?;
        self.retrying("get_acl", path, |s, deadline| {
            let body = s
                .call(
                    op::GET_ACL,
                    |w| {
                        w.string(&sp);
                    },
                    None,
                    deadline,
                )
                .map_err(|e| e.with_path(&sp))?;
            let mut r = Reader::new(&body);
            Ok((proto::read_acls(&mut r)?, proto::read_stat(&mut r)?))
        })
    }

    /// Sets the node's ACL if `version` is `None` or matches the node's ACL
    /// version (`aversion`), and returns its stat (Curator's
    /// `setACL().withVersion(v).withACL(acl).forPath(p)`). An empty ACL is
    /// refused before sending.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use latchkey_framework::Acl;
    /// let stat = client.set_acl("/jobs", &Acl::read_unsafe(), None)?;
    /// # Ok(()) }
    /// ```
    pub fn set_acl(&self, path: &str, acl: &[Acl], version: Option<i32>) -> Result<Stat> {
        let sp = self.shared.server_path(path)?;
        if acl.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "set_acl {path}: an ACL needs at least one entry"
            )));
        }
        self.retrying("set_acl", path, |s, deadline| {
            let body = s
                .call(
                    op::SET_ACL,
                    |w| {
                        w.string(&sp);
                        proto::write_acls(w, acl);
                        w.i32(version.unwrap_or(-1));
                    },
                    None,
                    deadline,
                )
                .map_err(|e| e.with_path(&sp))?;
            proto::read_stat(&mut Reader::new(&body))
        })
    }

    /// The ephemeral nodes of this client's session whose paths start with
    /// `prefix` (as text: `/a` also matches `/ab`), namespace-relative;
    /// `/` lists them all (ZooKeeper 3.6+ `getEphemerals`).
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// for node in client.get_ephemerals("/locks")? {
    ///     println!("this session holds {node}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn get_ephemerals(&self, prefix: &str) -> Result<Vec<String>> {
        let sp = self.shared.server_path(prefix)?;
        let ns = self.shared.cfg.namespace.as_deref();
        // The namespace's root must not match a sibling it prefixes as text.
        let in_scope =
            |p: &str| ns.is_none() || prefix != "/" || p == sp || p.starts_with(&format!("{sp}/"));
        let found = self.retrying("get_ephemerals", prefix, |s, deadline| {
            let body = s
                .call(
                    op::GET_EPHEMERALS,
                    |w| {
                        w.string(&sp);
                    },
                    None,
                    deadline,
                )
                .map_err(|e| e.with_path(&sp))?;
            Reader::new(&body).strings()
        })?;
        Ok(found
            .into_iter()
            .filter(|p| in_scope(p))
            .map(|p| paths::strip_namespace(ns, &p))
            .collect())
    }

    /// How many nodes are below `path`, at any depth (ZooKeeper 3.6+
    /// `getAllChildrenNumber`).
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// let total = client.get_all_children_number("/jobs")?;
    /// # Ok(()) }
    /// ```
    pub fn get_all_children_number(&self, path: &str) -> Result<u32> {
        let sp = self.shared.server_path(path)?;
        self.retrying("get_all_children_number", path, |s, deadline| {
            let body = s
                .call(
                    op::GET_ALL_CHILDREN_NUMBER,
                    |w| {
                        w.string(&sp);
                    },
                    None,
                    deadline,
                )
                .map_err(|e| e.with_path(&sp))?;
            let n = Reader::new(&body).i32()?;
            u32::try_from(n).map_err(|_| Error::Marshalling("negative number of children"))
        })
    }

    /// The identities the server knows this client by (ZooKeeper 3.7+
    /// `whoAmI`): its address, and every identity it authenticated as.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// for info in client.who_am_i()? {
    ///     println!("{}:{}", info.auth_scheme, info.user);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn who_am_i(&self) -> Result<Vec<ClientInfo>> {
        self.retrying("who_am_i", "/", |s, deadline| {
            let body = s.call(op::WHO_AM_I, |_| {}, None, deadline)?;
            let mut r = Reader::new(&body);
            let n = r.i32()?;
            if n < 0 || n as usize > r.rest().len() / 8 {
                return Err(Error::Marshalling(
                    "ClientInfo vector longer than its record",
                ));
            }
            (0..n)
                .map(|_| {
                    Ok(ClientInfo {
                        auth_scheme: r.string()?,
                        user: r.string()?,
                    })
                })
                .collect()
        })
    }

    /// The ensemble's configuration as the connected server has it (the
    /// data of `/zookeeper/config`, never namespaced; ZooKeeper 3.5+
    /// `getConfig`; Curator's `getConfig()`): lines such as
    /// `server.1=host:2888:3888:participant;0.0.0.0:2181` and `version=...`.
    /// A server without dynamic configuration may hold none (empty data).
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// let (config, _stat) = client.get_config()?;
    /// println!("{}", String::from_utf8_lossy(&config));
    /// # Ok(()) }
    /// ```
    pub fn get_config(&self) -> Result<(Vec<u8>, Stat)> {
        self.retrying("get_config", CONFIG_NODE, |s, deadline| {
            wire_get_data(s, CONFIG_NODE, None, deadline)
        })
    }
}

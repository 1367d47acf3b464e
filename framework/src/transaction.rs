//! Transactions (ZooKeeper's `multi`) in Curator's shape, and `multiRead`:
//! several operations in one request, validated, namespaced and retried
//! like the client's other operations.

use crate::acl::Acl;
use crate::client::{Client, Shared};
use crate::error::{Error, ErrorCode, Result};
use crate::paths;
use crate::types::{CreateMode, Stat};
use crate::wire::jute::Writer;
use crate::wire::multi::{self, SubReply, SubRequest};
use crate::wire::proto::op;

/// The kind of a transaction's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OperationType {
    /// Creates a node.
    Create,
    /// Sets a node's data.
    SetData,
    /// Deletes a node.
    Delete,
    /// Checks a node's version (or that it exists); changes nothing.
    Check,
}

impl OperationType {
    /// ZooKeeper's name of the operation, as errors give it.
    fn name(self) -> &'static str {
        match self {
            OperationType::Create => "create",
            OperationType::SetData => "setData",
            OperationType::Delete => "delete",
            OperationType::Check => "check",
        }
    }
}

/// What one operation of a committed transaction did; Curator's
/// `CuratorTransactionResult`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransactionResult {
    /// The operation.
    pub op: OperationType,
    /// The (namespace-relative) path the operation was given.
    pub for_path: String,
    /// A create's node, namespace-relative (with its sequence number for a
    /// sequential create); `None` for the other operations.
    pub result_path: Option<String>,
    /// The node's stat after a set-data, or after a create when the server
    /// sends it (ZooKeeper 3.8 sends none for a create in a transaction);
    /// `None` for the others.
    pub result_stat: Option<Stat>,
}

enum Op {
    Create {
        data: Vec<u8>,
        mode: CreateMode,
        acl: Option<Vec<Acl>>,
    },
    SetData {
        data: Vec<u8>,
        version: i32,
    },
    Delete {
        version: i32,
    },
    Check {
        version: i32,
    },
}

impl Op {
    fn kind(&self) -> OperationType {
        match self {
            Op::Create { .. } => OperationType::Create,
            Op::SetData { .. } => OperationType::SetData,
            Op::Delete { .. } => OperationType::Delete,
            Op::Check { .. } => OperationType::Check,
        }
    }
}

/// Builds a transaction: operations that ZooKeeper applies all together or
/// not at all, in one request. Curator's `client.transaction()` /
/// `CuratorTransaction`. Nothing is sent until [`Transaction::commit`].
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_framework::{CreateMode, ErrorCode, OperationType};
///
/// let (_, stat) = client.get_data("/config")?;
/// let results = client
///     .transaction()
///     .check("/config", stat.version) // nobody changed it meanwhile
///     .create_with_mode("/jobs/job-", b"payload", CreateMode::PersistentSequential)
///     .set_data("/config", b"next")
///     .delete("/jobs/old")
///     .commit()?;
/// assert_eq!(results[1].op, OperationType::Create);
/// println!("created {:?}", results[1].result_path);
///
/// // One failing operation fails the whole transaction; nothing changes.
/// let err = client
///     .transaction()
///     .create("/a", b"")
///     .delete("/missing")
///     .commit()
///     .unwrap_err();
/// assert!(err.is(ErrorCode::NoNode)); // "transaction: operation 1 (delete /missing) failed: NoNode ..."
/// # Ok(()) }
/// ```
#[must_use = "a transaction does nothing until commit is called"]
pub struct Transaction<'a> {
    client: &'a Client,
    ops: Vec<(String, Op)>,
}

impl Transaction<'_> {
    fn push(mut self, path: &str, op: Op) -> Self {
        self.ops.push((path.to_owned(), op));
        self
    }

    /// Creates a persistent node with the ACL provider's ACL.
    pub fn create(self, path: &str, data: &[u8]) -> Self {
        self.create_with_mode(path, data, CreateMode::Persistent)
    }

    /// Creates a node in `mode` with the ACL provider's ACL.
    pub fn create_with_mode(self, path: &str, data: &[u8], mode: CreateMode) -> Self {
        let data = data.to_vec();
        self.push(
            path,
            Op::Create {
                data,
                mode,
                acl: None,
            },
        )
    }

    /// Creates a node in `mode` with `acl`.
    pub fn create_with_acl(self, path: &str, data: &[u8], mode: CreateMode, acl: Vec<Acl>) -> Self {
        let data = data.to_vec();
        let acl = Some(acl);
        self.push(path, Op::Create { data, mode, acl })
    }

    /// Sets a node's data, whatever its version.
    pub fn set_data(self, path: &str, data: &[u8]) -> Self {
        self.set_data_with_version(path, data, -1)
    }

    /// Sets a node's data if its version is `version` (-1: any version).
    pub fn set_data_with_version(self, path: &str, data: &[u8], version: i32) -> Self {
        let data = data.to_vec();
        self.push(path, Op::SetData { data, version })
    }

    /// Deletes a node, whatever its version.
    pub fn delete(self, path: &str) -> Self {
        self.delete_with_version(path, -1)
    }

    /// Deletes a node if its version is `version` (-1: any version).
    pub fn delete_with_version(self, path: &str, version: i32) -> Self {
        self.push(path, Op::Delete { version })
    }

    /// Requires the node's version to be `version` (-1: only that the node
    /// exists); changes nothing.
    pub fn check(self, path: &str, version: i32) -> Self {
        self.push(path, Op::Check { version })
    }

    /// Requires the node to exist; changes nothing.
    pub fn check_exists(self, path: &str) -> Self {
        self.check(path, -1)
    }

    /// Sends the transaction and returns each operation's result, in order.
    ///
    /// If one operation fails, ZooKeeper changes nothing and this returns
    /// [`Error::TransactionFailed`] naming the first failing operation, its
    /// path and its error code. A bad path or an empty ACL fails before
    /// anything is sent, naming the operation and the path. An empty
    /// transaction returns no results without a round trip.
    ///
    /// Like every operation, the commit is retried after a connection loss
    /// (Curator does the same); if the lost attempt had in fact been
    /// applied, the retry fails (a create with `NodeExists`, say). A
    /// [`Transaction::check`] on a version the transaction changes makes
    /// such a retry fail instead of applying twice.
    pub fn commit(self) -> Result<Vec<TransactionResult>> {
        let shared = &self.client.shared;
        let Some((first_path, _)) = self.ops.first() else {
            return Ok(Vec::new());
        };
        let server_paths = self
            .ops
            .iter()
            .enumerate()
            .map(|(i, (path, op))| validate(shared, &label(i, op), path, op))
            .collect::<Result<Vec<_>>>()?;
        let acls = self
            .ops
            .iter()
            .enumerate()
            .map(|(i, (path, op))| acl_for(shared, &label(i, op), path, op))
            .collect::<Result<Vec<_>>>()?;
        let subs: Vec<SubRequest<'_>> = self
            .ops
            .iter()
            .zip(&server_paths)
            .zip(&acls)
            .map(|(((_, op), path), acl)| sub_request(path, op, acl))
            .collect();
        let replies = exchange(
            self.client,
            "transaction",
            op::MULTI,
            (first_path, &server_paths[0]),
            &subs,
        )?;
        if let Some((index, code)) = replies.iter().enumerate().find_map(|(i, r)| match r {
            SubReply::Error(code) if *code != 0 => Some((i, *code)),
            _ => None,
        }) {
            let (path, op) = &self.ops[index];
            return Err(Error::TransactionFailed {
                index,
                op: op.kind().name(),
                path: path.clone(),
                code: ErrorCode::from_wire(code),
            });
        }
        self.ops
            .iter()
            .zip(replies)
            .map(|((path, op), reply)| result(shared, path, op.kind(), reply))
            .collect::<Result<Vec<_>>>()
            .map_err(|e| e.for_op("transaction", first_path))
    }
}

/// What a fenced write's `multi` answered (see `Client::fenced_exchange`).
enum FencedReply {
    /// The check passed; the write's reply.
    Done(SubReply),
    /// The fence node was missing.
    FenceMissing,
    /// The check passed and the write was refused with this code.
    Refused(ErrorCode),
}

/// A sub-reply's error code, if it failed.
fn failed(reply: &SubReply) -> Option<ErrorCode> {
    match reply {
        SubReply::Error(code) if *code != 0 => Some(ErrorCode::from_wire(*code)),
        _ => None,
    }
}

/// How errors name operation `index` of a transaction.
fn label(index: usize, op: &Op) -> String {
    format!("transaction operation {index} ({})", op.kind().name())
}

/// The server path of an operation (`what` names it in errors), checked as
/// its single form would be.
fn validate(shared: &Shared, what: &str, path: &str, op: &Op) -> Result<String> {
    let sequential = matches!(op, Op::Create { mode, .. } if mode.is_sequential());
    let valid = match sequential {
        true => paths::validate_path_sequential(path),
        false => paths::validate_path(path),
    };
    let bad = |reason: String| Error::InvalidPath {
        path: path.to_owned(),
        reason: format!("{what}: {reason}"),
    };
    valid.map_err(|e| bad(e.kind().to_string()))?;
    if let Op::Create { mode, .. } = op {
        mode.ttl_ms()
            .map_err(|why| Error::InvalidArgument(format!("{what} {path}: {why}")))?;
    }
    let server_path = paths::fix_for_namespace(shared.cfg.namespace.as_deref(), path);
    if server_path == "/" && matches!(op, Op::Create { .. } | Op::Delete { .. }) {
        return Err(bad("cannot create or delete the root".into()));
    }
    Ok(server_path)
}

/// A create's ACL (given, or the provider's); empty for other operations.
fn acl_for(shared: &Shared, what: &str, path: &str, op: &Op) -> Result<Vec<Acl>> {
    let Op::Create { acl, .. } = op else {
        return Ok(Vec::new());
    };
    let acl = acl
        .clone()
        .unwrap_or_else(|| shared.cfg.acl_provider.acl_for_path(path));
    if acl.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{what} {path}: an ACL needs at least one entry"
        )));
    }
    Ok(acl)
}

fn sub_request<'a>(path: &'a str, op: &'a Op, acl: &'a [Acl]) -> SubRequest<'a> {
    match op {
        Op::Create { data, mode, .. } => SubRequest::Create {
            path,
            data,
            acl,
            mode: *mode,
        },
        Op::SetData { data, version } => SubRequest::SetData {
            path,
            data,
            version: *version,
        },
        Op::Delete { version } => SubRequest::Delete {
            path,
            version: *version,
        },
        Op::Check { version } => SubRequest::Check {
            path,
            version: *version,
        },
    }
}

/// The request body, refused before sending if the whole request would be
/// over `max_request_size` (the server would drop the connection).
/// Sends `subs` as one `opcode` request (`multi` or `multiRead`) in the
/// retry loop and returns one reply per sub-request. `operation` and the
/// first path (as the caller gave it, and on the server) name it in errors.
fn exchange(
    client: &Client,
    operation: &'static str,
    opcode: i32,
    (first_path, server_path): (&str, &str),
    subs: &[SubRequest<'_>],
) -> Result<Vec<SubReply>> {
    let body = encode(&client.shared, subs, opcode, server_path)?;
    let replies = client.retrying(operation, first_path, |s, deadline| {
        let reply = s
            .call(
                opcode,
                |w| {
                    w.raw(&body);
                },
                None,
                deadline,
            )
            .map_err(|e| e.with_path(server_path))?;
        multi::read_response(&reply)
    })?;
    if replies.len() != subs.len() {
        let what = match opcode {
            op::MULTI_READ => "multiRead reply has the wrong number of results",
            _ => "multi reply has the wrong number of results",
        };
        return Err(Error::Marshalling(what).for_op(operation, first_path));
    }
    Ok(replies)
}

fn encode(shared: &Shared, subs: &[SubRequest<'_>], opcode: i32, path: &str) -> Result<Vec<u8>> {
    let mut w = Writer::default();
    multi::write_request(&mut w, subs);
    let body = w.as_bytes().to_vec();
    // The request header (xid, op code) comes on top of the body.
    let size = body.len().saturating_add(8);
    let max = shared.cfg.wire.max_request;
    if size > max {
        let mut shown: String = path.chars().take(200).collect();
        if shown.len() < path.len() {
            shown.push_str("...");
        }
        return Err(Error::RequestTooLarge {
            operation: crate::wire::proto::op_name(opcode),
            path: shown,
            size,
            max,
        });
    }
    Ok(body)
}

fn result(
    shared: &Shared,
    for_path: &str,
    kind: OperationType,
    reply: SubReply,
) -> Result<TransactionResult> {
    let (result_path, result_stat) = match (kind, reply) {
        (OperationType::Create, SubReply::Created { path, stat }) => {
            (Some(shared.user_path(&path)), stat)
        }
        (OperationType::SetData, SubReply::DataSet(stat)) => (None, Some(stat)),
        (OperationType::Delete, SubReply::Deleted) | (OperationType::Check, SubReply::Checked) => {
            (None, None)
        }
        _ => return Err(Error::Marshalling("multi reply does not match its request")),
    };
    Ok(TransactionResult {
        op: kind,
        for_path: for_path.to_owned(),
        result_path,
        result_stat,
    })
}

/// What one read of a [`MultiRead`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadResult {
    /// A node's data and stat.
    Data {
        /// The (namespace-relative) path read.
        path: String,
        /// The node's data.
        data: Vec<u8>,
        /// The node's stat.
        stat: Stat,
    },
    /// A node's children's names.
    Children {
        /// The (namespace-relative) path read.
        path: String,
        /// The names of its children, in the server's order.
        children: Vec<String>,
    },
}

enum Read {
    Data,
    Children,
}

/// Several reads in one request (ZooKeeper's `multiRead`, 3.6+). Unlike a
/// transaction, each read succeeds or fails on its own; all are answered
/// from one point of the server's history. Sets no watches.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_framework::ReadResult;
/// let results = client.multi_read().get_data("/config").get_children("/jobs").execute()?;
/// for r in results {
///     match r {
///         Ok(ReadResult::Data { path, data, .. }) => println!("{path}: {data:?}"),
///         Ok(ReadResult::Children { path, children }) => println!("{path}: {children:?}"),
///         Ok(_) => {}
///         Err(e) => println!("{e}"), // "get_data /config: NoNode ..."
///     }
/// }
/// # Ok(()) }
/// ```
#[must_use = "a multi-read does nothing until execute is called"]
pub struct MultiRead<'a> {
    client: &'a Client,
    reads: Vec<(String, Read)>,
}

impl MultiRead<'_> {
    /// Reads a node's data and stat.
    pub fn get_data(mut self, path: &str) -> Self {
        self.reads.push((path.to_owned(), Read::Data));
        self
    }

    /// Lists a node's children.
    pub fn get_children(mut self, path: &str) -> Self {
        self.reads.push((path.to_owned(), Read::Children));
        self
    }

    /// Sends the reads and returns each one's result, in order; a read
    /// that failed is an error naming its operation and path. The outer
    /// error is for the request as a whole (a bad path, no connection).
    pub fn execute(self) -> Result<Vec<Result<ReadResult>>> {
        let shared = &self.client.shared;
        let Some((first_path, _)) = self.reads.first() else {
            return Ok(Vec::new());
        };
        let server_paths = self
            .reads
            .iter()
            .map(|(path, _)| shared.server_path(path))
            .collect::<Result<Vec<_>>>()?;
        let subs: Vec<SubRequest<'_>> = self
            .reads
            .iter()
            .zip(&server_paths)
            .map(|((_, read), path)| match read {
                Read::Data => SubRequest::GetData { path },
                Read::Children => SubRequest::GetChildren { path },
            })
            .collect();
        let replies = exchange(
            self.client,
            "multi_read",
            op::MULTI_READ,
            (first_path, &server_paths[0]),
            &subs,
        )?;
        let results = self
            .reads
            .into_iter()
            .zip(replies)
            .map(|((path, read), reply)| {
                let op = match read {
                    Read::Data => "get_data",
                    Read::Children => "get_children",
                };
                match (read, reply) {
                    (Read::Data, SubReply::Data(data, stat)) => {
                        Ok(ReadResult::Data { path, data, stat })
                    }
                    (Read::Children, SubReply::Children(children)) => {
                        Ok(ReadResult::Children { path, children })
                    }
                    (_, SubReply::Error(code)) => Err(Error::Zk {
                        code: ErrorCode::from_wire(code),
                        path: Some(path.clone()),
                    }
                    .for_op(op, &path)),
                    _ => Err(
                        Error::Marshalling("multiRead reply does not match its request")
                            .for_op(op, &path),
                    ),
                }
            });
        Ok(results.collect())
    }
}

impl Client {
    /// Starts a transaction (ZooKeeper's `multi`); Curator's `transaction()`.
    /// See [`Transaction`].
    pub fn transaction(&self) -> Transaction<'_> {
        Transaction {
            client: self,
            ops: Vec::new(),
        }
    }

    /// Starts a batch of reads in one request (ZooKeeper's `multiRead`).
    /// See [`MultiRead`].
    pub fn multi_read(&self) -> MultiRead<'_> {
        MultiRead {
            client: self,
            reads: Vec::new(),
        }
    }

    /// Sets the node's data only while the node `fence` exists: a hold's
    /// lock node (a `MutexGuard`'s, a leadership's), so that a write
    /// delayed by an outage cannot land after the hold ended and someone
    /// else took over. One transaction, a check that `fence` exists and
    /// the write, which ZooKeeper orders before or after the fence's
    /// deletion, never across it. With a `version` it is a
    /// compare-and-set, reported as [`Client::compare_and_set_data`]
    /// reports it: `BadVersion` only when this write was certainly
    /// refused, `ConnectionLoss` ("may or may not have run") when a lost
    /// reply leaves it unknown.
    ///
    /// Fails with [`Error::FenceGone`] (code `NoNode`), changing nothing,
    /// once the fence is gone; with the write's own error (`NoNode` for a
    /// missing node, `BadVersion`) as [`Client::set_data`] would. A fence
    /// found gone on a retry after a lost reply is `ConnectionLoss` when
    /// the earlier attempt may have been applied. Both paths are relative
    /// to this handle's namespace.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use latchkey_framework::Error;
    /// // `lock_node` is the path of a lock node this process holds.
    /// # let lock_node = "/locks/jobs/_c_0-lock-0000000007";
    /// match client.set_data_fenced(lock_node, "/jobs/plan", b"v2", None) {
    ///     Ok(_) => println!("written while holding the lock"),
    ///     Err(Error::FenceGone { .. }) => println!("the lock was lost: not written"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn set_data_fenced(
        &self,
        fence: &str,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> Result<Stat> {
        let fence_sp = self.shared.server_path(fence)?;
        let sp = self.shared.server_path(path)?;
        let subs = [
            SubRequest::Check {
                path: &fence_sp,
                version: -1,
            },
            SubRequest::SetData {
                path: &sp,
                data,
                version: version.unwrap_or(-1),
            },
        ];
        let (reply, in_doubt) = self.fenced_exchange("set_data", fence, path, &sp, &subs)?;
        let in_doubt_error =
            || Error::from_code(ErrorCode::ConnectionLoss).for_op("set_data", path);
        match reply {
            FencedReply::Done(SubReply::DataSet(stat)) => Ok(stat),
            FencedReply::FenceMissing => {
                // Gone now; an earlier attempt may have landed before it went.
                let unchanged = match (in_doubt, version) {
                    (false, _) => true,
                    (true, None) => false,
                    (true, Some(v)) => self.get_data(path)?.1.version == v,
                };
                Err(match unchanged {
                    true => Error::FenceGone {
                        op: "set_data",
                        path: path.to_owned(),
                        fence: fence.to_owned(),
                    },
                    false => in_doubt_error(),
                })
            }
            FencedReply::Refused(code) => {
                let refused = Error::Zk {
                    code,
                    path: Some(sp.clone()),
                }
                .for_op("set_data", path);
                match (in_doubt, version) {
                    (true, Some(v)) if code == ErrorCode::BadVersion => {
                        match self.another_write_won(path, data, v)? {
                            true => Err(refused),
                            false => Err(in_doubt_error()),
                        }
                    }
                    _ => Err(refused),
                }
            }
            FencedReply::Done(_) => {
                Err(Error::Marshalling("multi reply does not match its request")
                    .for_op("set_data", path))
            }
        }
    }

    /// Creates a node only while the node `fence` exists, as
    /// [`Client::set_data_fenced`] sets data: one transaction, the check
    /// and the create, and [`Error::FenceGone`] (code `NoNode`), creating
    /// nothing, once the fence is gone. Returns the created node's path
    /// (with its sequence number for a sequential mode). A missing parent
    /// is the create's own `NoNode` on `path`; parents are not created.
    ///
    /// Like every create, one retried after a lost reply may meet its own
    /// node (`NodeExists`), or, sequential, create a second node; a fence
    /// found gone on such a retry is `ConnectionLoss` ("may or may not
    /// have run"), as the earlier attempt may have landed.
    pub fn create_fenced(
        &self,
        fence: &str,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Result<String> {
        let fence_sp = self.shared.server_path(fence)?;
        let op = Op::Create {
            data: data.to_vec(),
            mode,
            acl: None,
        };
        let sp = validate(&self.shared, "create_fenced", path, &op)?;
        let acl = acl_for(&self.shared, "create_fenced", path, &op)?;
        let subs = [
            SubRequest::Check {
                path: &fence_sp,
                version: -1,
            },
            sub_request(&sp, &op, &acl),
        ];
        let (reply, in_doubt) = self.fenced_exchange("create", fence, path, &sp, &subs)?;
        match reply {
            FencedReply::Done(SubReply::Created { path: made, .. }) => {
                Ok(self.shared.user_path(&made))
            }
            FencedReply::FenceMissing => Err(match in_doubt {
                false => Error::FenceGone {
                    op: "create",
                    path: path.to_owned(),
                    fence: fence.to_owned(),
                },
                true => Error::from_code(ErrorCode::ConnectionLoss).for_op("create", path),
            }),
            FencedReply::Refused(code) => Err(Error::Zk {
                code,
                path: Some(sp.clone()),
            }
            .for_op("create", path)),
            FencedReply::Done(_) => {
                Err(Error::Marshalling("multi reply does not match its request")
                    .for_op("create", path))
            }
        }
    }

    /// Sends a fenced write's `multi` (the check of `fence`, then the
    /// write on `path`) in the retry loop; what it answered, and whether an
    /// attempt was sent and its outcome lost. A check that fails for
    /// another reason than a missing fence is an error naming the fence.
    fn fenced_exchange(
        &self,
        operation: &'static str,
        fence: &str,
        path: &str,
        server_path: &str,
        subs: &[SubRequest<'_>; 2],
    ) -> Result<(FencedReply, bool)> {
        let body = encode(&self.shared, subs, op::MULTI, server_path)?;
        let mut in_doubt = false;
        let replies = self.retrying(operation, path, |s, deadline| {
            let attempt = s
                .call(
                    op::MULTI,
                    |w| {
                        w.raw(&body);
                    },
                    None,
                    deadline,
                )
                .map_err(|e| e.with_path(server_path))
                .and_then(|reply| multi::read_response(&reply));
            if let Err(e) = &attempt {
                in_doubt |= e.is_retryable() && !e.is_unsent();
            }
            attempt
        })?;
        let reply = match <[SubReply; 2]>::try_from(replies) {
            Ok([check, _]) if failed(&check) == Some(ErrorCode::NoNode) => {
                FencedReply::FenceMissing
            }
            Ok([check, _]) if failed(&check).is_some() => {
                let code = failed(&check).unwrap_or(ErrorCode::SystemError);
                return Err(Error::Zk {
                    code,
                    path: Some(fence.to_owned()),
                }
                .for_op(operation, path));
            }
            Ok([_, write]) => match failed(&write) {
                Some(code) => FencedReply::Refused(code),
                None => FencedReply::Done(write),
            },
            Err(_) => {
                return Err(
                    Error::Marshalling("multi reply has the wrong number of results")
                        .for_op(operation, path),
                )
            }
        };
        Ok((reply, in_doubt))
    }
}

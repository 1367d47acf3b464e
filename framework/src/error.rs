//! The one error type of latchkey, with ZooKeeper's error codes by name.

use std::fmt;

/// ZooKeeper's error codes (`KeeperException.Code`), by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// A server-side error with no better name.
    SystemError,
    /// The server's state is inconsistent.
    RuntimeInconsistency,
    /// The server's data is inconsistent.
    DataInconsistency,
    /// The connection to the server was lost; the operation may or may not have run.
    ConnectionLoss,
    /// A record could not be encoded or decoded.
    MarshallingError,
    /// The server does not implement the operation.
    Unimplemented,
    /// The operation did not complete in time.
    OperationTimeout,
    /// Invalid arguments.
    BadArguments,
    /// The session is not known to the server (`UNKNOWNSESSION`).
    UnknownSession,
    /// No quorum for a new configuration.
    NewConfigNoQuorum,
    /// A reconfiguration is in progress.
    ReconfigInProgress,
    /// An API error.
    ApiError,
    /// The node does not exist.
    NoNode,
    /// Not authorized for the operation.
    NoAuth,
    /// The version given does not match the node's.
    BadVersion,
    /// Ephemeral nodes cannot have children.
    NoChildrenForEphemerals,
    /// The node already exists.
    NodeExists,
    /// The node has children.
    NotEmpty,
    /// The session has expired.
    SessionExpired,
    /// Invalid callback.
    InvalidCallback,
    /// Invalid ACL.
    InvalidAcl,
    /// Authentication failed.
    AuthFailed,
    /// The session moved to another server.
    SessionMoved,
    /// A write was sent to a read-only server.
    NotReadOnly,
    /// Ephemeral node on a local session.
    EphemeralOnLocalSession,
    /// No such watch.
    NoWatcher,
    /// The request timed out on the server.
    RequestTimeout,
    /// Reconfiguration is disabled.
    ReconfigDisabled,
    /// The session requires SASL authentication.
    SessionClosedRequireSaslAuth,
    /// A quota was exceeded.
    QuotaExceeded,
    /// The server throttled the operation.
    Throttled,
    /// A code this version does not know.
    Unknown(i32),
}

impl ErrorCode {
    /// Maps the integer code on the wire to its name.
    pub fn from_wire(code: i32) -> Self {
        use ErrorCode::*;
        match code {
            -1 => SystemError,
            -2 => RuntimeInconsistency,
            -3 => DataInconsistency,
            -4 => ConnectionLoss,
            -5 => MarshallingError,
            -6 => Unimplemented,
            -7 => OperationTimeout,
            -8 => BadArguments,
            -12 => UnknownSession,
            -13 => NewConfigNoQuorum,
            -14 => ReconfigInProgress,
            -100 => ApiError,
            -101 => NoNode,
            -102 => NoAuth,
            -103 => BadVersion,
            -108 => NoChildrenForEphemerals,
            -110 => NodeExists,
            -111 => NotEmpty,
            -112 => SessionExpired,
            -113 => InvalidCallback,
            -114 => InvalidAcl,
            -115 => AuthFailed,
            -118 => SessionMoved,
            -119 => NotReadOnly,
            -120 => EphemeralOnLocalSession,
            -121 => NoWatcher,
            -122 => RequestTimeout,
            -123 => ReconfigDisabled,
            -124 => SessionClosedRequireSaslAuth,
            -125 => QuotaExceeded,
            -127 => Throttled,
            other => Unknown(other),
        }
    }
}

impl ErrorCode {
    /// What the code means, in a few words.
    pub fn describe(self) -> &'static str {
        use ErrorCode::*;
        match self {
            ConnectionLoss => {
                "the connection to ZooKeeper was lost; the operation may or may not have run"
            }
            OperationTimeout => "no reply in time; the operation may or may not have run",
            SessionExpired => "the session expired; its ephemeral nodes are gone",
            SessionMoved => "the session moved to another server",
            NoNode => "the node does not exist",
            NodeExists => "the node already exists",
            NotEmpty => "the node has children",
            BadVersion => "the node's version does not match",
            NoAuth => "not authorized",
            AuthFailed => "the server rejected the client's authentication",
            NoChildrenForEphemerals => "ephemeral nodes cannot have children",
            InvalidAcl => "invalid ACL",
            NotReadOnly => "a write sent to a read-only server",
            BadArguments => "invalid arguments",
            MarshallingError => "a request or reply could not be encoded or decoded",
            Throttled => "the server is throttling requests",
            QuotaExceeded => "a quota was exceeded",
            _ => "see ZooKeeper's KeeperException.Code",
        }
    }
}

impl fmt::Display for ErrorCode {
    /// The code's name (`NoNode`, `ConnectionLoss`, ...).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Everything that can go wrong in latchkey.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// ZooKeeper answered with an error code; `path` is the path the
    /// operation named, when it named one.
    Zk {
        /// The error code.
        code: ErrorCode,
        /// The (namespace-relative) path of the operation.
        path: Option<String>,
    },
    /// A path that ZooKeeper would refuse; nothing was sent.
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why it is invalid.
        reason: String,
    },
    /// An argument outside its allowed range; nothing was done.
    InvalidArgument(String),
    /// The call is not valid in the current state (for example releasing a
    /// lock this thread does not hold).
    IllegalState(String),
    /// The client was closed.
    Closed,
    /// The call was cancelled by its caller (a recipe's cancel token) and
    /// undid what it had done.
    Cancelled,
    /// A reply that could not be decoded.
    Marshalling(&'static str),
    /// An I/O error outside a session (for example resolving a host).
    Io(std::io::Error),
    /// The client had no connection to ZooKeeper within the time one
    /// attempt may wait. Its code is `ConnectionLoss` (so the retry loop
    /// retries it); it says why the last attempt to connect failed.
    NotConnected {
        /// Why the last attempt to connect failed (the host did not
        /// resolve, the connection was refused or timed out, a bad
        /// handshake), if one failed.
        last_attempt: Option<String>,
    },
    /// The client did not connect within the time
    /// `Client::block_until_connected_or_err` was given; it keeps trying
    /// in the background. Its code is `ConnectionLoss`.
    ConnectTimeout {
        /// The connect string the client was built with.
        connect_string: String,
        /// How long the call waited.
        waited: std::time::Duration,
        /// Why the last attempt to connect failed (the host did not
        /// resolve, the connection was refused or timed out, a bad
        /// handshake), if one failed.
        last_attempt: Option<String>,
    },
    /// A client operation failed: names the operation and the path it was
    /// given; the error itself (usually [`Error::Zk`]) is its `source()`,
    /// and [`Error::code`] and [`Error::is`] look through to it.
    Operation {
        /// The operation, such as `"create"`.
        op: &'static str,
        /// The (namespace-relative) path the operation was given.
        path: String,
        /// What went wrong.
        source: Box<Error>,
    },
    /// The operation did not finish by the deadline of the handle it ran
    /// on (see `Client::with_deadline`); a write may or may not have taken
    /// effect. Its code is `OperationTimeout`.
    Timeout {
        /// The operation, such as `"create"`.
        op: &'static str,
        /// The (namespace-relative) path of the operation.
        path: Option<String>,
        /// The last error before the deadline (say, `ConnectionLoss`), if any.
        source: Option<Box<Error>>,
    },
    /// The request was never written to the server: its deadline passed
    /// while it waited to be sent, behind earlier requests or, with `cap`,
    /// behind a connection whose unsent requests had reached that many
    /// bytes (`ClientBuilder::max_unsent_bytes`). It was not applied, and
    /// trying it again is safe. Its code is `OperationTimeout`; see
    /// [`Error::is_unsent`].
    Unsent {
        /// The cap on unsent bytes the request waited behind, if that is
        /// what kept it from being sent.
        cap: Option<usize>,
    },
    /// A request longer than the servers accept (`jute.maxbuffer`, see
    /// `ClientBuilder::max_request_size`); it was not sent and the
    /// connection is untouched.
    RequestTooLarge {
        /// The operation, by its ZooKeeper name (`create`, `setData`, ...).
        operation: &'static str,
        /// The server path it named, shortened to its first 200 bytes.
        path: String,
        /// The request's size in bytes.
        size: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The server rejected the client's authentication: a refused SASL
    /// login (a wrong password, an unknown user) or an auth packet of a
    /// scheme it does not know. Its code is `AuthFailed`.
    AuthFailed {
        /// What was refused, and by which server.
        reason: String,
    },
    /// ZooKeeper refused a transaction because one of its operations
    /// failed, and changed nothing. Its code is the failing operation's.
    TransactionFailed {
        /// The failing operation's position in the transaction, from 0.
        index: usize,
        /// The failing operation (`create`, `setData`, `delete`, `check`).
        op: &'static str,
        /// The (namespace-relative) path the failing operation was given.
        path: String,
        /// Why ZooKeeper refused it.
        code: ErrorCode,
    },
    /// A fenced write (`Client::set_data_fenced`) was refused because its
    /// fence node no longer exists: the hold it stood for (a lock, a
    /// leadership) has ended, and someone else may hold it now. Nothing
    /// was changed. Its code is `NoNode`.
    FenceGone {
        /// The operation, such as `"set_data"`.
        op: &'static str,
        /// The (namespace-relative) path it would have written.
        path: String,
        /// The fence node, as the write named it.
        fence: String,
    },
}

impl Error {
    pub(crate) fn from_code(code: ErrorCode) -> Self {
        Error::Zk { code, path: None }
    }

    /// A timeout whose operation and path the caller fills in.
    pub(crate) fn timeout(last: Error) -> Self {
        Error::Timeout {
            op: "",
            path: None,
            source: Some(Box::new(last)),
        }
    }

    /// Names the operation and path of an error from ZooKeeper, or of a
    /// timeout that does not name them yet. Errors that already say what
    /// they are about (bad input, closed client) stay as they are.
    pub(crate) fn for_op(self, name: &'static str, user_path: &str) -> Self {
        match self {
            e @ (Error::Zk { .. }
            | Error::Marshalling(_)
            | Error::NotConnected { .. }
            | Error::Unsent { .. }
            | Error::AuthFailed { .. }) => Error::Operation {
                op: name,
                path: user_path.to_owned(),
                source: Box::new(e),
            },
            Error::Timeout {
                op: "",
                path: None,
                source,
            } => Error::Timeout {
                op: name,
                path: Some(user_path.to_owned()),
                source,
            },
            other => other,
        }
    }

    pub(crate) fn with_path(self, path: &str) -> Self {
        match self {
            Error::Zk { code, path: None } => Error::Zk {
                code,
                path: Some(path.to_owned()),
            },
            other => other,
        }
    }

    /// The ZooKeeper error code, if this error came from ZooKeeper.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Zk { code, .. } => Some(*code),
            Error::Operation { source, .. } => source.code(),
            Error::Timeout { .. } | Error::Unsent { .. } => Some(ErrorCode::OperationTimeout),
            Error::NotConnected { .. } | Error::ConnectTimeout { .. } => {
                Some(ErrorCode::ConnectionLoss)
            }
            Error::TransactionFailed { code, .. } => Some(*code),
            Error::FenceGone { .. } => Some(ErrorCode::NoNode),
            Error::AuthFailed { .. } => Some(ErrorCode::AuthFailed),
            _ => None,
        }
    }

    /// Whether this is ZooKeeper's `code`.
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code() == Some(code)
    }

    /// Whether the request was certainly never written to the server (see
    /// [`Error::Unsent`]), looking through the operation and timeout that
    /// wrap it: not applied, so trying it again is safe. False means the
    /// operation failed for another reason, or may have been applied.
    pub fn is_unsent(&self) -> bool {
        match self {
            Error::Unsent { .. } => true,
            Error::Operation { source, .. } => source.is_unsent(),
            Error::Timeout {
                source: Some(e), ..
            } => e.is_unsent(),
            _ => false,
        }
    }

    /// Whether the retry loop may try the operation again: connection loss,
    /// operation timeout, session moved and session expired (Curator's
    /// `RetryLoop.shouldRetry`).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.code(),
            Some(
                ErrorCode::ConnectionLoss
                    | ErrorCode::OperationTimeout
                    | ErrorCode::SessionMoved
                    | ErrorCode::SessionExpired
            )
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Zk {
                code,
                path: Some(p),
            } => write!(f, "{code} at {p} ({})", code.describe()),
            Error::Zk { code, path: None } => write!(f, "{code} ({})", code.describe()),
            Error::Operation { op, path, source } => {
                write!(f, "{op} {path}: ")?;
                match &**source {
                    // The code first; the path only where it is another one.
                    Error::Zk { code, path: p } => {
                        write!(f, "{code}")?;
                        if let Some(p) = p.as_deref().filter(|p| p != path) {
                            write!(f, " at {p}")?;
                        }
                        write!(f, " ({})", code.describe())
                    }
                    other => write!(f, "{other}"),
                }
            }
            Error::InvalidPath { path, reason } => write!(f, "invalid path {path:?}: {reason}"),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::IllegalState(m) => write!(f, "illegal state: {m}"),
            Error::Closed => write!(f, "the client is closed"),
            Error::Cancelled => write!(f, "the call was cancelled"),
            Error::Marshalling(m) => write!(f, "malformed reply: {m}"),
            Error::Io(e) => write!(f, "I/O error: {e}"),
            Error::AuthFailed { reason } => write!(f, "AuthFailed: {reason}"),
            Error::NotConnected { last_attempt } => {
                write!(f, "ConnectionLoss: not connected to ZooKeeper")?;
                match last_attempt {
                    Some(why) => write!(f, " ({why})"),
                    None => Ok(()),
                }
            }
            Error::ConnectTimeout {
                connect_string,
                waited,
                last_attempt,
            } => {
                write!(
                    f,
                    "ConnectionLoss: not connected to ZooKeeper at {connect_string} within {waited:?}"
                )?;
                match last_attempt {
                    Some(why) => write!(f, " (last attempt: {why})"),
                    None => write!(f, " (no attempt to connect has failed yet)"),
                }
            }
            Error::Timeout { op, path, source } => {
                match path {
                    Some(p) => write!(f, "{op} {p}: ")?,
                    None => write!(f, "{op}: ")?,
                }
                write!(f, "not done by the deadline")?;
                match source {
                    Some(e) => write!(f, " (last error: {e})"),
                    None => Ok(()),
                }
            }
            Error::Unsent { cap: None } => write!(
                f,
                "not sent by the deadline (it waited behind earlier requests); \
                 not applied, safe to retry"
            ),
            Error::Unsent { cap: Some(cap) } => write!(
                f,
                "not sent by the deadline: the connection's unsent requests were at \
                 their cap of {cap} bytes (max_unsent_bytes); not applied, safe to retry"
            ),
            Error::RequestTooLarge {
                operation,
                path,
                size,
                max,
            } => write!(
                f,
                "{operation} {path}: request of {size} bytes is over the {max}-byte limit \
                 (jute.maxbuffer); not sent"
            ),
            Error::TransactionFailed {
                index,
                op,
                path,
                code,
            } => write!(
                f,
                "transaction: operation {index} ({op} {path}) failed: {code} ({}); \
                 nothing was changed",
                code.describe()
            ),
            Error::FenceGone { op, path, fence } => write!(
                f,
                "{op} {path}: refused, its fence {fence} is gone (the hold ended); \
                 nothing was changed"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            Error::Operation { source, .. } => Some(&**source),
            Error::Timeout {
                source: Some(e), ..
            } => Some(&**e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

/// latchkey's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_codes_have_names() {
        assert_eq!(ErrorCode::from_wire(-12), ErrorCode::UnknownSession);
        assert_eq!(ErrorCode::from_wire(-115), ErrorCode::AuthFailed);
        assert_eq!(ErrorCode::from_wire(-999), ErrorCode::Unknown(-999));
    }
}

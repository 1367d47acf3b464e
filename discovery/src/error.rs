//! The crate's error: ZooKeeper's, or an instance that cannot be read or
//! written as Curator's JSON.

use std::fmt;

/// What went wrong in a discovery call.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A ZooKeeper call failed (it names the operation and path).
    ZooKeeper(latchkey_framework::Error),
    /// A node's data is not an instance this discovery can read: not JSON,
    /// not an object, a field of the wrong type, or a payload that is not
    /// of the payload type.
    BadInstance {
        /// The node (or `"<bytes>"` when decoding bytes alone).
        path: String,
        /// Why, as serde_json or the decoder tells it.
        reason: String,
    },
    /// An instance could not be written as JSON (its payload's `Serialize`
    /// failed).
    Serialize {
        /// The instance's name and id.
        instance: String,
        /// Why.
        reason: String,
    },
    /// [`update_service`](crate::ServiceDiscovery::update_service) of an
    /// instance this discovery did not register.
    NotRegistered {
        /// The instance's service name.
        name: String,
        /// The instance's id.
        id: String,
    },
    /// An argument was refused (an empty name, a name with `/`, a bad
    /// base path, a malformed uri spec).
    InvalidArgument(String),
    /// The discovery, cache or provider was closed, or not started.
    IllegalState(String),
}

/// The crate's result.
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ZooKeeper(e) => write!(f, "{e}"),
            Error::BadInstance { path, reason } => {
                write!(f, "{path} is not a service instance: {reason}")
            }
            Error::Serialize { instance, reason } => {
                write!(f, "cannot write the instance {instance} as JSON: {reason}")
            }
            Error::NotRegistered { name, id } => {
                write!(f, "the instance {name}/{id} is not registered here")
            }
            Error::InvalidArgument(s) => write!(f, "invalid argument: {s}"),
            Error::IllegalState(s) => write!(f, "illegal state: {s}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::ZooKeeper(e) => Some(e),
            _ => None,
        }
    }
}

impl From<latchkey_framework::Error> for Error {
    fn from(e: latchkey_framework::Error) -> Self {
        Error::ZooKeeper(e)
    }
}

impl Error {
    /// Whether this is ZooKeeper's error `code`.
    pub fn is(&self, code: latchkey_framework::ErrorCode) -> bool {
        matches!(self, Error::ZooKeeper(e) if e.is(code))
    }
}

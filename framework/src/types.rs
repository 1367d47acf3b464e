//! Plain data types of the API: node stats, create modes, watch events.

use std::time::Duration;

/// A node's metadata (ZooKeeper's `Stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stat {
    /// The zxid of the change that created the node. It only grows, so the
    /// czxid of a lock node is a fencing token.
    pub czxid: i64,
    /// The zxid of the last change to the node's data.
    pub mzxid: i64,
    /// Creation time, milliseconds since the epoch.
    pub ctime: i64,
    /// Last modification time, milliseconds since the epoch.
    pub mtime: i64,
    /// Number of changes to the data.
    pub version: i32,
    /// Number of changes to the children.
    pub cversion: i32,
    /// Number of changes to the ACL.
    pub aversion: i32,
    /// The session id of the owner if the node is ephemeral, else 0.
    pub ephemeral_owner: i64,
    /// Length of the data.
    pub data_length: i32,
    /// Number of children.
    pub num_children: i32,
    /// The zxid of the last change to the children.
    pub pzxid: i64,
}

/// How a node is created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CreateMode {
    /// Lives until deleted.
    #[default]
    Persistent,
    /// Deleted when the creating session ends.
    Ephemeral,
    /// Persistent, with a 10-digit sequence number appended to the name.
    PersistentSequential,
    /// Ephemeral, with a 10-digit sequence number appended to the name.
    EphemeralSequential,
    /// Deleted by the server some time after its last child goes.
    Container,
    /// Persistent, but deleted by the server once it has had no children
    /// and no change for the given time (ZooKeeper 3.5.3+, servers with
    /// `zookeeper.extendedTypesEnabled=true`). Curator's
    /// `withTtl(ms).withMode(PERSISTENT_WITH_TTL)`. The TTL is whole
    /// milliseconds from 1 ms to 2^40 - 1 ms.
    PersistentWithTtl(Duration),
    /// [`CreateMode::PersistentWithTtl`] with a sequence number appended.
    PersistentSequentialWithTtl(Duration),
}

impl CreateMode {
    pub(crate) fn flags(self) -> i32 {
        match self {
            CreateMode::Persistent => 0,
            CreateMode::Ephemeral => 1,
            CreateMode::PersistentSequential => 2,
            CreateMode::EphemeralSequential => 3,
            CreateMode::Container => 4,
            CreateMode::PersistentWithTtl(_) => 5,
            CreateMode::PersistentSequentialWithTtl(_) => 6,
        }
    }

    /// The TTL in milliseconds of a TTL mode; an error says why a TTL is
    /// out of ZooKeeper's range (1 ms to 2^40 - 1 ms).
    pub(crate) fn ttl_ms(self) -> Result<Option<i64>, String> {
        const MAX_TTL_MS: u128 = (1 << 40) - 1;
        let ttl = match self {
            CreateMode::PersistentWithTtl(t) | CreateMode::PersistentSequentialWithTtl(t) => t,
            _ => return Ok(None),
        };
        match ttl.as_millis() {
            0 => Err(format!("a TTL of {ttl:?} is under 1 ms")),
            ms if ms > MAX_TTL_MS => Err(format!("a TTL of {ttl:?} is over 2^40 - 1 ms")),
            ms => Ok(Some(ms as i64)),
        }
    }

    /// Whether the server appends a sequence number.
    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl(_)
        )
    }

    /// Whether the node ends with its session.
    pub fn is_ephemeral(self) -> bool {
        matches!(
            self,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential
        )
    }
}

/// What a watch saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventType {
    /// The node was created.
    NodeCreated,
    /// The node was deleted.
    NodeDeleted,
    /// The node's data changed.
    NodeDataChanged,
    /// The node's children changed.
    NodeChildrenChanged,
    /// The watch was removed (`Client::remove_watches`) before it fired:
    /// a data or exists watch.
    DataWatchRemoved,
    /// A children watch was removed before it fired.
    ChildWatchRemoved,
    /// A persistent watch was removed; it fires no more.
    PersistentWatchRemoved,
    /// The session that set the watch is gone, so the watch will never fire
    /// for a node event; re-read and watch again.
    SessionExpired,
    /// An event type this version does not know.
    Other(i32),
}

impl EventType {
    pub(crate) fn from_wire(t: i32) -> Self {
        match t {
            1 => EventType::NodeCreated,
            2 => EventType::NodeDeleted,
            3 => EventType::NodeDataChanged,
            4 => EventType::NodeChildrenChanged,
            5 => EventType::DataWatchRemoved,
            6 => EventType::ChildWatchRemoved,
            7 => EventType::PersistentWatchRemoved,
            other => EventType::Other(other),
        }
    }
}

/// A watch notification: what happened, and to which (namespace-relative) path.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchedEvent {
    /// What happened.
    pub event_type: EventType,
    /// The node it happened to.
    pub path: String,
}

impl WatchedEvent {
    /// An event from its parts.
    pub fn new(event_type: EventType, path: impl Into<String>) -> WatchedEvent {
        WatchedEvent {
            event_type,
            path: path.into(),
        }
    }
}

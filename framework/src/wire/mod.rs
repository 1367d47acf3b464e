//! latchkey's own ZooKeeper wire client: the only code that speaks the
//! protocol. It keeps one session alive across reconnects (auth re-sent,
//! watches re-armed, silence detected) and reports when the session ends.

pub(crate) mod clock;
pub(crate) mod conn;
pub(crate) mod connect;
pub(crate) mod engine;
pub(crate) mod jute;
pub(crate) mod live;
pub(crate) mod multi;
pub(crate) mod outbox;
pub(crate) mod proto;
pub(crate) mod sasl;
pub(crate) mod session;
pub(crate) mod slot;
pub(crate) mod transport;
pub(crate) mod watches;

pub(crate) use sasl::SaslDigest;
pub(crate) use session::{
    WireConfig, WireEvent, WireSession, DEFAULT_MAX_REPLY, DEFAULT_MAX_UNSENT, JUTE_MAXBUFFER,
};
pub(crate) use transport::TlsSettings;
pub(crate) use watches::{
    GroupMark, RemoveKind, WatchGroup, WatchKind, WatchRegistration, Watcher,
};

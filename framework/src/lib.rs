//! # latchkey-framework
//!
//! A blocking ZooKeeper client in the manner of Apache Curator's
//! `CuratorFramework`: connection states with Curator's meanings, retry
//! policies and the retry loop, namespaces, ACLs, digest auth,
//! protected-mode create and guaranteed delete.
//!
//! It speaks ZooKeeper's protocol itself over plain sockets: one session
//! survives reconnects with its watches re-armed and its auth re-sent, a
//! silent server is noticed within 2/3 of the session timeout, and a session
//! that is gone is reported as [`ConnectionState::Lost`] and replaced.
//!
//! ```no_run
//! use std::time::Duration;
//! use latchkey_framework::{Client, CreateMode, RetryNTimes};
//!
//! let client = Client::builder()
//!     .connect_string("127.0.0.1:2181")
//!     .retry_policy(RetryNTimes::new(3, Duration::from_millis(100)))
//!     .build()?;
//! client.start()?;
//! client.block_until_connected_or_err(Duration::from_secs(5))?;
//! client.create().creating_parents_if_needed().mode(CreateMode::Ephemeral).for_path("/app/me", b"hi")?;
//! let (data, _stat) = client.get_data("/app/me")?;
//! assert_eq!(data, b"hi");
//! client.close();
//! # Ok::<(), latchkey_framework::Error>(())
//! ```
//!
//! ## Observability
//!
//! [`Client::metrics`] returns counters a service can export (requests,
//! retries, reconnects, sessions lost, ...). The optional `tracing` feature
//! (off by default; without it no `tracing` code is compiled in) adds a
//! debug span `operation` per operation (`op`, `path`, `attempts`,
//! `outcome`, `error`) and an info event `connection state changed` per
//! connection-state change (`state`).

// Layers, each using only those before it: `wire` (the protocol and one
// session) -> `ops` (one operation over a session) -> `background` and
// `client` (sessions, states, the retry loop) -> `builders` (the public,
// namespaced, retried operations).
mod acl;
mod auth;
mod background;
mod builders;
mod cancel;
mod client;
pub mod compression;
mod deadline;
mod error;
mod extended;
mod lazy_thread;
mod metrics;
mod ops;
pub mod paths;
pub mod retry;
mod sched;
mod state;
mod tls;
mod trace;
mod transaction;
mod types;
mod watchers;
mod wire;

/// The channel end [`Client::listen`] returns (from `crossbeam-channel`).
pub use crossbeam_channel::Receiver;

pub use acl::{Acl, AclProvider, DefaultAclProvider, FixedAclProvider, Id, Perms};
pub use builders::{CreateBuilder, DeleteBuilder, HANDOVER_AFTER};
pub use cancel::{CancelToken, OnCancel};
pub use client::{Client, ClientBuilder, WeakClient};
pub use error::{Error, ErrorCode, Result};
pub use extended::ClientInfo;
pub use metrics::ClientMetrics;
pub use retry::{
    BoundedExponentialBackoffRetry, ExponentialBackoffRetry, RetryForever, RetryNTimes,
    RetryOneTime, RetryPolicy, RetryUntilElapsed, SessionFailedRetryPolicy,
};
pub use state::{
    ConnectionState, ConnectionStateErrorPolicy, ListenerHandle, SessionConnectionStateErrorPolicy,
    StandardConnectionStateErrorPolicy,
};
pub use tls::TlsConfig;
pub use transaction::{MultiRead, OperationType, ReadResult, Transaction, TransactionResult};
pub use types::{CreateMode, EventType, Stat, WatchedEvent};
pub use watchers::{AddWatchMode, WatcherType};

/// This crate's README (its page on crates.io): its Rust examples are
/// compiled by `cargo test --doc -p latchkey-framework`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

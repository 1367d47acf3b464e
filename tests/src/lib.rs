//! latchkey-test: the real-ZooKeeper harness behind latchkey's integration
//! tests and examples. Nothing here is a mock.
//!
//! - [`TestingServer`]: one standalone ZooKeeper 3.8 (Debian's `zookeeper`
//!   package, run with Java 17) on a free 127.0.0.1 port in a temp dir;
//!   stop, kill, restart on the same port and data, four-letter words, log
//!   tail.
//! - [`TestingCluster`]: an N-member ensemble on loopback; stop, kill and
//!   restart members, find the leader, wait for a quorum.
//! - [`FaultProxy`]: a TCP proxy in front of a server that can pause
//!   (partition), cut, delay and refuse connections.
//! - [`fake_server::FakeServer`]: a scripted fake ZooKeeper for protocol
//!   faults a real server does not produce on demand.
//! - [`unique_path`]: a fresh znode path per test.
//! - [`linearizable`]: whether a recorded history is linearizable under a
//!   sequential model (the randomized checker's histories).
//!
//! Needs `java` and `/usr/share/java/zookeeper.jar`
//! (`apt-get install -y zookeeper openjdk-17-jre-headless`); without them
//! starts fail at once with that advice. `LATCHKEY_JAVA` and
//! `LATCHKEY_ZK_CLASSPATH` override the Java binary and the classpath.
//!
//! Servers default to `tickTime=200`, `minSessionTimeout=400` and
//! `maxSessionTimeout=60000` (see [`ServerConfig`]), so tests can use
//! session timeouts from 400 ms up.

pub mod cluster;
pub mod fake_server;
mod jvm;
pub mod linearizable;
pub mod peers;
pub mod proxy;
pub mod server;
pub mod tls;

pub use cluster::TestingCluster;
pub use proxy::FaultProxy;
pub use server::{four_letter_word, unique_path, ServerConfig, ServerTls, TestingServer};
pub use tls::{ClientAuth, TestCerts};

/// The workspace README's Rust examples, compiled (and, unless `no_run`,
/// run) by `cargo test --doc -p latchkey-test`, which sees both the
/// framework and the recipes. Compiled for doctests only, so the README
/// outside the crate's directory is read only in the workspace.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

//! Curator's `SharedCount`: an `i32` kept in one node as 4 big-endian bytes,
//! read and set by every process, each copy kept current by a data watch.
//! A thin layer on the machinery of [`SharedValue`](crate::SharedValue), as
//! in Curator.

use crossbeam_channel::Receiver;
use latchkey_framework::{Client, Error, Result};

use crate::fence::{Fence, Fenced};
use crate::shared::shared_value::{ChangeHook, Codec, Shared, VersionedValue};

impl Codec for i32 {
    const WHAT: &'static str = "shared count";
    fn decode(path: &str, data: &[u8]) -> Result<Self> {
        decode(path, data)
    }
    fn encode(&self) -> Vec<u8> {
        self.to_be_bytes().to_vec()
    }
}

/// A counter shared by every process that uses the same path, wire-compatible
/// with Curator's `SharedCount` (the node holds the count as a 4-byte
/// big-endian `i32`).
///
/// Each `SharedCount` watches its node from a thread of its own and caches
/// the latest value it has seen, so [`count`](SharedCount::count) never
/// waits on ZooKeeper. After a connection-state change it reads the node
/// again, since a change may have been missed. Data that is not 4 bytes long
/// leaves the cached value as it was (a warning is logged), and the count
/// follows again once the node holds a valid count.
///
/// Clones share one cache and one watch, which stop when
/// [`close`](SharedCount::close) is called or the last clone is dropped.
///
/// ```no_run
/// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
/// use latchkey_recipes::SharedCount;
///
/// let workers = SharedCount::new(client, "/config/workers", 4)?; // 4 if the node is new
/// let changes = workers.listen();
/// workers.set_count(workers.count() + 1)?;
///
/// // Compare-and-set: only if nobody changed it since we read it.
/// let seen = workers.versioned_value();
/// if !workers.try_set_count(&seen, seen.value * 2)? {
///     println!("someone else changed it first; now {}", workers.count());
/// }
/// for count in changes.try_iter() {
///     println!("count is now {count}");
/// }
/// # Ok(()) }
/// ```
///
/// # In-doubt writes and close
///
/// As [`SharedValue`](crate::SharedValue)'s: the seed's create, retried,
/// takes a `NodeExists` as the node being there;
/// [`set_count`](Self::set_count) is retried without a version and may be
/// applied twice (the same count, two versions on);
/// [`try_set_count`](Self::try_set_count) never reports an applied write
/// as `false`. [`close`](Self::close) deletes nothing and
/// does not wait; the watch on the node stays until the node next changes
/// or the session ends, and then wakes nobody.
#[derive(Clone)]
pub struct SharedCount {
    shared: Shared<i32>,
}

impl SharedCount {
    /// Opens the count at `path`, creating the node (and its parents, as
    /// containers, as Curator does) with `seed` if it does not exist, and
    /// starts watching it.
    ///
    /// Fails if the client is not started or ZooKeeper cannot be reached,
    /// and with [`Error::IllegalState`] if the node holds something other
    /// than a 4-byte count.
    pub fn new(client: &Client, path: &str, seed: i32) -> Result<SharedCount> {
        let shared = Shared::new(client, path, seed)?;
        shared.start("latchkey-shared-count")?;
        Ok(SharedCount { shared })
    }

    /// The path of the count's node.
    pub fn path(&self) -> &str {
        self.shared.path()
    }

    /// The latest count seen (from the cache; never waits).
    pub fn count(&self) -> i32 {
        self.shared.with_value(|v| *v)
    }

    /// The latest count seen, with its node version.
    pub fn versioned_value(&self) -> VersionedValue {
        self.shared.versioned_value()
    }

    /// Sets the count, whatever it was. Fails with `NoNode` if the node was
    /// deleted, and with [`Error::IllegalState`] after
    /// [`close`](SharedCount::close).
    pub fn set_count(&self, count: i32) -> Result<()> {
        self.shared.set_value(count, None)
    }

    /// Sets the count only if the node still holds `previous`: the same
    /// value written by the same change (`zxid`), at the same version
    /// (compare-and-set). `Ok(false)` if someone changed it since, even to
    /// an equal value or by deleting and re-creating the node; the cache
    /// is then current, so [`versioned_value`](Self::versioned_value) gives
    /// a fresh value to retry with.
    ///
    /// As in Curator, `previous` is first compared with the cache; unlike
    /// Curator, the node is then read once more, so a change the cache has
    /// not heard of yet is refused too. Only a delete and re-create that
    /// lands between that read and the write, and reaches the same version,
    /// would go unnoticed. Version -1 (which ZooKeeper takes as "any
    /// version") is refused with [`Error::InvalidArgument`].
    ///
    /// `Ok(false)` always means this write was not applied, so a loop that
    /// retries on `false` increments once. When the connection broke after
    /// the write was sent and the node cannot tell whether it was (it holds
    /// this count one version on, or has moved further), the error is
    /// `ConnectionLoss`, "may or may not have run"; Curator reports `false`
    /// there, even when its write was applied.
    pub fn try_set_count(&self, previous: &VersionedValue, count: i32) -> Result<bool> {
        self.shared.try_set_value(previous, count, None)
    }

    /// This count with its writes fenced by `fence`, a hold such as a
    /// [`Leadership`](crate::Leadership) or a
    /// [`MutexGuard`](crate::MutexGuard): each set through it is applied
    /// only while the hold stands, in one transaction with a check of the
    /// hold's node, and fails with [`Error::FenceGone`] once the hold has
    /// ended (another process may hold it now). Curator has no such write;
    /// without it, a leader's write delayed by an outage can land after
    /// the next leader's.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// use latchkey_framework::Error;
    /// use latchkey_recipes::{InterProcessMutex, SharedCount};
    ///
    /// let epoch = SharedCount::new(client, "/config/epoch", 0)?;
    /// let mutex = InterProcessMutex::new(client, "/config/lock")?;
    /// let guard = mutex.lock()?;
    /// match epoch.fenced(&guard).set_count(epoch.count() + 1) {
    ///     Ok(()) => println!("epoch {}", epoch.count()),
    ///     Err(Error::FenceGone { .. }) => println!("lost the lock: not written"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn fenced<'a>(&'a self, fence: &'a dyn Fence) -> Fenced<'a, SharedCount> {
        Fenced::new(self, fence)
    }

    /// A channel that receives every new count, in the order they were seen;
    /// counts set in quick succession may arrive as only the last one. A
    /// write of the same value is a new count (a new version); a
    /// reconnection is not (Curator's listeners hear the value again after
    /// each reconnection; these hear only what changed meanwhile). The
    /// listener goes away with the receiver (at the next change after it is
    /// dropped). Connection states come from [`Client::listen`].
    pub fn listen(&self) -> Receiver<i32> {
        self.shared.listen_with(|v| v.value)
    }

    /// Stops watching the node; [`count`](Self::count) keeps the last value
    /// and setting fails from now on. Idempotent; affects every clone.
    pub fn close(&self) {
        self.shared.close();
    }

    /// Calls `hook` with each new count on the watch thread; it must return
    /// at once. For recipes that wake a waiter on a change.
    pub(crate) fn on_change(&self, hook: impl Fn(i32) + Send + Sync + 'static) -> ChangeHook {
        self.shared.on_change(move |v| hook(v.value))
    }
}

impl Fenced<'_, SharedCount> {
    /// [`SharedCount::set_count`], applied only while the fence stands.
    pub fn set_count(&self, count: i32) -> Result<()> {
        self.recipe.shared.set_value(count, Some(self.fence))
    }

    /// [`SharedCount::try_set_count`], applied only while the fence
    /// stands: `Ok(false)` when someone changed the count since
    /// `previous`, [`Error::FenceGone`] when the hold has ended.
    pub fn try_set_count(&self, previous: &VersionedValue, count: i32) -> Result<bool> {
        self.recipe
            .shared
            .try_set_value(previous, count, Some(self.fence))
    }
}

impl std::fmt::Debug for SharedCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.versioned_value();
        f.debug_struct("SharedCount")
            .field("path", &self.path())
            .field("value", &v.value)
            .field("version", &v.version)
            .finish()
    }
}

/// Decodes a count; Curator writes it as a big-endian `i32`.
fn decode(path: &str, data: &[u8]) -> Result<i32> {
    let bytes: [u8; 4] = data.try_into().map_err(|_| {
        Error::IllegalState(format!(
            "{path} holds {} bytes, not a shared count (a 4-byte big-endian i32)",
            data.len()
        ))
    })?;
    Ok(i32::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_four_big_endian_bytes() {
        assert_eq!(decode("/c", &[0, 0, 1, 2]).unwrap(), 258);
        assert_eq!(decode("/c", &[0xff; 4]).unwrap(), -1);
        assert_eq!(decode("/c", &i32::MIN.to_be_bytes()).unwrap(), i32::MIN);
        assert_eq!(Codec::encode(&258), [0, 0, 1, 2]);
        for bad in [&b""[..], b"abc", b"abcde"] {
            match decode("/c", bad) {
                Err(Error::IllegalState(m)) => {
                    assert!(m.contains(&format!("{} bytes", bad.len())), "{m}")
                }
                other => panic!("{bad:?} decoded as {other:?}"),
            }
        }
    }
}

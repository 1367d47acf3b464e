//! Fenced writes: a write that ZooKeeper applies only while a hold (a
//! lock, a leadership) stands, so that one delayed by an outage cannot land
//! after someone else took over.

use latchkey_framework::{paths, Client, Error, Result};

/// A hold that writes can be fenced by: a node that exists exactly while
/// the hold stands, such as a lock node. A write fenced by it is one
/// transaction with a check that the node exists, which ZooKeeper orders
/// before the node's deletion or refuses; it fails with
/// [`Error::FenceGone`] once the hold has ended.
///
/// Implemented by [`MutexGuard`](crate::MutexGuard),
/// [`Leadership`](crate::Leadership) and
/// [`LeaderLatch`](crate::LeaderLatch) (while it leads); the recipes that
/// write take it in their `fenced` views, as
/// [`SharedCount::fenced`](crate::SharedCount::fenced).
///
/// A node is a sound fence when no other holder can exist while it does:
/// a lock node or a leader's node (sequential: no node created later can
/// sort ahead of it). An implementation for another hold must keep that.
pub trait Fence {
    /// The fence node's full path on the server (the namespace of the
    /// hold's client included), or an error when there is no hold to
    /// fence by now.
    fn fence_path(&self) -> Result<String>;

    /// The fence node as a path of `client` (its namespace taken off), to
    /// pass to [`Client::set_data_fenced`] or [`Client::create_fenced`];
    /// [`Error::InvalidArgument`] when the node lies outside `client`'s
    /// namespace. Not meant to be overridden.
    fn path_in(&self, client: &Client) -> Result<String> {
        let full = self.fence_path()?;
        let namespace = client.namespace();
        let relative = paths::strip_namespace(namespace, &full);
        if namespace.is_some() && relative == full {
            return Err(Error::InvalidArgument(format!(
                "the fence {full} is outside this client's namespace {}",
                namespace.unwrap_or_default()
            )));
        }
        Ok(relative)
    }
}

/// `fence`'s node as a path of `client`, for a write through `client`;
/// an error naming `op` and `path` when the node lies outside that
/// namespace.
pub(crate) fn fence_for(
    client: &Client,
    fence: &dyn Fence,
    op: &str,
    path: &str,
) -> Result<String> {
    fence.path_in(client).map_err(|e| match e {
        Error::InvalidArgument(why) => Error::InvalidArgument(format!("{op} {path}: {why}")),
        other => other,
    })
}

/// The full path of `node`, a path of `client`.
pub(crate) fn full_path(client: &Client, node: &str) -> String {
    paths::fix_for_namespace(client.namespace(), node)
}

/// A recipe whose writes are fenced by a hold, from the recipe's `fenced`
/// ([`SharedCount::fenced`](crate::SharedCount::fenced),
/// [`SharedValue::fenced`](crate::SharedValue::fenced)): each write
/// through it is applied only while the hold stands, and fails with
/// [`Error::FenceGone`], changing nothing, once it has ended.
pub struct Fenced<'a, R> {
    pub(crate) recipe: &'a R,
    pub(crate) fence: &'a dyn Fence,
}

impl<'a, R> Fenced<'a, R> {
    pub(crate) fn new(recipe: &'a R, fence: &'a dyn Fence) -> Self {
        Fenced { recipe, fence }
    }
}

impl<R> Clone for Fenced<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Fenced<'_, R> {}

impl<R: std::fmt::Debug> std::fmt::Debug for Fenced<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fenced")
            .field("recipe", self.recipe)
            .field("fence", &self.fence.fence_path().ok())
            .finish()
    }
}

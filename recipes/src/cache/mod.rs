//! Local copies of ZooKeeper data kept current by watches (Curator's
//! `recipes.cache`): [`NodeCache`](crate::NodeCache) for one node and
//! [`CuratorCache`](crate::CuratorCache) for a subtree.

pub(crate) mod curator_cache;
pub(crate) mod node_cache;

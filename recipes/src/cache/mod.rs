//! Local copies of ZooKeeper data kept current by watches (Curator's
//! `recipes.cache`): [`NodeCache`](crate::NodeCache) for one node,
//! [`CuratorCache`](crate::CuratorCache) for a subtree, and Curator 4's
//! classic-watch caches, [`PathChildrenCache`](crate::PathChildrenCache)
//! for a node's children and [`TreeCache`](crate::TreeCache) for a
//! subtree, on one engine (`classic`).

pub(crate) mod classic;
pub(crate) mod curator_cache;
pub(crate) mod node_cache;
pub(crate) mod path_children_cache;
pub(crate) mod tree_cache;

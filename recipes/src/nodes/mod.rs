//! Nodes kept in place through connection and session loss (Curator's
//! `recipes.nodes`): [`PersistentNode`](crate::PersistentNode) and
//! [`GroupMember`](crate::GroupMember) on it, and
//! [`PersistentTtlNode`](crate::PersistentTtlNode), a TTL node kept alive by
//! touching a TTL child.

pub(crate) mod persistent_node;
pub(crate) mod persistent_ttl_node;

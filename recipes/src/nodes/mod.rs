//! Nodes kept in place through connection and session loss (Curator's
//! `recipes.nodes`): [`PersistentNode`](crate::PersistentNode) and
//! [`GroupMember`](crate::GroupMember) on it.

pub(crate) mod persistent_node;

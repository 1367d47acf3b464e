//! Shared values that every client sees and can set with a version check
//! (Curator's `recipes.shared`): [`SharedCount`](crate::SharedCount).

pub(crate) mod shared_count;

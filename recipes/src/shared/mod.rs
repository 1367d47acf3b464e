//! Shared values that every client sees and can set with a version check
//! (Curator's `recipes.shared`): [`SharedValue`](crate::SharedValue) (bytes)
//! and [`SharedCount`](crate::SharedCount) (an `i32`), a thin layer on the
//! same machinery.

pub(crate) mod shared_count;
pub(crate) mod shared_value;

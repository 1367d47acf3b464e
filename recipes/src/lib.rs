//! latchkey-recipes

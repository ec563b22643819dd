//! The `tern status` sidebar view. (Being written.)

//! The `bash` tool. (Being written: see the helper's brief.)

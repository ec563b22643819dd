//! The `<tern:work_state>` block. (Being written.)

//! sse (being written).

//! http (being written).

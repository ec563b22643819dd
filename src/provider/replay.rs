//! replay (being written).

//! anthropic (being written).

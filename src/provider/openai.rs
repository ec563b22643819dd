//! openai (being written).

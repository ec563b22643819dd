//! Tool output shaping: sanitising and bounding what the model reads. (Being written.)

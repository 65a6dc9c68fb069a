//! Miss-ratio curves (exact LRU by stack distance; SHARDS sampling).

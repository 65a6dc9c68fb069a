//! Eviction policies, one file each.

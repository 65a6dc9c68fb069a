//! Deterministic workload generators (filled in by the generators work).

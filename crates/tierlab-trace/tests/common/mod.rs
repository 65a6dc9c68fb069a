//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use tierlab_trace::{IoRecord, ReadOptions, RecordStream, TraceReader};

/// `../shared/traces` beside the repository (or `$TIERLAB_SHARED_TRACES`);
/// `None`, with a message, when absent — users' clones do not have it.
pub fn shared_traces() -> Option<PathBuf> {
    let dir = std::env::var_os("TIERLAB_SHARED_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces")
        });
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED: the shared trace folder {} is absent (set TIERLAB_SHARED_TRACES to run these tests)",
            dir.display()
        );
        None
    }
}

pub fn read_all(
    path: &std::path::Path,
    options: &ReadOptions,
) -> (Vec<IoRecord>, Vec<String>, tierlab_trace::TimeBase) {
    let mut r = TraceReader::open(path, options).unwrap_or_else(|e| panic!("{e}"));
    let mut v = Vec::new();
    while let Some(rec) = r.next_record().unwrap_or_else(|e| panic!("{e}")) {
        v.push(rec);
    }
    (v, r.devices().names().to_vec(), r.time_base())
}

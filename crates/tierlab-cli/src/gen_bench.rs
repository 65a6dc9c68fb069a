//! Which generators `tierlab bench` measures, with their targets.

use tierlab_trace::RecordStream;
use tierlab_trace::generate::{KvParams, from_spec};

use crate::CliResult;

/// (generator or preset name, target records/s). The target is
/// 20 M records/s for the generators; boot-storm merges per-VM streams
/// through a heap and has no target.
pub fn generators() -> Vec<(&'static str, Option<f64>)> {
    vec![
        ("uniform", Some(20e6)),
        ("zipf", Some(20e6)),
        ("sequential", Some(20e6)),
        ("mixed", Some(20e6)),
        ("io-concentration", Some(20e6)),
        ("atsmf.src1_0", Some(20e6)),
        ("file-share", Some(20e6)),
        ("backup", Some(20e6)),
        ("hswd.hm_0", Some(20e6)),
        ("boot-storm", None),
    ]
}

pub fn make(name: &str, records: u64) -> CliResult<Box<dyn RecordStream>> {
    let params = KvParams::parse([format!("count={records}")])?;
    Ok(from_spec(name, &params, 1)?)
}

//! Which generators `tierlab bench` measures (wired to tierlab_trace::generate).

use tierlab_trace::RecordStream;

use crate::CliResult;

/// (generator name, target records/s).
pub fn generators() -> Vec<(&'static str, Option<f64>)> {
    Vec::new()
}

pub fn make(name: &str, _records: u64) -> CliResult<Box<dyn RecordStream>> {
    Err(format!("generator {name} is not available").into())
}

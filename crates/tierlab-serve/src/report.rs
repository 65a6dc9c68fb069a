//! What `tierlab serve` reports: the `serve` section of summary.json (and
//! the exit line), defined key by key in docs/serve.md.

use std::path::Path;

use serde::Serialize;

/// What the server did, for summary.json (`serve`) and the exit line.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServeReport {
    pub uri: String,
    pub export_size_bytes: u64,
    pub block_min_bytes: u32,
    pub block_preferred_bytes: u32,
    pub block_max_bytes: u32,
    /// Tier names: `tierlab:tier` extent flags index them.
    pub tiers: Vec<String>,
    pub connections: u64,
    pub connections_open: u64,
    pub connections_open_max: u64,
    /// Connections that ended with a protocol violation (bad magic, ...).
    pub protocol_errors: u64,
    pub requests: RequestCounts,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub bytes_zeroed: u64,
    pub bytes_trimmed: u64,
    /// Barriers that made every backing store durable (FLUSH, FUA).
    pub durability_barriers: u64,
    /// Store syncs those barriers skipped: nothing was written to the
    /// store since its last successful flush.
    pub syncs_skipped: u64,
    /// Requests that waited for an overlapping write or trim in flight.
    pub requests_held_for_ordering: u64,
    /// Requests whose client left before the reply.
    pub replies_dropped: u64,
    /// Requests answered with an error (EIO, ENOSPC) because a backing
    /// store's IO failed and the policy survived it
    /// (`real.device_errors` counts those device IOs).
    pub requests_failed: u64,
    /// Requests that arrived after a stop began, answered ESHUTDOWN.
    pub requests_refused_stopping: u64,
    pub serving_s: f64,
    /// Seconds from the stop request to the policy holding no dirty data
    /// (or, at a warm stop, to its FLUSH done).
    pub drain_s: f64,
    /// The stop only flushed the policy, whose cache survives a restart
    /// (`Policy::restarts_warm`; `--write-back-on-stop` turns it off).
    pub warm_stop: bool,
    /// Host IOs written by `--record`.
    pub recorded_ios: u64,
    /// Why the server stopped: `SIGINT`, `SIGTERM` or `stop requested`.
    pub stopped_by: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct RequestCounts {
    pub read: u64,
    pub write: u64,
    pub flush: u64,
    pub trim: u64,
    pub write_zeroes: u64,
    pub block_status: u64,
    pub fua: u64,
}

/// `tierlab run`'s files for a served stack, plus `serve` in summary.json.
pub(crate) fn write_into(
    dir: &Path,
    result: &tierlab_real::RealResult,
    report: &ServeReport,
) -> std::io::Result<()> {
    tierlab_real::write_outputs(result, dir)?;
    let path = dir.join("summary.json");
    let mut summary: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    summary["serve"] = serde_json::to_value(report)?;
    std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")
}

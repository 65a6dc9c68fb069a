//! crashcheck.json: a [`Report`] with every violation and the command that
//! replays it, as `tierlab crashcheck --out DIR` writes it.

use std::path::{Path, PathBuf};

use crate::{CrashError, Report, StateKind};

/// The report as JSON. `config` names the stack's config, `seed` is the
/// run's seed, and `replay` the command line that replays this run (each
/// violation's replay adds `--replay POINT:KIND` to it).
pub fn report_json(config: &str, seed: u64, r: &Report, replay: &str) -> serde_json::Value {
    serde_json::json!({
        "config": config,
        "policy": r.policy,
        "seed": seed,
        "host_writes": r.host_writes,
        "host_flushes": r.host_flushes,
        "device_writes": r.device_writes,
        "device_flushes": r.device_flushes,
        "log_events": r.log_events,
        "crash_points": r.crash_points,
        "states": r.states(),
        "states_by_kind": StateKind::ALL.iter().zip(r.states_by_kind).map(|(k, n)| (k.as_str().to_string(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>(),
        "sectors_checked": r.sectors_checked,
        "degraded_reads": r.degraded_reads,
        "host_ios_failed": r.host_ios_failed,
        "stopped_at_error": r.stopped_at_error,
        "volatile_stores": r.volatile_stores,
        "violations": r.violations.iter().map(|v| serde_json::json!({
            "crash_point": v.crash_point,
            "kind": v.kind.as_str(),
            "state_seed": v.state_seed,
            "sector": v.sector,
            "message": v.message,
            "unflushed_writes": v.unflushed_writes,
            "writes_applied": v.writes_applied,
            "torn": v.torn,
            "replay": format!("{replay} --replay {}:{}", v.crash_point, v.kind.as_str()),
        })).collect::<Vec<_>>(),
    })
}

/// Writes [`report_json`] to `dir/crashcheck.json` (creating `dir`) and
/// returns the file's path; errors name the path.
pub fn write_report_json(
    dir: &Path,
    config: &str,
    seed: u64,
    r: &Report,
    replay: &str,
) -> Result<PathBuf, CrashError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CrashError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join("crashcheck.json");
    let json = report_json(config, seed, r, replay);
    let text = serde_json::to_string_pretty(&json)
        .map_err(std::io::Error::other)
        .map_err(io(&path))?;
    std::fs::write(&path, text + "\n").map_err(io(&path))?;
    Ok(path)
}

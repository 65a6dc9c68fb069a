//! `--record` then replay: a mixed workload served through NBD (several
//! connections: reads, writes, zeroing, trims, flushes) is recorded, then
//! the trace is replayed by the simulator over the same stack (same
//! `[policy]` table, device models of the same capacities). The served
//! run's summary.json (`--out`) and the simulation must agree on the
//! requests exactly (count, op mix, bytes) and on where they were served
//! (per-tier counts and the policy's hit counters) within 5 % — for ATSMF
//! only when both make the same decisions, which needs the same device
//! timing (see `atsmf_record_replays_to_the_same_requests_and_tiers`).
//!
//! Also: the trace is readable while the server still runs, after a stats
//! interval (checkpointed), and holds exactly the IOs sent by then, with or
//! without `--out`, and stays readable between checkpoints.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use tierlab_serve::{ServeOptions, ServeReport};

const PAGE: u64 = 4096;

/// What one connection sent.
#[derive(Clone, Copy, Debug, Default)]
struct Sent {
    reads: u64,
    writes: u64,
    zeroes: u64,
    trims: u64,
    flushes: u64,
    read_bytes: u64,
    write_bytes: u64,
    zero_bytes: u64,
    trim_bytes: u64,
}

impl Sent {
    fn add(&mut self, o: &Sent) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.zeroes += o.zeroes;
        self.trims += o.trims;
        self.flushes += o.flushes;
        self.read_bytes += o.read_bytes;
        self.write_bytes += o.write_bytes;
        self.zero_bytes += o.zero_bytes;
        self.trim_bytes += o.trim_bytes;
    }
    /// Host IOs the stack receives: a zeroing ≤ 1 MiB is one write.
    fn host_ios(&self) -> u64 {
        self.reads + self.writes + self.zeroes + self.trims + self.flushes
    }
}

/// Where a workload's IOs go: `hot_share` of them into the hot ranges,
/// the rest anywhere below `span_bytes`.
#[derive(Clone)]
struct Shape {
    hot: Vec<(u64, u64)>,
    hot_share_pct: u64,
    span_bytes: u64,
    /// Pause between IOs (pacing for time-driven policies).
    pause: Duration,
    /// Share of writes sent FUA (percent).
    fua_pct: u64,
}

/// One connection's mixed workload: until `ops` IOs or `until`, whichever
/// first. Depth 1; every read of a page this connection wrote last is
/// checked against what it wrote.
fn drive(sock: &Path, seed: u64, ops: u64, until: Instant, shape: &Shape) -> Sent {
    let mut c = Client::connect(sock);
    let mut rng = Rng::new(seed);
    let mut sent = Sent::default();
    for i in 0..ops {
        if Instant::now() >= until {
            break;
        }
        let pages = [1u64, 1, 1, 2, 2, 4, 8, 16][rng.below(8) as usize];
        let len = pages * PAGE;
        let at = if rng.below(100) < shape.hot_share_pct {
            let (base, size) = shape.hot[rng.below(shape.hot.len() as u64) as usize];
            base + rng.below((size - len) / PAGE + 1) * PAGE
        } else {
            rng.below((shape.span_bytes - len) / PAGE + 1) * PAGE
        };
        match rng.below(100) {
            0..55 => {
                c.read(at, len as u32).expect("read");
                sent.reads += 1;
                sent.read_bytes += len;
            }
            55..88 => {
                let fua = if rng.below(100) < shape.fua_pct {
                    CMD_FLAG_FUA
                } else {
                    0
                };
                assert_eq!(
                    c.write_flags(fua, at, &pattern(seed << 32 | i, len as usize)),
                    0
                );
                sent.writes += 1;
                sent.write_bytes += len;
            }
            88..92 => {
                assert_eq!(c.write_zeroes(0, at, len as u32), 0);
                sent.zeroes += 1;
                sent.zero_bytes += len;
            }
            92..96 => {
                assert_eq!(c.trim(at, len as u32), 0);
                sent.trims += 1;
                sent.trim_bytes += len;
            }
            _ => {
                assert_eq!(c.flush(), 0);
                sent.flushes += 1;
            }
        }
        if !shape.pause.is_zero() {
            std::thread::sleep(shape.pause);
        }
    }
    c.disconnect();
    sent
}

/// `conns` connections in parallel.
fn drive_all(sock: &Path, seed: u64, conns: u64, ops: u64, until: Instant, shape: &Shape) -> Sent {
    let handles: Vec<_> = (0..conns)
        .map(|k| {
            let (sock, shape) = (sock.to_path_buf(), shape.clone());
            std::thread::spawn(move || drive(&sock, seed * 100 + k, ops, until, &shape))
        })
        .collect();
    let mut total = Sent::default();
    for h in handles {
        total.add(&h.join().expect("a workload thread"));
    }
    total
}

/// Records of a native trace, or why it cannot be read.
fn trace_records(path: &Path) -> Result<Vec<tierlab_trace::IoRecord>, String> {
    let reader =
        tierlab_trace::TraceReader::open(path, &Default::default()).map_err(|e| e.to_string())?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(
        &std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .expect("summary.json parses")
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("key {key} in {v}"))
}

/// The simulator's config: the stack's `[policy]` table as served, the
/// given device models, one tenant replaying the trace.
fn sim_toml(served_config: &Path, devices: &str, driver: &str) -> String {
    let text = std::fs::read_to_string(served_config).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    let policy = doc["policy"].as_table().expect("a [policy] table").clone();
    let mut policy_text = String::from("[policy]\n");
    policy_text.push_str(&toml::to_string(&policy).unwrap());
    format!(
        "seed = 1\n{devices}\n{policy_text}\n[[tenants]]\nname = \"nbd\"\nworkload = {{ trace = \"rec.tlt\" }}\ndriver = {driver}\n"
    )
}

fn simulate(dir: &Path, text: &str) -> tierlab_sim::run::RunResult {
    let config =
        tierlab_sim::config::parse(text, "replay", &[]).unwrap_or_else(|e| panic!("{e}\n{text}"));
    tierlab_sim::run::run(&config, dir).unwrap_or_else(|e| panic!("replay: {e}"))
}

/// Within `pct` percent of `served` (both zero counts as equal).
fn within(served: f64, replayed: f64, pct: f64) -> bool {
    (served - replayed).abs() <= served.abs().max(replayed.abs()) * pct / 100.0
}

/// Checks the request counts exactly; returns the (name, served, replayed)
/// of every per-tier and policy counter compared at 5 %.
fn compare(
    summary: &Value,
    sent: &Sent,
    records: &[tierlab_trace::IoRecord],
    sim: &tierlab_sim::run::RunResult,
    counters: &[&str],
) -> Vec<(String, f64, f64)> {
    let serve = &summary["serve"];
    // What the clients sent = what serve reports receiving.
    let req = &serve["requests"];
    assert_eq!(u(req, "read"), sent.reads);
    assert_eq!(u(req, "write"), sent.writes);
    assert_eq!(u(req, "write_zeroes"), sent.zeroes);
    assert_eq!(u(req, "trim"), sent.trims);
    assert_eq!(u(req, "flush"), sent.flushes);
    assert_eq!(u(serve, "bytes_read"), sent.read_bytes);
    assert_eq!(u(serve, "bytes_written"), sent.write_bytes);
    assert_eq!(u(serve, "bytes_zeroed"), sent.zero_bytes);
    assert_eq!(u(serve, "bytes_trimmed"), sent.trim_bytes);
    assert_eq!(u(serve, "recorded_ios"), sent.host_ios(), "recorded_ios");
    assert_eq!(
        records.len() as u64,
        sent.host_ios(),
        "records in the trace"
    );

    // The served run's metrics = the replay's, exactly.
    let m = &sim.metrics.total;
    let pairs = [
        ("ios", m.ios),
        ("read_ios", m.read_ios),
        ("write_ios", m.write_ios),
        ("trim_ios", m.trim_ios),
        ("flush_ios", m.flush_ios),
        ("read_bytes", m.read_bytes),
        ("write_bytes", m.write_bytes),
        ("trim_bytes", m.trim_bytes),
    ];
    for (key, replayed) in pairs {
        assert_eq!(
            u(summary, key),
            replayed,
            "{key}: served (summary.json) vs replayed"
        );
    }
    assert_eq!(m.ios, sent.host_ios());
    assert_eq!(m.read_ios, sent.reads);
    assert_eq!(m.write_ios, sent.writes + sent.zeroes);
    assert_eq!(m.write_bytes, sent.write_bytes + sent.zero_bytes);
    assert_eq!(m.trim_ios, sent.trims);
    assert_eq!(m.flush_ios, sent.flushes);
    assert_eq!(sim.info.host_ios_unfinished, 0);

    let mut compared = Vec::new();
    let tiers = summary["tiers"].as_array().expect("tiers in summary.json");
    assert_eq!(tiers.len(), sim.metrics.tiers.len(), "tier count");
    for (t, st) in tiers.iter().zip(&sim.metrics.tiers) {
        assert_eq!(t["name"].as_str(), Some(st.name.as_str()));
        for (k, replayed) in [
            ("read_ios", st.io.read_ios),
            ("write_ios", st.io.write_ios),
            ("ios", st.io.ios),
        ] {
            compared.push((
                format!("tiers.{}.{k}", st.name),
                u(t, k) as f64,
                replayed as f64,
            ));
        }
    }
    let served_counters = &summary["run"]["policy_counters"];
    for &k in counters {
        let served = served_counters[k]
            .as_f64()
            .unwrap_or_else(|| panic!("policy counter {k} in summary.json: {served_counters}"));
        let replayed = sim.info.policy_counters[k]
            .as_f64()
            .expect("the same counter in the replay");
        compared.push((format!("policy.{k}"), served, replayed));
    }
    compared
}

fn report_and_check(what: &str, compared: &[(String, f64, f64)], checked: &[&str]) {
    eprintln!("{what}: served vs replayed");
    let mut off = Vec::new();
    for (k, s, r) in compared {
        let diff = if *s == 0.0 { 0.0 } else { (r - s) / s * 100.0 };
        let mark = if within(*s, *r, 5.0) { "" } else { "  > 5 %" };
        eprintln!("  {k:32} {s:>10} {r:>10}  {diff:+6.2} %{mark}");
        if checked.iter().any(|c| k == c) && !within(*s, *r, 5.0) {
            off.push(format!("{k}: served {s}, replayed {r}"));
        }
    }
    assert!(off.is_empty(), "{what}: beyond 5 %: {off:?}");
}

fn record_opts(dir: &Path, stats_interval_s: f64) -> (ServeOptions, PathBuf, PathBuf) {
    let out = dir.join("out");
    let rec = dir.join("rec.tlt");
    let opts = ServeOptions {
        out_dir: Some(out.clone()),
        record: Some(rec.clone()),
        stats_interval_s,
        ..ServeOptions::default()
    };
    (opts, out, rec)
}

/// A folder for the outputs and the trace (the server's own folder is
/// created by the helper that starts it, after the options are built).
fn own_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn write_back_cache_record_replays_to_the_same_requests_and_hits() {
    let work = own_dir();
    let (opts, out, rec) = record_opts(work.path(), 0.5);
    let srv = serve_config("serve-cache.toml", opts);
    // A hot 12 MiB (fits the 32 MiB cache) and a 128 MiB span (does not).
    let shape = Shape {
        hot: vec![(16 << 20, 12 << 20)],
        hot_share_pct: 75,
        span_bytes: 128 << 20,
        pause: Duration::ZERO,
        fua_pct: 10,
    };
    let far = Instant::now() + Duration::from_secs(60);
    let mut sent = drive_all(&srv.sock, 1, 4, 700, far, &shape);

    // Checkpointed while serving: after a stats interval the trace holds
    // exactly what was sent so far.
    std::thread::sleep(Duration::from_millis(1200));
    assert!(srv.is_running());
    let mid = trace_records(&rec).expect("the trace is readable while the server runs");
    assert_eq!(
        mid.len() as u64,
        sent.host_ios(),
        "records after a checkpoint"
    );
    assert!(
        mid.windows(2).all(|w| w[0].time_ns <= w[1].time_ns),
        "times in order"
    );
    assert!(
        out.join("summary.json").exists(),
        "summary.json written at the stats interval"
    );

    sent.add(&drive_all(&srv.sock, 2, 4, 700, far, &shape));
    let report: ServeReport = srv.stop();
    assert_eq!(report.recorded_ios, sent.host_ios());
    assert_eq!(report.protocol_errors, 0);

    let records = trace_records(&rec).expect("the finished trace");
    let conns: std::collections::HashSet<u32> = records.iter().map(|r| r.device_id).collect();
    assert_eq!(
        conns.len(),
        8,
        "one device id per connection (conn0..conn7)"
    );
    let summary = read_json(&out.join("summary.json"));

    let devices = r#"
[[devices]]
name = "cache"
model = "ssd"
preset = "intel-p3700"
capacity_bytes = 33554432
[[devices]]
name = "backing"
model = "ssd"
preset = "intel-p3700"
capacity_bytes = 268435456
"#;
    let text = sim_toml(
        &configs_dir().join("serve-cache.toml"),
        devices,
        r#"{ mode = "afap", iodepth = 4 }"#,
    );
    let sim = simulate(work.path(), &text);
    let compared = compare(
        &summary,
        &sent,
        &records,
        &sim,
        &["read_hits", "read_misses", "write_hits", "write_misses"],
    );
    report_and_check(
        "write-back cache",
        &compared,
        &[
            "tiers.cache.ios",
            "tiers.backing.ios",
            "policy.read_hits",
            "policy.write_hits",
        ],
    );
}

/// ATSMF's decisions, one per line of atsmf_decisions.csv: (period,
/// decision, first sub-LUN), for the periods before `until_period`.
fn atsmf_decisions(csv: &str, until_period: u64) -> Vec<(u64, String, String)> {
    csv.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let period: u64 = f.get(1)?.parse().ok()?;
            (period < until_period).then(|| (period, f[2].to_string(), f[4].to_string()))
        })
        .collect()
}

/// Serves configs/serve-atsmf.toml (with `overrides`), drives ~5.5 s of
/// paced IO concentrated on three 4 MiB sub-LUNs, replays the recording in
/// the simulator open-loop at speed 1 (ATSMF decides per period of time:
/// an afap replay would squeeze ~5 s into milliseconds, so no period would
/// end while IOs arrive — printed for comparison), and compares.
///
/// Returns whether the served run and the replay made the same decisions
/// in the periods the served run lived through, and the compared numbers.
fn atsmf_case(overrides: &[&str], model_timing: bool) -> (bool, Vec<(String, f64, f64)>) {
    let (same, compared, _, _) = atsmf_case_logs(overrides, model_timing);
    (same, compared)
}

/// As `atsmf_case`, also returning both decision logs (served, replayed).
fn atsmf_case_logs(
    overrides: &[&str],
    model_timing: bool,
) -> (bool, Vec<(String, f64, f64)>, String, String) {
    let work = own_dir();
    let (opts, out, rec) = record_opts(work.path(), 1.0);
    let opts = ServeOptions {
        model_timing,
        ..opts
    };
    let srv = serve_config_with("serve-atsmf.toml", overrides, opts, |_| {});
    let shape = Shape {
        hot: vec![
            (12 << 20, 4 << 20),
            (40 << 20, 4 << 20),
            (100 << 20, 4 << 20),
        ],
        hot_share_pct: 90,
        span_bytes: 256 << 20,
        pause: Duration::from_micros(300),
        // No FUA here: a served FUA write also goes through a FLUSH of the
        // policy (ATSMF then writes memory back and holds moves), which
        // the replay does not see (FUA is a flag trace readers ignore), so
        // the tier split would differ for that reason alone. FUA
        // durability is durability.rs's.
        fua_pct: 0,
    };
    let until = Instant::now() + Duration::from_millis(5500);
    let sent = drive_all(&srv.sock, 3, 4, u64::MAX, until, &shape);
    let report = srv.stop();
    assert_eq!(report.recorded_ios, sent.host_ios());
    let records = trace_records(&rec).expect("the finished trace");
    let summary = read_json(&out.join("summary.json"));
    let served_counters = &summary["run"]["policy_counters"];
    assert!(
        served_counters["promotions"].as_f64().unwrap() > 0.0,
        "the served run promoted (else the test shows nothing): {served_counters}"
    );

    let devices = r#"
[[devices]]
name = "memory"
model = "memory"
preset = "ramdisk"
capacity_bytes = 37748736
[[devices]]
name = "flash"
model = "ssd"
preset = "intel-p3700"
capacity_bytes = 268435456
"#;
    let config = configs_dir().join("serve-atsmf.toml");
    let sim = simulate(
        work.path(),
        &sim_toml(&config, devices, r#"{ mode = "open", speed = 1.0 }"#),
    );
    let counters = [
        "memory_ios",
        "flash_ios",
        "promotions",
        "demotions",
        "periods",
    ];
    let compared = compare(&summary, &sent, &records, &sim, &counters);

    let afap = simulate(
        work.path(),
        &sim_toml(&config, devices, r#"{ mode = "afap", iodepth = 4 }"#),
    );
    let pc = &afap.info.policy_counters;
    eprintln!(
        "atsmf afap replay: memory_ios {} flash_ios {} promotions {}",
        pc["memory_ios"], pc["flash_ios"], pc["promotions"]
    );
    eprintln!(
        "atsmf: served {:.2} s, replayed {:.2} s of virtual time (the replay's periods run on \
         after the last IO; the served run drains at its stop)",
        report.serving_s, sim.info.simulated_s
    );
    let periods = served_counters["periods"].as_u64().unwrap();
    let served_log = std::fs::read_to_string(out.join("atsmf_decisions.csv")).unwrap();
    let sim_log = &sim
        .policy_logs
        .iter()
        .find(|(n, _)| *n == "atsmf_decisions.csv")
        .expect("the replay's decision log")
        .1;
    let (served_d, sim_d) = (
        atsmf_decisions(&served_log, periods),
        atsmf_decisions(sim_log, periods),
    );
    let same = served_d == sim_d;
    if !same {
        eprintln!("atsmf: the decisions differ.\nserved:\n{served_log}\nreplayed:\n{sim_log}");
    }
    (same, compared, served_log, sim_log.clone())
}

const ATSMF_TIERS: [&str; 4] = [
    "tiers.memory.ios",
    "tiers.flash.ios",
    "policy.memory_ios",
    "policy.flash_ios",
];

#[test]
fn atsmf_record_replays_to_the_same_requests_and_tiers() {
    // Over the config's stores (RAM and a file). Requests, op mix and
    // bytes are compared exactly. The per-tier split within 5 % holds only
    // when the replay makes the same promote/demote decisions: ATSMF
    // judges with measured latencies (avef_us, avem_us, the migration
    // cost), which are the real file's here (~300 µs under this test's
    // load) and the SSD model's in the replay (~80 µs) — so a decision may
    // differ for that reason alone (seen: a sub-LUN demoted in the replay,
    // held in memory when served; the split then differed by ~17 %). Then
    // the numbers and both decision logs are printed instead.
    let (same, compared) = atsmf_case(&[], false);
    if same {
        report_and_check("atsmf", &compared, &ATSMF_TIERS);
    } else {
        report_and_check(
            "atsmf (decisions differ: tiers reported, not checked)",
            &compared,
            &[],
        );
    }
}

#[test]
fn atsmf_with_model_timing_replays_to_the_same_tiers() {
    // The same, served with --model-timing over the replay's own models
    // (and the flash tier's store in RAM, so the model's time dominates):
    // the policy measures the same device latencies served and replayed,
    // so it promotes the same sub-LUNs. Moves are wall-clock chains of
    // chunk IOs whose next chunk starts when the loop wakes, so a served
    // move lasts longer than the model's (measured 7.5 vs 2.5 ms) and the
    // demote-or-hold rule, which weighs the move cost, may decide the
    // other way in a later period. The per-tier split must agree within
    // 5 % whenever every decision agrees (most runs); otherwise only that
    // rule may differ.
    let overrides = [
        "devices.0.model=memory",
        "devices.0.preset=ramdisk",
        "devices.0.capacity_bytes=37748736",
        "devices.1.model=ssd",
        "devices.1.preset=intel-p3700",
        "devices.1.capacity_bytes=268435456",
        "devices.1.path=ram",
    ];
    let (same, compared, served, replayed) = atsmf_case_logs(&overrides, true);
    // The flash latency the policy measured: the model's, served or not.
    let avef = |log: &str| -> f64 {
        log.lines()
            .nth(1)
            .expect("a decision in period 0")
            .split(',')
            .nth(11)
            .unwrap()
            .parse()
            .unwrap()
    };
    let (a, b) = (avef(&served), avef(&replayed));
    assert!(
        (a - b).abs() <= 0.15 * b,
        "avef_us served {a} vs replayed {b}: model timing must give the model's latency"
    );
    let promotions = |log: &str| -> Vec<String> {
        log.lines()
            .filter(|l| l.split(',').nth(1) == Some("0") && l.contains(",promote,"))
            .map(|l| l.split(',').nth(4).unwrap().to_string())
            .collect()
    };
    assert_eq!(
        promotions(&served),
        promotions(&replayed),
        "period 0's promotions"
    );
    if same {
        report_and_check("atsmf, model timing", &compared, &ATSMF_TIERS);
    } else {
        let differs = |l: &str| l.contains("demote") || l.contains("defer");
        let served_rest: Vec<&str> = served.lines().skip(1).filter(|l| !differs(l)).collect();
        assert!(
            served_rest.iter().all(|l| l.split(',').nth(1) == Some("0")),
            "decisions other than demote/hold/defer differ after period 0:\n{served}\n{replayed}"
        );
        report_and_check(
            "atsmf, model timing (a demote/hold decision differs: tiers reported, not checked)",
            &compared,
            &[],
        );
    }
}

/// A passthrough over RAM with `--record` (and `--out` when `with_out`),
/// stats every 2 s.
fn serve_recording(with_out: bool) -> (tempfile::TempDir, Running, PathBuf) {
    let work = own_dir();
    let (opts, _out, rec) = record_opts(work.path(), 2.0);
    let opts = if with_out {
        opts
    } else {
        ServeOptions {
            out_dir: None,
            ..opts
        }
    };
    let srv = serve_toml(
        "[[devices]]\nname = \"disk\"\npath = \"ram\"\ncapacity_bytes = \"64MiB\"\n",
        opts,
    );
    (work, srv, rec)
}

/// 10 writes and their 10 read-backs.
fn ten_writes(c: &mut Client) {
    for i in 0..10u64 {
        c.write_verify(i * PAGE, &pattern(i, PAGE as usize));
    }
}

#[test]
fn record_without_out_is_checkpointed_at_the_stats_interval() {
    let (_work, srv, rec) = serve_recording(false);
    let started = Instant::now();
    let mut c = Client::connect(&srv.sock);
    ten_writes(&mut c);
    // Idle past the first stats interval (2 s).
    std::thread::sleep(Duration::from_millis(2500).saturating_sub(started.elapsed()));
    let records = trace_records(&rec).expect("readable");
    assert_eq!(
        records.len(),
        20,
        "records on disk 2.5 s after start with --stats-interval-s 2 (the 20 IOs came at once)"
    );
    c.disconnect();
    srv.stop();
}

#[test]
fn the_trace_stays_readable_between_checkpoints() {
    // A kill -9 (or a reader) between two checkpoints must find at least
    // what the last checkpoint made readable ("a crash loses at most what
    // came after the last checkpoint", NativeWriter::checkpoint). With
    // --out, so the checkpoint at 2 s happens on time.
    let (_work, srv, rec) = serve_recording(true);
    let started = Instant::now();
    let mut c = Client::connect(&srv.sock);
    ten_writes(&mut c);
    std::thread::sleep(Duration::from_millis(2300).saturating_sub(started.elapsed()));
    let first = trace_records(&rec).expect("readable after the first checkpoint");
    assert_eq!(first.len(), 20, "10 writes and 10 reads");
    // 5000 more IOs, pipelined, well before the next checkpoint (4 s).
    for round in 0..50u64 {
        let mut b = Vec::new();
        for i in 0..100u64 {
            b.extend_from_slice(&request(
                0,
                CMD_READ,
                round * 100 + i + 1000,
                i * PAGE,
                PAGE as u32,
            ));
        }
        c.send(&b);
        for _ in 0..100 {
            let (e, _) = c.reply();
            assert_eq!(e, 0);
            let mut d = vec![0u8; PAGE as usize];
            std::io::Read::read_exact(&mut c.s, &mut d).unwrap();
        }
    }
    let read_at = started.elapsed();
    let between = trace_records(&rec);
    assert!(
        read_at < Duration::from_millis(3900),
        "the burst ended {read_at:?} after start: past the next checkpoint, the check means nothing"
    );
    if let Err(e) = &between {
        panic!(
            "the trace is unreadable {read_at:?} after start, 5000 IOs after the checkpoint at 2 s: {e}"
        );
    }
    let n = between.unwrap().len();
    assert!(
        n >= 20,
        "{n} records: fewer than the checkpoint made readable"
    );
    c.disconnect();
    let report = srv.stop();
    assert_eq!(report.recorded_ios, 5020);
    assert_eq!(trace_records(&rec).expect("the finished trace").len(), 5020);
}

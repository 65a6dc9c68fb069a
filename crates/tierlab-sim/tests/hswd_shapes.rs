//! The HSWD paper's shapes on small, fast stacks (spec/hswd.md, "the shape
//! to reproduce"), through the real config → build → run path:
//! - fully associative ≥ set-associative IOPS, with far lower max latency;
//! - MOST needs fewer RMWs than FIFO under pressure;
//! - a bigger PCache needs fewer RMWs;
//! - HSWD beats the drive-managed SMR disk (SSWD) under sustained random
//!   writes, with the same cache size;
//! - the NRegion never performs a read-modify-write of its own under HSWD
//!   (HSWD only writes whole bands), and the same run is deterministic.
//!
//! Sizes are the paper's divided by 32 (1 MiB bands) so each run takes well
//! under a second.

use std::path::Path;

use tierlab_core::device::DeviceState;
use tierlab_core::{Op, TimeNs};
use tierlab_sim::Observer;

#[derive(Default, Debug, PartialEq)]
struct Obs {
    ios: u64,
    sum_ns: u128,
    max_ns: u64,
    last_ns: u64,
}

impl Observer for Obs {
    fn host_io(&mut self, arrival: TimeNs, done: TimeNs, _: Op, _: u32, _: u16, _: u32) {
        self.ios += 1;
        self.sum_ns += (done - arrival) as u128;
        self.max_ns = self.max_ns.max(done - arrival);
        self.last_ns = self.last_ns.max(done);
    }
    fn device_submit(&mut self, _: usize, _: TimeNs) {}
    fn device_complete(&mut self, _: usize, _: TimeNs, _: TimeNs, _: Op, _: u32) {}
    fn device_state(&mut self, _: usize, _: TimeNs, _: DeviceState) {}
}

#[derive(Debug, PartialEq)]
struct Result {
    obs: Obs,
    policy: Vec<(&'static str, f64)>,
    device: Vec<(&'static str, f64)>,
}

impl Result {
    fn iops(&self) -> f64 {
        self.obs.ios as f64 * 1e9 / self.obs.last_ns as f64
    }
    fn get(&self, name: &str) -> f64 {
        self.policy
            .iter()
            .chain(&self.device)
            .find(|(k, _)| *k == name)
            .unwrap_or_else(|| panic!("no counter {name}"))
            .1
    }
}

fn run(text: &str) -> Result {
    let config = tierlab_sim::config::parse(text, "test.toml", &[]).unwrap();
    let mut sim = tierlab_sim::build::build(&config, Path::new(".")).unwrap();
    let mut obs = Obs::default();
    let outcome = sim.run(&mut obs, None).unwrap();
    assert_eq!(outcome.host_ios_unfinished, 0);
    Result {
        obs,
        policy: sim.policy().counters(),
        device: sim.devices().last().unwrap().counters(),
    }
}

const BAND: u64 = 1 << 20;

fn hswd(pcache: u64, mapping: &str, selection: &str, tenant: &str) -> String {
    format!(
        r#"
seed = 3
[[devices]]
model = "ssd"
preset = "intel-s3500"
[[devices]]
model = "smr"
band_bytes = {BAND}
[policy]
kind = "hswd"
pcache_bytes = {pcache}
band_bytes = {BAND}
mapping = "{mapping}"
band_selection = "{selection}"
{tenant}"#
    )
}

/// fio-like: random 4 KiB writes over `region` bytes, iodepth 31.
fn random_writes(region: u64, total: u64) -> String {
    format!(
        r#"
[[tenants]]
name = "fio"
workload = {{ generator = "uniform", params = {{ read_ratio = 0, size_bytes = 4096, region_size_bytes = {region}, rate_iops = 1000000, count = 10000000 }} }}
driver = {{ mode = "closed", iodepth = 31, total_bytes = {total} }}
"#
    )
}

/// The paper's Table 3 at 1/32: 8 MiB PCache (7 bands of data + the
/// RCache), 64 MiB region, 64 MiB of random writes.
#[test]
fn fully_associative_beats_set_associative_with_far_lower_max_latency() {
    let w = random_writes(64 * BAND, 64 * BAND);
    let fully = run(&hswd(8 * BAND, "fully", "most", &w));
    let set = run(&hswd(8 * BAND, "set", "most", &w));
    eprintln!(
        "fully {:.0} IOPS, max {} ns, {} RMW; set {:.0} IOPS, max {} ns, {} RMW",
        fully.iops(),
        fully.obs.max_ns,
        fully.get("rmw_count"),
        set.iops(),
        set.obs.max_ns,
        set.get("rmw_count")
    );
    assert_eq!(fully.obs.ios, 16_384);
    assert!(
        fully.iops() >= set.iops(),
        "{} < {}",
        fully.iops(),
        set.iops()
    );
    assert!(
        fully.obs.max_ns * 3 < set.obs.max_ns,
        "max latency: fully {} ns, set {} ns",
        fully.obs.max_ns,
        set.obs.max_ns
    );
    assert!(fully.get("rmw_count") < set.get("rmw_count"));
    // HSWD writes whole bands only: the SMR disk never had to RMW.
    for r in [&fully, &set] {
        assert_eq!(r.get("full_band_writes"), r.get("rmw_count"));
        assert!(r.device.iter().any(|(k, v)| *k == "rmw_count" && *v == 0.0));
    }
    // Same config and seed: the same results.
    assert_eq!(run(&hswd(8 * BAND, "fully", "most", &w)), fully);
}

/// A write-heavy trace-like workload (hswd.src2_0 at 1/32 of its size) in a
/// PCache of a fifth of its footprint.
fn src2(pcache: u64, selection: &str) -> Result {
    src2_with(pcache, selection, "")
}

/// `src2` with more `[policy]` keys.
fn src2_with(pcache: u64, selection: &str, policy_keys: &str) -> Result {
    let tenant = r#"
[[tenants]]
name = "src2_0"
workload = { generator = "hswd.src2_0", params = { scale = 0.03125, rate_iops = 400 } }
"#;
    run(&hswd(
        pcache,
        "fully",
        selection,
        &format!("{policy_keys}{tenant}"),
    ))
}

#[test]
fn most_needs_fewer_rmw_than_fifo_and_lru_under_pressure() {
    let fifo = src2(4 * BAND, "fifo");
    let lru = src2(4 * BAND, "lru");
    let most = src2(4 * BAND, "most");
    let (f, l, m) = (
        fifo.get("rmw_count"),
        lru.get("rmw_count"),
        most.get("rmw_count"),
    );
    eprintln!("RMWs: FIFO {f}, LRU {l}, MOST {m}");
    assert!(m > 0.0);
    assert!(m < f, "MOST {m} RMWs, FIFO {f}");
    assert!(m < l, "MOST {m} RMWs, LRU {l}");
    // MOST frees more per RMW.
    assert!(most.get("cleaned_bytes_per_rmw") > fifo.get("cleaned_bytes_per_rmw"));
}

#[test]
fn a_bigger_pcache_needs_fewer_rmw() {
    let counts: Vec<f64> = [4, 8, 12]
        .iter()
        .map(|m| src2(m * BAND, "most").get("rmw_count"))
        .collect();
    eprintln!("RMWs at 4 / 8 / 12 MiB: {counts:?}");
    assert!(
        counts[0] > counts[1] && counts[1] > counts[2],
        "RMWs at 4 / 8 / 12 MiB: {counts:?}"
    );
}

/// Sustained random writes, 8× the cache, over 256 bands: HSWD (8 MiB
/// PCache on the SSD) against an SSWD whose on-platter persistent cache is
/// as big, on the same mechanics.
#[test]
fn hswd_beats_sswd_under_sustained_random_writes() {
    let w = random_writes(256 * BAND, 64 * BAND);
    let h = run(&hswd(8 * BAND, "fully", "most", &w));
    let s = run(&format!(
        r#"
seed = 3
[[devices]]
model = "sswd"
preset = "sswd-7200-2tb"
band_bytes = {BAND}
persistent_cache_bytes = {}
ram_buffer_bytes = {}
max_append_bytes = 262144
{w}"#,
        8 * BAND,
        BAND
    ));
    eprintln!(
        "HSWD {:.0} IOPS ({} RMW), SSWD {:.0} IOPS ({} RMW)",
        h.iops(),
        h.get("rmw_count"),
        s.iops(),
        s.get("rmw_count")
    );
    assert!(s.get("rmw_count") > 0.0, "the SSWD's log must fill");
    assert!(
        h.iops() > s.iops(),
        "HSWD {} IOPS, SSWD {} IOPS",
        h.iops(),
        s.iops()
    );
}

/// `clean_in_write_path` only delays acknowledgements: under an open-loop
/// workload (arrivals do not depend on completions) every device IO is the
/// same, so the RMW count is equal, while writes that landed in a set
/// being cleaned return only once its cleaning ended.
#[test]
fn cleaning_in_the_write_path_delays_writes_and_nothing_else() {
    let behind = src2(4 * BAND, "most");
    let inline = src2_with(4 * BAND, "most", "clean_in_write_path = true\n");
    let (rmw, held) = (inline.get("rmw_count"), inline.get("writes_held"));
    eprintln!(
        "behind: mean {} ns; in the write path: mean {} ns, {held} of {} writes held, {rmw} RMWs",
        behind.obs.sum_ns / u128::from(behind.obs.ios),
        inline.obs.sum_ns / u128::from(inline.obs.ios),
        inline.get("write_misses") + inline.get("write_hits"),
    );
    assert_eq!(rmw, behind.get("rmw_count"));
    assert_eq!(behind.get("writes_held"), 0.0);
    assert!(held > 0.0 && rmw > 0.0);
    assert_eq!(inline.obs.ios, behind.obs.ios);
    assert_eq!(inline.get("write_hits"), behind.get("write_hits"));
    // Held writes waited for at least part of an RMW: the mean rises.
    assert!(inline.obs.sum_ns > behind.obs.sum_ns);
    assert!(inline.obs.max_ns >= behind.obs.max_ns);
}

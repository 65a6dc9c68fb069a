//! The HSWD paper's Table 3 and the claims of its Figs. 8–14 next to ours
//! (`paper_vs_ours.csv`), each difference with the run that measures why:
//! the mapping experiment's RMW time and stall counters, and variant
//! experiments in table.csv — `mapping-variants` (stalled sets cleaned
//! first), `policies-skewed` / `policies-clustered` (src2_0's numbers with
//! band-skewed offsets, with and without sequential streams),
//! `policies-slow-rmw` / `policies-clustered-slow-rmw` (the disk at the
//! paper's RMW rate), `policies-write-path` / `policies-clustered-write-path`
//! (writes wait for the cleaning they start), `systems-variants` (the SSWD with a log as small as
//! HSWD's PCache; hm_0 without its reads) and `systems-25iops`.

use tierlab_policies::hswd;

use super::{MIB, Row};
use crate::reproduce::paper_vs_ours::{Comparison, TOLERANCE, claim, numeric};

/// Table 3 (spec/hswd.md): fio random writes, 2 GiB of 4 KiB writes.
const FULLY_IOPS: f64 = 483.0;
const SET_IOPS: f64 = 387.0;
const FULLY_MEAN_MS: f64 = 64.1;
const SET_MEAN_MS: f64 = 80.0;
const FULLY_MAX_S: f64 = 4.0;
const SET_MAX_S: f64 = 26.2;
const FULLY_RMW: f64 = 274.0;
const SET_RMW: f64 = 351.0;
const FULLY_RUNTIME_S: f64 = 18.1 * 60.0;
const FIO_WRITES: f64 = (2u64 << 30) as f64 / 4096.0;
/// Fig. 14: on hm_0 HSWD is this many times faster (mean response time).
const HM0_VS_SSWD: f64 = 2.25;
const HM0_VS_FLASHCACHE: f64 = 1.32;

/// The experiment names of the variant runs.
pub const MAPPING_VARIANTS: &str = "mapping-variants";
pub const POLICIES_SKEWED: &str = "policies-skewed";
pub const POLICIES_CLUSTERED: &str = "policies-clustered";
pub const POLICIES_CLUSTERED_SLOW_RMW: &str = "policies-clustered-slow-rmw";
pub const POLICIES_SLOW_RMW: &str = "policies-slow-rmw";
pub const POLICIES_WRITE_PATH: &str = "policies-write-path";
pub const POLICIES_CLUSTERED_WRITE_PATH: &str = "policies-clustered-write-path";
pub const SYSTEMS_VARIANTS: &str = "systems-variants";
pub const SYSTEMS_LOW_RATE: &str = "systems-25iops";
/// The low-rate variant's offered rate (experiment 3 runs at 100 IOPS).
pub const LOW_RATE_IOPS: f64 = 25.0;
/// Their workload / system names.
pub const STALLED_FIRST: &str = "hswd-stalled-first";
pub const SKEWED_WORKLOAD: &str = "src2_0-skewed-bands";
pub const CLUSTERED_WORKLOAD: &str = "src2_0-clustered-bands";
pub const SSWD_EQUAL_CACHE: &str = "sswd-equal-cache";
pub const HM0_WRITES_ONLY: &str = "hm_0-writes-only";

const PRESETS: [&str; 4] = ["mds_0", "prxy_0", "rsrch_0", "src2_0"];
const SIZES_MIB: [u64; 3] = [128, 256, 384];
const POLICIES: [&str; 3] = ["fifo", "lru", "most"];

fn find(rows: &[Row], pred: impl Fn(&Row) -> bool) -> Option<&Row> {
    rows.iter().find(|r| pred(r))
}

/// Experiment 2's run of `workload` with `policy` at the paper's `size_mib`.
fn policy_run<'a>(
    rows: &'a [Row],
    experiment: &str,
    workload: &str,
    policy: &str,
    size_mib: u64,
    scale: u64,
) -> Option<&'a Row> {
    find(rows, |r| {
        r.spec.experiment == experiment
            && r.spec.workload == workload
            && r.spec.policy == policy
            && r.spec.pcache_bytes == size_mib * MIB / scale
    })
}

fn rmw(r: &Row) -> f64 {
    r.rmw_count.unwrap_or(f64::NAN)
}

fn hit(r: &Row) -> f64 {
    r.write_hit_ratio.unwrap_or(f64::NAN)
}

/// `(fifo, lru, most)` of one workload at one size.
fn three<'a>(
    rows: &'a [Row],
    experiment: &str,
    workload: &str,
    size_mib: u64,
    scale: u64,
) -> Option<[&'a Row; 3]> {
    Some([
        policy_run(rows, experiment, workload, "fifo", size_mib, scale)?,
        policy_run(rows, experiment, workload, "lru", size_mib, scale)?,
        policy_run(rows, experiment, workload, "most", size_mib, scale)?,
    ])
}

fn describe(t: &[&Row; 3]) -> String {
    format!(
        "FIFO {} RMWs / {:.3} ms / hit {:.3}, LRU {} / {:.3} / {:.3}, MOST {} / {:.3} / {:.3}",
        rmw(t[0]),
        t[0].mean_latency_ms,
        hit(t[0]),
        rmw(t[1]),
        t[1].mean_latency_ms,
        hit(t[1]),
        rmw(t[2]),
        t[2].mean_latency_ms,
        hit(t[2])
    )
}

/// The media rate at which the paper's RMWs ran: Table 3's fully
/// associative run moved two 32 MiB band transfers per RMW (274 in 18.1
/// min, 3.96 s each), ~16.9 MB/s.
pub fn paper_rmw_rate_bytes_per_s() -> u64 {
    (2.0 * 32.0 * MIB as f64 / (FULLY_RUNTIME_S / FULLY_RMW)).round() as u64
}

/// `scale`: the quick run's size divisor of experiments 1–2 (8), else 1.
pub fn compare(rows: &[Row], scale: u64) -> Vec<Comparison> {
    let mut out = Vec::new();
    mapping(rows, &mut out);
    policies(rows, scale, &mut out);
    systems(rows, &mut out);
    out
}

fn mapping(rows: &[Row], out: &mut Vec<Comparison>) {
    let get = |m: &str| {
        find(rows, |r| {
            r.spec.experiment == "mapping" && r.spec.mapping == m
        })
    };
    let (Some(fully), Some(set)) = (get("fully"), get("set")) else {
        return;
    };
    // Both runs are RMW-bound (a 4 KiB SSD write costs nothing next to a
    // band RMW), so IOPS = writes per RMW / seconds per RMW.
    let runtime_s = fully.obs.last_done_ns as f64 / 1e9;
    let s_per_rmw = runtime_s / rmw(fully);
    let writes_per_rmw = fully.obs.ios as f64 / rmw(fully);
    let paper_s_per_rmw = FULLY_RUNTIME_S / FULLY_RMW;
    let paper_writes_per_rmw = FIO_WRITES / FULLY_RMW;
    out.push(numeric(
        "mapping_iops",
        "fio-randwrite fully",
        FULLY_IOPS,
        fully.iops,
        || {
            format!(
                "the RMW's duration, measured: both runs are RMW-bound (a 4 KiB SSD write costs \
                 nothing next to a band RMW), and IOPS = writes per RMW / seconds per RMW. Ours: \
                 {writes_per_rmw:.0} writes per RMW against the paper's {paper_writes_per_rmw:.0} \
                 (x{:.3}: a --quick run's bands are 8x smaller), {s_per_rmw:.3} s per RMW against \
                 {paper_s_per_rmw:.2} s (runtime {runtime_s:.1} s / {} RMWs; the paper's 18.1 min / \
                 274, and its max latency is one RMW, 4.0 s; x{:.1} faster). Our RMW is two \
                 sequential band transfers at the disk's rate plus the SSD reads; the paper's \
                 module copied a band at ~{:.0} MB/s (per-block synchronous IO, we suspect — \
                 not modelled)",
                writes_per_rmw / paper_writes_per_rmw,
                rmw(fully),
                paper_s_per_rmw / s_per_rmw,
                2.0 * 32.0 * 1.048_576 / paper_s_per_rmw,
            )
        },
    ));
    out.push(numeric(
        "mapping_fully_over_set_iops",
        "fio-randwrite",
        FULLY_IOPS / SET_IOPS,
        fully.iops / set.iops,
        || "not measured yet".to_string(),
    ));
    out.push(numeric(
        "mapping_set_over_fully_mean_latency",
        "fio-randwrite",
        SET_MEAN_MS / FULLY_MEAN_MS,
        set.mean_latency_ms / fully.mean_latency_ms,
        || "not measured yet".to_string(),
    ));
    out.push(numeric(
        "mapping_rmw_count",
        "fio-randwrite fully",
        FULLY_RMW,
        rmw(fully),
        || "not measured yet".to_string(),
    ));
    out.push(numeric(
        "mapping_rmw_count",
        "fio-randwrite set",
        SET_RMW,
        rmw(set),
        || "not measured yet".to_string(),
    ));
    // The worst write waits for RMWs of other sets: count them in RMWs.
    let in_rmws = |r: &Row| r.max_latency_ms / 1e3 / (r.obs.last_done_ns as f64 / 1e9 / rmw(r));
    let counter = |r: &Row, k: &str| r.policy_counter(k).unwrap_or(f64::NAN);
    let stalled_first = find(rows, |r| {
        r.spec.experiment == MAPPING_VARIANTS && r.spec.system == STALLED_FIRST
    });
    let paper_set_rmws = SET_MAX_S / paper_s_per_rmw;
    out.push(numeric(
        "mapping_set_over_fully_max_latency",
        "fio-randwrite",
        SET_MAX_S / FULLY_MAX_S,
        set.max_latency_ms / fully.max_latency_ms,
        || {
            let mut why = format!(
                "the order in which sets take the one RCache{}: in RMW times the set-associative \
                 worst write waited {:.1} RMWs here and {paper_set_rmws:.1} in the paper ({:.1} s / \
                 {paper_s_per_rmw:.2} s), the fully associative one {:.1} here (the RCache serves \
                 writes during an RMW) and 1.0 there. The longest stall here sat through {} RMWs, \
                 {} of them of its own set: the others cleaned sets queued ahead of it, each from \
                 the start threshold down to the stop threshold",
                if stalled_first.is_some() { ", measured" } else { "" },
                in_rmws(set),
                SET_MAX_S,
                in_rmws(fully),
                counter(set, hswd::counter::LONGEST_STALL_RMWS),
                counter(set, hswd::counter::LONGEST_STALL_OWN_SET_RMWS),
            );
            if let Some(v) = stalled_first {
                why.push_str(&format!(
                    ". With sets whose writes wait taking turns first, one RMW each \
                     ({MAPPING_VARIANTS}, {STALLED_FIRST}), the worst write waits {:.1} RMWs \
                     ({} RMWs, {} of its own set; max {:.3} s): the paper's {paper_set_rmws:.1} \
                     lies between the two orders (the paper does not say which its module \
                     followed)",
                    in_rmws(v),
                    counter(v, hswd::counter::LONGEST_STALL_RMWS),
                    counter(v, hswd::counter::LONGEST_STALL_OWN_SET_RMWS),
                    v.max_latency_ms / 1e3,
                ));
            } else {
                why.insert_str(0, "not measured yet: ");
            }
            why
        },
    ));
}

fn policies(rows: &[Row], scale: u64, out: &mut Vec<Comparison>) {
    let at = |w: &str, mib: u64| three(rows, "policies", w, mib, scale);
    let present: Vec<&str> = PRESETS
        .iter()
        .copied()
        .filter(|w| SIZES_MIB.iter().all(|&m| at(w, m).is_some()))
        .collect();
    if present.is_empty() {
        return;
    }
    let n = present.len() as f64;
    let skewed = three(rows, POLICIES_SKEWED, SKEWED_WORKLOAD, 128, scale);
    let skewed_sentence = |what: &str, holds_there: bool| match skewed {
        Some(t) if holds_there => format!(
            "uniform offsets, measured: the presets spread requests evenly over their footprint \
             (docs/generators.md), so every band collects cached blocks at the same rate — nothing \
             for {what} to exploit. On the band-skewed variant ({POLICIES_SKEWED}: src2_0's count, \
             mix and footprint, ~8 KiB requests, offsets from an unscrambled Zipf 0.99, 128 \
             MiB-equivalent PCache) the claim holds: {}",
            describe(&t)
        ),
        Some(t) => format!(
            "not measured yet: the suspected cause, uniform offsets (every band collects cached \
             blocks at the same rate, so the oldest band, FIFO's pick, is nearly always among the \
             fullest, MOST's), is not confirmed: on the band-skewed variant ({POLICIES_SKEWED}: \
             src2_0's count, mix and footprint, offsets from an unscrambled Zipf 0.99, 128 \
             MiB-equivalent PCache) the claim does not hold either — {}: MOST's greedy pick is the \
             hot band, whose blocks are soon rewritten, the weakness of greedy cleaning under \
             hot/cold skew. Which skew the paper's traces had is not known here",
            describe(&t)
        ),
        None => "not measured yet: the band-skewed variant did not run".to_string(),
    };
    // MOST: the lowest mean response time (the paper: on every trace, Fig. 8).
    let most_lowest = |t: &[&Row; 3]| {
        t[2].mean_latency_ms < t[0].mean_latency_ms && t[2].mean_latency_ms < t[1].mean_latency_ms
    };
    let ours = present
        .iter()
        .filter(|w| at(w, 256).is_some_and(|t| most_lowest(&t)))
        .count() as f64;
    let slow_at = |w: &str| three(rows, POLICIES_SLOW_RMW, w, 256, scale);
    let clustered = three(rows, POLICIES_CLUSTERED, CLUSTERED_WORKLOAD, 128, scale);
    let clustered_slow = three(
        rows,
        POLICIES_CLUSTERED_SLOW_RMW,
        CLUSTERED_WORKLOAD,
        128,
        scale,
    );
    out.push(claim(
        "claim: every workload at 256 MiB, MOST has the lowest mean response time (count)",
        4.0,
        ours,
        ours == n,
        || {
            let write_path: Vec<(&str, [&Row; 3])> = present
                .iter()
                .filter_map(|w| Some((*w, three(rows, POLICIES_WRITE_PATH, w, 256, scale)?)))
                .collect();
            let clustered_write_path = three(
                rows,
                POLICIES_CLUSTERED_WRITE_PATH,
                CLUSTERED_WORKLOAD,
                128,
                scale,
            );
            let (Some(c), Some(cs)) = (clustered, clustered_slow) else {
                return "not measured yet: the clustered variants did not run".to_string();
            };
            let (Some(cwp), true) = (clustered_write_path, write_path.len() == present.len())
            else {
                return "not measured yet: the write-path variants did not run".to_string();
            };
            // The split of the default runs: reads' share of the requests
            // and of the summed response time, MOST's read hits next to
            // FIFO's, and the writes' mean latency, over the presets at
            // 256 MiB.
            let base: Vec<[&Row; 3]> = present.iter().filter_map(|w| at(w, 256)).collect();
            let sum = |f: &dyn Fn(&Row) -> f64| -> f64 {
                base.iter().flat_map(|t| t.iter()).map(|r| f(r)).sum()
            };
            let read_share = sum(&|r| r.obs.read_ios as f64) / sum(&|r| r.obs.ios as f64);
            let read_time_share = sum(&|r| r.obs.read_latency_sum_ns as f64)
                / sum(&|r| r.obs.latency_sum_ns as f64);
            let read_hits = |r: &Row| r.policy_counter(hswd::counter::READ_HITS).unwrap_or(f64::NAN);
            let most_vs_fifo_hits = base.iter().map(|t| read_hits(t[2])).sum::<f64>()
                / base.iter().map(|t| read_hits(t[0])).sum::<f64>();
            let write_ms: Vec<f64> = base
                .iter()
                .flat_map(|t| t.iter())
                .filter_map(|r| r.obs.mean_write_latency_ms())
                .collect();
            let write_min = write_ms.iter().copied().fold(f64::INFINITY, f64::min);
            let write_max = write_ms.iter().copied().fold(0.0, f64::max);
            // With the cleaning in the write path: does the mean follow
            // the RMW count (MOST lowest exactly where it needs the fewest
            // RMWs, ties included)?
            let fewest = |t: &[&Row; 3]| rmw(t[2]) <= rmw(t[0]) && rmw(t[2]) <= rmw(t[1]);
            let lowest: Vec<&str> = write_path
                .iter()
                .filter(|(_, t)| most_lowest(t))
                .map(|(w, _)| *w)
                .collect();
            let follows = write_path
                .iter()
                .filter(|(_, t)| most_lowest(t) == fewest(t))
                .count();
            let slow: Vec<[&Row; 3]> = present.iter().filter_map(|w| slow_at(w)).collect();
            let slow_most = slow.iter().filter(|t| most_lowest(t)).count();
            format!(
                "measured: our HSWD cleans behind the writes — a write is acknowledged once its \
                 block and entry are on the PCache, whatever cleaning it starts — so RMWs reach \
                 the mean only through the reads that wait for the disk: writes take {write_min:.2}-\
                 {write_max:.2} ms under every policy, reads are {:.0} % of the presets' requests \
                 but {:.0} % of the summed response time, and MOST's reads hit the PCache {:.0} % \
                 less often than FIFO's (it cleans the band with the most cached blocks, the one \
                 reads want next). Read literally, the paper's Algorithm 2 cleans inside the \
                 write path (HSWD_Write calls HSWD_clean_set before it returns), and its text \
                 ties the response time to the RMW count. With writes acknowledged only once the \
                 cleaning they start or land in has ended ({POLICIES_WRITE_PATH}, \
                 clean_in_write_path = true) the mean follows the RMWs: MOST is lowest on {} of \
                 {} presets ({}), and on {follows} of {} MOST is lowest exactly where it needs \
                 the fewest RMWs; where it needs more than FIFO the presets' uniform offsets leave \
                 it nothing to exploit (the hit-ratio rows). On the clustered workload \
                 ({POLICIES_CLUSTERED_WRITE_PATH}) {}; behind the writes there ({POLICIES_CLUSTERED}) \
                 {}. The disk at the paper's RMW rate alone ({POLICIES_SLOW_RMW}, {:.1} MB/s) \
                 leaves MOST lowest on {slow_most} of {} presets, and with clustered bands \
                 ({POLICIES_CLUSTERED_SLOW_RMW}) {}",
                100.0 * read_share,
                100.0 * read_time_share,
                100.0 * (1.0 - most_vs_fifo_hits),
                lowest.len(),
                write_path.len(),
                if lowest.is_empty() { "none".to_string() } else { lowest.join(", ") },
                write_path.len(),
                describe(&cwp),
                describe(&c),
                paper_rmw_rate_bytes_per_s() as f64 / 1e6,
                slow.len(),
                describe(&cs),
            )
        },
    ));
    let lru_highest = |t: &[&Row; 3]| hit(t[1]) > hit(t[0]) && hit(t[1]) > hit(t[2]);
    let ours = present
        .iter()
        .filter(|w| at(w, 256).is_some_and(|t| lru_highest(&t)))
        .count() as f64;
    out.push(claim(
        "claim: every workload at 256 MiB, LRU has the highest write hit ratio (count)",
        4.0,
        ours,
        ours == n,
        || skewed_sentence("recency", skewed.is_some_and(|t| lru_highest(&t))),
    ));
    let most_lowest_hit = |t: &[&Row; 3]| hit(t[2]) < hit(t[0]) && hit(t[2]) < hit(t[1]);
    let ours = present
        .iter()
        .filter(|w| at(w, 256).is_some_and(|t| most_lowest_hit(&t)))
        .count() as f64;
    out.push(claim(
        "claim: every workload at 256 MiB, MOST has the lowest write hit ratio (count)",
        4.0,
        ours,
        ours == n,
        || {
            skewed_sentence(
                "MOST's greedy choice",
                skewed.is_some_and(|t| most_lowest_hit(&t)),
            )
        },
    ));
    if let Some(t) = at("src2_0", 256) {
        let far = rmw(t[1]) >= 1.25 * rmw(t[0]).max(rmw(t[2]));
        out.push(claim(
            "claim: on src2_0 at 256 MiB, LRU needs far more RMWs (>= 1.25x FIFO's and MOST's) (count)",
            1.0,
            f64::from(u8::from(far)),
            far,
            || format!("not measured yet: {}", describe(&t)),
        ));
    }
    // Bigger is better: mean response time falls with every size step.
    let mut better = 0.0;
    let mut more_first = 0.0;
    for w in &present {
        for (p, _) in POLICIES.iter().enumerate() {
            let [s, m, l] = SIZES_MIB.map(|mib| at(w, mib).map(|t| t[p]).unwrap());
            if m.mean_latency_ms < s.mean_latency_ms && l.mean_latency_ms < m.mean_latency_ms {
                better += 1.0;
            }
            if rmw(s) - rmw(m) > rmw(m) - rmw(l) {
                more_first += 1.0;
            }
        }
    }
    let cases = n * 3.0;
    out.push(claim(
        "claim: every workload and policy, a bigger PCache lowers the mean response time (count)",
        12.0,
        better,
        better == cases,
        || "not measured yet".to_string(),
    ));
    out.push(claim(
        "claim: every workload and policy, 128 -> 256 MiB removes more RMWs than 256 -> 384 (count)",
        12.0,
        more_first,
        more_first == cases,
        || "not measured yet".to_string(),
    ));
    let zero: Vec<&str> = ["prxy_0", "rsrch_0"]
        .into_iter()
        .filter(|w| present.contains(w))
        .collect();
    if !zero.is_empty() {
        let ours = zero
            .iter()
            .filter(|w| at(w, 384).is_some_and(|t| t.iter().all(|r| rmw(r) == 0.0)))
            .count() as f64;
        out.push(claim(
            "claim: at 384 MiB prxy_0 and rsrch_0 need no RMW at all (count)",
            2.0,
            ours,
            ours == zero.len() as f64,
            || "not measured yet".to_string(),
        ));
    }
}

fn systems(rows: &[Row], out: &mut Vec<Comparison>) {
    let get = |exp: &str, w: &str, system: &str| {
        find(rows, |r| {
            r.spec.experiment == exp && r.spec.workload == w && r.spec.system == system
        })
    };
    let workloads: Vec<&str> = ["prn_0", "hm_0", "proj_0"]
        .into_iter()
        .filter(|w| get("systems", w, "hswd").is_some())
        .collect();
    if workloads.is_empty() {
        return;
    }
    let ms = |r: Option<&Row>| r.map_or(f64::NAN, |r| r.mean_latency_ms);
    if let (Some(h), Some(s), Some(f)) = (
        get("systems", "hm_0", "hswd"),
        get("systems", "hm_0", "sswd"),
        get("systems", "hm_0", "flashcache"),
    ) {
        let h_ro = ms(get(SYSTEMS_VARIANTS, HM0_WRITES_ONLY, "hswd"));
        let s_ro = ms(get(SYSTEMS_VARIANTS, HM0_WRITES_ONLY, "sswd"));
        out.push(numeric(
            "systems_hswd_speedup_vs_sswd",
            "hm_0",
            HM0_VS_SSWD,
            s.mean_latency_ms / h.mean_latency_ms,
            || {
                if h_ro.is_nan() {
                    return "not measured yet: the writes-only variant did not run".into();
                }
                format!(
                    "hm_0's reads and the offered rate, measured: 35 % of hm_0's requests are \
                     reads, which on the SSWD share its one actuator with log appends and cleaning \
                     (SSWD {:.2} ms, HSWD {:.2} ms at 100 IOPS). Without its reads \
                     ({SYSTEMS_VARIANTS}, {HM0_WRITES_ONLY}: SSWD {s_ro:.2} ms, HSWD {h_ro:.2} ms) \
                     the speedup is {:.2}; at {LOW_RATE_IOPS} IOPS ({SYSTEMS_LOW_RATE}) it is {:.2}. \
                     The paper's 2.25 lies within what these two choices of ours span; its replay \
                     kept the trace's own timing, which we do not have",
                    s.mean_latency_ms,
                    h.mean_latency_ms,
                    s_ro / h_ro,
                    ms(get(SYSTEMS_LOW_RATE, "hm_0", "sswd")) / ms(get(SYSTEMS_LOW_RATE, "hm_0", "hswd")),
                )
            },
        ));
        let low = |system: &str| ms(get(SYSTEMS_LOW_RATE, "hm_0", system));
        out.push(numeric(
            "systems_hswd_speedup_vs_flashcache",
            "hm_0",
            HM0_VS_FLASHCACHE,
            f.mean_latency_ms / h.mean_latency_ms,
            || {
                let at_low = low("flashcache") / low("hswd");
                let closes = (at_low / HM0_VS_FLASHCACHE - 1.0).abs() <= TOLERANCE;
                format!(
                    "{}the offered rate (ours: 100 IOPS; the paper replayed the trace's own timing), \
                     measured: Flashcache's per-set cleaning issues random disk writes that fall \
                     behind at 100 IOPS (Flashcache {:.2} ms, HSWD {:.2} ms); at {LOW_RATE_IOPS} IOPS \
                     ({SYSTEMS_LOW_RATE}) they keep up: Flashcache {:.2} ms, HSWD {:.2} ms, a speedup \
                     of {at_low:.2}{}",
                    if closes { "" } else { "not measured yet (only partly): " },
                    f.mean_latency_ms,
                    h.mean_latency_ms,
                    low("flashcache"),
                    low("hswd"),
                    if closes { ", which closes the gap" } else { "" }
                )
            },
        ));
    }
    let n = workloads.len() as f64;
    let wins = |exp: &str, system: &str| {
        workloads
            .iter()
            .filter(|w| ms(get(exp, w, "hswd")) < ms(get(exp, w, system)))
            .count() as f64
    };
    let ours = wins("systems", "sswd");
    let equal_wins = workloads
        .iter()
        .filter(|w| ms(get("systems", w, "hswd")) < ms(get(SYSTEMS_VARIANTS, w, SSWD_EQUAL_CACHE)))
        .count() as f64;
    let low_wins = wins(SYSTEMS_LOW_RATE, "sswd");
    let detail: Vec<String> = workloads
        .iter()
        .map(|w| {
            format!(
                "{w}: HSWD {:.2} ms vs SSWD {:.2} ms; SSWD with HSWD's cache size {:.2} ms; at \
                 {LOW_RATE_IOPS} IOPS HSWD {:.2} vs SSWD {:.2}",
                ms(get("systems", w, "hswd")),
                ms(get("systems", w, "sswd")),
                ms(get(SYSTEMS_VARIANTS, w, SSWD_EQUAL_CACHE)),
                ms(get(SYSTEMS_LOW_RATE, w, "hswd")),
                ms(get(SYSTEMS_LOW_RATE, w, "sswd")),
            )
        })
        .collect();
    out.push(claim(
        "claim: every workload, HSWD is faster than the SSWD (count)",
        3.0,
        ours,
        ours == n,
        || {
            format!(
                "{}the cache sizes and the offered rate, measured: the SSWD's persistent log is 20x \
                 HSWD's 1 GiB PCache, and while it absorbs the writes (acknowledged from its RAM \
                 buffer, appended sequentially) it is as fast as an SSD. With the log cut to HSWD's \
                 size ({SYSTEMS_VARIANTS}, {SSWD_EQUAL_CACHE}) HSWD is faster on {equal_wins} of \
                 {n}; at {LOW_RATE_IOPS} IOPS ({SYSTEMS_LOW_RATE}) on {low_wins} of {n}. {}",
                if equal_wins == n || low_wins == n {
                    ""
                } else {
                    "not measured yet (only partly): "
                },
                detail.join("; ")
            )
        },
    ));
    let ours = wins("systems", "flashcache");
    out.push(claim(
        "claim: every workload, HSWD is faster than Flashcache (count)",
        3.0,
        ours,
        ours == n,
        || {
            format!(
                "not measured yet: at {LOW_RATE_IOPS} IOPS ({SYSTEMS_LOW_RATE}) HSWD is faster on {} of {n}",
                wins(SYSTEMS_LOW_RATE, "flashcache")
            )
        },
    ));
}

#[cfg(test)]
mod tests {
    use super::super::{Observed, Spec};
    use super::*;
    use crate::reproduce::paper_vs_ours::Verdict;

    struct R {
        experiment: &'static str,
        workload: &'static str,
        system: &'static str,
        policy: &'static str,
        mib: u64,
        mean_ms: f64,
        rmw: f64,
        hit: f64,
    }

    fn row(r: R) -> Row {
        Row {
            spec: Spec {
                experiment: r.experiment,
                workload: r.workload.into(),
                system: r.system,
                mapping: "fully".into(),
                policy: r.policy.into(),
                pcache_bytes: r.mib * MIB,
                config: String::new(),
            },
            iops: 200.0,
            mean_latency_ms: r.mean_ms,
            max_latency_ms: 0.0,
            rmw_count: Some(r.rmw),
            write_hit_ratio: Some(r.hit),
            policy_counters: Vec::new(),
            obs: Observed::default(),
            wall_s: 0.0,
        }
    }

    fn policy_rows(
        experiment: &'static str,
        workload: &'static str,
        mib: u64,
        fifo: (f64, f64, f64),
        lru: (f64, f64, f64),
        most: (f64, f64, f64),
    ) -> Vec<Row> {
        [("fifo", fifo), ("lru", lru), ("most", most)]
            .into_iter()
            .map(|(policy, (mean_ms, rmw, hit))| {
                row(R {
                    experiment,
                    workload,
                    system: "hswd",
                    policy,
                    mib,
                    mean_ms,
                    rmw,
                    hit,
                })
            })
            .collect()
    }

    #[test]
    fn policy_claims_and_the_skewed_variant_by_hand() {
        let mut rows = Vec::new();
        // src2_0: sizes 128/256/384; at 256 MOST is not the fastest (FIFO
        // is), LRU has the most RMWs (2x) and the highest hit ratio.
        rows.extend(policy_rows(
            "policies",
            "src2_0",
            128,
            (2.0, 1000.0, 0.14),
            (3.0, 1800.0, 0.15),
            (2.1, 990.0, 0.13),
        ));
        rows.extend(policy_rows(
            "policies",
            "src2_0",
            256,
            (1.0, 360.0, 0.33),
            (1.2, 650.0, 0.34),
            (1.1, 350.0, 0.32),
        ));
        rows.extend(policy_rows(
            "policies",
            "src2_0",
            384,
            (0.7, 180.0, 0.51),
            (0.8, 290.0, 0.52),
            (0.75, 170.0, 0.50),
        ));
        // The skewed variant: MOST worse there too (by hand: 375 vs 327 RMWs).
        rows.extend(policy_rows(
            POLICIES_SKEWED,
            SKEWED_WORKLOAD,
            128,
            (0.39, 327.0, 0.69),
            (0.42, 1436.0, 0.77),
            (0.53, 375.0, 0.55),
        ));
        // Without the clustered variants the MOST row says so.
        let c = compare(&rows, 1);
        let get = |c: &[Comparison], q: &str| {
            c.iter()
                .find(|r| r.quantity.starts_with(q))
                .unwrap()
                .clone()
        };
        let most = get(
            &c,
            "claim: every workload at 256 MiB, MOST has the lowest mean",
        );
        assert_eq!(
            (most.paper, most.ours, most.verdict),
            (4.0, 0.0, Verdict::Differs)
        );
        assert_eq!(
            most.why,
            "not measured yet: the clustered variants did not run"
        );
        // With them (MOST the fewest RMWs, FIFO still the fastest) the
        // row reports their numbers and stays unmeasured.
        for experiment in [POLICIES_CLUSTERED, POLICIES_CLUSTERED_SLOW_RMW] {
            rows.extend(policy_rows(
                experiment,
                CLUSTERED_WORKLOAD,
                128,
                (7.2, 576.0, 0.40),
                (9453.0, 1324.0, 0.54),
                (8.0, 537.0, 0.34),
            ));
        }
        let why = |rows: &[Row]| {
            get(
                &compare(rows, 1),
                "claim: every workload at 256 MiB, MOST has the lowest mean",
            )
            .why
        };
        assert_eq!(
            why(&rows),
            "not measured yet: the write-path variants did not run"
        );
        // With the cleaning in the write path MOST is the fastest where it
        // needs the fewest RMWs: the cause is measured.
        rows.extend(policy_rows(
            POLICIES_WRITE_PATH,
            "src2_0",
            256,
            (6.7, 361.0, 0.33),
            (17.7, 590.0, 0.33),
            (6.1, 346.0, 0.33),
        ));
        rows.extend(policy_rows(
            POLICIES_CLUSTERED_WRITE_PATH,
            CLUSTERED_WORKLOAD,
            128,
            (12.8, 583.0, 0.39),
            (952.0, 3317.0, 0.49),
            (7.3, 523.0, 0.34),
        ));
        let most = why(&rows);
        assert!(
            most.starts_with("measured: ")
                && most.contains("MOST is lowest on 1 of 1 presets (src2_0)")
                && most.contains("on 1 of 1 MOST is lowest exactly where it needs the fewest")
                && most.contains("MOST 523 / 7.300 / 0.340; behind the writes")
                && most.contains("MOST 537 / 8.000 / 0.340"),
            "{most}"
        );
        let c = compare(&rows, 1);
        let get = |q: &str| get(&c, q);
        // LRU's highest hit ratio holds on 1 of 1 here: a claim that holds.
        let lru = get("claim: every workload at 256 MiB, LRU has the highest");
        assert_eq!((lru.ours, lru.verdict), (1.0, Verdict::Holds));
        let far = get("claim: on src2_0 at 256 MiB, LRU needs far more RMWs");
        assert_eq!(far.verdict, Verdict::Holds); // 650 >= 1.25 x 360
        let bigger = get("claim: every workload and policy, a bigger PCache");
        assert_eq!((bigger.ours, bigger.verdict), (3.0, Verdict::Holds));
        // 128 -> 256 removes 640 / 1150 / 640 RMWs, 256 -> 384 180 / 360 / 180.
        let first = get("claim: every workload and policy, 128 -> 256");
        assert_eq!(first.ours, 3.0);
    }

    #[test]
    fn the_low_rate_variant_closes_the_flashcache_gap() {
        let sys = |experiment, workload, system, mean_ms| {
            row(R {
                experiment,
                workload,
                system,
                policy: "fifo",
                mib: 32,
                mean_ms,
                rmw: 0.0,
                hit: 0.0,
            })
        };
        let rows = vec![
            sys("systems", "hm_0", "hswd", 1.55),
            sys("systems", "hm_0", "sswd", 16.07),
            sys("systems", "hm_0", "flashcache", 13.95),
            sys(SYSTEMS_LOW_RATE, "hm_0", "hswd", 1.38),
            sys(SYSTEMS_LOW_RATE, "hm_0", "sswd", 5.85),
            sys(SYSTEMS_LOW_RATE, "hm_0", "flashcache", 1.69),
            sys(SYSTEMS_VARIANTS, "hm_0", SSWD_EQUAL_CACHE, 32.1),
            sys(SYSTEMS_VARIANTS, HM0_WRITES_ONLY, "hswd", 0.38),
            sys(SYSTEMS_VARIANTS, HM0_WRITES_ONLY, "sswd", 0.12),
        ];
        let c = compare(&rows, 1);
        let get = |q: &str| c.iter().find(|r| r.quantity == q).unwrap();
        let fc = get("systems_hswd_speedup_vs_flashcache");
        assert_eq!(fc.verdict, Verdict::Differs);
        // 1.69 / 1.38 = 1.22 against the paper's 1.32: within 25 %.
        assert!(
            fc.why.contains("a speedup of 1.22, which closes the gap"),
            "{}",
            fc.why
        );
        let ss = get("systems_hswd_speedup_vs_sswd");
        assert!(
            ss.why.contains("the speedup is 0.32") && ss.why.contains("it is 4.24"),
            "{}",
            ss.why
        );
        let claim = c
            .iter()
            .find(|r| {
                r.quantity
                    .starts_with("claim: every workload, HSWD is faster than the SSWD")
            })
            .unwrap();
        assert_eq!((claim.ours, claim.verdict), (1.0, Verdict::Holds));
    }
}

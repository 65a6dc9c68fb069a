//! Linear concatenation: randomized property tests on the shared executor
//! and data model of `common` (its module docs list what every run checks).
//! Each host sector's home is its place in its segment's device, so the
//! checks say: IOs split at segment boundaries land exactly there, reads
//! return what was written, trims pass through (zeros or the old data),
//! `locate` maps through the segments (and leaves out bytes past the
//! volume), and `drain` finds nothing to do once IOs completed.
//!
//! `TIERLAB_PROP_CASES=N` runs N cases instead of the default.

mod common;

use common::{
    Geometry, Home, Reached, Rng, Sim, Target, Workload, cases, check_counts, issue_workload,
};
use tierlab_core::policy::Policy;
use tierlab_policies::Linear;

const SECTOR: u64 = 512;

impl Target for Linear {}

#[test]
fn linear_moves_data_exactly_through_its_segments_and_survives_device_errors() {
    let n = cases(200);
    let mut reached = Reached::default();
    for seed in 0..n {
        let mut rng = Rng(seed * 1_000_003 + 29);
        let segments: Vec<(String, u64)> = (0..1 + rng.below(4))
            .map(|i| (format!("seg{i}"), (1 + rng.below(40)) * SECTOR))
            .collect();
        let mut policy = Linear::new(&segments).unwrap();
        let mut homes = Vec::new();
        let mut first = 0;
        for (i, (_, bytes)) in segments.iter().enumerate() {
            let units = bytes / SECTOR;
            homes.push(Home {
                host_first: first,
                units,
                device: i,
                device_first: 0,
            });
            first += units;
        }
        let g = Geometry {
            unit_bytes: SECTOR,
            device_bytes: segments.iter().map(|s| s.1).collect(),
            homes,
            host_units: first,
            locate_end_bytes: Some(policy.volume_bytes()),
            unwatched_below: vec![0; segments.len()],
        };
        let max_delay = 1 + rng.below(100_000);
        let mut sim = Sim::new(seed, max_delay, g, policy.tier_names().len());
        sim.strict = rng.chance(50);
        // Odd seeds: 1–4 % of device IOs fail; linear fails the host IOs
        // that needed them and never stops.
        if seed % 2 == 1 {
            sim.device_error_per_mille = 10 + rng.below(31);
        }
        let mut w = Workload::new(
            100 + rng.below(200),
            1 + rng.below(8),
            1 + rng.below(24),
            40,
        );
        w.trim_pct = rng.below(20);
        w.flush_pct = rng.below(5);
        w.locate_pct = 20;
        let mut out = Sim::outbox();
        issue_workload(&mut sim, &mut policy, &mut out, &w);
        sim.drain_and_check(&mut policy, &mut out);
        check_counts(&mut sim);
        assert!(
            !sim.stopped,
            "seed {seed}: linear stopped at a device error"
        );
        assert!(
            sim.failures.is_empty(),
            "seed {seed} ({segments:?}, {w:?}, delay {max_delay}): {:#?}",
            sim.failures
        );
        reached.add(&sim.reached);
    }
    eprintln!("coverage {reached:?}");
    if n >= 100 {
        let l = &reached.located_units_per_tier;
        let paths = [
            l[0],
            l[1],
            l[3],
            reached.zero_reads,
            reached.writes_after_trim,
            reached.flushes,
            reached.host_ios_failed,
        ];
        assert!(paths.iter().all(|&x| x > 0), "coverage {reached:?}");
    }
}

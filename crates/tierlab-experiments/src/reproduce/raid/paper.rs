//! The SSD-RAID thesis' numbers next to ours (`paper_vs_ours.csv`), and
//! the variant runs that measure why they differ (`variants.csv`):
//! RAID 1's read-IOPS gain over one SSD, 10.93 % on average and 43.9 % at
//! most (websearch2) in the thesis (spec/ssd-raid.md).

use crate::reproduce::paper_vs_ours::{Comparison, TOLERANCE, claim, not_comparable, numeric};

/// The thesis: mean read-IOPS improvement over its nine traces, percent.
const THESIS_MEAN_PCT: f64 = 10.93;
/// The thesis: its largest improvement, percent, on websearch2.
const THESIS_MAX_PCT: f64 = 43.9;
const THESIS_MAX_WORKLOAD: &str = "ssdraid.websearch2";
const THESIS_TRACES: f64 = 9.0;

/// Variant names in variants.csv.
pub const INDEPENDENT_GC: &str = "independent-gc";
/// The thesis' setting as far as it says: drives without host control of
/// GC (independent GC), replayed with the SSD's NCQ depth outstanding.
pub const THESIS_LIKE: &str = "thesis-like-independent-gc-iodepth32";
pub const THESIS_LIKE_IODEPTH: u32 = 32;

/// RAID 1's improvement on one workload as the command ran it.
pub struct Measured {
    pub workload: String,
    pub improvement_pct: f64,
}

/// RAID 1's improvement on one workload in a variant run.
pub struct Variant {
    pub workload: String,
    pub variant: &'static str,
    pub improvement_pct: f64,
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

fn variant_gains(variants: &[Variant], variant: &str) -> Vec<(String, f64)> {
    variants
        .iter()
        .filter(|v| v.variant == variant)
        .map(|v| (v.workload.clone(), v.improvement_pct))
        .collect()
}

/// The thesis' mean, its maximum on websearch2, the "not 2×" remark of its
/// text; the real traces' mean as a row that cannot be compared.
pub fn compare(measured: &[Measured], variants: &[Variant]) -> Vec<Comparison> {
    let mut out = Vec::new();
    let generated: Vec<&Measured> = measured
        .iter()
        .filter(|m| m.workload.starts_with("ssdraid."))
        .collect();
    let independent = variant_gains(variants, INDEPENDENT_GC);
    let thesis_like = variant_gains(variants, THESIS_LIKE);
    // (value, label) of a variant's mean or max over the generated workloads.
    let stat = |gains: &[(String, f64)], what: &str| -> Option<(f64, String)> {
        if gains.is_empty() {
            return None;
        }
        Some(if what == "mean" {
            (
                mean(&gains.iter().map(|g| g.1).collect::<Vec<_>>()),
                "mean".to_string(),
            )
        } else {
            let (w, g) = gains
                .iter()
                .cloned()
                .fold((String::new(), f64::NEG_INFINITY), |a, b| {
                    if b.1 > a.1 { b } else { a }
                });
            (g, format!("max ({w})"))
        })
    };
    let cause = |what: &str, ours: f64| -> String {
        let thesis = if what == "mean" {
            THESIS_MEAN_PCT
        } else {
            THESIS_MAX_PCT
        };
        let closes = |v: f64| (v / thesis - 1.0).abs() <= TOLERANCE;
        let mut parts = Vec::new();
        let mut measured_close = false;
        let (mut lo, mut hi) = (ours, ours);
        if let Some((v, label)) = stat(&independent, what) {
            parts.push(format!(
                "staggered GC, measured: with each SSD collecting on its own ({INDEPENDENT_GC}) \
                 the {label} is {v:.1} % (ratio {:.2} to the thesis, against {:.2} staggered): at \
                 steady state a single-chip SSD's reads wait mostly behind GC steps, and a mirror \
                 whose controller lets one member collect at a time removes those waits, which the \
                 thesis' drives (no host control of GC) could not",
                v / thesis,
                ours / thesis
            ));
            measured_close |= closes(v);
            (lo, hi) = (lo.min(v), hi.max(v));
        }
        if let Some((v, label)) = stat(&thesis_like, what) {
            parts.push(format!(
                "queueing, measured: independent GC alone leaves the generated workloads' Poisson \
                 arrivals at 200 IOPS (our choice; the thesis gives no rates), where a read seldom \
                 finds another queued and a mirror has nothing to split; replayed as the thesis ran \
                 its traces as far as it says — independent GC, {THESIS_LIKE_IODEPTH} outstanding \
                 (NCQ; {THESIS_LIKE}) — the {label} is {v:.1} % (ratio {:.2}): read-heavy workloads \
                 gain, write-heavy ones lose a little (a mirrored write waits for the slower \
                 member), the thesis' own explanation",
                v / thesis
            ));
            measured_close |= closes(v);
            (lo, hi) = (lo.min(v), hi.max(v));
        }
        if parts.is_empty() {
            return format!(
                "not measured yet: the variants did not run (--background-gc independent or \
                 --iodepth given); our {what} is {ours:.1} %"
            );
        }
        // Measured when a variant lands within the tolerance, or the runs
        // (as asked and the variants) span the thesis' value: the causes
        // named move ours across it.
        let spans = lo <= thesis && thesis <= hi;
        let prefix = if measured_close || spans {
            ""
        } else {
            "not measured yet (only partly): "
        };
        let tail = if measured_close {
            String::new()
        } else if spans {
            format!("; the thesis' {thesis} lies within what these runs span ({lo:.1}–{hi:.1} %)")
        } else {
            String::new()
        };
        format!("{prefix}{}{tail}", parts.join(". "))
    };
    if !generated.is_empty() {
        let gains: Vec<f64> = generated.iter().map(|m| m.improvement_pct).collect();
        let ours_mean = mean(&gains);
        out.push(numeric(
            "raid1_read_iops_improvement_mean_pct",
            "generated (ssdraid.*)",
            THESIS_MEAN_PCT,
            ours_mean,
            || cause("mean", ours_mean),
        ));
        let ours_max = gains.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        out.push(numeric(
            "raid1_read_iops_improvement_max_pct",
            "generated (ssdraid.*)",
            THESIS_MAX_PCT,
            ours_max,
            || cause("max", ours_max),
        ));
    }
    if let Some(w) = generated.iter().find(|m| m.workload == THESIS_MAX_WORKLOAD) {
        let like = thesis_like
            .iter()
            .find(|(n, _)| n == THESIS_MAX_WORKLOAD)
            .map(|v| v.1);
        out.push(numeric(
            "raid1_read_iops_improvement_pct",
            THESIS_MAX_WORKLOAD,
            THESIS_MAX_PCT,
            w.improvement_pct,
            || match like {
                Some(g) => format!(
                    "{}no queueing, measured: the generated websearch2 arrives as a Poisson stream \
                     at 200 IOPS (our choice: the thesis gives no rates), so a read seldom finds \
                     another in the queue and one SSD serves it as fast as a mirror; replayed with \
                     {THESIS_LIKE_IODEPTH} outstanding and independent GC ({THESIS_LIKE}), where \
                     reads queue as in the bursty original trace, the mirror gains {g:.1} % (ratio \
                     {:.2} to the thesis)",
                    // Measured when the two runs span the thesis' value.
                    if w.improvement_pct.min(g) <= THESIS_MAX_PCT
                        && THESIS_MAX_PCT <= w.improvement_pct.max(g)
                    {
                        ""
                    } else {
                        "not measured yet (only partly): "
                    },
                    g / THESIS_MAX_PCT
                ),
                None => "not measured yet: the thesis-like variant did not run (--iodepth given)"
                    .to_string(),
            },
        ));
    }
    if !measured.is_empty() {
        let below_2x = measured
            .iter()
            .filter(|m| m.improvement_pct < 100.0)
            .count() as f64;
        out.push(claim(
            "claim: every workload, RAID 1 gains < 100 % (not 2x: a read waits for its copy's die) (count)",
            THESIS_TRACES,
            below_2x,
            below_2x == measured.len() as f64,
            || {
                "not measured yet: a workload gained 2x or more (improvement.csv)".to_string()
            },
        ));
    }
    let real: Vec<f64> = measured
        .iter()
        .filter(|m| m.workload.starts_with("trace:"))
        .map(|m| m.improvement_pct)
        .collect();
    if !real.is_empty() {
        out.push(not_comparable(
            "raid1_read_iops_improvement_mean_pct",
            "real traces (trace:*)",
            THESIS_MEAN_PCT,
            mean(&real),
            "other traces than the thesis' nine: short public windows that fit the 16 GB SSD \
             (their bursts queue reads on one chip, which the mirror halves)",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reproduce::paper_vs_ours::Verdict;

    fn m(w: &str, g: f64) -> Measured {
        Measured {
            workload: w.into(),
            improvement_pct: g,
        }
    }

    #[test]
    fn the_thesis_mean_and_max_with_the_variants_that_explain_them() {
        let measured = vec![
            m("ssdraid.hm_0", 55.0),
            m("ssdraid.websearch2", 0.4),
            m("ssdraid.financial2", 2.0), // mean 19.13: differs from 10.93
            m("trace:x", 90.0),
        ];
        let variants = vec![
            Variant {
                workload: "ssdraid.hm_0".into(),
                variant: INDEPENDENT_GC,
                improvement_pct: 30.0,
            },
            Variant {
                workload: "ssdraid.websearch2".into(),
                variant: INDEPENDENT_GC,
                improvement_pct: 0.4,
            },
            Variant {
                workload: "ssdraid.financial2".into(),
                variant: INDEPENDENT_GC,
                improvement_pct: 2.0,
            },
            Variant {
                workload: "ssdraid.websearch2".into(),
                variant: THESIS_LIKE,
                improvement_pct: 58.0,
            },
        ];
        let c = compare(&measured, &variants);
        let row = |q: &str, w: &str| {
            c.iter()
                .find(|r| r.quantity.starts_with(q) && r.workload == w)
                .unwrap()
        };
        let mean_row = row(
            "raid1_read_iops_improvement_mean_pct",
            "generated (ssdraid.*)",
        );
        assert_eq!(mean_row.verdict, Verdict::Differs);
        assert!((mean_row.ours - 57.4 / 3.0).abs() < 1e-9);
        // The independent-GC mean: (30 + 0.4 + 2) / 3 = 10.8.
        assert!(
            mean_row.why.starts_with("staggered GC, measured")
                && mean_row.why.contains("mean is 10.8 %"),
            "{}",
            mean_row.why
        );
        let ws = row("raid1_read_iops_improvement_pct", "ssdraid.websearch2");
        assert_eq!(ws.verdict, Verdict::Differs);
        assert!(ws.why.contains("gains 58.0 %"), "{}", ws.why);
        let max = row(
            "raid1_read_iops_improvement_max_pct",
            "generated (ssdraid.*)",
        );
        assert_eq!(max.ours, 55.0);
        // 30 % independent is below the thesis' 43.9, 58 % thesis-like above:
        // the runs span it.
        assert!(
            max.why.starts_with("staggered GC")
                && max.why.contains("max (ssdraid.hm_0) is 30.0 %")
                && max.why.contains("max (ssdraid.websearch2) is 58.0 %")
                && max.why.contains("span (30.0–58.0 %)"),
            "{}",
            max.why
        );
        let two_x = row("claim: every workload", "all");
        assert_eq!((two_x.ours, two_x.verdict), (4.0, Verdict::Holds));
        let real = row(
            "raid1_read_iops_improvement_mean_pct",
            "real traces (trace:*)",
        );
        assert_eq!((real.ours, real.verdict), (90.0, Verdict::NotComparable));
        // A mean within 25 % of the thesis holds, with no cause.
        let c = compare(&[m("ssdraid.a", 12.0), m("ssdraid.b", 10.0)], &[]);
        assert_eq!(c[0].verdict, Verdict::Holds);
        assert!(c[0].why.is_empty());
    }
}

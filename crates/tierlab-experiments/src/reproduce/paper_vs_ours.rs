//! `paper_vs_ours.csv`, the first thing a reproduction reports: per
//! quantity of the paper's tables (and per claim of its text), the
//! paper's value, ours, their ratio, a verdict and — where it differs —
//! why, with the measurement that shows it (or "not measured yet").
//!
//! Verdicts: `holds` (within `TOLERANCE` of the paper's value, or the
//! claim holds), `differs`, `not comparable` (the paper's value is ~0, so a
//! ratio means nothing, or the run cannot produce it: e.g. a quick run's
//! shortened windows for a peak over the whole window).

use std::fmt::Write as _;
use std::path::Path;

use crate::ExpResult;

/// A numeric row holds within this relative distance of the paper.
pub const TOLERANCE: f64 = 0.25;

/// Paper values below this are ~0: no ratio to compare.
const NEAR_ZERO: f64 = 0.01;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Holds,
    Differs,
    NotComparable,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Differs => "differs",
            Verdict::NotComparable => "not comparable",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub quantity: String,
    /// A workload, or `all` for a claim over every workload.
    pub workload: String,
    pub paper: f64,
    pub ours: f64,
    pub verdict: Verdict,
    /// Empty when it holds; else the cause (measured, or "not measured
    /// yet: ...", or "not found; ruled out by measurement: ..." when the
    /// candidates were measured and none is it), or why it is not
    /// comparable.
    pub why: String,
}

/// A numeric quantity: holds within `TOLERANCE`; `cause` explains a
/// difference.
pub fn numeric(
    quantity: &str,
    workload: &str,
    paper: f64,
    ours: f64,
    cause: impl FnOnce() -> String,
) -> Comparison {
    let (verdict, why) = if paper.abs() < NEAR_ZERO {
        (
            Verdict::NotComparable,
            format!("the paper's value is ~0 ({paper}): a ratio to it means nothing"),
        )
    } else if !ours.is_finite() {
        (Verdict::NotComparable, "no value here".to_string())
    } else if (ours / paper - 1.0).abs() <= TOLERANCE + 1e-12 {
        // (The epsilon: 0.6 / 0.8 - 1 is -0.25000000000000006.)
        (Verdict::Holds, String::new())
    } else {
        (Verdict::Differs, cause())
    };
    Comparison {
        quantity: quantity.to_string(),
        workload: workload.to_string(),
        paper,
        ours,
        verdict,
        why,
    }
}

/// A row that cannot be compared in this run, and why.
pub fn not_comparable(
    quantity: &str,
    workload: &str,
    paper: f64,
    ours: f64,
    why: &str,
) -> Comparison {
    Comparison {
        quantity: quantity.to_string(),
        workload: workload.to_string(),
        paper,
        ours,
        verdict: Verdict::NotComparable,
        why: why.to_string(),
    }
}

/// A claim of the paper's text, counted over workloads: `paper` and
/// `ours` are the counts, `holds` whether ours makes the claim true.
pub fn claim(
    quantity: &str,
    paper: f64,
    ours: f64,
    holds: bool,
    cause: impl FnOnce() -> String,
) -> Comparison {
    Comparison {
        quantity: quantity.to_string(),
        workload: "all".to_string(),
        paper,
        ours,
        verdict: if holds {
            Verdict::Holds
        } else {
            Verdict::Differs
        },
        why: if holds { String::new() } else { cause() },
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Writes `paper_vs_ours.csv` (columns `quantity,workload,paper,ours,ratio,verdict,why`).
pub fn write_csv(dir: &Path, rows: &[Comparison]) -> ExpResult {
    let mut csv = String::from("quantity,workload,paper,ours,ratio,verdict,why\n");
    for r in rows {
        let ratio = if r.paper.abs() >= NEAR_ZERO && r.ours.is_finite() {
            format!("{:.4}", r.ours / r.paper)
        } else {
            String::new()
        };
        let _ = writeln!(
            csv,
            "{},{},{},{},{ratio},{},{}",
            csv_field(&r.quantity),
            csv_field(&r.workload),
            r.paper,
            if r.ours.is_finite() {
                format!("{:.4}", r.ours)
            } else {
                String::new()
            },
            r.verdict.as_str(),
            csv_field(&r.why)
        );
    }
    std::fs::write(dir.join("paper_vs_ours.csv"), csv)?;
    Ok(())
}

/// One line per verdict count, for the command's output. A difference
/// whose `why` starts with "not measured" has no measured cause yet; one
/// starting with "not found" had its candidate causes measured and ruled
/// out without finding it: both are unexplained, said apart.
pub fn summary_line(rows: &[Comparison]) -> String {
    let count = |v: Verdict| rows.iter().filter(|r| r.verdict == v).count();
    let differs_why = |prefix: &str| {
        rows.iter()
            .filter(|r| r.verdict == Verdict::Differs && r.why.starts_with(prefix))
            .count()
    };
    let (unexplained, not_found) = (differs_why("not measured"), differs_why("not found"));
    let not_found = if not_found > 0 {
        format!(", {not_found} not found among the causes measured")
    } else {
        String::new()
    };
    format!(
        "paper vs ours: {} hold, {} differ ({unexplained} with the cause not measured yet{not_found}), {} not comparable",
        count(Verdict::Holds),
        count(Verdict::Differs),
        count(Verdict::NotComparable)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_by_hand() {
        let cause = || "c".to_string();
        assert_eq!(numeric("q", "w", 0.8, 0.95, cause).verdict, Verdict::Holds); // +18.75 %
        assert_eq!(numeric("q", "w", 0.8, 0.6, cause).verdict, Verdict::Holds); // −25 % exactly
        let d = numeric("q", "w", 0.8, 0.59, cause);
        assert_eq!((d.verdict, d.why.as_str()), (Verdict::Differs, "c"));
        assert_eq!(
            numeric("q", "w", 0.0001, 0.5, cause).verdict,
            Verdict::NotComparable
        );
        assert_eq!(
            numeric("q", "w", 0.5, f64::NAN, cause).verdict,
            Verdict::NotComparable
        );
        let tmp = tempfile::tempdir().unwrap();
        write_csv(
            tmp.path(),
            &[numeric("mem, ratio", "w", 0.8, 0.4, || "a \"b\"".into())],
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("paper_vs_ours.csv")).unwrap(),
            "quantity,workload,paper,ours,ratio,verdict,why\n\"mem, ratio\",w,0.8,0.4000,0.5000,differs,\"a \"\"b\"\"\"\n"
        );
    }

    #[test]
    fn the_summary_line_counts_unexplained_differences_apart() {
        let row = |ours: f64, why: &'static str| numeric("q", "w", 1.0, ours, || why.to_string());
        let rows = [
            row(1.0, ""),
            row(2.0, "measured: x"),
            row(2.0, "not measured yet: y"),
            row(2.0, "not found; ruled out by measurement: z"),
            numeric("q", "w", 0.0, 1.0, String::new),
        ];
        assert_eq!(
            summary_line(&rows),
            "paper vs ours: 1 hold, 3 differ (1 with the cause not measured yet, 1 not found among the causes measured), 1 not comparable"
        );
        assert_eq!(
            summary_line(&rows[..3]),
            "paper vs ours: 1 hold, 2 differ (1 with the cause not measured yet), 0 not comparable"
        );
    }
}

//! ATSMF's workload analyzer, as pure functions of per-period counts
//! (spec/atsmf.md, seed 000 §4.2–4.3): extracting IO concentrations (Fig. 4,
//! steps 1–4), tracking them across periods (Fig. 5: the period count `A`,
//! and how far a concentration has drifted), and the duration prediction
//! table (Table 2). The tiering policy and `tierlab analyze concentrations`
//! share this code, so what the analysis reports is what the policy sees.

use std::collections::VecDeque;

/// Steps 2–4's two knobs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExtractParams {
    /// Keep the `top_n` busiest sub-LUNs (paper: 30; its Fig. 4: 20 of 300).
    pub top_n: usize,
    /// Take groups until they hold this share of the period's IOs (paper: 0.6).
    pub share_m: f64,
}

impl Default for ExtractParams {
    fn default() -> Self {
        ExtractParams {
            top_n: 30,
            share_m: 0.6,
        }
    }
}

/// A run of adjacent sub-LUNs and the IOs they received in one period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    pub first_sub_lun: u32,
    pub size_sub_luns: u32,
    pub ios: u64,
    /// Σ sub-LUN × IOs over the group (its IO-weighted centre is
    /// `weighted_sum / ios`): a drift estimate a quiet neighbour merged into
    /// the group barely moves.
    pub weighted_sum: u64,
}

impl Group {
    /// One past the last sub-LUN.
    pub fn end_sub_lun(&self) -> u32 {
        self.first_sub_lun + self.size_sub_luns
    }

    /// Overlapping or adjacent (the *[our choice]* continuation rule).
    pub fn touches(&self, other: &Group) -> bool {
        self.first_sub_lun <= other.end_sub_lun() && other.first_sub_lun <= self.end_sub_lun()
    }

    pub fn contains(&self, sub_lun: u32) -> bool {
        (self.first_sub_lun..self.end_sub_lun()).contains(&sub_lun)
    }

    /// IO-weighted centre, in sub-LUNs.
    pub fn centre(&self) -> f64 {
        self.weighted_sum as f64 / self.ios.max(1) as f64
    }
}

/// Steps 2–4 on step 1's counts (`counts[i]` = IOs to sub-LUN i in the
/// period): the period's IO concentrations, busiest first. Ties are broken
/// by the lower sub-LUN so the result never depends on sort stability.
/// Sub-LUNs with no IO are never kept; an idle period has no concentration.
pub fn extract(counts: &[u64], params: &ExtractParams) -> Vec<Group> {
    let total: u64 = counts.iter().sum();
    if total == 0 || params.top_n == 0 {
        return Vec::new();
    }
    // Step 2: the top N sub-LUNs by count.
    let mut top: Vec<u32> = (0..counts.len() as u32)
        .filter(|&i| counts[i as usize] > 0)
        .collect();
    let by_count_desc =
        |a: &u32, b: &u32| counts[*b as usize].cmp(&counts[*a as usize]).then(a.cmp(b));
    if top.len() > params.top_n {
        top.select_nth_unstable_by(params.top_n - 1, by_count_desc);
        top.truncate(params.top_n);
    }
    // Step 3: merge adjacent kept sub-LUNs into groups, sort by count.
    top.sort_unstable();
    let mut groups: Vec<Group> = Vec::new();
    for &s in &top {
        let ios = counts[s as usize];
        match groups.last_mut() {
            Some(g) if g.end_sub_lun() == s => {
                g.size_sub_luns += 1;
                g.ios += ios;
                g.weighted_sum += s as u64 * ios;
            }
            _ => groups.push(Group {
                first_sub_lun: s,
                size_sub_luns: 1,
                ios,
                weighted_sum: s as u64 * ios,
            }),
        }
    }
    groups.sort_unstable_by(|a, b| {
        b.ios
            .cmp(&a.ios)
            .then(a.first_sub_lun.cmp(&b.first_sub_lun))
    });
    // Step 4: take groups until their share of all IOs reaches M. If even
    // all of them stay below M, the period's IOs are not concentrated and
    // it has no concentration *[our choice: the seed presumes M is reached,
    // "most concentrations hold more than half of all IOs"]*.
    let mut taken = 0u64;
    let mut out = Vec::new();
    for g in groups {
        if reached(taken, total, params.share_m) {
            break;
        }
        taken += g.ios;
        out.push(g);
    }
    if !reached(taken, total, params.share_m) {
        out.clear();
    }
    out
}

fn reached(taken: u64, total: u64, share_m: f64) -> bool {
    taken as f64 >= share_m * total as f64
}

/// A concentration followed across periods.
#[derive(Clone, Debug, PartialEq)]
pub struct Tracked {
    /// Unique, in order of first appearance.
    pub id: u64,
    /// Where it is in the latest period.
    pub group: Group,
    /// Periods it has lasted so far, including the latest (the paper's `A`).
    pub periods: u32,
    /// Its IO-weighted centre when it appeared, and in which period: the
    /// drift since then gives its moving speed.
    pub born_centre: f64,
    pub born_period: u64,
}

impl Tracked {
    /// Signed drift of its centre since it appeared, in sub-LUNs.
    pub fn drift_sub_luns(&self) -> f64 {
        self.group.centre() - self.born_centre
    }

    /// Moving (Fig. 2b): its centre has drifted by at least one sub-LUN.
    pub fn is_moving(&self) -> bool {
        self.drift_sub_luns().abs() >= 1.0
    }

    /// Drift in sub-LUNs per period since it appeared (signed; 0 unless
    /// it is moving).
    pub fn speed_sub_luns_per_period(&self) -> f64 {
        if self.periods <= 1 || !self.is_moving() {
            return 0.0;
        }
        self.drift_sub_luns() / (self.periods - 1) as f64
    }
}

/// What one period's tracking update found.
#[derive(Debug, Default)]
pub struct TrackUpdate {
    /// Concentrations of the previous period with no continuation: they
    /// lasted `periods` periods.
    pub ended: Vec<Tracked>,
    /// How many of this period's concentrations are new (A = 1).
    pub started: usize,
}

/// Follows concentrations from period to period (Fig. 5).
///
/// A concentration continues into the next period when a group of the next
/// period overlaps or touches it. Groups are matched busiest first; each
/// takes the touching predecessor with the largest `A` (then the lowest
/// id) not yet taken, keeping its id and incrementing `A`. A group whose
/// touching predecessors are all taken (a split) gets a new id but
/// inherits `A` + 1; one touching nothing is new (A = 1). Predecessors no
/// group took have ended; when two merge, the one not taken ends.
#[derive(Debug, Default)]
pub struct Tracker {
    next_id: u64,
    current: Vec<Tracked>,
}

impl Tracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// The concentrations of the latest period, busiest first.
    pub fn current(&self) -> &[Tracked] {
        &self.current
    }

    /// Feeds one period's concentrations (from `extract`).
    pub fn update(&mut self, period: u64, groups: &[Group]) -> TrackUpdate {
        let prev = std::mem::take(&mut self.current);
        let mut taken = vec![false; prev.len()];
        let mut update = TrackUpdate::default();
        for g in groups {
            let touching = || prev.iter().enumerate().filter(|(_, p)| p.group.touches(g));
            let best_free = touching()
                .filter(|(i, _)| !taken[*i])
                .max_by(|(_, a), (_, b)| a.periods.cmp(&b.periods).then(b.id.cmp(&a.id)));
            let t = match best_free {
                Some((i, p)) => {
                    taken[i] = true;
                    Tracked {
                        id: p.id,
                        group: *g,
                        periods: p.periods + 1,
                        born_centre: p.born_centre,
                        born_period: p.born_period,
                    }
                }
                None => {
                    let inherited = touching().map(|(_, p)| p.periods).max();
                    let id = self.next_id;
                    self.next_id += 1;
                    if inherited.is_none() {
                        update.started += 1;
                    }
                    Tracked {
                        id,
                        group: *g,
                        periods: inherited.map_or(1, |a| a + 1),
                        born_centre: g.centre(),
                        born_period: period,
                    }
                }
            };
            self.current.push(t);
        }
        update.ended = prev
            .into_iter()
            .zip(taken)
            .filter(|(_, t)| !t)
            .map(|(p, _)| p)
            .collect();
        update
    }
}

/// Table 2: from recent concentrations' durations, the expected remaining
/// duration of one that has lasted `A` periods: `B(A) − A`, where `B(A)` is
/// the mean total duration of the concentrations that lasted at least `A`
/// periods.
#[derive(Clone, Debug)]
pub struct PredictionTable {
    /// (period it ended in, duration in periods), oldest first.
    history: VecDeque<(u64, u32)>,
    /// Forget durations that ended more than this many periods ago
    /// (paper: "e.g. half a day"); 0 keeps everything.
    window_periods: u64,
    /// A fixed table instead (`B(A) − A` in periods for A = 1, 2, ...),
    /// e.g. the paper's Table 2; A beyond its end uses the last entry.
    fixed_rest_periods: Option<Vec<f64>>,
}

impl PredictionTable {
    pub fn new(window_periods: u64) -> Self {
        PredictionTable {
            history: VecDeque::new(),
            window_periods,
            fixed_rest_periods: None,
        }
    }

    /// A table that never learns: `rest_periods[A − 1]` = `B(A) − A`.
    pub fn fixed(rest_periods: Vec<f64>) -> Self {
        PredictionTable {
            history: VecDeque::new(),
            window_periods: 0,
            fixed_rest_periods: Some(rest_periods),
        }
    }

    /// Records a concentration that ended in `period` after `duration_periods`.
    pub fn record(&mut self, period: u64, duration_periods: u32) {
        self.history.push_back((period, duration_periods));
        if self.window_periods > 0 {
            while self
                .history
                .front()
                .is_some_and(|&(p, _)| p + self.window_periods < period)
            {
                self.history.pop_front();
            }
        }
    }

    /// Durations remembered.
    pub fn len(&self) -> usize {
        self.history.len()
    }

    pub fn is_empty(&self) -> bool {
        self.history.is_empty()
    }

    /// `B(A)` in periods, or None when no remembered concentration lasted
    /// `A` periods.
    pub fn mean_total_periods(&self, a: u32) -> Option<f64> {
        let (mut n, mut sum) = (0u64, 0u64);
        for &(_, d) in &self.history {
            if d >= a {
                n += 1;
                sum += d as u64;
            }
        }
        (n > 0).then(|| sum as f64 / n as f64)
    }

    /// Predicted remaining duration in periods of a concentration that has
    /// lasted `a` periods. With no concentration in the history that
    /// lasted that long, *[our choice]*: its own age (`a` periods) — a
    /// concentration that outlived everything seen is expected to go on,
    /// and a heavy-tailed duration law has that shape.
    pub fn rest_periods(&self, a: u32) -> f64 {
        if let Some(fixed) = &self.fixed_rest_periods {
            let i = (a.max(1) as usize - 1).min(fixed.len().saturating_sub(1));
            return fixed.get(i).copied().unwrap_or(a as f64);
        }
        match self.mean_total_periods(a) {
            Some(b) => b - a as f64,
            None => a as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group whose IOs are spread evenly over its sub-LUNs.
    fn g(first: u32, size: u32, ios: u64) -> Group {
        let per = ios / size as u64;
        Group {
            first_sub_lun: first,
            size_sub_luns: size,
            ios,
            weighted_sum: (first..first + size).map(|s| s as u64 * per).sum(),
        }
    }

    /// Same place and IOs (the fixtures' IOs are not always even).
    fn same(a: &[Group], b: &[Group]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                (x.first_sub_lun, x.size_sub_luns, x.ios)
                    == (y.first_sub_lun, y.size_sub_luns, y.ios)
            })
    }

    /// Fig. 4's shape, by hand: a 300-sub-LUN LUN, N = 20, M = 60 %.
    /// 10,000 IOs: sub-LUNs 100–102 get 2,000 + 1,500 + 1,000 (a group of
    /// 4,500), 200–201 get 800 + 700 (1,500), 50 gets 600, and 17 other
    /// sub-LUNs get 100 each; the remaining 1,700 IOs are spread over
    /// the other 277 sub-LUNs. Step 4 takes the 4,500 group (45 %), then the
    /// 1,500 group (60 % reached) and stops before the 600 one.
    #[test]
    fn fig4_steps_on_a_hand_made_period() {
        let mut counts = vec![0u64; 300];
        counts[100] = 2000;
        counts[101] = 1500;
        counts[102] = 1000;
        counts[200] = 800;
        counts[201] = 700;
        counts[50] = 600;
        let tens: Vec<usize> = (0..17).map(|i| 250 + 2 * i).collect(); // not adjacent
        for &i in &tens {
            counts[i] = 100;
        }
        // The other 277 sub-LUNs share 1,700 IOs: 38 get 7, 239 get 6.
        let mut extra: u64 = 1700 - 277 * 6;
        for c in counts.iter_mut().filter(|c| **c == 0) {
            *c = 6 + (extra > 0) as u64;
            extra = extra.saturating_sub(1);
        }
        let total: u64 = counts.iter().sum();
        assert_eq!(total, 10_000);
        let params = ExtractParams {
            top_n: 20,
            share_m: 0.6,
        };
        let c = extract(&counts, &params);
        assert!(
            same(&c, &[g(100, 3, 4500), g(200, 2, 1500)]),
            "{c:?} of {total}"
        );
        // The IO-weighted centre of 100..103 with 2000/1500/1000 IOs.
        assert_eq!(c[0].weighted_sum, 100 * 2000 + 101 * 1500 + 102 * 1000);
        // M = 45 % stops right after the first group; M = 65 % takes 50 too.
        let m45 = ExtractParams {
            share_m: 0.45,
            ..params
        };
        assert!(same(&extract(&counts, &m45), &[g(100, 3, 4500)]));
        let m65 = ExtractParams {
            share_m: 0.65,
            ..params
        };
        assert_eq!(extract(&counts, &m65).len(), 3);
        // N = 2 keeps only sub-LUNs 100 and 101 (step 2 cuts 102): 35 % of
        // the IOs, below M = 60 %, so no concentration; with M = 30 % it is one.
        let n2 = ExtractParams { top_n: 2, ..params };
        assert!(extract(&counts, &n2).is_empty());
        let n2m30 = ExtractParams { share_m: 0.3, ..n2 };
        assert!(same(&extract(&counts, &n2m30), &[g(100, 2, 3500)]));
    }

    #[test]
    fn idle_period_and_uniform_counts() {
        let p = ExtractParams::default();
        assert!(extract(&[0; 50], &p).is_empty());
        // Uniform: the top 30 of 300 sub-LUNs hold 10 % of the IOs, below
        // M = 60 %: not concentrated, no concentration.
        assert!(extract(&[10; 300], &p).is_empty());
        // With M = 10 % the same 30 (ties → lowest ids) are one group.
        let m10 = ExtractParams { share_m: 0.1, ..p };
        assert_eq!(extract(&[10; 300], &m10), vec![g(0, 30, 300)]);
        assert_eq!(extract(&[10; 300], &m10)[0].centre(), 14.5);
    }

    /// Fig. 5: conc.-1 lasts period 1 → A = 1, period 2 → A = 2 (and
    /// grows to 3 sub-LUNs); conc.-2 appears in period 2; conc.-1 ends in
    /// period 3 after 2 periods.
    #[test]
    fn fig5_period_counts() {
        let mut t = Tracker::new();
        let u1 = t.update(1, &[g(10, 2, 500)]);
        assert_eq!((u1.started, u1.ended.len()), (1, 0));
        assert_eq!(t.current()[0].periods, 1);
        let u2 = t.update(2, &[g(10, 3, 600), g(40, 1, 300)]);
        assert_eq!((u2.started, u2.ended.len()), (1, 0));
        assert_eq!(t.current()[0].periods, 2);
        assert_eq!(
            t.current()[0].group.size_sub_luns,
            3,
            "subLUNs = 3 in period 2"
        );
        assert_eq!(t.current()[1].periods, 1);
        let u3 = t.update(3, &[g(40, 1, 300)]);
        assert_eq!(u3.ended.len(), 1);
        assert_eq!((u3.ended[0].id, u3.ended[0].periods), (0, 2));
        assert_eq!(t.current()[0].periods, 2);
    }

    #[test]
    fn adjacency_drift_split_and_merge() {
        let mut t = Tracker::new();
        t.update(0, &[g(10, 1, 100)]);
        // Drifts by one sub-LUN per period: adjacent, so it continues.
        t.update(1, &[g(11, 1, 100)]);
        t.update(2, &[g(12, 1, 100)]);
        let c = &t.current()[0];
        assert_eq!((c.id, c.periods), (0, 3));
        assert_eq!(c.speed_sub_luns_per_period(), 1.0);
        // A gap of one sub-LUN is not adjacent: a new concentration.
        let u = t.update(3, &[g(14, 1, 100)]);
        assert_eq!((u.started, u.ended.len()), (1, 1));
        // Split: two groups touching one predecessor: the busier keeps
        // the id, the other inherits A + 1 under a new id.
        t.update(4, &[g(14, 5, 100)]);
        let u = t.update(5, &[g(14, 1, 50), g(18, 1, 90)]);
        assert_eq!(u.started, 0);
        let cur = t.current();
        assert_eq!((cur[0].group.first_sub_lun, cur[0].periods), (14, 3));
        assert_eq!((cur[1].group.first_sub_lun, cur[1].periods), (18, 3));
        assert_ne!(cur[0].id, cur[1].id);
        // Merge: one group touching both: the older (or lower id) continues.
        let u = t.update(6, &[g(14, 5, 200)]);
        assert_eq!(u.ended.len(), 1);
        assert_eq!(t.current()[0].periods, 4);
    }

    /// Table 2 of the paper, reproduced from a duration history built by
    /// hand to have its conditional means: 919 concentrations lasting 1
    /// period, 212 lasting 2, 91 lasting 3, 44 lasting 4 and 64 lasting 8.
    /// B(1) = 2304/1330 = 1.7323, B(2) = 1385/411 = 3.3698, B(3) = 961/199
    /// = 4.8291, B(4) = 172/27 = 6.3704, B(5) = 8; at 24 s per period the
    /// rest durations are 17.58, 32.88, 43.90, 56.89 and 72.00 s.
    #[test]
    fn table2_prediction_values() {
        let mut t = PredictionTable::new(0);
        for (d, n) in [(1, 919), (2, 212), (3, 91), (4, 44), (8, 64)] {
            for _ in 0..n {
                t.record(0, d);
            }
        }
        let round2 = |x: f64| (x * 100.0).round() / 100.0;
        let b = [1.73, 3.37, 4.83, 6.37, 8.00];
        let rest_s = [17.58, 32.88, 43.90, 56.89, 72.00];
        for a in 1..=5u32 {
            let i = a as usize - 1;
            assert_eq!(round2(t.mean_total_periods(a).unwrap()), b[i], "B({a})");
            assert_eq!(round2(t.rest_periods(a) * 24.0), rest_s[i], "rest({a}) s");
        }
        // Beyond the longest duration seen: the concentration's own age.
        assert_eq!(t.rest_periods(9), 9.0);
        // The fixed table answers with its own entries.
        let f = PredictionTable::fixed(vec![0.73, 1.37, 1.83, 2.37, 3.00]);
        assert_eq!(f.rest_periods(2), 1.37);
        assert_eq!(f.rest_periods(7), 3.00);
    }

    #[test]
    fn prediction_window_forgets_old_durations() {
        let mut t = PredictionTable::new(10);
        t.record(0, 50);
        t.record(5, 1);
        assert_eq!(t.mean_total_periods(1), Some(25.5));
        t.record(20, 1); // period 0 and 5 are more than 10 periods old
        assert_eq!(t.len(), 1);
        assert_eq!(t.mean_total_periods(1), Some(1.0));
    }
}

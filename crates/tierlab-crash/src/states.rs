//! Crash states from a recorded log, and the check of each.
//!
//! Crash points are visited in log order so that what is durable (per
//! store) and what the host may rely on (per sector) are both kept up to
//! date incrementally: each grows monotonically with the crash point.

use crate::exec::{Event, Log};
use crate::stamp::{self, SECTOR_BYTES, Sector};
use crate::{Options, Report, Rng, Stack, restart_and_read};

/// How the unflushed writes of a crash state were chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateKind {
    /// Only what was durable: no unflushed write reached the medium.
    Durable,
    /// Every write submitted before the crash reached it.
    Everything,
    /// A random subset of the unflushed writes, in random order.
    Subset,
    /// A random subset with one write torn at a sector boundary (only its
    /// first or only its last sectors landed).
    Torn,
    /// Surprise shutdown (Open CAS's test): every device write before the
    /// crash point landed, in submission order, and none after — as when
    /// every store fails from one write on and the process dies.
    Prefix,
}

impl StateKind {
    pub const ALL: [StateKind; 5] = [
        StateKind::Durable,
        StateKind::Everything,
        StateKind::Subset,
        StateKind::Torn,
        StateKind::Prefix,
    ];
    /// The kinds each crash point of a random exploration gets.
    pub const RANDOM: [StateKind; 4] = [
        StateKind::Durable,
        StateKind::Everything,
        StateKind::Subset,
        StateKind::Torn,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StateKind::Durable => "durable",
            StateKind::Everything => "everything",
            StateKind::Subset => "subset",
            StateKind::Torn => "torn",
            StateKind::Prefix => "prefix",
        }
    }

    pub fn parse(s: &str) -> Option<StateKind> {
        StateKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A crash state whose restarted stack broke the promise.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The crash point: this many log events had happened.
    pub crash_point: u64,
    pub kind: StateKind,
    /// Seeds the state's random choices (with the crash point and kind).
    pub state_seed: u64,
    /// The first sector found wrong, if the restart got that far.
    pub sector: Option<u64>,
    pub message: String,
    /// Writes not yet durable at the crash point.
    pub unflushed_writes: u64,
    /// After shrinking: the unflushed device writes (indices into the log)
    /// that still make the state fail, in the order applied…
    pub writes_applied: Vec<usize>,
    /// …and the torn write, if the tear is needed: (write, first sector,
    /// end sector) of the part that landed.
    pub torn: Option<(usize, u64, u64)>,
}

/// Durable state of one store, advanced as the crash point moves on.
struct StoreState {
    volatile: bool,
    /// A shingled (SMR) store: a write interrupted by a crash destroys the
    /// rest of its band (the tracks after the head overlap them).
    shingled_band_bytes: Option<u64>,
    image: Vec<u8>,
    /// This store's writes in completion order (completed ones only).
    by_completion: Vec<usize>,
    /// How many of `by_completion` are applied to `image`.
    applied: usize,
    /// Writes that completed before this log position are durable.
    durable_before: usize,
}

fn apply_write(image: &mut [u8], log: &Log, w: usize) {
    let lw = &log.writes[w];
    let range = lw.offset_bytes as usize..(lw.offset_bytes + lw.len_bytes) as usize;
    match &lw.data {
        Some(d) => image[range].copy_from_slice(d),
        None => image[range].fill(0),
    }
}

/// Applies sectors [from, to) of write `w` only.
fn apply_sectors(image: &mut [u8], log: &Log, w: usize, from: usize, to: usize) {
    let lw = &log.writes[w];
    let (a, b) = (from * SECTOR_BYTES, to * SECTOR_BYTES);
    let at = lw.offset_bytes as usize;
    match &lw.data {
        Some(d) => image[at + a..at + b].copy_from_slice(&d[a..b]),
        None => image[at + a..at + b].fill(0),
    }
}

fn crash_points(log: &Log, opts: &Options, shingled: &[bool]) -> Vec<usize> {
    let n = log.events.len();
    if let Some((p, _)) = opts.only {
        return vec![(p as usize).min(n)];
    }
    if opts.surprise_every > 0 {
        // Surprise shutdown: before each Nth device write, then the end.
        let mut points: Vec<usize> = log
            .writes
            .iter()
            .step_by(opts.surprise_every as usize)
            .map(|w| w.submitted_at)
            .collect();
        points.push(n);
        points.dedup();
        return points;
    }
    let want = (opts.states / StateKind::RANDOM.len() as u64).max(1) as usize;
    let mut rng = Rng(opts.seed ^ 0xc4a5);
    let mut points = Vec::new();
    // Epoch boundaries: just before and just after each FLUSH is done.
    let mut bounds: Vec<usize> = log
        .host_flushes
        .iter()
        .filter_map(|f| f.done_at)
        .flat_map(|d| [d, d + 1])
        .collect();
    let keep = want / 2;
    if bounds.len() > keep {
        // An even sample of them.
        bounds = (0..keep)
            .map(|i| bounds[i * bounds.len() / keep.max(1)])
            .collect();
    }
    points.extend(bounds);
    // While each write to a shingled store is in flight: the state a
    // journal must make safe (a torn band).
    points.extend(
        log.writes
            .iter()
            .filter(|w| shingled[w.device])
            .map(|w| w.submitted_at + 1)
            .take(want / 4),
    );
    points.push(n); // after everything
    // Random points inside epochs, distinct (as many as the log allows).
    let mut seen: std::collections::HashSet<usize> = points.iter().copied().collect();
    let mut tries = 0;
    while seen.len() < want.min(n + 1) && tries < 20 * want {
        tries += 1;
        seen.insert(rng.below(n as u64 + 1) as usize);
    }
    let mut points: Vec<usize> = seen.into_iter().collect();
    points.sort_unstable();
    points
}

pub(crate) fn explore(
    stack: &Stack,
    opts: &Options,
    log: &Log,
    initial: Vec<Vec<u8>>,
    region: u64,
    unit: u64,
    report: &mut Report,
) {
    let mut stores: Vec<StoreState> = initial
        .into_iter()
        .zip(&stack.volatile)
        .zip(&stack.shingled_band_bytes)
        .map(|((image, &volatile), &shingled_band_bytes)| StoreState {
            volatile,
            shingled_band_bytes,
            image,
            by_completion: Vec::new(),
            applied: 0,
            durable_before: 0,
        })
        .collect();
    let mut by_completion: Vec<(usize, usize)> = log
        .writes
        .iter()
        .enumerate()
        .filter_map(|(i, w)| w.completed_at.map(|c| (c, i)))
        .collect();
    by_completion.sort_unstable();
    for (_, w) in by_completion {
        stores[log.writes[w].device].by_completion.push(w);
    }
    let mut acked: Vec<(usize, usize)> = log
        .host_writes
        .iter()
        .enumerate()
        .filter_map(|(i, w)| w.acked_at.map(|a| (a, i)))
        .collect();
    acked.sort_unstable();
    let mut acked_applied = 0;
    let region_sectors = (region as usize) / SECTOR_BYTES;
    // Per sector: the newest write the host may rely on (0: none).
    let mut required = vec![0u64; region_sectors];
    let mut covered_before = 0; // host writes acked before this are covered
    let mut durable = vec![false; log.writes.len()];
    let mut last_seq_issued = 0u64;
    let mut at = 0usize; // events applied
    let shingled: Vec<bool> = stack
        .shingled_band_bytes
        .iter()
        .map(Option::is_some)
        .collect();
    for k in crash_points(log, opts, &shingled) {
        while at < k {
            match log.events[at] {
                Event::FlushCompleted(f) => {
                    let fl = &log.flushes[f];
                    let s = &mut stores[fl.device];
                    s.durable_before = s.durable_before.max(fl.submitted_at);
                    while s.applied < s.by_completion.len() {
                        let w = s.by_completion[s.applied];
                        if log.writes[w].completed_at.unwrap() >= s.durable_before {
                            break;
                        }
                        if !s.volatile {
                            apply_write(&mut s.image, log, w);
                        }
                        durable[w] = true;
                        s.applied += 1;
                    }
                }
                Event::HostFlushDone(f) => {
                    covered_before = covered_before.max(log.host_flushes[f].issued_at);
                    while acked_applied < acked.len() && acked[acked_applied].0 < covered_before {
                        let hw = &log.host_writes[acked[acked_applied].1];
                        for s in hw.first_sector..hw.first_sector + hw.sectors {
                            if let Some(r) = required.get_mut(s as usize) {
                                *r = (*r).max(hw.seq);
                            }
                        }
                        acked_applied += 1;
                    }
                }
                Event::HostWriteIssued(w) => last_seq_issued = log.host_writes[w].seq,
                _ => {}
            }
            at += 1;
        }
        report.crash_points += 1;
        // Writes submitted before the crash that are not durable: those
        // completed (in completion order), then those in flight.
        let mut unflushed: Vec<(usize, usize)> = log
            .writes
            .iter()
            .enumerate()
            .filter(|(i, w)| w.submitted_at < k && !durable[*i])
            // A failed write is taken as not landed once a flush of its
            // store after the failure completed (it does not land later).
            .filter(|(_, w)| {
                !w.failed_at
                    .is_some_and(|f| f < k && stores[w.device].durable_before > f)
            })
            .map(|(i, w)| (w.completed_at.filter(|&c| c < k).unwrap_or(usize::MAX), i))
            .collect();
        if opts.surprise_every > 0 {
            unflushed.sort_unstable_by_key(|&(_, i)| i); // submission order
        } else {
            unflushed.sort_unstable();
        }
        let unflushed: Vec<usize> = unflushed.into_iter().map(|(_, i)| i).collect();
        let kinds: &[StateKind] = if opts.surprise_every > 0 {
            &[StateKind::Prefix]
        } else {
            &StateKind::RANDOM
        };
        for &kind in kinds {
            let ki = StateKind::ALL.iter().position(|&x| x == kind).unwrap();
            if opts
                .only
                .is_some_and(|(p, only)| p != k as u64 || only != kind)
            {
                continue;
            }
            let state_seed =
                opts.seed ^ (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (ki as u64) << 56;
            let plan = plan_state(&stores, log, &unflushed, kind, state_seed);
            report.states_by_kind[ki] += 1;
            // With an array, the state is read back twice: as restarted,
            // then with one member lost (a rebuild reads parity: the RAID 5
            // write hole shows there).
            let lost = (!stack.redundant_arrays.is_empty()).then(|| {
                let (d, n) = stack.redundant_arrays
                    [(state_seed % stack.redundant_arrays.len() as u64) as usize];
                (d, ((state_seed >> 16) % n as u64) as usize)
            });
            let fails = |plan: &Plan, sectors: &mut u64, degraded: &mut u64| {
                let images = materialize(&stores, log, plan);
                let read = |images, lost| {
                    restart_and_read(
                        stack,
                        images,
                        lost,
                        region,
                        unit,
                        state_seed,
                        opts.max_delay_ns,
                    )
                };
                let (image, after) = match read(images, None) {
                    Err(message) => return Some((None, message)),
                    Ok(r) => r,
                };
                *sectors += region_sectors as u64;
                if let Some(f) = check_image(&image, &required, last_seq_issued) {
                    return Some(f);
                }
                let (d, m) = lost?;
                *degraded += 1;
                let what = format!(
                    "with member {m} of device {d} ({}) lost after the restart",
                    stack.device_label(d)
                );
                match read(after, Some((d, m))) {
                    Err(message) => Some((None, format!("{what}: {message}"))),
                    Ok((image, _)) => {
                        *sectors += region_sectors as u64;
                        check_image(&image, &required, last_seq_issued)
                            .map(|(sector, message)| (sector, format!("{what}: {message}")))
                    }
                }
            };
            let Some(mut found) = fails(
                &plan,
                &mut report.sectors_checked,
                &mut report.degraded_reads,
            ) else {
                continue;
            };
            // Shrink: drop unflushed writes (and the tear) one at a time
            // while the state still fails the same way (the same sector,
            // or the restart itself).
            let mut plan = plan;
            let (mut scratch, mut scratch_degraded) = (0, 0);
            let sector = found.0;
            let mut same =
                |p: &Plan| fails(p, &mut scratch, &mut scratch_degraded).filter(|f| f.0 == sector);
            if plan.torn.is_some() {
                let without = Plan {
                    torn: None,
                    ..plan.clone()
                };
                if let Some(f) = same(&without) {
                    (plan, found) = (without, f);
                }
            }
            let mut i = plan.writes.len();
            while i > 0 {
                i -= 1;
                let mut without = plan.clone();
                without.writes.remove(i);
                if let Some(f) = same(&without) {
                    (plan, found) = (without, f);
                }
            }
            report.violations.push(Violation {
                crash_point: k as u64,
                kind,
                state_seed,
                sector: found.0,
                message: found.1,
                unflushed_writes: unflushed.len() as u64,
                writes_applied: plan.writes,
                torn: plan.torn.map(|(w, a, b)| (w, a as u64, b as u64)),
            });
        }
    }
}

/// Which unflushed writes reach the medium in a state, in order, and the
/// one torn write (its sectors [from, to) only).
#[derive(Clone, Debug, Default)]
struct Plan {
    writes: Vec<usize>,
    torn: Option<(usize, usize, usize)>,
}

fn plan_state(
    stores: &[StoreState],
    log: &Log,
    unflushed: &[usize],
    kind: StateKind,
    state_seed: u64,
) -> Plan {
    let mut rng = Rng(state_seed);
    let mut writes: Vec<usize> = match kind {
        StateKind::Durable => Vec::new(),
        StateKind::Everything | StateKind::Prefix => unflushed.to_vec(),
        StateKind::Subset | StateKind::Torn => {
            let mut c: Vec<usize> = unflushed
                .iter()
                .copied()
                .filter(|_| rng.below(2) == 0)
                .collect();
            // Fisher-Yates: any order.
            for i in (1..c.len()).rev() {
                c.swap(i, rng.below(i as u64 + 1) as usize);
            }
            c
        }
    };
    let mut torn = None;
    if kind == StateKind::Torn && !writes.is_empty() {
        // A write to a shingled store is the one to tear, if there is one.
        let pick = writes
            .iter()
            .position(|&w| stores[log.writes[w].device].shingled_band_bytes.is_some())
            .unwrap_or_else(|| rng.below(writes.len() as u64) as usize);
        let w = writes.remove(pick);
        let sectors = (log.writes[w].len_bytes as usize) / SECTOR_BYTES;
        if sectors > 0 {
            let j = 1 + rng.below(sectors as u64) as usize; // sectors that land
            // A shingled disk writes in order: only a prefix can land.
            let shingled = stores[log.writes[w].device].shingled_band_bytes.is_some();
            torn = Some(if shingled || rng.below(2) == 0 {
                (w, 0, j)
            } else {
                (w, sectors - j, sectors)
            });
        }
    }
    Plan { writes, torn }
}

fn materialize(stores: &[StoreState], log: &Log, plan: &Plan) -> Vec<Vec<u8>> {
    let mut images: Vec<Vec<u8>> = stores
        .iter()
        .map(|s| {
            if s.volatile {
                vec![0u8; s.image.len()]
            } else {
                s.image.clone()
            }
        })
        .collect();
    for &w in &plan.writes {
        let d = log.writes[w].device;
        if !stores[d].volatile {
            apply_write(&mut images[d], log, w);
        }
    }
    if let Some((w, from, to)) = plan.torn {
        let d = log.writes[w].device;
        if !stores[d].volatile {
            apply_sectors(&mut images[d], log, w, from, to);
            if let Some(band) = stores[d].shingled_band_bytes
                && to * SECTOR_BYTES < log.writes[w].len_bytes as usize
            {
                // The write stopped mid-band: the rest of the band is lost.
                let stop = log.writes[w].offset_bytes as usize + to * SECTOR_BYTES;
                let band = band as usize;
                let end = (stop / band + 1) * band;
                let end = end.min(images[d].len());
                images[d][stop..end].fill(0xA5);
            }
        }
    }
    images
}

/// The first sector that breaks the promise, and why.
fn check_image(
    image: &[u8],
    required: &[u64],
    last_seq_issued: u64,
) -> Option<(Option<u64>, String)> {
    for (s, bytes) in image.chunks_exact(SECTOR_BYTES).enumerate() {
        let need = required[s];
        let lba = s as u64;
        let bad = match stamp::decode(bytes, lba) {
            Sector::Zeros if need > 0 => Some(format!(
                "reads zeros; write #{need} of it was acknowledged before a completed FLUSH"
            )),
            Sector::Zeros => None,
            Sector::Written { seq } if seq < need => Some(format!(
                "reads write #{seq}, older than write #{need} acknowledged before a completed FLUSH"
            )),
            Sector::Written { seq } if seq > last_seq_issued => Some(format!(
                "reads write #{seq}, which was not issued before the crash"
            )),
            Sector::Written { .. } => None,
            Sector::Foreign { lba: Some(other) } => Some(format!(
                "reads sector {other}'s data (a block that belongs elsewhere){}",
                if need > 0 {
                    format!("; write #{need} was flushed")
                } else {
                    String::new()
                }
            )),
            Sector::Foreign { lba: None } => Some(format!(
                "reads bytes no host write produced (garbage, metadata or a torn sector){}",
                if need > 0 {
                    format!("; write #{need} was flushed")
                } else {
                    String::new()
                }
            )),
        };
        if let Some(why) = bad {
            return Some((
                Some(lba),
                format!("sector {lba} (byte {}): {why}", lba * SECTOR_BYTES as u64),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sector_passes_only_with_a_write_no_older_than_the_flushed_one() {
        let mut img = vec![0u8; 4 * SECTOR_BYTES];
        stamp::fill(&mut img[0..512], 0, 5);
        stamp::fill(&mut img[512..1024], 1, 3);
        stamp::fill(&mut img[1536..2048], 2, 4); // sector 2's data at sector 3
        // Sector 0: 5 >= 5; sector 1: 3 < 4 -> older.
        let r = check_image(&img, &[5, 4, 0, 0], 9).unwrap();
        assert_eq!(r.0, Some(1));
        assert!(r.1.contains("older than write #4"), "{}", r.1);
        // Zeros where a flushed write should be.
        let r = check_image(&img, &[5, 3, 1, 0], 9).unwrap();
        assert_eq!(r.0, Some(2));
        assert!(r.1.contains("zeros"), "{}", r.1);
        // Another sector's data.
        let r = check_image(&img, &[5, 3, 0, 0], 9).unwrap();
        assert_eq!(r.0, Some(3));
        assert!(r.1.contains("sector 2's data"), "{}", r.1);
        // A write from after the crash.
        let r = check_image(&img[..1024], &[0, 0], 4).unwrap();
        assert_eq!(r.0, Some(0));
        assert!(check_image(&img[..1024], &[0, 0], 5).is_none());
    }
}

//! BLOCK_STATUS: where the bytes of a range live, for each negotiated
//! metadata context.
//!
//! - `tierlab:tier`: the policy's own map (`Policy::locate`); an extent's
//!   flags are the tier's index in the policy's tier names (listed in
//!   `tierlab serve`'s banner and docs/serve.md), e.g. ATSMF 0 = memory,
//!   1 = flash; caches and HSWD 0 = cache, 1 = backing.
//! - `base:allocation`: for each located extent, whether its backing store
//!   ever had those bytes written (`Backend::allocation`: SEEK_DATA /
//!   SEEK_HOLE for sparse files, chunk presence for RAM); a hole is
//!   reported as hole + zero. Stores that cannot tell report data.

use tierlab_core::policy::{Extent as Located, Policy};
use tierlab_nbd::{Extent, STATE_HOLE, STATE_ZERO};
use tierlab_real::backend::Backend;

use crate::conn::Context;

/// At most this many extents per context in one reply: a client asks again
/// for the rest (the protocol allows a reply that covers less).
pub(crate) const EXTENTS_MAX: usize = 4096;
/// The range is located in steps of this size, so a huge request on a
/// fragmented cache does not build a huge list first.
const LOCATE_STEP_BYTES: u64 = 64 << 20;

/// Extents of [offset, offset + len) for `context`, merged, non-empty,
/// covering a prefix of the range (all of it unless `EXTENTS_MAX` cut it).
pub(crate) fn extents(
    policy: &dyn Policy,
    backends: &[Box<dyn Backend>],
    context: Context,
    offset_bytes: u64,
    len_bytes: u32,
    req_one: bool,
) -> Vec<Extent> {
    let limit = if req_one { 1 } else { EXTENTS_MAX };
    let mut out: Vec<Extent> = Vec::new();
    let mut located: Vec<Located> = Vec::new();
    let mut runs: Vec<(u64, bool)> = Vec::new();
    let end = offset_bytes + len_bytes as u64;
    let mut at = offset_bytes;
    'steps: while at < end {
        let step = (end - at).min(LOCATE_STEP_BYTES);
        located.clear();
        policy.locate(at, step, &mut located);
        let covered: u64 = located.iter().map(|e| e.len_bytes).sum();
        debug_assert_eq!(
            covered,
            step,
            "{} located {covered} of {step} bytes at {at}",
            policy.name()
        );
        if covered == 0 {
            break; // past the policy's address space: report what we have
        }
        for e in &located {
            match context {
                Context::Tier => {
                    if !push(&mut out, e.len_bytes, e.tier as u32, limit) {
                        break 'steps;
                    }
                }
                Context::Allocation => {
                    runs.clear();
                    match backends.get(e.device) {
                        Some(b) => b.allocation(e.device_offset_bytes, e.len_bytes, &mut runs),
                        None => runs.push((e.len_bytes, true)),
                    }
                    for &(n, written) in &runs {
                        let flags = if written { 0 } else { STATE_HOLE | STATE_ZERO };
                        if !push(&mut out, n, flags, limit) {
                            break 'steps;
                        }
                    }
                }
            }
        }
        at += covered.min(step);
    }
    // Never past the request (a store's runs are clipped to it too).
    let mut total: u64 = 0;
    out.retain_mut(|x| {
        let left = (len_bytes as u64).saturating_sub(total);
        if left == 0 {
            return false;
        }
        x.len_bytes = (x.len_bytes as u64).min(left) as u32;
        total += x.len_bytes as u64;
        true
    });
    out
}

/// Appends `len` bytes with `flags`, merging with the previous extent;
/// false when the list is full.
fn push(out: &mut Vec<Extent>, mut len: u64, flags: u32, limit: usize) -> bool {
    while len > 0 {
        if let Some(last) = out.last_mut()
            && last.flags == flags
            && (last.len_bytes as u64) < u32::MAX as u64
        {
            let add = len.min(u32::MAX as u64 - last.len_bytes as u64);
            last.len_bytes += add as u32;
            len -= add;
            continue;
        }
        if out.len() >= limit {
            return false;
        }
        let n = len.min(u32::MAX as u64);
        out.push(Extent {
            len_bytes: n as u32,
            flags,
        });
        len -= n;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierlab_core::policy::Passthrough;
    use tierlab_real::backend::RamBackend;

    #[test]
    fn allocation_follows_the_ram_store_and_merges() {
        let ram = RamBackend::new(8 << 20);
        ram.write_at(&[1; 10], (2 << 20) + 5).unwrap();
        let backends: Vec<Box<dyn Backend>> = vec![Box::new(ram)];
        let e = extents(
            &Passthrough,
            &backends,
            Context::Allocation,
            0,
            8 << 20,
            false,
        );
        let hole = STATE_HOLE | STATE_ZERO;
        assert_eq!(
            e,
            [
                Extent {
                    len_bytes: 2 << 20,
                    flags: hole
                },
                Extent {
                    len_bytes: 1 << 20,
                    flags: 0
                },
                Extent {
                    len_bytes: 5 << 20,
                    flags: hole
                },
            ]
        );
        let one = extents(
            &Passthrough,
            &backends,
            Context::Allocation,
            0,
            8 << 20,
            true,
        );
        assert_eq!(
            one,
            [Extent {
                len_bytes: 2 << 20,
                flags: hole
            }]
        );
        let tier = extents(&Passthrough, &backends, Context::Tier, 4096, 8192, false);
        assert_eq!(
            tier,
            [Extent {
                len_bytes: 8192,
                flags: 0
            }]
        );
    }
}

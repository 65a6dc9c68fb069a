//! `Policy::locate` helpers shared by the policies: one implementation of
//! the merge rule, so every policy's NBD `tierlab:tier` reply is as short
//! as the placement allows (a reply has a limited number of extents).

use tierlab_core::policy::Extent;

/// Appends `e` to `out`, merged into the last extent when that one was
/// appended by the same `locate` call (index `>= from`: what the caller
/// had in `out` before is not ours to change), lies in the same tier on
/// the same device and ends where `e` starts there.
pub fn push_extent(out: &mut Vec<Extent>, from: usize, e: Extent) {
    assert!(e.len_bytes > 0, "an empty extent");
    if out.len() > from
        && let Some(last) = out.last_mut()
        && last.tier == e.tier
        && last.device == e.device
        && last.device_offset_bytes.checked_add(last.len_bytes) == Some(e.device_offset_bytes)
    {
        last.len_bytes += e.len_bytes;
        return;
    }
    out.push(e);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(len_bytes: u64, tier: u16, device: usize, device_offset_bytes: u64) -> Extent {
        Extent {
            len_bytes,
            tier,
            device,
            device_offset_bytes,
        }
    }

    #[test]
    fn merges_only_contiguous_runs_of_this_call() {
        let mut out = vec![ext(10, 0, 0, 0)];
        // Contiguous with the caller's own extent: not merged into it.
        push_extent(&mut out, 1, ext(5, 0, 0, 10));
        push_extent(&mut out, 1, ext(5, 0, 0, 15));
        // Same tier, a gap on the device; then another device.
        push_extent(&mut out, 1, ext(1, 0, 0, 30));
        push_extent(&mut out, 1, ext(1, 0, 1, 31));
        push_extent(&mut out, 1, ext(1, 1, 1, 32));
        assert_eq!(
            out,
            vec![
                ext(10, 0, 0, 0),
                ext(10, 0, 0, 10),
                ext(1, 0, 0, 30),
                ext(1, 0, 1, 31),
                ext(1, 1, 1, 32)
            ]
        );
    }
}

//! Linear concatenation, like device-mapper's `linear` target: the volume is
//! the devices laid end to end (each contributing `sizes_bytes[i]`), so a
//! static placement such as "the first 64 GiB on memory, the rest on flash"
//! is one config. An IO that crosses a boundary is split; the host IO
//! completes when its last part does and is attributed to the tier of its
//! first byte. Tier i is device i.
//!
//! Trims pass through like any IO (without data); a flush goes to device 0
//! (the executor syncs every device after it completes). Nothing is ever
//! held back, so `drain` has nothing to write; `locate` maps through the
//! segments.

use tierlab_core::policy::{BufRef, Extent, HostIo, IoError, Outbox, Policy};
use tierlab_core::{DeviceIo, Op, ParamError, TimeNs};

use crate::extent::push_extent;

pub struct Linear {
    /// Start offset of each device's segment in the volume, plus the end.
    starts: Vec<u64>,
    names: Vec<String>,
    /// Per host IO: parts still outstanding and its tier, indexed by a slot.
    pending: Vec<(u64, u32, u16)>,
    /// Per slot: the error of a part that failed.
    failed: Vec<Option<IoError>>,
    free: Vec<usize>,
}

impl Linear {
    /// `segments`: (tier name, bytes) in volume order.
    pub fn new(segments: &[(String, u64)]) -> Result<Linear, ParamError> {
        if segments.is_empty() {
            return Err(ParamError::new("devices", "none", "at least one device"));
        }
        let mut starts = vec![0u64];
        for (name, size) in segments {
            if *size == 0 {
                return Err(ParamError::new(
                    format!("devices.{name}"),
                    "a size of 0 bytes",
                    "a device of at least one byte",
                ));
            }
            let end = starts.last().unwrap().checked_add(*size).ok_or_else(|| {
                ParamError::new("devices", "a total size above 2^64 bytes", "less in total")
            })?;
            starts.push(end);
        }
        Ok(Linear {
            starts,
            names: segments.iter().map(|s| s.0.clone()).collect(),
            pending: Vec::new(),
            failed: Vec::new(),
            free: Vec::new(),
        })
    }

    pub fn volume_bytes(&self) -> u64 {
        *self.starts.last().unwrap()
    }

    /// Checked after every handler in debug builds: every slot is free
    /// exactly once or has parts in flight, and a free slot carries no
    /// error into its next host IO.
    fn check_invariants(&self) {
        assert_eq!(self.pending.len(), self.failed.len());
        let mut free = vec![false; self.pending.len()];
        for &s in &self.free {
            assert!(!free[s], "linear: slot {s} is free twice");
            free[s] = true;
        }
        for (s, &(id, parts, _)) in self.pending.iter().enumerate() {
            if free[s] {
                assert!(
                    parts == 0 && self.failed[s].is_none(),
                    "linear: free slot {s} has {parts} parts or an error"
                );
            } else {
                assert!(
                    parts > 0,
                    "linear: host IO {id} in slot {s} has no part in flight"
                );
            }
        }
    }

    fn segment_of(&self, offset: u64) -> usize {
        // Few segments: a linear scan beats a binary search.
        let mut i = 0;
        while i + 2 < self.starts.len() && offset >= self.starts[i + 1] {
            i += 1;
        }
        i
    }
}

impl Policy for Linear {
    fn name(&self) -> &str {
        "linear"
    }

    fn tier_names(&self) -> Vec<String> {
        self.names.clone()
    }

    fn on_host_io(&mut self, _now_ns: TimeNs, io: HostIo, out: &mut Outbox) {
        let first = self.segment_of(io.offset_bytes);
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.pending.push((0, 0, 0));
                self.failed.push(None);
                self.pending.len() - 1
            }
        };
        let mut parts = 0;
        let mut offset = io.offset_bytes;
        let end = io.offset_bytes + io.size_bytes as u64;
        let mut seg = first;
        loop {
            let seg_end = self.starts[seg + 1];
            let part_end = if seg + 2 == self.starts.len() {
                end
            } else {
                end.min(seg_end)
            };
            out.device_ios.push((
                seg,
                DeviceIo {
                    tag: slot as u64,
                    op: io.op,
                    offset_bytes: offset - self.starts[seg],
                    size_bytes: (part_end - offset) as u32,
                },
            ));
            if matches!(io.op, Op::Read | Op::Write) {
                let buf = BufRef::Host {
                    host_id: io.id,
                    offset_bytes: offset - io.offset_bytes,
                };
                out.data_for(seg, slot as u64, buf);
            }
            parts += 1;
            if part_end >= end {
                break;
            }
            offset = part_end;
            seg += 1;
        }
        self.pending[slot] = (io.id, parts, first as u16);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    fn moves_data(&self) -> bool {
        true
    }

    /// No host IO part in flight (every slot is free).
    fn is_drained(&self) -> bool {
        self.free.len() == self.pending.len()
    }

    /// Segment by segment: tier and device i at the offset inside segment
    /// i. Bytes past the volume are left out.
    fn locate(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Extent>) {
        let from = out.len();
        let end = offset_bytes
            .saturating_add(len_bytes)
            .min(self.volume_bytes());
        let mut at = offset_bytes;
        while at < end {
            let seg = self.segment_of(at);
            let hi = self.starts[seg + 1].min(end);
            let ext = Extent {
                len_bytes: hi - at,
                tier: seg as u16,
                device: seg,
                device_offset_bytes: at - self.starts[seg],
            };
            push_extent(out, from, ext);
            at = hi;
        }
    }

    fn on_device_completion(
        &mut self,
        _now_ns: TimeNs,
        _device: usize,
        tag: u64,
        out: &mut Outbox,
    ) {
        let slot = tag as usize;
        let (id, parts, tier) = &mut self.pending[slot];
        assert!(*parts > 0, "a completion for free slot {slot}");
        *parts -= 1;
        if *parts == 0 {
            match self.failed[slot].take() {
                Some(e) => out.failed.push((*id, e)),
                None => out.complete.push((*id, *tier)),
            }
            self.free.push(slot);
        }
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// A failed part fails the host IO once its other parts are done.
    fn on_device_error(
        &mut self,
        now_ns: TimeNs,
        device: usize,
        tag: u64,
        error: IoError,
        out: &mut Outbox,
    ) -> bool {
        self.failed[tag as usize].get_or_insert(error);
        self.on_device_completion(now_ns, device, tag, out);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierlab_core::Op;

    #[test]
    fn splits_at_boundaries_and_completes_after_the_last_part() {
        let mut l = Linear::new(&[("memory".into(), 8192), ("flash".into(), 1 << 20)]).unwrap();
        let mut out = Outbox::default();
        l.on_host_io(
            0,
            HostIo {
                id: 7,
                op: Op::Read,
                offset_bytes: 4096,
                size_bytes: 8192,
                tenant: 0,
            },
            &mut out,
        );
        let parts: Vec<(usize, u64, u32)> = out
            .device_ios
            .iter()
            .map(|(d, io)| (*d, io.offset_bytes, io.size_bytes))
            .collect();
        assert_eq!(parts, vec![(0, 4096, 4096), (1, 0, 4096)]);
        let tag = out.device_ios[0].1.tag;
        out.clear();
        l.on_device_completion(5, 1, tag, &mut out);
        assert!(out.complete.is_empty());
        l.on_device_completion(9, 0, tag, &mut out);
        assert_eq!(out.complete, vec![(7, 0)]);
        // Entirely on the second device.
        out.clear();
        l.on_host_io(
            0,
            HostIo {
                id: 8,
                op: Op::Write,
                offset_bytes: 16384,
                size_bytes: 4096,
                tenant: 0,
            },
            &mut out,
        );
        assert_eq!(
            (out.device_ios[0].0, out.device_ios[0].1.offset_bytes),
            (1, 16384 - 8192)
        );
        assert!(Linear::new(&[]).is_err());
        assert!(Linear::new(&[("x".into(), 0)]).is_err());
    }
}

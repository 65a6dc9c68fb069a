//! Cutting traces: a time window in minutes from the first record (as in
//! "minutes 1920–2020" of an MSR volume), an LBA range, the first N records,
//! one device — and the densest region of a given size, re-based to offset 0
//! (how the ATSMF paper cut an 800 GB VDI volume out of 64 TB).

use rustc_hash::FxHashMap;

use crate::error::{Result, TraceError};
use crate::reader::RecordStream;
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

/// Which records to keep. All conditions must hold; `first` counts kept records.
#[derive(Clone, Debug, Default)]
pub struct SliceSpec {
    /// `[start, end)` in minutes from the first record's time.
    pub minutes: Option<(f64, f64)>,
    /// `[start, end)` in bytes; a record is kept if it starts inside.
    pub offset_range_bytes: Option<(u64, u64)>,
    /// Stop after this many kept records.
    pub first: Option<u64>,
    /// Keep only this device (a name from the trace's device table).
    pub device: Option<String>,
}

/// A filter over another stream.
pub struct Slice<S: RecordStream> {
    inner: S,
    spec: SliceSpec,
    window_ns: Option<(u64, u64)>,
    first_time_ns: Option<u64>,
    kept: u64,
    /// The latest record time seen, for the span of what was read.
    last_time_ns: Option<u64>,
    /// Records read from the inner stream.
    pub seen: u64,
}

impl<S: RecordStream> Slice<S> {
    pub fn inner(&self) -> &S {
        &self.inner
    }

    pub fn new(inner: S, spec: SliceSpec) -> Result<Self> {
        let window_ns = match spec.minutes {
            Some((a, b)) => {
                if !(a.is_finite() && b.is_finite() && a >= 0.0 && b > a) {
                    return Err(TraceError::Invalid(format!(
                        "invalid time window {a}–{b} minutes: need 0 <= start < end"
                    )));
                }
                if inner.time_base() == TimeBase::None {
                    return Err(TraceError::Invalid(
                        "this trace has no timestamps: a time window cannot be cut from it".into(),
                    ));
                }
                Some(((a * 60e9).round() as u64, (b * 60e9).round() as u64))
            }
            None => None,
        };
        if let Some((a, b)) = spec.offset_range_bytes {
            if b <= a {
                return Err(TraceError::Invalid(format!(
                    "invalid LBA range {a}–{b} bytes: need start < end"
                )));
            }
        }
        Ok(Slice {
            inner,
            spec,
            window_ns,
            first_time_ns: None,
            kept: 0,
            last_time_ns: None,
            seen: 0,
        })
    }

    /// Minutes from the first to the latest record read (with timestamps).
    pub fn span_minutes(&self) -> Option<f64> {
        if self.inner.time_base() == TimeBase::None {
            return None;
        }
        let (a, b) = (self.first_time_ns?, self.last_time_ns?);
        Some(b.saturating_sub(a) as f64 / 60e9)
    }

    fn keep(&mut self, r: &IoRecord) -> bool {
        let first = *self.first_time_ns.get_or_insert(r.time_ns);
        self.last_time_ns = Some(self.last_time_ns.map_or(r.time_ns, |t| t.max(r.time_ns)));
        if let Some((a, b)) = self.window_ns {
            let Some(since) = r.time_ns.checked_sub(first) else {
                return false; // earlier than the first record: before minute 0
            };
            if since < a || since >= b {
                return false;
            }
        }
        if let Some((a, b)) = self.spec.offset_range_bytes {
            if r.offset_bytes < a || r.offset_bytes >= b {
                return false;
            }
        }
        if let Some(name) = &self.spec.device {
            if self.inner.devices().name(r.device_id) != Some(name.as_str()) {
                return false;
            }
        }
        true
    }
}

impl<S: RecordStream> RecordStream for Slice<S> {
    fn next_record(&mut self) -> Result<Option<IoRecord>> {
        if self.spec.first.is_some_and(|n| self.kept >= n) {
            return Ok(None);
        }
        while let Some(r) = self.inner.next_record()? {
            self.seen += 1;
            if self.keep(&r) {
                self.kept += 1;
                return Ok(Some(r));
            }
        }
        // A device the whole trace never named is a mistake, not an empty
        // slice: say so (at the end, when the device table is complete).
        if let Some(name) = &self.spec.device {
            check_device(self.inner.devices(), name)?;
        }
        Ok(None)
    }

    fn devices(&self) -> &DeviceTable {
        self.inner.devices()
    }

    fn time_base(&self) -> TimeBase {
        self.inner.time_base()
    }
}

/// Fails unless the trace's device table names `name` (listing the first
/// 20 names, and the nearest one).
fn check_device(devices: &DeviceTable, name: &str) -> Result<()> {
    if devices.names().iter().any(|n| n == name) {
        return Ok(());
    }
    let names = devices.names();
    let more = if names.len() > 20 {
        format!(" (and {} more)", names.len() - 20)
    } else {
        String::new()
    };
    Err(TraceError::Invalid(format!(
        "device {name:?} is not in the trace{}; devices: {}{more}",
        crate::names::did_you_mean(name, names.iter().map(String::as_str)),
        names
            .iter()
            .take(20)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// The region holding the most IOs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DensestRegion {
    pub device_id: u32,
    pub device: String,
    pub offset_bytes: u64,
    pub size_bytes: u64,
    /// IOs starting inside the region.
    pub ios_inside: u64,
    pub ios_total: u64,
}

/// Finds the granule-aligned window of `size_bytes` (a multiple of
/// `granule_bytes`) that the most IOs start in, counting by IO start offset.
/// Memory grows with the number of touched granules, not with trace length.
/// Ties go to the lowest device id, then the lowest offset.
pub fn find_densest(
    stream: &mut dyn RecordStream,
    size_bytes: u64,
    granule_bytes: u64,
    device: Option<&str>,
) -> Result<DensestRegion> {
    if granule_bytes == 0 || size_bytes == 0 || size_bytes % granule_bytes != 0 {
        return Err(TraceError::Invalid(format!(
            "region size {size_bytes} bytes must be a positive multiple of the granule ({granule_bytes} bytes)"
        )));
    }
    let mut counts: FxHashMap<(u32, u64), u64> = FxHashMap::default();
    let mut total = 0u64;
    while let Some(r) = stream.next_record()? {
        if let Some(name) = device {
            if stream.devices().name(r.device_id) != Some(name) {
                continue;
            }
        }
        if r.op == Op::Flush || r.size_bytes == 0 {
            continue; // no address: kept with the region's device, not counted
        }
        total += 1;
        *counts
            .entry((r.device_id, r.offset_bytes / granule_bytes))
            .or_default() += 1;
    }
    if let Some(name) = device {
        check_device(stream.devices(), name)?;
    }
    if total == 0 {
        return Err(TraceError::Invalid(
            "the trace has no records to find a dense region in".into(),
        ));
    }
    let mut keys: Vec<(u32, u64, u64)> = counts.into_iter().map(|((d, g), c)| (d, g, c)).collect();
    keys.sort_unstable();
    let width = size_bytes / granule_bytes;
    // Two pointers: window [keys[lo].granule, keys[lo].granule + width) per device.
    let mut best = (0u64, 0u32, 0u64); // (count, device, start granule)
    let mut hi = 0;
    let mut sum = 0u64;
    for lo in 0..keys.len() {
        let (dev, start, _) = keys[lo];
        if hi < lo {
            hi = lo;
            sum = 0;
        }
        while hi < keys.len() && keys[hi].0 == dev && keys[hi].1 < start.saturating_add(width) {
            sum += keys[hi].2;
            hi += 1;
        }
        if sum > best.0 {
            best = (sum, dev, start);
        }
        sum -= keys[lo].2;
    }
    let (ios_inside, device_id, granule) = best;
    Ok(DensestRegion {
        device_id,
        device: stream.devices().name(device_id).unwrap_or("").to_string(),
        offset_bytes: granule * granule_bytes,
        size_bytes,
        ios_inside,
        ios_total: total,
    })
}

/// Keeps the IOs of one region and re-bases them to offset 0. IOs that run
/// past the region's end are clipped to it (counted in `clipped`).
pub struct Rebase<S: RecordStream> {
    inner: S,
    region: DensestRegion,
    pub clipped: u64,
    /// IOs kept (flushes not counted: they are kept as the device's barriers).
    pub kept: u64,
    pub flushes_kept: u64,
}

impl<S: RecordStream> Rebase<S> {
    pub fn new(inner: S, region: DensestRegion) -> Self {
        Rebase {
            inner,
            region,
            clipped: 0,
            kept: 0,
            flushes_kept: 0,
        }
    }
}

impl<S: RecordStream> RecordStream for Rebase<S> {
    fn next_record(&mut self) -> Result<Option<IoRecord>> {
        let start = self.region.offset_bytes;
        let end = start.saturating_add(self.region.size_bytes);
        while let Some(mut r) = self.inner.next_record()? {
            if r.device_id != self.region.device_id {
                continue;
            }
            if r.op == Op::Flush || r.size_bytes == 0 {
                // Barriers of the region's device stay, at offset 0.
                r.offset_bytes = 0;
                self.flushes_kept += 1;
                return Ok(Some(r));
            }
            if r.offset_bytes < start || r.offset_bytes >= end {
                continue;
            }
            if r.end_bytes() > end {
                r.size_bytes = (end - r.offset_bytes) as u32;
                self.clipped += 1;
            }
            r.offset_bytes -= start;
            self.kept += 1;
            return Ok(Some(r));
        }
        Ok(None)
    }

    fn devices(&self) -> &DeviceTable {
        self.inner.devices()
    }

    fn time_base(&self) -> TimeBase {
        self.inner.time_base()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::Op;

    /// A stream over a fixed list, for tests (also spread.rs's).
    pub struct VecStream {
        records: std::vec::IntoIter<IoRecord>,
        devices: DeviceTable,
    }

    impl VecStream {
        pub fn new(records: Vec<IoRecord>, devices: &[&str]) -> Self {
            VecStream {
                records: records.into_iter(),
                devices: devices.iter().map(|s| s.to_string()).collect(),
            }
        }
    }

    impl RecordStream for VecStream {
        fn next_record(&mut self) -> Result<Option<IoRecord>> {
            Ok(self.records.next())
        }
        fn devices(&self) -> &DeviceTable {
            &self.devices
        }
        fn time_base(&self) -> TimeBase {
            TimeBase::Relative
        }
    }

    fn rec(time_s: u64, dev: u32, offset: u64) -> IoRecord {
        IoRecord {
            time_ns: time_s * 1_000_000_000,
            offset_bytes: offset,
            size_bytes: 4096,
            device_id: dev,
            op: Op::Read,
            response_ns: None,
        }
    }

    #[test]
    fn densest_picks_the_busiest_window_by_hand_count() {
        const G: u64 = 1 << 30;
        // Device 0: granules 0 (1 IO), 5 (3 IOs), 6 (2 IOs), 9 (4 IOs).
        // Device 1: granule 2 (5 IOs).
        let mut v = vec![rec(0, 0, 10)];
        v.extend((0..3).map(|i| rec(1, 0, 5 * G + i * 4096)));
        v.extend((0..2).map(|i| rec(2, 0, 6 * G + i)));
        v.extend((0..4).map(|i| rec(3, 0, 9 * G + i)));
        v.extend((0..5).map(|i| rec(4, 1, 2 * G + i)));
        // Width 2 GiB: device 0 best is [5,7) = 5 IOs; device 1 [2,4) = 5 IOs; tie → device 0.
        let r = find_densest(&mut VecStream::new(v.clone(), &["a", "b"]), 2 * G, G, None).unwrap();
        assert_eq!(
            (r.device_id, r.offset_bytes, r.ios_inside, r.ios_total),
            (0, 5 * G, 5, 15)
        );
        // Width 5 GiB: [5,10) holds 3+2+4 = 9.
        let r = find_densest(&mut VecStream::new(v.clone(), &["a", "b"]), 5 * G, G, None).unwrap();
        assert_eq!((r.offset_bytes, r.ios_inside), (5 * G, 9));
        // Restricted to device b.
        let r = find_densest(&mut VecStream::new(v.clone(), &["a", "b"]), G, G, Some("b")).unwrap();
        assert_eq!(
            (r.device_id, r.offset_bytes, r.ios_inside, r.ios_total),
            (1, 2 * G, 5, 5)
        );
        assert!(
            find_densest(
                &mut VecStream::new(v.clone(), &["a", "b"]),
                G,
                G,
                Some("zz")
            )
            .is_err()
        );
        assert!(find_densest(&mut VecStream::new(v, &["a", "b"]), G + 1, G, None).is_err());
    }

    #[test]
    fn rebase_keeps_only_the_region_and_clips() {
        const G: u64 = 1 << 30;
        let v = vec![
            rec(0, 0, G - 4096),
            rec(1, 0, G),
            rec(2, 0, 2 * G - 1024),
            rec(3, 0, 2 * G),
            rec(4, 1, G),
        ];
        let region = DensestRegion {
            device_id: 0,
            device: "a".into(),
            offset_bytes: G,
            size_bytes: G,
            ios_inside: 2,
            ios_total: 5,
        };
        let mut rb = Rebase::new(VecStream::new(v, &["a", "b"]), region);
        let mut out = vec![];
        while let Some(r) = rb.next_record().unwrap() {
            out.push((r.offset_bytes, r.size_bytes));
        }
        assert_eq!(out, vec![(0, 4096), (G - 1024, 1024)]);
        assert_eq!(rb.clipped, 1);
    }

    #[test]
    fn flushes_are_not_counted_and_stay_with_the_region_device() {
        const G: u64 = 1 << 30;
        let flush = IoRecord {
            size_bytes: 0,
            op: Op::Flush,
            ..rec(0, 0, 0)
        };
        let v = vec![
            flush,
            flush,
            flush,
            flush,
            rec(1, 0, 5 * G),
            rec(2, 0, 5 * G + 4096),
            flush,
        ];
        let r = find_densest(&mut VecStream::new(v.clone(), &["a"]), G, G, None).unwrap();
        assert_eq!((r.offset_bytes, r.ios_inside, r.ios_total), (5 * G, 2, 2));
        let mut rb = Rebase::new(VecStream::new(v, &["a"]), r);
        let mut ops = vec![];
        while let Some(x) = rb.next_record().unwrap() {
            ops.push((x.op, x.offset_bytes));
        }
        assert_eq!(ops.iter().filter(|o| o.0 == Op::Flush).count(), 5);
        assert_eq!((rb.kept, rb.flushes_kept), (2, 5));
        assert!(ops.contains(&(Op::Read, 4096)));
    }

    #[test]
    fn slice_by_minutes_device_and_count() {
        let v: Vec<IoRecord> = (0..100)
            .map(|i| rec(60 + i * 30, (i % 2) as u32, i * 4096))
            .collect();
        // Minutes [10, 20) from the first record (t=60 s): times 660..1260 s → i in 20..40.
        let spec = SliceSpec {
            minutes: Some((10.0, 20.0)),
            ..Default::default()
        };
        let mut s = Slice::new(VecStream::new(v.clone(), &["a", "b"]), spec).unwrap();
        let mut got = vec![];
        while let Some(r) = s.next_record().unwrap() {
            got.push(r.offset_bytes / 4096);
        }
        assert_eq!(got, (20..40).collect::<Vec<_>>());
        let spec = SliceSpec {
            device: Some("b".into()),
            first: Some(3),
            offset_range_bytes: Some((10 * 4096, 1 << 40)),
            ..Default::default()
        };
        let mut s = Slice::new(VecStream::new(v, &["a", "b"]), spec).unwrap();
        let mut got = vec![];
        while let Some(r) = s.next_record().unwrap() {
            got.push(r.offset_bytes / 4096);
        }
        assert_eq!(got, vec![11, 13, 15]);
    }
}

//! read → write → read is lossless for every writable format: on every
//! shared trace the format can hold, and on arbitrary records (proptest).

mod common;

use std::path::Path;

use proptest::prelude::*;
use tierlab_trace::writer::{WriteOptions, write_trace};
use tierlab_trace::{
    DeviceTable, Format, IoRecord, Op, ReadOptions, RecordStream, Result, TimeBase,
};

/// A stream over records already in memory.
struct VecStream {
    records: std::vec::IntoIter<IoRecord>,
    devices: DeviceTable,
    time_base: TimeBase,
}

impl VecStream {
    fn new(records: Vec<IoRecord>, devices: Vec<String>, time_base: TimeBase) -> Self {
        VecStream {
            records: records.into_iter(),
            devices: devices.into_iter().collect(),
            time_base,
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
        self.time_base
    }
}

fn write_then_read(
    records: &[IoRecord],
    devices: &[String],
    time_base: TimeBase,
    format: Format,
    dir: &Path,
    name: &str,
) -> (Vec<IoRecord>, Vec<String>, TimeBase) {
    let path = dir.join(name);
    let mut s = VecStream::new(records.to_vec(), devices.to_vec(), time_base);
    write_trace(&mut s, &path, format, &WriteOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    // Read back with detection: the written file must also be recognised.
    let opts = ReadOptions::default();
    let out = common::read_all(&path, &opts);
    let detected = tierlab_trace::open(&path).unwrap().format();
    assert_eq!(
        detected, format,
        "written {format} file detected as {detected}"
    );
    out
}

/// What a format keeps of a record, so a first conversion can be compared
/// with its source: fio keeps µs relative to the first record and no
/// response; DiskSim keeps ns but no response; MSR and native keep all.
/// MSR has no "unknown response" marker: a missing one is written as 0.
/// Text readers number devices in order of first appearance, so device ids
/// are compared in that canonical order (names are checked separately).
fn carried(format: Format, records: &[IoRecord]) -> Vec<IoRecord> {
    let base = records.first().map_or(0, |r| r.time_ns);
    let carried: Vec<IoRecord> = records
        .iter()
        .map(|r| match format {
            Format::FioIolog => IoRecord {
                time_ns: (r.time_ns - base) / 1000 * 1000,
                response_ns: None,
                ..*r
            },
            Format::Disksim => IoRecord {
                response_ns: None,
                ..*r
            },
            Format::Msr => IoRecord {
                response_ns: Some(r.response_ns.unwrap_or(0)),
                ..*r
            },
            _ => *r,
        })
        .collect();
    if format == Format::Native {
        carried
    } else {
        canonical_devices(&carried)
    }
}

fn canonical_devices(records: &[IoRecord]) -> Vec<IoRecord> {
    let mut order: Vec<u32> = Vec::new();
    records
        .iter()
        .map(|r| {
            let id = match order.iter().position(|&d| d == r.device_id) {
                Some(i) => i,
                None => {
                    order.push(r.device_id);
                    order.len() - 1
                }
            };
            IoRecord {
                device_id: id as u32,
                ..*r
            }
        })
        .collect()
}

fn fits(format: Format, records: &[IoRecord]) -> bool {
    match format {
        Format::Native => true,
        Format::Msr => records.iter().all(|r| {
            matches!(r.op, Op::Read | Op::Write)
                && r.time_ns % 100 == 0
                && r.response_ns.is_none_or(|t| t % 100 == 0)
        }),
        Format::Disksim => records.iter().all(|r| {
            matches!(r.op, Op::Read | Op::Write)
                && r.offset_bytes % 512 == 0
                && r.size_bytes % 512 == 0
        }),
        Format::FioIolog => records.windows(2).all(|w| w[0].time_ns <= w[1].time_ns),
        _ => false,
    }
}

#[test]
fn shared_traces_round_trip_through_every_writable_format() {
    let Some(dir) = common::shared_traces() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let files = [
        "msr/hm_0-sample-1k.csv",
        "msr/msr-window-rw20_80.replay.txt",
        "umass-spc/websearch-60s.disksim.txt",
        "tencent-cbs/cbs-sample-50k.csv.bz2",
        "tencent-cbs/cbs-window-rw60_40.flashnet.csv",
        "systor17/systor17-sample.csv.gz",
        "cloudphysics/cloudphysics-2h.vscsi",
        "arc/P3.lis.zst",
        "mqsim/tpcc-small.disksim.txt",
    ];
    let mut checked = 0;
    for file in files {
        let (orig, devices, time_base) = common::read_all(&dir.join(file), &ReadOptions::default());
        for format in Format::WRITABLE {
            if !fits(format, &orig) {
                continue;
            }
            let (once, dev1, tb1) =
                write_then_read(&orig, &devices, time_base, format, tmp.path(), "a");
            assert_eq!(
                once,
                carried(format, &orig),
                "{file} → {format}: records differ after one conversion"
            );
            if format == Format::Native {
                assert_eq!(
                    (&dev1, tb1),
                    (&devices, time_base),
                    "{file} → native: devices/time base"
                );
            }
            // Lossless for the format's own files: a second pass changes nothing.
            let (twice, dev2, tb2) = write_then_read(&once, &dev1, tb1, format, tmp.path(), "b");
            assert_eq!(
                (&twice, &dev2, tb2),
                (&once, &dev1, tb1),
                "{file} → {format} → {format}: not lossless"
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} (file, format) pairs checked");
}

fn arb_record(devices: u32) -> impl Strategy<Value = IoRecord> {
    (
        0u64..1 << 40,
        0u64..1 << 40,
        0u32..(1 << 24),
        0..devices,
        0u8..2,
        proptest::option::of(0u64..1 << 36),
    )
        .prop_map(|(t, off, size, dev, op, rt)| IoRecord {
            time_ns: t,
            offset_bytes: off,
            size_bytes: size,
            device_id: dev,
            op: if op == 0 { Op::Read } else { Op::Write },
            response_ns: rt,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_records_round_trip(mut records in proptest::collection::vec(arb_record(3), 1..200)) {
        let tmp = tempfile::tempdir().unwrap();
        let devices: Vec<String> = vec!["alpha_0".into(), "alpha_1".into(), "beta_7".into()];
        // Native: everything, as is.
        let (back, dev, tb) = write_then_read(&records, &devices, TimeBase::Relative, Format::Native, tmp.path(), "n");
        prop_assert_eq!(&back, &records);
        prop_assert_eq!((dev, tb), (devices.clone(), TimeBase::Relative));
        // MSR: 100 ns resolution.
        for r in &mut records {
            r.time_ns -= r.time_ns % 100;
            r.response_ns = r.response_ns.map(|t| t - t % 100);
        }
        let (back, names, _) = write_then_read(&records, &devices, TimeBase::Relative, Format::Msr, tmp.path(), "m.csv");
        prop_assert_eq!(&back, &carried(Format::Msr, &records));
        let first_name = &devices[records[0].device_id as usize];
        prop_assert_eq!(&names[0], first_name);
        // DiskSim: whole sectors, no response, numeric device names.
        let numeric: Vec<String> = vec!["0".into(), "1".into(), "2".into()];
        let sectors: Vec<IoRecord> = records.iter().map(|r| IoRecord {
            offset_bytes: r.offset_bytes / 512 * 512, size_bytes: r.size_bytes / 512 * 512, response_ns: None, ..*r
        }).collect();
        let (back, _, _) = write_then_read(&sectors, &numeric, TimeBase::Relative, Format::Disksim, tmp.path(), "d");
        prop_assert_eq!(&back, &carried(Format::Disksim, &sectors));
        // fio: ordered µs times relative to the first record, no response.
        let mut ordered = records.clone();
        ordered.sort_by_key(|r| r.time_ns);
        let (back, _, _) = write_then_read(&ordered, &devices, TimeBase::Relative, Format::FioIolog, tmp.path(), "f.iolog");
        prop_assert_eq!(back, carried(Format::FioIolog, &ordered));
    }
}

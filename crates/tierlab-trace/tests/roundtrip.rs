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

/// Regressions from the review: writing onto the input, failed writes,
/// the MSR time base, unrepresentable device names.
#[test]
fn writers_replace_outputs_atomically_and_refuse_what_they_cannot_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut text = String::new();
    for i in 0..50_000u64 {
        text.push_str(&format!(
            "{},hm,0,Read,{},4096,100\n",
            128166372003061629 + i * 1000,
            i * 4096
        ));
    }
    let src = d.join("big.csv");
    std::fs::write(&src, &text).unwrap();
    // Converting a file onto itself keeps every record.
    for (name, format) in [("big.csv", Format::Msr), ("big.tlt", Format::Native)] {
        let p = d.join(name);
        write_trace(
            &mut tierlab_trace::open(&src).unwrap(),
            &p,
            format,
            &WriteOptions::default(),
        )
        .unwrap();
        write_trace(
            &mut tierlab_trace::open(&p).unwrap(),
            &p,
            format,
            &WriteOptions::default(),
        )
        .unwrap();
        assert_eq!(
            common::read_all(&p, &ReadOptions::default()).0.len(),
            50_000,
            "{name}"
        );
    }
    // A failing conversion leaves no output behind.
    let bad = d.join("bad.csv");
    std::fs::write(
        &bad,
        "128166372003061629,hm,0,Read,0,4096,1\n128166372003061629,hm,0,Rd,0,4096,1\n",
    )
    .unwrap();
    let out = d.join("bad.tlt");
    assert!(
        write_trace(
            &mut tierlab_trace::open(&bad).unwrap(),
            &out,
            Format::Native,
            &WriteOptions::default()
        )
        .is_err()
    );
    assert!(!out.exists(), "a failed write must not leave a file");
    assert_eq!(
        std::fs::read_dir(d)
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains("tmp"))
            .count(),
        0
    );
    // MSR with relative ticks stays relative through native and MSR.
    let rel = d.join("rel.csv");
    std::fs::write(&rel, "1000,hm,0,Read,0,4096,100\n").unwrap();
    let (recs, _, tb) = common::read_all(&rel, &ReadOptions::default());
    assert_eq!((tb, recs[0].time_ns), (TimeBase::Relative, 100_000));
    let n = d.join("rel.tlt");
    write_trace(
        &mut tierlab_trace::open(&rel).unwrap(),
        &n,
        Format::Native,
        &WriteOptions::default(),
    )
    .unwrap();
    assert_eq!(
        common::read_all(&n, &ReadOptions::default()).2,
        TimeBase::Relative
    );
    let m = d.join("rel2.csv");
    write_trace(
        &mut tierlab_trace::open(&rel).unwrap(),
        &m,
        Format::Msr,
        &WriteOptions::default(),
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(&m).unwrap(),
        "1000,hm,0,Read,0,4096,100\n"
    );
    // Device names MSR cannot hold, and fio file names that would merge devices.
    let r = |dev: u32| IoRecord {
        time_ns: 0,
        offset_bytes: 0,
        size_bytes: 512,
        device_id: dev,
        op: Op::Read,
        response_ns: None,
    };
    let mut s = VecStream::new(vec![r(0)], vec!["a,b_1".into()], TimeBase::Relative);
    let e = write_trace(
        &mut s,
        &d.join("x.csv"),
        Format::Msr,
        &WriteOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("comma"), "{e}");
    let mut s = VecStream::new(
        vec![r(0), r(1)],
        vec!["sda".into(), "sdb".into()],
        TimeBase::Relative,
    );
    let opts = WriteOptions {
        fio_filename: Some("/dev/sdz".into()),
    };
    let e = write_trace(&mut s, &d.join("x.iolog"), Format::FioIolog, &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("{device}"), "{e}");
    let mut s = VecStream::new(
        vec![r(0), r(1)],
        vec!["dev".into(), "0".into()],
        TimeBase::Relative,
    );
    let e = write_trace(
        &mut s,
        &d.join("x.disksim"),
        Format::Disksim,
        &WriteOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("device 0"), "{e}");
}

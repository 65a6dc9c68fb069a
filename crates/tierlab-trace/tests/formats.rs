//! Hand-computed cases for formats without a file in ../shared/traces:
//! blkparse (Q/D choice, flush/discard, summary), fio v2 waits, UMass SPC,
//! oracleGeneral and VSCSI v2 binaries, and detection of each.

mod common;

use std::path::Path;

use tierlab_trace::formats::blkparse::Event;
use tierlab_trace::{Format, IoRecord, Op, ReadOptions, TimeBase};

fn read(path: &Path, options: &ReadOptions) -> (Vec<IoRecord>, Vec<String>, TimeBase) {
    common::read_all(path, options)
}

const BLKPARSE: &str = "  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kworker/u8:0]
  8,0    3        2     0.000001000   697  G   W 223490 + 8 [kworker/u8:0]
  8,0    3        3     0.000002000   697  D   W 223490 + 8 [kworker/u8:0]
  8,0    1        1     0.000100000   697  C   W 223490 + 8 [0]
  8,16   0        4     0.100000000   700  Q   R 1000 + 16 [cat]
  8,16   0        5     0.100050000   700  D   R 1000 + 16 [cat]
  8,0    3        6     0.200000000   697  Q FWS [jbd2/sda1-8]
  8,0    3        7     0.200010000   697  D FWS [jbd2/sda1-8]
  8,0    3        8     0.300000000   697  Q  DS 4096 + 2048 [fstrim]
  8,0    3        9     0.300500000   697  D  DS 4096 + 2048 [fstrim]
  8,0    2        0     0.400000000     0  m   N cfq697 slice expired
CPU0 (8,0):
 Reads Queued:           0,        0KiB	 Writes Queued:           1,        4KiB
Total (8,0):
 Reads Queued:           1,        8KiB	 Writes Queued:           1,        4KiB
";

#[test]
fn blkparse_prefers_d_events_and_reads_q_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("trace.blkparse");
    std::fs::write(&path, BLKPARSE).unwrap();
    assert_eq!(
        tierlab_trace::open(&path).unwrap().format(),
        Format::Blkparse
    );
    let (d, devices, _) = read(&path, &ReadOptions::default());
    assert_eq!(devices, vec!["8,0".to_string(), "8,16".to_string()]);
    let got: Vec<(u64, u64, u32, u32, Op)> = d
        .iter()
        .map(|r| (r.time_ns, r.offset_bytes, r.size_bytes, r.device_id, r.op))
        .collect();
    assert_eq!(
        got,
        vec![
            (2_000, 223490 * 512, 4096, 0, Op::Write),
            (100_050_000, 1000 * 512, 8192, 1, Op::Read),
            (200_010_000, 0, 0, 0, Op::Flush),
            (300_500_000, 4096 * 512, 2048 * 512, 0, Op::Trim),
        ]
    );
    let q = read(
        &path,
        &ReadOptions {
            blkparse_event: Some(Event::Q),
            ..Default::default()
        },
    )
    .0;
    let times: Vec<u64> = q.iter().map(|r| r.time_ns).collect();
    assert_eq!(times, vec![0, 100_000_000, 200_000_000, 300_000_000]);
}

#[test]
fn blkparse_without_d_events_falls_back_to_q() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("q.blkparse");
    let only_q: String = BLKPARSE
        .lines()
        .filter(|l| !l.contains(" D "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, only_q).unwrap();
    let q = read(&path, &ReadOptions::default()).0;
    assert_eq!(q.len(), 4);
    assert_eq!(q[1].op, Op::Read);
}

#[test]
fn fio_v2_waits_become_time_and_v3_is_microseconds() {
    let tmp = tempfile::tempdir().unwrap();
    let v2 = tmp.path().join("v2.iolog");
    std::fs::write(&v2, "fio version 2 iolog\n/dev/sdb add\n/dev/sdb open\n/dev/sdb read 0 4096\n/dev/sdb wait 1500 0\n/dev/sdb write 8192 512\n/dev/sdb sync\n/dev/sdb close\n").unwrap();
    let (r, devices, _) = read(&v2, &ReadOptions::default());
    assert_eq!(devices, vec!["/dev/sdb".to_string()]);
    let got: Vec<(u64, u64, u32, Op)> = r
        .iter()
        .map(|r| (r.time_ns, r.offset_bytes, r.size_bytes, r.op))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, 0, 4096, Op::Read),
            (1_500_000, 8192, 512, Op::Write),
            (1_500_000, 0, 0, Op::Flush)
        ]
    );
    let v3 = tmp.path().join("v3.iolog");
    std::fs::write(&v3, "fio version 3 iolog\n0 a add\n0 b add\n0 a open\n10 a read 0 4096\n2000000 b trim 4096 8192\n").unwrap();
    let (r, devices, _) = read(&v3, &ReadOptions::default());
    assert_eq!(devices, vec!["a".to_string(), "b".to_string()]);
    assert_eq!(
        (r[0].time_ns, r[1].time_ns, r[1].device_id, r[1].op),
        (10_000, 2_000_000_000, 1, Op::Trim)
    );
}

#[test]
fn umass_spc_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("Financial1.spc");
    std::fs::write(
        &p,
        "0,303567,3584,w,0.000000\n1,55590,3072,W,0.000000,extra\n0,10,512,r,0.026214\n",
    )
    .unwrap();
    assert_eq!(tierlab_trace::open(&p).unwrap().format(), Format::Umass);
    let (r, devices, _) = read(&p, &ReadOptions::default());
    assert_eq!(devices, vec!["0".to_string(), "1".to_string()]);
    assert_eq!(
        (r[0].offset_bytes, r[0].size_bytes, r[0].op),
        (303567 * 512, 3584, Op::Write)
    );
    assert_eq!(
        (r[2].time_ns, r[2].op, r[1].device_id),
        (26_214_000, Op::Read, 1)
    );
}

#[test]
fn oracle_general_and_vscsi_v2_binaries() {
    let tmp = tempfile::tempdir().unwrap();
    let mut bytes = Vec::new();
    for (i, (t, id, size, next)) in [
        (1u32, 42u64, 4096u32, 2i64),
        (1, 7, 512, -1),
        (3, 42, 4096, -1),
    ]
    .iter()
    .enumerate()
    {
        let _ = i;
        bytes.extend_from_slice(&t.to_le_bytes());
        bytes.extend_from_slice(&id.to_le_bytes());
        bytes.extend_from_slice(&size.to_le_bytes());
        bytes.extend_from_slice(&next.to_le_bytes());
    }
    let p = tmp.path().join("w.oracleGeneral");
    std::fs::write(&p, &bytes).unwrap();
    let mut r = tierlab_trace::open(&p).unwrap();
    assert_eq!(r.format(), Format::OracleGeneral);
    let first = tierlab_trace::RecordStream::next_record(&mut r)
        .unwrap()
        .unwrap();
    assert_eq!(
        (first.time_ns, first.offset_bytes, first.size_bytes),
        (1_000_000_000, 42, 4096)
    );
    // Also found by content, without the name hint.
    let p2 = tmp.path().join("anon.bin");
    std::fs::write(&p2, &bytes).unwrap();
    assert_eq!(
        tierlab_trace::open(&p2).unwrap().format(),
        Format::OracleGeneral
    );

    // VSCSI v2: u16 cmd, u16 ver, u32 sn, u32 len, u32 nSG, u64 lbn, u64 ts, u64 rt.
    let mut v2 = Vec::new();
    for (cmd, lbn, ts, rt) in [(0x28u16, 8u64, 100u64, 50u64), (0x2a, 16, 200, 75)] {
        v2.extend_from_slice(&cmd.to_le_bytes());
        v2.extend_from_slice(&0x0200u16.to_le_bytes());
        v2.extend_from_slice(&1u32.to_le_bytes());
        v2.extend_from_slice(&4096u32.to_le_bytes());
        v2.extend_from_slice(&1u32.to_le_bytes());
        v2.extend_from_slice(&lbn.to_le_bytes());
        v2.extend_from_slice(&ts.to_le_bytes());
        v2.extend_from_slice(&rt.to_le_bytes());
    }
    let p3 = tmp.path().join("t.vscsi2");
    std::fs::write(&p3, &v2).unwrap();
    let (r, _, _) = read(&p3, &ReadOptions::default());
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[1].op, r[1].offset_bytes, r[1].time_ns, r[1].response_ns),
        (Op::Write, 16 * 512, 200_000, Some(75_000))
    );
}

#[test]
fn native_refuses_compression_and_reports_truncation() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("s.txt");
    std::fs::write(&src, "0.000 0 4096 4096 0\n1.000 0 8192 4096 1\n").unwrap();
    let native = tmp.path().join("s.tlt");
    let mut reader = tierlab_trace::open(&src).unwrap();
    tierlab_trace::writer::write_trace(&mut reader, &native, Format::Native, &Default::default())
        .unwrap();
    let bytes = std::fs::read(&native).unwrap();
    // Cut inside the records: header promises 2 records, names trailer missing.
    let cut = tmp.path().join("cut.tlt");
    std::fs::write(&cut, &bytes[..64 + 40]).unwrap();
    let err = tierlab_trace::open(&cut)
        .err()
        .expect("truncated native trace must fail")
        .to_string();
    assert!(
        err.contains("truncated") || err.contains("device names"),
        "{err}"
    );
    // Compressed native: refused with the reason.
    let zst = tmp.path().join("s.tlt.zst");
    std::fs::write(&zst, zstd::encode_all(&bytes[..], 3).unwrap()).unwrap();
    let err = tierlab_trace::open(&zst).err().unwrap().to_string();
    assert!(err.contains("uncompressed"), "{err}");
}

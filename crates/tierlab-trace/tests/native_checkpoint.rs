//! A native trace written while a server runs is readable after every
//! checkpoint, and the records after it continue the same file.

use tierlab_trace::formats::native::NativeWriter;
use tierlab_trace::{IoRecord, Op, RecordStream, TimeBase, TraceReader};

fn rec(i: u64, device_id: u32) -> IoRecord {
    IoRecord {
        time_ns: i * 1000,
        offset_bytes: i * 4096,
        size_bytes: 4096,
        device_id,
        op: if i % 2 == 0 { Op::Read } else { Op::Write },
        response_ns: None,
    }
}

fn read_all(path: &std::path::Path) -> (Vec<IoRecord>, Vec<String>) {
    let mut r = TraceReader::open(path, &Default::default()).unwrap();
    let mut out = Vec::new();
    while let Some(x) = r.next_record().unwrap() {
        out.push(x);
    }
    (out, r.devices().names().to_vec())
}

#[test]
fn checkpointed_trace_reads_back_then_grows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.tlt");
    let mut w = NativeWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    for i in 0..3 {
        w.write(&rec(i, 0)).unwrap();
    }
    w.checkpoint(&["conn0".into()], TimeBase::Relative).unwrap();
    let (got, names) = read_all(&path);
    assert_eq!(got, (0..3).map(|i| rec(i, 0)).collect::<Vec<_>>());
    assert_eq!(names, ["conn0"]);
    // More records (and a device) after the checkpoint overwrite its trailer.
    for i in 3..10_000 {
        w.write(&rec(i, (i % 2) as u32)).unwrap();
    }
    w.checkpoint(&["conn0".into(), "conn1".into()], TimeBase::Relative)
        .unwrap();
    assert_eq!(read_all(&path).0.len(), 10_000);
    w.write(&rec(10_000, 0)).unwrap();
    let n = w
        .finish(&["conn0".into(), "conn1".into()], TimeBase::Relative)
        .unwrap();
    assert_eq!(n, 10_001);
    let (got, names) = read_all(&path);
    let want: Vec<IoRecord> = (0..3)
        .map(|i| rec(i, 0))
        .chain((3..10_001).map(|i| rec(i, (i % 2) as u32)))
        .collect();
    assert_eq!(got.len(), want.len());
    let first_diff = got.iter().zip(&want).position(|(a, b)| a != b);
    assert_eq!(
        first_diff,
        None,
        "{:?}",
        first_diff.map(|i| (&got[i], &want[i]))
    );
    assert_eq!(names, ["conn0", "conn1"]);
}

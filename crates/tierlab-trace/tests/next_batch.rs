//! `RecordStream::next_batch` (the native reader's fast path) gives exactly
//! what `next_record` gives: the same records, the same error at the same
//! place, the same skips and counters — across the reader's 16 MiB
//! page-release boundaries and for every batch size.

use tierlab_trace::formats::native::{HEADER_BYTES, NativeWriter, RECORD_BYTES};
use tierlab_trace::{IoRecord, Op, ReadOptions, RecordStream, TimeBase, TraceReader};

fn rec(i: u64) -> IoRecord {
    IoRecord {
        time_ns: i * 1000,
        offset_bytes: (i * 7919 % 100_000) * 4096,
        size_bytes: 512 << (i % 5),
        device_id: (i % 3) as u32,
        op: Op::ALL[(i % 4) as usize],
        response_ns: (i % 2 == 0).then_some(i),
    }
}

/// A native trace of `n` records; the records at `bad` get an invalid op
/// code, a device id beyond the trailer's, or an offset whose end overflows.
fn write(path: &std::path::Path, n: u64, bad: &[u64]) {
    let mut w = NativeWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    for i in 0..n {
        w.write(&rec(i)).unwrap();
    }
    w.finish(&["a".into(), "b".into(), "c".into()], TimeBase::Relative)
        .unwrap();
    let mut bytes = std::fs::read(path).unwrap();
    for (k, &i) in bad.iter().enumerate() {
        let at = HEADER_BYTES + i as usize * RECORD_BYTES;
        match k % 3 {
            0 => bytes[at + 30] = 9,                                              // op
            1 => bytes[at + 28..at + 30].copy_from_slice(&7u16.to_le_bytes()),    // device
            _ => bytes[at + 8..at + 16].copy_from_slice(&u64::MAX.to_le_bytes()), // offset
        }
    }
    std::fs::write(path, bytes).unwrap();
}

/// Everything a reader yields, one record at a time or in batches of
/// `batch`: the records, then the error text if it stopped on one, and the
/// counters.
fn drain(
    path: &std::path::Path,
    skip_bad: bool,
    batch: Option<usize>,
) -> (Vec<IoRecord>, Option<String>, u64, u64) {
    let options = ReadOptions {
        skip_bad,
        ..Default::default()
    };
    let mut r = TraceReader::open(path, &options).unwrap();
    let mut out = Vec::new();
    let error = loop {
        let step = match batch {
            None => r
                .next_record()
                .map(|x| x.map(|x| out.push(x)).is_some() as usize),
            Some(b) => r.next_batch(&mut out, b),
        };
        match step {
            Ok(0) => break None,
            Ok(_) => {}
            Err(e) => break Some(e.to_string()),
        }
    };
    (out, error, r.records_read(), r.skipped_bad())
}

#[test]
fn batches_equal_record_by_record() {
    let dir = tempfile::tempdir().unwrap();
    // Just over two release chunks (16 MiB = 524,288 records each).
    let n = 2 * (16 << 20) / RECORD_BYTES as u64 + 1000;
    for (name, bad) in [
        ("clean", vec![]),
        ("bad", vec![5, 524_287, 524_288, 524_300, n - 1]),
    ] {
        let path = dir.path().join(format!("{name}.tlt"));
        write(&path, n, &bad);
        for skip_bad in [false, true] {
            let want = drain(&path, skip_bad, None);
            assert_eq!(
                want.0.len() as u64 + want.3,
                if want.1.is_some() { 5 } else { n },
                "{name}"
            );
            for batch in [1, 3, 128, 4096, 1 << 20] {
                assert!(
                    drain(&path, skip_bad, Some(batch)) == want,
                    "{name} skip_bad {skip_bad} batch {batch}"
                );
            }
        }
    }
}

#[test]
fn batch_of_zero_reads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.tlt");
    write(&path, 10, &[]);
    let mut r = TraceReader::open(&path, &ReadOptions::default()).unwrap();
    let mut out = Vec::new();
    assert_eq!(r.next_batch(&mut out, 0).unwrap(), 0);
    assert_eq!(r.next_batch(&mut out, 4).unwrap(), 4);
    assert_eq!(r.next_batch(&mut out, 100).unwrap(), 6);
    assert_eq!(r.next_batch(&mut out, 100).unwrap(), 0);
    assert_eq!(out, (0..10).map(rec).collect::<Vec<_>>());
}

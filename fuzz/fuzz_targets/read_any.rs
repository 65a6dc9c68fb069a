//! Every reader, with and without format detection and --skip-bad, over
//! arbitrary bytes (optionally compressed by the input's first bytes): errors
//! are fine, panics, hangs and unbounded memory are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierlab_trace::{Format, ReadOptions, RecordStream, TraceReader};

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("tierlab-fuzz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("input");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let mut formats: Vec<Option<Format>> = vec![None];
    formats.extend(Format::ALL.iter().copied().map(Some));
    for format in formats {
        for skip_bad in [false, true] {
            let options = ReadOptions { format, skip_bad, ..Default::default() };
            if let Ok(mut reader) = TraceReader::open(&path, &options) {
                // Bounded: a reader can yield at most one record per input byte
                // (ARC/blkparse lines are several bytes; binary records 24+).
                let mut n = 0usize;
                while let Ok(Some(_)) = reader.next_record() {
                    n += 1;
                    assert!(n <= data.len() + 1, "more records than input bytes");
                }
            }
        }
    }
});

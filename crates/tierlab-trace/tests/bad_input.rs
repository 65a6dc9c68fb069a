//! Bad input: every malformed record is an error naming the file, the line
//! (or byte offset), the field and the offending text; `skip_bad` skips and
//! counts; truncated compressed files are clear errors; arbitrary bytes never
//! panic or hang in any reader.

use std::io::Write;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use tierlab_trace::{Format, ReadOptions, RecordStream, TraceError, TraceReader};

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Reads to the end; returns (records, the error if any).
fn drain(path: &Path, options: &ReadOptions) -> (u64, Option<TraceError>) {
    let mut reader = match TraceReader::open(path, options) {
        Ok(r) => r,
        Err(e) => return (0, Some(e)),
    };
    let mut n = 0;
    loop {
        match reader.next_record() {
            Ok(Some(_)) => n += 1,
            Ok(None) => return (n, None),
            Err(e) => return (n, Some(e)),
        }
    }
}

fn error_of(path: &Path, format: Option<Format>) -> String {
    let opts = ReadOptions {
        format,
        ..Default::default()
    };
    drain(path, &opts)
        .1
        .unwrap_or_else(|| panic!("{}: expected an error", path.display()))
        .to_string()
}

#[test]
fn malformed_records_name_file_line_field_and_text() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let cases: &[(&str, &[u8], Option<Format>, &str)] = &[
        ("a.csv", b"128166385295514663,hm,0,Write,9056014336,2048,2833\n128166385295514878,hm,0,Wrote,1,512,2617\n", None,
         "a.csv:2: field `Type`: expected `Read` or `Write`, found \"Wrote\""),
        ("b.csv", b"128166385295514663,hm,0,Write,9056014336,2048,2833\n128166385295514878,hm,0,Read,12x4,512,2617\n", None,
         "b.csv:2: field `Offset`: expected an unsigned integer, found \"12x4\""),
        ("c.csv", b"128166385295514663,hm,0,Write,9056014336,2048,2833\n128166385295514878,hm,0,Read\n", None,
         "c.csv:2: field `Offset`: expected a value (the line has too few fields)"),
        ("d.txt", b"0.000 0 200626176 4096 0\n1.5 0 4096 4096 7\n", Some(Format::Replayer),
         "d.txt:2: field `op`: expected 1 (read) or 0 (write), found \"7\""),
        ("e.txt", b"11413000 0 657728 16 1\n11565000 1 -5 64 1\n", None,
         "e.txt:2: field `lba_sector`: expected an unsigned integer, found \"-5\""),
        ("f.csv", b"1538323200,4247200,128,1,1058\n1538323199,13896880,99999999999,0,1063\n", None,
         "f.csv:2: field `Size`"),
        ("g.iolog", b"fio version 3 iolog\n0 /x add\n5 /x read 0\n", None,
         "g.iolog:3: field `length`"),
        ("h.iolog", b"fio version 2 iolog\n/x add\n/x explode 0 4096\n", None,
         "h.iolog:3: field `action`: expected one of add, open, close, read, write, trim, sync, datasync, wait (v2 only), found \"explode\""),
        ("i.csv", b"Timestamp,Response,IOType,LUN,Offset,Size\n1456095145.1,0.0008,X,0,0,4096\n", None,
         "i.csv:2: field `IOType`: expected `R` or `W`, found \"X\""),
        ("j.lis", b"3050771 25 0 0\n2461851 eight 0 1\n", Some(Format::Arc),
         "j.lis:2: field `nblocks`: expected an unsigned integer, found \"eight\""),
        ("k.blk", b"  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kw]\n  8,0    3        2     0.1   697  Q   W 223490 - 8 [kw]\n", None,
         "k.blk:2: field `+`: expected `+` between sector and size, found \"-\""),
        ("l.csv", b"0.000,120,1,4096,4923392,0.091,4096\n0.000,120,3,4096,4923392,0.091,4096\n", None,
         "l.csv:2: field `io_type`: expected 1 (read) or 0 (write), found \"3\""),
        ("m.csv", b"0,100,4096,r,0.5\n0,100,4096,q,0.6\n", None,
         "m.csv:2: field `Opcode`: expected `r` or `w` (either case), found \"q\""),
    ];
    for (name, bytes, format, want) in cases {
        let path = write(d, name, bytes);
        let got = error_of(&path, *format);
        assert!(got.contains(want), "{name}:\n  got:  {got}\n  want: {want}");
        assert!(
            got.starts_with(&path.display().to_string()),
            "{got} should start with the path"
        );
    }
}

#[test]
fn binary_errors_give_byte_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    // Two valid VSCSI v1 records then a third with an unknown SCSI command.
    let mut bytes = Vec::new();
    for (i, cmd) in [0x28u16, 0x2a, 0x12].iter().enumerate() {
        let mut r = [0u8; 32];
        r[0..4].copy_from_slice(&(i as u32).to_le_bytes());
        r[4..8].copy_from_slice(&4096u32.to_le_bytes());
        r[12..14].copy_from_slice(&cmd.to_le_bytes());
        r[14..16].copy_from_slice(&0x100u16.to_le_bytes());
        r[24..32].copy_from_slice(&(1000 * i as u64).to_le_bytes());
        bytes.extend_from_slice(&r);
    }
    let path = write(tmp.path(), "t.vscsi", &bytes);
    let err = error_of(&path, None);
    assert!(err.contains("t.vscsi: byte 64: field `scsi_cmd`"), "{err}");
    // skip_bad: 2 records, 1 skipped.
    let mut r = TraceReader::open(
        &path,
        &ReadOptions {
            skip_bad: true,
            ..Default::default()
        },
    )
    .unwrap();
    let mut n = 0;
    while r.next_record().unwrap().is_some() {
        n += 1;
    }
    assert_eq!((n, r.skipped_bad()), (2, 1));
    // A partial trailing record is an error, not silently dropped.
    let path = write(tmp.path(), "u.vscsi", &bytes[..64 + 10]);
    let err = error_of(&path, Some(Format::Vscsi));
    assert!(err.contains("truncated record: 10 trailing bytes"), "{err}");
}

#[test]
fn skip_bad_skips_and_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(
        tmp.path(),
        "s.txt",
        b"0.000 0 4096 4096 0\n0.1 0 x 4096 1\n0.2 0 8192 4096 1\n0.3 0 8192 4096 9\n0.4 0 0 512 1\n",
    );
    let mut r = TraceReader::open(
        &path,
        &ReadOptions {
            format: Some(Format::Replayer),
            skip_bad: true,
            ..Default::default()
        },
    )
    .unwrap();
    let mut offsets = vec![];
    while let Some(rec) = r.next_record().unwrap() {
        offsets.push(rec.offset_bytes);
    }
    assert_eq!(offsets, vec![4096, 8192, 0]);
    assert_eq!(r.skipped_bad(), 2);
}

fn compress(kind: &str, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match kind {
        "gz" => {
            let mut e = flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
            e.write_all(data).unwrap();
            e.finish().unwrap();
        }
        "bz2" => {
            let mut e = bzip2::write::BzEncoder::new(&mut out, bzip2::Compression::default());
            e.write_all(data).unwrap();
            e.finish().unwrap();
        }
        "xz" => {
            let mut e = liblzma::write::XzEncoder::new(&mut out, 6);
            e.write_all(data).unwrap();
            e.finish().unwrap();
        }
        "zst" => out = zstd::encode_all(data, 3).unwrap(),
        _ => unreachable!(),
    }
    out
}

#[test]
fn truncated_compressed_files_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let mut text = Vec::new();
    for i in 0..20_000u64 {
        writeln!(text, "{}.000 0 {} 4096 {}", i, i * 4096, i % 2).unwrap();
    }
    for kind in ["gz", "bz2", "xz", "zst"] {
        let full = compress(kind, &text);
        let ok = write(tmp.path(), &format!("full.{kind}"), &full);
        let (n, err) = drain(&ok, &ReadOptions::default());
        assert!(err.is_none(), "{kind}: {err:?}");
        assert_eq!(n, 20_000, "{kind}: complete file");
        for cut in [full.len() / 2, full.len() - 4] {
            let path = write(tmp.path(), &format!("cut{cut}.{kind}"), &full[..cut]);
            let (n, err) = drain(&path, &ReadOptions::default());
            let err =
                err.unwrap_or_else(|| panic!("{kind} cut at {cut}: read {n} records and no error"));
            let msg = err.to_string();
            assert!(
                msg.contains("truncated") || msg.contains("corrupt"),
                "{kind}: {msg}"
            );
            assert!(msg.contains(&path.display().to_string()), "{kind}: {msg}");
        }
    }
}

#[test]
fn detection_failures_say_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let e = error_of(&write(tmp.path(), "empty", b""), None);
    assert!(e.contains("empty") && e.contains("--format"), "{e}");
    let e = error_of(&write(tmp.path(), "words", b"hello there world\n"), None);
    assert!(
        e.contains("match no known format") && e.contains("--format"),
        "{e}"
    );
    let e = error_of(
        &write(tmp.path(), "bin", &[0u8, 1, 2, 3, 200, 201, 7, 0, 0, 0]),
        None,
    );
    assert!(e.contains("binary data") && e.contains("--format"), "{e}");
    // blktrace's own binary (BLK_IO_TRACE_MAGIC | version 7): point to
    // blkparse. Two 48-byte events: magic, sequence, time, sector, bytes,
    // action, pid, device (8:0), cpu, error, pdu_len.
    let mut blk = Vec::new();
    for seq in 1u32..=2 {
        blk.extend(0x6561_7407u32.to_le_bytes());
        blk.extend(seq.to_le_bytes());
        blk.extend((1_000_000u64 * seq as u64).to_le_bytes());
        blk.extend((2048u64 * seq as u64).to_le_bytes());
        blk.extend(4096u32.to_le_bytes());
        blk.extend(0x0001_0001u32.to_le_bytes());
        blk.extend(1234u32.to_le_bytes());
        blk.extend((8u32 << 20).to_le_bytes());
        blk.extend(0u32.to_le_bytes());
        blk.extend(0u16.to_le_bytes());
        blk.extend(0u16.to_le_bytes());
    }
    let e = error_of(&write(tmp.path(), "sda.blktrace.0", &blk), None);
    assert!(
        e.contains("a blktrace binary") && e.contains("blkparse -i"),
        "{e}"
    );
    let e = drain(Path::new("/nonexistent/trace.csv"), &ReadOptions::default())
        .1
        .unwrap()
        .to_string();
    assert!(
        e.contains("/nonexistent/trace.csv") && e.contains("No such file"),
        "{e}"
    );
}

#[test]
fn a_binary_file_read_as_text_is_bounded() {
    // 3 MiB without a newline: must fail with a clear message, not buffer it all.
    let tmp = tempfile::tempdir().unwrap();
    let path = write(tmp.path(), "noline.txt", &vec![b'7'; 3 << 20]);
    let e = error_of(&path, Some(Format::Replayer));
    assert!(e.contains("longer than") && e.contains("binary"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Arbitrary bytes through every reader: errors are fine, panics and hangs are not.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..3000), lines in proptest::collection::vec("[ ,0-9a-zA-Z.:+\\[\\]-]{0,60}", 0..20)) {
        let tmp = tempfile::tempdir().unwrap();
        let text = lines.join("\n");
        for (name, data) in [("bytes", &bytes[..]), ("text", text.as_bytes())] {
            let path = write(tmp.path(), name, data);
            let _ = drain(&path, &ReadOptions::default());
            for format in Format::ALL {
                for skip_bad in [false, true] {
                    let _ = drain(&path, &ReadOptions { format: Some(format), skip_bad, ..Default::default() });
                }
            }
        }
    }

    /// Valid records with one field mutated still never panic, and a clean
    /// prefix is still read.
    #[test]
    fn mutated_valid_lines_never_panic(pos in 0usize..60, byte in any::<u8>()) {
        let tmp = tempfile::tempdir().unwrap();
        let mut line = b"128166385295514663,hm,0,Write,9056014336,2048,2833".to_vec();
        let p = pos % line.len();
        line[p] = byte;
        let mut data = b"128166385295514663,hm,0,Read,0,512,1\n".to_vec();
        data.extend_from_slice(&line);
        let path = write(tmp.path(), "m.csv", &data);
        let (n, _) = drain(&path, &ReadOptions { format: Some(Format::Msr), ..Default::default() });
        prop_assert!(n >= 1);
    }
}

/// Regressions from the review of the trace layer.
#[test]
fn review_regressions() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // offset + size past 2^64 is a bad record, not a wrapped footprint.
    let p = write(
        d,
        "o.csv",
        b"128166372003061629,hm,0,Read,18446744073709551615,4096,100\n",
    );
    assert!(
        error_of(&p, None)
            .contains("o.csv:1: field `size`: expected a request that ends below 2^64 bytes")
    );
    // `#` comment lines are skipped by every text reader (detection skips them too).
    let p = write(
        d,
        "c.csv",
        b"# exported by a tool\n128166372003061629,hm,0,Read,0,4096,100\n",
    );
    assert_eq!(drain(&p, &ReadOptions::default()).0, 1);
    // A partial first binary record is reported at byte 0.
    let p = write(d, "t.bin", b"abc");
    assert!(error_of(&p, Some(Format::OracleGeneral)).contains("t.bin: byte 0: truncated record"));
    // MSR devices `a`/12 and `a_`/2 are different devices.
    let p = write(
        d,
        "dev.csv",
        b"128166372003061629,a,12,Read,0,4096,1\n128166372003061629,a_,2,Read,0,4096,1\n",
    );
    let r = TraceReader::open(&p, &ReadOptions::default()).unwrap();
    let mut r = r;
    while r.next_record().unwrap().is_some() {}
    assert_eq!(
        r.devices().names(),
        &["a_12".to_string(), "a__2".to_string()]
    );
    // fio: trailing fields and an overflowing wait are errors.
    let p = write(
        d,
        "f.iolog",
        b"fio version 3 iolog\n0 f add\n2 f write 0 4096 extra\n",
    );
    assert!(error_of(&p, None).contains("f.iolog:3: field `length`: expected end of line"));
    let p = write(
        d,
        "w.iolog",
        b"fio version 2 iolog\nf add\nf wait 18446744073709551615 0\n",
    );
    assert!(error_of(&p, None).contains("w.iolog:3: field `offset`"));
}

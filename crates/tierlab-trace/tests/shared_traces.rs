//! `trace stats` on every file of ../shared/traces against the reference
//! table in its README, computed there by an independent script.

mod common;

use tierlab_trace::{Format, TraceReader, stats};

struct Expected {
    file: &'static str,
    format: Format,
    requests: u64,
    reads: u64,
    writes: u64,
    read_bytes: u64,
    write_bytes: u64,
    blocks: u64,
    span_ms: Option<u64>,
    devices: u64,
}

#[rustfmt::skip]
const TABLE: &[Expected] = &[
    Expected { file: "msr/hm_0-sample-1k.csv", format: Format::Msr, requests: 1000, reads: 508, writes: 492, read_bytes: 6108672, write_bytes: 3580928, blocks: 1917, span_ms: Some(127233), devices: 1 },
    Expected { file: "msr/msr-window-rw20_80.replay.txt", format: Format::Replayer, requests: 10000, reads: 2020, writes: 7980, read_bytes: 3792896, write_bytes: 51017216, blocks: 7385, span_ms: Some(242905), devices: 1 },
    Expected { file: "msr/msr-window-rw40_60.replay.txt", format: Format::Replayer, requests: 10000, reads: 4054, writes: 5946, read_bytes: 19537408, write_bytes: 29298176, blocks: 8968, span_ms: Some(85915), devices: 1 },
    Expected { file: "umass-spc/websearch-60s.disksim.txt", format: Format::Disksim, requests: 24783, reads: 24779, writes: 4, read_bytes: 382085120, write_bytes: 32768, blocks: 93029, span_ms: Some(60055), devices: 6 },
    Expected { file: "tencent-cbs/cbs-sample-50k.csv.bz2", format: Format::Tencent, requests: 50000, reads: 24521, writes: 25479, read_bytes: 646755328, write_bytes: 871636992, blocks: 348239, span_ms: Some(1000), devices: 2038 },
    Expected { file: "tencent-cbs/cbs-window-rw60_40.flashnet.csv", format: Format::Flashnet, requests: 50000, reads: 30012, writes: 19988, read_bytes: 357347328, write_bytes: 244600832, blocks: 14972, span_ms: Some(147000), devices: 1 },
    Expected { file: "tencent-cbs/cbs-window-size_thpt.flashnet.csv", format: Format::Flashnet, requests: 50000, reads: 41638, writes: 8362, read_bytes: 1231163392, write_bytes: 47058944, blocks: 7970, span_ms: Some(77000), devices: 1 },
    Expected { file: "systor17/systor17-sample.csv.gz", format: Format::Systor, requests: 999, reads: 826, writes: 173, read_bytes: 36355584, write_bytes: 2766848, blocks: 9831, span_ms: Some(2448), devices: 1 },
    Expected { file: "cloudphysics/cloudphysics-2h.vscsi", format: Format::Vscsi, requests: 113872, reads: 46974, writes: 66898, read_bytes: 1797412352, write_bytes: 2408565760, blocks: 269210, span_ms: Some(7200090), devices: 1 },
    Expected { file: "arc/OLTP.lis.zst", format: Format::Arc, requests: 914145, reads: 914145, writes: 0, read_bytes: 468042240, write_bytes: 0, blocks: 23361, span_ms: None, devices: 1 },
    Expected { file: "arc/P2.lis.zst", format: Format::Arc, requests: 666176, reads: 666176, writes: 0, read_bytes: 6517501440, write_bytes: 0, blocks: 120308, span_ms: None, devices: 1 },
    Expected { file: "arc/P3.lis.zst", format: Format::Arc, requests: 238578, reads: 238578, writes: 0, read_bytes: 2003095552, write_bytes: 0, blocks: 102348, span_ms: None, devices: 1 },
    Expected { file: "mqsim/tpcc-small.disksim.txt", format: Format::Disksim, requests: 6999, reads: 4381, writes: 2618, read_bytes: 36315136, write_bytes: 23403520, blocks: 20470, span_ms: Some(136), devices: 16 },
];

#[test]
fn stats_match_the_reference_table_exactly() {
    let Some(dir) = common::shared_traces() else {
        return;
    };
    for e in TABLE {
        let path = dir.join(e.file);
        let mut reader = tierlab_trace::open(&path).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(reader.format(), e.format, "{}: detected format", e.file);
        let s = stats::compute(&mut reader).unwrap_or_else(|err| panic!("{err}"));
        let got = (
            s.requests,
            s.reads,
            s.writes,
            s.read_bytes,
            s.write_bytes,
            s.footprint_4k_blocks,
            s.devices,
        );
        let want = (
            e.requests,
            e.reads,
            e.writes,
            e.read_bytes,
            e.write_bytes,
            e.blocks,
            e.devices,
        );
        assert_eq!(
            got, want,
            "{}: (requests, reads, writes, read_bytes, write_bytes, blocks, devices)",
            e.file
        );
        // "span to the millisecond": the table rounds to 3 decimals.
        let span_ms = s.span_s.map(|x| (x * 1000.0).round() as u64);
        assert_eq!(span_ms, e.span_ms, "{}: span in ms", e.file);
    }
}

#[test]
fn arc_p2_page_references_match_the_arc_paper() {
    // The ARC paper's Table III: P2 has 12,729,495 page references, 913,347 distinct pages.
    let Some(dir) = common::shared_traces() else {
        return;
    };
    let mut reader = tierlab_trace::open(dir.join("arc/P2.lis.zst")).unwrap();
    let mut refs = 0u64;
    let mut pages = std::collections::HashSet::new();
    while let Some(r) = tierlab_trace::RecordStream::next_record(&mut reader).unwrap() {
        let first = r.offset_bytes / 512;
        for p in first..first + r.size_bytes as u64 / 512 {
            refs += 1;
            pages.insert(p);
        }
    }
    assert_eq!(refs, 12_729_495);
    assert_eq!(pages.len(), 913_347);
}

#[test]
fn format_override_is_honoured() {
    let Some(dir) = common::shared_traces() else {
        return;
    };
    // The websearch DiskSim file read as classic DiskSim (ms): same IOs, times ×1e6.
    let ns = common::read_all(
        &dir.join("umass-spc/websearch-60s.disksim.txt"),
        &Default::default(),
    )
    .0;
    let opts = tierlab_trace::ReadOptions {
        format: Some(Format::DisksimMs),
        ..Default::default()
    };
    let ms = common::read_all(&dir.join("umass-spc/websearch-60s.disksim.txt"), &opts).0;
    assert_eq!(ns.len(), ms.len());
    assert_eq!(ns[5].time_ns * 1_000_000, ms[5].time_ns);
    assert_eq!(ns[5].offset_bytes, ms[5].offset_bytes);
    // A wrong explicit format fails with a located error, not garbage.
    let opts = tierlab_trace::ReadOptions {
        format: Some(Format::Msr),
        ..Default::default()
    };
    let err = TraceReader::open(dir.join("arc/P3.lis.zst"), &opts)
        .and_then(|mut r| tierlab_trace::RecordStream::next_record(&mut r))
        .unwrap_err()
        .to_string();
    // ... and names the format detection picks.
    assert!(
        err.contains(
            "P3.lis.zst: the forced format `msr` does not read this file (line 1: field `Timestamp`"
        ) && err.contains("detection reads it as `arc`"),
        "{err}"
    );
}

#[test]
fn first_records_decode_to_hand_computed_values() {
    let Some(dir) = common::shared_traces() else {
        return;
    };
    // MSR: 128166385295514663,hm,0,Write,9056014336,2048,2833
    let r = common::read_all(&dir.join("msr/hm_0-sample-1k.csv"), &Default::default());
    assert_eq!(r.1, vec!["hm_0".to_string()]);
    let first = r.0[0];
    assert_eq!(
        first.time_ns,
        (128166385295514663u64 - 116444736000000000) * 100
    );
    assert_eq!(
        (first.offset_bytes, first.size_bytes, first.response_ns),
        (9056014336, 2048, Some(283300))
    );
    // VSCSI: serial 0x800000f4, len 512, cmd 0x2a, lbn 0x028f1a09, ts 0x051fbe82cf22 µs.
    let v = common::read_all(
        &dir.join("cloudphysics/cloudphysics-2h.vscsi"),
        &Default::default(),
    )
    .0;
    assert_eq!(
        (v[0].size_bytes, v[0].offset_bytes, v[0].time_ns),
        (512, 0x028f1a09 * 512, 0x051fbe82cf22 * 1000)
    );
    assert_eq!(v[0].op, tierlab_trace::Op::Write);
    // SYSTOR: 1456095145.133076000,0.000806000,R,0,899056122368,131072
    let s = common::read_all(
        &dir.join("systor17/systor17-sample.csv.gz"),
        &Default::default(),
    )
    .0;
    assert_eq!(
        (s[0].time_ns, s[0].response_ns, s[0].offset_bytes),
        (1_456_095_145_133_076_000, Some(806_000), 899056122368)
    );
    // Tencent: 1538323200,4247200,128,1,1058 → device "1058".
    let t = common::read_all(
        &dir.join("tencent-cbs/cbs-sample-50k.csv.bz2"),
        &Default::default(),
    );
    assert_eq!(
        (t.0[0].offset_bytes, t.0[0].size_bytes, t.1[0].as_str()),
        (4247200 * 512, 65536, "1058")
    );
}

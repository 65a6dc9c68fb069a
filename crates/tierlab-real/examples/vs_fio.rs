//! tierlab's real data path against fio, side by side in one run
//! (docs/benchmarks.md, "Real executor against fio"):
//!
//!   cargo run --release -p tierlab-real --example vs_fio [IOS] [ROUNDS] [FILE] [CASES]
//!
//! Random 4 KiB O_DIRECT reads and writes of a 1 GiB file (default
//! /dev/shm/tierlab-vs-fio.img, created if missing) by `tierlab run`
//! (passthrough, closed loop) and by fio, alternating, ROUNDS rounds
//! (default 5) of IOS IOs (default 300000) each. CASES: a comma list of
//! `read|write:DEPTH:ENGINE` with ENGINE one of uring, uring-sqpoll,
//! inline (default: read and write at QD1 and QD32 on io_uring).
//! Prints medians of each side and of the per-round ratios.

use tierlab_core::Op;
use tierlab_real::EngineKind;
use tierlab_real::fio_compare::{FioCase, FioCompareOptions, compare_with_fio};

fn parse_case(s: &str) -> FioCase {
    let parts: Vec<&str> = s.split(':').collect();
    assert_eq!(
        parts.len(),
        3,
        "a case is read|write:DEPTH:ENGINE, got `{s}`"
    );
    FioCase {
        op: match parts[0] {
            "read" => Op::Read,
            "write" => Op::Write,
            o => panic!("op `{o}`: read or write"),
        },
        iodepth: parts[1].parse().expect("DEPTH: a number"),
        engine: match parts[2] {
            "inline" => EngineKind::Auto,
            e => e.parse().expect("ENGINE"),
        },
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut opts = FioCompareOptions::default();
    if let Some(a) = args.next() {
        opts.ios_per_run = a.parse().expect("IOS: a number");
    }
    if let Some(a) = args.next() {
        opts.rounds = a.parse().expect("ROUNDS: a number");
    }
    if let Some(a) = args.next() {
        opts.path = a.into();
    }
    if let Some(a) = args.next() {
        opts.cases = a.split(',').map(parse_case).collect();
    }
    let r = match compare_with_fio(&opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "{} IOs per run, {} rounds, {} ({}); load {} before, {} after",
        opts.ios_per_run,
        opts.rounds,
        opts.path.display(),
        r.fio_version,
        r.loadavg_before,
        r.loadavg_after
    );
    print!("{}", r.render());
    for c in &r.cases {
        println!("{}: tierlab engine: {}", c.case.label(), c.tierlab_engine);
        for (k, (f, t)) in c.fio.iter().zip(&c.tierlab).enumerate() {
            println!(
                "  round {k}: IOPS fio {:.0} tierlab {:.0} ({:.2}×); CPU µs/IO fio {:.2} tierlab {:.2}; lat µs fio {:.2} tierlab {:.2}",
                f.iops,
                t.iops,
                t.iops / f.iops,
                f.cpu_us_per_io,
                t.cpu_us_per_io,
                f.latency_us_mean,
                t.latency_us_mean
            );
        }
    }
}

//! `tierlab demo --out DIR`: prints what `tierlab_experiments::demo` found
//! (the options are its `DemoArgs`).

use tierlab_experiments::demo::{self, DemoArgs};

use crate::CliResult;

pub fn run(args: DemoArgs) -> CliResult {
    let r = demo::run(&args)?;
    println!("tierlab demo: {} (seed {})", args.preset, args.seed);
    println!(
        "  {} IOs over {:.1} min on a {} GiB LUN; write ratio {:.2}; footprint {:.1} GiB",
        r.records,
        r.span_s.unwrap_or(0.0) / 60.0,
        r.lun_bytes >> 30,
        r.write_ratio.unwrap_or(0.0),
        r.footprint_4k_blocks as f64 * 4096.0 / (1u64 << 30) as f64
    );
    println!(
        "  {} IO concentrations planted ({} drifting): {:.1} % of IOs land inside them, while they cover {:.1} % of the LUN on average",
        r.concentrations_planted,
        r.concentrations_drifting,
        100.0 * r.ios_inside_concentrations_share,
        100.0 * r.lun_share_covered_by_concentrations
    );
    if let Some(rows) = &r.comparison {
        println!(
            "  flash only vs ATSMF vs FlashCache vs ARC (caches sized to ATSMF's peak memory):"
        );
        for row in rows {
            println!(
                "    {:<10} mean response {:>8.4} ms (x{:.2} vs flash), {:>5.1} % of IOs served from memory",
                row.system,
                row.mean_rt_ms,
                row.rt_ratio_vs_flash,
                100.0 * row.mem_access_ratio,
            );
        }
    }
    println!(
        "  wrote {}/{{workload.tlt, workload.iolog, concentrations.csv, heatmap.csv, summary.json{}}}",
        args.out.display(),
        if args.no_compare { "" } else { ", compare/" }
    );
    Ok(())
}

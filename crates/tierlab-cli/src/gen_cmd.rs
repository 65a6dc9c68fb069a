//! `tierlab trace gen`: write a generated workload as a trace file
//! (`tierlab_trace::generate::GenJob`), or list the generators.

use std::path::PathBuf;

use clap::Args;
use tierlab_trace::Format;
use tierlab_trace::generate::{self, GenJob, KvParams};

use crate::CliResult;

/// Generate a synthetic workload or a preset (deterministic: same
/// parameters and seed give the same trace).
#[derive(Args, Clone, Debug)]
#[command(after_help = "Examples:\n  \
    tierlab trace gen --list\n  \
    tierlab trace gen zipf --list\n  \
    tierlab trace gen zipf theta=1.1 region_size_bytes=16g --count 1000000 --out zipf.bin\n  \
    tierlab trace gen atsmf.src1_0 --seed 7 --out src1_0.bin --truth src1_0-truth.csv\n  \
    tierlab trace gen hswd.hm_0 scale=0.1 --to msr --out hm_0.csv.gz")]
pub struct GenArgs {
    /// Generator or preset name (`--list` shows them all).
    #[arg(required_unless_present = "list", value_name = "NAME")]
    pub name: Option<String>,
    /// Parameters as KEY=VALUE (`NAME --list` shows the generator's).
    #[arg(value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Random seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Number of records (same as count=N).
    #[arg(long)]
    pub count: Option<u64>,
    /// Output file (`-` for stdout, text formats only); .gz/.bz2/.xz/.zst compress text formats.
    #[arg(long, short = 'o', required_unless_present = "list")]
    pub out: Option<PathBuf>,
    /// Output format (msr: times are rounded down to its 100 ns ticks).
    #[arg(long, default_value = "native")]
    pub to: Format,
    /// List generators and presets (with NAME: that generator's parameters).
    #[arg(long)]
    pub list: bool,
    /// IO-concentration workloads: write the planted concentrations as CSV.
    #[arg(long, value_name = "FILE.csv")]
    pub truth: Option<PathBuf>,
}

pub fn run(args: GenArgs) -> CliResult {
    if args.list {
        print_list(args.name.as_deref())?;
        return Ok(());
    }
    let (Some(name), Some(out)) = (args.name.as_deref(), args.out.as_ref()) else {
        return Err("a generator NAME and --out are required (see --list)".into());
    };
    let mut params = KvParams::parse(&args.params)?;
    if let Some(count) = args.count {
        if params.get("count").is_some() {
            return Err("give the record count once: either --count or count=N".into());
        }
        params.set("count", &count.to_string())?;
    }
    let mut job = GenJob::new(name, &params, args.seed, args.truth.is_some())?;
    if args.truth.is_some() && !job.has_truth() {
        return Err(format!(
            "--truth: `{name}` plants no concentrations (only io-concentration and the atsmf.* presets do)"
        )
        .into());
    }
    let summary = job.write_trace(out, args.to)?;
    eprintln!(
        "tierlab: wrote {} records of `{name}` (seed {}) to {} ({})",
        summary.records,
        args.seed,
        out.display(),
        args.to
    );
    if let Some(path) = &args.truth {
        let rows = job
            .write_truth(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .unwrap_or(0);
        eprintln!(
            "tierlab: wrote {rows} planted concentrations to {}",
            path.display()
        );
    }
    Ok(())
}

fn print_list(name: Option<&str>) -> CliResult {
    let generators = generate::generators();
    let presets = generate::presets();
    if let Some(name) = name {
        let preset = presets.iter().find(|p| p.name == name);
        let kind = preset.map_or(name, |p| p.generator);
        let Some(info) = generators.iter().find(|g| g.name == kind) else {
            // Reuse the library's message (it suggests similar names).
            generate::resolve(name, &KvParams::new())?;
            return Ok(());
        };
        match preset {
            Some(p) => {
                println!("{}: {}", p.name, p.description);
                println!(
                    "preset of generator `{}`; its parameters can be overridden:",
                    p.generator
                );
            }
            None => println!("{}: {}", info.name, info.description),
        }
        let width = info.params.iter().map(|p| p.name.len()).max().unwrap_or(0);
        for p in &info.params {
            println!(
                "  {:width$}  {}  [{}; default {}]",
                p.name, p.help, p.unit, p.default
            );
        }
        if preset.is_some() {
            // The defaults above are the generator's; show what the preset sets.
            println!("preset values:");
            for (key, value) in generate::resolve(name, &KvParams::new())?.to_kv() {
                println!("  {key}={value}");
            }
        }
        return Ok(());
    }
    println!("generators (tierlab trace gen NAME --list shows parameters):");
    let width = generators
        .iter()
        .map(|g| g.name.len())
        .chain(presets.iter().map(|p| p.name.len()))
        .max()
        .unwrap_or(0);
    for g in &generators {
        println!("  {:width$}  {}", g.name, g.description);
    }
    println!("presets:");
    for p in &presets {
        println!("  {:width$}  {}", p.name, p.description);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: GenArgs,
    }

    fn parse(args: &[&str]) -> GenArgs {
        Cli::try_parse_from(std::iter::once("gen").chain(args.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn writes_a_trace_and_its_truth() {
        let dir = std::env::temp_dir().join(format!("tierlab-gen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("w.bin");
        let truth = dir.join("t.csv");
        let args = parse(&[
            "io-concentration",
            "rate_iops=100",
            "duration_s=600",
            "--seed",
            "3",
            "--count",
            "5000",
            "--out",
            out.to_str().unwrap(),
            "--truth",
            truth.to_str().unwrap(),
        ]);
        run(args).unwrap();
        let mut reader = tierlab_trace::open(&out).unwrap();
        let s = tierlab_trace::stats::compute(&mut reader).unwrap();
        assert_eq!(s.requests, 5000);
        let text = std::fs::read_to_string(&truth).unwrap();
        assert!(text.lines().count() >= 2, "{text}");
        // Bad inputs are errors, not panics.
        let bad = parse(&["zipf", "thta=1", "--out", out.to_str().unwrap()]);
        assert!(
            run(bad)
                .unwrap_err()
                .to_string()
                .contains("unknown parameter `thta`")
        );
        let bad = parse(&[
            "zipf",
            "--out",
            out.to_str().unwrap(),
            "--truth",
            truth.to_str().unwrap(),
        ]);
        assert!(
            run(bad)
                .unwrap_err()
                .to_string()
                .contains("plants no concentrations")
        );
        let bad = parse(&[
            "zipf",
            "count=5",
            "--count",
            "5",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(run(bad).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn list_works() {
        run(parse(&["--list"])).unwrap();
        run(parse(&["hswd.hm_0", "--list"])).unwrap();
        assert!(run(parse(&["nope", "--list"])).is_err());
    }
}

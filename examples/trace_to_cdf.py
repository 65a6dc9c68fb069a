"""From a trace file to a latency CDF plot and a comparison table.

    python examples/trace_to_cdf.py [TRACE] [OUT_DIR]

Replays TRACE (any format tierlab reads; default: a generated 5-minute
IO-concentration workload) through flash only, ATSMF, FlashCache and ARC.
"""
import os, sys, tierlab, tierlab.plots as plots
trace, out = (sys.argv[1:] + [None, "out/example"])[:2]
os.makedirs(out, exist_ok=True)
if not trace:  # no trace given: generate one (deterministic by seed)
    tierlab.generate_to(trace := f"{out}/workload.tlt", "atsmf.src1_0", seed=1, duration_s=300)
res = tierlab.reproduce("atsmf", only="none", traces={"example": trace}, out=out)
print(res.table[["system", "mean_rt_ms", "rt_ratio_vs_flash", "mem_access_ratio"]].to_string(index=False))
runs = {name.split("-")[-1]: res.run(name) for name in res.run_names()}
plots.save(plots.latency_cdf(runs, title=f"response-time CDF: {trace}"), f"{out}/cdf.png")

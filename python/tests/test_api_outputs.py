"""The reproductions, analyses and run directories as DataFrames, checked
against the files the commands wrote; and tierlab.plots against its input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tierlab
import tierlab.plots as plots

REPO = Path(__file__).resolve().parents[2]


def test_reproduce_frames_equal_the_files(atsmf_quick) -> None:
    r = atsmf_quick
    assert r.kind == "atsmf"
    pd.testing.assert_frame_equal(r.table, pd.read_csv(r.dir / "table.csv"))
    assert list(r.table["system"]) == ["flash", "atsmf", "flashcache", "arc"]
    assert set(r.tables) >= {"table", "cdf_src1_0", "memory_src1_0"}
    # The four systems, and ATSMF alone at the sensitivity runs' shares and
    # twice the concurrent concentrations (docs/fidelity.md).
    assert r.run_names() == sorted(
        [f"src1_0-{s}" for s in ("arc", "atsmf", "flash", "flashcache")]
        + ["src1_0-share0.6-atsmf", "src1_0-share0.8-atsmf", "src1_0-active8-atsmf"]
    )
    for system in ("flash", "atsmf"):
        run = r.run(f"src1_0-{system}")
        summary = json.loads((r.dir / "runs" / f"src1_0-{system}" / "summary.json").read_text())
        assert run.summary == summary
        row = r.table[r.table.system == system].iloc[0]
        assert row.mean_rt_ms == pytest.approx(summary["mean_latency_us"] / 1e3, abs=1e-6)
    assert r.run("src1_0-atsmf").policy_series["memory_bytes"].max() == r.table.peak_mem_bytes[1]
    with pytest.raises(KeyError, match="runs:"):
        r.run("nope")


def csv_files(d: Path) -> list[Path]:
    """The tables a reproduction wrote: its CSVs, but not the traces it
    generated or the runs' own outputs (folders in _SKIP_DIRS)."""
    from tierlab._outputs import _SKIP_DIRS

    return sorted(d.glob("*.csv")) + sorted(p for p in d.glob("*/*.csv") if p.parent.name not in _SKIP_DIRS)


def test_every_reproduction_returns_its_files_as_frames(atsmf_quick, raid_quick, qos_quick,
                                                       tierlab_exe: str, tmp_path: Path) -> None:
    """tierlab.reproduce for all four systems: every CSV the command wrote
    is a DataFrame in ``tables``, equal to the file, with the paper-vs-ours
    verdicts; and Python's run writes byte-identical CSVs to the CLI's."""
    import subprocess

    hswd = tierlab.reproduce("hswd", quick=True, only="mapping", out=tmp_path / "hswd")
    for r, kind in ((atsmf_quick, "atsmf"), (hswd, "hswd"), (qos_quick, "qos"), (raid_quick, "raid")):
        assert r.kind == kind
        files = csv_files(r.dir)
        assert {p.relative_to(r.dir).with_suffix("").as_posix() for p in files} == set(r.tables), kind
        for p in files:
            pd.testing.assert_frame_equal(r.tables[p.relative_to(r.dir).with_suffix("").as_posix()], pd.read_csv(p))
        assert set(r.tables["paper_vs_ours"].verdict) <= {"holds", "differs", "not comparable"}, kind
    for system, r, extra in (("hswd", hswd, ["--only", "mapping"]), ("raid", raid_quick, [])):
        out = tmp_path / f"cli-{system}"
        p = subprocess.run([tierlab_exe, "reproduce", system, "--quick", "--out", str(out), *extra],
                           capture_output=True, text=True)  # fmt: skip
        assert p.returncode == 0, p.stderr
        for f in csv_files(r.dir):
            assert (out / f.relative_to(r.dir)).read_bytes() == f.read_bytes(), f"{system}: {f.name}"


def test_reproduce_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="expected one of atsmf, hswd, qos, raid"):
        tierlab.reproduce("ssd", out="x")
    with pytest.raises(ValueError, match="not an option of raid"):
        tierlab.reproduce("raid", only="x", out="x")
    with pytest.raises(ValueError, match="unknown workload 'src9'; known: .*src1_0"):
        tierlab.reproduce("atsmf", only="src9", out="x")
    with pytest.raises(ValueError, match="not an option of qos"):
        tierlab.reproduce("qos", only="x", out="x")


def test_command_errors_carry_the_message(tmp_path: Path) -> None:
    with pytest.raises(tierlab.CommandError, match="No such file"):
        tierlab.reproduce("atsmf", only="none", traces={"t": tmp_path / "missing.csv"}, out=tmp_path / "o")


def test_load_run_equals_simulate(tmp_path: Path) -> None:
    r = tierlab.simulate(REPO / "configs" / "nvme-zipf.toml", out=tmp_path,
                         set={"tenants.0.workload.params.count": 20000})
    back = tierlab.load_run(tmp_path)
    assert back.summary == r.summary and back.vcd == r.vcd
    pd.testing.assert_frame_equal(back.series, r.series)
    pd.testing.assert_frame_equal(back.cdf, r.cdf)
    with pytest.raises(FileNotFoundError, match="summary.json"):
        tierlab.load_run(tmp_path / "nothing")


def test_analyze_concentrations_and_heatmap(tmp_path: Path) -> None:
    trace = tmp_path / "w.tlt"
    tierlab.generate_to(trace, "atsmf.src1_0", seed=2, duration_s=600)
    a = tierlab.analyze_concentrations(trace, out=tmp_path / "a")
    records = len(tierlab.read_trace(trace))
    assert a.kind == "concentrations" and a.tables["heatmap"]["ios"].sum() == records
    # The heat map from the trace frame counts the same cells.
    mine = plots.heatmap_counts(tierlab.read_trace(trace))
    theirs = a.tables["heatmap"].sort_values(["minute", "sub_lun"], ignore_index=True)
    assert mine["ios"].sum() == records
    assert np.array_equal(mine[["minute", "sub_lun", "ios"]].to_numpy(), theirs[["minute", "sub_lun", "ios"]].to_numpy())
    ax = plots.heatmap(mine)
    image = ax.images[0].get_array()
    assert np.nansum(image) == records


def test_plots_draw_their_input(atsmf_quick, tmp_path: Path) -> None:
    run = atsmf_quick.run("src1_0-atsmf")
    ax = plots.latency_cdf(run)
    labels = [line.get_label() for line in ax.lines]
    assert labels == ["all", "tier:memory", "tier:flash"]
    part = run.cdf[run.cdf.scope == "tier:memory"]
    assert np.array_equal(ax.lines[1].get_ydata(), part.cumulative_fraction.to_numpy())
    with pytest.raises(ValueError, match="scopes: all"):
        plots.latency_cdf(run, ["tier:nope"])
    ax = plots.time_series(run, "iops")
    assert np.allclose(ax.lines[0].get_ydata(), run.series[run.series.scope == "all"].iops)
    ax = plots.utilization(run)
    assert [line.get_label() for line in ax.lines] == ["memory", "flash"]
    ax = plots.policy_series(run)
    assert np.allclose(ax.lines[0].get_ydata(), run.policy_series.memory_bytes / 2**30)
    ax = plots.comparison_bars(atsmf_quick.table, "mean_rt_ms")
    heights = [b.get_height() for b in ax.patches]
    assert np.allclose(heights, atsmf_quick.table.mean_rt_ms)
    plots.save(ax, tmp_path / "bars.svg")
    plots.save(ax, tmp_path / "bars.png")
    assert (tmp_path / "bars.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (tmp_path / "bars.svg").read_bytes()[:1000]


def _one_second_trace(path: Path) -> None:
    """10,000 IOs in one second on 8 GiB, 80 % of them on one 64 MiB region
    (MSR CSV): too small and short for the paper's 1 GiB / 24 s scale."""
    rng = np.random.default_rng(7)
    t0 = 128_166_372_000_000_000  # Windows filetime, 100 ns ticks
    hot = rng.random(10_000) < 0.8
    block = np.where(hot, (3 << 30) // 4096 + rng.integers(0, (64 << 20) // 4096, 10_000),
                     rng.integers(0, (8 << 30) // 4096, 10_000))
    ops = np.where(rng.random(10_000) < 0.7, "Read", "Write")
    lines = [f"{t0 + i * 1000},h,0,{op},{b * 4096},4096,100" for i, (op, b) in enumerate(zip(ops, block))]
    path.write_text("\n".join(lines) + "\n")


def test_reproduce_atsmf_scale_auto_fits_a_short_trace(tmp_path: Path) -> None:
    trace = tmp_path / "onesec.csv"
    _one_second_trace(trace)
    paper = tierlab.reproduce("atsmf", only="none", traces={"one": trace}, out=tmp_path / "paper")
    assert "--scale auto would use" in paper.tables["scale"].warning[0]
    auto = tierlab.reproduce("atsmf", only="none", traces={"one": trace}, scale="auto", out=tmp_path / "auto")
    s = auto.tables["scale"].iloc[0]
    assert (s.sub_lun_bytes, s.periods) == (3 << 20, 20.0)
    assert pd.isna(s.warning) or s.warning == ""
    atsmf = auto.table[auto.table.system == "atsmf"].iloc[0]
    assert atsmf.mem_access_ratio > 0.5 and atsmf.background_tail_s < 1.0
    with pytest.raises(ValueError, match="not 'paper' or 'auto'"):
        tierlab.reproduce("atsmf", scale="big", out=tmp_path / "x")
    with pytest.raises(ValueError, match="option of atsmf only"):
        tierlab.reproduce("hswd", scale="auto", out=tmp_path / "x")

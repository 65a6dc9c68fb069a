"""HTML reports: self-contained, every image decodes, the numbers shown are
the run's own, and headless Chromium renders them without an error."""

from __future__ import annotations

import base64
import html
import io
import json
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import tierlab
from tierlab.report import write_report

from _chromium import chromium, render

REPO = Path(__file__).resolve().parents[2]
_IMG = re.compile(r'<img src="data:(image/[a-z+]+);base64,([A-Za-z0-9+/=]+)" alt="([^"]*)"')


def images(page: Path) -> list[tuple[str, bytes, str]]:
    text = page.read_text(encoding="utf-8")
    return [(mime, base64.b64decode(data), alt) for mime, data, alt in _IMG.findall(text)]


def check_self_contained(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    # No network and no file next to it: every src/href is a data: URI.
    for ref in re.findall(r'(?:src|href)="([^"]*)"', text):
        assert ref.startswith("data:"), ref
    assert "<script" not in text
    assert text.count("<img") == len(images(page)) > 0


def check_images_decode(page: Path) -> None:
    from PIL import Image

    for mime, data, alt in images(page):
        if mime == "image/png":
            with Image.open(io.BytesIO(data)) as im:
                im.load()
                assert im.width > 100 and im.height > 100, alt
        else:
            assert mime == "image/svg+xml", mime
            root = ET.fromstring(data)
            assert root.tag.endswith("svg"), alt


@pytest.fixture(scope="module")
def sim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "run"
    tierlab.simulate(REPO / "configs" / "atsmf-src1_0.toml", out=out,
                     set={"tenants.0.workload.params.duration_s": 600.0})
    return out


def test_sim_report_shows_the_runs_numbers(sim_dir: Path) -> None:
    page = write_report(sim_dir)
    assert page == sim_dir / "report.html"
    check_self_contained(page)
    check_images_decode(page)
    summary = json.loads((sim_dir / "summary.json").read_text())
    text = page.read_text(encoding="utf-8")
    # The key numbers appear exactly as summary.json has them.
    for key in ("ios", "p99_latency_us", "mean_latency_us"):
        assert f"<td>{summary[key]:.6g}</td>" in text or f"<td>{summary[key]}</td>" in text, key
    alts = [alt for _, _, alt in images(page)]
    assert {"latency CDF", "IOPS over time", "%util over time", "policy counters over time"} <= set(alts)


def test_reproduce_report_and_cli_flag(atsmf_quick, tmp_path: Path) -> None:
    page = write_report(atsmf_quick.dir, tmp_path / "r.html", title="ATSMF quick")
    check_self_contained(page)
    check_images_decode(page)
    text = page.read_text(encoding="utf-8")
    assert "<title>ATSMF quick</title>" in text
    # Every row of table.csv is in the report.
    for system in atsmf_quick.table["system"]:
        assert f"<td>{system}</td>" in text
    # One figure per chart: the command's SVGs (the same data) are named,
    # not embedded a second time.
    assert not any(m == "image/svg+xml" for m, _, _ in images(page))
    assert "SVG figures of the same data" in text
    check_verdicts_first(page, atsmf_quick.tables["paper_vs_ours"])
    # The takeaway names the fastest system per workload, from table.csv.
    t = atsmf_quick.table
    for workload, part in t.groupby("workload"):
        best = part.loc[part.mean_rt_ms.idxmin(), "system"]
        assert f"{workload}: lowest mean response time {best} (" in text


def check_verdicts_first(page: Path, pvo) -> None:
    """The report opens with the takeaway, whose first line counts the
    verdicts; then paper vs ours, with every difference's cause."""
    text = re.sub(r">\s+<", "><", page.read_text(encoding="utf-8"))
    first_h2 = text.index("<h2>")
    assert text[first_h2:].startswith("<h2>Takeaway</h2><ul><li>Paper vs ours: ")
    counts = pvo.verdict.value_counts()
    assert f"Paper vs ours: {counts.get('holds', 0)} of {len(pvo)} quantities and claims hold here" in text
    second_h2 = text.index("<h2>", first_h2 + 1)
    assert text[second_h2:].startswith("<h2>Paper vs ours: what holds here, what does not, and why</h2>")
    assert f"{len(pvo)} compared quantities and claims" in text
    for r in pvo[pvo.verdict != "holds"].itertuples():
        assert html.escape(r.why) in text, r.quantity


def test_raid_reproduction_report(raid_quick) -> None:
    assert raid_quick.kind == "raid"
    page = raid_quick.dir / "report.html"
    check_self_contained(page)
    check_images_decode(page)
    pvo = raid_quick.tables["paper_vs_ours"]
    check_verdicts_first(page, pvo)
    # Every "differs" row names the variant run that measured its cause,
    # and that run is in variants.csv.
    variants = raid_quick.tables["variants"]
    for r in pvo[pvo.verdict == "differs"].itertuples():
        assert "measured" in r.why and not r.why.startswith("not measured"), r.why
        named = [v for v in set(variants.variant) if v in r.why]
        assert named, r.why
    text = page.read_text(encoding="utf-8")
    for w in raid_quick.tables["improvement"].workload:
        assert f"<td>{html.escape(w)}</td>" in text, w


def test_hswd_reproduction_report_opens_with_the_verdicts(tmp_path: Path) -> None:
    # The mapping experiment alone (two runs, seconds): Table 3's rows.
    r = tierlab.reproduce("hswd", quick=True, only="mapping", out=tmp_path / "h", report=True)
    pvo = r.tables["paper_vs_ours"]
    assert set(pvo.workload) == {"fio-randwrite", "fio-randwrite fully", "fio-randwrite set"}
    # Fully vs set: IOPS and RMW ratios hold (docs/hswd.md: 1.26 vs 1.25);
    # the absolute IOPS differ, with the RMW time measured as the cause.
    verdict = {(q, w): v for q, w, v in zip(pvo.quantity, pvo.workload, pvo.verdict)}
    assert verdict[("mapping_fully_over_set_iops", "fio-randwrite")] == "holds"
    iops = pvo[pvo.quantity == "mapping_iops"].iloc[0]
    assert iops.verdict == "differs" and iops.why.startswith("the RMW's duration, measured"), iops.why
    # The set-associative worst latency: its variant (stalled sets cleaned
    # first, in turns) waits through fewer RMWs, and the row names it.
    worst = pvo[pvo.quantity == "mapping_set_over_fully_max_latency"].iloc[0]
    assert worst.why.startswith("the order in which sets take the one RCache, measured"), worst.why
    t = r.tables["table"]
    set_max = t[(t.experiment == "mapping") & (t.mapping == "set")].max_latency_ms.iloc[0]
    variant_max = t[t.experiment == "mapping-variants"].max_latency_ms.iloc[0]
    assert variant_max < set_max
    check_verdicts_first(r.dir / "report.html", pvo)
    # Byte columns read in binary units in the report (the CSV keeps bytes):
    # the quick run's PCache is 32 MiB.
    text = (r.dir / "report.html").read_text(encoding="utf-8")
    assert (t.pcache_bytes == 32 << 20).all()
    assert "<td>32 MiB</td>" in text and "<td>33554432</td>" not in text


def test_human_bytes() -> None:
    from tierlab.report import human_bytes

    assert [human_bytes(n) for n in (0, 1023, 1024, 9663676416, 9_000_000_000, 1 << 60)] == [
        "0 B",
        "1023 B",
        "1 KiB",
        "9 GiB",
        "8.38 GiB",
        "1 EiB",
    ]


def test_qos_reproduction_report_opens_with_the_verdicts(qos_quick) -> None:
    pvo = qos_quick.tables["paper_vs_ours"]
    check_verdicts_first(qos_quick.dir / "report.html", pvo)
    # The backup capacity differs, and its variant (512 KiB requests) is
    # in summary.json and named as the measured cause.
    backup = pvo[(pvo.quantity == "capacity_a_only_iops") & (pvo.workload == "backup")].iloc[0]
    assert backup.verdict == "differs" and "capacity.backup_512k" in backup.why
    assert qos_quick.summary["capacity"]["backup_512k"]["simulated"]["a_only_iops"] > 0


def test_report_of_something_else_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a tierlab output directory"):
        write_report(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such directory"):
        write_report(tmp_path / "missing")


def test_report_command(tierlab_exe: str, sim_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli.html"
    p = subprocess.run([tierlab_exe, "report", str(sim_dir), "--out", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert out.is_file() and "wrote" in p.stdout
    p = subprocess.run([tierlab_exe, "report", str(tmp_path / "nope")], capture_output=True, text=True)
    assert p.returncode == 1 and "tierlab: error:" in p.stderr and "no such directory" in p.stderr


def test_sim_report_flag(tierlab_exe: str, tmp_path: Path) -> None:
    out = tmp_path / "z"
    p = subprocess.run(
        [tierlab_exe, "sim", str(REPO / "configs" / "nvme-zipf.toml"), "--set",
         "tenants.0.workload.params.count=20000", "--out", str(out), "--report"],
        capture_output=True, text=True,
    )
    assert p.returncode == 0, p.stderr
    assert (out / "report.html").is_file() and "report:" in p.stdout


@pytest.mark.skipif(chromium() is None, reason="Chromium is not installed (Debian: apt-get install chromium); "
                    "the headless rendering check of the HTML report is skipped")
def test_reports_render_in_headless_chromium(sim_dir: Path, atsmf_quick, raid_quick, qos_quick, demo_dir: Path,
                                           tmp_path: Path) -> None:
    pages = (write_report(sim_dir), write_report(atsmf_quick.dir), qos_quick.dir / "report.html",
             raid_quick.dir / "report.html", write_report(demo_dir))
    for page in pages:
        result = render(page, tmp_path)
        n = len(images(page))
        assert result["images"] == n > 0, result
        assert result["loaded"] == n, f"{page}: images that did not load: {result['broken']}"
        assert result["errors"] == [], result["errors"]
        assert result["console"] == [], result["console"]
        assert result["text_chars"] > 500
        # The first screen states what to conclude.
        assert "Takeaway" in result["first_screen"], result["first_screen"]


def test_the_probe_sees_a_broken_image(tmp_path: Path) -> None:
    """The Chromium check is not vacuous: a page with an undecodable image
    and a console error is caught."""
    if chromium() is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><head><title>x</title></head><body>'
                    '<img alt="bad" src="data:image/png;base64,AAAA">'
                    '<script>console.error("boom")</script></body></html>')
    result = render(page, tmp_path)
    assert result["images"] == 1 and result["loaded"] == 0 and result["broken"] == ["bad"]
    assert result["errors"] and any("boom" in line for line in result["console"])


def report_figures(d: Path) -> list:
    """Renders the report of ``d`` and returns its figures (drawn)."""
    import tierlab.report as report

    figures = []
    report.FIGURE_HOOK = lambda fig, alt: figures.append((alt, fig))
    try:
        report.render_report(d)
    finally:
        report.FIGURE_HOOK = None
    return figures


def test_no_two_labels_overlap_in_any_report_figure(sim_dir: Path, atsmf_quick, raid_quick, qos_quick,
                                                   demo_dir: Path, tmp_path: Path) -> None:
    from tierlab.plots import text_overlaps

    hswd = tierlab.reproduce("hswd", quick=True, only=["mapping", "systems"], out=tmp_path / "h")
    checked = 0
    for d in (sim_dir, atsmf_quick.dir, raid_quick.dir, qos_quick.dir, hswd.dir, demo_dir):
        figures = report_figures(d)
        assert figures, d
        for alt, fig in figures:
            assert text_overlaps(fig) == [], f"{d.name}: {alt}"
            checked += 1
    assert checked >= 15


def test_the_overlap_check_sees_overlapping_labels() -> None:
    """text_overlaps is not vacuous: two labels drawn on top of each other,
    and crowded bar labels, are found."""
    import pandas as pd
    from matplotlib.figure import Figure

    from tierlab.plots import comparison_bars, text_overlaps

    fig = Figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.text(0.5, 0.5, "first label")
    ax.text(0.52, 0.5, "second label")
    assert text_overlaps(fig) == [("first label", "second label")]
    # Forty upright value labels on 4 x 10 narrow bars collide; the
    # library's own layout turns or drops them instead.
    table = pd.DataFrame({"workload": [f"w{i // 10}" for i in range(40)],
                          "system": [f"s{i % 10}" for i in range(40)],
                          "v": [1.0 + i / 7 for i in range(40)]})  # fmt: skip
    fig = Figure(figsize=(5, 3))
    ax = fig.add_subplot()
    bars = ax.bar(range(40), table.v, 0.8)
    ax.bar_label(bars, labels=[f"{v:.5f}" for v in table.v])
    assert text_overlaps(fig)
    fig = Figure(figsize=(5, 3), layout="constrained")
    comparison_bars(table, "v", ax=fig.add_subplot())
    assert text_overlaps(fig) == []


def test_a_system_keeps_its_colour_in_every_chart() -> None:
    from tierlab.plots import colors_for

    a = colors_for(["flash", "atsmf", "flashcache", "arc"])
    b = colors_for(["arc", "atsmf memory", "atsmf flash", "flashcache all"])
    assert a["atsmf"] == b["atsmf memory"] == b["atsmf flash"]
    assert a["flashcache"] == b["flashcache all"] and a["arc"] == b["arc"]
    assert len(set(a.values())) == 4
    # Names without a fixed colour: distinct within a chart, stable across.
    c = colors_for(["p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10"])
    assert len(set(c.values())) == 10
    assert colors_for(["p3", "p1"])["p3"] == colors_for(["p1", "p3", "zz"])["p3"]


def test_takeaway_notes_surprises(tmp_path: Path) -> None:
    """Identical results across systems and work after the workload ended
    are pointed out in the takeaway (by hand: a table where two systems
    agree to the last digit and one ran on)."""
    d = tmp_path / "a"
    d.mkdir()
    (d / "table.csv").write_text(
        "workload,system,mean_rt_ms,rt_ratio_vs_flash,mem_access_ratio,peak_mem_bytes,background_tail_s\n"
        "w,flash,0.1,1.0,0.0,0,0\n"
        "w,atsmf,0.05,0.5,0.6,1073741824,12.5\n"
        "w,flashcache,0.04,0.4,0.7,1073741824,0\n"
        "w,arc,0.04,0.4,0.7,1073741824,0\n"
    )
    text = html.unescape(render_report_text(d))
    assert "w: lowest mean response time flashcache (0.04 ms, 0.40× flash only)" in text
    assert "flashcache and arc give identical results (workload w)" in text
    assert "atsmf went on 12.5 s after the workload ended on 1 of 1 workloads (w)" in text
    assert "flash and" not in text  # different numbers: no note


def render_report_text(d: Path) -> str:
    from tierlab.report import render_report

    return render_report(d)


@pytest.fixture(scope="module")
def demo_dir(tierlab_exe: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tierlab demo --minutes 10` (a few seconds)."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    p = subprocess.run([tierlab_exe, "demo", "--minutes", "10", "--out", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return out


def test_demo_report_explains_why_two_caches_agree(demo_dir: Path) -> None:
    """The demo's FlashCache and ARC agree to the last digit; the takeaway
    says why, from the runs' own counters: the cache never filled."""
    d = demo_dir
    table = __import__("pandas").read_csv(d / "compare" / "table.csv")
    fc, arc = (table[table.system == s].iloc[0] for s in ("flashcache", "arc"))
    text = html.unescape(render_report_text(d))
    if (fc.mean_rt_ms, fc.mem_access_ratio) != (arc.mean_rt_ms, arc.mem_access_ratio):
        assert "give identical results" not in text
        return
    resident = max(
        json.loads((d / "compare" / "runs" / f"src1_1-{s}" / "summary.json").read_text())["run"]["policy_counters"][
            "resident_bytes"]
        for s in ("flashcache", "arc")
    )  # fmt: skip
    assert resident < fc.peak_mem_bytes
    assert "flashcache and arc give identical results (workload src1_1): their cache (14 GiB" in text
    assert "never filled" in text

"""One self-contained HTML report of a tierlab output directory.

``tierlab report DIR`` (or :func:`write_report`) reads what ``tierlab sim``,
``tierlab reproduce atsmf|hswd|qos``, ``tierlab analyze concentrations``,
``tierlab demo`` or ``tierlab sweep`` wrote into DIR and writes
``DIR/report.html``: the key numbers as tables, the figures drawn with
:mod:`tierlab.plots` as embedded PNGs, and the SVG figures the command wrote
itself. Everything is inside the one file (``data:`` URIs); it loads
nothing from the network and runs no script, so it opens anywhere,
offline, and can be mailed or archived as is.

Every number in a report is defined in docs/metrics.md or the system's
doc (docs/atsmf.md, docs/hswd.md, docs/qos.md); each section names its doc.
"""

from __future__ import annotations

import base64
import html
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._outputs import detect_kind

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

_CSS = """
body{font:15px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1100px;padding:1.5em;color:#1d1d1f}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
h3{margin-top:1.3em}p.meta{color:#666;margin-top:0}p.doc{color:#555;font-size:.92em}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{color:#555;font-size:.9em}
table.t{border-collapse:collapse;font-size:.88em;margin:.6em 0}
table.t th,table.t td{border:1px solid #ddd;padding:.25em .55em;text-align:right}
table.t th{background:#f5f5f7}table.t td:first-child,table.t th:first-child{text-align:left}
pre{background:#f5f5f7;padding:.8em;overflow:auto;font-size:.85em}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:1em}
"""

_MAX_ROWS = 200


class _Page:
    def __init__(self, title: str, subtitle: str):
        self.title = title
        self.subtitle = subtitle
        self.parts: list[str] = []
        self.figures = 0

    def h2(self, text: str, doc: str | None = None) -> None:
        self.parts.append(f"<h2>{html.escape(text)}</h2>")
        if doc:
            self.parts.append(f'<p class="doc">Definitions: {html.escape(doc)}</p>')

    def h3(self, text: str) -> None:
        self.parts.append(f"<h3>{html.escape(text)}</h3>")

    def p(self, text: str) -> None:
        self.parts.append(f"<p>{html.escape(text)}</p>")

    def pre(self, text: str) -> None:
        self.parts.append(f"<pre>{html.escape(text)}</pre>")

    def table(self, df: pd.DataFrame, caption: str | None = None) -> None:
        import pandas as pd

        shown = df.head(_MAX_ROWS).copy()
        # Byte counts in binary units for the reader (the CSVs keep bytes).
        for col in shown.columns:
            if str(col).endswith("_bytes") and pd.api.types.is_integer_dtype(shown[col]):
                shown[col] = [human_bytes(int(v)) for v in shown[col]]
        text = shown.to_html(
            index=False, border=0, classes="t", na_rep="", float_format=lambda x: f"{x:.6g}"
        )
        if caption:
            self.parts.append(f"<p><b>{html.escape(caption)}</b></p>")
        self.parts.append(text)
        if len(df) > _MAX_ROWS:
            self.p(f"(first {_MAX_ROWS} of {len(df)} rows)")

    def kv(self, pairs: list[tuple[str, Any]], caption: str | None = None) -> None:
        import pandas as pd

        self.table(pd.DataFrame({"metric": [k for k, _ in pairs], "value": [v for _, v in pairs]}), caption)

    def image(self, data: bytes, mime: str, alt: str, caption: str | None = None) -> None:
        uri = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
        self.parts.append(f'<figure><img src="{uri}" alt="{html.escape(alt)}">{cap}</figure>')
        self.figures += 1

    def plot(self, draw: Callable[[Axes], Any], alt: str, caption: str | None = None, size=(7.5, 4.0)) -> None:
        """Draws into a new figure and embeds it as PNG; a drawing error
        becomes a note in the report (the rest still renders)."""
        from matplotlib.figure import Figure

        from .plots import png_bytes

        fig = Figure(figsize=size, layout="constrained")
        try:
            draw(fig.add_subplot())
        except (ValueError, KeyError) as e:
            self.p(f"[{alt}: not drawn: {e}]")
            return
        self.image(png_bytes(fig), "image/png", alt, caption)

    def svgs(self, paths: list[Path], root: Path) -> None:
        for path in paths:
            self.image(path.read_bytes(), "image/svg+xml", path.name, str(path.relative_to(root)))

    def render(self, footer: str) -> str:
        body = "\n".join(self.parts)
        return (
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            '<link rel="icon" href="data:,">'
            f"<title>{html.escape(self.title)}</title><style>{_CSS}</style></head><body>"
            f"<h1>{html.escape(self.title)}</h1><p class=\"meta\">{html.escape(self.subtitle)}</p>\n"
            f"{body}\n<hr><p class=\"meta\">{html.escape(footer)}</p></body></html>\n"
        )


def human_bytes(n: int) -> str:
    """A byte count in binary units: exact where it divides (``32 MiB``),
    else three significant digits (``8.61 GiB``); below 1 KiB in bytes."""
    units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    if abs(n) < 1024:
        return f"{n} B"
    for i in range(len(units), 0, -1):
        unit = 1 << (10 * i)
        if abs(n) >= unit:
            if n % unit == 0:
                return f"{n // unit} {units[i - 1]}"
            return f"{n / unit:.3g} {units[i - 1]}"
    return f"{n} B"


def _read_csv(path: Path) -> pd.DataFrame:
    import pandas as pd

    return pd.read_csv(path)


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


_SUMMARY_KEYS = [
    ("ios", "host IOs"),
    ("iops", "IOPS"),
    ("mb_per_s", "MB/s"),
    ("mean_latency_us", "mean response (µs)"),
    ("p50_latency_us", "p50 (µs)"),
    ("p90_latency_us", "p90 (µs)"),
    ("p99_latency_us", "p99 (µs)"),
    ("p999_latency_us", "p99.9 (µs)"),
    ("max_latency_us", "max (µs)"),
]


def _sim_section(page: _Page, run_dir: Path, heading: str | None = None) -> None:
    from . import plots
    from ._sim import load_run

    r = load_run(run_dir)
    s = r.summary
    page.h2(heading or "Simulation run", "docs/metrics.md (summary.json, series.csv, latency_cdf.csv)")
    run = s.get("run", {})
    page.p(
        f"policy {run.get('policy', '?')}, seed {run.get('seed', '?')}, "
        f"{run.get('simulated_s', float('nan')):.3f} s simulated, {run.get('events', '?')} events"
    )
    page.kv([(label, s.get(key)) for key, label in _SUMMARY_KEYS], "host IOs")
    cols = ["name", "ios", "iops", "mean_latency_us", "p99_latency_us", "max_latency_us"]
    if len(r.tiers):
        page.table(r.tiers[[c for c in cols if c in r.tiers.columns]], "per tier (where each IO was served)")
    if len(r.devices):
        dcols = cols + ["util_percent", "avg_queue_size"]
        page.table(r.devices[[c for c in dcols if c in r.devices.columns]], "per device")
    counters = run.get("policy_counters") or {}
    if counters:
        page.kv(list(counters.items()), "policy counters at the end (the policy's doc defines them)")
    page.parts.append('<div class="grid">')
    page.plot(lambda ax: plots.latency_cdf(r, ax=ax), "latency CDF", "response-time CDF, all IOs and per tier")
    page.plot(lambda ax: plots.time_series(r, "iops", ax=ax, title="host IOPS"), "IOPS over time")
    page.plot(
        lambda ax: plots.time_series(r, "mean_latency_us", ax=ax, title="mean response per interval (µs)"),
        "latency over time",
    )
    if len(r.devices):
        page.plot(lambda ax: plots.utilization(r, ax=ax), "%util over time")
    if r.policy_series is not None:
        ps = r.policy_series
        mem = [c for c in ("memory_bytes",) if c in ps.columns]
        shown = mem or list(ps.columns[1:4])
        page.plot(lambda ax: plots.policy_series(r, shown, ax=ax), "policy counters over time")
    page.parts.append("</div>")


def _paper_vs_ours_section(page: _Page, d: Path) -> None:
    """The reproduction's verdicts first, in words, then the rows
    (paper_vs_ours.csv: docs/fidelity.md)."""
    import pandas as pd

    path = d / "paper_vs_ours.csv"
    if not path.is_file():
        return
    rows = _read_csv(path)
    page.h2("Paper vs ours: what holds here, what does not, and why", "docs/fidelity.md (paper_vs_ours.csv)")
    counts = rows["verdict"].value_counts()
    page.p(
        f"{int(counts.get('holds', 0))} of {len(rows)} compared quantities and claims hold here "
        f"(within 25 % of the paper's value, or the claim is true), {int(counts.get('differs', 0))} differ, "
        f"{int(counts.get('not comparable', 0))} cannot be compared."
    )

    def label(r: Any) -> str:
        return r.quantity if r.workload == "all" else f"{r.quantity} on {r.workload}"

    def num(x: Any) -> str:
        return "" if pd.isna(x) else f"{x:.4g}"

    for verdict, title in (("differs", "Differs"), ("not comparable", "Not comparable"), ("holds", "Holds")):
        part = rows[rows.verdict == verdict]
        if part.empty:
            continue
        items = []
        for r in part.itertuples():
            why = "" if pd.isna(r.why) or not r.why else f" — {r.why}"
            items.append(
                f"<li>{html.escape(label(r))}: paper {html.escape(num(r.paper))}, "
                f"ours {html.escape(num(r.ours))}{html.escape(why)}</li>"
            )
        page.parts.append(f"<p><b>{title}</b></p><ul>{''.join(items)}</ul>")
    page.table(rows, "paper_vs_ours.csv")


def _atsmf_section(page: _Page, d: Path, heading: str = "ATSMF: flash only vs ATSMF vs FlashCache vs ARC") -> None:
    from . import plots

    table = _read_csv(d / "table.csv")
    page.h2(heading, "docs/atsmf.md (Reproduction: table.csv, memory, CDFs)")
    page.table(table, "table.csv")
    page.parts.append('<div class="grid">')
    page.plot(
        lambda ax: plots.comparison_bars(table, "mean_rt_ms", ax=ax, title="mean response time (ms)"),
        "mean response time per system",
    )
    page.plot(
        lambda ax: plots.comparison_bars(
            table, "mem_access_ratio", ax=ax, title="memory access ratio (share of IOs served from memory)"
        ),
        "memory access ratio per system",
    )
    page.parts.append("</div>")
    for workload in dict.fromkeys(table["workload"]):
        page.h3(f"workload {workload}")
        page.parts.append('<div class="grid">')
        cdf = d / f"cdf_{workload}.csv"
        if cdf.is_file():
            frame = _read_csv(cdf)
            page.plot(
                lambda ax, f=frame, w=workload: plots.latency_cdf(
                    f, list(dict.fromkeys(f["curve"])), ax=ax, title=f"response-time CDF — {w}"
                ),
                f"CDF {workload}",
            )
        mem = d / f"memory_{workload}.csv"
        if mem.is_file():
            frame = _read_csv(mem)
            page.plot(
                lambda ax, f=frame, w=workload: plots.policy_series(
                    f, "memory_bytes", ax=ax, title=f"ATSMF memory consumption — {w}"
                ),
                f"memory {workload}",
            )
        run = d / "runs" / f"{workload}-atsmf"
        if (run / "series.csv").is_file():
            from ._sim import load_run

            r = load_run(run)
            page.plot(lambda ax, r=r: plots.utilization(r, ax=ax, title="ATSMF: %util of memory and flash"), "util")
        page.parts.append("</div>")


def _hswd_section(page: _Page, d: Path) -> None:
    from . import plots

    table = _read_csv(d / "table.csv")
    page.h2("HSWD: persistent cache over SMR", "docs/hswd.md (Reproduction)")
    page.table(table, "table.csv")
    for experiment in dict.fromkeys(table["experiment"]):
        part = table[table["experiment"] == experiment].copy()
        label_cols = [c for c in ("system", "mapping", "policy") if c in part.columns]
        part["config"] = part[label_cols].astype(str).agg("-".join, axis=1)
        if "pcache_bytes" in part.columns:
            part["config"] += " " + (part["pcache_bytes"] / 2**20).map(lambda m: f"{m:.0f} MiB")
        page.h3(f"experiment {experiment}")
        page.plot(
            lambda ax, p=part, e=experiment: plots.comparison_bars(
                p, "mean_latency_ms", by="config", ax=ax, title=f"{e}: mean response time (ms)"
            ),
            f"{experiment} mean latency",
            size=(10.0, 4.5),
        )
    iops = d / "iops_4s.csv"
    if iops.is_file():
        frame = _read_csv(iops)

        def draw(ax: Axes) -> None:
            for run in list(dict.fromkeys(frame["run"]))[:8]:
                p = frame[frame["run"] == run]
                ax.plot(p["bucket_end_s"], p["iops"], label=run)
            ax.set_xlabel("time (s)")
            ax.set_ylabel("IOPS per 4 s")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="x-small")
            ax.set_title("IOPS over time (first runs)")

        page.plot(draw, "IOPS per 4 s")


def _qos_section(page: _Page, d: Path) -> None:
    from . import plots

    summary = _json(d / "summary.json")
    page.h2("Busy-rate QoS: the three evaluations", "docs/qos.md (Reproduction, series.csv columns)")
    page.pre(json.dumps(summary, indent=1)[:6000])
    for series in sorted(d.glob("eval*/series.csv")):
        frame = _read_csv(series)
        name = series.parent.name
        page.h3(name)
        page.plot(
            lambda ax, f=frame, n=name: plots.qos_series(f, ax=ax, title=f"{n}: IOPS, %util and target X"),
            f"{name} series",
            size=(9.0, 4.5),
        )


def _raid_section(page: _Page, d: Path) -> None:
    from . import plots

    gains = _read_csv(d / "improvement.csv")
    page.h2("RAID 1 of two flash SSDs vs one: read IOPS", "docs/flash-ssd.md (The SSD-RAID experiment)")
    page.table(_read_csv(d / "table.csv"), "table.csv")
    page.table(gains, "improvement.csv (RAID 1 over the single SSD)")
    page.plot(
        lambda ax: plots.comparison_bars(
            gains.assign(system="RAID 1"),
            "improvement_percent",
            ax=ax,
            title="RAID 1 read-IOPS improvement over one SSD (%); thesis: mean 10.93, max 43.9",
        ),
        "improvement per workload",
        size=(10.0, 4.5),
    )
    if (d / "variants.csv").is_file():
        page.table(_read_csv(d / "variants.csv"), "variants.csv (the runs behind paper vs ours' causes)")


def _concentrations_section(page: _Page, d: Path, heading: str = "IO concentrations") -> None:
    from . import plots

    page.h2(heading, 'docs/atsmf.md ("Workload analysis")')
    if (d / "summary.json").is_file():
        summary = _json(d / "summary.json")
        flat = [(k, v) for k, v in summary.items() if not isinstance(v, (dict, list))]
        page.kv(flat, "summary.json")
    heat = _read_csv(d / "heatmap.csv")
    page.plot(lambda ax: plots.heatmap(heat, ax=ax), "sub-LUN x time heat map", "IOs per minute per sub-LUN", (9.0, 4.5))
    if (d / "concentrations.csv").is_file():
        page.table(_read_csv(d / "concentrations.csv"), "concentrations.csv")


def _demo_section(page: _Page, d: Path) -> None:
    from . import plots

    summary = _json(d / "summary.json")
    page.h2("The workload", "docs/atsmf.md (IO-concentration generator), docs/metrics.md (trace stats)")
    page.p(
        f"preset {summary.get('preset')} (seed {summary.get('seed')}): {summary.get('records')} IOs over "
        f"{summary.get('duration_s', 0) / 60:.1f} min; {summary.get('concentrations_planted')} IO concentrations "
        f"planted; {100 * summary.get('ios_inside_concentrations_share', 0):.1f} % of IOs land inside them while "
        f"they cover {100 * summary.get('lun_share_covered_by_concentrations', 0):.2f} % of the LUN on average."
    )
    page.kv(
        [(k, v) for k, v in summary.items() if not isinstance(v, (dict, list)) and v is not None],
        "summary.json",
    )
    heat = _read_csv(d / "heatmap.csv")
    page.plot(
        lambda ax: plots.heatmap(heat, ax=ax, space_label="sub-LUN (1 GiB)"),
        "sub-LUN x time heat map",
        "IOs per minute per 1 GiB sub-LUN: the bright bands are the IO concentrations",
        (9.0, 4.5),
    )
    if (d / "concentrations.csv").is_file():
        page.table(_read_csv(d / "concentrations.csv"), "the planted concentrations (ground truth)")
    if (d / "compare" / "table.csv").is_file():
        _atsmf_section(page, d / "compare", "Four systems on this workload")


def _sweep_section(page: _Page, d: Path) -> None:
    from . import plots

    results = _read_csv(d / "results.csv")
    page.h2("Sweep results", "docs/sweeps.md (results.csv), docs/metrics.md (the metrics)")
    page.table(results, "results.csv")
    if "mean_latency_us" in results.columns and len(results):
        page.plot(
            lambda ax: plots.comparison_bars(
                results, "mean_latency_us", by="point", group=None, ax=ax, title="mean response (µs) per point"
            ),
            "sweep mean latency",
            size=(10.0, 4.5),
        )


def render_report(dir: str | os.PathLike[str], *, title: str | None = None) -> str:  # noqa: A002
    """The HTML text of the report of ``dir`` (see :func:`write_report`)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from . import __version__

    d = Path(dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such directory")
    kind = detect_kind(d)
    titles = {
        "sim": "tierlab sim",
        "atsmf": "tierlab reproduce atsmf",
        "hswd": "tierlab reproduce hswd",
        "qos": "tierlab reproduce qos",
        "raid": "tierlab reproduce raid",
        "concentrations": "tierlab analyze concentrations",
        "demo": "tierlab demo: IO concentrations and four ways to serve them",
        "sweep": "tierlab sweep",
    }
    page = _Page(title or titles[kind], f"{d.resolve()}")
    _paper_vs_ours_section(page, d)
    if kind == "sim":
        _sim_section(page, d)
    elif kind == "atsmf":
        _atsmf_section(page, d)
    elif kind == "hswd":
        _hswd_section(page, d)
    elif kind == "qos":
        _qos_section(page, d)
    elif kind == "raid":
        _raid_section(page, d)
    elif kind == "concentrations":
        _concentrations_section(page, d)
    elif kind == "demo":
        _demo_section(page, d)
    elif kind == "sweep":
        _sweep_section(page, d)
    svgs = sorted(d.glob("*.svg")) + sorted(d.glob("*/*.svg"))
    svgs = [p for p in svgs if p.parent.name not in ("runs", "configs", "points")]
    if svgs:
        page.h2("Figures written by the command (SVG)")
        page.svgs(svgs, d)
    return page.render(f"tierlab {__version__} — report of {kind} output; no network, no script")


def write_report(
    dir: str | os.PathLike[str],  # noqa: A002
    out: str | os.PathLike[str] | None = None,
    *,
    title: str | None = None,
) -> Path:
    """Writes the self-contained HTML report of a tierlab output directory
    (``tierlab sim``, ``reproduce atsmf|hswd|qos|raid``, ``analyze
    concentrations``, ``demo``, ``sweep``) to ``out`` (default
    ``DIR/report.html``) and returns its path.

    Raises ``FileNotFoundError`` for a missing directory and ``ValueError``
    for a directory no tierlab command wrote.
    """
    text = render_report(dir, title=title)
    path = Path(out) if out is not None else Path(dir) / "report.html"
    path.write_text(text, encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    """``tierlab report DIR [--out FILE] [--title TEXT]``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="tierlab report",
        description="Write the self-contained HTML report (images embedded, no network) of the "
        "output directory of tierlab sim, reproduce atsmf|hswd|qos|raid, analyze concentrations, "
        "demo or sweep.",
    )
    parser.add_argument("dir", help="the output directory")
    parser.add_argument("--out", help="the HTML file (default DIR/report.html)")
    parser.add_argument("--title", help="the report's title (default: from the command)")
    args = parser.parse_args(argv)
    try:
        path = write_report(args.dir, args.out, title=args.title)
    except (OSError, ValueError) as e:
        print(f"tierlab: error: {e}", file=sys.stderr)
        return 1
    print(f"tierlab report: wrote {path}")
    return 0

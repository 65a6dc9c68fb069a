"""One self-contained HTML report of a tierlab output directory.

``tierlab report DIR`` (or :func:`write_report`) reads what ``tierlab sim``,
``tierlab reproduce atsmf|hswd|qos|raid``, ``tierlab analyze
concentrations``, ``tierlab demo`` or ``tierlab sweep`` wrote into DIR and
writes ``DIR/report.html``: first the takeaway in sentences (with notes on
surprising numbers), then paper vs ours, the key numbers as tables and the
figures drawn with :mod:`tierlab.plots` as embedded PNGs. Everything is inside the one file (``data:`` URIs); it loads
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
section.takeaway{background:#f3f8ff;border-left:4px solid #1f77b4;padding:.2em 1em .6em;margin:1em 0}
ul.notes li{color:#8a4b00}details{margin:1em 0}summary{cursor:pointer;color:#555}
"""

_MAX_ROWS = 200

#: Called with every figure a report draws, after drawing (tests use it to
#: check that no two labels overlap: :func:`tierlab.plots.text_overlaps`).
FIGURE_HOOK: Callable[[Any, str], None] | None = None


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
        data = png_bytes(fig)
        if FIGURE_HOOK is not None:
            FIGURE_HOOK(fig, alt)
        self.image(data, "image/png", alt, caption)

    def bullets(self, items: list[str], css: str | None = None) -> None:
        if items:
            cls = f' class="{css}"' if css else ""
            self.parts.append(f"<ul{cls}>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>")

    def details(self, summary: str, inner: str) -> None:
        """Collapsed by default: raw data for those who want it."""
        self.parts.append(f"<details><summary>{html.escape(summary)}</summary>{inner}</details>")

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


def _time_us(us: float) -> str:
    """A response time in the unit that reads best: µs, ms or s."""
    if us != us:  # NaN
        return "-"
    if us < 1000:
        return f"{us:.3g} µs"
    if us < 1e6:
        return f"{us / 1000:.3g} ms"
    return f"{us / 1e6:.3g} s"


def _times(n: int) -> str:
    return {0: "never", 1: "once", 2: "twice"}.get(n, f"{n} times")


def _resets(n: int) -> str:
    return "no reset" if n == 0 else f"reset {_times(n)}"


def _identical(
    table: pd.DataFrame,
    name: str,
    metrics: list[str],
    where: list[str],
    why: Callable[[str, str, dict[str, Any]], str | None] | None = None,
) -> list[str]:
    """Notes on rows of one group (same ``where`` values) whose every
    metric is equal to the last digit: two systems that should differ but
    computed the same thing, or a parameter that changed nothing. ``why(a,
    b, group)`` may explain a pair from the runs themselves (``group``: the
    ``where`` values)."""
    import pandas as pd

    metrics = [m for m in metrics if m in table.columns]
    if not metrics or name not in table.columns:
        return []
    notes = []
    for keys, part in table.groupby(where, sort=False) if where else [((), table)]:
        seen: dict[tuple, str] = {}
        for _, r in part.iterrows():
            values = tuple(r[m] for m in metrics)
            if all(pd.isna(v) or v == 0 for v in values):
                continue
            if values in seen:
                group = dict(zip(where, keys if isinstance(keys, tuple) else (keys,)))
                at = ", ".join(f"{k} {v}" for k, v in group.items())
                head = f"{seen[values]} and {r[name]} give identical results{f' ({at})' if at else ''}: "
                reason = why(seen[values], str(r[name]), group) if why else None
                notes.append(
                    head
                    + (
                        reason
                        or f"every metric shown ({', '.join(metrics)}) is equal to the last digit. Check that "
                        "they differ as configured (or that the workload can tell them apart)."
                    )
                )
            else:
                seen[values] = str(r[name])
    return notes


def _takeaway_sim(d: Path) -> tuple[list[str], list[str]]:
    import pandas as pd

    s = _json(d / "summary.json")
    run = s.get("run", {})
    items = [
        f"{s.get('ios', 0):,} host IOs ({run.get('policy', '?')}): {s.get('iops', float('nan')):.4g} IOPS, mean "
        f"response {_time_us(s.get('mean_latency_us', float('nan')))}, p99 "
        f"{_time_us(s.get('p99_latency_us', float('nan')))}, max {_time_us(s.get('max_latency_us', float('nan')))}."
    ]
    tiers = [t for t in s.get("tiers", []) if t.get("ios")]
    total = sum(t["ios"] for t in tiers)
    if len(tiers) > 1 and total:
        items.append(
            "Served from: "
            + ", ".join(f"{t['name']} {100 * t['ios'] / total:.1f} % (mean {_time_us(t['mean_latency_us'])})"
                        for t in tiers) + "."  # fmt: skip
        )
    devices = [x for x in s.get("devices", []) if "util_percent" in x]
    if devices:
        busiest = max(devices, key=lambda x: x["util_percent"])
        items.append(f"Busiest device: {busiest['name']} at {busiest['util_percent']:.1f} % util over the run.")
    notes = []
    tail_s = s.get("background_tail_ns", 0) / 1e9
    if tail_s > 0:
        host_s = s.get("host_duration_ns", 0) / 1e9
        notes.append(
            f"The stack went on {tail_s:.3g} s after the last host IO ({host_s:.3g} s): moves or write-backs still "
            "in flight (background_tail_ns). Host IOPS and response times exclude that tail; the devices' "
            "%util includes it."
        )
    if run.get("host_ios_unfinished"):
        notes.append(f"{run['host_ios_unfinished']} host IOs never completed.")
    if s.get("contract_violations"):
        notes.append(f"{s['contract_violations']} device contract violations (docs/metrics.md).")
    if s.get("latency_over_range_ios"):
        notes.append(f"{s['latency_over_range_ios']} IOs took longer than the latency histogram's range.")
    series = d / "series.csv"
    if series.is_file():
        frame = pd.read_csv(series)
        if "scope" in frame.columns and "util_percent" in frame.columns:
            for scope in dict.fromkeys(frame["scope"]):
                if not str(scope).startswith("device:"):
                    continue
                last = frame[frame["scope"] == scope]["util_percent"].iloc[-1]
                if last >= 95:
                    notes.append(
                        f"{scope[len('device:'):]} was {last:.0f} % busy in the last interval: it was still "
                        "working when the run ended."
                    )
    return items, notes


def _never_filled(d: Path, table: pd.DataFrame) -> Callable[[str, str, dict[str, Any]], str | None]:
    """Why two caches can agree to the last digit: neither filled up, so
    neither evicted a page and the replacement policy never chose — when
    each run's summary (runs/WORKLOAD-SYSTEM) shows it."""

    def why(a: str, b: str, group: dict[str, Any]) -> str | None:
        workload = group["workload"]
        resident = []
        capacity = 0
        for system in (a, b):
            path = d / "runs" / f"{workload}-{system}" / "summary.json"
            row = table[(table["workload"] == workload) & (table["system"] == system)]
            if not path.is_file() or row.empty:
                return None
            counters = _json(path).get("run", {}).get("policy_counters", {})
            if "resident_bytes" not in counters:
                return None
            resident.append(int(counters["resident_bytes"]))
            capacity = int(row["peak_mem_bytes"].iloc[0])
        if max(resident) >= capacity:
            return None
        return (
            f"their cache ({human_bytes(capacity)}, ATSMF's peak memory) never filled — "
            f"{human_bytes(max(resident))} resident at the end — so no page was evicted and the replacement "
            "policy never had to choose. A smaller cache (or a longer trace) tells them apart."
        )

    return why


def _takeaway_atsmf(d: Path, table: pd.DataFrame) -> tuple[list[str], list[str]]:
    items, notes = [], []
    for workload, part in table.groupby("workload", sort=False):
        best = part.loc[part["mean_rt_ms"].idxmin()]
        line = f"{workload}: lowest mean response time {best['system']} ({best['mean_rt_ms']:.3g} ms"
        if "rt_ratio_vs_flash" in part.columns:
            line += f", {best['rt_ratio_vs_flash']:.2f}× flash only"
        line += ")"
        if "mem_access_ratio" in part.columns:
            top = part.loc[part["mem_access_ratio"].idxmax()]
            line += f"; most IOs from memory: {top['system']} ({top['mem_access_ratio']:.2f})"
        items.append(line + ".")
    if "background_tail_s" in table.columns:
        # Sub-millisecond tails are a last write-back's completion: no note.
        for system, part in table[table["background_tail_s"] >= 1e-3].groupby("system", sort=False):
            tails = part["background_tail_s"]
            span = f"{tails.min():.3g} s" if len(tails) == 1 else f"{tails.min():.3g}–{tails.max():.3g} s"
            notes.append(
                f"{system} went on {span} after the workload ended on {len(part)} of "
                f"{table['workload'].nunique()} workloads ({', '.join(map(str, part['workload']))}): moves or "
                "write-backs in flight, not counted in its response times (docs/atsmf.md, background_tail_s)."
            )
    notes += _identical(
        table, "system", ["mean_rt_ms", "mem_access_ratio", "peak_mem_bytes"], ["workload"], _never_filled(d, table)
    )
    return items, notes


def _takeaway_hswd(table: pd.DataFrame) -> tuple[list[str], list[str]]:
    items = []
    mapping = table[table["experiment"] == "mapping"]
    if len(mapping) >= 2:
        by = {r["mapping"]: r for _, r in mapping.iterrows()}
        if {"fully", "set"} <= set(by):
            f, t = by["fully"], by["set"]
            items.append(
                f"Mapping: fully associative {f['iops']:.0f} IOPS, max {f['max_latency_ms']:.0f} ms; set-associative "
                f"{t['iops']:.0f} IOPS, max {t['max_latency_ms']:.0f} ms."
            )
    policies = table[table["experiment"] == "policies"]
    if len(policies):
        wins: dict[str, int] = {}
        cases = 0
        for _, part in policies.groupby(["workload", "pcache_bytes"], sort=False):
            cases += 1
            winner = part.loc[part["mean_latency_ms"].idxmin(), "policy"]
            wins[winner] = wins.get(winner, 0) + 1
        items.append(
            f"Policies: lowest mean response time in {cases} (workload, PCache size) cases: "
            + ", ".join(f"{k.upper()} {v}" for k, v in sorted(wins.items(), key=lambda kv: -kv[1])) + "."
        )
    systems = table[table["experiment"] == "systems"]
    for workload, part in systems.groupby("workload", sort=False):
        ranked = part.sort_values("mean_latency_ms")
        items.append(
            f"Systems on {workload}, fastest first: "
            + ", ".join(f"{r['system']} {_time_us(1000 * r['mean_latency_ms'])}" for _, r in ranked.iterrows())
            + "."
        )
    # Runs without a single RMW never asked the band-selection policy: the
    # same numbers there are expected (the paper's own claim at 384 MiB).
    cleaned = table[table["rmw_count"].fillna(1) > 0]
    notes = _identical(
        cleaned.assign(run=cleaned["system"] + "-" + cleaned["policy"].astype(str)),
        "run",
        ["iops", "mean_latency_ms", "max_latency_ms", "rmw_count"],
        ["experiment", "workload", "pcache_bytes"],
    )
    return items, notes


def _takeaway_qos(summary: dict[str, Any]) -> list[str]:
    items = []
    for e in summary.get("evaluations", []):
        err = e.get("a_relative_error_after_settling")
        items.append(
            f"{e.get('name')}: target busy rate X lowered {_times(e.get('x_lowerings', 0))}, "
            f"{_resets(e.get('x_resets_low_util', 0) + e.get('x_resets_bpi_change', 0))}, X at the end "
            f"{e.get('final_target_busy_pct', float('nan')):.1f} %; A "
            + ("settled in every phase" if e.get("all_phases_settled") else "did not settle in every phase")
            + (f", error after settling {100 * err:.1f} %" if err is not None else "") + "."
        )
    return items


def _takeaway_raid(gains: pd.DataFrame) -> list[str]:
    g = gains["improvement_percent"]
    return [
        f"RAID 1 of two SSDs over one SSD, read IOPS: mean {g.mean():+.1f} %, max {g.max():+.1f} % over "
        f"{len(g)} workloads (the thesis: +10.93 % mean, +43.9 % max)."
    ]


def _takeaway_sweep(results: pd.DataFrame, label: pd.Series) -> tuple[list[str], list[str]]:
    items, notes = [], []
    if "mean_latency_us" in results.columns and len(results):
        order = results["mean_latency_us"].astype("float64")
        best, worst = order.idxmin(), order.idxmax()
        items.append(
            f"{len(results)} points; lowest mean response time {_time_us(order[best])} at {label[best]}, highest "
            f"{_time_us(order[worst])} at {label[worst]}."
        )
    metrics = [c for c in ("ios", "iops", "mean_latency_us", "p99_latency_us", "max_latency_us") if c in results]
    notes += _identical(results.assign(label=label), "label", metrics, [])
    return items, notes


def _takeaway(page: _Page, d: Path, kind: str) -> None:
    """The first section: what to conclude, in sentences, and notes on
    anything surprising the numbers show (docs/user-guide.md, "Plots and
    reports")."""
    items: list[str] = []
    notes: list[str] = []
    pvo = d / "paper_vs_ours.csv"
    if pvo.is_file():
        rows = _read_csv(pvo)
        counts = rows["verdict"].value_counts()
        why = rows["why"].fillna("")
        unmeasured = int(((rows["verdict"] == "differs") & why.str.startswith("not measured")).sum())
        # Candidates measured and ruled out, the cause not found (paper_vs_ours.rs summary_line).
        not_found = int(((rows["verdict"] == "differs") & why.str.startswith("not found")).sum())
        not_found_text = f", {not_found} not found among the causes measured" if not_found else ""
        items.append(
            f"Paper vs ours: {int(counts.get('holds', 0))} of {len(rows)} quantities and claims hold here, "
            f"{int(counts.get('differs', 0))} {'differs' if counts.get('differs', 0) == 1 else 'differ'} "
            f"({unmeasured} with the cause not measured yet{not_found_text}), "
            f"{int(counts.get('not comparable', 0))} cannot be compared — each with its reason below."
        )
    if kind == "sim":
        more, notes = _takeaway_sim(d)
        items += more
    elif kind == "atsmf":
        more, notes = _takeaway_atsmf(d, _read_csv(d / "table.csv"))
        items += more
    elif kind == "demo" and (d / "compare" / "table.csv").is_file():
        more, notes = _takeaway_atsmf(d / "compare", _read_csv(d / "compare" / "table.csv"))
        items += more
    elif kind == "hswd":
        more, notes = _takeaway_hswd(_read_csv(d / "table.csv"))
        items += more
    elif kind == "qos":
        items += _takeaway_qos(_json(d / "summary.json"))
    elif kind == "raid":
        items += _takeaway_raid(_read_csv(d / "improvement.csv"))
    elif kind == "sweep":
        results = _read_csv(d / "results.csv")
        more, notes = _takeaway_sweep(results, _sweep_labels(d, results))
        items += more
    elif kind == "concentrations" and (d / "summary.json").is_file():
        summary = _json(d / "summary.json")
        if "concentrations" in summary:
            items.append(f"{summary['concentrations']} IO concentrations found (concentrations.csv).")
    if not items and not notes:
        return
    page.parts.append('<section class="takeaway">')
    page.h2("Takeaway")
    page.bullets(items)
    if notes:
        page.parts.append("<p><b>Worth a second look</b></p>")
        page.bullets(notes, "notes")
    page.parts.append("</section>")


def _sweep_labels(d: Path, results: pd.DataFrame) -> pd.Series:
    """A name per sweep point from what differs between points (config,
    trace, the swept parameters), not its index."""
    import pandas as pd

    keys: list[str] = []
    if (d / "sweep.json").is_file():
        meta = _json(d / "sweep.json")
        keys = [k for k in meta.get("parameters", []) if k in results.columns]
    cols = [c for c in ("config", "trace") if c in results.columns and results[c].nunique() > 1] + keys
    if not cols:
        return results["point"].map(lambda i: f"point {i}") if "point" in results else pd.Series(dtype=str)

    def name(r: Any) -> str:
        parts = []
        for c in cols:
            v = r[c]
            if c in ("config", "trace"):
                parts.append(Path(str(v)).name)
            else:
                parts.append(f"{c.rsplit('.', 1)[-1]}={v}")
        return " ".join(parts)

    return results.apply(name, axis=1)


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
        # Bars by what this experiment varies (policy, mapping or system:
        # each its colour of every chart), grouped by workload, and by
        # PCache size where one system runs at several.
        label_cols = [c for c in ("system", "mapping", "policy") if c in part.columns]
        varied = [c for c in label_cols if part[c].nunique() > 1] or label_cols[:1]
        if "system" in varied:
            varied = ["system"]  # a system's mapping and policy are its own
        part["config"] = part[varied].astype(str).agg("-".join, axis=1)
        if "system" not in varied and part["pcache_bytes"].nunique() > 1:
            part["workload"] = part["workload"] + " " + part["pcache_bytes"].map(lambda b: human_bytes(int(b)))
        page.h3(f"experiment {experiment}")
        page.parts.append('<div class="grid">')
        page.plot(
            lambda ax, p=part, e=experiment: plots.comparison_bars(
                p, "mean_latency_ms", by="config", ax=ax, title=f"{e}: mean response time"
            ),
            f"{experiment} mean latency",
            size=(8.0, 4.5),
        )
        if "rmw_count" in part.columns and part["rmw_count"].notna().any():
            page.plot(
                lambda ax, p=part, e=experiment: plots.comparison_bars(
                    p, "rmw_count", by="config", ax=ax, title=f"{e}: band RMWs"
                ),
                f"{experiment} RMWs",
                size=(8.0, 4.5),
            )
        page.parts.append("</div>")
    iops = d / "iops_4s.csv"
    if iops.is_file():
        frame = _read_csv(iops)
        mapping_runs = [r for r in dict.fromkeys(frame["run"]) if str(r).startswith("mapping-")][:4]

        def draw(ax: Axes) -> None:
            colors = plots.colors_for([r.split("-hswd-")[-1] for r in mapping_runs])
            for run in mapping_runs:
                p = frame[frame["run"] == run]
                short = run.split("-hswd-")[-1]
                ax.plot(p["bucket_end_s"], p["iops"], label=short, color=colors[short], drawstyle="steps-post")
            ax.set_xlabel("time (s)")
            ax.set_ylabel("IOPS per 4 s")
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            plots._legend_outside(ax)  # noqa: SLF001 (the package's own helper)
            ax.set_title("mapping experiment: IOPS over time (Fig. 7)")

        if mapping_runs:
            page.plot(draw, "IOPS per 4 s", size=(9.0, 4.0))


def _qos_section(page: _Page, d: Path) -> None:
    from . import plots

    page.h2("Busy-rate QoS: the three evaluations", "docs/qos.md (Reproduction, series.csv columns)")
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
        size=(10.0, 6.0),
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
        labelled = results.assign(label=_sweep_labels(d, results))
        page.plot(
            lambda ax: plots.comparison_bars(
                labelled, "mean_latency_us", by="label", group=None, ax=ax, title="mean response time per point"
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
    _takeaway(page, d, kind)
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
    if kind == "qos":
        summary = _json(d / "summary.json")
        page.details("summary.json (raw)", f"<pre>{html.escape(json.dumps(summary, indent=1))}</pre>")
    # The command's own SVGs draw the same data: named, not shown twice.
    svgs = sorted(d.glob("*.svg")) + sorted(d.glob("*/*.svg"))
    svgs = [p for p in svgs if p.parent.name not in ("runs", "configs", "points")]
    if svgs:
        page.p(
            f"The command also wrote {len(svgs)} SVG figures of the same data next to its CSVs "
            f"(e.g. {svgs[0].relative_to(d)}), for papers and slides."
        )
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

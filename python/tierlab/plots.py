"""Plots of tierlab results with matplotlib.

Every function draws into ``ax`` when given (so plots compose into your
own figures and notebooks), else into a new :class:`matplotlib.figure.Figure`
(made without pyplot: no global state, safe in scripts and threads), and
returns the Axes. :func:`save` writes a figure as PNG or SVG.

================================  ==========================================
:func:`latency_cdf`               response-time CDFs per tier / op / device /
                                  run (latency_cdf.csv)
:func:`time_series`               any series.csv column over time (IOPS,
                                  latency, ``%util`` per device, ...)
:func:`utilization`               ``%util`` of every device over time
:func:`policy_series`             a policy counter over time (e.g. ATSMF's
                                  memory consumption)
:func:`qos_series`                a QoS evaluation: IOPS, ``%util`` and the
                                  target busy rate X over time
:func:`heatmap`                   sub-LUN x time IO heat map
:func:`heatmap_counts`            the heat-map counts from a trace DataFrame
:func:`comparison_bars`           one metric per system, grouped by workload
:func:`colors_for`                the colour of each system (the same in
                                  every chart)
:func:`text_overlaps`             overlapping labels of a drawn figure
================================  ==========================================

Every quantity plotted is defined in docs/metrics.md (series, CDFs,
``%util``) or the system's doc (docs/atsmf.md, docs/qos.md, docs/hswd.md).
"""

from __future__ import annotations

import io
import os
import zlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ._sim import SimResult

#: A run's CDF source: a SimResult, a latency_cdf.csv frame
#: (``scope, latency_us, cumulative_fraction``) or a reproduce CDF frame
#: (``curve, latency_us, cumulative_fraction``).
CdfSource = Union["SimResult", "pd.DataFrame"]


# matplotlib's tab10, in its order.
_PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
# Systems and policies that appear side by side keep one colour in every
# chart (bars, CDFs, time series): a baseline grey, the paper's system blue.
_FIXED_COLOR = {
    "flash": 7, "flash-only": 7, "linear": 7, "passthrough": 7, "single": 7, "hdd": 7,
    "atsmf": 0, "hswd": 0, "raid1": 0, "raid": 0, "most": 0, "a": 0,
    "flashcache": 1, "flashcache-smr": 1, "lru": 1, "b": 1,
    "arc": 2, "fifo": 4, "sswd": 3, "flashcache-hdd": 5, "sswd-equal-cache": 6,
    "hswd-stalled-first": 9,
}  # fmt: skip


# Line style of a CDF curve's part (its words after the system): the whole
# run solid, its fast tier dotted, its slow tier dashed, in every chart.
_PART_STYLE = {"memory": ":", "pcache": ":", "ssd": ":", "flash": "--", "nregion": "--", "disk": "--"}


def color_key(name: object) -> str:
    """The part of a curve or bar name that picks its colour: the first
    word, lower case (``"atsmf memory"`` → ``atsmf``)."""
    words = str(name).split()
    return words[0].lower() if words else ""


def colors_for(names: Sequence[object]) -> dict[object, str]:
    """A colour per name, the same for a system in every chart: known
    systems and policies have fixed colours, others a slot picked by a
    hash of the name (a clash in one chart moves the later name, in sorted
    order, to the next free slot)."""
    keys = {n: color_key(n) for n in names}
    slots: dict[str, int] = {}
    taken: set[int] = set()
    for key in sorted(set(keys.values()), key=lambda k: (k not in _FIXED_COLOR, k)):
        slot = _FIXED_COLOR.get(key, zlib.crc32(key.encode()) % len(_PALETTE))
        for step in range(len(_PALETTE)):
            if (slot + step) % len(_PALETTE) not in taken:
                slot = (slot + step) % len(_PALETTE)
                break
        taken.add(slot)
        slots[key] = slot
    return {n: _PALETTE[slots[k]] for n, k in keys.items()}


# Axis labels of the columns tierlab writes (docs/metrics.md and the
# systems' docs define them).
_LABELS = {
    "mean_rt_ms": "mean response time (ms)",
    "mean_latency_ms": "mean response time (ms)",
    "mean_latency_us": "mean response time (µs)",
    "p99_latency_us": "p99 response time (µs)",
    "mem_access_ratio": "memory access ratio",
    "rt_ratio_vs_flash": "response time / flash only",
    "improvement_percent": "read IOPS gain (%)",
    "rmw_count": "band RMWs",
    "write_hit_ratio": "write hit ratio",
    "iops": "IOPS",
    "mb_per_s": "MB/s",
    "util_percent": "%util",
    "avg_queue_size": "mean queue size",
}


def label_for(column: str) -> str:
    """A readable axis label for a column name (``mean_rt_ms`` → "mean
    response time (ms)"); unknown names lose their underscores and show
    their unit suffix in parentheses."""
    if column in _LABELS:
        return _LABELS[column]
    for suffix, unit in (("_ms", "ms"), ("_us", "µs"), ("_ns", "ns"), ("_s", "s"), ("_bytes", "bytes"),
                         ("_pct", "%"), ("_percent", "%"), ("_iops", "IOPS")):  # fmt: skip
        if column.endswith(suffix):
            return f"{column[: -len(suffix)].replace('_', ' ')} ({unit})"
    return column.replace("_", " ")


def _short(v: float) -> str:
    """A bar's value label: 3 significant digits, no exponent below 1e6."""
    if v != v:  # NaN
        return ""
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e6 or a < 1e-3:
        return f"{v:.2g}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def _readable_log_axis(axis: Any, lo: float, hi: float) -> None:
    """Ticks at 1, 2, 5 × 10^k over up to two decades (matplotlib's default
    labels only the powers of ten: two ticks on a short range), 1 and 3 ×
    10^k up to four, powers of ten beyond; labelled as plain numbers."""
    import math

    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 1.0
    subs = (1.0, 2.0, 5.0) if decades <= 2.5 else (1.0, 3.0) if decades <= 4.5 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: _short(v)))
    axis.set_minor_formatter(NullFormatter())


def _legend_outside(ax: Axes) -> None:
    """The legend right of the plot, where it cannot cover data."""
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def _axes(ax: Axes | None, figsize: tuple[float, float] = (7.0, 4.0)) -> Axes:
    if ax is not None:
        return ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    return fig.add_subplot()


def _cdf_frame(source: CdfSource) -> pd.DataFrame:
    import pandas as pd

    if isinstance(source, pd.DataFrame):
        df = source
    elif hasattr(source, "cdf"):
        df = source.cdf
    else:
        raise TypeError(f"expected a SimResult or a CDF DataFrame, not {type(source).__name__}")
    if "scope" not in df.columns and "curve" in df.columns:
        df = df.rename(columns={"curve": "scope"})
    missing = {"scope", "latency_us", "cumulative_fraction"} - set(df.columns)
    if missing:
        raise ValueError(
            f"a CDF frame needs columns scope (or curve), latency_us, cumulative_fraction; "
            f"missing {sorted(missing)}"
        )
    return df


def latency_cdf(
    source: CdfSource | Mapping[str, CdfSource],
    scopes: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    log_x: bool = True,
) -> Axes:
    """Response-time CDFs.

    ``source`` is one run (a :class:`SimResult` or a CDF DataFrame) or a
    dict ``{label: run}`` to compare runs. ``scopes`` picks the curves of
    each run (``"all"``, ``"tier:memory"``, ``"op:read"``,
    ``"device:nvme"``, or a reproduce CDF's ``curve`` names); by default
    ``all`` and every ``tier:`` scope of one run, or ``all`` of each run
    in a comparison. Raises ValueError naming the scopes that exist when
    one asked for is missing.
    """
    runs = dict(source) if isinstance(source, Mapping) else {"": source}
    ax = _axes(ax)
    curves: list[tuple[str, Any]] = []
    for label, run in runs.items():
        df = _cdf_frame(run)
        present = list(dict.fromkeys(df["scope"]))
        if scopes is None:
            wanted = (
                ["all"] if len(runs) > 1 else [s for s in present if s == "all" or s.startswith("tier:")]
            ) or present
        else:
            wanted = list(scopes)
        for scope in wanted:
            if scope not in present:
                raise ValueError(f"no CDF scope {scope!r}{f' in {label!r}' if label else ''}; scopes: {', '.join(present)}")
            curves.append((" ".join(x for x in (label, scope) if x), df[df["scope"] == scope]))
    # One colour per system (the curve name's first word, as in the bar
    # charts) and one line style per part of it (all, a tier, an op).
    colors = colors_for([name for name, _ in curves])
    others = ["-.", (0, (5, 1, 1, 1)), (0, (1, 3))]
    parts: dict[str, int] = {}
    for name, part in curves:
        rest = " ".join(name.split()[1:]).removeprefix("tier:")
        if rest in ("", "all"):
            style: Any = "-"
        else:
            style = _PART_STYLE.get(rest) or others[parts.setdefault(rest, len(parts)) % len(others)]
        ax.step(part["latency_us"], part["cumulative_fraction"], where="post", label=name,
                color=colors[name], linestyle=style)  # fmt: skip
    if log_x:
        ax.set_xscale("log")
        positive = [v for _, part in curves for v in part["latency_us"] if v > 0]
        if positive:
            _readable_log_axis(ax.xaxis, min(positive), max(positive))
    ax.set_xlabel("response time (µs)")
    ax.set_ylabel("fraction of IOs ≤ x")
    ax.set_ylim(0, 1.01)
    ax.grid(True, alpha=0.3)
    _legend_outside(ax)
    ax.set_title(title or "response-time CDF")
    return ax


def _time_axis(df: pd.DataFrame) -> tuple[Any, str]:
    """(x values in seconds or minutes, label)."""
    if "start_ns" in df.columns:
        t = (df["start_ns"].astype("float64") + df["end_ns"].astype("float64")) / 2e9
    elif "time_s" in df.columns:
        t = df["time_s"].astype("float64")
    else:
        raise ValueError(f"no time column (start_ns/end_ns or time_s) in {list(df.columns)}")
    if len(t) and t.max() > 600:
        return t / 60.0, "time (min)"
    return t, "time (s)"


def time_series(
    source: SimResult | pd.DataFrame | Mapping[str, SimResult | pd.DataFrame],
    column: str = "iops",
    scope: str = "all",
    *,
    ax: Axes | None = None,
    title: str | None = None,
    ylabel: str | None = None,
) -> Axes:
    """One column of series.csv over time (per-interval values at the
    interval midpoints): ``iops``, ``mb_per_s``, ``mean_latency_us``,
    ``p99_latency_us``, ``util_percent`` (device scopes), ``avg_queue_size``
    ... ``scope`` is ``"all"`` (host IOs) or ``"device:NAME"``. ``source``
    may be a dict ``{label: run}`` to overlay runs."""
    runs = dict(source) if isinstance(source, Mapping) else {"": source}
    ax = _axes(ax)
    xlabel = "time (s)"
    colors = colors_for(list(runs)) if len(runs) > 1 else {}
    for label, run in runs.items():
        df = run.series if hasattr(run, "series") else run
        if column not in df.columns:
            raise ValueError(f"no column {column!r} in the series; columns: {', '.join(df.columns)}")
        if "scope" in df.columns:
            scopes = list(dict.fromkeys(df["scope"]))
            if scope not in scopes:
                raise ValueError(f"no scope {scope!r} in the series; scopes: {', '.join(scopes)}")
            df = df[df["scope"] == scope]
        x, xlabel = _time_axis(df)
        ax.plot(x, df[column].astype("float64"), label=label or f"{scope} {column}", drawstyle="steps-mid",
                color=colors.get(label))  # fmt: skip
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel or label_for(column))
    if column in ("iops", "mb_per_s", "read_mb_per_s", "write_mb_per_s", "ios", "util_percent"):
        ax.set_ylim(bottom=0)  # throughput from zero: a zoomed axis exaggerates swings
    ax.grid(True, alpha=0.3)
    if len(runs) > 1:
        _legend_outside(ax)
    ax.set_title(title or f"{label_for(column)} ({scope})")
    return ax


def utilization(source: SimResult | pd.DataFrame, *, ax: Axes | None = None, title: str | None = None) -> Axes:
    """``%util`` (share of the interval with an IO in flight, as iostat) of
    every device over time."""
    df = source.series if hasattr(source, "series") else source
    ax = _axes(ax)
    xlabel = "time (s)"
    for scope in dict.fromkeys(df["scope"]):
        if not str(scope).startswith("device:"):
            continue
        part = df[df["scope"] == scope]
        x, xlabel = _time_axis(part)
        ax.plot(x, part["util_percent"].astype("float64"), label=scope[len("device:") :], drawstyle="steps-mid")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("%util")
    ax.set_ylim(0, 105)
    ax.grid(True, alpha=0.3)
    _legend_outside(ax)
    ax.set_title(title or "device utilization")
    return ax


def policy_series(
    source: SimResult | pd.DataFrame,
    columns: str | Sequence[str] = "memory_bytes",
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Policy counters (policy_series.csv) over time, e.g. ATSMF's memory
    consumption ``memory_bytes`` (plotted in GiB: columns ending in
    ``_bytes`` are scaled)."""
    df = source.policy_series if hasattr(source, "policy_series") else source
    if df is None:
        raise ValueError("this run's policy has no counters (no policy_series.csv)")
    cols = [columns] if isinstance(columns, str) else list(columns)
    ax = _axes(ax)
    x, xlabel = _time_axis(df)
    for c in cols:
        if c not in df.columns:
            raise ValueError(f"no policy counter {c!r}; counters: {', '.join(df.columns[1:])}")
        y = df[c].astype("float64")
        label = c
        if c.endswith("_bytes"):
            y, label = y / 2**30, f"{c[: -len('_bytes')]} (GiB)"
        ax.plot(x, y, label=label, drawstyle="steps-post")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("GiB" if all(c.endswith("_bytes") for c in cols) else "value")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    _legend_outside(ax)
    ax.set_title(title or ", ".join(cols))
    return ax


def qos_series(df: pd.DataFrame, *, ax: Axes | None = None, title: str | None = None) -> Axes:
    """A ``tierlab reproduce qos`` evaluation (``evalN/series.csv``):
    tenant A's IOPS and its target, B's IOPS and cap (left axis), the
    device ``%util`` and the controller's target busy rate X (right axis;
    docs/qos.md)."""
    need = {"time_s", "a_iops", "a_target_iops", "b_iops", "util_pct", "target_busy_pct"}
    missing = need - set(df.columns)
    if missing:
        raise ValueError(f"not a qos series: missing {sorted(missing)}")
    ax = _axes(ax, (8.0, 4.5))
    t = df["time_s"]
    ax.plot(t, df["a_iops"], label="A IOPS")
    ax.plot(t, df["a_target_iops"], "--", label="A target IOPS")
    ax.plot(t, df["b_iops"], label="B IOPS")
    if "b_cap_iops" in df.columns:
        ax.plot(t, df["b_cap_iops"], ":", label="B cap IOPS")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("IOPS")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    right = ax.twinx()
    right.plot(t, df["util_pct"], color="tab:gray", alpha=0.6, label="%util")
    right.plot(t, df["target_busy_pct"], color="black", drawstyle="steps-post", label="target X (%)")
    right.set_ylabel("%")
    right.set_ylim(0, 105)
    lines = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    # Outside, right of the %-axis labels, so it covers no curve.
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize="small", loc="upper left",
              bbox_to_anchor=(1.08, 1.0), borderaxespad=0)  # fmt: skip
    ax.set_title(title or "busy-rate QoS")
    return ax


def heatmap_counts(
    trace: pd.DataFrame,
    *,
    sub_lun_bytes: int = 1 << 30,
    period_s: float = 60.0,
) -> pd.DataFrame:
    """IOs per (period, sub-LUN) of a trace DataFrame (from
    :func:`tierlab.read_trace` or :func:`tierlab.generate`): columns
    ``minute`` (the period index when ``period_s`` is 60, else ``period``),
    ``sub_lun``, ``ios`` — the shape of ``analyze concentrations``'
    heatmap.csv. Times are taken relative to the first record."""
    import pandas as pd

    if len(trace) == 0:
        return pd.DataFrame({"minute": [], "sub_lun": [], "ios": []})
    t = trace["time_ns"].astype("uint64")
    period = ((t - t.min()) // int(period_s * 1e9)).astype("int64")
    sub = (trace["offset_bytes"].astype("uint64") // sub_lun_bytes).astype("int64")
    name = "minute" if period_s == 60.0 else "period"
    counts = pd.DataFrame({name: period, "sub_lun": sub}).value_counts().rename("ios").reset_index()
    return counts.sort_values([name, "sub_lun"], ignore_index=True)


def heatmap(
    counts: pd.DataFrame,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    log: bool = True,
    time_label: str = "time (min)",
    space_label: str = "sub-LUN",
) -> Axes:
    """A sub-LUN x time heat map of IO counts: ``counts`` has a time column
    (``minute`` or ``period``; the first column otherwise), ``sub_lun``
    and ``ios`` (heatmap.csv of ``analyze concentrations`` or
    ``tierlab demo``, or :func:`heatmap_counts`). Colour is log-scaled by
    default; cells without IO are blank."""
    import numpy as np
    from matplotlib.colors import LogNorm, Normalize

    time_col = next((c for c in ("minute", "period") if c in counts.columns), counts.columns[0])
    for c in ("sub_lun", "ios"):
        if c not in counts.columns:
            raise ValueError(f"a heat map needs columns {time_col}, sub_lun, ios; missing {c!r}")
    ax = _axes(ax, (8.0, 4.5))
    t = counts[time_col].astype("int64").to_numpy()
    s = counts["sub_lun"].astype("int64").to_numpy()
    v = counts["ios"].astype("float64").to_numpy()
    n_t = int(t.max()) + 1 if len(t) else 1
    n_s = int(s.max()) + 1 if len(s) else 1
    grid = np.zeros((n_s, n_t))
    np.add.at(grid, (s, t), v)
    grid[grid == 0] = np.nan  # no IO: blank
    finite = grid[np.isfinite(grid)]
    norm = (
        LogNorm(vmin=max(1.0, finite.min()), vmax=max(1.0, finite.max()))
        if log and len(finite)
        else Normalize()
    )
    image = ax.imshow(grid, aspect="auto", origin="lower", interpolation="nearest", norm=norm, cmap="viridis")
    ax.figure.colorbar(image, ax=ax, label="IOs")
    ax.set_xlabel(time_label)
    ax.set_ylabel(space_label)
    ax.set_title(title or "IOs per sub-LUN over time")
    return ax


def comparison_bars(
    table: pd.DataFrame,
    metric: str,
    *,
    by: str = "system",
    group: str | None = "workload",
    ax: Axes | None = None,
    title: str | None = None,
    ylabel: str | None = None,
    log: bool | None = None,
) -> Axes:
    """One bar per ``by`` value (e.g. system) for ``metric``, grouped by
    ``group`` (e.g. workload; None for a single group): e.g. the
    ``table.csv`` of ``reproduce atsmf`` with ``metric="mean_rt_ms"``.

    Each system has its colour of every chart (:func:`colors_for`); bars
    are labelled with their value when there is room for the label (few
    enough bars); ``log`` (default: when the positive values span more
    than 30×, so 1 ms bars stay visible next to 10 s ones) draws a log
    axis with 1-2-5 ticks; the legend sits right of the plot."""
    for c in [metric, by] + ([group] if group else []):
        if c not in table.columns:
            raise ValueError(f"no column {c!r} in the table; columns: {', '.join(table.columns)}")
    import numpy as np

    ax = _axes(ax)
    groups = list(dict.fromkeys(table[group])) if group else [None]
    members = list(dict.fromkeys(table[by]))
    colors = colors_for(members)
    width = 0.8 / max(1, len(members))
    x = np.arange(len(groups))
    values_all = table[metric].astype("float64").to_numpy()
    positive = values_all[np.isfinite(values_all) & (values_all > 0)]
    if log is None:
        log = len(positive) > 1 and positive.max() > 30 * positive.min() and (values_all >= 0).all()
    bars_total = len(groups) * len(members)
    for i, m in enumerate(members):
        values = []
        for g in groups:
            rows = table[(table[by] == m) & ((table[group] == g) if group else True)]
            values.append(float(rows[metric].iloc[0]) if len(rows) else np.nan)
        bars = ax.bar(x + (i - (len(members) - 1) / 2) * width, values, width, label=str(m), color=colors[m])
        # Value labels only where each bar has room for one: upright for a
        # few bars, turned for up to 24, none beyond (the table has them).
        if bars_total <= 24:
            ax.bar_label(bars, labels=[_short(v) for v in values], fontsize="x-small", padding=2,
                         rotation=0 if bars_total <= 6 else 90)  # fmt: skip
    ax.set_xticks(x, [str(g) for g in groups] if group else [""])
    if group and sum(len(str(g)) for g in groups) > 60:
        ax.tick_params(axis="x", labelrotation=90)  # upright names cannot collide
    if log and len(positive):
        ax.set_yscale("log")
        lo, hi = positive.min() / 2, positive.max() * (8 if bars_total > 6 else 3)
        ax.set_ylim(lo, hi)
        _readable_log_axis(ax.yaxis, lo, hi)
    else:
        ax.set_ylim(bottom=0)
        ax.margins(y=0.25 if bars_total > 6 else 0.12)  # room for the value labels
    ax.set_ylabel(ylabel or label_for(metric))
    ax.grid(True, axis="y", alpha=0.3)
    _legend_outside(ax)
    ax.set_title(title or label_for(metric))
    return ax


def text_overlaps(fig_or_ax: Figure | Axes, *, tolerance_px: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of visible text labels of a drawn figure whose boxes overlap
    by more than ``tolerance_px`` in both directions (tick labels, bar
    value labels, titles, axis labels, legend entries): what the report
    tests check, and a quick check for your own figures."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = getattr(fig_or_ax, "figure", fig_or_ax)
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = list(fig.texts)
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax._right_title]  # noqa: SLF001 (no public getter)
        texts += [t for t in ax.texts]  # bar value labels, annotations
        legend = ax.get_legend()
        if legend is not None:
            texts += list(legend.get_texts())
        for axis in (ax.xaxis, ax.yaxis):
            texts += [axis.label, axis.get_offset_text()]
            lo, hi = sorted(axis.get_view_interval())
            span = (hi - lo) or 1.0
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                # Ticks outside the view are not drawn.
                if lo - 1e-9 * span <= tick.get_loc() <= hi + 1e-9 * span:
                    texts += [tick.label1, tick.label2]
    boxes = [
        (t.get_text(), t.get_window_extent(renderer))
        for t in texts
        if t.get_visible() and t.get_text().strip()
    ]
    found = []
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1 :]:
            dx = min(ba.x1, bb.x1) - max(ba.x0, bb.x0)
            dy = min(ba.y1, bb.y1) - max(ba.y0, bb.y0)
            if dx > tolerance_px and dy > tolerance_px:
                found.append((a, b))
    return found


def save(fig_or_ax: Figure | Axes, path: str | os.PathLike[str], *, dpi: int = 120) -> None:
    """Writes the figure (or the Axes' figure) to ``path``; the format
    comes from the suffix (``.png``, ``.svg``, ``.pdf``)."""
    fig = getattr(fig_or_ax, "figure", fig_or_ax)
    fig.savefig(os.fspath(path), dpi=dpi)


def png_bytes(fig_or_ax: Figure | Axes, *, dpi: int = 110) -> bytes:
    """The figure as PNG bytes (what the HTML report embeds)."""
    fig = getattr(fig_or_ax, "figure", fig_or_ax)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()

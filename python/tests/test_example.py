"""examples/trace_to_cdf.py: a trace to a CDF plot and a comparison table
in under 20 lines, run as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "trace_to_cdf.py"


def test_example_is_short_and_runs(tmp_path: Path) -> None:
    code = [l for l in EXAMPLE.read_text().splitlines() if l.strip()]
    assert len(code) < 20
    out = tmp_path / "ex"
    p = subprocess.run([sys.executable, str(EXAMPLE), "", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    table = pd.read_csv(out / "table.csv")
    # The printed table is table.csv's.
    for row in table.itertuples():
        assert row.system in p.stdout and f"{row.mean_rt_ms:.6f}" in p.stdout
    png = (out / "cdf.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000

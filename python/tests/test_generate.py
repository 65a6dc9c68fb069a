"""tierlab.generate / generate_to: determinism, parameters honoured, and the
in-memory frame equal to the streamed file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tierlab

# Small runs of every generator and preset: trace-like presets keep their
# published footprint per request, so they are shrunk with `scale`.
SMALL = {
    g["name"]: {"scale": 0.01} if g["name"] == "trace-like" else {"count": 2000}
    for g in tierlab.generators()
}
SMALL.update(
    {
        p["name"]: {"scale": 0.01} if p["generator"] == "trace-like" else {"count": 2000}
        for p in tierlab.presets()
    }
)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_generator_and_preset(name: str) -> None:
    a = tierlab.generate(name, seed=3, **SMALL[name])
    b = tierlab.generate(name, seed=3, **SMALL[name])
    assert len(a) > 0
    if "count" in SMALL[name]:
        assert len(a) == SMALL[name]["count"]
    pd.testing.assert_frame_equal(a, b)
    assert a.attrs["time_base"] == "relative"
    assert list(a["op"].cat.categories) == ["read", "write", "trim", "flush"]
    assert a["response_ns"].isna().all()
    t = a["time_ns"].to_numpy()
    assert (np.diff(t.astype(np.int64)) >= 0).all(), "records must come in time order"
    assert (a["size_bytes"] > 0).all()


def test_seed_changes_the_records() -> None:
    a = tierlab.generate("uniform", seed=1, count=1000)
    b = tierlab.generate("uniform", seed=2, count=1000)
    assert not a["offset_bytes"].equals(b["offset_bytes"])


def test_parameters_are_honoured() -> None:
    region = 10 * 2**30
    df = tierlab.generate(
        "zipf", seed=1, count=100_000, theta=0.9, region_size_bytes="10GiB", read_ratio=0.7
    )
    assert abs((df["op"] == "read").mean() - 0.7) < 0.01
    end = df["offset_bytes"].to_numpy() + df["size_bytes"].to_numpy().astype(np.uint64)
    assert end.max() <= region
    # Zipf: the most popular offset is far more frequent than under uniform
    top = df["offset_bytes"].value_counts().iloc[0]
    assert top > 100


def test_generate_to_streams_the_same_records(tmp_path: Path) -> None:
    df = tierlab.generate("mixed", seed=9, count=5000)
    out = tmp_path / "g.tlt"
    summary = tierlab.generate_to(out, "mixed", seed=9, count=5000)
    assert summary == {"records": 5000, "retimed": 0, "format": "native"}
    back = tierlab.load_native(out).to_pandas()
    pd.testing.assert_frame_equal(back, df)
    st = tierlab.trace_stats(out)
    assert st["requests"] == 5000
    assert st["writes"] == int((df["op"] == "write").sum())


def test_bad_generator_and_parameter() -> None:
    with pytest.raises(tierlab.TraceError, match="nosuch"):
        tierlab.generate("nosuch", count=10)
    with pytest.raises(tierlab.TraceError, match="unknown parameter `thetaa`"):
        tierlab.generate("zipf", count=10, thetaa=1)
    with pytest.raises(tierlab.TraceError, match="theta"):
        tierlab.generate("zipf", count=10, theta="lots")
    with pytest.raises(ValueError, match="seed"):
        tierlab.generate("zipf", seed=-1, count=10)

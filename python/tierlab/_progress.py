"""Progress of long native runs, for callbacks and tqdm bars.

The simulator reports about every 0.1 s of wall time (from a cheap hook in
the Rust event loop that does not change any result); :func:`tierlab.simulate`
turns each report into a :class:`SimProgress` and hands it to the
``progress`` callback. :class:`TqdmProgress` is such a callback drawing a
tqdm bar with rate and ETA on stderr.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Union


class SimProgress(NamedTuple):
    """Where a simulation run is.

    ``host_ios`` host IOs issued so far; ``simulated_s`` virtual time
    reached; ``events`` events handled. The totals are what the config
    tells without reading a trace (a generator's ``count`` or
    ``duration_s``, a closed-loop ``ios``, ``run.duration_s``), else None.
    """

    host_ios: int
    host_ios_total: int | None
    simulated_s: float
    simulated_s_total: float | None
    events: int

    @property
    def fraction(self) -> float | None:
        """The share of the run done, in [0, 1], when a total is known."""
        parts = []
        if self.host_ios_total:
            parts.append(self.host_ios / self.host_ios_total)
        if self.simulated_s_total:
            parts.append(self.simulated_s / self.simulated_s_total)
        return min(1.0, max(parts)) if parts else None


#: What ``progress=`` accepts: True for a tqdm bar, a callable taking a
#: :class:`SimProgress`, or None/False for none.
ProgressLike = Union[bool, Callable[[SimProgress], Any], None]


class TqdmProgress:
    """A :func:`tierlab.simulate` progress callback drawing a tqdm bar.

    The bar counts host IOs when the config tells their total, else
    simulated seconds when their total is known, else host IOs without a
    total (rate only). It appears after ``delay`` seconds, so short runs
    print nothing, and goes to stderr (tqdm's default).

    >>> with tierlab.TqdmProgress(desc="zipf") as bar:       # doctest: +SKIP
    ...     tierlab.simulate("configs/nvme-zipf.toml", progress=bar)
    """

    def __init__(self, desc: str | None = None, *, delay: float = 1.0, **tqdm_kwargs: Any):
        self._desc = desc
        self._kwargs = {"delay": delay, "dynamic_ncols": True, **tqdm_kwargs}
        self._bar: Any = None
        self._by_time = False

    def __call__(self, p: SimProgress) -> None:
        if self._bar is None:
            from tqdm.auto import tqdm

            if p.host_ios_total:
                total, unit = p.host_ios_total, " IO"
            elif p.simulated_s_total:
                total, unit, self._by_time = p.simulated_s_total, " sim s", True
            else:
                total, unit = None, " IO"
            self._bar = tqdm(
                total=total, unit=unit, unit_scale=True, desc=self._desc, **self._kwargs
            )
        value = p.simulated_s if self._by_time else p.host_ios
        if self._bar.total is not None:
            value = min(value, self._bar.total)
        self._bar.update(value - self._bar.n)

    def close(self) -> None:
        """Ends the bar (at 100 % when it had a total)."""
        if self._bar is not None:
            if self._bar.total is not None:
                self._bar.update(self._bar.total - self._bar.n)
            self._bar.close()
            self._bar = None

    def __enter__(self) -> TqdmProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def native_callback(progress: ProgressLike, desc: str | None = None):
    """(callback for ``_native.simulate``, bar to close or None)."""
    if progress is None or progress is False:
        return None, None
    if progress is True:
        bar = TqdmProgress(desc=desc)
        user: Callable[[SimProgress], Any] = bar
    elif callable(progress):
        bar, user = None, progress
    else:
        raise TypeError(
            f"progress must be True, False, None or a callable taking a SimProgress, "
            f"not {type(progress).__name__}"
        )

    def call(host_ios, host_ios_total, simulated_ns, simulated_ns_total, events):
        user(
            SimProgress(
                host_ios,
                host_ios_total,
                simulated_ns / 1e9,
                None if simulated_ns_total is None else simulated_ns_total / 1e9,
                events,
            )
        )

    return call, bar

"""Whether a trial's measured window was in a steady state: a test for a trend in its
per-second latency.

A trial's p99 stands for its load level only if the server was in a steady state: not still
warming up (a JIT, caches: latency falling), not overloaded (a queue growing without bound:
latency rising through the window), not hit by a drift of the host. The test looks at the
per-second p99 of the seconds wholly inside the measured window (timeline.parquet) and asks
two questions:

- is there a monotone trend? Mann-Kendall: S = sum over pairs i < j of sign(x_j - x_i), which
  makes no assumption about the distribution of the seconds' p99 (skewed, with spikes from a
  GC pause) and is unmoved by one outlier. Two-sided p from S's exact null distribution
  (every order of n distinct values equally likely) up to EXACT_MAX_N seconds, from its
  normal approximation with the tie correction and a continuity correction beyond.
- is it large? Sen's slope (the median of the pairwise slopes, as robust as the test) times
  the window's length, relative to the median second: the drift across the window.

A window is non-stationary when the trend is significant (p < ALPHA) AND the drift is at least
MIN_DRIFT of the median second. The second condition is there because significance alone
flags drifts too small to matter over long windows, and because seconds near saturation are
correlated, which makes Mann-Kendall's p too small; a drift under 20% moves the window's p99
by about half that, a few per cent of a load level at a knee where latency rises several
times faster than the load. Five seconds are the fewest with which the test can reject at
all (the exact p of a perfectly monotone run of 5 is 2/120 = 0.017).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

ALPHA = 0.05
MIN_DRIFT = 0.20  # of the median second, across the window
MIN_SECONDS = 5
EXACT_MAX_N = 12
EDGE_TOLERANCE_NS = 50_000_000  # a bin this close to the window's edge counts as inside


@dataclass(frozen=True)
class Trend:
    """The result for one window. seconds: how many were tested; p: Mann-Kendall's two-sided
    p (NaN when untested); drift: Sen's slope x window / median second (signed: + rising);
    stationary: None when there were too few seconds to test."""

    seconds: int
    p: float
    drift: float
    stationary: bool | None

    @property
    def rising(self) -> bool:
        return self.drift > 0

    def columns(self) -> dict:
        """The trials.csv columns (results/schema.py)."""
        return {
            "stationary": self.stationary,
            "stationarity_p": self.p,
            "stationarity_drift_pct": 100 * self.drift,
            "stationarity_seconds": self.seconds,
        }

    @property
    def reason(self) -> str:
        if self.stationary is not False:
            return ""
        why = (
            ""
            if self.rising
            # latency falling through the window: the server was still warming up when the
            # window began (a JVM compiling its hot paths, caches filling), so say what helps
            else "; a server still warming up (a JIT compiling, caches filling): lengthen "
            "load.warmup"
        )
        return (
            f"per-second p99 {'rose' if self.rising else 'fell'} {100 * abs(self.drift):.0f}% "
            f"across the window (Mann-Kendall p = {self.p:.3f}, {self.seconds} s): not a "
            f"steady state{why}"
        )


@cache
def _kendall_counts(n: int) -> tuple[int, ...]:
    """How many orders of n distinct values have k inversions, k = 0..n(n-1)/2."""
    counts = [1]
    for m in range(2, n + 1):
        new = [0] * (len(counts) + m - 1)
        for k, c in enumerate(counts):
            for j in range(m):
                new[k + j] += c
        counts = new
    return tuple(counts)


def mann_kendall(x) -> tuple[int, float]:
    """(S, two-sided p) for the values in order. p = 1 for fewer than 3 values."""
    x = np.asarray(x, dtype=float)
    n = x.size
    if n < 3:
        return 0, 1.0
    diff = x[None, :] - x[:, None]
    s = int(np.sign(diff[np.triu_indices(n, 1)]).sum())
    if n <= EXACT_MAX_N:
        counts = _kendall_counts(n)
        total = math.factorial(n)
        pairs = n * (n - 1) // 2
        # S = pairs - 2 * inversions; P(|S| >= |s|) over the symmetric null distribution
        tail = sum(c for k, c in enumerate(counts) if abs(pairs - 2 * k) >= abs(s))
        return s, min(1.0, tail / total)
    _, ties = np.unique(x, return_counts=True)
    var = (n * (n - 1) * (2 * n + 5) - float(np.sum(ties * (ties - 1) * (2 * ties + 5)))) / 18
    if var <= 0:
        return s, 1.0
    z = (s - math.copysign(1, s)) / math.sqrt(var) if s else 0.0
    return s, math.erfc(abs(z) / math.sqrt(2))


def sen_slope(x) -> float:
    """The median of the slopes (x_j - x_i) / (j - i) over pairs i < j, per step."""
    x = np.asarray(x, dtype=float)
    i, j = np.triu_indices(x.size, 1)
    return float(np.median((x[j] - x[i]) / (j - i))) if i.size else 0.0


def trend(x) -> Trend:
    """The test of the module docstring on per-second values in time order (NaN seconds,
    with no completed request, are left out)."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < MIN_SECONDS:
        return Trend(int(x.size), math.nan, math.nan, None)
    _, p = mann_kendall(x)
    mid = float(np.median(x))
    drift = sen_slope(x) * (x.size - 1) / mid if mid > 0 else 0.0
    return Trend(int(x.size), p, drift, not (p < ALPHA and abs(drift) >= MIN_DRIFT))


def window_seconds(timeline: pd.DataFrame, summary: dict, column: str = "latency_p99_ms"):
    """The per-second `column` of the bins wholly inside the measured window, in order.
    timeline: timeline.parquet (t_s from the load's start); summary: the trial's
    summary.json (start_ns, measure_start_ns, measure_end_ns)."""
    if timeline.empty or column not in timeline:
        return np.empty(0)
    start = int(summary["start_ns"])
    lo = int(summary["measure_start_ns"]) - EDGE_TOLERANCE_NS
    hi = int(summary["measure_end_ns"]) + EDGE_TOLERANCE_NS
    t0 = start + (timeline["t_s"].to_numpy(dtype=float) * 1e9).astype(np.int64)
    t1 = t0 + 1_000_000_000
    inside = (t0 >= lo) & (t1 <= hi)
    return timeline.loc[inside, column].to_numpy(dtype=float)

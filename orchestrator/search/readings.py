"""What the search reads from one finished probe's trial directory, beyond its trials.csv row:
the SLO's statistic (any percentile, from the window's latency histogram when trials.csv has
no column for it), the Server-Timing service time, and the per-second p99 of the measured
window (its trend test and its within-trial variance)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from loadgen import digest as ldigest
from loadgen import hdr
from loadgen.stats import chosen_window

from ..experiment.search import SearchSlo, percentile_q
from ..measure import stationarity
from ..results import read_summary
from .capacity_estimate import within_variance
from .station import ServiceProbe


@dataclass(frozen=True)
class Readings:
    stat_ms: float  # the SLO's statistic of the trial (NaN: no request completed)
    trend: stationarity.Trend
    within_var: float  # var of ln(per-second p99) / seconds (NaN under two seconds)
    service: ServiceProbe
    # the median of the window's per-second completions (timeline.parquet; NaN without it):
    # what an overloaded server sustained (trials.csv's throughput counts the requests sent
    # in the window, answered during the drain too)
    completed_rps: float = math.nan
    # the lowest per-second value of the SLO's statistic in the window (NaN when the timeline
    # has no column for it): above the SLO, not one second of the window met it
    best_second_ms: float = math.nan


def read_trial(tdir: Path, row: dict, slo: SearchSlo) -> Readings:
    """The readings of the trial in tdir whose trials.csv row is `row`."""
    summary = read_summary(tdir)
    seconds, completed, own = [], [], []
    if summary is not None and (tdir / "timeline.parquet").is_file():
        timeline = pd.read_parquet(tdir / "timeline.parquet")
        seconds = stationarity.window_seconds(timeline, summary)
        completed = stationarity.window_seconds(timeline, summary, "throughput_rps")
        if slo.column is not None:
            own = stationarity.window_seconds(timeline, summary, slo.column)
    own = np.asarray(own, dtype=float)
    own = own[np.isfinite(own)]
    window = None
    if summary is not None and (tdir / "digest.json").is_file():
        window = chosen_window(ldigest.read(tdir / "digest.json"), summary)
    stat_ms = _stat_ms(row, window, slo)
    service = ServiceProbe(float(row.get("latency_mean_ms", math.nan)))
    if window is not None and window.sums.get("svc_n", 0) > 0:
        s = window.sums
        n = s["svc_n"]
        mean = s["svc_sum_ms"] / n
        var = max(0.0, s["svc_sumsq_ms2"] / n - mean * mean)
        service = ServiceProbe(
            service.latency_mean_ms,
            mean,
            var / (mean * mean) if mean > 0 else math.nan,
            s["queue_sum_ms"] / n,
        )
    return Readings(
        stat_ms,
        stationarity.trend(seconds),
        within_variance(seconds),
        service,
        float(np.median(completed)) if len(completed) else math.nan,
        float(own.min()) if own.size else math.nan,
    )


def _stat_ms(row: dict, window, slo: SearchSlo) -> float:
    column = slo.column
    if column is not None:
        v = row.get(column, math.nan)
        return float(v) if v is not None else math.nan
    if window is None:
        return math.nan
    h = window.hists["latency"]
    n = int(h.total_count)
    if n == 0:
        return math.nan
    return hdr.values_at_ranks_ms(h, [hdr.rank(n, percentile_q(slo.stat))])[0]

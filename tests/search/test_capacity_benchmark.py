"""benchmarks/capacity_search.py's reference and the interval it now carries: the sweep's own
uncertainty, which says whether the +-2% goal can be judged at all on a host."""

from __future__ import annotations

import math

import bench_kit
import numpy as np
import pandas as pd
import pytest


@pytest.fixture(scope="module")
def bench():
    return bench_kit.load("capacity_search")


def sweep(rates, p99s_per_rate) -> pd.DataFrame:
    rows = [
        {
            "rate": r,
            "latency_p99_ms": p,
            "latency_p99_ci_low_ms": p * 0.95,
            "valid": True,
            "invalid_reasons": "",
            "lateness_shift_p99_pct": 0.0,
        }
        for r, ps in zip(rates, p99s_per_rate)
        for p in ps
    ]
    return pd.DataFrame(rows)


RATES = [900.0, 950.0, 1000.0, 1050.0, 1100.0]


def test_a_sweep_without_noise_has_a_reference_interval_of_one_point(bench):
    # p99 doubles every 50/s: the SLO of 4 ms is crossed exactly at 1000/s
    t = sweep(RATES, [[1.0] * 3, [2.0] * 3, [4.0] * 3, [8.0] * 3, [16.0] * 3])
    ref, note = bench.reference(t, 4.0)
    assert note == "" and ref == pytest.approx(1000.0)
    lo, hi = bench.reference_interval(t, 4.0)
    assert lo == pytest.approx(1000.0) and hi == pytest.approx(1000.0)


def test_trial_noise_widens_the_reference_interval_around_it(bench):
    rng = np.random.default_rng(3)
    base = [1.0, 2.0, 4.0, 8.0, 16.0]
    t = sweep(RATES, [list(b * np.exp(rng.normal(0, 0.3, 3))) for b in base])
    ref, _ = bench.reference(t, 4.0)
    lo, hi = bench.reference_interval(t, 4.0)
    assert lo < ref < hi
    assert hi - lo > 10.0  # 30% trial noise on 50/s steps cannot pin the crossing to 1%


def test_a_crossing_beyond_the_sweep_leaves_the_interval_open_at_that_end(bench):
    # the SLO is met at every step in some resamples (one slow trial per step at the top)
    t = sweep(RATES, [[1.0] * 3, [1.5] * 3, [2.0] * 3, [3.0] * 3, [3.5, 3.6, 9.0]])
    lo, hi = bench.reference_interval(t, 4.0)
    assert hi == math.inf and math.isfinite(lo)
    assert bench.bound(hi, t["rate"]) == ">1100.0"
    assert bench.bound(-math.inf, t["rate"]) == "<900.0"
    assert bench.bound(1012.34, t["rate"]) == "1012.3"

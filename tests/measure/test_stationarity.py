"""The trend test of a trial's measured window (orchestrator/measure/stationarity.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from orchestrator.measure import stationarity as st


def test_mann_kendall_exact_p_matches_a_count_over_every_order():
    x = [3.0, 1.0, 4.0, 5.0, 9.0, 2.0]
    s, p = st.mann_kendall(x)
    ranks = np.argsort(np.argsort(x))
    count = total = 0
    for perm in itertools.permutations(range(6)):
        d = np.subtract.outer(perm, perm)
        s_perm = int(np.sign(-d[np.triu_indices(6, 1)]).sum())
        count += abs(s_perm) >= abs(s)
        total += 1
    assert s == int(np.sign(np.subtract.outer(ranks, ranks).T[np.triu_indices(6, 1)]).sum())
    assert p == pytest.approx(count / total)


def test_a_perfectly_monotone_five_seconds_can_reject_and_four_cannot():
    assert st.mann_kendall([1, 2, 3, 4, 5]) == (10, pytest.approx(2 / 120))
    assert st.trend([1, 2, 3, 4]).stationary is None  # too few seconds: untested


def test_the_normal_approximation_agrees_with_kendalls_tau_test_beyond_the_exact_range():
    rng = np.random.default_rng(3)
    x = np.arange(30) * 0.05 + rng.normal(0, 1, 30)
    _, p = st.mann_kendall(x)
    tau_p = sps.kendalltau(np.arange(30), x, method="asymptotic").pvalue
    assert p == pytest.approx(tau_p, rel=0.15)


def test_a_rising_window_is_not_stationary_and_says_by_how_much():
    t = st.trend([10, 12, 15, 19, 24, 30])
    assert t.stationary is False and t.rising and t.drift > 1.0
    assert "rose" in t.reason and "Mann-Kendall" in t.reason
    assert "warmup" not in t.reason
    assert t.columns()["stationary"] is False


def test_a_falling_window_names_the_warm_up_and_what_to_lengthen():
    t = st.trend([30, 24, 19, 15, 12, 10])
    assert t.stationary is False and not t.rising
    assert "fell" in t.reason and "lengthen load.warmup" in t.reason


def test_noise_and_small_drifts_are_stationary():
    rng = np.random.default_rng(1)
    flagged = sum(
        st.trend(20 * np.exp(rng.normal(0, 0.3, 10))).stationary is False for _ in range(400)
    )
    assert flagged / 400 < 0.05
    small = st.trend([10.0, 10.2, 10.4, 10.6, 10.8, 11.0, 11.2, 11.4])  # significant, 14%
    assert small.p < st.ALPHA and small.stationary is True


def test_window_seconds_keep_only_whole_seconds_inside_the_measured_window():
    tl = pd.DataFrame({"t_s": [0.0, 1.0, 2.0, 3.0, 4.0], "latency_p99_ms": [9, 1, 2, 3, 99]})
    summary = {"start_ns": 0, "measure_start_ns": 1_000_000_000, "measure_end_ns": 4_000_000_000}
    assert list(st.window_seconds(tl, summary)) == [1, 2, 3]
    assert st.window_seconds(pd.DataFrame(), summary).size == 0
    assert math.isnan(st.trend([math.nan] * 6).p)

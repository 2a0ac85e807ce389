"""benchmarks/history_detection.py's oracle: the ceiling perfctl's detector is scored beside.
It must place one alert at a clear step and none where the series holds no change."""

from __future__ import annotations

import bench_kit
import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench():
    return bench_kit.load("history_detection")


def test_the_oracle_places_a_clear_step_and_ignores_series_without_one(bench):
    rng = np.random.default_rng(29)
    runs = [1 + rng.normal(0, 0.005, 3) for _ in range(40)]
    for i in range(23, 40):
        runs[i] = runs[i] * 1.1
    assert bench.oracle_alerts(runs, {"kind": "step10", "at": 23}) == [23]
    assert bench.oracle_alerts(runs, {"kind": "null"}) == []
    assert bench.oracle_alerts(runs, {"kind": "outlier"}) == []


def test_the_oracle_is_not_moved_by_an_outlier_run(bench):
    # ranks: one run x3 weighs no more than the largest rank, so the step still wins
    rng = np.random.default_rng(7)
    runs = [1 + rng.normal(0, 0.005, 3) for _ in range(40)]
    for i in range(15, 40):
        runs[i] = runs[i] * 1.05
    runs[33] = runs[33] * 3.0
    assert bench.oracle_alerts(runs, {"kind": "step5", "at": 15}) == [15]

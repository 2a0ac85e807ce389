"""benchmarks/history_detection.py's oracle: the ceiling perfctl's detector is scored beside.
It must place one alert at a clear step and none where the series holds no change."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield importlib.import_module("history_detection")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


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

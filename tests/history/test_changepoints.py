"""E-divisive means on trial-level data (orchestrator/history/changepoints.py) on synthetic
series whose answer is known: a step is found at its run (+-1) with an interval holding its
size, a flat series and a lone outlier run give none, steps at both ends of a series are
found only when min_runs runs stand on each side."""

import numpy as np
import pytest
from history_kit import levels

from orchestrator.history import changepoints as cp


@pytest.mark.parametrize("step", [0.05, -0.10, 0.20])
def test_a_step_is_found_at_its_run_with_an_interval_holding_its_size(step):
    found = cp.detect(levels(40, step_at=24, step=step, seed=3))
    assert len(found) == 1, found
    c = found[0]
    assert abs(c.index - 24) <= 1
    assert c.ratio_low <= 1 + step <= c.ratio_high
    assert c.p_value < cp.ALPHA
    assert c.before[1] == c.after[0] == c.index


def test_two_steps_are_two_change_points():
    runs = levels(20, seed=1) + levels(20, seed=2, step_at=0, step=0.1) + levels(20, seed=4)
    found = cp.detect(runs)
    assert [c.index for c in found] == [20, 40], found
    assert found[0].change > 0 > found[1].change


@pytest.mark.parametrize("seed", range(6))
def test_a_flat_series_has_no_change_point(seed):
    assert cp.detect(levels(40, seed=seed)) == []


@pytest.mark.parametrize("where", [0, 1, 19, 38, 39])
def test_a_single_outlier_run_is_not_a_change_point(where):
    """The outlier is 60% off, far beyond the noise: a detector on means would split it off
    (the two guards of the module docstring keep it out)."""
    runs = levels(40, outlier=where, seed=where)
    assert cp.detect(runs) == []
    # the same outlier beside a real step: the step is still found, and only it
    runs = levels(40, step_at=24, step=0.1, outlier=where, seed=where)
    assert [abs(c.index - 24) <= 1 for c in cp.detect(runs)] == [True]


def test_two_outlier_runs_together_still_need_min_runs_to_make_a_segment():
    runs = levels(40, seed=7)
    runs[20] = runs[20] * 1.5
    runs[21] = runs[21] * 1.5
    assert cp.detect(runs) == []


def test_a_step_needs_min_runs_on_each_side():
    one_after = levels(30, step_at=29, step=0.3, seed=5)
    assert cp.detect(one_after, min_runs=3) == []
    assert cp.detect(one_after, min_runs=2) == []
    two_after = levels(30, step_at=28, step=0.3, seed=5)
    assert [abs(c.index - 28) <= 1 for c in cp.detect(two_after, min_runs=2)] == [True]


def test_a_runs_spread_counts_a_noisy_run_moves_less():
    """Trial-level data: the same run levels (a 4% step), their trials spread 0.5% or 15%:
    the step is significant in nearly every narrow series and in few of the wide ones."""
    hits = {"narrow": 0, "wide": 0}
    for seed in range(10):
        rng = np.random.default_rng(seed)
        medians = [1000 * (1.04 if i >= 10 else 1.0) * (1 + rng.normal(0, 0.01)) for i in range(20)]
        noise = rng.normal(0, 1, (20, 3))
        for name, sd in (("narrow", 0.005), ("wide", 0.15)):
            runs = [m * (1 + sd * e) for m, e in zip(medians, noise)]
            p = cp._split_p(cp._Series(runs), 0, 10, 20, np.random.default_rng(0), 499)
            hits[name] += p < cp.ALPHA
    assert hits["narrow"] >= 9 and hits["wide"] <= 4, hits


def test_too_short_a_series_has_no_change_points_and_no_error():
    assert cp.detect([[1.0, 2.0]] * 5) == []
    assert cp.detect([]) == []


def test_a_change_from_a_median_of_zero_cannot_be_sized_and_is_not_reported():
    """An error rate of 0 then 5%: the ratio of medians is not finite (docs/history.md)."""
    runs = [np.zeros(3)] * 15 + [np.full(3, 0.05)] * 15
    assert cp.detect(runs) == []

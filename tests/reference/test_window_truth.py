"""The simulated truth of tests/kits/window_truth.py, checked against the closed form it
corrects: in long trials with no overshoot the M/M/4 queue's capacity under p99 <= 30 ms is
the closed form's; in 5-s trials, and with a constant added to each service, it is above it."""

from __future__ import annotations

import pytest
from window_truth import window_capacity

from models.stations import Station, rate_for_slo

# untimed: simulations with fixed seeds: what they compute, not how fast (tests/conftest.py)
pytestmark = pytest.mark.untimed


def _capacity(extra_ms: float, duration_s: float, trials: int) -> tuple[float, float]:
    exact = rate_for_slo(Station("shared_queue", 4, (4.0 + extra_ms) / 1e3), "p99", 0.030)
    sim = window_capacity(
        workers=4,
        sleep_s=0.004,
        extra_s=extra_ms / 1e3,
        overhead_s=0.0,
        q=99,
        slo_s=0.030,
        warmup_s=1.0,
        duration_s=duration_s,
        near_rps=exact,
        trials=trials,
    )
    return sim, exact


def test_long_trials_of_the_exponential_server_give_the_closed_form():
    sim, exact = _capacity(0.0, 60.0, 30)
    assert sim == pytest.approx(exact, rel=0.02)


def test_short_trials_and_a_timer_overshoot_put_the_capacity_above_the_closed_form():
    short, exact = _capacity(0.0, 5.0, 200)
    assert 1.005 * exact < short < 1.06 * exact
    overshot, exact_overshot = _capacity(0.3, 5.0, 200)
    assert overshot / exact_overshot > short / exact  # a steadier service queues less


def test_a_root_outside_the_bracket_is_refused():
    with pytest.raises(ValueError, match="outside"):
        window_capacity(
            workers=4,
            sleep_s=0.004,
            extra_s=0.0,
            overhead_s=0.0,
            q=99,
            slo_s=0.030,
            warmup_s=1.0,
            duration_s=2.0,
            near_rps=300.0,
            trials=20,
        )

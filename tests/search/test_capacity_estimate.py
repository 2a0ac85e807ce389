"""The capacity, its interval and the next probe's level (orchestrator/search/capacity_estimate.py),
against the exact M/M/c curve."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.stations import Station, rate_for_slo
from orchestrator.search.capacity_estimate import (
    FAR_INVERT,
    Curve,
    Estimate,
    Point,
    estimate,
    next_level,
    within_variance,
)

MM4 = Station("shared_queue", 4, 0.004)
SLO_S = 0.030
EXACT = rate_for_slo(MM4, "p99", SLO_S)


def test_a_probe_on_the_model_curve_extrapolates_to_the_exact_capacity_from_anywhere():
    curve = Curve(MM4, "p99")
    for level in (0.6 * EXACT, 0.95 * EXACT, 1.05 * EXACT):
        est = estimate([Point(level, curve.latency_s(level))], curve, SLO_S, 0.95)
        assert est.capacity == pytest.approx(EXACT, rel=1e-6)
        assert math.isnan(est.low)  # one probe: no interval


def test_a_server_faster_than_the_model_is_found_by_the_stretch():
    model = Curve(Station("shared_queue", 4, 0.005), "p99")  # the model: 25% too slow
    truth = Curve(MM4, "p99")
    pts = [Point(x, truth.latency_s(x)) for x in (0.9 * EXACT, EXACT, 1.05 * EXACT)]
    est = estimate(pts, model, SLO_S, 0.95)
    # M/M/c is not exactly self-similar in the rate once c > 1 (the unloaded latency does
    # not stretch), but near the knee the stretch carries each probe to within 2%
    assert est.capacity == pytest.approx(EXACT, rel=0.02)
    assert est.low < est.capacity < est.high


def test_a_probe_far_below_the_model_keeps_the_measured_saturation():
    # measured just above the model's unloaded p99 at half the capacity: stretched, the curve
    # would meet the SLO past the station's saturation; the latency's ratio carries it instead
    curve = Curve(MM4, "p99", measured_max=True)
    x = 0.5 * EXACT
    measured = 1.002 * curve.latency_s(1e-3 * EXACT)
    assert x * EXACT / curve.level_for(measured) >= curve.level_max  # the stretch's answer
    est = estimate([Point(x, measured)], curve, SLO_S, 0.95)
    ratio = curve.latency_s(x) / measured
    assert est.capacity == pytest.approx(rate_for_slo(MM4, "p99", SLO_S * ratio), rel=1e-6)
    assert EXACT < est.capacity < curve.level_max
    assert any("past the measured saturation" in n for n in est.notes)
    # a probe on the curve is still carried by the stretch, exactly
    on = estimate([Point(x, curve.latency_s(x))], curve, SLO_S, 0.95)
    assert on.capacity == pytest.approx(EXACT, rel=1e-6) and not on.notes
    # a saturation that is only the model's (the saturation probe was the load generator's
    # limit) bounds nothing: the stretch stands
    model_only = estimate([Point(x, measured)], Curve(MM4, "p99"), SLO_S, 0.95)
    assert model_only.capacity > curve.level_max


def test_the_interval_is_students_t_on_the_probes_spread():
    curve = Curve(MM4, "p99")
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(300):
        pts = []
        for x in (0.95 * EXACT, EXACT, 1.02 * EXACT, 0.98 * EXACT):
            pts.append(Point(x, curve.latency_s(x) * math.exp(rng.normal(0, 0.15))))
        est = estimate(pts, curve, SLO_S, 0.95)
        covered += est.low <= EXACT <= est.high
        assert est.df == est.n - 1 and est.n >= 3
    # exact when ln p99 is normal with a spread that grows with the curve's steepness (the
    # weights' assumption); here its spread is constant, so coverage is close to 95%
    assert 0.90 <= covered / 300 <= 0.995


def test_the_within_trial_variance_is_a_floor_under_the_spread():
    curve = Curve(MM4, "p99")
    pts = [Point(x, curve.latency_s(x), within_var=0.01) for x in (0.95 * EXACT, EXACT)]
    est = estimate(pts, curve, SLO_S, 0.95)  # the two agree exactly: the spread is the floor
    # var(ln P_i) = s^2 e_i^1.5, so each trial's within variance gives s^2 >= within / e^1.5
    floor = np.mean([0.01 / curve.elasticity(p.level) ** 1.5 for p in pts])
    assert est.log_sd == pytest.approx(math.sqrt(floor))
    assert est.low < EXACT < est.high


def test_an_upper_bound_caps_the_interval_and_the_estimate():
    curve = Curve(MM4, "p99")
    pts = [Point(x, curve.latency_s(x)) for x in (0.95 * EXACT, EXACT, 1.03 * EXACT)]
    est = estimate(pts, curve, SLO_S, 0.95, upper=0.9 * EXACT)
    assert est.capacity == pytest.approx(0.9 * EXACT) and est.high <= 0.9 * EXACT
    assert any("capped" in n for n in est.notes)


def test_a_probe_far_above_the_slo_is_carried_to_it_from_a_bounded_height():
    """A stall in one trial (p99 50x the SLO) is carried to the SLO from FAR_INVERT x the SLO:
    the model is never inverted higher up (near saturation, where a processor-sharing chain
    takes minutes), the probe weighs what a probe at FAR_INVERT x would, and a note says so."""
    asked = []

    class Spy(Curve):
        def level_for(self, latency_s: float) -> float:
            asked.append(latency_s)
            return super().level_for(latency_s)

    curve = Spy(MM4, "p99")
    near = [Point(x, curve.latency_s(x)) for x in (0.97 * EXACT, 1.01 * EXACT)]
    stall = Point(0.99 * EXACT, 50 * SLO_S)
    est = estimate([*near, stall], curve, SLO_S, 0.95)
    assert max(asked) == pytest.approx(FAR_INVERT * SLO_S)
    as_if = estimate([*near, Point(0.99 * EXACT, FAR_INVERT * SLO_S)], curve, SLO_S, 0.95)
    assert est.each == as_if.each and est.capacity == as_if.capacity
    assert any("above 4x the SLO" in n for n in est.notes)
    assert not any("above" in n for n in estimate(near, curve, SLO_S, 0.95).notes)


def test_the_first_knee_probe_goes_where_the_model_says_and_the_next_balances_it():
    curve = Curve(MM4, "p99")
    first = next_level([], curve, SLO_S, Estimate())
    assert first == pytest.approx(EXACT, rel=1e-3)
    below = [Point(0.93 * EXACT, curve.latency_s(0.93 * EXACT))]
    est = estimate(below, curve, SLO_S, 0.95)
    second = next_level(below, curve, SLO_S, est)
    assert EXACT < second <= EXACT * 1.1  # the other side of the estimate


def test_no_probe_goes_past_saturation_or_a_known_failure():
    curve = Curve(MM4, "p99")
    pts = [Point(0.99 * EXACT, curve.latency_s(0.99 * EXACT))]
    est = estimate(pts, curve, SLO_S, 0.95)
    assert next_level(pts, curve, SLO_S, est, upper=0.97 * EXACT) < 0.97 * EXACT
    assert next_level([], Curve(MM4, "p99"), 10.0, Estimate()) < MM4.max_rate()


def test_closed_curves_count_users_and_invert():
    curve = Curve(MM4, "mean", think_s=0.02)
    assert curve.closed and curve.level_max > 4
    assert curve.latency_s(1) == pytest.approx(0.004, rel=1e-6)
    n = curve.level_for(0.010)
    assert curve.latency_s(n) == pytest.approx(0.010, rel=1e-6)
    assert curve.latency_s(8) < curve.latency_s(16)
    p99 = Curve(MM4, "p99", think_s=0.02)
    assert p99.latency_s(10) > curve.latency_s(10)  # a tail above the mean
    assert next_level([], curve, 0.010, Estimate()) == round(n)


def test_within_variance_is_batch_means_of_log_seconds():
    assert within_variance([10, 10, 10]) == 0.0
    assert math.isnan(within_variance([10]))
    x = np.array([8.0, 12.0, 10.0, 11.0])
    assert within_variance(x) == pytest.approx(np.var(np.log(x), ddof=1) / 4)

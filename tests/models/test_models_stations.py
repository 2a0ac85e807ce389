"""models/stations.py: a server as one station, and the rate or users that meet an SLO, against
closed forms (M/M/1's sojourn time is Exp(mu - lambda)) and the queue models it wraps."""

from __future__ import annotations

import math

import pytest

from models import queues
from models.stations import Station, percentile_of, rate_for_slo, users_for_slo


def test_mm1_rate_for_a_p99_slo_is_the_closed_form():
    # T ~ Exp(mu - lambda): p99 = ln(100) / (mu - lambda), so lambda = mu - ln(100) / slo
    s = Station("event_loop", 1, 0.004)
    slo = 0.030
    assert rate_for_slo(s, "p99", slo) == pytest.approx(250 - math.log(100) / slo, rel=1e-6)


def test_mmc_rate_for_slo_puts_the_percentile_on_the_slo():
    s = Station("shared_queue", 4, 0.004)
    rate = rate_for_slo(s, "p99", 0.030)
    assert 0 < rate < s.max_rate()
    assert queues.mmc(rate, 250, 4).response_percentile(0.99) == pytest.approx(0.030, rel=1e-6)


def test_an_overhead_adds_to_every_response_and_lowers_the_rate():
    bare = Station("shared_queue", 4, 0.004)
    delayed = Station("shared_queue", 4, 0.004, overhead_s=0.010)
    assert delayed.latency_s(300, "p99") == pytest.approx(bare.latency_s(300, "p99") + 0.010)
    assert rate_for_slo(delayed, "p99", 0.030) < rate_for_slo(bare, "p99", 0.030)


def test_an_slo_below_the_unloaded_latency_has_rate_zero():
    assert rate_for_slo(Station("shared_queue", 2, 0.004), "p99", 0.001) == 0.0


def test_a_mean_slo_works_for_a_general_service_time_and_a_percentile_is_refused():
    s = Station("shared_queue", 2, 0.004, service_scv=0.2)
    rate = rate_for_slo(s, "mean", 0.006)
    assert s.mean_response_s(rate) == pytest.approx(0.006, rel=1e-6)
    with pytest.raises(NotImplementedError, match="only the mean"):
        s.latency_s(100, "p99")


def test_percentile_names_read_as_trials_csv_writes_them():
    assert percentile_of("p99") == 99.0
    assert percentile_of("p999") == 99.9
    assert percentile_of("p99.9") == 99.9
    assert percentile_of("p50") == 50.0
    for bad in ("99", "p", "p100", "px"):
        with pytest.raises(ValueError):
            percentile_of(bad)


def test_closed_users_for_a_mean_slo_follow_mva():
    s = Station("shared_queue", 4, 0.004)
    n = users_for_slo(s, think_s=0.020, slo_s=0.010)
    m = s.closed(n + 1, 0.020)
    assert m.response_time[n - 1] <= 0.010 < m.response_time[n]


def test_a_bad_station_is_refused_with_the_parameter_named():
    with pytest.raises(ValueError, match="dispatch"):
        Station("round_robin", 1, 0.001)
    with pytest.raises(ValueError, match="servers must be 1"):
        Station("event_loop", 2, 0.001)
    with pytest.raises(ValueError, match="mean_service_s"):
        Station("shared_queue", 1, 0.0)

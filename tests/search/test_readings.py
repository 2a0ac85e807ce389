"""What the search reads from a probe's trial directory (orchestrator/search/readings.py): a
percentile trials.csv has no column for, from the window's latency histogram; the
Server-Timing service time; the window's trend."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loadgen import digest as ldigest
from orchestrator.experiment.search import SearchSlo
from orchestrator.results import write_json
from orchestrator.search.readings import read_trial

S = 1_000_000_000


@pytest.fixture
def trial(tmp_path):
    """A trial of 1000 requests with latencies 1..1000 us (so its p95 is 950 us) and
    Server-Timing svc 0.5 ms, queue 0.1 ms each; five steady seconds."""
    n = 1000
    intended = S + np.arange(n, dtype=np.int64) * 5_000_000  # 5 s of window
    lat = (np.arange(1, n + 1, dtype=np.int64)) * 1000
    cols = {
        "intended_ns": intended,
        "sent_ns": intended,
        "done_ns": intended + lat,
        "status": np.full(n, 200, dtype=np.int16),
        "error": np.zeros(n, dtype=np.int8),
        "svc_ms": np.full(n, 0.5, dtype=np.float32),
        "queue_ms": np.full(n, 0.1, dtype=np.float32),
    }
    d = ldigest.Digest(5.0)
    d.begin(0, S, 6 * S)
    d.add(cols)
    d.write(tmp_path)
    write_json(
        tmp_path / "summary.json", {"start_ns": 0, "measure_start_ns": S, "measure_end_ns": 6 * S}
    )
    pd.DataFrame(
        {
            "t_s": np.arange(7.0),
            "latency_p99_ms": [9.0, 1, 1.1, 0.9, 1, 1.05, 9],
            "throughput_rps": [50.0, 200, 190, 210, 205, 195, 40],  # warm-up, window, drain
        }
    ).to_parquet(tmp_path / "timeline.parquet")
    return tmp_path


def test_a_percentile_without_a_column_comes_from_the_windows_histogram(trial):
    r = read_trial(trial, {"latency_mean_ms": 0.5005}, SearchSlo(stat="p95", latency_ms=5))
    assert r.stat_ms == pytest.approx(0.950, rel=2e-3)  # HdrHistogram: within 0.1% above


def test_a_percentile_with_a_column_is_read_from_the_row(trial):
    r = read_trial(trial, {"latency_p99_ms": 0.99}, SearchSlo(stat="p99", latency_ms=5))
    assert r.stat_ms == 0.99


def test_server_timing_gives_the_service_time_and_the_seconds_the_trend(trial):
    r = read_trial(trial, {"latency_mean_ms": 0.5005}, SearchSlo(stat="p99", latency_ms=5))
    assert r.service.svc_mean_ms == pytest.approx(0.5)
    assert r.service.queue_mean_ms == pytest.approx(0.1, rel=1e-5)
    assert r.service.svc_scv == pytest.approx(0.0, abs=1e-6)
    assert r.trend.seconds == 5 and r.trend.stationary is True  # the edges are left out
    assert r.within_var > 0


def test_the_completed_rate_is_the_median_second_of_the_window(trial):
    """What the server completed each second of the window (the timeline's bins wholly inside
    it), not the warm-up's or the drain's: an overloaded probe's real rate."""
    r = read_trial(trial, {"latency_mean_ms": 0.5005}, SearchSlo(stat="p99", latency_ms=5))
    assert r.completed_rps == 200.0


def test_the_best_second_is_the_windows_lowest_of_the_slos_own_statistic(trial):
    """The lowest per-second p99 inside the window (0.9 ms), not the warm-up's or the drain's
    (9 ms); NaN for a statistic the timeline has no column for (p95)."""
    r = read_trial(trial, {"latency_p99_ms": 0.99}, SearchSlo(stat="p99", latency_ms=5))
    assert r.best_second_ms == 0.9
    r = read_trial(trial, {"latency_mean_ms": 0.5005}, SearchSlo(stat="p95", latency_ms=5))
    assert np.isnan(r.best_second_ms)

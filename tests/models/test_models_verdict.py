"""models/verdict.py: the bootstrap's intervals, the band of a prediction, the verdict rules
(held, rejected with evidence, inconclusive, no prediction) and the rejection of a server whose
behaviour breaks the model's assumptions (connections pinned to fewer workers), on a run
simulated by des.py."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from models import comparison
from models.stations import Station
from models.verdict import Interval, Sample, band, bootstrap, causes, interval, judge

from .des import simulate


def test_the_bootstrap_interval_of_a_mean_covers_the_true_mean_about_as_often_as_it_says():
    rng = np.random.default_rng(5)
    hits = 0
    for seed in range(40):
        x = rng.exponential(4.0, 1000)
        iv = interval(bootstrap([Sample.of_values(x)], ("mean",), draws=200, seed=seed)["mean"])
        hits += iv.contains(4.0)
    assert 0.85 <= hits / 40 <= 1.0


def test_one_second_blocks_widen_the_interval_of_correlated_latencies():
    # waiting times of an M/M/1 queue at rho 0.9 (Lindley): strongly correlated in time
    rng = np.random.default_rng(2)
    n = 40_000
    a, s = rng.exponential(1 / 0.9, n), rng.exponential(1.0, n)
    w = np.zeros(n)
    for i in range(1, n):
        w[i] = max(w[i - 1] + s[i - 1] - a[i], 0.0)
    t = np.cumsum(a)
    iid = interval(bootstrap([Sample.of_values(w)], ("mean",))["mean"])
    blocked = interval(bootstrap([Sample.of_values(w, np.floor(t / 400))], ("mean",))["mean"])
    assert (blocked.high - blocked.low) > 2 * (iid.high - iid.low)


def test_several_trials_are_resampled_so_their_spread_shows():
    rng = np.random.default_rng(3)
    same = [Sample.of_values(rng.exponential(4.0, 2000)) for _ in range(4)]
    apart = [Sample.of_values(rng.exponential(m, 2000)) for m in (3.0, 4.0, 5.0, 6.0)]
    w_same = interval(bootstrap(same, ("mean",))["mean"])
    w_apart = interval(bootstrap(apart, ("mean",))["mean"])
    assert (w_apart.high - w_apart.low) > 3 * (w_same.high - w_same.low)


def test_the_band_is_the_prediction_at_its_parameters_ends_added_in_quadrature():
    def f(a):
        return 10 * a["S"] + a["d"]

    base, b = band(f, {"S": (1.0, Interval(0.9, 1.2)), "d": (0.0, Interval(-1.0, 1.0))})
    assert base == 10.0
    assert b.low == pytest.approx(10 - math.hypot(1.0, 1.0))
    assert b.high == pytest.approx(10 + math.hypot(2.0, 1.0))

    # an end past saturation (the model refuses it): no upper bound
    def queue(a):
        if a["rho"] >= 1:
            raise ValueError("unstable")
        return 1 / (1 - a["rho"])

    _, b = band(queue, {"rho": (0.8, Interval(0.7, 1.1))})
    assert b.high == math.inf and b.low == pytest.approx(1 / 0.3)


def test_the_verdict_rules():
    held = judge("mean", 10.0, Interval(9.5, 10.5), 10.4, Interval(10.2, 10.6))
    assert held.status == "held"
    out = judge("mean", 10.0, Interval(9.5, 10.5), 12.0, Interval(11.8, 12.2), evidence=["x"])
    assert out.status == "rejected" and "outside the band" in out.why and out.causes == ("x",)
    bare = judge("p99", 10.0, Interval(9.5, 10.5), 12.0, Interval(11.8, 12.2))
    assert bare.causes == ("no known cause in the run's readings",)
    broken = judge("mean", 10.0, Interval(9.5, 10.5), 10.0, Interval(9.9, 10.1), broken="pinned")
    assert broken.status == "rejected" and broken.causes[0] == "pinned"
    failed = judge("mean", 10.0, Interval(9.5, 10.5), 10.0, Interval(9.9, 10.1), failed_share=0.03)
    assert failed.status == "rejected" and "3.0% of requests failed" in failed.why
    wide = judge("mean", 10.0, Interval(5.0, 20.0), 14.0, Interval(13.0, 15.0))
    assert wide.status == "inconclusive"
    assert judge("p99", math.nan, Interval(math.nan, math.nan), 5.0, Interval(4, 6)).status == (
        "no prediction"
    )


def test_causes_name_the_evidence_in_the_readings():
    row = dict(
        server_threads=8,
        server_cores=2,
        server_cpu_pct=195.0,
        connections=128,
        keepalive=True,
        error_rate=0.04,
        errors_timeout=120,
        tcp_listen_overflows=3,
        tcp_listen_drops=3,
        server_gc_pause_max_ms=45.0,
        loadgen_cpu_pct=97.0,
        quiet=False,
        noise_reasons="steal 12%",
    )
    text = " | ".join(causes(row))
    for want in (
        "connection pinning suspected",
        "accept queue overflowed",
        "CPU saturated: 1.95 of 2 core(s) busy with 8 threads",
        "GC/safepoint pauses up to 45 ms",
        "the load generator was saturated",
        "host noise: steal 12%",
    ):
        assert want in text
    # a keep-alive connection held across an injected round trip by its pinned worker
    st = Station("per_connection", 4, 0.004, connections=4, overhead_s=0.02)
    assert any("injected delay" in c for c in causes({"rtt_measured_ms": 20.0}, st))
    assert causes({}) == []


def _pinned_run(dispatch: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A pool server with 4 workers and 64 keep-alive connections, as des.py simulates it;
    in a real run each starved connection's request times out (5 s) and the connection is
    opened again, so a few per cent of the requests fail (issue 27 saw 3-8%)."""
    S, rate = 0.004, 500.0
    sim = simulate("pinned", 4, S, rate_rps=rate, connections=64, requests=20_000)
    lat = (sim.response_s * 1e9).astype(np.int64)
    n = lat.size
    intended = (np.arange(n) / rate * 1e9).astype(np.int64)
    reqs = pd.DataFrame(
        {
            "cell_id": "pool",
            "trial": 1,
            "intended_ns": intended,
            "sent_ns": intended,
            "done_ns": intended + lat,
            "latency_ns": lat,
            "status": 200,
            "error": 0,
            "svc_ms": np.random.default_rng(1).exponential(S * 1e3, n),
            "queue_ms": 0.0,
        }
    )
    timeouts = 60 * n / rate / 5.0  # 60 starved connections, one timeout each per 5 s
    trials = pd.DataFrame(
        [
            dict(
                cell_id="pool",
                trial=1,
                server="c-pool",
                server_impl="c",
                concurrency_model="pool",
                server_dispatch=dispatch,
                server_dispatch_source="catalogue" if dispatch else "",
                load_mode="open",
                target_rate=rate,
                throughput_rps=rate,
                latency_mean_ms=np.nan,
                latency_p99_ms=np.nan,
                requests=n,
                errors=timeouts,
                errors_timeout=timeouts,
                error_rate=timeouts / (n + timeouts),
                valid=True,
                connections=64,
                keepalive=True,
                server_threads=4,
                server_cores=2,
                work_sleep_us=4000,
                work_spin_us=0,
            )
        ]
    )
    return trials, reqs


@pytest.mark.parametrize("dispatch", ["", "per_connection"])
def test_a_server_pinning_more_keepalive_connections_than_workers_is_rejected_with_the_cause(
    dispatch,
):
    trials, reqs = _pinned_run(dispatch)
    row = comparison.compare(trials, reqs).iloc[0]
    assert row["verdict"] == "rejected"
    assert row["verdict_mean"] == "rejected" and row["verdict_p99"] == "rejected"
    if dispatch:  # the catalogue knows: the model itself says it does not hold
        assert "connection pinning: 64 keep-alive connections on 4" in row["verdict_causes"]
    else:  # M/M/4 assumed: the readings point to the pinning
        assert row["model"] == "M/M/4"
        assert "connection pinning suspected" in row["verdict_causes"]


def test_a_measurement_too_uncertain_to_tell_is_inconclusive_not_held():
    v = judge("p99", 30.0, Interval(28.0, 32.0), 100.0, Interval(29.0, 160.0))
    assert v.status == "inconclusive" and "measurement's own interval" in v.why

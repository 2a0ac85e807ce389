"""models/whatif.py: what-if changes parsed and applied, and a what-if prediction against a
known queue: the M/M/4 fitted on a simulated cell, asked for 8 workers at twice the rate, is
M/M/8's closed form and matches a simulation of that queue."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from models import comparison, queues, whatif
from models.assess import predict_with_band

from .des import simulate

S = 0.004


def test_what_if_assignments_parse_with_units_and_bad_ones_name_the_fix():
    assert whatif.parse(["threads=8", "delay=10ms", "rate=450.5"]) == {
        "threads": 8.0,
        "delay": 10.0,
        "rate": 450.5,
    }
    assert whatif.parse(["delay=0.02s"])["delay"] == pytest.approx(20.0)
    for bad, why in (
        ("workers=8", "KEY one of threads, cores, rate, users, delay"),
        ("threads=2.5", "positive integer"),
        ("rate=-1", "positive number"),
        ("delay=fast", "not a duration"),
    ):
        with pytest.raises(ValueError, match=why):
            whatif.parse([bad])


def _cell(rate: float, threads: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    sim = simulate("shared", threads, S, rate_rps=rate, connections=None, requests=60_000, seed=4)
    n = sim.response_s.size
    lat = (sim.response_s * 1e9).astype(np.int64)
    intended = (np.arange(n) / rate * 1e9).astype(np.int64)
    svc = np.random.default_rng(7).exponential(S * 1e3, n)
    reqs = pd.DataFrame(
        dict(
            cell_id="c",
            trial=1,
            intended_ns=intended,
            sent_ns=intended,
            done_ns=intended + lat,
            latency_ns=lat,
            status=200,
            error=0,
            svc_ms=svc,
            queue_ms=np.maximum(lat / 1e6 - svc, 0.0),
        )
    )
    trials = pd.DataFrame(
        [
            dict(
                cell_id="c",
                trial=1,
                server="ref",
                server_impl="cmd",
                server_dispatch="shared_queue",
                server_dispatch_source="declared",
                load_mode="open",
                target_rate=rate,
                throughput_rps=rate,
                requests=n,
                valid=True,
                connections=1,
                keepalive=False,
                server_threads=threads,
                server_cores=1,
                server_cpu_pct=3.0,
                latency_mean_ms=np.nan,
                latency_p99_ms=np.nan,
            )
        ]
    )
    return trials, reqs


def test_a_what_if_from_a_fitted_mm4_is_the_mm8_closed_form_and_matches_its_simulation():
    trials, reqs = _cell(600.0, 4)
    table = comparison.compare(trials, reqs)
    fitted = table.iloc[0]
    assert fitted["model"] == "M/M/4"
    svc = comparison.estimate_service(reqs)
    row = pd.Series({**trials.iloc[0].to_dict(), "server_cpu_pct": 3.0})
    new_row, new_svc, notes = whatif.apply(row, svc, {"threads": 8, "rate": 1200.0})
    assert notes == []
    p, bands, _ = predict_with_band(new_row, new_svc)
    assert p["model"] == "M/M/8"
    exact = queues.mmc(1200.0, 1 / svc.mean_s, 8)
    assert p["mean_ms"] == pytest.approx(exact.mean_response * 1e3, rel=1e-9)
    assert p["p99_ms"] == pytest.approx(exact.response_percentile(0.99) * 1e3, rel=1e-9)
    assert bands["mean"].low < p["mean_ms"] < bands["mean"].high
    truth = simulate("shared", 8, S, rate_rps=1200.0, connections=None, requests=60_000, seed=9)
    assert abs(p["mean_ms"] / (truth.mean * 1e3) - 1) < 0.05
    assert abs(p["p99_ms"] / (truth.percentile(99) * 1e3) - 1) < 0.08


def test_a_delay_what_if_moves_the_overhead_by_the_round_trips_a_request_makes():
    trials, reqs = _cell(300.0, 4)
    svc = comparison.estimate_service(reqs)
    row = trials.iloc[0].copy()
    _, per_request, _ = whatif.apply(row, svc, {"delay": 5.0})  # a new connection per request
    assert per_request.overhead_s == pytest.approx(svc.overhead_s + 2 * 0.010)
    row["keepalive"] = True
    _, kept, _ = whatif.apply(row, svc, {"delay": 5.0})
    assert kept.overhead_s == pytest.approx(svc.overhead_s + 0.010)


def test_what_if_changes_a_closed_cell_by_users_and_says_a_rate_does_not_apply():
    row = pd.Series(dict(load_mode="closed", connections=4, target_rate=math.nan))
    svc = comparison.estimate_service(_cell(300.0, 4)[1])
    r, _, notes = whatif.apply(row, svc, {"users": 16, "rate": 900.0})
    assert r["connections"] == 16 and math.isnan(r["target_rate"])
    assert notes == ["rate: a closed cell's rate is its users' (unchanged)"]

"""models.estimate: parameter helpers, model choice, and compare() on a synthetic run whose
requests come from the Ciw simulations (shared, cached with test_models_queues_sim.py)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from models import closed, estimate, usl
from models.estimate import ServiceEstimate

MS = 1_000_000  # ns per ms


def test_servers_for():
    assert estimate.servers_for(8, 4, 100, 0) == 4             # CPU-bound: min(threads, cores)
    assert estimate.servers_for(8, 4, 0, 1000) == 8            # sleep-bound: threads
    assert estimate.servers_for(8, 4, 0, 0) == 4               # no work parameters: CPU-bound
    # mixed: CPU ceiling cores/spin = 4/100us vs thread ceiling 8/(100+100)us -> c = min(8, 8)
    assert estimate.servers_for(8, 4, 100, 100) == pytest.approx(8)
    assert estimate.servers_for(16, 4, 100, 100) == pytest.approx(8)   # 4 * 200/100
    assert estimate.servers_for(None, 4, 100, 0) == 4
    assert estimate.servers_for(float("nan"), float("nan"), 0, 10) == math.inf


def test_capacity_for():
    assert estimate.capacity_for(4, 128) == 132
    assert estimate.capacity_for(4, None) == math.inf
    assert estimate.capacity_for(4, float("nan")) == math.inf


def test_predict_cell_model_choice():
    svc = ServiceEstimate(mean_s=0.002, scv=1.0, source="server_timing")
    base = dict(load_mode="open", server_threads=4, server_cores=4, work_spin_us=2000,
                work_sleep_us=0, server_backlog=float("nan"))
    p = estimate.predict_cell({**base, "target_rate": 1000.0}, svc)           # rho = 0.5
    assert p["key"] == "mmc" and p["servers"] == 4 and math.isfinite(p["p99_ms"])
    assert set(p["candidates"]) == {"mmc", "mgc"}
    p = estimate.predict_cell({**base, "target_rate": 1000.0}, ServiceEstimate(0.002, 0.1, "x"))
    assert p["key"] == "mgc" and math.isnan(p["p99_ms"])
    p = estimate.predict_cell({**base, "target_rate": 1000.0, "server_backlog": 2}, svc)
    assert p["key"] == "mmck" and p["capacity"] == 6                         # blocking matters
    p = estimate.predict_cell({**base, "target_rate": 1000.0, "server_backlog": 1000}, svc)
    assert p["key"] == "mmc" and "mmck" in p["candidates"]                   # blocking negligible
    p = estimate.predict_cell({**base, "target_rate": 3000.0}, svc)
    assert p["key"] == "unstable" and p["mean_ms"] == math.inf
    p = estimate.predict_cell({**base, "target_rate": 3000.0, "server_backlog": 10}, svc)
    assert p["key"] == "mmck" and p["throughput_rps"] < 2000.0


def test_predict_cell_closed_uses_exact_multiserver_mva():
    svc = ServiceEstimate(mean_s=0.004, scv=1.0, source="server_timing", overhead_s=0.0005)
    row = dict(load_mode="closed", connections=16, think_time_s=0.01, server_threads=4,
               server_cores=8, work_spin_us=4000, work_sleep_us=0, server_backlog=128)
    p = estimate.predict_cell(row, svc)
    ref = closed.mva([0.004, 0.0005], 16, 0.01, delay_stations=[1], servers=[4, 1])
    assert p["key"] == "mva" and p["mean_ms"] == pytest.approx(ref.response_time[-1] * 1e3)
    assert p["throughput_rps"] <= 4 / 0.004 + 1e-9
    assert p["candidates"]["bounds"]["mean_ms"] <= p["mean_ms"]
    one = estimate.predict_cell({**row, "connections": 1}, svc)
    assert one["mean_ms"] == pytest.approx(4.5)


def test_estimate_service_from_server_timing_and_single_user_fallback():
    rng = np.random.default_rng(5)
    s = rng.exponential(0.003, 5000)
    t0 = np.concatenate([[1.0], 1.0 + np.cumsum(s + 0.0012)[:-1]])  # next send 1 ms after done
    sent = (t0 * 1e9).astype(np.int64)
    done = sent + ((s + 0.0002) * 1e9).astype(np.int64)
    df = pd.DataFrame({"cell_id": "c1", "trial": 0, "intended_ns": sent, "sent_ns": sent,
                       "done_ns": done, "latency_ns": done - sent, "service_ns": done - sent,
                       "status": 200, "error": 0, "svc_ms": s * 1e3, "queue_ms": 0.0})
    e = estimate.estimate_service(df)
    assert e.source == "server_timing" and e.mean_s == pytest.approx(s.mean())
    assert e.scv == pytest.approx(1.0, abs=0.1) and e.overhead_s == pytest.approx(0.0002, abs=2e-6)
    no_svc = df.assign(svc_ms=np.nan, queue_ms=np.nan)
    f = estimate.estimate_service(no_svc)               # requests never overlap: single user
    assert f.source == "single_user_latency" and f.mean_s == pytest.approx(s.mean() + 0.0002, rel=1e-3)
    overlapping = no_svc.assign(sent_ns=no_svc["sent_ns"] // 10)
    with pytest.raises(ValueError, match="single-user"):
        estimate.estimate_service(overlapping)


def _requests_from_sim(sim, cell, scale_s, overhead_s=0.0002, n=None):
    resp, wait = sim["response"][:n], sim["wait"][:n]
    lat = ((resp + overhead_s / scale_s) * scale_s * 1e9).astype(np.int64)
    intended = np.arange(len(resp), dtype=np.int64) * 10 * MS
    return pd.DataFrame({"cell_id": cell, "trial": 0, "intended_ns": intended, "sent_ns": intended,
                         "done_ns": intended + lat, "latency_ns": lat, "service_ns": lat,
                         "status": 200, "error": 0, "svc_ms": (resp - wait) * scale_s * 1e3,
                         "queue_ms": wait * scale_s * 1e3})


def test_compare_on_simulated_run(simulate):
    S = 0.004  # the simulations use mean service 1; one time unit = 4 ms here
    sims = {  # cell: (simulation, threads, cores, spin_us, backlog, target_rate)
        "mmc": (simulate(1.8, ("Exponential", 1.0), servers=3), 3, 8, 4000, 1024, 1.8 / S),
        "mmck": (simulate(1.6, ("Exponential", 1.0), servers=2, queue_capacity=4), 2, 8, 4000, 4, 1.6 / S),
        "md1": (simulate(0.6, ("Deterministic", 1.0)), 1, 8, 4000, 1024, 0.6 / S),
    }
    trials, reqs = [], []
    for cell, (sim, threads, cores, spin, backlog, rate) in sims.items():
        reqs.append(_requests_from_sim(sim, cell, S))
        trials.append(dict(cell_id=cell, trial=0, server="c", load_mode="open", target_rate=rate,
                           achieved_rate=rate, throughput_rps=rate * (1 - sim["p_block"]),
                           latency_mean_ms=np.nan, latency_p99_ms=np.nan, valid=True,
                           connections=64, think_time_s=np.nan, server_threads=threads,
                           server_backlog=backlog, server_cores=cores, work_spin_us=spin,
                           work_sleep_us=0))
    # closed cells that differ only in concurrency, throughput on a USL curve, no requests kept
    for n in (1, 2, 4, 8, 16, 32):
        x = usl.predict(n, 0.05, 0.001, 240.0)
        trials.append(dict(cell_id=f"closed{n}", trial=0, server="c", load_mode="closed",
                           target_rate=np.nan, achieved_rate=x, throughput_rps=x,
                           latency_mean_ms=n / x * 1e3, latency_p99_ms=np.nan, valid=True,
                           connections=n, think_time_s=0.0, server_threads=4, server_backlog=128,
                           server_cores=4, work_spin_us=4000, work_sleep_us=0))
    table = estimate.compare(pd.DataFrame(trials), pd.concat(reqs, ignore_index=True))
    t = table.set_index("cell_id")
    assert t.loc["mmc", "model"] == "M/M/3" and abs(t.loc["mmc", "err_mean"]) < 0.03
    assert abs(t.loc["mmc", "err_p99"]) < 0.04
    assert t.loc["mmck", "model"] == "M/M/2/6" and abs(t.loc["mmck", "err_mean"]) < 0.03
    assert t.loc["md1", "model"] == "M/G/1" and abs(t.loc["md1", "err_mean"]) < 0.03
    assert abs(t.loc["md1", "err_mmc_mean"]) > 0.2   # M/M/1 would be far off for constant service
    assert t.loc["closed8", "model"] == "no service estimate"  # no svc_ms, no requests at all
    assert t.loc["closed8", "usl_sigma"] == pytest.approx(0.05, rel=1e-4)
    assert t.loc["closed8", "err_usl_mean"] == pytest.approx(0.0, abs=1e-4)

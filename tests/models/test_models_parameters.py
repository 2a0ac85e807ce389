"""models.parameters: parameter helpers, model choice, and compare() on a synthetic run whose
requests come from the Ciw simulations (shared, cached with test_models_queues_sim.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from models import closed, comparison, parameters, predict, queues, usl
from models.parameters import ServiceEstimate

MS = 1_000_000  # ns per ms


def test_predict_cell_model_choice():
    svc = ServiceEstimate(mean_s=0.002, scv=1.0, source="server_timing")
    base = dict(
        load_mode="open",
        server_threads=4,
        server_cores=4,
        work_spin_us=2000,
        work_sleep_us=0,
        server_backlog=float("nan"),
    )
    p = predict.predict_cell({**base, "target_rate": 1000.0}, svc)  # rho = 0.5
    assert p["key"] == "mmc" and p["servers"] == 4 and math.isfinite(p["p99_ms"])
    assert set(p["candidates"]) == {"mmc", "mgc"}
    p = predict.predict_cell({**base, "target_rate": 1000.0}, ServiceEstimate(0.002, 0.1, "x"))
    assert p["key"] == "mgc" and math.isnan(p["p99_ms"])
    p = predict.predict_cell({**base, "target_rate": 1000.0, "server_backlog": 2}, svc)
    assert p["key"] == "mmck" and p["capacity"] == 6  # blocking matters
    p = predict.predict_cell({**base, "target_rate": 1000.0, "server_backlog": 1000}, svc)
    assert p["key"] == "mmc" and "mmck" in p["candidates"]  # blocking negligible
    p = predict.predict_cell({**base, "target_rate": 3000.0}, svc)
    assert p["key"] == "unstable" and p["mean_ms"] == math.inf
    p = predict.predict_cell({**base, "target_rate": 3000.0, "server_backlog": 10}, svc)
    assert p["key"] == "mmck" and p["throughput_rps"] < 2000.0


def test_predict_cell_closed_uses_exact_multiserver_mva():
    svc = ServiceEstimate(mean_s=0.004, scv=1.0, source="server_timing", overhead_s=0.0005)
    row = dict(
        load_mode="closed",
        connections=16,
        think_time_s=0.01,
        server_threads=4,
        server_cores=8,
        work_spin_us=4000,
        work_sleep_us=0,
        server_backlog=128,
    )
    p = predict.predict_cell(row, svc)
    ref = closed.mva([0.004, 0.0005], 16, 0.01, delay_stations=[1], servers=[4, 1])
    assert p["key"] == "mva" and p["mean_ms"] == pytest.approx(ref.response_time[-1] * 1e3)
    assert p["throughput_rps"] <= 4 / 0.004 + 1e-9
    assert p["candidates"]["bounds"]["mean_ms"] <= p["mean_ms"]
    one = predict.predict_cell({**row, "connections": 1}, svc)
    assert one["mean_ms"] == pytest.approx(4.5)


def test_estimate_service_from_server_timing_and_single_user_fallback():
    rng = np.random.default_rng(5)
    s = rng.exponential(0.003, 5000)
    t0 = np.concatenate([[1.0], 1.0 + np.cumsum(s + 0.0012)[:-1]])  # next send 1 ms after done
    sent = (t0 * 1e9).astype(np.int64)
    done = sent + ((s + 0.0002) * 1e9).astype(np.int64)
    df = pd.DataFrame(
        {
            "cell_id": "c1",
            "trial": 0,
            "intended_ns": sent,
            "sent_ns": sent,
            "done_ns": done,
            "latency_ns": done - sent,
            "service_ns": done - sent,
            "status": 200,
            "error": 0,
            "svc_ms": s * 1e3,
            "queue_ms": 0.0,
        }
    )
    e = parameters.estimate_service(df)
    assert e.source == "server_timing" and e.mean_s == pytest.approx(s.mean())
    assert e.scv == pytest.approx(1.0, abs=0.1) and e.overhead_s == pytest.approx(0.0002, abs=2e-6)
    no_svc = df.assign(svc_ms=np.nan, queue_ms=np.nan)
    f = parameters.estimate_service(no_svc)  # requests never overlap: single user
    assert f.source == "single_user_latency" and f.mean_s == pytest.approx(
        s.mean() + 0.0002, rel=1e-3
    )
    overlapping = no_svc.assign(sent_ns=no_svc["sent_ns"] // 10)
    with pytest.raises(ValueError, match="single-user"):
        parameters.estimate_service(overlapping)


def _requests_from_sim(sim, cell, scale_s, overhead_s=0.0002, n=None):
    resp, wait = sim["response"][:n], sim["wait"][:n]
    lat = ((resp + overhead_s / scale_s) * scale_s * 1e9).astype(np.int64)
    intended = np.arange(len(resp), dtype=np.int64) * 10 * MS
    return pd.DataFrame(
        {
            "cell_id": cell,
            "trial": 0,
            "intended_ns": intended,
            "sent_ns": intended,
            "done_ns": intended + lat,
            "latency_ns": lat,
            "service_ns": lat,
            "status": 200,
            "error": 0,
            "svc_ms": (resp - wait) * scale_s * 1e3,
            "queue_ms": wait * scale_s * 1e3,
        }
    )


def test_compare_on_simulated_run(simulate):
    S = 0.004  # the simulations use mean service 1; one time unit = 4 ms here
    sims = {  # cell: (simulation, threads, cores, spin_us, backlog, target_rate)
        "mmc": (simulate(1.8, ("Exponential", 1.0), servers=3), 3, 8, 4000, 1024, 1.8 / S),
        "mmck": (
            simulate(1.6, ("Exponential", 1.0), servers=2, queue_capacity=4),
            2,
            8,
            4000,
            4,
            1.6 / S,
        ),
        "md1": (simulate(0.6, ("Deterministic", 1.0)), 1, 8, 4000, 1024, 0.6 / S),
    }
    trials, reqs = [], []
    for cell, (sim, threads, cores, spin, backlog, rate) in sims.items():
        reqs.append(_requests_from_sim(sim, cell, S))
        trials.append(
            dict(
                cell_id=cell,
                trial=0,
                server="c",
                load_mode="open",
                target_rate=rate,
                achieved_rate=rate,
                throughput_rps=rate * (1 - sim["p_block"]),
                latency_mean_ms=np.nan,
                latency_p99_ms=np.nan,
                valid=True,
                connections=64,
                think_time_s=np.nan,
                server_threads=threads,
                server_backlog=backlog,
                server_cores=cores,
                work_spin_us=spin,
                work_sleep_us=0,
            )
        )
    # closed cells that differ only in concurrency, throughput on a USL curve, no requests kept
    for n in (1, 2, 4, 8, 16, 32):
        x = usl.predict(n, 0.05, 0.001, 240.0)
        trials.append(
            dict(
                cell_id=f"closed{n}",
                trial=0,
                server="c",
                load_mode="closed",
                target_rate=np.nan,
                achieved_rate=x,
                throughput_rps=x,
                latency_mean_ms=n / x * 1e3,
                latency_p99_ms=np.nan,
                valid=True,
                connections=n,
                think_time_s=0.0,
                server_threads=4,
                server_backlog=128,
                server_cores=4,
                work_spin_us=4000,
                work_sleep_us=0,
            )
        )
    table = comparison.compare(pd.DataFrame(trials), pd.concat(reqs, ignore_index=True))
    t = table.set_index("cell_id")
    assert t.loc["mmc", "model"] == "M/M/3" and abs(t.loc["mmc", "err_mean"]) < 0.03
    assert abs(t.loc["mmc", "err_p99"]) < 0.04
    assert t.loc["mmck", "model"] == "M/M/2/6" and abs(t.loc["mmck", "err_mean"]) < 0.03
    assert t.loc["md1", "model"] == "M/G/1" and abs(t.loc["md1", "err_mean"]) < 0.03
    assert abs(t.loc["md1", "err_mmc_mean"]) > 0.2  # M/M/1 would be far off for constant service
    assert t.loc["closed8", "model"] == "no service estimate"  # no svc_ms, no requests at all
    assert t.loc["closed8", "usl_sigma"] == pytest.approx(0.05, rel=1e-4)
    assert t.loc["closed8", "err_usl_mean"] == pytest.approx(0.0, abs=1e-4)


def test_a_skewed_overhead_adds_its_mean_to_means_and_its_median_to_percentiles():
    """Means add: E[queue + service + overhead] needs the overhead's mean, which a few slow
    connects pull well above its median; percentiles get the median (a near-constant delay)."""
    rng = np.random.default_rng(9)
    n = 20000
    s = rng.exponential(0.001, n)
    extra = np.where(rng.random(n) < 0.05, 0.004, 0.0002)  # 5 % slow connects
    intended = (np.arange(n) * 0.01 * 1e9).astype(np.int64)
    done = intended + ((s + extra) * 1e9).astype(np.int64)
    df = pd.DataFrame(
        {
            "cell_id": "c1",
            "trial": 0,
            "intended_ns": intended,
            "sent_ns": intended,
            "done_ns": done,
            "status": 200,
            "error": 0,
            "svc_ms": s * 1e3,
            "queue_ms": 0.0,
        }
    )
    e = parameters.estimate_service(df)
    assert e.overhead_s == pytest.approx(0.0002, abs=2e-6)
    assert e.overhead_mean_s == pytest.approx(extra.mean(), rel=0.01)
    row = dict(
        load_mode="open",
        target_rate=400.0,
        server_threads=1,
        server_cores=1,
        work_spin_us=1000,
        work_sleep_us=0,
    )
    p = predict.predict_cell(row, e)
    r = queues.mm1(400.0, 1 / e.mean_s)
    assert p["key"] == "mmc"
    assert p["mean_ms"] == pytest.approx((r.mean_response + e.overhead_mean_s) * 1e3)
    assert p["p99_ms"] == pytest.approx((r.response_percentile(0.99) + e.overhead_s) * 1e3)


def _one_worker_queue(n, rate, svc_s, gap_s, seed=3):
    """Requests through a one-worker FCFS queue whose worker spends svc + gap per request
    but reports only svc (Server-Timing), seen by a client 0.3 ms away."""
    rng = np.random.default_rng(seed)
    arrive = np.cumsum(rng.exponential(1 / rate, n))
    svc = rng.exponential(svc_s, n)
    start = np.empty(n)
    free = 0.0
    for i in range(n):
        start[i] = max(arrive[i], free)
        free = start[i] + svc[i] + gap_s
    done = start + svc + 0.0003 + rng.uniform(0, 2e-5, n)  # network delay with jitter
    return pd.DataFrame(
        {
            "cell_id": "c",
            "trial": 0,
            "intended_ns": (arrive * 1e9).astype(np.int64),
            "sent_ns": (arrive * 1e9).astype(np.int64),
            "done_ns": (done * 1e9).astype(np.int64),
            "status": 200,
            "error": 0,
            "svc_ms": svc * 1e3,
            "queue_ms": (start - arrive) * 1e3,
        }
    )


def test_worker_gap_is_recovered_from_the_completions_of_requests_that_queued():
    df = _one_worker_queue(20000, 700.0, 0.001, 4e-5)
    assert parameters.worker_gap(df) == pytest.approx(4e-5, abs=5e-6)
    assert parameters.worker_gap(_one_worker_queue(20000, 700.0, 0.001, 0.0)) < 5e-6
    e = parameters.estimate_service(df, single_worker=True)
    assert e.gap_s == pytest.approx(4e-5, abs=5e-6)
    assert e.mean_s == pytest.approx(df["svc_ms"].mean() / 1e3 + e.gap_s)
    assert parameters.estimate_service(df).gap_s == 0.0  # only when asked
    light = _one_worker_queue(300, 20.0, 0.001, 4e-5)  # hardly anyone waits
    assert parameters.worker_gap(light) == 0.0
    two = pd.concat([df, _one_worker_queue(20000, 700.0, 0.001, 4e-5, seed=4)])
    assert parameters.worker_gap(two) == 0.0  # two workers' completions interleave
    # with the gap in S, M/M/1 predicts the queue the worker really built
    r = queues.mm1(700.0, 1 / e.mean_s)
    measured = (df["done_ns"] - df["intended_ns"]).mean() / 1e9
    assert r.mean_response + e.overhead_for_mean_s == pytest.approx(measured, rel=0.1)


# --- database time (db_ms): the split of S and the database station -------------------------------
def _closed_tandem_sim(n, rest, d, c_app, c_db, completions, seed):
    """Throughput and mean response of n closed-loop users (no think time) through a server
    station (c_app servers, Exp(rest)) then a database station (c_db servers, Exp(d)): a small
    event simulation, the ground truth for the tandem model."""
    import heapq

    rng = np.random.default_rng(seed)
    events, t = [], 0.0
    free, waiting, started = [c_app, c_db], [[], []], {}
    demand = (rest, d)

    def arrive(u, k, now):
        if free[k]:
            free[k] -= 1
            heapq.heappush(events, (now + rng.exponential(demand[k]), u, k))
        else:
            waiting[k].append(u)

    for u in range(n):
        started[u] = 0.0
        arrive(u, 0, 0.0)
    done, resp, t_first = 0, [], None
    while done < completions:
        t, u, k = heapq.heappop(events)
        if waiting[k]:
            heapq.heappush(events, (t + rng.exponential(demand[k]), waiting[k].pop(0), k))
        else:
            free[k] += 1
        if k == 0:
            arrive(u, 1, t)
        else:
            done += 1
            if done > completions // 10:  # skip the start-up
                t_first = t if t_first is None else t_first
                resp.append(t - started[u])
            started[u] = t
            arrive(u, 0, t)
    return (len(resp) - 1) / (t - t_first), float(np.mean(resp))


def test_estimate_service_splits_the_database_time():
    rng = np.random.default_rng(11)
    n = 4000
    app, db = rng.exponential(0.001, n), rng.exponential(0.003, n)
    on_db = np.arange(n) % 2 == 0  # a mixed workload: half the requests /db
    svc = app + np.where(on_db, db, 0.0)
    df = pd.DataFrame(
        {
            "status": 200,
            "error": 0,
            "svc_ms": svc * 1e3,
            "queue_ms": 0.0,
            "db_ms": np.where(on_db, db * 1e3, np.nan),
        }
    )
    e = parameters.estimate_service(df)
    assert e.has_db and e.db_mean_s == pytest.approx(np.where(on_db, db, 0.0).mean())
    assert e.db_share == pytest.approx(e.db_mean_s / svc.mean())
    no_db = parameters.estimate_service(df.drop(columns="db_ms"))
    assert not no_db.has_db and math.isnan(no_db.db_share)


def test_a_database_bottleneck_is_predicted_at_the_database_station():
    """16 users, a thread each on 8 cores (c = 8), S = 4 ms of which D = 3 ms in a database reached over
    2 connections: the database caps throughput at 2 / 3 ms = 667/s, the server alone would
    allow 2000/s. The tandem model (mva_db) matches a simulation of that network; the
    one-station model that ignores db_ms is far off."""
    rest, d = 0.001, 0.003
    svc = ServiceEstimate(mean_s=rest + d, scv=1.0, source="server_timing", db_mean_s=d)
    row = dict(
        load_mode="closed",
        connections=16,
        think_time_s=0.0,
        server_model="thread",
        server_threads=4,
        server_cores=8,
        work_spin_us=0,
        work_sleep_us=0,
        server_backlog=128,
        db_connections=2,
    )
    p = predict.predict_cell(row, svc)
    assert p["key"] == "mva_db" and p["db_servers"] == 2 and p["servers"] == 8
    ref = closed.mva([rest, d, 0.0], 16, 0.0, delay_stations=[2], servers=[8, 2, 1])
    assert p["mean_ms"] == pytest.approx(ref.response_time[-1] * 1e3)
    x_sim, r_sim = _closed_tandem_sim(16, rest, d, 8, 2, 40_000, seed=3)
    assert p["throughput_rps"] == pytest.approx(x_sim, rel=0.05)
    assert p["throughput_rps"] <= 2 / d + 1e-9
    assert p["mean_ms"] == pytest.approx(r_sim * 1e3, rel=0.05)
    one_station = p["candidates"]["mva"]
    assert one_station["throughput_rps"] > 2 * x_sim  # ignoring the database: way off
    # a database with a connection per thread is not the bottleneck: the model is unchanged
    q = predict.predict_cell({**row, "db_connections": 16}, svc)
    assert q["key"] == "mva" and "mva_db" not in q["candidates"]
    # cores cap the database station too (PostgreSQL runs a process per connection)
    assert (
        predict.predict_cell({**row, "db_connections": 16, "db_cores": 2}, svc)["key"] == "mva_db"
    )
    assert parameters.db_servers_for({"server_threads": 4}) == 4  # the default pool


def test_open_load_on_a_database_bottleneck_is_a_tandem():
    rest, d = 0.001, 0.003
    svc = ServiceEstimate(mean_s=rest + d, scv=1.0, source="server_timing", db_mean_s=d)
    row = dict(
        load_mode="open",
        target_rate=500.0,
        server_threads=8,
        server_cores=8,
        work_spin_us=0,
        work_sleep_us=0,
        db_connections=2,
    )
    p = predict.predict_cell(row, svc)
    assert p["key"] == "tandem_db"
    want = queues.mmc(500.0, 1 / d, 2).mean_response + queues.mmc(500.0, 1 / rest, 8).mean_response
    assert p["mean_ms"] == pytest.approx(want * 1e3)
    assert p["utilization"] == pytest.approx(500.0 * d / 2)
    assert predict.predict_cell({**row, "target_rate": 700.0}, svc)["mean_ms"] == math.inf

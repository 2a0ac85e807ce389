"""Study client_scaling (seed 003): the quick profile end to end, its table, then its notebook.

Robust orderings only (the host is shared and noisy): with the 200 ms server-side sleep the
thread-per-connection server scales roughly linearly with the clients (X ~ N / (R0 + 0.2 s)),
the one-connection-at-a-time server does not."""

from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
STUDY = "client_scaling"


@pytest.fixture(scope="module")
def quick_run(study_run) -> Path:
    return study_run("client_scaling")


def test_quick_table(quick_run):
    everything = pd.read_csv(quick_run / "trials.csv")
    # java-servlet: /work and /db at 1 and 10 clients, rmi-pool: /db at 1 and 10 clients
    # (file vs PostgreSQL, below)
    assert len(everything) == 22
    t = everything[(everything["server"] != "java-servlet") & (everything["backend"] == "/work")]
    # per protocol: the scaling server 4 client counts under the 200 ms delay and 1 and 10
    # without; the single one the 200 ms delay only, at 1 and 10 clients
    assert len(t) == 16
    assert sorted(t["clients"].unique()) == [1, 2, 4, 10]
    assert set(t.loc[t["clients"].isin([2, 4]), "sleep_us"]) == {200000}
    for single in ("java-single", "rmi-single"):
        assert set(t.loc[t["server"] == single, "sleep_us"]) == {200000}
        assert sorted(t.loc[t["server"] == single, "clients"]) == [1, 10]
    assert set(t.loc[t["protocol"] == "rmi", "load_driver"]) == {"rmi"}
    assert set(t.loc[t["protocol"] == "http", "load_driver"]) == {"http"}
    assert (t["errors"] == 0).all(), t[["server", "sleep_us", "clients", "errors"]]
    assert (t["throughput_rps"] > 0).all() and (t["throughput_kib_s"] > 0).all()
    # KiB/s follows req/s: every response carries the 18000-byte body (+ headers)
    per_req = t["throughput_kib_s"] * 1024 / t["throughput_rps"]
    assert per_req.between(18000, 18600).all(), per_req
    d = t[t["sleep_us"] == 200000].set_index(["server", "clients"])["throughput_rps"]
    lat = t[t["sleep_us"] == 200000].set_index(["server", "clients"])["latency_mean_ms"]
    for scaling, one_at_a_time in (("java-thread", "java-single"), ("rmi-pool", "rmi-single")):
        thr = d[scaling]
        # one client in a 200 ms sleep loop: a bit under 5 req/s
        assert 3.0 < thr[1] <= 5.5, scaling
        # roughly linear: 10 clients give well over 5x, and each step up adds throughput
        assert thr[10] > 6 * thr[1], scaling
        assert thr[1] < thr[2] < thr[4] < thr[10], scaling
        # the single server cannot overlap the sleeps: 10 clients stay near one client's rate
        single = d[one_at_a_time]
        assert single[10] < 2 * single[1], one_at_a_time
        assert thr[10] > 4 * single[10], scaling
        # under delay the response time stays near 200 ms when scaling, grows ~N x for single
        assert lat[scaling][10] < 2 * lat[scaling][1], scaling
        assert lat[one_at_a_time][10] > 4 * lat[one_at_a_time][1], one_at_a_time
    # RMI carried the server's own service time back: ~200 ms of sleep per call
    row = t[(t["server"] == "rmi-pool") & (t["sleep_us"] == 200000) & (t["clients"] == 4)].iloc[0]
    req = pd.read_parquet(quick_run / "cells" / row["cell_id"] / "trial-1" / "requests.parquet")
    assert 199.0 < req.loc[req["error"] == 0, "svc_ms"].median() < 230.0


def _svc(run: Path, r) -> pd.DataFrame:
    return pd.read_parquet(run / "cells" / r.cell_id / f"trial-{r.trial}" / "requests.parquet")


def test_file_vs_postgresql(quick_run):
    """Over HTTP (the servlet server) and over RMI (seed 003's RMI server backed by
    PostgreSQL): the same server from memory vs a 100-row range query per request."""
    t = pd.read_csv(quick_run / "trials.csv")
    sv = t[t["server"] == "java-servlet"]
    assert sorted(map(tuple, sv[["backend", "clients"]].values.tolist())) == [
        ("/db", 1),
        ("/db", 10),
        ("/work", 1),
        ("/work", 10),
    ]
    rmi_db = t[(t["server"] == "rmi-pool") & (t["backend"] == "/db")]
    assert sorted(rmi_db["clients"]) == [1, 10] and set(rmi_db["sleep_us"]) == {0}
    assert set(rmi_db["load_driver"]) == {"rmi"}
    both_paths = pd.concat([sv, rmi_db])
    # the servers and PostgreSQL worked (a busy host may still fault the load generator's checks)
    why = both_paths["invalid_reasons"].fillna("")
    assert not why.str.contains("server|service|requests failed|error rate").any(), why.tolist()
    assert (both_paths["errors"] == 0).all()
    db = both_paths[both_paths["backend"] == "/db"]
    # PostgreSQL did the work (its CPU sampled in every /db trial; one 2 s trial at 1 client
    # may round to 0 on the sampler's clock ticks, so > 0 per server)
    assert db["service_db_cpu_pct"].notna().all()
    assert (db.groupby("server")["service_db_cpu_pct"].max() > 0).all()
    # every /db request ran a 100-row range query: its db time (HTTP: Server-Timing db;dur=,
    # RMI: the reply's dbNs) is part of its service time
    for r in db.itertuples():
        req = _svc(quick_run, r)
        both = req.dropna(subset=["db_ms", "svc_ms"])
        assert len(both) > 0.9 * len(req) and (both["db_ms"] > 0).all(), r.server
        assert (both["db_ms"] <= both["svc_ms"] + 0.002).all(), r.server
    # over RMI the database path costs the server more than the body from memory (its own
    # service time, robust on a busy host; the seed saw the whole call ~10x slower)
    rmi_work = t[(t["server"] == "rmi-pool") & (t["backend"] == "/work") & (t["sleep_us"] == 0)]
    for n in (1, 10):
        w = _svc(quick_run, next(rmi_work[rmi_work["clients"] == n].itertuples()))
        d = _svc(quick_run, next(rmi_db[rmi_db["clients"] == n].itertuples()))
        assert d["svc_ms"].median() > w["svc_ms"].median(), n


def test_the_rmi_server_on_postgresql_gets_the_seeds_three_methods(quick_run):
    """Seed 003's RMI load test called getParticipants, addParticipant and deleteParticipant
    and timed each: the RMI driver draws them a third each and names each call, so each RMI
    /db trial's per-endpoint table has a row per method; every other cell sends
    getParticipants alone."""
    from orchestrator import results

    run = results.load(quick_run)
    t = run.trials
    ep = run.endpoints  # with the cell's axes
    rmi_db = (ep["server"] == "rmi-pool") & (ep["backend"] == "/db")
    methods = {"getParticipants", "addParticipant", "deleteParticipant"}
    assert set(ep.loc[rmi_db, "endpoint"]) == methods
    assert set(ep.loc[~rmi_db, "endpoint"]) == {"getParticipants"}
    assert ep.groupby(["cell_id", "trial"]).size().max() == 3
    for (cid, k), g in ep[rmi_db].groupby(["cell_id", "trial"]):
        n = int(g["requests"].sum())
        row = t[(t["cell_id"] == cid) & (t["trial"] == k)].iloc[0]
        assert n == row["requests"] > 30 and (g["errors"] == 0).all(), g
        # a third each: within 4.5 binomial sigmas
        assert (abs(g["share"] - 1 / 3) < 4.5 * (2 / 9 / n) ** 0.5).all(), g[["endpoint", "share"]]
        req = _svc(quick_run, row)
        assert set(req["request"]) == {0, 1, 2}
        # each reached PostgreSQL (its db time) and answered 200: range, insert, delete
        answered = req[req["error"] == 0]
        assert (answered["status"] == 200).all() and (answered["db_ms"] > 0).all()


def test_notebook_runs(quick_run, execute_notebook):
    text = execute_notebook("client_scaling", quick_run)
    assert str(quick_run.resolve()) in text
    assert "of the linear expectation" in text
    assert "the file path serves x" in text

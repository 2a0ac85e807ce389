"""Study client_scaling (seed 003): the quick profile end to end, its table, then its notebook.

Robust orderings only (the host is shared and noisy): with the 200 ms server-side sleep the
thread-per-connection server scales roughly linearly with the clients (X ~ N / (R0 + 0.2 s)),
the one-connection-at-a-time server does not."""
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
STUDY = "client_scaling"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick_run(run_quick_profile) -> Path:
    return run_quick_profile("client_scaling")


def test_quick_table(quick_run):
    t = pd.read_csv(quick_run / "trials.csv")
    # per protocol: the scaling server 2 delays x 4 client counts; the single one the
    # 200 ms delay only
    assert len(t) == 24
    assert sorted(t["clients"].unique()) == [1, 2, 4, 10]
    for single in ("java-single", "rmi-single"):
        assert set(t.loc[t["server"] == single, "sleep_us"]) == {200000}
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


def test_notebook_runs(quick_run, execute_notebook):
    text = execute_notebook("client_scaling", quick_run)
    assert str(quick_run.resolve()) in text
    assert "of the linear expectation" in text

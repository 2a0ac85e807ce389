"""Study 000 (bulk register simulator): the quick profile end to end, its success-ratio table,
then notebooks/registry_burst.ipynb top to bottom on that run.

Slow (about 1.5-2 minutes): Java servers, bursts of up to 3000 connections.
"""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "experiments" / "registry_burst.yaml"


@pytest.fixture(scope="module")
def quick_run(study_run, require_java) -> Path:
    return study_run("registry_burst")


def test_success_table(quick_run):
    from orchestrator import experiment, results

    plan = experiment.load_plan(EXPERIMENT, "quick")
    run = results.load(quick_run)
    assert run.info["experiment"] == "registry_burst"
    assert run.info["profile"] == "quick"
    t = run.trials
    # one trial per (server, backlog, n) of the quick matrix
    assert len(t) == plan.trial_count
    want = {(c.values["server"], c.values["backlog"], c.values["n"]) for c in plan.cells}
    got = set(zip(t["server"], t["backlog"].astype(int), t["n"].astype(int)))
    assert got == want
    assert set(t["concurrency_model"]) == {"single", "pool", "rmi-single", "rmi"}
    assert (t["load_driver"] == t["protocol"]).all()  # the RMI cells were driven over RMI
    assert (t["load_mode"] == "burst").all()
    bursts = plan.cells[0].load.bursts
    # every released client is accounted for: a success or one error class
    assert (t["requests"] == t["n"] * bursts).all()
    assert t["success_ratio"].between(0, 1).all()
    ok = (t["success_ratio"] * t["requests"]).round().astype(int)
    err_cols = [
        "errors_refused",
        "errors_reset",
        "errors_timeout",
        "errors_parse",
        "errors_dropped",
        "errors_unfinished",
        "errors_http",
    ]
    assert (ok + t[err_cols].sum(axis=1) == t["requests"]).all()
    # 10 simultaneous registrations never overflow a backlog of 50
    assert (t.loc[t["n"] == t["n"].min(), "success_ratio"] == 1.0).all()
    # the seed's registrations: a random UUID for the name and another for the password,
    # rendered per request by either driver (perfctl's for HTTP, the Java RMI driver's)
    for row in t.itertuples():
        spec = json.loads(
            (quick_run / "cells" / row.cell_id / f"trial-{row.trial}" / "spec.json").read_text()
        )
        assert [r["body"] for r in spec["requests"]] == ["user={uuid}&pass={uuid}"], spec
    # every user registered was new: no 409 (exists), so each {uuid} really was drawn anew
    # (an RMI driver sending the literal text would register one user, then answer 409s)
    req = run.requests
    assert not (req["status"] == 409).any()
    assert (req.loc[(req["error"] == 0) & (req["status"] < 400), "status"] == 201).all()
    # the per-endpoint table: one endpoint, /register, holding every request of its trial
    ep = run.endpoints
    assert set(ep["endpoint"]) == {"/register"}
    got = ep.set_index(["cell_id", "trial"])["requests"]
    assert (got == t.set_index(["cell_id", "trial"]).loc[got.index, "requests"]).all()
    # the backlog effect, summed over the two largest N (robust to noise): a 4096 backlog
    # loses no more clients than a 50 one, per server model
    # (HTTP servers: over RMI a deep backlog can lose *more*: the one-connection-at-a-time
    # server then spends its time on connections whose clients already gave up)
    big = t[(t["n"] >= sorted(t["n"].unique())[-2]) & (t["protocol"] == "http")]
    for server, g in big.groupby("server"):
        r = g.groupby("backlog").apply(
            lambda d: (d["success_ratio"] * d["requests"]).sum() / d["requests"].sum()
        )
        assert r[4096] >= r[50] - 0.02, (server, r.to_dict())
    settings = run.info["host"]["settings"]
    for key in (
        "net.core.somaxconn",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_tw_reuse",
        "RLIMIT_NOFILE",
    ):
        assert key in settings


def test_notebook_runs(quick_run, execute_notebook):
    text = execute_notebook("registry_burst", quick_run)
    assert "experiment registry_burst" in text
    own = quick_run / "notebooks" / "registry_burst"
    assert (own / "registry_burst_success.png").is_file()
    assert (own / "registry_burst_overflows.png").is_file()
    assert not list((quick_run / "plots").glob("registry_burst_*")), "over the run's plots/"


def test_listen_overflows_are_recorded_where_the_backlog_is_small(quick_run):
    """Seed 000 had to guess SYN drops from retry timing: the kernel's counters now say it.
    The single-threaded server with backlog 50 cannot queue a burst of 3000 handshakes."""
    from orchestrator import results

    t = results.load(quick_run).trials
    big = t[(t["server"] == "single") & (t["backlog"] == 50) & (t["n"] == t["n"].max())]
    assert (big["tcp_listen_overflows"] > 0).all(), big.filter(like="tcp_").to_dict("records")
    assert (big["tcp_accept_queue_max"] >= 1).all()

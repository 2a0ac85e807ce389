"""Study 001 (Little's law from one client): the quick profile end to end, the study's table
(throughput, mean, median, p99, min, max per server and client count), then
notebooks/littles_law.ipynb top to bottom on that run.

Slow (about 1-1.5 minutes): Java servers under closed-loop load.
"""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "experiments" / "littles_law.yaml"


@pytest.fixture(scope="module")
def quick_run(study_run, require_java) -> Path:
    return study_run("littles_law")


def test_study_table(quick_run):
    from orchestrator import experiment, results

    plan = experiment.load_plan(EXPERIMENT, "quick")
    run = results.load(quick_run)
    assert run.info["experiment"] == "littles_law"
    t = run.trials
    assert len(t) == plan.trial_count
    assert set(t["concurrency_model"]) == {"pool", "virtual", "servlet", "spring"}
    assert (t["load_mode"] == "closed").all()
    clients = sorted({c.values["clients"] for c in plan.cells})
    assert clients[0] == 1 and clients[-1] == 200
    assert set(zip(t["server"], t["clients"])) == {
        (c.values["server"], c.values["clients"]) for c in plan.cells
    }
    cols = [
        "throughput_rps",
        "latency_mean_ms",
        "latency_p50_ms",
        "latency_p99_ms",
        "latency_min_ms",
        "latency_max_ms",
    ]
    assert t[cols].notna().all().all()
    assert (t["throughput_rps"] > 0).all()
    # order statistics are ordered; the mean lies within [min, max]
    assert (t["latency_min_ms"] <= t["latency_p50_ms"]).all()
    assert (t["latency_p50_ms"] <= t["latency_p99_ms"]).all()
    assert (t["latency_p99_ms"] <= t["latency_max_ms"]).all()
    assert t["latency_mean_ms"].between(t["latency_min_ms"], t["latency_max_ms"]).all()
    # every request costs >= spin + sleep = 6 ms on the server: no latency below that
    assert (t["latency_min_ms"] >= 5.9).all()
    assert (t["success_ratio"] > 0.9).all()
    for server, g in t.groupby("server"):
        one = g[g["clients"] == 1].iloc[0]
        many = g[g["clients"] == 200].iloc[0]
        naive = 200 / (one["latency_mean_ms"] / 1e3)
        # more clients: more throughput, longer response times ...
        assert many["throughput_rps"] > one["throughput_rps"], server
        assert many["latency_mean_ms"] > one["latency_mean_ms"], server
        # ... but far below the one-client Little's-law prediction: the server's one core
        # saturates (200 clients x 1 ms of CPU each per 6 ms cycle)
        assert many["throughput_rps"] < 0.5 * naive, server
    tl = run.timeline
    assert {"t_s", "throughput_rps", "warmup"} <= set(tl.columns)
    assert set(tl["cell_id"]) == set(t["cell_id"])


def test_the_seeds_swipes_are_what_every_server_validated(quick_run):
    """Seed 001's client: POST /swipe/{left|right}/ with a JSON body (random swiper, swipee
    and comment). Every server answered 201, which it does only for a body that parses and
    validates, and the per-endpoint table splits the swipes by direction about evenly."""
    from orchestrator import results

    run = results.load(quick_run)
    ep = run.endpoints
    assert set(ep["endpoint"]) == {"swipe-left", "swipe-right"}
    assert ep.groupby(["cell_id", "trial"]).size().eq(2).all()
    per = ep.groupby(["cell_id", "trial"])["requests"].sum()
    t = run.trials.set_index(["cell_id", "trial"])
    assert (per == t.loc[per.index, "requests"]).all()  # the endpoints add up to the trial
    left = ep[ep["endpoint"] == "swipe-left"].set_index(["cell_id", "trial"])["requests"]
    n = per.sum()
    # directions drawn with weights 1:1: left's share within 4.5 binomial sigmas of 1/2
    assert abs(left.sum() / n - 0.5) < 4.5 * (0.25 / n) ** 0.5, left.sum() / n
    req = run.requests
    answered = req[req["error"] == 0]
    # 201: a swipe validated (a /work request is a 200, an invalid body a 400)
    assert len(answered) > 0 and (answered["status"] == 201).all(), answered[
        "status"
    ].value_counts()
    assert set(run.trials["concurrency_model"]) == {"pool", "virtual", "servlet", "spring"}


def test_notebook_runs(quick_run, execute_notebook):
    text = execute_notebook("littles_law", quick_run)
    assert "experiment littles_law" in text
    assert "MVA ceiling" in text
    assert "Spring Boot serves" in text and "start-up (median s)" in text
    own = quick_run / "notebooks" / "littles_law"  # its own figures, not the run's plots/
    assert (own / "littles_law_prediction.png").is_file()
    assert (own / "littles_law_timeline.png").is_file()
    assert not list((quick_run / "plots").glob("littles_law_*"))

"""Study thread_pool (seed 004): the quick profile end to end, its table, then its notebook.

Robust orderings only (the host is shared and noisy): the table has the study's shape, every
cell served requests without errors, the large service-time variation (mean 5.25 ms) gives less
throughput than the small one (mean 1 ms), the pool really has its threads and thread-per-request
really creates threads, and the USL fit over the pool's thread counts is finite."""

import math
from pathlib import Path

import pandas as pd
import pytest

from models import usl

ROOT = Path(__file__).resolve().parents[2]
STUDY = "thread_pool"


@pytest.fixture(scope="module")
def quick_run(study_run) -> Path:
    return study_run("thread_pool")


def test_quick_table(quick_run):
    t = pd.read_csv(quick_run / "trials.csv")
    main = t[(t["server"] == "c-thread") | (t["threads"] == 4)]
    # strategy x cores x variation x buckets (quick: 2 bucket counts) + 5 USL-only pool cells
    assert len(main) == 2 * 2 * 2 * 2 and len(t) == len(main) + 5
    assert main.groupby(["server", "cores", "dist", "buckets"]).size().eq(1).all()
    assert set(t["cores"]) == {1, 2} and set(t["buckets"]) == {32, 2048}
    assert (t["errors"] == 0).all(), t[["server", "cores", "dist", "buckets", "errors"]]
    assert (t["requests"] > 50).all()
    # the counters: the server was started with each bucket count (server_cores axis too)
    assert (t["server_cores"] == t["cores"]).all()
    # large variation (mean 5.25 ms of spin) against small (mean 1 ms): less throughput on average
    p = main.pivot_table(
        index=["server", "cores", "buckets"], columns="dist", values="throughput_rps"
    )
    assert (p["uniform:1:20"] / p["uniform:1:3"]).mean() < 0.8, p
    # pool: its threads (+ the acceptor) and no more; thread-per-request: many threads over time
    pool = t[t["server"] == "c-pool"]
    assert (pool["server_threads_max"] <= pool["threads"] + 4).all()
    assert (t.loc[t["server"] == "c-thread", "server_threads_max"] > 4).all()
    # a request's thread lives a few ms, between two of perfctl's samples: its CPU time is still
    # the server's, not "other processes'" (before: 69-161% of a CPU, every c-thread trial
    # called noisy on a quiet host, the pool's 0-5%); both see the same neighbours
    foreign = t.groupby("server")["noise_foreign_cpu_pct"].median()
    assert foreign["c-thread"] < foreign["c-pool"] + 30, foreign.to_dict()
    # USL over the pool's thread counts: a finite fit with non-negative parameters
    u = pool[(pool["cores"] == 2) & (pool["dist"] == "uniform:1:3") & (pool["buckets"] == 2048)]
    assert sorted(u["threads"]) == [1, 2, 3, 4, 8, 16]
    fit = usl.fit(u["threads"], u["throughput_rps"])
    assert fit.lam > 0 and fit.sigma >= 0 and fit.kappa >= 0 and math.isfinite(fit.r_squared)


def test_notebook_runs(quick_run, execute_notebook):
    text = execute_notebook("thread_pool", quick_run)
    assert str(quick_run.resolve()) in text
    assert "USL:" in text and "pre-create / per-request" in text

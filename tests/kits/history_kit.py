"""Runs for the history's tests, made without running anything: RunRecords with chosen trial
values (a series with a known step, an outlier, a drift), the store they go into, and run
directories (run.json + trials.csv) for `perfctl history import`.

Tests import it as `history_kit` (tests/conftest.py puts tests/kits/ on sys.path).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from orchestrator.history.record import RunRecord
from orchestrator.history.store import Location, Store
from orchestrator.results.schema import write_trials

HOST = {"hostname": "kit", "cpu_model": "Kit CPU", "cpu_count": 2, "kernel": "Linux 6.1"}


def record(
    k: int,
    values: list[float],
    experiment: str = "kit",
    cell: str = "c1",
    metric: str = "throughput_rps",
    commit: str | None = None,
    host: str = "h1",
) -> RunRecord:
    """Run number k (its start time k minutes after a fixed instant) with one trial per value."""
    r = RunRecord(
        run_id=f"{experiment}-{host}-{k:05d}",
        experiment=experiment,
        started=f"2026-01-{1 + k // 1440:02d}T{k // 60 % 24:02d}:{k % 60:02d}:00Z",
        commit=commit or f"{k:05d}{'c' * 35}",
        host_fingerprint=host,
        host=HOST,
        run_dir=f"/nowhere/{k}",
        labels={"k": str(k)},
    )
    for t, v in enumerate(values):
        trial = {m: None for m in ("throughput_rps", "latency_p50_ms", "latency_p99_ms")}
        trial |= {"error_rate": 0.0, metric: float(v)}
        r.trials.append(
            {"cell_id": cell, "cell_label": f"cell={cell}", "trial": t, **trial}
            | {"valid": 1, "quiet": 1}
        )
    return r


def levels(
    n: int,
    step_at: int | None = None,
    step: float = 0.0,
    outlier: int | None = None,
    seed: int = 0,
    trials: int = 3,
    sd_run: float = 0.01,
    sd_trial: float = 0.02,
):
    """Trial values of n runs around 1000: a step by `step` (relative) from run step_at on,
    one outlier run (x 1.6) at `outlier`."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        level = 1000 * (1 + (step if step_at is not None and i >= step_at else 0.0))
        level *= 1 + rng.normal(0, sd_run)
        v = level * (1 + rng.normal(0, sd_trial, trials))
        out.append(v * (1.6 if i == outlier else 1.0))
    return out


def fill(path: Path, runs: list, **kw) -> Location:
    """An SQLite store at path holding the runs (trial value lists), run k at minute k."""
    loc = Location(str(path), "test")
    with Store(loc) as st:
        for k, values in enumerate(runs):
            st.add(record(k, list(values), **kw))
    return loc


def run_dir(
    path: Path,
    experiment: str = "kit",
    started: str = "2026-01-01T00:00:00+0000",
    throughputs=(1000.0, 1010.0, 990.0),
    commit: str | None = "abc",
    **info,
) -> Path:
    """A run directory as perfctl run leaves it, as far as the history reads it."""
    path.mkdir(parents=True, exist_ok=True)
    doc = {
        "experiment": experiment,
        "source": str(path / "exp.yaml"),
        "started": started,
        "document": {"name": experiment},
        "cells": [{"cell_id": "c1", "values": {"server": "pool"}}],
        "host": {
            "hostname": "kit",
            "cpu_count": 2,
            "kernel": "Linux 6.1",
            "settings": {"cpu_model": "Kit CPU"},
        },
        "sut": {"commit": commit, "labels": {"branch": "main"}},
        **info,
    }
    (path / "run.json").write_text(json.dumps(doc))
    trials = pd.DataFrame(
        {
            "cell_id": "c1",
            "trial": range(1, len(throughputs) + 1),
            "server": "pool",
            "throughput_rps": list(throughputs),
            "latency_p50_ms": 1.0,
            "latency_p99_ms": 5.0,
            "error_rate": 0.0,
            "valid": True,
            "quiet": True,
        }
    )
    write_trials(path, trials)
    return path

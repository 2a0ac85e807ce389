"""A run directory as history rows (orchestrator/history/record.py): a search run keeps its
capacities, not its probes; and `perfctl.history()` gives the store as a DataFrame."""

import pandas as pd
from history_kit import fill, levels, run_dir

import perfctl
from orchestrator.history.record import from_run_dir
from orchestrator.results.schema import read_trials, write_capacity, write_trials


def test_a_search_run_keeps_its_capacities_not_its_probes(tmp_path):
    d = run_dir(tmp_path / "run")
    trials = read_trials(d)
    trials["search_role"] = "knee"
    write_trials(d, trials)
    write_capacity(
        d,
        {
            "cells": [
                {
                    "cell_id": "c1",
                    "label": "server=pool",
                    "capacity": 430.0,
                    "low": 394.0,
                    "high": float("nan"),
                    "unit": "rate_rps",
                    "status": "found",
                }
            ]
        },
    )
    r = from_run_dir(d)
    assert r.trials == []
    assert r.capacities == [
        {
            "cell_id": "c1",
            "cell_label": "server=pool",
            "capacity": 430.0,
            "low": 394.0,
            "high": None,
            "unit": "rate_rps",
            "found": 1,
        }
    ]
    assert r.commit == "abc" and r.labels == {"branch": "main"}
    assert r.started == "2026-01-01T00:00:00Z"
    assert from_run_dir(d).run_id == r.run_id  # the same directory, the same run


def test_perfctl_history_is_a_dataframe_of_trials(tmp_path):
    store = fill(tmp_path / "h.sqlite", levels(5, seed=1))
    df = perfctl.history("kit", store=store.target)
    assert len(df) == 15 and set(df["run_id"]) == {f"kit-h1-{k:05d}" for k in range(5)}
    assert isinstance(df["started"].dtype, pd.DatetimeTZDtype)
    assert df["valid"].dtype == bool and df["throughput_rps"].notna().all()
    assert perfctl.history("other", store=store.target).empty
    assert perfctl.history(store=store.target, capacities=True).empty

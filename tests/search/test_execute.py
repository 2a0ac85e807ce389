"""The search driver (orchestrator/search/execute.py) with the per-trial function replaced by
the simulated M/M/4 server: probes become trials.csv rows, capacity.json is written after
every probe, cells take turns, and --resume replays the recorded probes without running
them again."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from search_sim import MMc

from orchestrator import results
from orchestrator.errors import PerfctlError
from orchestrator.experiment import compile_document
from orchestrator.results import trial_dir
from orchestrator.search import execute

DOC = {
    "name": "sim",
    "servers": {
        "a": {"cmd": "a --port {port}", "threads": 4},
        "b": {"cmd": "b --port {port}", "threads": 4},
    },
    "load": {"mode": "open", "connections": 64, "duration": "5s", "warmup": "1s"},
    "search": {"slo": {"p99": "30ms"}, "max_trials": 6},
}


@pytest.fixture
def fake_trials(monkeypatch, tmp_path):
    """execute_trial -> the simulated server; the trial dir gets the summary.json and
    timeline.parquet the search reads. Returns the list of (cell_id, trial) run."""
    sim = MMc(seed=9)
    ran = []
    (tmp_path / "run.json").write_text('{"experiment": "sim"}')  # what makes it a run

    def fake(plan, cell, k, run_dir, services, **kw):
        ld = cell.load
        role = "knee" if ld.mode == "open" else "service" if ld.connections == 1 else "sat"
        level = ld.rate_rps if role == "knee" else ld.connections
        row, readings = sim.trial(role, level)
        tdir = trial_dir(run_dir, cell.cell_id, k)
        tdir.mkdir(parents=True, exist_ok=True)
        results.write_json(
            tdir / "summary.json",
            {"start_ns": 0, "measure_start_ns": 10**9, "measure_end_ns": 6 * 10**9},
        )
        # the seconds the simulated trial measured: its trend test reads them back
        secs = np.full(7, readings.stat_ms)
        pd.DataFrame({"t_s": np.arange(7.0), "latency_p99_ms": secs}).to_parquet(
            tdir / "timeline.parquet"
        )
        ran.append((cell.cell_id, k))
        return {
            "cell_id": cell.cell_id,
            "trial": k,
            **cell.values,
            "target_rate": ld.rate_rps,
            "load_mode": ld.mode,
            "connections": ld.connections,
            **row,
        }

    monkeypatch.setattr(execute, "execute_trial", fake)
    monkeypatch.setattr(execute.ServiceSet, "start", lambda *a, **k: None)
    return ran


def test_cells_take_turns_and_every_probe_is_a_row(tmp_path, fake_trials):
    plan = compile_document(DOC, "sim.yaml")
    searches = execute.execute_search(plan, tmp_path)
    trials = results.read_trials(tmp_path)
    assert len(trials) == sum(s.trials for s in searches) == len(fake_trials)
    ids = [c.cell_id for c in plan.cells]
    assert [cid for cid, _ in fake_trials[:4]] == [ids[0], ids[1], ids[0], ids[1]]
    assert set(trials["search_role"]) == {"service", "saturation", "knee"}
    doc = results.read_capacity(tmp_path)
    assert [c["cell_id"] for c in doc["cells"]] == ids
    assert all(c["trials"] == 6 and c["capacity"] > 0 for c in doc["cells"])
    assert doc["search"]["slo"] == {"stat": "p99", "latency_ms": 30.0, "error_rate": 0.001}


def test_resume_replays_the_recorded_probes_and_runs_only_the_rest(tmp_path, fake_trials):
    plan = compile_document({**DOC, "search": {**DOC["search"], "max_trials": 4}}, "sim.yaml")
    execute.execute_search(plan, tmp_path)
    first = list(fake_trials)
    before = results.read_capacity(tmp_path)["cells"]
    fake_trials.clear()
    longer = compile_document(DOC, "sim.yaml")  # two more trials per cell allowed
    execute.execute_search(longer, tmp_path)
    assert len(first) == 8 and len(fake_trials) == 4  # only trials 5 and 6 of each cell ran
    assert {k for _, k in fake_trials} == {5, 6}
    after = results.read_capacity(tmp_path)["cells"]
    assert [c["probes"][:4] for c in after] == [c["probes"] for c in before]


def test_a_recorded_probe_that_differs_from_what_the_search_asks_is_refused(tmp_path, fake_trials):
    plan = compile_document(DOC, "sim.yaml")
    execute.execute_search(plan, tmp_path)
    t = results.read_trials(tmp_path)
    t.loc[t["search_role"] == "knee", "search_level"] = 1.0
    results.schema.write_trials(tmp_path, t)
    with pytest.raises(PerfctlError, match="another version of the search"):
        execute.execute_search(plan, tmp_path)


def test_an_slo_out_of_reach_stops_the_run_and_capacity_json_says_where_it_stood(
    tmp_path, fake_trials
):
    plan = compile_document({**DOC, "search": {"slo": {"p99": "5ms"}}}, "sim.yaml")
    with pytest.raises(PerfctlError, match="search.slo.p99"):
        execute.execute_search(plan, tmp_path)
    doc = results.read_capacity(tmp_path)
    assert doc["cells"][0]["status"] == "failed" and math.isnan(doc["cells"][0]["capacity"])
    assert len(results.read_trials(tmp_path)) == 1  # the probe that showed it is kept

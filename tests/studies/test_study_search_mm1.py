"""Study search_mm1 (seed 002): the quick profile end to end, its table, then its notebook.

Only robust orderings are asserted (the host is shared and noisy): the injected 50 ms delay
adds about its 100 ms round trip at low load, latency grows with the arrival rate, and the
low-rate cells are served at the offered rate."""
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
STUDY = "search_mm1"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp(STUDY) / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="160")
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli_entry", "run",
                           f"experiments/{STUDY}.yaml", "--profile", "quick", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_quick_table(quick_run):
    t = pd.read_csv(quick_run / "trials.csv")
    # layout x delay x rate, one trial each
    assert len(t) == 2 * 2 * 3
    assert set(t["layout"]) == {"flat", "by-type"}
    assert set(t["delay"]) == {"0ms", "50ms"}
    assert t.groupby(["layout", "delay", "rate"]).size().eq(1).all()
    assert (t["server_model"] == "single").all() and (t["server_backlog"] == 50).all()
    assert (t["requests"] > 0).all()
    lowest = t[t["rate"] == t["rate"].min()]
    # the lowest rate (rho well below 1) is served at the offered rate, without errors
    assert (lowest["errors"] == 0).all()
    assert ((lowest["throughput_rps"] / lowest["rate"]).between(0.6, 1.4)).all()
    # 50 ms each way: the round trip shows up in the latency at low load
    d = lowest.pivot_table(index="layout", columns="delay", values="latency_mean_ms")
    assert ((d["50ms"] - d["0ms"]) > 60).all(), d
    assert (lowest.loc[lowest["delay"] == "50ms", "rtt_expected_ms"] == 100).all()
    # queueing: on average over layout x delay, the highest rate waits longer than the lowest
    m = t.pivot_table(index=["layout", "delay"], columns="rate", values="latency_mean_ms")
    assert m[m.columns.max()].mean() > m[m.columns.min()].mean()
    # the server reported its service time (Server-Timing svc) on the requests
    cid, k = t.iloc[0]["cell_id"], int(t.iloc[0]["trial"])
    req = pd.read_parquet(quick_run / "cells" / cid / f"trial-{k}" / "requests.parquet")
    svc = req["svc_ms"].to_numpy()
    assert np.isfinite(svc).mean() > 0.9 and 0.1 < np.nanmedian(svc) < 200


def run_notebook(run_dir: Path, monkeypatch) -> str:
    """Execute the study's notebook top to bottom on run_dir (any error fails); its stdout."""
    nb = nbformat.read(ROOT / "notebooks" / f"{STUDY}.ipynb", as_version=4)
    monkeypatch.setenv("PERFCTL_RUN", str(run_dir))
    NotebookClient(nb, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    return "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []) if o.get("output_type") == "stream")


def test_notebook_runs(quick_run, monkeypatch):
    text = run_notebook(quick_run, monkeypatch)
    assert str(quick_run.resolve()) in text
    assert "M/M/1 error of the mean response" in text

"""Study client_scaling (seed 003): the quick profile end to end, its table, then its notebook.

Robust orderings only (the host is shared and noisy): with the 200 ms server-side sleep the
thread-per-connection server scales roughly linearly with the clients (X ~ N / (R0 + 0.2 s)),
the one-connection-at-a-time server does not."""
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
STUDY = "client_scaling"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp(STUDY) / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="160")
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli_entry", "run",
                           f"experiments/{STUDY}.yaml", "--profile", "quick", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_quick_table(quick_run):
    t = pd.read_csv(quick_run / "trials.csv")
    # java-thread: 2 delays x 4 client counts; java-single: the 200 ms delay only
    assert len(t) == 12
    assert sorted(t["clients"].unique()) == [1, 2, 4, 10]
    assert set(t.loc[t["server"] == "java-single", "sleep_us"]) == {200000}
    assert (t["errors"] == 0).all(), t[["server", "sleep_us", "clients", "errors"]]
    assert (t["throughput_rps"] > 0).all() and (t["throughput_kib_s"] > 0).all()
    # KiB/s follows req/s: every response carries the 18000-byte body (+ headers)
    per_req = t["throughput_kib_s"] * 1024 / t["throughput_rps"]
    assert per_req.between(18000, 18600).all(), per_req
    d = t[t["sleep_us"] == 200000].set_index(["server", "clients"])["throughput_rps"]
    thr = d["java-thread"]
    # one client in a 200 ms sleep loop: a bit under 5 req/s
    assert 3.0 < thr[1] <= 5.5
    # roughly linear: 10 clients give well over 5x, and each step up adds throughput
    assert thr[10] > 6 * thr[1]
    assert thr[1] < thr[2] < thr[4] < thr[10]
    # the single server cannot overlap the sleeps: 10 clients stay near one client's rate
    single = d["java-single"]
    assert single[10] < 2 * single[1]
    assert thr[10] > 4 * single[10]
    # under delay the response time stays near 200 ms for java-thread, grows ~N x for single
    lat = t[t["sleep_us"] == 200000].set_index(["server", "clients"])["latency_mean_ms"]
    assert lat["java-thread"][10] < 2 * lat["java-thread"][1]
    assert lat["java-single"][10] > 4 * lat["java-single"][1]


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
    assert "of the linear expectation" in text

"""A broken driver through the whole of `perfctl run` and the analysis commands (issue #32
finding 5): a `driver: {cmd: ...}` that writes garbage to requests.parquet and no summary.json.
Before, the trial was rightly invalid, then `perfctl run` died drawing the plots (KeyError:
'Column not found: latency_p99_ms', a traceback, exit 1). Now every step skips what is
missing and says so in one line.

Two runs: one where the broken cell is the only one (trials.csv then lacks every latency
column) and one beside an honest driver's cell (the columns exist, the broken row is empty).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "loadgen" / "toy_driver.py"
SKIPPED = "left out 1 trial that measured nothing: load driver cmd wrote output that breaks"

EXPERIMENT = f"""
name: broken-driver
servers:
  s: {{impl: python, model: async}}
workload: {{path: /work}}
load: {{driver: {{cmd: "{sys.executable} {TOY} {{how}} {{spec}} {{out}}"}}, mode: closed,
        duration: 1s, warmup: 200ms, timeout: 2s}}
matrix: {{how: {{hows}}}}
repeats: 1
models: true
thresholds:
  - {{p99_ms: {{lt: 1000}}}}
"""


def perfctl(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module", params=[["garbage"], ["good", "garbage"]], ids=["alone", "beside"])
def broken_run(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("broken")
    exp = tmp / "broken.yaml"
    exp.write_text(EXPERIMENT.replace("{hows}", json.dumps(request.param)))
    out = tmp / "run"
    proc = perfctl("run", str(exp), "--out", str(out))
    return request.param, out, proc


def test_perfctl_run_finishes_and_says_what_it_skipped(broken_run):
    hows, out, proc = broken_run
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert f"skipped: plots: {SKIPPED}" in text
    assert f"skipped: models: {SKIPPED}" in text
    trials = pd.read_csv(out / "trials.csv")
    assert len(trials) == len(hows)
    broken = trials[trials["how"] == "garbage"].iloc[0]
    assert not broken["valid"] and "breaks loadgen/DRIVER.md" in broken["invalid_reasons"]
    assert "no summary.json" in broken["invalid_reasons"]
    models = json.loads((out / "models.json").read_text())
    assert any(SKIPPED in n for n in models["left_out"])
    if "good" in hows:
        assert (out / "plots" / "latency_p99.png").is_file()
        assert [c["cell_id"] for c in models["cells"]] == list(
            trials.loc[trials["how"] == "good", "cell_id"]
        )
    else:
        assert "latency_p99_ms" not in trials.columns  # the case: no such column


def test_report_model_check_and_compare_skip_the_broken_trial(broken_run):
    hows, out, _ = broken_run
    proc = perfctl("report", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"skipped: plots: {SKIPPED}" in proc.stdout
    page = (out / "report.html").read_text()
    assert "skipped: plots: left out 1 trial that measured nothing" in page
    proc = perfctl("model", str(out))
    assert proc.returncode == 0 and f"skipped: models: {SKIPPED}" in proc.stdout, proc.stdout
    proc = perfctl("check", str(out))
    # a gate never passes on missing data: the broken cell is a breach, and says why
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "0 of 1 trials used; 1 invalid (trial 1): load driver cmd wrote output" in proc.stdout
    proc = perfctl("compare", str(out), str(out))
    if hows == ["garbage"]:  # nothing measured at all: bad input, one paragraph
        assert proc.returncode == 2 and "no requests" in proc.stdout + proc.stderr
    else:
        assert proc.returncode == 3, proc.stdout + proc.stderr  # one trial a side: too few
        # the note sits in the table's last column: read it across the wrapped lines
        text = " ".join(proc.stdout.replace("│", " ").split())
        assert "0 of 1 trials used; 1 invalid (trial 1): load driver cmd" in text, proc.stdout

"""A real trial's new self-checks end to end: the seed, the offered load, the host-noise
columns, and a server that dies behind a wrapper shell (issue #13 items 1-3)."""

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.experiment.load import trial_seed
from orchestrator.results.schema import NOISE_COLUMNS

ROOT = Path(__file__).resolve().parents[2]

OPEN = """
name: checks
servers:
  py: {impl: python, model: async}
workload: {path: /work, params: {spin_us: 100}}
load: {mode: open, rate: 300, connections: 4, duration: 2s, warmup: 500ms}
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""

# The server: the real server is killed 3 s in (inside the measured window, which
# ends 4.5 s after the load begins), the shell around it lives on.
DYING = """
name: dying
servers:
  dying: {cmd: "sh -c 'python3 -m http.server {port} & sleep 3; kill $!; sleep 600'"}
workload: {path: /}
load: {mode: open, rate: 100, keepalive: false, connections: 4, duration: 4s, warmup: 500ms}
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""


def run(write_yaml, perfctl_env, tmp_path, text):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(write_yaml(text)),
            "--out",
            str(out),
            "--no-plots",
        ],
        cwd=ROOT,
        env=perfctl_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return pd.read_csv(out / "trials.csv"), proc.stdout


def test_a_real_trial_records_its_seed_offered_load_and_noise(write_yaml, perfctl_env, tmp_path):
    trials, stdout = run(write_yaml, perfctl_env, tmp_path, OPEN)
    [t] = trials.to_dict("records")
    assert t["seed"] == trial_seed(t["cell_id"], 1, 1)
    assert t["offered_rate"] == 300 and t["requests"] == 600  # exactly rate x window
    for col in NOISE_COLUMNS:
        assert col in trials.columns, col
        if col != "noise_cpus":
            assert math.isfinite(t[col]) and t[col] >= 0, (col, t[col])
    assert t["noise_cpus"] == "0,1"
    assert t["quiet"] in (True, False)
    assert (t["noise_reasons"] == t["noise_reasons"]) != t["quiet"]  # reasons iff not quiet
    assert "quiet" in stdout


@pytest.mark.untimed  # what it records, not how fast
def test_dead_server_behind_wrapper_is_invalid(write_yaml, perfctl_env, tmp_path):
    """Before, most requests were refused and the trial was valid with a clean p99."""
    trials, _ = run(write_yaml, perfctl_env, tmp_path, DYING)
    [t] = trials.to_dict("records")
    assert not t["valid"]
    reasons = t["invalid_reasons"]
    assert "error rate" in reasons and "refused" in reasons
    assert "http.server" in reasons and "ended during the trial" in reasons

"""End to end: `perfctl run` on a mix with headers and an {env:} secret against the bundled C
server: the per-endpoint table, endpoints.csv adding up to trials.csv, run.endpoints, an
endpoint threshold in `perfctl check`, and the secret in no file of the run."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from orchestrator import results

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-e2e-3f9a1c77-not-on-disk"

MIX = """
name: mix-e2e
servers:
  c: {impl: c, model: pool, threads: 2}
workload:
  headers: {Authorization: "Bearer {env:PERFCTL_E2E_TOKEN}", X-Client: perfctl}
  requests:
    - {name: work, weight: 3, path: /work, params: {spin_us: 20, id: "{int:1..100}"}}
    - {name: health, weight: 1, path: /health}
    - {name: nope, weight: 1, path: "/nope/{uuid}"}
    - {name: never, weight: 0, path: /health}   # never sent: no endpoint of the trial
load: {mode: closed, connections: 2, duration: 1s, warmup: 300ms}
placement: {server_cpus: [0], loadgen_cpus: [1]}
thresholds:
  - {where: {endpoint: health}, error_rate: {lt: 0.01}}
"""


def perfctl(args, env):
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_a_mix_run_end_to_end(write_yaml, perfctl_env, tmp_path):
    out = tmp_path / "run"
    env = {**perfctl_env, "PERFCTL_E2E_TOKEN": SECRET}
    proc = perfctl(["run", str(write_yaml(MIX)), "--out", str(out)], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Per endpoint" in proc.stdout and "nope" in proc.stdout, proc.stdout

    trials = pd.read_csv(out / "trials.csv")
    assert len(trials) == 1  # trials.csv stays one row per trial
    [tdir] = list((out / "cells").glob("*/trial-1"))
    ep = pd.read_csv(tdir / "endpoints.csv")
    assert list(ep["endpoint"]) == ["work", "health", "nope"]
    assert ep["requests"].sum() == trials["requests"].iloc[0] > 0
    assert ep["errors"].sum() == trials["errors"].iloc[0]
    by = ep.set_index("endpoint")
    assert by.loc["nope", "errors"] == by.loc["nope", "requests"] > 0  # a 404 per request
    assert by.loc["health", "errors"] == 0
    assert 0.45 < by.loc["work", "share"] < 0.75  # weight 3 of 5, on a few hundred draws

    rows = pd.read_parquet(tdir / "requests.parquet", columns=["request", "status"])
    assert set(rows["request"]) == {0, 1, 2}
    assert (rows.loc[(rows["request"] == 2) & (rows["status"] > 0), "status"] == 404).all()
    run = results.load(out)
    assert len(run.endpoints) == 3 and "server" in run.endpoints

    check = perfctl(["check", str(out)], env)
    assert "endpoint=health" in check.stdout + check.stderr, check.stdout + check.stderr

    for f in out.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f

"""A mix through the bundled RMI driver (loadgen/DRIVER.md, "A mix"): each call drawn by weight
from the spec's `requests`, its {uuid} and {seq} rendered per call, its index written to the
`request` column, so the trial's per-endpoint table has a row per remote call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import setup_kit

ROOT = Path(__file__).resolve().parents[2]
# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]

MIX = """
name: rmi-mix
servers:
  rmi: {impl: java, model: rmi, threads: 4}
workload:
  requests:
    - {name: work, weight: 3, path: /work, params: {spin_us: 50}}
    - {name: register, weight: 1, method: POST, path: /register, body: "user={uuid}&pass={seq}"}
    - {name: never, weight: 0, path: /health}
load: {driver: rmi, mode: closed, connections: 2, duration: 1500ms, warmup: 300ms}
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""


def test_the_rmi_driver_names_each_call_of_a_mix(tmp_path):
    setup_kit.require_jdk(17)
    exp = tmp_path / "mix.yaml"
    exp.write_text(MIX)
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(exp), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Per endpoint" in proc.stdout and "register" in proc.stdout, proc.stdout
    [tdir] = list((out / "cells").glob("*/trial-1"))
    trial = pd.read_csv(out / "trials.csv").iloc[0]
    ep = pd.read_csv(tdir / "endpoints.csv").set_index("endpoint")
    assert list(ep.index) == ["work", "register"]  # weight 0: never sent, no row
    assert ep["requests"].sum() == trial["requests"] > 100
    assert ep["errors"].sum() == trial["errors"] == 0
    # 3:1 by weight: register's share within 4.5 binomial sigmas of 1/4
    n = int(trial["requests"])
    sigma = (0.25 * 0.75 / n) ** 0.5
    assert abs(ep.loc["register", "share"] - 0.25) < 4.5 * sigma, ep["share"]
    rows = pd.read_parquet(tdir / "requests.parquet", columns=["request", "status"])
    assert set(rows["request"]) == {0, 1}
    # every {uuid} was a new user: a literal "{uuid}" would be 409 (exists) after the first
    assert (rows.loc[rows["request"] == 1, "status"] == 201).all()
    assert (rows.loc[rows["request"] == 0, "status"] == 200).all()

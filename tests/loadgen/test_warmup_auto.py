"""`warmup: auto`: before its phase the load generator (loadgen/prewarm.py) and the RMI driver
(RmiDriver.prewarm) warm the server up until it is steady, bounded, and the trial reports the
warm-up it took."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import setup_kit

from loadgen import prewarm
from orchestrator.experiment import compile_document

ROOT = Path(__file__).resolve().parents[2]


def _load(**load):
    doc = {"name": "w", "servers": {"c": {"impl": "c", "model": "epoll"}}, "load": load}
    return compile_document(doc, "w.yaml").cells[0]


def test_auto_becomes_a_bounded_warm_up_before_a_short_one_and_leaves_other_cells_alone():
    auto = _load(mode="closed", warmup="auto").load
    assert auto.warmup_s == 1.0 and auto.warmup_auto_max_s == 60.0
    assert _load(mode="closed", warmup="auto", warmup_auto_max="10s").load.warmup_auto_max_s == 10
    fixed = _load(mode="closed", warmup="3s")
    assert fixed.load.warmup_auto_max_s == 0
    # a cell that does not ask keeps its id (the field is left out of the hash at 0)
    assert _load(mode="closed").cell_id == _load(mode="closed", warmup="2s").cell_id


def test_steady_means_the_last_four_slice_medians_within_15_percent():
    assert not prewarm.settled([1.0, 1.0, 1.0])  # too few slices
    assert prewarm.settled([5.0, 3.0, 1.0, 1.05, 1.1, 1.0])
    assert not prewarm.settled([3.0, 2.0, 1.5, 1.2, 1.0])  # still falling
    assert not prewarm.settled([1.0, 1.0, float("nan"), 1.0])


RUN = """
name: warm-auto
servers:
  {server}
workload: {{path: /work, params: {{spin_us: 50}}}}
load: {{{driver}mode: closed, connections: 2, duration: 1s, warmup: auto, warmup_auto_max: 6s}}
placement: {{server_cpus: [0], loadgen_cpus: [1]}}
retry_noisy: 0
"""


def _run(tmp_path, server: str, driver: str = "") -> pd.Series:
    exp = tmp_path / "w.yaml"
    exp.write_text(RUN.format(server=server, driver=driver))
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(exp), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "warmed up" in proc.stdout, proc.stdout[-2000:]
    return pd.read_csv(out / "trials.csv").iloc[0]


@pytest.mark.usefixtures("live")
@pytest.mark.untimed  # asserts bounds that a busy host only lengthens within the limit
def test_the_http_generator_warms_up_until_steady_within_its_limit(tmp_path):
    row = _run(tmp_path, "c: {impl: c, model: pool, threads: 2}")
    # at least four half-second slices, at most the limit and one slice
    assert 4 * prewarm.SLICE_S <= row["warmup_auto_s"] <= 6 + 2 * prewarm.SLICE_S, row
    assert row["requests"] > 0


@pytest.mark.usefixtures("live")
@pytest.mark.untimed
def test_the_rmi_driver_warms_up_until_its_jit_and_the_server_are_steady(tmp_path):
    setup_kit.require_jdk(17)
    row = _run(tmp_path, "rmi: {impl: java, model: rmi, threads: 2}", driver="driver: rmi, ")
    # a second of quarter-second slices at least; at most the limit and a timeout's grace
    assert 1.0 <= row["warmup_auto_s"] <= 6 + 5, row
    assert row["requests"] > 0


def test_a_jit_server_or_driver_warms_up_until_steady_by_default_and_keeps_its_cell_id():
    java = {"name": "w", "servers": {"j": {"impl": "java", "model": "pool"}}}
    default = compile_document({**java, "load": {"mode": "closed"}}, "w.yaml").cells[0]
    assert default.load.warmup_auto_max_s == 60.0 and default.load.warmup_s == 1.0
    fixed = compile_document({**java, "load": {"mode": "closed", "warmup": "2s"}}, "w.yaml")
    assert fixed.cells[0].load.warmup_auto_max_s == 0
    # the id hashes the load as written: the default changes what runs, not which cell it is
    assert default.cell_id == fixed.cells[0].cell_id
    rmi = {"name": "w", "servers": {"r": {"impl": "java", "model": "rmi"}}}
    driven = compile_document({**rmi, "load": {"mode": "closed", "driver": "rmi"}}, "w.yaml")
    assert driven.cells[0].load.warmup_auto_max_s == 60.0
    assert _load(mode="closed").load.warmup_auto_max_s == 0  # C: no JIT, a fixed 2 s

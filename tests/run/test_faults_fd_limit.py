"""`connections` against the descriptor limit, before any trial: above the hard limit the run
is refused naming the limit and the fix (nothing written); above only the soft limit perfctl
raises it for itself and every server and load generator it starts. The limits are set with
setrlimit in perfctl's process before it starts."""

from __future__ import annotations

import resource

import pandas as pd
import pytest
from fault_kit import tiny

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]

CONNECTIONS = (
    tiny("1s")
    .replace("matrix: {server: [sh, py]}", "matrix: {server: [py]}")
    .replace("workload: {path: /, params: {}}", "workload: {path: /health, params: {}}")
    .replace("connections: 2", "connections: N")
)


def _limit(soft: int, hard: int):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_connections_above_the_hard_fd_limit_are_refused_before_any_trial(
    write_yaml, perfctl, tmp_path, assert_clean_error
):
    exp = write_yaml(CONNECTIONS.replace("connections: N", "connections: 1000"))
    proc = perfctl("run", str(exp), "--out", str(tmp_path / "run"), preexec_fn=_limit(256, 256))
    assert_clean_error(
        proc, "`load.connections`", "1000 connections", "RLIMIT_NOFILE", "is 256", "ulimit -Hn"
    )
    assert not (tmp_path / "run").exists()


def test_connections_above_the_soft_fd_limit_raise_it_for_server_and_load(
    write_yaml, perfctl, tmp_path
):
    exp = write_yaml(CONNECTIONS.replace("connections: N", "connections: 300"))
    out = tmp_path / "run"
    proc = perfctl("run", str(exp), "--out", str(out), "--no-plots", preexec_fn=_limit(128, 4096))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = pd.read_csv(out / "trials.csv").iloc[0]
    assert trial["requests"] > 0 and trial["errors"] == 0, trial.to_dict()

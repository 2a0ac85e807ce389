"""Faults on the local 3-host cluster during a trial, with real processes: the scheduler killed
(the run stops with the paragraph, no traceback, nothing left running, no namespace or link
left; `--resume` finishes the run on a fresh cluster). A worker SIGKILLed is
test_local_cluster.py's."""

from __future__ import annotations

import os
import signal

import pandas as pd
import pytest
from cluster_kit import cluster_links, needs_root_and_ip
from test_local_cluster import _nothing_left, _shards_running, experiment

from benchmarks._common import poll_until, still_alive

pytestmark = pytest.mark.slow


def test_the_scheduler_killed_mid_trial_stops_the_run_and_resume_finishes_it(
    write_yaml, tmp_path, start_perfctl, perfctl
):
    needs_root_and_ip()
    out = tmp_path / "run"
    exp = experiment(write_yaml, duration="6s", repeats=2)
    proc = start_perfctl("run", exp, "--out", str(out), "--no-plots")
    tree = poll_until(lambda: _shards_running(proc), timeout_s=120)
    assert tree, "the shards were never seen running"
    (scheduler,) = [pid for (pid, _), text in tree.items() if "dask_scheduler" in text]
    os.kill(scheduler, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 2, stdout + stderr
    assert "Traceback" not in stderr, stderr
    assert "the Dask scheduler stopped answering" in stderr and "--resume" in stderr, stderr
    assert not (out / "trials.csv").exists() or pd.read_csv(out / "trials.csv").empty
    assert poll_until(lambda: _nothing_left(proc.pid, tree), timeout_s=30), (
        still_alive(tree),
        cluster_links(proc.pid),
    )
    done = perfctl("run", "--resume", str(out), "--no-plots")
    assert done.returncode == 0, done.stdout + done.stderr
    trials = pd.read_csv(out / "trials.csv")
    assert sorted(trials["trial"]) == [1, 2] and (trials["requests"] > 0).all()

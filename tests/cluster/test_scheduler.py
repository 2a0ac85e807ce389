"""`cluster: {scheduler: ...}`: an existing Dask cluster (a scheduler and two workers named h1
and h2 on this machine's loopback, started here as a user would). A trial runs there; a
placement naming an unknown host and an unreachable scheduler each end with exit 2."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import distributed
import pandas as pd
import pytest
from cluster_kit import ROOT

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

EXPERIMENT = """
name: remote
servers: {c: {impl: c, model: epoll}}
workload: {path: /work, params: {}}
load: {mode: closed, connections: 4, duration: 1s, warmup: 0.5s}
cluster: {scheduler: ADDRESS, connect_timeout: 3s}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def scheduler():
    """A scheduler and workers h1, h2 on 127.0.0.1, as `dask scheduler` / `dask worker
    --name hN` would start them; all stopped at the end."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    }
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-dashboard",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    ]
    for name in ("h1", "h2"):
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    address,
                    "--name",
                    name,
                    "--host",
                    "127.0.0.1",
                    "--no-nanny",
                    "--no-dashboard",
                    "--nthreads",
                    "4",
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    try:
        with distributed.Client(address, timeout=60, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)


def test_a_trial_on_an_existing_cluster(scheduler, write_yaml, tmp_path, perfctl):
    out = tmp_path / "run"
    text = (
        EXPERIMENT.replace("ADDRESS", scheduler)
        + "placement: {server: {host: h1}, loadgen: {hosts: [h2]}}\n"
    )
    done = perfctl("run", str(write_yaml(text)), "--out", str(out), "--no-plots")
    assert done.returncode == 0, done.stdout + done.stderr
    row = pd.read_csv(out / "trials.csv").iloc[0]
    assert row["requests"] > 0 and row["server_host"] == "h1" and row["loadgen_hosts"] == "h2"
    info = json.loads((out / "run.json").read_text())["cluster"]
    assert info["scheduler"] == scheduler and info["mode"] == "scheduler"
    assert sorted(info["hosts"]) == ["h1", "h2"]
    assert all(h["profiler"] is False for h in info["hosts"].values())
    assert "heartbeat" in " ".join(info["hosts"]["h1"]["background"])


def test_an_unknown_host_is_refused_listing_the_known_ones(
    scheduler, write_yaml, perfctl, tmp_path, assert_clean_error
):
    text = EXPERIMENT.replace("ADDRESS", scheduler) + "placement: {server: {host: h7}}\n"
    done = perfctl("run", str(write_yaml(text)), "--out", str(tmp_path / "r"), "--no-plots")
    assert_clean_error(done, "placement.server.host", "'h7'", "known hosts: h1, h2")


def test_an_unreachable_scheduler_is_named(write_yaml, perfctl, tmp_path, assert_clean_error):
    address = f"tcp://127.0.0.1:{_free_port()}"  # nothing listens there
    text = EXPERIMENT.replace("ADDRESS", address).replace(
        "connect_timeout: 3s", "connect_timeout: 1s"
    )
    done = perfctl("run", str(write_yaml(text)), "--out", str(tmp_path / "r"), "--no-plots")
    assert_clean_error(done, "cluster.scheduler", address)

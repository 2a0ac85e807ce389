"""Faults on the local 3-host cluster during a trial, with real processes: the scheduler killed
(the interrupted trial recorded invalid with the reason, the run stops with the paragraph, no
traceback, nothing left running, no namespace or link left; `--resume` finishes the run on a
fresh cluster); a host's link cut and restored (that
trial invalid, naming the host and the outage; the run goes on). A worker SIGKILLed is test_local_cluster.py's."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

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
    # the interrupted trial is recorded, invalid with the reason
    (interrupted,) = pd.read_csv(out / "trials.csv", keep_default_na=False).itertuples()
    assert interrupted.trial == 1 and not interrupted.valid
    assert "the Dask scheduler died during the trial" in interrupted.invalid_reasons
    assert poll_until(lambda: _nothing_left(proc.pid, tree), timeout_s=30), (
        still_alive(tree),
        cluster_links(proc.pid),
    )
    # --resume keeps it and runs the trial after it
    done = perfctl("run", "--resume", str(out), "--no-plots")
    assert done.returncode == 0, done.stdout + done.stderr
    trials = pd.read_csv(out / "trials.csv", keep_default_na=False).sort_values("trial")
    assert list(trials["trial"]) == [1, 2] and trials["requests"].iloc[1] > 0
    assert "the Dask scheduler died" in trials["invalid_reasons"].iloc[0]


def _host_link(pid: int, host_index: int) -> tuple[str, str]:
    """(namespace, its end of the veth pair) of local host h<host_index> of perfctl `pid`."""
    ns = f"perfctl-{pid}-{host_index - 1}"
    links = subprocess.run(["ip", "-n", ns, "-o", "link", "show"], capture_output=True, text=True)
    (veth,) = [
        line.split(": ")[1].split("@")[0]
        for line in links.stdout.splitlines()
        if ": lo:" not in line
    ]
    return ns, veth


def _load_flowing(ns: str) -> bool:
    """The shard in namespace ns has its connections open (more established TCP connections
    there than the worker's own few to the scheduler and its peers)."""
    tcp = subprocess.run(
        ["ip", "netns", "exec", ns, "cat", "/proc/net/tcp", "/proc/net/tcp6"],
        capture_output=True,
        text=True,
    ).stdout
    return sum(line.split()[3] == "01" for line in tcp.splitlines() if ":" in line) > 16


def test_a_host_link_cut_mid_trial_and_restored_invalidates_that_trial_and_the_run_goes_on(
    write_yaml, tmp_path, start_perfctl
):
    """h3 (a load-generator host) loses its link for 3 s during trial 1 (`ip link set down` in
    its namespace), then gets it back: no traceback, the run goes on (the host is back within
    host_return), both trials are kept; trial 1 is invalid, its reason naming h3 and how long
    its shard was silent (cluster/stalls.py), trial 2 (no fault) has no such reason; nothing is left
    running, no namespace or link."""
    needs_root_and_ip()
    out = tmp_path / "run"
    exp = write_yaml(
        Path(experiment(write_yaml, duration="6s", repeats=2))
        .read_text()
        .replace("host_return: 1s", "host_return: 60s"),
        "cut.yaml",
    )
    proc = start_perfctl("run", str(exp), "--out", str(out), "--no-plots")
    tree = poll_until(lambda: _shards_running(proc), timeout_s=120)
    assert tree, "the shards were never seen running"
    ns, veth = _host_link(proc.pid, 3)
    assert poll_until(lambda: _load_flowing(ns), timeout_s=30, interval_s=0.05)
    subprocess.run(["ip", "-n", ns, "link", "set", veth, "down"], check=True)
    t0 = time.monotonic()
    try:
        # the cut lasts 3 s of the 6 s window; how long the host takes to notice is its own
        poll_until(lambda: proc.poll() is not None, timeout_s=3)
    finally:
        subprocess.run(["ip", "-n", ns, "link", "set", veth, "up"], check=False)
        cut_s = time.monotonic() - t0
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout + stderr
    assert "Traceback" not in stdout + stderr
    trials = pd.read_csv(out / "trials.csv", keep_default_na=False).sort_values("trial")
    assert list(trials["trial"]) == [1, 2] and (trials["requests"] > 0).all()
    cut, calm = trials.iloc[0], trials.iloc[1]
    assert not cut["valid"], cut["invalid_reasons"]
    found = re.search(r"host h3 was cut off for ([0-9.]+) s", cut["invalid_reasons"])
    assert found, cut["invalid_reasons"]
    # the shard is silent from its last answer before the cut to its first after it
    assert float(found.group(1)) >= cut_s - 0.1, (found.group(1), cut_s)
    # (the calm trial's own validity is the busy test machine's: send lateness may void it)
    assert "cut off" not in calm["invalid_reasons"], calm["invalid_reasons"]
    assert poll_until(lambda: _nothing_left(proc.pid, tree), timeout_s=30), (
        still_alive(tree),
        cluster_links(proc.pid),
    )

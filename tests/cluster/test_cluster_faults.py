"""Faults on the local 3-host cluster during a trial, with real processes: the scheduler killed
(the interrupted trial recorded invalid with the reason, the run stops with the paragraph, no
traceback, nothing left running, no namespace or link left; `--resume` finishes the run on a
fresh cluster); a host's link cut and restored (that
trial invalid, naming the host and the outage; the run goes on). A worker SIGKILLed is test_local_cluster.py's."""

from __future__ import annotations

import glob
import json
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
from orchestrator.cluster.local import WORKER_ENV_KNOB

SHIM_SOURCE = Path(__file__).with_name("monotonic_sleep_shim.c")


@pytest.mark.untimed  # what perfctl does on the fault, not how fast
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


def _answers_flowing(ns: str) -> bool:
    """The shard in namespace ns is getting answers: a connection to the peer most of its
    connections go to (the server) has received data. They are opened before the shards'
    agreed start and sit idle until it: a cut then would begin before the load (and its
    records) do."""
    ss = subprocess.run(
        ["ip", "netns", "exec", ns, "ss", "-tinH", "state", "established"],
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    # one line per connection (recv-q, send-q, local, peer), then a tab-indented line of its info
    conns = [
        (head.split()[3], info)
        for head, info in zip(ss, ss[1:])
        if not head.startswith("\t") and info.startswith("\t")
    ]
    if not conns:
        return False
    peers = [peer for peer, _ in conns]
    server = max(set(peers), key=peers.count)
    return any("bytes_received:" in info for peer, info in conns if peer == server)


def _faketime_preload(tmp_path: Path) -> str:
    """LD_PRELOAD for a worker whose wall clock libfaketime fakes: libfaketime (Debian package
    faketime, which make setup installs) after a shim of our own (monotonic_sleep_shim.c,
    built here with gcc) that works around its bug with Python's time.sleep."""
    import setup_kit

    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    setup_kit.require(bool(found), "libfaketime", "faketime", "no libfaketime.so.1")
    shim = tmp_path / "monotonic_sleep_shim.so"
    built = subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-o", str(shim), str(SHIM_SOURCE), "-ldl"],
        capture_output=True,
        text=True,
    )
    setup_kit.require(built.returncode == 0, "gcc", "gcc", built.stderr[-500:])
    return f"{shim} {found[0]}"


def test_a_link_cut_and_a_clock_step_mid_trial_invalidate_that_trial_and_the_run_goes_on(
    write_yaml, tmp_path, start_perfctl, perfctl_env
):
    """During trial 1, h3 (a load-generator host) loses its link for 3 s (`ip link set down`
    in its namespace) and gets it back, and h2's wall clock steps by +50 ms (libfaketime
    preloaded into h2's worker only, and so into what it starts; its offset read from a file
    on every call; the monotonic clock untouched, as with a real step). No traceback, the run goes on (h3 is back within
    host_return), both trials are kept; trial 1 is invalid, its reasons naming h3 and how long
    its shard was silent (cluster/stalls.py) and h2's step; trial 2 (no fault: h2 stays at
    +50 ms throughout) has neither reason; nothing is left running, no namespace or link."""
    needs_root_and_ip()
    step_file = tmp_path / "h2-clock"
    step_file.write_text("+0\n")
    perfctl_env[WORKER_ENV_KNOB] = json.dumps(
        {
            "h2": {
                "LD_PRELOAD": _faketime_preload(tmp_path),
                "FAKETIME_TIMESTAMP_FILE": str(step_file),
                "FAKETIME_NO_CACHE": "1",
                "DONT_FAKE_MONOTONIC": "1",
            }
        }
    )
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
    assert poll_until(lambda: _answers_flowing(ns), timeout_s=30, interval_s=0.02)
    subprocess.run(["ip", "-n", ns, "link", "set", veth, "down"], check=True)
    t0 = time.monotonic()
    step_file.write_text("+0.050\n")
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
    faults, calm = trials.iloc[0], trials.iloc[1]
    assert not faults["valid"], faults["invalid_reasons"]
    found = re.search(r"host h3 was cut off for ([0-9.]+) s", faults["invalid_reasons"])
    assert found, faults["invalid_reasons"]
    # the shard is silent from its last answer before the cut to its first after it
    assert float(found.group(1)) >= cut_s - 0.1, (found.group(1), cut_s)
    assert "host h2's clock stepped by 50 ms during the trial" in faults["invalid_reasons"]
    assert "stepped" not in faults["invalid_reasons"].replace("host h2's clock stepped", "")
    assert abs(float(faults["clock_step_ms_max"]) - 50) < 5
    # (the calm trial's own validity is the busy test machine's: send lateness may void it)
    assert "cut off" not in calm["invalid_reasons"], calm["invalid_reasons"]
    assert "stepped" not in calm["invalid_reasons"], calm["invalid_reasons"]
    assert float(calm["clock_step_ms_max"]) < 5
    assert poll_until(lambda: _nothing_left(proc.pid, tree), timeout_s=30), (
        still_alive(tree),
        cluster_links(proc.pid),
    )


@pytest.mark.untimed  # what perfctl does on the fault, not how fast
def test_a_malformed_worker_env_knob_is_one_paragraph(
    write_yaml, tmp_path, perfctl, perfctl_env, assert_clean_error
):
    needs_root_and_ip()
    perfctl_env[WORKER_ENV_KNOB] = '{"h9": {"LD_PRELOAD": "x.so"}}'  # no such local host
    done = perfctl("run", experiment(write_yaml), "--out", str(tmp_path / "run"), "--no-plots")
    assert_clean_error(done, WORKER_ENV_KNOB, "h1, h2, h3", "Fix:")

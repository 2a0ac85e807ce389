"""kill -9 of perfctl mid-trial: nothing it started survives (servers, a wrapper's children, the
injection proxy, the load generator and its worker processes, the guardian), and --resume
finishes the run. With the guardian killed too, --resume finds the leftovers itself and says
so. Processes are found by a snapshot of perfctl's process tree taken mid-trial (pid and start
time) and by a /proc scan for the run dir in argv or working directory."""

from __future__ import annotations

import os
import signal

import pandas as pd
import pytest
from fault_kit import descendants, mark_of, poll_until, run_processes, still_alive, tiny

# not untimed (tests/conftest.py): a perfctl that starts reaps every crashed perfctl's leftovers on
# the host, so a test beside this one could reap the leftover the resume here must find and name
pytestmark = pytest.mark.usefixtures("live")

# every kind of process perfctl starts: a wrapper with a grandchild server, the proxy (a
# network delay), a load generator with two worker processes
EXPERIMENT = tiny("1s", extra="network: {delay: 1ms}\n", load="processes: 2").replace(
    "matrix: {server: [sh, py]}", "matrix: {server: [sh]}"
)


def _mid_trial(pid: int) -> dict:
    """perfctl's process tree once a trial is in full swing (wrapper and its grandchild server,
    proxy, load generator and both its workers), else {}."""
    tree = descendants(pid)
    text = "\n".join(tree.values())
    ready = text.count("-m loadgen") >= 3 and "http.server" in text and "perfctl-proxy" in text
    return tree if ready else {}


def _survivors(tree: dict, out, marks: set[str]) -> list[str]:
    return sorted(set(still_alive(tree)) | set(run_processes(out, marks)))


def test_kill9_mid_trial_leaves_no_process_and_resume_finishes(
    write_yaml, tmp_path, start_perfctl, perfctl
):
    out = tmp_path / "run"
    proc = start_perfctl("run", str(write_yaml(EXPERIMENT)), "--out", str(out), "--no-plots")
    marks = {mark_of(proc.pid)}
    tree = poll_until(lambda: _mid_trial(proc.pid), timeout_s=90)
    assert tree, f"no trial got under way: {descendants(proc.pid)}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)

    assert poll_until(lambda: not _survivors(tree, out, marks), timeout_s=10), (
        f"outlived perfctl's kill -9: {_survivors(tree, out, marks)}"
    )

    done = perfctl("run", "--resume", str(out), "--no-plots")
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(pd.read_csv(out / "trials.csv")["server"]) == ["sh"]
    assert not _survivors(tree, out, marks), "left after --resume"


def test_kill9_of_perfctl_and_its_guardian_then_resume_reaps_and_says_so(
    write_yaml, tmp_path, start_perfctl, perfctl
):
    out = tmp_path / "run"
    proc = start_perfctl("run", str(write_yaml(EXPERIMENT)), "--out", str(out), "--no-plots")
    marks = {mark_of(proc.pid)}
    tree = poll_until(lambda: _mid_trial(proc.pid), timeout_s=90)
    assert tree, f"no trial got under way: {descendants(proc.pid)}"
    guardians = [pid for (pid, _), text in tree.items() if "orchestrator.proc.guardian" in text]
    assert len(guardians) == 1, tree
    os.kill(guardians[0], signal.SIGKILL)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    # the direct children die with perfctl (PR_SET_PDEATHSIG); the wrapper's child does not
    assert poll_until(lambda: not any("sh -c" in p for p in still_alive(tree)), timeout_s=10)
    left = [p for p in still_alive(tree) if "http.server" in p]
    assert left, f"expected the wrapper's child to outlive both: {still_alive(tree)}"

    done = perfctl("run", "--resume", str(out), "--no-plots")
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if "left behind by a crashed" in line]
    assert len(said) == 1 and "http.server" in said[0], done.stdout
    assert not _survivors(tree, out, marks), "leftovers survived --resume"
    assert list(pd.read_csv(out / "trials.csv")["server"]) == ["sh"]

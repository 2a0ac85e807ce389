"""The server killed mid-trial (SIGKILL, from outside): that trial is recorded as invalid,
naming the death, the run goes on with the next trial, and nothing of the dead server is left
running, not even a child that left its process group (setsid) and so escaped the group kill."""

from __future__ import annotations

import os
import signal

import pandas as pd
import pytest
from fault_kit import (
    descendants,
    load_under_way,
    poll_until,
    run_processes,
    still_alive,
    tiny,
)

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]

EXPERIMENT = (
    tiny("1s", extra="repeats: 2\n")
    .replace("matrix: {server: [sh, py]}", "matrix: {server: [sh]}")
    .replace("sh -c 'python3", "sh -c 'setsid python3")
)


def _trial_processes(pid: int) -> dict:
    """perfctl's tree while a trial's load runs: {"wrapper": sh pid, "server": its escaped
    child's (pid, start), "loadgen": pid (told to start its load)}, or {}."""
    tree = descendants(pid)
    found = {}
    for (p, start), text in tree.items():
        if "sh -c" in text:
            found["wrapper"] = p
        elif "-m http.server" in text:
            found["server"] = (p, start)
        elif load_under_way(text):
            found["loadgen"] = p
    return found if len(found) == 3 else {}


def test_server_killed_mid_trial_is_an_invalid_trial_and_leaves_nothing_behind(
    write_yaml, tmp_path, start_perfctl
):
    out = tmp_path / "run"
    proc = start_perfctl("run", str(write_yaml(EXPERIMENT)), "--out", str(out), "--no-plots")
    first = poll_until(lambda: _trial_processes(proc.pid), timeout_s=60)
    assert first, f"the first trial never got under way: {descendants(proc.pid)}"
    tree = descendants(proc.pid)
    os.kill(first["wrapper"], signal.SIGKILL)  # what perfctl sees as the server dies
    second = poll_until(
        lambda: (lambda t: t if t and t["loadgen"] != first["loadgen"] else {})(
            _trial_processes(proc.pid)
        ),
        timeout_s=60,
    )
    assert second, "the second trial never got under way"
    assert not still_alive({first["server"]: "trial 1's http.server"}), (
        "the first trial's server outlived its trial (it left the wrapper's process group)"
    )
    stdout, stderr = proc.communicate(timeout=120)

    assert proc.returncode == 0, stdout + stderr
    assert "Traceback" not in stdout + stderr
    trials = pd.read_csv(out / "trials.csv").sort_values("trial")
    assert list(trials["trial"]) == [1, 2]
    assert not trials.iloc[0]["valid"]
    assert "server died during the trial" in trials.iloc[0]["invalid_reasons"]
    assert trials.iloc[1]["requests"] > 0
    assert poll_until(lambda: not still_alive(tree) and not run_processes(out), timeout_s=10), (
        f"left after the run: {still_alive(tree) + run_processes(out)}"
    )

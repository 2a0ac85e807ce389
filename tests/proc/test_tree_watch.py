"""The server's process tree is watched while a trial runs: a process of it that ends (even
behind a wrapper shell that lives on) is seen, with its command line."""

import os
import signal
import subprocess
import time

from orchestrator.proc.tree_watch import TreeWatch, tree_pids


def _spawn(script):
    return subprocess.Popen(["sh", "-c", script], start_new_session=True)


def _stop(shell):
    os.killpg(shell.pid, signal.SIGKILL)
    shell.wait()


def _observe_until(watch, deadline_s, done):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and not done():
        watch.observe(watch.tree(), time.perf_counter_ns())
        time.sleep(0.05)


def test_a_child_killed_behind_a_wrapper_shell_is_seen():
    shell = _spawn("sleep 30 & sleep 30 & sleep 0.4; kill $!; sleep 30")
    try:
        time.sleep(0.2)
        watch = TreeWatch(shell.pid)
        t0 = time.perf_counter_ns()
        watch.observe(watch.tree(), t0)
        assert len(watch.first) == 3  # two sleep 30s and the sleep 0.4
        _observe_until(watch, 5.0, lambda: len(watch.gone) >= 2)
        reasons = watch.reasons(t0)
        assert len(reasons) == 2, reasons
        assert any("(sleep 30)" in r for r in reasons) and any("(sleep 0.4)" in r for r in reasons)
        assert shell.poll() is None  # the wrapper lives on
    finally:
        _stop(shell)


def test_a_steady_tree_gives_no_reason():
    shell = _spawn("sleep 30 & sleep 30")
    try:
        time.sleep(0.2)
        watch = TreeWatch(shell.pid)
        for _ in range(4):
            watch.observe(watch.tree(), time.perf_counter_ns())
            time.sleep(0.05)
        assert len(tree_pids(shell.pid)) == 3 and watch.reasons(0) == []
    finally:
        _stop(shell)

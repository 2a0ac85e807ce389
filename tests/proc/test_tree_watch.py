"""The server's process tree is watched while a trial runs: a process of it that ends (even
behind a wrapper shell that lives on) is seen, with its command line.

The trees here move on events the test sends (a byte into a FIFO ends a child), and the test
waits for the tree it expects (every child exec'd) before it looks: no child's life is a race
against a sleep of the test."""

import os
import signal
import subprocess
import time

import psutil
import pytest
from signal_kit import wait_for

from orchestrator.proc.tree_watch import TreeWatch, tree_pids


def _spawn(script):
    return subprocess.Popen(["sh", "-c", script], start_new_session=True)


def _stop(shell):
    os.killpg(shell.pid, signal.SIGKILL)
    shell.wait()


def _commands(root_pid: int) -> list[str]:
    """The command lines of root_pid's descendants, sorted (a child not yet exec'd shows the
    shell's)."""
    out = []
    for pid in tree_pids(root_pid)[1:]:
        try:
            out.append(" ".join(psutil.Process(pid).cmdline()))
        except psutil.Error:
            pass
    return sorted(out)


def _wait_tree(shell, commands: list[str]) -> None:
    """Wait until shell's descendants are exactly these commands (every child exec'd)."""
    wait_for(
        lambda: _commands(shell.pid) == sorted(commands),
        f"the shell's children becoming {sorted(commands)}",
        reading=lambda: _commands(shell.pid),
    )


def _observe_until(watch, deadline_s, done):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and not done():
        watch.observe(watch.tree(), time.perf_counter_ns())
        time.sleep(0.05)


@pytest.mark.usefixtures("live")
def test_a_child_killed_behind_a_wrapper_shell_is_seen(tmp_path):
    fifo = tmp_path / "end"
    os.mkfifo(fifo)
    # `head` ends when the test writes a byte; the shell then kills the last sleep and lives on
    shell = _spawn(f"sleep 30 & sleep 30 & head -c 1 {fifo} >/dev/null; kill $!; sleep 30")
    try:
        _wait_tree(shell, ["sleep 30", "sleep 30", f"head -c 1 {fifo}"])
        watch = TreeWatch(shell.pid)
        t0 = time.perf_counter_ns()
        watch.observe(watch.tree(), t0)
        assert len(watch.first) == 3  # two sleep 30s and head
        with open(fifo, "wb") as w:
            w.write(b"x")
        _observe_until(watch, 10.0, lambda: len(watch.gone) >= 2)
        reasons = watch.reasons(t0)
        assert len(reasons) == 2, reasons
        assert any("(sleep 30)" in r for r in reasons), reasons
        assert any(f"(head -c 1 {fifo})" in r for r in reasons), reasons
        assert shell.poll() is None  # the wrapper lives on
    finally:
        _stop(shell)


@pytest.mark.usefixtures("live")
def test_a_steady_tree_gives_no_reason():
    shell = _spawn("sleep 30 & sleep 30")
    try:
        _wait_tree(shell, ["sleep 30", "sleep 30"])
        watch = TreeWatch(shell.pid)
        for _ in range(4):
            watch.observe(watch.tree(), time.perf_counter_ns())
            time.sleep(0.05)  # four looks over 0.2 s: the samples of a short trial
        assert len(watch.first) == 2 and len(tree_pids(shell.pid)) == 3
        assert watch.reasons(0) == []
    finally:
        _stop(shell)

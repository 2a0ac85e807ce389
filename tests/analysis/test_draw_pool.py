"""analysis/draw_pool.py: a report's figures are drawn in forked processes, in the callers'
order, and never outlive perfctl (the unit tier's PERFCTL_NO_SPAWN draws them in turn: every
unit test of the report covers that path)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from signal_kit import wait_for

from orchestrator.analysis import draw_pool

pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]

ROOT = Path(__file__).resolve().parents[2]


def _two_cpus() -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("draw_pool draws in turn on one CPU")


def test_figures_are_drawn_at_once_in_other_processes_and_come_back_in_order(monkeypatch):
    _two_cpus()
    monkeypatch.delenv("PERFCTL_NO_SPAWN", raising=False)
    both = multiprocessing.get_context("fork").Barrier(2)

    def together(k: int) -> tuple[int, int]:
        both.wait(timeout=20)  # returns only while the other call runs too
        return k, os.getpid()

    got = draw_pool.draw_all([lambda: together(0), lambda: together(1)])
    assert [k for k, _ in got] == [0, 1]
    pids = {pid for _, pid in got}
    assert os.getpid() not in pids and len(pids) == 2, pids
    calls = [lambda k=k: k for k in range(5)]
    assert draw_pool.draw_all(calls, cost=[1, 5, 2, 4, 3]) == list(range(5))


def test_under_no_spawn_or_beside_another_thread_they_are_drawn_here(monkeypatch):
    _two_cpus()
    monkeypatch.setenv("PERFCTL_NO_SPAWN", "this test")
    assert set(draw_pool.draw_all([os.getpid, os.getpid])) == {os.getpid()}
    monkeypatch.delenv("PERFCTL_NO_SPAWN")
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert set(draw_pool.draw_all([os.getpid, os.getpid])) == {os.getpid()}
    finally:
        stop.set()
        other.join()


CHILD = """
import os, sys, time
from orchestrator.analysis import draw_pool
def slow(k):
    open(os.path.join(sys.argv[1], f"{k}.pid"), "w").write(str(os.getpid()))
    time.sleep(60)
draw_pool.draw_all([lambda: slow(0), lambda: slow(1)])
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_drawing_process_dies_with_perfctl_on_kill_9(tmp_path):
    _two_cpus()
    env = {k: v for k, v in os.environ.items() if k != "PERFCTL_NO_SPAWN"}
    env["PYTHONPATH"] = str(ROOT)
    parent = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], env=env)
    try:
        pids = wait_for(
            lambda: (
                [int(p.read_text()) for p in tmp_path.glob("*.pid") if p.read_text()]
                if len(list(tmp_path.glob("*.pid"))) == 2
                else None
            ),
            "both drawing processes started",
            timeout_s=30,
        )
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_for(
            lambda: not any(_alive(p) for p in pids) or None,
            "the drawing processes gone after their parent's kill -9",
            timeout_s=10,
            reading=lambda: {p: _alive(p) for p in pids},
        )
    finally:
        parent.kill()
        parent.wait(10)
        for p in tmp_path.glob("*.pid"):
            try:
                os.kill(int(p.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass

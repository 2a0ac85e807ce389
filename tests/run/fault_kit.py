"""What the fault tests share: tiny experiments, and (from benchmarks/_common.py, shared with
benchmarks/soak.py) the /proc scan that finds a run's processes and a bounded poll."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._common import (
    descendants,
    mark_of,
    perfctl_argv,
    poll_until,  # noqa: E402
    run_processes,
    still_alive,
)
from orchestrator.proc import procfs  # noqa: E402

__all__ = [
    "ROOT",
    "descendants",
    "mark_of",
    "perfctl_argv",
    "poll_until",
    "load_under_way",
    "run_processes",
    "still_alive",
    "tiny",
]


def load_under_way(text: str) -> bool:
    """Whether a descendants() entry ("pid argv", cut short) is a load generator whose load
    has begun. perfctl starts the http one --when-told while the server starts, and tells it
    `go` once the trial's spec.json, its next-to-last argument, is written
    (orchestrator/run/trial.py)."""
    if "-m loadgen" not in text:
        return False
    args = procfs.argv(int(text.split()[0]))
    return bool(args) and ("--when-told" not in args or Path(args[-2]).is_file())


# the Python async server and a command server whose real server is a grandchild of perfctl
TINY = """
name: faults
servers:
  py: {impl: python, model: async}
  sh: {cmd: "sh -c 'python3 -m http.server {port} --bind 127.0.0.1 & wait'", ready: {http: /}}
workload: {path: /, params: {}}
load: {mode: closed, connections: 2, duration: DURATION, warmup: 0.2s}
matrix: {server: [sh, py]}
"""


def tiny(duration: str = "1s", extra: str = "", load: str = "") -> str:
    """TINY with this measured duration, `extra` YAML lines appended and `load` keys added to
    the load block (e.g. load="processes: 2")."""
    text = TINY.replace("DURATION", duration)
    if load:
        text = text.replace("warmup: 0.2s}", f"warmup: 0.2s, {load}}}")
    return text + extra

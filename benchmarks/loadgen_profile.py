"""Where a perfctl load's time goes (loadgen_vs_wrk.py --profile): the load run under py-spy,
installed on demand into .venv-profile, and its raw profile read back as the load generator's
share of samples by leaf function and its idle share.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _common import ROOT, perfctl_argv

PROFILE_VENV = ROOT / ".venv-profile"
PY_SPY = "py-spy==0.4.3"


def py_spy() -> str:
    exe = PROFILE_VENV / "bin" / "py-spy"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PROFILE_VENV)], check=True)
        subprocess.run(
            [str(PROFILE_VENV / "bin" / "python"), "-m", "pip", "install", "-q", PY_SPY], check=True
        )
    return str(exe)


def profiled_load(url: str, args: list[str], out: Path, timeout_s: float) -> dict:
    """`perfctl load url *args --json` under py-spy (200 Hz, idle time included), its
    collapsed stacks written to `out`; the load's JSON result."""
    # --nonblocking: py-spy reads the process's memory without stopping it; by default it
    # pauses the process for every sample, which costs the round a good part of its rate
    argv = [
        py_spy(),
        "record",
        "--nonblocking",
        "--subprocesses",
        "--idle",
        "-r",
        "200",
        "-f",
        "raw",
        "-o",
        str(out),
        "--",
        *perfctl_argv("load", url, *args, "--json"),
    ]
    p = subprocess.run(
        argv,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    line = next((x for x in reversed(p.stdout.splitlines()) if x.startswith("{")), None)
    if p.returncode != 0 or line is None:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(line)


def profile_summary(path: Path, top: int = 15) -> list[str]:
    """Lines describing a py-spy raw profile of a perfctl load: the load generator's samples
    only (its stacks run through loadgen's phase and Worker), by leaf function, and the idle
    share."""
    leaf: dict[str, int] = {}
    total = idle = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "loadgen" not in stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        name = frames[-1]
        if name.startswith("generate (") and "phase.py" in name:
            idle += n  # inside uvloop's C loop: waiting in epoll, or libuv's own work
        leaf[name] = leaf.get(name, 0) + n
    if not total:
        return ["  (no load-generator samples in the profile)"]
    out = [
        f"  {total:,} samples of the load generator (all its threads); inside uvloop's C "
        f"loop with no Python callback running (epoll wait, libuv's own work): "
        f"{100 * idle / total:.1f}%"
    ]
    for name, n in sorted(leaf.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"  {100 * n / total:5.1f}%  {name}")
    return out

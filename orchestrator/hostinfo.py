"""What the run happened on: CPUs, kernel, tool versions, git commit (recorded in run.json)."""
from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path

from . import __version__, bundled


def _first_line(argv: list[str]) -> str | None:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = (p.stdout or p.stderr).strip().splitlines()
    return out[0] if out else None


def git_commit(root: Path = bundled.ROOT) -> str | None:
    line = _first_line(["git", "-C", str(root), "rev-parse", "HEAD"])
    return line if line and re.fullmatch(r"[0-9a-f]{40}", line) else None


def host_info() -> dict:
    uname = platform.uname()
    info = {
        "perfctl_version": __version__,
        "git_commit": git_commit(),
        "hostname": uname.node,
        "kernel": f"{uname.system} {uname.release}",
        "machine": uname.machine,
        "cpu_count": os.cpu_count(),
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "gcc": _first_line(["gcc", "--version"]),
        "java": [f"{j.version} {j.home}" for j in bundled.find_jdks()],
    }
    try:
        from .netem.doctor import host_settings  # the network issue's host settings
        info["settings"] = host_settings()
    except Exception:  # noqa: BLE001 - host settings are informative only
        pass
    return info

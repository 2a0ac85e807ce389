"""What the run happened on: CPUs, kernel, tool versions, git commit (recorded in run.json)."""

from __future__ import annotations

import os
import platform
import re
import resource
import subprocess
from pathlib import Path

from .. import __version__
from ..proc.build import ROOT, find_jdks


def _first_line(argv: list[str]) -> str | None:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = (p.stdout or p.stderr).strip().splitlines()
    return out[0] if out else None


SETTING_NOTES = {
    "net.core.somaxconn": "listen() backlog cap",
    "net.ipv4.ip_local_port_range": "ephemeral ports for client connections",
    "net.ipv4.tcp_tw_reuse": "reuse of TIME_WAIT ports for new connections",
    "net.ipv4.tcp_fin_timeout": "TIME_WAIT/FIN_WAIT2 duration",
    "net.ipv4.tcp_max_syn_backlog": "SYN queue length",
    "net.ipv4.tcp_congestion_control": "congestion control algorithm",
    "net.core.default_qdisc": "default qdisc",
}
_HINTS = {
    "net.core.somaxconn": lambda v: int(v) < 1024 and "low: backlogs above it are silently capped",
    "net.ipv4.tcp_tw_reuse": lambda v: (
        v.strip() == "0" and "0: short connections may run out of ports"
    ),
    "net.ipv4.ip_local_port_range": lambda v: (
        (int(v.split()[1]) - int(v.split()[0])) < 20000
        and "narrow: many short connections may exhaust it"
    ),
}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def host_settings() -> dict:
    """Host facts that change measured results; plain JSON-able values (None = unreadable)."""
    out: dict = {}
    for key in SETTING_NOTES:
        val = _read("/proc/sys/" + key.replace(".", "/"))
        out[key] = " ".join(val.split()) if val is not None else None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    out["RLIMIT_NOFILE"] = {"soft": soft, "hard": hard}
    out["cpu_count"] = os.cpu_count()
    try:
        out["cpu_affinity"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        out["cpu_affinity"] = None
    gov = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    out["cpu_governor"] = gov  # None: no cpufreq (typical in VMs/containers)
    out["cpu_model"] = next(
        (
            line.split(":", 1)[1].strip()
            for line in (_read("/proc/cpuinfo") or "").splitlines()
            if line.startswith("model name")
        ),
        None,
    )
    out["kernel"] = platform.release()
    out["loadavg"] = _read("/proc/loadavg")
    return out


def git_commit(root: Path = ROOT) -> str | None:
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
        "java": [f"{j.version} {j.home}" for j in find_jdks()],
    }
    info["settings"] = host_settings()
    return info


def setting_hint(key: str, value) -> str | None:
    """A warning about one host_settings() value that can skew results, or None."""
    if key == "cpu_governor":
        return (
            "not 'performance': clock speed varies with load"
            if value not in (None, "performance")
            else None
        )
    if key == "RLIMIT_NOFILE" and isinstance(value, dict):
        return "soft limit low for thousands of connections" if value["soft"] < 10000 else None
    if key in _HINTS and value:
        try:
            return _HINTS[key](value) or None
        except (ValueError, IndexError):
            return None
    return None

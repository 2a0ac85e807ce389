"""`perfctl doctor`: which network backends work here, and the host settings that move results.

`host_settings()` returns a plain dict for run.json; `doctor()` is a Typer command function
(the lead mounts it: app.command("doctor")(doctor)).
"""
from __future__ import annotations

import json
import os
import platform
import resource
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from .injectors import BACKENDS, backend_status

_SYSCTLS = {
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
    "net.ipv4.tcp_tw_reuse": lambda v: v.strip() == "0" and "0: short connections may run out of ports",
    "net.ipv4.ip_local_port_range": lambda v: (int(v.split()[1]) - int(v.split()[0])) < 20000
    and "narrow: many short connections may exhaust it",
}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def host_settings() -> dict:
    """Host facts that change measured results; plain JSON-able values (None = unreadable)."""
    out: dict = {}
    for key in _SYSCTLS:
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
    out["cpu_model"] = next((line.split(":", 1)[1].strip() for line in
                             (_read("/proc/cpuinfo") or "").splitlines()
                             if line.startswith("model name")), None)
    out["kernel"] = platform.release()
    out["loadavg"] = _read("/proc/loadavg")
    return out


def backends_report() -> list[dict]:
    """[{backend, works, reason}] for proxy, netem, tbf."""
    return [{"backend": b, "works": ok, "reason": why}
            for b in BACKENDS for ok, why in [backend_status(b)]]


def doctor(json_out: bool = typer.Option(False, "--json", help="print JSON instead of tables")) -> None:
    """Show which network-emulation backends work on this host and why not, plus the host
    settings that change results."""
    backends = backends_report()
    settings = host_settings()
    if json_out:
        typer.echo(json.dumps({"backends": backends, "host": settings}, indent=2))
        return
    console = Console()
    t = Table(title="network emulation backends")
    t.add_column("backend")
    t.add_column("works")
    t.add_column("why / why not")
    for b in backends:
        t.add_row(b["backend"], "[green]yes[/]" if b["works"] else "[red]no[/]", b["reason"])
    auto = "netem" if backends[1]["works"] else "proxy"
    t.caption = f"backend: auto -> {auto}"
    console.print(t)
    h = Table(title="host settings that change results")
    h.add_column("setting")
    h.add_column("value")
    h.add_column("note")
    for key, val in settings.items():
        note = _SYSCTLS.get(key, "")
        hint = None
        if key in _HINTS and val:
            try:
                hint = _HINTS[key](val)
            except (ValueError, IndexError):
                hint = None
        if key == "cpu_governor" and val is None:
            note = "not readable (no cpufreq: VM or container)"
        elif key == "cpu_governor" and val != "performance":
            hint = "not 'performance': clock speed varies with load"
        if key == "RLIMIT_NOFILE" and isinstance(val, dict):
            if val["soft"] < 10000:
                hint = "soft limit low for thousands of connections"
            val = f"{val['soft']} (hard {val['hard']})"
        h.add_row(key, "-" if val is None else str(val),
                  f"[yellow]{hint}[/]" if hint else note)
    console.print(h)

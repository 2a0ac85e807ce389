"""`perfctl doctor`: which network backends work here, and the host settings that move results."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from .console import console


def doctor(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """What this host can do: injection backends, and host settings that change results."""
    from ..measure.hostinfo import SETTING_NOTES, host_settings, setting_hint  # doctor's own
    from ..netem.injectors import backends_report  # the network models: doctor's own work

    backends = backends_report()
    settings = host_settings()
    if json_out:
        typer.echo(json.dumps({"backends": backends, "host": settings}, indent=2))
        return
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
        note = SETTING_NOTES.get(key, "")
        if key == "cpu_governor" and val is None:
            note = "not readable (no cpufreq: VM or container)"
        hint = setting_hint(key, val)
        if key == "RLIMIT_NOFILE" and isinstance(val, dict):
            val = f"{val['soft']} (hard {val['hard']})"
        h.add_row(key, "-" if val is None else str(val), f"[yellow]{hint}[/]" if hint else note)
    console.print(h)

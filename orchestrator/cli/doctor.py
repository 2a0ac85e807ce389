"""`perfctl doctor`: which network backends work here, the host settings that move results, and
the host's own figures measured for ~2 s (timer, wake-up, steal, loopback: measure/hostcheck.py)
with what they limit. `--no-measure` leaves the measurement out (the static checks take well
under a second)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from .console import console


def doctor(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    measure: Annotated[
        bool,
        typer.Option(
            "--measure/--no-measure",
            help="Measure the host's timer, wake-up, steal and loopback round trip (~2 s).",
        ),
    ] = True,
    seconds: Annotated[
        float, typer.Option("--seconds", min=0.2, max=60, help="How long to measure the host.")
    ] = 2.0,
) -> None:
    """What this host can do: injection backends, host settings that change results, and the
    host's timer, wake-up, steal and loopback figures with what they limit."""
    from ..measure import hostcheck  # doctor's own work (standard library only)
    from ..measure.hostinfo import SETTING_NOTES, host_settings, setting_hint  # doctor's own
    from ..netem.injectors import backends_report  # the network models: doctor's own work

    backends = backends_report()
    settings = host_settings()
    check = hostcheck.measure(seconds) if measure else None
    sends = hostcheck.send_precision(seconds * 1.5) if measure else None
    if json_out:
        out = {"backends": backends, "host": settings}
        if check is not None:
            out["host_check"] = {**check.as_dict(), "verdict": hostcheck.verdict(check)}
            out["send_precision"] = {"rate": hostcheck.SEND_RATE, "waits": sends}
        typer.echo(json.dumps(out, indent=2))
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
    if check is None:
        return
    m = Table(title=f"this host, measured for {check.duration_s:.1f} s")
    m.add_column("figure")
    m.add_column("p50", justify="right")
    m.add_column("p99", justify="right")
    m.add_column("what it is")
    m.add_row(
        "timer",
        f"{check.timer_p50_us:.0f} us",
        f"{check.timer_p99_us:.0f} us",
        "how late time.sleep(1 ms) returns: an open-loop send's lateness before the "
        "load generator's early wake-up",
    )
    m.add_row(
        "wake-up",
        f"{check.wake_p50_us:.0f} us",
        f"{check.wake_p99_us:.0f} us",
        "one thread waking another through a pipe",
    )
    m.add_row(
        "loopback RTT",
        f"{check.loopback_rtt_p50_us:.0f} us",
        f"{check.loopback_rtt_p99_us:.0f} us",
        "a 1-byte TCP ping-pong on 127.0.0.1",
    )
    m.add_row("CPU steal", f"{check.steal_pct:.1f}%", "", "taken by the hypervisor meanwhile")
    console.print(m)
    if sends:
        w = Table(
            title=f"how late a send can leave here: Poisson at {hostcheck.SEND_RATE:g}/s, "
            "against the intended instant"
        )
        for col in ("wait", "p50", "p99", "p99.9", "CPU"):
            w.add_column(col, justify="left" if col == "wait" else "right")
        words = {
            "sleep": "sleep to the instant",
            "sleep+spin": f"sleep to {hostcheck.SPIN_LEAD_S * 1e3:g} ms before, then spin",
            "spin": "spin (perfctl's generator on a CPU of its own)",
        }
        for r in sends:
            w.add_row(
                words[r["wait"]],
                f"{r['p50_us']:.1f} us",
                f"{r['p99_us']:.1f} us",
                f"{r['p999_us']:.0f} us",
                f"{r['cpu_pct']:.0f}%",
            )
        console.print(w)
    limits = hostcheck.verdict(check)
    for line in limits:
        console.print(f"[yellow]{line}[/]", highlight=False)
    if not limits:
        console.print("nothing measured here limits a trial's precision")

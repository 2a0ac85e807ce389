"""What if a cell ran with other threads, cores, injected delay, rate or users? The fitted
model answers: the cell's station with its service estimate, the configuration changed
(`perfctl model RUN --what-if threads=8`).

Changes (KEY=VALUE, several at once):
- ``threads=N``: the server's worker threads (server_threads);
- ``cores=N``: the CPUs the server may use (server_cores);
- ``rate=R``: the open-loop arrival rate [req/s] (target_rate; closed cells keep theirs);
- ``users=N``: the closed-loop users (connections; open cells keep theirs);
- ``delay=D``: the injected one-way delay (`10ms`, `0.01s`, or a number of ms), as the
  experiment's network `delay:`. The overhead (time outside the server) changes by the round
  trips a request makes times the change in round trip (2 D): one round trip per request
  with keep-alive, two with a new connection per request (the connect's too).

What stays: the service time S and its SCV, the CPU share of S, the dispatch. So a what-if is
as good as the fitted model on the measured cell (its verdict) and as the assumption that S
does not depend on the change (more threads on the same cores do not slow each request's
CPU work down: true for the models here, which share cores explicitly).
"""

from __future__ import annotations

import dataclasses
import math
import re

import pandas as pd

from .parameters import ServiceEstimate, as_float

__all__ = ["KEYS", "parse", "apply"]

KEYS = ("threads", "cores", "rate", "users", "delay")
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)?\s*$")


def _delay_ms(text: str) -> float:
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"delay={text!r} is not a duration: write delay=10ms (or 0.01s)")
    value, unit = float(m.group(1)), m.group(2) or "ms"
    return value * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def parse(assignments: list[str]) -> dict[str, float]:
    """["threads=8", "delay=10ms"] -> {"threads": 8.0, "delay": 10.0 (ms)}. Raises ValueError
    naming the assignment and the fix."""
    out: dict[str, float] = {}
    for a in assignments:
        key, sep, value = a.partition("=")
        key = key.strip()
        if not sep or key not in KEYS:
            raise ValueError(
                f"--what-if {a!r}: write KEY=VALUE with KEY one of {', '.join(KEYS)} "
                "(e.g. --what-if threads=8)"
            )
        if key == "delay":
            out[key] = _delay_ms(value)
            continue
        try:
            v = float(value)
        except ValueError:
            raise ValueError(f"--what-if {a!r}: {key} must be a number") from None
        if not (v > 0 and math.isfinite(v)) or (key != "rate" and v != int(v)):
            raise ValueError(
                f"--what-if {a!r}: {key} must be a positive "
                + ("number" if key == "rate" else "integer")
            )
        out[key] = v
    return out


def apply(
    row, service: ServiceEstimate, changes: dict[str, float]
) -> tuple[pd.Series, ServiceEstimate, list[str]]:
    """The row and service estimate with the changes made, and what was left unchanged and
    why (a rate for a closed cell, users for an open one)."""
    r = (pd.Series(row) if isinstance(row, dict) else row).copy()
    svc = service
    notes = []
    mode = str(r.get("load_mode", "open"))
    if "threads" in changes:
        r["server_threads"] = changes["threads"]
        model = str(r.get("concurrency_model", "") or "")
        if model in ("thread", "virtual", "single", "async"):
            notes.append(f"threads: the {model} model does not use them")
    if "cores" in changes:
        r["server_cores"] = changes["cores"]
    if "rate" in changes:
        if mode == "closed":
            notes.append("rate: a closed cell's rate is its users' (unchanged)")
        else:
            r["target_rate"] = changes["rate"]
            r["requests"] = math.nan  # no measured count behind the new rate
    if "users" in changes:
        if mode == "closed":
            r["connections"] = changes["users"]
        else:
            notes.append("users: an open cell's load is its rate (unchanged)")
    if "delay" in changes:
        old = as_float(r.get("rtt_measured_ms"))
        if not old >= 0:
            old = max(as_float(r.get("rtt_expected_ms"), 0.0), 0.0)
        new = 2.0 * changes["delay"]
        keep = str(r.get("keepalive", True)).lower() not in ("false", "0")
        trips = 1.0 if keep else 2.0
        shift_s = trips * (new - old) / 1e3
        svc = dataclasses.replace(
            service,
            overhead_s=max(service.overhead_s + shift_s, 0.0),
            overhead_mean_s=max(service.overhead_for_mean_s + shift_s, 0.0),
        )
        r["rtt_measured_ms"] = r["rtt_expected_ms"] = new
    return r, svc, notes

"""`warmup: auto` for perfctl's HTTP generator: load the server in short unrecorded slices until
its latency has settled, then start the phase (with its own short warm-up).

A server on a JIT runtime (a JVM) compiles its hot code under the first seconds of load, and
its latency falls while it does; a fixed warm-up is either too short for it (the window then
measures the compiler) or wasted on a server that needs none. Here the generator sends the
phase's own load (its mode, rate, connections and requests; closed load for burst and ramp)
in slices of SLICE_S, each a fresh seed, and reads each slice's median latency. It is steady
when the last STEADY_SLICES medians lie within STEADY_SPREAD of one another (no trend left
bigger than that), or when warmup_auto_max_s has passed (then it says it did not settle).
Nothing of a slice is recorded; the summary gets `warmup_auto_s` (what it took),
`warmup_auto_settled` and `warmup_auto_slices`. The RMI driver does the same in Java, watching
its own JIT's compile time as well (servers/java/src/perfctl/driver/RmiDriver.java).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from .modes import mode_for
from .phase import generate
from .records import OK

SLICE_S = 0.5
STEADY_SLICES = 4
STEADY_SPREAD = 0.15  # the last slices' medians: max / min at most 1 + this


def settled(p50s: list[float]) -> bool:
    """Whether the last STEADY_SLICES slice medians show no change beyond STEADY_SPREAD."""
    last = [p for p in p50s[-STEADY_SLICES:] if p == p and p > 0]
    return len(last) == STEADY_SLICES and max(last) <= (1 + STEADY_SPREAD) * min(last)


def slice_p50_ms(rec) -> float:
    done, intended, err = [], [], []
    for c in rec.chunks():
        a, n = c.arrays, c.n
        done.append(a["done_ns"][:n])
        intended.append(a["intended_ns"][:n])
        err.append(a["error"][:n])
    if not done:
        return float("nan")
    d, i, e = (np.concatenate(x) for x in (done, intended, err))
    ok = (e == OK) & (d > 0)
    return float(np.median(d[ok] - i[ok]) / 1e6) if ok.any() else float("nan")


def prewarm(spec) -> dict:
    """Warm the server up until steady (module docstring); {} when the spec does not ask."""
    if spec.warmup_auto_max_s <= 0:
        return {}
    mode = spec.mode if spec.mode in ("closed", "open") else "closed"
    t0 = time.perf_counter()
    p50s: list[float] = []
    while True:
        part = dataclasses.replace(
            spec,
            mode=mode,
            duration_s=SLICE_S,
            warmup_s=0.0,
            start_at_ns=0,
            processes=1,
            records="none",
            seed=spec.seed + 7919 * (len(p50s) + 1),
        )
        rec, _ = generate(mode_for(part))
        p50s.append(slice_p50_ms(rec))
        elapsed = time.perf_counter() - t0
        if settled(p50s) or elapsed >= spec.warmup_auto_max_s:
            break
    return {
        "warmup_auto_s": elapsed,
        "warmup_auto_settled": settled(p50s),
        "warmup_auto_slices": len(p50s),
        "warmup_auto_p50_ms": p50s[-STEADY_SLICES:],
    }

"""One load phase in this process: `generate(mode)` pins the CPUs, lifts the descriptor
limit, runs a Worker (worker.py) on a fresh uvloop loop to the end of the phase and returns
(Records, summary dict) with the process's CPU and GC readings; parallel.generate_to_dir writes
the files.
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import time

import uvloop

from .records import Records
from .worker import ModeHooks, Worker

_now = time.perf_counter_ns


def pin(cpus: tuple[int, ...]) -> None:
    if cpus:
        try:
            os.sched_setaffinity(0, set(cpus))
        except OSError:
            pass


def raise_fd_limit() -> None:
    """Burst and many-connection phases need descriptors: lift the soft limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def generate(mode: ModeHooks, sink=None, seq_base: int = 0, live=None) -> tuple[Records, dict]:
    """Generate one mode's load phase to completion in this process on a fresh uvloop loop.

    sink: where complete chunks of records are spilled (None: all kept in memory).
    seq_base: where this process's {seq} numbers start.
    live: a live.LiveStats that appends per-second lines from a 1 s timer (None: none).
    """
    spec = mode.spec
    pin(spec.cpus)
    raise_fd_limit()
    loop = uvloop.new_event_loop()
    gc_pauses: list[float] = []
    gc_t0 = [0.0]

    def gc_cb(phase: str, info: dict) -> None:
        if phase == "start":
            gc_t0[0] = time.perf_counter()
        else:
            gc_pauses.append((time.perf_counter() - gc_t0[0]) * 1e3)

    gc.collect()
    gc.freeze()
    gc.callbacks.append(gc_cb)
    ru0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    worker = None
    try:
        worker = Worker(mode, loop, sink, seq_base)
        if live is not None:
            live.attach(worker)
        wait_s = max(0.0, (spec.start_at_ns - _now()) / 1e9) if spec.start_at_ns else 0.0
        hard_limit = wait_s + spec.warmup_s + spec.window_s + spec.timeout_s + 30.0
        summary = loop.run_until_complete(asyncio.wait_for(worker.generate(), hard_limit))
        pending = asyncio.all_tasks(loop)  # reconnects still waiting when the phase ended
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.wait(pending))
        summary["closed_out"] = worker.close_out()
    finally:
        gc.callbacks.remove(gc_cb)
        gc.unfreeze()
        if worker is not None and worker.timer is not None:
            worker.timer.close()
        loop.close()
    ru1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - wall0
    cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    summary.update(
        {
            "loadgen_cpu_pct": 100.0 * cpu_s / wall if wall > 0 else 0.0,
            "gc_pauses": len(gc_pauses),
            "gc_pause_max_ms": max(gc_pauses, default=0.0),
            "gc_pause_total_ms": sum(gc_pauses),
            "requests_recorded": worker.rec.total,
        }
    )
    return worker.rec, summary

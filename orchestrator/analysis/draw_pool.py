"""Draw a run's figures on every CPU: matplotlib renders one figure on one core, and a report
draws six (the timeline of 22 cells alone takes about 4 s of a report's 11), so each figure
is drawn and saved in a forked process of its own, two at a time on a 2-CPU host.

Only where forking is safe and allowed: not under PERFCTL_NO_SPAWN, in a process with one
thread (the CLI; a notebook's kernel or an API caller with threads draws in turn, as
before), on Linux's fork, with more than one figure and more than one CPU. The figures' data
are read in the parent before the fork, so what the children draw is what the parent would
have; a drawing process dies with perfctl, even on kill -9."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from ..proc.process import NO_SPAWN_ENV, die_with_parent

T = TypeVar("T")

# the calls of the pool in flight: the forked children inherit them (a lambda cannot be pickled)
_CALLS: Sequence[Callable[[], object]] = ()


def _call(i: int) -> object:
    return _CALLS[i]()


def _workers(n: int) -> int:
    """How many processes to draw n figures with: 1 where forking is not safe or gains
    nothing."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    if n < 2 or cpus < 2 or threading.active_count() > 1 or os.environ.get(NO_SPAWN_ENV):
        return 1
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return min(n, cpus)


def draw_all(calls: Sequence[Callable[[], T]], cost: Sequence[float] | None = None) -> list[T]:
    """[call() for call in calls], in that order, drawn in forked processes where that is safe
    (see the module). cost: each call's expected time; the costliest start first, so the
    longest figure does not start last."""
    global _CALLS
    workers = _workers(len(calls))
    if workers == 1:
        return [c() for c in calls]
    order = sorted(range(len(calls)), key=lambda i: -(cost[i] if cost else 0.0))
    _CALLS = calls
    try:
        ctx = multiprocessing.get_context("fork")
        # a drawing process dies with perfctl, even on kill -9 (PR_SET_PDEATHSIG)
        die = die_with_parent(os.getpid())
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=die) as pool:
            done = dict(zip(order, pool.map(_call, order)))
    except BrokenProcessPool:  # a child that died (out of memory): draw them here, in turn
        return [c() for c in calls]
    finally:
        _CALLS = ()
    return [done[i] for i in range(len(calls))]

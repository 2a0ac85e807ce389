"""Runs the searches of a plan with `search:`: each cell's probes through the same per-trial
function as any run (run/trial.py execute_trial), each probe's row appended to trials.csv as
it finishes, and RUN_DIR/capacity.json rewritten after every probe.

Cells take turns (`order: interleaved`, the default: one probe of every cell, then the next
of every cell, so a drift of the host spreads over all cells; `random` shuffles each turn;
`sequential` finishes a cell before the next). A cell's next probe depends only on its probes
so far, so `perfctl run --resume` replays the recorded probes through the same decisions and
runs only what is missing.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from ..errors import PerfctlError
from ..experiment.plan import Plan
from ..proc import interrupt
from ..results import TrialTable, trial_dir
from ..results.schema import write_capacity
from ..run.order import order_seed
from ..run.services import ServiceSet
from ..run.trial import execute_trial
from .capacity_entry import cell_entry
from .cell_search import CellSearch
from .readings import read_trial


def _recorded(table: TrialTable) -> dict[tuple[str, int], dict]:
    return {(r["cell_id"], int(r["trial"])): r for r in table.rows}


def capacity_doc(plan: Plan, searches: list[CellSearch], walls: dict[str, float]) -> dict:
    """The contents of capacity.json."""
    s = plan.experiment.search
    return {
        "experiment": plan.experiment.name,
        "search": {
            "slo": {
                "stat": s.slo.stat,
                "latency_ms": s.slo.latency_ms,
                "error_rate": s.slo.error_rate,
            },
            "precision": s.precision,
            "confidence": s.confidence,
            "max_trials": s.max_trials,
            "include_noisy": s.include_noisy,
            "curve_points": plan.curve_points,
        },
        "axes": plan.axes,
        "cells": [cell_entry(c, walls.get(c.cell.cell_id, 0.0)) for c in searches],
    }


def execute_search(
    plan: Plan, run_dir: Path, on_trial=None, on_start=None, on_second=None
) -> list[CellSearch]:
    """Search every cell (module docstring). Callbacks as run/execute.py execute_plan's.
    Raises PerfctlError when a cell's SLO cannot be met at any load, or the load generator
    cannot drive the load the search needs; every probe run so far is kept, and capacity.json
    says where each cell stood."""
    table = TrialTable(run_dir)
    recorded = _recorded(table)
    searches = [
        CellSearch(c, plan.experiment.search, plan.source, curve_points=plan.curve_points)
        for c in plan.cells
    ]
    walls: dict[str, float] = {}
    services = ServiceSet(plan.services, plan.source)
    rng = random.Random(order_seed(plan))
    try:
        active = list(searches)
        while active:
            turn = active[:1] if plan.order == "sequential" else list(active)
            if plan.order == "random":
                rng.shuffle(turn)
            for search in turn:
                spec = search.next_spec()
                if spec is None:
                    active.remove(search)
                    continue
                cell = search.probe_cell(spec)
                k = search.trials + 1
                row = recorded.get((cell.cell_id, k))
                fresh = row is None
                if fresh:
                    if on_start:
                        on_start(cell, k)
                    services.start("run", run_dir)
                    t0 = time.monotonic()
                    kw = {} if on_second is None else {"on_second": on_second}
                    row = execute_trial(plan, cell, k, run_dir, services, **kw)
                    row["trial_wall_s"] = time.monotonic() - t0
                elif row.get("search_role") != spec.role or float(
                    row.get("search_level", -1)
                ) != float(spec.level):
                    raise PerfctlError(
                        f"{run_dir}: trial {k} of cell {cell.label} was a {row.get('search_role')} "
                        f"probe at {row.get('search_level')}, but the search now asks for a "
                        f"{spec.role} probe at {spec.level:g}: the run was made by another "
                        "version of the search. Fix: start a new run (perfctl run FILE)."
                    )
                readings = read_trial(
                    trial_dir(run_dir, cell.cell_id, k), row, plan.experiment.search.slo
                )
                search.record(k, spec, row, readings)
                walls[cell.cell_id] = walls.get(cell.cell_id, 0.0) + float(
                    row.get("trial_wall_s", 0.0) or 0.0
                )
                if fresh:
                    table.append(row)
                    if on_trial:
                        on_trial(row)
                write_capacity(run_dir, capacity_doc(plan, searches, walls))
                if search.failure is not None:
                    raise search.failure
                interrupt.check()  # a Ctrl-C a fork hook swallowed stops the search here
    finally:
        services.stop()
    write_capacity(run_dir, capacity_doc(plan, searches, walls))
    return searches

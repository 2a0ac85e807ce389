"""Runs a Plan: every trial not yet recorded, in the plan's order (order.py), one row appended
atomically after each, so an interrupted run keeps every finished trial and `--resume` runs
only what is missing. With `repeats: auto` a cell stops once its precision is reached
(precision.py) or after max_repeats trials. A trial the host spoiled is taken again, up to
`retry_noisy` times, every attempt kept (retry.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import RunStopped
from ..experiment.plan import Cell, Plan
from ..proc import interrupt
from ..results import TrialTable
from .order import order_seed, trial_order
from .precision import precision_state
from .retry import set_aside, spoiled_by_host
from .services import ServiceSet
from .trial import execute_trial


@dataclass
class PlanOutcome:
    """What execute_plan did: the trials table after it, how many trials ran and were skipped."""

    run_dir: Path
    trials: pd.DataFrame
    ran: int
    skipped: int
    retried: int = 0  # attempts taken again because the host spoiled them (retry.py)
    retry_s: float = 0.0  # the wall time those spoiled attempts cost


def _cell_rows(table: TrialTable, cell: Cell, before: int | None = None) -> list[dict]:
    return [
        r
        for r in table.rows
        if r["cell_id"] == cell.cell_id and (before is None or int(r["trial"]) < before)
    ]


def execute_plan(
    plan: Plan,
    run_dir: Path,
    on_trial=None,
    on_start=None,
    on_second=None,
    trial_fn=None,
    on_retry=None,
) -> PlanOutcome:
    """Run every trial not yet in run_dir/trials.csv. Callbacks drive the progress display:
    on_start(cell, trial) before a trial, on_second(LiveSecond) about once a second while it
    runs (measure/live.py), on_trial(row) after it, on_retry(row, why, attempt, of) when the
    host spoiled an attempt that is taken again. trial_fn(plan, cell, trial, run_dir) runs one
    trial on a cluster and returns its row (default: this host's execute_trial, looked up when
    called, with the plan's services)."""
    table = TrialTable(run_dir)
    done = table.done()
    exp = plan.experiment
    target = exp.target_precision

    def wants(cell: Cell, k: int) -> bool:
        if (cell.cell_id, k) in done or not exp.auto:
            return True
        rows = _cell_rows(table, cell, before=k)
        return not precision_state(rows, cell.precision_metric(exp), target)["precision_reached"]

    ran = retried = 0
    retry_s = 0.0
    services = ServiceSet(plan.services, plan.source)

    def attempt(cell: Cell, k: int) -> dict:
        if trial_fn is not None:
            try:
                return trial_fn(plan, cell, k, run_dir)
            except RunStopped as e:
                if e.row is not None:  # the interrupted trial, invalid with its reason
                    table.append(e.row)
                    if on_trial:
                        on_trial(e.row)
                raise
        services.start("run", run_dir)  # the first time; again if one has died
        if on_second is None:
            return execute_trial(plan, cell, k, run_dir, services)
        return execute_trial(plan, cell, k, run_dir, services, on_second=on_second)

    try:
        for cell, k in trial_order(plan, wants):
            if (cell.cell_id, k) in done:
                continue
            if on_start:
                on_start(cell, k)
            whys: list[str] = []
            spent = 0.0
            while True:
                t0 = time.monotonic()
                row = attempt(cell, k)
                why = spoiled_by_host(row)
                if not why or len(whys) >= exp.retry_noisy:
                    break
                whys.append(why)
                spent += time.monotonic() - t0
                set_aside(run_dir, row, len(whys), why)
                retried += 1
                if on_retry:
                    on_retry(row, why, len(whys) + 1, exp.retry_noisy + 1)
                interrupt.check()
            row["attempts"] = len(whys) + 1
            row["retried_why"] = "; ".join(f"attempt {i + 1}: {w}" for i, w in enumerate(whys))
            row["retry_s"] = spent
            retry_s += spent
            if target is not None:
                row.update(
                    precision_state(
                        _cell_rows(table, cell) + [row], cell.precision_metric(exp), target
                    )
                )
            table.append(row)
            ran += 1
            if on_trial:
                on_trial(row)
            interrupt.check()  # a Ctrl-C a fork hook swallowed stops the run here
    finally:
        services.stop()  # also on Ctrl-C and SIGTERM: no postgres, no data dir left
    return PlanOutcome(
        run_dir,
        table.frame() if table.rows else pd.DataFrame(),
        ran,
        len(done),
        retried,
        retry_s,
    )


def run_info(plan: Plan, host: dict) -> dict:
    """The contents of run.json."""
    exp = plan.experiment
    return {
        "experiment": exp.name,
        "source": str(Path(plan.source).resolve()),
        "profile": plan.profile,
        "overrides": plan.overrides,
        "document": plan.document,
        "axes": plan.axes,
        "repeats": exp.repeats,
        "max_repeats": plan.repeats,
        "precision": exp.target_precision,
        "order": plan.order,
        "order_seed": order_seed(plan),
        "cells": [
            {
                "cell_id": c.cell_id,
                "values": c.values,
                "server": c.server.model_dump(mode="json"),
                "load": c.load.model_dump(),
                "workload": c.workload.model_dump(),
                "network": c.network.model_dump(),  # field names carry the units
                "placement": c.placement.model_dump(),
            }
            for c in plan.cells
        ],
        "services": {n: s.model_dump(mode="json") for n, s in plan.services.items()},
        "network_backend": "none",
        "host": host,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }

"""Runs a Plan: every trial not yet recorded, one row appended atomically after each, so an
interrupted run keeps every finished trial and `--resume` runs only what is missing."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..experiment.plan import Plan
from ..results import TrialTable
from .trial import execute_trial


@dataclass
class PlanOutcome:
    """What execute_plan did: the trials table after it, how many trials ran and were skipped."""

    run_dir: Path
    trials: pd.DataFrame
    ran: int
    skipped: int


def execute_plan(plan: Plan, run_dir: Path, on_trial=None, on_start=None) -> PlanOutcome:
    """Run every trial not yet in run_dir/trials.csv. Callbacks drive the progress display:
    on_start(cell, trial) before a trial, on_trial(row) after it."""
    table = TrialTable(run_dir)
    done = table.done()
    todo = [(c, k) for c in plan.cells for k in range(1, plan.repeats + 1)
            if (c.cell_id, k) not in done]
    for cell, k in todo:
        if on_start:
            on_start(cell, k)
        row = execute_trial(plan, cell, k, run_dir)
        table.append(row)
        if on_trial:
            on_trial(row)
    return PlanOutcome(run_dir, table.frame() if table.rows else pd.DataFrame(), len(todo),
                       len(done))


def run_info(plan: Plan, host: dict) -> dict:
    """The contents of run.json."""
    return {
        "experiment": plan.experiment.name,
        "source": str(Path(plan.source).resolve()),
        "profile": plan.profile,
        "overrides": plan.overrides,
        "document": plan.document,
        "axes": plan.axes,
        "repeats": plan.repeats,
        "cells": [{"cell_id": c.cell_id, "values": c.values,
                   "server": c.server.model_dump(mode="json"), "load": c.load.model_dump(),
                   "workload": c.workload.model_dump(),
                   "network": c.network.model_dump(by_alias=True),
                   "placement": c.placement.model_dump()} for c in plan.cells],
        "network_backend": "none",
        "host": host,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }

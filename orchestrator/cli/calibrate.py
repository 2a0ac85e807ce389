"""`perfctl calibrate`: how much this host moves a result from one run to the next.

It runs one small reference experiment (or --experiment FILE, its first cell) --runs times,
A/A, compares consecutive runs as `perfctl compare` would, and prints for throughput, p50 and
p99 the trial-to-trial and run-to-run spread and the smallest change `compare` can resolve at
several repeat counts (analysis/calibration.py says how). The result is saved (default
results/.calibration.json), where `compare` finds it and names changes below the host's
resolution.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ..errors import PerfctlError
from ..numbers import fmt
from .console import console

REFERENCE = """
name: calibrate
description: perfctl calibrate's reference experiment (the bundled Python server, closed load)
servers:
  py: {impl: python, model: async}
workload: {path: /work, params: {spin_us: 300}}
load: {mode: closed, connections: 4, duration: 2s, warmup: 500ms}
repeats: 5
"""
REPEAT_COUNTS = (3, 5, 10, 20)


def _reference(repeats: int) -> dict:
    import yaml  # the reference experiment is read by the command, not at start-up

    doc = yaml.safe_load(REFERENCE)
    doc["repeats"] = repeats
    if len(os.sched_getaffinity(0)) >= 2:
        doc["placement"] = {"server_cpus": [0], "loadgen_cpus": [1]}
    return doc


def calibrate(
    runs: Annotated[int, typer.Option(min=2, max=50, help="A/A runs of the experiment.")] = 6,
    repeats: Annotated[
        int, typer.Option(min=2, max=100, help="Trials per run (the reference only).")
    ] = 5,
    experiment: Annotated[
        Path | None,
        typer.Option(help="Calibrate with this experiment's first cell instead of the reference."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Where to save the calibration (default: results/.calibration.json, where "
            "compare looks for it)."
        ),
    ] = None,
) -> None:
    """Run a reference experiment N times (A/A): this host's run-to-run spread and the smallest
    change compare can resolve; saved for compare."""
    from .. import results  # pandas, pyarrow: loaded by the command, not at start-up
    from ..analysis import calibration as calib  # scipy: loaded by the command
    from ..analysis.views import usable_trials  # pandas: loaded by the command
    from ..experiment import compile_document, load_plan  # pydantic models: by the command
    from ..measure.hostinfo import host_info  # /proc and the JDKs: read by the command
    from ..proc import process  # the servers the runs start: stopped by the command
    from ..run.execute import execute_plan, run_info  # the trial path: loaded by the command

    out = calib.DEFAULT_PATH if out is None else out
    plan = (
        load_plan(experiment)
        if experiment is not None
        else compile_document(_reference(repeats), "perfctl calibrate (reference)")
    )
    if len(plan.cells) > 1:
        plan = plan.model_copy(update={"cells": plan.cells[:1]})
    base = results.new_run_dir("calibrate")
    console.print(
        f"calibrate: {runs} runs x {plan.repeats} trials of {plan.cells[0].label} -> {base}"
    )
    run_dirs = []
    try:
        for i in range(1, runs + 1):
            run_dir = base / f"run-{i}"
            results.prepare(run_dir)
            results.write_json(run_dir / "run.json", run_info(plan, host_info()))
            outcome = execute_plan(plan, run_dir)
            usable = len(usable_trials(outcome.trials)) if not outcome.trials.empty else 0
            console.print(f"run {i}/{runs}: {usable} of {outcome.ran} trials valid and quiet")
            run_dirs.append(run_dir)
    finally:
        process.stop_all()
    per_metric = {}
    for col in calib.METRICS:
        values = [
            usable_trials(results.read_trials(d))[col].to_numpy(dtype=float) for d in run_dirs
        ]
        per_metric[col] = calib.spreads(values)
    if all(math.isnan(s["trial_cv"]) for s in per_metric.values()):
        raise PerfctlError(
            f"calibrate: fewer than two runs had 2+ valid, quiet trials ({base}). "
            "Fix: stop other work on this host (see trials.csv noise_reasons), "
            "or raise --repeats."
        )
    verdicts = _aa_verdicts(run_dirs)
    doc = calib.document(
        host_info(), plan.experiment.name, runs, plan.repeats, per_metric, REPEAT_COUNTS
    )
    doc["aa_verdicts"] = verdicts
    calib.save(out, doc)
    _print(doc, verdicts)
    console.print(f"calibration: {out} (perfctl compare reads it from there)")


def _aa_verdicts(run_dirs: list[Path]) -> list[str]:
    """compare's verdict on each consecutive pair of runs (all identical: any verdict other
    than `no significant change` is a false alarm or a shortage of trials)."""
    from ..analysis.compare import compare_runs  # scipy, pandas: loaded by the command

    out = []
    for a, b in zip(run_dirs[::2], run_dirs[1::2]):
        try:
            cells = compare_runs(a, b, calibration=None).cells
            out.append(cells[0].verdict)
        except PerfctlError as e:
            out.append(f"error: {e}")
    return out


def _print(doc: dict, verdicts: list[str]) -> None:
    t = Table(
        title=f"A/A spread on {doc['host'].get('hostname', 'this host')} "
        f"({doc['runs']} runs x {doc['trials_per_run']} trials)"
    )
    for col in (
        "metric",
        "level",
        "trial-to-trial",
        "run-to-run",
        *(f"resolves at {n} trials" for n in REPEAT_COUNTS),
    ):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for m, s in doc["metrics"].items():
        res = [doc["resolution"][str(n)].get(m, math.nan) for n in REPEAT_COUNTS]
        t.add_row(
            m,
            fmt(s.get("level"), ".4g"),
            f"±{fmt(100 * s['trial_cv'], '.1f')}%",
            f"±{fmt(100 * s['run_cv'], '.1f')}%",
            *[("-" if r == math.inf else f"±{fmt(100 * r, '.1f')}%") for r in res],
        )
    console.print(t)
    console.print(
        "resolves at n trials: the smallest change compare detects (80% power) with n "
        "valid, quiet trials per side; '-': n trials cannot reach significance."
    )
    alarms = sum(v != "no significant change" for v in verdicts)
    console.print(
        f"A/A compare of consecutive runs: {', '.join(verdicts) or 'none'} "
        f"({alarms} of {len(verdicts)} not 'no significant change')"
    )

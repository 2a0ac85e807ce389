"""`perfctl run`: every trial of an experiment, then its summary, models and plots."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from .. import results
from ..analysis import queueing
from ..analysis.model_figures import draw_models
from ..analysis.run_figures import draw_basic
from ..netem.namespace import cleanup_stale
from ..results.store import check_present, storage_guard
from ..run import limits, process
from ..run.execute import execute_plan, run_info
from ..run.hostinfo import host_info
from . import run_target
from .console import console
from .summary import summary_table
from .plan import ProfileOpt, SetOpt


def run(file: Annotated[Optional[Path], typer.Argument(metavar="[FILE]", help="Experiment YAML file.",
                                                       show_default=False)] = None,
        profile: ProfileOpt = None, set_: SetOpt = None,
        out: Annotated[Optional[Path], typer.Option("--out", "-o",
                       help="Results dir: a new or empty one (default "
                            "results/<name>/<YYYYmmdd-HHMMSS>).")] = None,
        resume: Annotated[Optional[Path], typer.Option("--resume",
                          help="Finish an interrupted run: only trials not yet recorded; "
                               "refused if its experiment or config changed.")] = None,
        no_plots: Annotated[bool, typer.Option("--no-plots", help="Skip the plots.")] = False) -> None:
    """Run every trial of an experiment: servers, load, results, plots."""
    choice = run_target.choose(file, profile, set_, out, resume)
    limits.ensure_fd_limit(choice.plan.cells, choice.plan.source)
    run_dir = choice.claim()           # every check passed: only now is anything written
    try:
        with storage_guard(run_dir):
            _run(choice.plan, run_dir, choice, no_plots)
    finally:
        process.stop_all()
        process.record_in(None)        # nothing left running: children.json goes


def _reap_leftovers(run_dir: Path) -> None:
    """Stop what a crashed perfctl left running, and say so in one line."""
    stopped = process.reap_leftovers(run_dir)
    removed = cleanup_stale() if os.geteuid() == 0 and shutil.which("ip") else []
    what = []
    if stopped:
        what.append(f"stopped {len(stopped)} process(es) ({'; '.join(stopped)})")
    if removed:
        what.append(f"removed {len(removed)} network namespace(s) ({', '.join(removed)})")
    if what:
        console.print(f"perfctl: {' and '.join(what)} left behind by a crashed perfctl run.",
                      highlight=False, soft_wrap=True)


def _run(p, run_dir: Path, choice: run_target.Choice, no_plots: bool) -> None:
    results.prepare(run_dir)
    if not choice.resumed:
        results.write_json(run_dir / "run.json", run_info(p, host_info()))
    if choice.default:   # results/latest follows default runs only
        results.point_latest(run_dir, run_target.RESULTS_ROOT.resolve())
    _reap_leftovers(run_dir)
    process.record_in(run_dir)
    console.print(f"[bold]{p.experiment.name}[/]: {len(p.cells)} cells x {p.repeats} repeats "
                  f"-> {run_dir}")
    outcome = None
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                  console=console, transient=False) as progress:
        done_before = len(results.TrialTable(run_dir).done())
        task = progress.add_task("trials", total=p.trial_count, completed=done_before)

        def on_start(cell, k):
            check_present(run_dir)
            progress.update(task, description=f"{cell.label} #{k}")

        def on_trial(row):
            progress.advance(task)
            if not row.get("valid", True):
                progress.console.print(f"[red]invalid trial[/] {row['cell_id']} #{row['trial']}: "
                                       f"{row['invalid_reasons']}")
        try:
            outcome = execute_plan(p, run_dir, on_trial, on_start)
        finally:
            process.stop_all()
    trials = results.read_trials(run_dir)
    info = results.load(run_dir).info
    if "network_backend" in trials.columns:
        info["network_backend"] = sorted(set(trials["network_backend"].astype(str)))
        results.write_json(run_dir / "run.json", info)
    console.print(summary_table(trials, p.axes, console.width, p.document))
    if p.experiment.models:
        _, table = queueing.fit_run(run_dir)
        if not no_plots:
            draw_models(results.load(run_dir), table, run_dir / "plots")
        console.print(f"models: {run_dir / 'models.json'} (perfctl model {run_dir} for the table)")
    if not no_plots:
        for path in draw_basic(trials, p.axes, run_dir / "plots"):
            if path.suffix == ".png":
                console.print(f"plot: {path}")
    console.print(f"trials: {run_dir / 'trials.csv'} ({outcome.ran} run, {outcome.skipped} "
                  "already recorded)")

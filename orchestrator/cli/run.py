"""`perfctl plan` and `perfctl run`: what an experiment will do, and doing it."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.console import Group
from rich.table import Table
from rich.text import Text

from .. import results
from ..analysis import queueing
from ..analysis.model_figures import draw_models
from ..analysis.run_figures import draw_basic
from ..analysis.views import flag
from ..errors import PerfctlError
from ..experiment import compile_document, load_plan
from ..run import process
from ..run.execute import execute_plan, run_info
from ..run.hostinfo import host_info
from .console import console, fmt_duration

FileArg = Annotated[Path, typer.Argument(help="Experiment YAML file.", show_default=False)]
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", "-p",
                                                   help="Apply a named profile from the file.")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", "-s", metavar="KEY=VALUE",
                                                     help="Override any key, e.g. load.duration=5s.")]


def plan(file: FileArg, profile: ProfileOpt = None, set_: SetOpt = None) -> None:
    """Print the cells, the trial count and the estimated wall time. Runs nothing."""
    p = load_plan(file, profile, set_)
    t = Table(title=f"{p.experiment.name}: {len(p.cells)} cells x {p.repeats} repeats")
    t.add_column("cell_id")
    for a in p.axes:
        t.add_column(a)
    t.add_column("server")
    t.add_column("load")
    for c in p.cells:
        ld = c.load
        load = {"open": f"open {ld.arrivals} {ld.rate_rps or 0:g}/s",
                "closed": f"closed {ld.connections} conn",
                "burst": f"burst {ld.bursts}x{ld.connections} conn",
                "ramp": f"ramp {len(ld.ramp.rates) if ld.ramp else 0} steps"}[ld.mode]
        load += f", {ld.window_s:g}s+{ld.warmup_s:g}s warm-up"
        t.add_row(c.cell_id, *[str(c.values[a]) for a in p.axes], c.server.label, load)
    console.print(t)
    console.print(f"{p.trial_count} trials, estimated wall time {fmt_duration(p.estimated_seconds())}")


def _precision(last) -> str:
    """A cell's precision after its last trial: "±3.1% ok", or what is missing."""
    half, target = last["precision_half_width_pct"], last["precision_target_pct"]
    if bool(last["precision_reached"]):
        return f"±{half:.1f}% ok"
    if half != half:
        return f"[yellow]- ({int(last['precision_trials'])} usable; 6 needed)[/]"
    return f"[yellow]±{half:.1f}% > {target:g}%[/]"


def _summary_table(trials, axes: list[str]) -> Group:
    """The per-cell summary (means over the valid trials), which trials were invalid or
    noisy and why, and whether each cell reached its precision (with `precision:`)."""
    t = Table(title="Summary (mean over valid trials)")
    for a in axes:
        t.add_column(a)
    with_precision = "precision_reached" in trials
    for col in ("trials", "throughput req/s", "p50 ms", "p99 ms", "max ms", "errors", "valid",
                "quiet") + (("precision",) if with_precision else ()):
        t.add_column(col, justify="right")
    why = []
    for cid, g in trials.groupby("cell_id", sort=False):
        valid, quiet = list(flag(g, "valid")), list(flag(g, "quiet"))
        use = g[valid] if any(valid) else g
        style = None if all(valid) else "red"

        def num(col: str, fmt: str) -> str:
            v = use[col].mean() if col in use else math.nan
            return "-" if v != v else format(v, fmt)
        extra = []
        if with_precision:
            last = g.iloc[-1]
            extra = [_precision(last)]
        t.add_row(*[str(g[a].iloc[0]) for a in axes], str(len(g)), num("throughput_rps", ",.0f"),
                  num("latency_p50_ms", ".3f"), num("latency_p99_ms", ".3f"),
                  num("latency_max_ms", ".2f"), str(int(g["errors"].sum())),
                  f"{sum(valid)}/{len(g)}",
                  f"{sum(quiet)}/{len(g)}" if all(quiet) else f"[yellow]{sum(quiet)}/{len(g)}[/]",
                  *extra, style=style)
        label = ", ".join(f"{a}={g[a].iloc[0]}" for a in axes)
        for (_, r), ok in zip(g.iterrows(), quiet):
            if not ok:
                why.append(f"[yellow]noisy[/] {label} #{r['trial']}: {r.get('noise_reasons', '')}")
    notes = [Text.from_markup(w) for w in why]
    if why:
        notes.append(Text("valid: the measurement worked; quiet: the host left the trial alone. "
                          "compare and check use valid, quiet trials only (README: valid and "
                          "quiet)."))
    return Group(t, *notes)


def run(file: Annotated[Optional[Path], typer.Argument(help="Experiment YAML file.",
                                                       show_default=False)] = None,
        profile: ProfileOpt = None, set_: SetOpt = None,
        out: Annotated[Optional[Path], typer.Option("--out", "-o",
                       help="Results dir (default results/<name>/<YYYYmmdd-HHMMSS>).")] = None,
        resume: Annotated[Optional[Path], typer.Option("--resume",
                          help="Finish an interrupted run: only trials not yet recorded.")] = None,
        no_plots: Annotated[bool, typer.Option("--no-plots", help="Skip the plots.")] = False) -> None:
    """Run every trial of an experiment: servers, load, results, plots."""
    if resume is not None:
        info = results.load(resume).info
        p = compile_document(info["document"], info["source"])
        run_dir = resume
    else:
        if file is None:
            raise PerfctlError("perfctl run needs an experiment file (or --resume RUN_DIR). "
                               "Fix: perfctl run experiments.yaml")
        p = load_plan(file, profile, set_)
        run_dir = out or results.new_run_dir(p.experiment.name)
    results.prepare(run_dir)
    if resume is None:
        results.write_json(run_dir / "run.json", run_info(p, host_info()))
    if out is None and resume is None:   # results/latest follows default runs only
        results.point_latest(run_dir)
    console.print(f"[bold]{p.experiment.name}[/]: {len(p.cells)} cells x {p.repeats} repeats "
                  f"-> {run_dir}")
    outcome = None
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                  console=console, transient=False) as progress:
        done_before = len(results.TrialTable(run_dir).done())
        task = progress.add_task("trials", total=p.trial_count, completed=done_before)

        def on_start(cell, k):
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
    console.print(_summary_table(trials, p.axes))
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

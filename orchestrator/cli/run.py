"""`perfctl run`: every trial of an experiment, then its summary, models and plots."""
from __future__ import annotations

import math
import os
import shutil
from functools import partial
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
from ..cluster.hosts import cleanup_stale_bridges
from ..netem.namespace import cleanup_stale
from ..results.store import check_present, storage_guard
from ..run import limits, process
from ..run.execute import execute_plan, run_info
from ..run.hostinfo import host_info
from . import run_target
from .console import console
from .plan import ProfileOpt, SetOpt


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
    removed = []
    if os.geteuid() == 0 and shutil.which("ip"):
        removed = cleanup_stale() + cleanup_stale_bridges()
    what = []
    if stopped:
        what.append(f"stopped {len(stopped)} process(es) ({'; '.join(stopped)})")
    if removed:
        what.append(f"removed {len(removed)} network namespace(s) ({', '.join(removed)})")
    if what:
        console.print(f"perfctl: {' and '.join(what)} left behind by a crashed perfctl run.",
                      highlight=False, soft_wrap=True)


def _open_cluster(p, run_dir: Path):
    """Connect to (or start) the experiment's cluster, check the placement against its hosts
    and record them in run.json. Returns the session and the trial function that uses it.
    Dask is imported here only: a run without `cluster:` never loads it."""
    from ..cluster import session as cluster_session   # Dask is loaded with `cluster:` only
    from ..cluster import trial as cluster_trial        # (and this imports it too)
    console.print("cluster: " + (f"starting {p.experiment.cluster.local.hosts} local hosts"
                                 if p.experiment.cluster.local else
                                 f"connecting to {p.experiment.cluster.scheduler}"))
    session = cluster_session.Session(p.experiment.cluster, p.source,
                                      run_dir / "cluster").open()
    try:
        session.check_placement(p)
        info = results.load(run_dir).info
        info["cluster"] = session.info()
        results.write_json(run_dir / "run.json", info)
    except BaseException:
        session.close()
        raise
    hosts = session.info()["hosts"]
    console.print(f"cluster: {session.address}, hosts " + ", ".join(
        f"{n} ({h['ip']}, {len(h['cpus'])} CPUs)" for n, h in hosts.items()), highlight=False)
    off = [n for n, h in hosts.items() if h.get("profiler")]
    if off:
        console.print(f"[yellow]cluster: the profiler of worker(s) {', '.join(off)} is on; it "
                      "samples the worker's threads every 10 ms (start them with "
                      "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False)[/]")
    return session, partial(cluster_trial.execute_cluster_trial, session)


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
        session, trial_fn = _open_cluster(p, run_dir) if p.experiment.cluster else (None, None)
        try:
            if session is None:
                outcome = execute_plan(p, run_dir, on_trial, on_start)
            else:
                outcome = execute_plan(p, run_dir, on_trial, on_start, trial_fn=trial_fn)
        finally:
            if session is not None:
                session.close()
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

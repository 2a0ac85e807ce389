"""`perfctl run`: every trial of an experiment, then its summary, models and plots."""

from __future__ import annotations

import os
import shutil
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from .. import results
from ..analysis import flamegraph, queueing
from ..analysis.model_figures import draw_models
from ..analysis.run_figures import draw_basic
from ..analysis.search_figures import capacity_figure
from ..cluster.hosts import cleanup_stale_bridges
from ..measure.hostinfo import host_info
from ..netem.namespace import cleanup_stale
from ..proc import limits, process
from ..results.schema import read_capacity
from ..results.store import check_present, storage_guard
from ..run.execute import execute_plan, run_info
from ..search.execute import execute_search
from . import run_target, trial_display
from .console import console, step
from .plan import ProfileOpt, SetOpt
from .summary import capacity_table, summary_table


def run(
    file: Annotated[
        Path | None,
        typer.Argument(metavar="[FILE]", help="Experiment YAML file.", show_default=False),
    ] = None,
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Results dir: a new or empty one (default results/<name>/<YYYYmmdd-HHMMSS>).",
        ),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            help="Finish an interrupted run: only trials not yet recorded; "
            "refused if its experiment or config changed.",
        ),
    ] = None,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="Skip the plots.")] = False,
    profile_server: Annotated[
        bool,
        typer.Option(
            "--profile-server",
            help="Record a profile of the server in every trial and draw "
            "its flame graph (the same as `profile: true` in the "
            "file): py-spy, JFR or perf.",
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Plain log lines, one per trial, instead of the progress bar "
            "and the live per-second line (off a terminal the lines come "
            "anyway, with one per second of load).",
        ),
    ] = False,
) -> None:
    """Run every trial of an experiment: servers, load, results, plots. On a terminal a line
    under the progress bar shows the running trial second by second."""
    if profile_server:
        set_ = [*(set_ or []), "profile=true"]
    choice = run_target.choose(file, profile, set_, out, resume)
    limits.ensure_fd_limit(choice.plan.cells, choice.plan.source)
    run_dir = choice.claim()  # every check passed: only now is anything written
    try:
        with storage_guard(run_dir):
            _run(choice.plan, run_dir, choice, no_plots, quiet)
    finally:
        process.stop_all()
        process.record_in(None)  # nothing left running: children.json goes


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
        console.print(
            f"perfctl: {' and '.join(what)} left behind by a crashed perfctl run.",
            highlight=False,
            soft_wrap=True,
        )


def _open_cluster(p, run_dir: Path):
    """Connect to (or start) the experiment's cluster, check the placement against its hosts
    and record them in run.json. Returns the session and the trial function that uses it.
    Dask is imported here only: a run without `cluster:` never loads it."""
    from ..cluster import session as cluster_session  # Dask is loaded with `cluster:` only
    from ..cluster import trial as cluster_trial  # (and this imports it too)

    console.print(
        "cluster: "
        + (
            f"starting {p.experiment.cluster.local.hosts} local hosts"
            if p.experiment.cluster.local
            else f"connecting to {p.experiment.cluster.scheduler}"
        )
    )
    session = cluster_session.Session(p.experiment.cluster, p.source, run_dir / "cluster").open()
    try:
        session.check_placement(p)
        info = results.load(run_dir).info
        info["cluster"] = session.info()
        results.write_json(run_dir / "run.json", info)
    except BaseException:
        session.close()
        raise
    hosts = session.info()["hosts"]
    console.print(
        f"cluster: {session.address}, hosts "
        + ", ".join(f"{n} ({h['ip']}, {len(h['cpus'])} CPUs)" for n, h in hosts.items()),
        highlight=False,
    )
    off = [n for n, h in hosts.items() if h.get("profiler")]
    if off:
        console.print(
            f"[yellow]cluster: the profiler of worker(s) {', '.join(off)} is on; it "
            "samples the worker's threads every 10 ms (start them with "
            "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False)[/]"
        )
    return session, partial(cluster_trial.execute_cluster_trial, session)


def _run(p, run_dir: Path, choice: run_target.Choice, no_plots: bool, quiet: bool) -> None:
    results.prepare(run_dir)
    if not choice.resumed:
        results.write_json(run_dir / "run.json", run_info(p, host_info()))
    if choice.default:  # results/latest follows default runs only
        results.point_latest(run_dir, run_target.RESULTS_ROOT.resolve())
    _reap_leftovers(run_dir)
    process.record_in(run_dir)
    what = f"{len(p.cells)} cells x {p.repeats} repeats"
    if p.experiment.search is not None:
        what = f"{len(p.cells)} cells, a search each (at most {p.repeats} trials)"
    console.print(f"[bold]{p.experiment.name}[/]: {what} -> {run_dir}")
    outcome = None
    done_before = len(results.TrialTable(run_dir).done())
    with trial_display.make(console, p.trial_count, done_before, quiet) as display:

        def on_start(cell, k):
            check_present(run_dir)
            display.on_start(cell.label, k)

        session, trial_fn = _open_cluster(p, run_dir) if p.experiment.cluster else (None, None)
        try:
            if p.experiment.search is not None:
                execute_search(p, run_dir, display.on_trial, on_start, display.on_second)
            elif session is None:
                outcome = execute_plan(p, run_dir, display.on_trial, on_start, display.on_second)
            else:
                outcome = execute_plan(p, run_dir, display.on_trial, on_start, trial_fn=trial_fn)
        finally:
            if session is not None:
                session.close()
            process.stop_all()
    if p.experiment.search is not None:
        _search_done(p, run_dir, no_plots)
        return
    trials = results.read_trials(run_dir)
    info = results.load(run_dir).info
    if "network_backend" in trials.columns:
        info["network_backend"] = sorted(set(trials["network_backend"].astype(str)))
        results.write_json(run_dir / "run.json", info)
    console.print(summary_table(trials, p.axes, console.width, p.document))
    if p.experiment.models:
        with step("fitting queueing models"):
            _, table = queueing.fit_run(run_dir)
        if not no_plots:
            with step("drawing the model figures"):
                draw_models(results.load(run_dir), table, run_dir / "plots")
        console.print(f"models: {run_dir / 'models.json'} (perfctl model {run_dir} for the table)")
    if p.experiment.profile:
        with step("drawing the servers' flame graphs"):
            svgs = flamegraph.draw_run(run_dir)
        console.print(f"profiles: {len(svgs)} flame graph(s), cells/*/trial-*/profile.svg")
    if not no_plots:
        with step("drawing the plots"):
            paths = draw_basic(trials, p.axes, run_dir / "plots")
        for path in paths:
            if path.suffix == ".png":
                console.print(f"plot: {path}")
    console.print(
        f"trials: {run_dir / 'trials.csv'} ({outcome.ran} run, {outcome.skipped} already recorded)"
    )


def _search_done(p, run_dir: Path, no_plots: bool) -> None:
    """After a search: the capacity table, its figure, where the files are."""
    doc = read_capacity(run_dir)
    console.print(capacity_table(doc, p.axes))
    if not no_plots:
        with step("drawing the capacity figure"):
            fig = capacity_figure(doc, run_dir / "plots")
        if fig is not None:
            console.print(f"plot: {fig.png}")
    if p.experiment.profile:
        with step("drawing the servers' flame graphs"):
            svgs = flamegraph.draw_run(run_dir)
        console.print(f"profiles: {len(svgs)} flame graph(s), cells/*/trial-*/profile.svg")
    trials = results.read_trials(run_dir)
    console.print(
        f"capacity: {run_dir / 'capacity.json'}; trials: {run_dir / 'trials.csv'} "
        f"({len(trials)} probes)"
    )

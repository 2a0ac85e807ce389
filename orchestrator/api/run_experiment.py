"""`perfctl.run()`, which `perfctl run` calls too: every trial of an experiment, then its
summary, models and plots, and the run as `results.load()` gives it.

The command line parses its flags and calls run() with its console; a notebook calls it with
none, and a Jupyter-aware console shows the progress bar and the live line in the cell's
output (display.py). Everything else, from the checks before the first server starts to the
plots after the last trial, is this one function either way.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import results
from ..cluster.hosts import cleanup_stale_bridges
from ..errors import PerfctlError
from ..history import record
from ..history.add import add_finished_run
from ..history.store import locate
from ..measure import hostcheck
from ..measure.hostinfo import host_info
from ..netem.namespace import cleanup_stale
from ..proc import limits, process
from ..results.schema import read_capacity
from ..results.write import check_present, storage_guard
from ..run.execute import execute_plan, run_info
from . import display, target
from .summary import capacity_table, endpoint_table, summary_table


def run(
    experiment: str | Path | None = None,
    set: Mapping[str, Any] | Sequence[str] | None = None,  # the name of perfctl run --set
    profile: str | None = None,
    *,
    out: str | Path | None = None,
    resume: str | Path | None = None,
    plots: bool = True,
    profile_server: bool = False,
    quiet: bool = False,
    console: Console | None = None,
    commit: str | None = None,
    labels: Mapping[str, str] | Sequence[str] | None = None,
) -> results.Run:
    """Run every trial of `experiment` (a YAML file) and return the run, as
    `results.load(run_dir)` would: `.trials`, `.requests`, `.timeline`, `.path`, ...

    set: overrides, {"load.duration": "2s", "matrix.connections": [1, 4]} (any key of the
    file, dotted; values keep their Python type), or `perfctl run --set` strings
    ["load.duration=2s"]. profile: a named profile of the file ("quick"). out: the results
    directory, new or empty (default results/<name>/<YYYYmmdd-HHMMSS>, and results/latest
    follows). resume: finish an interrupted run in its directory. plots: draw the plots.
    profile_server: record a profile of the server in every trial. quiet: one line per
    trial instead of the progress bar and the live line. console: where to print (default:
    a new rich Console, which renders in a notebook's cell). commit: the system under test's
    version, kept in run.json and the history (default: `git rev-parse HEAD` of the
    experiment's `history.git`, if any). labels: free labels for the history, {"branch":
    "main"} or ["branch=main"].

    A finished run is added to the performance history (docs/history.md) unless the file says
    `history: false`; when the store cannot be written a warning says so and the run stands.

    Bad input raises PerfctlError, before anything is written, with the paragraph
    `perfctl run` prints; every server and load generator is stopped before run() returns or
    raises (KeyboardInterrupt included)."""
    console = console if console is not None else Console()
    overrides = _overrides(set)
    if profile_server:
        overrides.append("profile=true")
    choice = target.choose(_path(experiment), profile, overrides, _path(out), _path(resume))
    limits.ensure_fd_limit(choice.plan.cells, choice.plan.source)
    sut = _sut(choice.plan, commit, labels)
    run_dir = choice.claim()  # every check passed: only now is anything written
    try:
        with storage_guard(run_dir):
            _run(choice.plan, run_dir, choice, plots, quiet, console, sut)
    finally:
        process.stop_all()
        process.record_in(None)  # nothing left running: children.json goes
    _add_to_history(choice.plan, run_dir, console)
    return results.load(run_dir)


def _sut(plan, commit: str | None, labels) -> dict:
    """run.json's `sut`: the system under test's commit and the free labels (checked before
    anything is written)."""
    if isinstance(labels, Mapping):
        labels = [f"{k}={v}" for k, v in labels.items()]
    out = {"labels": record.parse_labels(list(labels or []))}
    config = plan.experiment.history
    if commit:
        out["commit"], out["commit_from"] = commit, "--commit"
    elif config is not None and config.git:
        where = (Path(plan.source).resolve().parent / config.git).resolve()
        out["commit"] = record.git_head(where, plan.source)
        out["commit_from"] = f"git -C {where} rev-parse HEAD"
    return out


def _add_to_history(plan, run_dir: Path, console: Console) -> None:
    """Add the finished run to the history; a failure is a warning, never an error."""
    config = plan.experiment.history
    location = None if config is None else locate(None, config, plan.source)
    text, warning = add_finished_run(run_dir, location)
    console.print(text, style="yellow" if warning else None, highlight=False)


def _path(p: str | Path | None) -> Path | None:
    return None if p is None else Path(p)


def _overrides(settings: Mapping[str, Any] | Sequence[str] | None) -> list[str]:
    """`--set` strings from a dict (each value written as JSON, which YAML reads back with its
    type) or from a list of KEY=VALUE strings."""
    if settings is None:
        return []
    if isinstance(settings, Mapping):
        return [f"{k}={json.dumps(v, default=str)}" for k, v in settings.items()]
    if isinstance(settings, Sequence) and not isinstance(settings, str):
        if all(isinstance(s, str) for s in settings):
            return list(settings)
    raise PerfctlError(
        f"set={settings!r}: expected a dict of dotted keys and values or a list of KEY=VALUE "
        'strings. Fix: e.g. set={"load.duration": "2s", "matrix.connections": [1, 4]}.'
    )


def _check_host(p, console: Console) -> dict | None:
    """Measure this host (~2 s: timer, wake-up, steal, loopback; measure/hostcheck.py) before
    the first trial, print its figures and what they limit, and return them for run.json."""
    seconds = hostcheck.run_check_seconds()
    if seconds <= 0:
        return None
    with display.step(console, f"measuring this host ({seconds:g} s)"):
        check = hostcheck.measure(seconds)
    warnings = hostcheck.verdict(check, p.experiment.target_precision or 0.05)
    console.print(f"host: {check.line()}", highlight=False, soft_wrap=True)
    for w in warnings:
        console.print(f"[yellow]host: {w}[/]", highlight=False, soft_wrap=True)
    return {**check.as_dict(), "verdict": warnings}


def _reap_leftovers(run_dir: Path, console: Console) -> None:
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


def _open_cluster(p, run_dir: Path, console: Console):
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
    _cluster_warning(p, console)
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


def _cluster_warning(p, console: Console) -> None:
    """The insecure-cluster warning (experiment/cluster.py), when the cluster is plain TCP."""
    if p.experiment.cluster is not None and p.experiment.cluster.warning:
        console.print(f"[yellow]cluster: {p.experiment.cluster.warning}[/]", soft_wrap=True)


def _run(
    p,
    run_dir: Path,
    choice: target.Choice,
    plots: bool,
    quiet: bool,
    console: Console,
    sut: dict | None = None,
) -> None:
    results.prepare(run_dir)
    if not choice.resumed:
        info = run_info(p, host_info())
        info["sut"] = sut or {}
        info["host_check"] = _check_host(p, console)
        results.write_json(run_dir / "run.json", info)
    if choice.default:  # results/latest follows default runs only
        results.point_latest(run_dir, target.RESULTS_ROOT.resolve())
    _reap_leftovers(run_dir, console)
    process.record_in(run_dir)
    what = f"{len(p.cells)} cells x {p.repeats} repeats"
    if p.experiment.search is not None:
        what = f"{len(p.cells)} cells, a search each (at most {p.repeats} trials)"
    console.print(f"[bold]{p.experiment.name}[/]: {what} -> {run_dir}")
    outcome = None
    done_before = len(results.TrialTable(run_dir).done())
    with display.make(console, p.trial_count, done_before, quiet) as shown:

        def on_start(cell, k):
            check_present(run_dir)
            shown.on_start(cell.label, k)

        session, trial_fn = (
            _open_cluster(p, run_dir, console) if p.experiment.cluster else (None, None)
        )
        try:
            if p.experiment.search is not None:
                from ..search.execute import execute_search  # scipy: ~1 s to import, searches only

                execute_search(p, run_dir, shown.on_trial, on_start, shown.on_second)
            elif session is None:
                outcome = execute_plan(
                    p, run_dir, shown.on_trial, on_start, shown.on_second, on_retry=shown.on_retry
                )
            else:
                outcome = execute_plan(
                    p, run_dir, shown.on_trial, on_start, trial_fn=trial_fn, on_retry=shown.on_retry
                )
        finally:
            if session is not None:
                session.close()
            process.stop_all()
    if p.experiment.search is not None:
        _search_done(p, run_dir, plots, console)
        return
    trials = results.read_trials(run_dir)
    info = results.load(run_dir).info
    if "network_backend" in trials.columns:
        info["network_backend"] = sorted(set(trials["network_backend"].astype(str)))
        results.write_json(run_dir / "run.json", info)
    console.print(summary_table(trials, p.axes, console.width, p.document))
    if outcome is not None and outcome.retried:
        console.print(
            f"retries: {outcome.retried} attempt(s) the host spoiled were taken again "
            f"(retry_noisy: {p.experiment.retry_noisy}), costing {outcome.retry_s:.0f} s; "
            f"every attempt is kept ({run_dir / 'retried.csv'})",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )
    per_endpoint = endpoint_table(results.load(run_dir).endpoints, p.axes)
    if per_endpoint is not None:
        console.print(per_endpoint)
    _cluster_warning(p, console)
    if p.experiment.models:
        from ..analysis import queueing  # scipy: ~1 s to import, only when models are fitted
        from ..analysis.model_figures import draw_models  # the same

        with display.step(console, "fitting queueing models"):
            doc, table = queueing.fit_run(run_dir)
        if doc.get("mix"):
            console.print(f"note: {doc['mix']}", markup=False)
        for note in doc.get("left_out", []):
            console.print(f"skipped: {note}", markup=False)
        for line in queueing.cell_lines(table):  # each prediction with its verdict
            console.print(line, highlight=False, soft_wrap=True, markup=False)
        if plots:
            with display.step(console, "drawing the model figures"):
                draw_models(results.load(run_dir), table, run_dir / "plots")
        console.print(f"models: {run_dir / 'models.json'} (perfctl model {run_dir} for the table)")
    if p.experiment.profile:
        _flame_graphs(run_dir, console)
    if plots:
        from ..analysis.run_figures import draw_basic  # matplotlib: ~0.6 s, only for plots

        notes: list[str] = []
        with display.step(console, "drawing the plots"):
            paths = draw_basic(trials, p.axes, run_dir / "plots", notes)
        for note in notes:
            console.print(f"skipped: {note}", markup=False)
        for path in paths:
            if path.suffix == ".png":
                console.print(f"plot: {path}")
    console.print(
        f"trials: {run_dir / 'trials.csv'} ({outcome.ran} run, {outcome.skipped} already recorded)"
    )


def _search_done(p, run_dir: Path, plots: bool, console: Console) -> None:
    """After a search: the capacity table, its figure, where the files are."""
    doc = read_capacity(run_dir)
    console.print(capacity_table(doc, p.axes))
    if plots:
        from ..analysis.search_figures import capacity_figure  # matplotlib, only for plots

        with display.step(console, "drawing the capacity figure"):
            fig = capacity_figure(doc, run_dir / "plots")
        if fig is not None:
            console.print(f"plot: {fig.png}")
    if p.experiment.profile:
        _flame_graphs(run_dir, console)
    trials = results.read_trials(run_dir)
    console.print(
        f"capacity: {run_dir / 'capacity.json'}; trials: {run_dir / 'trials.csv'} "
        f"({len(trials)} probes)"
    )


def _flame_graphs(run_dir: Path, console: Console) -> None:
    """Each profiled trial's flame graph, and how many were drawn."""
    from ..analysis import flamegraph  # only for experiments with `profile: true`

    with display.step(console, "drawing the servers' flame graphs"):
        svgs = flamegraph.draw_run(run_dir)
    console.print(f"profiles: {len(svgs)} flame graph(s), cells/*/trial-*/profile.svg")

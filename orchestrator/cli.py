"""The `perfctl` command line. The one place where PerfctlError becomes exit code 2."""
from __future__ import annotations

import math
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.table import Table

from . import __version__, config, results
from .errors import PerfctlError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Server-performance experiments from one YAML file.")
console = Console(width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        console.print(f"perfctl {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """perfctl: build, launch, load, record, model and plot server experiments."""


FileArg = Annotated[Path, typer.Argument(help="Experiment YAML file.", show_default=False)]
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", "-p",
                                                   help="Apply a named profile from the file.")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", "-s", metavar="KEY=VALUE",
                                                     help="Override any key, e.g. load.duration=5s.")]


def _fmt_s(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


@app.command()
def plan(file: FileArg, profile: ProfileOpt = None, set_: SetOpt = None) -> None:
    """Print the cells, the trial count and the estimated wall time. Runs nothing."""
    p = config.load_plan(file, profile, set_)
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
    console.print(f"{p.trial_count} trials, estimated wall time {_fmt_s(p.estimated_seconds())}")


def _summary_table(trials, axes: list[str]) -> Table:
    t = Table(title="Summary (mean over trials)")
    for a in axes:
        t.add_column(a)
    for col in ("trials", "throughput req/s", "p50 ms", "p99 ms", "max ms", "errors", "valid"):
        t.add_column(col, justify="right")
    for cid, g in trials.groupby("cell_id", sort=False):
        valid = int(g["valid"].astype(bool).sum())
        style = None if valid == len(g) else "red"

        def num(col: str, fmt: str) -> str:
            v = g[col].mean() if col in g else math.nan
            return "-" if v != v else format(v, fmt)
        t.add_row(*[str(g[a].iloc[0]) for a in axes], str(len(g)), num("throughput_rps", ",.0f"),
                  num("latency_p50_ms", ".3f"), num("latency_p99_ms", ".3f"),
                  num("latency_max_ms", ".2f"), str(int(g["errors"].sum())),
                  f"{valid}/{len(g)}", style=style)
    return t


@app.command()
def run(file: Annotated[Optional[Path], typer.Argument(help="Experiment YAML file.",
                                                       show_default=False)] = None,
        profile: ProfileOpt = None, set_: SetOpt = None,
        out: Annotated[Optional[Path], typer.Option("--out", "-o",
                       help="Results dir (default results/<name>/<YYYYmmdd-HHMMSS>).")] = None,
        resume: Annotated[Optional[Path], typer.Option("--resume",
                          help="Finish an interrupted run: only trials not yet recorded.")] = None,
        no_plots: Annotated[bool, typer.Option("--no-plots", help="Skip the plots.")] = False) -> None:
    """Run every trial of an experiment: servers, load, results, plots."""
    from . import hostinfo, plots, runner, servers

    if resume is not None:
        info = results.load(resume).info
        p = config.compile_document(info["document"], info["source"])
        run_dir = resume
    else:
        if file is None:
            raise PerfctlError("perfctl run needs an experiment file (or --resume RUN_DIR). "
                               "Fix: perfctl run experiments.yaml")
        p = config.load_plan(file, profile, set_)
        run_dir = out or results.new_run_dir(p.experiment.name)
    results.prepare(run_dir)
    if resume is None:
        results.write_json(run_dir / "run.json", runner.run_info(p, hostinfo.host_info()))
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
            outcome = runner.run_plan(p, run_dir, on_trial, on_start)
        finally:
            servers.stop_all()
    trials = results.read_trials(run_dir)
    info = results.load(run_dir).info
    if "network_backend" in trials.columns:
        info["network_backend"] = sorted(set(trials["network_backend"].astype(str)))
        results.write_json(run_dir / "run.json", info)
    console.print(_summary_table(trials, p.axes))
    if p.experiment.models:
        from . import modeling
        modeling.model_run(run_dir, plots=not no_plots)
        console.print(f"models: {run_dir / 'models.json'} (perfctl model {run_dir} for the table)")
    if not no_plots:
        for path in plots.draw_basic(trials, p.axes, run_dir / "plots"):
            if path.suffix == ".png":
                console.print(f"plot: {path}")
    console.print(f"trials: {run_dir / 'trials.csv'} ({outcome.ran} run, {outcome.skipped} "
                  "already recorded)")


@app.command()
def serve(impl: Annotated[str, typer.Argument(help="c, java or python.")],
          model: Annotated[Optional[str], typer.Option(help="Concurrency model.")] = None,
          threads: Annotated[int, typer.Option(help="Worker threads / loops.")] = 4,
          backlog: Annotated[int, typer.Option(help="listen() backlog.")] = 128,
          buckets: Annotated[int, typer.Option(help="Counter array size.")] = 1024,
          layout: Annotated[str, typer.Option(help="/search layout: flat or by-type.")] = "flat",
          port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 8080) -> None:
    """Run one bundled server in the foreground (Ctrl-C stops it)."""
    from . import bundled, servers

    bundled.check_impl(impl, model)
    if servers.port_taken(port):
        raise PerfctlError(f"port {port} is already taken. Fix: pass another with --port, or stop "
                           "the process holding it.")
    bundled.build(impl)
    argv = bundled.command(impl, model or bundled.MODELS[impl][0], port, threads, backlog,
                           buckets, layout)
    os.execv(argv[0], argv)


def _register_commands() -> None:
    from . import adhoc, cli_analysis
    from .netem.cli import app as netem_app
    from .netem.doctor import doctor

    adhoc.register(app)
    cli_analysis.register(app)
    app.add_typer(netem_app, name="netem", help="Network emulation tools (the latency proxy).")
    app.command("doctor", help="What this host can do: injection backends, settings that "
                               "change results.")(doctor)


_register_commands()


def _interrupted() -> None:
    from . import servers
    servers.stop_all()
    err_console.print("perfctl: interrupted; every finished trial is kept in trials.csv "
                      "(perfctl run --resume RUN_DIR finishes the rest).")
    sys.exit(130)


def main() -> None:
    """Console-script entry: maps PerfctlError to exit 2 and signals to a clean stop."""
    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    try:
        code = app(standalone_mode=False)
    except PerfctlError as e:
        err_console.print(f"[bold red]perfctl: error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        _interrupted()
    except Exception as e:
        if hasattr(e, "show") and hasattr(e, "exit_code"):   # click usage errors
            e.show()
            sys.exit(2)
        if type(e).__name__ == "Abort":
            _interrupted()
        raise
    if code == 130:   # typer turns KeyboardInterrupt inside a command into Exit(130)
        _interrupted()
    sys.exit(code if isinstance(code, int) else 0)

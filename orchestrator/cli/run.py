"""`perfctl run`: the flags of perfctl.run() (api/run_experiment.py), which does the work."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .console import console
from .plan import ProfileOpt, SetOpt


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
    commit: Annotated[
        str | None,
        typer.Option(
            "--commit",
            metavar="SHA",
            help="The version of the system under test, kept in run.json and the history "
            "(default: git rev-parse HEAD of the experiment's history.git, if any).",
        ),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label",
            metavar="KEY=VALUE",
            help="A free label for the history (repeat for several), e.g. --label branch=main.",
        ),
    ] = None,
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
    """Run every trial of an experiment: servers, load, results, plots; then add the run to
    the performance history. On a terminal a line under the progress bar shows the running
    trial second by second."""
    from ..api.run_experiment import run as run_experiment  # pandas, the trial path: run only

    run_experiment(
        file,
        set_,
        profile,
        out=out,
        resume=resume,
        plots=not no_plots,
        profile_server=profile_server,
        quiet=quiet,
        console=console,
        commit=commit,
        labels=label,
    )

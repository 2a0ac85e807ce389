"""The `perfctl` command line: every command is registered here, and this is the one place
where PerfctlError becomes exit code 2 and Ctrl-C/SIGTERM a clean stop (exit 130)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from .. import __version__
from ..errors import PerfctlError
from ..proc import interrupt
from . import analysis, calibrate, doctor, history, load, plan, run, serve
from .cluster import app as cluster_app
from .console import console, err_console
from .netem import app as netem_app

# rich_markup_mode=None: plain click help ("-o, --out DIR  ..."), where the rich panels showed
# flags as `--no-plots <bool>` and cut the short options into a column of their own.
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Server-performance experiments from one YAML file.",
)


def _version(value: bool) -> None:
    if value:
        console.print(f"perfctl {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """perfctl: build, launch, load, record, model and plot server experiments."""


app.command()(plan.plan)
app.command()(run.run)
app.command()(load.load)
app.command()(serve.serve)
app.command()(analysis.model)
app.command()(analysis.report)
app.command()(analysis.check)
app.command()(analysis.compare)
app.command("doctor")(doctor.doctor)
app.command()(calibrate.calibrate)
app.add_typer(netem_app, name="netem", help="Network emulation tools (the latency proxy).")
app.add_typer(history.app, name="history")
app.add_typer(cluster_app, name="cluster", help="Dask cluster tools: certificates for its TLS.")


def _interrupted() -> None:
    from ..proc import process  # what a command started is stopped; --help started nothing

    interrupt.handled()
    process.stop_all()
    err_console.print(
        "perfctl: interrupted; every finished trial is kept in trials.csv "
        "(perfctl run --resume RUN_DIR finishes the rest)."
    )
    sys.exit(130)


def main() -> None:
    """Console-script entry: maps PerfctlError to exit 2 and signals to a clean stop."""

    interrupt.install()
    try:
        code = app(standalone_mode=False)
    except PerfctlError as e:
        err_console.print(f"[bold red]perfctl: error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        _interrupted()
    except Exception as e:
        if hasattr(e, "show") and hasattr(e, "exit_code"):  # click usage errors
            e.show()
            sys.exit(2)
        if type(e).__name__ == "Abort":
            _interrupted()
        raise
    if code == 130 or interrupt.pending():  # typer turns KeyboardInterrupt inside a command
        _interrupted()  # into Exit(130); pending: swallowed after the run loop's last check
    sys.exit(code if isinstance(code, int) else 0)

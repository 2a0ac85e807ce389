"""`perfctl plan`: what an experiment will do (cells, trials, estimated wall time); runs nothing.

Up to a screenful of cells gets one line each; a bigger matrix gets a summary (each axis and
its values, the first cells) instead, so a 10^5-cell plan prints a page, not 10^5 lines. The
cells are compiled one at a time (experiment/cells.py), never all held at once.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ..numbers import fmt_duration, fmt_span
from .console import console

if TYPE_CHECKING:
    from ..experiment import Plan

SCREEN_CELLS = 30  # more cells than this: a summary instead of one line per cell
FIRST_CELLS = 10  # cells listed in the summary

FileArg = Annotated[
    Path, typer.Argument(metavar="FILE", help="Experiment YAML file.", show_default=False)
]
ProfileOpt = Annotated[
    str | None, typer.Option("--profile", "-p", help="Apply a named profile from the file.")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set", "-s", metavar="KEY=VALUE", help="Override any key, e.g. load.duration=5s."
    ),
]


def _load_text(cell, searching: bool = False) -> str:
    ld = cell.load
    if searching:
        what = "rate" if ld.mode == "open" else f"users (think {fmt_span(ld.think_time_s)})"
        driver = "" if ld.driver == "http" else f" (driver {ld.driver_label})"
        return (
            f"{ld.mode}: {what} searched, {fmt_span(ld.window_s)} + "
            f"{fmt_span(ld.warmup_s)} warm-up per probe{driver}"
        )
    text = {
        "open": f"open {ld.arrivals} {ld.rate_rps or 0:g}/s",
        "closed": f"closed {ld.connections} conn",
        "burst": f"burst {ld.bursts}x{ld.connections} conn",
        "ramp": f"ramp {len(ld.ramp.rates) if ld.ramp else 0} steps",
    }[ld.mode]
    driver = "" if ld.driver == "http" else f" (driver {ld.driver_label})"
    warm = f"{fmt_span(ld.warmup_s)} warm-up"
    if ld.warmup_auto_max_s:
        warm = f"auto warm-up (until steady, at most {fmt_span(ld.warmup_auto_max_s)}) + {warm}"
    return text + f", {fmt_span(ld.window_s)} + {warm}{driver}"


def _cell_table(p: Plan, cells, title: str) -> Table:
    t = Table(title=title)
    t.add_column("cell_id")
    for a in p.axes:
        t.add_column(a)
    t.add_column("server")
    t.add_column("load")
    searching = p.experiment.search is not None
    for c in cells:
        t.add_row(
            c.cell_id, *[str(c.values[a]) for a in p.axes], c.server.label, _load_text(c, searching)
        )
    return t


def _axes_table(p: Plan) -> Table:
    t = Table(
        title=f"{p.experiment.name}: {len(p.cells):,} cells x {p.repeats} repeats "
        "(one line per axis)"
    )
    t.add_column("axis")
    t.add_column("values", justify="right")
    t.add_column("first values")
    axes = dict(p.experiment.matrix)
    if "server" not in axes:
        axes = {"server": list(p.experiment.servers), **axes}
    for name, vals in axes.items():
        shown = ", ".join(map(str, vals[:8])) + (", ..." if len(vals) > 8 else "")
        t.add_row(name, str(len(vals)), shown)
    return t


def plan(file: FileArg, profile: ProfileOpt = None, set_: SetOpt = None) -> None:
    """Print the cells (a summary beyond a screenful), the trial count and the estimated wall
    time. Runs nothing."""
    from ..experiment import load_plan  # pydantic models of the file: this command's own work

    p = load_plan(file.resolve(), profile, set_)
    n = len(p.cells)
    s = p.experiment.search
    per_cell = f"{n} cells x {p.repeats} repeats"
    if s is not None:
        per_cell = f"{n} cells, a search each (at most {s.max_trials} trials)"
    if n <= SCREEN_CELLS:
        console.print(_cell_table(p, p.cells, f"{p.experiment.name}: {per_cell}"))
    else:
        console.print(_axes_table(p))
        console.print(
            _cell_table(
                p, itertools.islice(p.cells, FIRST_CELLS), f"the first {FIRST_CELLS} of {n:,} cells"
            )
        )
        console.print(
            f"... and {n - FIRST_CELLS:,} more cells (a line per cell only up to "
            f"{SCREEN_CELLS} cells)"
        )
    if s is not None:
        fewest, most = p.search_trials()
        console.print(
            f"search: {s.slo.text}, precision ±{100 * s.precision:g}% at "
            f"{100 * s.confidence:g}% confidence; per cell 2 set-up probes (service time, "
            f"saturation) then probes at the knee until the precision is reached"
            + (
                f", then {p.curve_points} rates for the curve (rate: auto)"
                if p.curve_points
                else ""
            )
            + f": {fewest} to {most} trials"
        )
        console.print(
            f"{n * fewest:,} to {n * most:,} trials, estimated wall time "
            f"{fmt_duration(p.estimated_seconds(fewest))} to "
            f"{fmt_duration(p.estimated_seconds(most))}"
        )
        return
    console.print(
        f"{p.trial_count:,} trials, estimated wall time {fmt_duration(p.estimated_seconds())}"
    )

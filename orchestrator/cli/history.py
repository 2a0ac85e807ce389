"""`perfctl history show | check | import`: the performance history (orchestrator/history/).

Exit codes of check: 0 no regression; 1 the newest runs sit after a regression beyond the
tolerance; 3 the evidence is too thin to judge; 2 bad input (a store that is missing, locked,
corrupt, from a newer perfctl or unreachable). Each verdict is one paragraph naming the cell,
the metric, the size and the commit range. pandas, numpy and the database drivers load inside
the command that runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import PerfctlError
from .console import console

app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="The performance history: every run remembered, change points found, CI gated on the "
    "trend.",
)

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="PATH|URL",
        help="The history store: an SQLite file or postgresql://USER@HOST:PORT/DB (default: "
        "$PERFCTL_HISTORY_URL, else results/history.sqlite).",
        show_default=False,
    ),
]
ExperimentArg = Annotated[
    str | None,
    typer.Argument(
        metavar="[EXPERIMENT]",
        help="An experiment's name, or its YAML file (whose history: names the store); "
        "default: every experiment in the store.",
        show_default=False,
    ),
]
CellOpt = Annotated[
    list[str] | None,
    typer.Option("--cell", help="Only this cell (its id or its label); repeat for several."),
]
MetricOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--metric",
        help="throughput, p50, p99, error_rate or capacity; repeat for several "
        "(default: throughput and p99, and capacity where searched).",
    ),
]
NoisyOpt = Annotated[
    bool,
    typer.Option(
        "--include-noisy",
        help="Use valid trials the host disturbed too (default: valid, quiet trials only).",
    ),
]


def _target(experiment: str | None, store: str | None):
    """(experiment name or None, store location) from the argument and --store."""
    from ..history.store import locate  # the store module: loaded by the command

    if experiment and experiment.endswith((".yaml", ".yml")) and Path(experiment).is_file():
        from ..experiment import load_plan  # the experiment models: only for a YAML argument

        plan = load_plan(Path(experiment).resolve())
        config = plan.experiment.history
        return plan.experiment.name, locate(store, config, plan.source)
    return experiment, locate(store)


def _metrics(metric: list[str] | None, default: tuple[str, ...]) -> tuple[str, ...]:
    from ..history.trend import check_metric  # pandas: loaded by the command

    return tuple(check_metric(m) for m in metric) if metric else default


def show(
    experiment: ExperimentArg = None,
    cell: CellOpt = None,
    metric: MetricOpt = None,
    last: Annotated[
        int, typer.Option("--last", min=2, help="The newest runs of each series to analyse.")
    ] = 100,
    png: Annotated[
        Path | None,
        typer.Option(
            "--png",
            help="Where to draw the figure (default results/history/EXPERIMENT-METRICS.png).",
        ),
    ] = None,
    store: StoreOpt = None,
    include_noisy: NoisyOpt = False,
) -> None:
    """The series of an experiment, run by run: each cell and metric with its change points
    (size with its 95% interval, p-value, first run after, commit range), and a figure."""
    from ..history import figure, trend  # pandas, numpy, matplotlib: loaded by the command
    from ..history.store import Store  # (and the database drivers)

    name, location = _target(experiment, store)
    metrics = _metrics(metric, trend.CHECK_METRICS)
    with Store(location, create=False) as st:
        series = trend.build_series(st, name, metrics, cell, include_noisy)
        if not series:
            raise PerfctlError(_nothing(name, location, cell, st.experiments()))
    series = [trend.detect(s.tail(last)) for s in series]
    t = Table(title=f"History of {name or 'every experiment'} in {location}")
    for col in ("experiment", "cell", "metric", "runs", "newest median", "change points"):
        t.add_column(col, justify="right" if col in ("runs", "newest median") else "left")
    for s in series:
        cps = "\n".join(
            escape(
                f"{c.change * 100:+.1f}% [{(c.ratio_low - 1) * 100:+.1f}%, "
                f"{(c.ratio_high - 1) * 100:+.1f}%] p={c.p_value:.2g} at run {c.index + 1} "
                f"({s.started[c.index]}), commits {s.commit_range(c.index)}"
            )
            for c in s.change_points
        )
        t.add_row(
            s.experiment,
            s.cell_label,
            s.metric,
            str(len(s.run_ids)),
            f"{s.medians()[-1]:.4g} {s.unit}".strip(),
            cps or "none",
        )
    console.print(t)
    path = png or Path("results") / "history" / f"{name or 'all'}-{'-'.join(metrics)}.png"
    figure.draw(series, path, f"{name or 'every experiment'}: {', '.join(metrics)}")
    console.print(f"plot: {path}")


def _nothing(name: str | None, location, cell, experiments: list[str]) -> str:
    which = f"experiment {name!r}" if name else "any experiment"
    which += f" (cells {', '.join(cell)})" if cell else ""
    held = (
        f"it holds runs of {', '.join(experiments[:10])}{' ...' if len(experiments) > 10 else ''}"
        if experiments
        else "it holds no run at all"
    )
    return (
        f"history store {location} has no valid, quiet trials of {which} ({held}). Fix: name "
        "one of those experiments (and cells), add runs with perfctl history import "
        "RUN_DIR..., or use --include-noisy when the trials are valid but noisy."
    )


def check(
    experiment: ExperimentArg = None,
    cell: CellOpt = None,
    metric: MetricOpt = None,
    tolerance: Annotated[
        float, typer.Option(min=0.0, help="Relative change a regression must exceed (0.05 = 5%).")
    ] = 0.05,
    window: Annotated[
        int, typer.Option("--window", min=2, help="The newest runs of each series judged.")
    ] = 40,
    store: StoreOpt = None,
    include_noisy: NoisyOpt = False,
) -> None:
    """Gate CI on the trend: exit 1 when the newest runs sit after a regression beyond
    --tolerance, 3 when the evidence is too thin, 0 otherwise; one paragraph per series."""
    from ..history import trend  # pandas, numpy: loaded by the command
    from ..history.store import Store  # (and the database drivers)

    name, location = _target(experiment, store)
    metrics = _metrics(metric, trend.CHECK_METRICS)
    with Store(location, create=False) as st:
        verdicts = trend.check(st, name, metrics, cell, tolerance, window, include_noisy)
        if not verdicts:
            raise PerfctlError(_nothing(name, location, cell, st.experiments()))
    style = {"regression": "bold red", "thin": "yellow", "ok": "green"}
    rank = {"regression": 0, "thin": 1, "ok": 2}
    for v in sorted(verdicts, key=lambda v: rank[v.status]):
        console.print(
            f"[{style[v.status]}]{v.status}[/]: {escape(v.text)}", highlight=False, soft_wrap=True
        )
    code = trend.exit_code(verdicts)
    if code:
        raise typer.Exit(code)


def import_(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN_DIR...",
            help="Run directories written by perfctl run, or directories holding them "
            "(results/, results/EXPERIMENT/), e.g. results/*.",
            show_default=False,
        ),
    ],
    store: StoreOpt = None,
) -> None:
    """Add run directories to the history (each once: a run already there is skipped)."""
    import json  # run.json: read per directory

    from ..history.add import add_run, location_of_run  # pandas: loaded by the command
    from ..results.claim import RUN_FILE  # (pandas too)

    dirs = list(dict.fromkeys(d.resolve() for d in run_dirs))  # results/latest: seen once
    # a directory holding runs (results/, results/<experiment>/) stands for them
    for _ in range(2):
        dirs = list(
            dict.fromkeys(
                x
                for d in dirs
                for x in (
                    [d]
                    if (d / RUN_FILE).is_file() or not d.is_dir()
                    else sorted(c.resolve() for c in d.iterdir() if c.is_dir()) or [d]
                )
            )
        )
    runs = [d for d in dirs if (d / RUN_FILE).is_file()]
    skipped = [d for d in dirs if d.is_dir() and not (d / RUN_FILE).is_file()]
    if not runs:
        raise PerfctlError(
            f"{', '.join(map(str, run_dirs[:3]))}{' ...' if len(run_dirs) > 3 else ''}: no "
            "perfctl run directory among them (none has a run.json). Fix: give directories "
            "written by perfctl run, e.g. perfctl history import results/*/*."
        )
    added = present = 0
    for d in runs:
        try:
            info = json.loads((d / RUN_FILE).read_text())
        except ValueError:
            info = {}
        location = location_of_run(info, store)
        result = add_run(d, location)
        added += result.changed
        present += not result.changed
        console.print(
            f"{d}: {'added' if result.changed else 'already there'} as run {result.run_id} "
            f"in {location} ({result.trials} new trial(s))",
            highlight=False,
            soft_wrap=True,
        )
    console.print(
        f"history import: {added} run(s) added, {present} already there"
        + (f", {len(skipped)} director(ies) without run.json skipped" if skipped else "")
    )


app.command()(show)
app.command()(check)
app.command("import")(import_)

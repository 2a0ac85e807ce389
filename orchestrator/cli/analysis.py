"""The analysis commands of `perfctl`: model, report, check, compare.

Exit codes: 0 fine; 1 a threshold breached (check) or a significant regression (compare);
2 bad input (PerfctlError, mapped by main.py); 3 compare could not decide (too few usable
trials in a cell, and no regression elsewhere). scipy, pandas and matplotlib load inside the
command that runs, never when the CLI starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import PerfctlError
from ..numbers import fmt, pct
from .console import console

RunArg = Annotated[
    Path,
    typer.Argument(
        metavar="RUN_DIR",
        help="Run directory written by perfctl run (e.g. results/latest).",
        show_default=False,
    ),
]
NoisyOpt = Annotated[
    bool,
    typer.Option(
        "--include-noisy",
        help="Use valid trials the host disturbed too (default: valid, quiet trials only).",
    ),
]


def model(
    run_dir: RunArg,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="Skip the model figures.")] = False,
    what_if: Annotated[
        list[str] | None,
        typer.Option(
            "--what-if",
            metavar="KEY=VALUE",
            help="Predict the cells with threads, cores, delay (one way), rate or users "
            "changed, from the fitted models (repeat for several).",
        ),
    ] = None,
    run_what_if: Annotated[
        bool,
        typer.Option(
            "--run-what-if",
            help="Also run that configuration for real (into RUN_DIR/what-if/) and print "
            "predicted vs measured.",
        ),
    ] = False,
) -> None:
    """Fit queueing models to a run: every prediction with its band and verdict, each cell's
    bottleneck, models.json, figures; what-if predictions of another configuration."""
    from models import whatif as whatif_  # models: loaded by the command, not at start-up

    from .. import results  # pandas, pyarrow: loaded by the command, not at start-up
    from ..analysis import queueing  # scipy, pandas: loaded by the command, not at start-up
    from ..analysis.model_figures import draw_models  # matplotlib: loaded by the command
    from ..api.display import step  # rich.progress: loaded by the command

    try:
        changes = whatif_.parse(what_if or [])
    except ValueError as e:
        raise PerfctlError(f"{e}. See perfctl model --help.") from None
    if run_what_if and not changes:
        raise PerfctlError("--run-what-if runs a --what-if configuration: give --what-if too")
    with step(console, "fitting queueing models"):
        doc, table = queueing.fit_run(run_dir, changes or None)
    if doc.get("mix"):
        console.print(f"note: {doc['mix']}", markup=False)
    for note in doc.get("left_out", []):
        console.print(f"skipped: {note}", markup=False)
    if not no_plots:
        with step(console, "drawing the model figures"):
            run = results.load(run_dir)
            draw_models(run, table, run.path / "plots", changes or None)
    cells = doc["cells"]
    if not cells:
        console.print("no trials to model")
        return
    console.print(model_table(cells))
    for c, line in zip(cells, queueing.cell_details(table)):
        console.print(
            line, highlight=False, soft_wrap=True, style="red" if c.get("from_invalid") else None
        )
    for f in doc["usl"]:
        peak = f["peak_concurrency"]
        console.print(
            f"USL {f['server']}: sigma={f['sigma']:.4g} kappa={f['kappa']:.3g} "
            f"lambda={f['lam']:.4g} req/s, R²={f['r_squared']:.3f}; peak "
            f"{fmt(f['peak_throughput_rps'], ',.0f')} req/s at N={fmt(peak, '.1f')}"
        )
    if any(c.get("from_invalid") for c in cells):
        console.print("[red]red rows: no valid trial in the cell; its invalid trials were used[/]")
    if changes:
        console.print(what_if_table(doc["what_if"]))
    if run_what_if:
        from .what_if_run import run_what_if as run_it  # noqa: PLC0415  (runs servers: only here)

        run_it(results.load(run_dir), changes, doc["what_if"]["cells"])
    console.print(f"models: {results.load(run_dir).path / 'models.json'}")


def _band(c: dict, stat: str) -> str:
    lo, hi = c.get(f"pred_{stat}_low_ms"), c.get(f"pred_{stat}_high_ms")
    if lo is None:
        return fmt(c.get(f"pred_{stat}_ms"), ".3f")
    return escape(f"{fmt(c.get(f'pred_{stat}_ms'), '.3f')} [{fmt(lo, '.3g')}, {fmt(hi, '.3g')}]")


def model_table(cells: list[dict]) -> Table:
    """Measured vs predicted per cell: every prediction beside its band and its verdict."""
    t = Table(
        title="Models vs measurements (latency in ms; \\[band]; error = (predicted - measured)"
        " / measured; verdict: held / rejected / inconclusive)"
    )
    for col in (
        "cell",
        "model",
        "meas mean",
        "pred mean [band]",
        "err",
        "verdict",
        "meas p99",
        "pred p99 [band]",
        "err",
        "verdict",
    ):
        t.add_column(
            escape(col), justify="left" if col in ("cell", "model", "verdict") else "right"
        )
    for c in cells:
        g = c.get
        row = [g("label", g("cell_id")), str(g("model", ""))]
        for stat in ("mean", "p99"):
            status = g(f"verdict_{stat}") or "no prediction"
            colour = {"held": "green", "rejected": "red", "inconclusive": "yellow"}.get(status)
            row += [
                fmt(g(f"measured_{stat}_ms"), ".3f"),
                _band(c, stat),
                pct(g(f"err_{stat}")),
                f"[{colour}]{status}[/]" if colour else status,
            ]
        t.add_row(*row, style="red" if g("from_invalid") else None)
    return t


def what_if_table(what_if: dict) -> Table:
    """The what-if predictions, each with the verdict its model had on the measured cell."""
    what = ", ".join(f"{k}={v:g}" for k, v in what_if["changes"].items())
    t = Table(title=f"What if {what} (predicted by each cell's fitted model; ms)")
    for col in (
        "cell",
        "model",
        "pred mean [band]",
        "pred p99 [band]",
        "model's verdict on the measured cell",
        "notes",
    ):
        t.add_column(escape(col), justify="right" if col.startswith("pred") else "left")
    for c in what_if["cells"]:
        t.add_row(
            c.get("label", c["cell_id"]),
            str(c.get("model", "")),
            _band(c, "mean"),
            _band(c, "p99"),
            str(c.get("basis_verdict", "")),
            str(c.get("notes", "")),
        )
    return t


def report(
    run_dir: RunArg,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Where to write the report (default RUN_DIR/report.html)."
        ),
    ] = None,
) -> None:
    """Write one self-contained report.html: summary, thresholds, figures, models, config."""
    from ..analysis import report as report_  # matplotlib, scipy, pandas: not at start-up
    from ..api.display import step  # rich.progress: loaded by the command

    notes: list[str] = []
    with step(console, "drawing the figures, fitting the models, writing the report"):
        path = report_.build(run_dir, out, notes)
    for note in dict.fromkeys(notes):
        console.print(f"skipped: {note}", markup=False)
    console.print(f"report: {path}")


def check(
    run_dir: RunArg,
    thresholds: Annotated[
        Path | None,
        typer.Option(
            "--thresholds",
            "-t",
            help="YAML file with thresholds instead of the experiment's `thresholds:`: a "
            "list (or a `thresholds:` key holding one) of entries such as "
            "`- {where: {server: c-pool}, p99_ms: {lt: 5}, error_rate: {lt: 0.001}}`. "
            "`where` picks cells by trials.csv columns (no where: every cell); every "
            "other key is a trials.csv column or p50_ms/p90_ms/p99_ms/p999_ms/mean_ms/"
            "max_ms, mapped to lt, le, gt or ge and a limit in that column's unit.",
            show_default=False,
        ),
    ] = None,
    include_noisy: NoisyOpt = False,
) -> None:
    """Check thresholds per cell (mean over its valid, quiet trials); exit 1 on any breach,
    2 when there is nothing to check."""
    from ..analysis import check as check_  # pandas: loaded by the command, not at start-up

    verdicts = check_.check_run(run_dir, thresholds, include_noisy)
    if not verdicts:
        source = thresholds or "the run's experiment"
        raise PerfctlError(
            f"{run_dir}: nothing to check: {source} has no thresholds, so perfctl check "
            "cannot pass or fail anything (exit 2). Fix: add e.g. `thresholds: [{p99_ms: "
            "{lt: 5}, error_rate: {lt: 0.001}}]` to the experiment file, or pass -t FILE "
            "with such a list (perfctl check --help shows the format)."
        )
    used = "valid trials" if include_noisy else "valid, quiet trials"
    t = Table(title=f"Thresholds (measured: mean over the cell's {used})")
    for col in ("#", "threshold", "where", "cell", "measured", "trials", "verdict"):
        t.add_column(col, justify="right" if col in ("#", "measured", "trials") else "left")
    for v in verdicts:
        verdict = (
            "[green]pass[/]"
            if v.passed
            else f"[bold red]BREACH[/]{' (' + v.note + ')' if v.note else ''}"
        )
        trials = f"{v.trials}" + (f" ({v.excluded} left out)" if v.excluded else "")
        t.add_row(
            str(v.threshold.index),
            v.threshold.text,
            v.threshold.where_text,
            v.cell_label,
            fmt(v.measured, ".6g"),
            trials,
            verdict,
        )
    console.print(t)
    by_cell = {v.cell_id: v for v in verdicts}
    for v in by_cell.values():
        if v.usage:
            console.print(f"{v.cell_label}: {v.usage}", markup=False)
            for line in v.left_out:
                console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    breaches = sum(not v.passed for v in verdicts)
    left_out = sum(v.excluded for v in by_cell.values())
    console.print(
        f"{len(verdicts)} checks, {breaches} breached"
        + (f"; {left_out} trial(s) left out (invalid or noisy: see trials.csv)" if left_out else "")
    )
    if breaches:
        raise typer.Exit(1)


def _metric_text(m) -> str:
    """One metric of one cell (analysis.compare.MetricChange) as the table's cell."""
    sig = "*" if m.significant else ""
    text = (
        f"{fmt(m.base, '.4g')} -> {fmt(m.cand, '.4g')}\n{pct(m.change)}{sig} "
        f"[{pct(m.ci[0])}, {pct(m.ci[1])}]\np={fmt(m.p_holm, '.2g')}"
    )
    if m.pooled_change == m.pooled_change:
        text += f"\nrequests {pct(m.pooled_change)}"
    return text


def compare(
    base: Annotated[
        Path, typer.Argument(metavar="BASE", help="Baseline run directory.", show_default=False)
    ],
    cand: Annotated[
        Path, typer.Argument(metavar="CAND", help="Candidate run directory.", show_default=False)
    ],
    tolerance: Annotated[
        float, typer.Option(min=0.0, help="Relative change a regression must exceed (0.05 = 5%).")
    ] = 0.05,
    alpha: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Significance level after Holm-Bonferroni.")
    ] = 0.05,
    include_noisy: NoisyOpt = False,
    calibration: Annotated[
        Path | None,
        typer.Option(
            help="Host calibration from perfctl calibrate (default: "
            "results/.calibration.json when there is one)."
        ),
    ] = None,
) -> None:
    """Compare two runs cell by cell, each trial one observation; exit 1 on a significant
    regression beyond --tolerance, 3 when a cell has too few usable trials to decide."""
    from ..analysis.compare import METRICS  # scipy, pandas: loaded by the command only
    from ..api.compare_runs import compare as compare_runs  # (the same as perfctl.compare)

    result = compare_runs(
        base,
        cand,
        tolerance=tolerance,
        alpha=alpha,
        include_noisy=include_noisy,
        calibration=calibration,
    )
    if result.capacities:
        _compare_capacities(base, cand, result, tolerance)
        return
    t = Table(
        title=f"{base} -> {cand}: median of trials, change (95% CI), Holm-adjusted "
        "Mann-Whitney p across trials"
    )
    t.add_column("cell")
    t.add_column("trials\nbase/cand", justify="right")
    for m in METRICS:
        t.add_column(m + (" req/s" if m == "throughput" else " ms"), justify="right")
    t.add_column("verdict")
    t.add_column("notes")
    for c in result.cells:
        colour = {"slower": "bold red", "faster": "green", "inconclusive": "yellow"}.get(c.verdict)
        t.add_row(
            c.label,
            f"{c.n_base}/{c.n_cand}",
            *[_metric_text(c.metrics[m]) for m in METRICS],
            f"[{colour}]{c.verdict}[/]" if colour else c.verdict,
            "\n".join(c.notes),
        )
    console.print(t)
    console.print(
        "trials: the usable ones (valid"
        + ("" if include_noisy else ", quiet")
        + "); requests: the same quantile over the pooled requests (detail only)"
    )
    left_out = [c for c in result.cells if c.left_out]
    if left_out:
        console.print("trials left out, each reason once:")
    for c in left_out:
        console.print(f"  {c.label}", markup=False, highlight=False)
        for line in c.left_out:
            console.print(f"    {line}", markup=False, highlight=False, soft_wrap=True)
    for n in result.notes:
        console.print(f"note: {n}")
    if result.verdict == "regression":
        console.print(
            f"[bold red]regression[/]: at least one cell is significantly slower by "
            f"more than {tolerance:.0%}"
        )
    elif result.verdict == "inconclusive":
        console.print(
            "[yellow]inconclusive[/]: a cell has too few usable trials to decide "
            "(more repeats, a quieter host, or --include-noisy)"
        )
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def _compare_capacities(base: Path, cand: Path, result, tolerance: float) -> None:
    """compare's table and exit code for two capacity searches."""
    t = Table(
        title=f"{base} -> {cand}: searched capacity, change (95% CI), Holm-adjusted p "
        "(capacity_compare.py)"
    )
    for col in ("cell", "base", "candidate", "change", "p", "verdict", "notes"):
        t.add_column(
            col, justify="right" if col in ("base", "candidate", "change", "p") else "left"
        )
    for c in result.capacities:
        unit = "/s" if c.unit == "rate_rps" else " users"
        colour = {"slower": "bold red", "faster": "green", "inconclusive": "yellow"}.get(c.verdict)
        t.add_row(
            c.label,
            f"{fmt(c.base, '.4g')}{unit}\n[{fmt(c.base_interval[0], '.4g')}, "
            f"{fmt(c.base_interval[1], '.4g')}]",
            f"{fmt(c.cand, '.4g')}{unit}\n[{fmt(c.cand_interval[0], '.4g')}, "
            f"{fmt(c.cand_interval[1], '.4g')}]",
            f"{pct(c.change)}\n[{pct(c.ci[0])}, {pct(c.ci[1])}]",
            fmt(c.p_holm, ".2g"),
            f"[{colour}]{c.verdict}[/]" if colour else c.verdict,
            "\n".join(c.notes),
        )
    console.print(t)
    for n in result.notes:
        console.print(f"note: {n}")
    if result.verdict == "regression":
        console.print(
            f"[bold red]regression[/]: a cell's capacity is significantly lower by more than "
            f"{tolerance:.0%}"
        )
    elif result.verdict == "inconclusive":
        console.print(
            "[yellow]inconclusive[/]: a cell's capacities are too uncertain to decide "
            "(a larger search.max_trials, or a quieter host)"
        )
    if result.exit_code:
        raise typer.Exit(result.exit_code)

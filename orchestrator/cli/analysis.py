"""The analysis commands of `perfctl`: model, report, check, compare.

Exit codes: 0 fine; 1 a threshold breached (check) or a significant regression (compare);
2 bad input (PerfctlError, mapped by main.py); 3 compare could not decide (too few usable
trials in a cell, and no regression elsewhere).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .. import results
from ..analysis import check as check_
from ..analysis import compare as compare_
from ..analysis import queueing
from ..analysis import report as report_
from ..analysis.model_figures import draw_models
from ..errors import PerfctlError
from .console import console, fmt, pct, step

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
INCONCLUSIVE_EXIT = 3


def model(
    run_dir: RunArg,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="Skip the model figures.")] = False,
) -> None:
    """Fit queueing models to a run: predicted vs measured per cell, models.json, figures."""
    with step("fitting queueing models"):
        doc, table = queueing.fit_run(run_dir)
    if not no_plots:
        with step("drawing the model figures"):
            run = results.load(run_dir)
            draw_models(run, table, run.path / "plots")
    cells = doc["cells"]
    if not cells:
        console.print("no trials to model")
        return
    t = Table(
        title="Models vs measurements (latency in ms; error = (predicted - measured) / measured)"
    )
    for col in (
        "cell",
        "model",
        "meas mean",
        "pred mean",
        "err",
        "meas p99",
        "pred p99",
        "err",
        "every applicable model: mean (err)",
    ):
        t.add_column(
            col, justify="left" if col in ("cell", "model") or col.startswith("every") else "right"
        )
    for c in cells:
        g = c.get
        others = [
            f"{k[5:-8]} {fmt(v, '.3g')} ({pct(g('err_' + k[5:-8] + '_mean'))})"
            for k, v in c.items()
            if k.startswith("pred_")
            and k.endswith("_mean_ms")
            and k != "pred_mean_ms"
            and v is not None
        ]
        t.add_row(
            g("label", g("cell_id")),
            str(g("model", "")),
            fmt(g("measured_mean_ms"), ".3f"),
            fmt(g("pred_mean_ms"), ".3f"),
            pct(g("err_mean")),
            fmt(g("measured_p99_ms"), ".3f"),
            fmt(g("pred_p99_ms"), ".3f"),
            pct(g("err_p99")),
            "\n".join(others),
            style="red" if g("from_invalid") else None,
        )
    console.print(t)
    for f in doc["usl"]:
        peak = f["peak_concurrency"]
        console.print(
            f"USL {f['server']}: sigma={f['sigma']:.4g} kappa={f['kappa']:.3g} "
            f"lambda={f['lam']:.4g} req/s, R²={f['r_squared']:.3f}; peak "
            f"{fmt(f['peak_throughput_rps'], ',.0f')} req/s at N={fmt(peak, '.1f')}"
        )
    if any(c.get("from_invalid") for c in cells):
        console.print("[red]red rows: no valid trial in the cell; its invalid trials were used[/]")
    console.print(f"models: {results.load(run_dir).path / 'models.json'}")


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
    with step("drawing the figures, fitting the models, writing the report"):
        path = report_.build(run_dir, out)
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
    breaches = sum(not v.passed for v in verdicts)
    left_out = sum(v.excluded for v in {v.cell_id: v for v in verdicts}.values())
    console.print(
        f"{len(verdicts)} checks, {breaches} breached"
        + (f"; {left_out} trial(s) left out (invalid or noisy: see trials.csv)" if left_out else "")
    )
    if breaches:
        raise typer.Exit(1)


def _metric_text(m: compare_.MetricChange) -> str:
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
    result = compare_.compare_runs(
        base, cand, tolerance, alpha, include_noisy=include_noisy, calibration=calibration
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
    for m in compare_.METRICS:
        t.add_column(m + (" req/s" if m == "throughput" else " ms"), justify="right")
    t.add_column("verdict")
    t.add_column("notes")
    for c in result.cells:
        colour = {"slower": "bold red", "faster": "green", "inconclusive": "yellow"}.get(c.verdict)
        t.add_row(
            c.label,
            f"{c.n_base}/{c.n_cand}",
            *[_metric_text(c.metrics[m]) for m in compare_.METRICS],
            f"[{colour}]{c.verdict}[/]" if colour else c.verdict,
            "\n".join(c.notes),
        )
    console.print(t)
    console.print(
        "trials: the usable ones (valid"
        + ("" if include_noisy else ", quiet")
        + "); requests: the same quantile over the pooled requests (detail only)"
    )
    for n in result.notes:
        console.print(f"note: {n}")
    if compare_.regressed(result.cells):
        console.print(
            f"[bold red]regression[/]: at least one cell is significantly slower by "
            f"more than {tolerance:.0%}"
        )
        raise typer.Exit(1)
    if compare_.inconclusive(result.cells):
        console.print(
            "[yellow]inconclusive[/]: a cell has too few usable trials to decide "
            "(more repeats, a quieter host, or --include-noisy)"
        )
        raise typer.Exit(INCONCLUSIVE_EXIT)


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
    if compare_.regressed(result.capacities):
        console.print(
            f"[bold red]regression[/]: a cell's capacity is significantly lower by more than "
            f"{tolerance:.0%}"
        )
        raise typer.Exit(1)
    if compare_.inconclusive(result.capacities):
        console.print(
            "[yellow]inconclusive[/]: a cell's capacities are too uncertain to decide "
            "(a larger search.max_trials, or a quieter host)"
        )
        raise typer.Exit(INCONCLUSIVE_EXIT)

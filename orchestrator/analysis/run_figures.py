"""Measurement figures of a run: throughput, percentiles, p99, errors against load; the
per-second timeline; the latency spectrum (CDF). Conventions: figures.py."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from loadgen import hdr

from .draw_pool import draw_all
from .figures import (
    MAX_CDF_POINTS,
    MAX_TIMELINE_CELLS,
    PERCENTILE_STYLES,
    Figure,
    axis_label,
    load_series,
    log_if_spans,
    mark_invalid,
    metric_vs_load,
    panel_grid,
    plt,
    prepare,
    save,
    server_colours,
    trial_cell_labels,
    x_scale,
    xticks_for_cells,
)
from .histograms import cell_distributions
from .views import measured_trials, trimmed_timeline


@dataclass(frozen=True)
class _VsLoad:
    """A figure of one trials column against load (metric_vs_load): "<title> vs load"."""

    metric: str
    ylabel: str
    title: str
    caption: str
    log_y: bool = False
    offered: bool = False  # open mode's offered rate, dotted


THROUGHPUT = _VsLoad(
    "throughput_rps",
    "throughput (requests/s)",
    "Throughput",
    "Completed requests per second in the measured window, mean over trials "
    "(band: min-max); dotted: offered rate in open mode.",
    offered=True,
)
P99 = _VsLoad(
    "latency_p99_ms",
    "p99 latency (ms)",
    "p99 latency",
    "99th percentile latency per trial, mean over trials (band: min-max).",
    log_y=True,
)
ERROR_RATE = _VsLoad(
    "error_pct",
    "errors (% of requests)",
    "Error rate",
    "Transport errors and HTTP statuses >= 400 as a share of requests ({total} errors in the run).",
)


def throughput_figure(trials, axes, out_dir: Path, colours=None) -> Figure:
    return _vs_load(THROUGHPUT, "throughput", prepare(trials, axes), axes, out_dir, colours)


def p99_figure(trials, axes, out_dir: Path, colours=None) -> Figure:
    return _vs_load(P99, "latency_p99", prepare(trials, axes), axes, out_dir, colours)


def error_rate_figure(trials, axes, out_dir: Path, colours=None) -> Figure:
    total = int(trials["errors"].sum()) if "errors" in trials else 0
    rows = prepare(trials, axes).assign(error_pct=100 * trials["error_rate"].fillna(0.0))
    return _vs_load(ERROR_RATE, "error_rate", rows, axes, out_dir, colours, total=total)


def _vs_load(
    what: _VsLoad, name: str, rows: pd.DataFrame, axes, out_dir: Path, colours, **caption
) -> Figure:
    """`what` drawn from the trials (rows, prepared) and saved as `name`; caption: the
    values its caption names."""
    colours = colours or server_colours(list(rows["server"].unique()))
    series = load_series(rows, axes)
    fig = metric_vs_load(
        series,
        what.metric,
        what.ylabel,
        what.title,
        colours,
        log_y=what.log_y,
        offered=what.offered,
    )
    title = f"{what.title} vs load"
    return Figure(name, title, what.caption.format(**caption), save(fig, out_dir, name))


def percentiles_figure(trials, axes, out_dir: Path, colours=None) -> Figure:
    """p50/p90/p99/p99.9 against load: the hockey stick."""
    colours = colours or server_colours(list(trials["server"].unique()))
    series = load_series(prepare(trials, axes), axes)
    fig, panels = panel_grid(series, height=4.6)
    values = []
    for ax, x, ss in panels:
        labelled: set = set()
        offset = 0
        for s in ss:
            if x is None:
                s.rows["_x"] = np.arange(len(s.rows)) + offset
                offset += len(s.rows)
            for pname, col, ls in PERCENTILE_STYLES:
                if col not in s.rows:
                    continue
                m = s.rows.groupby("_x")[col].mean().sort_index()
                values.extend(m.values)
                ax.plot(
                    m.index,
                    m.values,
                    ls,
                    marker=s.marker,
                    color=colours[s.server],
                    ms=4,
                    label=f"{s.label} {pname}",
                )
            mark_invalid(ax, s, "latency_p99_ms", labelled)
        if x is None:
            xticks_for_cells(ax, ss)
        else:
            x_scale(ax, ss)
        log_if_spans(ax, values)
        ax.set_xlabel(axis_label(x))
        ax.set_ylabel("latency (ms)")
        ax.set_title("Latency percentiles" + (f" vs {x}" if x else ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return Figure(
        "latency_percentiles",
        "Latency percentiles vs load",
        "p50 (solid), p90 (dash-dot), p99 (dashed) and p99.9 (dotted) latency, mean "
        "over trials; red rings mark invalid trials (at their p99).",
        save(fig, out_dir, "latency_percentiles"),
    )


def timeline_figure(
    timeline: pd.DataFrame, trials: pd.DataFrame, axes: list[str], out_dir: Path, colours=None
) -> Figure | None:
    """Per-second throughput (server colour) and p50/p99 latency (black, right axis) of every
    trial, one small panel per cell (first MAX_TIMELINE_CELLS cells); warm-up shaded."""
    if timeline.empty:
        return None
    colours = colours or server_colours(list(trials["server"].unique()))
    labels = dict(zip(trials["cell_id"], trial_cell_labels(trials, axes)))
    server_of = dict(zip(trials["cell_id"], trials["server"].astype(str)))
    valid = trials.groupby("cell_id")["valid"].apply(lambda v: v.fillna(False).astype(bool).all())
    cells = list(dict.fromkeys(timeline["cell_id"]))[:MAX_TIMELINE_CELLS]
    ncols = min(3, len(cells))
    nrows = math.ceil(len(cells) / ncols)
    fig, axs = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax in axs.flat[len(cells) :]:
        ax.set_visible(False)
    for ax, cid in zip(axs.flat, cells):
        g = timeline[timeline["cell_id"] == cid]
        c = colours.get(server_of.get(cid, ""), "C0")
        ax2 = ax.twinx()
        for k, (_trial, tg) in enumerate(g.groupby("trial")):
            first = k == 0
            for on, col, style, colour, lw, label in (
                (ax, "throughput_rps", "-", c, 1.5, "throughput"),
                (ax2, "latency_p99_ms", "--", "black", 1, "p99"),
                (ax2, "latency_p50_ms", "-", "grey", 1, "p50"),
            ):
                on.plot(
                    tg["t_s"], tg[col], style, color=colour, lw=lw, label=label if first else None
                )
            warm = tg[tg["warmup"].astype(bool)]
            if first and not warm.empty:
                ax.axvspan(0, warm["t_s"].max() + 1, color="grey", alpha=0.12, lw=0)
        ax.set_ylim(bottom=0)
        log_if_spans(ax2, g[["latency_p50_ms", "latency_p99_ms"]].to_numpy().ravel())
        ok = bool(valid.get(cid, True))
        ax.set_title(
            labels.get(cid, cid) + ("" if ok else "  [INVALID]"),
            fontsize=8,
            color="black" if ok else "red",
        )
        ax.set_xlabel("time since start (s)", fontsize=8)
        ax.set_ylabel("throughput (requests/s)", fontsize=8, color=c)
        ax2.set_ylabel("latency (ms)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax2.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=6, loc="lower center")
    fig.tight_layout()
    more = len(set(timeline["cell_id"])) - len(cells)
    return Figure(
        "timeline",
        "Throughput and latency over time",
        "Per-second throughput (left axis) and p50/p99 latency (right axis) within "
        "each trial; the shaded band is the warm-up"
        + (f"; {more} more cells not shown." if more > 0 else "."),
        save(fig, out_dir, "timeline"),
    )


def spectrum_figure(
    dists: dict, trials: pd.DataFrame, axes: list[str], out_dir: Path, colours=None
) -> Figure | None:
    """Latency percentile spectrum (x: nines) and CDF of each cell's measured requests, from
    the cell's trials' HdrHistograms added up (histograms.cell_distributions)."""
    dists = {cid: d for cid, d in dists.items() if d.completed}
    if not dists:
        return None
    colours = colours or server_colours(list(trials["server"].unique()))
    labels = dict(zip(trials["cell_id"], trial_cell_labels(trials, axes)))
    server_of = dict(zip(trials["cell_id"], trials["server"].astype(str)))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12.8, 4.6))
    q = np.concatenate([np.linspace(0, 0.9, 46), 1 - np.logspace(-1, -4, 61)])
    styles = ["-", "--", "-.", ":"]
    seen: dict[str, int] = {}
    all_ms = []
    for cid, d in dists.items():
        n = d.completed
        server = server_of.get(cid, "")
        k = seen.get(server, 0)
        seen[server] = k + 1
        shade = 1.0 - 0.3 * ((k // 4) % 3)  # darker for every 4 cells of one server
        rgb = tuple(shade * x for x in matplotlib.colors.to_rgb(colours.get(server, "C0")))
        style = dict(color=rgb, ls=styles[k % 4], lw=1.4, label=labels.get(cid, cid))
        qs = q[q <= 1 - 1 / n] if n > 1 else q[:1]
        vals = np.asarray(hdr.percentiles_ms(d.latency, list(100 * qs)))
        all_ms.extend(vals)
        a1.plot(-np.log10(1 - qs), vals, **style)
        x, frac = hdr.cdf_ms(d.latency)
        step = max(1, x.size // MAX_CDF_POINTS)
        idx = np.unique(np.r_[np.arange(0, x.size, step), x.size - 1])
        a2.plot(x[idx], frac[idx], **style)
    ticks = [0, 1, 2, 3, 4]
    a1.set_xticks(ticks, ["0%", "90%", "99%", "99.9%", "99.99%"])
    a1.set_xlabel("percentile")
    a1.set_ylabel("latency (ms)")
    log_if_spans(a1, all_ms)
    a1.set_title("Latency percentile spectrum")
    a2.set_xlabel("latency (ms)")
    a2.set_ylabel("fraction of requests at or below")
    log_if_spans(a2, all_ms, axis="x")
    a2.set_title("Latency CDF")
    for a in (a1, a2):
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=6)
    fig.tight_layout()
    return Figure(
        "latency_spectrum",
        "Latency spectrum and CDF",
        "Every measured request (warm-up and errors excluded) of each cell, pooled "
        "over its trials through their HdrHistograms (values within 0.1%); one "
        "colour per server.",
        save(fig, out_dir, "latency_spectrum"),
    )


def _drawable(trials: pd.DataFrame, columns: list[str], what: str, notes: list[str]) -> bool:
    """True when some trial has a value in one of columns; else a note that `what` is not
    drawn, and why."""
    for col in columns:
        if col in trials and pd.to_numeric(trials[col], errors="coerce").notna().any():
            return True
    notes.append(f"plots: no {what} figure: no trial has a value of {' or '.join(columns)}")
    return False


def draw_basic(
    trials: pd.DataFrame, axes: list[str], out_dir: Path, notes: list[str] | None = None
) -> list[Path]:
    """Throughput and p99 latency against load, one line per server (called by `perfctl
    run`). What cannot be drawn (trials that measured nothing, a figure no trial has a value
    for) is skipped and said in `notes`, one line each."""
    notes = [] if notes is None else notes
    trials, left_out = measured_trials(trials)
    if left_out:
        notes.append(f"plots: {left_out}")
    if trials.empty:
        return []
    colours = server_colours(list(trials["server"].unique()))
    calls = []
    if _drawable(trials, ["throughput_rps"], "throughput", notes):
        calls.append(lambda: throughput_figure(trials, axes, out_dir, colours))
    if _drawable(trials, ["latency_p99_ms"], "p99 latency", notes):
        calls.append(lambda: p99_figure(trials, axes, out_dir, colours))
    return [p for f in draw_all(calls) for p in f.paths]


def draw_run(run, out_dir: Path, notes: list[str] | None = None) -> list[Figure]:
    """Every measurement figure of a run (a results.Run), in report order; what cannot be
    drawn is skipped and said in `notes`, one line each (see draw_basic)."""
    calls = run_figure_calls(run, out_dir, notes)
    figs = draw_all([c for c, _ in calls], [cost for _, cost in calls])
    return [f for f in figs if f is not None]


def run_figure_calls(run, out_dir: Path, notes: list[str] | None = None) -> list[tuple]:
    """draw_run's figures as (call, cost) pairs for draw_pool.draw_all (each call draws and
    saves one figure, or returns None; cost: its time relative to the others), so that a
    caller can draw them beside its own figures."""
    notes = [] if notes is None else notes
    trials, left_out = measured_trials(run.trials)
    if left_out:
        notes.append(f"plots: {left_out}")
    if trials.empty:
        return []
    axes = run.axes or [a for a in ("server",) if a in trials.columns]
    colours = server_colours(list(trials["server"].unique()))
    percentiles = [col for _, col, _ in PERCENTILE_STYLES]
    # the data are read here, before draw_all forks: the children only draw and save
    timeline, spectra = trimmed_timeline(run), cell_distributions(run, trials)
    calls = []  # (call, its cost relative to the others: the timeline has a panel per cell)
    if _drawable(trials, ["throughput_rps"], "throughput", notes):
        calls.append((lambda: throughput_figure(trials, axes, out_dir, colours), 1.0))
    if _drawable(trials, percentiles, "latency percentiles", notes):
        calls.append((lambda: percentiles_figure(trials, axes, out_dir, colours), 2.0))
    if _drawable(trials, ["latency_p99_ms"], "p99 latency", notes):
        calls.append((lambda: p99_figure(trials, axes, out_dir, colours), 1.0))
    if _drawable(trials, ["error_rate"], "error rate", notes):
        calls.append((lambda: error_rate_figure(trials, axes, out_dir, colours), 1.0))
    calls.append((lambda: timeline_figure(timeline, trials, axes, out_dir, colours), 6.0))
    calls.append((lambda: spectrum_figure(spectra, trials, axes, out_dir, colours), 2.0))
    return calls

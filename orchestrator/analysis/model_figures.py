"""Queueing-model figures: predicted vs measured latency against load, and USL fits. They
draw what queueing.py computed; nothing here fits a model."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from models import predict, usl, whatif

from .figures import (
    Figure,
    axis_label,
    load_series,
    log_if_spans,
    panel_grid,
    plt,
    save,
    server_colours,
    xticks_for_cells,
)
from .queueing import cell_row, service_of, usl_fits


def _curve(
    rows: pd.DataFrame, x: str, service, changes: dict | None = None
) -> tuple[np.ndarray, dict[str, tuple]]:
    """Model predictions over a grid of the load axis x: {key: (label, mean_ms, p99_ms)}.
    With `changes` (models/whatif.py), only the chosen model's, for the changed cell."""

    base = cell_row(rows.iloc[0])
    mode = str(base.get("load_mode", "open"))
    driver = "target_rate" if mode == "open" else "connections"
    if driver not in rows or rows[driver].nunique() < 2:
        return np.array([]), {}
    xs = rows["_x"].to_numpy(dtype=float)
    lo, hi = xs.min(), xs.max()
    grid = (
        np.unique(np.round(np.geomspace(max(lo, 1), hi, 40)))
        if driver == "connections"
        else np.linspace(lo, hi, 60)
    )
    drv = np.interp(grid, xs, rows[driver].to_numpy(dtype=float))
    curves: dict[str, list] = {}
    names: dict[str, str] = {}
    for g, d in zip(grid, drv):
        r = base.copy()
        r[driver] = d
        svc = service
        if changes:
            r, svc, _ = whatif.apply(r, service, changes)
        try:
            p = predict.predict_cell(r, svc)
        except ValueError:
            continue
        if changes:
            what = ", ".join(f"{k}={v:g}" for k, v in changes.items())
            names.setdefault("what_if", f"what if {what}: {p['model']}")
            curves.setdefault("what_if", []).append((g, p["mean_ms"], p["p99_ms"]))
            continue
        for key, c in p["candidates"].items():
            names.setdefault(key, c["model"])
            curves.setdefault(key, [])
            curves[key].append((g, c["mean_ms"], c["p99_ms"]))
    out = {}
    for key, pts in curves.items():
        a = np.array(pts, dtype=float)
        out[key] = (names[key], a[:, 0], a[:, 1], a[:, 2])
    return grid, out


def model_latency_figure(
    table: pd.DataFrame,
    axes: list[str],
    out_dir: Path,
    colours: dict,
    what_if: dict | None = None,
) -> Figure | None:
    """Measured mean and p99 latency per cell against load with each model's curve, and the
    what-if curve (models/whatif.py changes) beside them when given."""

    if table.empty or "pred_mean_ms" not in table:
        return None
    series = [s for s in load_series(table.assign(valid=~table["from_invalid"]), axes)]
    if not series:
        return None
    fig, panels = panel_grid(series, height=4.8)
    styles = ["-", "--", "-.", ":", (0, (1, 3)), (0, (5, 1))]
    for ax, x, ss in panels:
        values = []
        for s in ss:
            c = colours[s.server]
            r = s.rows
            for col, face, what in (
                ("measured_mean_ms", None, "mean"),
                ("measured_p99_ms", "none", "p99"),
            ):
                ax.plot(
                    r["_x"],
                    r[col],
                    s.marker,
                    color=c,
                    ms=6,
                    mfc=face,
                    label=f"{s.label} measured {what}",
                )
            values += list(r["measured_mean_ms"]) + list(r["measured_p99_ms"])
            bad = r[r["from_invalid"].astype(bool)]
            if not bad.empty:
                ax.plot(
                    bad["_x"],
                    bad["measured_mean_ms"],
                    "o",
                    mfc="none",
                    mec="red",
                    ms=11,
                    mew=1.5,
                    label="from invalid trials",
                )
            fitted = r[r["pred_mean_ms"].notna()]
            service = None if x is None or fitted.empty else service_of(fitted.iloc[0])
            _, curves = _curve(fitted, x, service) if service else (None, {})
            if service and what_if:
                _, extra = _curve(fitted, x, service, what_if)
                for label, gx, mean, p99 in extra.values():
                    finite = np.isfinite(mean)
                    if finite.any():
                        ax.plot(
                            gx[finite],
                            mean[finite],
                            color=c,
                            lw=2.2,
                            alpha=0.55,
                            label=f"{label} mean",
                        )
                        values += list(mean[finite])
                    if np.isfinite(p99).any():
                        ax.plot(gx, p99, color=c, lw=2.2, alpha=0.3, ls="--", label=f"{label} p99")
            for i, (_key, (name, gx, mean, p99)) in enumerate(curves.items()):
                finite = np.isfinite(mean)
                if finite.any():
                    ax.plot(
                        gx[finite],
                        mean[finite],
                        linestyle=styles[i % len(styles)],
                        color=c,
                        lw=1.2,
                        alpha=0.8,
                        label=f"{name} mean",
                    )
                    values += list(mean[finite])
                if np.isfinite(p99).any():
                    ax.plot(
                        gx,
                        p99,
                        linestyle=styles[i % len(styles)],
                        color="grey",
                        lw=1,
                        label=f"{name} p99",
                    )
            if not curves:  # no load axis, or no curve to draw: the models' points
                ax.plot(
                    fitted["_x"],
                    fitted["pred_mean_ms"],
                    "x",
                    color=c,
                    ms=8,
                    label=f"{s.label} model mean",
                )
        log_if_spans(ax, values)
        if x is None:
            xticks_for_cells(ax, ss)
        ax.set_xlabel(axis_label(x))
        ax.set_ylabel("latency (ms)")
        ax.set_title("Models vs measurements" + (f" ({x})" if x else ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return Figure(
        "model_latency",
        "Queueing models vs measured latency",
        "Markers: measured mean (filled) and p99 (hollow); lines: each applicable "
        "model's mean (server colour) and p99 (grey), using the service time "
        "estimated at the lowest load of each line"
        + (
            "; thick lines: the what-if "
            + ", ".join(f"{k}={v:g}" for k, v in what_if.items())
            + " predicted by the fitted model"
            if what_if
            else ""
        )
        + ".",
        save(fig, out_dir, "model_latency"),
    )


def usl_figure(run, table: pd.DataFrame, out_dir: Path, colours: dict) -> Figure | None:
    """Throughput vs concurrency with the USL fit and its peak (groups of >= 4 levels)."""

    fits = usl_fits(table)
    if not fits:
        return None
    fig, ax = plt.subplots(figsize=(6.8, 4.6))
    trials = run.trials
    for f in fits:
        c = colours.get(f["server"], "C0")
        t = trials[trials["cell_id"].isin(f["cell_ids"])]
        ax.plot(
            t["connections"], t["throughput_rps"], "o", color=c, label=f"{f['server']} measured"
        )
        n_max = float(t["connections"].max())
        peak_n = f["peak_concurrency"]
        top = max(n_max, peak_n * 1.3) if math.isfinite(peak_n) else n_max
        grid = np.linspace(1, top, 200)
        ax.plot(
            grid,
            usl.predict(grid, f["sigma"], f["kappa"], f["lam"]),
            "-",
            color=c,
            label=f"USL: sigma={f['sigma']:.3g}, kappa={f['kappa']:.2g}, "
            f"lambda={f['lam']:.3g}/s (R²={f['r_squared']:.2f})",
        )
        if math.isfinite(peak_n) and peak_n > 0:
            ax.plot(
                [peak_n],
                [f["peak_throughput_rps"]],
                "*",
                color=c,
                ms=14,
                mec="black",
                label=f"peak {f['peak_throughput_rps']:,.0f} req/s at N={peak_n:.1f}",
            )
        elif math.isfinite(f["peak_throughput_rps"]):
            ax.axhline(
                f["peak_throughput_rps"],
                color=c,
                ls=":",
                lw=1,
                label=f"asymptote {f['peak_throughput_rps']:,.0f} req/s (kappa = 0)",
            )
    ax.set_xlabel("concurrency N (connections)")
    ax.set_ylabel("throughput (requests/s)")
    ax.set_title("Universal Scalability Law fit")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return Figure(
        "usl",
        "Throughput vs concurrency (USL)",
        "Closed-load trials with the fitted Universal Scalability Law and its peak.",
        save(fig, out_dir, "usl"),
    )


def draw_models(
    run, table: pd.DataFrame, out_dir: Path, what_if: dict | None = None
) -> list[Figure]:
    """The model figures for a queueing.queueing_table of the run; `what_if` (changes, as
    models.json's what_if.changes) adds the predicted curve of that configuration."""
    if table.empty:
        return []
    colours = server_colours(list(run.trials["server"].unique()))
    axes = run.axes or ["server"]
    figs = [
        model_latency_figure(table, axes, out_dir, colours, what_if),
        usl_figure(run, table, out_dir, colours),
    ]
    return [f for f in figs if f is not None]

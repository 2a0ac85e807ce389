"""Figures of a run (matplotlib, Agg): PNG and SVG under RUN_DIR/plots/.

One colour per server throughout; latency on a log axis when it spans more than a decade;
invalid trials drawn as hollow red-edged markers.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

AXIS_UNITS = {"rate": "arrivals/s", "connections": "connections", "threads": "threads",
              "delay": "", "users": "users"}


def numeric_axes(trials: pd.DataFrame, axes: list[str]) -> list[str]:
    out = []
    for a in axes:
        if a == "server" or a not in trials.columns:
            continue
        vals = pd.to_numeric(trials[a], errors="coerce")
        if vals.notna().all() and vals.nunique() > 1:
            out.append(a)
    return out


def server_colours(servers: list[str]) -> dict[str, str]:
    cmap = plt.get_cmap("tab10")
    return {s: cmap(i % 10) for i, s in enumerate(sorted(servers))}


def _save(fig, out_dir: Path, name: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.svg"]
    fig.savefig(paths[0], dpi=110, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths


def _vs_axis(trials: pd.DataFrame, axis: str, metric: str, ylabel: str, title: str,
             colours: dict, log_y: bool = False):
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    x_all = pd.to_numeric(trials[axis])
    for server, g in trials.groupby("server"):
        g = g.assign(_x=pd.to_numeric(g[axis]))
        agg = g.groupby("_x")[metric].agg(["mean", "min", "max"]).sort_index()
        c = colours[server]
        ax.plot(agg.index, agg["mean"], "-o", color=c, label=str(server), ms=4)
        if (agg["max"] > agg["min"]).any():
            ax.fill_between(agg.index, agg["min"], agg["max"], color=c, alpha=0.15, lw=0)
        bad = g[~g["valid"].astype(bool)]
        if not bad.empty:
            ax.plot(bad["_x"], bad[metric], "o", mfc="none", mec="red", ms=9,
                    label=f"{server}: invalid trial")
    unit = AXIS_UNITS.get(axis, "")
    ax.set_xlabel(f"{axis} ({unit})" if unit else axis)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    vals = trials[metric].replace([np.inf, -np.inf], np.nan).dropna()
    vals = vals[vals > 0]
    if log_y and len(vals) and vals.max() / vals.min() > 10:
        ax.set_yscale("log")
    if x_all.nunique() > 2 and x_all.min() > 0 and x_all.max() / x_all.min() >= 16:
        ax.set_xscale("log", base=2)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _per_cell_bars(trials: pd.DataFrame, metric: str, ylabel: str, title: str, colours: dict):
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    labels, means, cols = [], [], []
    for cid, g in trials.groupby("cell_id", sort=False):
        labels.append(str(g["server"].iloc[0]))
        means.append(g[metric].mean())
        cols.append(colours[g["server"].iloc[0]])
    ax.bar(range(len(labels)), means, color=cols)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def draw_basic(trials: pd.DataFrame, axes: list[str], out_dir: Path) -> list[Path]:
    """Throughput and p99 latency against the first numeric axis, one line per server."""
    if trials.empty:
        return []
    colours = server_colours(list(trials["server"].unique()))
    num = numeric_axes(trials, axes)
    paths = []
    if num:
        x = num[0]
        paths += _save(_vs_axis(trials, x, "throughput_rps", "throughput (requests/s)",
                                f"Throughput vs {x}", colours), out_dir, "throughput")
        paths += _save(_vs_axis(trials, x, "latency_p99_ms", "p99 latency (ms)",
                                f"p99 latency vs {x}", colours, log_y=True), out_dir, "latency_p99")
    else:
        paths += _save(_per_cell_bars(trials, "throughput_rps", "throughput (requests/s)",
                                      "Throughput per cell", colours), out_dir, "throughput")
        paths += _save(_per_cell_bars(trials, "latency_p99_ms", "p99 latency (ms)",
                                      "p99 latency per cell", colours), out_dir, "latency_p99")
    return paths

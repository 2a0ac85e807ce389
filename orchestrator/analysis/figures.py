"""What every figure shares (matplotlib, Agg; PNG and SVG under RUN_DIR/plots/).

Conventions: one colour per server in every figure; latency on a log axis when it spans more
than a decade; invalid trials drawn as hollow red-edged markers and named in the legend.

"Load" is, per group of cells that share a server and every non-numeric axis (e.g. `mode`),
the first numeric axis that varies inside the group: closed-load cells get `connections`,
open-load cells `rate`, in one figure panel per such axis. Any further varying numeric axis
splits a group into several lines (distinct markers, same colour).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

AXIS_UNITS = {
    "rate": "arrivals/s",
    "connections": "connections",
    "threads": "threads",
    "delay": "",
    "users": "users",
    "target_rate": "arrivals/s",
}
PERCENTILE_STYLES = [
    ("p50", "latency_p50_ms", "-"),
    ("p90", "latency_p90_ms", "-."),
    ("p99", "latency_p99_ms", "--"),
    ("p99.9", "latency_p999_ms", ":"),
]
MARKERS = "os^Dv<>pPX*"
MAX_TIMELINE_CELLS = 16
MAX_CDF_POINTS = 2000
_PLAIN = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")


@dataclass
class Figure:
    """One saved figure: its file stem, a title and a one-line caption for the report."""

    name: str
    title: str
    caption: str
    paths: list[Path] = field(default_factory=list)

    @property
    def png(self) -> Path:
        return next(p for p in self.paths if p.suffix == ".png")


@dataclass
class Series:
    """Cells of one line in a vs-load figure: a server, an x axis and the rows (with _x)."""

    server: str
    x_axis: str | None
    label: str
    rows: pd.DataFrame
    marker: str = "o"


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
    return {s: cmap(i % 10) for i, s in enumerate(sorted(map(str, servers)))}


def axis_label(axis: str | None) -> str:
    if axis is None:
        return "cell"
    unit = AXIS_UNITS.get(axis, "")
    return f"{axis} ({unit})" if unit and unit != axis else axis  # not "connections (connections)"


def load_series(rows: pd.DataFrame, axes: list[str]) -> list[Series]:
    """Split trial (or cell) rows into vs-load lines; see the module docstring."""
    if rows.empty:
        return []
    axes = [a for a in axes if a in rows.columns]
    numeric = [
        a for a in axes if a != "server" and pd.to_numeric(rows[a], errors="coerce").notna().all()
    ]
    categorical = [a for a in axes if a != "server" and a not in numeric]
    shown_cat = [a for a in categorical if rows[a].nunique() > 1]
    out: list[Series] = []
    keys = ["server"] + categorical
    for key, g in rows.groupby(keys, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        server = str(key[0])
        varying = [a for a in numeric if g[a].nunique() > 1]
        x = varying[0] if varying else None
        extra = varying[1:]
        base = ", ".join(
            [server] + [f"{a}={v}" for a, v in zip(categorical, key[1:]) if a in shown_cat]
        )
        parts = g.groupby(extra, sort=True) if extra else [((), g)]
        for i, (ek, sub) in enumerate(parts):
            ek = ek if isinstance(ek, tuple) else (ek,)
            label = base + "".join(f", {a}={v}" for a, v in zip(extra, ek))
            sub = sub.assign(_x=pd.to_numeric(sub[x]) if x else np.arange(len(sub)))
            out.append(Series(server, x, label, sub.sort_values("_x"), MARKERS[i % len(MARKERS)]))
    return out


def save(fig, out_dir: Path, name: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.svg"]
    fig.savefig(paths[0], dpi=110, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths


def log_if_spans(ax, values, axis: str = "y") -> None:
    v = pd.Series(np.asarray(values, dtype=float)).replace([np.inf, -np.inf], np.nan).dropna()
    v = v[v > 0]
    if len(v) and v.max() / v.min() > 10:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        which = ax.yaxis if axis == "y" else ax.xaxis
        which.set_major_formatter(_PLAIN)
        which.set_minor_formatter(
            _PLAIN if v.max() / v.min() < 30 else matplotlib.ticker.NullFormatter()
        )


def x_scale(ax, series: list[Series]) -> None:
    xs = pd.concat([s.rows["_x"] for s in series]) if series else pd.Series(dtype=float)
    if xs.nunique() > 2 and xs.min() > 0 and xs.max() / xs.min() >= 16:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(_PLAIN)


def panel_grid(series: list[Series], height: float = 4.2):
    """One subplot per x axis; returns (fig, [(ax, x_axis, series of that axis)])."""
    by_axis: dict = {}
    for s in series:
        by_axis.setdefault(s.x_axis, []).append(s)
    n = max(1, len(by_axis))
    fig, axs = plt.subplots(1, n, figsize=(6.4 * n, height), squeeze=False)
    return fig, [(axs[0][i], x, ss) for i, (x, ss) in enumerate(by_axis.items())]


def xticks_for_cells(ax, s_list: list[Series]) -> None:
    labels = [lab for s in s_list for lab in s.rows.get("_cell_label", s.rows["cell_id"])]
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)


def mark_invalid(ax, s: Series, metric: str, labelled: set) -> None:
    if "valid" not in s.rows.columns:
        return
    bad = s.rows[~s.rows["valid"].fillna(False).astype(bool)]
    if bad.empty:
        return
    label = None if "invalid" in labelled else "invalid trial"
    labelled.add("invalid")
    ax.plot(
        bad["_x"], bad[metric], "o", mfc="none", mec="red", mew=1.5, ms=10, label=label, zorder=5
    )


def metric_vs_load(
    series: list[Series],
    metric: str,
    ylabel: str,
    title: str,
    colours: dict,
    log_y: bool = False,
    offered: bool = False,
):
    fig, panels = panel_grid(series)
    for ax, x, ss in panels:
        labelled: set = set()
        for k, s in enumerate(ss):
            if x is None:  # no numeric axis: one bar group per cell
                s.rows["_x"] = np.arange(len(s.rows)) + sum(len(t.rows) for t in ss[:k])
            agg = s.rows.groupby("_x")[metric].agg(["mean", "min", "max"]).sort_index()
            c = colours[s.server]
            ax.plot(agg.index, agg["mean"], "-" + s.marker, color=c, label=s.label, ms=5)
            if (agg["max"] > agg["min"]).any():
                ax.fill_between(agg.index, agg["min"], agg["max"], color=c, alpha=0.15, lw=0)
            if offered and "target_rate" in s.rows and s.rows["target_rate"].notna().any():
                tgt = s.rows.groupby("_x")["target_rate"].mean()
                ax.plot(tgt.index, tgt.values, ":", color=c, lw=1, label=f"{s.label}: offered")
            mark_invalid(ax, s, metric, labelled)
        if x is None:
            xticks_for_cells(ax, ss)
        else:
            x_scale(ax, ss)
        ax.set_xlabel(axis_label(x))
        ax.set_ylabel(ylabel)
        if log_y:
            log_if_spans(ax, pd.concat([s.rows[metric] for s in ss]))
        ax.set_title(title if x is None else f"{title} vs {x}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def trial_cell_labels(trials: pd.DataFrame, axes: list[str]) -> pd.Series:
    shown = [a for a in axes if a in trials.columns and trials[a].nunique() > 1] or ["server"]
    return (
        trials[shown]
        .astype(str)
        .apply(lambda r: ", ".join(f"{a}={v}" for a, v in r.items()), axis=1)
    )


def prepare(trials: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    return trials.assign(_cell_label=trial_cell_labels(trials, axes))

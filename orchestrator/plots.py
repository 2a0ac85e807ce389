"""Figures of a run (matplotlib, Agg): PNG and SVG under RUN_DIR/plots/.

Conventions: one colour per server in every figure; latency on a log axis when it spans more
than a decade; invalid trials drawn as hollow red-edged markers and named in the legend.

"Load" is, per group of cells that share a server and every non-numeric axis (e.g. `mode`),
the first numeric axis that varies inside the group: closed-load cells get `connections`,
open-load cells `rate`, in one figure panel per such axis. Any further varying numeric axis
splits a group into several lines (distinct markers, same colour).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.colors  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

AXIS_UNITS = {"rate": "arrivals/s", "connections": "connections", "threads": "threads",
              "delay": "", "users": "users", "target_rate": "arrivals/s"}
PERCENTILE_STYLES = [("p50", "latency_p50_ms", "-"), ("p90", "latency_p90_ms", "-."),
                     ("p99", "latency_p99_ms", "--"), ("p99.9", "latency_p999_ms", ":")]
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
    return f"{axis} ({unit})" if unit else axis


def load_series(rows: pd.DataFrame, axes: list[str]) -> list[Series]:
    """Split trial (or cell) rows into vs-load lines; see the module docstring."""
    if rows.empty:
        return []
    axes = [a for a in axes if a in rows.columns]
    numeric = [a for a in axes if a != "server"
               and pd.to_numeric(rows[a], errors="coerce").notna().all()]
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
        base = ", ".join([server] + [f"{a}={v}" for a, v in zip(categorical, key[1:])
                                     if a in shown_cat])
        parts = g.groupby(extra, sort=True) if extra else [((), g)]
        for i, (ek, sub) in enumerate(parts):
            ek = ek if isinstance(ek, tuple) else (ek,)
            label = base + "".join(f", {a}={v}" for a, v in zip(extra, ek))
            sub = sub.assign(_x=pd.to_numeric(sub[x]) if x else np.arange(len(sub)))
            out.append(Series(server, x, label, sub.sort_values("_x"), MARKERS[i % len(MARKERS)]))
    return out


def _save(fig, out_dir: Path, name: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.svg"]
    fig.savefig(paths[0], dpi=110, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths


def _log_if_spans(ax, values, axis: str = "y") -> None:
    v = pd.Series(np.asarray(values, dtype=float)).replace([np.inf, -np.inf], np.nan).dropna()
    v = v[v > 0]
    if len(v) and v.max() / v.min() > 10:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        which = ax.yaxis if axis == "y" else ax.xaxis
        which.set_major_formatter(_PLAIN)
        which.set_minor_formatter(_PLAIN if v.max() / v.min() < 30 else
                                  matplotlib.ticker.NullFormatter())


def _x_scale(ax, series: list[Series]) -> None:
    xs = pd.concat([s.rows["_x"] for s in series]) if series else pd.Series(dtype=float)
    if xs.nunique() > 2 and xs.min() > 0 and xs.max() / xs.min() >= 16:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(_PLAIN)


def _panels(series: list[Series], height: float = 4.2):
    """One subplot per x axis; returns (fig, [(ax, x_axis, series of that axis)])."""
    by_axis: dict = {}
    for s in series:
        by_axis.setdefault(s.x_axis, []).append(s)
    n = max(1, len(by_axis))
    fig, axs = plt.subplots(1, n, figsize=(6.4 * n, height), squeeze=False)
    return fig, [(axs[0][i], x, ss) for i, (x, ss) in enumerate(by_axis.items())]


def _xticks_for_cells(ax, s_list: list[Series]) -> None:
    labels = [lab for s in s_list for lab in s.rows.get("_cell_label", s.rows["cell_id"])]
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)


def _mark_invalid(ax, s: Series, metric: str, labelled: set) -> None:
    if "valid" not in s.rows.columns:
        return
    bad = s.rows[~s.rows["valid"].fillna(False).astype(bool)]
    if bad.empty:
        return
    label = None if "invalid" in labelled else "invalid trial"
    labelled.add("invalid")
    ax.plot(bad["_x"], bad[metric], "o", mfc="none", mec="red", mew=1.5, ms=10, label=label,
            zorder=5)


def _metric_vs_load(series: list[Series], metric: str, ylabel: str, title: str,
                    colours: dict, log_y: bool = False, offered: bool = False):
    fig, panels = _panels(series)
    for ax, x, ss in panels:
        labelled: set = set()
        for k, s in enumerate(ss):
            if x is None:   # no numeric axis: one bar group per cell
                s.rows["_x"] = np.arange(len(s.rows)) + sum(len(t.rows) for t in ss[:k])
            agg = s.rows.groupby("_x")[metric].agg(["mean", "min", "max"]).sort_index()
            c = colours[s.server]
            ax.plot(agg.index, agg["mean"], "-" + s.marker, color=c, label=s.label, ms=5)
            if (agg["max"] > agg["min"]).any():
                ax.fill_between(agg.index, agg["min"], agg["max"], color=c, alpha=0.15, lw=0)
            if offered and "target_rate" in s.rows and s.rows["target_rate"].notna().any():
                tgt = s.rows.groupby("_x")["target_rate"].mean()
                ax.plot(tgt.index, tgt.values, ":", color=c, lw=1, label=f"{s.label}: offered")
            _mark_invalid(ax, s, metric, labelled)
        if x is None:
            _xticks_for_cells(ax, ss)
        else:
            _x_scale(ax, ss)
        ax.set_xlabel(axis_label(x))
        ax.set_ylabel(ylabel)
        if log_y:
            _log_if_spans(ax, pd.concat([s.rows[metric] for s in ss]))
        ax.set_title(title if x is None else f"{title} vs {x}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _cell_labels(trials: pd.DataFrame, axes: list[str]) -> pd.Series:
    shown = [a for a in axes if a in trials.columns and trials[a].nunique() > 1] or ["server"]
    return trials[shown].astype(str).apply(
        lambda r: ", ".join(f"{a}={v}" for a, v in r.items()), axis=1)


def _prepare(trials: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    return trials.assign(_cell_label=_cell_labels(trials, axes))


def throughput_figure(trials, axes, out_dir: Path, colours=None) -> Figure:
    colours = colours or server_colours(list(trials["server"].unique()))
    fig = _metric_vs_load(load_series(_prepare(trials, axes), axes), "throughput_rps",
                          "throughput (requests/s)", "Throughput", colours, offered=True)
    return Figure("throughput", "Throughput vs load",
                  "Completed requests per second in the measured window, mean over trials "
                  "(band: min-max); dotted: offered rate in open mode.",
                  _save(fig, out_dir, "throughput"))


def p99_figure(trials, axes, out_dir: Path, colours=None) -> Figure:
    colours = colours or server_colours(list(trials["server"].unique()))
    fig = _metric_vs_load(load_series(_prepare(trials, axes), axes), "latency_p99_ms",
                          "p99 latency (ms)", "p99 latency", colours, log_y=True)
    return Figure("latency_p99", "p99 latency vs load",
                  "99th percentile latency per trial, mean over trials (band: min-max).",
                  _save(fig, out_dir, "latency_p99"))


def percentiles_figure(trials, axes, out_dir: Path, colours=None) -> Figure:
    """p50/p90/p99/p99.9 against load: the hockey stick."""
    colours = colours or server_colours(list(trials["server"].unique()))
    series = load_series(_prepare(trials, axes), axes)
    fig, panels = _panels(series, height=4.6)
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
                ax.plot(m.index, m.values, ls, marker=s.marker, color=colours[s.server], ms=4,
                        label=f"{s.label} {pname}")
            _mark_invalid(ax, s, "latency_p99_ms", labelled)
        if x is None:
            _xticks_for_cells(ax, ss)
        else:
            _x_scale(ax, ss)
        _log_if_spans(ax, values)
        ax.set_xlabel(axis_label(x))
        ax.set_ylabel("latency (ms)")
        ax.set_title("Latency percentiles" + (f" vs {x}" if x else ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return Figure("latency_percentiles", "Latency percentiles vs load",
                  "p50 (solid), p90 (dash-dot), p99 (dashed) and p99.9 (dotted) latency, mean "
                  "over trials; red rings mark invalid trials (at their p99).",
                  _save(fig, out_dir, "latency_percentiles"))


def error_rate_figure(trials, axes, out_dir: Path, colours=None) -> Figure:
    colours = colours or server_colours(list(trials["server"].unique()))
    t = _prepare(trials, axes).assign(error_pct=100 * trials["error_rate"].fillna(0.0))
    fig = _metric_vs_load(load_series(t, axes), "error_pct", "errors (% of requests)",
                          "Error rate", colours)
    total = int(trials["errors"].sum()) if "errors" in trials else 0
    return Figure("error_rate", "Error rate vs load",
                  f"Transport errors and HTTP statuses >= 400 as a share of requests "
                  f"({total} errors in the run).", _save(fig, out_dir, "error_rate"))


def timeline_figure(timeline: pd.DataFrame, trials: pd.DataFrame, axes: list[str],
                    out_dir: Path, colours=None) -> Figure | None:
    """Per-second throughput (server colour) and p50/p99 latency (black, right axis) of every
    trial, one small panel per cell (first MAX_TIMELINE_CELLS cells); warm-up shaded."""
    if timeline.empty:
        return None
    colours = colours or server_colours(list(trials["server"].unique()))
    labels = dict(zip(trials["cell_id"], _cell_labels(trials, axes)))
    server_of = dict(zip(trials["cell_id"], trials["server"].astype(str)))
    valid = trials.groupby("cell_id")["valid"].apply(lambda v: v.fillna(False).astype(bool).all())
    cells = list(dict.fromkeys(timeline["cell_id"]))[:MAX_TIMELINE_CELLS]
    ncols = min(3, len(cells))
    nrows = math.ceil(len(cells) / ncols)
    fig, axs = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax in axs.flat[len(cells):]:
        ax.set_visible(False)
    for ax, cid in zip(axs.flat, cells):
        g = timeline[timeline["cell_id"] == cid]
        c = colours.get(server_of.get(cid, ""), "C0")
        ax2 = ax.twinx()
        for k, (trial, tg) in enumerate(g.groupby("trial")):
            first = k == 0
            ax.plot(tg["t_s"], tg["throughput_rps"], "-", color=c, lw=1.5,
                    label="throughput" if first else None)
            ax2.plot(tg["t_s"], tg["latency_p99_ms"], "--", color="black", lw=1,
                     label="p99" if first else None)
            ax2.plot(tg["t_s"], tg["latency_p50_ms"], "-", color="grey", lw=1,
                     label="p50" if first else None)
            warm = tg[tg["warmup"].astype(bool)]
            if first and not warm.empty:
                ax.axvspan(0, warm["t_s"].max() + 1, color="grey", alpha=0.12, lw=0)
        ax.set_ylim(bottom=0)
        _log_if_spans(ax2, g[["latency_p50_ms", "latency_p99_ms"]].to_numpy().ravel())
        ok = bool(valid.get(cid, True))
        ax.set_title(labels.get(cid, cid) + ("" if ok else "  [INVALID]"), fontsize=8,
                     color="black" if ok else "red")
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
    return Figure("timeline", "Throughput and latency over time",
                  "Per-second throughput (left axis) and p50/p99 latency (right axis) within "
                  "each trial; the shaded band is the warm-up" +
                  (f"; {more} more cells not shown." if more > 0 else "."),
                  _save(fig, out_dir, "timeline"))


def spectrum_figure(requests: pd.DataFrame, trials: pd.DataFrame, axes: list[str],
                    out_dir: Path, colours=None) -> Figure | None:
    """Latency percentile spectrum (x: nines) and CDF of each cell's measured requests."""
    if requests.empty:
        return None
    colours = colours or server_colours(list(trials["server"].unique()))
    labels = dict(zip(trials["cell_id"], _cell_labels(trials, axes)))
    server_of = dict(zip(trials["cell_id"], trials["server"].astype(str)))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12.8, 4.6))
    q = np.concatenate([np.linspace(0, 0.9, 46), 1 - np.logspace(-1, -4, 61)])
    styles = ["-", "--", "-.", ":"]
    seen: dict[str, int] = {}
    all_ms = []
    for cid, g in requests.groupby("cell_id", sort=False):
        lat_ms = np.sort(g["latency_ns"].to_numpy(dtype=float) / 1e6)
        if lat_ms.size == 0:
            continue
        server = server_of.get(cid, "")
        k = seen.get(server, 0)
        seen[server] = k + 1
        shade = 1.0 - 0.3 * ((k // 4) % 3)      # darker for every 4 cells of one server
        rgb = tuple(shade * x for x in matplotlib.colors.to_rgb(colours.get(server, "C0")))
        style = dict(color=rgb, ls=styles[k % 4], lw=1.4, label=labels.get(cid, cid))
        qs = q[q <= 1 - 1 / lat_ms.size] if lat_ms.size > 1 else q[:1]
        vals = np.quantile(lat_ms, qs, method="inverted_cdf")
        all_ms.extend(vals)
        a1.plot(-np.log10(1 - qs), vals, **style)
        step = max(1, lat_ms.size // MAX_CDF_POINTS)
        idx = np.unique(np.r_[np.arange(0, lat_ms.size, step), lat_ms.size - 1])
        a2.plot(lat_ms[idx], (idx + 1) / lat_ms.size, **style)
    ticks = [0, 1, 2, 3, 4]
    a1.set_xticks(ticks, ["0%", "90%", "99%", "99.9%", "99.99%"])
    a1.set_xlabel("percentile")
    a1.set_ylabel("latency (ms)")
    _log_if_spans(a1, all_ms)
    a1.set_title("Latency percentile spectrum")
    a2.set_xlabel("latency (ms)")
    a2.set_ylabel("fraction of requests at or below")
    _log_if_spans(a2, all_ms, axis="x")
    a2.set_title("Latency CDF")
    for a in (a1, a2):
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=6)
    fig.tight_layout()
    return Figure("latency_spectrum", "Latency spectrum and CDF",
                  "Every measured request (warm-up and errors excluded) of each cell, pooled "
                  "over its trials; one colour per server.", _save(fig, out_dir, "latency_spectrum"))


def draw_basic(trials: pd.DataFrame, axes: list[str], out_dir: Path) -> list[Path]:
    """Throughput and p99 latency against load, one line per server (called by `perfctl run`)."""
    if trials.empty:
        return []
    colours = server_colours(list(trials["server"].unique()))
    return [p for f in (throughput_figure(trials, axes, out_dir, colours),
                        p99_figure(trials, axes, out_dir, colours)) for p in f.paths]


def draw_run(run, out_dir: Path) -> list[Figure]:
    """Every measurement figure of a run (a results.Run), in report order."""
    from . import modeling

    trials = run.trials
    if trials.empty:
        return []
    axes = run.axes or [a for a in ("server",) if a in trials.columns]
    colours = server_colours(list(trials["server"].unique()))
    figs = [throughput_figure(trials, axes, out_dir, colours),
            percentiles_figure(trials, axes, out_dir, colours),
            p99_figure(trials, axes, out_dir, colours),
            error_rate_figure(trials, axes, out_dir, colours),
            timeline_figure(modeling.trimmed_timeline(run), trials, axes, out_dir, colours),
            spectrum_figure(modeling.measured_requests(run), trials, axes, out_dir, colours)]
    return [f for f in figs if f is not None]


# --- model figures ----------------------------------------------------------------------
def _curve(rows: pd.DataFrame, x: str, service) -> tuple[np.ndarray, dict[str, tuple]]:
    """Model predictions over a grid of the load axis x: {key: (label, mean_ms, p99_ms)}."""
    from models import estimate

    base = rows.iloc[0].copy()
    mode = str(base.get("load_mode", "open"))
    driver = "target_rate" if mode == "open" else "connections"
    if driver not in rows or rows[driver].nunique() < 2:
        return np.array([]), {}
    xs = rows["_x"].to_numpy(dtype=float)
    lo, hi = xs.min(), xs.max()
    grid = (np.unique(np.round(np.geomspace(max(lo, 1), hi, 40))) if driver == "connections"
            else np.linspace(lo, hi, 60))
    drv = np.interp(grid, xs, rows[driver].to_numpy(dtype=float))
    curves: dict[str, list] = {}
    names: dict[str, str] = {}
    for g, d in zip(grid, drv):
        r = base.copy()
        r[driver] = d
        try:
            p = estimate.predict_cell(r, service)
        except ValueError:
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


def model_latency_figure(table: pd.DataFrame, axes: list[str], out_dir: Path,
                         colours: dict) -> Figure | None:
    """Measured mean and p99 latency per cell against load with each model's curve."""
    from . import modeling

    if table.empty or "pred_mean_ms" not in table:
        return None
    series = [s for s in load_series(table.assign(valid=~table["from_invalid"]), axes)]
    if not series:
        return None
    fig, panels = _panels(series, height=4.8)
    styles = ["-", "--", "-.", ":", (0, (1, 3)), (0, (5, 1))]
    for ax, x, ss in panels:
        values = []
        for s in ss:
            c = colours[s.server]
            r = s.rows
            ax.plot(r["_x"], r["measured_mean_ms"], s.marker, color=c, ms=6,
                    label=f"{s.label} measured mean")
            ax.plot(r["_x"], r["measured_p99_ms"], s.marker, color=c, ms=6, mfc="none",
                    label=f"{s.label} measured p99")
            values += list(r["measured_mean_ms"]) + list(r["measured_p99_ms"])
            bad = r[r["from_invalid"].astype(bool)]
            if not bad.empty:
                ax.plot(bad["_x"], bad["measured_mean_ms"], "o", mfc="none", mec="red", ms=11,
                        mew=1.5, label="from invalid trials")
            fitted = r[r["pred_mean_ms"].notna()]
            if x is None or fitted.empty:
                ax.plot(fitted["_x"], fitted["pred_mean_ms"], "x", color=c, ms=8,
                        label=f"{s.label} model mean")
                continue
            service = modeling.service_of(fitted.iloc[0])
            _, curves = _curve(fitted, x, service) if service else (None, {})
            for i, (key, (name, gx, mean, p99)) in enumerate(curves.items()):
                finite = np.isfinite(mean)
                if finite.any():
                    ax.plot(gx[finite], mean[finite], linestyle=styles[i % len(styles)],
                            color=c, lw=1.2, alpha=0.8, label=f"{name} mean")
                    values += list(mean[finite])
                if np.isfinite(p99).any():
                    ax.plot(gx, p99, linestyle=styles[i % len(styles)], color="grey", lw=1,
                            label=f"{name} p99")
            if not curves:
                ax.plot(fitted["_x"], fitted["pred_mean_ms"], "x", color=c, ms=8,
                        label=f"{s.label} model mean")
        _log_if_spans(ax, values)
        if x is None:
            _xticks_for_cells(ax, ss)
        ax.set_xlabel(axis_label(x))
        ax.set_ylabel("latency (ms)")
        ax.set_title("Models vs measurements" + (f" ({x})" if x else ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return Figure("model_latency", "Queueing models vs measured latency",
                  "Markers: measured mean (filled) and p99 (hollow); lines: each applicable "
                  "model's mean (server colour) and p99 (grey), using the service time "
                  "estimated at the lowest load of each line.", _save(fig, out_dir, "model_latency"))


def usl_figure(run, table: pd.DataFrame, out_dir: Path, colours: dict) -> Figure | None:
    """Throughput vs concurrency with the USL fit and its peak (groups of >= 4 levels)."""
    from . import modeling

    fits = modeling.usl_fits(table)
    if not fits:
        return None
    fig, ax = plt.subplots(figsize=(6.8, 4.6))
    trials = run.trials
    for f in fits:
        c = colours.get(f["server"], "C0")
        t = trials[trials["cell_id"].isin(f["cell_ids"])]
        ax.plot(t["connections"], t["throughput_rps"], "o", color=c, label=f"{f['server']} measured")
        n_max = float(t["connections"].max())
        peak_n = f["peak_concurrency"]
        top = max(n_max, peak_n * 1.3) if math.isfinite(peak_n) else n_max
        grid = np.linspace(1, top, 200)
        from models import usl
        ax.plot(grid, usl.predict(grid, f["sigma"], f["kappa"], f["lam"]), "-", color=c,
                label=f"USL: sigma={f['sigma']:.3g}, kappa={f['kappa']:.2g}, "
                      f"lambda={f['lam']:.3g}/s (R²={f['r_squared']:.2f})")
        if math.isfinite(peak_n) and peak_n > 0:
            ax.plot([peak_n], [f["peak_throughput_rps"]], "*", color=c, ms=14, mec="black",
                    label=f"peak {f['peak_throughput_rps']:,.0f} req/s at N={peak_n:.1f}")
        elif math.isfinite(f["peak_throughput_rps"]):
            ax.axhline(f["peak_throughput_rps"], color=c, ls=":", lw=1,
                       label=f"asymptote {f['peak_throughput_rps']:,.0f} req/s (kappa = 0)")
    ax.set_xlabel("concurrency N (connections)")
    ax.set_ylabel("throughput (requests/s)")
    ax.set_title("Universal Scalability Law fit")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return Figure("usl", "Throughput vs concurrency (USL)",
                  "Closed-load trials with the fitted Universal Scalability Law and its peak.",
                  _save(fig, out_dir, "usl"))


def draw_models(run, table: pd.DataFrame, out_dir: Path) -> list[Figure]:
    """The model figures for a modeling.model_table of the run."""
    if table.empty:
        return []
    colours = server_colours(list(run.trials["server"].unique()))
    axes = run.axes or ["server"]
    figs = [model_latency_figure(table, axes, out_dir, colours),
            usl_figure(run, table, out_dir, colours)]
    return [f for f in figs if f is not None]

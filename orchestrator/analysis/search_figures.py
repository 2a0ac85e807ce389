"""The capacity search's figure (plots/capacity.png|svg): one panel per cell, drawn from
capacity.json alone.

Each panel: the SLO's statistic of every knee probe against its load level (filled: used for
the estimate; x: an upper bound, errors or overload; hollow grey: retried or left out), the
`rate: auto` curve's points joined (squares), the
fitted curve (the model stretched along the load axis by the calibration the probes gave),
the SLO as a horizontal line, the capacity as a vertical line and its interval as a band.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.ticker
import numpy as np

from .figures import Figure, plt, save

PLAIN = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")

MAX_PANELS = 12
COLUMNS = 3


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and v is not None and math.isfinite(v)


def _panel(ax, cell: dict, slo: dict) -> None:
    unit = "arrivals/s" if cell.get("unit") == "rate_rps" else "users"
    curve = cell.get("curve") or {}
    if curve.get("level"):
        ax.plot(curve["level"], curve["latency_ms"], "-", color="#1f77b4", lw=1.5, label="model")
    cap, lo, hi = cell.get("capacity"), cell.get("low"), cell.get("high")
    if _finite(lo) and _finite(hi):
        ax.axvspan(lo, hi, color="#2ca02c", alpha=0.15, lw=0, label=f"{cell['confidence']:.0%} CI")
    if _finite(cap):
        ax.axvline(cap, color="#2ca02c", lw=1.5, label=f"capacity {cap:.4g}")
    ax.axhline(slo["latency_ms"], color="#d62728", ls="--", lw=1, label=f"SLO {slo['stat']}")
    knee = [p for p in cell.get("probes", []) if p["role"] == "knee" and _finite(p["latency_ms"])]
    groups = {
        "used": [p for p in knee if p["used"] and p["verdict"].startswith("estimate")],
        "upper bound": [p for p in knee if p["used"] and p["verdict"].startswith("upper")],
        "left out": [p for p in knee if not p["used"]],
    }
    styles = {
        "used": {"marker": "o", "color": "#1f77b4", "ls": ""},
        "upper bound": {"marker": "x", "color": "#d62728", "ls": "", "ms": 9, "mew": 2},
        "left out": {"marker": "o", "mfc": "none", "mec": "grey", "ls": ""},
    }
    for name, ps in groups.items():
        if ps:
            ax.plot(
                [p["level"] for p in ps],
                [p["latency_ms"] for p in ps],
                label=f"probe: {name}",
                **styles[name],
            )
    points = [p for p in cell.get("probes", []) if p["role"] == "curve"]
    points = sorted((p for p in points if _finite(p["latency_ms"])), key=lambda p: p["level"])
    good = [p for p in points if p["used"]]
    if good:
        ax.plot(
            [p["level"] for p in good],
            [p["latency_ms"] for p in good],
            "s-",
            color="#9467bd",
            ms=4,
            lw=1,
            label="rate: auto curve",
        )
    if len(good) < len(points):
        bad = [p for p in points if not p["used"]]
        ax.plot(
            [p["level"] for p in bad],
            [p["latency_ms"] for p in bad],
            "s",
            mfc="none",
            mec="grey",
            label="curve point left out",
        )
    knee = knee + points
    values = [p["latency_ms"] for p in knee] + [slo["latency_ms"]]
    values += [v for v in curve.get("latency_ms", []) if _finite(v)]
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size:
        ax.set_ylim(max(v.min() * 0.7, 1e-3), min(v.max() * 1.3, 5 * slo["latency_ms"]))
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(PLAIN)
        ax.yaxis.set_minor_formatter(PLAIN)
    ax.set_xlabel(unit)
    ax.set_ylabel(f"{slo['stat']} latency, ms")
    ax.set_title(cell.get("label", cell["cell_id"]), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6)


def capacity_figure(doc: dict, out_dir: Path) -> Figure | None:
    """The figure of a capacity.json (None when it has no cell)."""
    cells = doc.get("cells", [])[:MAX_PANELS]
    if not cells:
        return None
    slo = doc["search"]["slo"]
    n = len(cells)
    cols = min(COLUMNS, n)
    rows = math.ceil(n / cols)
    fig, axs = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.9 * rows), squeeze=False)
    for i, cell in enumerate(cells):
        _panel(axs[i // cols][i % cols], cell, slo)
    for j in range(n, rows * cols):
        axs[j // cols][j % cols].axis("off")
    fig.tight_layout()
    more = (
        f" (the first {MAX_PANELS} of {len(doc['cells'])} cells)" if len(doc["cells"]) > n else ""
    )
    return Figure(
        "capacity",
        f"Capacity under the SLO ({slo['stat']} <= {slo['latency_ms']:g} ms)",
        "Per cell: the knee probes' latency against their load, the fitted model stretched "
        "by the probes' calibration, the SLO, the capacity and its interval" + more + ".",
        save(fig, out_dir, "capacity"),
    )

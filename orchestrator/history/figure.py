"""A series of the history as a PNG: every usable trial as a dot, each run's median joined by a
line, and each change point as a vertical line with the level after it and the 95% interval
of that level (the ratio's interval times the level before) as a band."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import MaxNLocator  # noqa: E402


def draw(series_list: list, path: Path, title: str) -> Path:
    """One panel per series (at most 12), saved to `path` (its directory is created)."""
    shown = series_list[:12]
    fig, axes = plt.subplots(
        len(shown), 1, figsize=(9, 2.6 * len(shown)), squeeze=False, constrained_layout=True
    )
    for ax, s in zip(axes[:, 0], shown):
        for i, v in enumerate(s.values):
            ax.plot(np.full(v.size, i + 1), v, ".", color="0.6", ms=3)
        med = s.medians()
        ax.plot(np.arange(1, len(med) + 1), med, "-", color="tab:blue", lw=1, label="run median")
        for c in s.change_points:
            a, k = c.before
            _, b = c.after
            before = np.median(np.concatenate(s.values[a:k]))
            ax.axvline(k + 0.5, color="tab:red", lw=1)
            ax.hlines(before * c.ratio, k + 0.5, b + 0.5, color="tab:red", lw=1.5)
            ax.fill_between(
                [k + 0.5, b + 0.5],
                before * c.ratio_low,
                before * c.ratio_high,
                color="tab:red",
                alpha=0.15,
                lw=0,
            )
            ax.annotate(
                f"{c.change * 100:+.1f}% (p={c.p_value:.2g})",
                (k + 0.5, ax.get_ylim()[1]),
                va="top",
                fontsize=8,
                color="tab:red",
            )
        if s.change_points:  # the level before the first change, for the eye
            a, k = s.change_points[0].before
            level = np.median(np.concatenate(s.values[a:k]))
            ax.hlines(level, a + 0.5, k + 0.5, color="tab:red", lw=1, ls="--")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{s.cell_label}: {s.metric}", fontsize=9)
        ax.set_ylabel(f"{s.metric} {s.unit}".strip())
        ax.set_xlabel("run (1 = the oldest shown)")
    fig.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

"""How precisely a cell's trials pin its result down, for `repeats: auto` and `precision:`.

The estimate is the median of the cell's usable trials (valid and quiet) of one metric
(Cell.precision_metric); its 95% interval is distribution-free (loadgen.stats.median_ci: order
statistics, so it needs at least 6 trials). The precision is the interval's half-width relative
to the median; it is reached when that is at most the target.
"""

from __future__ import annotations

import math

import numpy as np

from loadgen.stats import median_ci


def usable(row: dict) -> bool:
    """A trial that counts: valid, and quiet (rows written before `quiet` existed count)."""
    return bool(row.get("valid", False)) and bool(row.get("quiet", True))


def precision_state(rows: list[dict], metric: str, target: float) -> dict:
    """The precision columns for a cell whose trials so far are `rows` (dicts of trials.csv)."""
    values = np.array([float(r.get(metric, math.nan)) for r in rows if usable(r)], dtype=float)
    values = values[np.isfinite(values)]
    lo, hi = median_ci(values)
    mid = float(np.median(values)) if values.size else math.nan
    half = (hi - lo) / 2 / abs(mid) if mid == mid and mid != 0 and lo == lo else math.nan
    return {
        "precision_metric": metric,
        "precision_target_pct": 100 * target,
        "precision_trials": int(values.size),
        "precision_half_width_pct": 100 * half if half == half else math.nan,
        "precision_reached": bool(half == half and half <= target),
    }

"""Operational laws as consistency checks on measurements.

- Little's law: N = X * R (mean number in flight = throughput x mean time in the system).
  For a closed loop with think time Z, the N users satisfy N = X * (R + Z): pass R + Z.
- Utilisation law: U = X * S / c (per-server busy fraction of c servers).

Each check returns a frozen result with the predicted value, the measured one, the relative
error |measured - predicted| / |predicted| (0 when both are 0, inf when only the prediction is
0) and ``ok = relative_error <= tolerance``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "LawCheck",
    "littles_law",
    "utilization_law",
    "check_littles_law_frame",
    "in_flight_from_requests",
]


@dataclass(frozen=True)
class LawCheck:
    law: str
    predicted: float
    measured: float
    relative_error: float
    tolerance: float
    ok: bool


def _num(name: str, v, nonneg: bool = True) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {v!r}") from None
    if math.isnan(x) or math.isinf(x):
        raise ValueError(f"{name} must be finite, got {v!r}")
    if nonneg and x < 0:
        raise ValueError(f"{name} must be >= 0, got {v!r}")
    return x


def _rel(measured: float, predicted: float) -> float:
    if predicted == 0:
        return 0.0 if measured == 0 else math.inf
    return abs(measured - predicted) / abs(predicted)


def _tol(tolerance) -> float:
    t = _num("tolerance", tolerance)
    return t


def littles_law(
    throughput: float, response_time: float, measured_in_flight: float, tolerance: float = 0.10
) -> LawCheck:
    """Predicted in-flight N = throughput [1/s] * response_time [s]; compared with the measured."""
    x = _num("throughput", throughput)
    r = _num("response_time", response_time)
    m = _num("measured_in_flight", measured_in_flight)
    tol = _tol(tolerance)
    pred = x * r
    err = _rel(m, pred)
    return LawCheck("little", pred, m, err, tol, bool(err <= tol))


def utilization_law(
    throughput: float,
    service_time: float,
    measured_utilization: float,
    servers: int = 1,
    tolerance: float = 0.10,
) -> LawCheck:
    """Predicted U = throughput [1/s] * service_time [s] / servers, a fraction in [0, 1]."""
    x = _num("throughput", throughput)
    s = _num("service_time", service_time)
    m = _num("measured_utilization", measured_utilization)
    c = _num("servers", servers)
    if c <= 0:
        raise ValueError(f"servers must be > 0, got {servers!r}")
    tol = _tol(tolerance)
    pred = x * s / c
    err = _rel(m, pred)
    return LawCheck("utilization", pred, m, err, tol, bool(err <= tol))


def in_flight_from_requests(
    requests_df: pd.DataFrame, start_col: str = "sent_ns", end_col: str = "done_ns"
) -> pd.DataFrame:
    """Time-average number of requests in flight per (cell_id, trial), measured from the
    request timestamps: sum of durations / observation window (first start .. last end).
    Only completed requests (error == 0 when the column exists) are counted. Columns:
    cell_id, trial, in_flight, throughput_rps, mean_time_s, window_s."""
    df = requests_df
    if "error" in df.columns:
        df = df[df["error"] == 0]
    rows = []
    for (cell, trial), g in df.groupby(["cell_id", "trial"], sort=True):
        st = g[start_col].to_numpy(dtype=np.int64)
        en = g[end_col].to_numpy(dtype=np.int64)
        window = (en.max() - st.min()) / 1e9
        dur = (en - st) / 1e9
        rows.append(
            {
                "cell_id": cell,
                "trial": trial,
                "in_flight": float(dur.sum() / window) if window > 0 else math.nan,
                "throughput_rps": len(g) / window if window > 0 else math.nan,
                "mean_time_s": float(dur.mean()),
                "window_s": window,
            }
        )
    return pd.DataFrame(
        rows, columns=["cell_id", "trial", "in_flight", "throughput_rps", "mean_time_s", "window_s"]
    )


def check_littles_law_frame(
    df: pd.DataFrame,
    throughput_col: str = "throughput_rps",
    response_ms_col: str = "latency_mean_ms",
    in_flight_col: str = "connections",
    think_time_col: str | None = "think_time_s",
    tolerance: float = 0.10,
) -> pd.DataFrame:
    """Little's law row by row. Defaults suit closed-loop trials: N (connections) =
    X * (R + Z). Rows with a missing value get NaN and ok = False. Returns df's index with
    columns little_predicted, little_measured, little_rel_error, little_ok."""
    out = []
    for _, row in df.iterrows():
        try:
            r = float(row[response_ms_col]) / 1e3
            if think_time_col is not None and think_time_col in row.index:
                z = float(row[think_time_col])
                r += 0.0 if math.isnan(z) else z
            c = littles_law(row[throughput_col], r, row[in_flight_col], tolerance)
            out.append((c.predicted, c.measured, c.relative_error, c.ok))
        except (ValueError, TypeError, KeyError):
            out.append((math.nan, math.nan, math.nan, False))
    return pd.DataFrame(
        out,
        index=df.index,
        columns=["little_predicted", "little_measured", "little_rel_error", "little_ok"],
    )

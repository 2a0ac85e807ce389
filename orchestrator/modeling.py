"""`perfctl model`: queueing models against a run's measurements.

`model_run(run_dir)` fits every applicable model (models.estimate.compare) to the run's
measured requests, writes RUN_DIR/models.json and the model figures under RUN_DIR/plots/,
and returns what it wrote. The runner calls it after the last trial when the experiment
lists `models:`; `perfctl model RUN_DIR` calls it and prints the table.

Which trials count: a cell's valid trials; a cell with no valid trial falls back to all of
its trials and is flagged (`from_invalid` in models.json, a red row in the table), so a noisy
host still gets a model instead of silence. Requests count only inside the measured window
(warm-up excluded) and only when they completed without error.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from models import estimate, usl

from . import results

# Trial columns models.estimate.compare reads besides the axes. Everything else (start-up
# time, self-check readings, CPU...) differs per trial and would split the cells that differ
# only in concurrency into groups of one, so no USL fit would ever happen.
MODEL_COLUMNS = ["cell_id", "trial", "server", "server_impl", "server_model", "server_threads",
                 "server_backlog", "server_cores", "load_mode", "connections", "think_time_s",
                 "duration_s", "work_spin_us", "work_sleep_us", "throughput_rps",
                 "latency_mean_ms", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms",
                 "latency_p999_ms", "latency_max_ms", "requests", "errors", "error_rate",
                 "target_rate", "achieved_rate", "valid"]


def analysis_trials(trials: pd.DataFrame) -> tuple[pd.DataFrame, set[str]]:
    """The trials an analysis uses: each cell's valid trials, or all of a cell's trials when
    none is valid. Returns (trials with `valid` forced True for the fallback cells, the
    cell_ids that fell back)."""
    if trials.empty or "valid" not in trials.columns:
        return trials, set()
    valid = trials["valid"].fillna(False).astype(bool)
    has_valid = valid.groupby(trials["cell_id"]).transform("any")
    keep = trials[valid | ~has_valid].copy()
    fallback = set(keep.loc[~keep["valid"].fillna(False).astype(bool), "cell_id"])
    keep["valid"] = True
    return keep, fallback


def trial_summary(run: results.Run, cell_id: str, trial: int) -> dict | None:
    """The load generator's summary.json of one trial (None when missing)."""
    f = results.trial_dir(run.path, cell_id, int(trial)) / "summary.json"
    return json.loads(f.read_text()) if f.is_file() else None


def _window(run: results.Run, cell_id: str, trial: int) -> tuple[int, int] | None:
    s = trial_summary(run, cell_id, trial)
    return None if s is None else (int(s["measure_start_ns"]), int(s["measure_end_ns"]))


def trimmed_timeline(run: results.Run) -> pd.DataFrame:
    """run.timeline without the bins that start after the measured window ends (the tail
    where only the last responses arrive, which would read as a throughput collapse)."""
    tl = run.timeline
    if tl.empty:
        return tl
    keep = np.ones(len(tl), dtype=bool)
    for (cid, k), idx in tl.groupby(["cell_id", "trial"], sort=False).indices.items():
        s = trial_summary(run, cid, k)
        if s is not None:
            end_s = (s["measure_end_ns"] - s["start_ns"]) / 1e9
            keep[idx] = tl["t_s"].to_numpy()[idx] < end_s - 1e-9
    return tl[keep]


def measured_requests(run: results.Run, trials: pd.DataFrame | None = None,
                      ok_only: bool = True) -> pd.DataFrame:
    """The run's requests intended inside each trial's measured window (warm-up dropped),
    restricted to the (cell_id, trial) pairs of `trials` (default: all) and, with ok_only,
    to requests that completed without a transport error or an HTTP status >= 400."""
    req = run.requests
    if req.empty:
        return req
    trials = run.trials if trials is None else trials
    keep = np.zeros(len(req), dtype=bool)
    for (cid, k), idx in req.groupby(["cell_id", "trial"], sort=False).indices.items():
        if not ((trials["cell_id"] == cid) & (trials["trial"] == k)).any():
            continue
        w = _window(run, cid, int(k))
        t = req["intended_ns"].to_numpy()[idx]
        keep[idx] = True if w is None else (t >= w[0]) & (t < w[1])
    out = req[keep]
    if ok_only:
        out = out[(out["error"] == 0) & (out["status"] < 400)]
    return out.reset_index(drop=True)


def cell_labels(run: results.Run, short: bool = False) -> dict[str, str]:
    """cell_id -> 'axis=value, ...' from run.json (the cell_id itself when unknown). With
    short, only the axes whose value differs between the run's cells are named."""
    cells = run.info.get("cells", [])
    vals = [c.get("values", {}) for c in cells]
    varying = {k for v in vals for k in v if len({str(w.get(k)) for w in vals}) > 1}
    out = {}
    for c, v in zip(cells, vals):
        keep = [k for k in v if k in varying] if short and varying else list(v)
        out[c["cell_id"]] = ", ".join(f"{k}={v[k]}" for k in keep) or c["cell_id"]
    return out


def model_table(run: results.Run) -> pd.DataFrame:
    """models.estimate.compare on the run: one row per cell (see that function), plus
    `from_invalid` (True when the cell had no valid trial) and `label`."""
    if run.trials.empty:
        return pd.DataFrame()
    trials, fallback = analysis_trials(run.trials)
    keep = list(dict.fromkeys([a for a in run.axes if a in trials.columns] +
                              [c for c in MODEL_COLUMNS if c in trials.columns]))
    table = estimate.compare(trials[keep], measured_requests(run, trials))
    if table.empty:
        return table
    labels = cell_labels(run, short=True)
    table["from_invalid"] = table["cell_id"].isin(fallback)
    table["label"] = [labels.get(c, c) for c in table["cell_id"]]
    return table


def service_of(row: pd.Series) -> estimate.ServiceEstimate | None:
    """The service estimate a model_table row was predicted with (None when it had none)."""
    m = row.get("service_mean_ms", math.nan)
    if not (isinstance(m, (int, float)) and m == m and m > 0):
        return None
    oh_mean = row.get("overhead_mean_ms", math.nan)
    return estimate.ServiceEstimate(m / 1e3, float(row.get("service_scv", 1.0)),
                                    str(row.get("service_source", "")),
                                    float(row.get("overhead_ms", 0.0) or 0.0) / 1e3,
                                    overhead_mean_s=float(oh_mean) / 1e3 if oh_mean == oh_mean
                                    else math.nan)


def usl_fits(table: pd.DataFrame) -> list[dict]:
    """One USL fit per group of closed cells the compare table fitted (>= 4 concurrency
    levels): parameters, peak concurrency and peak throughput, and the group's cell_ids."""
    if table.empty or "usl_lam" not in table.columns:
        return []
    fits = []
    done = table[table["usl_lam"].notna()]
    for key, g in done.groupby(["usl_sigma", "usl_kappa", "usl_lam"], sort=False):
        sigma, kappa, lam = (float(v) for v in key)
        peak_n = float(g["usl_peak_concurrency"].iloc[0])
        if math.isfinite(peak_n):   # sigma >= 1 gives N* = 0: throughput only falls past N = 1
            peak_n = max(peak_n, 1.0)
            peak_x = float(usl.predict(peak_n, sigma, kappa, lam))
        else:
            peak_x = lam / sigma if sigma > 0 else math.inf
        fits.append({"server": str(g["server"].iloc[0]) if "server" in g else "",
                     "sigma": sigma, "kappa": kappa, "lam": lam,
                     "peak_concurrency": peak_n, "peak_throughput_rps": peak_x,
                     "r_squared": float(g["usl_r_squared"].iloc[0]),
                     "cell_ids": list(g["cell_id"])})
    return fits


def _jsonable(v):
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else None
    return v


def model_run(run_dir: str | Path, plots: bool = True) -> dict:
    """Fit the models to a finished run, write RUN_DIR/models.json (and, with plots, the
    model figures under RUN_DIR/plots/) and return the models.json contents:
    {"generated", "basis", "cells": [one compare row per cell], "usl": [fits]}.
    Non-finite numbers are written as null. Raises PerfctlError when RUN_DIR is no run."""
    run = results.load(run_dir)
    table = model_table(run)
    doc = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "basis": "valid trials per cell (all trials when a cell has none: from_invalid); "
                 "requests in the measured window that completed without error",
        "cells": [{k: _jsonable(v) for k, v in r.items()
                   if not (isinstance(v, float) and math.isnan(v))}
                  for r in table.to_dict("records")],
        "usl": [{k: _jsonable(v) if not isinstance(v, list) else v for k, v in f.items()}
                for f in usl_fits(table)],
    }
    results.write_json(run.path / "models.json", doc)
    if plots:
        from . import plots as plots_
        plots_.draw_models(run, table, run.path / "plots")
    return doc

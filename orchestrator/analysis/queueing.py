"""Queueing models against a run's measurements (`perfctl model`).

`fit_run(run_dir)` fits every applicable queueing model (models.comparison.compare) to the run's
measured requests (through their histograms, histograms.py: memory does not grow with the
run, and runs that kept no requests fit too), writes RUN_DIR/models.json and returns (its contents, the table); drawing
is the caller's job (model_figures.py). Trials and requests count as views.py says; a cell
measured only by invalid trials is flagged `from_invalid`.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from models import assess, comparison, estimate, usl

from ..results import Run, load, write_json
from ..results.schema import configuration_columns
from .histograms import cell_measures
from .views import analysis_trials, cell_labels

# Measurement columns models.comparison.compare reads, besides the readings the verdicts and
# the bottleneck use (models.assess.EVIDENCE_COLUMNS, errors_*, probe_*). The rest (start-up
# time, the other self-checks...) differs per trial and is left out of the table it is given.
MEASURED_COLUMNS = [
    "throughput_rps",
    "latency_mean_ms",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "latency_p999_ms",
    "latency_max_ms",
    "requests",
    "errors",
    "error_rate",
    "target_rate",
    "achieved_rate",
    "valid",
]


def queueing_table(run: Run) -> pd.DataFrame:
    """models.comparison.compare on the run: one row per cell (see that function), plus
    `from_invalid` (True when the cell had no valid trial) and `label`."""
    if run.trials.empty:
        return pd.DataFrame()
    trials, fallback = analysis_trials(run.trials)
    config = configuration_columns(trials, run.axes)
    readings = [
        c
        for c in trials.columns
        if c in MEASURED_COLUMNS
        or c in assess.EVIDENCE_COLUMNS
        or c.startswith(("errors_", "probe_", "latency_p99_ci_"))
    ]
    keep = list(dict.fromkeys(["cell_id", "trial", *config, *readings]))
    table = comparison.compare(
        trials[keep], None, config_columns=config, measures=cell_measures(run, trials)
    )
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
    db = row.get("db_mean_ms", math.nan)  # /db: the figures predict the tandem the table did
    return estimate.ServiceEstimate(
        m / 1e3,
        float(row.get("service_scv", 1.0)),
        str(row.get("service_source", "")),
        float(row.get("overhead_ms", 0.0) or 0.0) / 1e3,
        overhead_mean_s=float(oh_mean) / 1e3 if oh_mean == oh_mean else math.nan,
        db_mean_s=float(db) / 1e3 if isinstance(db, (int, float)) and db == db else math.nan,
    )


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
        if math.isfinite(peak_n):  # sigma >= 1 gives N* = 0: throughput only falls past N = 1
            peak_n = max(peak_n, 1.0)
            peak_x = float(usl.predict(peak_n, sigma, kappa, lam))
        else:
            peak_x = lam / sigma if sigma > 0 else math.inf
        fits.append(
            {
                "server": str(g["server"].iloc[0]) if "server" in g else "",
                "sigma": sigma,
                "kappa": kappa,
                "lam": lam,
                "peak_concurrency": peak_n,
                "peak_throughput_rps": peak_x,
                "r_squared": float(g["usl_r_squared"].iloc[0]),
                "cell_ids": list(g["cell_id"]),
            }
        )
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


def fit_run(run_dir: str | Path) -> tuple[dict, pd.DataFrame]:
    """Fit the queueing models to a finished run, write RUN_DIR/models.json and return its
    contents ({"generated", "basis", "cells": [one compare row per cell], "usl": [fits]};
    non-finite numbers written as null) and the table they came from. Raises PerfctlError
    when RUN_DIR is no run."""
    run = load(run_dir)
    table = queueing_table(run)
    doc = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "basis": "valid trials per cell (all trials when a cell has none: from_invalid); "
        "requests in the measured window that completed without error, through "
        "their HdrHistograms (mean exact, p99 within 0.1%)",
        "cells": [
            {k: _jsonable(v) for k, v in r.items() if not (isinstance(v, float) and math.isnan(v))}
            for r in table.to_dict("records")
        ],
        "usl": [
            {k: _jsonable(v) if not isinstance(v, list) else v for k, v in f.items()}
            for f in usl_fits(table)
        ],
    }
    write_json(run.path / "models.json", doc)
    return doc, table

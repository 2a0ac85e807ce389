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

from models import assess, comparison, parameters, usl, whatif

from ..results import Run, load, write_json
from ..results.schema import configuration_columns
from .gc_pauses import with_gc_columns
from .histograms import cell_measures
from .views import HEADLINE_COLUMNS, analysis_trials, cell_labels, measured_trials

# Measurement columns models.comparison.compare reads, besides the readings the verdicts and
# the bottleneck use (models.assess.EVIDENCE_COLUMNS, errors_*, probe_*). The rest (start-up
# time, the other self-checks...) differs per trial and is left out of the table it is given.
MEASURED_COLUMNS = [*HEADLINE_COLUMNS, "target_rate", "achieved_rate", "valid"]


def queueing_table(run: Run, notes: list[str] | None = None) -> pd.DataFrame:
    """models.comparison.compare on the run: one row per cell (see that function), plus
    `from_invalid` (True when the cell had no valid trial) and `label`. Trials that measured
    nothing are left out and said in `notes` (views.measured_trials)."""
    measured, left_out = measured_trials(run.trials)
    if left_out and notes is not None:
        notes.append(f"models: {left_out}")
    if measured.empty:
        return pd.DataFrame()
    trials, fallback = analysis_trials(measured)
    trials = with_gc_columns(run, trials)
    config = configuration_columns(trials, run.axes)
    readings = [
        c
        for c in trials.columns
        if c in MEASURED_COLUMNS
        or c in assess.EVIDENCE_COLUMNS
        or c.startswith(("errors_", "probe_", "latency_p99_ci_", "server_gc_"))
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


def service_of(row: pd.Series) -> parameters.ServiceEstimate | None:
    """The service estimate a model_table row was predicted with (None when it had none)."""
    m = row.get("service_mean_ms", math.nan)
    if not (isinstance(m, (int, float)) and m == m and m > 0):
        return None
    oh_mean = row.get("overhead_mean_ms", math.nan)
    db = row.get("db_mean_ms", math.nan)  # /db: the figures predict the tandem the table did
    se, oh_se = row.get("service_se_ms", math.nan), row.get("overhead_se_ms", math.nan)
    floor = row.get("overhead_floor_ms", math.nan)
    return parameters.ServiceEstimate(
        m / 1e3,
        float(row.get("service_scv", 1.0)),
        str(row.get("service_source", "")),
        float(row.get("overhead_ms", 0.0) or 0.0) / 1e3,
        int(row.get("service_n", 0) or 0),
        overhead_mean_s=float(oh_mean) / 1e3 if oh_mean == oh_mean else math.nan,
        gap_s=float(row.get("worker_gap_ms", 0.0) or 0.0) / 1e3,
        db_mean_s=float(db) / 1e3 if isinstance(db, (int, float)) and db == db else math.nan,
        mean_se_s=float(se) / 1e3 if _finite(se) else math.nan,
        overhead_se_s=float(oh_se) / 1e3 if _finite(oh_se) else math.nan,
        overhead_floor_s=float(floor) / 1e3 if _finite(floor) else math.nan,
    )


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def cell_row(row: pd.Series) -> pd.Series:
    """A queueing_table row as the models read a cell: its measured throughput back under
    throughput_rps (the utilization law's X), its measured mean under latency_mean_ms."""
    r = row.copy()
    r["throughput_rps"] = row.get("measured_throughput_rps", math.nan)
    r["latency_mean_ms"] = row.get("measured_mean_ms", math.nan)
    return r


def what_if(table: pd.DataFrame, changes: dict[str, float]) -> pd.DataFrame:
    """The fitted models' predictions with the configuration changed (models/whatif.py): one
    row per cell that had a service estimate: label, the cell's configuration after the
    change, the model, the predicted mean and p99 with their bands, the verdict the model
    had on the measured cell (basis_verdict: a what-if is no better than that) and notes."""
    rows = []
    if table.empty:
        return pd.DataFrame()
    for _, r in table.iterrows():
        svc = service_of(r)
        base = {
            "cell_id": r["cell_id"],
            "label": r.get("label", r["cell_id"]),
            "basis_verdict": r.get("verdict", "no prediction"),
            "measured_mean_ms": r.get("measured_mean_ms", math.nan),
            "measured_p99_ms": r.get("measured_p99_ms", math.nan),
        }
        if svc is None:
            rows.append({**base, "model": "no service estimate", "notes": ""})
            continue
        row, svc2, notes = whatif.apply(cell_row(r), svc, changes)
        try:
            p, bands, _ = assess.predict_with_band(row, svc2)
        except ValueError as e:
            rows.append({**base, "model": f"error: {e}", "notes": "; ".join(notes)})
            continue
        if p["broken"]:
            notes.append(p["broken"])
        rows.append(
            {
                **base,
                **{k: row.get(k) for k in ("server_threads", "server_cores", "target_rate")},
                "connections": row.get("connections"),
                "model": p["model"],
                "pred_mean_ms": p["mean_ms"],
                "pred_mean_low_ms": bands["mean"].low,
                "pred_mean_high_ms": bands["mean"].high,
                "pred_p99_ms": p["p99_ms"],
                "pred_p99_low_ms": bands["p99"].low,
                "pred_p99_high_ms": bands["p99"].high,
                "pred_throughput_rps": p["throughput_rps"],
                "notes": "; ".join(notes),
            }
        )
    return pd.DataFrame(rows)


def cell_lines(table: pd.DataFrame) -> list[str]:
    """One line per cell, for people: its label, the model with its verdict on the mean
    and the p99 (every prediction printed beside its verdict), and its bottleneck line."""
    out = []
    if table.empty:
        return out
    for _, r in table.iterrows():
        label = r.get("label", r["cell_id"])
        if not _finite(r.get("pred_mean_ms")):
            out.append(
                f"{label}: {r.get('model', '')} - {r.get('verdict_why', '') or 'no prediction'}"
            )
            continue
        parts = [f"{label}: {r.get('model', '')}"]
        for stat in ("mean", "p99"):
            pred, err = r.get(f"pred_{stat}_ms"), r.get(f"err_{stat}")
            status = r.get(f"verdict_{stat}", "no prediction")
            if _finite(pred):
                parts.append(f"{stat} {pred:.3g} ms ({_pct(err)}) {status}")
        if r.get("verdict") == "rejected":
            cause = str(r.get("verdict_causes", "") or r.get("verdict_why", ""))
            parts.append(f"rejected: {cause.split('; ')[0]}")
        line = ", ".join(parts)
        if r.get("bottleneck_line"):
            line += f"; {r['bottleneck_line']}"
        out.append(line)
    return out


def cell_details(table: pd.DataFrame) -> list[str]:
    """Per cell, a few lines for people (`perfctl model`): the bottleneck line, where the
    model's parameters came from, the operational-law checks that disagree, a rejection's
    evidence, and the other models' means."""
    out = []
    if table.empty:
        return out
    for _, r in table.iterrows():
        lines = [f"{r.get('label', r['cell_id'])}: {r.get('bottleneck_line', '') or ''}"]
        if _finite(r.get("service_mean_ms")):
            se = r.get("service_se_ms")
            lines.append(
                f"  S = {r['service_mean_ms']:.3g} ms"
                + (f" +- {1.96 * se:.2g}" if _finite(se) else "")
                + f" ({str(r.get('service_source', '')).replace('_', ' ')}); "
                f"{str(r.get('dispatch', '')).replace('_', ' ')} ({r.get('dispatch_source', '')}); "
                f"{r.get('servers_source', '')}; CPU {_pct_plain(r.get('cpu_share'))} of S "
                f"({r.get('cpu_share_source', '')})"
            )
        if r.get("verdict") == "rejected":
            lines.append(f"  rejected: {r.get('verdict_why', '')}")
            for cause in str(r.get("verdict_causes", "") or "").split("; "):
                if cause:
                    lines.append(f"    evidence: {cause}")
        elif r.get("verdict_why"):
            lines.append(f"  {r.get('verdict')}: {r.get('verdict_why')}")
        for check in str(r.get("law_checks", "") or "").split("; "):
            if check and check != "nan":
                lines.append(f"  check: {check}")
        others = [
            f"{k[5:-8]} {r[k]:.3g} ({_pct(r.get('err_' + k[5:-8] + '_mean'))})"
            for k in r.index
            if k.startswith("pred_")
            and k.endswith("_mean_ms")
            and k not in ("pred_mean_ms", "pred_mean_low_ms", "pred_mean_high_ms")
            and _finite(r.get(k))
        ]
        if others:
            lines.append("  every applicable model (mean): " + ", ".join(others))
        out.append("\n".join(lines))
    return out


def _pct_plain(x) -> str:
    return f"{100 * x:.0f}%" if _finite(x) else "?"


def _pct(x) -> str:
    return f"{100 * x:+.0f}%" if _finite(x) else "n/a"


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


MIX_NOTE = (
    "a request mix is modelled as one class of requests whose service time is the mix's "
    "(every request's, pooled); each endpoint's own queueing is not modelled (no multi-class "
    "model): the predictions are for the mix as a whole, not per endpoint"
)


def fit_run(
    run_dir: str | Path, what_if_changes: dict[str, float] | None = None
) -> tuple[dict, pd.DataFrame]:
    """Fit the queueing models to a finished run, write RUN_DIR/models.json and return its
    contents ({"generated", "basis", "cells": [one compare row per cell], "usl": [fits],
    "left_out": [one line per thing skipped] when something was, "mix": MIX_NOTE when a cell's
    workload is a mix, and "what_if": {"changes", "cells"} when asked}; non-finite numbers written as null) and the table they came from.
    Raises PerfctlError when RUN_DIR is no run."""
    run = load(run_dir)
    notes: list[str] = []
    table = queueing_table(run, notes)
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
    if notes:
        doc["left_out"] = notes
    ep = run.endpoints
    if not ep.empty and ep.groupby("cell_id")["endpoint"].nunique().max() > 1:
        doc["mix"] = MIX_NOTE
    if what_if_changes:
        wi = what_if(table, what_if_changes)
        doc["what_if"] = {
            "changes": what_if_changes,
            "cells": [
                {
                    k: _jsonable(v)
                    for k, v in r.items()
                    if not (isinstance(v, float) and math.isnan(v))
                }
                for r in wi.to_dict("records")
            ],
        }
    write_json(run.path / "models.json", doc)
    return doc, table

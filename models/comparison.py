"""The measured-vs-model table of a run: one row per cell, every applicable queueing model's
prediction beside the measurement, and USL fits across concurrency levels.

Service times, server counts and the per-cell predictions come from parameters.py (its docstring
states the approximations); this module picks each cell's requests (measured window, ok ones),
pools its trials, and groups closed cells that differ only in concurrency for the USL.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from . import usl
from .assess import assess, latency_sample, readings
from .parameters import (
    MEASURED_COLUMNS,
    ServiceEstimate,
    as_float,
    estimate_service,
    ok_only,
    probe_service,
    threads_cores,
    utilization_law_service,
)
from .verdict import Sample

__all__ = ["compare"]


def _rel(pred: float, meas: float) -> float:
    if not (math.isfinite(meas) and meas != 0) or math.isnan(pred):
        return math.nan
    return (pred - meas) / meas


# Per-trial measurements and self-checks: never configuration, whatever the run looks like.
_PER_TRIAL_PREFIXES = (
    "latency_",
    "errors_",
    "rtt_",
    "send_lateness_",
    "lateness_shift_",
    "gc_",
    "loop_lag_",
    "loadgen_",
    "server_cpu",
    "server_rss",
    "server_threads_max",
    "service_",
    "throughput_",
    "startup_",
    "probe_",
    "invalid_",
    "success_",
    "measure_",
)
_PER_TRIAL = {"completed", "dropped", "duration_actual_s", "timeouts"}
# Cell configuration columns perfctl writes (axes are configuration too, whatever their name).
_CONFIG = {
    "server",
    "server_impl",
    "server_model",
    "concurrency_model",
    "server_dispatch",
    "server_dispatch_source",
    "server_waits_block",
    "keepalive",
    "server_threads",
    "server_backlog",
    "server_cores",
    "load_mode",
    "mode",
    "think_time_s",
    "duration_s",
    "window_s",
    "work_spin_us",
    "work_sleep_us",
}


def _per_trial(col: str) -> bool:
    return col in MEASURED_COLUMNS or col in _PER_TRIAL or col.startswith(_PER_TRIAL_PREFIXES)


def _config_columns(trials: pd.DataFrame) -> list[str]:
    """The columns that describe a cell's configuration rather than one trial's measurement.

    A column counts when it is not a known per-trial measurement (``MEASURED_COLUMNS``, the
    ``latency_``/``errors_``/``rtt_``/``send_lateness_``/``gc_``/... families) and its value is
    the same in every trial of every cell (so a new per-trial column perfctl may add later drops
    out by itself as soon as a cell has two trials). When every cell has a single trial that test
    cannot tell anything apart, so an unknown column whose value differs in every row (a
    per-trial reading: it could not group two cells anyway) is dropped as well."""
    if trials.empty:
        return []
    cells = trials["cell_id"].astype(str) if "cell_id" in trials.columns else None
    repeated = cells is not None and bool(cells.duplicated().any())
    keys = []
    for col in trials.columns:
        if col in ("cell_id", "trial", "connections") or _per_trial(col):
            continue
        vals = trials[col].astype(str)  # NaN -> 'nan': a missing value is a value here
        if cells is not None and (vals.groupby(cells).nunique() > 1).any():
            continue  # differs between trials of one cell: a measurement
        if not repeated and col not in _CONFIG and len(vals) > 1 and vals.nunique() == len(vals):
            continue
        keys.append(col)
    return keys


def _usl_groups(
    closed_trials: pd.DataFrame, config_columns: list[str] | None = None
) -> list[pd.DataFrame]:
    """Closed trials grouped by cell configuration minus concurrency: each group is a set of
    cells that differ only in ``connections`` (columns tied 1:1 to it, such as an axis that
    renames it, are ignored too). The configuration columns are ``config_columns`` when the
    caller knows them (perfctl does), else ``_config_columns`` tells them apart from per-trial
    readings. Per-trial readings never split a group."""
    if closed_trials.empty:
        return []
    conns = closed_trials["connections"]
    keys = []
    given = (
        [c for c in config_columns if c in closed_trials.columns and c != "connections"]
        if config_columns is not None
        else None
    )
    for col in given if given is not None else _config_columns(closed_trials):
        pair = closed_trials[[col]].astype(str).assign(_n=conns.astype(str)).drop_duplicates()
        if pair[col].nunique() == conns.nunique() == len(pair) and len(pair) > 1:
            continue  # an alias of the concurrency axis
        keys.append(col)
    if not keys:
        return [closed_trials]
    key_frame = closed_trials[keys].astype(str)
    return [closed_trials.loc[idx] for idx in key_frame.groupby(keys, sort=False).groups.values()]


def _measured_mask(
    requests_df: pd.DataFrame, trials_df: pd.DataFrame | None, measured=None
) -> np.ndarray | None:
    """Boolean mask of the requests inside their trial's measured window, or None when nothing
    says which requests are warm-up. Sources, all honoured when present (combined with AND):
    the ``measured`` argument (a boolean array/Series aligned with requests_df), a boolean
    ``measured`` column of requests_df, and ``measure_start_ns``/``measure_end_ns`` columns of
    trials_df (per cell_id and trial; compared with the requests' ``intended_ns``)."""
    n = len(requests_df)
    mask = None

    def _and(m) -> None:
        nonlocal mask
        m = np.asarray(m, dtype=bool)
        if m.shape != (n,):
            raise ValueError(f"measured mask has {m.size} values for {n} requests")
        mask = m if mask is None else (mask & m)

    if measured is not None:
        if isinstance(measured, pd.Series) and not measured.index.equals(requests_df.index):
            measured = measured.reindex(requests_df.index)  # aligned by label
        if isinstance(measured, pd.Series):
            measured = measured.fillna(False).to_numpy()
        _and(measured)
    if "measured" in requests_df.columns:
        _and(requests_df["measured"].fillna(False).astype(bool).to_numpy())
    if (
        trials_df is not None
        and {"measure_start_ns", "measure_end_ns", "cell_id", "trial"} <= set(trials_df.columns)
        and {"cell_id", "trial", "intended_ns"} <= set(requests_df.columns)
    ):
        win = trials_df[["cell_id", "trial", "measure_start_ns", "measure_end_ns"]]
        win = win.dropna().drop_duplicates(["cell_id", "trial"])
        if len(win):
            j = (
                requests_df[["cell_id", "trial", "intended_ns"]]
                .reset_index(drop=True)
                .merge(win, on=["cell_id", "trial"], how="left")
            )
            t = j["intended_ns"].to_numpy(dtype=float)
            lo, hi = (
                j["measure_start_ns"].to_numpy(dtype=float),
                j["measure_end_ns"].to_numpy(dtype=float),
            )
            _and(np.where(np.isnan(lo), True, (t >= lo) & (t < hi)))
    return mask


def _pooled_service(estimates: list[ServiceEstimate]) -> ServiceEstimate | None:
    """Several cells' single-user service estimates as one (n-weighted mean, pooled
    variance), as estimate_service would give on their pooled requests."""
    es = [e for e in estimates if e is not None and e.n > 0]
    if not es:
        return None
    n = sum(e.n for e in es)
    mean = sum(e.n * e.mean_s for e in es) / n
    var = sum(e.n * (e.scv * e.mean_s**2 + (e.mean_s - mean) ** 2) for e in es) / n
    return ServiceEstimate(mean, var / mean**2 if mean > 0 else math.nan, es[0].source, 0.0, n)


def _row_samples(cr: pd.DataFrame) -> tuple[list[Sample], list[Sample] | None]:
    """Per trial, the measured latencies [ms] (in one-second blocks of their intended send
    time) and the Server-Timing svc values [ms] (None without them), for the bootstrap."""
    lat, svc = [], []
    keys = [k for k in ("cell_id", "trial") if k in cr.columns]
    for _, t in cr.groupby(keys, sort=False) if keys else [(None, cr)]:
        intended = t["intended_ns"].to_numpy() if "intended_ns" in t.columns else None
        lat.append(latency_sample(t["latency_ns"].to_numpy(dtype=float) / 1e6, intended))
        if "svc_ms" in t.columns and t["svc_ms"].notna().sum() >= 2:
            svc.append(Sample.of_values(t["svc_ms"].to_numpy(dtype=float)))
    return lat, (svc or None)


def compare(
    trials_df: pd.DataFrame,
    requests_df: pd.DataFrame | None,
    measured=None,
    config_columns: list[str] | None = None,
    measures: dict[str, dict] | None = None,
) -> pd.DataFrame:
    """One row per cell: configuration, measured mean/p99 latency [ms] and throughput (pooled
    over the cell's valid trials), the chosen model's prediction, every applicable model's
    prediction (pred_<key>_mean_ms / _p99_ms) and signed relative errors (pred - meas) / meas
    (err_<key>_mean / _p99). Closed cells also get USL columns when >= 4 concurrency levels.

    Warm-up: the measured mean/p99 and the service estimate come from the requests given, so
    they must be the measured window's. ``compare`` drops the other requests when it can tell
    them apart: ``measured`` (a boolean mask aligned with requests_df), a boolean ``measured``
    column in requests_df, or ``measure_start_ns``/``measure_end_ns`` columns in trials_df
    (against each request's ``intended_ns``); see ``_measured_mask``. Otherwise every request
    given counts, and the caller must pass measured requests only (perfctl's own caller,
    orchestrator.analysis.views.measured_requests, cuts each trial's window from its
    summary.json). ``config_columns`` names the columns that describe a cell's configuration,
    for grouping closed cells into USL curves; without it they are told apart by heuristics.

    ``measures`` replaces the requests for runs too large for memory or that kept none:
    cell_id -> {"mean_ms", "p99_ms" (the cell's pooled measured latency), "service" (a
    ServiceEstimate from Server-Timing histograms, or None), "single_user_service" (for
    one-connection closed cells: from their send-to-done histogram)}; requests_df is then
    not used (orchestrator.analysis.histograms builds them)."""
    trials = trials_df
    if "valid" in trials.columns:
        trials = trials[trials["valid"].fillna(False).astype(bool)]
    reqs = None
    if requests_df is not None and measures is None:
        mask = _measured_mask(requests_df, trials_df, measured)
        reqs = ok_only(requests_df if mask is None else requests_df[mask])
    single_ref = None
    if (reqs is not None or measures is not None) and {"connections", "load_mode"} <= set(
        trials.columns
    ):
        single_ref = trials[(trials["connections"] == 1) & (trials["load_mode"] == "closed")]
    rows = []
    for cell, g in trials.groupby("cell_id", sort=False):
        first = g.iloc[0]
        out = {
            k: first[k]
            for k in g.columns
            if k not in MEASURED_COLUMNS or k in ("cell_id", "connections", "target_rate")
        }
        out["trials"] = len(g)
        out["measured_throughput_rps"] = float(g["throughput_rps"].mean())
        cell_readings = readings(g)
        out.update({k: v for k, v in cell_readings.items() if k not in MEASURED_COLUMNS})
        out["error_rate"] = cell_readings.get("error_rate", math.nan)
        cell_row = pd.Series({**first.to_dict(), **cell_readings})
        cr = None
        if reqs is not None:
            cr = reqs[(reqs["cell_id"] == cell) & reqs["trial"].isin(g["trial"])]
        m = (measures or {}).get(cell)
        lat_samples = svc_samples = None
        if m is not None:
            out["measured_mean_ms"], out["measured_p99_ms"] = m["mean_ms"], m["p99_ms"]
            lat_samples, svc_samples = m.get("latency_samples"), m.get("service_samples")
        elif cr is not None and len(cr):
            lat = cr["latency_ns"].to_numpy(dtype=float) / 1e6
            out["measured_mean_ms"], out["measured_p99_ms"] = (
                float(lat.mean()),
                float(np.percentile(lat, 99)),
            )
            lat_samples, svc_samples = _row_samples(cr)
        else:
            out["measured_mean_ms"] = float(g["latency_mean_ms"].mean())
            out["measured_p99_ms"] = float(g["latency_p99_ms"].mean())
        svc = None
        try:
            if measures is not None:
                svc = (m or {}).get("service")
                if svc is None and single_ref is not None and len(single_ref):
                    ref = single_ref
                    for k in ("server", "work_spin_us", "work_sleep_us"):
                        if k in ref.columns:
                            ref = ref[ref[k].astype(str) == str(first[k])]
                    svc = _pooled_service(
                        [
                            measures.get(c, {}).get("single_user_service")
                            for c in dict.fromkeys(ref["cell_id"])
                        ]
                    )
            elif cr is not None and "svc_ms" in cr.columns and cr["svc_ms"].notna().sum() >= 2:
                svc = estimate_service(cr, single_worker=threads_cores(first)[0] == 1)
            elif single_ref is not None and len(single_ref):
                ref = single_ref
                for k in ("server", "work_spin_us", "work_sleep_us"):
                    if k in ref.columns:
                        ref = ref[ref[k].astype(str) == str(first[k])]
                if len(ref):
                    svc = estimate_service(reqs[reqs["cell_id"].isin(ref["cell_id"])], ref)
        except ValueError:
            svc = None
        if svc is None:
            svc = probe_service(cell_row) or utilization_law_service(g)
        if svc is None:
            out["model"] = "no service estimate"
            out["verdict"] = "no prediction"
            out["verdict_why"] = (
                "no service estimate: no Server-Timing, no single-user trial or probe, "
                "no CPU reading"
            )
            rows.append(out)
            continue
        if svc.source != "server_timing":
            svc_samples = None  # the samples are Server-Timing's; this S came from elsewhere
        out.update(
            service_mean_ms=svc.mean_s * 1e3,
            service_se_ms=svc.mean_se_s * 1e3,
            service_n=svc.n,
            overhead_se_ms=svc.overhead_se_s * 1e3,
            overhead_floor_ms=svc.overhead_floor_s * 1e3,
            service_scv=svc.scv,
            service_source=svc.source,
            overhead_ms=svc.overhead_s * 1e3,
            overhead_mean_ms=svc.overhead_for_mean_s * 1e3,
            worker_gap_ms=svc.gap_s * 1e3,
            db_mean_ms=svc.db_mean_s * 1e3,
            db_share=svc.db_share,
        )
        try:
            a = assess(
                cell_row,
                svc,
                out["measured_mean_ms"],
                out["measured_p99_ms"],
                lat_samples,
                svc_samples,
            )
        except ValueError as e:
            out["model"] = f"error: {e}"
            out["verdict"] = "no prediction"
            out["verdict_why"] = str(e)
            rows.append(out)
            continue
        p = a.pop("prediction")
        used = p["choice"].service
        if used is not svc:  # processor sharing: the CPU demand, not svc's wall time
            out.update(
                service_wall_mean_ms=svc.mean_s * 1e3,
                service_mean_ms=used.mean_s * 1e3,
                service_se_ms=used.mean_se_s * 1e3,
                service_source=used.source,
                worker_gap_ms=used.gap_s * 1e3,
            )
        out.update(
            model=p["model"],
            servers=p["servers"],
            capacity=p["capacity"],
            db_servers=p["db_servers"],
            pred_mean_ms=p["mean_ms"],
            pred_p99_ms=p["p99_ms"],
            pred_throughput_rps=p["throughput_rps"],
            pred_utilization=p["utilization"],
            err_mean=_rel(p["mean_ms"], out["measured_mean_ms"]),
            err_p99=_rel(p["p99_ms"], out["measured_p99_ms"]),
            **a,
        )
        for key, v in p["candidates"].items():
            out[f"pred_{key}_mean_ms"], out[f"pred_{key}_p99_ms"] = v["mean_ms"], v["p99_ms"]
            out[f"err_{key}_mean"] = _rel(v["mean_ms"], out["measured_mean_ms"])
            out[f"err_{key}_p99"] = _rel(v["p99_ms"], out["measured_p99_ms"])
        rows.append(out)
    table = pd.DataFrame(rows)
    if "load_mode" in trials.columns and "connections" in trials.columns:
        _add_usl(table, trials[trials["load_mode"] == "closed"], config_columns)
    return table


def _add_usl(
    table: pd.DataFrame, closed_trials: pd.DataFrame, config_columns: list[str] | None = None
) -> None:
    for g in _usl_groups(closed_trials, config_columns):
        g = g[np.isfinite(g["throughput_rps"].astype(float)) & (g["connections"] > 0)]
        if g["connections"].nunique() < 4:
            continue
        try:
            f = usl.fit(g["connections"], g["throughput_rps"])
        except ValueError:
            continue
        for cell in g["cell_id"].unique():
            i = table.index[table["cell_id"] == cell]
            n = float(g.loc[g["cell_id"] == cell, "connections"].iloc[0])
            z = (
                max(as_float(g.loc[g["cell_id"] == cell, "think_time_s"].iloc[0], 0.0), 0.0)
                if "think_time_s" in g.columns
                else 0.0
            )
            x = f.predict(n)
            r_ms = (n / x - z) * 1e3 if x > 0 else math.inf
            table.loc[
                i,
                [
                    "usl_sigma",
                    "usl_kappa",
                    "usl_lam",
                    "usl_peak_concurrency",
                    "usl_r_squared",
                    "pred_usl_throughput_rps",
                    "pred_usl_mean_ms",
                ],
            ] = [f.sigma, f.kappa, f.lam, f.peak_concurrency, f.r_squared, x, r_ms]
            meas = float(table.loc[i, "measured_mean_ms"].iloc[0])
            table.loc[i, "err_usl_mean"] = _rel(r_ms, meas)

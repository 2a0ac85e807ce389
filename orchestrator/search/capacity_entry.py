"""A cell search's entry of capacity.json: the capacity and its interval, the fitted model
and the curve drawn from it, every probe and what the search made of it."""

from __future__ import annotations

import math

import numpy as np

from loadgen.floats import float_or_nan

from .capacity_estimate import MODEL_ERRORS, Estimate
from .cell_search import CellSearch
from .probe_checks import valid_for_slo


def cell_entry(cs: CellSearch, wall_s: float) -> dict:
    """A cell search's entry of capacity.json (results/schema.py documents the keys)."""
    est = cs.estimate()
    st = cs.station
    status = "found" if math.isfinite(est.low) else "no interval"
    if cs.failure is not None or cs.given_up:
        status = "failed"
    elif est.n == 0:
        status = "no estimate"
    probes = []
    each = iter(zip(est.each, est.weights, strict=True))
    for r in cs.records:
        used_here = r.spec.role == "knee" and r.used and r.verdict.startswith("estimate")
        c_i = next(each)[0] if used_here else math.nan
        probes.append(
            {
                "trial": r.trial,
                "role": r.spec.role,
                "level": r.spec.level,
                "attempt": r.spec.attempt,
                "mode": "open" if r.spec.role == "knee" and cs.open else "closed",
                "latency_ms": r.readings.stat_ms,
                "error_rate": float_or_nan(r.row.get("error_rate")),
                "throughput_rps": float_or_nan(r.row.get("throughput_rps")),
                "valid": bool(r.row.get("valid", False)),
                "valid_for_slo": valid_for_slo(cs.search, r.row),
                "quiet": bool(r.row.get("quiet", True)),
                "stationary": r.readings.trend.stationary,
                "stationarity_p": r.readings.trend.p,
                "drift_pct": 100 * r.readings.trend.drift,
                "meets_slo": bool(r.row.get("search_meets_slo")),
                "capacity_estimate": c_i,
                "used": r.used,
                "verdict": r.verdict,
            }
        )
    try:
        target = cs.curve.level_for(cs.slo_s) if cs.curve else math.nan
    except MODEL_ERRORS:  # the search gave up on it and says why (cs.given_up)
        target = math.nan
    return {
        "cell_id": cs.cell.cell_id,
        "label": cs.cell.label,
        "values": dict(cs.cell.values),
        "load_mode": cs.cell.load.mode,
        "unit": cs.unit,
        "think_time_s": None if cs.open else cs.cell.load.think_time_s,
        "status": status,
        "capacity": est.capacity,
        "low": est.low,
        "high": est.high,
        "confidence": cs.search.confidence,
        "half_width_pct": 100 * est.half_width,
        "precision_pct": 100 * cs.search.precision,
        "precision_reached": bool(est.half_width <= cs.search.precision),
        "knee_probes": est.n,
        "df": est.df,
        "log_sd": est.log_sd,
        "log_se": est.log_se,
        "upper_bound": cs.upper,
        "upper_bound_why": cs.upper_why,
        "stopped": cs.stopped or (str(cs.failure) if cs.failure else ""),
        "trials": cs.trials,
        "curve_trials": sum(r.spec.role == "curve" for r in cs.records),
        "wall_s": wall_s,
        "model": None
        if st is None
        else {
            "name": st.name,
            "dispatch": st.dispatch,
            "servers": st.servers,
            "mean_service_ms": 1e3 * st.mean_service_s,
            "service_scv": st.service_scv,
            "overhead_ms": 1e3 * st.overhead_s,
            "saturation_rps": cs.saturation_rps,
            "predicted_capacity": target,
            # the measured curve is the model's stretched along the load axis:
            # latency(x) = model(x * calibration)
            "calibration": target / est.capacity if est.capacity > 0 and target > 0 else math.nan,
            "notes": cs.model_notes,
        },
        "curve": _curve_points(cs, est, target),
        "probes": probes,
        "notes": est.notes,
    }


def _curve_points(cs: CellSearch, est: Estimate, target: float, n: int = 60) -> dict:
    """The fitted curve as drawn (report figure): the model stretched by the calibration,
    latency(x) = model(x * target / capacity), around the capacity."""
    if cs.curve is None or not target > 0:
        return {"level": [], "latency_ms": []}
    k = target / est.capacity if est.capacity > 0 else 1.0
    centre = est.capacity if est.capacity > 0 else target
    try:
        top = min(1.25 * centre, 0.995 * cs.curve.level_max / k)
        levels = np.linspace(0.5 * centre, top, n)
        lat = [1e3 * cs.curve.latency_s(x * k) for x in levels]
    except MODEL_ERRORS:  # the search gave up on the model and says why
        return {"level": [], "latency_ms": []}
    return {"level": [float(x) for x in levels], "latency_ms": lat}

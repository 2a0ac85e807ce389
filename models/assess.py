"""One cell assessed: its prediction with a band, the verdict on the measurement, and what limits
it. comparison.compare adds these columns to every row of the table; `perfctl model`, the
summary and the report print them (never a prediction without its verdict).

Columns (times in ms; NaN where not known):
- dispatch, dispatch_source, servers_source, cpu_share, cpu_share_source, broken: where the
  station came from (cell_station.py);
- pred_{mean,p99}_{low,high}_ms: the prediction's band (verdict.band over S, the overhead
  and the arrival rate); measured_{mean,p99}_{low,high}_ms: the measurement's interval
  (verdict.bootstrap over trials and requests);
- verdict_mean, verdict_p99: held | rejected | inconclusive | no prediction; verdict: the
  cell's (rejected if either is), verdict_why and verdict_causes (evidence, '; '-joined);
- bottleneck, bottleneck_line, util_<resource> (bottleneck.py), law_checks ('; '-joined).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from . import bottleneck, verdict
from .parameters import ServiceEstimate
from .predict import predict_cell
from .verdict import Interval, Sample

__all__ = ["readings", "assess", "predict_with_band", "SUMMED", "EVIDENCE_COLUMNS"]

# per-trial readings that are counts over the trial: a cell's is their sum
SUMMED = (
    "tcp_listen_overflows",
    "tcp_listen_drops",
    "errors",
    "requests",
    "completed",
    "dropped",
)
# per-trial readings whose cell value is their largest
PEAKS = ("tcp_accept_queue_max", "server_gc_pause_max_ms", "send_lateness_p99_ms")
# the readings the verdict's causes and the bottleneck line use (means unless above)
EVIDENCE_COLUMNS = (
    "throughput_rps",
    "server_cpu_pct",
    "error_rate",
    "loadgen_cpu_pct",
    "rtt_measured_ms",
    "rtt_expected_ms",
    "latency_mean_ms",
    "server_gc_pause_total_ms",
    "server_gc_pauses",
    "quiet",
    "noise_reasons",
    *SUMMED,
    *PEAKS,
)


def readings(trials: pd.DataFrame) -> dict:
    """A cell's readings from its trials: counts summed, peaks maxed, the rest averaged
    (numbers) or the first non-empty (text); `errors_<class>` counts summed too. `quiet` is
    False when any trial was noisy."""
    out: dict = {}
    cols = [c for c in trials.columns if c in EVIDENCE_COLUMNS or c.startswith("errors_")]
    for c in cols:
        v = trials[c]
        if c == "quiet":
            out[c] = not (v.astype(str).str.lower().isin(["false", "0"])).any()
            continue
        num = pd.to_numeric(v, errors="coerce")
        if num.notna().any():
            if c in SUMMED or c.startswith("errors_"):
                out[c] = float(num.sum())
            elif c in PEAKS:
                out[c] = float(num.max())
            else:
                out[c] = float(num.mean())
        else:
            text = [str(x) for x in v if isinstance(x, str) and x.strip()]
            out[c] = text[0] if text else ""
    return out


def _service_interval(
    service: ServiceEstimate, samples: Sequence[Sample] | None
) -> tuple[Interval, str]:
    """S's interval: the bootstrap of its per-request values where the run kept them (plus
    the worker gap, a constant here), else S +- 1.96 standard errors."""
    if samples:
        boot = verdict.bootstrap(samples, ("mean",))["mean"]
        iv = verdict.interval(boot / 1e3)  # ms -> s
        if math.isfinite(iv.low):
            return Interval(iv.low + service.gap_s, iv.high + service.gap_s), "bootstrap"
    se = service.mean_se_s
    if math.isfinite(se) and se > 0:
        return Interval(max(service.mean_s - 1.96 * se, 1e-9), service.mean_s + 1.96 * se), "se"
    return Interval(math.nan, math.nan), "unknown"


def _measured_intervals(row, samples: Sequence[Sample] | None) -> tuple[Interval, Interval]:
    if samples:
        boot = verdict.bootstrap(samples, ("mean", "p99"))
        return verdict.interval(boot["mean"]), verdict.interval(boot["p99"])
    lo, hi = row.get("latency_p99_ci_low_ms"), row.get("latency_p99_ci_high_ms")
    p99 = Interval(math.nan, math.nan)
    try:
        if float(lo) > 0 and float(hi) > 0:
            p99 = Interval(float(lo), float(hi))
    except (TypeError, ValueError):
        pass
    return Interval(math.nan, math.nan), p99


def predict_with_band(
    row, service: ServiceEstimate, service_samples: Sequence[Sample] | None = None
) -> tuple[dict, dict[str, Interval], str]:
    """predict_cell for the row and the band of its mean and p99 (verdict.band over S, the
    overhead and the arrival rate), and where S's interval came from (bootstrap | se |
    unknown). Raises ValueError when no model applies."""
    row = pd.Series(row) if isinstance(row, dict) else row
    p = predict_cell(row, service)
    if p["choice"].service is not service:  # the station took another estimate (sharing)
        service, service_samples = p["choice"].service, None
    mode = str(row.get("load_mode", "open"))
    rate = float(row.get("target_rate", math.nan) or math.nan)

    def predict(args: dict) -> tuple[float, float]:
        svc = dataclasses.replace(
            service,
            mean_s=args["S"],
            overhead_s=max(service.overhead_s + args["dOH"], 0.0),
            overhead_mean_s=max(service.overhead_for_mean_s + args["dOH"], 0.0),
        )
        r = row if mode == "closed" else row.copy()
        if mode != "closed":
            r["target_rate"] = args["rate"]
        q = predict_cell(r, svc)
        return q["mean_ms"], q["p99_ms"]

    s_iv, s_src = _service_interval(service, service_samples)
    oh_se = service.overhead_se_s
    oh_iv = (
        Interval(-1.96 * oh_se, 1.96 * oh_se)
        if math.isfinite(oh_se)
        else Interval(math.nan, math.nan)
    )
    n = float(row.get("requests", math.nan) or math.nan)
    rate_iv = Interval(math.nan, math.nan)
    if mode != "closed" and rate > 0 and n > 0:
        rate_iv = Interval(rate * (1 - 1.96 / math.sqrt(n)), rate * (1 + 1.96 / math.sqrt(n)))
    params = {"S": (service.mean_s, s_iv), "dOH": (0.0, oh_iv), "rate": (rate, rate_iv)}
    bands = {}
    for i, (stat, pred) in enumerate((("mean", p["mean_ms"]), ("p99", p["p99_ms"]))):
        if math.isfinite(pred):
            bands[stat] = verdict.band(lambda a, i=i: predict(a)[i], params)[1]
        else:
            bands[stat] = Interval(pred, pred)
    return p, bands, s_src


def assess(
    row,
    service: ServiceEstimate,
    measured_mean_ms: float,
    measured_p99_ms: float,
    latency_samples: Sequence[Sample] | None = None,
    service_samples: Sequence[Sample] | None = None,
) -> dict:
    """The prediction of one cell, its band, the verdicts and the bottleneck (module
    docstring). `row` is the cell's configuration with its readings (readings()).
    latency_samples: per trial, the measured latencies [ms]; service_samples: per trial,
    the Server-Timing svc values [ms]. Raises ValueError when no model applies (predict_cell)."""
    row = pd.Series(row) if isinstance(row, dict) else row
    p, bands, s_src = predict_with_band(row, service, service_samples)
    mean_iv_meas, p99_iv_meas = _measured_intervals(row, latency_samples)
    failed = float(row.get("error_rate", 0.0) or 0.0)
    if not math.isfinite(failed):
        failed = 0.0
    evidence = verdict.causes(row, p["choice"].station, service)
    out = {
        "dispatch": p["dispatch"],
        "dispatch_source": p["dispatch_source"],
        "servers_source": p["servers_source"],
        "cpu_share": p["cpu_share"],
        "cpu_share_source": p["cpu_share_source"],
        "broken": p["broken"] or "",
        "service_interval": s_src,
    }
    stats = {}
    for stat, pred, meas, meas_iv in (
        ("mean", p["mean_ms"], measured_mean_ms, mean_iv_meas),
        ("p99", p["p99_ms"], measured_p99_ms, p99_iv_meas),
    ):
        b = bands[stat]
        v = verdict.judge(stat, pred, b, meas, meas_iv, p["broken"], failed, evidence)
        stats[stat] = v
        out[f"pred_{stat}_low_ms"], out[f"pred_{stat}_high_ms"] = b.low, b.high
        out[f"measured_{stat}_low_ms"], out[f"measured_{stat}_high_ms"] = meas_iv.low, meas_iv.high
        out[f"verdict_{stat}"] = v.status
    rejected = [v for v in stats.values() if v.status == "rejected"]
    statuses = {v.status for v in stats.values()}
    if rejected:
        out["verdict"] = "rejected"
        out["verdict_why"] = rejected[0].why
        out["verdict_causes"] = "; ".join(rejected[0].causes)
    else:
        out["verdict"] = next(
            (s for s in ("inconclusive", "held") if s in statuses), "no prediction"
        )
        out["verdict_why"] = next((v.why for v in stats.values() if v.why), "")
        out["verdict_causes"] = ""
    readings_row = {**row.to_dict(), "measured_mean_ms": measured_mean_ms}
    utils = bottleneck.utilisations(readings_row, service, p["servers"], p["db_servers"])
    top = bottleneck.bottleneck(utils)
    out["bottleneck"] = top.resource if top else "none"
    out["bottleneck_line"] = bottleneck.bottleneck_line(utils)
    for u in utils:
        out[f"util_{u.resource.replace(' ', '_')}"] = u.value
    out["law_checks"] = "; ".join(bottleneck.law_checks(readings_row, service, p["servers"]))
    return {"prediction": p, **out}


def latency_sample(latency_ms: np.ndarray, intended_ns: np.ndarray | None = None) -> Sample:
    """One trial's latencies as a bootstrap sample, in one-second blocks of their intended
    send time when known."""
    blocks = None
    if intended_ns is not None and len(intended_ns):
        t = np.asarray(intended_ns, dtype=float)
        blocks = np.floor((t - np.nanmin(t)) / 1e9)
    return Sample.of_values(latency_ms, blocks)

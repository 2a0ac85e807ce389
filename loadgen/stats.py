"""Statistics over raw request columns: exact percentiles with confidence intervals, the
trial summary row, self-check verdicts and the per-second timeline.

Inputs are the columns of requests.parquet (a dict of numpy arrays or a DataFrame) and the
worker's summary.json. Percentiles are order statistics of the raw latencies (the inverted CDF: always an observed
value), never of rounded or binned data.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from .records import DROPPED, ERROR_NAMES, OK

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
# Self-check limits: beyond them the trial is marked invalid with a reason.
MAX_SEND_LATENESS_P99_MS = 1.0     # open mode; or 10% of the mean gap between arrivals
MAX_LOOP_LAG_P99_MS = 5.0          # or 25% of the trial's p99 latency, whichever is larger
MAX_GC_PAUSE_MS = 10.0             # or 25% of the trial's p99 latency
MAX_LOADGEN_CPU_PCT = 95.0
MAX_SEND_RATE_MISS = 0.01          # open mode: sends in the window vs target rate x window


def percentile(values: np.ndarray, q: float) -> float:
    """Exact q-th percentile (0..100) of raw values: the smallest observed value with at
    least q% of the sample at or below it (the inverted CDF). NaN when empty."""
    n = values.size
    if n == 0:
        return math.nan
    k = min(n, max(1, math.ceil(round(q / 100.0 * n, 9))))   # rank, 1-based
    return float(np.partition(values, k - 1)[k - 1])


def percentile_ci(values: np.ndarray, q: float, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the q-th percentile from order statistics.

    Uses the binomial distribution of the count below the true quantile; returns (low, high)
    as observed values. NaN when the sample is too small to bound that percentile.
    """
    n = values.size
    if n == 0:
        return math.nan, math.nan
    p = q / 100.0
    alpha = 1.0 - confidence
    lo_rank = int(sps.binom.ppf(alpha / 2, n, p))          # 0-based index of lower bound
    hi_rank = int(sps.binom.ppf(1 - alpha / 2, n, p))
    if lo_rank < 0 or hi_rank >= n:
        return math.nan, math.nan
    part = np.partition(values, (lo_rank, hi_rank))
    return float(part[lo_rank]), float(part[hi_rank])


def median_ci(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median of a small sample (e.g. one value
    per trial): [x(k), x(n+1-k)] for the largest k whose coverage, 1 - 2 P(Bin(n, 1/2) < k),
    is at least `confidence`. NaN values are ignored; (NaN, NaN) when the sample is too small
    to reach the confidence (fewer than 6 values at 95%)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    x = x[np.isfinite(x)]
    n = x.size
    if n == 0:
        return math.nan, math.nan
    below = np.flatnonzero(sps.binom.cdf(np.arange(n), n, 0.5) <= (1.0 - confidence) / 2)
    if below.size == 0:
        return math.nan, math.nan
    k = int(below[-1]) + 1
    return float(x[k - 1]), float(x[n - k])


def measured_mask(cols, summary: dict) -> np.ndarray:
    intended = np.asarray(cols["intended_ns"])
    return (intended >= summary["measure_start_ns"]) & (intended < summary["measure_end_ns"])


def http_ok(status: np.ndarray) -> np.ndarray:
    """Responses that count as answered: a 2xx status (anything else is an `errors_http`)."""
    return (status >= 200) & (status < 300)


def summarize(cols, summary: dict, mode: str, duration_s: float | None = None,
              target_rate_rps: float | None = None,
              max_error_rate: float | None = None) -> dict:
    """The trial's metrics and verdict from raw columns (requests intended in the window).

    Latency is done - intended (open mode: from the intended send time, so queueing inside
    the load generator counts; closed mode: intended = when the connection became free).
    `errors` counts transport errors (connect, reset, timeout, parse, dropped, unfinished)
    and responses whose status is not 2xx; `errors_<class>` count each class. duration_s
    defaults to the summary's measured window. Ramp trials are judged like open ones (on
    their chosen step). max_error_rate: above it the trial is invalid (None: no limit).
    """
    if duration_s is None:
        duration_s = (summary["measure_end_ns"] - summary["measure_start_ns"]) / 1e9
    if mode == "ramp":
        mode = "open"
        target_rate_rps = summary.get("ramp_rate_rps", target_rate_rps)
    m = measured_mask(cols, summary)
    err = np.asarray(cols["error"])[m]
    status = np.asarray(cols["status"])[m]
    ok = err == OK
    answered = ok & http_ok(status)
    lat_ms = (np.asarray(cols["done_ns"])[m][ok] - np.asarray(cols["intended_ns"])[m][ok]) / 1e6
    svc_ms = (np.asarray(cols["done_ns"])[m][ok] - np.asarray(cols["sent_ns"])[m][ok]) / 1e6
    requests = int(m.sum())
    errors = int(np.count_nonzero(~answered))
    completed = int(ok.sum())
    sent = int(np.count_nonzero((np.asarray(cols["sent_ns"])[m] > 0) & (err != DROPPED)))
    offered = summary.get("scheduled_in_window", 0)
    row = {
        "requests": requests,
        "completed": completed,
        "errors": errors,
        "error_rate": errors / requests if requests else math.nan,
        "dropped": int(np.count_nonzero(err == DROPPED)),
        "success_ratio": int(np.count_nonzero(answered)) / requests if requests else math.nan,
        "throughput_rps": completed / duration_s,
        "throughput_kib_s": float(np.asarray(cols["bytes"])[m][ok].sum()) / 1024 / duration_s
        if "bytes" in cols else math.nan,
        "target_rate": target_rate_rps if mode == "open" else math.nan,
        "offered_rate": offered / duration_s if mode == "open" else math.nan,
        "achieved_rate": (sent / duration_s) if mode == "open" else completed / duration_s,
        "latency_mean_ms": float(lat_ms.mean()) if lat_ms.size else math.nan,
        "latency_min_ms": float(lat_ms.min()) if lat_ms.size else math.nan,
        "latency_max_ms": float(lat_ms.max()) if lat_ms.size else math.nan,
        "sent_to_done_mean_ms": float(svc_ms.mean()) if svc_ms.size else math.nan,
        "sent_to_done_p99_ms": percentile(svc_ms, 99.0),
    }
    for code, name in ERROR_NAMES.items():
        if code != OK:
            row[f"errors_{name}"] = int(np.count_nonzero(err == code))
    row["errors_http"] = int(np.count_nonzero(ok & ~http_ok(status)))
    for name, q in PERCENTILES.items():
        row[f"latency_{name}_ms"] = percentile(lat_ms, q)
    row["latency_p99_ci_low_ms"], row["latency_p99_ci_high_ms"] = percentile_ci(lat_ms, 99.0)
    for k in ("loop_lag_p99_ms", "loadgen_cpu_pct", "gc_pause_max_ms", "send_lateness_p99_ms",
              "send_lateness_max_ms", "release_spread_ms_max", "sustainable_rps"):
        if k in summary or not k.startswith(("release", "sustainable")):
            row[k] = summary.get(k, math.nan)
    reasons = verdict(row, summary, mode, sent=sent, duration_s=duration_s,
                      max_error_rate=max_error_rate)
    row["valid"] = not reasons
    row["invalid_reasons"] = "; ".join(reasons)
    return row


def send_rate_miss(sent: int, target_rate_rps: float, duration_s: float) -> str:
    """Why the sends in the window miss target x window by more than MAX_SEND_RATE_MISS
    (or half an arrival, the rounding of the schedule's count); "" when they do not."""
    expected = target_rate_rps * duration_s
    if expected <= 0 or abs(sent - expected) <= max(MAX_SEND_RATE_MISS * expected, 0.5):
        return ""
    return (f"achieved send rate {sent / duration_s:.1f}/s misses the target "
            f"{target_rate_rps:g}/s by {100 * (sent - expected) / expected:+.1f}% "
            f"(limit ±{100 * MAX_SEND_RATE_MISS:g}%)")


def error_breakdown(row: dict) -> str:
    """The error classes that occurred, e.g. "refused 1142, http 3"."""
    parts = [f"{k[len('errors_'):]} {row[k]}" for k in row
             if k.startswith("errors_") and row[k]]
    return ", ".join(parts)


def verdict(row: dict, summary: dict, mode: str, sent: int | None = None,
            duration_s: float | None = None, max_error_rate: float | None = None) -> list[str]:
    """Why this trial cannot be trusted (empty list: it can)."""
    reasons = []
    if row["completed"] == 0 and mode != "burst":
        reasons.append("no request completed in the measured window")
    rate = row.get("error_rate")
    if max_error_rate is not None and rate == rate and rate is not None and rate > max_error_rate:
        reasons.append(f"error rate {100 * rate:.2f}% > {100 * max_error_rate:g}% "
                       f"({error_breakdown(row)}): the server failed requests "
                       "(validity.max_error_rate)")
    if mode == "open":
        target = row.get("target_rate") or 0.0
        if sent is not None and duration_s and target > 0:
            miss = send_rate_miss(sent, target, duration_s)
            if miss:
                reasons.append(miss)
        if row["dropped"]:
            reasons.append(f"{row['dropped']} arrivals dropped past the outstanding-request cap")
        limit = max(MAX_SEND_LATENESS_P99_MS, 0.1 * 1e3 / target if target > 0 else 0.0)
        if summary.get("send_lateness_p99_ms", 0.0) > limit:
            reasons.append(f"send lateness p99 {summary['send_lateness_p99_ms']:.2f} ms > "
                           f"{limit:.2f} ms: the load generator fell behind its schedule")
    # A stalled loop stamps responses late: a stall long against the latencies measured
    # distorts them; one short against them does not.
    p99 = row.get("latency_p99_ms")
    p99 = p99 if p99 == p99 and p99 is not None else 0.0
    lag_limit = max(MAX_LOOP_LAG_P99_MS, 0.25 * p99)
    # Burst mode stalls the loop on purpose while it opens N sockets in one release; how far
    # apart the releases really were is reported (release_spread_ms_max) instead.
    if mode != "burst" and summary.get("loop_lag_p99_ms", 0.0) > lag_limit:
        reasons.append(f"load-generator event-loop lag p99 {summary['loop_lag_p99_ms']:.1f} ms "
                       f"> {lag_limit:.1f} ms (host busy or load generator saturated)")
    gc_limit = max(MAX_GC_PAUSE_MS, 0.25 * p99)
    if summary.get("gc_pause_max_ms", 0.0) > gc_limit:
        reasons.append(f"load-generator GC pause {summary['gc_pause_max_ms']:.1f} ms > "
                       f"{gc_limit:.1f} ms")
    # In open mode the dispatcher polls between close arrivals, so CPU says little there;
    # send lateness above is the direct measure. In closed mode CPU is the only witness.
    if mode == "closed" and summary.get("loadgen_cpu_pct", 0.0) > MAX_LOADGEN_CPU_PCT:
        reasons.append(f"load generator at {summary['loadgen_cpu_pct']:.0f}% CPU: it may be "
                       "the bottleneck (add processes or cores)")
    return reasons


def timeline(cols, summary: dict, bin_s: float = 1.0):
    """Per-second table (pandas DataFrame) over the whole load phase, warm-up included:
    t_s (bin start from the start instant), throughput_rps, latency_p50_ms, latency_p99_ms,
    errors, in_flight (requests sent but not done at the bin's end), warmup (bool)."""
    import pandas as pd  # here, not at the top: ~0.35 s to import, and only this table needs it

    start = summary["start_ns"]
    done = np.asarray(cols["done_ns"])
    sent = np.asarray(cols["sent_ns"])
    intended = np.asarray(cols["intended_ns"])
    err = np.asarray(cols["error"])
    status = np.asarray(cols["status"])
    ok = err == OK
    has_done = done > 0
    last = max(int(done.max()) if done.size else start, summary["measure_end_ns"])
    n_bins = max(1, int(math.ceil((last - start) / (bin_s * 1e9))))
    b = np.clip(((done - start) / (bin_s * 1e9)).astype(np.int64), 0, n_bins - 1)
    lat_ms = (done - intended) / 1e6
    rows = []
    edges_ns = start + (np.arange(1, n_bins + 1) * bin_s * 1e9).astype(np.int64)
    sent_sorted = np.sort(sent[sent > 0])
    done_sorted = np.sort(done[has_done & (sent > 0)])
    for k in range(n_bins):
        sel = has_done & (b == k)
        lat = lat_ms[sel & ok]
        edge = edges_ns[k]
        in_flight = int(np.searchsorted(sent_sorted, edge) - np.searchsorted(done_sorted, edge))
        rows.append({
            "t_s": k * bin_s,
            "throughput_rps": int(np.count_nonzero(sel & ok)) / bin_s,
            "latency_p50_ms": percentile(lat, 50.0),
            "latency_p99_ms": percentile(lat, 99.0),
            "errors": int(np.count_nonzero(sel & ~(ok & http_ok(status)))),
            "in_flight": in_flight,
            "warmup": bool(edge <= summary["measure_start_ns"]),
        })
    return pd.DataFrame(rows)

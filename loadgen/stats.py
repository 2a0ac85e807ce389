"""Statistics of a load phase: the trial summary row (its verdict is validity.py's; its
percentiles and their confidence intervals percentiles.py's) and the per-second timeline.

Inputs are either a digest (digest.py: counts and HdrHistograms built chunk by chunk while the
requests streamed by; `summarize_digest`, `timeline_of_digest`) or the columns of
requests.parquet held in memory (a dict of numpy arrays or a DataFrame; `summarize`,
`timeline`), with the worker's summary.json. Both go through the same window row. Counts,
means, minimum and maximum are exact either way. Percentiles are exact order statistics of the
raw latencies (the inverted CDF: always an observed value) whenever the raw latencies exist:
in memory, or in a requests.parquet holding every request (one extra streamed pass). Without
them (`records: sample:F | none`) they come from the HdrHistogram, at most 0.1% above the
exact value; the per-second timeline's p50/p99 always do. `latency_percentiles_from` says
which ("exact" or "hdr").
"""

from __future__ import annotations

import math

import numpy as np

from . import digest, hdr, validity
from .floats import float_or_nan

# percentiles.py's names stay readable here too (stats.percentile, stats.median_ci, ...)
from .percentiles import binom_ppf, ci_ranks, median_ci, percentile, percentile_ci  # noqa: F401
from .records import COLUMNS, LATE_CLIP_NS, OK, stream_batches

COLUMN_NAMES = tuple(COLUMNS)
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}


def measured_mask(cols, summary: dict) -> np.ndarray:
    intended = np.asarray(cols["intended_ns"])
    return (intended >= summary["measure_start_ns"]) & (intended < summary["measure_end_ns"])


def _columns(cols) -> dict[str, np.ndarray]:
    return {k: np.asarray(cols[k]) for k in COLUMN_NAMES if k in cols}


def _window_of(cols: dict[str, np.ndarray], summary: dict) -> digest.Window:
    w = digest.Window(
        summary.get("start_ns", summary["measure_start_ns"]),
        summary["measure_start_ns"],
        summary["measure_end_ns"],
    )
    w.add(cols)
    return w


def summarize(
    cols,
    summary: dict,
    mode: str,
    duration_s: float | None = None,
    target_rate_rps: float | None = None,
    max_error_rate: float | None = None,
    clients: int | None = None,
) -> dict:
    """The trial's metrics and verdict from raw columns (requests intended in the window),
    held in memory; percentiles are exact order statistics (`latency_percentiles_from`
    "exact"). See window_row for the rest."""
    c = _columns(cols)
    m = measured_mask(c, summary)
    ok = c["error"][m] == OK
    lat_ms = (c["done_ns"][m][ok] - c["intended_ns"][m][ok]) / 1e6
    svc_ms = (c["done_ns"][m][ok] - c["sent_ns"][m][ok]) / 1e6
    late = c.get("dispatch_late_ns")
    on_time_ms = (
        np.maximum(lat_ms - late[m][ok].astype(np.int64) / 1e6, 0.0) if late is not None else None
    )
    return window_row(
        _window_of(c, summary),
        summary,
        mode,
        duration_s,
        target_rate_rps,
        max_error_rate,
        exact=(lat_ms, svc_ms, on_time_ms),
        clients=clients,
    )


def summarize_digest(
    doc: dict,
    summary: dict,
    mode: str,
    duration_s: float | None = None,
    target_rate_rps: float | None = None,
    max_error_rate: float | None = None,
    requests_path=None,
    clients: int | None = None,
) -> dict:
    """The same row from a digest (digest.read), never holding the requests in memory.

    Percentiles come from the window's HdrHistogram (within 0.1%, `latency_percentiles_from`
    "hdr"), unless requests_path names a requests.parquet holding every request
    (`records: all`): then one more pass over it, in batches, reads the few values in the
    histogram bucket of each wanted rank and makes them exact ("exact")."""
    w = chosen_window(doc, summary)
    exact = None
    if requests_path is not None:
        exact = exact_order_statistics(requests_path, w, ranks_wanted(w))
    return window_row(
        w, summary, mode, duration_s, target_rate_rps, max_error_rate, ranks=exact, clients=clients
    )


def chosen_window(doc: dict, summary: dict) -> digest.Window:
    """The digest's window that the summary measured (ramp: the chosen step's)."""
    for w in doc["windows"]:
        if w.measure_start_ns == summary["measure_start_ns"]:
            return w
    return doc["windows"][-1]


def ranks_wanted(w: digest.Window) -> dict[str, list[int]]:
    """The 1-based ranks a trial row reads, per histogram: the percentiles of latency and of
    send-to-done, the low end of each latency percentile's CI (the high end too for the
    p99, whose CI is a column)."""
    n = w.counts["completed"]
    if n == 0:
        return {}
    lat = [hdr.rank(n, q) for q in PERCENTILES.values()]
    for name, q in PERCENTILES.items():
        ci = ci_ranks(n, q)
        if ci:
            lat += [ci[0] + 1, ci[1] + 1] if name == "p99" else [ci[0] + 1]
    each = [hdr.rank(n, q) for q in PERCENTILES.values()]
    wanted = {"latency": lat, "sent_to_done": each}
    if w.hists.get("on_time") is not None and w.hists["on_time"].get_total_count() == n:
        ci = ci_ranks(n, 99.0)  # the p99's CI too: the figures may be reported on time
        wanted["on_time"] = each + ([ci[0] + 1, ci[1] + 1] if ci else [])
    return wanted


def exact_order_statistics(
    path, w: digest.Window, wanted: dict[str, list[int]], batch_rows: int = 1 << 18
) -> dict[str, dict[int, float]]:
    """{histogram: {rank: exact value in ns}} over the requests of a parquet file intended in
    w's window and without an error class: for each rank the histogram names the bucket
    holding it and how many values lie below; one pass in batches collects only the values
    inside those buckets, and the rank is picked among them."""
    where = {name: [(k, *hdr.locate(w.hists[name], k)) for k in ks] for name, ks in wanted.items()}
    found = {name: [[] for _ in ks] for name, ks in where.items()}
    names = ["intended_ns", "sent_ns", "done_ns", "error"]
    names += ["dispatch_late_ns"] if "on_time" in where else []
    for batch in stream_batches(path, names, batch_rows):
        c = {k: batch.column(k).to_numpy() for k in batch.schema.names}
        m = (
            (c["intended_ns"] >= w.measure_start_ns)
            & (c["intended_ns"] < w.measure_end_ns)
            & (c["error"] == OK)
        )
        values = {
            "latency": (c["done_ns"] - c["intended_ns"])[m],
            "sent_to_done": (c["done_ns"] - c["sent_ns"])[m],
        }
        if "on_time" in where:
            values["on_time"] = np.maximum(values["latency"] - c["dispatch_late_ns"][m], 0)
        for name, spots in where.items():
            v = np.clip(values[name], 0, hdr.HIGHEST_NS)
            for j, (_, low, high, _) in enumerate(spots):
                found[name][j].append(v[(v >= low) & (v <= high)])
    out: dict[str, dict[int, float]] = {}
    for name, spots in where.items():
        out[name] = {}
        for j, (k, _, _, below) in enumerate(spots):
            v = np.sort(np.concatenate(found[name][j])) if found[name][j] else np.empty(0)
            if 0 < k - below <= v.size:
                out[name][k] = float(v[k - below - 1])
    return out


def window_row(
    w: digest.Window,
    summary: dict,
    mode: str,
    duration_s: float | None = None,
    target_rate_rps: float | None = None,
    max_error_rate: float | None = None,
    exact: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None,
    ranks: dict[str, dict[int, float]] | None = None,
    clients: int | None = None,
) -> dict:
    """The trial's metrics and verdict from one measured window's counts and histograms.

    Latency is done - intended (open mode: from the intended send time, so queueing inside
    the load generator counts; closed mode: intended = when the connection became free).
    `errors` counts transport errors (connect, reset, timeout, parse, dropped, unfinished)
    and responses whose status is not 2xx; `errors_<class>` count each class. duration_s
    defaults to the summary's measured window. Ramp trials are judged like open ones (on
    their chosen step). max_error_rate: above it the trial is invalid (None: no limit).
    clients: closed load's clients (at most one request each waiting or in flight), which
    bounds the requests a load-generator pause can touch (validity.gc_shifts).

    Counts, sums, mean, minimum and maximum are exact. Percentiles and the p99's CI are exact
    order statistics when `exact` holds the window's latency, send-to-done and on-time values
    (ms; on-time None where the rows have no dispatch lateness) or
    `ranks` holds every rank read (exact_order_statistics); otherwise they come from the
    HdrHistogram (the highest value of the rank's bucket: at most 0.1% above the exact one).
    """
    if duration_s is None:
        duration_s = (summary["measure_end_ns"] - summary["measure_start_ns"]) / 1e9
    if mode == "ramp":
        mode = "open"
        target_rate_rps = summary.get("ramp_rate_rps", target_rate_rps)
    n, s = w.counts, w.sums
    requests, completed = n["requests"], n["completed"]
    errors = requests - n["answered"]
    offered = summary.get("scheduled_in_window", 0)
    row = {
        "requests": requests,
        "completed": completed,
        "errors": errors,
        "error_rate": errors / requests if requests else math.nan,
        "dropped": n["dropped"],
        "success_ratio": n["answered"] / requests if requests else math.nan,
        "throughput_rps": completed / duration_s,
        "throughput_kib_s": s["bytes_ok"] / 1024 / duration_s,
        "target_rate": target_rate_rps if mode == "open" else math.nan,
        "offered_rate": offered / duration_s if mode == "open" else math.nan,
        "achieved_rate": (n["sent"] / duration_s) if mode == "open" else completed / duration_s,
        "latency_mean_ms": s["latency_sum_ns"] / completed / 1e6 if completed else math.nan,
        "latency_min_ms": w.latency_min_ns / 1e6 if completed else math.nan,
        "latency_max_ms": w.latency_max_ns / 1e6 if completed else math.nan,
        "sent_to_done_mean_ms": s["sent_to_done_sum_ns"] / completed / 1e6
        if completed
        else math.nan,
    }
    for name in w.errors:
        row[f"errors_{name}"] = w.errors[name]
    row["errors_http"] = n["errors_http"]
    figs = _percentile_columns(row, w, exact, ranks, summary)
    for k in (
        "loop_lag_p99_ms",
        "loadgen_cpu_pct",
        "gc_pause_max_ms",
        "send_lateness_p99_ms",
        "send_lateness_max_ms",
        "release_spread_ms_max",
        "sustainable_rps",
        "send_early_wake_ms",
        "send_poll_cpu_pct",
        "warmup_auto_s",  # warmup: auto: how long it warmed up before the phase (prewarm.py)
        "warmup_auto_settled",
    ):
        optional = ("release", "sustainable", "send_early", "send_poll", "warmup_auto")
        if k in summary or not k.startswith(optional):
            row[k] = summary.get(k, math.nan)
    row.update(validity.shift_columns(figs, summary, mode))
    for k in ("delivered_ks", "delivered_stalled_pct", "lateness_backlog_ms"):
        if mode == "open":
            row[k] = float_or_nan(summary.get(k))
    source = validity.figures_source(figs, summary, mode)
    reasons = validity.verdict(
        row,
        summary,
        mode,
        figs,
        sent=n["sent"],
        duration_s=duration_s,
        max_error_rate=max_error_rate,
        clients=clients,
        source=source,
    )
    _report_figures(row, figs, source)
    row["valid"] = not reasons
    row["invalid_reasons"] = "; ".join(reasons)
    return row


def _report_figures(row: dict, figs: validity.Figures | None, source: tuple[str, str]) -> None:
    """figures_from ("intended" | "send") and figures_why; with "send" the latency figures
    (and the p99's CI) become the on-time ones and the intended-time ones stay beside them in
    latency_<figure>_intended_ms. min and max stay from the intended time."""
    row["figures_from"], row["figures_why"] = source
    if source[0] != "send" or figs is None:
        return
    for name, f in figs.items.items():
        row[f"latency_{name}_intended_ms"] = row[f"latency_{name}_ms"]
        row[f"latency_{name}_ms"] = f.on_time_ms
    row["latency_p99_ci_low_ms"], row["latency_p99_ci_high_ms"] = figs.on_time_p99_ci_ms


def _percentile_columns(
    row: dict, w: digest.Window, exact, ranks, summary: dict
) -> validity.Figures | None:
    """latency_p50..p999_ms, the p99's CI, sent_to_done_p99_ms and where they came from;
    returns the window's figures (validity.Figures: each latency statistic beside the same
    statistic of send-to-done and the low end of its CI), None when nothing completed.

    The figures are exact when the raw values are (see window_row). What the validity rules
    read besides them (other order statistics, counts below a value, the latency's standard
    deviation) comes from the window's HdrHistogram in every case, so a trial gets the same
    verdict from its rows in memory as from its digest and file."""
    n = w.counts["completed"]
    mean, s2d_mean = row["latency_mean_ms"], row["sent_to_done_mean_ms"]
    # the on-time figures, where the generator recorded each arrival's dispatch lateness
    # (validity.py: the shift judged is then the measured one, not a bound)
    on_time_hist = w.hists.get("on_time")
    on_time = (
        bool(summary.get("dispatch_lateness_recorded"))
        and on_time_hist is not None
        and on_time_hist.get_total_count() == n
        and (exact is None or exact[2] is not None)
        # a lateness past the column's int32 was clipped: its on-time figure would be too high
        and summary.get("send_lateness_max_ms", 0.0) * 1e6 < LATE_CLIP_NS
    )
    if exact is not None:
        values = {
            "latency": np.sort(np.asarray(exact[0], dtype=np.float64)),
            "sent_to_done": np.sort(np.asarray(exact[1], dtype=np.float64)),
        }
        if on_time:
            values["on_time"] = np.sort(np.asarray(exact[2], dtype=np.float64))
        n = values["latency"].size

        def at(hist: str, k: int) -> float:
            return float(values[hist][k - 1])

        source = "exact"
    else:
        got = ranks or {}
        wanted = ranks_wanted(w)
        complete = ranks is not None and all(
            k in got.get(h, {}) for h, ks in wanted.items() for k in ks
        )

        def at(hist: str, k: int) -> float:
            if complete:
                return got[hist][k] / 1e6
            return hdr.values_at_ranks_ms(w.hists[hist], [k])[0]

        source = "exact" if complete else "hdr"
    hist = w.hists["latency"]

    def hist_at_ranks(ks: list[int]) -> list[float]:
        return hdr.values_at_ranks_ms(hist, [min(n, max(1, k)) for k in ks])

    def hist_count_below(x_ms: float) -> int:
        return hdr.count_at_or_below(hist, math.floor(x_ms * 1e6))

    items: dict[str, validity.Figure] = {}

    def on_time_at(k: int) -> float:
        return at("on_time", k) if on_time else math.nan

    if n:
        half = validity.CONFIDENCE_Z * hdr.mean_std_ms(hist)[1] / math.sqrt(n)
        on_time_mean = w.sums.get("on_time_sum_ns", 0.0) / n / 1e6 if on_time else math.nan
        items["mean"] = validity.Figure(
            "mean", 0, mean, s2d_mean, mean - half, on_time_ms=on_time_mean
        )
    for name, q in PERCENTILES.items():
        if not n:
            row[f"latency_{name}_ms"] = math.nan
            continue
        k = hdr.rank(n, q)
        ci = ci_ranks(n, q)
        value = at("latency", k)
        row[f"latency_{name}_ms"] = value
        items[name] = validity.Figure(
            name,
            k,
            value,
            at("sent_to_done", k),
            at("latency", ci[0] + 1) if ci else math.nan,
            on_time_ms=on_time_at(k),
        )
    ci = ci_ranks(n, 99.0)
    row["latency_p99_ci_low_ms"], row["latency_p99_ci_high_ms"] = (
        (at("latency", ci[0] + 1), at("latency", ci[1] + 1)) if ci else (math.nan, math.nan)
    )
    on_time_ci = (
        (on_time_at(ci[0] + 1), on_time_at(ci[1] + 1)) if ci and n else (math.nan, math.nan)
    )
    row["sent_to_done_p99_ms"] = items["p99"].sent_to_done_ms if n else math.nan
    row["latency_percentiles_from"] = source
    if not n:
        return None
    return validity.Figures(n, items, hist_at_ranks, hist_count_below, on_time_ci)


def timeline(cols, summary: dict):
    """timeline_of_digest for columns held in memory."""
    d = digest.Digest()
    d.begin(summary["start_ns"], summary["measure_start_ns"], summary["measure_end_ns"])
    d.add(_columns(cols))
    doc = d.to_json()
    return timeline_of_digest(doc, summary, (h for _, _, h in d.interval_histograms()))


def timeline_of_digest(doc: dict, summary: dict, seconds):
    """Per-second table (pandas DataFrame) over the whole load phase, warm-up included:
    t_s (bin start from the phase's start instant), throughput_rps, latency_p50_ms and
    latency_p99_ms (from that second's HdrHistogram: within 0.1%), errors, in_flight
    (requests sent but not done at the bin's end), warmup (bool).

    doc: a digest (digest.read or Digest.to_json); seconds: its per-second latency
    histograms in order (hdr.iter_log(latency.hlog), or a Digest's interval_histograms),
    read one at a time."""
    import pandas as pd  # here, not at the top: ~0.35 s to import, and only this table needs it

    bin_s = float(doc.get("bin_s", 1.0))
    start = int(doc["start_ns"] or summary["start_ns"])
    counts = {k: np.asarray(v, dtype=np.int64) for k, v in doc["bins"].items()}
    span = math.ceil((summary["measure_end_ns"] - start) / (bin_s * 1e9))
    n_bins = max(1, span, *(len(v) for v in counts.values()))
    counts = {k: np.pad(v, (0, n_bins - len(v))) for k, v in counts.items()}
    in_flight = np.cumsum(counts["sent"]) - np.cumsum(counts["done_sent"])
    seconds = iter(seconds)
    rows = []
    for k in range(n_bins):
        h = next(seconds, None)
        p50, p99 = hdr.percentiles_ms(h, [50.0, 99.0]) if h is not None else (math.nan,) * 2
        edge = start + int((k + 1) * bin_s * 1e9)
        rows.append(
            {
                "t_s": k * bin_s,
                "throughput_rps": int(counts["ok"][k]) / bin_s,
                "latency_p50_ms": p50,
                "latency_p99_ms": p99,
                "errors": int(counts["errors"][k]),
                "in_flight": int(in_flight[k]),
                "warmup": bool(edge <= summary["measure_start_ns"]),
            }
        )
    return pd.DataFrame(rows)

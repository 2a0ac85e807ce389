"""The columns of trials.csv and the keys of run.json and summary.json: this module owns them.

trials.csv has one row per trial: its identity (IDENTITY_COLUMNS: the cell, the trial number
and the trial's seed), then three groups:
- configuration: what the cell was (the matrix axes, then CONFIGURATION_COLUMNS); the same in
  every trial of a cell;
- measurement: what the trial measured (MEASUREMENT_COLUMNS, and the `errors_<class>` family);
- self-check: whether the measurement can be trusted (SELF_CHECK_COLUMNS: the load generator's
  checks, the host-noise readings and the cell's precision so far, ending in `valid`,
  `invalid_reasons`, `quiet` and `noise_reasons`).
How the latency columns are computed. Every request of the trial is summarised while the load
generator streams it to disk (loadgen/digest.py), so nothing holds the trial's requests in
memory. `requests`, `completed`, `errors` and the `errors_<class>` counts, `throughput_*`,
`latency_mean_ms`, `latency_min_ms`, `latency_max_ms` and `sent_to_done_mean_ms` are exact.
The percentiles (`latency_p50/p90/p99/p999_ms`, the p99's CI `latency_p99_ci_low/high_ms`,
`sent_to_done_p99_ms`) are exact order statistics (the inverted CDF: an observed value) when
`latency_percentiles_from` is `exact`: the trial kept every request (`load.records: all`) and
one more streamed pass over requests.parquet read the values of the histogram buckets holding
those ranks. With `records: sample:F` or `none` they are `hdr`: read from an HdrHistogram of
every request (3 significant digits, values in ns: exact below 2,048 ns, else the highest
value of a bucket 1/1024 of its value wide, so at most 0.1% above the exact order statistic,
never below it). The timeline's per-second p50/p99 (timeline.parquet) always come from the
per-second HdrHistograms of latency.hlog, with the same bound.

A run with `search:` (orchestrator/search/) writes one row per probe, with the probe's load in
the configuration columns (load_mode, connections, target_rate), and these: `search_role`
(service | saturation | knee), `search_level` (the probe's arrivals/s, or users),
`search_latency_ms` (the SLO's statistic of the trial), `search_meets_slo`, `search_used`,
`search_verdict` (what the search made of the probe, in words), `trial_wall_s`, and the
stationarity test of measure/stationarity.py (`stationary`, `stationarity_p`,
`stationarity_drift_pct`, `stationarity_seconds`). Its capacity.json (CAPACITY_FILE) holds,
per cell: `capacity` (arrivals/s, or users: `unit`), `low` and `high` (the interval at
`confidence`), `half_width_pct`, `precision_pct`, `precision_reached`, `knee_probes`, `df`,
`log_sd` and `log_se` (the spread of ln p99 per probe and the standard error of ln capacity),
`upper_bound` (the lowest level seen failing outright) and why, `status` (found | no interval |
no estimate | failed), `stopped` (why the search ended), `trials`, `wall_s`, `model` (the
fitted station: name, dispatch, servers, mean_service_ms, service_scv, overhead_ms,
saturation_rps, predicted_capacity, calibration) and `probes` (trial, role, level, latency_ms,
error_rate, valid, valid_for_slo (valid, or late only on figures other than the SLO's),
quiet, stationary, meets_slo, capacity_estimate, used, verdict). Numbers
that are not finite are written as null.

Columns renamed since older perfctl versions are renamed on read (RENAMED_COLUMNS), so a
results directory written before keeps loading.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd

from ..errors import PerfctlError

IDENTITY_COLUMNS = [
    "cell_id",
    "trial",
    "seed",  # the trial's schedule seed (experiment/load.py trial_seed)
    "server",
]
CONFIGURATION_COLUMNS = [
    "server_impl",  # c | java | python | cmd
    "concurrency_model",  # the bundled server's concurrency model ("" for a cmd server)
    "server_dispatch",  # how it hands requests to workers (models/stations.py; "" unknown)
    "server_dispatch_source",  # catalogue | declared | "" (then the probe's columns say)
    "server_waits_block",  # an event loop that blocks in its waits (C epoll)
    "server_threads",
    "server_backlog",
    "server_cores",  # CPUs the server may run on
    "load_mode",  # closed | open | burst | ramp
    "load_driver",  # http | a bundled driver (rmi) | cmd  (loadgen/DRIVER.md)
    "connections",
    "keepalive",
    "think_time_s",
    "window_s",  # the measured window: duration, all bursts, or all ramp steps
    "work_spin_us",
    "work_sleep_us",
]
MEASUREMENT_COLUMNS = [
    "startup_s",
    # a `cmd` server declaring neither dispatch nor threads, probed before the load
    # (measure/dispatch_probe.py): what it inferred and the single-user service time
    "probe_dispatch",
    "probe_threads",
    "probe_service_ms",
    "probe_service_se_ms",
    "probe_service_scv",
    "probe_requests",
    "probe_server_timing",
    "probe_note",
    "requests",
    "completed",
    "errors",
    "error_rate",
    "dropped",
    "success_ratio",
    "throughput_rps",
    "throughput_kib_s",
    "search_role",  # search: service | saturation | knee (module docstring)
    "search_level",  # search: the probe's arrivals/s (open knee probes) or users
    "search_latency_ms",  # search: the SLO's statistic of the trial
    "search_meets_slo",
    "search_used",
    "search_verdict",
    "trial_wall_s",  # search: the trial's wall time, start-up and teardown included
    "target_rate",  # open: the rate asked for, arrivals/s
    "offered_rate",  # open: arrivals the schedule put in the window / window_s
    "achieved_rate",  # open: requests sent in the window / window_s; closed: completed
    "latency_mean_ms",
    "latency_min_ms",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "latency_p999_ms",
    "latency_max_ms",
    "latency_p99_ci_low_ms",
    "latency_p99_ci_high_ms",
    "sent_to_done_mean_ms",  # client-side send -> done (no client queueing); not server service
    "sent_to_done_p99_ms",
    "latency_percentiles_from",  # exact | hdr: where the percentile columns came from (below)
    # open load: intended | send. send: the generator's lateness did not depend on the server
    # and the server saw the Poisson arrivals asked for, so the latency figures (and the p99's
    # CI) are measured from each request's actual send; figures_why says so with the
    # measurements, and latency_<figure>_intended_ms keep the intended-time figures
    # (loadgen/validity.py, loadgen/delivered.py)
    "figures_from",
    "figures_why",
    "latency_mean_intended_ms",
    "latency_p50_intended_ms",
    "latency_p90_intended_ms",
    "latency_p99_intended_ms",
    "latency_p999_intended_ms",
    "network_backend",
    "rtt_expected_ms",
    "rtt_measured_ms",
    "rtt_measured_before_ms",
    "rtt_measured_after_ms",
    "rtt_expected_after_ms",  # with a network schedule: the state in force at the last probe
    "network_changes",  # schedule steps that took effect (network_changes.json)
    # proxy: release-time error of held chunks (send time - due time), over the whole trial
    # and over each probe's round trips
    "release_error_p50_us",
    "release_error_p99_us",
    "release_error_p50_before_us",
    "release_error_p99_before_us",
    "release_error_p50_after_us",
    "release_error_p99_after_us",
    # proxy: send() returned - due time, same chunks, whole trial: on loopback the segment is in
    # the peer's socket by then, so this bounds the lateness a client sees (host wake-up and
    # cold caches after a long hold included), where release_error is the proxy's own timing
    "send_done_error_p50_us",
    "send_done_error_p99_us",
    "server_cpu_pct",
    "server_rss_mb",
    "server_threads_max",
    # the kernel's TCP counters over the load, deltas in the server's network namespace
    # (measure/kernel_tcp.py): listen-queue overflows and drops, retransmitted segments,
    # retransmission timeouts, RSTs sent, resets on data after close, the accept queue's peak
    "tcp_listen_overflows",
    "tcp_listen_drops",
    "tcp_retrans_segs",
    "tcp_timeouts",
    "tcp_resets",
    "tcp_abort_on_data",
    "tcp_accept_queue_max",
    "tcp_counters_scope",  # namespace (the server's own) | host (shared: counts all traffic)
]
# host noise over the measured window (measure/noise.py says how each is read and judged)
NOISE_COLUMNS = [
    "noise_steal_pct",
    "noise_foreign_cpu_pct",
    "noise_server_runqueue_wait_ms_per_s",
    "noise_loadgen_runqueue_wait_ms_per_s",
    "noise_runqueue_wait_us_per_request",
    "noise_server_involuntary_switches_per_s",
    "noise_loadgen_involuntary_switches_per_s",
    "noise_loadgen_cpu_others_pct",
    "noise_cpus",
]
SELF_CHECK_COLUMNS = [
    "loop_lag_p99_ms",
    "loadgen_cpu_pct",
    "gc_pause_max_ms",
    "send_lateness_p99_ms",
    "send_lateness_max_ms",
    # open load: how far send lateness can have moved each latency figure, % of it (an upper
    # bound, exact when no request waited for a free connection), and the largest of those
    # shifts as a share of its figure's precision: above 1 the trial is invalid
    # (loadgen/validity.py)
    "lateness_shift_mean_pct",
    "lateness_shift_p50_pct",
    "lateness_shift_p90_pct",
    "lateness_shift_p99_pct",
    "lateness_shift_p999_pct",
    "lateness_shift_of_precision",
    # open load: the arrivals sent against the schedule (loadgen/delivered.py): the inter-send
    # times' KS distance from the schedule's, % held past a mean gap, and the lateness that
    # depended on the server (later with requests in flight, beyond its noise)
    "delivered_ks",
    "delivered_stalled_pct",
    "lateness_backlog_ms",
    "release_spread_ms_max",
    # the load generator's early wake-up before timed sends, and the CPU its polling took
    # (loadgen/wake.py): how much punctuality cost on this host
    "send_early_wake_ms",
    "send_poll_cpu_pct",
    # warmup: auto: how long the trial warmed up before its phase, and whether the server (and
    # a JIT driver) had settled by then or the limit ended it (loadgen/prewarm.py)
    "warmup_auto_s",
    "warmup_auto_settled",
    *NOISE_COLUMNS,
    # with `precision:`: the cell's precision after this trial (run/precision.py)
    "precision_metric",
    "precision_target_pct",
    "precision_trials",
    "precision_half_width_pct",
    "precision_reached",
    # search probes: a trend in the measured window's per-second p99 (measure/stationarity.py)
    "stationary",
    "stationarity_p",
    "stationarity_drift_pct",
    "stationarity_seconds",
    "valid",
    "invalid_reasons",  # the measurement worked (the load generator, the server)
    "quiet",
    "noise_reasons",  # the host left the trial alone
]
RENAMED_COLUMNS = {  # old name -> name since the layout change
    "duration_s": "window_s",
    "server_model": "concurrency_model",
    "service_mean_ms": "sent_to_done_mean_ms",
    "service_p99_ms": "sent_to_done_p99_ms",
}


def order_columns(df: pd.DataFrame, axes: list[str] | None = None) -> pd.DataFrame:
    """Identity, axes, configuration, measurement, other, self-check: the order trials.csv
    is written in."""
    known = IDENTITY_COLUMNS + list(axes or []) + CONFIGURATION_COLUMNS + MEASUREMENT_COLUMNS
    lead = list(dict.fromkeys(c for c in known if c in df.columns))
    tail = [c for c in SELF_CHECK_COLUMNS if c in df.columns and c not in lead]
    middle = [c for c in df.columns if c not in lead and c not in tail]
    return df[lead + middle + tail]


def upgrade(df: pd.DataFrame) -> pd.DataFrame:
    """A trials frame written by any perfctl version, with today's column names."""
    renames = {
        old: new
        for old, new in RENAMED_COLUMNS.items()
        if old in df.columns and new not in df.columns
    }
    return df.rename(columns=renames) if renames else df


def configuration_columns(trials: pd.DataFrame, axes: list[str]) -> list[str]:
    """The columns of `trials` that describe a cell's configuration (axes included)."""
    return [
        c for c in dict.fromkeys(["server", *axes, *CONFIGURATION_COLUMNS]) if c in trials.columns
    ]


# What a damaged file raises when read: pyarrow's errors are OSErrors, ValueErrors (ArrowInvalid),
# TypeErrors and NotImplementedErrors; json's and the CSV parser's are ValueErrors.
UNREADABLE = (OSError, ValueError, TypeError, NotImplementedError, LookupError)
TRIAL_KEYS = ("cell_id", "trial")


def why_unreadable(e: BaseException) -> str:
    """A damaged file's error, in one short clause (first line, at most 160 characters)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text[:160]}" if text else type(e).__name__


def _trials_frame(df: pd.DataFrame) -> pd.DataFrame:
    """df with today's names, checked: a cell id and an integer trial number in every row."""
    df = upgrade(df)
    missing = [c for c in TRIAL_KEYS if c not in df.columns]
    if missing:
        raise ValueError(f"no {' or '.join(missing)} column")
    trial = pd.to_numeric(df["trial"], errors="coerce")
    if trial.isna().any() or (trial != trial.round()).any() or df["cell_id"].isna().any():
        raise ValueError("a row without a cell_id or a whole trial number")
    return df.assign(trial=trial.astype("int64"), cell_id=df["cell_id"].astype(str))


def read_trials(run_dir: str | Path) -> pd.DataFrame:
    """trials.parquet (or trials.csv) of a run directory, with today's column names. When the
    parquet file is damaged (truncated, corrupted) the CSV, written right after it, is read
    instead; PerfctlError naming both when neither reads."""
    run_dir = Path(run_dir)
    readers = (
        ("trials.parquet", pd.read_parquet),
        (
            "trials.csv",
            lambda f: pd.read_csv(f, keep_default_na=False, na_values=["", "nan", "NaN"]),
        ),
    )
    damaged = []
    for name, read in readers:
        f = run_dir / name
        if not f.is_file():
            continue
        try:
            return _trials_frame(read(f))
        except UNREADABLE as e:
            damaged.append(f"{f} ({why_unreadable(e)})")
    if damaged:
        raise PerfctlError(
            f"{run_dir}: the trials table does not read: {'; '.join(damaged)}. The files "
            "are damaged (truncated or overwritten). Fix: restore them from a copy, or run "
            "the experiment again; the per-trial files under cells/ are still there."
        )
    raise PerfctlError(
        f"{run_dir}: no trials.csv here. Fix: give a run directory written by "
        "perfctl run (e.g. results/latest)."
    )


def write_trials(run_dir: Path, df: pd.DataFrame) -> None:
    """trials.parquet, then trials.csv, each replaced atomically. perfctl reads the parquet
    one (`read_trials`), so a kill between the two renames leaves it a row ahead of the CSV,
    never behind: the trial is kept, not run again by --resume (`TrialTable` then brings
    the CSV level)."""
    ptmp = run_dir / "trials.parquet.tmp"
    df.to_parquet(ptmp, index=False)
    os.replace(ptmp, run_dir / "trials.parquet")
    tmp = run_dir / "trials.csv.tmp"
    df.to_csv(tmp, index=False)
    os.replace(tmp, run_dir / "trials.csv")


def write_json(path: Path, data: dict) -> None:
    """run.json, models.json, ramp.json: written to a temporary file, then renamed."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


SUMMARY_WINDOW = ("measure_start_ns", "measure_end_ns")


def read_summary(trial_dir: Path) -> dict | None:
    """The load generator's summary.json of one trial (None when missing, or damaged: not a
    JSON object with its measured window; Run.damaged() names such files). Its keys are
    loadgen's (loadgen/DRIVER.md): measure_start_ns, measure_end_ns, start_ns, self-checks."""
    f = trial_dir / "summary.json"
    if not f.is_file():
        return None
    try:
        doc = json.loads(f.read_text())
    except UNREADABLE:
        return None
    return doc if summary_problem(doc) is None else None


def summary_problem(doc) -> str | None:
    """Why a parsed summary.json is unusable (not an object; its window or start not finite
    numbers: loadgen/DRIVER.md), or None."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    for k in (*SUMMARY_WINDOW, "start_ns"):
        v = doc.get(k, 0 if k == "start_ns" else None)  # start_ns: absent in old runs
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return f"{k} is not a number"
    return None


CAPACITY_FILE = "capacity.json"


def _finite(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def write_capacity(run_dir: Path, doc: dict) -> None:
    """capacity.json (module docstring), non-finite numbers as null."""
    write_json(Path(run_dir) / CAPACITY_FILE, _finite(doc))


def read_capacity(run_dir: str | Path) -> dict | None:
    """capacity.json of a run (None when the run had no `search:`); nulls read as NaN."""
    f = Path(run_dir) / CAPACITY_FILE
    if not f.is_file():
        return None
    doc = json.loads(f.read_text())
    for cell in doc.get("cells", []):
        for k in ("capacity", "low", "high", "half_width_pct", "log_sd", "log_se", "upper_bound"):
            if cell.get(k) is None:
                cell[k] = math.inf if k == "upper_bound" else math.nan
    return doc

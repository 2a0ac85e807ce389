"""Model parameters from a run's DataFrames: the service time (and where it came from, with
its standard error), the worker gap, the database's share and servers. cell_station.py turns
them and a cell's configuration into a station; predict.py predicts the cell from it;
comparison.py builds the measured-vs-model table.

Inputs are a run's result frames: ``trials_df`` (one row per trial) and ``requests_df`` (one
row per request, times in ns, ``svc_ms``/``queue_ms`` from the server's Server-Timing header).

Approximations (all first order, documented so the numbers can be judged):

- Service time S (``ServiceEstimate.source`` says which):
  - ``server_timing``: the mean and SCV of the per-request ``svc_ms`` values; the part of the
    client-observed time that is neither server queue nor service (connect, network, parsing,
    send lateness: latency - queue - svc) is an overhead added to every predicted latency as a
    delay: its mean (``overhead_mean_s``) to means and MVA demands, its median
    (``overhead_s``) to percentiles. A worker is busy longer than svc (reading, writing,
    closing, picking the next request): for one-worker servers that gap is measured from the
    completions of requests that queued (``worker_gap``) and added to S, since near
    saturation a few per cent of S move the mean a lot.
  - ``single_user_latency``: without ``svc_ms``, the client latency (done - sent) of a
    single-user trial; the overhead is inside S (so a queue holds it too: an over-estimate by
    the round trip).
  - ``single_user_probe``: the run-time probe's sequential requests (the same, measured before
    the load; orchestrator/measure/dispatch_probe.py).
  - ``utilization_law``: S = CPU seconds per request (server CPU / throughput), for a
    CPU-bound server with neither.
  ``mean_se_s`` is the standard error of S: between trials when there are several (the spread
  of the per-trial means over sqrt(trials)), never below the within-trial one (the per-request
  standard deviation over sqrt(n)).
- Capacity K = threads + listen backlog (in service + waiting to be accepted), for a new
  connection per request; unknown backlog means infinite.
- Database time (``db_ms``, Server-Timing ``db;dur=`` of /db, the part of ``svc_ms`` spent
  waiting for the database): ``estimate_service`` splits S into D, the mean database time per
  request (requests without ``db_ms`` count 0), and S - D (``db_mean_s``, ``db_share`` = D / S).
  The database is a station of its own with c_db = min(connections to it, its cores) servers
  (``db_servers_for``: the server's pool, ``db_connections`` or ``server_threads``; the cores
  from a ``db_cores`` column, unknown = unlimited, since perfctl does not pin PostgreSQL). It
  is the bottleneck when c_db / D < c / S. Then the prediction is a tandem network, the
  server's station with demand S - D (c servers) followed by the database's with demand D
  (c_db servers), plus the overhead delay: exact MVA when closed (``mva_db``), two M/M/c
  stations in series (Jackson) when open (``tandem_db``). What it assumes: D is spent in the
  database's queue and service (the round trip over loopback is in it and is small), the
  database serves only this server, and a worker waiting for its query does not hold one of
  the server's c slots (exact for a thread per connection; with fewer threads than clients the
  server station is optimistic). When the database is not the bottleneck, the single-station
  models apply unchanged and D is reported only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from loadgen.floats import float_or_nan

__all__ = [
    "ServiceEstimate",
    "estimate_service",
    "probe_service",
    "utilization_law_service",
    "worker_gap",
    "db_servers_for",
    "threads_cores",
    "MEASURED_COLUMNS",
]

FLOOR_PERCENTILE = 5.0  # ServiceEstimate.overhead_floor_s
SCV_FAR_FROM_ONE = 0.25  # |SCV - 1| above this: M/G/c for the mean, no p99 claimed


def scv_tolerance(n: int | float) -> float:
    """How far an SCV measured from n service times may lie from 1 and still be taken as
    exponential's: SCV_FAR_FROM_ONE, or twice the estimate's standard error were the times
    exponential (the sample SCV's variance is about (kurtosis - 1) / n = 8 / n), whichever
    is wider. A 200-request probe of an exponential server reads 0.6-1.4 (its round trip,
    a constant, pulls it lower still): a point threshold of 0.25 turned a fair share of
    them into M/G/c with no p99 at all."""
    n = float(n) if n == n else 0.0
    return max(SCV_FAR_FROM_ONE, 2.0 * math.sqrt(8.0 / n)) if n > 0 else SCV_FAR_FROM_ONE


MEASURED_COLUMNS = {
    "cell_id",
    "trial",
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
    "connections",
}


@dataclass(frozen=True)
class ServiceEstimate:
    mean_s: float
    scv: float
    source: str  # 'server_timing' or 'single_user_latency'
    overhead_s: float = 0.0  # median of the time outside the server's queue and service
    n: int = 0
    overhead_mean_s: float = math.nan  # its mean (NaN: use overhead_s)
    gap_s: float = 0.0  # worker time per request outside svc, included in mean_s
    db_mean_s: float = math.nan  # mean time per request in the database (part of mean_s);
    # NaN: no db_ms measured
    mean_se_s: float = math.nan  # standard error of mean_s (NaN: unknown)
    overhead_se_s: float = math.nan  # standard error of the overhead's mean (NaN: unknown)
    # the overhead of a request that waited nowhere (its 5th percentile): where the station's
    # queue is one Server-Timing cannot see (in the client, in a blocked loop's socket
    # buffers), the rest of the overhead is that queue's wait (NaN: unknown)
    overhead_floor_s: float = math.nan

    @property
    def db_share(self) -> float:
        """The share of the service time spent in the database (NaN without db_ms)."""
        return self.db_mean_s / self.mean_s if self.mean_s > 0 else math.nan

    @property
    def has_db(self) -> bool:
        return math.isfinite(self.db_mean_s) and self.db_mean_s > 0

    @property
    def overhead_for_mean_s(self) -> float:
        """The delay added to predicted means: the mean overhead (a mean of a sum is the sum of
        the means), the median when only that is known."""
        return self.overhead_s if math.isnan(self.overhead_mean_s) else self.overhead_mean_s


def as_float(v, default=math.nan) -> float:
    """v as a float (loadgen.floats.float_or_nan), `default` where that is NaN."""
    x = float_or_nan(v)
    return default if math.isnan(x) else x


def ok_only(requests_df: pd.DataFrame) -> pd.DataFrame:
    """Requests that completed: no error class, an HTTP status in 1..399 and a done time (a row
    with error 0 but status 0 / done_ns 0 is an arrival that was never sent or never answered)."""
    keep = np.ones(len(requests_df), dtype=bool)
    if "error" in requests_df.columns:
        keep &= (requests_df["error"] == 0).to_numpy()
    if "status" in requests_df.columns:
        st = requests_df["status"].to_numpy()
        keep &= (st > 0) & (st < 400)
    if "done_ns" in requests_df.columns:
        keep &= (requests_df["done_ns"] > 0).to_numpy()
    return requests_df if keep.all() else requests_df[keep]


def _service_ns(df: pd.DataFrame) -> np.ndarray:
    if "service_ns" in df.columns:
        return df["service_ns"].to_numpy(dtype=float)
    return (df["done_ns"] - df["sent_ns"]).to_numpy(dtype=float)


def _latency_ns(df: pd.DataFrame) -> np.ndarray:
    """What the measurement reports: from the intended send time when known (so the overhead
    holds everything a measured latency holds beyond the server's queue and service)."""
    if "latency_ns" in df.columns:
        return df["latency_ns"].to_numpy(dtype=float)
    if "intended_ns" in df.columns and "done_ns" in df.columns:
        return (df["done_ns"] - df["intended_ns"]).to_numpy(dtype=float)
    return _service_ns(df)


def _single_user_groups(df: pd.DataFrame, trials_df: pd.DataFrame | None) -> pd.DataFrame:
    if trials_df is not None and {"connections", "cell_id", "trial"} <= set(trials_df.columns):
        t = trials_df[trials_df["connections"] == 1]
        if "load_mode" in t.columns:
            t = t[t["load_mode"] == "closed"]
        keys = set(zip(t["cell_id"], t["trial"]))
        return df[[k in keys for k in zip(df["cell_id"], df["trial"])]]
    keep = []  # no trial table: a group is single-user when its requests never overlap
    for _key, g in df.groupby(["cell_id", "trial"], sort=False):
        g = g.sort_values("sent_ns")
        if len(g) >= 2 and np.all(g["sent_ns"].to_numpy()[1:] >= g["done_ns"].to_numpy()[:-1]):
            keep.append(g)
    return pd.concat(keep) if keep else df.iloc[0:0]


WAITED = 0.2  # a request "waited" when its queue time exceeds this share of mean svc
MIN_WAITED = 30  # fewer waiting requests than this: no gap estimate


def worker_gap(df: pd.DataFrame) -> float:
    """The time a single worker spends per request outside its Server-Timing `svc` (reading
    and parsing the request, writing the answer, closing, taking the next one) [s].

    In a one-worker FCFS server a request that waited in the queue starts when the one
    before it is done, so the gap between their completions at the client is the later one's
    whole occupancy, svc + gap (the network delay is common to both and cancels, up to
    jitter). Median over requests that waited longer than WAITED x mean svc (shorter queue
    times may be a sleeping worker's wake-up, not a wait); 0 with fewer than MIN_WAITED.

    The result is checked: in a one-worker FCFS timeline those gaps are nearly constant
    (network jitter aside). When they scatter by more than WAITED x mean svc (interquartile
    range), the completions are not one worker's back-to-back services (several workers,
    another order, idle time) and the answer is 0."""
    if not {"done_ns", "svc_ms", "queue_ms"} <= set(df.columns):
        return 0.0
    keys = [k for k in ("cell_id", "trial") if k in df.columns]
    gaps = []
    for _, g in df.groupby(keys, sort=False) if keys else [(None, df)]:
        g = g.sort_values("done_ns")
        svc = g["svc_ms"].to_numpy(dtype=float)[1:] / 1e3
        queue = g["queue_ms"].to_numpy(dtype=float)[1:] / 1e3
        d = np.diff(g["done_ns"].to_numpy(dtype=float)) / 1e9
        waited = np.isfinite(svc) & (queue > WAITED * np.nanmean(g["svc_ms"]) / 1e3)
        gaps.append((d - svc)[waited])
    gap = np.concatenate(gaps) if gaps else np.empty(0)
    if gap.size < MIN_WAITED:
        return 0.0
    q1, q3 = np.percentile(gap, [25, 75])
    if q3 - q1 > WAITED * np.nanmean(df["svc_ms"]) / 1e3:
        return 0.0
    return max(float(np.median(gap)), 0.0)


def standard_error(values: np.ndarray, groups: np.ndarray | None = None) -> float:
    """The standard error of the mean of `values`: the per-value standard deviation over
    sqrt(n), or, when `groups` (one label per value: the trial) has several groups, the
    spread of the group means over sqrt(groups) if that is larger (trials differ by more
    than their requests do: a bootstrap over trials sees it, one over requests does not)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)] if groups is None else v
    if v.size < 2:
        return math.nan
    within = float(np.nanstd(v, ddof=1)) / math.sqrt(v.size)
    if groups is None:
        return within
    means = pd.Series(v).groupby(np.asarray(groups)).mean().to_numpy()
    means = means[np.isfinite(means)]
    if means.size < 2:
        return within
    return max(within, float(np.std(means, ddof=1)) / math.sqrt(means.size))


def _trial_labels(df: pd.DataFrame) -> np.ndarray | None:
    keys = [k for k in ("cell_id", "trial") if k in df.columns]
    if not keys:
        return None
    return df.groupby(keys, sort=False).ngroup().to_numpy()


def estimate_service(
    requests_df: pd.DataFrame, trials_df: pd.DataFrame | None = None, single_worker: bool = False
) -> ServiceEstimate:
    """Mean service time [s] and its SCV (variance / mean^2) from successful requests.
    Uses svc_ms when present; otherwise the latency of single-user trials (connections == 1,
    closed mode per ``trials_df``, or, without it, trials whose requests never overlap).
    single_worker: the server has one worker serving in arrival order, so ``worker_gap``
    can be measured and is added to the service time (``gap_s``).
    A boolean ``measured`` column, when present, keeps only the measured (non-warm-up) requests."""
    df = ok_only(requests_df)
    if "measured" in df.columns:  # warm-up requests, when marked, do not count
        df = df[df["measured"].fillna(False).astype(bool)]
    if "svc_ms" in df.columns and df["svc_ms"].notna().sum() >= 2:
        has = df[df["svc_ms"].notna()]
        s = has["svc_ms"].to_numpy(dtype=float) / 1e3
        labels = _trial_labels(has)
        overhead = overhead_mean = 0.0
        overhead_se = floor = math.nan
        if "queue_ms" in has.columns and (
            {"latency_ns", "service_ns", "sent_ns"} & set(has.columns)
        ):
            q = has["queue_ms"].fillna(0.0).to_numpy(dtype=float) / 1e3
            extra = _latency_ns(has) / 1e9 - s - q
            finite = np.isfinite(extra)
            if finite.any():
                overhead = max(float(np.median(extra[finite])), 0.0)
                overhead_mean = max(float(extra[finite].mean()), 0.0)
                floor = max(float(np.percentile(extra[finite], FLOOR_PERCENTILE)), 0.0)
                overhead_se = standard_error(
                    extra[finite], None if labels is None else labels[finite]
                )
        gap = worker_gap(has) if single_worker else 0.0
        m = float(s.mean()) + gap
        if m <= 0:
            raise ValueError("svc_ms values average to zero; cannot estimate a service time")
        db = math.nan
        if "db_ms" in has.columns and has["db_ms"].notna().any():
            # a request without db_ms spent no time in the database (a mixed workload)
            d = has["db_ms"].fillna(0.0).to_numpy(dtype=float) / 1e3
            db = min(float(np.clip(d, 0.0, s).mean()), m)  # db is part of svc
        return ServiceEstimate(
            m,
            float(s.var(ddof=1)) / m**2,
            "server_timing",
            overhead,
            int(s.size),
            overhead_mean,
            gap,
            db,
            mean_se_s=standard_error(s, labels),
            overhead_se_s=overhead_se,
            overhead_floor_s=floor,
        )
    single = _single_user_groups(df, trials_df)
    if len(single) < 2:
        raise ValueError(
            "no svc_ms values and no single-user trial to estimate the service time from"
        )
    s = _service_ns(single) / 1e9
    labels = _trial_labels(single)
    keep = np.isfinite(s)
    s = s[keep]
    m = float(s.mean())
    return ServiceEstimate(
        m,
        float(s.var(ddof=1)) / m**2,
        "single_user_latency",
        0.0,
        int(s.size),
        mean_se_s=standard_error(s, None if labels is None else labels[keep]),
    )


def _limit(v) -> float:
    x = as_float(v)
    return math.inf if math.isnan(x) or x <= 0 else x


def db_servers_for(row) -> float:
    """Servers of the database station: min(connections the server holds to it, its cores).
    Connections: a ``db_connections`` column, else what the bundled servers hold
    (servers/PROTOCOL.md /db): 1 for the one-worker models, one per client connection for C
    `thread`, else ``server_threads`` (the default pool: --db-pool = --threads);
    cores: a ``db_cores`` column, else unlimited (inf when both are unknown)."""
    conns = _limit(row.get("db_connections"))
    if not math.isfinite(conns):
        model = str(row.get("concurrency_model", row.get("server_model", "")))
        if model in ("single", "rmi-single"):
            conns = 1.0  # one worker, one connection
        elif model == "thread" and row.get("server_impl") == "c":
            conns = _limit(row.get("connections"))  # C: a connection per worker thread
        else:
            conns = _limit(row.get("server_threads"))
    return min(conns, _limit(row.get("db_cores")))


def threads_cores(row) -> tuple[float, float]:
    """Threads and cores from a trial row, with the server's concurrency model when a column
    names it: single -> 1 thread; thread/virtual -> one thread per connection; async -> one
    loop (1 CPU, unlimited sleepers). Python servers run spin under the GIL: 1 CPU."""
    threads, cores = as_float(row.get("server_threads")), as_float(row.get("server_cores"))
    model = next(
        (
            str(row[k])
            for k in ("server_model", "concurrency_model", "model")
            if k in row and isinstance(row[k], str)
        ),
        "",
    )
    if model == "single":
        threads = 1.0
    elif model in ("thread", "virtual"):
        threads = as_float(row.get("connections"), math.inf)
    elif model == "async":
        threads, cores = math.inf, 1.0
    if "python" in str(row.get("server", "")).lower():
        cores = 1.0
    return threads, cores


def probe_service(row) -> ServiceEstimate | None:
    """S from the run-time probe's single-user requests (probe_service_ms, its standard error
    and SCV, orchestrator/measure/dispatch_probe.py), None without them. The probe times a
    request from send to answer, so the round trip is inside S."""
    s_ms = as_float(row.get("probe_service_ms"))
    if not s_ms > 0:
        return None
    se = as_float(row.get("probe_service_se_ms"))
    n = int(as_float(row.get("probe_requests"), 0.0))
    return ServiceEstimate(
        s_ms / 1e3,
        as_float(row.get("probe_service_scv"), 1.0),
        "single_user_probe",
        0.0,
        n,
        mean_se_s=se / 1e3 if se > 0 else math.nan,
    )


def utilization_law_service(trials: pd.DataFrame) -> ServiceEstimate | None:
    """S by the utilization law for a CPU-bound server: CPU seconds per request,
    server_cpu_pct / 100 / throughput_rps, per trial; its standard error over trials (NaN
    with one). None without CPU readings. The SCV is unknown and taken as 1."""
    if not {"server_cpu_pct", "throughput_rps"} <= set(trials.columns):
        return None
    cpu = pd.to_numeric(trials["server_cpu_pct"], errors="coerce").to_numpy(dtype=float)
    x = pd.to_numeric(trials["throughput_rps"], errors="coerce").to_numpy(dtype=float)
    ok = np.isfinite(cpu) & np.isfinite(x) & (x > 0) & (cpu > 0)
    if not ok.any():
        return None
    per = cpu[ok] / 100.0 / x[ok]
    return ServiceEstimate(
        float(per.mean()),
        1.0,
        "utilization_law",
        0.0,
        int(ok.sum()),
        mean_se_s=standard_error(per) if per.size > 1 else math.nan,
    )

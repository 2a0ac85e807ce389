"""Model parameters from a run's DataFrames and per-cell predictions (comparison.py builds the
measured-vs-model table from them).

Inputs are a run's result frames: ``trials_df`` (one row per trial) and ``requests_df`` (one
row per request, times in ns, ``svc_ms``/``queue_ms`` from the server's Server-Timing header).

Approximations (all first order, documented so the numbers can be judged):

- Service time S: from ``svc_ms`` when the server reported it (mean and SCV of the
  per-request values); the part of the client-observed time that is neither server queue nor
  service (connect, network, parsing, send lateness: latency - queue - svc) is an overhead
  added to every predicted latency as a delay: its mean (``overhead_mean_s``) to means and
  MVA demands, its median (``overhead_s``) to percentiles. A worker is busy longer than svc
  (reading, writing, closing, picking the next request): for one-worker servers that gap is measured from the completions of requests that queued (``worker_gap``)
  and added to S, since near saturation a few per cent of S move the mean a lot. Without ``svc_ms``, S is the client
  latency (done - sent) of a single-user trial, and the overhead is already inside S.
- Servers c (``servers_for``): a request holds a worker thread for spin + sleep but a CPU only
  while spinning. Saturation throughput is min(threads / (spin + sleep), cores / spin); c is
  chosen so that c / S gives the same ceiling, c = min(threads, cores (spin + sleep) / spin).
  That is min(threads, cores) when CPU-bound and threads when sleep-bound.
- Capacity K (``capacity_for``) = threads + listen backlog (in service + waiting to be
  accepted); unknown backlog means infinite. With keep-alive connections this is only a bound.
- Open mode (Poisson arrivals at ``target_rate``): M/M/c; M/G/c (Allen-Cunneen; M/G/1 exact)
  when |SCV - 1| > 0.25; M/M/c/K when K is finite and matters (load >= 1 or blocking > 1e-3).
- Closed mode (N = connections users, think time Z): the server is one c-server station of
  demand S (solved exactly by ``closed.mva(..., servers=[c, 1])``, the product-form solution for
  exponential service) plus a delay station for the overhead. The common simpler
  approximation, a single-server queue of demand S/c (plus, after Seidmann, a delay of
  S (c - 1)/c), is also reported as candidate ``mva_seidmann``; it is exact at N = 1 and in
  saturation but over-predicts latency by up to ~25 % near the knee. ``comparison.compare`` also fits the USL
  across cells that differ only in concurrency when >= 4 levels exist and predicts the latency
  from its throughput by Little's law, R = N / X(N) - Z.
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
  models above apply unchanged and D is reported only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import closed, queues

__all__ = [
    "ServiceEstimate",
    "estimate_service",
    "worker_gap",
    "servers_for",
    "capacity_for",
    "db_servers_for",
    "predict_cell",
    "MEASURED_COLUMNS",
]

SCV_FAR_FROM_ONE = 0.25
BLOCKING_MATTERS = 1e-3
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
    try:
        x = float(v)
    except (TypeError, ValueError):
        return default
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
        overhead = overhead_mean = 0.0
        if "queue_ms" in has.columns and (
            {"latency_ns", "service_ns", "sent_ns"} & set(has.columns)
        ):
            q = has["queue_ms"].fillna(0.0).to_numpy(dtype=float) / 1e3
            extra = _latency_ns(has) / 1e9 - s - q
            extra = extra[np.isfinite(extra)]
            if extra.size:
                overhead = max(float(np.median(extra)), 0.0)
                overhead_mean = max(float(extra.mean()), 0.0)
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
        )
    single = _single_user_groups(df, trials_df)
    if len(single) < 2:
        raise ValueError(
            "no svc_ms values and no single-user trial to estimate the service time from"
        )
    s = _service_ns(single) / 1e9
    s = s[np.isfinite(s)]
    m = float(s.mean())
    return ServiceEstimate(m, float(s.var(ddof=1)) / m**2, "single_user_latency", 0.0, int(s.size))


def _limit(v) -> float:
    x = as_float(v)
    return math.inf if math.isnan(x) or x <= 0 else x


def servers_for(threads, cores, spin_us=0.0, sleep_us=0.0) -> float:
    """Effective number of servers c (a float; callers round). Missing/non-positive threads or
    cores mean 'unlimited'; both unlimited gives inf. See the module docstring."""
    t, c = _limit(threads), _limit(cores)
    spin, sleep = max(as_float(spin_us, 0.0), 0.0), max(as_float(sleep_us, 0.0), 0.0)
    if sleep == 0.0:  # CPU-bound (also: no work parameters at all)
        return min(t, c)
    if spin == 0.0:  # sleep-bound: every thread can sleep at once
        return t
    return min(t, c * (spin + sleep) / spin)


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


def capacity_for(threads, backlog) -> float:
    """Most requests the server holds: threads in service + backlog waiting (inf if unknown)."""
    return _limit(threads) + _limit(backlog)


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


def _cand(mean_s, p99_s=math.nan, overhead=(0.0, 0.0), **extra) -> dict:
    """A prediction plus the overhead: (for the mean, for the p99) = (its mean, its median)."""
    oh_mean, oh_p99 = overhead
    return {
        "mean_ms": (mean_s + oh_mean) * 1e3,
        "p99_ms": (p99_s + oh_p99) * 1e3 if math.isfinite(p99_s) else math.nan,
        **extra,
    }


def _of_queue(r: queues.QueueResult, overhead, p99: bool = True, **extra) -> dict:
    """_cand of a queueing model's result: its mean response, its p99 (when p99: the model
    knows its response-time distribution), its name and its utilisation."""
    p99_s = r.response_percentile(0.99) if p99 else math.nan
    return _cand(
        r.mean_response, p99_s, overhead, model=r.model, utilization=r.utilization, **extra
    )


def _open_candidates(lam, S, scv, c, K, oh) -> tuple[dict, str]:
    cands: dict[str, dict] = {}
    if not math.isfinite(c):
        cands["mginf"] = _cand(S, overhead=oh, model="M/G/inf", utilization=0.0)
        return cands, "mginf"
    c = max(1, int(round(c)))
    stable = lam * S < c
    if stable:
        cands["mmc"] = _of_queue(queues.mmc(lam, 1.0 / S, c), oh)
        r = queues.mg1(lam, S, scv) if c == 1 else queues.mgc(lam, S, c, scv)
        cands["mgc"] = _of_queue(r, oh, p99=False)
    blocking = 0.0
    if math.isfinite(K) and K <= 1e6:
        r = queues.mmck(lam, 1.0 / S, c, max(int(K), c))
        blocking = r.p_block
        cands["mmck"] = _of_queue(r, oh, p_block=r.p_block)
    if "mmck" in cands and (not stable or blocking > BLOCKING_MATTERS):
        return cands, "mmck"
    if not stable:
        cands["unstable"] = {
            "mean_ms": math.inf,
            "p99_ms": math.inf,
            "model": "unstable (rho >= 1)",
            "utilization": lam * S / c,
        }
        return cands, "unstable"
    return cands, ("mgc" if abs(scv - 1.0) > SCV_FAR_FROM_ONE else "mmc")


def predict_cell(row, service: ServiceEstimate) -> dict:
    """Predicted latency for one cell (a trials row or an aggregated cell row).
    Returns model (human-readable), key, mean_ms, p99_ms (NaN where no closed form),
    throughput_rps, utilization, servers, capacity and ``candidates`` {key: {...}} with every
    applicable model's prediction."""
    row = pd.Series(row) if isinstance(row, dict) else row
    S, scv = service.mean_s, service.scv
    oh = (service.overhead_for_mean_s, service.overhead_s)
    threads, cores = threads_cores(row)
    c = servers_for(threads, cores, row.get("work_spin_us"), row.get("work_sleep_us"))
    K = capacity_for(threads, row.get("server_backlog"))
    mode = str(row.get("load_mode", "open"))
    if mode == "closed":
        n = int(as_float(row.get("connections"), 1.0))
        z = max(as_float(row.get("think_time_s"), 0.0), 0.0)
        if math.isfinite(c):
            cr = max(1, int(round(c)))
            res = closed.mva([S, oh[0]], n, z, delay_stations=[1], servers=[cr, 1])
            name = f"MVA (exact, c={cr})"
            seid = closed.mva([S / cr, S * (cr - 1) / cr, oh[0]], n, z, delay_stations=[1, 2])
        else:
            res = seid = closed.mva([S, oh[0]], n, z, delay_stations=[0, 1])
            name = "MVA (delay only)"
        x, r = float(res.throughput[-1]), float(res.response_time[-1])
        cands = {
            "mva": {
                "mean_ms": r * 1e3,
                "p99_ms": math.nan,
                "model": name,
                "throughput_rps": x,
                "utilization": float(res.utilization[-1, 0]),
            },
            "mva_seidmann": {
                "mean_ms": float(seid.response_time[-1]) * 1e3,
                "p99_ms": math.nan,
                "model": "MVA (Seidmann S/c + delay)",
                "throughput_rps": float(seid.throughput[-1]),
            },
            "bounds": {
                "mean_ms": float(res.bound_response_time[-1]) * 1e3,
                "p99_ms": math.nan,
                "model": "asymptotic bound (lower)",
                "throughput_rps": float(res.bound_throughput[-1]),
            },
        }
        key = "mva"
    else:
        lam = as_float(row.get("target_rate"))
        for alt in ("achieved_rate", "throughput_rps"):
            if not (lam > 0):
                lam = as_float(row.get(alt))
        if not (lam > 0):
            raise ValueError(
                "open-mode row has no positive target_rate/achieved_rate/throughput_rps"
            )
        cands, key = _open_candidates(lam, S, scv, c, K, oh)
        for v in cands.values():
            v.setdefault("throughput_rps", lam * (1.0 - v.get("p_block", 0.0)))
    c_db = math.nan
    if service.has_db:
        c_db = db_servers_for(row)
        D, rest = service.db_mean_s, max(S - service.db_mean_s, 0.0)
        # the database is the bottleneck when its ceiling c_db / D is below the server's c / S
        if math.isfinite(c_db) and c_db / D < (c / S if math.isfinite(c) else math.inf):
            cd = max(1, int(round(c_db)))
            if mode == "closed":
                cr = max(1, int(round(c))) if math.isfinite(c) else n
                res = closed.mva([rest, D, oh[0]], n, z, delay_stations=[2], servers=[cr, cd, 1])
                cands["mva_db"] = {
                    "mean_ms": float(res.response_time[-1]) * 1e3,
                    "p99_ms": math.nan,
                    "model": f"MVA tandem (server c={cr}, database c={cd})",
                    "throughput_rps": float(res.throughput[-1]),
                    "utilization": float(res.utilization[-1, 1]),
                }
                key = "mva_db"
            else:
                cands["tandem_db"] = _tandem(lam, rest, c, D, cd, oh)
                key = "tandem_db"
    best = cands[key]
    return {
        "model": best["model"],
        "key": key,
        "mean_ms": best["mean_ms"],
        "p99_ms": best["p99_ms"],
        "throughput_rps": best.get("throughput_rps", math.nan),
        "utilization": best.get("utilization", math.nan),
        "servers": c,
        "capacity": K,
        "db_servers": c_db,
        "candidates": cands,
    }


def _tandem(lam, rest, c, D, c_db, oh) -> dict:
    """Open load through the server's station (demand rest, c servers; none when rest is 0
    or c unlimited) and then the database's (demand D, c_db servers): Jackson's product form,
    each an M/M/c, the mean responses add (no closed-form p99 for the sum)."""
    name = f"M/M/{c_db} database"
    r_db = queues.mmc(lam, 1.0 / D, c_db) if lam * D < c_db else None
    if r_db is None:
        return {
            "mean_ms": math.inf,
            "p99_ms": math.inf,
            "model": f"{name} unstable (rho >= 1)",
            "utilization": lam * D / c_db,
            "throughput_rps": lam,
        }
    mean = r_db.mean_response
    if rest > 0 and math.isfinite(c):
        cr = max(1, int(round(c)))
        if lam * rest >= cr:
            return {
                "mean_ms": math.inf,
                "p99_ms": math.inf,
                "model": "server station unstable",
                "utilization": r_db.utilization,
                "throughput_rps": lam,
            }
        mean += queues.mmc(lam, 1.0 / rest, cr).mean_response
        name = f"M/M/{cr} server -> " + name
    elif rest > 0:
        mean += rest
    return _cand(
        mean,
        overhead=oh,
        model=f"{name} (tandem)",
        utilization=r_db.utilization,
        throughput_rps=lam,
    )

"""One cell's predicted latency: the station cell_station.station_for chose for it, at the
cell's load (open: the arrival rate; closed: the users and their think time), beside the
other models that apply (so the table can show how far each is).

The chosen prediction:
- open load: the station at the rate (stations.py); when the station has a finite capacity
  (the accept queue's threads + backlog) and it matters (overload, or blocking above
  BLOCKING_MATTERS), M/M/c/K; overload without a capacity: "unstable (rho >= 1)";
- closed load: the station's exact MVA (Station.closed), the overhead a delay station;
- a database the bottleneck (db_ms measured, c_db / D < c / S): the tandem of the server's
  station and the database's (parameters.py's docstring says what it assumes).

Alternatives kept as ``candidates`` (each {mean_ms, p99_ms, model, ...}): M/M/c and M/G/c on
the server's c workers (what perfctl predicted before it knew dispatch disciplines), M/M/c/K,
the Seidmann MVA approximation and the asymptotic bounds for closed loops.
"""

from __future__ import annotations

import math

import pandas as pd

from . import closed, queues
from .cell_station import StationChoice, station_for, with_capacity
from .parameters import ServiceEstimate, as_float, db_servers_for, scv_tolerance

__all__ = ["predict_cell", "effective_servers", "BLOCKING_MATTERS"]

BLOCKING_MATTERS = 1e-3


def effective_servers(choice: StationChoice) -> float:
    """The requests the station serves at once: the cores a processor-sharing station shares,
    the loops of event loops, the connections a client queue is held on, else its c."""
    st = choice.station
    if st.dispatch == "event_loop":
        return float(st.loops)
    if st.dispatch == "processor_sharing":
        threads = st.servers if st.connections is None else min(st.servers, st.connections)
        return float(min(threads, st.cores))
    if st.connections is not None and st.connections <= st.servers and not st.pinned:
        if st.dispatch == "per_connection" or st.connections < st.servers:
            return float(st.connections)
    return float(st.servers)


def _cand(mean_s, p99_s=math.nan, overhead=(0.0, 0.0), **extra) -> dict:
    """A prediction plus the overhead: (for the mean, for the p99) = (its mean, its median)."""
    oh_mean, oh_p99 = overhead
    return {
        "mean_ms": (mean_s + oh_mean) * 1e3,
        "p99_ms": (p99_s + oh_p99) * 1e3 if math.isfinite(p99_s) else math.nan,
        **extra,
    }


def _station_open(choice: StationChoice, lam: float) -> dict:
    st = choice.station
    r = st.at(lam)
    # near-exponential (within what its sample can tell): the exponential sojourn time's p99
    tol = scv_tolerance(choice.service.n)
    return {
        "mean_ms": st.mean_response_s(lam) * 1e3,
        "p99_ms": (
            st.response_percentile_s(lam, 99.0, tol) * 1e3 if st.has_percentiles(tol) else math.nan
        ),
        "model": st.name,
        "utilization": r.utilization,
        "throughput_rps": lam,
    }


def _server_side(lam, S, scv, c, oh) -> dict:
    """M/M/c and M/G/c on the server's c workers, whatever the dispatch: the comparison."""
    cands: dict[str, dict] = {}
    if lam * S >= c:
        return cands
    r = queues.mmc(lam, 1.0 / S, c)
    cands["mmc"] = _cand(
        r.mean_response, r.response_percentile(0.99), oh, model=r.model, utilization=r.utilization
    )
    r = queues.mg1(lam, S, scv) if c == 1 else queues.mgc(lam, S, c, scv)
    cands["mgc"] = _cand(r.mean_response, overhead=oh, model=r.model, utilization=r.utilization)
    return cands


def _station_key(choice: StationChoice) -> str:
    """The candidate key the chosen station goes under: the server-side name when it is
    that model (a shared queue, the accept queue), else `station`."""
    st = choice.station
    if st.dispatch in ("shared_queue", "per_connection") and not st.queue_in_client():
        far = abs(st.service_scv - 1.0) > scv_tolerance(choice.service.n)
        return "mgc" if far else "mmc"
    return "station"


def _open(choice: StationChoice, lam: float, oh) -> tuple[dict, str]:
    st, svc = choice.station, choice.service
    c = st.servers if st.dispatch != "processor_sharing" else int(min(st.servers, st.cores))
    cands = _server_side(lam, svc.mean_s, svc.scv, c, oh)
    key = _station_key(choice)
    stable = lam < st.max_rate()
    if stable and key == "station":
        cands["station"] = _station_open(choice, lam)
    blocking = 0.0
    k_station = with_capacity(choice)
    if math.isfinite(k_station.capacity) and k_station.capacity <= 1e6:
        r = k_station.at(lam)
        blocking = r.p_block
        cands["mmck"] = _cand(
            r.mean_response,
            r.response_percentile(0.99),
            oh,
            model=r.model,
            utilization=r.utilization,
            p_block=r.p_block,
        )
    if "mmck" in cands and (not stable or blocking > BLOCKING_MATTERS):
        return cands, "mmck"
    if not stable:
        cands["unstable"] = {
            "mean_ms": math.inf,
            "p99_ms": math.inf,
            "model": "unstable (rho >= 1)",
            "utilization": lam / st.max_rate(),
        }
        return cands, "unstable"
    return cands, key


def _closed(choice: StationChoice, n: int, z: float, oh_mean: float) -> tuple[dict, str]:
    st, svc = choice.station, choice.service
    S = svc.mean_s
    res = st.closed(n, z)
    c = effective_servers(choice)
    if st.dispatch == "per_connection" and st.connections is not None:
        name = f"MVA (a worker per user, c={st.servers})"
    elif st.dispatch == "event_loop":
        name = f"MVA (event loop{'s' if st.loops > 1 else ''}, {st.loops})"
    elif st.dispatch == "processor_sharing":
        name = f"MVA (exact, {int(st.cores)} cores shared by {st.servers} threads)"
    else:
        name = f"MVA (exact, c={st.servers})"
    cr = max(1, int(round(c)))
    seid = closed.mva([S / cr, S * (cr - 1) / cr, oh_mean], n, z, delay_stations=[1, 2])
    cands = {
        "mva": {
            "mean_ms": float(res.response_time[-1]) * 1e3,
            "p99_ms": math.nan,
            "model": name,
            "throughput_rps": float(res.throughput[-1]),
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
    return cands, "mva"


def predict_cell(row, service: ServiceEstimate) -> dict:
    """Predicted latency for one cell (a trials row or an aggregated cell row).
    Returns model (human-readable), key, mean_ms, p99_ms (NaN where no closed form),
    throughput_rps, utilization, servers (the requests served at once), capacity, db_servers,
    dispatch, dispatch_source, servers_source, cpu_share(+_source), broken (why no model
    holds, or None), choice (the cell_station.StationChoice) and ``candidates`` {key: {...}}
    with every applicable model's prediction."""
    row = pd.Series(row) if isinstance(row, dict) else row
    choice = station_for(row, service)
    st = choice.station
    S = service.mean_s
    oh = (service.overhead_for_mean_s, service.overhead_s)
    c = effective_servers(choice)
    mode = str(row.get("load_mode", "open"))
    n, z, lam = 0, 0.0, math.nan
    if mode == "closed":
        n = int(as_float(row.get("connections"), 1.0))
        z = max(as_float(row.get("think_time_s"), 0.0), 0.0)
        cands, key = _closed(choice, n, z, oh[0])
    else:
        lam = as_float(row.get("target_rate"))
        for alt in ("achieved_rate", "throughput_rps"):
            if not (lam > 0):
                lam = as_float(row.get(alt))
        if not (lam > 0):
            raise ValueError(
                "open-mode row has no positive target_rate/achieved_rate/throughput_rps"
            )
        cands, key = _open(choice, lam, oh)
        for v in cands.values():
            v.setdefault("throughput_rps", lam * (1.0 - v.get("p_block", 0.0)))
    c_db = math.nan
    if service.has_db:
        c_db = db_servers_for(row)
        D, rest = service.db_mean_s, max(S - service.db_mean_s, 0.0)
        # the database is the bottleneck when its ceiling c_db / D is below the server's c / S
        if math.isfinite(c_db) and c_db / D < c / S:
            cd = max(1, int(round(c_db)))
            cr = max(1, int(round(c)))
            if mode == "closed":
                res = closed.mva(
                    [rest, D, oh[0]], n, z, delay_stations=[2], servers=[min(cr, n), cd, 1]
                )
                cands["mva_db"] = {
                    "mean_ms": float(res.response_time[-1]) * 1e3,
                    "p99_ms": math.nan,
                    "model": f"MVA tandem (server c={cr}, database c={cd})",
                    "throughput_rps": float(res.throughput[-1]),
                    "utilization": float(res.utilization[-1, 1]),
                }
                key = "mva_db"
            else:
                cands["tandem_db"] = _tandem(lam, rest, cr, D, cd, oh)
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
        "capacity": choice.capacity,
        "db_servers": c_db,
        "dispatch": st.dispatch,
        "dispatch_source": choice.dispatch_source,
        "servers_source": choice.servers_source,
        "cpu_share": choice.cpu_share,
        "cpu_share_source": choice.cpu_share_source,
        "broken": st.broken,
        "choice": choice,
        "candidates": cands,
    }


def _tandem(lam, rest, c, D, c_db, oh) -> dict:
    """Open load through the server's station (demand rest, c servers; none when rest is 0)
    and then the database's (demand D, c_db servers): Jackson's product form, each an M/M/c,
    the mean responses add (no closed-form p99 for the sum)."""
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
    if rest > 0:
        if lam * rest >= c:
            return {
                "mean_ms": math.inf,
                "p99_ms": math.inf,
                "model": "server station unstable",
                "utilization": r_db.utilization,
                "throughput_rps": lam,
            }
        mean += queues.mmc(lam, 1.0 / rest, c).mean_response
        name = f"M/M/{c} server -> " + name
    return _cand(
        mean,
        overhead=oh,
        model=f"{name} (tandem)",
        utilization=r_db.utilization,
        throughput_rps=lam,
    )

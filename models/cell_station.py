"""A run's cell as one queueing station: ``station_for(row, service)``, the one place that
turns what a cell was (its trials.csv configuration) and what it measured into a
stations.Station, and says where each parameter came from.

The parameters, and their sources, in the order they are looked for:

- dispatch (stations.DISPATCHES): the row's ``server_dispatch`` (the catalogue's for a bundled
  server, the experiment's `dispatch:` for a `cmd` one; ``server_dispatch_source`` says which),
  else the run-time probe's ``probe_dispatch`` (orchestrator/measure/dispatch_probe.py), else
  assumed ``shared_queue`` (runs recorded before perfctl wrote the column).
- threads T: ``server_threads``; a thread per connection (concurrency model `thread`,
  `virtual`) has as many as connections; `single` has 1; else the probe's ``probe_threads``;
  else unknown, taken as unlimited and said so.
- cores k: ``server_cores`` (a Python server's CPU work holds the GIL: 1).
- CPU share f of the service time: spin / (spin + sleep) from the workload; a bundled
  endpoint without work parameters (/search) is CPU work; a server perfctl did not write, the
  utilization law: CPU seconds per request (server_cpu_pct / 100 / X) over S; without either,
  CPU work (f = 1) is assumed, and said.
- c, the servers the station has: T when the work waits (f < MIXED_CPU_SHARE, a sleep or a
  query: every thread can wait at once); with f >= CPU_BOUND_SHARE and more threads than
  cores, processor sharing of the k cores by the threads; in between, the CPU ceiling k / f
  caps them (c = min(T, k / f), rounded; an approximation of a mixed service).
- connections: the load's ``connections`` with keep-alive (the ``keepalive`` column), None
  with a new connection per request, and None for runs recorded before perfctl wrote that
  column (their models did not look at connections either).
- event loops: one loop per thread (``loops``) for a loop-per-thread server (C `epoll`), one
  for `async`; loops doing CPU work share the cores as threads do (at most k / f of them work at
  once, rounded); time the request waits without holding its loop (``server_waits_block`` false:
  a non-blocking sleep or query, the share 1 - f of S) is outside the queue (an overhead). An
  event loop the probe inferred was seen serving one request at a time: all of S queues.
- the overhead: its mean for means, its median for percentiles; where the queue is one
  Server-Timing cannot see (the client's wait for a keep-alive connection, requests unread
  while a loop works or blocks), the overhead measured holds that wait, so the station takes the
  overhead of a request that waited nowhere (``overhead_floor_s``) instead.
- service time S, its SCV, the overhead and their standard errors: the ServiceEstimate given
  (parameters.py: Server-Timing, a single-user probe, or the utilization law; its ``source``).
  Processor sharing takes the CPU demand instead (CPU seconds per request, the utilization
  law, when the run read the server's CPU): Server-Timing's svc is wall time, stretched by the
  wait for a core.

Nothing here reads files: the caller (comparison.compare, the capacity search) hands in the
row with the cell's mean readings (server_cpu_pct, throughput_rps) when it has them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .parameters import ServiceEstimate, as_float, threads_cores
from .stations import Station

__all__ = ["StationChoice", "station_for", "cpu_share", "UNLIMITED_SERVERS"]

CPU_BOUND_SHARE = 0.9  # f at least this: the service is CPU work
MIXED_CPU_SHARE = 0.1  # f below this: the service waits (sleep, I/O); CPU does not cap c
# "a worker for every request in flight" (a thread per connection): a station needs a count,
# and M/M/1024 is M/M/inf until a thousand requests are in flight
UNLIMITED_SERVERS = 1024


@dataclass(frozen=True)
class StationChoice:
    """The station for a cell and where its parameters came from (for people: each a short
    phrase, printed by `perfctl model`)."""

    station: Station
    declared: str  # the dispatch as the source gave it (processor sharing is derived)
    dispatch_source: str  # catalogue | declared | probe | assumed
    servers_source: str  # how c (or the threads and cores) was chosen
    service: ServiceEstimate
    capacity: float  # threads + backlog for the accept queue (inf: unknown or keep-alive)
    cpu_share: float  # f, NaN when unknown
    cpu_share_source: str

    @property
    def dispatch(self) -> str:
        return self.station.dispatch

    def describe(self) -> str:
        """One line: the model, its dispatch and where S came from."""
        s = self.service
        return (
            f"{self.station.name}: {self.dispatch.replace('_', ' ')} ({self.dispatch_source}); "
            f"{self.servers_source}; S = {s.mean_s * 1e3:.3g} ms from {s.source.replace('_', ' ')}"
        )


def _text(row, key: str) -> str:
    v = row.get(key)
    return v.strip() if isinstance(v, str) else ""


def _flag(row, key: str) -> bool | None:
    v = row.get(key)
    if isinstance(v, str):
        return {"true": True, "false": False, "1": True, "0": False}.get(v.strip().lower())
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return bool(v)


def cpu_share(row, service_mean_s: float) -> tuple[float, str]:
    """f, the share of the service time that is CPU work, and where it came from."""
    spin = max(as_float(row.get("work_spin_us"), 0.0), 0.0)
    sleep = max(as_float(row.get("work_sleep_us"), 0.0), 0.0)
    if spin + sleep > 0:
        return spin / (spin + sleep), f"workload (spin {spin:g} us, sleep {sleep:g} us)"
    if _text(row, "server_impl") in ("c", "java", "python"):
        # the bundled endpoints without work parameters (/search, /register) are CPU work
        # (/db's database time is a station of its own); the utilization law would read a
        # smaller share under sharing, where svc's wall time stretches
        return 1.0, "bundled endpoint without work parameters: CPU work"
    cpu_pct, x = as_float(row.get("server_cpu_pct")), as_float(row.get("throughput_rps"))
    if cpu_pct >= 0 and x > 0 and service_mean_s > 0:
        per_request_s = cpu_pct / 100.0 / x
        f = min(per_request_s / service_mean_s, 1.0)
        return f, (
            f"utilization law ({per_request_s * 1e3:.3g} ms of CPU per request, "
            f"{service_mean_s * 1e3:.3g} ms of service)"
        )
    return 1.0, "assumed CPU work (no workload parameters, no CPU reading)"


def _threads(row) -> tuple[float, str]:
    threads, _ = threads_cores(row)
    model = _text(row, "concurrency_model") or _text(row, "server_model")
    if model in ("thread", "virtual"):
        return math.inf, f"a thread per connection ({model})"
    if math.isfinite(threads) and threads >= 1:
        return threads, f"{int(threads)} threads"
    probed = as_float(row.get("probe_threads"))
    if probed >= 1:
        return probed, f"{int(probed)} threads (probe)"
    return math.inf, "threads unknown (declare `threads:`), taken as unlimited"


def _dispatch(row) -> tuple[str, str]:
    declared = _text(row, "server_dispatch")
    if declared:
        return declared, _text(row, "server_dispatch_source") or "declared"
    probed = _text(row, "probe_dispatch")
    if probed:
        return probed, "probe"
    return "shared_queue", "assumed"


def _connections(row) -> int | None:
    """L with keep-alive, None with a new connection per request, and None for a run that
    did not record `keepalive` (before perfctl wrote it; its models ignored connections)."""
    keep = _flag(row, "keepalive")
    if not keep:
        return None
    n = as_float(row.get("connections"))
    return int(n) if n >= 1 else None


def _floor(service: ServiceEstimate, otherwise: float) -> float:
    """The overhead of a request that waited nowhere, where Server-Timing cannot see a
    station's queue (the rest of the measured overhead is that wait, counted by the model)."""
    floor = service.overhead_floor_s
    return floor if math.isfinite(floor) else otherwise


def _cpu_demand(row, service: ServiceEstimate) -> tuple[ServiceEstimate, str]:
    """A processor-sharing station's service estimate: the CPU demand per request.
    Server-Timing's svc is wall time, which under sharing includes the wait for a core (two
    threads on one core take twice as long each), so with a CPU reading the demand is the
    utilization law's CPU seconds per request (its relative standard error taken as S's).
    Any other estimate is kept: a single-user one timed one request alone, with no sharing."""
    cpu_pct, x = as_float(row.get("server_cpu_pct")), as_float(row.get("throughput_rps"))
    if service.source != "server_timing" or not (cpu_pct > 0 and x > 0):
        return service, ""
    demand = cpu_pct / 100.0 / x
    rel_se = service.mean_se_s / service.mean_s if service.mean_s > 0 else math.nan
    cpu = dataclasses.replace(
        service, mean_s=demand, source="utilization_law", mean_se_s=demand * rel_se, gap_s=0.0
    )
    return cpu, f"; S = {demand * 1e3:.3g} ms of CPU per request (utilization law)"


def station_for(row, service: ServiceEstimate) -> StationChoice:
    """The station of one cell (a trials row, or a compare row with the cell's mean
    readings) for a service estimate. See the module docstring for every rule. Raises
    ValueError when the row names an unknown dispatch."""
    dispatch, dsrc = _dispatch(row)
    declared = dispatch
    threads, tsrc = _threads(row)
    _, cores = threads_cores(row)
    S, scv = service.mean_s, service.scv
    f, fsrc = cpu_share(row, S)
    L = _connections(row)
    overhead = service.overhead_s
    overhead_mean = service.overhead_for_mean_s
    capacity = math.inf
    if L is None and math.isfinite(threads):
        backlog = as_float(row.get("server_backlog"))
        if backlog > 0:
            capacity = threads + backlog
    if dispatch == "event_loop":
        loops = int(threads) if math.isfinite(threads) else 1
        cap_why = ""
        if math.isfinite(cores) and cores >= 1 and math.isfinite(f) and f >= MIXED_CPU_SHARE:
            # loops share the cores as threads do: k / f of them can work at once
            at_once = max(1, int(round(cores / f)))
            if at_once < loops:
                cap_why = f"; {loops} loops share {cores:g} core(s): {at_once} at once"
                loops = at_once
        # a probed "event loop" is a server seen serving one request at a time: whatever it
        # waits for holds it
        blocks = _flag(row, "server_waits_block") or dsrc == "probe"
        queued = 1.0 if blocks else f
        delay = S * (1.0 - queued)
        # requests wait unread while the loop works or blocks: Server-Timing misses the wait
        overhead = overhead_mean = _floor(service, overhead)
        station = Station(
            "event_loop",
            1,
            S * queued,
            scv,
            overhead_s=overhead + delay,
            overhead_mean_s=overhead_mean + delay,
            connections=L,
            loops=loops,
        )
        why = (
            f"{loops} loop(s)"
            + cap_why
            + (f"; {100 * (1 - queued):.0f}% of S waits off the loop" if delay > 0 else "")
        )
        return StationChoice(station, declared, dsrc, why, service, math.inf, f, fsrc)
    if dispatch not in ("shared_queue", "per_connection", "processor_sharing"):
        raise ValueError(f"unknown dispatch {dispatch!r} in server_dispatch")
    in_flight = min(threads, L) if L is not None else threads
    pinned = dispatch == "per_connection" and L is not None and L > threads
    if f >= CPU_BOUND_SHARE and math.isfinite(cores) and in_flight > cores and not pinned:
        T = int(threads) if math.isfinite(threads) else (L or UNLIMITED_SERVERS)
        service, why_s = _cpu_demand(row, service)
        station = Station(
            "processor_sharing",
            T,
            service.mean_s,
            scv,
            overhead_s=overhead,
            overhead_mean_s=overhead_mean,
            cores=int(cores),
            connections=L,
        )
        why = f"{tsrc} share {int(cores)} core(s) (CPU-bound: processor sharing){why_s}"
        return StationChoice(station, declared, dsrc, why, service, math.inf, f, fsrc)
    c, why = threads, tsrc
    if f >= MIXED_CPU_SHARE and math.isfinite(cores):
        ceiling = cores / f
        if ceiling < c:
            c = ceiling
            why = (
                f"{tsrc}, capped by {int(cores)} core(s) at {ceiling:.3g} (CPU {100 * f:.0f}% of S)"
            )
    if not math.isfinite(c):
        c = UNLIMITED_SERVERS
        why += f" (a worker for every request in flight: M/M/{UNLIMITED_SERVERS} stands for it)"
    servers = max(1, int(round(c)))
    if dispatch == "processor_sharing":  # declared, but nothing to share: a shared queue
        dispatch = "shared_queue"
    station = Station(
        dispatch,
        servers,
        S,
        scv,
        overhead_s=overhead,
        overhead_mean_s=overhead_mean,
        connections=L,
    )
    if station.queue_in_client():  # the client's wait for a connection is in the overhead
        floor = _floor(service, overhead)
        station = dataclasses.replace(station, overhead_s=floor, overhead_mean_s=floor)
    return StationChoice(station, declared, dsrc, why, service, capacity, f, fsrc)


def with_capacity(choice: StationChoice) -> Station:
    """The choice's station with its finite capacity K (the accept queue's threads +
    backlog), for overload; the station itself when K is unknown."""
    if not math.isfinite(choice.capacity) or choice.station.dispatch not in (
        "shared_queue",
        "per_connection",
    ):
        return choice.station
    k = max(int(choice.capacity), choice.station.servers)
    return dataclasses.replace(choice.station, capacity=float(k))

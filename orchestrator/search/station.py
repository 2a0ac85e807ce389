"""The queueing station a search fits from its two set-up probes.

SWAP POINT. This is the one place where measured trials become a models.stations.Station for
the search. The models helper's function that turns a measured cell into a Station (service
time from Server-Timing or a single-user probe, c, dispatch) replaces `station_for` when it is
merged; nothing else in orchestrator/search/ builds a Station.

From the probes:
- dispatch and c: an event-loop server (bundled `async`, `epoll`, `single`, `rmi-single`) is
  one worker; any other bundled server has c = the threads that can run at once
  (models.estimate.servers_for: min(threads, cores) when the work is CPU-bound); a `cmd:`
  server has its declared `threads` (else c = X_max x S, rounded).
- the mean service time: c / X_max, where X_max is the saturation probe's throughput (a closed
  loop with many users), so that the model saturates where the server did. Without a usable
  X_max: the Server-Timing `svc` mean of the single-user probe, else its mean latency.
- the overhead (time outside the station on every request: network, client, parsing): the
  single-user probe's mean latency minus its `svc` and `queue` (without Server-Timing, minus
  the service time), never below zero.
- the service time's SCV: 1 for a percentile SLO (M/M/c is the family whose sojourn-time
  percentiles have a closed form; the probes at the knee calibrate the rest), the measured
  `svc` SCV for a mean SLO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from models.estimate import servers_for, threads_cores
from models.stations import Station

from ..experiment.plan import Cell
from ..experiment.servers import BundledServer

EVENT_LOOP_MODELS = ("async", "epoll", "single", "rmi-single")


@dataclass(frozen=True)
class ServiceProbe:
    """What the single-user probe measured (ms; NaN when the server sent no Server-Timing)."""

    latency_mean_ms: float
    svc_mean_ms: float = math.nan
    svc_scv: float = math.nan
    queue_mean_ms: float = 0.0

    @property
    def has_svc(self) -> bool:
        return math.isfinite(self.svc_mean_ms) and self.svc_mean_ms > 0


def station_for(
    cell: Cell, stat: str, service: ServiceProbe, saturation_rps: float | None, row: dict
) -> tuple[Station, list[str]]:
    """The station (module docstring) and notes on how it was chosen. row: a trials.csv row of
    the cell (server_threads, server_cores, concurrency_model, work_spin_us, ...)."""
    notes: list[str] = []
    server = cell.server
    occupancy_s = (service.svc_mean_ms if service.has_svc else service.latency_mean_ms) / 1e3
    if isinstance(server, BundledServer) and server.concurrency_model in EVENT_LOOP_MODELS:
        dispatch, c = "event_loop", 1
    elif isinstance(server, BundledServer):
        threads, cores = threads_cores({**row, "connections": math.inf})
        if server.impl == "python":  # spin runs under the GIL: one CPU
            cores = 1.0
        spin, sleep = row.get("work_spin_us", 0.0), row.get("work_sleep_us", 0.0)
        c_float = servers_for(threads, cores, spin, sleep)
        dispatch, c = "shared_queue", max(1, round(c_float)) if math.isfinite(c_float) else 1
        if not math.isfinite(c_float):
            notes.append("servers unknown (a thread per connection on unlimited cores): c = 1")
    elif server.threads:
        dispatch, c = "shared_queue", int(server.threads)
    else:
        dispatch = "shared_queue"
        c = max(1, round((saturation_rps or 0.0) * occupancy_s)) if saturation_rps else 1
        notes.append(f"c = {c} inferred from X_max x S (give the cmd server `threads:` to fix it)")
    if saturation_rps and saturation_rps > 0:
        mean_s = c / saturation_rps
    else:
        mean_s = occupancy_s
        notes.append("no usable saturation probe: the service time is the single-user probe's")
    if service.has_svc:
        overhead_s = (service.latency_mean_ms - service.svc_mean_ms - service.queue_mean_ms) / 1e3
    else:
        overhead_s = service.latency_mean_ms / 1e3 - mean_s
    scv = 1.0
    if stat == "mean" and service.has_svc and math.isfinite(service.svc_scv):
        scv = service.svc_scv
    elif service.has_svc and math.isfinite(service.svc_scv) and abs(service.svc_scv - 1) > 0.25:
        notes.append(
            f"service-time SCV {service.svc_scv:.2f}: percentiles from the M/M/c shape, "
            "calibrated by the probes at the knee"
        )
    return Station(dispatch, c, mean_s, scv, overhead_s=max(0.0, overhead_s)), notes

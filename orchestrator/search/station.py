"""The queueing station a search fits from its two set-up probes.

The structure of the station (dispatch, servers, cores, loops, pinned connections, the share
of the service time that holds a worker) is the models' own: models.cell_station.station_for,
the function `perfctl model` uses for the same cell, so the search's curve and the model's
verdict on the measured cells come from one station. This module hands it what the probes
measured and calibrates its speed:

- the service estimate: the single-user probe's Server-Timing `svc` mean and SCV (source
  `server_timing`), else its mean latency (`single_user_probe`, the round trip inside S);
  the overhead (time outside the station on every request: network, client, parsing) is the
  probe's latency minus its `svc` and `queue`, never below zero, 0 without Server-Timing.
- the row: the service probe's trials.csv row (the cell's configuration: server_dispatch,
  server_threads, server_cores, work_spin_us, ...), with the load the knee probes offer (open
  load, the file's connections and keep-alive; closed: the users are the level). A `cmd:`
  server that declares no `threads:` and was not probed gets c = X_max x S, rounded, and a
  note saying so (instead of the models' "unlimited").
- the calibration: the mean service time is scaled so that the station saturates at X_max, the
  saturation probe's throughput (a closed loop with many users): the model's shape, the
  server's measured ceiling. Without a usable X_max the estimate's S stays, and a note says so.
- the service time's SCV: the measured `svc` SCV. For a percentile SLO a single-server
  station (an event loop, one worker) takes its percentiles from M/G/1 with gamma service
  times (models/queues.py mg1_tail: the waiting time's tail asymptote, within a few per cent
  of simulation at the p99; the M/M/1 shape is 2x off at the p99 for a constant service
  time); several servers keep the M/M/c shape (SCV 1), the one family with exact sojourn-time
  percentiles, and the probes at the knee calibrate the rest.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from models.cell_station import station_for as cell_station_for
from models.parameters import ServiceEstimate
from models.stations import Station

from ..experiment.plan import Cell


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


def service_estimate(service: ServiceProbe, stat: str) -> ServiceEstimate:
    """The models' service estimate from the single-user probe (module docstring)."""
    scv = 1.0
    if service.has_svc and math.isfinite(service.svc_scv):
        scv = service.svc_scv  # a percentile's shape: station_for (M/G/1 tail or M/M/c)
    if service.has_svc:
        mean_s, source = service.svc_mean_ms / 1e3, "server_timing"
        overhead_s = (service.latency_mean_ms - service.svc_mean_ms - service.queue_mean_ms) / 1e3
    else:
        mean_s, source, overhead_s = service.latency_mean_ms / 1e3, "single_user_probe", 0.0
    overhead_s = max(0.0, overhead_s)
    return ServiceEstimate(
        mean_s=mean_s,
        scv=scv,
        source=source,
        overhead_s=overhead_s,
        overhead_mean_s=overhead_s,
        overhead_floor_s=overhead_s,  # one user waited nowhere
    )


def _has_threads(row: dict) -> bool:
    for key in ("server_threads", "probe_threads"):
        try:
            if float(row.get(key)) >= 1:
                return True
        except (TypeError, ValueError):
            pass
    return str(row.get("concurrency_model") or "") in ("thread", "virtual")


def station_for(
    cell: Cell, stat: str, service: ServiceProbe, saturation_rps: float | None, row: dict
) -> tuple[Station, list[str]]:
    """The station (module docstring) and notes on how it was chosen. row: the service
    probe's trials.csv row."""
    notes: list[str] = []
    est = service_estimate(service, stat)
    load = cell.load
    row = {
        **row,
        "load_mode": load.mode,
        "connections": load.connections,
        "keepalive": load.keepalive,
    }
    if not _has_threads(row) and saturation_rps and saturation_rps > 0:
        c = max(1, round(saturation_rps * est.mean_s))
        row["server_threads"] = c
        notes.append(f"c = {c} inferred from X_max x S (give the cmd server `threads:` to fix it)")
    choice = cell_station_for(row, est)
    station = choice.station
    notes.append(choice.describe())
    if station.broken:
        notes.append(f"no steady-state model holds: {station.broken}")
    ceiling = station.max_rate()
    if saturation_rps and saturation_rps > 0 and math.isfinite(ceiling) and ceiling > 0:
        scale = ceiling / saturation_rps
        station = dataclasses.replace(station, mean_service_s=station.mean_service_s * scale)
        notes.append(
            f"service time scaled x{scale:.3g} so that the station saturates at the measured "
            f"{saturation_rps:.4g}/s"
        )
    else:
        notes.append("no usable saturation probe: the service time is the single-user probe's")
    if stat != "mean" and not station.exponential:
        if station.single_server:  # M/G/1: the measured SCV shapes the tail (queues.mg1_tail)
            station = dataclasses.replace(station, tail_percentiles=True)
            notes.append(
                f"service-time SCV {station.service_scv:.2f}: percentiles from M/G/1 with "
                "gamma service times (the waiting time's tail asymptote)"
            )
        else:
            station = dataclasses.replace(station, service_scv=1.0)
            notes.append(
                f"service-time SCV {service.svc_scv:.2f}: percentiles from the M/M/c shape "
                "(no percentile model for several servers otherwise), calibrated by the "
                "probes at the knee"
            )
    return station, notes

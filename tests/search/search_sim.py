"""An M/M/c server simulated in numpy, standing in for trials: each probe a search asks for
becomes a trials.csv-like row and Readings, as if a trial had run, in milliseconds of CPU.

FIFO with c servers (Kiefer-Wolfowitz: each arrival takes the earliest free server), Poisson
arrivals, exponential service; one second of warm-up dropped, like a trial's."""

from __future__ import annotations

import math

import numpy as np

from models.stations import Station
from orchestrator.measure import stationarity
from orchestrator.search.capacity_estimate import within_variance
from orchestrator.search.readings import Readings
from orchestrator.search.station import ServiceProbe

OVERHEAD_S = 0.0002


def sojourn(arrivals: np.ndarray, service: np.ndarray, c: int) -> np.ndarray:
    free = np.zeros(c)
    out = np.empty(arrivals.size)
    for i, (a, s) in enumerate(zip(arrivals, service)):
        j = int(free.argmin())
        free[j] = max(a, free[j]) + s
        out[i] = free[j] - a
    return out


class MMc:
    """The simulated server; trial(spec) -> (row, readings)."""

    def __init__(self, c=4, service_s=0.004, window_s=5.0, seed=1, service_scv=1.0):
        """service_scv: 1 exponential service (M/M/c), 0 constant (M/D/c), else gamma."""
        self.c, self.s, self.window_s = c, service_s, window_s
        self.scv = service_scv
        self.rng = np.random.default_rng(seed)
        self.rows: list[dict] = []

    def _service(self, n: int) -> np.ndarray:
        if self.scv == 1.0:
            return self.rng.exponential(self.s, n)
        if self.scv == 0.0:
            return np.full(n, self.s)
        return self.rng.gamma(1.0 / self.scv, self.s * self.scv, n)

    def _open(self, rate: float):
        total = 1.0 + self.window_s
        n = self.rng.poisson(rate * total)
        arr = np.sort(self.rng.uniform(0, total, n))
        lat = sojourn(arr, self._service(n), self.c) + OVERHEAD_S
        self._done = arr + lat - 1.0  # every completion, warm-up's too, on the window's clock
        keep = arr >= 1.0
        return arr[keep] - 1.0, lat[keep]

    def _closed(self, users: int):
        """One user: back-to-back Exp(S) (no queue); many: the station saturated."""
        if users == 1:
            lat = self._service(int(self.window_s / self.s)) + OVERHEAD_S
            return np.cumsum(lat), lat
        x = Station("shared_queue", self.c, self.s).closed(users, 0.0).throughput[-1]
        return self._open(0.999 * x)  # the queue is never empty: like the open queue at x

    def trial(self, role: str, level: float, **row_extra) -> tuple[dict, Readings]:
        t, lat = self._open(level) if role in ("knee", "curve") else self._closed(int(level))
        secs = [lat[(t >= k) & (t < k + 1)] for k in range(int(self.window_s))]
        per_s = [1e3 * np.percentile(x, 99) if x.size else math.nan for x in secs]
        p99 = 1e3 * float(np.percentile(lat, 99))
        row = {
            "valid": True,
            "quiet": True,
            "invalid_reasons": "",
            "noise_reasons": "",
            "error_rate": 0.0,
            "latency_mean_ms": 1e3 * float(lat.mean()),
            "latency_p99_ms": p99,
            "throughput_rps": lat.size / self.window_s,
            **row_extra,
        }
        svc = lat - OVERHEAD_S
        service = ServiceProbe(row["latency_mean_ms"], 1e3 * self.s, self.scv, 0.0)
        if role == "service":
            service = ServiceProbe(row["latency_mean_ms"], 1e3 * float(svc.mean()), self.scv, 0.0)
        completed = math.nan
        if role in ("knee", "curve"):
            done = self._done
            completed = float(
                np.median([np.sum((done >= k) & (done < k + 1)) for k in range(int(self.window_s))])
            )
        readings = Readings(
            p99,
            stationarity.trend(per_s),
            within_variance(per_s),
            service,
            completed,
            float(np.nanmin(per_s)) if np.isfinite(per_s).any() else math.nan,
        )
        self.rows.append(row)
        return row, readings


def run_search(search, sim: MMc, tamper=None):
    """Drive a CellSearch with the simulated server until it stops. tamper(k, spec, row,
    readings) may change a probe's outcome (return the pair). Returns the specs asked for."""
    specs = []
    while (spec := search.next_spec()) is not None:
        k = search.trials + 1
        row, readings = sim.trial(spec.role, spec.level)
        if tamper is not None:
            row, readings = tamper(k, spec, row, readings)
        search.record(k, spec, row, readings)
        specs.append(spec)
        if search.failure is not None:
            break
    return specs

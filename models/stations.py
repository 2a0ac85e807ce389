"""A server as one queueing station, chosen by how it dispatches work, and the questions the
capacity search and the model verdicts ask of it: the latency at a rate (mean and any
percentile), the rate at which a percentile meets an SLO, the saturation rate, and the same
for a closed loop of users with think time.

How a server dispatches work decides the model (the catalogue declares it for bundled servers;
a probe infers it for others):

- ``shared_queue``: c workers take requests from one FIFO queue (thread pools with a request
  queue, the reference M/M/c server). M/M/c when the service time is exponential (SCV 1): its
  sojourn-time distribution is exact, so any percentile is; otherwise M/G/c by Allen-Cunneen
  for the mean, and percentiles only where a closed form exists.
- ``event_loop``: one worker, non-blocking: M/G/1 (Pollaczek-Khinchine), M/M/1 when SCV is 1.

Every time is in seconds, every rate per second. ``overhead_s`` is time spent outside the
station on every request (the network's round trip, an injected delay): it adds to each
response time and is never queued. Functions raise ValueError naming the bad parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scipy import optimize

from . import closed, queues

DISPATCHES = ("shared_queue", "event_loop")
EXPONENTIAL_SCV_TOLERANCE = 0.05  # |SCV - 1| within this: the service time is exponential


@dataclass(frozen=True)
class Station:
    """One server as a queueing station.

    dispatch: one of DISPATCHES (how requests reach workers).
    servers: c, requests served at once (worker threads that can each serve one).
    mean_service_s: E[S], seconds of service per request.
    service_scv: squared coefficient of variation of S (1: exponential, 0: fixed).
    capacity: K, the most requests in the station (in service + queued); inf: unbounded.
    overhead_s: fixed time outside the station added to every response time.
    """

    dispatch: str
    servers: int
    mean_service_s: float
    service_scv: float = 1.0
    capacity: float = math.inf
    overhead_s: float = 0.0
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.dispatch not in DISPATCHES:
            raise ValueError(
                f"dispatch must be one of {', '.join(DISPATCHES)}, got {self.dispatch!r}"
            )
        if self.dispatch == "event_loop" and self.servers != 1:
            raise ValueError(f"an event loop is one worker: servers must be 1, got {self.servers}")
        if not (isinstance(self.servers, int) and self.servers >= 1):
            raise ValueError(f"servers must be an integer >= 1, got {self.servers!r}")
        if not (math.isfinite(self.mean_service_s) and self.mean_service_s > 0):
            raise ValueError(f"mean_service_s must be positive, got {self.mean_service_s!r}")
        if not (math.isfinite(self.service_scv) and self.service_scv >= 0):
            raise ValueError(f"service_scv must be >= 0, got {self.service_scv!r}")
        if not (math.isfinite(self.overhead_s) and self.overhead_s >= 0):
            raise ValueError(f"overhead_s must be >= 0, got {self.overhead_s!r}")

    @property
    def exponential(self) -> bool:
        return abs(self.service_scv - 1.0) <= EXPONENTIAL_SCV_TOLERANCE

    @property
    def name(self) -> str:
        """The model's name, e.g. M/M/4, M/G/1, M/M/4/132."""
        if math.isfinite(self.capacity):
            return f"M/M/{self.servers}/{int(self.capacity)}"
        return f"M/{'M' if self.exponential else 'G'}/{self.servers}"

    def max_rate(self) -> float:
        """The saturation throughput c / E[S]: no finite-queue model is stable at or above it
        (a finite capacity K admits more arrivals, but throughput never exceeds it)."""
        return self.servers / self.mean_service_s

    def at(self, rate_rps: float) -> queues.QueueResult:
        """The open model at an arrival rate (Poisson arrivals). Raises ValueError when the rate
        is not below max_rate() and the station has no finite capacity."""
        c, s = self.servers, self.mean_service_s
        if math.isfinite(self.capacity):
            return queues.mmck(rate_rps, 1.0 / s, c, self.capacity)
        if self.exponential:
            return queues.mmc(rate_rps, 1.0 / s, c)
        if c == 1:
            return queues.mg1(rate_rps, s, self.service_scv)
        return queues.mgc(rate_rps, s, c, self.service_scv)

    def mean_response_s(self, rate_rps: float) -> float:
        """E[T] at a rate, the overhead included."""
        return self.at(rate_rps).mean_response + self.overhead_s

    def has_percentiles(self) -> bool:
        """Whether response_percentile_s is exact for this station (a closed-form sojourn-time
        distribution): M/M/c and M/M/c/K under FCFS."""
        return self.exponential

    def response_percentile_s(self, rate_rps: float, q: float) -> float:
        """The q-th percentile (0 < q < 100) of the response time at a rate, the overhead
        included. Raises NotImplementedError where no closed form exists (see
        has_percentiles)."""
        if not 0.0 < q < 100.0:
            raise ValueError(f"percentile q must be in (0, 100), got {q!r}")
        if not self.has_percentiles():
            raise NotImplementedError(
                f"{self.name}: no closed-form response-time distribution for SCV "
                f"{self.service_scv:.2f}; only the mean is predicted"
            )
        return self.at(rate_rps).response_percentile(q / 100.0) + self.overhead_s

    def latency_s(self, rate_rps: float, stat: str) -> float:
        """`mean` or a percentile named `pNN` / `pNN.N` (p99, p99.9, p50), at a rate."""
        if stat == "mean":
            return self.mean_response_s(rate_rps)
        return self.response_percentile_s(rate_rps, percentile_of(stat))

    def closed(self, users: int, think_s: float) -> closed.MVAResult:
        """Exact MVA for 1..users users, each thinking think_s between requests: the station
        with c servers, the overhead as a delay station."""
        demands = [self.mean_service_s, self.overhead_s]
        return closed.mva(
            demands, users, think_s, delay_stations=[False, True], servers=[self.servers, 1]
        )


def percentile_of(stat: str) -> float:
    """`p99` -> 99.0, `p99.9` -> 99.9, `p999` -> 99.9 (the trials.csv spelling)."""
    if not stat.startswith("p") or len(stat) < 2:
        raise ValueError(f"not a percentile: {stat!r} (write p50, p99, p99.9)")
    digits = stat[1:]
    try:
        if "." in digits:
            q = float(digits)
        elif len(digits) > 2 and digits.startswith("99"):  # p999 -> 99.9, p9999 -> 99.99
            q = float(digits[:2] + "." + digits[2:])
        elif len(digits) > 2:
            raise ValueError
        else:
            q = float(digits)
    except ValueError:
        raise ValueError(f"not a percentile: {stat!r} (write p50, p99, p99.9)") from None
    if not 0.0 < q < 100.0:
        raise ValueError(f"percentile {stat!r} is outside (0, 100)")
    return q


def rate_for_slo(station: Station, stat: str, slo_s: float) -> float:
    """The largest Poisson arrival rate at which `stat` (mean or pNN) of the response time is
    at most slo_s. 0.0 when even a vanishing rate misses it (the SLO is below the unloaded
    latency); never more than max_rate(). Latency grows with the rate for every station here,
    so the answer is the root of latency(rate) = slo_s, found by bisection (brentq)."""
    if not slo_s > 0:
        raise ValueError(f"slo_s must be positive, got {slo_s!r}")
    top = station.max_rate()
    tiny = top * 1e-9
    if station.latency_s(tiny, stat) > slo_s:
        return 0.0
    # just below saturation the latency of an unbounded queue diverges: the root is below
    hi = top * (1.0 - 1e-9)
    if station.latency_s(hi, stat) <= slo_s:
        return hi
    return float(
        optimize.brentq(lambda r: station.latency_s(r, stat) - slo_s, tiny, hi, xtol=top * 1e-9)
    )


def users_for_slo(station: Station, think_s: float, slo_s: float, max_users: int = 10_000) -> int:
    """The most closed-loop users (each thinking think_s) whose mean response time is at most
    slo_s, by exact MVA; 0 when one user already misses it. MVA gives means only, so a
    closed-loop SLO on a percentile is answered by measurement, not here."""
    if not slo_s > 0:
        raise ValueError(f"slo_s must be positive, got {slo_s!r}")
    n = 1
    while True:
        m = station.closed(n, think_s)
        meets = m.response_time <= slo_s  # R(n) includes the overhead (a delay station)
        if not meets[-1] or n >= max_users:
            ok = meets.nonzero()[0]
            return int(m.users[ok[-1]]) if ok.size else 0
        n = min(2 * n, max_users)

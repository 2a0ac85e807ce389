"""A server as one queueing station, chosen by how it dispatches work, and the questions the
capacity search and the model verdicts ask of it: the latency at a rate (mean and any
percentile), the rate at which a percentile meets an SLO, the saturation rate, and the same
for a closed loop of users with think time.

How a server dispatches work decides the model (the catalogue declares it for bundled servers;
an experiment declares it for a `cmd` server, or a probe infers it; estimate.station_for
turns a run's cell into a Station):

- ``shared_queue``: c workers take requests from one FIFO queue (thread pools with a request
  queue, the reference M/M/c server). M/M/c when the service time is exponential (SCV 1): its
  sojourn-time distribution is exact, so any percentile is; otherwise M/G/c by Allen-Cunneen
  for the mean, and percentiles only where a closed form exists.
- ``per_connection``: a worker keeps a keep-alive connection until the client closes it (the
  bundled `pool` servers, `single`, a thread per connection). With a new connection per
  request the queue is the accept queue, shared: as shared_queue. With L keep-alive
  connections and L <= c, each connection has a worker of its own, so the queue forms in the
  client (requests wait for a free connection) and a connection is held for the service plus
  the overhead (the round trip is serialised with the service): M/M/L (M/G/L) of that holding
  time; in a closed loop every user has its own worker and never queues. With L > c, L - c
  connections wait behind the served ones until those close: no steady state holds, and the
  station says so (``broken``).
- ``processor_sharing``: T threads take requests from one queue but share k < T cores
  (CPU-bound service): limited processor sharing, sharing.lps (the mean is M/M/k's, the
  percentiles from the exact sojourn-time distribution); closed loops by MVA with a k-server
  station (the same load-dependent rate min(n, k) mu).
- ``event_loop``: one worker, non-blocking: M/G/1 (Pollaczek-Khinchine), M/M/1 when SCV is 1.
  ``loops`` > 1 (one loop per thread, each owning the connections it accepted): that many
  independent M/G/1 queues, the load split evenly. Time a request waits without holding the
  loop (a non-blocking sleep or query) is not service: estimate.station_for puts it in the
  overhead.

Connections limit every dispatch: ``connections`` L (keep-alive connections the load holds;
None: a new connection per request) below the workers c moves the queue into the client as
above.

Every time is in seconds, every rate per second. ``overhead_s`` is time spent outside the
station on every request (the network's round trip, an injected delay): it adds to each
response time and is never queued (except where a pinned connection holds it, above).
Functions raise ValueError naming the bad parameter.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize

from . import closed, queues, sharing

DISPATCHES = ("shared_queue", "per_connection", "processor_sharing", "event_loop")
EXPONENTIAL_SCV_TOLERANCE = 0.05  # |SCV - 1| within this: the service time is exponential


@dataclass(frozen=True)
class Station:
    """One server as a queueing station.

    dispatch: one of DISPATCHES (how requests reach workers).
    servers: c, requests served at once (worker threads that can each serve one); for
        processor_sharing the threads T that share the cores.
    mean_service_s: E[S], seconds of service per request.
    service_scv: squared coefficient of variation of S (1: exponential, 0: fixed).
    capacity: K, the most requests in the station (in service + queued); inf: unbounded.
    overhead_s: fixed time outside the station added to every response time (to
        percentiles; to means too unless overhead_mean_s is given).
    overhead_mean_s: the overhead's mean, added to means and held by a pinned connection
        (NaN: overhead_s). A skewed overhead (a few slow connects) has its mean well above
        its median: means add means, a percentile shifts by the typical (median) delay.
    cores: processor_sharing: k, the CPUs the threads share (k < servers); inf elsewhere.
    connections: L keep-alive connections the load holds (None: a new connection per
        request). A closed loop holds one per user, whatever L says.
    loops: event_loop only: independent loops, each owning its connections.
    tail_percentiles: a single-server station (an event loop, or one FCFS worker) whose
        service time is not exponential takes its percentiles from queues.mg1_tail (gamma
        service times, the waiting time's tail asymptote: an approximation, within a few
        per cent of simulation at the p99) instead of having none.
    """

    dispatch: str
    servers: int
    mean_service_s: float
    service_scv: float = 1.0
    capacity: float = math.inf
    overhead_s: float = 0.0
    notes: tuple[str, ...] = field(default=())
    cores: float = math.inf
    connections: int | None = None
    loops: int = 1
    overhead_mean_s: float = math.nan
    tail_percentiles: bool = False

    def __post_init__(self) -> None:
        if self.dispatch not in DISPATCHES:
            raise ValueError(
                f"dispatch must be one of {', '.join(DISPATCHES)}, got {self.dispatch!r}"
            )
        if self.dispatch == "event_loop" and self.servers != 1:
            raise ValueError(
                f"an event loop is one worker: servers must be 1, got {self.servers} "
                "(several loops: loops=N)"
            )
        if not (isinstance(self.servers, int) and self.servers >= 1):
            raise ValueError(f"servers must be an integer >= 1, got {self.servers!r}")
        if not (math.isfinite(self.mean_service_s) and self.mean_service_s > 0):
            raise ValueError(f"mean_service_s must be positive, got {self.mean_service_s!r}")
        if not (math.isfinite(self.service_scv) and self.service_scv >= 0):
            raise ValueError(f"service_scv must be >= 0, got {self.service_scv!r}")
        if not (math.isfinite(self.overhead_s) and self.overhead_s >= 0):
            raise ValueError(f"overhead_s must be >= 0, got {self.overhead_s!r}")
        if not (math.isnan(self.overhead_mean_s) or self.overhead_mean_s >= 0):
            raise ValueError(f"overhead_mean_s must be >= 0, got {self.overhead_mean_s!r}")
        if not (self.cores == math.inf or (self.cores >= 1 and self.cores == int(self.cores))):
            raise ValueError(f"cores must be an integer >= 1 or inf, got {self.cores!r}")
        if self.dispatch == "processor_sharing" and not math.isfinite(self.cores):
            raise ValueError("processor_sharing needs cores: the CPUs the threads share")
        if self.connections is not None and not (
            isinstance(self.connections, int) and self.connections >= 1
        ):
            raise ValueError(f"connections must be an integer >= 1, got {self.connections!r}")
        if not (isinstance(self.loops, int) and self.loops >= 1):
            raise ValueError(f"loops must be an integer >= 1, got {self.loops!r}")

    @property
    def single_server(self) -> bool:
        """One request served at a time by one unbounded FCFS queue (per loop)."""
        if self.dispatch == "event_loop":
            return True
        where, c, _, _ = self._queue()
        return (
            self.dispatch != "processor_sharing"
            and where == "server"
            and c == 1
            and not math.isfinite(self.capacity)
        )

    @property
    def exponential(self) -> bool:
        return abs(self.service_scv - 1.0) <= EXPONENTIAL_SCV_TOLERANCE

    @property
    def mean_overhead_s(self) -> float:
        """The overhead added to means: overhead_mean_s, or overhead_s when not given."""
        return self.overhead_s if math.isnan(self.overhead_mean_s) else self.overhead_mean_s

    @property
    def pinned(self) -> bool:
        """Keep-alive connections pinned to workers, more of them than workers."""
        return (
            self.dispatch == "per_connection"
            and self.connections is not None
            and self.connections > self.servers
        )

    @property
    def broken(self) -> str | None:
        """Why no steady-state model holds for this station (None: one does)."""
        if self.pinned:
            return (
                f"connection pinning: {self.connections} keep-alive connections on "
                f"{self.servers} worker(s) that each keep theirs, so "
                f"{self.connections - self.servers} wait until a served one closes"
            )
        return None

    def queue_in_client(self) -> bool:
        """Whether the queue forms in the client (keep-alive connections are the servers)."""
        return self.dispatch != "event_loop" and self._queue()[0] == "client"

    def _queue(self) -> tuple[str, int, float, float]:
        """The queue that forms: (where, servers, holding time [s], its SCV). Where a connection
        is the server (the client's queue), it is held for the service and the overhead."""
        c, s, scv, L = self.servers, self.mean_service_s, self.service_scv, self.connections
        if self.dispatch == "processor_sharing":
            threads = c if L is None else min(c, L)
            return ("shared", threads, s, scv)
        if L is not None and L <= c and (self.dispatch == "per_connection" or L < c):
            hold = s + self.mean_overhead_s
            return ("client", L, hold, scv * (s / hold) ** 2)
        return ("server", c, s, scv)

    @property
    def name(self) -> str:
        """The model's name, e.g. M/M/4, M/G/1, M/M/4/132, M/M/2-PS (8 threads)."""
        if self.dispatch == "event_loop":
            one = f"M/{'M' if self.exponential else 'G'}/1"
            return one if self.loops == 1 else f"{self.loops} x {one} (loops)"
        where, c, _, scv = self._queue()
        letter = "M" if abs(scv - 1.0) <= EXPONENTIAL_SCV_TOLERANCE else "G"
        if self.dispatch == "processor_sharing" and c > self.cores:
            return f"M/{letter}/{int(self.cores)}-PS ({c} threads)"
        if math.isfinite(self.capacity) and where == "server":
            return f"M/M/{c}/{int(self.capacity)}"
        suffix = " (queue in the client)" if where == "client" else ""
        if self.pinned:
            suffix = f" ({self.connections} connections pinned to {self.servers})"
        return f"M/{letter}/{c}{suffix}"

    def max_rate(self) -> float:
        """The saturation throughput: no finite-queue model is stable at or above it (a finite
        capacity K admits more arrivals, but throughput never exceeds it)."""
        if self.dispatch == "event_loop":
            return self.loops / self.mean_service_s
        _, c, hold, _ = self._queue()
        if self.dispatch == "processor_sharing":
            c = min(c, int(self.cores))
        return c / hold

    def at(self, rate_rps: float, scv_tolerance: float = EXPONENTIAL_SCV_TOLERANCE):
        """The open model at an arrival rate (Poisson arrivals); for several loops, one loop
        (at rate / loops). A holding time whose SCV is within scv_tolerance of 1 is taken as
        exponential (M/M/c, whose sojourn-time distribution is exact); otherwise M/G/c. Raises
        ValueError when the rate is not below max_rate() and the station has no finite
        capacity."""
        if self.dispatch == "event_loop":
            lam, s = rate_rps / self.loops, self.mean_service_s
            if abs(self.service_scv - 1.0) <= scv_tolerance:
                return queues.mmc(lam, 1.0 / s, 1)
            if self.tail_percentiles:
                return queues.mg1_tail(lam, s, self.service_scv)
            return queues.mg1(lam, s, self.service_scv)
        where, c, s, scv = self._queue()
        exp = abs(scv - 1.0) <= scv_tolerance
        if self.dispatch == "processor_sharing" and c > self.cores:
            k = int(self.cores)
            if exp:
                return sharing.lps(rate_rps, 1.0 / s, k, c)
            # sharing's mean does not depend on the service time's distribution (exact for
            # unlimited threads, a symmetric queue): M/M/k's, with no percentile claimed
            r = queues.mmc(rate_rps, 1.0 / s, k)
            kept = {f.name: getattr(r, f.name) for f in dataclasses.fields(queues.QueueResult)}
            return queues.QueueResult(**{**kept, "model": f"M/G/{k}-PS ({c} threads)"})
        if math.isfinite(self.capacity) and where == "server":
            return queues.mmck(rate_rps, 1.0 / s, c, self.capacity)
        if exp:
            return queues.mmc(rate_rps, 1.0 / s, c)
        if c == 1:
            if self.tail_percentiles and where == "server":
                return queues.mg1_tail(rate_rps, s, scv)
            return queues.mg1(rate_rps, s, scv)
        return queues.mgc(rate_rps, s, c, scv)

    def _outside_s(self, mean: bool = False) -> float:
        """The overhead added to a response time (its mean for means): none where the queue's
        holding time holds it."""
        oh = self.mean_overhead_s if mean else self.overhead_s
        if self.dispatch == "event_loop":
            return oh
        return 0.0 if self._queue()[0] == "client" else oh

    def mean_response_s(self, rate_rps: float) -> float:
        """E[T] at a rate, the overhead included."""
        return self.at(rate_rps).mean_response + self._outside_s(mean=True)

    def has_percentiles(self, scv_tolerance: float = EXPONENTIAL_SCV_TOLERANCE) -> bool:
        """Whether response_percentile_s is exact for this station (a closed-form or exactly
        computed sojourn-time distribution): M/M/c and M/M/c/K under FCFS, M/M/k-LPS. A
        wider scv_tolerance accepts a near-exponential holding time as exponential (an
        approximation: the percentile of the M/M/c with the same mean). With tail_percentiles,
        a single-server station has them for any SCV (queues.mg1_tail, an approximation)."""
        scv = self.service_scv if self.dispatch == "event_loop" else self._queue()[3]
        return abs(scv - 1.0) <= scv_tolerance or (self.tail_percentiles and self.single_server)

    def response_percentile_s(
        self, rate_rps: float, q: float, scv_tolerance: float = EXPONENTIAL_SCV_TOLERANCE
    ) -> float:
        """The q-th percentile (0 < q < 100) of the response time at a rate, the overhead
        included. Raises NotImplementedError where no closed form exists (see
        has_percentiles)."""
        if not 0.0 < q < 100.0:
            raise ValueError(f"percentile q must be in (0, 100), got {q!r}")
        if not self.has_percentiles(scv_tolerance):
            raise NotImplementedError(
                f"{self.name}: no closed-form response-time distribution for SCV "
                f"{self.service_scv:.2f}; only the mean is predicted"
            )
        return self.at(rate_rps, scv_tolerance).response_percentile(q / 100.0) + self._outside_s()

    def latency_s(self, rate_rps: float, stat: str) -> float:
        """`mean` or a percentile named `pNN` / `pNN.N` (p99, p99.9, p50), at a rate."""
        if stat == "mean":
            return self.mean_response_s(rate_rps)
        return self.response_percentile_s(rate_rps, percentile_of(stat))

    def closed(self, users: int, think_s: float) -> closed.MVAResult:
        """Exact MVA for 1..users users, each thinking think_s between requests: the station
        by its dispatch, the overhead as a delay station. A pinned per-connection station
        (keep-alive, ``connections`` not None) serves each of its first c users on a worker
        of their own; users beyond c never get one: their response time is inf."""
        s, oh = self.mean_service_s, self.mean_overhead_s
        if self.dispatch == "event_loop" and self.loops > 1:
            return _split_loops(s, oh, self.loops, users, think_s)
        if self.dispatch == "per_connection" and self.connections is not None:
            res = closed.mva([s, oh], users, think_s, delay_stations=[True, True])
            if users <= self.servers:
                return res
            c = self.servers
            x = np.asarray(res.throughput).copy()
            r = np.asarray(res.response_time).copy()
            x[c:], r[c:] = x[c - 1], math.inf
            return dataclasses.replace(res, throughput=x, response_time=r, cycle_time=r + think_s)
        c = self.servers
        if self.dispatch == "processor_sharing":
            c = min(c, int(self.cores))
        if self.dispatch == "event_loop":
            c = 1
        return closed.mva([s, oh], users, think_s, delay_stations=[False, True], servers=[c, 1])


def _split_loops(s: float, oh: float, loops: int, users: int, think_s: float):
    """Closed users spread evenly over independent loops (each user's connection belongs to
    one): every loop is a one-server MVA of its share; the system adds them up."""
    per = closed.mva([s, oh], -(-users // loops), think_s, delay_stations=[False, True])
    n = np.arange(1, users + 1)
    x = np.zeros(users)
    rk = np.zeros((users, 2))
    q = np.zeros((users, 2))
    for i, total in enumerate(n):
        shares = [total // loops + (1 if j < total % loops else 0) for j in range(loops)]
        for m in shares:
            if m:
                x[i] += per.throughput[m - 1]
                rk[i] += per.throughput[m - 1] * per.residence_times[m - 1]
                q[i] += per.queue_lengths[m - 1]
    rk /= x[:, None]
    r = n / x - think_s
    bound_x = np.minimum(n / (s + oh + think_s), loops / s)
    return closed.MVAResult(
        demands=per.demands,
        think_time=think_s,
        delay_stations=per.delay_stations,
        servers=np.array([loops, 1]),
        users=n,
        throughput=x,
        response_time=r,
        cycle_time=r + think_s,
        residence_times=rk,
        queue_lengths=q,
        utilization=np.column_stack([x * s / loops, x * oh]),
        bound_throughput=bound_x,
        bound_response_time=np.maximum(s + oh, n * s / loops - think_s),
        n_star=(s + oh + think_s) / (s / loops),
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

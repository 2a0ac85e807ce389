"""Open single-station queueing models: M/M/1, M/M/c, M/M/c/K, M/G/1, M/G/c (approximate).

Units: rates per second, times in seconds. Every function validates its inputs and raises
``ValueError`` with a message naming the offending parameter. Infinite-capacity models
require utilisation rho = lambda / (c * mu) < 1.

Conventions for the result fields (all models return a frozen dataclass):

- ``utilization``          rho = throughput * E[S] / c (per-server busy fraction)
- ``p_wait``               probability that an (accepted) arrival has to queue
- ``p_block``              probability that an arrival is refused (finite capacity; 0 otherwise)
- ``throughput``           effective (accepted) arrival rate
- ``mean_wait``            E[Wq], time in queue before service
- ``mean_response``        E[T] = E[Wq] + E[S]
- ``mean_queue_length``    E[N], mean number in the system (queue + service)
- ``mean_queue_waiting``   E[Nq], mean number waiting (not in service)

``response_percentile(p)`` / ``wait_percentile(p)`` exist where the distribution has a closed
form under FCFS (M/M/1, M/M/c, M/M/c/K); for the M/G models they raise NotImplementedError.
``mg1_tail`` is the one approximation with percentiles: M/G/1 with gamma service times (any
SCV, 0 = deterministic), its waiting time's tail by the Cramer-Lundberg asymptote (exact decay
rate and constant), exact for exponential service and within a few per cent of simulation at
the p99 for rho >= 0.5 (tests/models/test_models_queues_sim.py).

Here: the Markovian models (M/M/1, M/M/c, M/M/c/K). The M/G ones are mg_queues.py's, and what
they all share (input checks, Erlang B and C, QueueResult) queue_result.py's; every name above
is read from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from .mg_queues import MG1TailResult, mg1, mg1_tail, mgc
from .queue_result import (
    QueueResult,
    _by_littles_law,
    _invert_sf,
    _positive,
    _prob,
    _stable,
    count,
    erlang_b,
    erlang_c,
)

__all__ = [
    "QueueResult",
    "MMcResult",
    "MMcKResult",
    "erlang_b",
    "erlang_c",
    "mm1",
    "mmc",
    "mmck",
    "mg1",
    "mg1_tail",
    "MG1TailResult",
    "mgc",
]


@dataclass(frozen=True)
class MMcResult(QueueResult):
    """M/M/c FCFS: Wq is 0 w.p. 1 - C and Exp(theta), theta = c mu - lambda, w.p. C;
    T = Wq + S with S ~ Exp(mu) independent of Wq."""

    def _theta(self) -> float:
        return self.servers / self.mean_service - self.arrival_rate

    def wait_sf(self, t: float) -> float:
        t = float(t)
        return 1.0 if t < 0 else self.p_wait * math.exp(-self._theta() * t)

    def response_sf(self, t: float) -> float:
        t = float(t)
        if t <= 0:
            return 1.0
        mu, th, C = 1.0 / self.mean_service, self._theta(), self.p_wait
        if abs(th - mu) <= 1e-12 * mu:
            conv = (1.0 + mu * t) * math.exp(-mu * t)
        else:  # P(Exp(th) + Exp(mu) > t)
            conv = (th * math.exp(-mu * t) - mu * math.exp(-th * t)) / (th - mu)
        return (1.0 - C) * math.exp(-mu * t) + C * conv

    def wait_percentile(self, p: float) -> float:
        p = _prob(p)
        if 1.0 - p >= self.p_wait:
            return 0.0
        return math.log(self.p_wait / (1.0 - p)) / self._theta()

    def response_percentile(self, p: float) -> float:
        p = _prob(p)
        if p == 0.0:
            return 0.0
        if self.servers == 1:  # exponential with rate mu - lambda
            return -math.log(1.0 - p) / self._theta()
        return _invert_sf(self.response_sf, 1.0 - p, self.mean_response)


@dataclass(frozen=True)
class MMcKResult(QueueResult):
    """M/M/c/K FCFS. ``p0`` and the state distribution ``probabilities`` (n = 0..K) are kept.
    An accepted arrival that finds n >= c in the system waits Erlang(n - c + 1, c mu)."""

    p0: float = 0.0
    probabilities: tuple = ()

    def _arrival_mix(self):
        """(k, q_k): accepted arrivals that wait k exponential(c mu) phases, with probability q_k."""
        pr = np.asarray(self.probabilities)
        K, c = len(pr) - 1, self.servers
        if K <= c:
            return np.zeros(0), np.zeros(0)
        q = pr[c:K] / (1.0 - pr[K])
        return np.arange(1, K - c + 1, dtype=float), q

    def wait_sf(self, t: float) -> float:
        t = float(t)
        if t < 0:
            return 1.0
        k, q = self._arrival_mix()
        if len(k) == 0:
            return 0.0
        cm = self.servers / self.mean_service
        return float(np.sum(q * stats.gamma.sf(t, k, scale=1.0 / cm)))

    def response_sf(self, t: float) -> float:
        t = float(t)
        if t <= 0:
            return 1.0
        mu = 1.0 / self.mean_service
        cm = self.servers * mu
        k, q = self._arrival_mix()
        out = (1.0 - q.sum()) * math.exp(-mu * t)
        if len(k):
            # P(Gamma(k, cm) + Exp(mu) > t) = P(G > t) + e^{-mu t} (cm/(cm-mu))^k P(Gamma(k, cm-mu) <= t)
            if self.servers == 1:
                log_int = k * math.log(mu * t) - special.gammaln(k + 1.0)
            else:
                log_int = k * math.log(cm / (cm - mu)) + stats.gamma.logcdf(
                    t, k, scale=1.0 / (cm - mu)
                )
            term = stats.gamma.sf(t, k, scale=1.0 / cm) + np.exp(-mu * t + log_int)
            out += float(np.sum(q * term))
        return min(1.0, out)

    def wait_percentile(self, p: float) -> float:
        p = _prob(p)
        if 1.0 - p >= self.p_wait:
            return 0.0
        return _invert_sf(self.wait_sf, 1.0 - p, max(self.mean_wait, self.mean_service))

    def response_percentile(self, p: float) -> float:
        p = _prob(p)
        if p == 0.0:
            return 0.0
        return _invert_sf(self.response_sf, 1.0 - p, self.mean_response)


# --------------------------------------------------------------------------- models
def mmc(arrival_rate: float, service_rate: float, servers: int) -> MMcResult:
    """M/M/c with FCFS: Erlang C for P(wait), Wq = C / (c mu - lambda)."""
    lam = _positive("arrival_rate", arrival_rate)
    mu = _positive("service_rate", service_rate)
    c = count("servers", servers)
    rho = _stable(lam, c, mu)
    a = lam / mu
    C = erlang_c(c, a)
    wq = C / (c * mu - lam)
    model = "M/M/1" if c == 1 else f"M/M/{c}"
    return _by_littles_law(MMcResult, model, lam, 1.0 / mu, c, rho, C, wq)


def mm1(arrival_rate: float, service_rate: float) -> MMcResult:
    """M/M/1: rho = lambda/mu, T ~ Exp(mu - lambda)."""
    return mmc(arrival_rate, service_rate, 1)


def mmck(arrival_rate: float, service_rate: float, servers: int, capacity: float) -> QueueResult:
    """M/M/c/K, K = capacity = the most customers in the system (in service + waiting).
    Stable for every load. Stationary probabilities are computed in log space, so large c and
    K do not overflow. ``capacity=math.inf`` falls back to :func:`mmc` (needs rho < 1)."""
    lam = _positive("arrival_rate", arrival_rate)
    mu = _positive("service_rate", service_rate)
    c = count("servers", servers)
    try:
        kf = float(capacity)
    except (TypeError, ValueError):
        raise ValueError(f"capacity must be an integer >= servers, got {capacity!r}") from None
    if kf == math.inf:
        return mmc(lam, mu, c)
    if not math.isfinite(kf) or kf != int(kf) or kf < c:
        raise ValueError(f"capacity must be an integer >= servers ({c}), got {capacity!r}")
    K = int(kf)
    a, rho = lam / mu, lam / (c * mu)
    n = np.arange(K + 1, dtype=float)
    logp = np.where(
        n <= c,
        n * math.log(a) - special.gammaln(n + 1.0),
        c * math.log(a) - special.gammaln(c + 1.0) + (n - c) * math.log(rho),
    )
    logp -= special.logsumexp(logp)
    pr = np.exp(logp)
    p_block = float(pr[K])
    x = lam * (1.0 - p_block)
    L = float(np.sum(n * pr))
    Lq = float(np.sum(np.maximum(n - c, 0.0) * pr))
    p_wait = float(np.sum(pr[c:K]) / (1.0 - p_block)) if K > c else 0.0
    return MMcKResult(
        model=f"M/M/{c}/{K}",
        arrival_rate=lam,
        mean_service=1.0 / mu,
        servers=c,
        utilization=x / (c * mu),
        p_wait=p_wait,
        throughput=x,
        mean_wait=Lq / x,
        mean_response=L / x,
        mean_queue_length=L,
        mean_queue_waiting=Lq,
        p_block=p_block,
        capacity=K,
        p0=float(pr[0]),
        probabilities=tuple(pr.tolist()),
    )

"""Open single-station queues with general service times: M/G/1 by Pollaczek-Khinchine (exact
means), M/G/1 with gamma service times and its waiting time's tail by the Cramer-Lundberg
asymptote (mg1_tail), and G/G/c by Allen-Cunneen (approximate). The conventions of their
results are queues.py's; the names are read through it too (queues.mg1, queues.mgc, ...).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from .queue_result import (
    QueueResult,
    _by_littles_law,
    _invert_sf,
    _positive,
    _prob,
    _scv,
    _stable,
    count,
    erlang_c,
)


def mg1(arrival_rate: float, mean_service: float, service_scv: float) -> QueueResult:
    """M/G/1 by Pollaczek-Khinchine: Wq = rho/(1-rho) * E[S] * (1 + Cs^2)/2 (exact means)."""
    lam = _positive("arrival_rate", arrival_rate)
    s = _positive("mean_service", mean_service)
    cs2 = _scv("service_scv", service_scv)
    rho = _stable(lam, 1, 1.0 / s)
    wq = rho / (1.0 - rho) * s * (1.0 + cs2) / 2.0
    return _by_littles_law(QueueResult, "M/G/1", lam, s, 1, rho, rho, wq)


DETERMINISTIC_SCV = 1e-3  # below this a service time is taken as constant


MAX_LOG_MGF = 700.0  # ln M(theta) beyond this overflows a float


SERVICE_NODES = 2048  # equiprobable gamma quantiles the sojourn time averages over


@dataclass(frozen=True)
class MG1TailResult(QueueResult):
    """M/G/1 FCFS with gamma service times of SCV `service_scv` (the means by
    Pollaczek-Khinchine, exact). The waiting time: 0 w.p. 1 - rho, and for t > 0
    P(W > t) ~= min(rho, K exp(-theta t)), the Cramer-Lundberg asymptote, where theta > 0
    solves lambda (M(theta) - 1) = theta (M: the service time's moment generating function)
    and K = (1 - rho) / (lambda M'(theta) - 1). For exponential service theta = mu - lambda and
    K = rho: exact. The response time T = W + S, S independent of W (FCFS), its tail averaged
    over SERVICE_NODES equiprobable service times."""

    service_scv: float = 1.0

    def _mgf(self, th: float) -> tuple[float, float]:
        """M(theta) - 1 (to full precision near 0) and M'(theta) of the service time."""
        s, c2 = self.mean_service, self.service_scv
        if c2 < DETERMINISTIC_SCV:
            return math.expm1(th * s), s * math.exp(th * s)
        log_m = -math.log1p(-th * s * c2) / c2  # ln M(theta), gamma(1/c2, s c2)
        if log_m > MAX_LOG_MGF:  # past what a float holds: f is far above 0 there
            return math.inf, math.inf
        return math.expm1(log_m), s * math.exp(log_m) / (1.0 - th * s * c2)

    def _tail(self) -> tuple[float, float]:
        """(theta, K) of the waiting time's asymptote."""
        lam, s, c2, rho = self.arrival_rate, self.mean_service, self.service_scv, self.utilization
        f = lambda th: lam * self._mgf(th)[0] - th  # noqa: E731
        # near 0, f(theta) = theta (rho - 1) + lam E[S^2] theta^2 / 2 + ...: negative below
        lo = 0.01 * (1.0 - rho) / (s * (1.0 + c2))
        if c2 < DETERMINISTIC_SCV:
            hi = 1.0 / s
            while f(hi) <= 0:
                hi *= 2.0
        else:
            # the pole of M at 1 / (s c2), or short of it where ln M reaches MAX_LOG_MGF (a
            # near-constant service time: c2 small, M's growth towards the pole overflows)
            hi = min(1.0 - 1e-12, -math.expm1(-MAX_LOG_MGF * c2)) / (s * c2)
            if f(hi) <= 0:  # a load so light the root hides at the pole: decay at the pole
                return hi, rho
        th = optimize.brentq(f, lo, hi, xtol=1e-15 / s, rtol=1e-13)
        K = (1.0 - rho) / (lam * self._mgf(th)[1] - 1.0)
        return th, K

    def wait_sf(self, t: float) -> float:
        t = float(t)
        if t < 0:
            return 1.0
        th, K = self._tail()
        return min(self.utilization, K * math.exp(-th * t))

    def _service_nodes(self) -> np.ndarray:
        s, c2 = self.mean_service, self.service_scv
        if c2 < DETERMINISTIC_SCV:
            return np.array([s])
        q = (np.arange(SERVICE_NODES) + 0.5) / SERVICE_NODES
        return stats.gamma.ppf(q, 1.0 / c2, scale=s * c2)

    def response_sf(self, t: float) -> float:
        if abs(self.service_scv - 1.0) < 1e-9 and float(t) > 0:  # M/M/1: T ~ Exp(mu - lambda)
            return math.exp(-(1.0 / self.mean_service - self.arrival_rate) * float(t))
        th, K = self._tail()
        u = float(t) - self._service_nodes()
        sf = np.where(u < 0, 1.0, np.minimum(self.utilization, K * np.exp(-th * np.maximum(u, 0))))
        return float(sf.mean())

    def wait_percentile(self, p: float) -> float:
        p = _prob(p)
        if 1.0 - p >= self.utilization:
            return 0.0
        th, K = self._tail()
        return max(0.0, math.log(K / (1.0 - p)) / th)

    def response_percentile(self, p: float) -> float:
        p = _prob(p)
        if p == 0.0:
            return 0.0
        return _invert_sf(self.response_sf, 1.0 - p, self.mean_response)


def mg1_tail(arrival_rate: float, mean_service: float, service_scv: float) -> MG1TailResult:
    """M/G/1 with gamma service times: the means of mg1 (exact), and percentiles from the
    waiting time's Cramer-Lundberg asymptote (MG1TailResult: an approximation, exact for
    exponential service)."""
    r = mg1(arrival_rate, mean_service, service_scv)
    kept = {f.name: getattr(r, f.name) for f in dataclasses.fields(QueueResult)}
    name = "M/G/1 (gamma service, tail asymptote)"
    return MG1TailResult(**{**kept, "model": name}, service_scv=float(service_scv))


def mgc(
    arrival_rate: float,
    mean_service: float,
    servers: int,
    service_scv: float,
    arrival_scv: float = 1.0,
) -> QueueResult:
    """G/G/c by the Allen-Cunneen approximation:

        Wq ~= C(c, a) / (c mu - lambda) * (Ca^2 + Cs^2) / 2

    i.e. the exact M/M/c wait scaled by the mean of the two squared coefficients of variation.
    It is exact for M/M/c (Ca^2 = Cs^2 = 1) and for M/G/1 (c = 1, Ca^2 = 1, where it reduces to
    Pollaczek-Khinchine); otherwise an approximation, typically within ~5-10 % for moderate
    loads, and best in heavy traffic. ``p_wait`` reported is the M/M/c Erlang C value.
    ``arrival_rate`` is per second; ``mean_service`` in seconds."""
    lam = _positive("arrival_rate", arrival_rate)
    s = _positive("mean_service", mean_service)
    c = count("servers", servers)
    cs2 = _scv("service_scv", service_scv)
    ca2 = _scv("arrival_scv", arrival_scv)
    mu = 1.0 / s
    rho = _stable(lam, c, mu)
    C = erlang_c(c, lam * s)
    wq = C / (c * mu - lam) * (ca2 + cs2) / 2.0
    name = "M/G" if ca2 == 1.0 else "G/G"
    return _by_littles_law(QueueResult, f"{name}/{c} (Allen-Cunneen)", lam, s, c, rho, C, wq)

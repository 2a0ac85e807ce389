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
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

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


# --------------------------------------------------------------------------- validation
def _positive(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return v


def count(name: str, value) -> int:
    """value as a whole number >= 1 (a count of servers or users); ValueError naming `name`
    otherwise."""
    try:
        n = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}") from None
    if not math.isfinite(n) or n < 1 or n != int(n):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(n)


def _scv(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} (squared coefficient of variation) must be >= 0, got {value!r}")
    return v


def _prob(p: float) -> float:
    p = float(p)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"percentile p must be in [0, 1), got {p!r}")
    return p


def _stable(lam: float, c: int, mu: float) -> float:
    rho = lam / (c * mu)
    if rho >= 1.0:
        raise ValueError(
            f"unstable queue: utilisation rho = lambda/(c*mu) = {lam:g}/({c}*{mu:g}) = {rho:.4g} >= 1 "
            "(use mmck with a finite capacity for overload)"
        )
    return rho


# --------------------------------------------------------------------------- Erlang B / C
def erlang_b(servers: int, offered_load: float) -> float:
    """Erlang B blocking probability B(c, a) by the stable recursion
    B(0) = 1, B(k) = a B(k-1) / (k + a B(k-1)); no factorials, fine for c in the thousands."""
    c = count("servers", servers)
    a = _positive("offered_load", offered_load)
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return b


def erlang_c(servers: int, offered_load: float) -> float:
    """Erlang C probability of waiting C(c, a) = c B / (c - a (1 - B)), requires a < c."""
    c = count("servers", servers)
    a = _positive("offered_load", offered_load)
    if a >= c:
        raise ValueError(f"Erlang C needs offered load a < servers, got a={a:g}, c={c}")
    b = erlang_b(c, a)
    return c * b / (c - a * (1.0 - b))


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class QueueResult:
    model: str
    arrival_rate: float
    mean_service: float
    servers: int
    utilization: float
    p_wait: float
    throughput: float
    mean_wait: float
    mean_response: float
    mean_queue_length: float
    mean_queue_waiting: float
    p_block: float = 0.0
    capacity: float = math.inf

    def response_percentile(self, p: float) -> float:
        raise NotImplementedError(f"{self.model}: no closed-form response-time distribution")

    def wait_percentile(self, p: float) -> float:
        raise NotImplementedError(f"{self.model}: no closed-form waiting-time distribution")


def _invert_sf(sf, target: float, scale: float) -> float:
    """Smallest t >= 0 with sf(t) <= target (sf continuous and decreasing on t > 0)."""
    hi = scale
    while sf(hi) > target:
        hi *= 2.0
        if hi > 1e12 * scale:  # pragma: no cover - guards against a broken sf
            raise RuntimeError("percentile search diverged")
    return optimize.brentq(lambda t: sf(t) - target, 0.0, hi, xtol=1e-14 * hi, rtol=1e-12)


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
def _by_littles_law(
    cls, model: str, lam: float, s: float, c: int, rho: float, p_wait: float, wq: float
):
    """A stable queue that loses no customer, from its mean wait wq (s): throughput = the
    arrival rate lam, W = wq + the mean service s, and by Little's law L = lam W and
    Lq = lam wq. cls: QueueResult or a subclass with the same fields."""
    w = wq + s
    return cls(
        model=model,
        arrival_rate=lam,
        mean_service=s,
        servers=c,
        utilization=rho,
        p_wait=p_wait,
        throughput=lam,
        mean_wait=wq,
        mean_response=w,
        mean_queue_length=lam * w,
        mean_queue_waiting=lam * wq,
    )


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

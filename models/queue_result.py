"""What every open single-station model of queues.py and mg_queues.py shares: the checks of
their inputs (each a ValueError naming the parameter), Erlang's B and C formulas, the result
they return (QueueResult; see queues.py for its fields) and how a stable queue's means follow
from its mean wait by Little's law.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import optimize


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


# ------------------------------------------------------------------- means by Little's law
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

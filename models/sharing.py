"""Processor sharing on fewer cores than threads: the open M/M/k-LPS(T) queue, with its exact
mean and its exact sojourn-time distribution.

Why a model of its own: a server whose T worker threads are CPU-bound on k < T cores does
not serve like M/M/T (T servers at full speed) nor like M/M/k (k servers, the rest waiting in
FIFO order). Up to T requests are in service at once and share the k cores evenly (the
kernel's scheduler, to first order): with m requests in service each progresses at
min(1, k / m) of full speed; requests beyond T wait in FIFO order for a thread (the accept
queue). This is limited processor sharing, LPS (Ciw's PSNode simulates the same discipline).

What is exact for exponential service (rate mu), Poisson arrivals (rate lambda < k mu):
- The number in the system is a birth-death process with death rate min(n, k) mu (T >= k: the
  cores are always all busy once n >= k), the same as M/M/k's, so the mean response time is
  M/M/k's by Little's law. With T = inf (a thread per connection) the queue is symmetric, so
  the mean holds for any service-time distribution (insensitivity); with T < inf it is an
  approximation for non-exponential service.
- The sojourn time of one request is the absorption time of a Markov chain that follows it
  (a tagged customer): while it waits, the j requests ahead of it and the w that arrived
  behind; in service, the m others in service and the w waiting. PASTA gives where it starts
  (the stationary M/M/k distribution). The survival function P(T > t) comes from
  uniformization (a Poisson-weighted sum of the chain's powers), so any percentile is exact
  up to the truncation of j and w (probability mass below TRUNCATION_MASS).

Times in seconds, rates per second. Functions raise ValueError naming the bad parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse, special, stats

from . import queues

__all__ = ["LPSResult", "lps"]

TRUNCATION_MASS = 1e-9  # stationary mass (and arrivals behind) left out of the chain
MAX_STEPS = 200_000  # uniformization steps before giving up (only near rho = 1)


@dataclass(frozen=True)
class LPSResult(queues.QueueResult):
    """M/M/k-LPS(T). ``servers`` is k (cores); ``threads`` is T (inf: unlimited)."""

    threads: float = math.inf
    _survival: np.ndarray = field(default=None, repr=False, compare=False)  # s_n of the chain
    _uniform_rate: float = 0.0  # Lambda of the uniformization

    def response_sf(self, t: float) -> float:
        """P(response time > t)."""
        t = float(t)
        if t <= 0:
            return 1.0
        s = self._survival
        n = np.arange(len(s))
        x = self._uniform_rate * t
        # the steps past the last computed one hold at most s[-1] (negligible) each
        return float(
            min(1.0, np.dot(stats.poisson.pmf(n, x), s) + stats.poisson.sf(n[-1], x) * s[-1])
        )

    def response_percentile(self, p: float) -> float:
        if not 0.0 <= p < 1.0:
            raise ValueError(f"percentile p must be in [0, 1), got {p!r}")
        if p == 0.0:
            return 0.0
        return queues._invert_sf(self.response_sf, 1.0 - p, self.mean_response)


def _stationary(lam: float, mu: float, k: int, n_max: int) -> np.ndarray:
    """P(N = n), n = 0..n_max, of M/M/k (unnormalised tail cut at n_max)."""
    a, rho = lam / mu, lam / (k * mu)
    n = np.arange(n_max + 1, dtype=float)
    logp = np.where(
        n <= k,
        n * math.log(a) - special.gammaln(n + 1.0),
        k * math.log(a) - special.gammaln(k + 1.0) + (n - k) * math.log(rho),
    )
    # normalise with the geometric tail beyond n_max included
    tail = logp[-1] + math.log(rho) - math.log1p(-rho) if n_max >= k else -math.inf
    norm = np.logaddexp(special.logsumexp(logp), tail)
    return np.exp(logp - norm)


def _chain(lam: float, mu: float, k: int, threads: float, n_max: int, w_max: int):
    """The tagged request's transient chain: (generator rows as a sparse matrix, initial
    distribution, uniformization rate). States: in service (m others in service, w waiting
    behind; w > 0 only when m = T - 1) and waiting (j ahead in the queue, w behind)."""
    unlimited = not math.isfinite(threads)
    T = n_max + 1 if unlimited else int(threads)
    index: dict[tuple, int] = {}

    def state(key: tuple) -> int:
        if key not in index:
            index[key] = len(index)
        return index[key]

    for m in range(T):
        state(("s", m, 0))
    if not unlimited:
        for w in range(1, w_max + 1):
            state(("s", T - 1, w))
        for j in range(max(n_max - T + 1, 0)):
            for w in range(w_max + 1):
                state(("q", j, w))
    rows, cols, vals = [], [], []
    out_rate = np.zeros(len(index))

    def move(a: int, b: int, r: float) -> None:
        rows.append(a)
        cols.append(b)
        vals.append(r)
        out_rate[a] += r

    for key, i in index.items():
        kind, x, w = key
        if kind == "s":
            m = x
            share = mu * min(1.0, k / (m + 1))
            out_rate[i] += share  # the tagged request finishes: absorbed
            if m > 0:
                if w > 0:
                    move(i, index[("s", m, w - 1)], m * share)
                else:
                    move(i, index[("s", m - 1, 0)], m * share)
            if m + 1 < T and w == 0:
                if ("s", m + 1, 0) in index:
                    move(i, index[("s", m + 1, 0)], lam)
            elif ("s", m, w + 1) in index:
                move(i, index[("s", m, w + 1)], lam)
        else:
            j = x
            nxt = ("q", j - 1, w) if j > 0 else ("s", T - 1, w)
            move(i, index[nxt], k * mu)
            if ("q", j, w + 1) in index:
                move(i, index[("q", j, w + 1)], lam)
    rate = float(out_rate.max())
    # P = I + Q / rate over the transient states (absorption is the missing mass)
    diag = 1.0 - out_rate / rate
    n = len(index)
    P = sparse.csr_matrix(
        (
            np.concatenate([np.asarray(vals) / rate, diag]),
            (np.concatenate([rows, np.arange(n)]), np.concatenate([cols, np.arange(n)])),
        ),
        shape=(n, n),
    )
    pi = _stationary(lam, mu, k, n_max)
    alpha = np.zeros(n)
    for others, p in enumerate(pi):
        if others < T:
            alpha[index[("s", others, 0)]] += p
        else:
            alpha[index[("q", others - T, 0)]] += p
    alpha /= alpha.sum()
    return P, alpha, rate


def lps(
    arrival_rate: float, service_rate: float, cores: int, threads: float = math.inf
) -> LPSResult:
    """M/M/k-LPS(T): Poisson arrivals, exponential service of rate ``service_rate`` on ``cores``
    k, at most ``threads`` T >= k requests sharing them (math.inf: no limit). Stable for
    lambda < k mu. ``mean_response`` is exact (M/M/k's); ``response_percentile`` exact up to
    TRUNCATION_MASS."""
    lam = queues._positive("arrival_rate", arrival_rate)
    mu = queues._positive("service_rate", service_rate)
    k = queues._servers(cores)
    if not (threads == math.inf or (float(threads) == int(threads) and threads >= k)):
        raise ValueError(f"threads must be an integer >= cores ({k}) or inf, got {threads!r}")
    base = queues.mmc(lam, mu, k)  # raises when lambda >= k mu
    rho = base.utilization
    # enough states that the stationary mass beyond n_max, and the chance of more than w_max
    # arrivals behind the tagged request, are below TRUNCATION_MASS
    n_max = k + int(math.ceil(math.log(TRUNCATION_MASS) / math.log(rho))) if rho > 0 else k
    n_max = max(n_max, k + 1)
    if threads > n_max:  # more threads than requests ever in the system: no limit
        threads = math.inf
    w_max = n_max if math.isfinite(threads) else 0
    P, alpha, rate = _chain(lam, mu, k, threads, n_max, w_max)
    PT = P.T.tocsr()
    v, s = alpha, [1.0]
    for _ in range(MAX_STEPS):
        v = PT @ v
        s.append(float(v.sum()))
        if s[-1] < TRUNCATION_MASS * 1e-3:
            break
    T = math.inf if not math.isfinite(threads) else int(threads)
    return LPSResult(
        model=f"M/M/{k}-PS" + ("" if T == math.inf else f" ({T} threads)"),
        arrival_rate=lam,
        mean_service=1.0 / mu,
        servers=k,
        utilization=rho,
        p_wait=base.p_wait,
        throughput=lam,
        mean_wait=base.mean_wait,
        mean_response=base.mean_response,
        mean_queue_length=base.mean_queue_length,
        mean_queue_waiting=base.mean_queue_waiting,
        threads=T,
        _survival=np.asarray(s),
        _uniform_rate=rate,
    )

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
  up to the truncation of j (stationary mass below TRUNCATION_MASS) and of w (ten times the
  mean number in the system, at least W_MIN, at most W_CAP). Above RHO_MAX the chain would
  not fit: percentiles are taken as infinite there (the capacity search only needs to know
  they are past any SLO).

Times in seconds, rates per second. Functions raise ValueError naming the bad parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse, special, stats

from . import queues

__all__ = ["LPSResult", "lps"]

TRUNCATION_MASS = 1e-9  # stationary mass left out of the chain
MAX_STEPS = 200_000  # uniformization steps before giving up (only near rho = 1)
N_CAP, W_MIN, W_CAP = 4000, 50, 400  # the chain's bounds (rho up to ~0.995)
RHO_MAX = 0.995  # above it, percentiles are taken as infinite (the chain would not fit)


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
        if self._survival is None:  # above RHO_MAX: not computed
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
        if self._survival is None:
            return math.inf  # above RHO_MAX the percentile is taken as infinite
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
    """The tagged request's transient chain: (P, the uniformized transition matrix over the
    transient states, its initial distribution, the uniformization rate). States: in service
    with m others (w = 0), in service with T - 1 others and w waiting behind, and waiting
    with j ahead and w behind. Built with numpy, no Python loop over states."""
    unlimited = not math.isfinite(threads)
    T = n_max + 1 if unlimited else int(threads)
    W = 0 if unlimited else w_max
    J = 0 if unlimited else max(n_max - T + 1, 0)
    n_serv, n_full = T, W  # s(m, 0) m < T; s(T - 1, w) w = 1..W
    base_q = n_serv + n_full
    n = base_q + J * (W + 1)

    def s_idx(m, w):
        return np.where(w == 0, m, T - 1 + w)

    def q_idx(j, w):
        return base_q + j * (W + 1) + w

    rows, cols, vals = [], [], []
    out = np.zeros(n)

    def add(src, dst, rate, keep=None):
        src, dst, rate = np.broadcast_arrays(src, dst, rate)
        if keep is not None:
            src, dst, rate = src[keep], dst[keep], rate[keep]
        rows.append(src)
        cols.append(dst)
        vals.append(rate)

    # in service, w = 0, m = 0..T-1
    m = np.arange(T)
    share = mu * np.minimum(1.0, k / (m + 1.0))
    out[m] += share + m * share  # finishing (tagged: absorbed) and the others
    add(m, m - 1, m * share, m > 0)
    grow = m + 1 < T
    add(m, m + 1, lam, grow)
    if W > 0:  # at m = T - 1 an arrival waits behind
        add(np.array([T - 1]), s_idx(np.array([T - 1]), np.array([1])), lam)
    out[m] += np.where(grow | (W > 0), lam, 0.0)
    if W > 0:
        w = np.arange(1, W + 1)
        src = s_idx(np.full(W, T - 1), w)
        sh = mu * min(1.0, k / T)
        out[src] += sh + (T - 1) * sh
        add(src, s_idx(np.full(W, T - 1), w - 1), (T - 1) * sh)
        more = w < W
        add(src, s_idx(np.full(W, T - 1), np.minimum(w + 1, W)), lam, more)
        out[src] += np.where(more, lam, 0.0)
    if J > 0:
        jj, ww = np.meshgrid(np.arange(J), np.arange(W + 1), indexing="ij")
        jj, ww = jj.ravel(), ww.ravel()
        src = q_idx(jj, ww)
        dst = np.where(jj > 0, q_idx(np.maximum(jj - 1, 0), ww), s_idx(np.full(jj.size, T - 1), ww))
        add(src, dst, k * mu)
        more = ww < W
        add(src, q_idx(jj, np.minimum(ww + 1, W)), lam, more)
        out[src] += k * mu + np.where(more, lam, 0.0)
    rate = float(out.max())
    r, c, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals) / rate
    P = sparse.csr_matrix(
        (
            np.concatenate([v, 1.0 - out / rate]),
            (np.concatenate([r, np.arange(n)]), np.concatenate([c, np.arange(n)])),
        ),
        shape=(n, n),
    )
    pi = _stationary(lam, mu, k, n_max)
    alpha = np.zeros(n)
    others = np.arange(pi.size)
    in_service = others < T
    alpha[others[in_service]] += pi[in_service]
    if J > 0:
        np.add.at(alpha, q_idx(others[~in_service] - T, 0), pi[~in_service])
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
    k = queues.count("cores", cores)
    if not (threads == math.inf or (float(threads) == int(threads) and threads >= k)):
        raise ValueError(f"threads must be an integer >= cores ({k}) or inf, got {threads!r}")
    base = queues.mmc(lam, mu, k)  # raises when lambda >= k mu
    rho = base.utilization
    # enough states that the stationary mass beyond n_max, and the chance of more than w_max
    # arrivals behind the tagged request, are below TRUNCATION_MASS
    n_max = k + int(math.ceil(math.log(TRUNCATION_MASS) / math.log(rho))) if rho > 0 else k
    n_max = min(max(n_max, k + 1), N_CAP)
    if threads > n_max:  # more threads than requests ever in the system: no limit
        threads = math.inf
    # arrivals behind the tagged request matter while it shares: a few times the mean number
    # in the system covers them
    w_max = min(n_max, max(W_MIN, int(10 * base.mean_queue_length)), W_CAP)
    T = math.inf if not math.isfinite(threads) else int(threads)
    fields = dict(
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
    )
    if rho > RHO_MAX:
        return LPSResult(**fields)
    P, alpha, rate = _chain(lam, mu, k, threads, n_max, w_max)
    PT = P.T.tocsr()
    v, s = alpha, [1.0]
    for _ in range(MAX_STEPS):
        v = PT @ v
        s.append(float(v.sum()))
        if s[-1] < TRUNCATION_MASS * 1e-3:
            break
    return LPSResult(**fields, _survival=np.asarray(s), _uniform_rate=rate)

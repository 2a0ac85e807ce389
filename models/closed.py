"""Closed queueing networks: exact single-class Mean Value Analysis (MVA) and asymptotic bounds.

A closed interactive system has N users; each cycles through think time Z (a delay) and then
one request that visits K stations, spending a total *service demand* D_k = V_k S_k at station
k. Stations are queueing (FCFS/PS, one server, load-independent) unless flagged as *delay*
(infinite-server) stations, where a request never waits.

Exact MVA (Reiser & Lavenberg), for n = 1..N:

    R_k(n) = D_k (1 + Q_k(n-1))      queueing station
    R_k(n) = D_k                     delay station
    X(n)   = n / (Z + sum_k R_k(n))
    Q_k(n) = X(n) R_k(n)

Multi-server stations (``servers``: c_k > 1) are load dependent, and the load-dependent MVA
recursion over marginal probabilities is numerically unstable for large c (p_k(0|n) comes from
a subtraction). So when any station has c_k > 1, the same product-form network is solved
exactly by the convolution algorithm (Buzen) in log space instead: station factors
f_k(j) = D_k^j / prod_{i<=j} min(i, c_k) (delay: D_k^j / j!, think: Z^j / j!), G = f_1 * ... * f_K,
X(n) = G(n-1) / G(n), Q_k(n) = sum_j j f_k(j) G_{-k}(n-j) / G(n), R_k(n) = Q_k(n) / X(n).
Both paths agree to round-off where both apply (tests).

Asymptotic bounds (D = sum of all demands, Dmax = largest D_k / c_k over queueing stations):
X(n) <= min(n / (D + Z), 1 / Dmax),  R(n) >= max(D, n Dmax - Z),  knee N* = (D + Z) / Dmax.
Times in seconds, throughput per second (any consistent unit works).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from .queues import count

__all__ = ["MVAResult", "mva"]


@dataclass(frozen=True, eq=False)
class MVAResult:
    """Arrays indexed by population n = 1..N (row i is n = users[i]); K = number of stations.

    - users            (N,)    populations 1..N
    - throughput       (N,)    system throughput X(n)
    - response_time    (N,)    R(n) = sum of residence times (think time excluded)
    - cycle_time       (N,)    R(n) + Z
    - residence_times  (N, K)  R_k(n)
    - queue_lengths    (N, K)  Q_k(n), mean number at station k (waiting + in service)
    - utilization      (N, K)  X(n) D_k / c_k per server (delay station: X(n) D_k, the mean
                               number in service)
    - bound_throughput (N,)    min(n/(D+Z), 1/Dmax)
    - bound_response_time (N,) max(D, n Dmax - Z)
    - n_star                   (D + Z) / Dmax (inf when there is no queueing station)
    """

    demands: np.ndarray
    think_time: float
    delay_stations: np.ndarray
    servers: np.ndarray
    users: np.ndarray
    throughput: np.ndarray
    response_time: np.ndarray
    cycle_time: np.ndarray
    residence_times: np.ndarray
    queue_lengths: np.ndarray
    utilization: np.ndarray
    bound_throughput: np.ndarray
    bound_response_time: np.ndarray
    n_star: float

    def at(self, n: int) -> dict:
        """Scalar results at population n."""
        i = int(n) - 1
        if not 0 <= i < len(self.users):
            raise ValueError(f"population n must be in 1..{len(self.users)}, got {n!r}")
        return {
            "users": int(self.users[i]),
            "throughput": float(self.throughput[i]),
            "response_time": float(self.response_time[i]),
            "queue_lengths": self.queue_lengths[i].copy(),
            "utilization": self.utilization[i].copy(),
        }


def _delay_mask(delay_stations, k: int) -> np.ndarray:
    if delay_stations is None:
        return np.zeros(k, dtype=bool)
    arr = np.asarray(delay_stations)
    if arr.dtype == bool:
        if arr.shape != (k,):
            raise ValueError(
                f"delay_stations as a mask must have length {k}, got shape {arr.shape}"
            )
        return arr.copy()
    mask = np.zeros(k, dtype=bool)
    idx = arr.astype(int).ravel()
    if idx.size and (idx.min() < -k or idx.max() >= k):
        raise ValueError(
            f"delay_stations indices must be in range for {k} stations, got {idx.tolist()}"
        )
    mask[idx] = True
    return mask


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _mva_recursion(d, delay, N, Z):
    """Exact MVA recursion (single-server queueing and delay stations)."""
    K = d.size
    X, R = np.empty(N), np.empty(N)
    Rk, Qk = np.empty((N, K)), np.empty((N, K))
    q = np.zeros(K)
    for i in range(N):
        r = np.where(delay, d, d * (1.0 + q))
        x = (i + 1) / (Z + r.sum())
        q = x * r
        X[i], R[i], Rk[i], Qk[i] = x, r.sum(), r, q
    return X, R, Rk, Qk


def _logconv(a: np.ndarray, b: np.ndarray, rows=None) -> np.ndarray:
    """out[n] = log sum_{j<=n} exp(a[j] + b[n-j]) for n in rows (default all of len(a)),
    vectorised in blocks of rows."""
    rows = np.arange(len(a)) if rows is None else np.asarray(rows)
    out = np.empty(len(rows))
    jj = np.arange(len(a))
    for s0 in range(0, len(rows), 256):
        n = rows[s0 : s0 + 256, None]
        idx = n - jj[None, :]
        terms = np.where(idx >= 0, a[None, :] + b[np.clip(idx, 0, None)], -np.inf)
        out[s0 : s0 + 256] = special.logsumexp(terms, axis=1)
    return out


def _convolution(d, cs, delay, N, Z):
    """Exact product-form solution by Buzen's convolution in log space (see module doc)."""
    j = np.arange(N + 1, dtype=float)

    def logf(dem, c, is_delay):
        if dem <= 0:
            return np.where(j == 0, 0.0, -np.inf)
        if is_delay:
            return j * math.log(dem) - special.gammaln(j + 1.0)
        steps = np.concatenate([[0.0], np.cumsum(np.log(np.minimum(j[1:], c)))])
        return j * math.log(dem) - steps

    f = [logf(d[k], cs[k], delay[k]) for k in range(d.size)]
    think = logf(Z, 1, True)
    others = []  # G without station k (think station included)
    for k in range(d.size):
        g = think
        for i in range(d.size):
            if i != k:
                g = _logconv(g, f[i])
        others.append(g)
    logG = _logconv(others[0], f[0])
    X = np.exp(logG[:-1] - logG[1:])
    Q = np.zeros((N, d.size))
    with np.errstate(divide="ignore"):
        logj = np.log(j)
    for k in range(d.size):
        if d[k] > 0:
            Q[:, k] = np.exp(_logconv(f[k] + logj, others[k], rows=j[1:].astype(int)) - logG[1:])
    return X, Q


def mva(
    demands, users: int, think_time: float = 0.0, delay_stations=None, servers=None
) -> MVAResult:
    """Exact single-class MVA for populations 1..users.

    demands: service demand per station (seconds per request, >= 0, at least one > 0).
    users: population N >= 1 (integer).
    think_time: Z >= 0 seconds.
    delay_stations: None, a boolean mask of length K, or indices of infinite-server stations.
    servers: None (all 1) or the number of servers c_k >= 1 of each station (integers;
        ignored for delay stations). Any c_k > 1 switches to the exact convolution path.
    """
    d = np.atleast_1d(np.array(demands, dtype=float, copy=True))
    if d.ndim != 1 or d.size == 0:
        raise ValueError("demands must be a non-empty 1-D sequence")
    if not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ValueError(f"demands must be finite and >= 0, got {d.tolist()}")
    N = count("users", users)
    Z = float(think_time)
    if not math.isfinite(Z) or Z < 0:
        raise ValueError(f"think_time must be finite and >= 0, got {think_time!r}")
    if d.sum() + Z <= 0:
        raise ValueError("at least one demand or the think time must be positive")
    K = d.size
    delay = _delay_mask(delay_stations, K)
    if servers is None:
        cs = np.ones(K, dtype=int)
    else:
        cf = np.atleast_1d(np.asarray(servers, dtype=float))
        if (
            cf.shape != (K,)
            or not np.all(np.isfinite(cf))
            or np.any(cf < 1)
            or np.any(cf != np.round(cf))
        ):
            raise ValueError(
                f"servers must be {K} integers >= 1, got {np.asarray(servers).tolist()}"
            )
        cs = cf.astype(int)
    cs = np.where(delay, 1, cs)
    if np.any((cs > 1) & (d > 0)):
        X, Qk = _convolution(d, cs, delay, N, Z)
        Rk = Qk / X[:, None]
        R = Rk.sum(axis=1)
    else:
        X, R, Rk, Qk = _mva_recursion(d, delay, N, Z)
    U = X[:, None] * (d / cs)[None, :]

    n_arr = np.arange(1, N + 1)
    D = float(d.sum())
    qd = (d / cs)[~delay]
    dmax = float(qd.max()) if qd.size else 0.0
    if dmax > 0:
        bx = np.minimum(n_arr / (D + Z), 1.0 / dmax)
        br = np.maximum(D, n_arr * dmax - Z)
        n_star = (D + Z) / dmax
    else:
        bx = n_arr / (D + Z)
        br = np.full(N, D)
        n_star = math.inf
    return MVAResult(
        demands=_readonly(d),
        think_time=Z,
        delay_stations=_readonly(delay),
        servers=_readonly(cs),
        users=_readonly(n_arr),
        throughput=_readonly(X),
        response_time=_readonly(R),
        cycle_time=_readonly(R + Z),
        residence_times=_readonly(Rk),
        queue_lengths=_readonly(Qk),
        utilization=_readonly(U),
        bound_throughput=_readonly(bx),
        bound_response_time=_readonly(br),
        n_star=float(n_star),
    )

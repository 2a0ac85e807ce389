"""The capacity of the reference M/M/c server (servers/reference/mmc_server.py) for trials of
a given length, by simulating that server's own queue.

The closed form (models.stations.rate_for_slo) answers for the long run. A trial is a few
seconds: it starts with an empty queue, drops its warm-up, and its p99 comes from the requests
sent inside the window. The busy periods near the knee are long and correlated, so a short
window often misses the worst of them and the median trial's p99 is below the long-run p99
(docs/capacity.md, "What the capacity is"): the rate at which the median trial meets the SLO
is a few per cent above the closed form's. The server's service is also not exactly
exponential: each request sleeps an exponential time and the host's timer adds its
overshoot, a near-constant, which makes the service less variable and the queue shorter.

window_capacity simulates exactly that server under Poisson arrivals (c workers, one FIFO,
service = Exp(sleep) + overshoot, a constant overhead outside the queue) in many independent
trials of the given warm-up and length, and finds by bisection the rate at which the median
trial's percentile equals the SLO. The trials are simulated side by side (one numpy row per
trial) with the same random numbers at every rate, so the bisection follows one curve.
"""

from __future__ import annotations

import numpy as np


def _trial_percentiles(
    rate: float,
    gaps: np.ndarray,
    sleeps: np.ndarray,
    *,
    workers: int,
    extra_s: float,
    overhead_s: float,
    warmup_s: float,
    duration_s: float,
    q: float,
) -> np.ndarray:
    """The q-th percentile (s) of the response time in each trial (a row of gaps/sleeps:
    unit-mean exponentials), at `rate`."""
    n_trials, n = gaps.shape
    sent = np.cumsum(gaps / rate, axis=1)
    service = sleeps + extra_s
    free = np.zeros((n_trials, workers))
    done = np.empty_like(sent)
    rows = np.arange(n_trials)
    for i in range(n):
        worker = free.argmin(axis=1)
        start = np.maximum(sent[:, i], free[rows, worker])
        done[:, i] = start + service[:, i]
        free[rows, worker] = done[:, i]
    response = done - sent + overhead_s
    inside = (sent >= warmup_s) & (sent < warmup_s + duration_s)
    return np.nanpercentile(np.where(inside, response, np.nan), q, axis=1)


def window_capacity(
    *,
    workers: int,
    sleep_s: float,
    extra_s: float,
    overhead_s: float,
    q: float,
    slo_s: float,
    warmup_s: float,
    duration_s: float,
    near_rps: float,
    trials: int = 200,
    seed: int = 1,
) -> float:
    """The arrival rate at which the median over `trials` simulated trials of the q-th
    percentile of the response time is slo_s; the root is sought in [0.7, 1.4] x near_rps
    (the closed form's answer is a good `near_rps`). Raises ValueError when it is outside."""
    hi_rate = 1.4 * near_rps
    n = int(hi_rate * (warmup_s + duration_s) * 1.1 + 10 * np.sqrt(hi_rate * duration_s) + 50)
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0, (trials, n))
    sleeps = rng.exponential(sleep_s, (trials, n))

    def median_p(rate: float) -> float:
        return float(
            np.median(
                _trial_percentiles(
                    rate,
                    gaps,
                    sleeps,
                    workers=workers,
                    extra_s=extra_s,
                    overhead_s=overhead_s,
                    warmup_s=warmup_s,
                    duration_s=duration_s,
                    q=q,
                )
            )
        )

    lo, hi = 0.7 * near_rps, hi_rate
    if not median_p(lo) <= slo_s < median_p(hi):
        raise ValueError(f"the median trial meets the SLO outside [{lo:.1f}, {hi:.1f}]/s")
    while hi - lo > 1e-3 * near_rps:
        mid = 0.5 * (lo + hi)
        if median_p(mid) <= slo_s:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)

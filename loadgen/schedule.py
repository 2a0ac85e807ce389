"""Open-loop arrival schedules: intended send times, seeded so a schedule replays exactly."""
from __future__ import annotations

import numpy as np


def arrival_offsets_s(arrivals: str, rate_rps: float, horizon_s: float, seed: int,
                      limit: int = 50_000_000) -> np.ndarray:
    """Intended send offsets in seconds from the start instant, ascending, all < horizon_s.

    poisson: exponential inter-arrival gaps (mean 1/rate); constant: exactly 1/rate apart;
    uniform: gaps drawn from U(0, 2/rate) (same mean, lower variance than Poisson).
    The same (arrivals, rate, horizon, seed) always gives the same array. At most `limit`.
    """
    if rate_rps <= 0 or horizon_s <= 0:
        return np.empty(0)
    expected = rate_rps * horizon_s
    n = int(min(limit, expected + 10 * np.sqrt(expected) + 16))
    rng = np.random.default_rng(seed)
    if arrivals == "constant":
        t = np.arange(n, dtype=np.float64) / rate_rps
    elif arrivals == "poisson":
        t = np.cumsum(rng.exponential(1.0 / rate_rps, n))
    elif arrivals == "uniform":
        t = np.cumsum(rng.uniform(0.0, 2.0 / rate_rps, n))
    else:
        raise ValueError(f"unknown arrivals {arrivals!r}")
    return t[t < horizon_s]

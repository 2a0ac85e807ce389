"""Percentiles of raw values and their confidence intervals, distribution-free: the exact
order statistic (the inverted CDF: always an observed value), and the interval between two
order statistics whose ranks come from the binomial law of the count below the quantile
(ci_ranks, binom_ppf; median_ci for a small sample such as one value per trial).

stats.py builds a trial's row with these; scipy loads only on first use (scipy.special for a
trial's CI ranks, scipy.stats only for median_ci).
"""

from __future__ import annotations

import math

import numpy as np


def _binom():
    """scipy's binomial law, imported on first use: scipy.stats adds ~60 MB to a process and
    ~1 s to its start, and only median_ci needs it."""
    from scipy.stats import binom  # here, not at the top: ~60 MB of RSS, rarely needed

    return binom


def percentile(values: np.ndarray, q: float) -> float:
    """Exact q-th percentile (0..100) of raw values: the smallest observed value with at
    least q% of the sample at or below it (the inverted CDF). NaN when empty."""
    n = values.size
    if n == 0:
        return math.nan
    k = min(n, max(1, math.ceil(round(q / 100.0 * n, 9))))  # rank, 1-based
    return float(np.partition(values, k - 1)[k - 1])


def percentile_ci(values: np.ndarray, q: float, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the q-th percentile from order statistics
    (ci_ranks); returns (low, high) as observed values. NaN when the sample is too small to
    bound that percentile."""
    ranks = ci_ranks(values.size, q, confidence)
    if ranks is None:
        return math.nan, math.nan
    part = np.partition(values, ranks)
    return float(part[ranks[0]]), float(part[ranks[1]])


def median_ci(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median of a small sample (e.g. one value
    per trial): [x(k), x(n+1-k)] for the largest k whose coverage, 1 - 2 P(Bin(n, 1/2) < k),
    is at least `confidence`. NaN values are ignored; (NaN, NaN) when the sample is too small
    to reach the confidence (fewer than 6 values at 95%)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    x = x[np.isfinite(x)]
    n = x.size
    if n == 0:
        return math.nan, math.nan
    binom = _binom()
    below = np.flatnonzero(binom.cdf(np.arange(n), n, 0.5) <= (1.0 - confidence) / 2)
    if below.size == 0:
        return math.nan, math.nan
    k = int(below[-1]) + 1
    return float(x[k - 1]), float(x[n - k])


def ci_ranks(n: int, q: float, confidence: float = 0.95) -> tuple[int, int] | None:
    """0-based ranks of the distribution-free CI bounds of the q-th percentile (None when the
    sample is too small to bound it): the binomial law of the count below the quantile."""
    if n == 0:
        return None
    p, alpha = q / 100.0, 1.0 - confidence
    lo, hi = binom_ppf(alpha / 2, n, p), binom_ppf(1 - alpha / 2, n, p)
    return None if lo < 0 or hi >= n else (lo, hi)


def binom_ppf(q: float, n: int, p: float) -> int:
    """scipy.stats.binom.ppf(q, n, p) for 0 < q < 1: the smallest k with P(Bin(n, p) <= k) >= q,
    from scipy.special's binomial CDF. Every trial's row needs it, and scipy.special imports
    in ~0.2 s where scipy.stats takes ~1 s. Where the CDF equals q exactly (q = 0.5, n odd)
    the two may differ by one: scipy.stats itself is not consistent there (n 7 gives 3, n 35
    gives 18). tests/loadgen/test_loadgen_units.py checks the tails the CIs use."""
    from scipy import special  # here: only the CI ranks of a trial's percentiles need it

    k = min(max(int(math.ceil(special.bdtrik(q, n, p))), 0), n)
    while k > 0 and special.bdtr(k - 1, n, p) >= q:
        k -= 1
    while k < n and special.bdtr(k, n, p) < q:
        k += 1
    return k

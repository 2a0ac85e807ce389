"""Tests across trials: each trial is one observation of a metric (its throughput, its p50).

Requests within a run are not independent (a slow second slows all its requests, a slow run
all its seconds), so tests over requests call every wobble significant. Trials are the unit
that repeats: a fresh server, a fresh schedule. With the few trials a run has, the tests here
are exact and distribution-free:

- mann_whitney_p: the two-sided exact Mann-Whitney U test of "same distribution";
- min_attainable_p: the smallest p-value it can give with n1 and n2 trials (2 / C(n1+n2, n1));
  with 3 and 3 trials it is 0.1, so nothing can be significant at 0.05;
- holm: Holm-Bonferroni adjustment across cells and metrics;
- median_change_ci: a bootstrap interval of the change in the median trial (secondary).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

BOOTSTRAP_DRAWS = 4000


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of the Mann-Whitney U test (exact without ties). 1.0 when every
    value is the same; NaN when a side is empty."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size == 0 or b.size == 0:
        return math.nan
    if np.ptp(np.concatenate([a, b])) == 0:
        return 1.0
    return float(sps.mannwhitneyu(a, b, alternative="two-sided", method="auto").pvalue)


def min_attainable_p(n1: int, n2: int) -> float:
    """The smallest two-sided p-value the exact Mann-Whitney test gives with n1 and n2 values
    (the two sides entirely apart)."""
    if n1 < 1 or n2 < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def trials_needed(alpha: float, tests: int) -> int:
    """The fewest trials per side with which the test can reach alpha / tests (Holm's first
    step over `tests` tests)."""
    n = 1
    while min_attainable_p(n, n) > alpha / max(1, tests) and n < 1000:
        n += 1
    return n


def holm(pvalues: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (NaN stays NaN and is not counted)."""
    p = np.asarray(pvalues, dtype=float)
    ok = np.flatnonzero(~np.isnan(p))
    out = np.full(p.shape, math.nan)
    m = ok.size
    running = 0.0
    for rank, i in enumerate(ok[np.argsort(p[ok], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return list(out)


def median_change_ci(
    base: np.ndarray,
    cand: np.ndarray,
    rng: np.random.Generator,
    confidence: float = 0.95,
    draws: int = BOOTSTRAP_DRAWS,
) -> tuple[float, float]:
    """Bootstrap interval of median(cand) / median(base) - 1, resampling trials within each
    side. With a handful of trials it is too narrow: the test decides, not this."""
    base, cand = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    if base.size == 0 or cand.size == 0:
        return math.nan, math.nan
    mb = np.median(base[rng.integers(0, base.size, (draws, base.size))], axis=1)
    mc = np.median(cand[rng.integers(0, cand.size, (draws, cand.size))], axis=1)
    rel = mc[mb > 0] / mb[mb > 0] - 1
    if rel.size == 0:
        return math.nan, math.nan
    a = (1 - confidence) / 2
    return float(np.quantile(rel, a)), float(np.quantile(rel, 1 - a))

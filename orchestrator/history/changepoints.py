"""Change points of one series: where the level of a metric moved, run by run.

The method is E-divisive means (Matteson and James, "A Nonparametric Approach for Multiple
Change Point Analysis of Multivariate Data", JASA 2014), the detector Apache Otava (formerly
Hunter; Fleming et al., ICPE 2023) uses, implemented here because the library cannot be a
dependency: apache-otava 0.8 pins numpy 2.2 and scipy < 1.17 (perfctl pins 2.4 and 1.17) and
brings BigQuery, Slack and Grafana clients; ruptures offers the search (Binseg, Pelt) but no
significance test, which is the part that decides. What is perfctl's own:

- Trial-level data. A series is a list of runs, each the values of its usable trials. The
  energy statistic is computed over the trials, with splits allowed only between runs, so a
  run whose trials spread widely counts as the uncertain evidence it is.
- Runs are the unit of the permutation test. Trials of one run share its host, its build and
  its moment, so they are not exchangeable one by one; the test permutes whole runs (a block
  permutation) and counts how often the best split of the permuted series reaches the
  observed one: p = (1 + exceedances) / (permutations + 1).
- Binary segmentation, then a merge pass as Otava's: each change point is tested again
  between its neighbours, and the weakest that fails is dropped until all pass.
- A single outlier run is never a change point, by two guards: every segment holds at least
  `min_runs` runs (3 by default), so no split can isolate one run; and a change point must
  move the median, not only the mean: the bootstrap interval of the ratio of medians
  (after / before, runs resampled within each side) must exclude 1. One outlier among three
  or more runs does not move a median, however far out it lies.

Each change point carries the ratio of medians with its 95% bootstrap interval, the index of
the first run after it, and its p-value. Runs must be given oldest first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_RUNS = 3
ALPHA = 0.01
PERMUTATIONS = 499
BOOTSTRAP = 400


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first run after the change (0-based position in the series)
    p_value: float
    ratio: float  # median after / median before (trial values of the two segments)
    ratio_low: float  # 95% bootstrap interval of the ratio
    ratio_high: float
    before: tuple[int, int]  # the runs compared: [start, index) and [index, stop)
    after: tuple[int, int]

    @property
    def change(self) -> float:
        return self.ratio - 1.0


class _Series:
    """The runs' trial values (scaled by the series' median) and the run-by-run sums of
    trial distances, from which the statistic of any order of runs follows."""

    def __init__(self, runs: list[np.ndarray]) -> None:
        self.runs = [np.asarray(r, dtype=float) for r in runs]
        self.sizes = np.array([r.size for r in self.runs], dtype=float)
        # ranks, not values: the energy of an outlier is that of the largest rank, however far
        # out it lies (the ratio of medians is computed on the values)
        x = _ranks(np.concatenate(self.runs)) / sum(r.size for r in self.runs)
        owner = np.repeat(np.arange(len(self.runs)), self.sizes.astype(int))
        d = np.abs(x[:, None] - x[None, :])
        # dist[i, j]: the sum of |x_a - x_b| over trial a of run i and trial b of run j
        per_row = np.zeros((len(self.runs), d.shape[1]))
        np.add.at(per_row, owner, d)
        self.dist = np.zeros((len(self.runs), len(self.runs)))
        np.add.at(self.dist.T, owner, per_row.T)


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties given their average rank (scipy.stats.rankdata's default, without
    the second scipy costs `history check` to import)."""
    s = np.sort(x)
    return (np.searchsorted(s, x, "left") + np.searchsorted(s, x, "right") + 1) / 2.0


def _q(dist: np.ndarray, sizes: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """The E-divisive statistic Q (alpha = 1) of splitting each order of runs after its
    first k runs, for every k in ks. dist: (P, R, R) run-pair distance sums in P orders;
    sizes: (P, R) trials per run in those orders. Returns (P, len(ks))."""
    p, r, _ = dist.shape
    s = np.zeros((p, r + 1, r + 1))
    s[:, 1:, 1:] = dist.cumsum(1).cumsum(2)
    c = np.concatenate([np.zeros((p, 1)), sizes.cumsum(1)], axis=1)
    n = c[:, r][:, None]
    m = c[:, ks]
    rest = n - m
    skk = s[:, ks, ks]
    between = s[:, ks, r] - skk
    within_r = s[:, r, r][:, None] - s[:, ks, r] - s[:, r, ks] + skk
    with np.errstate(divide="ignore", invalid="ignore"):
        wl = np.where(m > 1, skk / (m * (m - 1.0)), 0.0)
        wr = np.where(rest > 1, within_r / (rest * (rest - 1.0)), 0.0)
        e = 2.0 * between / (m * rest) - wl - wr
    return m * rest / n * e


def _orders(series: _Series, a: int, b: int, rng, permutations: int):
    """The observed order of runs [a, b) first, then `permutations` random ones, as
    (dist, sizes) chunks small enough to keep memory flat on long series (about 32 MB)."""
    order = np.arange(a, b)
    per_chunk = max(1, 4_000_000 // (len(order) ** 2))
    perms = [order, *(rng.permutation(order) for _ in range(permutations))]
    for i in range(0, len(perms), per_chunk):
        chunk = np.vstack(perms[i : i + per_chunk])
        yield series.dist[chunk[:, :, None], chunk[:, None, :]], series.sizes[chunk]


def _best_split(series: _Series, a: int, b: int, min_runs: int, rng, permutations: int):
    """The best split of runs [a, b) (the first run after it) and its permutation p-value:
    how often a random order of the runs has a best split as strong."""
    ks = np.arange(min_runs, b - a - min_runs + 1)
    if ks.size == 0:
        return None, 1.0
    best = observed = None
    exceed = 0
    for dist, sizes in _orders(series, a, b, rng, permutations):
        q = _q(dist, sizes, ks)
        if best is None:
            best = int(np.argmax(q[0]))
            observed = q[0, best]
            q = q[1:]
        exceed += int(np.sum(q.max(axis=1) >= observed))
    return a + int(ks[best]), (1 + exceed) / (permutations + 1)


def _split_p(series: _Series, a: int, k: int, b: int, rng, permutations: int) -> float:
    """The permutation p-value of the fixed split k of runs [a, b)."""
    observed = None
    exceed = 0
    for dist, sizes in _orders(series, a, b, rng, permutations):
        q = _q(dist, sizes, np.array([k - a]))[:, 0]
        if observed is None:
            observed, q = q[0], q[1:]
        exceed += int(np.sum(q >= observed))
    return (1 + exceed) / (permutations + 1)


def ratio_interval(
    before: list[np.ndarray], after: list[np.ndarray], rng, n: int = BOOTSTRAP
) -> tuple[float, float, float]:
    """median(after) / median(before) over the trial values, and its 95% percentile
    bootstrap interval with runs resampled within each side."""
    b_all, a_all = np.concatenate(before), np.concatenate(after)
    mb = np.median(b_all)
    ratio = np.median(a_all) / mb if mb != 0 else np.nan
    ratios = np.empty(n)
    for i in range(n):
        bs = np.concatenate([before[j] for j in rng.integers(0, len(before), len(before))])
        as_ = np.concatenate([after[j] for j in rng.integers(0, len(after), len(after))])
        m = np.median(bs)
        ratios[i] = np.median(as_) / m if m != 0 else np.nan
    if not np.isfinite(ratios).any():
        return float(ratio), np.nan, np.nan
    lo, hi = np.nanpercentile(ratios[np.isfinite(ratios)], [2.5, 97.5])
    return float(ratio), float(lo), float(hi)


def detect(
    runs: list,
    min_runs: int = MIN_RUNS,
    alpha: float = ALPHA,
    permutations: int = PERMUTATIONS,
    seed: int = 29,
) -> list[ChangePoint]:
    """The change points of a series of runs (each an array of its trial values, oldest run
    first), each significant at `alpha` and moving the median (module docstring)."""
    runs = [np.asarray(r, dtype=float) for r in runs]
    runs = [r[np.isfinite(r)] for r in runs]
    runs = [r for r in runs if r.size]
    n = len(runs)
    if n < 2 * min_runs:
        return []
    rng = np.random.default_rng(seed)
    series = _Series(runs)
    found: list[int] = []
    todo = [(0, n)]
    while todo:
        a, b = todo.pop()
        if b - a < 2 * min_runs:
            continue
        k, p = _best_split(series, a, b, min_runs, rng, permutations)
        if k is not None and p < alpha:
            found.append(k)
            todo += [(a, k), (k, b)]
    return _merge(series, sorted(found), alpha, rng, permutations)


def _merge(series: _Series, cps: list[int], alpha: float, rng, permutations: int):
    """Test each change point between its neighbours; drop the weakest failing one until
    every one passes (significant, and its ratio's interval excludes 1)."""
    n = len(series.runs)
    while cps:
        stats = []
        for i, k in enumerate(cps):
            a = cps[i - 1] if i else 0
            b = cps[i + 1] if i + 1 < len(cps) else n
            p = _split_p(series, a, k, b, rng, permutations)
            ratio, lo, hi = ratio_interval(series.runs[a:k], series.runs[k:b], rng)
            # a ratio that is not finite (a median of 0 before: an error rate) sizes nothing
            finite = np.isfinite([ratio, lo, hi]).all()
            passed = p < alpha and finite and not lo <= 1.0 <= hi
            stats.append((passed, p, ChangePoint(k, p, ratio, lo, hi, (a, k), (k, b))))
        failing = [(p, i) for i, (ok, p, _) in enumerate(stats) if not ok]
        if not failing:
            return [cp for _, _, cp in stats]
        del cps[max(failing)[1]]
    return []

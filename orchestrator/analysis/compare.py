"""`perfctl compare BASE CAND`: a regression check between two runs, cell by cell.

Cells are matched by cell_id; cells left over on both sides are then matched by their axis
values (so `--set workload.params.sleep_us=2000`, which changes every cell_id, still pairs
the cells up). Each side uses a cell's valid trials (all of them when none is valid) and the
requests intended in the measured window that completed without error.

Per cell and metric (throughput, p50, p99) the change is (cand - base) / base with a 95%
interval:
- p50, p99: bootstrap over requests. The bootstrap distribution of an order statistic is
  exact and cheap: the k-th smallest of n draws from the sample is the sample's
  ceil(n U)-th value with U ~ Beta(k, n + 1 - k), so no resampling loop is needed.
- throughput: bootstrap of the ratio of means over trials when both sides have >= 2 trials,
  otherwise over the per-second throughput of the measured window (timeline.parquet; a
  second counts when at least half of it lies inside the window).

Significance. Requests within one run are not independent (a slow second slows all its
requests), so a test on requests alone calls every run-to-run wobble significant. A change
therefore counts only when two tests agree (an intersection-union test: its p-value is the
larger of the two):
- p50: Mann-Whitney U on the raw latencies, and Welch's t on log per-second p50;
- p99: the bootstrap interval excludes zero, and Welch's t on log per-second p99;
- throughput: Welch's t on the units above (trials or seconds).
Holm-Bonferroni then adjusts each metric's p-values across cells. A cell is `slower` when a
metric got significantly worse by more than the tolerance, `faster` when one got
significantly better by more than the tolerance and none worse, else `no significant change`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as sps

from .. import results
from .views import analysis_trials, cell_labels, measured_requests, trial_summary

BOOTSTRAP_DRAWS = 4000
CONFIDENCE = 0.95
METRICS = ("throughput", "p50", "p99")
WORSE_IF_HIGHER = {"throughput": False, "p50": True, "p99": True}


@dataclass
class Side:
    """One run's data for one cell: latencies [ms], trial throughputs, per-second units."""

    latency_ms: np.ndarray
    trial_rps: np.ndarray
    second_rps: np.ndarray
    second_p50_ms: np.ndarray
    second_p99_ms: np.ndarray
    errors: int = 0
    requests: int = 0


@dataclass
class MetricChange:
    base: float
    cand: float
    change: float              # (cand - base) / base
    ci: tuple[float, float]    # of change
    p: float                   # unadjusted (intersection-union) p-value
    p_holm: float = math.nan
    significant: bool = False


@dataclass
class CellComparison:
    label: str
    base_id: str
    cand_id: str
    metrics: dict[str, MetricChange] = field(default_factory=dict)
    verdict: str = "no significant change"
    notes: list[str] = field(default_factory=list)


def _quantile_sorted(x: np.ndarray, q: float) -> float:
    k = min(x.size, max(1, math.ceil(round(q * x.size, 9))))
    return float(x[k - 1])


def bootstrap_quantile(sorted_x: np.ndarray, q: float, draws: int,
                       rng: np.random.Generator) -> np.ndarray:
    """`draws` bootstrap replicates of the q-quantile (inverted CDF) of a sorted sample."""
    n = sorted_x.size
    k = min(n, max(1, math.ceil(round(q * n, 9))))
    u = rng.beta(k, n + 1 - k, size=draws)
    return sorted_x[np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)]


def bootstrap_mean(x: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, x.size, size=(draws, x.size))
    return x[idx].mean(axis=1)


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


def _welch_log(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a[np.isfinite(a) & (a > 0)], b[np.isfinite(b) & (b > 0)]
    return _welch(np.log(a), np.log(b))


def _welch(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < 2 or b.size < 2:
        return math.nan
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 0.0 if a[0] != b[0] else 1.0
    return float(sps.ttest_ind(a, b, equal_var=False).pvalue)


def _interval(samples: np.ndarray) -> tuple[float, float]:
    s = samples[np.isfinite(samples)]
    if s.size == 0:
        return math.nan, math.nan
    a = (1 - CONFIDENCE) / 2
    return float(np.quantile(s, a)), float(np.quantile(s, 1 - a))


def _seconds(run: results.Run, trials: pd.DataFrame, cell_id: str) -> pd.DataFrame:
    """Timeline bins of the cell's trials at least half inside the measured window."""
    tl = run.timeline
    if tl.empty:
        return tl
    out = []
    for k in trials.loc[trials["cell_id"] == cell_id, "trial"]:
        g = tl[(tl["cell_id"] == cell_id) & (tl["trial"] == k)]
        s = trial_summary(run, cell_id, k)
        if s is not None:
            lo = (s["measure_start_ns"] - s["start_ns"]) / 1e9
            hi = (s["measure_end_ns"] - s["start_ns"]) / 1e9
            mid = g["t_s"] + 0.5
            g = g[(mid >= lo - 1e-9) & (mid <= hi + 1e-9)]
        else:
            g = g[~g["warmup"].astype(bool)]
        out.append(g)
    return pd.concat(out) if out else tl.iloc[0:0]


def _side(run: results.Run, trials: pd.DataFrame, reqs: pd.DataFrame, cell_id: str) -> Side:
    t = trials[trials["cell_id"] == cell_id]
    lat = np.sort(reqs.loc[reqs["cell_id"] == cell_id, "latency_ns"].to_numpy(dtype=float) / 1e6)
    sec = _seconds(run, trials, cell_id)
    col = (lambda c: sec[c].to_numpy(dtype=float)) if not sec.empty else (lambda c: np.array([]))
    return Side(lat, t["throughput_rps"].to_numpy(dtype=float), col("throughput_rps"),
                col("latency_p50_ms"), col("latency_p99_ms"),
                int(t["errors"].sum()) if "errors" in t else 0,
                int(t["requests"].sum()) if "requests" in t else 0)


def _compare_cell(b: Side, c: Side, rng: np.random.Generator) -> dict[str, MetricChange]:
    out = {}
    # throughput: trials when both sides have >= 2, else seconds
    by_trials = b.trial_rps.size >= 2 and c.trial_rps.size >= 2
    ub, uc = (b.trial_rps, c.trial_rps) if by_trials else (b.second_rps, c.second_rps)
    tb, tc = float(np.mean(b.trial_rps)), float(np.mean(c.trial_rps))
    if ub.size and uc.size and tb > 0:
        ratio = bootstrap_mean(uc, BOOTSTRAP_DRAWS, rng) / bootstrap_mean(ub, BOOTSTRAP_DRAWS, rng)
        ci = _interval(ratio - 1)
    else:
        ci = (math.nan, math.nan)
    out["throughput"] = MetricChange(tb, tc, tc / tb - 1 if tb > 0 else math.nan, ci,
                                     _welch(ub, uc))
    for name, q, sec_b, sec_c in (("p50", 0.50, b.second_p50_ms, c.second_p50_ms),
                                  ("p99", 0.99, b.second_p99_ms, c.second_p99_ms)):
        if b.latency_ms.size == 0 or c.latency_ms.size == 0:
            out[name] = MetricChange(math.nan, math.nan, math.nan, (math.nan, math.nan), math.nan)
            continue
        vb, vc = _quantile_sorted(b.latency_ms, q), _quantile_sorted(c.latency_ms, q)
        rb = bootstrap_quantile(b.latency_ms, q, BOOTSTRAP_DRAWS, rng)
        rc = bootstrap_quantile(c.latency_ms, q, BOOTSTRAP_DRAWS, rng)
        rel = rc / rb - 1
        ci = _interval(rel)
        if name == "p50":
            p_req = float(sps.mannwhitneyu(b.latency_ms, c.latency_ms,
                                           alternative="two-sided").pvalue)
        else:   # two-sided bootstrap p-value of "no change"
            p_req = min(1.0, 2 * min(np.mean(rel <= 0), np.mean(rel >= 0)) + 1 / BOOTSTRAP_DRAWS)
        p_unit = _welch_log(sec_b, sec_c)
        out[name] = MetricChange(vb, vc, vc / vb - 1, ci,
                                 max(p_req, p_unit) if not math.isnan(p_unit) else math.nan)
    return out


def _pairs(base: results.Run, cand: results.Run) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(base_id, cand_id, label) pairs and notes about cells only on one side."""
    bl, cl = cell_labels(base), cell_labels(cand)
    b_ids = list(dict.fromkeys(base.trials["cell_id"]))
    c_ids = list(dict.fromkeys(cand.trials["cell_id"]))
    pairs = [(i, i, bl.get(i, i)) for i in b_ids if i in c_ids]
    b_left = [i for i in b_ids if i not in c_ids]
    c_left = [i for i in c_ids if i not in b_ids]
    by_label = {cl.get(i, i): i for i in c_left}
    notes = []
    for i in b_left:
        lab = bl.get(i, i)
        if lab in by_label and lab != i:
            pairs.append((i, by_label.pop(lab), lab))
        else:
            notes.append(f"only in base: {lab} ({i})")
    notes += [f"only in candidate: {lab} ({i})" for lab, i in by_label.items()]
    return pairs, notes


def compare_runs(base_dir, cand_dir, tolerance: float = 0.05, alpha: float = 0.05,
                 seed: int = 1) -> tuple[list[CellComparison], list[str]]:
    """Compare two run directories (see the module docstring). Returns the per-cell
    comparisons and notes (unmatched cells, cells measured only by invalid trials)."""
    base, cand = results.load(base_dir), results.load(cand_dir)
    bt, b_fallback = analysis_trials(base.trials)
    ct, c_fallback = analysis_trials(cand.trials)
    breq, creq = measured_requests(base, bt), measured_requests(cand, ct)
    pairs, notes = _pairs(base, cand)
    rng = np.random.default_rng(seed)
    cells = []
    for b_id, c_id, label in pairs:
        cc = CellComparison(label, b_id, c_id,
                            _compare_cell(_side(base, bt, breq, b_id),
                                          _side(cand, ct, creq, c_id), rng))
        if b_id in b_fallback or c_id in c_fallback:
            cc.notes.append("no valid trial: measured from invalid trials")
        cells.append(cc)
    for name in METRICS:
        adj = holm([c.metrics[name].p for c in cells])
        for c, p in zip(cells, adj):
            m = c.metrics[name]
            m.p_holm = p
            m.significant = bool(p < alpha)
    for c in cells:
        worse, better = [], []
        for name in METRICS:
            m = c.metrics[name]
            if not m.significant or math.isnan(m.change):
                continue
            up = m.change if WORSE_IF_HIGHER[name] else -m.change
            if up > tolerance:
                worse.append(name)
            elif -up > tolerance:
                better.append(name)
            else:
                c.notes.append(f"{name} changed significantly but within ±{tolerance:.0%}")
        if worse:
            c.verdict = "slower"
            c.notes.insert(0, "worse: " + ", ".join(worse))
        elif better:
            c.verdict = "faster"
            c.notes.insert(0, "better: " + ", ".join(better))
    return cells, notes


def regressed(cells: list[CellComparison]) -> bool:
    """True when any cell is significantly slower by more than the tolerance."""
    return any(c.verdict == "slower" for c in cells)

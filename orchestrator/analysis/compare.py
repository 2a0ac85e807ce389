"""`perfctl compare BASE CAND`: a regression check between two runs, cell by cell, with each
trial as one observation.

Cells are matched by cell_id; cells left over on both sides are then matched by their axis
values (so `--set workload.params.sleep_us=2000`, which changes every cell_id, still pairs
the cells up). No cell in common, or a side without a single request, is bad input (exit 2).

Which trials: each side's usable trials of the cell: valid (the measurement worked) and quiet
(the host left it alone, measure/noise.py). Invalid trials never count; noisy ones are left out,
unless include_noisy. A cell never falls back to invalid trials. Each side that dropped some
says so in one note: "base: 3 of 5 trials used; 2 invalid (trials 2, 4): send lateness x2",
and the cell's `left_out` lines give each reason once with its trials' figures, and its fix.

Per cell and metric (throughput_rps, latency_p50_ms, latency_p99_ms of each trial):
- change: median of the candidate's trials / median of the base's - 1, with a bootstrap
  interval over trials (secondary: with few trials it is too narrow);
- p: the two-sided exact Mann-Whitney U test across trials (trial_tests.py); Holm-Bonferroni
  then adjusts all cells' and metrics' p-values together.
A cell is `slower` when a metric got significantly worse by more than the tolerance, `faster`
when one got significantly better by more than the tolerance and none worse, `inconclusive`
when a side has fewer than MIN_TRIALS usable trials or so few that the test cannot reach
significance after Holm (then nothing can be concluded either way), else `no significant
change`. A change far larger than the host's noise is never inconclusive: when even the closest
usable trials of the two sides (one a side suffices) are further apart than FAR_BEYOND_NOISE
(6) times the host's noise and than the tolerance, the cell is `slower` or `faster` whatever
the test said. The noise is one trial's relative spread on this host: from the calibration
when there is one (trial-to-trial and run-to-run together), else the spread of the trials
within the cells of the two runs. Request-level figures (p50 and p99 of the pooled requests, from the trials'
HdrHistograms added up) stay as secondary detail.

A cell whose workload is a mix (two endpoints or more on both sides, run.endpoints) is also
compared endpoint by endpoint: the same three metrics read from each usable trial's
endpoints.csv row, the same tests and verdicts (an endpoint significantly slower is a
regression), Holm-adjusted in a family of their own so that a mix never moves the verdicts of
the cells. Endpoints are matched by name.

Runs with `search:` compare their capacities instead (capacity_compare.py): a search's
probes vary the load, so their trial metrics are not comparable, and a search run is never
compared with a run without one.

With a host calibration (calibration.py), a significant change, or one past the tolerance,
that is smaller than what the host resolves at the cell's trial count is named as such. The
note never changes the verdict: the calibration measured a reference experiment, not this one.

What a comparison returns is in comparison.py; the host's noise and resolution, and the pooled
requests' detail, in compare_noise.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .. import results
from ..errors import PerfctlError
from . import calibration as calib
from .capacity_compare import compare_capacities
from .compare_noise import (  # noqa: F401  (compare.FAR_BEYOND_NOISE, host_noise: callers')
    FAR_BEYOND_NOISE,
    _beyond_noise,
    _pooled_detail,
    _resolution_notes,
    _same_host,
    host_noise,
)
from .comparison import (  # noqa: F401  (compare.Comparison, METRICS, ...: callers' names)
    METRICS,
    MIN_TRIALS,
    POOLED_QUANTILES,
    VERDICT_EXIT,
    WORSE_IF_HIGHER,
    CellComparison,
    Comparison,
    MetricChange,
    inconclusive,
    regressed,
)
from .histograms import has_distributions
from .trial_tests import holm, mann_whitney_p, median_change_ci, min_attainable_p, trials_needed
from .views import cell_labels, left_out_lines, usable_trials, usage_note


def _pairs(base: results.Run, cand: results.Run) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(base_id, cand_id, label) pairs and notes about cells only on one side."""
    bl, cl = cell_labels(base), cell_labels(cand)
    b_ids = list(dict.fromkeys(base.trials["cell_id"])) if not base.trials.empty else []
    c_ids = list(dict.fromkeys(cand.trials["cell_id"])) if not cand.trials.empty else []
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


def _no_common_cell(base: results.Run, cand: results.Run) -> PerfctlError:
    def cells(run):
        labels = list(cell_labels(run).values()) or list(
            dict.fromkeys(run.trials.get("cell_id", []))
        )
        return "; ".join(labels[:4]) + (" ..." if len(labels) > 4 else "") or "none"

    return PerfctlError(
        f"{base.path} and {cand.path} share no cell, so there is nothing to compare (base: "
        f"{cells(base)}; candidate: {cells(cand)}). Cells are matched by cell_id, then by "
        "their axis values. Fix: compare two runs of the same experiment, with the same "
        "matrix axes and values."
    )


def _check_requests(run: results.Run, cell_ids: set[str], side: str) -> None:
    t = run.trials[run.trials["cell_id"].isin(cell_ids)]
    recorded = pd.to_numeric(t.get("requests", pd.Series(dtype=float)), errors="coerce").sum()
    if recorded > 0 and has_distributions(run, t):
        return
    why = (
        "its trials record no request"
        if recorded <= 0
        else "neither digest.json nor requests.parquet under cells/ (deleted, or never written)"
    )
    raise PerfctlError(
        f"{run.path} (the {side}) has no requests in the cells to compare: {why}. Every trial "
        "of it failed before load ran, or its raw data is gone, so there is nothing to "
        f"measure. Fix: look at {run.path / 'trials.csv'} (invalid_reasons) and the trials' "
        "loadgen.log and server.log, then run the experiment again."
    )


def _compare_cell(
    cc: CellComparison, bt: pd.DataFrame, ct: pd.DataFrame, rng: np.random.Generator
) -> None:
    for name, col in METRICS.items():
        b = pd.to_numeric(bt.get(col, pd.Series(dtype=float)), errors="coerce").dropna().to_numpy()
        c = pd.to_numeric(ct.get(col, pd.Series(dtype=float)), errors="coerce").dropna().to_numpy()
        mb = float(np.median(b)) if b.size else math.nan
        mc = float(np.median(c)) if c.size else math.nan
        change = mc / mb - 1 if mb == mb and mc == mc and mb > 0 else math.nan
        cc.metrics[name] = MetricChange(
            mb, mc, change, median_change_ci(b, c, rng), mann_whitney_p(b, c)
        )


def _verdict(cc: CellComparison, tolerance: float) -> None:
    worse, better = [], []
    for name, m in cc.metrics.items():
        if not m.significant or math.isnan(m.change):
            continue
        up = m.change if WORSE_IF_HIGHER[name] else -m.change
        if up > tolerance:
            worse.append(name)
        elif -up > tolerance:
            better.append(name)
        else:
            cc.notes.append(f"{name} changed significantly but within ±{tolerance:.0%}")
    if worse:
        cc.verdict = "slower"
        cc.notes.insert(0, "worse: " + ", ".join(worse))
    elif better:
        cc.verdict = "faster"
        cc.notes.insert(0, "better: " + ", ".join(better))


def compare_runs(
    base_dir,
    cand_dir,
    tolerance: float = 0.05,
    alpha: float = 0.05,
    seed: int = 1,
    include_noisy: bool = False,
    calibration: Path | None = None,
) -> Comparison:
    """Compare two run directories (see the module docstring). PerfctlError when they share
    no cell or a side has no requests."""
    base, cand = results.load(base_dir), results.load(cand_dir)
    pairs, notes = _pairs(base, cand)
    if not pairs:
        raise _no_common_cell(base, cand)
    b_cap, c_cap = results.read_capacity(base.path), results.read_capacity(cand.path)
    if (b_cap is None) != (c_cap is None):
        searched = base.path if b_cap is not None else cand.path
        raise PerfctlError(
            f"{searched} is a capacity search (capacity.json) and the other run is not, so "
            "their trials measure different things (probes at changing loads against fixed "
            "loads). Fix: compare two search runs, or two runs without search:."
        )
    if b_cap is not None:  # a search's probes vary the load: only the capacities compare
        caps = compare_capacities(b_cap, c_cap, pairs, tolerance, alpha)
        return Comparison([], notes, None, caps)
    _check_requests(base, {b for b, _, _ in pairs}, "base")
    _check_requests(cand, {c for _, c, _ in pairs}, "candidate")
    bt, ct = usable_trials(base.trials, include_noisy), usable_trials(cand.trials, include_noisy)
    rng = np.random.default_rng(seed)
    cells = []
    for b_id, c_id, label in pairs:
        cc = CellComparison(label, b_id, c_id)
        b, c = bt[bt["cell_id"] == b_id], ct[ct["cell_id"] == c_id]
        cc.n_base, cc.n_cand = len(b), len(c)
        for side, run, cid, n in (("base", base, b_id, len(b)), ("candidate", cand, c_id, len(c))):
            every = run.trials[run.trials["cell_id"] == cid]
            if n < len(every):
                cc.notes.append(f"{side}: {usage_note(every, include_noisy)}")
                cc.left_out += [
                    line if line.startswith(" ") else f"{side}: {line}"
                    for line in left_out_lines(every, include_noisy)
                ]
        _compare_cell(cc, b, c, rng)
        cells.append(cc)
    tests = _decide(cells, alpha, tolerance)
    # the endpoints of mixes are a Holm family of their own: they never move a cell's verdict
    endpoints = _endpoint_cells(base, cand, pairs, bt, ct, rng)
    _decide(endpoints, alpha, tolerance)
    cells += endpoints
    used = calib.find(calibration, base.path)
    doc = calib.load(used) if used is not None else None
    if doc is not None and not _same_host(doc, base):
        for c in cells:
            c.notes.append(
                f"calibration is of host {doc['host']['hostname']}, not "
                f"{base.info['host']['hostname']}: not used"
            )
        doc = None
    noise = host_noise(doc, bt, ct)
    whole = [c for c in cells if not c.endpoint]  # the trial-level notes read whole cells
    for c in whole:
        if c.verdict in ("inconclusive", "no significant change"):
            _beyond_noise(c, bt, ct, noise, tolerance)
    _pooled_detail(base, cand, bt, ct, whole)
    if used is not None:
        if doc is not None:
            _resolution_notes(doc, whole, alpha, max(tests, len(METRICS)), tolerance)
        notes.append(f"host calibration: {used}")
    return Comparison(cells, notes, used)


def _decide(cells: list[CellComparison], alpha: float, tolerance: float) -> int:
    """Verdicts for one Holm family of comparisons; how many tests the family holds."""
    decidable = [c for c in cells if min(c.n_base, c.n_cand) >= MIN_TRIALS]
    tests = len(decidable) * len(METRICS)
    for c in cells:
        n = min(c.n_base, c.n_cand)
        if n < MIN_TRIALS:
            c.verdict = "inconclusive"
            c.notes.insert(
                0,
                f"{c.n_base} usable trial(s) in base, {c.n_cand} in candidate: "
                f"at least {MIN_TRIALS} each are needed",
            )
        elif min_attainable_p(c.n_base, c.n_cand) > alpha / tests:
            c.verdict = "inconclusive"
            c.notes.insert(
                0,
                f"with {c.n_base} and {c.n_cand} trials no p-value can fall "
                f"below {alpha:g}/{tests} (Holm over {tests} tests): run "
                f"{trials_needed(alpha, tests)}+ usable trials per side",
            )
    judged = [c for c in cells if c.verdict != "inconclusive"]
    flat = [(c, name) for c in judged for name in METRICS]
    for (c, name), p in zip(flat, holm([c.metrics[name].p for c, name in flat])):
        c.metrics[name].p_holm = p
        c.metrics[name].significant = bool(p < alpha)
    for c in judged:
        _verdict(c, tolerance)
    return tests


def _endpoint_cells(base, cand, pairs, bt, ct, rng) -> list[CellComparison]:
    """One comparison per endpoint of each matched cell whose workload is a mix on both
    sides, each usable trial's endpoints.csv row one observation (module docstring)."""
    out: list[CellComparison] = []
    if base.endpoints.empty or cand.endpoints.empty:
        return out
    be = base.endpoints.merge(bt[["cell_id", "trial"]], on=["cell_id", "trial"])
    ce = cand.endpoints.merge(ct[["cell_id", "trial"]], on=["cell_id", "trial"])
    for b_id, c_id, label in pairs:
        b, c = be[be["cell_id"] == b_id], ce[ce["cell_id"] == c_id]
        names = [n for n in dict.fromkeys(b["endpoint"]) if n in set(c["endpoint"])]
        if b["endpoint"].nunique() < 2 or c["endpoint"].nunique() < 2:
            continue
        for name in names:
            eb, ec = b[b["endpoint"] == name], c[c["endpoint"] == name]
            cc = CellComparison(f"{label} · {name}", b_id, c_id, len(eb), len(ec))
            cc.endpoint = str(name)
            _compare_cell(cc, eb, ec, rng)
            out.append(cc)
    return out

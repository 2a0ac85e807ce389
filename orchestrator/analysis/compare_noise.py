"""How far the host's own noise bears on a comparison (compare.py): a change far beyond it is
concluded on any trial count (`FAR_BEYOND_NOISE`), one below what a calibrated host resolves is
named, and the pooled requests' quantiles are given as detail. The noise is one trial's relative
spread on this host: from the calibration when there is one (perfctl calibrate), else the spread
of the trials within the cells of the two runs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .. import results
from . import calibration as calib
from .comparison import METRICS, POOLED_QUANTILES, WORSE_IF_HIGHER, CellComparison
from .histograms import cell_distributions

FAR_BEYOND_NOISE = 6.0  # a change this many times the host's noise is concluded on any count


def _same_host(doc: dict, run: results.Run) -> bool:
    host = run.info.get("host", {}).get("hostname")
    return not host or doc.get("host", {}).get("hostname") in (None, host)


def host_noise(doc: dict | None, *sides: pd.DataFrame) -> dict[str, tuple[float, str]]:
    """Per metric, how far one trial's figure wanders on this host, relative to its level (a
    standard deviation), and where that came from: the calibration's trial-to-trial and
    run-to-run spreads together when there is one (perfctl calibrate), else the spread of the
    trials within each cell of these runs (usable trials, cells with two or more), pooled.
    NaN when neither exists."""
    out = {}
    for name, col in METRICS.items():
        s = (doc or {}).get("metrics", {}).get(col) or {}
        t_cv, r_cv = s.get("trial_cv"), s.get("run_cv")
        if t_cv is not None and t_cv == t_cv:
            r_cv = r_cv if r_cv is not None and r_cv == r_cv else 0.0
            out[name] = (math.hypot(t_cv, r_cv), "perfctl calibrate")
            continue
        squares, dof = 0.0, 0
        for t in sides:
            for _, g in t.groupby("cell_id"):
                v = pd.to_numeric(g.get(col), errors="coerce").dropna().to_numpy()
                level = float(np.median(v)) if v.size else 0.0
                if v.size >= 2 and level > 0:
                    squares += float(((v / level - (v / level).mean()) ** 2).sum())
                    dof += v.size - 1
        out[name] = (
            (math.sqrt(squares / dof), "the trials' spread in these runs")
            if dof
            else (
                math.nan,
                "",
            )
        )
    return out


def _beyond_noise(
    cc: CellComparison,
    bt: pd.DataFrame,
    ct: pd.DataFrame,
    noise: dict[str, tuple[float, str]],
    tolerance: float,
) -> None:
    """Conclude a cell the tests could not when even its closest usable trials (one a side
    is enough) are further apart than FAR_BEYOND_NOISE times the host's noise, and than the
    tolerance. Invalid trials never count, nor noisy ones (unless include_noisy): a trial next
    to a busy neighbour can be off by 2x, far more than the quiet trials' noise."""
    b, c = bt[bt["cell_id"] == cc.base_id], ct[ct["cell_id"] == cc.cand_id]
    worse, better = [], []
    for name, col in METRICS.items():
        sd, source = noise[name]
        bx = pd.to_numeric(b.get(col), errors="coerce").dropna().to_numpy()
        cx = pd.to_numeric(c.get(col), errors="coerce").dropna().to_numpy()
        if not (bx.size and cx.size and sd == sd) or bx.min() <= 0:
            continue
        if cx.min() > bx.max():
            gap = cx.min() / bx.max() - 1
        elif cx.max() < bx.min():
            gap = cx.max() / bx.min() - 1
        else:
            continue  # the sides overlap
        bar = max(tolerance, FAR_BEYOND_NOISE * sd)
        if abs(gap) <= bar:
            continue
        up = gap if WORSE_IF_HIGHER[name] else -gap
        text = (
            f"{name} {np.median(cx) / np.median(bx) - 1:+.0%}, {gap:+.0%} even between the closest of "
            f"{bx.size} and {cx.size} usable trials: more than {FAR_BEYOND_NOISE:g}x this "
            f"host's noise (±{sd:.1%}, {source})"
        )
        (worse if up > 0 else better).append(text)
    if not worse and not better:
        return
    if cc.verdict == "inconclusive":
        cc.notes.pop(0)  # why the test could not decide: it no longer has to
    cc.verdict = "slower" if worse else "faster"
    cc.notes.insert(0, ("worse: " if worse else "better: ") + "; ".join(worse or better))


def _pooled_detail(base, cand, bt, ct, cells: list[CellComparison]) -> None:
    """The same quantile over each side's pooled requests: the trials' histograms added
    (within 0.1%; memory does not grow with the runs)."""
    bd = cell_distributions(base, bt[bt["cell_id"].isin({c.base_id for c in cells})])
    cd = cell_distributions(cand, ct[ct["cell_id"].isin({c.cand_id for c in cells})])
    for c in cells:
        for name, q in POOLED_QUANTILES.items():
            pb = bd[c.base_id].latency_percentile_ms(100 * q) if c.base_id in bd else math.nan
            pc = cd[c.cand_id].latency_percentile_ms(100 * q) if c.cand_id in cd else math.nan
            c.metrics[name].pooled_change = pc / pb - 1 if pb > 0 else math.nan


def _resolution_notes(
    doc: dict,
    cells: list[CellComparison],
    alpha: float,
    tests: int,
    tolerance: float,
) -> None:
    for c in cells:
        n = min(c.n_base, c.n_cand)
        for name, m in c.metrics.items():
            r = calib.host_resolution(doc, METRICS[name], n, alpha, tests)
            m.host_resolution = r
            notable = m.significant or abs(m.change) > tolerance
            if r is not None and m.change == m.change and notable and abs(m.change) < r:
                c.notes.append(
                    f"{name} {m.change:+.1%} is below what this host resolves with "
                    f"{n} trials (±{r:.1%}, perfctl calibrate)"
                )

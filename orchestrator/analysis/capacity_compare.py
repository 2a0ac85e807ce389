"""Two runs' searched capacities, cell by cell (`perfctl compare` on runs with `search:`).

Each side's capacity C^ comes with the standard error of ln C^ and its degrees of freedom
(capacity.json: log_se, df; orchestrator/search/capacity_estimate.py says how). The change is
C^_cand / C^_base - 1; on the log scale its standard error is sqrt(se_b^2 + se_c^2), with
Welch-Satterthwaite degrees of freedom, which give its interval (Student's t) and a two-sided
p-value; Holm-Bonferroni adjusts the p-values of all cells together.

Verdicts, with the same honesty as the trial metrics' (compare.py):
- `slower` (capacity lower) / `faster`: significant after Holm, and beyond the tolerance;
- `no significant change`: not significant, and the interval lies within +-tolerance (a change
  as large as the tolerance is ruled out), or significant but within the tolerance;
- `inconclusive`: a side has no interval (too few usable probes), or the interval is too wide
  to rule out a change beyond the tolerance while showing none: the evidence is thin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scipy import stats as sps

from .trial_tests import holm


@dataclass
class CapacityChange:
    label: str
    base_id: str
    cand_id: str
    unit: str
    base: float
    cand: float
    base_interval: tuple[float, float]
    cand_interval: tuple[float, float]
    change: float = math.nan
    ci: tuple[float, float] = (math.nan, math.nan)
    p: float = math.nan
    p_holm: float = math.nan
    verdict: str = "inconclusive"
    notes: list[str] = field(default_factory=list)


def _side(c: dict) -> tuple[float, float, int]:
    cap, se, df = c.get("capacity"), c.get("log_se"), int(c.get("df") or 0)
    cap = math.nan if cap is None else float(cap)
    se = math.nan if se is None else float(se)
    return cap, se, df


def compare_capacities(
    base_doc: dict,
    cand_doc: dict,
    pairs: list[tuple[str, str, str]],
    tolerance: float,
    alpha: float,
    confidence: float = 0.95,
) -> list[CapacityChange]:
    """One CapacityChange per (base_id, cand_id, label) pair found in both documents."""
    b_cells = {c["cell_id"]: c for c in base_doc.get("cells", [])}
    c_cells = {c["cell_id"]: c for c in cand_doc.get("cells", [])}
    out: list[CapacityChange] = []
    for b_id, c_id, label in pairs:
        b, c = b_cells.get(b_id), c_cells.get(c_id)
        if b is None or c is None:
            continue
        (cb, se_b, df_b), (cc, se_c, df_c) = _side(b), _side(c)
        ch = CapacityChange(
            label,
            b_id,
            c_id,
            b.get("unit", ""),
            cb,
            cc,
            (b.get("low", math.nan), b.get("high", math.nan)),
            (c.get("low", math.nan), c.get("high", math.nan)),
        )
        if b.get("unit") != c.get("unit"):
            ch.notes.append(f"base searched {b.get('unit')}, candidate {c.get('unit')}")
            out.append(ch)
            continue
        if cb > 0 and cc > 0:
            ch.change = cc / cb - 1
        thin = [
            side
            for side, se, df in (("base", se_b, df_b), ("candidate", se_c, df_c))
            if not (math.isfinite(se) and df >= 1)
        ]
        if thin or not (cb > 0 and cc > 0):
            ch.notes.append(
                f"no interval on the {' and '.join(thin) or 'capacity'} side: too few usable "
                "probes at the knee"
            )
            out.append(ch)
            continue
        d = math.log(cc / cb)
        se = math.sqrt(se_b**2 + se_c**2)
        df = (se_b**2 + se_c**2) ** 2 / (se_b**4 / df_b + se_c**4 / df_c) if se > 0 else 1.0
        t = float(sps.t.ppf((1 + confidence) / 2, df))
        ch.ci = (math.exp(d - t * se) - 1, math.exp(d + t * se) - 1)
        ch.p = float(2 * sps.t.sf(abs(d) / se, df)) if se > 0 else (0.0 if d else 1.0)
        out.append(ch)
    judged = [c for c in out if c.p == c.p]
    for c, p in zip(judged, holm([c.p for c in judged]), strict=True):
        c.p_holm = p
        significant = p < alpha
        lo, hi = c.ci
        if significant and c.change < -tolerance:
            c.verdict = "slower"
            c.notes.insert(0, f"capacity {c.change:+.1%}")
        elif significant and c.change > tolerance:
            c.verdict = "faster"
            c.notes.insert(0, f"capacity {c.change:+.1%}")
        elif significant:
            c.verdict = "no significant change"
            c.notes.append(f"changed significantly but within ±{tolerance:.0%}")
        elif lo >= -tolerance and hi <= tolerance:
            c.verdict = "no significant change"
        else:
            c.verdict = "inconclusive"
            c.notes.append(
                f"the interval [{lo:+.1%}, {hi:+.1%}] neither shows a change nor rules out one "
                f"beyond ±{tolerance:.0%}: more probes (search.max_trials) or a quieter host"
            )
    return out

"""What `perfctl compare` returns (compare.py computes it): per cell and metric the change
between the runs' median trials with its interval and p-values (MetricChange), each cell's
verdict and notes (CellComparison), and the two runs' verdict with the exit code it gives
(Comparison)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from .capacity_compare import CapacityChange

MIN_TRIALS = 3


METRICS = {"throughput": "throughput_rps", "p50": "latency_p50_ms", "p99": "latency_p99_ms"}


WORSE_IF_HIGHER = {"throughput": False, "p50": True, "p99": True}


POOLED_QUANTILES = {"p50": 0.50, "p99": 0.99}


@dataclass
class MetricChange:
    base: float  # median over the base's usable trials
    cand: float
    change: float  # cand / base - 1
    ci: tuple[float, float]  # bootstrap over trials, of change
    p: float  # Mann-Whitney across trials, unadjusted
    p_holm: float = math.nan
    significant: bool = False
    pooled_change: float = math.nan  # the same quantile over the pooled requests (secondary)
    host_resolution: float | None = None


@dataclass
class CellComparison:
    label: str
    base_id: str
    cand_id: str
    n_base: int = 0  # usable trials
    n_cand: int = 0
    metrics: dict[str, MetricChange] = field(default_factory=dict)
    verdict: str = "no significant change"
    notes: list[str] = field(default_factory=list)
    endpoint: str = ""  # one endpoint of a mix ("" for the whole cell)
    # why trials were left out, each reason once per side (views.left_out_lines):
    # "base: invalid: send lateness x3: moved the p50 latency by up to 2.1–21.3%", "  Fix: ..."
    left_out: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    cells: list[CellComparison]
    notes: list[str]  # cells on one side only, the calibration used
    calibration: Path | None = None
    capacities: list[CapacityChange] = field(default_factory=list)  # runs with search:

    @property
    def verdict(self) -> str:
        """The two runs' verdict, the one `perfctl compare` exits on: "regression" (exit 1)
        when a cell is significantly slower by more than the tolerance, else "inconclusive"
        (exit 3) when a cell has too few usable trials to decide, else "no regression". Runs
        with `search:` are judged on their capacities (significantly lower: a regression)."""
        judged = self.capacities or self.cells
        if regressed(judged):
            return "regression"
        return "inconclusive" if inconclusive(judged) else "no regression"

    @property
    def exit_code(self) -> int:
        return VERDICT_EXIT[self.verdict]

    def table(self) -> pd.DataFrame:
        """One row per cell and metric: the cell's label and verdict, the usable trials of
        each side, and the MetricChange's fields (ci split into ci_low and ci_high)."""
        rows = []
        for c in self.cells:
            for name, m in c.metrics.items():
                row = {
                    "cell": c.label,
                    "endpoint": c.endpoint,
                    "base_cell_id": c.base_id,
                    "cand_cell_id": c.cand_id,
                    "verdict": c.verdict,
                    "n_base": c.n_base,
                    "n_cand": c.n_cand,
                    "metric": name,
                    **{k: v for k, v in asdict(m).items() if k != "ci"},
                }
                row["ci_low"], row["ci_high"] = m.ci
                rows.append(row)
        return pd.DataFrame(rows)


VERDICT_EXIT = {"no regression": 0, "regression": 1, "inconclusive": 3}


def regressed(cells: list[CellComparison | CapacityChange]) -> bool:
    """True when any cell is significantly slower by more than the tolerance (for a
    capacity: significantly lower)."""
    return any(c.verdict == "slower" for c in cells)


def inconclusive(cells: list[CellComparison | CapacityChange]) -> bool:
    return any(c.verdict == "inconclusive" for c in cells)

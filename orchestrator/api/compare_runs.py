"""`perfctl.compare()`, which `perfctl compare BASE CAND` calls too: two runs cell by cell, each
trial one observation (analysis/compare.py says how), returned as data with the verdict the
command exits on."""

from __future__ import annotations

from pathlib import Path

from ..analysis.compare import Comparison, compare_runs
from ..results import Run


def compare(
    base: str | Path | Run,
    cand: str | Path | Run,
    *,
    tolerance: float = 0.05,
    alpha: float = 0.05,
    include_noisy: bool = False,
    calibration: str | Path | None = None,
) -> Comparison:
    """Compare run `cand` with run `base` (directories, or Runs from perfctl.run() or
    results.load()). tolerance: the relative change a regression must exceed (0.05 = 5%);
    alpha: the significance level after Holm-Bonferroni; include_noisy: use valid trials the
    host disturbed too; calibration: a host calibration from `perfctl calibrate` (default:
    results/.calibration.json when there is one).

    Returns the Comparison: `.verdict` ("regression", "inconclusive" or "no regression"),
    `.exit_code` (1, 3, 0: `perfctl compare`'s), `.table()` (one row per cell and metric:
    medians, change, its interval, p-values), `.cells` and `.notes`. Runs that share no cell,
    or a side without requests, raise PerfctlError with the paragraph `perfctl compare`
    prints."""
    return compare_runs(
        _dir(base),
        _dir(cand),
        tolerance,
        alpha,
        include_noisy=include_noisy,
        calibration=None if calibration is None else Path(calibration),
    )


def _dir(run: str | Path | Run) -> Path:
    return run.path if isinstance(run, Run) else Path(run)

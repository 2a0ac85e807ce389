"""What a probe's trials.csv row says against counting it for the search: the invalid reasons
that bear on the search's SLO (send lateness too small to move the SLO's statistic is
excused), a noisy host, a trend in the window, and the load generator's own limit. Pure
functions of the row, its readings and the experiment's `search:` block; cell_search.py
decides what each finding means for the probe.
"""

from __future__ import annotations

from loadgen.floats import float_or_nan

from ..experiment.search import Search
from .readings import Readings

LOADGEN_WORDS = ("load generator", "load-generator", "achieved send rate")
LATENESS = "send lateness ("  # how loadgen/validity.py's send-lateness reason begins
PRECISION_FLOOR = 0.02  # as loadgen/validity.py: below 2% of a figure nothing is resolved


def noise(row: dict) -> str:
    """Why the host was noisy during the trial, in words ("" when it was quiet)."""
    return "" if bool(row.get("quiet", True)) else f"noisy: {row.get('noise_reasons', '')}"


def reasons(search: Search, row: dict) -> list[str]:
    """The trial's invalid_reasons that bear on this search's SLO. Send lateness is
    judged against the SLO's own statistic: a lateness that moved a 0.1 ms p50 by 20% but
    the 3 ms p99 the SLO names by less than the p99's precision leaves the probe's answer
    (does the p99 meet the SLO?) intact, so it does not cost the probe."""
    if bool(row.get("valid", False)):
        return []
    found = [r for r in str(row.get("invalid_reasons", "")).split("; ") if r]
    if not found:
        return ["invalid (no reason recorded)"]
    return [r for r in found if not (r.startswith(LATENESS) and slo_on_time(search, row))]


def slo_on_time(search: Search, row: dict) -> bool:
    """Send lateness moved the SLO's statistic by less than its precision: its 95%
    interval's lower half (the p99's, from its CI columns) or 2%, whichever is larger;
    a statistic with no shift column (p95) is never excused."""
    column = search.slo.column
    if column is None:
        return False
    name = column.removeprefix("latency_").removesuffix("_ms")
    shift = float_or_nan(row.get(f"lateness_shift_{name}_pct"))
    allowed = 100.0 * PRECISION_FLOOR
    value = float_or_nan(row.get(column))
    low = float_or_nan(row.get(f"{column.removesuffix('_ms')}_ci_low_ms"))
    if value == value and low == low and value > 0:
        allowed = max(allowed, 100.0 * (value - low) / value)
    return shift == shift and shift <= allowed


def valid_for_slo(search: Search, row: dict) -> bool:
    """No invalid reason bears on the search's SLO (capacity.json's `valid_for_slo`)."""
    return not reasons(search, row)


def problems(search: Search, row: dict, readings: Readings) -> list[str]:
    """Everything that keeps the probe from counting as it is, in words ([] for none)."""
    out = []
    if not valid_for_slo(search, row):
        out.append(f"invalid: {'; '.join(reasons(search, row))}")
    if noise(row) and not search.include_noisy:
        out.append(noise(row))
    if readings.trend.stationary is False:
        out.append(readings.trend.reason)
    elif readings.trend.stationary is None:
        out.append(f"not tested for a trend: {readings.trend.seconds} whole second(s)")
    return out


def loadgen_limited(search: Search, row: dict) -> bool:
    """The load generator fell behind or ran out of CPU on a quiet host: its own limit.
    On a noisy host the same symptoms are the host's doing (a retry, not a verdict)."""
    why = "; ".join(reasons(search, row)).lower()
    return (
        not valid_for_slo(search, row)
        and bool(row.get("quiet", True))
        and any(w in why for w in LOADGEN_WORDS)
    )

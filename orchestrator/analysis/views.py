"""Views of a run that every analysis shares: which trials count, which requests count (the
measured window; "ok" defined once), and cell labels.

Which trials count: for figures, models and the report, a cell's valid trials (a cell with no
valid trial falls back to all of its trials and is flagged, so a noisy host still gets an
answer instead of silence); for the gates (compare, check), its usable trials: valid and
quiet, never a fallback (`usable_trials`).
Which requests count: those intended inside their trial's measured window (warm-up
excluded), and for latency only the ok ones (`ok_requests`).
Which trials measured anything: those that recorded a request (`measured_trials`). A trial whose
driver failed, or wrote output that breaks loadgen/DRIVER.md, has no figures at all (older
runs, or runs where every trial broke, lack the figures' columns altogether); plots, models
and the report leave it out and say so, in one line.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from ..results import Run, read_summary, trial_dir
from . import reasons
from .reasons import reason_kind  # noqa: F401  (views.reason_kind: benchmarks read it here)


def ok_requests(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests that completed without a transport error and with a 2xx status."""
    return requests[
        (requests["error"] == 0) & (requests["status"] >= 200) & (requests["status"] < 300)
    ]


def flag(trials: pd.DataFrame, column: str, default: bool = True) -> pd.Series:
    """A boolean column (`valid`, `quiet`) as bools; missing values and a missing column (a
    run written before the column existed) read as `default`."""
    if column not in trials.columns:
        return pd.Series(default, index=trials.index, dtype=bool)
    return trials[column].map(lambda v: default if v is None or v != v else bool(v)).astype(bool)


def usable_trials(trials: pd.DataFrame, include_noisy: bool = False) -> pd.DataFrame:
    """The trials a gate uses: valid ones, and quiet ones unless include_noisy (runs written
    before `quiet` existed count as quiet)."""
    keep = flag(trials, "valid", True)
    if not include_noisy:
        keep &= flag(trials, "quiet", True)
    return trials[keep]


def excluded_trials(trials: pd.DataFrame, include_noisy: bool = False) -> dict[str, list[str]]:
    """cell_id -> why each excluded trial was left out ("trial 2 invalid: ...",
    "trial 3 noisy: ...")."""
    out: dict[str, list[str]] = {}
    valid = flag(trials, "valid", True)
    quiet = flag(trials, "quiet", True)
    for i, t in trials.iterrows():
        if not valid[i]:
            why = f"trial {int(t['trial'])} invalid: {t.get('invalid_reasons', '')}"
        elif not quiet[i] and not include_noisy:
            why = f"trial {int(t['trial'])} noisy: {t.get('noise_reasons', '')}"
        else:
            continue
        out.setdefault(t["cell_id"], []).append(why)
    return out


def _kinds(texts) -> str:
    """The kinds of reasons in trials' reason texts (each joined with "; "), most frequent
    first, then in order of appearance: "send lateness x2, CPU steal"."""
    kinds: Counter[str] = Counter()
    for text in texts:
        text = "" if text is None or text != text else str(text)
        found = [reason_kind(r) for r in reasons.split_reasons(text)] or ["no reason"]
        kinds.update(list(dict.fromkeys(found)))  # each kind once per trial
    return ", ".join(f"{k} x{c}" if c > 1 else k for k, c in kinds.most_common())


def usage_note(trials: pd.DataFrame, include_noisy: bool = False) -> str:
    """How many of a cell's trials a gate used, and why the others were dropped: "3 of 5
    trials used; 2 invalid (trials 2, 4): send lateness x2; 1 noisy (trial 5): CPU steal"."""
    valid = flag(trials, "valid", True)
    quiet = flag(trials, "quiet", True) | include_noisy
    used = int((valid & quiet).sum())
    parts = [f"{used} of {len(trials)} trials used"]
    for label, mask, column in (
        ("invalid", ~valid, "invalid_reasons"),
        ("noisy", valid & ~quiet, "noise_reasons"),
    ):
        dropped = trials[mask]
        if dropped.empty:
            continue
        why = _kinds(dropped.get(column, pd.Series("", index=dropped.index)))
        numbers = ", ".join(str(int(k)) for k in dropped["trial"])
        which = f"trial{'s' if len(dropped) > 1 else ''} {numbers}"
        parts.append(f"{len(dropped)} {label} ({which}): {why}")
    return "; ".join(parts)


def left_out_lines(trials: pd.DataFrame, include_noisy: bool = False) -> list[str]:
    """Why a gate left out a cell's trials, each reason once with its trials' count and
    figures and each fix once (reasons.lines): the invalid trials' reasons, then the noisy
    ones' ("invalid: send lateness x3: moved the p50 latency by up to 2.1–21.3%", "  Fix:
    ..."). Empty when none was left out."""
    valid = flag(trials, "valid", True)
    quiet = flag(trials, "quiet", True) | include_noisy
    out: list[str] = []
    for label, mask, column in (
        ("invalid", ~valid, "invalid_reasons"),
        ("noisy", valid & ~quiet, "noise_reasons"),
    ):
        if column not in trials or not mask.any():
            continue
        for line in reasons.lines(trials.loc[mask, column]):
            out.append(line if line.startswith(" ") else f"{label}: {line}")
    return out


# the figures every trial that measured something has (measured_trials fills the missing)
HEADLINE_COLUMNS = (
    "requests",
    "errors",
    "error_rate",
    "throughput_rps",
    "latency_mean_ms",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "latency_p999_ms",
    "latency_max_ms",
)


def measured_trials(trials: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The trials that recorded at least one request (without a `requests` value: that have
    any figure), with every HEADLINE_COLUMNS column present (NaN where a trial has no
    value), and a one-line note on those left out ("" when none was): "left out 1 trial that
    measured nothing: load driver cmd wrote output that breaks loadgen/DRIVER.md"."""
    t = trials.copy()
    for col in HEADLINE_COLUMNS:
        if col not in t.columns:
            t[col] = np.nan
    requests = pd.to_numeric(t["requests"], errors="coerce")
    figures = t[list(HEADLINE_COLUMNS[3:])].apply(pd.to_numeric, errors="coerce")
    measured = (requests > 0) | (requests.isna() & figures.notna().any(axis=1))
    left = t[~measured]
    if left.empty:
        return t, ""
    why = _kinds(left.get("invalid_reasons", pd.Series("", index=left.index)))
    n = len(left)
    return t[measured], f"left out {n} trial{'s' if n > 1 else ''} that measured nothing: {why}"


def analysis_trials(trials: pd.DataFrame) -> tuple[pd.DataFrame, set[str]]:
    """The trials an analysis uses: each cell's valid trials, or all of a cell's trials when
    none is valid. Returns (trials with `valid` forced True for the fallback cells, the
    cell_ids that fell back)."""
    if trials.empty or "valid" not in trials.columns:
        return trials, set()
    valid = trials["valid"].fillna(False).astype(bool)
    has_valid = valid.groupby(trials["cell_id"]).transform("any")
    keep = trials[valid | ~has_valid].copy()
    fallback = set(keep.loc[~keep["valid"].fillna(False).astype(bool), "cell_id"])
    keep["valid"] = True
    return keep, fallback


def trial_summary(run: Run, cell_id: str, trial: int) -> dict | None:
    """The load generator's summary.json of one trial (None when missing)."""
    return read_summary(trial_dir(run.path, cell_id, int(trial)))


def _window(run: Run, cell_id: str, trial: int) -> tuple[int, int] | None:
    s = trial_summary(run, cell_id, trial)
    return None if s is None else (int(s["measure_start_ns"]), int(s["measure_end_ns"]))


def trimmed_timeline(run: Run) -> pd.DataFrame:
    """run.timeline without the bins that start after the measured window ends (the tail
    where only the last responses arrive, which would read as a throughput collapse)."""
    tl = run.timeline
    if tl.empty:
        return tl
    keep = np.ones(len(tl), dtype=bool)
    for (cid, k), idx in tl.groupby(["cell_id", "trial"], sort=False).indices.items():
        s = trial_summary(run, cid, k)
        if s is not None:
            end_s = (s["measure_end_ns"] - s["start_ns"]) / 1e9
            keep[idx] = tl["t_s"].to_numpy()[idx] < end_s - 1e-9
    return tl[keep]


def measured_requests(
    run: Run, trials: pd.DataFrame | None = None, ok_only: bool = True
) -> pd.DataFrame:
    """The run's requests intended inside each trial's measured window (warm-up dropped),
    restricted to the (cell_id, trial) pairs of `trials` (default: all) and, with ok_only,
    to requests that completed without a transport error or an HTTP status >= 400."""
    req = run.requests
    if req.empty:
        return req
    trials = run.trials if trials is None else trials
    keep = np.zeros(len(req), dtype=bool)
    for (cid, k), idx in req.groupby(["cell_id", "trial"], sort=False).indices.items():
        if not ((trials["cell_id"] == cid) & (trials["trial"] == k)).any():
            continue
        w = _window(run, cid, int(k))
        t = req["intended_ns"].to_numpy()[idx]
        keep[idx] = True if w is None else (t >= w[0]) & (t < w[1])
    out = req[keep]
    if ok_only:
        out = ok_requests(out)
    return out.reset_index(drop=True)


def cell_labels(run: Run, short: bool = False) -> dict[str, str]:
    """cell_id -> 'axis=value, ...' from run.json (the cell_id itself when unknown). With
    short, only the axes whose value differs between the run's cells are named."""
    cells = run.info.get("cells", [])
    vals = [c.get("values", {}) for c in cells]
    varying = {k for v in vals for k in v if len({str(w.get(k)) for w in vals}) > 1}
    out = {}
    for c, v in zip(cells, vals):
        keep = [k for k in v if k in varying] if short and varying else list(v)
        out[c["cell_id"]] = ", ".join(f"{k}={v[k]}" for k in keep) or c["cell_id"]
    return out

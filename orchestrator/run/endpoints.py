"""A trial's per-endpoint rows (results/endpoints.py owns the columns): each request of the
mix judged on its own figures, with the same statistics as the whole trial."""

from __future__ import annotations

import math
from pathlib import Path

from loadgen import digest as ldigest
from loadgen import stats as lstats

from ..results.endpoints import ENDPOINT_COLUMNS, write_endpoints


def endpoint_rows(
    tdir: Path,
    summary: dict,
    mode: str,
    names: list[str | None],
    trial: dict,
    max_error_rate: float | None,
) -> list[dict]:
    """One row per endpoint name; names[k] is request k's (None: a request of weight 0 in
    this cell, never sent, so no endpoint of its trials). `trial` is the trial's row (its
    figures and `valid`); with one request, that row is the endpoint's. With several, each
    comes from the digest's window part of its request index (loadgen/digest.py
    `by_request`)."""
    parts = None
    if len(names) > 1 and (tdir / "digest.json").is_file():
        w = lstats.chosen_window(ldigest.read(tdir / "digest.json"), summary)
        parts = w.parts or {}
    total = int(trial.get("requests") or 0)
    rows = []
    for k, name in enumerate(names):
        if name is None:
            continue
        if parts is None:
            fig = trial
        else:
            part = parts.get(k)
            if part is None:
                part = ldigest.Window(0, summary["measure_start_ns"], summary["measure_end_ns"])
            fig = lstats.window_row(part, summary, mode)
        row = {c: fig.get(c, math.nan) for c in ENDPOINT_COLUMNS}
        row["endpoint"], row["request"] = name, k
        row["share"] = int(fig.get("requests") or 0) / total if total else math.nan
        reasons = _reasons(fig, max_error_rate)
        if not trial.get("valid", False):
            reasons.insert(0, "the trial is invalid")
        row["valid"] = not reasons
        row["validity"] = "; ".join(reasons)
        rows.append(row)
    return rows


def _reasons(fig: dict, max_error_rate: float | None) -> list[str]:
    """Why one endpoint's figures do not hold on their own: too few answers for a p99 with
    a confidence interval, or too many errors."""
    out = []
    completed = int(fig.get("completed") or 0)
    if lstats.ci_ranks(completed, 99.0) is None:
        out.append(f"too few requests for a p99 ({completed} answered, its 95% CI needs 368)")
    rate = fig.get("error_rate", math.nan)
    if max_error_rate is not None and rate == rate and rate > max_error_rate:
        out.append(f"error rate {rate:.2%} > {max_error_rate:.2%}")
    return out


def endpoint_names(spec, path: str) -> list[str | None]:
    """A trial's endpoints by request index: its spec's mix (None for a request of weight 0:
    a weight set per cell by a placeholder may leave a request out of a cell) or replay file,
    else its one request's path."""
    mix = [r.name if r.weight > 0 else None for r in spec.requests]
    return mix or list(spec.replay_names) or [path]


def write_trial_endpoints(tdir: Path, summary, mode, names, trial, max_error_rate) -> None:
    write_endpoints(tdir, endpoint_rows(tdir, summary, mode, names, trial, max_error_rate))

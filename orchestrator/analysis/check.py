"""Thresholds: pass/fail gates on a run's cells (`perfctl check`, the pytest plugin).

An experiment file (or a separate YAML file) lists

    thresholds:
      - {where: {server: c-pool}, p99_ms: {lt: 5}, error_rate: {lt: 0.001}}
      - {throughput_rps: {gt: 1000}}          # no where: every cell

`where` selects cells by trials.csv columns (usually axes); every other key is a metric: a
trials.csv column or a short alias (p50_ms, p90_ms, p99_ms, p999_ms, mean_ms, max_ms ->
latency_*_ms) mapped to {operator: limit} with operators lt, le, gt, ge.

`where: {endpoint: NAME}` checks one request of a workload's mix: its metric is an
endpoints.csv column (results/endpoints.py) averaged over the same usable trials, and a trial
whose endpoint figures do not hold on their own (too few requests for a p99, too many errors:
its `validity`) makes the verdict a breach that says so.

Runs with `search:` also take thresholds on their capacity (capacity.json): `capacity_rps`
(open load) and `capacity_users` (closed load), e.g. `{capacity_rps: {gt: 800}}`. Those are
checked against the cell's searched capacity; the verdict's note gives its interval, and says
when the interval straddles the limit (the evidence cannot tell). A cell whose search found no
capacity, or a run without capacity.json, is a breach.

Each (threshold, metric, operator) is checked on every matching cell against the cell's
**mean over its usable trials**: valid and quiet (views.usable_trials; with include_noisy,
valid ones whatever the host did). Each verdict says how many trials it used and, when it left
some out, which and why (`usage`: "3 of 5 trials used; 2 invalid (trials 2, 4): send lateness
x2"; `left_out`: each reason once with its trials' figures, and its fix). A cell with no usable
trial, a metric with no value (NaN), or a threshold whose `where` matches no cell is a breach:
a gate must not pass on missing data.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from .. import results
from ..errors import PerfctlError, read_user_file
from ..results.endpoints import ENDPOINT_COLUMNS
from ..results.schema import MEASUREMENT_COLUMNS, SELF_CHECK_COLUMNS
from .views import cell_labels, excluded_trials, left_out_lines, usable_trials, usage_note

ALIASES = {f"{p}_ms": f"latency_{p}_ms" for p in ("p50", "p90", "p99", "p999", "mean", "max")}
OPERATORS = {
    "lt": (operator.lt, "<"),
    "le": (operator.le, "<="),
    "gt": (operator.gt, ">"),
    "ge": (operator.ge, ">="),
}
CAPACITY_METRICS = {"capacity_rps": "rate_rps", "capacity_users": "users"}  # metric -> unit
NON_METRICS = {"cell_id", "trial", "seed", "valid", "invalid_reasons", "quiet", "noise_reasons"}
ENDPOINT_KEY = "endpoint"  # where: {endpoint: NAME} (module docstring)
ENDPOINT_METRICS = [c for c in ENDPOINT_COLUMNS if c not in ("endpoint", "request", "valid")]
ENDPOINT_METRICS.remove("validity")


@dataclass(frozen=True)
class Threshold:
    """One metric bound of one thresholds entry (entries with several metrics give several)."""

    index: int  # position in the thresholds list, from 1
    where: dict
    metric: str  # as written (e.g. p99_ms)
    column: str  # trials column (e.g. latency_p99_ms)
    op: str  # lt | le | gt | ge
    limit: float

    @property
    def text(self) -> str:
        return f"{self.metric} {OPERATORS[self.op][1]} {self.limit:g}"

    @property
    def where_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.where.items()) or "every cell"


@dataclass(frozen=True)
class Verdict:
    threshold: Threshold
    cell_id: str  # "" when the threshold matches no cell
    cell_label: str
    measured: float
    trials: int  # usable trials averaged
    passed: bool
    note: str = ""
    excluded: int = 0  # the cell's trials left out (invalid, or noisy)
    usage: str = ""  # when some were left out: how many were used, which were not and why
    # ... and each reason once with its trials' figures, each fix once (views.left_out_lines)
    left_out: tuple[str, ...] = ()


def parse(entries, source: str, columns: list[str]) -> list[Threshold]:
    """Thresholds from the YAML list; PerfctlError (naming `source`) on any problem."""
    if not isinstance(entries, list):
        raise PerfctlError(
            f"{source}: thresholds must be a list of mappings, got "
            f"{type(entries).__name__}. Fix: thresholds: [{{p99_ms: {{lt: 5}}}}]"
        )
    out = []
    cols = set(columns)
    for i, entry in enumerate(entries, 1):
        where_ = f"{source}: thresholds[{i}]"
        if not isinstance(entry, dict):
            raise PerfctlError(
                f"{where_} is not a mapping. Fix: write it as "
                "{where: {server: NAME}, p99_ms: {lt: 5}}."
            )
        where = entry.get("where") or {}
        if not isinstance(where, dict):
            raise PerfctlError(
                f"{where_}.where must map columns to values. Fix: where: {{server: py}}"
            )
        for k in where:
            if k not in cols and k != ENDPOINT_KEY:
                raise PerfctlError(
                    f"{where_}.where names '{k}', which is no column of "
                    f"trials.csv. Fix: use an axis or column: {', '.join(columns[:12])}"
                )
        metrics = {k: v for k, v in entry.items() if k != "where"}
        if not metrics:
            raise PerfctlError(f"{where_} has no metric. Fix: add one, e.g. p99_ms: {{lt: 5}}.")
        for metric, bounds in metrics.items():
            column = ALIASES.get(metric, metric)
            if ENDPOINT_KEY in where and column not in ENDPOINT_METRICS:
                raise PerfctlError(
                    f"{where_}: '{metric}' is not a per-endpoint metric. Fix: with where: "
                    f"{{endpoint: ...}} use one of {', '.join(ENDPOINT_METRICS)} (or "
                    "p50_ms, p90_ms, p99_ms, mean_ms, max_ms)."
                )
            if (column not in cols or column in NON_METRICS) and column not in CAPACITY_METRICS:
                raise PerfctlError(
                    f"{where_}: unknown metric '{metric}'. Fix: use a trials.csv column "
                    f"(throughput_rps, error_rate, latency_p99_ms, ...), an alias "
                    f"({', '.join(ALIASES)}) or, for a run with search:, "
                    f"{' or '.join(CAPACITY_METRICS)}."
                )
            if not isinstance(bounds, dict) or not bounds:
                raise PerfctlError(
                    f"{where_}.{metric} must map an operator to a limit. "
                    f"Fix: {metric}: {{lt: 5}} (operators: lt, le, gt, ge)."
                )
            for op, limit in bounds.items():
                if op not in OPERATORS:
                    raise PerfctlError(
                        f"{where_}.{metric}: unknown operator '{op}'. Fix: use lt, le, gt or ge."
                    )
                try:
                    value = float(limit)
                except (TypeError, ValueError):
                    raise PerfctlError(
                        f"{where_}.{metric}.{op}: limit {limit!r} is not a "
                        "number. Fix: give a plain number (in the metric's "
                        "unit, e.g. ms for p99_ms)."
                    ) from None
                out.append(Threshold(i, dict(where), metric, column, op, value))
    return out


def load_file(path: Path) -> list:
    """The thresholds list from a YAML file: a top-level list or a `thresholds:` key."""
    text = read_user_file(path, "thresholds file", "give an existing YAML file.")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise PerfctlError(f"{path}: not valid YAML ({e}). Fix the syntax.") from None
    if isinstance(doc, dict):
        doc = doc.get("thresholds")
    if doc is None:
        raise PerfctlError(
            f"{path}: no thresholds found. Fix: a top-level list or a `thresholds:` key."
        )
    return doc


def thresholds_for(run: results.Run, file: Path | None = None) -> list[Threshold]:
    """The run's thresholds: from `file` when given, else from run.json's experiment. A
    metric may be any trials.csv column perfctl writes, even one this run lacks (its trials
    all broke before measuring): its cells then have no value, a breach."""
    cols = list(dict.fromkeys([*run.trials.columns, *MEASUREMENT_COLUMNS, *SELF_CHECK_COLUMNS]))
    if file is not None:
        return parse(load_file(file), str(file), cols)
    entries = run.info.get("document", {}).get("thresholds") or []
    return parse(entries, str(run.info.get("source", run.path / "run.json")), cols)


def _matches(trials: pd.DataFrame, where: dict) -> pd.Series:
    m = pd.Series(True, index=trials.index)
    for k, v in where.items():
        if k not in trials:  # a column perfctl writes, but this run lacks: matches nothing
            return pd.Series(False, index=trials.index)
        col = trials[k]
        num = pd.to_numeric(col, errors="coerce")
        try:
            m &= (
                (num == float(v))
                if num.notna().all() and not isinstance(v, str)
                else (col.astype(str) == str(v))
            )
        except (TypeError, ValueError):
            m &= col.astype(str) == str(v)
    return m


def evaluate(
    run: results.Run, thresholds: list[Threshold], include_noisy: bool = False
) -> list[Verdict]:
    """Every threshold x matching cell, in threshold order then cell order."""
    trials = run.trials
    labels = cell_labels(run)
    usable = trials.index.isin(usable_trials(trials, include_noisy).index)
    left_out = excluded_trials(trials, include_noisy)
    out = []
    for th in thresholds:
        where = {k: v for k, v in th.where.items() if k != ENDPOINT_KEY}
        sel = trials[_matches(trials, where)]
        if th.column in CAPACITY_METRICS and not sel.empty:
            out += _capacity_verdicts(run, th, list(dict.fromkeys(sel["cell_id"])), labels)
            continue
        if sel.empty:
            out.append(Verdict(th, "", f"({th.where_text})", math.nan, 0, False, "matches no cell"))
            continue
        fn = OPERATORS[th.op][0]
        for cid, g in sel.groupby("cell_id", sort=False):
            good = g[usable[trials.index.get_indexer(g.index)]]
            label = labels.get(cid, cid)
            skipped = len(left_out.get(cid, []))
            usage = usage_note(g, include_noisy) if skipped else ""
            why = tuple(left_out_lines(g, include_noisy)) if skipped else ()
            if good.empty:
                noisy = sum("noisy" in w for w in left_out.get(cid, []))
                note = (
                    f"no usable trial ({skipped - noisy} invalid, {noisy} noisy)"
                    if noisy
                    else "no valid trial"
                )
                out.append(Verdict(th, cid, label, math.nan, 0, False, note, skipped, usage, why))
                continue
            if ENDPOINT_KEY in th.where:
                out.append(_endpoint_verdict(run, th, cid, label, good, skipped, usage, why))
                continue
            value = float(pd.to_numeric(good.get(th.column), errors="coerce").mean())
            if math.isnan(value):
                out.append(
                    Verdict(
                        th, cid, label, value, len(good), False, "no value", skipped, usage, why
                    )
                )
                continue
            passed = bool(fn(value, th.limit))
            out.append(Verdict(th, cid, label, value, len(good), passed, "", skipped, usage, why))
    return out


def _endpoint_verdict(
    run: results.Run,
    th: Threshold,
    cid: str,
    label: str,
    good: pd.DataFrame,
    skipped: int,
    usage: str,
    why: tuple[str, ...] = (),
) -> Verdict:
    """A threshold on one endpoint of cell `cid`, over the usable trials `good`."""
    name = str(th.where[ENDPOINT_KEY])
    ep = run.endpoints
    mine = ep[(ep["cell_id"] == cid) & ep["trial"].isin(good["trial"])]
    rows = mine[mine["endpoint"].astype(str) == name]
    if rows.empty:
        known = ", ".join(sorted(set(mine["endpoint"].astype(str)))) or "none"
        note = f"no endpoint {name!r} (this cell's endpoints: {known})"
        return Verdict(th, cid, label, math.nan, 0, False, note, skipped, usage, why)
    value = float(pd.to_numeric(rows[th.column], errors="coerce").mean())
    own = sorted(
        {
            reason
            for text in rows["validity"]
            for reason in str(text).split("; ")
            if reason and reason != "the trial is invalid"
        }
    )
    if not th.column.startswith("latency_p"):  # a count or a rate holds with few requests
        own = [r for r in own if not r.startswith("too few requests")]
    label = f"{label}, endpoint={name}"
    if own:
        note = f"the endpoint's figures do not hold: {'; '.join(own)}"
        return Verdict(th, cid, label, value, len(rows), False, note, skipped, usage, why)
    if math.isnan(value):
        return Verdict(th, cid, label, value, len(rows), False, "no value", skipped, usage, why)
    passed = bool(OPERATORS[th.op][0](value, th.limit))
    return Verdict(th, cid, label, value, len(rows), passed, "", skipped, usage, why)


def check_run(run_dir, file: Path | None = None, include_noisy: bool = False) -> list[Verdict]:
    """Load a run and evaluate its thresholds (or those of `file`)."""
    run = results.load(run_dir)
    return evaluate(run, thresholds_for(run, file), include_noisy)


def _capacity_verdicts(
    run: results.Run, th: Threshold, cell_ids: list[str], labels: dict
) -> list[Verdict]:
    """A capacity threshold on each matching cell's searched capacity (module docstring)."""
    doc = results.read_capacity(run.path)
    if doc is None:
        return [
            Verdict(
                th,
                "",
                f"({th.where_text})",
                math.nan,
                0,
                False,
                "no capacity.json: the run had no search:",
            )
        ]
    by_id = {c["cell_id"]: c for c in doc["cells"]}
    unit = CAPACITY_METRICS[th.column]
    out = []
    for cid in cell_ids:
        label = labels.get(cid, cid)
        c = by_id.get(cid)
        if c is None or c.get("unit") != unit:
            why = "no search in this cell" if c is None else f"its capacity is in {c['unit']}"
            out.append(Verdict(th, cid, label, math.nan, 0, False, why))
            continue
        cap, lo, hi = c["capacity"], c["low"], c["high"]
        left_out = sum(1 for p in c["probes"] if not p["used"])
        if cap != cap:
            note = f"no capacity found ({c['status']}: {c.get('stopped', '')})"
            out.append(Verdict(th, cid, label, cap, 0, False, note, left_out))
            continue
        fn = OPERATORS[th.op][0]
        note = (
            f"{100 * c['confidence']:.0f}% interval {lo:.4g}-{hi:.4g}"
            if lo == lo and hi == hi
            else "no interval (too few usable probes)"
        )
        if lo == lo and hi == hi and fn(lo, th.limit) != fn(hi, th.limit):
            note += f"; it straddles {th.limit:g}: the evidence cannot tell"
        out.append(
            Verdict(
                th, cid, label, cap, int(c["knee_probes"]), bool(fn(cap, th.limit)), note, left_out
            )
        )
    return out

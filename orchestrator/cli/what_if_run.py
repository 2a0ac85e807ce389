"""`perfctl model RUN --what-if ... --run-what-if`: run the what-if configuration for real and
print what the fitted models predicted beside what it measured.

The run's own experiment document (run.json) is compiled again with the change made:
- threads: each server's `threads` (a bundled server's flag; a `cmd` server's only when its
  command takes it from a matrix axis, as `--workers {threads}`, since perfctl cannot edit a
  command line);
- cores: `placement.server_cores`;
- rate, users: the load's `rate` and `connections`;
- delay: the network's `delay` (each way).
A value that came from a matrix axis (`"{rate}"`) is changed by making that axis the one value.
The what-if run goes into RUN_DIR/what-if/<change>/ like any run (`perfctl report` works on it).
Each of its cells is paired with the measured cell it was predicted from: the same
configuration but for what changed.
"""

from __future__ import annotations

import copy
import math
import re

import pandas as pd
from rich.markup import escape
from rich.table import Table

from models import verdict

from .. import results
from ..analysis import queueing
from ..api.run_experiment import _run
from ..api.target import Choice
from ..errors import PerfctlError
from ..experiment import compile_document
from ..numbers import fmt, pct
from ..proc import process
from ..results.write import storage_guard
from .console import console

GOAL = 0.15  # what-if predictions within this of the run made to check them (issue 27)
_AXIS = re.compile(r"^\s*\{(\w+)\}\s*$")
# the trials.csv columns a change moves (the rest must match to pair a cell with its origin)
MOVED = {
    "threads": ("server_threads",),
    "cores": ("server_cores",),
    "rate": ("target_rate",),
    "users": ("connections",),
    "delay": ("rtt_expected_ms", "rtt_measured_ms"),
}
PAIR_KEYS = (
    "server",
    "load_mode",
    "target_rate",
    "connections",
    "server_threads",
    "server_cores",
    "work_spin_us",
    "work_sleep_us",
    "think_time_s",
)


def _set(doc: dict, path: list[str], value, overrides: list[str]) -> None:
    """Set doc[path] = value, or the matrix axis it names when it is a placeholder."""
    node = doc
    for p in path[:-1]:
        node = node.setdefault(p, {})
    current = node.get(path[-1])
    m = _AXIS.match(current) if isinstance(current, str) else None
    if m and m.group(1) in (doc.get("matrix") or {}):
        doc["matrix"][m.group(1)] = [value]
        overrides.append(f"matrix.{m.group(1)}=[{value}]")
    else:
        node[path[-1]] = value
        overrides.append(f"{'.'.join(path)}={value}")


def changed_document(doc: dict, changes: dict[str, float]) -> tuple[dict, list[str]]:
    """The experiment document with the what-if changes made, and what was set (for people).
    Raises PerfctlError for a change perfctl cannot make to this experiment."""
    doc = copy.deepcopy(doc)
    done: list[str] = []
    for key, value in changes.items():
        if key == "threads":
            for name, server in (doc.get("servers") or {}).items():
                if not isinstance(server, dict):
                    continue
                axis = _AXIS.match(str(server.get("threads", "")))
                if "cmd" in server and not axis:
                    raise PerfctlError(
                        f"--run-what-if threads: server {name!r} is a command; perfctl cannot "
                        "change its threads. Fix: take them from a matrix axis in the "
                        'experiment (cmd: "... --workers {threads}", threads: "{threads}").'
                    )
                _set(doc, ["servers", name, "threads"], int(value), done)
        elif key == "cores":
            placement = doc.setdefault("placement", {})
            placement.pop("server_cpus", None)
            _set(doc, ["placement", "server_cores"], int(value), done)
        elif key == "rate":
            _set(doc, ["load", "rate"], value, done)
        elif key == "users":
            _set(doc, ["load", "connections"], int(value), done)
        elif key == "delay":
            _set(doc, ["network", "delay"], f"{value:g}ms", done)
    return doc, done


def _pair(new: pd.Series, old: pd.DataFrame, changes: dict) -> str | None:
    """The cell_id of the measured cell the what-if cell was predicted from."""
    moved = {c for k in changes for c in MOVED[k]}
    keys = [k for k in PAIR_KEYS if k not in moved and k in old.columns and k in new.index]
    match = old
    for k in keys:
        match = match[match[k].astype(str) == str(new[k])]
    return str(match["cell_id"].iloc[0]) if len(match) else None


def run_what_if(run: results.Run, changes: dict[str, float], predicted: list[dict]) -> None:
    """Run the changed experiment, fit it and print predicted vs measured per cell."""

    info = run.info
    if "document" not in info:
        raise PerfctlError(
            f"{run.path}: run.json holds no experiment document (a run from an older "
            "perfctl). Fix: run the experiment again, then --run-what-if."
        )
    doc, done = changed_document(info["document"], changes)
    slug = "-".join(f"{k}{v:g}" for k, v in changes.items())
    out = run.path / "what-if" / slug
    plan = compile_document(doc, info.get("source", str(run.path)), None, None)
    console.print(f"what-if run: {', '.join(done)} -> {out}")
    choice = Choice(plan, None, resumed=False, default=False, out=out)
    run_dir = choice.claim()
    try:
        with storage_guard(run_dir):
            _run(plan, run_dir, choice, plots=False, quiet=True, console=console)
    finally:
        process.stop_all()
        process.record_in(None)
    _, measured = queueing.fit_run(run_dir)
    by_origin = {c["cell_id"]: c for c in predicted}
    t = Table(
        title=f"What if {', '.join(done)}: predicted (fitted on {run.path.name}) vs measured "
        f"(ms; goal: within {100 * GOAL:.0f}%)"
    )
    for col in (
        "cell",
        "pred mean [band]",
        "meas mean",
        "err",
        "verdict",
        "pred p99 [band]",
        "meas p99",
        "err",
        "verdict",
    ):
        t.add_column(escape(col), justify="left" if col in ("cell", "verdict") else "right")
    old = queueing.queueing_table(run)
    for _, row in measured.iterrows():
        origin = _pair(row, old, changes)
        p = by_origin.get(origin) if origin else None
        cells = [str(row.get("label", row["cell_id"]))]
        for stat in ("mean", "p99"):
            meas = float(row.get(f"measured_{stat}_ms", math.nan))
            pred = float((p or {}).get(f"pred_{stat}_ms") or math.nan)
            lo = float((p or {}).get(f"pred_{stat}_low_ms") or math.nan)
            hi = float((p or {}).get(f"pred_{stat}_high_ms") or math.nan)
            err = (pred - meas) / meas if meas and math.isfinite(pred) else math.nan
            v = verdict.judge(
                stat,
                pred,
                verdict.Interval(lo, hi),
                meas,
                verdict.Interval(
                    float(row.get(f"measured_{stat}_low_ms", math.nan)),
                    float(row.get(f"measured_{stat}_high_ms", math.nan)),
                ),
                broken=str(row.get("broken", "") or "") or None,
                failed_share=float(row.get("error_rate", 0.0) or 0.0),
            )
            colour = {"held": "green", "rejected": "red", "inconclusive": "yellow"}.get(v.status)
            status = f"[{colour}]{v.status}[/]" if colour else v.status
            band = escape(f"{fmt(pred, '.3f')} [{fmt(lo, '.3g')}, {fmt(hi, '.3g')}]")
            cells += [band, fmt(meas, ".3f"), pct(err), status]
        t.add_row(*cells)
    console.print(t)

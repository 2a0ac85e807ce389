"""Trials the host spoiled are taken again (`retry_noisy`, 2 by default), and both attempts kept.

A trial is spoiled by the host when perfctl's noise probe called it not quiet (CPU steal, a
foreign process on its CPUs, the run queue: measure/noise.py), or when every reason it is
invalid for is a stall of the load generator's own (its collector's pauses, its event loop's
lag), which on a shared host come in spells like steal does. Such a trial says nothing about
the server, and a run on a spiky host would otherwise end with too few usable trials for
`compare` and `history` to give a verdict.

The spoiled attempt is not lost: its row goes to retried.csv (with `attempt`, `retried_why` and
`attempt_dir`), its files move to cells/<cell>/retried/trial-<k>-attempt-<n>/, and trial k runs
again with the same seed, so the attempts are comparable. The row trials.csv keeps for trial k
is the last attempt's, with `attempts`, `retried_why` (why the earlier ones were taken again)
and `retry_s` (the wall time they cost). A trial still spoiled after retry_noisy more attempts
is kept as it is, and says so.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd

from ..results.claim import trial_dir
from ..results.write import check_present

RETRIED_FILE = "retried.csv"
# reason kinds (the words a reason starts with, loadgen/validity.py) that are the host's doing
HOST_STALLS = ("load-generator GC pauses", "load-generator event-loop lag")


def spoiled_by_host(row: dict) -> str:
    """Why the host spoiled this trial, in a few words ("" when it did not). A trial invalid
    for anything but the generator's own stalls (the server died or failed requests, a
    service stopped, a host was lost, the generator fell behind its schedule) is what it is,
    noisy or not: taking it again would hide the failure behind a good attempt."""
    reasons = [r for r in str(row.get("invalid_reasons") or "").split("; ") if r]
    reasons = [r for r in reasons if not r.startswith("see ")]
    if not all(r.startswith(HOST_STALLS) for r in reasons):
        return ""
    if row.get("quiet") is False or str(row.get("quiet")) == "False":
        return f"not quiet: {row.get('noise_reasons') or 'host noise'}"
    if reasons:
        return "invalid for the load generator's own stalls: " + "; ".join(
            r.split(" (")[0] for r in reasons
        )
    return ""


def set_aside(run_dir: Path, row: dict, attempt: int, why: str) -> Path:
    """Keep a spoiled attempt: its files under cells/<cell>/retried/, its row in
    retried.csv (rewritten atomically). Returns where the files went."""
    check_present(run_dir)
    src = trial_dir(run_dir, row["cell_id"], int(row["trial"]))
    dst = src.parent / "retried" / f"trial-{int(row['trial'])}-attempt-{attempt}"
    if src.is_dir():
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists():  # left by an interrupted run: this attempt replaces it
            shutil.rmtree(dst)
        os.replace(src, dst)
    f = run_dir / RETRIED_FILE
    old = pd.read_csv(f) if f.is_file() else pd.DataFrame()
    kept = {
        **row,
        "attempt": attempt,
        "retried_why": why,
        "attempt_dir": os.path.relpath(dst, run_dir),
    }
    tmp = f.with_name(f.name + ".tmp")
    pd.concat([old, pd.DataFrame([kept])], ignore_index=True).to_csv(tmp, index=False)
    os.replace(tmp, f)
    return dst

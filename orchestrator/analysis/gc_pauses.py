"""GC and safepoint pauses of a Java server, from the JFR recording a profiled trial keeps
(`server.jfr`, measure/profiler.py, `profile: true`): the queueing models' verdicts name them
as evidence when a prediction misses (models/verdict.py `causes`).

Read with the JDK's `jfr print --json` (next to $JAVA_HOME/bin or on PATH), once per trial:
the result is kept beside the recording (`gc_pauses.json`). Columns, per trial:
`server_gc_pause_max_ms` (the longest stop: a GC's longest pause or a safepoint's duration),
`server_gc_pause_total_ms` (the GCs' pauses added) and `server_gc_pauses` (GCs). Trials
without a recording, or without `jfr`, get none.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd

from ..results import Run, trial_dir

EVENTS = "jdk.GarbageCollection,jdk.SafepointBegin"
_ISO = re.compile(r"^PT(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?$")


def duration_ms(text) -> float:
    """A JFR JSON duration ("PT0.0565S", "PT1M2.5S") in ms; 0 for anything else."""
    m = _ISO.match(str(text or ""))
    if not m:
        return 0.0
    h, mi, s = (float(x) if x else 0.0 for x in m.groups())
    return (h * 3600 + mi * 60 + s) * 1e3


def pauses(doc: dict) -> dict:
    """The pause columns from `jfr print --json --events EVENTS` output."""
    longest = total = 0.0
    gcs = 0
    for e in doc.get("recording", {}).get("events", []):
        v = e.get("values", {})
        if e.get("type") == "jdk.GarbageCollection":
            gcs += 1
            total += duration_ms(v.get("sumOfPauses"))
            longest = max(longest, duration_ms(v.get("longestPause")))
        elif e.get("type") == "jdk.SafepointBegin":
            longest = max(longest, duration_ms(v.get("duration")))
    return {
        "server_gc_pause_max_ms": longest,
        "server_gc_pause_total_ms": total,
        "server_gc_pauses": gcs,
    }


def _jfr() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "jfr").is_file():
        return str(Path(home) / "bin" / "jfr")
    return shutil.which("jfr")


def trial_pauses(tdir: Path) -> dict | None:
    """One trial's pause columns (cached in gc_pauses.json), None without a recording."""
    cache, rec = tdir / "gc_pauses.json", tdir / "server.jfr"
    if cache.is_file():
        return json.loads(cache.read_text())
    jfr = _jfr()
    if not rec.is_file() or jfr is None:
        return None
    try:
        out = subprocess.run(
            [jfr, "print", "--json", "--events", EVENTS, str(rec)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        row = pauses(json.loads(out.stdout)) if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        row = None
    if row is not None:
        try:
            cache.write_text(json.dumps(row))
        except OSError:  # a read-only results dir: read it again next time
            pass
    return row


def with_gc_columns(run: Run, trials: pd.DataFrame) -> pd.DataFrame:
    """trials with the pause columns filled for the trials that kept a JFR recording."""
    rows = {}
    for i, (cid, k) in enumerate(zip(trials["cell_id"], trials["trial"])):
        got = trial_pauses(trial_dir(run.path, cid, int(k)))
        if got is not None:
            rows[trials.index[i]] = got
    if not rows:
        return trials
    return trials.join(pd.DataFrame.from_dict(rows, orient="index"), how="left")

"""A run directory as the rows the history keeps: the run, its trials, its capacities, its labels.

What is kept per trial: throughput_rps, latency_p50_ms, latency_p99_ms, error_rate, valid and
quiet (trials.csv). Per cell of a run with `search:`: the capacity, its interval, its unit and
whether it was found (capacity.json); the probes of a search are not kept as trials, since
each ran at another load. Per run: the experiment's name, when it started (UTC), the system
under test's commit and the free labels (run.json `sut`, written by `perfctl run --commit
--label` or from `history: {git: DIR}`), and the host: CPU model, cores, kernel, and the
calibration of `perfctl calibrate` when one lies beside the run (results/.calibration.json).

The run id is a hash of what makes a run itself (experiment, start time, host name, the
experiment file's path): the same directory imported twice, or copied elsewhere and imported
again, is the same run. The host fingerprint is a hash of CPU model, cores and kernel: the
series a change point is sought in never mixes two machines.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from loadgen.floats import float_or_nan

from ..errors import PerfctlError
from ..results.claim import RUN_FILE
from ..results.schema import read_capacity, read_trials

TRIAL_METRICS = ("throughput_rps", "latency_p50_ms", "latency_p99_ms", "error_rate")
CALIBRATION_FILE = ".calibration.json"  # analysis/calibration.py writes it


@dataclass
class RunRecord:
    run_id: str
    experiment: str
    started: str  # UTC, 2026-11-26T16:44:49Z
    commit: str | None
    host_fingerprint: str
    host: dict
    run_dir: str
    labels: dict[str, str] = field(default_factory=dict)
    trials: list[dict] = field(default_factory=list)
    capacities: list[dict] = field(default_factory=list)


def utc(stamp: str) -> str:
    """run.json's `started` (local time with offset) as sortable UTC text."""
    try:
        t = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z")
    except (TypeError, ValueError):
        return str(stamp)
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hash(*parts) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:16]


def host_facts(info: dict, run_dir: Path) -> dict:
    host = info.get("host") or {}
    settings = host.get("settings") or {}
    facts = {
        "hostname": host.get("hostname"),
        "cpu_model": settings.get("cpu_model"),
        "cpu_count": host.get("cpu_count"),
        "kernel": host.get("kernel"),
    }
    calib = _calibration(run_dir)
    if calib is not None:
        facts["calibration"] = calib
    return facts


def _calibration(run_dir: Path) -> dict | None:
    """The trial and run spreads of the host's calibration, where `perfctl compare` finds it
    (analysis/calibration.py find): results/.calibration.json here, else in the results root
    the run lies in (results/<experiment>/<stamp>/ -> results/.calibration.json)."""
    for f in (Path("results") / CALIBRATION_FILE, run_dir.parent.parent / CALIBRATION_FILE):
        try:
            doc = json.loads(f.read_text())
            return {"created": doc.get("created"), "metrics": doc.get("metrics")}
        except (OSError, ValueError, AttributeError):
            continue
    return None


def fingerprint(facts: dict) -> str:
    return _hash(facts.get("cpu_model"), facts.get("cpu_count"), facts.get("kernel"))


def _cell_labels(info: dict, trials) -> dict[str, str]:
    out = {}
    for c in info.get("cells", []):
        values = c.get("values") or {}
        out[c["cell_id"]] = ", ".join(f"{k}={v}" for k, v in values.items())
    if "server" in getattr(trials, "columns", ()):
        for cid, server in zip(trials["cell_id"], trials["server"]):
            out[cid] = out.get(cid) or str(server)
    return out


def _num(v) -> float | None:
    """v as a float for the history's tables: None (NULL) where it is not a finite number."""
    f = float_or_nan(v)
    return f if math.isfinite(f) else None


def _flag(v) -> int:
    if isinstance(v, str):
        return int(v.strip().lower() in ("true", "1", "yes"))
    try:
        return int(bool(v)) if v == v else 0
    except TypeError:
        return 0


def from_run_dir(path: str | Path) -> RunRecord:
    """The record of one run directory. PerfctlError when it is no finished run."""
    run_dir = Path(path).resolve()
    try:
        info = json.loads((run_dir / RUN_FILE).read_text())
    except OSError:
        raise PerfctlError(
            f"{path}: not a perfctl run directory (no {RUN_FILE}). Fix: give directories "
            "written by perfctl run, e.g. perfctl history import results/*/*."
        ) from None
    except ValueError:
        raise PerfctlError(
            f"{path}/{RUN_FILE}: not valid JSON, so the run cannot be added. Fix: leave this "
            "directory out of the import (or restore its run.json)."
        ) from None
    trials = read_trials(run_dir)
    facts = host_facts(info, run_dir)
    sut = info.get("sut") or {}
    labels = {str(k): str(v) for k, v in (sut.get("labels") or {}).items()}
    record = RunRecord(
        run_id=_hash(
            info.get("experiment"), info.get("started"), facts["hostname"], info.get("source")
        ),
        experiment=str(info.get("experiment")),
        started=utc(info.get("started", "")),
        commit=sut.get("commit"),
        host_fingerprint=fingerprint(facts),
        host=facts,
        run_dir=str(run_dir),
        labels=labels,
    )
    names = _cell_labels(info, trials)
    searched = "search_role" in trials.columns and trials["search_role"].notna().any()
    if not searched:
        for row in trials.to_dict("records"):
            record.trials.append(
                {
                    "cell_id": str(row["cell_id"]),
                    "cell_label": names.get(str(row["cell_id"]), str(row["cell_id"])),
                    "trial": int(row["trial"]),
                    **{m: _num(row.get(m)) for m in TRIAL_METRICS},
                    "valid": _flag(row.get("valid", True)),
                    "quiet": _flag(row.get("quiet", True)),
                }
            )
    capacity = read_capacity(run_dir)
    for c in (capacity or {}).get("cells", []):
        record.capacities.append(
            {
                "cell_id": str(c["cell_id"]),
                "cell_label": names.get(str(c["cell_id"]), str(c.get("label", c["cell_id"]))),
                "capacity": _num(c.get("capacity")),
                "low": _num(c.get("low")),
                "high": _num(c.get("high")),
                "unit": str(c.get("unit", "")),
                "found": int(c.get("status") == "found"),
            }
        )
    return record


def git_head(directory: Path, source: str) -> str:
    """`git -C DIR rev-parse HEAD`: the commit of the system under test. PerfctlError naming
    `history.git` when DIR is no git work tree."""
    try:
        p = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        why = str(e)
    else:
        line = p.stdout.strip()
        if p.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", line):
            return line
        why = (p.stderr.strip().splitlines() or ["no commit"])[-1]
    raise PerfctlError(
        f"{source}: key `history.git`: cannot read the commit of {directory} with git rev-parse "
        f"HEAD ({why}). Fix: name the system under test's git work tree, or drop "
        "`history.git` and pass perfctl run --commit SHA."
    )


LABEL = re.compile(r"^([A-Za-z0-9_.-]+)=(.*)$")


def parse_labels(items: list[str] | None) -> dict[str, str]:
    """--label k=v (repeatable) as a dict. PerfctlError on a malformed one."""
    out = {}
    for item in items or []:
        m = LABEL.match(item)
        if not m:
            raise PerfctlError(
                f"--label {item!r}: a label is KEY=VALUE, the key letters, digits, . _ -. "
                "Fix: e.g. --label branch=main --label ci_job=1234."
            )
        out[m.group(1)] = m.group(2)
    return out

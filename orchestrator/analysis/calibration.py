"""A host's calibration: how far apart A/A runs of one experiment land on it, and from that
the smallest change `compare` can resolve with n trials per side. `perfctl calibrate` writes
it (results/.calibration.json by default); `compare` reads it to say when a change is below
what the host can resolve.

Two spreads per metric (throughput_rps, latency_p50_ms, latency_p99_ms), relative to the
metric's level:
- trial_cv: trial to trial within a run (pooled over runs);
- run_cv: the run-to-run component, what stays of the spread of the runs' medians once the
  trial-to-trial part of it (pi/2 * trial_cv^2 / trials) is taken out. compare's trial-level
  test does not see this part; it is what makes two identical runs differ.

resolution(n) is the change that a test at Holm level alpha / tests detects with 80% power
when both spreads are at work, for n trials per side:

  (z(1 - alpha / (2 tests)) + z(0.8)) * sqrt(2 * (run_cv^2 + trial_cv^2 / (0.955 n)))

(0.955 = 3/pi: the Mann-Whitney test's efficiency against the t test on normal data), and
infinite when n trials cannot reach that level at all (trial_tests.min_attainable_p).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

from ..errors import PerfctlError, read_user_file
from .trial_tests import min_attainable_p

DEFAULT_PATH = Path("results") / ".calibration.json"
METRICS = ("throughput_rps", "latency_p50_ms", "latency_p99_ms")
POWER = 0.8
MW_EFFICIENCY = 3 / math.pi


def spreads(runs: list[np.ndarray]) -> dict:
    """trial_cv and run_cv of one metric from each run's usable trial values."""
    runs = [np.asarray(r, dtype=float)[np.isfinite(r)] for r in runs]
    runs = [r for r in runs if r.size >= 2]
    if len(runs) < 2:
        return {"trial_cv": math.nan, "run_cv": math.nan, "runs": len(runs)}
    level = float(np.median(np.concatenate(runs)))
    within = np.concatenate([r - r.mean() for r in runs])
    dof = sum(r.size - 1 for r in runs)
    trial_cv = float(np.sqrt((within**2).sum() / dof) / level)
    medians = np.array([np.median(r) for r in runs])
    per_run = np.mean([r.size for r in runs])
    between = float(np.var(medians, ddof=1)) / level**2 - math.pi / 2 * trial_cv**2 / per_run
    return {
        "trial_cv": trial_cv,
        "run_cv": math.sqrt(max(0.0, between)),
        "runs": len(runs),
        "level": level,
        "run_medians": medians.tolist(),
    }


def resolution(
    trial_cv: float, run_cv: float, n: int, alpha: float = 0.05, tests: int = 3
) -> float:
    """The smallest relative change resolvable with n trials per side (see the module)."""
    if n < 1 or min_attainable_p(n, n) > alpha / tests:
        return math.inf
    z = sps.norm.ppf(1 - alpha / (2 * tests)) + sps.norm.ppf(POWER)
    return float(z * math.sqrt(2 * (run_cv**2 + trial_cv**2 / (MW_EFFICIENCY * n))))


def document(
    host: dict,
    experiment: str,
    runs: int,
    trials_per_run: int,
    per_metric: dict,
    repeat_counts=(3, 5, 10, 20),
) -> dict:
    """The calibration file's contents."""
    table = {
        str(n): {
            m: resolution(s["trial_cv"], s["run_cv"], n)
            for m, s in per_metric.items()
            if s["trial_cv"] == s["trial_cv"]
        }
        for n in repeat_counts
    }
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": host,
        "experiment": experiment,
        "runs": runs,
        "trials_per_run": trials_per_run,
        "metrics": per_metric,
        "resolution": table,
    }


def save(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(path)


def load(path: Path) -> dict:
    text = read_user_file(
        path, "calibration", "run perfctl calibrate, or give its file with --calibration."
    )
    try:
        doc = json.loads(text)
    except ValueError:
        raise PerfctlError(
            f"{path}: not a calibration file (bad JSON). Fix: run perfctl calibrate again."
        ) from None
    if not isinstance(doc, dict) or "metrics" not in doc:
        raise PerfctlError(
            f"{path}: not a calibration file (no `metrics`). Fix: run perfctl calibrate again."
        )
    return doc


def find(explicit: Path | None, run_path: Path) -> Path | None:
    """The calibration to use: `explicit`, else results/.calibration.json here, else the one
    in the results root the run lies in (results/<experiment>/<stamp>)."""
    if explicit is not None:
        return explicit
    for p in (DEFAULT_PATH, run_path.parent.parent / ".calibration.json"):
        if p.is_file():
            return p
    return None


def host_resolution(doc: dict, metric: str, n: int, alpha: float, tests: int) -> float | None:
    """The resolvable change for a metric at n trials per side, or None if not calibrated."""
    s = doc.get("metrics", {}).get(metric)
    if not s or s.get("trial_cv") is None or s["trial_cv"] != s["trial_cv"]:
        return None
    return resolution(s["trial_cv"], s["run_cv"], n, alpha, tests)

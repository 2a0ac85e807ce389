"""How well `perfctl history` finds level shifts in series made of this host's real noise,
beside Apache Otava, a pairwise compare of consecutive runs and a fixed 5% threshold; and how
long `perfctl history check` takes on 10,000 runs.

The corpus: A/A trials of one small experiment on this host (--corpus RUN_DIR reuses a run,
else one is run: 90 trials of 1 s, a few minutes). Its valid trials, in the order they ran,
are cut into blocks of 3 consecutive trials: one block is one run's trials, so a run keeps
the spread and the correlation of trials run back to back. Each metric (throughput, p50) is
divided by its corpus median. Series of 30-60 runs draw blocks at random (with replacement:
the corpus is smaller than the series) and get, at a known run L:
  step3 / step5 / step10: a step of 3%, 5%, 10% (either sign) from run L on;
  drift10: a ramp to 10% over 15 runs from L;
  outlier: one run's trials all x1.3 or x0.7, nothing else;
  null: nothing.
Half of the step series also get one outlier run, at least 5 runs from the step.

Scoring (an alert = a run a detector says the level changed at):
  recall: share of series whose change got an alert at L +- 1 (drift: anywhere from L - 1 to
          L + 15);
  false alerts: alerts matching no injected change, as a share of all alerts;
  located +-1: of the steps with an alert within 5 runs, the share whose nearest alert is at
          L +- 1;
  on none: alerts on the null and outlier series (all false; the rest of the false alerts
          are real changes located more than 1 run off).
Detectors:
  perfctl: orchestrator/history/changepoints.py on trial-level data (min 3 runs a side,
           alpha 0.01, 499 run permutations);
  otava default / tuned: apache-otava 0.8 compute_change_points on run means, defaults
           (window 50, max_pvalue 0.001, min_magnitude 0) and tuned by hand once (window 30,
           max_pvalue 0.01, min_magnitude 0.02). Otava pins numpy 2.2 and scipy < 1.17, so it
           runs in a venv of its own: --otava-python PATH (e.g. python3 -m venv /tmp/otava &&
           /tmp/otava/bin/pip install apache-otava==0.8.0);
  pairwise compare: each run against the one before with compare's rules on the trials
           (analysis/compare.py): a Mann-Whitney p < 0.05 and a change beyond 5%, or sides
           that do not overlap by more than max(5%, 6 x the corpus' trial spread);
  threshold 5%: the run's median more than 5% from the previous run's.
  oracle: not a detector but a ceiling for the scores here. It is told which series hold
           one change (none of the null and outlier series) and places exactly one alert at
           the best split of the run means of trial ranks (the rank CUSUM: the most likely
           single step location, robust to the outlier runs). It needs no significance test,
           so its recall is the share of changes this much noise lets anyone locate within
           +-1 run, and its false alerts are the ones that are placed more than 1 run off.

    .venv/bin/python benchmarks/history_detection.py --corpus results/history-aa/RUN \\
        --otava-python /tmp/otava/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from _common import ROOT  # noqa: F401  (puts the repo root on sys.path)

from orchestrator.analysis.trial_tests import mann_whitney_p
from orchestrator.history import changepoints, trend
from orchestrator.history.record import RunRecord
from orchestrator.history.store import Location, Store
from orchestrator.results.schema import read_trials

AA_EXPERIMENT = """
name: history-aa
description: A/A noise corpus for benchmarks/history_detection.py (one cell, many short trials)
servers:
  pool: {impl: c, model: pool, threads: 2}
workload: {path: /work, params: {spin_us: 200}}
load: {mode: closed, connections: 4, duration: 1s, warmup: 0.3s}
repeats: 90
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""
METRICS = {"throughput": "throughput_rps", "p50": "latency_p50_ms"}
SCENARIOS = ("null", "outlier", "step3", "step5", "step10", "drift10")
TRIALS_PER_RUN = 3
START = datetime(2026, 1, 1)

OTAVA_SCRIPT = """
import json, sys
from otava.analysis import compute_change_points
job = json.load(sys.stdin)
out = []
for s in job["series"]:
    cps, _ = compute_change_points(s, **job["params"])
    out.append([int(c.index) for c in cps])
print(json.dumps(out))
"""


def corpus(run_dir: Path | None) -> Path:
    if run_dir is not None:
        return run_dir
    out = ROOT / "results" / "benchmarks" / "history-aa"
    if (out / "trials.csv").is_file():
        return out
    exp = Path(tempfile.mkdtemp()) / "aa.yaml"
    exp.write_text(AA_EXPERIMENT)
    subprocess.run(
        [str(ROOT / ".venv/bin/perfctl"), "run", str(exp), "--out", str(out), "-q", "--no-plots"],
        check=True,
        env={**os.environ, "PERFCTL_HISTORY_URL": str(out.parent / "aa-history.sqlite")},
    )
    return out


def blocks(run_dir: Path, column: str, scale: float = 1.0) -> tuple[list[np.ndarray], int, int]:
    """Runs of TRIALS_PER_RUN consecutive valid trials, divided by the median; `scale`
    shrinks every deviation from 1 (0.1: a host ten times quieter, same shape of noise)."""
    t = read_trials(run_dir).sort_values("trial")
    valid = t[t["valid"].astype(bool)]
    x = valid[column].to_numpy(dtype=float)
    x = 1 + scale * (x / np.median(x) - 1)
    n = len(x) // TRIALS_PER_RUN
    return (
        [x[i * TRIALS_PER_RUN : (i + 1) * TRIALS_PER_RUN] for i in range(n)],
        len(t),
        int(valid["quiet"].astype(bool).sum()),
    )


def make_series(pool: list[np.ndarray], scenario: str, rng) -> tuple[list[np.ndarray], dict]:
    n = int(rng.integers(30, 61))
    runs = [pool[i].copy() for i in rng.integers(0, len(pool), n)]
    label: dict = {"kind": scenario}
    sign = rng.choice([-1.0, 1.0])
    if scenario.startswith("step"):
        size = int(scenario[4:]) / 100
        at = int(rng.integers(8, n - 7))
        for i in range(at, n):
            runs[i] *= 1 + sign * size
        label |= {"at": at, "lo": at - 1, "hi": at + 1}
        if rng.random() < 0.5:
            far = [i for i in range(n) if abs(i - at) >= 5]
            runs[int(rng.choice(far))] *= rng.choice([1.3, 0.7])
    elif scenario == "drift10":
        at = int(rng.integers(5, n - 20))
        for i in range(at, n):
            runs[i] *= 1 + sign * 0.10 * min(1.0, (i - at + 1) / 15)
        label |= {"at": at, "lo": at - 1, "hi": at + 15}
    elif scenario == "outlier":
        runs[int(rng.integers(0, n))] *= rng.choice([1.3, 0.7])
    return runs, label


def perfctl_alerts(runs) -> list[int]:
    return [c.index for c in changepoints.detect(runs)]


def oracle_alerts(runs, label: dict) -> list[int]:
    if label["kind"] in ("null", "outlier"):
        return []
    sizes = [len(r) for r in runs]
    ranks = changepoints._ranks(np.concatenate(runs))
    x = np.array([part.mean() for part in np.split(ranks, np.cumsum(sizes)[:-1])])
    n = len(x)
    c = np.cumsum(x - x.mean())
    k = np.arange(changepoints.MIN_RUNS, n - changepoints.MIN_RUNS + 1)
    return [int(k[np.argmax(c[k - 1] ** 2 / (k * (n - k) / n))])]


def pairwise_alerts(runs, trial_sd: float) -> list[int]:
    out = []
    for i in range(1, len(runs)):
        b, c = runs[i - 1], runs[i]
        change = np.median(c) / np.median(b) - 1
        if mann_whitney_p(b, c) < 0.05 and abs(change) > 0.05:
            out.append(i)
            continue
        gap = c.min() / b.max() - 1 if c.min() > b.max() else c.max() / b.min() - 1
        if (c.min() > b.max() or c.max() < b.min()) and abs(gap) > max(0.05, 6 * trial_sd):
            out.append(i)
    return out


def threshold_alerts(runs) -> list[int]:
    med = [np.median(r) for r in runs]
    return [i for i in range(1, len(med)) if abs(med[i] / med[i - 1] - 1) > 0.05]


def otava_alerts(python: str | None, series: list, params: dict) -> list[list[int]] | None:
    if not python:
        return None
    job = {"series": [[float(np.mean(r)) for r in runs] for runs in series], "params": params}
    p = subprocess.run(
        [python, "-c", OTAVA_SCRIPT], input=json.dumps(job), capture_output=True, text=True
    )
    if p.returncode != 0:
        print(f"otava failed: {p.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(p.stdout)


def score(labels: list[dict], alerts: list[list[int]]) -> dict:
    hit = {s: [0, 0] for s in SCENARIOS if s not in ("null", "outlier")}
    false = total = near = located = quiet_false = 0
    for label, found in zip(labels, alerts):
        total += len(found)
        kind = label["kind"]
        if kind in hit:
            ok = [a for a in found if label["lo"] <= a <= label["hi"]]
            hit[kind][0] += bool(ok)
            hit[kind][1] += 1
            false += len(found) - len(ok)
            if kind.startswith("step"):
                close = [a for a in found if abs(a - label["at"]) <= 5]
                if close:
                    near += 1
                    located += min(abs(a - label["at"]) for a in close) <= 1
        else:
            false += len(found)
            quiet_false += len(found)
    return {
        "no_change_alerts": quiet_false,
        "recall": {k: v[0] / v[1] for k, v in hit.items()},
        "false_share": false / total if total else 0.0,
        "alerts": total,
        "located": located / near if near else float("nan"),
    }


def check_time(pool: list[np.ndarray], runs: int = 10_000) -> tuple[float, float, int]:
    """Seconds of `perfctl history check` (the console script, start-up included) and of
    trend.check in this process, on a store of `runs` runs with a 10% step 20 runs from the
    end; and the script's exit code."""
    rng = np.random.default_rng(10_000)
    tmp = Path(tempfile.mkdtemp())
    loc = Location(str(tmp / "h.sqlite"), "benchmark")
    with Store(loc) as st:
        for k in range(runs):
            r = RunRecord(
                f"run-{k:06d}",
                "bench",
                (START + timedelta(minutes=k)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                f"{k:040x}",
                "host",
                {},
                "",
            )
            tp = pool[int(rng.integers(0, len(pool)))] * (0.9 if k >= runs - 20 else 1.0)
            for t, v in enumerate(tp):
                r.trials.append(
                    {
                        "cell_id": "c1",
                        "cell_label": "cell=c1",
                        "trial": t,
                        "throughput_rps": float(v) * 1000,
                        "latency_p50_ms": 1.0,
                        "latency_p99_ms": 5.0 / float(v),
                        "error_rate": 0.0,
                        "valid": 1,
                        "quiet": 1,
                    }
                )
            st.add(r)
    t0 = time.perf_counter()
    p = subprocess.run(
        [str(ROOT / ".venv/bin/perfctl"), "history", "check", "--store", loc.target],
        capture_output=True,
        text=True,
    )
    script_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with Store(loc, create=False) as st:
        trend.check(st)
    return script_s, time.perf_counter() - t0, p.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, help="an A/A run directory to reuse")
    ap.add_argument("--otava-python", help="a python with apache-otava installed")
    ap.add_argument("--series", type=int, default=20, help="series per scenario and metric")
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument(
        "--scale",
        type=float,
        action="append",
        help="also score the corpus with its deviations times this (repeatable; 1 = as "
        "measured, always scored first)",
    )
    args = ap.parse_args()
    run_dir = corpus(args.corpus)
    for scale in dict.fromkeys([1.0, *(args.scale or [])]):
        table(run_dir, args, scale)
    pool, _, _ = blocks(run_dir, "throughput_rps")
    script_s, inproc_s, code = check_time(pool)
    print(
        f"perfctl history check on 10,000 runs (1 cell, 3 trials each, 2 metrics): "
        f"{script_s:.2f} s for the command (start-up included, exit {code}), "
        f"{inproc_s:.2f} s in process"
    )


def table(run_dir: Path, args, scale: float) -> None:
    detectors = (
        "perfctl",
        "otava default",
        "otava tuned",
        "pairwise compare",
        "threshold 5%",
        "oracle (ceiling)",
    )
    rows = []
    print(f"\n== noise as measured x {scale:g}")
    for metric, column in METRICS.items():
        pool, trials, quiet = blocks(run_dir, column, scale)
        within = np.concatenate([b - b.mean() for b in pool])
        trial_sd = float(np.sqrt((within**2).sum() / (len(within) - len(pool))))
        run_sd = float(np.std([np.median(b) for b in pool], ddof=1))
        print(
            f"corpus {run_dir}: {metric}: {trials} trials, {len(pool) * TRIALS_PER_RUN} valid in "
            f"{len(pool)} runs of {TRIALS_PER_RUN} ({quiet} quiet); trial-to-trial sd "
            f"{trial_sd:.1%}, sd of run medians {run_sd:.1%}"
        )
        rng = np.random.default_rng(args.seed)
        made = [make_series(pool, s, rng) for s in SCENARIOS for _ in range(args.series)]
        series, labels = [m[0] for m in made], [m[1] for m in made]
        t0 = time.perf_counter()
        found = {"perfctl": [perfctl_alerts(s) for s in series]}
        perfctl_s = (time.perf_counter() - t0) / len(series)
        found["otava default"] = otava_alerts(args.otava_python, series, {})
        found["otava tuned"] = otava_alerts(
            args.otava_python,
            series,
            {"window_len": 30, "max_pvalue": 0.01, "min_magnitude": 0.02},
        )
        found["pairwise compare"] = [pairwise_alerts(s, trial_sd) for s in series]
        found["threshold 5%"] = [threshold_alerts(s) for s in series]
        found["oracle (ceiling)"] = [oracle_alerts(s, lab) for s, lab in zip(series, labels)]
        for d in detectors:
            rows.append((metric, d, None if found[d] is None else score(labels, found[d])))
        print(f"perfctl's detector: {perfctl_s * 1e3:.0f} ms per series on average")
    print()
    head = f"{'metric':<11}{'detector':<18}{'rec 3%':>7}{'rec 5%':>7}{'rec 10%':>8}"
    head += f"{'drift':>7}{'false':>7}{'alerts':>7}{'loc±1':>7}{'on none':>8}"
    print(head)
    print("-" * len(head))
    for metric, d, s in rows:
        if s is None:
            print(f"{metric:<11}{d:<18}  not run (--otava-python not given or failed)")
            continue
        r = s["recall"]
        print(
            f"{metric:<11}{d:<18}{r['step3']:>7.0%}{r['step5']:>7.0%}{r['step10']:>8.0%}"
            f"{r['drift10']:>7.0%}{s['false_share']:>7.0%}{s['alerts']:>7d}{s['located']:>7.0%}"
            f"{s['no_change_alerts']:>8d}"
        )
    print(
        f"\n{args.series} series per scenario and metric (null, outlier, step3, step5, step10, "
        "drift10), 30-60 runs of 3 trials each"
    )


if __name__ == "__main__":
    main()

"""Does validity follow the figures on a noisy host? (issue #32, finding 1)

  .venv/bin/python benchmarks/validity_on_noisy_hosts.py [--quick] [--repeats 5] [--seed 32]
                                    [--placement own|shared] [--emulate-coarse-timer]

One open-load experiment: the bundled C `pool` server (4 worker threads, a 1024-connection
accept queue) answering /work?sleep_us=4000&dist=exp (an exponential service time of mean
4 ms: M/M/4), Poisson arrivals at 300, 500, 700 and 850 req/s (rho 0.3 to 0.85), a new
connection per request (so the queue is the server's accept queue, not the client's pool),
server on CPU 0 and load generator on CPU 1 (`--placement shared`: both unpinned, sharing the
two CPUs). `--emulate-coarse-timer` runs the generator under a coarse cloud VM's timer
(PERFCTL_EMULATE_COARSE_TIMER, loadgen/coarse_timer.py), on a host whose own timer is fine.
Spoiled trials are not taken again here (retry_noisy: 0): the point is how each is judged. It runs twice with the same seeds, so trial k of a
cell sends the same schedule both times: once quiet, once beside a seeded neighbour that
spins in bursts of 1-3 s at 40-60% duty on CPU 0 or 1, with gaps of 4-10 s (about 10-15% of
a CPU on average; each burst logged).

For every trial it reads the figures the trial reports (mean, p50, p90, p99: from the
intended send time, or from each actual send where the trial says `figures_from: send`) and
their precision (their 95% interval from requests.parquet's order statistics, at least 2%: the
rule of loadgen/validity.py) and asks whether the figures moved beyond that precision from
the quiet run's (the median of the cell's valid quiet-run trials). Printed side by side per
rate: the share of trials valid and quiet, the median figures, how far they moved, and the
lateness shift the trial reported (lateness_shift_of_precision; above 1 it is invalid).

Goal: >= 90% of the trials whose figures moved less than their precision are valid; 100% of
those whose figures moved more are invalid (and, since a neighbour slows the server too,
which validity does not judge: not usable, i.e. invalid or noisy). A shared or busy machine
moves figures for reasons of its own; the line "host busy before the run" says how busy.
Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from pathlib import Path

import _common
import numpy as np
import pandas as pd
from _common import perfctl

from loadgen import stats
from orchestrator.analysis.views import reason_kind
from orchestrator.measure.schedstat import USER_HZ, read_cpu_ticks

EXPERIMENT = """
name: validity-noisy
servers:
  c-pool: {{impl: c, model: pool, threads: 4, backlog: 1024}}
workload: {{path: /work, params: {{sleep_us: 4000, dist: exp}}}}
load: {{mode: open, rate: "{{rate}}", arrivals: poisson, keepalive: false, connections: 64,
        duration: {duration}, warmup: {warmup}, timeout: 5s}}
matrix: {{rate: [300, 500, 700, 850]}}
repeats: {repeats}
retry_noisy: 0
order: interleaved
{placement}
"""
PLACEMENT_OWN = "placement: {server_cpus: [0], loadgen_cpus: [1]}"
FIGURES = {"mean": None, "p50": 50.0, "p90": 90.0, "p99": 99.0}
FLOOR = 0.02  # loadgen/validity.py PRECISION_FLOOR


def neighbour(seed: int, cpus: list[int], log: str, stop) -> None:
    """_common.neighbour with this benchmark's bursts: 1-3 s at 40-60% duty after gaps of
    4-10 s (10-15% of a CPU on average)."""
    _common.neighbour(
        seed, cpus, log, stop, gap_s=(4.0, 10.0), duty=(0.4, 0.6), length_s=(1.0, 3.0)
    )


def host_busy_pct(seconds: float = 3.0) -> float:
    """CPU in use on CPUs 0 and 1 over a few seconds: % of one CPU."""
    a, t0 = read_cpu_ticks(), time.monotonic()
    time.sleep(seconds)
    b, dt = read_cpu_ticks(), time.monotonic() - t0
    idle = sum(b[c].idle - a[c].idle for c in (0, 1) if c in a and c in b) / USER_HZ
    return 100 * max(0.0, 2 * dt - idle) / dt


def run(exp: Path, out: Path) -> pd.DataFrame:
    p = perfctl("run", str(exp), "--out", str(out), "--no-plots", timeout=3600)
    if p.returncode != 0:
        raise SystemExit(f"perfctl run failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    t = pd.read_csv(out / "trials.csv", keep_default_na=False, na_values=["", "nan"])
    return t.assign(run=out.name)


def figures(run_dir: Path, cell_id: str, trial: int, from_send: bool = False) -> dict:
    """The trial's figures and the low and high ends of their 95% intervals (ms), from its
    requests.parquet: the measured window's completed requests, as perfctl computes them
    (from_send: less each request's dispatch lateness, what the server saw)."""
    tdir = run_dir / "cells" / cell_id / f"trial-{trial}"
    summary = json.loads((tdir / "summary.json").read_text())
    cols = ["intended_ns", "done_ns", "error", "dispatch_late_ns"]
    req = pd.read_parquet(tdir / "requests.parquet", columns=cols)
    m = (
        (req["intended_ns"] >= summary["measure_start_ns"])
        & (req["intended_ns"] < summary["measure_end_ns"])
        & (req["error"] == 0)
    )
    late = req["dispatch_late_ns"] if from_send else 0
    lat = ((req["done_ns"] - req["intended_ns"] - late)[m].clip(lower=0) / 1e6).to_numpy()
    out = {}
    for name, q in FIGURES.items():
        if lat.size == 0:
            out[name] = (math.nan, math.nan, math.nan)
        elif q is None:
            half = 1.96 * lat.std() / math.sqrt(lat.size)
            out[name] = (float(lat.mean()), lat.mean() - half, lat.mean() + half)
        else:
            out[name] = (stats.percentile(lat, q), *stats.percentile_ci(lat, q))
    return out


def moved(fig: dict, ref: dict) -> tuple[bool, dict]:
    """Whether any figure moved beyond its precision from ref (the reference value lies
    outside the trial's interval widened to at least 2%), and each relative move."""
    beyond, rel = False, {}
    for name, (value, lo, hi) in fig.items():
        r = ref.get(name, math.nan)
        if not (value == value and r == r and value > 0):
            continue
        rel[name] = value / r - 1
        if not (lo == lo and hi == hi):  # the sample cannot bound it: no stated precision
            continue
        lo, hi = min(lo, value * (1 - FLOOR)), max(hi, value * (1 + FLOOR))
        beyond |= not lo <= r <= hi
    return beyond, rel


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}% of {whole}" if whole else "- of 0"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 s trials, 2 repeats")
    ap.add_argument("--repeats", type=int, default=None, help="trials per cell (default 5)")
    ap.add_argument("--seed", type=int, default=32, help="the neighbour's seed")
    ap.add_argument("--placement", choices=("own", "shared"), default="own")
    ap.add_argument("--emulate-coarse-timer", action="store_true")
    args = ap.parse_args()
    if args.emulate_coarse_timer:
        os.environ["PERFCTL_EMULATE_COARSE_TIMER"] = str(args.seed)
    repeats = args.repeats or (2 if args.quick else 5)
    duration, warmup = ("3s", "1s") if args.quick else ("10s", "2s")
    work = Path(tempfile.mkdtemp(prefix="perfctl-validity-"))
    exp = work / "exp.yaml"
    placement = PLACEMENT_OWN if args.placement == "own" else ""
    exp.write_text(
        EXPERIMENT.format(duration=duration, warmup=warmup, repeats=repeats, placement=placement)
    )
    busy = host_busy_pct()
    print(
        f"work dir {work}; {repeats} trials of {duration} per rate; neighbour seed {args.seed}; "
        f"placement {args.placement}; emulated coarse timer: {args.emulate_coarse_timer}; "
        f"host busy before the run: {busy:.0f}% of a CPU on CPUs 0-1"
        + (" (not a quiet host: figures move for its own reasons too)" if busy > 5 else "")
    )
    quiet = run(exp, work / "quiet")
    log = work / "neighbour.jsonl"
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    neigh = ctx.Process(target=neighbour, args=(args.seed, [0, 1], str(log), stop), daemon=True)
    neigh.start()
    t0 = time.perf_counter_ns()
    try:
        noisy = run(exp, work / "noisy")
    finally:
        stop.set()
        neigh.join(10)
    t1 = time.perf_counter_ns()
    bursts = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    busy_ns = sum(b["duty"] * (b["end_ns"] - b["start_ns"]) for b in bursts)
    print(
        f"neighbour: {len(bursts)} bursts, {100 * busy_ns / max(1, t1 - t0):.1f}% of a CPU "
        "over the noisy run"
    )
    trials = pd.concat([quiet, noisy], ignore_index=True)
    rows = []
    for _, t in trials.iterrows():
        from_send = str(t.get("figures_from", "intended")) == "send"
        fig = figures(work / t["run"], t["cell_id"], int(t["trial"]), from_send)
        rows.append({**t.to_dict(), "fig": fig})
    table = pd.DataFrame(rows)
    refs, basis = {}, []
    for rate, g in table[table["run"] == "quiet"].groupby("rate"):
        valid = g["valid"].astype(bool)
        use = g[valid] if valid.any() else g
        refs[rate] = {name: float(np.median([f[name][0] for f in use["fig"]])) for name in FIGURES}
        basis.append(f"{rate}/s: {len(use)} {'valid' if valid.any() else 'INVALID (none valid)'}")
    print("quiet-run reference (median of the cell's trials): " + ", ".join(basis))
    judged = [moved(r["fig"], refs[r["rate"]]) for _, r in table.iterrows()]
    table["moved"] = [b for b, _ in judged]
    table["rel"] = [rel for _, rel in judged]
    print(
        "\nper rate and run: trials valid / quiet, median p50 and p99 (ms), their median "
        "move from the quiet run, trials whose figures moved beyond their precision, and the "
        "median lateness shift as a share of precision"
    )
    print(
        f"{'rate':>5} {'run':6} {'valid':>6} {'quiet':>6} {'p50':>7} {'p99':>7} "
        f"{'p50 mv':>7} {'p99 mv':>7} {'moved':>6} {'shift':>6}"
    )
    for (rate, name), g in table.groupby(["rate", "run"], sort=True):
        n = len(g)
        p50 = np.median([f["p50"][0] for f in g["fig"]])
        p99 = np.median([f["p99"][0] for f in g["fig"]])
        mv50 = np.median([r.get("p50", math.nan) for r in g["rel"]])
        mv99 = np.median([r.get("p99", math.nan) for r in g["rel"]])
        shift = pd.to_numeric(g.get("lateness_shift_of_precision"), errors="coerce").median()
        print(
            f"{rate:>5} {name:6} {int(g['valid'].astype(bool).sum()):>3}/{n:<2} "
            f"{int(g['quiet'].astype(bool).sum()):>3}/{n:<2} {p50:7.2f} {p99:7.2f} "
            f"{100 * mv50:+6.1f}% {100 * mv99:+6.1f}% {int(g['moved'].sum()):>3}/{n:<2} "
            f"{shift:6.2f}"
        )
    for name in ("quiet", "noisy"):
        g = table[table["run"] == name]
        still, moved_ = g[~g["moved"]], g[g["moved"]]
        valid_still = int(still["valid"].astype(bool).sum())
        invalid_moved = int((~moved_["valid"].astype(bool)).sum())
        unusable = int((~(moved_["valid"].astype(bool) & moved_["quiet"].astype(bool))).sum())
        print(
            f"\n{name} run: figures within their precision of the quiet run: valid in "
            f"{pct(valid_still, len(still))} (goal >= 90%); moved beyond it: invalid in "
            f"{pct(invalid_moved, len(moved_))} (goal 100%), not usable (invalid or noisy) in "
            f"{pct(unusable, len(moved_))}"
        )
        reasons = g.loc[~g["valid"].astype(bool), "invalid_reasons"].astype(str)
        kinds = pd.Series([reason_kind(r) for t in reasons for r in t.split("; ")]).value_counts()
        if len(kinds):
            print("  invalid for: " + ", ".join(f"{k} x{v}" for k, v in kinds.items()))
        if "figures_from" in g:
            sent = int((g["figures_from"].astype(str) == "send").sum())
            print(f"  figures from each actual send (what the server saw): {sent} of {len(g)}")
    if os.environ.get("KEEP") != "1":
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")


if __name__ == "__main__":
    main()

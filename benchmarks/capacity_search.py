"""How close, how sure and how fast is the capacity search? One run, one table.

  .venv/bin/python benchmarks/capacity_search.py [--quick] [--servers c-epoll,java-pool,py-async]
        [--span 6] [--duration 6] [--rounds 3] [--include-noisy] [--keep DIR]

For each of three bundled servers (C epoll, Java pool, Python async), a workload and a p99 SLO
chosen so that the knee lies inside what one load-generator core can drive (server on CPU 0,
load generator on CPU 1):

- the search: `perfctl run` with `search: {slo: {p99: ...}, precision: 2%, max_trials: 8}`;
- a reference sweep: open load at rates in 1% steps from -span% to +span% around the searched
  capacity, 3 trials per step (`--quick`: +-3%). The reference capacity is where the median
  trial's p99 crosses the SLO: the medians are made non-decreasing in the rate (pool-adjacent
  violators on log p99, so one noisy step does not make several crossings), then the crossing
  is interpolated linearly in log p99 between the two steps around it.

Alternating: every server's search runs first (the sweep is centred on it), then the sweep in
rounds, one trial per rate and server per round, servers in turn, so a drift of the host lands
on every server and every step alike. The sweep uses the trials that are valid (noisy ones too:
the count of quiet ones is printed); the search uses what its own rules allow.

Printed per server: the searched capacity, its interval, the reference, the error (capacity /
reference - 1), whether the interval holds the reference, the search's trials and wall time
(its trials' wall time, start-up and teardown included). Goals (issue 26): error within +-2%,
the interval holds the reference, at most 8 trials and 3 minutes. Nothing is asserted; what
else ran on the host is printed (load average, the busiest other processes) before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
from _common import ROOT

from orchestrator.results import read_capacity

SERVERS = {
    # name: (server block, workload spin_us, p99 SLO, keep-alive connections). The Java pool
    # gives each of its 4 threads a connection to keep: more connections than threads would
    # wait for a served one to close (the models' "pinned" station, no steady state), so the
    # load holds 4 and the queue forms in the client, as the models expect.
    "c-epoll": ("{impl: c, model: epoll}", 250, "3ms", 64),
    "java-pool": ("{impl: java, model: pool, threads: 4}", 400, "5ms", 4),
    "py-async": ("{impl: python, model: async}", 400, "8ms", 64),
}
# warm-up before each trial's window: the JVM compiles its hot paths in the first seconds of
# every trial (a fresh server each time); with 1 s, the Java pool's per-second p99 still fell
# 28-92% across 12-s windows and most of its probes were retried as not stationary
WARMUP_S = {"c-epoll": 1, "java-pool": 5, "py-async": 1}
COMMON = """
workload: {{path: /work, params: {{spin_us: {spin}}}}}
placement: {{server_cpus: [0], loadgen_cpus: [1]}}
"""


def search_yaml(name: str, duration: int, include_noisy: bool = False) -> str:
    server, spin, slo, conns = SERVERS[name]
    noisy = ", include_noisy: true" if include_noisy else ""
    return (
        f"name: search-{name}\nservers: {{{name}: {server}}}\n"
        + COMMON.format(spin=spin)
        + f"load: {{mode: open, connections: {conns}, duration: {duration}s, "
        f"warmup: {WARMUP_S[name]}s}}\n"
        f"search: {{slo: {{p99: {slo}}}, precision: 2%, max_trials: 8{noisy}}}\n"
    )


def sweep_yaml(name: str, rates: list[float], duration: int, round_: int) -> str:
    server, spin, _, conns = SERVERS[name]
    return (
        f"name: sweep-{name}\nservers: {{{name}: {server}}}\n"
        + COMMON.format(spin=spin)
        + f'load: {{mode: open, rate: "{{rate}}", connections: {conns}, duration: {duration}s, '
        f"warmup: {WARMUP_S[name]}s, seed: {round_}}}\n"
        f"matrix: {{rate: [{', '.join(f'{r:g}' for r in rates)}]}}\n"
    )


def perfctl(exp: Path, out: Path) -> tuple[int, float, str]:
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(exp), "--out", str(out), "-q"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160"},
        capture_output=True,
        text=True,
    )
    return p.returncode, time.monotonic() - t0, p.stdout + p.stderr


def pav(y: np.ndarray) -> np.ndarray:
    """Pool-adjacent violators: the non-decreasing sequence closest to y (least squares)."""
    blocks = [[float(v), 1] for v in y]
    i = 0
    while i < len(blocks) - 1:
        if blocks[i][0] > blocks[i + 1][0]:
            (a, n), (b, m) = blocks[i], blocks[i + 1]
            blocks[i : i + 2] = [[(a * n + b * m) / (n + m), n + m]]
            i = max(i - 1, 0)
        else:
            i += 1
    return np.concatenate([[v] * n for v, n in blocks])


def usable_for_p99(trials: pd.DataFrame) -> pd.Series:
    """The trials a p99 reference can use: valid, or invalid for send lateness alone when the
    lateness moved the p99 by less than its precision (its 95% interval's lower half, at least
    2%): the rule the search judges its probes by (orchestrator/search/cell_search.py)."""
    valid = trials["valid"].astype(bool)
    reasons = trials["invalid_reasons"].astype("string").fillna("")
    only_late = reasons.map(lambda r: all(x.startswith("send lateness") for x in r.split("; ")))
    p99 = trials["latency_p99_ms"].astype(float)
    low = trials.get("latency_p99_ci_low_ms", p99).astype(float)
    allowed = np.maximum(2.0, 100.0 * (p99 - low) / p99)
    spared = trials["lateness_shift_p99_pct"].astype(float) <= allowed
    return valid | (only_late & spared & (reasons != ""))


def reference(trials: pd.DataFrame, slo_ms: float) -> tuple[float, str]:
    """Where the median trial's p99 crosses the SLO (module docstring), and a note."""
    ok = trials[usable_for_p99(trials)]
    med = ok.groupby("rate")["latency_p99_ms"].median().sort_index()
    if len(med) < 2:
        return math.nan, "too few valid steps"
    return crossing(med.index.to_numpy(dtype=float), med.to_numpy(dtype=float), slo_ms)


def reference_interval(
    trials: pd.DataFrame, slo_ms: float, n: int = 2000, seed: int = 26
) -> tuple[float, float]:
    """The reference's own 95% interval: the sweep's trials resampled with replacement within
    each step (a percentile bootstrap), the crossing found again each time. With 3 trials a
    step this understates the spread a little (a bootstrap of n values has (n-1)/n of their
    variance), so the ±2% goal is measurable only where this interval is narrower than it."""
    ok = trials[usable_for_p99(trials)]
    steps = [
        (rate, g.to_numpy(dtype=float))
        for rate, g in ok.groupby("rate")["latency_p99_ms"]
        if len(g)
    ]
    if len(steps) < 2:
        return math.nan, math.nan
    steps.sort(key=lambda st: st[0])
    rates = np.array([r for r, _ in steps], dtype=float)
    rng = np.random.default_rng(seed)
    found = np.empty(n)
    for i in range(n):
        med = np.array([np.median(rng.choice(v, v.size)) for _, v in steps])
        ref, note = crossing(rates, med, slo_ms)
        # a crossing outside the sweep bounds the interval by the sweep's edge, open-ended
        found[i] = ref if math.isfinite(ref) else (math.inf if "every" in note else -math.inf)
    lo = float(np.percentile(found, 2.5, method="lower"))
    hi = float(np.percentile(found, 97.5, method="higher"))
    return lo, hi


def bound(x: float, rates: pd.Series) -> str:
    """An interval's end: the rate, or beyond the sweep's edge."""
    if x == math.inf:
        return f">{rates.max():.1f}"
    if x == -math.inf:
        return f"<{rates.min():.1f}"
    return f"{x:.1f}"


def crossing(rates: np.ndarray, p99_ms: np.ndarray, slo_ms: float) -> tuple[float, str]:
    """The rate where the non-decreasing fit of log p99 over the steps crosses the SLO."""
    y = pav(np.log(p99_ms))
    target = math.log(slo_ms)
    above = np.flatnonzero(y > target)
    if above.size == 0:
        return math.nan, f"every step meets the SLO (up to {rates[-1]:g}/s): widen --span"
    k = int(above[0])
    if k == 0:
        return math.nan, f"no step meets the SLO (from {rates[0]:g}/s): widen --span"
    r0, r1, y0, y1 = rates[k - 1], rates[k], y[k - 1], y[k]
    return float(r0 + (r1 - r0) * (target - y0) / (y1 - y0)) if y1 > y0 else float(r0), ""


def host_load() -> str:
    mine = {os.getpid(), *(c.pid for c in psutil.Process().children(recursive=True))}
    procs = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if p.pid not in mine:
                procs.append((p.cpu_percent(None), p))
        except psutil.Error:
            pass
    time.sleep(1.0)
    busy = []
    for _, p in procs:
        try:
            busy.append((p.cpu_percent(None), " ".join(p.info["cmdline"] or [p.info["name"]])))
        except psutil.Error:
            pass
    busy.sort(reverse=True)
    top = "; ".join(f"{c:.0f}% {cmd[:70]}" for c, cmd in busy[:4] if c >= 5)
    return f"load average {os.getloadavg()[0]:.1f}; busiest others: {top or 'none above 5%'}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="sweep +-3%% instead of +-span%%")
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--span", type=int, default=6, help="sweep half-width, %% (1%% steps)")
    ap.add_argument("--duration", type=int, default=6, help="measured window of every trial, s")
    ap.add_argument("--rounds", type=int, default=3, help="trials per sweep step")
    ap.add_argument("--keep", type=Path, default=None, help="keep the runs under this dir")
    ap.add_argument(
        "--table-from",
        type=Path,
        default=None,
        help="print the table of the runs a --keep DIR already holds (nothing is run)",
    )
    ap.add_argument(
        "--include-noisy",
        action="store_true",
        help="let the searches use valid probes the host disturbed (a shared host); the "
        "goals are judged without it",
    )
    a = ap.parse_args()
    names = [n for n in a.servers.split(",") if n]
    span = 3 if a.quick else a.span
    work = a.table_from or a.keep or Path(tempfile.mkdtemp(prefix="perfctl-capacity-"))
    work.mkdir(parents=True, exist_ok=True)
    if a.table_from is not None:
        return print_table(work, names, *kept_runs(work, names))
    print(f"before: {host_load()}", flush=True)
    found: dict[str, dict] = {}
    elapsed: dict[str, float] = {}
    for name in names:
        exp = work / f"search-{name}.yaml"
        exp.write_text(search_yaml(name, a.duration, a.include_noisy))
        code, took, text = perfctl(exp, work / f"search-{name}")
        elapsed[name] = took
        doc = read_capacity(work / f"search-{name}")
        if code != 0 or doc is None:
            print(f"{name}: search failed (exit {code}):\n{text[-2000:]}", flush=True)
            continue
        c = doc["cells"][0]
        if not (c["capacity"] is not None and math.isfinite(c["capacity"])):
            print(f"{name}: the search found no capacity ({c['status']}): {c['stopped']}")
            for p in c["probes"]:
                print(f"  trial {p['trial']} {p['role']}: {p['verdict'][:160]}")
            continue
        found[name] = c
        print(
            f"{name}: search {c['capacity']:.1f}/s [{c['low']:.1f}, {c['high']:.1f}] "
            f"in {c['trials']} trials, {took:.0f} s",
            flush=True,
        )
    sweeps: dict[str, list[Path]] = {n: [] for n in found}
    for r in range(1, a.rounds + 1):
        for name, c in found.items():
            centre = c["capacity"]
            rates = [round(centre * (1 + k / 100), 1) for k in range(-span, span + 1)]
            exp = work / f"sweep-{name}-{r}.yaml"
            exp.write_text(sweep_yaml(name, rates, a.duration, r))
            out = work / f"sweep-{name}-{r}"
            code, took, text = perfctl(exp, out)
            if code != 0:
                print(f"{name}: sweep round {r} failed (exit {code}):\n{text[-1500:]}")
                continue
            sweeps[name].append(out)
            print(f"{name}: sweep round {r}: {len(rates)} trials, {took:.0f} s", flush=True)
    print(f"after: {host_load()}\n")
    return print_table(work, names, found, sweeps, elapsed)


def kept_runs(work: Path, names: list[str]):
    """found, sweeps, elapsed of the runs under work (elapsed: the searches' wall time)."""
    found, sweeps, elapsed = {}, {}, {}
    for name in names:
        doc = read_capacity(work / f"search-{name}")
        c = doc["cells"][0] if doc else None
        if c is None or c["capacity"] is None or not math.isfinite(c["capacity"]):
            continue
        found[name], elapsed[name] = c, c["wall_s"]
        sweeps[name] = sorted(d for d in work.glob(f"sweep-{name}-*") if d.is_dir())
    return found, sweeps, elapsed


def print_table(work: Path, names, found, sweeps, elapsed) -> int:
    head = (
        f"{'server':10} {'SLO':>6} {'capacity':>9} {'interval':>17} {'reference':>9} "
        f"{'its 95% interval':>17} {'error':>7} {'holds':>5} {'trials':>6} {'wall s':>6} "
        f"{'quiet':>9}  note"
    )
    print(head)
    print("-" * len(head))
    table = []
    for name, c in found.items():
        frames = [pd.read_csv(d / "trials.csv") for d in sweeps[name]]
        trials = pd.concat(frames) if frames else pd.DataFrame()
        slo_ms = float(SERVERS[name][2].removesuffix("ms"))
        ref, note = reference(trials, slo_ms) if not trials.empty else (math.nan, "no sweep")
        ref_lo, ref_hi = (
            reference_interval(trials, slo_ms) if not trials.empty else (math.nan, math.nan)
        )
        err = c["capacity"] / ref - 1 if ref == ref else math.nan
        holds = c["low"] <= ref <= c["high"] if ref == ref else False
        quiet = f"{int(trials['quiet'].sum())}/{len(trials)}" if not trials.empty else "-"
        swept = trials.get("rate", pd.Series([math.nan]))
        print(
            f"{name:10} {SERVERS[name][2]:>6} {c['capacity']:9.1f} "
            f"{c['low']:8.1f}-{c['high']:<8.1f} {ref:9.1f} "
            f"{bound(ref_lo, swept):>8}-{bound(ref_hi, swept):<8} "
            f"{100 * err:+6.1f}% "
            f"{'yes' if holds else 'NO':>5} {c['trials']:6d} {c['wall_s']:6.0f} {quiet:>9}  "
            f"{note}"
        )
        table.append(
            {
                "server": name,
                "slo": SERVERS[name][2],
                "capacity": c["capacity"],
                "low": c["low"],
                "high": c["high"],
                "reference": ref,
                "reference_low": ref_lo,
                "reference_high": ref_hi,
                "error": err,
                "holds": holds,
                "trials": c["trials"],
                "wall_s": c["wall_s"],
                "elapsed_s": elapsed[name],
                "sweep_quiet": quiet,
            }
        )
    (work / "capacity_search.json").write_text(json.dumps(table, indent=1, default=str))
    print(f"\nruns and capacity_search.json in {work}")
    print(
        "the reference's interval: its sweep trials resampled within each step (bootstrap); "
        "where it is wider than +-2%, the sweep cannot tell a 2% error from its own noise\n"
        "goals: |error| <= 2%, the interval holds the reference, <= 8 trials, <= 180 s wall "
        "(search trials; the whole `perfctl run` per server: "
        + ", ".join(f"{n} {t:.0f} s" for n, t in elapsed.items())
        + "); the sweep uses valid trials and those whose send lateness moved the p99 less "
        "than its precision, the search's own rule"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The RMI driver's overhead, the same workload over HTTP and over Java RMI (issue 17), and the
driver at the RMI server's maximum closed rate (issue 32).

  .venv/bin/python benchmarks/rmi_driver.py [--duration 10] [--repeats 3] [--rates 2000,5000]
      [--closed-spins 0,20] [--closed-repeats 3] [--gc serial=-XX:+UseSerialGC,z=-XX:+UseZGC]

Two perfctl runs (results/rmi_driver/<stamp>-open and -closed), server on CPU 0, driver on CPU 1.

Open load, `GET /work?spin_us=0`, at each rate, against the bundled Java servers with 16
worker slots, one per driver connection:
- `rmi`: the bundled RMI driver against `impl: java, model: rmi` (calls);
- `http`: perfctl's HTTP generator against `impl: java, model: pool` (requests).
Per protocol and rate it prints the median over trials of: the achieved send rate, the send
lateness p99 (the driver's own timing), latency p50/p99, the driver's CPU per call in
microseconds (loadgen_cpu_pct over the phase / calls in the phase: warm-up and window both),
the server's CPU, how many trials were valid and how many quiet.

Closed load at the maximum rate: 8 clients with no think time against `model: rmi` with 8
connection slots, `GET /work?spin_us=S` for each S of --closed-spins (0: the server does no work,
so the driver's own cost bounds the rate; 20: the server's CPU does). Per collector (--gc:
name=flags, handed to the driver through PERFCTL_RMI_DRIVER_GC_FLAGS; default: the driver's own
choice) and S it prints calls/s (median), the trials valid and quiet, the driver's GC pause p99
(median over trials) and max (over trials), its ticker's lag p99 (median), its CPU (median) and
the invalid reasons. Nothing is asserted; run it on a quiet host and read the `quiet` column
before believing a row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.run.driver import RMI_DRIVER_GC_ENV  # noqa: E402 - after the path

OPEN = """
name: rmi_driver
servers:
  rmi:  {{impl: java, model: rmi, threads: 16}}
  http: {{impl: java, model: pool, threads: 16}}
workload: {{path: /work, params: {{spin_us: 0}}}}
load: {{driver: "{{server}}", mode: open, rate: "{{rate}}", connections: 16,
        duration: {duration}s, warmup: 2s, timeout: 5s}}
matrix: {{server: [rmi, http], rate: [{rates}]}}
repeats: {repeats}
order: interleaved
placement: {{server_cpus: [0], loadgen_cpus: [1]}}
"""

CLOSED = """
name: rmi_driver_closed
servers:
  rmi: {{impl: java, model: rmi, threads: 8}}
workload: {{path: /work, params: {{spin_us: "{{spin_us}}"}}}}
load: {{driver: rmi, mode: closed, connections: 8, duration: {duration}s, warmup: {warmup}s,
        timeout: 5s}}
matrix: {{spin_us: [{spins}]}}
repeats: {repeats}
order: interleaved
placement: {{server_cpus: [0], loadgen_cpus: [1]}}
"""


def perfctl_run(text: str, out: Path, env: dict | None = None) -> pd.DataFrame | None:
    """Run one experiment into out; its trials.csv, or None when perfctl failed."""
    with tempfile.TemporaryDirectory() as tmp:
        exp = Path(tmp) / "rmi_driver.yaml"
        exp.write_text(text)
        cmd = [sys.executable, "-m", "orchestrator.cli", "run", str(exp), "--out", str(out)]
        proc = subprocess.run([*cmd, "--no-plots"], cwd=ROOT, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        return None
    return pd.read_csv(out / "trials.csv", keep_default_na=False, na_values=["", "nan"])


def summary_of(run: Path, row: pd.Series) -> dict:
    tdir = Path(run) / "cells" / row["cell_id"] / f"trial-{int(row['trial'])}"
    return json.loads((tdir / "summary.json").read_text())


def cpu_us_per_call(run: Path, row: pd.Series) -> float:
    """The driver's CPU per call over its whole phase (warm-up + window + drain)."""
    summary = summary_of(run, row)
    calls = summary["requests_recorded"]
    wall_s = (summary["measure_end_ns"] - summary["start_ns"]) / 1e9
    return summary["loadgen_cpu_pct"] / 100 * wall_s / calls * 1e6 if calls else float("nan")


def report_open(out: Path, trials: pd.DataFrame) -> None:
    print(f"\nopen load: {out}")
    print(
        f"{'protocol':8} {'rate':>6} {'achieved/s':>10} {'late p99 ms':>11} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'driver us/call':>14} {'server cpu%':>11} "
        f"{'valid':>5} {'quiet':>5}"
    )
    for (server, rate), g in trials.groupby(["server", "rate"]):

        def med(col, g=g):
            return statistics.median(g[col])

        per_call = statistics.median(cpu_us_per_call(out, r) for _, r in g.iterrows())
        print(
            f"{server:8} {rate:>6} {med('achieved_rate'):>10.1f} "
            f"{med('send_lateness_p99_ms'):>11.3f} {med('latency_p50_ms'):>7.3f} "
            f"{med('latency_p99_ms'):>7.3f} {per_call:>14.1f} {med('server_cpu_pct'):>11.1f} "
            f"{int(g['valid'].sum()):>2}/{len(g):<2} {int(g['quiet'].sum()):>2}/{len(g):<2}"
        )
    for _, r in trials[~trials["valid"].astype(bool)].iterrows():
        print(f"invalid: {r['server']} rate {r['rate']} trial {r['trial']}: {r['invalid_reasons']}")


def report_closed(trials: pd.DataFrame) -> None:
    """trials: the closed runs' trials.csv rows, with `gc` and `run` (its directory) added."""
    print("\nclosed load at the maximum rate (8 clients, no think time):")
    print(
        f"{'gc':10} {'spin_us':>7} {'calls/s':>8} {'valid':>5} {'quiet':>5} "
        f"{'gc p99 ms':>9} {'gc max ms':>9} {'lag p99 ms':>10} {'driver cpu%':>11} "
        f"{'server cpu%':>11} {'p99 ms':>7}"
    )
    reasons = []
    for gc, by_gc in trials.groupby("gc", sort=False):
        for spin, g in by_gc.groupby("spin_us"):
            sums = [summary_of(r["run"], r) for _, r in g.iterrows()]

            def med(col, g=g):
                return statistics.median(g[col])

            gc_p99 = statistics.median(s.get("gc_pause_p99_ms", float("nan")) for s in sums)
            gc_max = max(s["gc_pause_max_ms"] for s in sums)
            print(
                f"{gc:10} {spin:>7} {med('throughput_rps'):>8.0f} "
                f"{int(g['valid'].sum()):>2}/{len(g):<2} {int(g['quiet'].sum()):>2}/{len(g):<2} "
                f"{gc_p99:>9.1f} {gc_max:>9.1f} {med('loop_lag_p99_ms'):>10.2f} "
                f"{med('loadgen_cpu_pct'):>11.1f} {med('server_cpu_pct'):>11.1f} "
                f"{med('latency_p99_ms'):>7.3f}"
            )
            for _, r in g.iterrows():
                if not r["valid"]:
                    reasons.append(f"{gc} spin_us {spin} {r['run']}: {r['invalid_reasons']}")
                if not r["quiet"]:
                    reasons.append(f"{gc} spin_us {spin} {r['run']}: {r['noise_reasons']}")
    for line in reasons:
        print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=10.0, help="measured seconds per trial")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rates", default="2000,5000", help="open-load rates, calls/s; '' for none")
    ap.add_argument("--closed-spins", default="0,20", help="closed: server spin_us; '' for none")
    ap.add_argument("--closed-repeats", type=int, default=3)
    ap.add_argument("--closed-warmup", type=float, default=5.0, help="closed: warm-up seconds")
    ap.add_argument(
        "--gc",
        default="",
        help="closed: name=JVM flags for the driver, comma-separated (flags space-separated), "
        "e.g. 'serial=-XX:+UseSerialGC,z=-XX:+UseZGC'; default: the driver's own",
    )
    args = ap.parse_args()
    stamp = pd.Timestamp.now().strftime("%Y%m%d-%H%M%S")
    base = ROOT / "results" / "rmi_driver"
    if args.rates:
        rates = ", ".join(args.rates.split(","))
        text = OPEN.format(duration=args.duration, repeats=args.repeats, rates=rates)
        out = base / f"{stamp}-open"
        trials = perfctl_run(text, out)
        if trials is None:
            return 1
        report_open(out, trials)
    if args.closed_spins:
        # one trial of each cell per run, the collectors taking turns round by round, so that
        # the host's drift falls on all of them alike
        text = CLOSED.format(
            duration=args.duration,
            warmup=args.closed_warmup,
            repeats=1,
            spins=", ".join(args.closed_spins.split(",")),
        )
        gcs = dict(g.split("=", 1) for g in args.gc.split(",")) if args.gc else {"default": None}
        parts = []
        for k in range(args.closed_repeats):
            for name, flags in gcs.items():
                out = base / f"{stamp}-closed-{name}-{k + 1}"
                trials = perfctl_run(text, out, {RMI_DRIVER_GC_ENV: flags} if flags else None)
                if trials is None:
                    return 1
                parts.append(trials.assign(gc=name, run=str(out)))
        report_closed(pd.concat(parts, ignore_index=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

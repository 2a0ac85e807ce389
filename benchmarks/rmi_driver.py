"""The RMI driver's overhead, and the same workload over HTTP and over Java RMI (issue 17).

  .venv/bin/python benchmarks/rmi_driver.py [--duration 10] [--repeats 3] [--rates 2000,5000]

One perfctl run (results/rmi_driver/<stamp>) of open load, `GET /work?spin_us=0`, at each
rate, against the bundled Java servers with 16 worker slots, one per driver connection (server
on CPU 0, driver on CPU 1):
- `rmi`: the bundled RMI driver against `impl: java, model: rmi` (calls);
- `http`: perfctl's HTTP generator against `impl: java, model: pool` (requests).
Per protocol and rate it prints the median over trials of: the achieved send rate, the send
lateness p99 (the driver's own timing), latency p50/p99, the driver's CPU per call in
microseconds (loadgen_cpu_pct over the phase / calls in the phase: warm-up and window both),
the server's CPU, how many trials were valid and how many quiet. Nothing is asserted; run it
on a quiet host (nothing else running) and read the `quiet` column before believing a row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent

EXPERIMENT = """
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


def cpu_us_per_call(run: Path, row: pd.Series) -> float:
    """The driver's CPU per call over its whole phase (warm-up + window + drain)."""
    tdir = run / "cells" / row["cell_id"] / f"trial-{int(row['trial'])}"
    summary = json.loads((tdir / "summary.json").read_text())
    calls = summary["requests_recorded"]
    wall_s = (summary["measure_end_ns"] - summary["start_ns"]) / 1e9
    return summary["loadgen_cpu_pct"] / 100 * wall_s / calls * 1e6 if calls else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=10.0, help="measured seconds per trial")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rates", default="2000,5000", help="open-load rates, calls/s")
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        exp = Path(tmp) / "rmi_driver.yaml"
        exp.write_text(
            EXPERIMENT.format(
                duration=args.duration, repeats=args.repeats, rates=", ".join(map(str, rates))
            )
        )
        out = ROOT / "results" / "rmi_driver" / pd.Timestamp.now().strftime("%Y%m%d-%H%M%S")
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "orchestrator.cli",
                "run",
                str(exp),
                "--out",
                str(out),
                "--no-plots",
            ],
            cwd=ROOT,
        )
        if proc.returncode != 0:
            return proc.returncode
    trials = pd.read_csv(out / "trials.csv")
    print(f"\nrun: {out}")
    head = (
        f"{'protocol':8} {'rate':>6} {'achieved/s':>10} {'late p99 ms':>11} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'driver us/call':>14} {'server cpu%':>11} "
        f"{'valid':>5} {'quiet':>5}"
    )
    print(head)
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
    bad = trials[~trials["valid"].astype(bool)]
    for _, r in bad.iterrows():
        print(f"invalid: {r['server']} rate {r['rate']} trial {r['trial']}: {r['invalid_reasons']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What profiling (`profile: true`) costs each bundled server: the same closed-load cells run
with and without the profiler, in alternating runs, and the change in median throughput and
p99 printed per language (py-spy for Python, JFR for Java, perf for C).

    .venv/bin/python benchmarks/profile_overhead.py [--rounds 3] [--duration 5s]

Each round runs the experiment twice (without, then with --profile-server; the order flips
every round so a drifting host does not favour one side). Prints one line per server:
medians over the rounds' trials and the relative change, plus the profiler's own CPU (from
profile.json). Asserts nothing: read it on a quiet host.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.run import bundled  # noqa: E402

EXPERIMENT = """
name: profile-overhead
servers:
  py: {{impl: python, model: async}}
  c: {{impl: c, model: pool, threads: 2}}
{java}workload: {{path: /work, params: {{spin_us: 200}}}}
load: {{mode: closed, connections: 8, duration: {duration}, warmup: 1s}}
placement: {{server_cpus: [0], loadgen_cpus: [1]}}
"""


def run_once(exp: Path, out: Path, profiled: bool) -> pd.DataFrame:
    argv = [
        sys.executable,
        "-m",
        "orchestrator.cli",
        "run",
        str(exp),
        "--out",
        str(out),
        "--no-plots",
        "--quiet",
    ] + (["--profile-server"] if profiled else [])
    p = subprocess.run(
        argv, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True
    )
    if p.returncode != 0:
        raise SystemExit(f"perfctl run failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    t = pd.read_csv(out / "trials.csv")
    t["profiled"] = profiled
    if profiled:
        cost = []
        for _, r in t.iterrows():
            f = out / "cells" / r["cell_id"] / f"trial-{r['trial']}" / "profile.json"
            info = json.loads(f.read_text()) if f.is_file() else {}
            cost.append(info.get("profiler_cpu_pct_of_one_cpu"))
        t["profiler_cpu_pct"] = cost
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", default="5s")
    args = ap.parse_args()
    java = "  java: {impl: java, model: pool, threads: 2}\n" if bundled.find_jdks() else ""
    work = Path(tempfile.mkdtemp(prefix="perfctl-profile-overhead-"))
    exp = work / "exp.yaml"
    exp.write_text(EXPERIMENT.format(java=java, duration=args.duration))
    frames = []
    for k in range(args.rounds):
        order = (False, True) if k % 2 == 0 else (True, False)
        for profiled in order:
            frames.append(run_once(exp, work / f"r{k}-{'on' if profiled else 'off'}", profiled))
    t = pd.concat(frames, ignore_index=True)
    t = t[t["valid"].astype(bool)]
    print(
        f"{'server':8s} {'profiler':8s} {'req/s off':>10s} {'req/s on':>10s} {'change':>8s} "
        f"{'p99 off':>9s} {'p99 on':>9s} {'change':>8s} {'profiler CPU':>13s}  trials"
    )
    tools = {"py": "py-spy", "c": "perf", "java": "jfr"}
    for server, g in t.groupby("server"):
        off, on = g[~g["profiled"]], g[g["profiled"]]
        if off.empty or on.empty:
            print(f"{server:8s} too few valid trials")
            continue
        r0, r1 = off["throughput_rps"].median(), on["throughput_rps"].median()
        p0, p1 = off["latency_p99_ms"].median(), on["latency_p99_ms"].median()
        cpu = [c for c in on.get("profiler_cpu_pct", []) if c == c and c is not None]
        cpu_text = f"{statistics.median(cpu):.1f}%" if cpu else "in server"
        print(
            f"{server:8s} {tools.get(server, '?'):8s} {r0:10,.0f} {r1:10,.0f} "
            f"{(r1 - r0) / r0:+8.1%} {p0:9.3f} {p1:9.3f} {(p1 - p0) / p0:+8.1%} "
            f"{cpu_text:>13s}  {len(off)}/{len(on)}"
        )
    print(f"(medians over valid trials, {args.rounds} rounds of {args.duration}; runs in {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How close to its intended instant can a send leave on this host? (issue #41)

  .venv/bin/python benchmarks/send_precision.py [--seconds 5] [--rates 300,3000,10000]
                                                [--emulate-coarse-timer]

Poisson instants at each rate, for `--seconds`, waited for four ways, side by side:
- sleep:      a bare loop that sleeps to each instant (time.sleep: the host's timer);
- sleep+spin: sleeps to 2 ms before, then spins;
- spin:       spins on the clock the whole time;
- perfctl:    perfctl's own load generator, pinned to a CPU of its own (placement: it
              busy-polls its event loop up to each send), open load on the bundled C epoll
              server's /health; and unpinned, sharing the CPUs with the server (it sleeps on
              a timerfd, woken early by its learned early wake-up, polling within a quarter
              of a CPU).
The bare loops run on CPU 1 (taskset), do no I/O, and measure their own lateness against the
instant; perfctl's figures are its trials' send_lateness_* and the CPU its polling took
(send_poll_cpu_pct). Each row: lateness p50, p99, p99.9 and max, in microseconds, and the CPU
the waiting cost (% of one CPU). The rival to beat is the bare spin: the host's physical limit.

--emulate-coarse-timer runs perfctl's rows with PERFCTL_EMULATE_COARSE_TIMER=41 (a coarse
cloud VM's timer on this host: loadgen/coarse_timer.py), and the bare loops with the same
draws added to their sleeps.

Prints the host first (CPU model, steal, timer lateness: perfctl's host check). Prints figures
only; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import _common
import pandas as pd
from _common import ROOT, perfctl

BARE = r"""
import json, os, resource, sys, time
import numpy as np
how, rate, seconds, emulate = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
rng = np.random.default_rng(41)
gaps = rng.exponential(1e9 / rate, int(rate * seconds) + 1)
extra = None
if emulate == "1":
    sys.path.insert(0, os.environ["PERFCTL_ROOT"])
    from loadgen.coarse_timer import CoarseTimer
    extra = CoarseTimer(41)
now = time.perf_counter_ns
t0 = now() + 50_000_000
due = t0 + np.cumsum(gaps).astype(np.int64)
late = np.empty(len(due), dtype=np.int64)
r0 = resource.getrusage(resource.RUSAGE_SELF)
w0 = now()
for i, d in enumerate(due):
    d = int(d)
    if how != "spin":
        target = d if how == "sleep" else d - 2_000_000
        wait = target - now()
        if wait > 0:
            time.sleep(wait / 1e9 + (extra.draw() / 1e9 if extra else 0.0))
    while now() < d:
        pass
    late[i] = now() - d
r1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / ((now() - w0) / 1e9)
q = np.percentile(late, [50, 99, 99.9]) / 1e3
print(json.dumps({"p50": q[0], "p99": q[1], "p999": q[2], "max": late.max() / 1e3,
                  "cpu": 100 * cpu}))
"""

EXPERIMENT = """
name: send-precision
servers:
  c-epoll: {{impl: c, model: epoll}}
workload: {{path: /health}}
load: {{mode: open, rate: {rate}, arrivals: poisson, connections: 64, duration: {seconds}s,
        warmup: 1s}}
repeats: 1
retry_noisy: 0
{placement}
"""


def bare(how: str, rate: float, seconds: float, emulate: bool) -> dict:
    env = {**os.environ, "PERFCTL_ROOT": str(ROOT)}
    out = subprocess.run(
        [
            "taskset",
            "-c",
            "1",
            sys.executable,
            "-c",
            BARE,
            how,
            str(rate),
            str(seconds),
            "1" if emulate else "0",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=seconds * 3 + 60,
    )
    return json.loads(out.stdout)


def generator(rate: float, seconds: float, pinned: bool, emulate: bool, tmp: Path) -> dict:
    placement = "placement: {server_cpus: [0], loadgen_cpus: [1]}" if pinned else ""
    f = tmp / f"exp-{rate:g}-{pinned}.yaml"
    f.write_text(EXPERIMENT.format(rate=rate, seconds=seconds, placement=placement))
    out = tmp / f"run-{rate:g}-{pinned}"
    env_before = os.environ.get("PERFCTL_EMULATE_COARSE_TIMER")
    if emulate:
        os.environ["PERFCTL_EMULATE_COARSE_TIMER"] = "41"
    try:
        proc = perfctl("run", str(f), "--out", str(out), "--no-plots")
    finally:
        if env_before is None:
            os.environ.pop("PERFCTL_EMULATE_COARSE_TIMER", None)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-300:] or proc.stdout.strip()[-300:]}
    t = pd.read_csv(out / "trials.csv").iloc[0]
    s = json.loads(next(out.glob("cells/*/trial-1/summary.json")).read_text())
    return {
        "p50": s["send_lateness_p50_ms"] * 1e3,
        "p99": s["send_lateness_p99_ms"] * 1e3,
        "p999": s.get("send_lateness_p999_ms", float("nan")) * 1e3,
        "max": s["send_lateness_max_ms"] * 1e3,
        "cpu": float(t.get("send_poll_cpu_pct", float("nan"))),
        "valid": f"{bool(t['valid'])} ({t.get('figures_from', 'intended')})",
    }


def host_line() -> str:
    proc = perfctl("doctor")
    model = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "?",
    )
    timer = [ln.strip() for ln in proc.stdout.splitlines() if "timer" in ln.lower()][:2]
    return f"host: {model}, {os.cpu_count()} CPUs; " + " | ".join(timer)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rates", default="300,3000,10000")
    ap.add_argument("--emulate-coarse-timer", action="store_true")
    a = ap.parse_args()
    _common.need("taskset", "util-linux")
    print(host_line())
    rows = []
    with tempfile.TemporaryDirectory() as d:
        os.environ["PERFCTL_HISTORY_URL"] = str(Path(d) / "history.sqlite")  # not the repo's
        for rate in (float(r) for r in a.rates.split(",")):
            for how in ("sleep", "sleep+spin", "spin"):
                rows.append(
                    {
                        "rate": rate,
                        "wait": how,
                        **bare(how, rate, a.seconds, a.emulate_coarse_timer),
                    }
                )
            for pinned in (True, False):
                name = "perfctl pinned" if pinned else "perfctl shared"
                rows.append(
                    {
                        "rate": rate,
                        "wait": name,
                        **generator(rate, a.seconds, pinned, a.emulate_coarse_timer, Path(d)),
                    }
                )
    t = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(t.round(1).to_string(index=False))
    spin = t[t["wait"] == "spin"].set_index("rate")["p99"]
    mine = t[t["wait"] == "perfctl pinned"].set_index("rate")["p99"]
    for rate in spin.index:
        print(
            f"rate {rate:g}/s: perfctl pinned p99 / bare spin p99 = {mine[rate] / spin[rate]:.1f}x"
        )


if __name__ == "__main__":
    main()

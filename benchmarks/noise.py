"""Numbers you can act on next to a noisy neighbour (issue #13): A/A and A/B compares, and
whether the trials the neighbour disturbed are the ones flagged not quiet.

  .venv/bin/python benchmarks/noise.py [--pairs 10] [--quick] [--seed 13]

A seeded neighbour runs the whole time: bursts of 2-6 s (gaps of 4-12 s) spinning on a random
one of the experiment's CPUs at 50-70% duty (a 10 ms period), each burst logged with its
CLOCK_MONOTONIC interval. One fixed experiment (a `cmd:` server, closed load, repeats: auto
with at most 20 trials of 2.5 s: <= 50 s of trials a run) runs three times per pair: A, then B
(the server script at the same path swapped for a copy that spins 10% longer per request, so
the cell id is the same), then A again. Each pair prints `compare A A'` and `compare A B`.

Goals: A/A exit 0 in >= 95% of pairs; A/B exit 1 in >= 90%; of the trials the neighbour
overlapped for >= 25% of their measured window, >= 90% flagged not quiet; of the trials it did
not touch at all (0.3 s margin either side: the noise readings reach that far), <= 5% flagged.
Trials overlapped for less than 25% are counted apart (their foreign CPU is near the limit),
and so are untouched trials flagged for CPU steal alone (noise the kernel measured directly,
from the hypervisor, not from the neighbour).
Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd
from _common import neighbour, perfctl

from orchestrator.measure.schedstat import USER_HZ, read_cpu_ticks

SERVER = '''"""A tiny HTTP/1.1 keep-alive server: every request spins SPIN_US of CPU."""
import asyncio, sys, time

SPIN_US = {spin_us}


class Http(asyncio.Protocol):
    def connection_made(self, transport):
        self.t, self.buf = transport, b""

    def data_received(self, data):
        self.buf += data
        while b"\\r\\n\\r\\n" in self.buf:
            _, self.buf = self.buf.split(b"\\r\\n\\r\\n", 1)
            end = time.perf_counter() + SPIN_US / 1e6
            while time.perf_counter() < end:
                pass
            self.t.write(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok")


async def main(port):
    server = await asyncio.get_running_loop().create_server(Http, "127.0.0.1", port)
    async with server:
        await server.serve_forever()

asyncio.run(main(int(sys.argv[1])))
'''

EXPERIMENT = """
name: noise-bench
servers:
  app: {{cmd: "python3 {script} {{port}}"}}
workload: {{path: /}}
load: {{mode: closed, connections: 4, duration: {duration}, warmup: {warmup}}}
repeats: auto
precision: 5%
max_repeats: {max_repeats}
placement: {{server_cpus: [0], loadgen_cpus: [1]}}
"""
BASE_SPIN_US = 1000
SLOWDOWN = 1.10
OVERLAPPED = 0.25  # share of the window the neighbour must cover to count as overlapped
MARGIN_S = 0.3


def run(exp: Path, out: Path) -> Path:
    p = perfctl("run", str(exp), "--out", str(out), "--no-plots", timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"perfctl run failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return out


def compare(a: Path, b: Path) -> tuple[int, str]:
    p = perfctl("compare", str(a), str(b), timeout=300)
    verdict = next(
        (v for v in ("slower", "faster", "inconclusive", "no significant change") if v in p.stdout),
        "?",
    )
    return p.returncode, verdict if p.returncode != 2 else p.stdout[-300:] + p.stderr[-300:]


def changes(a: Path, b: Path) -> str:
    ta, tb = (pd.read_csv(d / "trials.csv") for d in (a, b))
    ua, ub = (t[t["valid"].astype(bool) & t["quiet"].astype(bool)] for t in (ta, tb))
    out = [f"trials used {len(ua)}/{len(ta)} vs {len(ub)}/{len(tb)}"]
    for col, name in (
        ("throughput_rps", "thr"),
        ("latency_p50_ms", "p50"),
        ("latency_p99_ms", "p99"),
    ):
        if len(ua) and len(ub):
            out.append(f"{name} {100 * (ub[col].median() / ua[col].median() - 1):+.1f}%")
    return ", ".join(out)


def overlaps(run_dir: Path, bursts: list[dict]) -> list[tuple[float, bool, float, bool]]:
    """(share of the window the neighbour covered, flagged not quiet, distance in s to the
    nearest burst, flagged for CPU steal alone) for each trial of a run."""
    trials = pd.read_csv(run_dir / "trials.csv")
    out = []
    for _, t in trials.iterrows():
        f = run_dir / "cells" / t["cell_id"] / f"trial-{t['trial']}" / "summary.json"
        if not f.is_file():
            continue
        s = json.loads(f.read_text())
        lo, hi = s["measure_start_ns"], s["measure_end_ns"]
        covered = sum(max(0, min(hi, b["end_ns"]) - max(lo, b["start_ns"])) for b in bursts)
        gap = min((max(b["start_ns"] - hi, lo - b["end_ns"]) for b in bursts), default=1e18)
        reasons = str(t["noise_reasons"]) if t["noise_reasons"] == t["noise_reasons"] else ""
        steal_only = bool(reasons) and all(r.startswith("CPU steal") for r in reasons.split("; "))
        out.append((covered / (hi - lo), not bool(t["quiet"]), gap / 1e9, steal_only))
    return out


def host_busy_pct(seconds: float = 3.0) -> float:
    """CPU in use on CPUs 0 and 1 over a few seconds, before the neighbour starts: % of one CPU.
    The goal on untouched trials assumes nothing else runs."""
    a, t0 = read_cpu_ticks(), time.monotonic()
    time.sleep(seconds)
    b, dt = read_cpu_ticks(), time.monotonic() - t0
    idle = sum(b[c].idle - a[c].idle for c in (0, 1) if c in a and c in b) / USER_HZ
    return 100 * max(0.0, 2 * dt - idle) / dt


def pct(xs: list, value) -> float:
    return 100 * sum(x == value for x in xs) / len(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=10, help="A/A and A/B pairs (each 3 runs)")
    ap.add_argument("--quick", action="store_true", help="1.3 s trials, at most 12 a run")
    ap.add_argument("--seed", type=int, default=13, help="the neighbour's seed")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="perfctl-noise-"))
    script = work / "server.py"
    exp = work / "exp.yaml"
    duration, warmup, max_repeats = ("1s", "300ms", 12) if args.quick else ("2s", "500ms", 20)
    exp.write_text(
        EXPERIMENT.format(script=script, duration=duration, warmup=warmup, max_repeats=max_repeats)
    )
    fast = SERVER.format(spin_us=BASE_SPIN_US)
    slow = SERVER.format(spin_us=int(BASE_SPIN_US * SLOWDOWN))
    busy = host_busy_pct()
    if busy > 5:
        print(
            f"warning: before the neighbour started, other work used {busy:.0f}% of a CPU on "
            "CPUs 0-1; trials it disturbs count as 'untouched' below"
        )
    log = work / "neighbour.jsonl"
    stop = mp.get_context("fork").Event()
    neigh = mp.get_context("fork").Process(
        target=neighbour, args=(args.seed, [0, 1], str(log), stop), daemon=True
    )
    neigh.start()
    print(
        f"work dir {work}; neighbour seed {args.seed}; {args.pairs} pairs of "
        f"{'quick ' if args.quick else ''}runs"
    )
    aa, ab, runs = [], [], []
    try:
        for i in range(1, args.pairs + 1):
            script.write_text(fast)
            a = run(exp, work / f"p{i}-A")
            script.write_text(slow)
            b = run(exp, work / f"p{i}-B")
            script.write_text(fast)
            a2 = run(exp, work / f"p{i}-A2")
            runs += [a, b, a2]
            code_aa, v_aa = compare(a, a2)
            code_ab, v_ab = compare(a, b)
            aa.append(code_aa)
            ab.append(code_ab)
            print(f"pair {i:2d} A/A: exit {code_aa} ({v_aa}); {changes(a, a2)}")
            print(f"        A/B: exit {code_ab} ({v_ab}); {changes(a, b)}", flush=True)
    finally:
        stop.set()
        neigh.join(10)
    bursts = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    trials = [o for r in runs for o in overlaps(r, bursts)]
    hit = [flag for share, flag, _, _ in trials if share >= OVERLAPPED]
    untouched = [
        (flag, steal) for share, flag, gap, steal in trials if share == 0 and gap > MARGIN_S
    ]
    clear = [flag for flag, steal in untouched if not steal]
    stolen = sum(steal for _, steal in untouched)
    part = [
        flag
        for share, flag, gap, _ in trials
        if 0 < share < OVERLAPPED or (share == 0 and gap <= MARGIN_S)
    ]
    print(f"\nA/A: exit 0 in {pct(aa, 0):.0f}% of {len(aa)} pairs (goal >= 95%); exits {aa}")
    print(f"A/B: exit 1 in {pct(ab, 1):.0f}% of {len(ab)} pairs (goal >= 90%); exits {ab}")
    print(
        f"noise flags: {pct(hit, True):.0f}% of {len(hit)} overlapped trials flagged (goal "
        f">= 90%); {pct(clear, True):.0f}% of {len(clear)} untouched trials flagged (goal "
        f"<= 5%); {sum(part)} of {len(part)} partly overlapped flagged; {stolen} untouched "
        "trials flagged for CPU steal alone (the hypervisor's noise, not the neighbour's: "
        "counted apart)"
    )
    print(
        f"neighbour: {len(bursts)} bursts, busy "
        f"{sum(b['end_ns'] - b['start_ns'] for b in bursts) / 1e9:.0f} s"
    )
    if os.environ.get("KEEP") != "1":
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

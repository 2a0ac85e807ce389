"""Scale: memory and post-processing time against trial length (issue 18).

    .venv/bin/python benchmarks/scale.py [--minutes 1,2,5,10] [--connections 50]
                                         [--records all] [--checkout DIR]

One `perfctl run` per length: one closed-loop trial at the maximum rate (50 connections, no
think time) against the bundled C epoll server, server on CPU 0 and load generator on CPU 1.
Per length it prints:
  - peak RSS of perfctl (the `perfctl run` process) and of the load generator (its processes
    added up), sampled every 0.1 s from /proc;
  - post-processing time: the trial's summary and timeline computed again from its files
    (orchestrator.run.trial_row.summarize_trial, in a fresh process), with that process's peak
    RSS, and the time per million requests;
  - the size of each file the trial wrote;
  - p50/p99/p999 from the HdrHistogram (the streaming path without the exact pass) against
    exact order statistics of the same requests (read from requests.parquet).
On the longest run it also times `perfctl report` and `perfctl compare` (the run against
itself) with their peak RSS.

Goals: perfctl <= 400 MB and load generator <= 300 MB at every length (flat); post-processing
<= 1 s per million requests; HDR percentiles within 0.1% of the exact ones. Lengths below a
minute (e.g. --minutes 0.1) make a smoke run. --checkout runs another checkout's perfctl (e.g.
main, for the figures before this change); the post-processing and accuracy rows need this
checkout's digest files and are skipped when the run has none.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
from _common import ROOT

GOAL_PERFCTL_MB, GOAL_LOADGEN_MB, GOAL_S_PER_MREQ, GOAL_REL = 400, 300, 1.0, 0.001
EXPERIMENT = """
name: scale
servers:
  c-epoll: {{impl: c, model: epoll, threads: 1}}
workload: {{path: /work, params: {{spin_us: 0}}}}
load: {{mode: closed, connections: {connections}, duration: {seconds}s, warmup: 2s{records}}}
repeats: 1
placement: {{server_cpus: [0], loadgen_cpus: [1]}}
"""


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def _rss_mb(p: psutil.Process) -> float:
    try:
        return p.memory_info().rss / 2**20
    except psutil.Error:
        return 0.0


def _is_loadgen(p: psutil.Process) -> bool:
    """`python -m loadgen SPEC DIR`, as a trial starts it (its worker processes are forks)."""
    try:
        return p.cmdline()[1:3] == ["-m", "loadgen"]
    except (psutil.Error, IndexError):
        return False


def watch(
    argv: list[str], cwd: Path, env: dict, timeout_s: float, split_loadgen: bool = False
) -> dict:
    """Run argv; its elapsed time and peak RSS (MiB): of the process itself, and (with
    split_loadgen) of its load-generator descendants added up, sampled every 0.1 s."""
    t0 = time.perf_counter()
    # output to files, not pipes: nobody reads a pipe while this loop samples RSS, and a long
    # trial's per-second lines fill one (64 KiB) and stall perfctl (a 10-minute run did)
    out_f, err_f = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out_f, stderr=err_f, text=True)
    me = psutil.Process(proc.pid)
    peak_self = peak_loadgen = 0.0
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        peak_self = max(peak_self, _rss_mb(me))
        if split_loadgen:
            lg = [p for p in _tree(me)[1:] if _is_loadgen(p)]
            lg += [c for p in lg for c in _tree(p)[1:]]
            peak_loadgen = max(
                peak_loadgen, sum(_rss_mb(p) for p in {q.pid: q for q in lg}.values())
            )
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    out_f.seek(0)
    err_f.seek(0)
    out, err = out_f.read(), err_f.read()
    out_f.close()
    err_f.close()
    return {
        "elapsed_s": time.perf_counter() - t0,
        "peak_mb": peak_self,
        "loadgen_peak_mb": peak_loadgen,
        "code": proc.returncode,
        "stdout": out,
        "stderr": err,
    }


POSTPROCESS = """
import json, sys, time
from pathlib import Path
from loadgen.spec import LoadSpec
from orchestrator.run.trial_row import summarize_trial
import scipy.stats  # imported on first use by loadgen.stats: a one-time cost, not timed
tdir = Path(sys.argv[1])
summary = json.loads((tdir / "summary.json").read_text())
spec = LoadSpec.load(tdir / "spec.json")
t0 = time.perf_counter()
row, timeline = summarize_trial(tdir, summary, spec, None)
dt = time.perf_counter() - t0
# VmHWM: this process's own peak. (ru_maxrss is not: Linux carries the parent's peak across
# fork + exec into it, and this benchmark's process holds a whole run's latencies for the
# accuracy check, so ru_maxrss read the benchmark's size, not the post-processing's.)
hwm_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": dt, "peak_mb": hwm_kb / 1024,
                  "from": row["latency_percentiles_from"], "requests": row["requests"],
                  "p50": row["latency_p50_ms"], "p99": row["latency_p99_ms"],
                  "p999": row["latency_p999_ms"]}))
"""


def postprocess(tdir: Path, env: dict) -> dict:
    p = subprocess.run(
        [sys.executable, "-c", POSTPROCESS, str(tdir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def accuracy(tdir: Path) -> dict[str, float]:
    """Relative error of each HDR percentile against the exact order statistic of the same
    requests (the window's requests without an error class)."""
    sys.path.insert(0, str(ROOT))
    from loadgen import digest, hdr, stats  # this checkout's, after the path is set

    summary = json.loads((tdir / "summary.json").read_text())
    w = stats.chosen_window(digest.read(tdir / "digest.json"), summary)
    t = pq.read_table(tdir / "requests.parquet", columns=["intended_ns", "done_ns", "error"])
    intended = t.column("intended_ns").to_numpy()
    m = (
        (intended >= summary["measure_start_ns"])
        & (intended < summary["measure_end_ns"])
        & (t.column("error").to_numpy() == 0)
    )
    lat_ms = (t.column("done_ns").to_numpy()[m] - intended[m]) / 1e6
    del t, intended
    out = {}
    for name, q in (("p50", 50.0), ("p99", 99.0), ("p999", 99.9)):
        exact = stats.percentile(lat_ms, q)
        out[name] = hdr.percentile_ms(w.hists["latency"], q) / exact - 1
    return out


def sizes(tdir: Path) -> str:
    names = ("requests.parquet", "digest.json", "latency.hlog", "timeline.parquet")
    return ", ".join(
        f"{n} {(tdir / n).stat().st_size / 2**20:.1f} MB" for n in names if (tdir / n).is_file()
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--minutes", default="1,2,5,10", help="trial lengths, comma-separated")
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--records", default="all", help="load.records: all | sample:F | none")
    ap.add_argument("--checkout", type=Path, default=ROOT, help="whose perfctl to run")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    args = ap.parse_args()
    checkout = args.checkout.resolve()
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    here_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    work = Path(tempfile.mkdtemp(prefix="perfctl-scale-"))
    print(f"perfctl from {checkout}; runs under {work}; records: {args.records}\n")
    header = (
        f"{'length':>7} {'requests':>11} {'perfctl MB':>10} {'loadgen MB':>10} "
        f"{'post s':>7} {'s/Mreq':>7} {'post MB':>8} {'pcts':>5} "
        f"{'p50 err':>8} {'p99 err':>8} {'p999 err':>8}  files"
    )
    print(header)
    last = None
    for minutes in [float(x) for x in args.minutes.split(",")]:
        seconds = max(1, round(minutes * 60))
        exp = work / f"scale-{seconds}s.yaml"
        records = "" if args.records == "all" else f', records: "{args.records}"'
        exp.write_text(
            EXPERIMENT.format(connections=args.connections, seconds=seconds, records=records)
        )
        run_dir = work / f"run-{seconds}s"
        r = watch(
            [sys.executable, "-m", "orchestrator.cli", "run", str(exp), "--out", str(run_dir)],
            checkout,
            env,
            timeout_s=seconds + 600,
            split_loadgen=True,
        )
        if r["code"] != 0:
            print(f"{minutes:>6g}m  perfctl run failed ({r['code']}): {r['stderr'][-600:]}")
            continue
        tdir = next((run_dir / "cells").glob("*/trial-1"))
        post = acc = None
        if (tdir / "digest.json").is_file():
            post = postprocess(tdir, here_env)
            if (tdir / "requests.parquet").is_file() and args.records == "all":
                acc = accuracy(tdir)
        reqs = (
            post["requests"]
            if post
            else int(pq.ParquetFile(tdir / "requests.parquet").metadata.num_rows)
        )
        per_m = post["seconds"] / (reqs / 1e6) if post and reqs else float("nan")
        fmt = (lambda v: f"{100 * v:+.3f}%") if acc else (lambda v: "-")
        print(
            f"{minutes:>6g}m {reqs:>11,} {r['peak_mb']:>10.0f} {r['loadgen_peak_mb']:>10.0f} "
            f"{post['seconds'] if post else float('nan'):>7.2f} {per_m:>7.2f} "
            f"{post['peak_mb'] if post else float('nan'):>8.0f} "
            f"{post['from'] if post else '-':>5} "
            f"{fmt(acc['p50']) if acc else '-':>8} {fmt(acc['p99']) if acc else '-':>8} "
            f"{fmt(acc['p999']) if acc else '-':>8}  {sizes(tdir)}",
            flush=True,
        )
        last = run_dir
    if last is not None:
        print(f"\nreport and compare on the longest run ({last.name}):")
        for name, argv in (
            ("report", ["report", str(last)]),
            ("compare", ["compare", str(last), str(last)]),
        ):
            r = watch(
                [sys.executable, "-m", "orchestrator.cli", *argv], checkout, env, timeout_s=3600
            )
            print(
                f"  perfctl {name:<8} {r['elapsed_s']:7.1f} s   peak RSS {r['peak_mb']:6.0f} MB"
                f"   exit {r['code']}"
            )
    print(
        f"\ngoals: perfctl <= {GOAL_PERFCTL_MB} MB, load generator <= {GOAL_LOADGEN_MB} MB at "
        f"every length; post-processing <= {GOAL_S_PER_MREQ:g} s per million requests; "
        f"HDR percentiles within {100 * GOAL_REL:g}% of exact"
    )
    if not args.keep:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    else:
        print(f"kept: {work}")


if __name__ == "__main__":
    main()

"""How well do the queueing models predict a real server? One perfctl run, one table.

  .venv/bin/python benchmarks/models_accuracy.py [--spin-us 1000] [--duration 30]
        [--util 0.2 0.4 0.6 0.8] [--threads 1] [--keepalive] [--repeats 1]

The C `pool` server with `threads: 1` pinned to CPU 0 (load generator on CPU 1) serving
GET /work?spin_us=S&dist=exp (exponential service times, mean S) under open Poisson load at
utilisation u (rate = u / S) is an M/M/1 queue. The benchmark writes a small experiment file to
a temporary directory, runs it through perfctl itself (`perfctl run FILE --out DIR`), loads the
run with orchestrator.results.load, keeps each trial's measured window (warm-up dropped, as
`perfctl model` does) and calls models.comparison.compare: the service time S and its SCV come
from the Server-Timing `svc` values, the model is chosen by compare (M/M/1 when the SCV is
near 1), and compare adds the overhead, the time a request spends outside the server's queue
and service (client, loopback, connect), to every prediction: its mean to the mean, its median
to the p99.

Goals: mean latency within 10 % and p99 within 20 % of the measurement at each utilisation.

Connections: a `pool` worker keeps a keep-alive connection until the client closes it, so with
one worker and several keep-alive connections all but one would starve. By default each request
therefore opens its own connection (`keepalive: false`), and the queue is the server's accepted-
connection queue, as in the model. `--keepalive` uses one keep-alive connection instead: the
queue then sits in the load generator (requests wait for the connection), and every request's
round trip is serialised with the service, i.e. S grows by the overhead and so does the load.

Printed per utilisation: the measured mean and p99 (ms, from the intended send time), the
model's prediction with the overhead (what compare reports, goals judged on it) and, to see
what the overhead does, the server-side part alone (measured queue + svc vs the model without
the overhead). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import ROOT

from models import comparison  # noqa: E402
from orchestrator import results
from orchestrator.analysis import views  # noqa: E402

SERVER_CPU, CLIENT_CPU = 0, 1
GOAL_MEAN, GOAL_P99 = 0.10, 0.20


def experiment_yaml(
    spin_us: int,
    utils: list[float],
    threads: list[int],
    duration: int,
    warmup: int,
    keepalive: bool,
    repeats: int,
) -> str:
    rates = [round(u / (spin_us / 1e6), 3) for u in utils]
    return f"""name: models_accuracy
servers:
  c-pool: {{impl: c, model: pool, threads: "{{threads}}", backlog: 128}}
workload: {{path: /work, params: {{spin_us: {spin_us}, dist: exp}}}}
load:
  mode: open
  arrivals: poisson
  rate: "{{rate}}"
  connections: 1
  keepalive: {str(keepalive).lower()}
  max_outstanding: 2000
  duration: {duration}s
  warmup: {warmup}s
  timeout: 10s
matrix: {{rate: {rates}, threads: {threads}}}
repeats: {repeats}
placement: {{server_cpus: [{SERVER_CPU}], loadgen_cpus: [{CLIENT_CPU}]}}
"""


def run_perfctl(yaml_text: str, workdir: Path) -> Path:
    """perfctl run in `workdir` (so results/latest there, not in the repo); returns the run dir."""
    exp = workdir / "models_accuracy.yaml"
    exp.write_text(yaml_text)
    out = workdir / "run"
    exe = ROOT / ".venv" / "bin" / "perfctl"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "orchestrator.cli"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(
        [*cmd, "run", str(exp), "--out", str(out), "--no-plots"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if p.returncode != 0:
        sys.exit(
            f"perfctl run failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        )
    return out


def pct(x: float) -> str:
    return f"{100 * x:+6.1f}%" if math.isfinite(x) else "    n/a"


def analyse(run_dir: Path, spin_us: int, keepalive: bool = False) -> None:
    run = results.load(run_dir)
    trials, fallback = views.analysis_trials(run.trials)
    reqs = views.measured_requests(run, trials)  # measured window only, no errors
    reqs = reqs[(reqs["status"] > 0) & (reqs["done_ns"] > 0)]  # never sent/answered rows
    table = comparison.compare(trials, reqs)
    invalid = run.trials[~run.trials["valid"].fillna(False).astype(bool)]
    for _, t in invalid.iterrows():
        print(
            f"  invalid trial {t['cell_id']} #{t['trial']} (rate {t.get('rate')}): "
            f"{t['invalid_reasons']}"
        )
    print(
        f"{'threads':>7} {'u':>5} {'rate/s':>7} {'n':>6} {'S ms':>6} {'SCV':>5} {'oh ms':>11}  "
        f"{'model':<7} {'mean':>7} {'pred':>7} {'err':>7} {'goal':>4}  {'p99':>7} {'pred':>7} "
        f"{'err':>7} {'goal':>4} {'cpu%':>5}  | server side: {'mean':>6} {'pred':>6} {'err':>7}  "
        f"{'p99':>6} {'pred':>6} {'err':>7}"
    )
    rows, star = [], 0
    for _, r in table.sort_values(["server_threads", "target_rate"]).iterrows():
        cr = reqs[(reqs["cell_id"] == r["cell_id"])]
        S = r["service_mean_ms"] / 1e3
        oh = r["overhead_ms"]  # median: added to the p99
        ohm = r.get("overhead_mean_ms", oh)  # mean: added to the mean
        u = r["target_rate"] * S
        # server side alone: queue + svc as the server reports it, vs the model without overhead
        srv = (cr["queue_ms"].fillna(0) + cr["svc_ms"]).to_numpy(dtype=float)
        srv_mean, srv_p99 = float(srv.mean()), float(np.percentile(srv, 99))
        pred_p99, err_p99 = r["pred_p99_ms"], r["err_p99"]
        if not math.isfinite(pred_p99) and math.isfinite(r.get("pred_mmc_p99_ms", math.nan)):
            # M/G/1 (chosen when the SCV is far from 1) has no p99: judge M/M/1's, marked '*'
            pred_p99, err_p99 = r["pred_mmc_p99_ms"], r["err_mmc_p99"]
            star += 1
        pm, pp = r["pred_mean_ms"] - ohm, pred_p99 - oh
        ok_m = abs(r["err_mean"]) <= GOAL_MEAN
        ok_p = math.isfinite(err_p99) and abs(err_p99) <= GOAL_P99
        flag = " (from invalid trials)" if r["cell_id"] in fallback else ""
        cpu = (
            float(trials.loc[trials["cell_id"] == r["cell_id"], "server_cpu_pct"].mean())
            if "server_cpu_pct" in trials.columns
            else math.nan
        )
        print(
            f"{int(r['server_threads']):>7} {u:5.2f} {r['target_rate']:7.0f} {len(cr):6d} "
            f"{S * 1e3:6.3f} {r['service_scv']:5.2f} {ohm:5.3f}/{oh:5.3f}  {r['model']:<7} "
            f"{r['measured_mean_ms']:7.3f} {r['pred_mean_ms']:7.3f} {pct(r['err_mean'])} "
            f"{'ok' if ok_m else 'MISS':>4}  {r['measured_p99_ms']:7.3f} {pred_p99:7.3f} "
            f"{pct(err_p99)} {'ok' if ok_p else 'MISS':>4} {cpu:5.0f}  | "
            + (
                f"{'':13} n/a: the queue is in the client"
                if keepalive
                else f"{'':13} {srv_mean:6.3f} {pm:6.3f} {pct((pm - srv_mean) / srv_mean)}  "
                f"{srv_p99:6.3f} {pp:6.3f} {pct((pp - srv_p99) / srv_p99)}"
            )
            + flag
        )
        rows.append((ok_m, ok_p))
    print(
        f"\nnominal S = {spin_us / 1e3:.3f} ms; u = target rate x measured S; goals: mean within "
        f"{100 * GOAL_MEAN:.0f}%, p99 within {100 * GOAL_P99:.0f}% -> met at "
        f"{sum(a for a, _ in rows)}/{len(rows)} (mean), {sum(b for _, b in rows)}/{len(rows)} (p99)"
    )
    if star:
        print("p99 pred of an M/G/1 row (SCV far from 1, no closed-form p99) is M/M/1's.")
    print(
        "cpu% = the server's CPU use; it should be about 100 u (the spin is CPU). Much less, "
        "with latencies far above the model, means other jobs took CPU 0 from the server."
    )
    print(
        "pred = compare's prediction, which adds the overhead (oh: latency - queue - svc, i.e. "
        "client + loopback + connect; its mean to the mean, its median to the p99) to the "
        "model's latency; 'server side' compares the server's own queue + svc with the model "
        "before that addition."
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--spin-us", type=int, default=1000, help="mean service time S [us]")
    ap.add_argument("--util", type=float, nargs="+", default=[0.2, 0.4, 0.6, 0.8])
    ap.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[1],
        help="pool threads (all on one core); 1 is the M/M/1 case",
    )
    ap.add_argument("--duration", type=int, default=30, help="measured seconds per trial")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument(
        "--keepalive",
        action="store_true",
        help="one keep-alive connection instead of a connection per request",
    )
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="perfctl-models-accuracy-"))
    try:
        text = experiment_yaml(
            args.spin_us,
            args.util,
            args.threads,
            args.duration,
            args.warmup,
            args.keepalive,
            args.repeats,
        )
        n = len(args.util) * len(args.threads) * args.repeats
        print(
            f"C pool, threads {args.threads} on CPU {SERVER_CPU}, GET /work?spin_us="
            f"{args.spin_us}&dist=exp, open Poisson, "
            f"{'1 keep-alive connection' if args.keepalive else 'a new connection per request'}"
            f"; {n} trials of {args.duration} s (+{args.warmup} s warm-up) via perfctl run\n"
        )
        print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        run_dir = run_perfctl(text, work)
        print(f"load average after:  {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
        analyse(run_dir, args.spin_us, args.keepalive)
        if args.keep:
            print(f"\nrun kept in {run_dir}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

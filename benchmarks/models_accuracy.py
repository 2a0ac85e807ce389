"""How well do the queueing models predict real servers? One table per dispatch discipline.

  .venv/bin/python benchmarks/models_accuracy.py [--disciplines shared per_connection sharing
        event_loop no_timing] [--c 1 2 4 8] [--rho 0.2 0.3 ... 0.9] [--users 1 4 16 64]
        [--think-ms 20] [--duration 10] [--warmup 2] [--repeats 1] [--keep]

Each discipline is a server whose dispatch is known, run through perfctl itself (`perfctl run
FILE --out DIR`, one run per discipline, c and load mode), fitted as `perfctl model` fits it
(orchestrator.analysis.queueing.queueing_table: histograms, the verdicts' bootstrap):

  shared          the reference M/M/c server (servers/reference/mmc_server.py) through `cmd:`,
                  c workers on one FIFO queue, exponential 4 ms sleeps, Server-Timing on,
                  `dispatch: shared_queue` and `threads: c` declared; 64 keep-alive connections
  per_connection  the C `pool` server, c threads, exponential 4 ms sleeps; open load on c
                  keep-alive connections (each pinned to a worker: the queue is in the
                  client), closed loops of N users (N > c: pinned out, the model must reject)
  sharing         the C `pool` server, c threads on ONE core, CPU work (/search: a regex
                  scan, ~0.85 ms, nearly constant), a new connection per request (the accept
                  queue): c > 1 threads share the core (processor sharing; the mean only, as
                  the service time is not exponential); closed users on keep-alive
                  connections, each on a thread of its own while N <= c
  event_loop      the C `epoll` server, c loops (each blocks in its 4 ms sleeps), 64
                  keep-alive connections (split over the loops)
  no_timing       the reference server with --no-server-timing and nothing declared: the probe
                  infers the dispatch and c, a single-user probe gives S

Open load: Poisson at utilisation rho = rate x S / c (S the nominal service time, c the
servers that can run: for `sharing`, the one core). Closed load: N users, exponential think
time (--think-ms). The server runs on CPU 0, the load generator on CPU 1.

Printed per cell: the model, measured and predicted mean and p99 (ms) with the prediction's
band, the signed error and the verdict. Per discipline: the MAPE of the mean and of the p99
over open cells up to rho 0.8 and over every closed cell, the verdicts counted, the cells
outside the goals (mean 10%, p99 25%) and whether each was rejected (with its cause) or
silently wrong, and what-if predictions (each open cell's fitted model asked for the next c at
the same rho) against the cell measured there (goal: within 15%). Nothing is asserted.
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

from _common import ROOT

from orchestrator import results  # noqa: E402
from orchestrator.analysis import queueing  # noqa: E402

SERVER_CPU, CLIENT_CPU = 0, 1
GOAL = {"mean": 0.10, "p99": 0.25, "what_if": 0.15}
SLEEP_MS, SEARCH_MS = 4.0, 0.85  # nominal service times: /work's sleep, /search's scan
REF = f"{sys.executable} {ROOT}/servers/reference/mmc_server.py --port {{port}} --service-ms 4"


def server_block(discipline: str, c: int) -> tuple[str, str, float, int]:
    """(servers: YAML, workload: YAML, nominal S [ms], servers that can run at once)."""
    if discipline == "shared":
        return (
            f'ref: {{cmd: "{REF} --workers {c}", dispatch: shared_queue, threads: {c}}}',
            "{path: /work}",
            SLEEP_MS,
            c,
        )
    if discipline == "no_timing":
        return (
            f'ref: {{cmd: "{REF} --workers {c} --no-server-timing"}}',
            "{path: /work}",
            SLEEP_MS,
            c,
        )
    if discipline == "per_connection":
        return (
            f"pool: {{impl: c, model: pool, threads: {c}, backlog: 1024}}",
            f"{{path: /work, params: {{sleep_us: {int(SLEEP_MS * 1000)}, dist: exp}}}}",
            SLEEP_MS,
            c,
        )
    if discipline == "sharing":
        # /search is CPU work measured in work done (a regex over the corpus, ~0.85 ms on
        # this machine's cores), so threads beyond the cores stretch it: processor sharing.
        # (/work's spin_us is timed by the wall clock: a descheduled spinner still finishes
        # on time, so it does not share the core the way CPU work does.)
        return (
            f"pool: {{impl: c, model: pool, threads: {c}, backlog: 1024}}",
            "{path: /search, params: {type: 1, re: zzz}}",
            SEARCH_MS,
            1,
        )
    if discipline == "event_loop":
        return (
            f"epoll: {{impl: c, model: epoll, threads: {c}, backlog: 1024}}",
            f"{{path: /work, params: {{sleep_us: {int(SLEEP_MS * 1000)}, dist: exp}}}}",
            SLEEP_MS,
            c,
        )
    raise SystemExit(f"unknown discipline {discipline!r}")


def experiment_yaml(discipline: str, c: int, mode: str, args) -> str:
    servers, workload, s_ms, runs = server_block(discipline, c)
    # sharing: open load on a new connection per request (the accept queue, shared); closed
    # users keep theirs (each on a thread of its own, sharing the core, while N <= c)
    keepalive = discipline != "sharing" or mode == "closed"
    if mode == "open":
        rates = [round(rho * runs / (s_ms / 1e3), 3) for rho in args.rho]
        conns = c if discipline == "per_connection" else 64
        load = (
            f'{{mode: open, arrivals: poisson, rate: "{{rate}}", connections: {conns}, '
            f"keepalive: {str(keepalive).lower()}, max_outstanding: 4000, "
            f"duration: {args.duration}s, warmup: {args.warmup}s, timeout: 5s}}"
        )
        matrix = f"{{rate: {rates}}}"
    else:
        load = (
            f'{{mode: closed, connections: "{{users}}", think_time: {args.think_ms}ms, '
            f"think: exp, keepalive: {str(keepalive).lower()}, duration: {args.duration}s, "
            f"warmup: {args.warmup}s, timeout: 5s}}"
        )
        matrix = f"{{users: {list(args.users)}}}"
    return f"""name: models_accuracy_{discipline}_c{c}_{mode}
servers:
  {servers}
workload: {workload}
load: {load}
matrix: {matrix}
repeats: {args.repeats}
placement: {{server_cpus: [{SERVER_CPU}], loadgen_cpus: [{CLIENT_CPU}]}}
"""


def run_perfctl(yaml_text: str, workdir: Path, name: str) -> Path | None:
    exp = workdir / f"{name}.yaml"
    exp.write_text(yaml_text)
    out = workdir / name
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(exp),
            "--out",
            str(out),
            "--no-plots",
            "-q",
        ],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=7200,
    )
    if p.returncode != 0:
        print(f"  perfctl run {name} failed (exit {p.returncode}): {p.stderr[-800:]}")
        return None
    return out


def pct(x) -> str:
    return f"{100 * x:+6.1f}%" if isinstance(x, float) and math.isfinite(x) else "    n/a"


def num(x, f=".3f") -> str:
    return format(x, f) if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def band(r, stat: str) -> str:
    lo, hi = r.get(f"pred_{stat}_low_ms"), r.get(f"pred_{stat}_high_ms")
    return f"[{num(lo, '.3g')},{num(hi, '.3g')}]"


def rows_of(table, discipline: str, c: int, mode: str, s_ms: float, runs: int) -> list[dict]:
    out = []
    for _, r in table.iterrows():
        x = float(r.get("measured_throughput_rps", math.nan))
        rate = float(r.get("target_rate", math.nan))
        out.append(
            {
                "discipline": discipline,
                "c": c,
                "mode": mode,
                "rho": rate * s_ms / 1e3 / runs if mode == "open" else math.nan,
                "users": int(r.get("connections", 0)) if mode == "closed" else 0,
                "x": x,
                "row": r,
            }
        )
    return out


def mape(errs: list[float]) -> float:
    e = [abs(x) for x in errs if isinstance(x, float) and math.isfinite(x)]
    return sum(e) / len(e) if e else math.nan


def print_table(discipline: str, cells: list[dict]) -> None:
    print(f"\n=== {discipline} ===")
    print(
        f"{'c':>2} {'load':>9} {'model':<28} {'mean':>7} {'pred [band]':>22} {'err':>7} "
        f"{'verdict':<12} {'p99':>7} {'pred [band]':>22} {'err':>7} {'verdict':<12}"
    )
    for cell in sorted(cells, key=lambda d: (d["c"], d["mode"], d["rho"], d["users"])):
        r = cell["row"]
        load = f"rho {cell['rho']:.2f}" if cell["mode"] == "open" else f"N {cell['users']}"
        line = f"{cell['c']:>2} {load:>9} {str(r.get('model', ''))[:28]:<28}"
        for stat in ("mean", "p99"):
            line += (
                f" {num(r.get(f'measured_{stat}_ms')):>7} "
                f"{num(r.get(f'pred_{stat}_ms')) + ' ' + band(r, stat):>22} "
                f"{pct(r.get(f'err_{stat}'))} {str(r.get(f'verdict_{stat}', '')):<12}"
            )
        print(line)
        if r.get("verdict") == "rejected":
            cause = str(r.get("verdict_causes", "") or r.get("verdict_why", ""))
            print(f"{'':>13}rejected: {cause[:150]}")


def summarise(discipline: str, cells: list[dict]) -> None:
    open_ = [d for d in cells if d["mode"] == "open" and d["rho"] <= 0.8 + 1e-9]
    closed = [d for d in cells if d["mode"] == "closed"]
    for name, group in (("open, rho <= 0.8", open_), ("closed", closed)):
        m = mape([d["row"].get("err_mean") for d in group])
        p = mape([d["row"].get("err_p99") for d in group])
        print(
            f"  MAPE {name}: mean {pct(m).strip()} (goal {100 * GOAL['mean']:.0f}%), "
            f"p99 {pct(p).strip()} (goal {100 * GOAL['p99']:.0f}%) over {len(group)} cells"
        )
    verdicts: dict[str, int] = {}
    for d in cells:
        v = str(d["row"].get("verdict", "no prediction"))
        verdicts[v] = verdicts.get(v, 0) + 1
    print("  verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))
    silent = []
    for d in cells:
        r = d["row"]
        off = any(
            isinstance(r.get(f"err_{s}"), float)
            and math.isfinite(r.get(f"err_{s}"))
            and abs(r.get(f"err_{s}")) > GOAL[s]
            for s in ("mean", "p99")
        )
        if off and r.get("verdict") != "rejected":
            silent.append(d)
    outside = sum(
        1
        for d in cells
        if any(
            isinstance(d["row"].get(f"err_{s}"), float)
            and abs(d["row"].get(f"err_{s}", 0.0)) > GOAL[s]
            for s in ("mean", "p99")
        )
    )
    print(
        f"  outside the goals: {outside} cells, of which not rejected (silently wrong, or "
        f"inconclusive): {len(silent)}"
        + "".join(
            f"\n    c={d['c']} "
            + (f"rho {d['rho']:.2f}" if d["mode"] == "open" else f"N {d['users']}")
            + f": {d['row'].get('verdict')} {d['row'].get('verdict_why', '')}"
            for d in silent
        )
    )


def what_ifs(discipline: str, cells: list[dict], cs: list[int]) -> None:
    """Each open cell's fitted model asked for the next c (and the rate that keeps rho),
    against the cell measured there."""
    by = {(d["c"], round(d["rho"], 3)): d for d in cells if d["mode"] == "open"}
    errs = []
    lines = []
    for (c, rho), d in sorted(by.items()):
        nxt = [x for x in cs if x > c]
        if not nxt or (nxt[0], rho) not in by:
            continue
        target = by[(nxt[0], rho)]
        rate = float(target["row"].get("target_rate"))
        changes = {"threads": float(nxt[0]), "rate": rate}
        row = d["row"].copy()
        if discipline == "per_connection":  # its open cells hold c keep-alive connections
            row["connections"] = nxt[0]
        wi = queueing.what_if(row.to_frame().T, changes)
        if wi.empty or "pred_mean_ms" not in wi:
            continue
        pred = float(wi.iloc[0].get("pred_mean_ms", math.nan))
        meas = float(target["row"].get("measured_mean_ms", math.nan))
        err = (pred - meas) / meas if meas else math.nan
        errs.append(err)
        lines.append(
            f"    c {c} -> {nxt[0]} at rho {rho:.2f}: predicted {num(pred)} ms, "
            f"measured {num(meas)} ms, {pct(err).strip()}"
        )
    if lines:
        within = sum(1 for e in errs if math.isfinite(e) and abs(e) <= GOAL["what_if"])
        print(
            f"  what-if (mean, next c at the same rho): {within}/{len(errs)} within "
            f"{100 * GOAL['what_if']:.0f}%"
        )
        print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--disciplines",
        nargs="+",
        default=["shared", "per_connection", "sharing", "event_loop", "no_timing"],
    )
    ap.add_argument("--c", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument(
        "--rho", type=float, nargs="+", default=[0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    )
    ap.add_argument("--users", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--think-ms", type=float, default=20.0)
    ap.add_argument("--duration", type=int, default=10, help="measured seconds per trial")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--modes", nargs="+", default=["open", "closed"])
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="perfctl-models-accuracy-"))
    print(
        f"disciplines {args.disciplines}, c {args.c}, rho {args.rho}, users {args.users} "
        f"(think {args.think_ms:g} ms exp), {args.duration} s (+{args.warmup} s warm-up) x "
        f"{args.repeats}; server CPU {SERVER_CPU}, load generator CPU {CLIENT_CPU}"
    )
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    try:
        for discipline in args.disciplines:
            cells = []
            for c in args.c:
                _, _, s_ms, runs = server_block(discipline, c)
                for mode in args.modes:
                    name = f"{discipline}-c{c}-{mode}"
                    run_dir = run_perfctl(experiment_yaml(discipline, c, mode, args), work, name)
                    if run_dir is None:
                        continue
                    table = queueing.queueing_table(results.load(run_dir))
                    cells += rows_of(table, discipline, c, mode, s_ms, runs)
            print_table(discipline, cells)
            summarise(discipline, cells)
            what_ifs(discipline, cells, sorted(args.c))
        print(f"\nload average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        if args.keep:
            print(f"runs kept in {work}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

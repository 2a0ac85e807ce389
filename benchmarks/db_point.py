"""/db point queries: each language's server against the same PostgreSQL, printed side by side.

  .venv/bin/python benchmarks/db_point.py [--duration 5] [--repeats 3] [--participants 10000]

One `perfctl run` of a generated experiment: a `postgresql` service (scope: run, so every cell
queries the same database with the same data), and one cell per server: C `pool`, Python
`async` and `pool`, Java `pool`, `servlet` and `spring` (4 threads / 4 database connections
each), GET /db?query=point, closed load with 16 connections; and Java `rmi` (16 connection
slots, one per client, since an RMI connection holds its slot; 4 JDBC connections, `db_pool`)
driven by the `rmi` driver with the same call ("/db", query=point), server on CPU 0, load generator on CPU 1
(PostgreSQL unpinned: it gets what the server leaves). Trials are interleaved over `--repeats`
rounds, so a drift of the host spreads over all servers.

Printed per server: the median throughput over its valid trials, p50/p99 latency, the share of
each request's service time spent in the database (mean of Server-Timing `db` over mean `svc`,
both from the server's own clock), PostgreSQL's CPU while it ran, and the ratio to the C
server. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd
from _common import ROOT, perfctl

SERVERS = {
    "c-pool": '{impl: c, model: pool, threads: 4, db: "{services.db.dsn}"}',
    "python-async": '{impl: python, model: async, threads: 4, db: "{services.db.dsn}"}',
    "python-pool": '{impl: python, model: pool, threads: 4, db: "{services.db.dsn}"}',
    "java-pool": '{impl: java, model: pool, threads: 4, db: "{services.db.dsn}"}',
    "java-servlet": '{impl: java, model: servlet, threads: 4, db: "{services.db.dsn}"}',
    "java-spring": '{impl: java, model: spring, threads: 4, db: "{services.db.dsn}"}',
    "java-rmi": '{impl: java, model: rmi, threads: 16, db_pool: 4, db: "{services.db.dsn}"}',
}


def experiment(
    duration: int, repeats: int, participants: int, only: list[str] | None = None
) -> str:
    chosen = {k: v for k, v in SERVERS.items() if not only or k in only}
    servers = "\n".join(f"  {k}: {v}" for k, v in chosen.items())
    excludes = "\n".join(
        f"  - {{protocol: {'http' if k == 'java-rmi' else 'rmi'}, server: {k}}}" for k in chosen
    )
    return f"""name: db_point
services:
  db: {{kind: postgresql, scope: run, data: {{participants: {participants}}}}}
servers:
{servers}
workload: {{path: /db, params: {{query: point}}}}
load: {{driver: "{{protocol}}", mode: closed, connections: 16, duration: {duration}s, warmup: 2s,
        timeout: 5s}}
matrix: {{protocol: [http, rmi]}}
exclude:
{excludes}
repeats: {repeats}
order: interleaved
placement: {{server_cpus: [0], loadgen_cpus: [1]}}
"""


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--duration", type=int, default=5, help="measured seconds per trial")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--participants", type=int, default=10_000)
    ap.add_argument("--only", default="", help=f"comma-separated servers (of {', '.join(SERVERS)})")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfctl-db-bench-") as tmp:
        exp = Path(tmp) / "db_point.yaml"
        only = [x for x in args.only.split(",") if x]
        unknown = set(only) - set(SERVERS)
        if unknown:
            ap.error(f"--only: unknown server(s) {', '.join(sorted(unknown))}")
        exp.write_text(experiment(args.duration, args.repeats, args.participants, only))
        out = Path(tmp) / "run"
        done = perfctl("run", str(exp), "--out", str(out), "--no-plots", timeout=3600)
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
            sys.exit(done.returncode)
        trials = pd.read_csv(out / "trials.csv")
        rows = []
        notes = []
        for server, g in trials.groupby("server", sort=False):
            use = g[g["valid"].astype(str) == "True"]
            if use.empty:  # shown all the same, marked, with the first reason
                use = g
                notes.append(
                    f"{server}: no valid trial, figures from all {len(g)} "
                    f"(first reason: {g['invalid_reasons'].iloc[0]})"
                )
            svc = db = 0.0
            n = 0
            for _, t in use.iterrows():
                req = pd.read_parquet(
                    out / "cells" / t["cell_id"] / f"trial-{t['trial']}" / "requests.parquet",
                    columns=["status", "svc_ms", "db_ms"],
                )
                req = req[(req["status"] == 200)].dropna(subset=["svc_ms", "db_ms"])
                svc += req["svc_ms"].sum()
                db += req["db_ms"].sum()
                n += len(req)
            n_valid = int((g["valid"].astype(str) == "True").sum())
            rows.append(
                {
                    "server": server,
                    "trials": f"{n_valid}/{len(g)}",
                    "rps": statistics.median(use["throughput_rps"]) if len(use) else float("nan"),
                    "p50_ms": statistics.median(use["latency_p50_ms"])
                    if len(use)
                    else float("nan"),
                    "p99_ms": statistics.median(use["latency_p99_ms"])
                    if len(use)
                    else float("nan"),
                    "db_share": db / svc if svc else float("nan"),
                    "db_ms": db / n if n else float("nan"),
                    "pg_cpu_pct": use["service_db_cpu_pct"].median() if len(use) else float("nan"),
                    "quiet": f"{int(g['quiet'].astype(str).eq('True').sum())}/{len(g)}",
                }
            )
        ref = next((r["rps"] for r in rows if r["server"] == "c-pool"), float("nan"))
        print(
            f"/db?query=point, closed load, 16 connections, {args.duration} s x {args.repeats} "
            f"interleaved trials per server, {args.participants} participants, one PostgreSQL "
            "for all servers\n"
        )
        print(
            f"  {'server':<14} {'valid':>6} {'quiet':>6} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
            f"{'db/svc':>7} {'db ms':>7} {'pg CPU%':>8} {'x c-pool':>9}"
        )
        for r in rows:
            print(
                f"  {r['server']:<14} {r['trials']:>6} {r['quiet']:>6} {r['rps']:>9,.0f} "
                f"{r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} {r['db_share']:>7.0%} "
                f"{r['db_ms']:>7.3f} {r['pg_cpu_pct']:>8.0f} {r['rps'] / ref:>9.2f}"
            )
        for n in notes:
            print(f"  * {n}")
        print(
            "\ndb/svc: the share of the server's own service time (Server-Timing svc) spent in "
            "the database (db); the rest is HTTP, routing and the driver. Numbers from a noisy "
            "host say little: run on a quiet one (see the quiet column)."
        )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

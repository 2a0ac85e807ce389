"""Load spread over hosts (issue #15), on a local 3-host cluster (network namespaces h1..h3,
root needed) against the bundled C epoll server on h1.

  .venv/bin/python benchmarks/cluster.py [--duration 10] [--repeats 3] [--quick]

Prints, for load-generator shards on h2 alone vs on h2 and h3:
- closed loop (64 connections): throughput and the ratio 2 hosts / 1 host. On a 2-core machine
  the "hosts" share the cores with the server, so the ratio is bounded by CPU, not by the load
  generator; the CPU figures printed beside it say which side was saturated;
- open loop at 5000/s: the rate error (achieved vs target) and send lateness p99;
- the measured clock-offset uncertainty (RTT/2 of the best NTP-style exchange per host);
- TLS vs TCP (issue #31): the open loop on h2 and h3 over the cluster's mutual TLS (the
  default) and over plain TCP (`insecure: true`): rate error and send lateness. The goal is no
  difference beyond the noise between repeats: the measured path (shards to server) never
  crosses Dask; only the orchestrator's tasks do.
Each figure is the median over valid trials, with valid/quiet counts beside it (a number is
only as good as the trials behind it). Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd
from _common import perfctl

EXPERIMENT = """
name: cluster-{mode}
servers: {{c: {{impl: c, model: epoll}}}}
workload: {{path: /work, params: {{}}}}
load: {{mode: {mode}, {rate}connections: 64, duration: {duration}s, warmup: 2s}}
placement: {{server: {{host: h1}}, loadgen: {{hosts: "{{lg}}"}}}}
cluster: {{local: {{hosts: 3}}{insecure}}}
matrix: {{lg: {hosts}}}
repeats: {repeats}
order: interleaved
"""


def run(mode: str, duration: float, repeats: int, work: Path, tcp: bool = False) -> pd.DataFrame:
    """One run: closed or open load, shards on h2 and on h2+h3 (only h2+h3 when tcp=True,
    which makes the cluster plain TCP)."""
    rate = "rate: 5000, " if mode == "open" else ""
    name = f"{mode}-tcp" if tcp else mode
    exp = work / f"{name}.yaml"
    exp.write_text(
        EXPERIMENT.format(
            mode=mode,
            rate=rate,
            duration=duration,
            repeats=repeats,
            insecure=", insecure: true" if tcp else "",
            hosts='["h2,h3"]' if tcp else '[h2, "h2,h3"]',
        )
    )
    out = work / name
    done = perfctl("run", str(exp), "--out", str(out), "--no-plots", timeout=3600)
    if done.returncode != 0:
        sys.exit(f"perfctl run failed ({mode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return pd.read_csv(out / "trials.csv", keep_default_na=False, na_values=["", "nan"])


def _median(df: pd.DataFrame, col: str) -> float:
    """Over the valid trials; over all of them when none is valid (then _counts says so)."""
    use = df[df["valid"].astype(str) == "True"]
    return float((use if len(use) else df)[col].median())


def _counts(df: pd.DataFrame) -> str:
    v = (df["valid"].astype(str) == "True").sum()
    q = (df["quiet"].astype(str) == "True").sum()
    out = f"{v}/{len(df)} valid, {q}/{len(df)} quiet"
    if not v:
        out += (
            " - NO VALID TRIAL, figures from invalid ones; first reason: "
            + str(df["invalid_reasons"].iloc[0])[:160]
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2 s trials, 1 repeat: a smoke run")
    a = ap.parse_args()
    if a.quick:
        a.duration, a.repeats = 2.0, 1
    if os.geteuid() != 0:
        sys.exit("a local cluster needs root (network namespaces)")
    work = Path(tempfile.mkdtemp(prefix="perfctl-bench-cluster-"))
    closed = run("closed", a.duration, a.repeats, work)
    opened = run("open", a.duration, a.repeats, work)
    tcp = run("open", a.duration, a.repeats, work, tcp=True)
    print(
        f"local 3-host cluster, C epoll server on h1, {a.duration:g} s windows, "
        f"{a.repeats} repeat(s) per cell, {os.cpu_count()} CPUs shared by all hosts"
    )
    print("\nclosed loop, 64 connections")
    tput = {}
    for lg, g in closed.groupby("loadgen_hosts", sort=False):
        tput[lg] = _median(g, "throughput_rps")
        print(
            f"  shards on {lg:6}: {tput[lg]:10,.0f} req/s  server CPU "
            f"{_median(g, 'server_cpu_pct'):5.0f}%  load generator CPU (worst shard) "
            f"{_median(g, 'loadgen_cpu_pct'):5.0f}%  ({_counts(g)})"
        )
    if len(tput) == 2:
        one, two = tput.values()
        print(
            f"  ratio 2 hosts / 1 host: {two / one:.2f} (the hosts share the machine's CPUs "
            "with the server: the ratio is bounded by CPU; above, the side near 100% per "
            "core is the one that limits it)"
        )
    print("\nopen loop, 5000/s")
    for lg, g in opened.groupby("loadgen_hosts", sort=False):
        err = 100 * (_median(g, "achieved_rate") - 5000) / 5000
        print(
            f"  shards on {lg:6}: rate error {err:+.2f}%  send lateness p99 "
            f"{_median(g, 'send_lateness_p99_ms'):.3f} ms  latency p99 "
            f"{_median(g, 'latency_p99_ms'):.3f} ms  ({_counts(g)})"
        )
    print("\nopen loop, 5000/s, shards on h2 and h3: the cluster over TLS vs plain TCP")
    for name, g in (("TLS", opened[opened["loadgen_hosts"] == "h2,h3"]), ("TCP", tcp)):
        err = 100 * (_median(g, "achieved_rate") - 5000) / 5000
        print(
            f"  {name}: rate error {err:+.2f}%  send lateness p99 "
            f"{_median(g, 'send_lateness_p99_ms'):.3f} ms  latency p50 "
            f"{_median(g, 'latency_p50_ms'):.3f} ms  p99 {_median(g, 'latency_p99_ms'):.3f} ms"
            f"  ({_counts(g)})"
        )
    both = pd.concat([closed, opened, tcp])
    print(
        f"\nclock-offset uncertainty (worst host per trial): median "
        f"{both['clock_uncertainty_ms_max'].median():.3f} ms, max "
        f"{both['clock_uncertainty_ms_max'].max():.3f} ms over {len(both)} trials "
        f"(bound {5:g} ms: cluster.max_clock_uncertainty)"
    )
    print(f"\nresults: {work}")


if __name__ == "__main__":
    main()

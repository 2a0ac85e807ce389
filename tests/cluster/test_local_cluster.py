"""A local 3-host cluster (network namespaces h1..h3 on one bridge): the server on h1, load
shards on h2 and h3. The shards add up exactly, share the load, keep the open rate, reach the
server from two addresses; a network delay injected by the proxy on h1 raises the latency by
about the delay and leaves no proxy behind; a worker lost mid-trial makes that trial invalid
(not a hang) and the run stop with a clear message; Ctrl-C and kill -9 leave no process,
namespace or link."""

from __future__ import annotations

import json
import os
import signal
import time

import pandas as pd
import pytest
from cluster_kit import cluster_links, needs_root_and_ip

from benchmarks._common import descendants, poll_until, still_alive
from orchestrator.results import trial_dir

EXPERIMENT = """
name: cluster
servers: {c: {impl: c, model: epoll}}
workload: {path: /work, params: {}}
load: {mode: open, rate: 1000, connections: 64, duration: DURATION, warmup: 1s,
       max_outstanding: 8000}   # a shard starved of CPU by a busy host queues, never drops
placement: {server: {host: h1}, loadgen: {hosts: [h2, h3]}}
cluster: {local: {hosts: 3}, host_return: 1s}
repeats: REPEATS
"""
# the same hosts and load without and with 5 ms each way, injected on h1 (one cluster start)
DELAY_AXIS = """
network: {delay: "{d}"}
matrix: {d: [0ms, 5ms]}
"""


def experiment(write_yaml, duration: str = "3s", repeats: int = 1, delay_axis: bool = False):
    return str(
        write_yaml(
            EXPERIMENT.replace("DURATION", duration).replace("REPEATS", str(repeats))
            + (DELAY_AXIS if delay_axis else "")
        )
    )


def _shards_running(proc) -> dict:
    """perfctl's process tree once both shards' load generators run, else {} (and an
    AssertionError with perfctl's output if it ended first)."""
    if proc.poll() is not None:
        out, err = proc.communicate()
        raise AssertionError(
            f"perfctl ended (exit {proc.returncode}) before the shards ran:\n{out}\n{err}"
        )
    tree = descendants(proc.pid)
    return tree if sum("-m loadgen" in t for t in tree.values()) >= 2 else {}


def _nothing_left(pid: int, tree: dict) -> bool:
    return not still_alive(tree) and not cluster_links(pid)


class Seen:
    """Every descendant of perfctl seen while polling (shards and proxy come and go by trial)."""

    def __init__(self, proc) -> None:
        self.proc = proc
        self.tree: dict = {}

    def __call__(self) -> bool:
        if self.proc.poll() is not None:
            return True
        self.tree.update(descendants(self.proc.pid))
        return False

    def count(self, needle: str) -> int:
        return sum(needle in text for text in self.tree.values())


def test_three_hosts_server_on_h1_shards_on_h2_and_h3_without_and_with_delay(
    write_yaml, tmp_path, start_perfctl
):
    needs_root_and_ip()
    out = tmp_path / "run"
    proc = start_perfctl(
        "run", experiment(write_yaml, delay_axis=True), "--out", str(out), "--no-plots"
    )
    seen = Seen(proc)
    poll_until(seen, timeout_s=300, interval_s=0.2)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stdout + stderr
    assert seen.count("-m loadgen") >= 4 and seen.count("perfctl-proxy") >= 1, seen.tree
    assert poll_until(lambda: _nothing_left(proc.pid, seen.tree), timeout_s=10), (
        still_alive(seen.tree),
        cluster_links(proc.pid),
    )  # the proxy on h1 too

    rows = pd.read_csv(out / "trials.csv", keep_default_na=False, na_values=["", "nan"])
    assert sorted(rows["network_backend"]) == ["none", "proxy"]
    row = rows[rows["network_backend"] == "none"].iloc[0]
    tdir = trial_dir(out, row["cell_id"], 1)
    shards = json.loads((tdir / "shards.json").read_text())["shards"]
    requests = pd.read_parquet(tdir / "requests.parquet")
    summary = json.loads((tdir / "summary.json").read_text())
    window = requests[
        (requests.intended_ns >= summary["measure_start_ns"])
        & (requests.intended_ns < summary["measure_end_ns"])
    ]
    # merged = the sum of the shards, row for row
    per_host = window["host"].value_counts().to_dict()
    assert set(per_host) == {"h2", "h3"}
    assert sum(per_host.values()) == len(window) == row["requests"]
    assert {s["host"]: s["requests"] for s in shards} == per_host
    assert row["latency_percentiles_from"] == "exact"
    # each shard about half, and the open rate kept
    assert all(abs(n / len(window) - 0.5) < 0.05 for n in per_host.values()), per_host
    assert abs(row["achieved_rate"] - 1000) <= 10, row["achieved_rate"]
    assert row["target_rate"] == 1000
    # the server on h1 saw two distinct client addresses: h2's and h3's
    server = json.loads((tdir / "server.json").read_text())
    assert server["host"] == "h1" and len(server["client_addresses"]) == 2, server
    assert row["server_client_addresses"] == 2
    # run.json records the hosts; each shard its clock offset and its uncertainty
    info = json.loads((out / "run.json").read_text())["cluster"]
    assert sorted(info["hosts"]) == ["h1", "h2", "h3"]
    ips = {info["hosts"][h]["ip"] for h in ("h2", "h3")}
    assert set(server["client_addresses"]) == ips
    assert all(s["uncertainty_ms"] >= 0 and "offset_ms" in s for s in shards)
    assert row["clock_uncertainty_ms_max"] < 1000

    # 5 ms each way on h1's proxy: the probe there sees it, the shards' latency rises by it
    delayed = rows[rows["network_backend"] == "proxy"].iloc[0]
    expected = delayed["rtt_expected_ms"]
    assert expected == 10.0
    assert abs(delayed["rtt_measured_before_ms"] - expected) < 0.3 * expected, delayed
    # every request crosses the path: the fastest one rises by the delay, once (a delay
    # missing rises ~0, one applied twice ~2x). The fastest, not the median: on a busy host
    # the median can queue far beyond it (CI once read a 47 ms rise for this 10 ms delay,
    # the 1,000/s through h1's proxy and server sharing two CPUs with other tests)
    fastest = delayed["latency_min_ms"] - row["latency_min_ms"]
    assert 0.9 * expected <= fastest <= 1.5 * expected, (
        fastest,
        delayed["latency_min_ms"],
        row["latency_min_ms"],
    )
    # and the median sees at least most of it
    assert delayed["latency_p50_ms"] - row["latency_p50_ms"] >= 0.8 * expected, (
        delayed["latency_p50_ms"],
        row["latency_p50_ms"],
    )
    dserver = json.loads((trial_dir(out, delayed["cell_id"], 1) / "server.json").read_text())
    assert set(dserver["client_addresses"]) == ips  # the shards reached the proxy


@pytest.mark.untimed  # what perfctl does on the fault, not how fast
def test_a_worker_lost_mid_trial_invalidates_it_and_the_run_stops(
    write_yaml, tmp_path, start_perfctl, perfctl
):
    needs_root_and_ip()
    out = tmp_path / "run"
    proc = start_perfctl(
        "run", experiment(write_yaml, duration="6s", repeats=2), "--out", str(out), "--no-plots"
    )
    tree = poll_until(lambda: _shards_running(proc), timeout_s=120)
    assert tree, "the shards were never seen running"
    h3 = [pid for (pid, _), text in tree.items() if "dask_worker" in text and "--name h3" in text]
    assert len(h3) == 1, tree
    t0 = time.monotonic()
    os.kill(h3[0], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=120)
    assert time.monotonic() - t0 < 60, "perfctl took too long to notice the lost host"
    assert proc.returncode == 2, stdout + stderr
    assert "h3" in stderr and "did not come back" in stderr and "Traceback" not in stderr, stderr
    trials = pd.read_csv(out / "trials.csv", keep_default_na=False)
    assert len(trials) == 1 and not trials["valid"].iloc[0]
    assert "h3" in trials["invalid_reasons"].iloc[0] and "lost" in trials["invalid_reasons"].iloc[0]
    assert poll_until(lambda: _nothing_left(proc.pid, tree), timeout_s=15), (
        still_alive(tree),
        cluster_links(proc.pid),
    )
    # --resume keeps the invalid trial (it finished, with its reason) and runs the other
    done = perfctl("run", "--resume", str(out), "--no-plots")
    assert done.returncode == 0, done.stdout + done.stderr
    trials = pd.read_csv(out / "trials.csv", keep_default_na=False)
    assert sorted(trials["trial"]) == [1, 2] and trials["requests"].iloc[1] > 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_ctrl_c_and_kill9_leave_no_process_namespace_or_link(
    write_yaml, tmp_path, start_perfctl, sig
):
    needs_root_and_ip()
    out = tmp_path / "run"
    proc = start_perfctl(
        "run", experiment(write_yaml, duration="20s"), "--out", str(out), "--no-plots"
    )
    tree = poll_until(lambda: _shards_running(proc), timeout_s=120)
    assert tree, "the shards were never seen running"
    assert cluster_links(proc.pid), "no namespaces seen"
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == (130 if sig == signal.SIGINT else -9)
    assert poll_until(lambda: _nothing_left(proc.pid, tree), timeout_s=20), (
        still_alive(tree),
        cluster_links(proc.pid),
    )

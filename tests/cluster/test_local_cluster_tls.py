"""The local cluster speaks mutual TLS with certificates made for the run: keys 0600 in a 0700
directory of the run while it runs, removed after; the same trial over TLS and over plain TCP
(`insecure: true`, warned about in the summary, run.json and the report) gives the same figures
within noise."""

from __future__ import annotations

import json
import stat

import pandas as pd
import pytest
from cluster_kit import needs_root_and_ip

from benchmarks._common import poll_until

# closed load on a 5 ms wait: 4 connections give ~800 req/s whatever the transport costs, so
# the figures differ only by noise unless TLS breaks something (or adds whole milliseconds)
EXPERIMENT = """
name: tls-vs-tcp
servers: {c: {impl: c, model: pool, threads: 4}}
workload: {path: /work, params: {sleep_us: 5000}}
load: {mode: closed, connections: 4, duration: 2s, warmup: 0.5s}
placement: {server: {host: h1}, loadgen: {hosts: [h2]}}
cluster: CLUSTER
"""


def _tls_files_seen(out, proc) -> dict | None:
    """The modes of the run's TLS directory and files once the scheduler has started (after
    every file was written)."""
    if proc.poll() is not None:
        raise AssertionError(f"perfctl ended before its cluster started: {proc.communicate()}")
    d = out / "cluster" / "tls"
    try:
        if not (out / "cluster" / "scheduler.log").is_file():
            return None
        return {f.name: stat.S_IMODE(f.stat().st_mode) for f in [d, *d.iterdir()]}
    except FileNotFoundError:  # removed between the look and the stat: the run ended
        return None


def test_tls_local_cluster_keys_are_private_and_removed_and_tls_matches_tcp(
    write_yaml, tmp_path, start_perfctl
):
    needs_root_and_ip()
    tls_out, tcp_out = tmp_path / "tls", tmp_path / "tcp"
    proc = start_perfctl(
        "run",
        str(write_yaml(EXPERIMENT.replace("CLUSTER", "{local: {hosts: 2}}"), "tls.yaml")),
        "--out",
        str(tls_out),
        "--no-plots",
    )
    modes = poll_until(lambda: _tls_files_seen(tls_out, proc), timeout_s=120, interval_s=0.02)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stdout + stderr
    assert modes and modes["tls"] == 0o700, modes
    keys = {n: m for n, m in modes.items() if n.endswith("-key.pem")}
    assert set(keys) == {
        "ca-key.pem",
        "scheduler-key.pem",
        "client-key.pem",
        "h1-key.pem",
        "h2-key.pem",
    }
    assert set(keys.values()) == {0o600}, keys
    assert not (tls_out / "cluster" / "tls").exists()
    assert "plain TCP" not in stdout
    info = json.loads((tls_out / "run.json").read_text())["cluster"]
    assert info["tls"] is True and info["scheduler"].startswith("tls://") and not info["warning"]

    proc = start_perfctl(
        "run",
        str(
            write_yaml(
                EXPERIMENT.replace("CLUSTER", "{local: {hosts: 2}, insecure: true}"), "tcp.yaml"
            )
        ),
        "--out",
        str(tcp_out),
        "--no-plots",
    )
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stdout + stderr
    warning = "the cluster speaks plain TCP without authentication"
    summary = stdout[stdout.index("Summary") :]
    assert warning in summary, stdout  # after the table too, not only when it started
    info = json.loads((tcp_out / "run.json").read_text())["cluster"]
    assert info["tls"] is False and info["scheduler"].startswith("tcp://")
    assert warning in info["warning"]
    report = start_perfctl("report", str(tcp_out))
    assert report.wait(120) == 0
    assert warning in (tcp_out / "report.html").read_text()

    tls, tcp = (pd.read_csv(d / "trials.csv").iloc[0] for d in (tls_out, tcp_out))
    # the wait sets the figures: the transport of the orchestrator's tasks must not move them
    assert tls["throughput_rps"] == pytest.approx(tcp["throughput_rps"], rel=0.15), (
        tls["throughput_rps"],
        tcp["throughput_rps"],
    )
    assert tls["latency_p50_ms"] == pytest.approx(tcp["latency_p50_ms"], rel=0.15), (
        tls["latency_p50_ms"],
        tcp["latency_p50_ms"],
    )

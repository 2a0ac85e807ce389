"""Every load mode against the bundled Python server (closed, open, burst, ramp, several
processes, the streamed schedule), and what a phase leaves: its records spilled in chunks, and
`perfctl load --json`. Bounds are loose: the machine is shared. (Other servers, odd framings
and a stalling one: test_loadgen_servers.py.)"""

import json

import numpy as np
import pandas as pd
import pytest
from phase_kit import assert_consistent, generate

from loadgen import contract, generate_to_dir, hdr, schedule
from loadgen import records as lrec
from loadgen.spec import LoadSpec

pytestmark = pytest.mark.usefixtures("live")


def test_closed_keepalive(tmp_path, py_server):
    df, _, row = generate(tmp_path, py_server, "/work?spin_us=100", mode="closed", connections=8)
    assert row["requests"] > 200 and row["errors"] == 0
    assert df["conn"].nunique() == 8
    assert df["svc_ms"].notna().mean() > 0.99  # Server-Timing kept per request


def test_closed_new_connection_per_request(tmp_path, py_server):
    df, _, row = generate(tmp_path, py_server, mode="closed", connections=2, keepalive=False)
    assert row["requests"] > 50 and row["errors"] == 0
    assert df["conn"].nunique() == len(df)  # one connection per request


def test_closed_think_time_sets_the_rate(tmp_path, py_server):
    _, _, row = generate(
        tmp_path, py_server, mode="closed", connections=4, think_time_s=0.05, duration_s=2.0
    )
    assert 4 / 0.05 * 0.6 < row["throughput_rps"] < 4 / 0.05 * 1.05


def test_closed_think_time_sets_the_rate_with_a_new_connection_per_request(tmp_path, py_server):
    """Without keep-alive each user still thinks between its requests (it once reopened at
    once, so the rate was the server's, not N / (Z + R))."""
    df, _, row = generate(
        tmp_path,
        py_server,
        mode="closed",
        connections=4,
        think_time_s=0.05,
        keepalive=False,
        duration_s=2.0,
    )
    assert 4 / 0.05 * 0.6 < row["throughput_rps"] < 4 / 0.05 * 1.05
    assert df["conn"].nunique() == len(df)  # still one connection per request


def test_open_poisson_keeps_rate_and_measures_from_intended(tmp_path, py_server):
    df, summary, row = generate(
        tmp_path, py_server, mode="open", rate_rps=400, connections=8, duration_s=2.0
    )
    scheduled = summary["scheduled_in_window"]
    assert row["requests"] == scheduled
    assert abs(row["achieved_rate"] - scheduled / 2.0) / (scheduled / 2.0) < 0.02
    lat = df["done_ns"] - df["intended_ns"]
    svc = df["done_ns"] - df["sent_ns"]
    assert (lat >= svc).all()


def test_open_replays_the_same_schedule(tmp_path, py_server):
    a, _, _ = generate(tmp_path, py_server, mode="open", rate_rps=200, connections=4, seed=5)
    b, _, _ = generate(tmp_path, py_server, mode="open", rate_rps=200, connections=4, seed=5)
    ga, gb = np.diff(a["intended_ns"].to_numpy()), np.diff(b["intended_ns"].to_numpy())
    n = min(len(ga), len(gb))
    assert n > 100 and np.abs(ga[:n] - gb[:n]).max() < 2  # identical gaps (ns rounding)


def test_open_without_keepalive(tmp_path, py_server):
    df, _, row = generate(
        tmp_path, py_server, mode="open", rate_rps=150, connections=4, keepalive=False
    )
    assert row["errors"] == 0 and df["conn"].nunique() == len(df)


def test_open_overload_drops_arrivals_loudly(tmp_path, py_server):
    _, summary, row = generate(
        tmp_path,
        py_server,
        "/work?sleep_us=200000",
        mode="open",
        rate_rps=200,
        connections=1,
        max_outstanding=5,
        duration_s=1.0,
    )
    assert row["dropped"] > 0 and summary["dropped"] > 0
    assert not row["valid"] and "dropped" in row["invalid_reasons"]


def test_timeouts_are_errors(tmp_path, py_server):
    _, _, row = generate(
        tmp_path,
        py_server,
        "/work?sleep_us=3000000",
        mode="closed",
        connections=2,
        timeout_s=0.3,
        duration_s=1.0,
        warmup_s=0.0,
    )
    assert row["errors_timeout"] > 0 and row["completed"] == 0


def test_refused_connections_are_counted(tmp_path):
    from orchestrator.proc.ports import free_port

    class Nothing:
        port = free_port()

    _, _, row = generate(tmp_path, Nothing, mode="closed", connections=2, duration_s=0.5)
    assert row["errors_refused"] > 0 and row["completed"] == 0 and not row["valid"]


def test_burst_releases_together_and_reports_outcomes(tmp_path, py_server):
    df, summary, row = generate(
        tmp_path,
        py_server,
        "/register",
        mode="burst",
        method="POST",
        body="user=burst{seq}&pass=x",
        connections=200,
        bursts=2,
        burst_interval_s=0.5,
        warmup_s=0.0,
    )
    assert row["requests"] == 400
    assert (df["status"] == 201).sum() == 400  # {seq} made every user unique
    assert summary["release_spread_ms_max"] > 0
    assert row["success_ratio"] == 1.0


def test_burst_against_closed_port_is_all_refused(tmp_path):
    from orchestrator.proc.ports import free_port

    class Nothing:
        port = free_port()

    _, _, row = generate(tmp_path, Nothing, mode="burst", connections=50, warmup_s=0.0)
    assert row["errors_refused"] == 50 and row["success_ratio"] == 0.0


def test_ramp_finds_a_sustainable_rate(tmp_path, py_server):
    _, summary, row = generate(
        tmp_path,
        py_server,
        "/work?spin_us=2000",
        mode="ramp",
        ramp_rates=(20, 40, 5000),
        ramp_step_s=1.0,
        slo_p99_ms=200.0,
        connections=16,
        warmup_s=0.2,
    )
    steps = summary["ramp_steps"]
    assert [s["rate_rps"] for s in steps] == [20, 40, 5000]  # stops at the first miss
    assert steps[1]["meets_slo"] and not steps[-1]["meets_slo"]
    assert summary["sustainable_rps"] == 40
    assert row["sustainable_rps"] == summary["sustainable_rps"]


def test_processes_split_the_schedule_and_merge(tmp_path, py_server):
    df, summary, row = generate(
        tmp_path, py_server, mode="open", rate_rps=600, connections=8, processes=2, duration_s=1.5
    )
    assert sorted(df["worker"].unique()) == [0, 1]
    assert summary["processes"] == 2
    assert abs(row["requests"] - 600 * 1.5) < 0.15 * 600 * 1.5
    # one latency log per worker process, and the trial's is their sum second by second
    out = next(tmp_path.glob("phase-*"))
    parts = [hdr.read_log(out / f"latency-worker-{i}.hlog") for i in range(2)]
    whole = hdr.read_log(out / "latency.hlog")
    assert len(whole) == max(len(p) for p in parts)
    for k, h in enumerate(whole):
        assert h.get_total_count() == sum(p[k].get_total_count() for p in parts if k < len(p))
    assert not list(out.glob("digest-worker-*")) and not list(out.glob("part-*"))


@pytest.mark.parametrize("processes", [1, 2])
def test_open_streams_its_schedule_and_sends_exactly_the_driver_file(
    tmp_path, py_server, monkeypatch, processes
):
    """Issue #18: the generator reads its schedule 97 arrivals at a time (a short phase then
    crosses many chunk joins): every arrival of the schedule file perfctl hands a driver is
    sent at its instant, none lost or doubled at a join, and the window is counted in full."""
    monkeypatch.setattr(schedule, "CHUNK", 97)  # forked workers inherit it
    kw = dict(
        mode="open",
        rate_rps=600,
        connections=8,
        seed=21,
        duration_s=1.5,
        warmup_s=0.3,
        processes=processes,
    )
    df, summary, row = generate(tmp_path, py_server, **kw)
    spec = LoadSpec(host="127.0.0.1", port=py_server.port, target="/work", **kw)
    n = contract.write_schedule(spec, tmp_path / contract.SCHEDULE_FILE)
    offsets = contract.read_schedule(tmp_path / contract.SCHEDULE_FILE)
    assert n == round(600 * 0.3) + round(600 * 1.5) > 10 * 97
    intended = np.sort(df["intended_ns"].to_numpy()) - summary["start_ns"]
    assert np.array_equal(intended, offsets)
    assert summary["scheduled_in_window"] == round(600 * 1.5)
    assert (
        0
        <= summary["send_lateness_p50_ms"]
        <= summary["send_lateness_p99_ms"]
        <= summary["send_lateness_max_ms"]
    )
    assert 0 < summary["send_lateness_mean_ms"] <= summary["send_lateness_max_ms"]


def test_spills_in_chunks_and_keeps_every_row(tmp_path, py_server, monkeypatch):
    monkeypatch.setattr(lrec, "CHUNK_ROWS", 256)
    spec = LoadSpec(
        port=py_server.port,
        target="/work",
        mode="open",
        rate_rps=1000,
        connections=8,
        duration_s=1.5,
        warmup_s=0.2,
    )
    summary = generate_to_dir(spec, tmp_path / "spill")
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(tmp_path / "spill" / "requests.parquet").metadata
    assert meta.num_row_groups > 2
    df = pd.read_parquet(tmp_path / "spill" / "requests.parquet")
    assert len(df) == summary["requests_recorded"]
    assert (np.diff(df["intended_ns"].to_numpy()) >= 0).all()  # order kept
    assert_consistent(df)


def test_perfctl_load_json(tmp_path, py_server):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "load",
            py_server.url("/work?spin_us=10"),
            "-c",
            "4",
            "-d",
            "1s",
            "--warmup",
            "0.2s",
            "--json",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["requests"] > 0 and out["throughput_rps"] > 0
    assert set(out["latency_ms"]) == {"p50", "p90", "p99", "p999", "max", "mean"}
    assert isinstance(out["valid"], bool) and "selfcheck" in out
    bad = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "load", "ftp://x", "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "http://" in bad.stderr and "Traceback" not in bad.stderr

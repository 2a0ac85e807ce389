"""Shards into one trial (cluster/merge.py) and the host-side helpers that need no cluster."""

import math
import socket
import threading
import types

import numpy as np
import pyarrow.parquet as pq
import pytest
from cluster_kit import loadgen_output

from loadgen import hdr
from loadgen import stats as lstats
from orchestrator.cluster import hosts, merge, tasks
from orchestrator.run.trial_row import summarize_trial

# untimed: merging shard files and reading sockets' peers: what is written, not how fast (tests/conftest.py)
pytestmark = pytest.mark.untimed

SPEC = types.SimpleNamespace(mode="closed", connections=2, rate_rps=0, timeout_s=5.0)


def test_merge_streams_every_row_with_its_host_and_each_latency_exactly(tmp_path, monkeypatch):
    monkeypatch.setattr(merge, "BATCH_ROWS", 700)  # several batches per shard
    lat_a, _ = loadgen_output(tmp_path / "h2", 6000, 5_000_000_000, 1)
    lat_b, _ = loadgen_output(
        tmp_path / "h3", 4000, 9_000_000_123, 2, scale_ns=5e6
    )  # another clock
    out = tmp_path / "trial"
    out.mkdir()
    summary, shifts = merge.merge_shards([("h2", tmp_path / "h2"), ("h3", tmp_path / "h3")], out)
    assert shifts == {"h2": 0, "h3": 5_000_000_000 - 9_000_000_123}
    assert pq.ParquetFile(out / "requests.parquet").metadata.num_row_groups > 1
    table = pq.read_table(out / "requests.parquet").to_pandas()
    assert len(table) == 10_000
    assert table["host"].value_counts().to_dict() == {"h2": 6000, "h3": 4000}
    assert (table["first_byte_ns"] == 0).sum() == 2  # unset stays unset
    h3 = table[table["host"] == "h3"]
    assert h3["intended_ns"].min() >= 5_000_000_000  # starts coincide
    assert not (tmp_path / "h2" / "requests.parquet").exists()  # its rows are merged
    assert summary["shards"] == 2 and summary["send_lateness_p99_ms"] == pytest.approx(0.2)

    union_ns = np.concatenate([lat_a, lat_b])
    union_ms = union_ns / 1e6
    merged_lat = (table["done_ns"] - table["intended_ns"]).to_numpy()
    inside = (
        (table["intended_ns"] >= summary["measure_start_ns"])
        & (table["intended_ns"] < summary["measure_end_ns"])
    ).to_numpy()
    assert np.array_equal(np.sort(merged_lat[inside]), np.sort(union_ns))  # untouched
    metrics, timeline = summarize_trial(out, summary, SPEC, None)
    assert metrics["requests"] == union_ms.size
    assert metrics["latency_percentiles_from"] == "exact"
    for name, q in lstats.PERCENTILES.items():  # the union's exact order statistics
        assert metrics[f"latency_{name}_ms"] == lstats.percentile(union_ms, q), name
    assert timeline["throughput_rps"].sum() == 10_000  # every completion, second by second


def test_merge_without_records_keeps_percentiles_within_the_histogram_error(tmp_path):
    lat_a, _ = loadgen_output(tmp_path / "h2", 5000, 7_000_000_000, 3, records=False)
    lat_b, _ = loadgen_output(tmp_path / "h3", 5000, 1_000_000_000, 4, records=False, scale_ns=8e6)
    out = tmp_path / "trial"
    out.mkdir()
    summary, _ = merge.merge_shards([("h2", tmp_path / "h2"), ("h3", tmp_path / "h3")], out)
    assert not (out / "requests.parquet").exists()
    metrics, _ = summarize_trial(out, summary, SPEC, None)
    assert metrics["latency_percentiles_from"] == "hdr"
    union_ms = np.concatenate([lat_a, lat_b]) / 1e6
    for name, q in lstats.PERCENTILES.items():
        exact = lstats.percentile(union_ms, q)
        # HdrHistogram's value of a rank: its bucket's highest, never below, <= 0.1% above
        assert exact <= metrics[f"latency_{name}_ms"] <= exact * (1 + hdr.RELATIVE_ERROR) + 1e-6, (
            name
        )


def test_noise_rolls_up_to_the_worst_host_and_names_it():
    def reading(steal, wait):
        return {
            "noise_steal_pct": steal,
            "noise_foreign_cpu_pct": 1.0,
            "noise_server_runqueue_wait_ms_per_s": 2.0,
            "noise_loadgen_runqueue_wait_ms_per_s": wait,
            "noise_runqueue_wait_us_per_request": 0.0,
            "noise_server_involuntary_switches_per_s": 1.0,
            "noise_loadgen_involuntary_switches_per_s": 1.0,
            "noise_cpus": "0,1",
        }

    row = merge.noise_rollup(
        ("h1", reading(0.5, 0.0), []),
        [("h2", reading(7.0, 3.0), ["CPU steal 7.0% > 5%"]), ("h3", reading(1.0, 9.0), [])],
        requests=1000,
        window_s=2.0,
    )
    assert row["noise_steal_pct"] == 7.0 and row["noise_loadgen_runqueue_wait_ms_per_s"] == 9.0
    assert row["noise_server_runqueue_wait_ms_per_s"] == 2.0
    assert not row["quiet"] and row["noise_reasons"] == "h2: CPU steal 7.0% > 5%"
    assert math.isnan(row["noise_loadgen_cpu_others_pct"])  # no host measured it
    row = merge.noise_rollup(
        None,
        [
            ("h2", {**reading(0, 3.0), "noise_loadgen_cpu_others_pct": 4.0}, []),
            ("h3", {**reading(0, 9.0), "noise_loadgen_cpu_others_pct": 2.0}, []),
        ],
        requests=1000,
        window_s=2.0,
    )
    assert row["noise_loadgen_cpu_others_pct"] == 4.0 and row["quiet"]


def test_established_peers_sees_the_client_address_of_a_connection():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    cli = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    try:
        assert tasks.established_peers(port) == {"127.0.0.1"}  # /proc
        from orchestrator.measure.sock_diag import SockDiag

        with SockDiag() as diag:
            assert tasks.established_peers(port, diag) == {"127.0.0.1"}  # netlink
    finally:
        for s in (cli, conn, srv):
            s.close()


def test_local_host_commands_join_each_namespace_to_the_bridge():
    setup = hosts.host_setup_commands("perfctl-1-2", "pcbr1", "pcab12b1", "pcab12h1", "10.214.3.11")
    assert ["ip", "link", "set", "pcab12b1", "master", "pcbr1"] in setup
    assert ["ip", "-n", "perfctl-1-2", "addr", "add", "10.214.3.11/24", "dev", "pcab12h1"] in setup
    down = hosts.teardown_commands("pcbr1", ["perfctl-1-2"], ["pcab12b1"])
    assert (
        down[-1] == ["ip", "link", "del", "pcbr1"] and ["ip", "netns", "del", "perfctl-1-2"] in down
    )


def test_a_shard_file_comes_back_chunk_by_chunk_and_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(tasks, "CHUNK_BYTES", 1000)
    data = np.random.default_rng(0).bytes(2500)
    d = tmp_path / "shard"
    d.mkdir()
    (d / "requests.parquet").write_bytes(data)
    lease = threading.Timer(3600, lambda: None)
    monkeypatch.setitem(tasks._outputs, "tok", (d, lease))
    got, offset = b"", 0
    while chunk := tasks.fetch_chunk("tok", "requests.parquet", offset):
        assert len(chunk) <= 1000
        got += chunk
        offset += len(chunk)
    assert got == data
    with pytest.raises(ValueError):
        tasks.fetch_chunk("tok", "../etc/passwd", 0)  # only the shard's own files
    assert tasks.drop_shard("tok") and not d.exists() and not tasks.drop_shard("tok")
    with pytest.raises(FileNotFoundError):
        tasks.fetch_chunk("tok", "requests.parquet", 0)

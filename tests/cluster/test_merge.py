"""Shards into one trial (cluster/merge.py) and the host-side helpers that need no cluster."""
import io
import socket

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from orchestrator.cluster import hosts, merge, tasks


def _shard(n: int, start_ns: int) -> tuple[bytes, dict]:
    intended = start_ns + np.arange(n, dtype=np.int64) * 1_000_000
    df = pd.DataFrame({"intended_ns": intended, "sent_ns": intended + 10,
                       "first_byte_ns": np.where(np.arange(n) == 0, 0, intended + 500),
                       "done_ns": intended + 1000, "status": np.full(n, 200, np.int16),
                       "error": np.zeros(n, np.int8), "bytes": np.full(n, 10, np.int32)})
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    summary = {"start_ns": start_ns, "measure_start_ns": start_ns,
               "measure_end_ns": start_ns + n * 1_000_000, "scheduled_in_window": n,
               "dropped": 0, "requests_recorded": n, "gc_pauses": 0,
               "send_lateness_p99_ms": 0.1 * n, "loop_lag_p99_ms": 0.2}
    return buf.getvalue(), summary


def test_merge_keeps_every_row_and_each_latency_exactly(tmp_path):
    a, sa = _shard(30, 5_000_000_000)
    b, sb = _shard(20, 9_000_000_123)          # another host's clock
    cols, summary, shifts = merge.merge_requests([("h2", a, sa), ("h3", b, sb)],
                                                 tmp_path / "requests.parquet")
    table = pq.read_table(tmp_path / "requests.parquet").to_pandas()
    assert len(table) == 50 and table["host"].value_counts().to_dict() == {"h2": 30, "h3": 20}
    assert shifts == {"h2": 0, "h3": 5_000_000_000 - 9_000_000_123}
    assert (table["done_ns"] - table["intended_ns"] == 1000).all()    # latency untouched
    assert (table["first_byte_ns"] == 0).sum() == 2                    # unset stays unset
    h3 = table[table["host"] == "h3"]
    assert h3["intended_ns"].min() == 5_000_000_000                     # starts coincide
    assert summary["scheduled_in_window"] == 50 and summary["shards"] == 2
    assert summary["send_lateness_p99_ms"] == 3.0                       # the worst shard's
    assert len(cols["intended_ns"]) == 50


def test_noise_rolls_up_to_the_worst_host_and_names_it():
    def reading(steal, wait):
        return {"noise_steal_pct": steal, "noise_foreign_cpu_pct": 1.0,
                "noise_server_runqueue_wait_ms_per_s": 2.0,
                "noise_loadgen_runqueue_wait_ms_per_s": wait,
                "noise_runqueue_wait_us_per_request": 0.0,
                "noise_server_involuntary_switches_per_s": 1.0,
                "noise_loadgen_involuntary_switches_per_s": 1.0, "noise_cpus": "0,1"}
    row = merge.noise_rollup(("h1", reading(0.5, 0.0), []),
                             [("h2", reading(7.0, 3.0), ["CPU steal 7.0% > 5%"]),
                              ("h3", reading(1.0, 9.0), [])], requests=1000, window_s=2.0)
    assert row["noise_steal_pct"] == 7.0 and row["noise_loadgen_runqueue_wait_ms_per_s"] == 9.0
    assert row["noise_server_runqueue_wait_ms_per_s"] == 2.0
    assert not row["quiet"] and row["noise_reasons"] == "h2: CPU steal 7.0% > 5%"


def test_established_peers_sees_the_client_address_of_a_connection():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    cli = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    try:
        assert tasks.established_peers(port) == {"127.0.0.1"}
    finally:
        for s in (cli, conn, srv):
            s.close()


def test_local_host_commands_join_each_namespace_to_the_bridge():
    setup = hosts.host_setup_commands("perfctl-1-2", "pcbr1", "pcab12b1", "pcab12h1",
                                      "10.214.3.11")
    assert ["ip", "link", "set", "pcab12b1", "master", "pcbr1"] in setup
    assert ["ip", "-n", "perfctl-1-2", "addr", "add", "10.214.3.11/24", "dev", "pcab12h1"] \
        in setup
    down = hosts.teardown_commands("pcbr1", ["perfctl-1-2"], ["pcab12b1"])
    assert down[-1] == ["ip", "link", "del", "pcbr1"] and ["ip", "netns", "del", "perfctl-1-2"] in down

"""measure/kernel_tcp.py: the kernel's TCP counters per trial, as deltas from the server's network
namespace, and the accept queue's peak."""

import math
import os
import socket
import subprocess
import sys

import pandas as pd
import pytest

from orchestrator.measure import kernel_tcp
from orchestrator.proc.build import ROOT

NETSTAT = """TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPTimeouts TCPAbortOnData
TcpExt: 0 7 9 11 2
IpExt: InNoRoutes
IpExt: 0
"""


def test_sections_pair_header_and_value_lines():
    got = kernel_tcp._sections(NETSTAT)
    assert got["TcpExt"]["ListenOverflows"] == 7 and got["TcpExt"]["TCPAbortOnData"] == 2
    assert got["IpExt"] == {"InNoRoutes": 0}


def test_snapshot_of_a_gone_process_is_nan_not_an_error():
    snap = kernel_tcp.snapshot(2**22 + 12345)
    assert set(snap) == set(kernel_tcp.COUNTERS) and all(math.isnan(v) for v in snap.values())
    assert kernel_tcp.scope(2**22 + 12345) == "unknown"
    assert kernel_tcp.scope(os.getpid()) == "host"


@pytest.mark.untimed  # the host's counters only rise beside another test
@pytest.mark.usefixtures("live")
def test_counters_rise_in_a_burst_against_a_small_backlog():
    """A listener with backlog 1 that never accepts, 40 connects at once: the kernel queues a
    couple and drops the rest's handshakes, which ListenOverflows/ListenDrops must count, and
    the accept queue's peak is what the listener held."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    counters = kernel_tcp.TrialCounters(os.getpid(), port).start()
    clients = []
    for _ in range(40):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        clients.append(c)
    row = counters.row()
    for c in clients:
        c.close()
    listener.close()
    assert row["tcp_counters_scope"] == "host"
    # other processes on the host can only add to these, never take away
    assert row["tcp_listen_overflows"] >= 30, row
    assert row["tcp_listen_drops"] >= row["tcp_listen_overflows"] - 1, row
    assert row["tcp_accept_queue_max"] >= 1, row


BURST = """
name: kernel-burst
servers:
  c1: {impl: c, model: single, backlog: 1}
workload: {path: /work, params: {spin_us: 2000}}
load: {mode: burst, connections: 300, bursts: 1, burst_interval: 1s, warmup: 0s, timeout: 3s}
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""


@pytest.mark.untimed  # the host's counters only rise beside another test
@pytest.mark.usefixtures("live")
def test_a_burst_trial_records_listen_overflows_in_trials_csv(tmp_path, perfctl_env):
    exp = tmp_path / "burst.yaml"
    exp.write_text(BURST)
    out = tmp_path / "run"
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
        ],
        cwd=ROOT,
        env=perfctl_env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    row = pd.read_csv(out / "trials.csv").iloc[0]
    for col in (
        "tcp_listen_overflows",
        "tcp_listen_drops",
        "tcp_retrans_segs",
        "tcp_timeouts",
        "tcp_resets",
        "tcp_accept_queue_max",
        "tcp_counters_scope",
    ):
        assert col in row.index, col
    assert row["tcp_listen_overflows"] > 0, row.to_dict()
    assert row["tcp_retrans_segs"] > 0, row.to_dict()  # the dropped clients' SYN retries
    assert row["tcp_accept_queue_max"] >= 1, row.to_dict()

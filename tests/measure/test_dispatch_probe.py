"""measure/dispatch_probe.py: the probe of a server perfctl did not write, against servers whose
dispatch is known: the reference M/M/c server (one shared queue, c workers), the C `pool` server
(a worker keeps its keep-alive connection) and the C `epoll` server with one loop. Each probe
takes about a second."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.measure.dispatch_probe import expected_mean_ratio, parallelism, probe
from orchestrator.run import bundled

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def serve():
    procs = []

    def start(argv: list[str]) -> int:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(p)
        m = re.search(r"listening on [\d.]+:(\d+)", p.stdout.readline())
        assert m, "no listening line"
        return int(m.group(1))

    yield start
    for p in procs:
        p.terminate()
        p.wait(10)


def test_the_parallelism_estimate_inverts_its_own_expectation():
    for c in (1, 2, 4, 8):
        assert parallelism(expected_mean_ratio(c, 16), 16) == (c, False)
        assert parallelism(expected_mean_ratio(c, 16, 0.0), 16, 0.0) == (c, False)
    assert parallelism(1.0, 16) == (16, True)  # as fast as one alone: at least 16


@pytest.mark.usefixtures("live")
def test_the_reference_server_probes_as_a_shared_queue_of_its_workers(serve):
    port = serve(
        [
            sys.executable,
            str(ROOT / "servers/reference/mmc_server.py"),
            "--port",
            "0",
            "--workers",
            "4",
            "--service-ms",
            "4",
            "--no-server-timing",
        ]
    )
    r = probe("127.0.0.1", port, "/")
    assert r.dispatch == "shared_queue" and r.threads is not None and 3 <= r.threads <= 6, r
    assert not r.server_timing and r.requests >= 50
    assert 3.0 < r.service_ms < 12.0 and r.service_se_ms > 0  # 4 ms sleeps + the round trip
    assert "not pinned" in r.note


@pytest.mark.usefixtures("live")
def test_a_pool_server_probes_as_connections_pinned_to_its_threads(serve):
    bundled.build("c")
    port = serve(bundled.command("c", "pool", 0, threads=3))
    r = probe("127.0.0.1", port, "/work?sleep_us=2000")
    assert (r.dispatch, r.threads) == ("per_connection", 3), r
    assert r.server_timing
    row = r.row()
    assert row["probe_dispatch"] == "per_connection" and row["probe_threads"] == 3


@pytest.mark.usefixtures("live")
def test_a_one_loop_epoll_server_probes_as_an_event_loop(serve):
    bundled.build("c")
    port = serve(bundled.command("c", "epoll", 0, threads=1))
    r = probe("127.0.0.1", port, "/work?sleep_us=2000")
    assert (r.dispatch, r.threads) == ("event_loop", 1), r


@pytest.mark.usefixtures("live")
def test_a_server_that_never_answers_costs_the_budget_and_says_so():
    import socket

    with socket.socket() as s:  # listens, never answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        r = probe("127.0.0.1", s.getsockname()[1], "/", budget_s=1.0)
    assert r.dispatch == "" and r.threads is None and "too few answers" in r.note

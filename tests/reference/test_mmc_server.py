"""The reference M/M/c server (servers/reference/mmc_server.py) is what the models' and the
capacity search's tests take as truth, so its own behaviour is checked first: c requests are
served at once from one FIFO queue, whatever connection they came on, and Server-Timing tells
the time queued and served."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "servers" / "reference" / "mmc_server.py"


@pytest.fixture
def mmc(tmp_path):
    """start(workers, service_ms, *flags) -> port; every server started is stopped after."""
    procs = []

    def start(workers: int, service_ms: float, *flags: str) -> int:
        p = subprocess.Popen(
            [
                sys.executable,
                str(SERVER),
                "--port",
                "0",
                "--workers",
                str(workers),
                "--service-ms",
                str(service_ms),
                *flags,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        line = p.stdout.readline()
        m = re.search(r"listening on [\d.]+:(\d+)", line)
        assert m, f"no listening line: {line!r}"
        return int(m.group(1))

    yield start
    for p in procs:
        p.terminate()
        p.wait(10)


def get(port: int, path: str = "/") -> tuple[int, dict, float]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    t0 = time.monotonic()
    c.request("GET", path)
    r = c.getresponse()
    r.read()
    took = time.monotonic() - t0
    timing = dict(re.findall(r"(\w+);dur=([\d.]+)", r.getheader("Server-Timing") or ""))
    c.close()
    return r.status, {k: float(v) for k, v in timing.items()}, took


def test_c_workers_serve_one_fifo_queue_so_the_third_request_waits_for_a_worker(mmc):
    port = mmc(2, 300, "--dist", "fixed")
    out: list = [None] * 4

    def one(i: int) -> None:
        out[i] = get(port)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    statuses = [o[0] for o in out]
    assert statuses == [200] * 4
    queued = sorted(o[1]["queue"] for o in out)
    served = [o[1]["svc"] for o in out]
    assert all(s >= 300 for s in served), served  # a sleep never ends early
    # two start at once, two wait for a worker: a whole service time at least
    assert queued[0] < 150 and queued[1] < 150, queued
    assert queued[2] >= 290 and queued[3] >= 290, queued
    assert max(o[2] for o in out) >= 0.59


def test_keep_alive_requests_on_one_connection_are_answered_in_turn_and_stats_count_them(mmc):
    port = mmc(1, 1)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for _ in range(20):
        c.request("GET", "/work")
        r = c.getresponse()
        assert r.status == 200 and r.read() == b"ok"
    c.request("GET", "/stats")
    assert c.getresponse().read() == b'{"served": 20}'


def test_without_server_timing_the_answer_carries_no_timing(mmc):
    port = mmc(1, 1, "--no-server-timing")
    status, timing, _ = get(port)
    assert status == 200 and timing == {}


def test_exponential_service_times_have_the_mean_asked_for(mmc):
    port = mmc(8, 2)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    svc = []
    for _ in range(400):
        c.request("GET", "/")
        r = c.getresponse()
        r.read()
        svc.append(float(re.search(r"svc;dur=([\d.]+)", r.getheader("Server-Timing")).group(1)))
    mean = sum(svc) / len(svc)
    # Exp(2 ms) has sd 2 ms: the mean of 400 is within 0.3 ms (3 sd) of 2 ms, plus the
    # timer's overshoot of each sleep (positive, well under a millisecond on a sane host)
    assert 1.7 < mean < 3.0, mean
    assert max(svc) > 3 * min(svc)  # not a fixed time

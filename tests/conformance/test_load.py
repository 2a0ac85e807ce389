"""Concurrency: 200 keep-alive clients x 50 /work requests (10 x 50 for `single`) must leave
/stats with bucket_sum == work_requests grown by exactly the number of requests."""

from __future__ import annotations

import threading
import time

from conformance_client import Conn, build, settle


def _client(port: int, idx: int, n: int, errors: list) -> None:
    try:
        with Conn(port, timeout=30) as c:
            for j in range(n):
                # half the clients name a bucket, half use the running request number
                target = f"/work?bucket={idx * n + j}" if idx % 2 else "/work"
                c.send(build("GET", target))
                r = c.read_response()
                if r.status != 200 or r.body != b"ok":
                    errors.append(f"client {idx} request {j}: {r.status} {r.body[:50]!r}")
                    return
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(f"client {idx}: {type(e).__name__}: {e}")


def test_concurrent_work_counters(srv):
    clients = 10 if srv.model == "single" else 200
    per = 50
    with Conn(srv.port) as c:
        before = settle(c)
    errors: list[str] = []
    threads = [
        threading.Thread(target=_client, args=(srv.port, i, per, errors), daemon=True)
        for i in range(clients)
    ]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, 60 - (time.monotonic() - t0)))
    assert not any(t.is_alive() for t in threads), "clients still running after 60 s"
    assert not errors, f"{len(errors)} clients failed, first: {errors[:3]}"
    # a server counts `requests` once a response is sent, so a client can hold its last answer
    # before the count has it: read the counters once every client's connection is gone
    with Conn(srv.port) as c:
        after = settle(c)
    assert after["work_requests"] - before["work_requests"] == clients * per, (before, after)
    assert after["bucket_sum"] - before["bucket_sum"] == clients * per, (before, after)
    assert after["bucket_sum"] == after["work_requests"]
    assert after["requests"] - before["requests"] >= clients * per + 1

"""Concurrency: 200 clients x 50 /work requests leave bucket_sum == work_requests == 10000;
the pool's bounded queue answers 503 when full and /stats shows its length."""

from __future__ import annotations

import json
import threading

import pytest

CLIENTS = 200
PER_CLIENT = 50


@pytest.mark.parametrize(
    "model,flags",
    [
        # pool: 200 keep-alive connections, 16 workers; the other connections wait in the queue
        ("pool", ("--threads", "16", "--backlog", "256", "--buckets", "1024")),
        ("thread", ("--buckets", "1024")),
        ("virtual", ("--buckets", "1024")),
    ],
)
def test_java_concurrent_counters(jkit, model, flags):
    with jkit.JavaServer(model, *flags) as srv:
        errors: list[str] = []
        statuses: list[int] = []
        lock = threading.Lock()
        start = threading.Barrier(CLIENTS, timeout=30)

        def client(i: int) -> None:
            got = []
            try:
                start.wait()
                with jkit.Client(srv.port, timeout=60) as c:
                    for j in range(PER_CLIENT):
                        # half with an explicit bucket (some beyond --buckets), half with the running number
                        target = f"/work?bucket={i * PER_CLIENT + j * 7}" if j % 2 else "/work"
                        got.append(c.request("GET", target).status)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(f"client {i}: {e!r}")
            with lock:
                statuses.extend(got)

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "clients still running after 120 s"
        assert not errors, errors[:5]
        assert statuses == [200] * (CLIENTS * PER_CLIENT) or sorted(set(statuses)) == [200]
        assert len(statuses) == CLIENTS * PER_CLIENT
        s = srv.stats()
        assert s["work_requests"] == CLIENTS * PER_CLIENT
        assert s["bucket_sum"] == CLIENTS * PER_CLIENT
        assert s["requests"] == CLIENTS * PER_CLIENT
        with srv.client() as c:
            assert jkit.wait_until(
                lambda: json.loads(c.request("GET", "/stats").body)["connections"] == 1, timeout=10
            )
        assert srv.alive()


def test_java_pool_queue_full_503(jkit):
    """--threads 2 --backlog 2: two connections hold the workers, two wait, the fifth gets 503."""
    with jkit.JavaServer("pool", "--threads", "2", "--backlog", "2") as srv:
        held = []
        try:
            a = srv.client(timeout=10)
            held.append(a)
            assert a.request("GET", "/health").status == 200  # worker 1 is a's now
            b = srv.client(timeout=10)
            held.append(b)
            assert b.request("GET", "/stats").status == 200  # worker 2 is b's now
            for _ in range(2):
                held.append(srv.client(timeout=10))  # accepted, queued
            assert jkit.wait_until(
                lambda: json.loads(b.request("GET", "/stats").body)["queue_length"] == 2, timeout=10
            )
            with srv.client(timeout=10) as e:
                r = e.read_response()  # no request needed: answered at once
                assert r.status == 503 and r.headers["connection"] == "close"
                r.timing()
                assert e.at_eof()
            assert jkit.wait_until(
                lambda: json.loads(b.request("GET", "/stats").body)["connections"] == 4, timeout=10
            )
            stats = json.loads(b.request("GET", "/stats").body)
            assert stats["queue_length"] == 2 and stats["threads"] == 2
            a.close()  # frees a worker: the first queued connection is served now
            r = held[2].request("GET", "/health")
            assert r.status == 200
            assert r.timing()[0] > 0  # it waited in the queue
        finally:
            for c in held:
                c.close()
        assert jkit.wait_until(lambda: srv.stats()["queue_length"] == 0, timeout=10)

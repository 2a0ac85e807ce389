"""200 concurrent keep-alive clients x 50 /work requests against pool, thread and epoll:
every request answered and /stats bucket_sum == work_requests == 10000."""

from __future__ import annotations

import json
import threading

import pytest

CLIENTS, PER_CLIENT = 200, 50


def _client(http, port, idx, errors):
    try:
        with http.connect(port, timeout=60) as s:
            rd = http.Reader(s)
            for j in range(PER_CLIENT):
                # half with an explicit bucket (also beyond --buckets), half on the running number
                q = f"/work?bucket={idx * 7919 + j}" if j % 2 else "/work"
                s.sendall(f"GET {q} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
                r = rd.response()
                if r.status != 200 or r.body != b"ok":
                    errors.append(f"client {idx} request {j}: {r.status} {r.body!r}")
                    return
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(f"client {idx}: {e!r}")


@pytest.mark.parametrize("model", ["pool", "thread", "epoll"])
def test_c_concurrent_work_counts(c_server, http, model):
    srv = c_server(model, threads=4, extra=["--buckets", "64", "--backlog", "256"])
    errors: list[str] = []
    threads = [
        threading.Thread(target=_client, args=(http, srv.port, i, errors), daemon=True)
        for i in range(CLIENTS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert not any(t.is_alive() for t in threads), "clients still running after 90 s"
    assert not errors, errors[:5]
    st = json.loads(http.get(srv.port, "/stats").body)
    assert st["work_requests"] == CLIENTS * PER_CLIENT
    assert st["bucket_sum"] == CLIENTS * PER_CLIENT
    assert st["requests"] == CLIENTS * PER_CLIENT
    rc, _ = srv.terminate()
    assert rc == 0

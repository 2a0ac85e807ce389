"""Slowloris against `single`: a stalled client holds the one server thread only until the
10 s idle timeout; then the server closes it and serves the next connection."""

from __future__ import annotations

import time


def test_java_single_idle_timeout(jkit):
    with jkit.JavaServer("single") as srv:
        slow = srv.client(timeout=20)
        try:
            slow.send(b"GET /health HTTP/1.1\r\nX-Slow: ")
            t = time.monotonic()
            with srv.client(timeout=20) as c:  # queued in the listen backlog behind the slow one
                r = c.request("GET", "/health")
            waited = time.monotonic() - t
            assert r.status == 200
            assert 8.0 <= waited <= 13.0, waited
            assert slow.at_eof(timeout=2)  # the server closed the stalled connection
        finally:
            slow.close()
        assert srv.get("/health").status == 200
        assert srv.alive()

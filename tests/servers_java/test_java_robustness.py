"""The bundled Java server, model by model, against what a client may do wrong: malformed
requests (each answered, the connection closed or kept as PROTOCOL.md says), connections reset
mid-request, no file descriptor leaked by either, a slow client tying up only its own
connection, and SIGTERM with a connection open.

One server per model for the whole module (the `server` fixture, conftest.py); tests run in
file order per model and leave the server healthy for the next one.
"""

from __future__ import annotations

import json
import random
import socket
import time

import pytest


def _junk() -> bytes:
    rng = random.Random(5)
    return bytes(
        rng.choice([*range(0, 10), *range(11, 32), *range(0x80, 0x100)]) for _ in range(300)
    )


# (name, raw request, status, server closes afterwards)
MALFORMED = (
    [
        ("garbage", b"GARBAGE\r\n\r\n", 400, True),
        ("no version", b"GET /health\r\n\r\n", 400, True),
        ("no method", b" /health HTTP/1.1\r\n\r\n", 400, True),
        ("double space", b"GET  /health HTTP/1.1\r\n\r\n", 400, True),
        ("bad method char", b"G(T /health HTTP/1.1\r\n\r\n", 400, True),
        ("nul in target", b"GET /hea\x00lth HTTP/1.1\r\n\r\n", 400, True),
        ("origin not absolute", b"GET health HTTP/1.1\r\n\r\n", 400, True),
        ("binary junk", _junk() + b"\r\n\r\n", 400, True),
        ("bad version", b"GET /health HTTP/1.x\r\n\r\n", 400, True),
        ("version 2.0", b"GET /health HTTP/2.0\r\n\r\n", 501, True),
        ("version 0.9", b"GET /health HTTP/0.9\r\n\r\n", 501, True),
        ("header without colon", b"GET /health HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n", 400, True),
        ("space before colon", b"GET /health HTTP/1.1\r\nHost : x\r\n\r\n", 400, True),
        ("obs-fold", b"GET /health HTTP/1.1\r\nX-A: 1\r\n  folded\r\n\r\n", 400, True),
        ("control in value", b"GET /health HTTP/1.1\r\nX-A: a\x01b\r\n\r\n", 400, True),
        (
            "header over 8 KiB",
            b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
            413,
            True,
        ),
        (
            "headers over 8 KiB",
            b"GET /health HTTP/1.1\r\n"
            + b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 60) for i in range(150))
            + b"\r\n",
            413,
            True,
        ),
        ("no line end, 20 KiB", b"GET /" + b"c" * 20000, 413, True),
        (
            "chunked body",
            b"POST /register HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nuser=\r\n0\r\n\r\n",
            501,
            True,
        ),
        (
            "body over 64 KiB",
            b"POST /register HTTP/1.1\r\nContent-Length: 70000\r\n\r\n",
            413,
            True,
        ),
        ("bad content-length", b"POST /register HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400, True),
        (
            "conflicting content-length",
            b"POST /register HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            400,
            True,
        ),
        ("unknown path", b"GET /nope HTTP/1.1\r\n\r\n", 404, False),
        ("POST /health", b"POST /health HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405, False),
        ("GET /register", b"GET /register HTTP/1.1\r\n\r\n", 405, False),
        ("DELETE /work", b"DELETE /work HTTP/1.1\r\n\r\n", 405, False),
        (
            "register without user",
            b"POST /register HTTP/1.1\r\nContent-Length: 6\r\n\r\npass=x",
            400,
            True,
        ),
        (
            "register empty user",
            b"POST /register HTTP/1.1\r\nContent-Length: 5\r\n\r\nuser=",
            400,
            True,
        ),
        ("register no body", b"POST /register HTTP/1.1\r\n\r\n", 400, True),
    ]
    + [
        (f"/work {q}", f"GET /work?{q} HTTP/1.1\r\n\r\n".encode(), 400, True)
        for q in (
            "spin_us=abc",
            "spin_us=-1",
            "spin_us=10000001",
            "sleep_us=1.5",
            "sleep_us=",
            "size=16777217",
            "size=%2B1",
            "dist=foo",
            "dist=uniform:2:1",
            "dist=uniform:-1:2",
            "dist=uniform:1",
            "dist=uniform:a:b",
            "bucket=x",
            "bucket=",
            "bucket=-3",
            "spin_us=%zz",
        )
    ]
    + [
        (f"/search {q}", f"GET /search?{q} HTTP/1.1\r\n\r\n".encode(), 400, True)
        for q in (
            "type=5&re=a",
            "type=0&re=a",
            "type=x&re=a",
            "re=a",
            "type=1&re=(",
            "type=1&re=%5B",
            "type=1.0&re=a",
        )
    ]
)

GOOD = [
    ("bare LF", b"GET /health HTTP/1.1\nHost: x\n\n", 200),
    ("leading empty line", b"\r\nGET /health HTTP/1.1\r\n\r\n", 200),
    ("absolute form", b"GET http://127.0.0.1/health HTTP/1.1\r\n\r\n", 200),
    (
        "lower-case headers, odd spacing",
        b"GET /health HTTP/1.1\r\nhost:x\r\nconnection:   keep-alive  \r\n\r\n",
        200,
    ),
    ("GET with a body", b"GET /health HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd", 200),
]


def _check_malformed(server) -> None:
    for name, raw, status, closes in MALFORMED:
        with server.client(timeout=5) as c:
            c.send(raw)
            r = c.read_response()
            assert r.status == status, (name, r)
            r.timing()
            assert r.headers["content-type"] == "text/plain", name
            if status == 405:
                assert r.headers.get("allow") in ("GET", "POST"), name
            if closes:
                assert r.headers.get("connection") == "close", name
                assert c.at_eof(), name
            else:
                assert c.request("GET", "/health").status == 200, name
    for name, raw, status in GOOD:
        with server.client(timeout=5) as c:
            c.send(raw)
            r = c.read_response()
            assert r.status == status, (name, r)
            assert c.request("GET", "/health").status == 200, (
                name
            )  # the connection is still in step


def _check_resets(server) -> None:
    for _i in range(10):
        c = server.client(timeout=5)
        c.send(b"GET /work?sleep_us=1000 HTTP/1.1\r\nHo")  # reset mid-request
        c.reset()
        c = server.client(timeout=5)
        c.send(
            b"GET /work?sleep_us=20000&size=2000000 HTTP/1.1\r\n\r\n"
        )  # reset before the response
        c.reset()
        c = server.client(timeout=5)
        c.send(b"POST /register HTTP/1.1\r\nContent-Length: 100\r\n\r\nuser=")  # reset mid-body
        c.reset()
        c = server.client(timeout=5)  # connect and leave
        c.close()


def _settled(server, jkit) -> bool:
    """Waits until the server has closed every connection but the one asking."""
    with server.client() as c:
        return jkit.wait_until(
            lambda: json.loads(c.request("GET", "/stats").body)["connections"] == 1, timeout=15
        )


def test_java_malformed_requests(server, jkit):
    _check_malformed(server)
    assert server.get("/health").status == 200
    assert server.alive()


def test_java_resets(server, jkit):
    _check_resets(server)
    assert _settled(server, jkit)
    assert server.get("/health").status == 200


def test_java_no_fd_leak(server, jkit):
    _check_malformed(server)
    _check_resets(server)
    assert _settled(server, jkit)
    first = server.fd_count()
    for _ in range(2):
        _check_malformed(server)
        _check_resets(server)
    assert _settled(server, jkit)
    last = server.fd_count()
    assert last <= first + 2, (first, last)
    s = server.stats()
    assert s["bucket_sum"] == s["work_requests"]


@pytest.mark.parametrize(
    "partial",
    [
        b"GET /health HTTP/1.1\r\nX-Slow: ",
        b"POST /register HTTP/1.1\r\nContent-Length: 50\r\n\r\nuser=",
    ],
)
def test_java_slowloris_ties_up_only_its_connection(server, partial):
    if server.model == "single":
        pytest.skip("single serves one connection at a time: see test_java_timeouts.py")
    slow = server.client(timeout=5)
    try:
        slow.send(partial)
        t = time.monotonic()
        assert server.get("/health", timeout=5).status == 200
        assert time.monotonic() - t < 3
    finally:
        slow.close()


def test_java_sigterm(server, jkit):
    with jkit.JavaServer(server.model) as srv:
        c = srv.client()
        assert c.request("GET", "/health").status == 200  # an open keep-alive connection
        t = time.monotonic()
        assert srv.terminate(timeout=5) == 0
        assert time.monotonic() - t < 2.0
        c.close()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()

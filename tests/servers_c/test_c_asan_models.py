"""The ASan+UBSan build of the C server, every model: protocol checks plus the malformed-input
corpus, no descriptor leak, clean exit 0 on SIGTERM, and not a line from the sanitizers."""

from __future__ import annotations

import json
import random
import socket
import struct
import time

import pytest
from signal_kit import wait_server_read

MODELS = ["single", "thread", "pool", "epoll"]

# (name, raw request, expected status, server must close afterwards)
MALFORMED = [
    ("garbage line", b"GARBAGE\r\n\r\n", 400, True),
    ("no version", b"GET /health\r\n\r\n", 400, True),
    ("double space", b"GET  /health HTTP/1.1\r\n\r\n", 400, True),
    ("bad method char", b"G@T /health HTTP/1.1\r\n\r\n", 400, True),
    ("lower-case version", b"GET /health http/1.1\r\n\r\n", 400, True),
    ("absolute target", b"GET http://x/health HTTP/1.1\r\n\r\n", 400, True),
    ("space before colon", b"GET /health HTTP/1.1\r\nHost : x\r\n\r\n", 400, True),
    ("obs-fold", b"GET /health HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400, True),
    ("NUL in header", b"GET /health HTTP/1.1\r\nA: b\x00c\r\n\r\n", 400, True),
    ("CR without LF", b"GET /health HTTP/1.1\rHost: x\r\n\r\n", 400, True),
    ("binary junk", random.Random(7).randbytes(600), 400, True),
    ("TLS client hello", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(64), 400, True),
    ("HTTP/2.0", b"GET /health HTTP/2.0\r\n\r\n", 501, True),
    ("HTTP/0.9 style version", b"GET /health HTTP/0.9\r\n\r\n", 501, True),
    ("h2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 501, True),
    ("headers over 8 KiB", b"GET /health HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n", 413, True),
    ("endless header", b"GET /health HTTP/1.1\r\nX: " + b"a" * 20000, 413, True),
    (
        "chunked body",
        b"POST /register HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nuser=a\r\n0\r\n\r\n",
        501,
        True,
    ),
    (
        "body over 64 KiB",
        b"POST /register HTTP/1.1\r\nContent-Length: 70000\r\n\r\nuser=a",
        413,
        True,
    ),
    ("bad content-length", b"POST /register HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400, True),
    (
        "conflicting lengths",
        b"POST /register HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        400,
        True,
    ),
    (
        "huge content-length",
        b"POST /register HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        413,
        True,
    ),
    ("unknown path", b"GET /nope HTTP/1.1\r\n\r\n", 404, False),
    ("wrong method", b"DELETE /work HTTP/1.1\r\n\r\n", 405, False),
    ("spin_us negative", b"GET /work?spin_us=-1 HTTP/1.1\r\n\r\n", 400, True),
    ("spin_us too big", b"GET /work?spin_us=10000001 HTTP/1.1\r\n\r\n", 400, True),
    ("sleep_us not a number", b"GET /work?sleep_us=1e3 HTTP/1.1\r\n\r\n", 400, True),
    ("size too big", b"GET /work?size=16777217 HTTP/1.1\r\n\r\n", 400, True),
    ("bucket empty", b"GET /work?bucket= HTTP/1.1\r\n\r\n", 400, True),
    ("bucket overflow", b"GET /work?bucket=99999999999999999999999 HTTP/1.1\r\n\r\n", 400, True),
    ("dist unknown", b"GET /work?dist=normal HTTP/1.1\r\n\r\n", 400, True),
    ("dist uniform B<A", b"GET /work?dist=uniform:2:1 HTTP/1.1\r\n\r\n", 400, True),
    ("dist uniform nan", b"GET /work?dist=uniform:nan:1 HTTP/1.1\r\n\r\n", 400, True),
    ("bad escape", b"GET /work?spin_us=%zz HTTP/1.1\r\n\r\n", 400, True),
    ("search type 5", b"GET /search?type=5&re=a HTTP/1.1\r\n\r\n", 400, True),
    ("search type missing", b"GET /search?re=a HTTP/1.1\r\n\r\n", 400, True),
    ("search bad regex", b"GET /search?type=1&re=%28 HTTP/1.1\r\n\r\n", 400, True),
    ("search NUL in regex", b"GET /search?type=1&re=a%00b HTTP/1.1\r\n\r\n", 400, True),
    ("register no user", b"POST /register HTTP/1.1\r\nContent-Length: 6\r\n\r\npass=x", 400, True),
    (
        "register empty user",
        b"POST /register HTTP/1.1\r\nContent-Length: 5\r\n\r\nuser=",
        400,
        True,
    ),
    (
        "register user too long",
        b"POST /register HTTP/1.1\r\nContent-Length: 262\r\n\r\nuser=" + b"u" * 257,
        400,
        True,
    ),
    ("register no body", b"POST /register HTTP/1.1\r\n\r\n", 400, True),
]


def _check_timing(http, resp):
    assert http.TIMING_RE.match(resp.headers.get("server-timing", "")), resp.headers
    assert "content-type" in resp.headers


def _stats(http, port):
    r = http.get(port, "/stats")
    assert r.status == 200 and r.headers["content-type"] == "application/json"
    return json.loads(r.body)


def _wait_fds(server, want, timeout=3.0):
    deadline = time.monotonic() + timeout
    n = server.fd_count()
    while n > want and time.monotonic() < deadline:
        time.sleep(0.05)
        n = server.fd_count()
    return n


def _protocol_checks(http, port):
    # basics
    r = http.get(port, "/health")
    assert (r.status, r.body, r.headers["content-type"]) == (200, b"ok\n", "text/plain")
    _check_timing(http, r)
    r = http.get(port, "/work")
    assert (r.status, r.body) == (200, b"ok")
    r = http.get(port, "/work?spin_us=200&sleep_us=300&size=5&bucket=7&dist=exp")
    assert (r.status, r.body) == (200, b"xxxxx")
    r = http.get(port, "/work?spin_us=100&dist=uniform:0.5:1.5&size=0")
    assert (r.status, r.body) == (200, b"")
    r = http.get(port, "/work?size=16777216")
    assert r.status == 200 and len(r.body) == 16777216 and set(r.body) == {ord("x")}
    r = http.get(port, "/search?type=3&re=gr%5Bae%5Den")
    assert r.status == 200 and r.headers["content-type"] == "application/json"
    assert json.loads(r.body)["type"] == 3 and json.loads(r.body)["matches"] > 0
    # registration: new, then exists
    body = b"user=al%20ice&pass=x"
    req = (
        b"POST /register HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    assert http.exchange(port, req)[0].status == 201
    r = http.exchange(port, req)[0]
    assert (r.status, r.body) == (409, b"exists\n")
    # 405 carries Allow
    r = http.exchange(port, b"POST /health HTTP/1.1\r\nContent-Length: 0\r\n\r\n")[0]
    assert r.status == 405 and r.headers["allow"] == "GET"
    r = http.exchange(port, b"GET /register HTTP/1.1\r\n\r\n")[0]
    assert r.status == 405 and r.headers["allow"] == "POST"
    # keep-alive, pipelining (answered in order), Connection: close, HTTP/1.0
    with http.connect(port) as s:
        s.sendall(
            b"GET /work?size=1 HTTP/1.1\r\n\r\nGET /work?size=2 HTTP/1.1\r\n\r\n"
            b"GET /health HTTP/1.1\r\n\r\nGET /work?size=3 HTTP/1.1\r\n"
            b"Connection: close\r\n\r\n"
        )
        rd = http.Reader(s)
        bodies = [rd.response().body for _ in range(4)]
        assert bodies == [b"x", b"xx", b"ok\n", b"xxx"]
        assert rd.at_eof()
    r, closed = http.exchange(port, b"GET /health HTTP/1.0\r\n\r\n", check_close=True)
    assert r.status == 200 and closed and r.headers.get("connection", "").lower() == "close"
    with http.connect(port) as s:
        rd = http.Reader(s)
        for _ in range(3):
            s.sendall(b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            r = rd.response()
            assert r.status == 200 and r.headers["connection"].lower() == "keep-alive"
    # a request arriving one byte at a time, bare LFs tolerated
    with http.connect(port) as s:
        for b in b"GET /health HTTP/1.1\nHost: x\n\n":
            s.send(bytes([b]))
        assert http.Reader(s).response().status == 200
    # Expect: 100-continue
    with http.connect(port) as s:
        s.sendall(b"POST /register HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 8\r\n\r\n")
        rd = http.Reader(s)
        assert rd.response().status == 100
        s.sendall(b"user=bob")
        assert rd.response().status == 201
    # 200 pipelined requests in one write (buffer compaction), then a 60 KiB body (heap buffer)
    with http.connect(port) as s:
        s.sendall(b"".join(b"GET /work?size=%d HTTP/1.1\r\n\r\n" % (i % 7) for i in range(200)))
        rd = http.Reader(s)
        assert [len(rd.response().body) for _ in range(200)] == [i % 7 for i in range(200)]
        body = b"pass=" + b"p" * 61000 + b"&user=big"
        s.sendall(b"POST /register HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        assert rd.response().status == 201
        s.sendall(b"GET /health HTTP/1.1\r\n\r\n")
        assert rd.response().body == b"ok\n"
    # a body on a GET is read and ignored
    r = http.exchange(port, b"GET /health HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /x HTTP/1.1")[
        0
    ]
    assert r.status == 200


def _abuse(http, port):
    for name, raw, status, closes in MALFORMED:
        try:
            r, closed = http.exchange(port, raw, check_close=closes)
        except (ConnectionError, OSError) as e:
            raise AssertionError(f"{name}: {e!r}") from e
        assert r.status == status, f"{name}: got {r.status}, want {status}"
        _check_timing(http, r)
        if closes:
            assert closed, f"{name}: connection left open after {status}"
            assert r.headers.get("connection", "").lower() == "close", name
    # resets in the middle of a request head and of a body
    for raw in (
        b"GET /work?spin_us=1 HTTP/1.1\r\nHost: x",
        b"POST /register HTTP/1.1\r\nContent-Length: 100\r\n\r\nuser=",
        b"GET /work?size=16777216 HTTP/1.1\r\n\r\n",
    ):
        s = http.connect(port)
        s.sendall(raw)
        wait_server_read(s, f"the server reading {raw[:30]!r} before the reset")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    # clients that vanish with a partial request (FIN)
    for _ in range(5):
        with http.connect(port) as s:
            s.sendall(b"GET /hea")


@pytest.mark.parametrize("model", MODELS)
def test_asan_model(c_server, http, model):
    srv = c_server(model, asan=True, threads=2, extra=["--buckets", "16"])
    base = srv.fd_count()
    _protocol_checks(http, srv.port)
    _abuse(http, srv.port)
    # connections still in the accept queue hold no descriptor yet: wait for the count too
    deadline = time.monotonic() + 5
    st = _stats(http, srv.port)
    while st["connections"] > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
        st = _stats(http, srv.port)
    assert _wait_fds(srv, base) == base, "descriptor leak"
    assert st["impl"] == "c" and st["model"] == model
    assert st["bucket_sum"] == st["work_requests"] and st["buckets"] == 16
    assert st["connections"] == 1  # the /stats connection itself
    assert st["users"] == 3 and st["queue_length"] == 0
    # still serving after all of it
    assert http.get(srv.port, "/health").status == 200
    rc, took = srv.terminate()
    assert rc == 0, srv.stderr()
    assert took < 2.0
    err = srv.stderr()
    assert not any(m in err for m in http.SANITIZER_MARKERS), err

"""The bundled Java server, model by model: endpoints, Server-Timing, errors, robustness.

One server per model for the whole module (JVM start-up is the slow part); tests run in file
order per model and leave the server healthy for the next one.
"""

from __future__ import annotations

import json
import random
import re
import socket
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

MODELS = ("single", "thread", "pool", "virtual")


@pytest.fixture(scope="module", params=MODELS)
def server(request, jkit):
    with jkit.JavaServer(request.param, "--threads", "4", "--buckets", "64") as srv:
        yield srv
        assert srv.alive(), f"server died; stderr: {srv.stderr_text()}"


def _expected_counts(corpus: Path, type_: int, regex: str) -> int:
    pat = re.compile(regex)
    n = 0
    for line in corpus.read_text().splitlines():
        t, _, text = line.partition("\t")
        if int(t) == type_ and pat.search(text):
            n += 1
    return n


def test_java_listening_line(server):
    assert f"model={server.model}" in server.line
    assert "threads=4 backlog=128" in server.line


def test_java_health(server):
    r = server.get("/health")
    assert (r.status, r.body, r.headers["content-type"]) == (200, b"ok\n", "text/plain")
    q, s = r.timing()
    assert q >= 0 and s >= 0


def test_java_work(server):
    before = server.stats()
    n = 0
    with server.client() as c:
        r = c.request("GET", "/work")
        n += 1
        assert (r.status, r.body) == (200, b"ok")
        r = c.request("GET", "/work?spin_us=0")
        n += 1
        assert r.status == 200 and r.timing()[0] == 0.0  # not the connection's first request
        r = c.request("GET", "/work?spin_us=2000")
        n += 1
        assert r.status == 200 and r.timing()[1] >= 2.0
        r = c.request("GET", "/work?sleep_us=3000")
        n += 1
        assert r.status == 200 and r.timing()[1] >= 3.0
        r = c.request("GET", "/work?spin_us=1000&sleep_us=1000&dist=uniform:1:1")
        n += 1
        assert r.status == 200 and r.timing()[1] >= 2.0
        r = c.request("GET", "/work?spin_us=200000&sleep_us=200000&dist=uniform:0:0")
        n += 1
        assert r.status == 200 and r.timing()[1] < 100.0
        for _ in range(5):
            r = c.request("GET", "/work?spin_us=100&sleep_us=100&dist=exp")
            n += 1
            assert r.status == 200
        r = c.request("GET", "/work?spin_us=100&dist=uniform:0.5:1.5e0")
        n += 1
        assert r.status == 200
        for b in ("0", "5", "63", "64", "1000000", "123456789012345678901234567890"):
            r = c.request("GET", f"/work?bucket={b}")
            n += 1
            assert (r.status, r.body) == (200, b"ok")
        for size in (0, 1, 2, 100_000):
            r = c.request("GET", f"/work?size={size}")
            n += 1
            assert r.status == 200 and r.body == b"x" * size
        r = c.request("GET", f"/work?size={16 << 20}")
        n += 1
        assert r.status == 200 and len(r.body) == 16 << 20 and r.body.count(b"x") == 16 << 20
        r = c.request("GET", "/work?unknown=1&spin_us=10&spin_us=99999999999")  # first value wins
        n += 1
        assert r.status == 200
    after = server.stats()
    assert after["work_requests"] - before["work_requests"] == n
    assert after["bucket_sum"] - before["bucket_sum"] == n
    assert after["bucket_sum"] == after["work_requests"]
    assert after["buckets"] == 64


def test_java_search_layouts_agree(server, jkit):
    cases = [
        (1, "alpha"),
        (2, "beta"),
        (1, "beta"),
        (3, "^The"),
        (4, r"drift\.$"),
        (2, "(packets|bytes)"),
        (3, "[0-9][0-9][0-9][0-9] fr.mes"),
        (4, "a+b?c*"),
        (1, ""),
    ]
    with jkit.JavaServer(server.model, "--layout", "by-type") as by_type:
        with server.client() as flat_c, by_type.client() as by_c:
            for t, regex in cases:
                target = "/search?" + urlencode({"type": t, "re": regex})
                a = flat_c.request("GET", target)
                b = by_c.request("GET", target)
                assert a.status == b.status == 200, (a, b)
                assert a.headers["content-type"] == "application/json"
                ja, jb = json.loads(a.body), json.loads(b.body)
                assert ja == jb == {"type": t, "matches": _expected_counts(jkit.CORPUS, t, regex)}
                a.timing()
    assert json.loads(server.get("/search?type=1&re=alpha").body)["matches"] > 0


def test_java_register(server):
    user = f"alice-{server.model}"
    before = server.stats()["users"]
    with server.client() as c:
        r = c.request("POST", "/register", f"user={user}&pass=secret".encode())
        assert (r.status, r.body) == (201, b"created\n")
        r = c.request("POST", "/register", f"pass=other&user={user}".encode())
        assert (r.status, r.body) == (409, b"exists\n")
        r = c.request(
            "POST", "/register", f"user=b%C3%B6b+{server.model}".encode()
        )  # no pass: fine
        assert r.status == 201
        r = c.request("POST", "/register", f"user=b%C3%B6b%20{server.model}&pass=x".encode())
        assert r.status == 409  # the same user, decoded
        r = c.request(
            "POST", "/register", b"user=" + (server.model[:6].ljust(6, "_") + "u" * 250).encode()
        )
        assert r.status == 201  # exactly 256 bytes
        r = c.request("POST", "/register", b"user=" + b"v" * 257)
        assert r.status == 400 and r.headers.get("connection") == "close"
    # Expect: 100-continue
    with server.client() as c:
        body = f"user=carol-{server.model}&pass=p".encode()
        c.send(
            f"POST /register HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
            "Expect: 100-continue\r\n\r\n".encode()
        )
        assert c.read_response().status == 100
        c.send(body)
        assert c.read_response().status == 201
    assert server.stats()["users"] == before + 4


SWIPE_OK = {"swiper": 5000, "swipee": 1, "comment": "x" * 256}
# (path, body, status): seed 001's checks, table-driven
SWIPE_CASES = [
    ("/swipe/left/", json.dumps(SWIPE_OK), 201),
    ("/swipe/right", json.dumps({"comment": "", "swipee": 1000000, "swiper": 1}), 201),
    ("/swipe/up/", json.dumps(SWIPE_OK), 404),
    ("/swipe/left/", json.dumps({**SWIPE_OK, "swiper": 5001}), 400),
    ("/swipe/left/", json.dumps({**SWIPE_OK, "swipee": 0}), 400),
    ("/swipe/left/", json.dumps({**SWIPE_OK, "swipee": 1.5}), 400),
    ("/swipe/left/", json.dumps({**SWIPE_OK, "comment": "x" * 257}), 400),
    ("/swipe/left/", json.dumps({**SWIPE_OK, "comment": 7}), 400),
    ("/swipe/left/", json.dumps({"swiper": 1, "swipee": 1}), 400),
    ("/swipe/left/", json.dumps({**SWIPE_OK, "extra": 1}), 400),
    ("/swipe/left/", json.dumps(SWIPE_OK)[:-1], 400),
    ("/swipe/left/", json.dumps(SWIPE_OK) + "x", 400),
    ("/swipe/left/", "", 400),
]


def test_java_swipe(server):
    """POST /swipe/{left|right}/ validates its JSON body as seed 001's servlet did, then costs
    what /work with the same query costs."""
    for path, body, status in SWIPE_CASES:
        with server.client() as c:
            r = c.request("POST", path, body.encode())
            assert r.status == status, (path, body[:80], r.status, r.body)
            if status == 201:
                assert json.loads(r.body) == {"swipe": path.split("/")[2]}
    with server.client() as c:
        assert c.request("GET", "/swipe/left/").status == 405
    before = server.stats()["work_requests"]
    with server.client() as c:
        r = c.request(
            "POST", "/swipe/left/?spin_us=100&sleep_us=20000", json.dumps(SWIPE_OK).encode()
        )
        assert r.status == 201
        assert r.timing()[1] >= 20.0  # svc: the query's sleep
    assert server.stats()["work_requests"] == before + 1


def test_java_stats(server, jkit):
    with server.client() as c:
        # earlier connections close on the server side asynchronously: wait until ours is the only one
        assert jkit.wait_until(
            lambda: json.loads(c.request("GET", "/stats").body)["connections"] == 1
        )
        r1 = c.request("GET", "/stats")
        r2 = c.request("GET", "/stats")
    assert r1.headers["content-type"] == "application/json"
    s1, s2 = json.loads(r1.body), json.loads(r2.body)
    assert set(s1) == jkit.STATS_KEYS
    assert s1["impl"] == "java" and s1["model"] == server.model
    assert s2["requests"] == s1["requests"] + 1
    assert s1["connections"] == 1 and s1["queue_length"] == 0
    assert s1["buckets"] == 64 and s1["bucket_sum"] == s1["work_requests"]
    expected_threads = {"single": 1, "pool": 4}.get(server.model)
    if expected_threads:
        assert s1["threads"] == expected_threads
    else:
        assert s1["threads"] >= 1  # the live ones: at least the one serving us
    for v in s1.values():
        assert isinstance(v, (int, str))


def test_java_keepalive_pipelining_close(server):
    with server.client() as c:
        c.send(
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /register HTTP/1.1\r\nContent-Length: 10\r\n\r\nuser=pipe1"
            b"GET /work?size=3 HTTP/1.1\r\n\r\n"
            b"GET /nope HTTP/1.1\r\n\r\n"
            b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"
        )
        rs = [c.read_response() for _ in range(5)]
        assert [r.status for r in rs] == [200, 201, 200, 404, 200]
        assert rs[2].body == b"xxx"
        assert rs[4].headers["connection"] == "close"
        assert c.at_eof()
    with server.client() as c:  # HTTP/1.0: close by default
        r = c.request("GET", "/health", version="HTTP/1.0")
        assert r.status == 200 and r.headers.get("connection") == "close"
        assert c.at_eof()
    with server.client() as c:  # HTTP/1.0 keep-alive
        r = c.request("GET", "/health", version="HTTP/1.0", headers={"Connection": "keep-alive"})
        assert r.status == 200 and r.headers.get("connection", "").lower() == "keep-alive"
        assert c.request("GET", "/health", version="HTTP/1.0").status == 200
        assert c.at_eof()


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

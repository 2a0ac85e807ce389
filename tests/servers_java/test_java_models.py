"""The bundled Java server, model by model: endpoints, Server-Timing, errors, keep-alive
(its robustness against malformed requests, resets and slow clients: test_java_robustness.py).

One server per model for the whole module (the `server` fixture, conftest.py: JVM start-up is
the slow part); tests run in file order per model and leave the server healthy for the next
one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlencode


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

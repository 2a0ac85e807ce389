"""Endpoint semantics that need more than one request: counters, /stats, /register, timing."""

from __future__ import annotations

import statistics
import time

from conformance_client import BACKLOG, THREADS, Conn, build, get, settle

STATS_KEYS = {
    "impl": str,
    "model": str,
    "threads": int,
    "requests": int,
    "work_requests": int,
    "bucket_sum": int,
    "buckets": int,
    "queue_length": int,
    "users": int,
    "connections": int,
}


def test_listening_line(srv):
    from conformance_client import LISTENING

    m = LISTENING.fullmatch(srv.line)
    assert m, srv.line
    assert (m.group(2), m.group(3), int(m.group(5))) == (srv.impl, srv.model, BACKLOG)
    assert int(m.group(1)) == srv.port != 0


def test_stats_shape(srv):
    with Conn(srv.port) as c:
        r = c.request("/stats")
    assert r.header("content-type").startswith("application/json")
    s = r.json()
    for k, t in STATS_KEYS.items():
        assert k in s, f"/stats lacks {k}: {s}"
        assert isinstance(s[k], t) and not isinstance(s[k], bool), f"{k}: {s[k]!r}"
        if t is int:
            assert s[k] >= 0, f"{k}: {s[k]}"
    assert (s["impl"], s["model"], s["buckets"]) == (srv.impl, srv.model, 1024)
    assert s["connections"] >= 1
    want_threads = {"single": 1, "async": 1, "pool": THREADS, "epoll": THREADS}
    if srv.model in want_threads:
        assert s["threads"] == want_threads[srv.model], s
    assert s["bucket_sum"] == s["work_requests"]


def test_requests_counter_exact(srv):
    """`requests`: responses completed before this one (any endpoint, any status)."""
    with Conn(srv.port) as c:
        s1 = settle(c)
        statuses = [
            c.request(t, method=m).status
            for m, t in [
                ("GET", "/health"),
                ("GET", "/nope"),
                ("PUT", "/work"),
                ("GET", "/work?bucket=3"),
                ("GET", "/work"),
            ]
        ]
        s2 = c.request("/stats").json()
    assert statuses == [200, 404, 405, 200, 200]
    assert s2["requests"] == s1["requests"] + 1 + 5, (s1, s2)


def test_work_counters(srv):
    with Conn(srv.port) as c:
        s1 = settle(c)
        for i in range(10):
            c.request(f"/work?bucket={i * 1000 + 5}")  # wraps modulo 1024
        for _ in range(10):
            c.request("/work")  # running request number
        c.request("/work?bucket=4294967297")
        s2 = c.request("/stats").json()
    assert s2["work_requests"] - s1["work_requests"] == 21
    assert s2["bucket_sum"] - s1["bucket_sum"] == 21
    assert s2["bucket_sum"] == s2["work_requests"]


def test_bad_work_keeps_invariant(srv):
    for q in ("spin_us=-1", "size=99999999999", "dist=weird", "bucket=z"):
        assert get(srv.port, f"/work?{q}").status == 400
    s = get(srv.port, "/stats").json()
    assert s["bucket_sum"] == s["work_requests"]


def _svc(port: int, target: str) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    r = get(port, target, timeout=10)
    assert r.status == 200, (target, r.status, r.body[:100])
    q, svc = r.timing
    return q, svc, (time.perf_counter() - t0) * 1000


def test_work_spin_and_sleep_times(srv):
    q, svc, wall = _svc(srv.port, "/work?spin_us=20000")
    assert svc >= 19.5 and wall >= 19.5 and q >= 0, (q, svc, wall)
    q, svc, wall = _svc(srv.port, "/work?sleep_us=30000")
    assert svc >= 29.5 and wall >= 29.5, (svc, wall)
    q, svc, wall = _svc(srv.port, "/work?spin_us=10000&sleep_us=10000&dist=uniform:2:2")
    assert svc >= 39.5 and wall >= 39.5, (svc, wall)
    q, svc, wall = _svc(srv.port, "/work?sleep_us=10000000&spin_us=10000000&dist=uniform:0:0")
    assert svc < 500 and wall < 1000, (svc, wall)
    q, svc, wall = _svc(srv.port, "/health")
    assert svc < 100


def test_work_dist_exp_mean(srv):
    with Conn(srv.port, timeout=10) as c:
        c.send(b"".join(build("GET", "/work?sleep_us=2000&dist=exp") for _ in range(40)))
        svcs = [c.read_response().timing[1] for _ in range(40)]
    mean = statistics.fmean(svcs)
    assert 0.9 < mean < 10.0, f"mean of 40 Exp(1) x 2 ms sleeps: {mean:.3f} ms"
    assert max(svcs) > 2 * min(svcs), "dist=exp gives (nearly) constant times"


def test_register_create_then_exists(srv):
    user = f"u{time.monotonic_ns()}-{srv.impl}-{srv.model}"
    with Conn(srv.port) as c:
        users0 = settle(c)["users"]
        r1 = c.request(
            "/register",
            "POST",
            f"user={user}&pass=p".encode(),
            {"Content-Type": "application/x-www-form-urlencoded"},
        )
        r2 = c.request("/register", "POST", f"user={user}&pass=other".encode())
        r3 = c.request("/register", "POST", f"pass=z&user={user}x".encode())
        s = c.request("/stats").json()
    assert (r1.status, r1.body) == (201, b"created\n")
    assert (r2.status, r2.body) == (409, b"exists\n")
    assert (r3.status, r3.body) == (201, b"created\n")
    assert s["users"] == users0 + 2


def test_register_url_decoding(srv):
    base = f"d{time.monotonic_ns()}"
    with Conn(srv.port) as c:
        a = c.request("/register", "POST", f"user={base}%20a%2Bb%26c&pass=1".encode())
        b = c.request("/register", "POST", f"user={base}+a%2bb%26c&pass=2".encode())
    assert a.status == 201
    assert b.status == 409, "form encoding: '+' is a space and %xx is case-insensitive"


def test_register_user_256_bytes(srv):
    user = (f"l{time.monotonic_ns()}" * 20)[:256]
    r = get(srv.port, "/register", method="POST", body=f"user={user}".encode())
    assert r.status == 201


def test_register_body_exactly_64k(srv):
    user = f"big{time.monotonic_ns()}"
    body = f"user={user}&pass=".encode()
    body += b"p" * (65536 - len(body))
    r = get(srv.port, "/register", method="POST", body=body)
    assert r.status == 201


def test_search_url_decoding(srv):
    with Conn(srv.port) as c:
        a = c.request("/search?type=2&re=drops%20%5B0-9%5D%2B%20headers").json()
        b = c.request("/search?type=2&re=drops [0-9]%2B headers".replace(" ", "%20")).json()
    assert a == b and a["matches"] > 0 and a["type"] == 2

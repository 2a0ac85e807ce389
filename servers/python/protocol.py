"""The perfctl server protocol (servers/PROTOCOL.md), shared by both Python models.

A connection's bytes become `Request`s and `Reject`s in request_reader.py (`Session`).
`handle()` routes one of them; /work returns a `Pending` whose sleep the model performs in its
own way (asyncio.sleep or time.sleep) before calling `finish()`.
"""

from __future__ import annotations

import json
import random
import re
import sys
import threading
import time
from urllib.parse import parse_qsl

from request_reader import ALLOW, Reject, Request, _origin_path

MAX_TIME_US = 10_000_000
MAX_SIZE = 16 * 1024 * 1024
MAX_USER = 256
IDLE_TIMEOUT_S = 10.0  # default of --idle-timeout-ms: idle, or a request trickling in

_now = time.perf_counter_ns
_DECIMAL = re.compile(r"[0-9]+\Z")
_REAL = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
REASONS = {
    200: "OK",
    201: "Created",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}
DB_QUERIES = ("point", "range", "insert", "delete")
MAX_DB_ROWS = 1000


def load_corpus(path: str) -> tuple[list[tuple[int, str]], dict[int, list[str]]]:
    flat: list[tuple[int, str]] = []
    by_type: dict[int, list[str]] = {t: [] for t in range(1, 5)}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            kind, sep, text = line.rstrip("\r\n").partition("\t")
            if not sep or not _DECIMAL.match(kind) or int(kind) not in by_type:
                continue
            flat.append((int(kind), text))
            by_type[int(kind)].append(text)
    return flat, by_type


class State:
    """Everything shared by the connections of one server: counters, users, corpus, stats."""

    def __init__(self, model: str, threads: int, buckets: int, layout: str, corpus: str, seed: int):
        self.model, self.threads, self.buckets, self.layout = model, threads, buckets, layout
        self.counters = [0] * buckets
        self.lock = threading.Lock()
        self.requests = 0
        self.work_seq = 0
        self.work_requests = 0
        self.users: set[str] = set()
        self.connections = 0
        self.queued = 0  # requests parsed but not yet served (async)
        self.queue_length = lambda: self.queued
        self.rng = random.Random(seed)
        self.idle_timeout_s = IDLE_TIMEOUT_S
        self.flat, self.by_type = load_corpus(corpus)

    def conn_delta(self, d: int) -> None:
        with self.lock:
            self.connections += d

    def responded(self) -> None:
        with self.lock:
            self.requests += 1

    def stats(self) -> bytes:
        with self.lock:
            d = {
                "impl": "python",
                "model": self.model,
                "threads": self.threads,
                "requests": self.requests,
                "work_requests": self.work_requests,
                "bucket_sum": sum(self.counters),
                "buckets": self.buckets,
                "queue_length": max(0, self.queue_length()),
                "users": len(self.users),
                "connections": self.connections,
            }
        return (json.dumps(d) + "\n").encode()


def render(
    status: int,
    ctype: str,
    body: bytes,
    q_ns: int,
    svc_ns: int,
    close: bool,
    keep_alive_10: bool = False,
    extra: str = "",
    db_ns: int | None = None,
) -> bytes:
    db = "" if db_ns is None else f", db;dur={db_ns / 1e6:.3f}"
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}\r\n"
        f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
        f"Server-Timing: queue;dur={q_ns / 1e6:.3f}, svc;dur={svc_ns / 1e6:.3f}{db}\r\n"
        f"{extra}"
    )
    if close:
        head += "Connection: close\r\n"
    elif keep_alive_10:
        head += "Connection: keep-alive\r\n"
    return (head + "\r\n").encode("latin-1") + body


class Response:
    __slots__ = ("status", "ctype", "body", "extra", "close", "db_ns")

    def __init__(self, status, body, ctype="text/plain", extra="", close=False, db_ns=None):
        self.status, self.body, self.ctype, self.extra, self.close = (
            status,
            body,
            ctype,
            extra,
            close,
        )
        self.db_ns = db_ns  # time spent in the database, for Server-Timing db;dur=


def _bad(why: str) -> Response:
    return Response(400, f"bad request: {why}\n".encode(), close=True)


class Pending:
    """A /work request after its spin: the model sleeps `sleep_s`, then calls finish()."""

    __slots__ = ("state", "req", "q_ns", "t_start", "sleep_s", "bucket", "size")

    def __init__(self, state, req, q_ns, t_start, sleep_s, bucket, size):
        self.state, self.req, self.q_ns, self.t_start = state, req, q_ns, t_start
        self.sleep_s, self.bucket, self.size = sleep_s, bucket, size

    def finish(self) -> tuple[bytes, bool]:
        st = self.state
        with st.lock:
            st.counters[self.bucket % st.buckets] += 1
            st.work_requests += 1
        body = b"ok" if self.size < 0 else b"x" * self.size
        return finish(Response(200, body), self.req, self.q_ns, self.t_start)


def finish(resp: Response, req, q_ns: int, t_start: int) -> tuple[bytes, bool]:
    """The response bytes and whether to close the connection after writing them."""
    keep = isinstance(req, Request) and req.keep_alive and not resp.close
    data = render(
        resp.status,
        resp.ctype,
        resp.body,
        q_ns,
        _now() - t_start,
        not keep,
        keep and req.http10,
        resp.extra,
        resp.db_ns,
    )
    if isinstance(req, Request) and req.method == "HEAD" and resp.body:
        data = data[: -len(resp.body)]  # a HEAD response has no body (RFC 9110 9.3.2)
    return data, not keep


def _params(query: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in parse_qsl(query, keep_blank_values=True):
        out.setdefault(k, v)
    return out


def _int(params: dict, name: str, default: int, limit: int | None) -> int:
    v = params.get(name)
    if v is None:
        return default
    if not _DECIMAL.match(v) or (limit is not None and int(v) > limit):
        raise ValueError(name)
    return int(v)


def _work(st: State, req: Request, query: str, q_ns: int, t_start: int):
    p = _params(query)
    try:
        spin = _int(p, "spin_us", 0, MAX_TIME_US)
        sleep = _int(p, "sleep_us", 0, MAX_TIME_US)
        bucket = _int(p, "bucket", -1, None)
        size = _int(p, "size", -1, MAX_SIZE)  # -1: the default body "ok"
        dist = p.get("dist", "fixed")
        if dist == "fixed":
            factor = 1.0
        elif dist == "exp":
            factor = st.rng.expovariate(1.0)
        elif dist.startswith("uniform:"):
            parts = dist.split(":")
            if len(parts) != 3 or not all(_REAL.match(x) for x in parts[1:]):
                raise ValueError("dist")
            a, b = float(parts[1]), float(parts[2])
            if a > b:
                raise ValueError("dist")
            factor = st.rng.uniform(a, b)
        else:
            raise ValueError("dist")
    except ValueError as e:
        return _bad(str(e))
    with st.lock:
        seq = st.work_seq
        st.work_seq += 1
    if bucket < 0:
        bucket = seq
    if spin:
        end = t_start + int(spin * factor * 1000)
        while _now() < end:
            pass
    return Pending(st, req, q_ns, t_start, sleep * factor / 1e6, bucket, size)


class DbPending:
    """A valid /db request: the model runs it on its database connection (db.py) and calls
    done() with the rows returned and the time spent in the database, or failed()."""

    __slots__ = ("req", "q_ns", "t_start", "query", "rows")

    def __init__(self, req, q_ns, t_start, query, rows):
        self.req, self.q_ns, self.t_start, self.query, self.rows = req, q_ns, t_start, query, rows

    def done(self, rows: int, db_ns: int) -> tuple[bytes, bool]:
        body = json.dumps({"query": self.query, "rows": rows}).encode()
        return finish(
            Response(200, body, "application/json", db_ns=db_ns), self.req, self.q_ns, self.t_start
        )

    def failed(self, why: str, db_ns: int | None = None) -> tuple[bytes, bool]:
        """503: the database is not configured, not reachable, or failed the query."""
        return finish(
            Response(503, f"database unavailable: {why}\n".encode(), db_ns=db_ns),
            self.req,
            self.q_ns,
            self.t_start,
        )


def _db(req: Request, query: str, q_ns: int, t_start: int):
    p = _params(query)
    kind = p.get("query")
    if kind not in DB_QUERIES:
        return _bad("query")
    try:
        rows = _int(p, "rows", 10 if kind == "range" else 1, MAX_DB_ROWS)
    except ValueError:
        return _bad("rows")
    if rows < 1:
        return _bad("rows")
    return DbPending(req, q_ns, t_start, kind, rows)


def _search(st: State, query: str) -> Response:
    p = _params(query)
    t = p.get("type", "")
    if not _DECIMAL.match(t) or not 1 <= int(t) <= 4:
        return _bad("type")
    if "re" not in p:
        return _bad("re")
    try:
        rx = re.compile(p["re"])
    except Exception:
        return _bad("re")
    kind, search = int(t), rx.search
    if st.layout == "by-type":
        n = sum(1 for s in st.by_type[kind] if search(s))
    else:
        n = sum(1 for k, s in st.flat if k == kind and search(s))
    return Response(200, json.dumps({"type": kind, "matches": n}).encode(), "application/json")


def _register(st: State, req: Request) -> Response:
    p = _params(req.body.decode("utf-8", "replace"))
    user = p.get("user", "")
    if not user or len(user.encode("utf-8")) > MAX_USER:
        return _bad("user")
    with st.lock:
        if user in st.users:
            return Response(409, b"exists\n")
        st.users.add(user)
    return Response(201, b"created\n")


def handle(st: State, item, q_ns: int, t_start: int):
    """Serve one item: returns (bytes, close), a Pending (/work; spin already done) or a
    DbPending (/db, parameters checked; the model runs the query).
    A bug here answers 500 and closes instead of killing the connection's handler."""
    try:
        return _handle(st, item, q_ns, t_start)
    except Exception as e:  # noqa: BLE001
        print(f"perfctl-server: internal error: {e!r}", file=sys.stderr, flush=True)
        return finish(Response(500, b"internal error\n", close=True), item, q_ns, t_start)


def _handle(st: State, item, q_ns: int, t_start: int):
    if isinstance(item, Reject):
        return finish(
            Response(item.status, f"{item.why}\n".encode(), extra=item.extra, close=True),
            item,
            q_ns,
            t_start,
        )
    path, _, query = item.target.partition("?")
    path = _origin_path(path)
    allow = ALLOW.get(path)
    if allow is None:
        resp = Response(404, b"not found\n")
    elif item.method != allow:
        resp = Response(405, b"method not allowed\n", extra=f"Allow: {allow}\r\n")
    elif path == "/work":
        r = _work(st, item, query, q_ns, t_start)
        if isinstance(r, Pending):
            return r
        resp = r
    elif path == "/db":
        r = _db(item, query, q_ns, t_start)
        if isinstance(r, DbPending):
            return r
        resp = r
    elif path == "/health":
        resp = Response(200, b"ok\n")
    elif path == "/search":
        resp = _search(st, query)
    elif path == "/stats":
        resp = Response(200, st.stats(), "application/json")
    else:
        resp = _register(st, item)
    return finish(resp, item, q_ns, t_start)

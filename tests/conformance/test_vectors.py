"""Run every vector of conformance_vectors.VECTORS and malformed_vectors.REFUSED against every
impl x model."""

from __future__ import annotations

import json
import re

import pytest
from conformance_client import Conn, Server, server_argv
from conformance_vectors import VECTORS as ANSWERED
from conformance_vectors import V
from malformed_vectors import (
    CONTAINER_ANSWERS,
    CONTAINER_KEEPS_OPEN,
    CONTAINER_MODELS,
    HTTP09,
    REFUSED,
)

VECTORS = ANSWERED + REFUSED


def check_body(v: V, body: bytes) -> None:
    exp = v.body
    if exp is None:
        return
    if isinstance(exp, bytes):
        assert body == exp
    elif isinstance(exp, re.Pattern):
        assert exp.fullmatch(body.decode("latin-1")), body[:200]
    elif isinstance(exp, dict):
        got = json.loads(body)
        assert isinstance(got, dict), got
        for k, val in exp.items():
            assert got.get(k) == val, f"{k}: got {got.get(k)!r}, want {val!r} in {got}"
    elif isinstance(exp, int):
        assert len(body) == exp
        assert body == b"x" * exp, "the /work body must be `size` bytes of 'x'"


def read_until_closed(c: Conn) -> bytes:
    """Every byte the peer sends until it closes (an error answer of Tomcat's ends so)."""
    data = b""
    for _ in range(64):
        chunk = c.sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"the container did not close after {len(data)} bytes: {data[:80]!r}")


def _container_answer(c: Conn, v: V) -> None:
    """What Tomcat answers in place of the server (malformed_vectors.CONTAINER_ANSWERS): one
    of the allowed statuses, then the connection closed after an error."""
    statuses, why = CONTAINER_ANSWERS[v.id]
    if HTTP09 in statuses:
        data = read_until_closed(c)
        if statuses == (HTTP09,) or not data.startswith(b"HTTP/"):
            assert data and not data.startswith(b"HTTP/"), (
                f"not an HTTP/0.9 answer ({why}): {data[:80]!r}"
            )
            return
        m = re.match(rb"HTTP/1\.[01] (\d{3}) ", data)
        assert m and int(m.group(1)) in statuses, f"{data[:80]!r}, want {statuses} ({why})"
        return
    resp = c.read_response(check=False, no_body=v.raw.startswith(b"HEAD "))
    assert resp.status in statuses, f"status {resp.status}, want {statuses} ({why})"
    if resp.status >= 400 and v.id not in CONTAINER_KEEPS_OPEN:
        assert c.peer_closed(3.0), "the container did not close the connection"


@pytest.mark.parametrize("v", VECTORS, ids=[v.id for v in VECTORS])
def test_vector(srv, v: V):
    with Conn(srv.port, timeout=5) as c:
        if (srv.impl, srv.model) in CONTAINER_MODELS and v.id in CONTAINER_ANSWERS:
            try:
                c.send(v.raw)
            except OSError:
                pass
            _container_answer(c, v)
            return
        try:
            c.send(v.raw)
        except OSError:
            pass  # the server may answer and close before taking every byte
        resp = c.read_response(no_body=v.raw.startswith(b"HEAD "))
        want = v.status if isinstance(v.status, tuple) else (v.status,)
        assert resp.status in want, (
            f"status {resp.status}, want {v.status} ({v.note}); body {resp.body[:200]!r}"
        )
        if v.ctype:
            assert resp.header("content-type").lower().startswith(v.ctype), resp.headers
        for name, pattern in v.headers.items():
            assert re.fullmatch(pattern, resp.header(name) or ""), (
                f"{name}: {resp.header(name)!r} !~ {pattern}"
            )
        if resp.status == 405:
            assert resp.header("allow"), "405 without Allow"
        if resp.status in (400, 413, 501):
            assert (resp.header("connection") or "").lower() == "close", (
                f"{resp.status} must carry Connection: close"
            )
        check_body(v, resp.body)
        if v.after == "close" or resp.status in (400, 413, 501):
            assert c.peer_closed(3.0), "the server did not close the connection"
        elif v.after == "open":
            assert (resp.header("connection") or "").lower() != "close"
            follow = c.request("/health")
            assert follow.status == 200 and follow.body == b"ok\n"


@pytest.mark.parametrize("model", ["servlet", "spring"])
def test_tomcat_answers_a_bad_request_line_on_a_fresh_processor_with_a_head(model):
    """The vectors above take a bare body for a bad request line too, as Tomcat answers it on a
    recycled processor whose last request was HTTP/0.9 (CONTAINER_ANSWERS). A fresh server's
    first connection has a fresh processor: there the answer is a whole 400 with its head."""
    srv = Server("java", model, server_argv("java", model))
    try:
        with Conn(srv.port, timeout=5) as c:
            c.send(b"GET\r\n\r\n")
            data = read_until_closed(c)
        assert data.startswith(b"HTTP/1.1 400 "), data[:80]
    finally:
        srv.stop()

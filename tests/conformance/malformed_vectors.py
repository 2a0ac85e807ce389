"""Requests a server must refuse, and bytes and clients it must survive (servers/PROTOCOL.md):

REFUSED    vectors (conformance_vectors.V) no server can parse: answered 400, 501 or 413,
           then the connection closed (test_vectors.py, after conformance_vectors.VECTORS);
MALFORMED  a corpus of truncated, reset and junk requests (test_connection.py);
STALLS     clients that stall or trickle their request (test_connection.py);
CONTAINER_ANSWERS  what Tomcat answers in their place on the Java servers on real stacks.
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance_vectors import V, req

REFUSED: list[V] = [
    # --- malformed: 400 -------------------------------------------------------------------
    V("bad-no-version", b"GET /health\r\n\r\n", 400, after="close"),
    V("bad-only-method", b"GET\r\n\r\n", 400, after="close"),
    V("bad-empty-request-line", b" \r\n\r\n", 400, after="close"),
    V("bad-method-chars", b"G(T /health HTTP/1.1\r\n\r\n", 400, after="close"),
    V(
        "bad-method-unknown",
        b"FOO /health HTTP/1.1\r\n\r\n",
        (400, 405, 501),
        after=None,
        note="a token method nobody knows: PROTOCOL.md does not say 400, 405 or 501",
    ),
    V(
        "bad-method-lowercase",
        b"get /health HTTP/1.1\r\n\r\n",
        (400, 405, 501),
        after=None,
        note="methods are case-sensitive tokens; not named by PROTOCOL.md",
    ),
    V("bad-target-space", b"GET /hea lth HTTP/1.1\r\n\r\n", 400, after="close"),
    V("bad-target-ctl", b"GET /he\x01alth HTTP/1.1\r\n\r\n", 400, after="close"),
    V("bad-version-garbage", b"GET /health HTTX/1.1\r\n\r\n", 400, after="close"),
    V("bad-header-no-colon", b"GET /health HTTP/1.1\r\nHost x\r\n\r\n", 400, after="close"),
    V(
        "bad-header-space-in-name",
        b"GET /health HTTP/1.1\r\nBad Header: x\r\n\r\n",
        400,
        after="close",
    ),
    V("bad-header-ctl-in-value", b"GET /health HTTP/1.1\r\nX: a\x00b\r\n\r\n", 400, after="close"),
    V(
        "bad-content-length",
        b"POST /register HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        400,
        after="close",
    ),
    V("bad-binary-junk", bytes(range(256)) * 4, 400, after="close"),
    V(
        "bad-tls-hello",
        bytes.fromhex("1603010200010001fc0303") + b"\x00" * 64 + b"\r\n\r\n",
        400,
        after="close",
        note="a complete line of garbage; without the CRLF a server may "
        "wait for the end of the line (as for any slow client)",
    ),
    # --- 501 ------------------------------------------------------------------------------
    V("version-2.0", req("GET", "/health", version="HTTP/2.0"), 501, after="close"),
    V("version-1.2", req("GET", "/health", version="HTTP/1.2"), 501, after="close"),
    V("version-3.0", req("GET", "/health", version="HTTP/3.0"), 501, after="close"),
    V("te-on-get", req("GET", "/health", {"Transfer-Encoding": "gzip"}), 501, after="close"),
    # --- 413 ------------------------------------------------------------------------------
    V("413-one-big-header", req("GET", "/health", {"X-Big": "a" * 9000}), 413, after="close"),
    V(
        "413-many-headers",
        req("GET", "/health", {f"X-H{i}": "b" * 90 for i in range(100)}),
        413,
        after="close",
    ),
    V("413-long-target", req("GET", "/health?pad=" + "c" * 9000), 413, after="close"),
    V("413-huge-head-64k", req("GET", "/health", {"X-Big": "a" * 65536}), 413, after="close"),
]

# A malformed corpus for the robustness tests: (id, bytes, how the client ends)
#   "close": send and close normally; "reset": send, then close with SO_LINGER 0 (RST);
#   "read": send and read until the server closes or goes quiet.
MALFORMED: list[tuple[str, bytes, str]] = [
    ("truncated-request-line", b"GET /heal", "close"),
    ("truncated-headers", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: b", "close"),
    ("truncated-body", b"POST /register HTTP/1.1\r\nContent-Length: 20\r\n\r\nuser=a", "close"),
    ("reset-mid-line", b"GET /work?spin_us=10 HT", "reset"),
    ("reset-mid-headers", b"GET /health HTTP/1.1\r\nHost: x\r\n", "reset"),
    ("reset-mid-body", b"POST /register HTTP/1.1\r\nContent-Length: 100\r\n\r\nuser=b", "reset"),
    ("reset-during-sleep", req("GET", "/work?sleep_us=30000&size=100000"), "reset"),
    ("reset-after-pipeline", req("GET", "/work?size=200000") * 4, "reset"),
    ("bad-method", b"\x7f\x7f\x7f /health HTTP/1.1\r\n\r\n", "read"),
    ("binary-junk", bytes(range(256)) * 16, "read"),
    ("tls-client-hello", bytes.fromhex("1603010200010001fc0303") + b"\x00" * 64, "close"),
    ("nul-bytes", b"\x00" * 4096, "close"),
    ("only-crlf", b"\r\n" * 100, "close"),
    ("huge-header", req("GET", "/health", {"X-Big": "a" * 20000}), "read"),
    ("huge-line-no-newline", b"GET /" + b"a" * 30000, "read"),
    (
        "chunked",
        b"POST /register HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nuser=\r\n",
        "read",
    ),
    (
        "body-over-64k",
        b"POST /register HTTP/1.1\r\nContent-Length: 999999\r\n\r\n" + b"u" * 1000,
        "read",
    ),
    ("version-9", b"GET /health HTTP/9.9\r\n\r\n", "read"),
    ("pipeline-then-junk", req("GET", "/health") + b"\x01\x02garbage\r\n\r\n", "read"),
    ("negative-content-length", b"POST /register HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "read"),
    (
        "double-content-length",
        b"POST /register HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nuser=",
        "read",
    ),
]

# Stalled and trickling clients, for every impl x model started with a short
# --idle-timeout-ms (test_connection.test_stalled_requests_closed_at_the_idle_timeout):
# `first` goes out at once, then `drip` every DRIP_S (b"": nothing more). PROTOCOL.md: a
# connection idle, or whose request keeps trickling in, for the idle timeout is closed.
DRIP_S = 0.1


@dataclass(frozen=True)
class Stall:
    id: str
    first: bytes
    drip: bytes


STALLS = [
    Stall("trickled-head", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ", b"a"),
    Stall(
        "trickled-body",
        b"POST /register HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\nuser=",
        b"u",
    ),
    Stall("stalled-head", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: a", b""),
]


# The Java servers on real stacks (servlet, spring) run inside Tomcat, whose HTTP parser answers a
# malformed or unsupported request itself, before any servlet (or Spring) code runs: so without
# Server-Timing, with Tomcat's own status where PROTOCOL.md names another, and Tomcat closes the
# connection. These vectors check what Tomcat does instead (statuses allowed, then the close);
# every other vector holds for them unchanged. servers/PROTOCOL.md lists the differences.
CONTAINER_MODELS = {("java", "servlet"), ("java", "spring")}
HTTP09 = 0  # in CONTAINER_ANSWERS: an HTTP/0.9 answer (a body, no head), then the close
_NO_HOST = (
    "Tomcat refuses an HTTP/1.1 request without Host (RFC 9112 3.2: a server MUST answer 400)"
)
_HEAD_SIZE = "Tomcat's limit (maxHttpHeaderSize 8 KiB) counts its own way and answers 400"
CONTAINER_ANSWERS: dict[str, tuple[tuple[int, ...], str]] = {
    "health-no-host": ((400,), _NO_HOST),
    "HEAD-health": ((400,), _NO_HOST + " (this vector sends none)"),
    "health-leading-crlf": ((200, 400), "no Host header: as health-no-host"),
    "head-8192-bytes": ((200, 400), _HEAD_SIZE),
    "head-8193-bytes": ((400, 413), _HEAD_SIZE),
    "413-one-big-header": ((400, 413), _HEAD_SIZE),
    "413-many-headers": ((400, 413), _HEAD_SIZE),
    "413-long-target": ((400, 413, 414), _HEAD_SIZE),
    "413-huge-head-64k": ((400, 413), _HEAD_SIZE),
    "version-2.0": ((501, 505), "Tomcat answers 505 HTTP Version Not Supported"),
    "version-1.2": ((400, 501, 505), "Tomcat answers 505 HTTP Version Not Supported"),
    "version-3.0": ((501, 505), "Tomcat answers 505 HTTP Version Not Supported"),
    "te-on-get": ((501,), "Tomcat answers an unknown Transfer-Encoding itself"),
    "register-body-over-64k": (
        (413,),
        "413 from the servlet, but Tomcat keeps the connection "
        "open waiting for the announced body (until the idle timeout)",
    ),
    **{
        v.id: ((400, 405, 501) if "method-" in v.id else (400,), "Tomcat's parser rejects it")
        for v in REFUSED
        if v.id.startswith("bad-")
    },
    # a request line without a version is HTTP/0.9 to Tomcat: a bare body answers it
    "bad-no-version": (
        (HTTP09,),
        "Tomcat takes a request line without a version as HTTP/0.9 and answers "
        "with a body only (no status line)",
    ),
    # a request line Tomcat cannot parse gets its 400, with a head, unless the connection went to
    # a recycled processor whose last request was HTTP/0.9 (as bad-no-version's, just before):
    # Tomcat keeps that flag and answers with the body only. Which processor takes a connection
    # depends on whether the last one was back in Tomcat's cache yet, a race
    # (test_tomcat_answers_a_bad_request_line_on_a_fresh_processor_with_a_head pins the head).
    **{
        i: (
            (400, HTTP09),
            "Tomcat's parser rejects it with a 400, or with a bare body on a processor "
            "whose last request was HTTP/0.9",
        )
        for i in ("bad-only-method", "bad-empty-request-line", "bad-method-chars")
    },
}
CONTAINER_KEEPS_OPEN = {"register-body-over-64k"}

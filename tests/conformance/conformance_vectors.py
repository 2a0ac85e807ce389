"""The conformance test vectors: request bytes -> expected status, headers, body, connection.

One table, run against every impl x model (test_vectors.py). Each vector goes out on a fresh
connection. `after`:
  "close" - the server must close the connection after the response (400/413/501, close, 1.0);
  "open"  - the connection must stay usable: a follow-up GET /health on it must get 200;
  None    - not checked.
`status` is an int, or a tuple where PROTOCOL.md leaves the choice open (`note` says why).
`body`: bytes (exact), a compiled regex (fullmatch on the text), a dict (JSON object that must
contain these items), an int N (N bytes of "x"), or None (not checked).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote

from orchestrator.run.bundled import CORPUS

Body = bytes | re.Pattern | dict | int | None


@dataclass(frozen=True)
class V:
    id: str
    raw: bytes
    status: int | tuple[int, ...]
    body: Body = None
    ctype: str | None = None  # Content-Type must start with this
    headers: dict[str, str] = field(default_factory=dict)  # name -> regex (fullmatch)
    after: str | None = None
    note: str = ""


def req(
    method: str,
    target: str,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    version: str = "HTTP/1.1",
) -> bytes:
    h = {"Host": "127.0.0.1"}
    if body or method == "POST":
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    return (
        f"{method} {target} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    ).encode("latin-1") + body


def expected_matches(kind: int, regex: str) -> int:
    """What /search must answer, counted here with Python's re over the same corpus."""
    rx = re.compile(regex)
    n = 0
    with open(CORPUS, encoding="utf-8") as f:
        for line in f:
            t, _, text = line.rstrip("\n").partition("\t")
            if t == str(kind) and rx.search(text):
                n += 1
    return n


def search(kind: int, regex: str) -> V:
    return V(
        f"search-{kind}-{regex}",
        req("GET", f"/search?type={kind}&re={quote(regex, safe='')}"),
        200,
        {"type": kind, "matches": expected_matches(kind, regex)},
        "application/json",
        after="open",
    )


TEXT = "text/plain"
OK = b"ok"


def bad(id: str, target: str, note: str = "") -> V:
    return V(id, req("GET", target), 400, ctype=None, after="close", note=note)


VECTORS: list[V] = [
    # --- /health ---------------------------------------------------------------------------
    V("health", req("GET", "/health"), 200, b"ok\n", TEXT, after="open"),
    V("health-query-ignored", req("GET", "/health?x=1"), 200, b"ok\n", TEXT, after="open"),
    V("health-no-host", b"GET /health HTTP/1.1\r\n\r\n", 200, b"ok\n", TEXT, after="open"),
    V(
        "health-bare-lf",
        b"GET /health HTTP/1.1\nHost: x\n\n",
        200,
        b"ok\n",
        TEXT,
        after="open",
        note="PROTOCOL.md: bare LF tolerated",
    ),
    V(
        "health-leading-crlf",
        b"\r\nGET /health HTTP/1.1\r\n\r\n",
        (200, 400),
        note="RFC 9112 2.2 SHOULD ignore one leading CRLF; PROTOCOL.md is silent",
    ),
    V(
        "health-get-with-body",
        req("GET", "/health", body=b"abc"),
        200,
        b"ok\n",
        TEXT,
        after="open",
        note="a body on GET is read and ignored",
    ),
    V(
        "health-http10",
        req("GET", "/health", version="HTTP/1.0"),
        200,
        b"ok\n",
        TEXT,
        after="close",
    ),
    V(
        "health-http10-keepalive",
        req("GET", "/health", {"Connection": "keep-alive"}, version="HTTP/1.0"),
        200,
        b"ok\n",
        TEXT,
        after="open",
    ),
    V(
        "health-connection-close",
        req("GET", "/health", {"Connection": "close"}),
        200,
        b"ok\n",
        TEXT,
        {"connection": "(?i)close"},
        after="close",
    ),
    V(
        "health-connection-close-case",
        req("GET", "/health", {"connection": "Close"}),
        200,
        b"ok\n",
        TEXT,
        {"connection": "(?i)close"},
        after="close",
    ),
    V(
        "head-8192-bytes",
        b"GET /health HTTP/1.1\r\nX: " + b"a" * 8163 + b"\r\n\r\n",
        200,
        b"ok\n",
        after="open",
        note="request line + headers + final CRLF = exactly 8 KiB",
    ),
    V(
        "head-8193-bytes",
        b"GET /health HTTP/1.1\r\nX: " + b"a" * 8164 + b"\r\n\r\n",
        413,
        after="close",
    ),
    V(
        "HEAD-health",
        b"HEAD /health HTTP/1.1\r\n\r\n",
        (200, 405),
        b"",
        after="open",
        note="PROTOCOL.md lists GET only; either way a HEAD response carries no body",
    ),
    V(
        "health-big-but-legal-head",
        req("GET", "/health", {"X-Pad": "a" * 7000}),
        200,
        b"ok\n",
        TEXT,
        after="open",
    ),
    # --- /work ----------------------------------------------------------------------------
    V("work-default", req("GET", "/work"), 200, OK, TEXT, after="open"),
    V("work-size-0", req("GET", "/work?size=0"), 200, b"", TEXT, after="open"),
    V("work-size-1", req("GET", "/work?size=1"), 200, 1, TEXT, after="open"),
    V("work-size-100k", req("GET", "/work?size=100000"), 200, 100000, TEXT, after="open"),
    V("work-size-16MiB", req("GET", "/work?size=16777216"), 200, 16777216, TEXT, after="open"),
    V("work-spin", req("GET", "/work?spin_us=2000"), 200, OK, TEXT, after="open"),
    V("work-sleep", req("GET", "/work?sleep_us=2000"), 200, OK, TEXT, after="open"),
    V(
        "work-all-params",
        req("GET", "/work?spin_us=100&sleep_us=100&dist=fixed&bucket=7&size=3"),
        200,
        3,
        TEXT,
        after="open",
    ),
    V(
        "work-dist-exp",
        req("GET", "/work?spin_us=100&sleep_us=100&dist=exp"),
        200,
        OK,
        TEXT,
        after="open",
    ),
    V(
        "work-dist-uniform",
        req("GET", "/work?sleep_us=100&dist=uniform:0.5:1.5"),
        200,
        OK,
        TEXT,
        after="open",
    ),
    V(
        "work-dist-uniform-int",
        req("GET", "/work?sleep_us=100&dist=uniform:0:2"),
        200,
        OK,
        TEXT,
        after="open",
    ),
    V(
        "work-dist-uniform-equal",
        req("GET", "/work?sleep_us=100&dist=uniform:1:1"),
        200,
        OK,
        TEXT,
        after="open",
    ),
    V(
        "work-dist-uniform-exponent",
        req("GET", "/work?sleep_us=100&dist=uniform:1e0:2"),
        200,
        OK,
        TEXT,
        after="open",
        note="'A, B real': 1e0 is a real (strtod, parseDouble agree)",
    ),
    V("work-bucket-big", req("GET", "/work?bucket=4294967297"), 200, OK, TEXT, after="open"),
    V(
        "work-max-spin-zero-factor",
        req("GET", "/work?spin_us=10000000&dist=uniform:0:0"),
        200,
        OK,
        TEXT,
        after="open",
        note="the 10 s limit itself is legal; U[0,0] makes it 0",
    ),
    bad("work-spin-nonint", "/work?spin_us=abc"),
    bad("work-spin-negative", "/work?spin_us=-1"),
    bad("work-spin-fraction", "/work?spin_us=1.5"),
    bad("work-spin-empty", "/work?spin_us=", note="empty is not a decimal integer"),
    bad("work-spin-over", "/work?spin_us=10000001"),
    bad("work-sleep-over", "/work?sleep_us=10000001"),
    bad("work-sleep-nonint", "/work?sleep_us=1e3"),
    bad("work-size-over", "/work?size=16777217"),
    bad("work-size-negative", "/work?size=-5"),
    bad("work-bucket-negative", "/work?bucket=-1"),
    bad("work-bucket-nonint", "/work?bucket=x"),
    bad("work-dist-unknown", "/work?dist=normal"),
    bad("work-dist-uniform-reversed", "/work?dist=uniform:2:1"),
    bad("work-dist-uniform-negative", "/work?dist=uniform:-1:1"),
    bad("work-dist-uniform-one-arg", "/work?dist=uniform:1"),
    bad("work-dist-uniform-nonreal", "/work?dist=uniform:a:b"),
    # --- /search --------------------------------------------------------------------------
    search(1, "alpha"),
    search(2, "drops [0-9]+ headers"),
    search(3, "^The (kernel|server)"),
    search(4, "s\\.$"),
    search(1, "qu?eue.*(apex|grid)"),
    search(2, "zzzz-no-match"),
    search(3, "[0-9][0-9][0-9][0-9] "),
    search(4, "a|b"),
    V(
        "search-plus-is-space",
        req("GET", "/search?type=2&re=drops+7"),
        200,
        {"type": 2, "matches": expected_matches(2, "drops 7")},
        "application/json",
        after="open",
        note="the query is form-decoded: '+' is a space (a regex '+' is sent as %2B)",
    ),
    bad("search-type-0", "/search?type=0&re=a"),
    bad("search-type-5", "/search?type=5&re=a"),
    bad("search-type-nonint", "/search?type=x&re=a"),
    bad("search-type-missing", "/search?re=a"),
    bad("search-bad-regex", "/search?type=1&re=" + quote("(ab", safe="")),
    bad("search-bad-regex-bracket", "/search?type=1&re=" + quote("[ab", safe="")),
    # --- /register ------------------------------------------------------------------------
    V("register-missing-user", req("POST", "/register", body=b"pass=x"), 400, after="close"),
    V("register-empty-user", req("POST", "/register", body=b"user=&pass=x"), 400, after="close"),
    V(
        "register-no-body",
        req("POST", "/register"),
        400,
        after="close",
        note="no body: user missing",
    ),
    V(
        "register-user-too-long",
        req("POST", "/register", body=b"user=" + b"u" * 257 + b"&pass=x"),
        400,
        after="close",
        note="U over 256 bytes is a bad parameter value",
    ),
    V(
        "register-chunked",
        b"POST /register HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"\r\n8\r\nuser=abc\r\n0\r\n\r\n",
        501,
        after="close",
    ),
    V(
        "register-body-over-64k",
        b"POST /register HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\n\r\n",
        413,
        after="close",
        note="413 decided from Content-Length, body not sent",
    ),
    # --- /stats ---------------------------------------------------------------------------
    V("stats", req("GET", "/stats"), 200, {}, "application/json", after="open"),
    # --- 404 / 405 ------------------------------------------------------------------------
    V("404", req("GET", "/nope"), 404, None, None, after="open"),
    V("404-root", req("GET", "/"), 404, after="open"),
    V("404-trailing-slash", req("GET", "/health/"), 404, after="open"),
    V("404-prefix", req("GET", "/healthz"), 404, after="open"),
    V("404-post", req("POST", "/nope", body=b"a=b"), 404, after="open"),
    V(
        "405-post-health",
        req("POST", "/health", body=b"hello"),
        405,
        headers={"allow": ".*GET.*"},
        after="open",
        note="the body must be consumed before the follow-up",
    ),
    V("405-put-work", req("PUT", "/work"), 405, headers={"allow": ".*GET.*"}, after="open"),
    V("405-delete-stats", req("DELETE", "/stats"), 405, headers={"allow": ".*GET.*"}, after="open"),
    V(
        "405-post-search",
        req("POST", "/search?type=1&re=a", body=b"x=y"),
        405,
        headers={"allow": ".*GET.*"},
        after="open",
    ),
    V(
        "405-get-register",
        req("GET", "/register"),
        405,
        headers={"allow": ".*POST.*"},
        after="open",
    ),
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
        for v in VECTORS
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

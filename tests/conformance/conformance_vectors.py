"""The conformance test vectors: request bytes -> expected status, headers, body, connection.

Here what each endpoint answers, its parameters' 400s and the 404/405 of routing (VECTORS);
the requests no server can parse, the bytes a server must survive and the stalled clients are
malformed_vectors.py's. Both tables run against every impl x model (test_vectors.py). Each vector goes out on a fresh
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
]

"""Reading requests off one connection (servers/PROTOCOL.md), for both Python models.

`Session` is a sans-IO HTTP/1.1 request reader on httptools: feed it bytes, get back complete
`Request`s and `Reject`s (a parse error answered with 400/413/501 and a close), in order.
Which paths exist and the method each takes (ALLOW) are named here: the reader answers a
request line with a method httptools does not know by them, and protocol.handle() routes by
them.
"""

from __future__ import annotations

import re
import time

import httptools

MAX_HEAD = 8 * 1024
MAX_BODY = 64 * 1024

_now = time.perf_counter_ns
_TOKEN_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+) ([!-~]+) HTTP/1\.[01]\r?\n")


ALLOW = {
    "/health": "GET",
    "/work": "GET",
    "/search": "GET",
    "/stats": "GET",
    "/register": "POST",
    "/db": "GET",
}


class Request:
    __slots__ = ("method", "target", "headers", "body", "keep_alive", "http10", "t_done")

    def __init__(self, method, target, headers, body, keep_alive, http10, t_done):
        self.method, self.target, self.headers, self.body = method, target, headers, body
        self.keep_alive, self.http10, self.t_done = keep_alive, http10, t_done


class Reject:
    """A request that could not be parsed: answered with `status` and the connection closed."""

    __slots__ = ("status", "why", "t_done", "extra")

    def __init__(self, status: int, why: str, extra: str = ""):
        self.status, self.why, self.t_done, self.extra = status, why, _now(), extra


class _Abort(Exception):
    pass


class Session:
    """Incremental request reader for one connection."""

    def __init__(self):
        self.parser = httptools.HttpRequestParser(self)
        # bare LF line endings are tolerated (PROTOCOL.md)
        self.parser.set_dangerous_leniencies(
            lenient_optional_cr_before_lf=True, lenient_optional_lf_after_cr=True
        )
        self.items: list = []
        self.done = False  # a close-ending item was produced: ignore the rest
        self.abort: tuple[int, str] | None = None
        self.in_head = False
        self.in_message = False
        self.raw_head = 0
        self.window = b""
        # perf_counter_ns of the feed that brought the first byte of the request still being
        # received, or None: how long a slowloris client has been trickling its request in
        self.request_since_ns: int | None = None
        self._feed_ns = 0
        self._reset()

    def _reset(self):
        self.url = []
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = []
        self.head_len = 0

    # -- httptools callbacks --
    def on_message_begin(self):
        self._reset()
        self.in_head = self.in_message = True
        self.raw_head = 0
        self.request_since_ns = self._feed_ns

    def _grow(self, n: int):
        self.head_len += n
        if self.head_len > MAX_HEAD:
            self._fail(413, "request line and headers over 8 KiB")

    def _fail(self, status: int, why: str):
        self.abort = (status, why)
        raise _Abort(why)

    def on_url(self, url: bytes):
        self.url.append(url)
        self._grow(len(url))

    def on_header(self, name: bytes, value: bytes):
        self.headers.append((name.lower(), value))
        self._grow(len(name) + len(value) + 4)

    def on_headers_complete(self):
        self.in_head = False
        self._grow(len(self.parser.get_method()) + 14)  # " ", " HTTP/x.y\r\n", "\r\n"
        version = self.parser.get_http_version()
        if version == "0.9":
            # llhttp reads a request line without a version as HTTP/0.9
            if b" HTTP/0.9" in self.window:
                self._fail(501, "HTTP version not supported")
            self._fail(400, "no HTTP version")
        if version not in ("1.0", "1.1"):
            self._fail(501, "HTTP version not supported")
        for name, value in self.headers:
            if name == b"transfer-encoding":
                self._fail(501, "Transfer-Encoding on a request is not supported")
            if (
                name == b"content-length"
                and value.strip().isdigit()
                and int(value.strip()) > MAX_BODY
            ):
                self._fail(413, "body over 64 KiB")

    def on_body(self, body: bytes):
        self.body.append(body)

    def on_message_complete(self):
        self.in_message = False
        self.request_since_ns = None
        keep = self.parser.should_keep_alive()
        self.items.append(
            Request(
                self.parser.get_method().decode("latin-1"),
                b"".join(self.url).decode("latin-1"),
                self.headers,
                b"".join(self.body),
                keep,
                self.parser.get_http_version() == "1.0",
                _now(),
            )
        )
        if not keep:
            self.done = True
            raise _Abort("close")  # stop parsing: nothing after this is answered

    # -- driver --
    def feed(self, data: bytes) -> list:
        if self.done:
            return []
        fresh = not self.in_message
        self._feed_ns = _now()
        if self.in_head:
            self.raw_head += len(data)
        self.window = self.window[-16:] + data
        self.items = []
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self.items and isinstance(self.items[-1], Request):
                self.items[-1].keep_alive = False
            self.done = True
        except httptools.HttpParserInvalidMethodError:
            # llhttp knows only registered methods. A well-formed request line with another
            # token method gets what an unknown method on that path gets (405 or 404), but the
            # rest of the request cannot be parsed, so the connection closes.
            m = _TOKEN_LINE.match(data) if fresh and not self.items else None
            if m:
                path = m.group(2).decode("latin-1").partition("?")[0]
                allow = ALLOW.get(_origin_path(path))
                self.items.append(
                    Reject(405, "method not allowed", f"Allow: {allow}\r\n")
                    if allow
                    else Reject(404, "not found")
                )
            else:
                self.items.append(Reject(400, "malformed request: invalid method"))
            self.done = True
        except httptools.HttpParserError as e:
            if not self.done:
                status, why = self.abort or (
                    501 if "Invalid HTTP version" in str(e) else 400,
                    f"malformed request: {e}",
                )
                self.items.append(Reject(status, why))
                self.done = True
        if not self.done and self.in_head and self.raw_head > MAX_HEAD:
            self.items.append(Reject(413, "request line and headers over 8 KiB"))
            self.done = True
        return self.items


def _origin_path(path: str) -> str:
    """The path of an origin-form or absolute-form (http://host/path) request target."""
    if path.startswith(("http://", "https://")):
        rest = path.split("//", 1)[1]
        return "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    return path

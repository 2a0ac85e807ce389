"""One HTTP/1.1 client connection: an asyncio.Protocol parsing responses with httptools.

The hot path (write a request, parse its response, stamp the row) allocates nothing per
request beyond what httptools does, and never raises: failures are written as error classes
into the row and reported to the worker. httptools (llhttp) handles Content-Length, chunked
transfer encoding and close-delimited bodies.
"""

from __future__ import annotations

import asyncio
import time

import httptools

from .records import PARSE, RESET, Chunk

_now = time.perf_counter_ns
_NAN = float("nan")
MAX_HEAD_BYTES = 1 << 20  # a response head longer than this is a parse error
RECHECK = 16  # the full parser reads 1 response in RECHECK (see Connection)


def parse_server_timing(value: bytes) -> tuple[float, float, float]:
    """(svc_ms, queue_ms, db_ms) from a Server-Timing header value; NaN for a missing entry
    (`db` only comes with /db responses: the part of svc spent in the database)."""
    svc = queue = db = float("nan")
    for part in value.split(b","):
        name, _, params = part.strip().partition(b";")
        for p in params.split(b";"):
            k, _, v = p.strip().partition(b"=")
            if k == b"dur":
                try:
                    dur = float(v)
                except ValueError:
                    break
                if name == b"svc":
                    svc = dur
                elif name == b"queue":
                    queue = dur
                elif name == b"db":
                    db = dur
    return svc, queue, db


def scan_head(head: bytes, need_framing: bool) -> tuple[bool, float, float, float]:
    """(framed, svc_ms, queue_ms, db_ms) from the raw bytes of a response head.

    Called for the responses the full parser reads, once llhttp has accepted the head,
    instead of a Python callback per header line (about a microsecond per response). `framed`: the
    head declares Content-Length or Transfer-Encoding; only looked for when need_framing
    (a response that may end at the peer's FIN). Several Server-Timing lines are joined.
    """
    low = head.lower()
    end = low.find(b"\r\n\r\n")
    if end < 0:
        end = len(low)
    framed = need_framing and (
        low.find(b"\ncontent-length", 0, end) >= 0 or low.find(b"\ntransfer-encoding", 0, end) >= 0
    )
    svc = queue = db = _NAN
    at = low.find(b"\nserver-timing", 0, end)
    if at >= 0:
        values = []
        while at >= 0:
            colon = head.find(b":", at, end)
            eol = head.find(b"\n", at + 1, end)
            stop = end if eol < 0 else eol
            if 0 <= colon < stop:
                values.append(head[colon + 1 : stop].strip())
            at = low.find(b"\nserver-timing", at + 1, end)
        svc, queue, db = parse_server_timing(b",".join(values))
    return framed, svc, queue, db


class _MessageEnd:
    """Callbacks of the lean parser: the end of a message, nothing per header."""

    __slots__ = ("on_message_complete",)

    def __init__(self, on_message_complete) -> None:
        self.on_message_complete = on_message_complete


class _HeadProbe:
    """Callbacks that only note whether a head was complete (see Connection._lean_eof)."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False

    def on_headers_complete(self) -> None:
        self.done = True


class Connection(asyncio.Protocol):
    """A connection that carries one request at a time.

    (`chunk`, `row`) locate the request in flight; row == -1 when idle. The worker owns
    scheduling: it calls `send(chunk, row, request)`; the connection calls
    worker.on_done(self) after each complete response, worker.on_failed(self) when a request
    ends in an error, and worker.on_lost(self) when the transport closes.

    Response heads are not delivered header by header (httptools would allocate two bytes
    objects and make a Python call per line). The `full` parser reports the end of the head,
    which is then scanned once for Server-Timing and, when the body may run to the FIN, for
    framing. It parses every response on a connection that has carried Server-Timing and
    one in RECHECK on others; the rest go through the `lean` parser, which reports only the
    end of the message: on a keep-alive connection that is all there is to know.

    Closed-loop keep-alive load with no think time (the worker's `fast` flag) never leaves
    this class: on_message_complete records the row and writes the next request itself.
    """

    __slots__ = (
        "worker",
        "ident",
        "transport",
        "parser",
        "full",
        "lean",
        "chunk",
        "row",
        "nbytes",
        "open",
        "headers_done",
        "framed",
        "first_ns",
        "head",
        "skip",
        "timed",
        "answered",
    )

    def __init__(self, worker, ident: int) -> None:
        self.worker = worker
        self.ident = ident
        self.transport: asyncio.Transport | None = None
        self.full = httptools.HttpResponseParser(self)
        self.lean = httptools.HttpResponseParser(_MessageEnd(self.on_message_complete))
        self.parser = self.full  # the parser of the response in flight
        self.chunk: Chunk | None = None
        self.row = -1
        self.nbytes = 0
        self.open = False
        self.headers_done = False  # the head has been parsed (or is not followed: lean)
        self.framed = False  # the response declared Content-Length or chunked
        self.first_ns = 0  # first byte of the response in flight (perf_counter_ns)
        self.head = b""  # bytes of the response in flight up to its head's end
        self.skip = 0  # responses to go before the full parser's next turn
        self.timed = False  # a response on this connection carried Server-Timing
        self.answered = False  # a response ended within the read being parsed

    # --- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.open = True

    def data_received(self, data: bytes) -> None:
        self.nbytes += len(data)
        if not self.first_ns:  # the first bytes of a response (send() resets it)
            self.first_ns = _now()
            self.head = data
        elif not self.headers_done:  # a head split over several reads
            self.head += data
        self.answered = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._fail(PARSE)
            return
        if self.first_ns and not self.headers_done and len(self.head) > MAX_HEAD_BYTES:
            self._fail(PARSE)  # a response in flight whose head has not ended by now

    def eof_received(self):
        # A response with neither Content-Length nor chunked encoding ends at the peer's FIN.
        self.answered = False
        if self.row >= 0:
            if self.parser is self.lean:
                self._lean_eof()
            elif self.headers_done and not self.framed:
                self.on_message_complete()
        return False

    def _lean_eof(self) -> None:
        """The FIN came in the middle of a response read by the lean parser, which follows
        no headers: parse the response's first read again to learn whether its head was
        complete and its body runs to the FIN (an answer) or was cut short (a reset, left to
        connection_lost). A head longer than one read counts as cut short."""
        probe = _HeadProbe()
        try:
            httptools.HttpResponseParser(probe).feed_data(self.head)
        except httptools.HttpParserError:
            return
        if probe.done and not scan_head(self.head, True)[0]:
            self.on_message_complete()

    def connection_lost(self, exc) -> None:
        self.open = False
        self._end(RESET)
        self.worker.on_lost(self)

    # --- httptools callbacks ----------------------------------------------------------
    def on_headers_complete(self) -> None:
        """The full parser's head: Server-Timing, and framing when the body may end at FIN
        (a keep-alive response is framed: llhttp says no to keep-alive otherwise)."""
        self.headers_done = True
        self.skip = RECHECK - 1
        keep = self.parser.should_keep_alive()
        framed, svc, queue, db = scan_head(self.head, not keep)
        self.framed = keep or framed
        row = self.row
        if svc == svc or queue == queue:  # NaN != NaN: none was sent
            self.timed = True
            if row >= 0:
                self.chunk.svc_ms[row] = svc
                self.chunk.queue_ms[row] = queue
                self.chunk.db_ms[row] = db

    def on_message_complete(self) -> None:
        row = self.row
        if row < 0:
            return
        if self.answered:
            # A second response in one read: the server wrote it before the request it would
            # answer was sent (one request at a time), so the stream is out of step. Counted
            # as a parse error, never as that request's answer (with no status: the parser
            # that read it is not the one the request was given).
            self._fail(PARSE)
            return
        self.answered = True
        self.row = -1
        c = self.chunk
        now = _now()
        parser = self.parser
        c.first_byte_ns[row] = self.first_ns
        c.done_ns[row] = now
        c.status[row] = parser.get_status_code()
        c.nbytes[row] = self.nbytes
        c.final += 1
        w = self.worker
        if not parser.should_keep_alive():
            self.open = False
            self.transport.close()
        elif w.fast:
            # Closed loop without think time: the next request is intended now. This is
            # Records.new and send() inlined: the per-request path at full speed.
            rec = w.rec
            c = rec.chunk
            i = c.n
            if i < c.cap and rec.total < w.max_requests:
                c.intended_ns[i] = now
                c.n = i + 1
                rec.total += 1
                self.chunk = c
                self.row = i
                self.nbytes = self.first_ns = 0
                if self.skip and not self.timed:  # _next_parser(), inlined
                    self.skip -= 1
                    self.parser = self.lean
                    self.headers_done = True
                else:
                    self.parser = self.full
                    self.headers_done = self.framed = False
                c.conn[i] = self.ident
                nxt = w.next_inline  # a mix, a replay or {seq}: its bytes (and request index)
                request = w.request if nxt is None else nxt(c, i)
                c.sent_ns[i] = _now()
                self.transport.write(request)
                return
        w.on_done(self)

    # --- used by the worker -----------------------------------------------------------
    def send(self, chunk: Chunk, row: int, request: bytes) -> None:
        self.chunk = chunk
        self.row = row
        self.nbytes = self.first_ns = 0
        self.head = b""
        self._next_parser()
        chunk.sent_ns[row] = _now()
        chunk.conn[row] = self.ident
        self.transport.write(request)

    def _next_parser(self) -> None:
        """Pick the parser for the next response (see the class docstring)."""
        if self.skip and not self.timed:
            self.skip -= 1
            self.parser = self.lean
            self.headers_done = True
        else:
            self.parser = self.full
            self.headers_done = self.framed = False

    def abort(self, error: int) -> None:
        """End the request in flight with `error` and drop the connection."""
        self._fail(error)

    def _fail(self, error: int) -> None:
        self._end(error)
        self.open = False
        if self.transport is not None:
            self.transport.abort()

    def _end(self, error: int) -> None:
        """End the request in flight (if any) with an error class and tell the worker."""
        row = self.row
        if row >= 0:
            self.row = -1
            self.chunk.first_byte_ns[row] = self.first_ns
            self.chunk.end(row, error, _now())
            self.worker.on_failed(self)


class TlsConnection(Connection):
    """A Connection over TLS (the worker picks this class once, at connect time).

    `handshake_ms` is the handshake of this connection, written into the row of the first
    request it carries (then NaN); `sessions` (tls.Sessions) is told when it closes, to keep
    its session ticket for the connections that follow.
    """

    __slots__ = ("handshake_ms", "sessions", "ssl_object")

    def __init__(self, worker, ident: int, sessions) -> None:
        super().__init__(worker, ident)
        self.sessions = sessions
        self.handshake_ms = _NAN
        self.ssl_object = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.ssl_object = transport.get_extra_info("ssl_object")

    def connection_lost(self, exc) -> None:
        self.sessions.remember(self.ssl_object)
        super().connection_lost(exc)

    def send(self, chunk: Chunk, row: int, request: bytes) -> None:
        ms = self.handshake_ms
        if ms == ms:  # the first request on this connection
            chunk.tls_handshake_ms[row] = ms
            self.handshake_ms = _NAN
        super().send(chunk, row, request)

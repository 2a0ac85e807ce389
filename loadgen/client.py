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


def parse_server_timing(value: bytes) -> tuple[float, float]:
    """(svc_ms, queue_ms) from a Server-Timing header value; NaN for a missing entry."""
    svc = queue = float("nan")
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
    return svc, queue


class Connection(asyncio.Protocol):
    """A connection that carries one request at a time.

    (`chunk`, `row`) locate the request in flight; row == -1 when idle. The worker owns
    scheduling: it calls `send(chunk, row, request)`; the connection calls
    worker.on_done(self) after each complete response, worker.on_failed(self) when a request
    ends in an error, and worker.on_lost(self) when the transport closes.
    """

    __slots__ = ("worker", "ident", "transport", "parser", "chunk", "row", "nbytes", "open",
                 "headers_done", "framed")

    def __init__(self, worker, ident: int) -> None:
        self.worker = worker
        self.ident = ident
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.chunk: Chunk | None = None
        self.row = -1
        self.nbytes = 0
        self.open = False
        self.headers_done = False
        self.framed = False     # the response declared Content-Length or chunked encoding

    # --- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.open = True

    def data_received(self, data: bytes) -> None:
        row = self.row
        if row >= 0 and self.chunk.first_byte[row] == 0:
            self.chunk.first_byte[row] = _now()
        self.nbytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._fail(PARSE)

    def eof_received(self):
        # A response with neither Content-Length nor chunked encoding ends at the peer's FIN.
        if self.row >= 0 and self.headers_done and not self.framed:
            self.on_message_complete()
        return False

    def connection_lost(self, exc) -> None:
        self.open = False
        self._end(RESET)
        self.worker.on_lost(self)

    # --- httptools callbacks ----------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        n = len(name)
        if n == 13 and self.row >= 0 and name.lower() == b"server-timing":
            svc, queue = parse_server_timing(value)
            self.chunk.svc[self.row] = svc
            self.chunk.queue[self.row] = queue
        elif (n == 14 or n == 17) and name.lower() in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_message_complete(self) -> None:
        row = self.row
        if row < 0:
            return
        self.row = -1
        c = self.chunk
        c.done[row] = _now()
        c.status[row] = self.parser.get_status_code()
        c.nbytes[row] = self.nbytes
        c.final += 1
        if not self.parser.should_keep_alive():
            self.open = False
            self.transport.close()
        self.worker.on_done(self)

    # --- used by the worker -----------------------------------------------------------
    def send(self, chunk: Chunk, row: int, request: bytes) -> None:
        self.chunk = chunk
        self.row = row
        self.nbytes = 0
        self.headers_done = self.framed = False
        chunk.sent[row] = _now()
        chunk.conn[row] = self.ident
        self.transport.write(request)

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
            self.chunk.end(row, error, _now())
            self.worker.on_failed(self)

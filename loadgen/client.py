"""One HTTP/1.1 client connection: an asyncio.Protocol parsing responses with httptools.

The hot path (write a request, parse its response, stamp the row) allocates nothing per
request beyond what httptools does, and never raises: failures are written as error classes
into the worker's Records and reported to the worker through `on_done` / `on_lost`.
"""
from __future__ import annotations

import asyncio
import time

import httptools

from .records import PARSE, RESET, Records

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
    """A keep-alive connection that carries one request at a time.

    `row` is the Records index of the request in flight, or -1 when idle. The worker owns
    scheduling: it calls `send(row)`; the connection calls worker.on_done(self) after each
    complete response, worker.on_failed(self) when a request ends in an error, and
    worker.on_lost(self) when the transport closes.
    """

    __slots__ = ("worker", "rec", "ident", "transport", "parser", "row", "nbytes", "request",
                 "open", "status")

    def __init__(self, worker, rec: Records, ident: int, request: bytes) -> None:
        self.worker = worker
        self.rec = rec
        self.ident = ident
        self.request = request
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.row = -1
        self.nbytes = 0
        self.open = False

    # --- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.open = True

    def data_received(self, data: bytes) -> None:
        row = self.row
        if row >= 0 and self.rec.first_byte[row] == 0:
            self.rec.first_byte[row] = _now()
        self.nbytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(PARSE)
        except httptools.HttpParserError:
            self._fail(PARSE)

    def connection_lost(self, exc) -> None:
        self.open = False
        self._end(RESET)
        self.worker.on_lost(self)

    # --- httptools callbacks ----------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) == 13 and name.lower() == b"server-timing" and self.row >= 0:
            svc, queue = parse_server_timing(value)
            self.rec.svc[self.row] = svc
            self.rec.queue[self.row] = queue

    def on_message_complete(self) -> None:
        row = self.row
        if row < 0:
            return
        self.row = -1
        rec = self.rec
        rec.done[row] = _now()
        rec.status[row] = self.parser.get_status_code()
        rec.nbytes[row] = self.nbytes
        keep = self.parser.should_keep_alive()
        if not keep:
            self.open = False
            self.transport.close()
        self.worker.on_done(self)

    # --- used by the worker -----------------------------------------------------------
    def send(self, row: int) -> None:
        self.row = row
        self.nbytes = 0
        self.rec.sent[row] = _now()
        self.rec.conn[row] = self.ident
        self.transport.write(self.request)

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
            self.rec.error[row] = error
            self.rec.done[row] = _now()
            self.worker.on_failed(self)

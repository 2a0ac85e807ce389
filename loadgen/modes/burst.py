"""Burst: `connections` non-blocking connects started back to back at each release instant
(like threads on a countdown latch), one request each; every attempt ends as an answer or as
refused, reset or timeout.
"""

from __future__ import annotations

import errno
import socket
import time

import numpy as np

from ..client import Connection
from ..records import CONNECT, RESET, UNFINISHED, Chunk
from ..spec import LoadSpec
from ..worker import Worker
from .base import NO_SCHEDULE, Mode

_now = time.perf_counter_ns


class BurstMode(Mode):
    name = "burst"

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        self.keepalive = False  # every attempt is a new connection, closed after its answer
        # sockets whose non-blocking connect is under way: fd -> (sock, chunk, row)
        self.connecting: dict[int, tuple[socket.socket, Chunk, int]] = {}
        self.releases: list[list[tuple[Chunk, int]]] = []  # the rows of each release

    def start(self, worker: Worker) -> None:
        spec = self.spec
        for b in range(spec.bursts):
            worker.at(
                worker.measure_start_ns + int(b * spec.burst_interval_s * 1e9),
                self._release,
                worker,
            )

    def on_answer(self, worker: Worker, conn: Connection) -> None:
        worker.drop(conn)

    def expire(self, worker: Worker, limit_ns: int, error: int) -> None:
        for fd, (sock, chunk, row) in list(self.connecting.items()):
            if chunk.sent_ns[row] < limit_ns:
                del self.connecting[fd]
                worker.loop.remove_writer(fd)
                sock.close()
                worker.unsent(chunk, row)
                chunk.end(row, error, _now())
                worker.in_flight -= 1

    def summary_extra(self, worker: Worker) -> dict:
        spreads = []
        for rows in self.releases:
            sent = np.array([c.sent_ns[r] for c, r in rows], dtype=np.int64)
            sent = sent[sent > 0]
            if sent.size:
                spreads.append((sent.max() - sent.min()) / 1e6)
        return {
            **NO_SCHEDULE,
            "release_spread_ms_max": max(spreads, default=0.0),
            "release_spread_ms_mean": float(np.mean(spreads)) if spreads else 0.0,
        }

    # --- releases ------------------------------------------------------------------------
    def _release(self, worker: Worker) -> None:
        """Start `connections` non-blocking connects back to back; each sends one request
        once connected. sent_ns is the connect call."""
        if not worker.issuing:
            return
        t_release = _now()
        rows = [worker.rec.new(t_release) for _ in range(self.spec.connections)]
        worker.in_flight += len(rows)
        for chunk, row in rows:
            try:
                sock = worker.new_socket()
            except OSError:  # out of descriptors: this attempt fails at once
                chunk.sent_ns[row] = _now()
                worker.unsent(chunk, row)
                chunk.end(row, CONNECT, _now())
                worker.in_flight -= 1
                continue
            chunk.sent_ns[row] = _now()
            code = sock.connect_ex(worker.addr)
            if code not in (0, errno.EINPROGRESS):
                sock.close()
                worker.unsent(chunk, row)
                chunk.end(row, CONNECT if code == errno.ECONNREFUSED else RESET, _now())
                worker.in_flight -= 1
                continue
            self.connecting[sock.fileno()] = (sock, chunk, row)
            worker.loop.add_writer(sock.fileno(), self._connected, worker, sock.fileno())
        self.releases.append(rows)
        worker.maybe_finish()

    def _connected(self, worker: Worker, fd: int) -> None:
        entry = self.connecting.pop(fd, None)
        worker.loop.remove_writer(fd)
        if entry is None:
            return
        sock, chunk, row = entry
        code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            sock.close()
            worker.unsent(chunk, row)
            chunk.end(row, CONNECT if code == errno.ECONNREFUSED else RESET, _now())
            worker.on_failed(None)
            return
        worker.loop.create_task(self._send_on(worker, sock, chunk, row))

    async def _send_on(self, worker: Worker, sock: socket.socket, chunk: Chunk, row: int) -> None:
        conn = await worker.open_connection(sock)
        if conn is None or worker.finishing:
            worker.unsent(chunk, row)
            chunk.end(row, RESET if conn is None else UNFINISHED, _now())
            if conn is not None:
                conn.transport.close()
            worker.on_failed(None)
            return
        t0 = chunk.sent_ns[row]
        conn.send(chunk, row, worker.request_for(chunk, row))
        chunk.sent_ns[row] = t0

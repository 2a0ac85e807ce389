"""Burst releases for Worker: `connections` non-blocking connects started back to back at
each release instant (like threads on a countdown latch), one request each; every attempt
ends as an answer or as refused, reset or timeout.

A mixin: it uses the Worker's state (spec, rec, loop, connecting, releases, in_flight, ...)
and its helpers (_at, _socket, _open, _request, on_failed, _maybe_finish); see worker.py.
"""
from __future__ import annotations

import errno
import socket
import time

from .records import CONNECT, RESET, UNFINISHED, Chunk

_now = time.perf_counter_ns


class BurstMode:
    def _plan_bursts(self) -> None:
        spec = self.spec
        for b in range(spec.bursts):
            self._at(self.measure_start_ns + int(b * spec.burst_interval_s * 1e9), self._release)

    def _release(self) -> None:
        """Start `connections` non-blocking connects back to back, like threads waiting on a
        countdown latch; each sends one request once connected. sent_ns is the connect call."""
        if not self.running:
            return
        t_release = _now()
        rows = [self.rec.new(t_release) for _ in range(self.spec.connections)]
        self.in_flight += len(rows)
        for chunk, row in rows:
            try:
                sock = self._socket()
            except OSError:           # out of descriptors: this attempt fails at once
                chunk.sent[row] = _now()
                chunk.end(row, CONNECT, _now())
                self.in_flight -= 1
                continue
            chunk.sent[row] = _now()
            code = sock.connect_ex(self.addr)
            if code not in (0, errno.EINPROGRESS):
                sock.close()
                chunk.end(row, CONNECT if code == errno.ECONNREFUSED else RESET, _now())
                self.in_flight -= 1
                continue
            self.connecting[sock.fileno()] = (sock, chunk, row)
            self.loop.add_writer(sock.fileno(), self._connected, sock.fileno())
        self.releases.append(rows)
        self._maybe_finish()

    def _connected(self, fd: int) -> None:
        entry = self.connecting.pop(fd, None)
        self.loop.remove_writer(fd)
        if entry is None:
            return
        sock, chunk, row = entry
        code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            sock.close()
            chunk.end(row, CONNECT if code == errno.ECONNREFUSED else RESET, _now())
            self.on_failed(None)
            return
        self.loop.create_task(self._send_on(sock, chunk, row))

    async def _send_on(self, sock: socket.socket, chunk: Chunk, row: int) -> None:
        conn = await self._open(sock)
        if conn is None or self.finishing:
            chunk.end(row, RESET if conn is None else UNFINISHED, _now())
            if conn is not None:
                conn.transport.close()
            self.on_failed(None)
            return
        t0 = chunk.sent[row]
        conn.send(chunk, row, self._request())
        chunk.sent[row] = t0

    def _expire_connects(self, limit_ns: int, error: int) -> None:
        for fd, (sock, chunk, row) in list(self.connecting.items()):
            if chunk.sent[row] < limit_ns:
                del self.connecting[fd]
                self.loop.remove_writer(fd)
                sock.close()
                chunk.end(row, error, _now())
                self.in_flight -= 1

"""Closed loop: each connection sends its next request once the answer to the last one is in
(after the think time, if any), so the server's speed sets the rate.

With keep-alive and no think time, the Connection sends the next request itself
(Connection.on_message_complete: the fast path; a mix, a replay or {seq} take their next
request's bytes from the worker's `next_inline`), and this mode only sees what falls
off it: a full chunk, the request bound, a connection that closed.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from ..client import Connection
from ..records import CONNECT
from ..spec import LoadSpec
from ..worker import Worker
from .base import RECONNECT_PAUSE_S, Mode

_now = time.perf_counter_ns


class ClosedMode(Mode):
    name = "closed"

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        self.sends_next_inline = self.keepalive and spec.think_time_s <= 0
        self.think_rng = np.random.default_rng(spec.seed)  # exp think times replay too

    def start(self, worker: Worker) -> None:
        worker.at(worker.start_ns, self._start, worker)

    def on_answer(self, worker: Worker, conn: Connection) -> None:
        if self.keepalive and conn.open:
            self._think(worker, conn)
            return
        # a new connection per request (or the server closed this one): the user still thinks
        # before the next request, and its connect is part of that request
        worker.drop(conn)
        pause = self._pause()
        if pause > 0:
            worker.loop.call_later(pause, self._spawn_reopen, worker)
        else:
            self._spawn_reopen(worker)

    def _spawn_reopen(self, worker: Worker) -> None:
        if worker.issuing:
            worker.loop.create_task(self._reopen(worker))

    def on_lost(self, worker: Worker, conn: Connection) -> None:
        worker.loop.create_task(self._reopen(worker))

    def _start(self, worker: Worker) -> None:
        for conn in list(worker.conns):
            self._next(worker, conn)
        for _ in range(self.spec.connections - len(worker.conns)):
            worker.loop.create_task(self._reopen(worker))

    def _next(self, worker: Worker, conn: Connection) -> None:
        if not worker.issuing:
            return
        if worker.rec.total >= worker.max_requests:
            worker.stop_issuing()
            return
        if not conn.open:
            worker.loop.create_task(self._reopen(worker))
            return
        chunk, row = worker.rec.new(_now())
        worker.send(conn, chunk, row)

    async def _reopen(self, worker: Worker) -> None:
        while worker.issuing:
            t0 = _now()
            conn = await worker.open_connection()
            if conn is not None and not worker.issuing:
                conn.transport.close()  # issuing ended while this connect was under way
                return
            if conn is not None:
                if not self.keepalive:  # the connect is part of this request's latency
                    chunk, row = worker.rec.new(t0)
                    worker.send(conn, chunk, row)
                    chunk.sent_ns[row] = t0
                else:
                    self._next(worker, conn)
                return
            worker.failed_attempt(t0, t0, CONNECT)
            await asyncio.sleep(RECONNECT_PAUSE_S)

    def _pause(self) -> float:
        """One think time (s): the spec's, or an exponential draw of that mean; 0 without."""
        spec = self.spec
        if spec.think_time_s <= 0:
            return 0.0
        if spec.think_dist == "exp":
            return float(self.think_rng.exponential(spec.think_time_s))
        return spec.think_time_s

    def _think(self, worker: Worker, conn: Connection) -> None:
        pause = self._pause()
        if pause <= 0:
            self._next(worker, conn)
            return
        worker.loop.call_later(pause, self._next, worker, conn)

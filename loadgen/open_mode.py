"""Open-loop arrivals for Worker: a seeded schedule sent at its intended times, whatever the
answers do. Arrivals past the outstanding cap are recorded as DROPPED, never skipped.

A mixin: it uses the Worker's state (spec, rec, loop, conns, idle, pending, in_flight, ...)
and its helpers (_at, _open, _request, _maybe_finish); see worker.py.
"""
from __future__ import annotations

import asyncio
import time

import numpy as np

from . import schedule
from .client import Connection
from .records import CONNECT, DROPPED, UNFINISHED, Chunk

_now = time.perf_counter_ns
# shared with worker.py (which imports them from here)
SPIN_WINDOW_NS = 1_200_000   # closer than this to the next arrival: poll instead of a timer
RECONNECT_PAUSE_S = 0.010    # between attempts to replace a lost connection


class OpenMode:
    def _plan_open(self, rate_rps: float, horizon_s: float) -> None:
        spec = self.spec
        offsets = schedule.arrival_offsets_s(spec.arrivals, rate_rps, horizon_s, spec.seed,
                                             limit=spec.max_requests)
        self.sched_ns = self.start_ns + (offsets * 1e9).astype(np.int64)
        self.dispatch_late_ns = np.zeros(len(self.sched_ns), dtype=np.int64)
        self.next_arrival = 0

    def _dispatch(self) -> None:
        if not self.running:
            return
        now = _now()
        sched, i, n = self.sched_ns, self.next_arrival, len(self.sched_ns)
        cap = self.spec.outstanding_cap
        rec = self.rec
        while i < n and sched[i] <= now:
            chunk, row = rec.new(int(sched[i]))
            self.dispatch_late_ns[i] = now - sched[i]
            i += 1
            if self.in_flight + len(self.pending) >= cap:
                chunk.end(row, DROPPED, now)
                self.dropped += 1
            elif self.idle:
                self.in_flight += 1
                self.idle.pop().send(chunk, row, self._request())
            elif not self.keepalive:
                self.in_flight += 1
                self.loop.create_task(self._open_and_send(chunk, row))
            else:
                self.pending.append((chunk, row))
        self.next_arrival = i
        if i < n:
            wait_ns = sched[i] - _now()
            if wait_ns > SPIN_WINDOW_NS:
                self.loop.call_later((wait_ns - SPIN_WINDOW_NS) / 1e9, self._dispatch)
            else:
                self.loop.call_soon(self._dispatch)

    async def _open_and_send(self, chunk: Chunk, row: int) -> None:
        t0 = _now()
        conn = await self._open()
        if conn is None or self.finishing:
            chunk.sent[row] = t0
            chunk.end(row, CONNECT if conn is None else UNFINISHED, _now())
            if conn is not None:
                conn.transport.close()
            self.in_flight -= 1
            self._maybe_finish()
            return
        conn.send(chunk, row, self._request())
        chunk.sent[row] = t0          # the connect is part of the exchange

    def _open_refill(self) -> None:
        """Keep `connections` open in open mode after losses."""
        async def reopen() -> None:
            while self.running:
                conn = await self._open()
                if conn is not None:
                    self._became_idle(conn)
                    return
                await asyncio.sleep(RECONNECT_PAUSE_S)
        self.loop.create_task(reopen())

    def _became_idle(self, conn: Connection) -> None:
        if self.pending and self.running:
            self.in_flight += 1
            chunk, row = self.pending.popleft()
            conn.send(chunk, row, self._request())
        else:
            self.idle.append(conn)

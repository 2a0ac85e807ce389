"""Open loop: a seeded schedule of arrivals sent at their intended times, whatever the answers
do. Arrivals past the outstanding cap are recorded as DROPPED, never skipped.

The schedule is read in chunks (schedule.Schedule), one at a time, so a long or fast phase
holds no more of it than a short one; the send lateness of each chunk's window arrivals goes
into an HdrHistogram when the chunk is done (its p50/p99 are within 0.1% above the exact
order statistics, hdr.py; its max is exact).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque

import numpy as np

from .. import hdr, schedule
from ..client import Connection
from ..delivered import Delivered
from ..records import CONNECT, DROPPED, LATE_CLIP_NS, UNFINISHED, Chunk
from ..spec import LoadSpec
from ..worker import Worker
from .base import RECONNECT_PAUSE_S, Mode

_now = time.perf_counter_ns
RECORD_PIECE = 2048  # arrivals recorded per loop turn (~0.25 ms)


class OpenMode(Mode):
    name = "open"

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        self.chunks = iter(())  # the rest of the schedule (ns)
        self.sched_ns = np.empty(0, dtype=np.int64)  # intended send times, this chunk
        self.late_ns = np.empty(0, dtype=np.int64)  # how late each was dispatched
        self.queued = np.empty(0, dtype=np.int32)  # in flight or queued at each dispatch
        # the window's arrivals as sent, against the schedule (delivered.py)
        rate = spec.rate_rps / max(1, spec.shard_count)
        self.delivered = Delivered(1e9 / rate if rate > 0 else 0.0)
        self.next_arrival = 0  # in this chunk
        self.scheduled_in_window = 0  # of the chunks already done
        self.late_hist = None  # of the window's dispatched arrivals
        self.late_max_ns = 0
        self.late_sum_ns = 0  # of the window's dispatched arrivals (their mean: validity.py)
        self.late_count = 0
        # a done chunk's window arrivals, recorded a piece at a time between sends (_record)
        self._to_record: deque[tuple[np.ndarray, np.ndarray, np.ndarray]] = deque()
        self._loop = None
        self._window = (0, 0)  # [measure_start_ns, end_ns)
        self.dropped = 0
        self.idle: list[Connection] = []  # open, no request in flight
        self.pending: deque[tuple[Chunk, int]] = deque()  # arrived, waiting for a connection

    def share(self, index: int, count: int, start_at_ns: int) -> OpenMode:
        """As Mode.share, and the schedule dealt out: every process computes the whole
        schedule from the same seed and sends every count-th arrival from `index`, so the
        shares add up to exactly the schedule of one process (schedule.shard)."""
        part = super().share(index, count, start_at_ns).spec
        return OpenMode(
            dataclasses.replace(part, seed=self.spec.seed, shard_index=index, shard_count=count)
        )

    def start(self, worker: Worker) -> None:
        spec = self.spec
        whole = schedule.spec_schedule(spec)
        self._window = (worker.measure_start_ns, worker.end_ns)
        self._loop = getattr(worker, "loop", None)  # a test's stand-in may have none
        self.late_hist = hdr.new()
        self.chunks = whole.chunks_ns(spec.shard_index, spec.shard_count)
        self._next_chunk(worker.start_ns)
        self.idle.extend(worker.conns)
        if self.keepalive:
            for _ in range(spec.connections - len(worker.conns)):
                self._refill(worker)
        worker.at(worker.start_ns, self._dispatch, worker)

    def on_answer(self, worker: Worker, conn: Connection) -> None:
        if self.keepalive and conn.open:
            self._became_idle(worker, conn)
        else:
            worker.drop(conn)
            if self.keepalive:
                self._refill(worker)

    def on_lost(self, worker: Worker, conn: Connection) -> None:
        if conn in self.idle:
            self.idle.remove(conn)
        if self.keepalive:
            self._refill(worker)

    def stop(self, worker: Worker) -> None:
        t = _now()
        # Due in the window but not yet dispatched (the loop ran late across the window's end,
        # or the stop's poll came first): sent now, late, and their lateness recorded for the
        # validity check; a loop that stalls there is the generator's failing, not the server's.
        if worker.end_ns:
            self._dispatch(worker, until_ns=worker.end_ns)
        # Waiting for a connection: they stay queued and take the next connection that frees
        # up while those in flight drain (drain()); the rest end at the finish (expire()).
        # Due after the window's end but never dispatched: recorded as unfinished, never
        # left out of the records.
        i = self.next_arrival
        while len(self.sched_ns):
            s = self.sched_ns
            j = i + int(np.searchsorted(s[i:], t, side="right"))
            for k in range(i, j):
                chunk, row = worker.rec.new(int(s[k]))
                chunk.end(row, UNFINISHED, t)
            if j < len(s):
                break
            self._close_chunk(self.next_arrival)  # lateness of the dispatched ones only
            self._next_chunk(worker.start_ns)
            i = 0

    def drain(self, worker: Worker, conn: Connection) -> bool:
        """After the window: conn has answered; send it the oldest queued arrival, if any."""
        if not self.pending or not (self.keepalive and conn.open) or worker.finishing:
            return False
        chunk, row = self.pending.popleft()
        worker.send(conn, chunk, row)
        return True

    def expire(self, worker: Worker, limit_ns: int, error: int) -> None:
        """End the queued arrivals intended before limit_ns (still waiting for a connection)
        with `error`: a timeout while issuing, unfinished at the finish."""
        while self.pending:
            chunk, row = self.pending[0]
            if int(chunk.intended_ns[row]) >= limit_ns:
                break
            self.pending.popleft()
            worker.unsent(chunk, row)
            chunk.end(row, error, _now())

    def summary_extra(self, worker: Worker) -> dict:
        """The window's arrivals: all those scheduled (the rest of the schedule, never sent,
        is counted too) and the send lateness of those dispatched."""
        self._close_chunk(self.next_arrival)
        while self._to_record:  # the pieces the loop had no turn left for
            self._record_piece()
        start_ns = getattr(worker, "start_ns", 0)
        for part in self.chunks:
            self.scheduled_in_window += self._in_window(start_ns + part)
        self.chunks = iter(())
        h = self.late_hist
        p50, p99, p999 = (
            hdr.percentiles_ms(h, [50, 99, 99.9])
            if h is not None and h.total_count
            else (0.0, 0.0, 0.0)
        )
        return {
            "scheduled_in_window": self.scheduled_in_window,
            "dropped": self.dropped,
            "send_lateness_p50_ms": p50,
            "send_lateness_p99_ms": p99,
            "send_lateness_p999_ms": p999,  # optional in the driver contract (validity.py)
            "send_lateness_max_ms": self.late_max_ns / 1e6,
            # every row's dispatch_late_ns is written: on-time figures can be computed
            "dispatch_lateness_recorded": True,
            # optional in the driver contract: the exact bound on how far lateness moved the mean
            "send_lateness_mean_ms": self.late_sum_ns / self.late_count / 1e6
            if self.late_count
            else 0.0,
            # what the server was sent (validity.server_saw)
            "arrivals": self.spec.arrivals,
            **self.delivered.summary(),
        }

    # --- the schedule, a chunk at a time ----------------------------------------------------
    def _in_window(self, sched: np.ndarray) -> int:
        lo, hi = self._window
        return int(np.count_nonzero((sched >= lo) & (sched < hi)))

    def _next_chunk(self, start_ns: int) -> bool:
        """Make the next chunk of the schedule current; False when there is none."""
        part = next(self.chunks, None)
        if part is None:
            return False
        part += start_ns
        self.sched_ns = part
        self.late_ns = np.zeros(len(part), dtype=np.int64)
        self.queued = np.zeros(len(part), dtype=np.int32)
        self.next_arrival = 0
        return True

    def _close_chunk(self, dispatched: int) -> None:
        """Count the current chunk's window arrivals and record the lateness of the first
        `dispatched` of them (the others were never sent)."""
        s = self.sched_ns
        if not len(s):
            return
        lo, hi = self._window
        self.scheduled_in_window += self._in_window(s)
        sent = (s[:dispatched] >= lo) & (s[:dispatched] < hi)
        late = self.late_ns[:dispatched][sent]
        if late.size and self.late_hist is not None:
            # recorded in pieces between sends: a whole chunk (16,384 arrivals) at once took
            # ~2 ms, and every send due meanwhile waited for it
            idle = not self._to_record
            sched, queued = s[:dispatched][sent], self.queued[:dispatched][sent]
            for k in range(0, late.size, RECORD_PIECE):
                part = slice(k, k + RECORD_PIECE)
                self._to_record.append((sched[part], late[part], queued[part]))
            if idle and self._loop is not None:
                self._loop.call_soon(self._record)
        self.sched_ns = self.late_ns = np.empty(0, dtype=np.int64)
        self.queued = np.empty(0, dtype=np.int32)
        self.next_arrival = 0

    def _record(self) -> None:
        """One piece of a done chunk's window arrivals into the lateness record, then yield
        the loop (a send due goes first) and come back for the next."""
        if self._to_record:
            self._record_piece()
        if self._to_record and self._loop is not None:
            self._loop.call_soon(self._record)

    def _record_piece(self) -> None:
        sched, late, queued = self._to_record.popleft()
        hdr.record(self.late_hist, late)
        self.late_max_ns = max(self.late_max_ns, int(late.max()))
        self.late_sum_ns += int(late.sum())
        self.late_count += int(late.size)
        self.delivered.add(sched, late, queued)

    # --- arrivals ------------------------------------------------------------------------
    def _dispatch(self, worker: Worker, until_ns: int | None = None) -> None:
        """Send the arrivals due by now (by until_ns too, when given: the stop's last call,
        which sets no further timer)."""
        if not worker.issuing and until_ns is None:
            return
        now = _now()
        sched, i, n = self.sched_ns, self.next_arrival, len(self.sched_ns)
        cap = self.spec.outstanding_cap
        rec = worker.rec
        late, queued = self.late_ns, self.queued
        while True:
            if i == n:  # this chunk is sent: on to the next one
                self._close_chunk(n)
                self._next_chunk(worker.start_ns)
                sched, late, i, n = self.sched_ns, self.late_ns, 0, len(self.sched_ns)
                queued = self.queued
                if n == 0:
                    break
            if sched[i] > now or (until_ns is not None and sched[i] >= until_ns):
                break
            chunk, row = rec.new(int(sched[i]))
            d = late[i] = now - sched[i]
            chunk.dispatch_late_ns[row] = d if d < LATE_CLIP_NS else LATE_CLIP_NS
            q = queued[i] = worker.in_flight + len(self.pending)
            i += 1
            if q >= cap:
                worker.unsent(chunk, row)
                chunk.end(row, DROPPED, now)
                self.dropped += 1
            elif self.idle:
                worker.send(self.idle.pop(), chunk, row)
            elif not self.keepalive:
                worker.in_flight += 1
                worker.loop.create_task(self._open_and_send(worker, chunk, row))
            else:
                self.pending.append((chunk, row))
        self.next_arrival = i
        if i < n and until_ns is None:
            worker.at(int(sched[i]), self._dispatch, worker)

    async def _open_and_send(self, worker: Worker, chunk: Chunk, row: int) -> None:
        t0 = _now()
        # taken at the arrival (a mix: its row counts under its request even if the connect fails)
        data = worker.request_for(chunk, row)
        conn = await worker.open_connection()
        if conn is None or worker.finishing:
            chunk.sent_ns[row] = t0
            chunk.end(row, CONNECT if conn is None else UNFINISHED, _now())
            if conn is not None:
                conn.transport.close()
            worker.in_flight -= 1
            worker.maybe_finish()
            return
        conn.send(chunk, row, data)
        chunk.sent_ns[row] = t0  # the connect is part of the exchange

    # --- keeping `connections` open ------------------------------------------------------
    def _refill(self, worker: Worker) -> None:
        """Open a connection in place of a lost one, retrying while requests are issued."""

        async def reopen() -> None:
            while worker.issuing:
                conn = await worker.open_connection()
                if conn is not None:
                    self._became_idle(worker, conn)
                    return
                await asyncio.sleep(RECONNECT_PAUSE_S)

        worker.loop.create_task(reopen())

    def _became_idle(self, worker: Worker, conn: Connection) -> None:
        if self.pending and worker.issuing:
            chunk, row = self.pending.popleft()
            worker.send(conn, chunk, row)
        else:
            self.idle.append(conn)

"""One load-generator process: one uvloop event loop driving `connections` connections.

`run(spec)` returns (Records, summary dict); `run_to_dir(spec, out_dir)` also writes
requests.parquet and summary.json. Every run is bounded: it stops issuing at
warmup_s + duration_s, waits at most timeout_s for answers, then closes everything.
"""
from __future__ import annotations

import asyncio
import gc
import json
import os
import resource
import time
from collections import deque
from pathlib import Path

import numpy as np

from . import schedule
from .client import Connection
from .records import CONNECT, DROPPED, TIMEOUT, UNFINISHED, Records
from .spec import LoadSpec

_now = time.perf_counter_ns
LAG_TICK_S = 0.010
SWEEP_S = 0.050
RECONNECT_PAUSE_S = 0.010
SPIN_WINDOW_NS = 1_200_000   # closer than this to the next arrival: poll instead of a timer


def build_request(spec: LoadSpec) -> bytes:
    body = spec.body_bytes()
    lines = [f"{spec.method} {spec.target} HTTP/1.1", f"Host: {spec.host}:{spec.port}"]
    lines += [f"{k}: {v}" for k, v in spec.headers]
    if body or spec.method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    if not spec.keepalive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Worker:
    """Drives one mode of load on one loop. Callbacks only; no per-request coroutines."""

    def __init__(self, spec: LoadSpec, loop: asyncio.AbstractEventLoop) -> None:
        self.spec = spec
        self.loop = loop
        self.request = build_request(spec)
        expected = int(spec.rate_rps * (spec.warmup_s + spec.duration_s) * 1.2) + 1024
        self.rec = Records(capacity=min(expected, 4_000_000))
        self.conns: list[Connection] = []
        self.idle: list[Connection] = []
        self.pending: deque[int] = deque()
        self.in_flight = 0
        self.running = False
        self.finishing = False
        self.connecting = 0
        self.next_ident = 0
        self.lags_ns: list[int] = []
        self.dispatch_late_ns: np.ndarray = np.empty(0, dtype=np.int64)
        self.dropped = 0
        self.finished = asyncio.Event()

    # --- lifecycle ---------------------------------------------------------------------
    async def run(self) -> dict:
        spec = self.spec
        self.running = True
        self.start_ns = _now() + 50_000_000  # 50 ms to open the first connections
        self.measure_start_ns = self.start_ns + int(spec.warmup_s * 1e9)
        self.end_ns = self.measure_start_ns + int(spec.duration_s * 1e9)
        n_conn = spec.connections if spec.keepalive or spec.mode == "closed" else 0
        await asyncio.gather(*(self._open() for _ in range(n_conn)))
        self.loop.call_later(LAG_TICK_S, self._lag_tick, _now() + int(LAG_TICK_S * 1e9))
        self.loop.call_later(SWEEP_S, self._sweep)
        if spec.mode == "open":
            offsets = schedule.arrival_offsets_s(spec.arrivals, spec.rate_rps,
                                                 spec.warmup_s + spec.duration_s, spec.seed,
                                                 limit=spec.max_requests)
            self.sched_ns = self.start_ns + (offsets * 1e9).astype(np.int64)
            self.dispatch_late_ns = np.zeros(len(self.sched_ns), dtype=np.int64)
            self.next_arrival = 0
            self.idle.extend(self.conns)
            if spec.keepalive:
                for _ in range(spec.connections - len(self.conns)):
                    self._open_refill()
            self._at(self.start_ns, self._dispatch)
        else:
            self._at(self.start_ns, self._start_closed)
        self._at(self.end_ns, self._stop_issuing)
        await self.finished.wait()
        return self._summary()

    def _at(self, when_ns: int, fn, *args) -> None:
        self.loop.call_later(max(0.0, (when_ns - _now()) / 1e9), fn, *args)

    async def _open(self) -> Connection | None:
        spec = self.spec
        conn = Connection(self, self.rec, self.next_ident, self.request)
        self.next_ident += 1
        self.connecting += 1
        try:
            await self.loop.create_connection(lambda: conn, spec.host, spec.port)
        except OSError:
            self.connecting -= 1
            return None
        self.connecting -= 1
        self.conns.append(conn)
        return conn

    def _stop_issuing(self) -> None:
        self.running = False
        for row in self.pending:           # intended in the window, never got a connection
            self.rec.error[row] = UNFINISHED
        self.pending.clear()
        if self.in_flight == 0:
            self._finish()
        else:
            self.loop.call_later(self.spec.timeout_s, self._finish)

    def _finish(self) -> None:
        if self.finishing:
            return
        self.finishing = True
        for conn in list(self.conns):
            if conn.row >= 0:
                conn.abort(UNFINISHED)
            elif conn.transport is not None:
                conn.transport.close()
        self.finished.set()

    # --- closed mode -------------------------------------------------------------------
    def _start_closed(self) -> None:
        for conn in list(self.conns):
            self._closed_next(conn)
        for _ in range(self.spec.connections - len(self.conns)):
            self.loop.create_task(self._closed_reopen())

    def _closed_next(self, conn: Connection) -> None:
        if not self.running:
            return
        if not conn.open:
            self.loop.create_task(self._closed_reopen())
            return
        row = self.rec.new(_now())
        self.in_flight += 1
        conn.send(row)

    async def _closed_reopen(self) -> None:
        while self.running:
            t0 = _now()
            conn = await self._open()
            if conn is not None:
                self._closed_next(conn)
                return
            row = self.rec.new(t0)
            self.rec.sent[row] = t0
            self.rec.done[row] = _now()
            self.rec.error[row] = CONNECT
            await asyncio.sleep(RECONNECT_PAUSE_S)

    def _think(self, conn: Connection) -> None:
        spec = self.spec
        if spec.think_time_s <= 0:
            self._closed_next(conn)
            return
        pause = spec.think_time_s
        if spec.think_dist == "exp":
            pause = float(np.random.exponential(spec.think_time_s))
        self.loop.call_later(pause, self._closed_next, conn)

    # --- open mode ---------------------------------------------------------------------
    def _dispatch(self) -> None:
        if not self.running:
            return
        now = _now()
        sched, i, n = self.sched_ns, self.next_arrival, len(self.sched_ns)
        cap = self.spec.outstanding_cap
        rec = self.rec
        while i < n and sched[i] <= now:
            row = rec.new(int(sched[i]))
            self.dispatch_late_ns[i] = now - sched[i]
            i += 1
            if self.in_flight + len(self.pending) >= cap:
                rec.error[row] = DROPPED
                rec.done[row] = now
                self.dropped += 1
            elif self.idle:
                self.in_flight += 1
                self.idle.pop().send(row)
            elif not self.spec.keepalive:
                self.in_flight += 1
                self.loop.create_task(self._open_and_send(row))
            else:
                self.pending.append(row)
        self.next_arrival = i
        if i < n:
            wait_ns = sched[i] - _now()
            if wait_ns > SPIN_WINDOW_NS:
                self.loop.call_later((wait_ns - SPIN_WINDOW_NS) / 1e9, self._dispatch)
            else:
                self.loop.call_soon(self._dispatch)

    async def _open_and_send(self, row: int) -> None:
        self.rec.sent[row] = _now()
        conn = await self._open()
        if conn is None:
            self.rec.error[row] = CONNECT
            self.rec.done[row] = _now()
            self.in_flight -= 1
            self._maybe_finish()
            return
        conn.send(row)

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
            conn.send(self.pending.popleft())
        else:
            self.idle.append(conn)

    # --- connection callbacks ----------------------------------------------------------
    def on_done(self, conn: Connection) -> None:
        self.in_flight -= 1
        if not self.running:
            self._maybe_finish()
            return
        if self.spec.mode == "closed":
            if self.spec.keepalive and conn.open:
                self._think(conn)
            else:
                self._drop(conn)
                self.loop.create_task(self._closed_reopen())
        elif self.spec.keepalive and conn.open:
            self._became_idle(conn)
        else:
            self._drop(conn)
            if self.spec.keepalive:
                self._open_refill()

    def on_failed(self, conn: Connection) -> None:
        self.in_flight -= 1
        if not self.running:
            self._maybe_finish()

    def on_lost(self, conn: Connection) -> None:
        was_member = conn in self.conns
        self._drop(conn)
        if not self.running:
            self._maybe_finish()
            return
        if was_member and self.spec.keepalive:
            if self.spec.mode == "closed":
                self.loop.create_task(self._closed_reopen())
            else:
                self._open_refill()

    def _drop(self, conn: Connection) -> None:
        if conn in self.conns:
            self.conns.remove(conn)
        if conn in self.idle:
            self.idle.remove(conn)

    def _maybe_finish(self) -> None:
        if not self.running and self.in_flight <= 0:
            self._finish()

    # --- self-checks -------------------------------------------------------------------
    def _lag_tick(self, expected_ns: int) -> None:
        """Event-loop lag: how late a 10 ms timer fires (libuv timers have 1 ms resolution)."""
        now = _now()
        self.lags_ns.append(now - expected_ns)
        if not self.finished.is_set():
            self.loop.call_later(LAG_TICK_S, self._lag_tick, now + int(LAG_TICK_S * 1e9))

    def _sweep(self) -> None:
        limit = _now() - int(self.spec.timeout_s * 1e9)
        sent = self.rec.sent
        for conn in list(self.conns):
            if conn.row >= 0 and sent[conn.row] < limit:
                conn.abort(TIMEOUT)
        if not self.finished.is_set():
            self.loop.call_later(SWEEP_S, self._sweep)

    def _summary(self) -> dict:
        spec = self.spec
        lags = np.asarray(self.lags_ns, dtype=np.float64) / 1e6
        late = self.dispatch_late_ns / 1e6
        scheduled = 0
        if spec.mode == "open":
            s = self.sched_ns
            scheduled = int(np.count_nonzero((s >= self.measure_start_ns) & (s < self.end_ns)))
            late = late[(s >= self.measure_start_ns) & (s < self.end_ns)]
        return {
            "start_ns": self.start_ns, "measure_start_ns": self.measure_start_ns,
            "measure_end_ns": self.end_ns, "scheduled_in_window": scheduled,
            "dropped": self.dropped,
            "loop_lag_p99_ms": float(np.percentile(lags, 99)) if lags.size else 0.0,
            "loop_lag_max_ms": float(lags.max()) if lags.size else 0.0,
            "send_lateness_p50_ms": float(np.percentile(late, 50)) if late.size else 0.0,
            "send_lateness_p99_ms": float(np.percentile(late, 99)) if late.size else 0.0,
            "send_lateness_max_ms": float(late.max()) if late.size else 0.0,
        }


def _pin(cpus: tuple[int, ...]) -> None:
    if cpus:
        try:
            os.sched_setaffinity(0, set(cpus))
        except OSError:
            pass


def run(spec: LoadSpec) -> tuple[Records, dict]:
    """Run one load phase to completion in this process (uses uvloop when available)."""
    _pin(spec.cpus)
    try:
        import uvloop
        loop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a hard dependency; keep a fallback
        loop = asyncio.new_event_loop()
    gc_pauses: list[float] = []
    gc_t0 = [0.0]

    def gc_cb(phase: str, info: dict) -> None:
        if phase == "start":
            gc_t0[0] = time.perf_counter()
        else:
            gc_pauses.append((time.perf_counter() - gc_t0[0]) * 1e3)

    gc.collect()
    gc.freeze()
    gc.callbacks.append(gc_cb)
    ru0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    try:
        worker = Worker(spec, loop)
        hard_limit = spec.warmup_s + spec.duration_s + spec.timeout_s + 30.0
        summary = loop.run_until_complete(asyncio.wait_for(worker.run(), hard_limit))
    finally:
        gc.callbacks.remove(gc_cb)
        gc.unfreeze()
        loop.close()
    ru1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - wall0
    cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    summary.update({
        "loadgen_cpu_pct": 100.0 * cpu_s / wall if wall > 0 else 0.0,
        "gc_pauses": len(gc_pauses),
        "gc_pause_max_ms": max(gc_pauses, default=0.0),
        "gc_pause_total_ms": sum(gc_pauses),
        "requests_recorded": worker.rec.n,
    })
    return worker.rec, summary


def run_to_dir(spec: LoadSpec, out_dir: str | Path) -> dict:
    """Run and write requests.parquet and summary.json into out_dir; returns the summary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rec, summary = run(spec)
    cols = rec.frame()
    table = pa.table({k: pa.array(v) for k, v in cols.items()})
    pq.write_table(table, out / "requests.parquet.tmp")
    os.replace(out / "requests.parquet.tmp", out / "requests.parquet")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary

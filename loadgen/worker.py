"""One load-generator process: one uvloop event loop driving many connections.

`run(spec)` returns (Records, summary dict); `run_to_dir` (in parallel.py) writes the files.
Every run is bounded: it stops issuing at the end of its window, waits at most timeout_s for
answers, then closes everything; a hard limit on top of that ends the loop regardless.
"""
from __future__ import annotations

import asyncio
import gc
import os
import resource
import socket
import time
from collections import deque

import numpy as np
import uvloop

from . import records
from .burst_mode import BurstMode
from .client import Connection
from .open_mode import RECONNECT_PAUSE_S, SPIN_WINDOW_NS, OpenMode
from .records import CONNECT, TIMEOUT, UNFINISHED, Chunk, Records
from .spec import LoadSpec

_now = time.perf_counter_ns
LAG_TICK_S = 0.010
SWEEP_S = 0.050
SPILL_S = 1.0
START_DELAY_NS = 50_000_000  # time to open the first connections before the start instant


def build_request(spec: LoadSpec, seq: int | None = None) -> bytes:
    """The request bytes; with seq, {seq} in the target and body becomes that number."""
    body = spec.body_bytes()
    target = spec.target
    if seq is not None:
        target = target.replace("{seq}", str(seq))
        body = body.replace(b"{seq}", str(seq).encode())
    lines = [f"{spec.method} {target} HTTP/1.1", f"Host: {spec.host}:{spec.port}"]
    lines += [f"{k}: {v}" for k, v in spec.headers]
    if body or spec.method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
        if not any(k.lower() == "content-type" for k, _ in spec.headers):
            lines.append("Content-Type: application/x-www-form-urlencoded")
    if not spec.keepalive or spec.mode == "burst":
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Worker(OpenMode, BurstMode):
    """Drives one mode of load on one loop. Callbacks only; no per-request coroutines.

    Lifecycle, closed mode, connection callbacks and self-checks live here; open arrivals in
    open_mode.OpenMode, burst releases in burst_mode.BurstMode (mixins over this state)."""

    def __init__(self, spec: LoadSpec, loop: asyncio.AbstractEventLoop, sink=None,
                 seq_base: int = 0) -> None:
        self.spec = spec
        self.loop = loop
        self.request = build_request(spec)
        self.templated = spec.templated
        self.max_requests = spec.max_requests
        self.rec = Records(chunk_rows=records.CHUNK_ROWS, sink=sink)
        self.seq = seq_base
        self.conns: list[Connection] = []
        self.idle: list[Connection] = []
        self.pending: deque[tuple[Chunk, int]] = deque()
        self.in_flight = 0
        self.running = False
        self.finishing = False
        self.next_ident = 0
        self.lags_ns: list[int] = []
        self.dispatch_late_ns = np.empty(0, dtype=np.int64)
        self.sched_ns = np.empty(0, dtype=np.int64)
        self.dropped = 0
        self.releases: list[list[tuple[Chunk, int]]] = []   # burst: the rows of each release
        self.finished = asyncio.Event()
        self.keepalive = spec.keepalive and spec.mode != "burst"
        # closed loop, keep-alive, no think time, fixed request: Connection sends the next
        # request itself while the run is on (see Connection.on_message_complete)
        self.fast = (spec.mode == "closed" and self.keepalive and spec.think_time_s <= 0
                     and not self.templated)
        info = socket.getaddrinfo(spec.host, spec.port, type=socket.SOCK_STREAM)[0]
        self.family, self.addr = info[0], info[4]
        # burst: sockets whose non-blocking connect is under way: fd -> (sock, chunk, row)
        self.connecting: dict[int, tuple[socket.socket, Chunk, int]] = {}

    def _request(self) -> bytes:
        if not self.templated:
            return self.request
        self.seq += 1
        return build_request(self.spec, self.seq)

    # --- lifecycle ---------------------------------------------------------------------
    async def run(self) -> dict:
        spec = self.spec
        self.running = True
        self.start_ns = spec.start_at_ns or (_now() + START_DELAY_NS)
        self.measure_start_ns = self.start_ns + int(spec.warmup_s * 1e9)
        self.end_ns = self.measure_start_ns + int(spec.window_s * 1e9)
        if self.keepalive:
            await asyncio.gather(*(self._open() for _ in range(spec.connections)))
        self.loop.call_later(LAG_TICK_S, self._lag_tick, _now() + int(LAG_TICK_S * 1e9))
        self.loop.call_later(SWEEP_S, self._sweep)
        self.loop.call_later(SPILL_S, self._spill)
        if spec.mode == "open":
            self._plan_open(spec.rate_rps, spec.warmup_s + spec.duration_s)
            self.idle.extend(self.conns)
            if self.keepalive:
                for _ in range(spec.connections - len(self.conns)):
                    self._open_refill()
            self._at(self.start_ns, self._dispatch)
        elif spec.mode == "burst":
            self._plan_bursts()
        else:
            self._at(self.start_ns, self._start_closed)
        self._at(self.end_ns, self._stop_issuing)
        await self.finished.wait()
        return self._summary()

    def _at(self, when_ns: int, fn, *args) -> None:
        """Call fn at when_ns, never early: libuv timers have 1 ms resolution and may fire
        up to a tick early, so the timer aims short and the last stretch is polled."""
        wait_ns = when_ns - _now()
        if wait_ns <= 0:
            fn(*args)
        elif wait_ns > SPIN_WINDOW_NS:
            self.loop.call_later((wait_ns - SPIN_WINDOW_NS) / 1e9, self._at, when_ns, fn, *args)
        else:
            self.loop.call_soon(self._at, when_ns, fn, *args)

    def _socket(self) -> socket.socket:
        sock = socket.socket(self.family, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    async def _open(self, sock: socket.socket | None = None) -> Connection | None:
        """A new connection (resolved once, no per-connect name lookup), or None on failure.
        With sock: a socket whose connect already completed."""
        conn = Connection(self, self.next_ident)
        self.next_ident += 1
        try:
            if sock is None:
                sock = self._socket()
                try:
                    await self.loop.sock_connect(sock, self.addr)
                except BaseException:
                    sock.close()
                    raise
            await self.loop.create_connection(lambda: conn, sock=sock)
        except OSError:
            return None
        self.conns.append(conn)
        return conn

    def _stop_issuing(self) -> None:
        self.running = self.fast = False
        t = _now()
        for chunk, row in self.pending:   # intended in the window, never got a connection
            chunk.end(row, UNFINISHED, t)
        self.pending.clear()
        if self.in_flight <= 0:
            self._finish()
        else:
            self.loop.call_later(self.spec.timeout_s, self._finish)

    def _finish(self) -> None:
        if self.finishing:
            return
        self.finishing = True
        self._expire_connects(_now() + 1, UNFINISHED)
        for conn in list(self.conns):
            if conn.row >= 0:
                conn.abort(UNFINISHED)
            elif conn.transport is not None:
                conn.transport.close()
        self.finished.set()

    def close_out(self) -> int:
        """Mark every row still open when the loop ends (e.g. a connect still waiting on a
        full backlog) as TIMEOUT if it waited past timeout_s, else UNFINISHED, so no row can
        look successful without an answer. Returns how many rows it closed."""
        t = _now()
        limit = t - int(self.spec.timeout_s * 1e9)
        count = 0
        for c in self.rec.chunks():
            n = c.n
            a = c.arrays
            open_rows = np.flatnonzero((a["done_ns"][:n] == 0) & (a["error"][:n] == 0))
            if open_rows.size:
                started = a["sent_ns"][open_rows]
                a["error"][open_rows] = np.where((started > 0) & (started < limit), TIMEOUT,
                                                 UNFINISHED)
                a["done_ns"][open_rows] = t
                c.final += int(open_rows.size)
                count += int(open_rows.size)
        return count

    def _failed_attempt(self, intended_ns: int, t0: int, error: int) -> None:
        chunk, row = self.rec.new(intended_ns)
        chunk.sent[row] = t0
        chunk.end(row, error, _now())

    # --- closed mode -------------------------------------------------------------------
    def _start_closed(self) -> None:
        for conn in list(self.conns):
            self._closed_next(conn)
        for _ in range(self.spec.connections - len(self.conns)):
            self.loop.create_task(self._closed_reopen())

    def _closed_next(self, conn: Connection) -> None:
        if not self.running:
            return
        if self.rec.total >= self.max_requests:
            self._stop_issuing()
            return
        if not conn.open:
            self.loop.create_task(self._closed_reopen())
            return
        chunk, row = self.rec.new(_now())
        self.in_flight += 1
        conn.send(chunk, row, self._request())

    async def _closed_reopen(self) -> None:
        while self.running:
            t0 = _now()
            conn = await self._open()
            if conn is not None and not self.running:
                conn.transport.close()      # the run ended while this connect was under way
                return
            if conn is not None:
                if not self.keepalive:     # the connect is part of this request's latency
                    chunk, row = self.rec.new(t0)
                    self.in_flight += 1
                    conn.send(chunk, row, self._request())
                    chunk.sent[row] = t0
                else:
                    self._closed_next(conn)
                return
            self._failed_attempt(t0, t0, CONNECT)
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

    # --- connection callbacks ----------------------------------------------------------
    def on_done(self, conn: Connection) -> None:
        self.in_flight -= 1
        if not self.running:
            self._maybe_finish()
            return
        mode = self.spec.mode
        if mode == "burst":
            self._drop(conn)
        elif mode == "closed":
            if self.keepalive and conn.open:
                self._think(conn)
            else:
                self._drop(conn)
                self.loop.create_task(self._closed_reopen())
        elif self.keepalive and conn.open:
            self._became_idle(conn)
        else:
            self._drop(conn)
            if self.keepalive:
                self._open_refill()

    def on_failed(self, conn: Connection | None) -> None:
        self.in_flight -= 1
        if not self.running:
            self._maybe_finish()

    def on_lost(self, conn: Connection) -> None:
        was_member = conn in self.conns
        self._drop(conn)
        if not self.running:
            self._maybe_finish()
            return
        if was_member and self.keepalive:
            if self.spec.mode == "closed":
                self.loop.create_task(self._closed_reopen())
            elif self.spec.mode == "open":
                self._open_refill()
        elif was_member and self.spec.mode == "closed":
            self.loop.create_task(self._closed_reopen())

    def _drop(self, conn: Connection) -> None:
        if conn in self.conns:
            self.conns.remove(conn)
        if conn in self.idle:
            self.idle.remove(conn)

    def _maybe_finish(self) -> None:
        if not self.running and self.in_flight <= 0:
            self._finish()

    # --- self-checks and housekeeping ----------------------------------------------------
    def _lag_tick(self, expected_ns: int) -> None:
        """Event-loop lag: how late a 10 ms timer fires (libuv timers have 1 ms resolution)."""
        now = _now()
        self.lags_ns.append(now - expected_ns)
        if not self.finished.is_set():
            self.loop.call_later(LAG_TICK_S, self._lag_tick, now + int(LAG_TICK_S * 1e9))

    def _sweep(self) -> None:
        limit = _now() - int(self.spec.timeout_s * 1e9)
        self._expire_connects(limit, TIMEOUT)
        for conn in list(self.conns):
            if conn.row >= 0 and conn.chunk.sent[conn.row] < limit:
                conn.abort(TIMEOUT)
        if not self.finished.is_set():
            self.loop.call_later(SWEEP_S, self._sweep)

    def _spill(self) -> None:
        self.rec.spill()
        if not self.finished.is_set():
            self.loop.call_later(SPILL_S, self._spill)

    def _summary(self) -> dict:
        spec = self.spec
        lags = np.asarray(self.lags_ns, dtype=np.float64) / 1e6
        late = self.dispatch_late_ns / 1e6
        scheduled = 0
        if len(self.sched_ns):
            s = self.sched_ns
            in_window = (s >= self.measure_start_ns) & (s < self.end_ns)
            scheduled = int(np.count_nonzero(in_window))
            late = late[in_window]
        out = {
            "start_ns": self.start_ns, "measure_start_ns": self.measure_start_ns,
            "measure_end_ns": self.end_ns, "scheduled_in_window": scheduled,
            "dropped": self.dropped,
            "loop_lag_p99_ms": float(np.percentile(lags, 99)) if lags.size else 0.0,
            "loop_lag_max_ms": float(lags.max()) if lags.size else 0.0,
            "send_lateness_p50_ms": float(np.percentile(late, 50)) if late.size else 0.0,
            "send_lateness_p99_ms": float(np.percentile(late, 99)) if late.size else 0.0,
            "send_lateness_max_ms": float(late.max()) if late.size else 0.0,
        }
        if spec.mode == "burst":
            spreads = []
            for rows in self.releases:
                sent = np.array([c.sent[r] for c, r in rows], dtype=np.int64)
                sent = sent[sent > 0]
                if sent.size:
                    spreads.append((sent.max() - sent.min()) / 1e6)
            out["release_spread_ms_max"] = max(spreads, default=0.0)
            out["release_spread_ms_mean"] = float(np.mean(spreads)) if spreads else 0.0
        return out


def pin(cpus: tuple[int, ...]) -> None:
    if cpus:
        try:
            os.sched_setaffinity(0, set(cpus))
        except OSError:
            pass


def raise_fd_limit() -> None:
    """Burst and many-connection runs need descriptors: lift the soft limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def run(spec: LoadSpec, sink=None, seq_base: int = 0) -> tuple[Records, dict]:
    """Run one load phase to completion in this process on a fresh uvloop loop.

    sink: where complete chunks of records are spilled (None: all kept in memory).
    """
    pin(spec.cpus)
    raise_fd_limit()
    loop = uvloop.new_event_loop()
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
        worker = Worker(spec, loop, sink, seq_base)
        wait_s = max(0.0, (spec.start_at_ns - _now()) / 1e9) if spec.start_at_ns else 0.0
        hard_limit = wait_s + spec.warmup_s + spec.window_s + spec.timeout_s + 30.0
        summary = loop.run_until_complete(asyncio.wait_for(worker.run(), hard_limit))
        pending = asyncio.all_tasks(loop)     # reconnects still waiting when the run ended
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.wait(pending))
        summary["closed_out"] = worker.close_out()
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
        "requests_recorded": worker.rec.total,
    })
    return worker.rec, summary

"""One load-generator process's Worker: one uvloop event loop driving many connections.

The Worker owns the loop, the connections, the records and the self-checks; a load mode
(modes/) decides when requests are issued. ModeHooks is what the Worker asks of a mode, so this
module imports none of modes/ (they import it). phase.generate runs one Worker's phase on a
fresh loop. Every phase is bounded: it stops issuing at the end of its window, waits at most
timeout_s for answers, then closes everything; a hard limit on top of that ends the loop
regardless.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Protocol

import numpy as np

from . import records
from .client import Connection, TlsConnection
from .coarse_timer import CoarseTimer
from .hosttimer import HostTimer
from .mix import Feed, ReplayFeed
from .records import TIMEOUT, UNFINISHED, Chunk, Records
from .spec import LoadSpec
from .tls import Sessions
from .wake import EARLY_MIN_NS, EARLY_MIN_PRECISE_NS, EarlyWake

_now = time.perf_counter_ns
LAG_TICK_S = 0.010
SWEEP_S = 0.050
SPILL_S = 1.0
START_DELAY_NS = 50_000_000  # time to open the first connections before the start instant


def build_request(spec: LoadSpec, seq: int | None = None, keepalive: bool | None = None) -> bytes:
    """The request bytes; with seq, {seq} in the target and body becomes that number.
    keepalive False (default: spec.keepalive) asks the server to close after answering."""
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
    if not (spec.keepalive if keepalive is None else keepalive):
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class ModeHooks(Protocol):
    """What a Worker asks of its load mode (modes/base.py says when it calls each hook)."""

    spec: LoadSpec
    keepalive: bool
    sends_next_inline: bool  # Connection.on_message_complete may send the next request

    def start(self, worker: Worker) -> None: ...

    def on_answer(self, worker: Worker, conn) -> None: ...

    def on_lost(self, worker: Worker, conn) -> None: ...

    def stop(self, worker: Worker) -> None: ...

    def drain(self, worker: Worker, conn) -> bool: ...

    def expire(self, worker: Worker, limit_ns: int, error: int) -> None: ...

    def summary_extra(self, worker: Worker) -> dict: ...


class Worker:
    """Drives one load mode on one loop. Callbacks only; no per-request coroutines.

    The Worker owns the loop, the connections, the records, the phase's bounds and the
    self-checks; its mode object (modes/) decides when requests are issued and what becomes
    of a connection after an answer, and is called at the points listed in modes/base.py.

    What a mode may use: `spec`, `loop`, `rec`, `conns` (open connections), `keepalive`,
    `addr`, `issuing` (requests are being sent), `finishing`, `in_flight` (attempts begun
    and not ended: a mode counts those it begins outside send(), and those it ends itself),
    `max_requests`, `start_ns`, `measure_start_ns`, `end_ns`; at(), new_socket(),
    open_connection(), request_for(), send(), drop(), failed_attempt(), stop_issuing(),
    maybe_finish(), on_failed(). Connection uses `fast`, `rec`, `max_requests`, `request`
    and the on_* callbacks.
    """

    def __init__(
        self, mode: ModeHooks, loop: asyncio.AbstractEventLoop, sink=None, seq_base: int = 0
    ) -> None:
        spec = mode.spec
        self.spec = spec
        self.mode = mode
        self.loop = loop
        self.keepalive = mode.keepalive
        self.request = build_request(spec, keepalive=self.keepalive)
        self.templated = spec.templated
        self.feed = None
        if spec.requests:  # a mix or a replay: bytes and each row's request index from a feed
            self.feed = Feed(
                spec.requests,
                spec.headers,
                spec.host,
                spec.port,
                self.keepalive,
                spec.seed,
                spec.shard_index,
                spec.shard_count,
                seq_base,
                schedule=loop.call_soon,
            )
        elif spec.replay_file:
            self.feed = ReplayFeed(
                spec.replay_file,
                spec.replay_order,
                spec.replay_names,
                spec.headers,
                spec.host,
                spec.port,
                self.keepalive,
                spec.seed,
                spec.shard_index,
                spec.shard_count,
                schedule=loop.call_soon,
            )
        if self.feed is not None:
            self.send = self._send_mixed  # chosen once: the one-request send stays as it was
        # the fast path's next request: None sends `request` as it is; else request_for (a
        # mix or replay: its feed's take, bound directly on the hot path; {seq}: numbered anew)
        self.next_inline = None
        if self.templated:
            self.next_inline = self.feed.take if self.feed is not None else self.request_for
        self.max_requests = spec.max_requests
        self.rec = Records(chunk_rows=records.CHUNK_ROWS, sink=sink)
        self.seq = seq_base
        self.conns: list[Connection] = []
        self.in_flight = 0
        self.issuing = False
        self.finishing = False
        # Connection.on_message_complete sends the next request itself while this is set
        self.fast = mode.sends_next_inline
        self._next_ident = 0
        self._lags_ns: list[int] = []
        # timed sends: a timerfd where the host has one (hosttimer.py), else the loop's
        # millisecond timers, which need the early wake-up to reach below a millisecond
        self.timer = HostTimer.open(loop)
        floor_ns = EARLY_MIN_NS if self.timer is None else EARLY_MIN_PRECISE_NS
        self.wake = EarlyWake(
            spec.early_wake_ns or None, floor_ns=floor_ns, budget=spec.spin_budget
        )
        # tests only: a coarse VM's timer emulated on this host (coarse_timer.py)
        self.coarse = CoarseTimer.from_env()
        if self.coarse is not None:
            self.coarse.reseed(spec.seed, spec.shard_index)
        self._finished = asyncio.Event()
        info = socket.getaddrinfo(spec.host, spec.port, type=socket.SOCK_STREAM)[0]
        self.family, self.addr = info[0], info[4]
        self.tls = Sessions(spec) if spec.tls else None  # HTTPS: see open_connection

    # --- lifecycle ---------------------------------------------------------------------
    async def generate(self) -> dict:
        """Generate the phase's load; its summary once every request has ended."""
        spec = self.spec
        self.issuing = True
        self.start_ns = spec.start_at_ns or (_now() + START_DELAY_NS)
        self.measure_start_ns = self.start_ns + int(spec.warmup_s * 1e9)
        self.end_ns = self.measure_start_ns + int(spec.window_s * 1e9)
        begin = getattr(self.rec.sink, "begin", None)  # a bare callable sink has none
        if begin is not None:
            begin(self.start_ns, self.measure_start_ns, self.end_ns)
        if self.keepalive:
            await asyncio.gather(*(self.open_connection() for _ in range(spec.connections)))
        self.loop.call_later(LAG_TICK_S, self._lag_tick, _now() + int(LAG_TICK_S * 1e9))
        self.loop.call_later(SWEEP_S, self._sweep)
        self.loop.call_later(SPILL_S, self._spill)
        self.mode.start(self)
        self.at(self.end_ns, self.stop_issuing)
        await self._finished.wait()
        return self._summary()

    def stop_issuing(self) -> None:
        """No more requests: end those queued, give those in flight timeout_s to answer."""
        self.issuing = self.fast = False
        self.mode.stop(self)
        if self.in_flight <= 0:
            self._finish()
        else:
            self.loop.call_later(self.spec.timeout_s, self._finish)

    def maybe_finish(self) -> None:
        """Finish now if issuing is over and nothing is in flight."""
        if not self.issuing and self.in_flight <= 0:
            self._finish()

    def _finish(self) -> None:
        if self.finishing:
            return
        self.finishing = True
        self.mode.expire(self, _now() + 1, UNFINISHED)
        for conn in list(self.conns):
            if conn.row >= 0:
                conn.abort(UNFINISHED)
            elif conn.transport is not None:
                conn.transport.close()
        self._finished.set()

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
                a["error"][open_rows] = np.where(
                    (started > 0) & (started < limit), TIMEOUT, UNFINISHED
                )
                a["done_ns"][open_rows] = t
                c.final += int(open_rows.size)
                count += int(open_rows.size)
        return count

    # --- for the mode ------------------------------------------------------------------
    def at(self, when_ns: int, fn, *args) -> None:
        """Call fn at when_ns, never early and, as far as the host's timer allows, not late:
        the timer is aimed the early wake-up (wake.py) before the instant and the last stretch
        is polled."""
        now = _now()
        wait_ns = when_ns - now
        if wait_ns <= 0:
            fn(*args)
            return
        coarse = self.coarse
        lead_ns = 0 if coarse is not None and coarse.sleep else self.wake.lead_ns(now)
        if wait_ns > lead_ns:
            aimed_ns = when_ns - lead_ns
            # the emulated coarse timer fires late; the early wake-up learns it as it would
            fire_ns = aimed_ns + coarse.draw() if coarse is not None else aimed_ns
            if self.timer is not None:
                self.timer.schedule(fire_ns, self._woke, aimed_ns, when_ns, fn, args)
            else:
                delay_s = (fire_ns - now) / 1e9
                self.loop.call_later(delay_s, self._woke, aimed_ns, when_ns, fn, args)
        else:
            self.loop.call_soon(self._poll, now, when_ns, fn, args)

    def _woke(self, aimed_ns: int, when_ns: int, fn, args: tuple) -> None:
        now = _now()
        self.wake.woke(aimed_ns, now)
        self._poll(now, when_ns, fn, args)

    def _poll(self, since_ns: int, when_ns: int, fn, args: tuple) -> None:
        now = _now()
        if now < when_ns:
            self.loop.call_soon(self._poll, since_ns, when_ns, fn, args)
            return
        self.wake.polled(now - since_ns)
        fn(*args)

    def new_socket(self) -> socket.socket:
        sock = socket.socket(self.family, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    async def _connected(self, sock: socket.socket | None) -> socket.socket:
        """sock, or a new socket connected to the target (closed again if the connect fails)."""
        if sock is not None:
            return sock
        sock = self.new_socket()
        try:
            await self.loop.sock_connect(sock, self.addr)
        except BaseException:
            sock.close()
            raise
        return sock

    async def open_connection(self, sock: socket.socket | None = None) -> Connection | None:
        """A new connection (resolved once, no per-connect name lookup), or None on failure.
        With sock: a socket whose connect already completed. HTTPS: a TlsConnection, returned
        once its handshake is over (a failed handshake counts as a failed connect)."""
        if self.tls is not None:
            return await self._open_tls(sock)
        conn = Connection(self, self._next_ident)
        self._next_ident += 1
        try:
            sock = await self._connected(sock)
            await self.loop.create_connection(lambda: conn, sock=sock)
        except OSError:
            return None
        self.conns.append(conn)
        return conn

    async def _open_tls(self, sock: socket.socket | None) -> TlsConnection | None:
        tls = self.tls
        conn = TlsConnection(self, self._next_ident, tls)
        self._next_ident += 1
        if tls.resume and tls.context.session is None:
            # no connection has closed yet: take a live one's ticket (the newest few only, so
            # a server that sends none does not cost a scan of every connection per connect)
            for other in self.conns[-4:]:
                tls.remember(other.ssl_object)
                if tls.context.session is not None:
                    break
        try:
            sock = await self._connected(sock)
            t0 = _now()
            await self.loop.create_connection(
                lambda: conn, sock=sock, ssl=tls.context, server_hostname=tls.server_name
            )
        except OSError:  # ssl.SSLError included
            return None
        conn.handshake_ms = (_now() - t0) / 1e6
        tls.opened(conn.ssl_object, conn.handshake_ms)
        self.conns.append(conn)
        return conn

    def next_request(self) -> bytes:
        """The bytes of the next request (its own {seq} number when templated)."""
        if not self.templated:
            return self.request
        self.seq += 1
        return build_request(self.spec, self.seq, keepalive=self.keepalive)

    def request_for(self, chunk: Chunk, row: int) -> bytes:
        """The bytes of the next request, which row `row` of chunk records (a mix: the row
        notes which request of the mix it is)."""
        if self.feed is not None:
            return self.feed.take(chunk, row)
        return self.next_request()

    def send(self, conn: Connection, chunk: Chunk, row: int) -> None:
        """Send the next request on conn as row `row` of chunk, counted in flight."""
        self.in_flight += 1
        conn.send(chunk, row, self.next_request())

    def _send_mixed(self, conn: Connection, chunk: Chunk, row: int) -> None:
        """send() for a mix (it replaces send on such a Worker)."""
        self.in_flight += 1
        conn.send(chunk, row, self.feed.take(chunk, row))

    def drop(self, conn: Connection) -> None:
        """Forget conn (closed, or done with)."""
        if conn in self.conns:
            self.conns.remove(conn)

    def failed_attempt(self, intended_ns: int, t0: int, error: int) -> None:
        """Record an attempt that failed before it had a connection."""
        chunk, row = self.rec.new(intended_ns)
        chunk.sent_ns[row] = t0
        self.unsent(chunk, row)
        chunk.end(row, error, _now())

    def unsent(self, chunk: Chunk, row: int) -> None:
        """A row that ends before its request was sent: with a mix, it still counts under the
        request it would have been (its endpoint's errors are its own, not request 0's)."""
        if self.feed is not None:
            self.feed.take(chunk, row)

    # --- connection callbacks ----------------------------------------------------------
    def on_done(self, conn: Connection) -> None:
        self.in_flight -= 1
        if not self.issuing:
            if not self.mode.drain(self, conn):
                self.maybe_finish()
            return
        self.mode.on_answer(self, conn)

    def on_failed(self, conn: Connection | None) -> None:
        self.in_flight -= 1
        if not self.issuing:
            self.maybe_finish()

    def on_lost(self, conn: Connection) -> None:
        was_member = conn in self.conns
        self.drop(conn)
        if not self.issuing:
            self.maybe_finish()
            return
        if was_member:
            self.mode.on_lost(self, conn)

    # --- self-checks and housekeeping ----------------------------------------------------
    def _lag_tick(self, expected_ns: int) -> None:
        """Event-loop lag: how late a 10 ms timer fires (libuv timers have 1 ms resolution)."""
        now = _now()
        self._lags_ns.append(now - expected_ns)
        if not self._finished.is_set():
            self.loop.call_later(LAG_TICK_S, self._lag_tick, now + int(LAG_TICK_S * 1e9))

    def _sweep(self) -> None:
        limit = _now() - int(self.spec.timeout_s * 1e9)
        self.mode.expire(self, limit, TIMEOUT)
        for conn in list(self.conns):
            if conn.row >= 0 and conn.chunk.sent_ns[conn.row] < limit:
                conn.abort(TIMEOUT)
        if not self._finished.is_set():
            self.loop.call_later(SWEEP_S, self._sweep)

    def _spill(self) -> None:
        self.rec.spill()
        if not self._finished.is_set():
            self.loop.call_later(SPILL_S, self._spill)

    def _summary(self) -> dict:
        lags = np.asarray(self._lags_ns, dtype=np.float64) / 1e6
        out = {
            "start_ns": self.start_ns,
            "measure_start_ns": self.measure_start_ns,
            "measure_end_ns": self.end_ns,
            "loop_lag_p99_ms": float(np.percentile(lags, 99)) if lags.size else 0.0,
            "loop_lag_max_ms": float(lags.max()) if lags.size else 0.0,
        }
        out.update(self.wake.summary())
        if self.coarse is not None:
            out["emulated_coarse_timer"] = "sleep" if self.coarse.sleep else "early wake"
        if self.tls is not None:
            out.update(self.tls.summary())
        out.update(self.mode.summary_extra(self))
        return out

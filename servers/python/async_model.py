"""Model `async`: one asyncio loop on uvloop, an asyncio.Protocol per connection.

spin_us busy-spins on the loop (it blocks every connection: that models CPU work); sleep_us
is an asyncio.sleep. Pipelined requests are served one after another, in order.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import time

import uvloop
from protocol import DbPending, Pending, State, handle
from request_reader import Session

_now = time.perf_counter_ns
MAX_PENDING = 64  # parsed-but-unserved requests per connection before we stop reading


class Conn(asyncio.Protocol):
    def __init__(self, state: State, loop: asyncio.AbstractEventLoop):
        self.st, self.loop = state, loop
        self.transport = None
        self.session = Session()
        self.pending: collections.deque = collections.deque()
        self.task = None
        self.closed = False
        self.write_paused = False
        self.read_paused = False
        self.last = loop.time()
        self.timer = None

    # -- asyncio.Protocol --
    def connection_made(self, transport):
        self.transport = transport
        self.st.connections += 1
        try:
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, AttributeError):
            pass
        self.timer = self.loop.call_later(self.st.idle_timeout_s, self._idle_check)

    def connection_lost(self, exc):
        self.closed = True
        self.st.connections -= 1
        self.st.queued -= len(self.pending)
        self.pending.clear()
        if self.timer:
            self.timer.cancel()
        if self.task:
            self.task.cancel()

    def data_received(self, data):
        self.last = self.loop.time()
        items = self.session.feed(data)
        if items:
            self.pending.extend(items)
            self.st.queued += len(items)
            if len(self.pending) > MAX_PENDING and not self.read_paused:
                self.read_paused = True
                self.transport.pause_reading()
        if self.task is None:
            self._drain()

    def eof_received(self):
        # half-closed by the client: answer what we have, then close
        if not self.pending and self.task is None:
            return False
        self.session.done = True
        return True

    def pause_writing(self):
        self.write_paused = True

    def resume_writing(self):
        self.write_paused = False
        if self.task is None and not self.closed:
            self._drain()

    # -- serving --
    def _drain(self):
        while self.pending and not self.closed and not self.write_paused:
            item = self.pending.popleft()
            self.st.queued -= 1
            t_start = _now()
            r = handle(self.st, item, t_start - item.t_done, t_start)
            if isinstance(r, DbPending):
                self.task = self.loop.create_task(self._db_then(r))
                return
            if isinstance(r, Pending):
                if r.sleep_s > 0:
                    self.task = self.loop.create_task(self._sleep_then(r))
                    return
                r = r.finish()
            self._write(*r)
        if self.read_paused and len(self.pending) <= MAX_PENDING // 2 and not self.closed:
            self.read_paused = False
            self.transport.resume_reading()
        if not self.pending and self.session.done and not self.closed and self.task is None:
            # the parser is finished (close, error or EOF) and everything is answered
            self.closed = True
            self.transport.close()

    async def _sleep_then(self, pending: Pending):
        try:
            await asyncio.sleep(pending.sleep_s)
            if self.closed:
                pending.finish()
                return
            self._write(*pending.finish())
        finally:
            self.task = None
        self.last = self.loop.time()
        self._drain()

    async def _db_then(self, pending: DbPending):
        try:
            r = await self.st.db.run(pending)
            if self.closed:
                return
            self._write(*r)
        finally:
            self.task = None
        self.last = self.loop.time()
        self._drain()

    def _write(self, data: bytes, close: bool):
        if self.closed:
            return
        self.transport.write(data)
        self.st.requests += 1
        self.last = self.loop.time()
        if close:
            self.closed = True
            self.transport.close()

    def _idle_check(self):
        """Close a connection idle for the timeout, or one whose request has been trickling
        in for that long (slowloris: bytes keep coming, so it is never idle)."""
        if self.closed:
            return
        limit = self.st.idle_timeout_s
        since = self.session.request_since_ns
        trickling = (_now() - since) / 1e9 if since is not None else 0.0
        idle = self.loop.time() - self.last
        if trickling >= limit or (self.task is None and not self.pending and idle >= limit):
            self.transport.abort()
            return
        wait = min(limit - idle, limit - trickling if since is not None else limit)
        self.timer = self.loop.call_later(max(0.05, wait), self._idle_check)


def run(state: State, sock: socket.socket, announce, tls=None) -> int:
    """Serve forever; server.py's signal thread ends the process. tls: an ssl.SSLContext
    (HTTPS on every connection) or None."""
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)

    async def main():
        await loop.create_server(
            lambda: Conn(state, loop), sock=sock, backlog=state.backlog, ssl=tls
        )
        announce()

    loop.run_until_complete(main())
    loop.run_forever()
    return 0

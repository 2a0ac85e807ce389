"""/db for the Python server: PostgreSQL through psycopg 3 (servers/PROTOCOL.md, /db).

`SyncDb` (model `pool`): one connection per worker thread, opened on the thread's first /db
request. `AsyncDb` (model `async`): a pool of `--db-pool` AsyncConnections on the event loop.
A connection that fails is dropped and the next request opens a new one, so a database that
comes back is used again; while it is down every /db request answers 503 with the reason.
psycopg is imported only when `--db` is given.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

from protocol import DbPending

_now = time.perf_counter_ns
CONNECT_TIMEOUT_S = 2
COLUMNS = "id, name, email, city, score"
POINT = f"SELECT {COLUMNS} FROM participants WHERE id = %s"
RANGE = f"SELECT {COLUMNS} FROM participants WHERE id >= %s ORDER BY id LIMIT %s"
INSERT = "INSERT INTO registrations (participant_id, note) VALUES (%s, %s) RETURNING id"
# the oldest registration; concurrent deletes each take another (SKIP LOCKED), none waits
DELETE = (
    "DELETE FROM registrations WHERE id = (SELECT id FROM registrations ORDER BY id "
    "LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
)
META = "SELECT participants FROM perfctl_meta"


def _statement(p: DbPending, participants: int, rng: random.Random) -> tuple[str, tuple]:
    if p.query == "point":
        return POINT, (rng.randint(1, participants),)
    if p.query == "range":
        return RANGE, (rng.randint(1, max(1, participants - p.rows + 1)), p.rows)
    if p.query == "delete":
        return DELETE, ()
    return INSERT, (rng.randint(1, participants), "perfctl /db insert")


def _why(e: Exception) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__


def _driver():
    """psycopg, imported when a server is given --db (an ImportError tells it the package is
    missing): only servers with a database need the driver."""
    import psycopg  # only servers given --db need the driver

    return psycopg


class SyncDb:
    """Per-thread blocking connections (model pool)."""

    def __init__(self, dsn: str | None, seed: int) -> None:
        self.dsn = dsn
        self.local = threading.local()
        self.seed = seed
        if dsn:
            self.psycopg = _driver()

    def _conn(self):
        loc = self.local
        if getattr(loc, "conn", None) is None:
            loc.conn = self.psycopg.connect(
                self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
            )
            loc.participants = loc.conn.execute(META).fetchone()[0]
            loc.rng = random.Random(self.seed * 1_000_003 + threading.get_ident())
        return loc

    def run(self, p: DbPending) -> tuple[bytes, bool]:
        if not self.dsn:
            return p.failed("no database configured (start the server with --db URI)")
        t0 = _now()
        try:
            loc = self._conn()
            sql, args = _statement(p, loc.participants, loc.rng)
            t0 = _now()
            rows = len(loc.conn.execute(sql, args).fetchall())
        except Exception as e:  # noqa: BLE001 - any driver error is a 503
            self._drop()
            return p.failed(_why(e), _now() - t0)
        return p.done(rows, _now() - t0)

    def _drop(self) -> None:
        conn = getattr(self.local, "conn", None)
        self.local.conn = None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass


class AsyncDb:
    """A pool of `size` AsyncConnections, opened on demand (model async)."""

    def __init__(self, dsn: str | None, seed: int, size: int) -> None:
        self.dsn, self.size = dsn, max(1, size)
        self.rng = random.Random(seed)
        self.idle: list = []
        self.opened = 0
        self.free: asyncio.Semaphore | None = None
        self.participants = 0
        if dsn:
            self.psycopg = _driver()

    async def run(self, p: DbPending) -> tuple[bytes, bool]:
        if not self.dsn:
            return p.failed("no database configured (start the server with --db URI)")
        if self.free is None:
            self.free = asyncio.Semaphore(self.size)
        async with self.free:
            t0 = _now()
            conn = None
            try:
                conn = self.idle.pop() if self.idle else await self._open()
                sql, args = _statement(p, self.participants, self.rng)
                t0 = _now()
                cur = await conn.execute(sql, args)
                rows = len(await cur.fetchall())
            except Exception as e:  # noqa: BLE001 - any driver error is a 503
                if conn is not None:
                    try:
                        await conn.close()
                    except Exception:  # noqa: BLE001
                        pass
                return p.failed(_why(e), _now() - t0)
            self.idle.append(conn)
            return p.done(rows, _now() - t0)

    async def _open(self):
        conn = await self.psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
        )
        cur = await conn.execute(META)
        self.participants = (await cur.fetchone())[0]
        return conn

"""Where the history lives, and the one way to read and write it.

Which store (the first that applies):
  1. `--store PATH|URL` on the command line;
  2. the environment variable PERFCTL_HISTORY_URL (a postgresql:// URL or a file path), so CI
     can point every run at a shared store and keep its password out of files;
  3. the experiment file's `history: {url: ...}` or `history: {path: ...}` (a path relative to
     the experiment file);
  4. results/history.sqlite under the current directory.

SQLite (the default) is one file in WAL mode: readers never wait for a writer, and a writer
waits up to BUSY_TIMEOUT_S (PERFCTL_HISTORY_BUSY_S overrides it) for another writer before
the store counts as locked. PostgreSQL (`postgresql://USER[:PASSWORD]@HOST:PORT/DB`) is
reached with psycopg; each add is one transaction, and schema steps run under an advisory
lock. Adding a run is idempotent: every row has a primary key and is inserted with ON
CONFLICT DO NOTHING, so the same run added twice (or from two processes at once) is kept
once, and a resumed run adds only the trials the store lacks.

Every failure to open, read or write a store is a PerfctlError of one paragraph naming the
store, what is wrong with it and the fix: locked, corrupt, from a newer perfctl (schema),
unreachable.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import PerfctlError
from .migrations import LATEST, MIGRATIONS

DEFAULT_PATH = Path("results") / "history.sqlite"
ENV_URL = "PERFCTL_HISTORY_URL"
BUSY_TIMEOUT_S = 10.0
PG_CONNECT_TIMEOUT_S = 5
PG_LOCK_ID = 290029  # pg_advisory_xact_lock key of schema steps (issue 29)
IMPORT_FIX = "perfctl history import RUN_DIR... adds runs from their directories later"


def _psycopg():
    """The PostgreSQL driver, loaded on first use: only a PostgreSQL store connects with it or
    raises its errors."""
    import psycopg  # the driver loads only for a PostgreSQL store

    return psycopg


@dataclass(frozen=True)
class Location:
    """A store: a PostgreSQL URL or an SQLite file, and where that choice came from."""

    target: str  # the URL, or the file's path
    source: str  # "--store", "PERFCTL_HISTORY_URL", "FILE: key `history.url`", "the default"

    @property
    def is_postgres(self) -> bool:
        return self.target.startswith(("postgresql://", "postgres://"))

    def __str__(self) -> str:
        return _redact(self.target) if self.is_postgres else self.target


def _redact(url: str) -> str:
    """The URL with its password (if any) replaced by ***: error messages reach CI logs."""
    head, sep, tail = url.partition("://")
    if "@" not in tail:
        return url
    cred, at, rest = tail.rpartition("@")
    if ":" in cred:
        cred = cred.split(":", 1)[0] + ":***"
    return f"{head}{sep}{cred}{at}{rest}"


def locate(
    store: str | Path | None = None,
    config=None,
    source: str | Path | None = None,
) -> Location:
    """The store to use (module docstring): `store` from the command line, the environment,
    `config` (the experiment's History model, or None) read from the file `source`, or the
    default."""
    if store is not None and str(store) != "":
        return Location(str(store), "--store")
    env = os.environ.get(ENV_URL, "").strip()
    if env:
        return Location(env, ENV_URL)
    if config is not None and getattr(config, "url", None):
        return Location(config.url, f"{source}: key `history.url`")
    if config is not None and getattr(config, "path", None):
        base = Path(source).resolve().parent if source else Path.cwd()
        return Location(str(base / config.path), f"{source}: key `history.path`")
    return Location(str(DEFAULT_PATH.resolve()), "the default")


def busy_timeout_s() -> float:
    try:
        return max(0.0, float(os.environ.get("PERFCTL_HISTORY_BUSY_S", BUSY_TIMEOUT_S)))
    except ValueError:
        return BUSY_TIMEOUT_S


class Store:
    """An open history store (use as a context manager, or call close()).

    create=False refuses to create a store that is not there (show and check read only)."""

    def __init__(self, location: Location, create: bool = True) -> None:
        self.location = location
        self.postgres = location.is_postgres
        self._conn = self._connect_postgres() if self.postgres else self._connect_sqlite(create)
        try:
            self._migrate()
        except BaseException:
            self.close()
            raise

    # -- opening -----------------------------------------------------------------------------

    def _connect_sqlite(self, create: bool):
        path = Path(self.location.target)
        if not path.is_file():
            if not create:
                raise PerfctlError(
                    f"history store {path} ({self.location.source}) does not exist: no run "
                    "has been added to it yet. Fix: run an experiment (perfctl run adds every "
                    "finished run), or add existing runs with perfctl history import "
                    "results/*/*, or name another store with --store PATH|URL."
                )
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise self._unreachable(e.strerror or str(e)) from None
        try:
            conn = sqlite3.connect(path, timeout=busy_timeout_s(), isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s() * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            # WAL + NORMAL: a crash keeps the file whole, a power cut may drop the last adds,
            # which `history import` restores from their run directories
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as e:
            raise self._sqlite_error(e) from None
        return conn

    def _connect_postgres(self):
        psycopg = _psycopg()
        try:
            conn = psycopg.connect(
                self.location.target, connect_timeout=PG_CONNECT_TIMEOUT_S, autocommit=True
            )
            conn.execute(f"SET lock_timeout = '{int(busy_timeout_s() * 1000)}ms'")
        except psycopg.Error as e:
            raise self._unreachable(str(e).strip().splitlines()[0] if str(e) else "") from None
        return conn

    def _migrate(self) -> None:
        version = self._version()
        if version == LATEST:
            return
        if version > LATEST:
            raise self._newer(version)
        with self.transaction():
            if self.postgres:
                self._execute("SELECT pg_advisory_xact_lock(?)", (PG_LOCK_ID,))
            self._execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = self._execute("SELECT version FROM schema_version").fetchone()
            if row is None:
                self._execute("INSERT INTO schema_version (version) VALUES (0)")
            version = row[0] if row else 0
            if version > LATEST:
                raise self._newer(version)
            for m in MIGRATIONS:
                if m.version > version:
                    for sql in m.statements:
                        self._execute(sql)
                    self._execute("UPDATE schema_version SET version = ?", (m.version,))

    def _version(self) -> int:
        """The schema version (0: a new, empty store)."""
        if self.postgres:
            exists = self._execute("SELECT to_regclass('schema_version')").fetchone()[0]
        else:
            exists = self._execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            ).fetchone()
        if not exists:
            return 0
        row = self._execute("SELECT version FROM schema_version").fetchone()
        return int(row[0]) if row else 0

    # -- errors, one paragraph each ----------------------------------------------------------

    def _where(self) -> str:
        return f"history store {self.location} ({self.location.source})"

    def _unreachable(self, why: str) -> PerfctlError:
        fix = (
            "start that PostgreSQL server or correct the URL (host, port, user, password, "
            "database) in --store, PERFCTL_HISTORY_URL or the experiment's history.url"
            if self.postgres
            else "make its directory writable, or name another store with --store PATH"
        )
        return PerfctlError(f"{self._where()} cannot be reached: {why}. Fix: {fix}.")

    def _newer(self, version: int) -> PerfctlError:
        return PerfctlError(
            f"{self._where()} has schema version {version}, written by a newer perfctl; this "
            f"one knows versions up to {LATEST} and never downgrades a store. Fix: upgrade "
            "perfctl (pip install -U perfctl), or name another store with --store."
        )

    def _sqlite_error(self, e: sqlite3.Error) -> PerfctlError:
        text = str(e)
        if "locked" in text or "busy" in text:
            return PerfctlError(
                f"{self._where()} is locked: another process held it for longer than "
                f"{busy_timeout_s():g} s ({text}). Fix: wait for that process (another perfctl "
                "run or history import) to finish and try again, or raise "
                "PERFCTL_HISTORY_BUSY_S; a run directory is never lost, and "
                f"{IMPORT_FIX}."
            )
        if isinstance(e, sqlite3.DatabaseError) and (
            "not a database" in text or "malformed" in text or "corrupt" in text
        ):
            return PerfctlError(
                f"{self._where()} is corrupt: {text}. Fix: move it aside (mv "
                f"{self.location} {self.location}.broken) and rebuild the history from the run "
                "directories with perfctl history import results/*/*."
            )
        if "unable to open" in text or "readonly" in text or "disk" in text:
            return self._unreachable(text)
        return PerfctlError(f"{self._where()}: {text}. Fix: check the store, or use --store.")

    def _error(self, e: Exception) -> PerfctlError:
        if isinstance(e, sqlite3.Error):
            return self._sqlite_error(e)
        psycopg = _psycopg()
        if isinstance(e, psycopg.errors.LockNotAvailable):
            return PerfctlError(
                f"{self._where()} is locked: a lock was held longer than {busy_timeout_s():g} s. "
                f"Fix: try again when the other writer is done; {IMPORT_FIX}."
            )
        if isinstance(e, psycopg.OperationalError):
            return self._unreachable(str(e).strip().splitlines()[0])
        return PerfctlError(f"{self._where()}: {e}. Fix: check the store, or use --store.")

    def _db_errors(self) -> tuple[type[Exception], ...]:
        if self.postgres:
            return (_psycopg().Error,)
        return (sqlite3.Error,)

    # -- statements --------------------------------------------------------------------------

    def _execute(self, sql: str, params: tuple | list = ()):
        if self.postgres:
            sql = sql.replace("?", "%s")
        try:
            return self._conn.execute(sql, params)
        except self._db_errors() as e:
            raise self._error(e) from None

    def transaction(self):
        return _Transaction(self)

    def close(self) -> None:
        try:
            self._conn.close()
        except Exception:  # closing a broken connection: nothing left to do
            pass

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing -----------------------------------------------------------------------------

    def add(self, record) -> AddResult:
        """Add one run (record.RunRecord): its run row, trials, capacities and labels, each
        kept once. Returns what was new."""
        r = record
        added = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self.transaction():
            new_run = self._insert(
                "runs",
                ("run_id", "experiment", "started", "commit_sha", "host_fingerprint", "host")
                + ("run_dir", "added"),
                (r.run_id, r.experiment, r.started, r.commit, r.host_fingerprint)
                + (json.dumps(r.host, sort_keys=True, default=str), r.run_dir, added),
                "run_id",
            )
            trials = sum(
                self._insert(
                    "trials",
                    tuple(t),
                    (r.run_id, *t.values()),
                    "run_id, cell_id, trial",
                    lead="run_id",
                )
                for t in r.trials
            )
            caps = sum(
                self._insert(
                    "capacities", tuple(c), (r.run_id, *c.values()), "run_id, cell_id", "run_id"
                )
                for c in r.capacities
            )
            for k, v in sorted(r.labels.items()):
                self._insert("labels", ("run_id", "key", "value"), (r.run_id, k, v), "run_id, key")
        return AddResult(r.run_id, bool(new_run), trials, caps)

    def _insert(
        self, table: str, columns: tuple, values: tuple, key: str, lead: str | None = None
    ) -> int:
        cols = ((lead,) if lead else ()) + tuple(columns)
        marks = ", ".join("?" for _ in cols)
        cur = self._execute(
            f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks}) "
            f"ON CONFLICT ({key}) DO NOTHING",
            values,
        )
        return max(cur.rowcount, 0)

    # -- reading -----------------------------------------------------------------------------

    def _table(self, sql: str, params: tuple = ()) -> tuple[list[str], list[tuple]]:
        cur = self._execute(sql, params)
        names = [d[0] for d in cur.description]
        try:
            return names, cur.fetchall()
        except self._db_errors() as e:
            raise self._error(e) from None

    def _rows(self, sql: str, params: tuple = ()) -> list[dict]:
        names, rows = self._table(sql, params)
        return [dict(zip(names, row)) for row in rows]

    def _filter(self, experiment: str | None) -> tuple[str, tuple]:
        return ("WHERE r.experiment = ?", (experiment,)) if experiment else ("", ())

    def trials(self, experiment: str | None = None) -> list[dict]:
        """Every trial with its run's columns, oldest run first."""
        names, rows = self.trials_table(experiment)
        return [dict(zip(names, row)) for row in rows]

    def trials_table(self, experiment: str | None = None) -> tuple[list[str], list[tuple]]:
        """trials() as column names and row tuples (what a DataFrame is made from fastest)."""
        where, params = self._filter(experiment)
        return self._table(
            "SELECT r.run_id, r.experiment, r.started, r.commit_sha, r.host_fingerprint, "
            "t.cell_id, t.cell_label, t.trial, t.throughput_rps, t.latency_p50_ms, "
            "t.latency_p99_ms, t.error_rate, t.valid, t.quiet FROM trials t JOIN runs r ON "
            f"r.run_id = t.run_id {where} ORDER BY r.started, r.run_id, t.cell_id, t.trial",
            params,
        )

    def capacities(self, experiment: str | None = None) -> list[dict]:
        """Every searched capacity with its run's columns, oldest run first."""
        where, params = self._filter(experiment)
        return self._rows(
            "SELECT r.run_id, r.experiment, r.started, r.commit_sha, r.host_fingerprint, "
            "c.cell_id, c.cell_label, c.capacity, c.low, c.high, c.unit, c.found FROM "
            f"capacities c JOIN runs r ON r.run_id = c.run_id {where} ORDER BY r.started, "
            "r.run_id, c.cell_id",
            params,
        )

    def runs(self, experiment: str | None = None) -> list[dict]:
        """Every run (without its trials), oldest first, with its labels as a dict."""
        where, params = self._filter(experiment)
        runs = self._rows(
            "SELECT r.run_id, r.experiment, r.started, r.commit_sha, r.host_fingerprint, "
            f"r.run_dir, r.added FROM runs r {where} ORDER BY r.started, r.run_id",
            params,
        )
        labels: dict[str, dict] = {}
        for row in self._rows("SELECT run_id, key, value FROM labels"):
            labels.setdefault(row["run_id"], {})[row["key"]] = row["value"]
        for r in runs:
            r["labels"] = labels.get(r["run_id"], {})
        return runs

    def host(self, run_id: str) -> dict:
        """The host facts a run was recorded with (record.host_facts), {} when unknown."""
        rows = self._rows("SELECT host FROM runs WHERE run_id = ?", (run_id,))
        try:
            return json.loads(rows[0]["host"]) if rows else {}
        except (TypeError, ValueError):
            return {}

    def experiments(self) -> list[str]:
        return [
            r["experiment"]
            for r in self._rows("SELECT DISTINCT experiment FROM runs ORDER BY experiment")
        ]

    def version(self) -> int:
        return self._version()


@dataclass(frozen=True)
class AddResult:
    run_id: str
    new_run: bool
    trials: int  # trial rows the store did not have
    capacities: int

    @property
    def changed(self) -> bool:
        return self.new_run or self.trials > 0 or self.capacities > 0


class _Transaction:
    """BEGIN IMMEDIATE (SQLite: take the write lock now, so a busy store fails at the start,
    within the busy timeout) or BEGIN (PostgreSQL); COMMIT on success, ROLLBACK otherwise."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self):
        self.store._execute("BEGIN" if self.store.postgres else "BEGIN IMMEDIATE")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.store._execute("COMMIT")
        else:
            try:
                self.store._conn.execute("ROLLBACK")
            except Exception:  # the connection itself failed: nothing to roll back
                pass


def open_store(location: Location, create: bool = True) -> Store:
    return Store(location, create)

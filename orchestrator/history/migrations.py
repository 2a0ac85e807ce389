"""The history store's schema, one numbered step at a time.

A store records the number of the last step applied in `schema_version` (one row). Opening a
store applies the steps it lacks, in order, in one transaction (store.py holds the lock that
keeps two processes from applying them together). A store whose version is higher than
LATEST was written by a newer perfctl: it is refused, never downgraded. A step, once
released, is never edited: a change of schema is a new step.

The SQL is the subset SQLite and PostgreSQL read alike (TEXT, INTEGER, DOUBLE PRECISION,
composite primary keys, ON CONFLICT DO NOTHING).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    version: int
    what: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "runs and their trials",
        (
            """CREATE TABLE runs (
                run_id TEXT PRIMARY KEY,
                experiment TEXT NOT NULL,
                started TEXT NOT NULL,
                commit_sha TEXT,
                host_fingerprint TEXT NOT NULL,
                host TEXT NOT NULL,
                run_dir TEXT,
                added TEXT NOT NULL
            )""",
            """CREATE TABLE trials (
                run_id TEXT NOT NULL REFERENCES runs (run_id),
                cell_id TEXT NOT NULL,
                cell_label TEXT NOT NULL,
                trial INTEGER NOT NULL,
                throughput_rps DOUBLE PRECISION,
                latency_p50_ms DOUBLE PRECISION,
                latency_p99_ms DOUBLE PRECISION,
                error_rate DOUBLE PRECISION,
                valid INTEGER NOT NULL,
                quiet INTEGER NOT NULL,
                PRIMARY KEY (run_id, cell_id, trial)
            )""",
            "CREATE INDEX runs_by_experiment ON runs (experiment, started)",
        ),
    ),
    Migration(
        2,
        "searched capacities and free labels",
        (
            """CREATE TABLE capacities (
                run_id TEXT NOT NULL REFERENCES runs (run_id),
                cell_id TEXT NOT NULL,
                cell_label TEXT NOT NULL,
                capacity DOUBLE PRECISION,
                low DOUBLE PRECISION,
                high DOUBLE PRECISION,
                unit TEXT NOT NULL,
                found INTEGER NOT NULL,
                PRIMARY KEY (run_id, cell_id)
            )""",
            """CREATE TABLE labels (
                run_id TEXT NOT NULL REFERENCES runs (run_id),
                key TEXT NOT NULL,
                value TEXT NOT NULL,
                PRIMARY KEY (run_id, key)
            )""",
        ),
    ),
)
LATEST = MIGRATIONS[-1].version

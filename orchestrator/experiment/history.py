"""`history:`: where `perfctl run` adds the finished run, and how it learns the version of the
system under test (orchestrator/history/ owns the store).

    history: false                                  # this experiment's runs are not added
    history: {path: perf/history.sqlite}            # an SQLite file (relative to this file)
    history: {url: "postgresql://ci@db.example:5432/perf"}   # a shared PostgreSQL
    history: {git: ../myserver}                     # the commit: git -C ../myserver rev-parse HEAD

Without the key every run is added to results/history.sqlite; PERFCTL_HISTORY_URL, when set,
names the store instead of `path` and `url` (a password belongs there, not in this file).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from .base import FrozenModel


class History(FrozenModel):
    """Where finished runs are added (docs/history.md)."""

    path: str | None = Field(
        None,
        description="SQLite file of the history, relative to the experiment file; default "
        "results/history.sqlite (the PERFCTL_HISTORY_URL environment variable overrides it)",
    )
    url: str | None = Field(
        None,
        description="a shared PostgreSQL store instead, postgresql://USER@HOST:PORT/DB (keep "
        "passwords in PERFCTL_HISTORY_URL, not in the file)",
    )
    git: str | None = Field(
        None,
        description="a git work tree of the system under test, relative to the experiment "
        "file: each run records its `git rev-parse HEAD` (perfctl run --commit overrides it)",
    )

    @field_validator("url")
    @classmethod
    def _postgres(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("postgresql://", "postgres://")):
            raise ValueError(
                f"{v!r} is not a PostgreSQL URL; write postgresql://USER@HOST:PORT/DB, or use "
                "`path` for an SQLite file"
            )
        if v is not None and urlsplit(v).password:
            # run.json keeps the experiment document: a password here would be on disk
            raise ValueError(
                "the URL carries a password, which would be written into every run's run.json; "
                "write it without one (postgresql://USER@HOST:PORT/DB) and give the password in "
                "PERFCTL_HISTORY_URL, PGPASSWORD or ~/.pgpass"
            )
        return v

    @model_validator(mode="after")
    def _one_store(self) -> History:
        if self.path and self.url:
            raise ValueError("give `path` (SQLite) or `url` (PostgreSQL), not both")
        return self

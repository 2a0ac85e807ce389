"""The `servers:` entries: a bundled server (impl + concurrency model) or any command."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .base import FrozenModel, Seconds
from .catalogue import db_servers, default_concurrency_model, has_db, unknown_impl_or_model

# the bundled servers that take --tls-cert and --tls-key: impl -> its models with TLS
TLS_MODELS = {"python": ("async", "pool"), "c": ("single", "thread", "pool")}
TLS_SERVERS = "python (async, pool), c (single, thread, pool)"


class ReadyCheck(FrozenModel):
    """How to tell a `cmd` server is ready: an HTTP GET path answering < 500, or a TCP accept."""

    http: str | None = Field(None, description="path to GET, e.g. /health")
    timeout_s: Seconds = Field(30.0, alias="timeout", description="give up after this long")


class BundledServer(FrozenModel):
    """One of perfctl's own servers (servers/PROTOCOL.md)."""

    impl: Literal["c", "java", "python"] = Field(description="which bundled server")
    model: str | None = Field(
        None, description="concurrency model (catalogue.py); default: the impl's first"
    )
    threads: int = Field(
        4,
        ge=1,
        le=100_000,
        description="worker threads or event loops (ignored by `single` and `thread`)",
    )
    backlog: int = Field(
        128,
        ge=1,
        le=1_000_000,
        description="listen(2) backlog (Java `pool`: also its queue of connections)",
    )
    buckets: int = Field(
        1024, ge=1, le=1 << 24, description="size of the shared counter array /work increments"
    )
    layout: Literal["flat", "by-type"] = Field(
        "flat",
        description="/search data layout: one array of (type, sentence), or one array per type",
    )
    variant: Literal["", "asan"] = Field(
        "", description="asan: the C server built with AddressSanitizer and UBSan"
    )
    db: str | None = Field(
        None,
        description="PostgreSQL connection URI for /db, usually "
        '"{services.db.dsn}" (services.py); without it /db answers 503',
    )
    db_pool: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="database connections in "
        "/db's pool (Java models and Python async; default: threads)",
    )
    startup_timeout_s: Seconds = Field(
        30.0, alias="startup_timeout", description="give up when not listening after this long"
    )
    tls: bool = Field(
        False,
        description="HTTPS (TLS 1.3) with a certificate perfctl makes for the trial, its CA "
        f"given to the load generator; bundled servers with TLS: {TLS_SERVERS}",
    )

    @model_validator(mode="after")
    def _check_model(self) -> BundledServer:
        problem = unknown_impl_or_model(self.impl, self.model)
        if problem:
            raise ValueError(problem)
        if self.tls and self.concurrency_model not in TLS_MODELS.get(self.impl, ()):
            raise ValueError(
                f"`tls: true`: the bundled {self.impl} server, model "
                f"{self.concurrency_model}, does not speak TLS; bundled servers that do: "
                f"{TLS_SERVERS}; or any `cmd` server with `tls: true` (it gets {{cert}} and "
                "{key})"
            )
        if self.db is not None and not has_db(self.impl, self.concurrency_model):
            raise ValueError(
                f"{self.impl} model {self.concurrency_model!r} has no /db endpoint; "
                f"`db:` works with {db_servers()}"
            )
        if self.db_pool is not None:
            if self.db is None:
                raise ValueError("db_pool sizes /db's connection pool: give `db:` too")
            if not (
                self.impl == "java" or (self.impl, self.concurrency_model) == ("python", "async")
            ):
                raise ValueError(
                    f"{self.impl} model {self.concurrency_model!r} has one database "
                    "connection per worker thread: set `threads`, not db_pool (db_pool "
                    "works with every Java model and python async)"
                )
        return self

    @property
    def concurrency_model(self) -> str:
        """The concurrency model that runs: `model` as written, or the impl's default."""
        return self.model or default_concurrency_model(self.impl)

    @property
    def label(self) -> str:
        return f"{self.impl}-{self.concurrency_model}"


class CommandServer(FrozenModel):
    """Any server: a shell command with {port} (and optionally {workdir}, {host})."""

    cmd: str = Field(
        description="shell command; {port}, {workdir} and {host} are filled in when it starts"
    )
    ready: ReadyCheck = Field(
        ReadyCheck(),
        description="when it is ready: {http: /path} answering < 500, else when its port "
        "accepts a TCP connection",
    )
    files: dict[str, str] = Field(
        default_factory=dict,
        description="files written into {workdir} before start; names are relative paths inside it",
    )
    threads: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="worker threads (event_loop: loops) the server runs; without it (or "
        "`dispatch`) perfctl probes the server before each trial",
    )
    dispatch: Literal["shared_queue", "per_connection", "event_loop"] | None = Field(
        None,
        description="how the server hands requests to its workers, for the queueing models "
        "(docs/models.md): shared_queue (one queue, any worker takes the next request), "
        "per_connection (a worker keeps its keep-alive connection), event_loop (a loop per "
        "thread, non-blocking); without it perfctl probes the server",
    )
    port: int | None = Field(None, ge=1, le=65535, description="fixed port; default: a free one")
    tls: bool = Field(
        False,
        description="HTTPS: perfctl makes a certificate for the trial and fills in {cert} "
        "and {key} (PEM files) in cmd and files (also in the environment as "
        "PERFCTL_TLS_CERT and PERFCTL_TLS_KEY); the load generator trusts its CA only. "
        "Needs `threads` and `dispatch` (the dispatch probe speaks plain HTTP)",
    )

    @model_validator(mode="after")
    def _tls_needs_dispatch(self) -> CommandServer:
        if self.tls and (self.threads is None or self.dispatch is None):
            raise ValueError(
                "`tls: true` needs `threads:` and `dispatch:` too: perfctl's dispatch probe, "
                "which would learn them, speaks plain HTTP"
            )
        return self

    @model_validator(mode="after")
    def _needs_port(self) -> CommandServer:
        # Most real servers (nginx, PostgreSQL, Tomcat) read their port from a config file, so
        # {port} in one of `files` counts as much as {port} on the command line.
        if "{port}" in self.cmd or any("{port}" in text for text in self.files.values()):
            return self
        if self.port is not None:
            return self
        raise ValueError(
            "{port} appears neither in cmd nor in any of its files: perfctl puts "
            "the port to listen on there (e.g. `--port {port}` in cmd, or "
            "`listen {port};` in files: {nginx.conf: ...}), or set `port:` to a "
            "fixed port the server uses"
        )

    @field_validator("files")
    @classmethod
    def _inside_workdir(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            parts = PurePosixPath(name).parts
            if not parts or name.startswith("/") or ".." in parts:
                raise ValueError(
                    f"file name {name!r} is not a relative path inside {{workdir}} "
                    "(no leading /, no ..); write e.g. `nginx.conf` or "
                    "`conf/site.conf` and refer to it as {workdir}/nginx.conf"
                )
        return v

    @property
    def label(self) -> str:
        return self.cmd.split()[0].rsplit("/", 1)[-1]


ServerConfig = BundledServer | CommandServer

"""`services:`: real components a server depends on, started and stopped by perfctl (the first
kind is `postgresql`), and the `{services.NAME.FIELD}` placeholders that let servers reach them.

```yaml
services:
  db: {kind: postgresql, scope: run, data: {participants: 10000}}
servers:
  py: {impl: python, model: async, db: "{services.db.dsn}"}
```

A service placeholder is filled when a server starts (like `{port}`), from the running service:
`dsn` is a libpq connection URI (`postgresql://perfctl:PASSWORD@127.0.0.1:PORT/perfctl`) with the
password perfctl made for this service (a new one every run); `host` is 127.0.0.1; `port` the TCP
port it listens on; `user` and `password` the credentials alone. A bundled server gets the
password in its environment (PGPASSWORD), not on its command line; a command line shown or
recorded by perfctl has it replaced by ***. Services take
no `{axis}` placeholders: one service may serve every cell of a run (`scope: run`).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationError

from .base import FrozenModel, Seconds
from .document import fail, matches, placeholders, validation_error

SERVICE_FIELDS = ("dsn", "host", "port", "user", "password")
SERVICE_PLACEHOLDER = re.compile(r"\{services\.([A-Za-z0-9_-]*)\.([A-Za-z0-9_]*)\}")
_DOTTED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*)+)\}")


class PostgresData(FrozenModel):
    """The seeded data: seed 003's participants table, `participants` rows."""

    participants: int = Field(
        10_000, ge=1, le=10_000_000, description="rows of the seeded `participants` table"
    )


class PostgresService(FrozenModel):
    """A PostgreSQL server of its own: initdb'd into the run directory, on a free loopback port,
    schema and data loaded, stopped and removed after the run or each trial (`scope`)."""

    kind: Literal["postgresql"] = Field(description="what the service is")
    scope: Literal["run", "trial"] = Field(
        "run", description="run: one server for the whole run; trial: a fresh one for every trial"
    )
    data: PostgresData = Field(PostgresData(), description="the data loaded after start-up")
    port: int | None = Field(
        None, ge=1, le=65535, description="fixed TCP port on 127.0.0.1; default: a free one"
    )
    max_connections: int = Field(200, ge=10, le=10_000, description="postgres max_connections")
    settings: dict[str, str | int | float] = Field(
        default_factory=dict,
        description="more postgres settings (`-c NAME=VALUE`), e.g. "
        "{shared_buffers: 256MB, synchronous_commit: 'off'}",
    )
    startup_timeout_s: Seconds = Field(
        60.0, alias="startup_timeout", description="give up when not ready after this long"
    )


ServiceConfig = PostgresService
KINDS = {"postgresql": PostgresService}


def compile_services(raw: dict[str, Any], source: str) -> dict[str, ServiceConfig]:
    """The `services:` block as typed models. PerfctlError naming the key on any problem."""
    out: dict[str, ServiceConfig] = {}
    for name, doc in raw.items():
        key = f"services.{name}"
        if not re.fullmatch(r"[A-Za-z0-9_-]+", str(name)):
            raise fail(
                source,
                key,
                "a service name is letters, digits, _ and - only",
                "rename it, e.g. `db`",
            )
        if not isinstance(doc, dict) or doc.get("kind") not in KINDS:
            got = doc.get("kind") if isinstance(doc, dict) else doc
            raise fail(
                source,
                f"{key}.kind",
                f"unknown service kind {got!r}",
                f"give one of: {', '.join(KINDS)}",
            )
        axes = placeholders(doc)
        if axes:
            raise fail(
                source,
                key,
                f"services take no placeholders (found "
                f"{{{sorted(axes)[0]}}}); one service serves every cell of its scope",
                "write the values out",
            )
        try:
            out[str(name)] = KINDS[doc["kind"]].model_validate(doc)
        except ValidationError as e:
            raise validation_error(source, key, e) from None
    return out


def service_refs(node: Any) -> set[tuple[str, str]]:
    """Every (service, field) named by a `{services.NAME.FIELD}` in a raw document node."""
    return matches(node, SERVICE_PLACEHOLDER)


def check_refs(servers: dict[str, Any], services: dict[str, ServiceConfig], source: str) -> None:
    """PerfctlError when a server names a service or field that does not exist, or writes a
    dotted placeholder that is no service placeholder (`{service.db.dsn}`)."""
    for name, doc in servers.items():
        key = f"servers.{name}"
        for dotted in matches(doc, _DOTTED):
            if not SERVICE_PLACEHOLDER.fullmatch("{" + dotted + "}"):
                raise fail(
                    source,
                    key,
                    f"placeholder {{{dotted}}} is not a service placeholder",
                    f"write {{services.NAME.FIELD}} with FIELD one of {', '.join(SERVICE_FIELDS)}",
                )
        for svc, field in sorted(service_refs(doc)):
            if svc not in services:
                raise fail(
                    source,
                    key,
                    f"placeholder {{services.{svc}.{field}}} names no service",
                    f"define `services: {{{svc}: {{kind: postgresql}}}}` or "
                    f"use one of: {', '.join(services) or '(no services defined)'}",
                )
            if field not in SERVICE_FIELDS:
                raise fail(
                    source,
                    key,
                    f"placeholder {{services.{svc}.{field}}}: a service has no field {field!r}",
                    f"use one of {', '.join(SERVICE_FIELDS)}",
                )


def fill(text: str, values: dict[str, dict[str, str]]) -> str:
    """text with every `{services.NAME.FIELD}` replaced from values[NAME][FIELD] (the running
    services' endpoints); a placeholder of a service not running is left as written."""

    def one(m: re.Match) -> str:
        return str(values.get(m.group(1), {}).get(m.group(2), m.group(0)))

    return SERVICE_PLACEHOLDER.sub(one, text)

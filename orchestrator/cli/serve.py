"""`perfctl serve`: one bundled server in the foreground, by hand."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from ..errors import PerfctlError
from ..experiment.catalogue import CONCURRENCY_MODELS, default_concurrency_model


def serve(
    impl: Annotated[str, typer.Argument(metavar="IMPL", help="c, java or python.")],
    model: Annotated[
        str | None,
        typer.Option(
            help="Concurrency model: "
            + "; ".join(f"{impl}: {', '.join(m)}" for impl, m in CONCURRENCY_MODELS.items())
            + "."
        ),
    ] = None,
    threads: Annotated[int, typer.Option(help="Worker threads / loops.")] = 4,
    backlog: Annotated[int, typer.Option(help="listen() backlog.")] = 128,
    buckets: Annotated[int, typer.Option(help="Counter array size.")] = 1024,
    layout: Annotated[str, typer.Option(help="/search layout: flat or by-type.")] = "flat",
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 8080,
) -> None:
    """Run one bundled server in the foreground (Ctrl-C stops it)."""
    from ..proc.ports import port_taken  # the command's own work, not start-up's
    from ..run import bundled  # builds and command lines: the command's own work

    bundled.check_impl(impl, model)
    if port_taken(port):
        raise PerfctlError(
            f"port {port} is already taken. Fix: pass another with --port, or stop "
            "the process holding it."
        )
    model = model or default_concurrency_model(impl)
    bundled.build(impl, model=model)
    argv = bundled.command(impl, model, port, threads, backlog, buckets, layout)
    os.execv(argv[0], argv)

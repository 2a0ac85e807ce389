"""`perfctl cluster certs DIR --hosts h1,h2,...`: the CA and certificates of a real cluster's
mutual TLS (cluster/certs.py), with the commands that use them. main.py mounts `app` as the
`cluster` group."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import PerfctlError
from .console import console

app = typer.Typer(
    help="Dask cluster tools: certificates for its mutual TLS.",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
)


@app.callback()
def _group() -> None:
    """Dask cluster tools: certificates for its mutual TLS."""


@app.command()
def certs(
    directory: Annotated[Path, typer.Argument(help="where to write them (created 0700)")],
    hosts: Annotated[
        str, typer.Option("--hosts", help="the workers' names, comma-separated: h1,h2,h3")
    ],
) -> None:
    """Make a CA and certificates for the scheduler, each worker host and the client."""
    names = [h.strip() for h in hosts.split(",") if h.strip()]
    if not names:
        raise PerfctlError(
            "perfctl cluster certs: --hosts names no host. Fix: give the workers' names, "
            "e.g. --hosts h1,h2."
        )
    from ..cluster.certs import write_set  # cryptography: loaded by this command only

    files = write_set(directory, names)
    d = directory
    console.print(
        f"certificates in {d}: ca.pem (every end), ca-key.pem (keep it off the cluster), "
        f"scheduler, client, {', '.join(names)} (NAME.pem, NAME-key.pem; keys 0600).\n"
        "Copy ca.pem and each end's pair to its machine, then start:\n"
        f"  DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION=True dask scheduler --protocol tls "
        f"--tls-ca-file ca.pem --tls-cert scheduler.pem --tls-key scheduler-key.pem\n"
        + "".join(
            f"  DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION=True dask worker tls://SCHEDULER:8786 "
            f"--name {n} --tls-ca-file ca.pem --tls-cert {n}.pem --tls-key {n}-key.pem\n"
            for n in names
        )
        + "and in the experiment:\n"
        f"  cluster: {{scheduler: tls://SCHEDULER:8786, tls: {{ca: {files['client'].ca}, "
        f"cert: {files['client'].cert}, key: {files['client'].key}}}}}",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )

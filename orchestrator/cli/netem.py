"""`perfctl netem ...`: the proxy in the foreground.

    perfctl netem proxy --listen 127.0.0.1:8081 --to 127.0.0.1:8080 --delay 10ms \
        [--delay-up D] [--delay-down D] [--jitter 2ms --distribution normal] [--loss 1% --rto 200ms]
        [--bandwidth 10mbit] [--echo-listen 127.0.0.1:0] [--seed 1] [--profile lte]
        [--jitter-correlation 25%] [--loss-burst p,r[,loss_bad,loss_good]] [--reorder 5%]
        [--reset 0.1%] [--blackhole 0.1%] [--cpus 2,3]

main.py mounts `app` as the `netem` group.
"""

from __future__ import annotations

import os
import sys

import typer

from ..errors import PerfctlError

app = typer.Typer(
    help="Network emulation: run perfctl-proxy by hand.",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
)


@app.callback()
def _group() -> None:
    """Network emulation: run perfctl-proxy by hand."""


def build_proxy_command(
    listen: str,
    to: str,
    delay: str | None = None,
    delay_up: str | None = None,
    delay_down: str | None = None,
    jitter: str | None = None,
    distribution: str = "uniform",
    loss: str | None = None,
    rto: str = "200ms",
    bandwidth: str | None = None,
    echo_listen: str | None = None,
    seed: int | None = None,
    binary: str = "perfctl-proxy",
    profile: str | None = None,
    jitter_correlation: str | None = None,
    loss_burst: str | None = None,
    reorder: str | None = None,
    reset: str | None = None,
    blackhole: str | None = None,
    cpus: str | None = None,
) -> list[str]:
    """Validate the options through Network (PerfctlError on bad units) and return argv."""
    from ..experiment.network import Network  # pydantic models: built when the proxy starts
    from ..netem.commands import proxy_argv  # netem/ and Network: when the proxy starts

    raw = {"backend": "proxy", "rto": rto}
    if distribution != "uniform":
        raw["distribution"] = distribution
    for key, value in (
        ("delay", delay),
        ("delay_up", delay_up),
        ("delay_down", delay_down),
        ("jitter", jitter),
        ("loss", loss),
        ("bandwidth", bandwidth),
        ("profile", profile),
        ("jitter_correlation", jitter_correlation),
        ("reorder", reorder),
        ("reset", reset),
        ("blackhole", blackhole),
    ):
        if value is not None:
            raw[key] = value
    if loss_burst is not None:
        parts = loss_burst.split(",")
        if not 2 <= len(parts) <= 4:
            raise PerfctlError(
                f"--loss-burst {loss_burst!r}: expected p,r[,loss_bad[,loss_good]], "
                "e.g. 1%,25% (Gilbert-Elliott)"
            )
        raw["loss_burst"] = dict(zip(("p", "r", "loss_bad", "loss_good"), parts))
    cpu_list = None
    if cpus is not None:
        try:
            cpu_list = [int(c) for c in cpus.split(",")]
        except ValueError:
            raise PerfctlError(
                f"--cpus {cpus!r}: expected a comma-separated list like 2,3"
            ) from None
    spec = Network.from_config(raw, where="netem proxy option")
    for flag, addr in (("--listen", listen), ("--to", to), ("--echo-listen", echo_listen)):
        if addr is not None and (":" not in addr or not addr.rsplit(":", 1)[1].isdigit()):
            raise PerfctlError(f"{flag} {addr!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    return proxy_argv(binary, spec, listen, to, echo_listen=echo_listen, seed=seed, cpus=cpu_list)


@app.command("proxy")
def proxy(
    listen: str = typer.Option(..., help="HOST:PORT to accept clients on (port 0 = any free port)"),
    to: str = typer.Option(..., help="HOST:PORT of the server"),
    delay: str | None = typer.Option(None, help="one-way delay each direction, e.g. 10ms"),
    delay_up: str | None = typer.Option(None, help="client->server delay (default: --delay)"),
    delay_down: str | None = typer.Option(None, help="server->client delay (default: --delay)"),
    jitter: str | None = typer.Option(None, help="jitter, e.g. 2ms"),
    distribution: str = typer.Option("uniform", help="uniform | normal | pareto"),
    loss: str | None = typer.Option(
        None, help="probability a chunk is held back one RTO (0.01 or 1%)"
    ),
    rto: str = typer.Option("200ms", help="hold-back time of a 'lost' chunk"),
    bandwidth: str | None = typer.Option(None, help="per-direction aggregate rate, e.g. 10mbit"),
    echo_listen: str | None = typer.Option(
        None, help="extra HOST:PORT echoing at the far end of the path"
    ),
    seed: int | None = typer.Option(None, help="seed of the jitter/loss draws"),
    profile: str | None = typer.Option(
        None, help="named profile: 3g, 3g-slow, lte, intercontinental, transatlantic, wifi-lossy"
    ),
    jitter_correlation: str | None = typer.Option(
        None, help="correlation of consecutive jitter draws, e.g. 25%"
    ),
    loss_burst: str | None = typer.Option(
        None, help="Gilbert-Elliott loss p,r[,loss_bad,loss_good], e.g. 1%,25%"
    ),
    reorder: str | None = typer.Option(None, help="probability a chunk skips the delay, e.g. 5%"),
    reset: str | None = typer.Option(None, help="probability a chunk resets its connection"),
    blackhole: str | None = typer.Option(
        None, help="probability a chunk black-holes its connection"
    ),
    cpus: str | None = typer.Option(None, help="pin one worker thread per CPU, e.g. 2,3"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the command line and exit"),
) -> None:
    """Run perfctl-proxy in the foreground until SIGTERM / Ctrl-C."""
    try:
        argv = build_proxy_command(
            listen,
            to,
            delay,
            delay_up,
            delay_down,
            jitter,
            distribution,
            loss,
            rto,
            bandwidth,
            echo_listen,
            seed,
            profile=profile,
            jitter_correlation=jitter_correlation,
            loss_burst=loss_burst,
            reorder=reorder,
            reset=reset,
            blackhole=blackhole,
            cpus=cpus,
        )
        if dry_run:
            typer.echo(" ".join(argv))
            return
        from ..netem.build import build_proxy  # netem/ loads the network models: not at start-up

        binary = str(build_proxy())
    except PerfctlError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(binary, [binary, *argv[1:]])


if __name__ == "__main__":  # pragma: no cover
    app()

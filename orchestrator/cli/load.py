"""`perfctl load URL`: the flags of perfctl.load() (api/load_url.py), which does the work, and
its figures printed as lines or as one JSON object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ..numbers import fmt


def load(
    url: Annotated[
        str,
        typer.Argument(metavar="URL", help="http://host:port/path?query (or https://) to load."),
    ],
    connections: Annotated[
        int, typer.Option("--connections", "-c", help="Connections (burst: per release).")
    ] = 10,
    duration: Annotated[
        str, typer.Option("--duration", "-d", help="Measured time, e.g. 10s.")
    ] = "10s",
    warmup: Annotated[str, typer.Option(help="Warm-up before measuring.")] = "1s",
    rate: Annotated[
        float | None, typer.Option(help="Open mode: arrivals per second (implies --mode open).")
    ] = None,
    mode: Annotated[str | None, typer.Option(help="closed | open | burst | ramp.")] = None,
    arrivals: Annotated[
        str, typer.Option(help="Open mode: poisson | constant | uniform.")
    ] = "poisson",
    processes: Annotated[int, typer.Option("--processes", "-P", help="Worker processes.")] = 1,
    cpus: Annotated[str | None, typer.Option(help="Pin workers to CPUs, e.g. 1 or 0,1.")] = None,
    think: Annotated[str, typer.Option(help="Closed mode: think time per request.")] = "0s",
    timeout: Annotated[str, typer.Option(help="Per-request timeout.")] = "5s",
    no_keepalive: Annotated[
        bool, typer.Option("--no-keepalive", help="A new connection per request.")
    ] = False,
    method: Annotated[str, typer.Option(help="HTTP method.")] = "GET",
    body: Annotated[str, typer.Option(help="Request body; {seq} becomes a unique number.")] = "",
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            "-H",
            help="A header on every request, 'Name: value' (repeatable); {env:NAME} reads "
            "a secret from the environment, never written to a file.",
        ),
    ] = None,
    bursts: Annotated[int, typer.Option(help="Burst mode: number of releases.")] = 1,
    burst_interval: Annotated[str, typer.Option(help="Burst mode: time between releases.")] = "1s",
    ramp_rates: Annotated[
        str | None, typer.Option(help="Ramp mode: rates, e.g. 1000,2000,4000.")
    ] = None,
    slo_p99: Annotated[str, typer.Option(help="Ramp mode: p99 SLO.")] = "10ms",
    seed: Annotated[int, typer.Option(help="Schedule seed.")] = 1,
    cacert: Annotated[
        Path | None,
        typer.Option(help="https: the CA file (PEM) the server's certificate must chain to."),
    ] = None,
    insecure: Annotated[
        bool, typer.Option("--insecure", help="https: do not verify the server's certificate.")
    ] = False,
    tls_resume: Annotated[
        bool,
        typer.Option(
            "--tls-resume/--no-tls-resume",
            help="https: new connections resume an earlier TLS session (1.3 tickets).",
        ),
    ] = True,
    workload: Annotated[
        Path | None,
        typer.Option(
            help="A YAML file with an experiment's workload block (a mix of requests, "
            "generated fields, headers, a replay); the URL gives the target. Prints a row "
            "per endpoint."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    out: Annotated[
        Path | None, typer.Option(help="Keep requests.parquet and summary.json here.")
    ] = None,
) -> None:
    """Load one URL like wrk: closed, open (no coordinated omission), burst or ramp."""
    from ..api.load_url import load as load_url  # numpy, pyarrow, uvloop: a load run only

    result = load_url(
        url,
        connections=connections,
        duration=duration,
        warmup=warmup,
        rate=rate,
        mode=mode,
        arrivals=arrivals,
        processes=processes,
        cpus=cpus,
        think=think,
        timeout=timeout,
        keepalive=not no_keepalive,
        method=method,
        body=body,
        headers=header or [],
        bursts=bursts,
        burst_interval=burst_interval,
        ramp_rates=ramp_rates,
        slo_p99=slo_p99,
        seed=seed,
        out=out,
        cacert=cacert,
        insecure=insecure,
        tls_resume=tls_resume,
        workload=workload,
    )
    if as_json:
        typer.echo(json.dumps(result, default=lambda v: None if v != v else v))
        return
    _print_result(result)


def _print_result(r: dict) -> None:
    c = Console()
    lat = r["latency_ms"]
    c.print(
        f"[bold]{r['mode']}[/] load of {r['url']}: {r['connections']} connections, "
        f"{r['processes']} process(es)"
    )
    c.print(
        f"  throughput  {r['throughput_rps']:,.1f} req/s   requests {r['requests']:,}   "
        f"errors {r['errors']:,} {r['errors_by_class'] or ''}"
    )
    if r["target_rate"]:
        c.print(
            f"  rate        target {r['target_rate']:,.1f}/s, achieved {r['achieved_rate']:,.1f}/s"
        )
    c.print("  latency ms  " + "  ".join(f"{k} {fmt(v, '.3f')}" for k, v in lat.items()))
    if "tls" in r:
        t = r["tls"]
        c.print(
            f"  tls 1.3     {t['connections']:,} connections opened, {t['resumed']:,} resumed; "
            f"handshake ms p50 {fmt(t['handshake_p50_ms'], '.3f')} "
            f"p99 {fmt(t['handshake_p99_ms'], '.3f')} max {fmt(t['handshake_max_ms'], '.3f')}"
        )
    for e in r.get("endpoints", ()):
        c.print(
            f"  {e['endpoint']:<12.12} {e['share']:6.1%}  {e['throughput_rps']:10,.1f} req/s  "
            f"p50 {fmt(e['latency_p50_ms'], '.3f')} p99 {fmt(e['latency_p99_ms'], '.3f')} ms  "
            f"errors {e['errors']:,}" + ("" if e["valid"] else "  (its figures do not hold)")
        )
    if "sustainable_rps" in r:
        c.print(f"  sustainable {r['sustainable_rps']:,.0f} req/s under the SLO")
    if "release_spread_ms_max" in r:
        c.print(f"  release spread (max over bursts) {r['release_spread_ms_max']:.2f} ms")
    if r["valid"]:
        c.print("  self-check  [green]ok[/]")
    else:
        c.print(f"  self-check  [bold red]NOT TRUSTWORTHY[/]: {r['invalid_reasons']}")

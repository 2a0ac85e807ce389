"""`perfctl load URL`: an ad-hoc load run, like wrk, with perfctl's honest measurement.

The flags are validated by the same models as an experiment's `load:` and `workload:` blocks
and converted by the same `to_load_spec`, so `perfctl load` and `perfctl run` send the same
load for the same settings.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer
from pydantic import ValidationError
from rich.console import Console

from loadgen import digest, generate_to_dir, stats

from ..errors import PerfctlError
from ..experiment.load import Load, Workload, to_load_spec


def _target(url: str) -> tuple[str, int, str, str]:
    """(host, port, path, query) of an http:// URL."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise PerfctlError(
            f"URL {url!r} is not an http:// URL with a host. Fix: give one like "
            "http://127.0.0.1:8080/work?spin_us=100 (https is not supported)."
        )
    return parts.hostname, parts.port or 80, parts.path or "/", parts.query


def load(
    url: Annotated[str, typer.Argument(metavar="URL", help="http://host:port/path?query to load.")],
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
    bursts: Annotated[int, typer.Option(help="Burst mode: number of releases.")] = 1,
    burst_interval: Annotated[str, typer.Option(help="Burst mode: time between releases.")] = "1s",
    ramp_rates: Annotated[
        str | None, typer.Option(help="Ramp mode: rates, e.g. 1000,2000,4000.")
    ] = None,
    slo_p99: Annotated[str, typer.Option(help="Ramp mode: p99 SLO.")] = "10ms",
    seed: Annotated[int, typer.Option(help="Schedule seed.")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    out: Annotated[
        Path | None, typer.Option(help="Keep requests.parquet and summary.json here.")
    ] = None,
) -> None:
    """Load one URL like wrk: closed, open (no coordinated omission), burst or ramp."""
    chosen = mode or ("ramp" if ramp_rates else "open" if rate else "closed")
    host, port, path, query = _target(url)
    try:
        rates = [float(x) for x in ramp_rates.split(",")] if ramp_rates else None
        cpu_list = tuple(int(x) for x in cpus.split(",")) if cpus else ()
    except ValueError as e:
        raise PerfctlError(
            f"perfctl load: {e}. Fix: give lists comma-separated, e.g. "
            "--cpus 0,1 or --ramp-rates 1000,2000."
        ) from None
    fields = {
        "mode": chosen,
        "connections": connections,
        "duration": duration,
        "warmup": warmup,
        "rate": rate,
        "arrivals": arrivals,
        "processes": processes,
        "think_time": think,
        "timeout": timeout,
        "keepalive": not no_keepalive,
        "bursts": bursts,
        "burst_interval": burst_interval,
        "seed": seed,
        "ramp": {"rates": rates, "slo": {"p99_ms": slo_p99}} if rates else None,
    }
    try:
        ld = Load.model_validate(fields)
        workload = Workload(
            path=path + (f"?{query}" if query else ""), method=method.upper(), body=body
        )
    except ValidationError as e:
        err = e.errors()[0]
        flag = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "a flag"
        raise PerfctlError(
            f"perfctl load: {flag}: {err['msg'].removeprefix('Value error, ')} "
            f"(got {err.get('input')!r}). Fix: see perfctl load --help; "
            "durations like 10s or 250ms."
        ) from None
    spec = to_load_spec(ld, workload, host, port, seed=seed, cpus=cpu_list)
    with tempfile.TemporaryDirectory(prefix="perfctl-load-") as tmp:
        where = out or Path(tmp)
        summary = generate_to_dir(spec, where)
        row = stats.summarize_digest(
            digest.read(where / "digest.json"),
            summary,
            chosen,
            target_rate_rps=rate,
            requests_path=where / "requests.parquet",
        )
    result = {
        "url": url,
        "mode": chosen,
        "connections": connections,
        "processes": processes,
        "throughput_rps": row["throughput_rps"],
        "achieved_rate": row["achieved_rate"],
        "target_rate": rate,
        "requests": row["requests"],
        "errors": row["errors"],
        "errors_by_class": {k[7:]: v for k, v in row.items() if k.startswith("errors_") and v},
        "latency_ms": {
            k: row[f"latency_{k}_ms"] for k in ("p50", "p90", "p99", "p999", "max", "mean")
        },
        "valid": row["valid"],
        "invalid_reasons": row["invalid_reasons"],
        "selfcheck": {
            k: summary.get(k)
            for k in (
                "loop_lag_p99_ms",
                "send_lateness_p99_ms",
                "loadgen_cpu_pct",
                "gc_pause_max_ms",
                "dropped",
            )
        },
    }
    # open load: the largest lateness shift of a figure as a share of its precision (> 1:
    # invalid, loadgen/validity.py)
    result["selfcheck"]["lateness_shift_of_precision"] = row.get("lateness_shift_of_precision")
    for k in ("sustainable_rps", "ramp_steps", "release_spread_ms_max"):
        if k in summary:
            result[k] = summary[k]
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

    def fmt(v):
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"

    c.print("  latency ms  " + "  ".join(f"{k} {fmt(v)}" for k, v in lat.items()))
    if "sustainable_rps" in r:
        c.print(f"  sustainable {r['sustainable_rps']:,.0f} req/s under the SLO")
    if "release_spread_ms_max" in r:
        c.print(f"  release spread (max over bursts) {r['release_spread_ms_max']:.2f} ms")
    if r["valid"]:
        c.print("  self-check  [green]ok[/]")
    else:
        c.print(f"  self-check  [bold red]NOT TRUSTWORTHY[/]: {r['invalid_reasons']}")

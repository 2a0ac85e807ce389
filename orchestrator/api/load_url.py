"""`perfctl.load()`, which `perfctl load URL` calls too: an ad-hoc load run, like wrk, with
perfctl's honest measurement, returned as one dict of figures (`perfctl load --json`).

The settings are validated by the same models as an experiment's `load:` and `workload:`
blocks and converted by the same `to_load_spec`, so `perfctl load` and `perfctl run` send the
same load for the same settings. A bad setting is a PerfctlError naming the command-line flag,
the paragraph `perfctl load` prints.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import ValidationError

from loadgen import digest, generate_to_dir, stats, tls

from ..errors import PerfctlError
from ..experiment.document import validation_error
from ..experiment.load import Load, TlsTarget, Workload, to_load_spec
from ..experiment.workload import check_workload
from ..run.endpoints import endpoint_names, endpoint_rows

SELFCHECK_KEYS = (
    "loop_lag_p99_ms",
    "send_lateness_p99_ms",
    "loadgen_cpu_pct",
    "gc_pause_max_ms",
    "dropped",
)


def _target(url: str) -> tuple[str, int, str, str, bool]:
    """(host, port, path, query, https) of an http:// or https:// URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PerfctlError(
            f"URL {url!r} is not an http:// or https:// URL with a host. Fix: give one like "
            "http://127.0.0.1:8080/work?spin_us=100 or https://localhost:8443/."
        )
    https = parts.scheme == "https"
    return (
        parts.hostname,
        parts.port or (443 if https else 80),
        parts.path or "/",
        parts.query,
        https,
    )


def _tls_target(https: bool, cacert: str | None, insecure: bool) -> TlsTarget | None:
    """The TlsTarget of an https:// URL's flags; None for http://, where they make no sense."""
    if not https:
        if cacert or insecure:
            raise PerfctlError(
                "perfctl load: --cacert and --insecure apply to https:// URLs only. Fix: "
                "write the URL as https://... or drop the flag."
            )
        return None
    if cacert is not None and not Path(cacert).is_file():
        raise PerfctlError(
            f"perfctl load: --cacert {cacert!r} is not a file. Fix: give the PEM file of the "
            "CA that signed the server's certificate."
        )
    return TlsTarget(ca_file=str(cacert or ""), verify=not insecure)


def _check_https(spec, url: str) -> None:
    """One TLS connection before the load: a certificate that does not verify, or a server
    that does not speak TLS, is a PerfctlError, not a load phase full of connect errors."""
    problem = tls.probe(spec, spec.timeout_s)
    if problem is not None:
        raise PerfctlError(
            f"perfctl load {url}: {problem}. Fix: check that the server speaks HTTPS on that "
            "port; give the CA that signed its certificate with --cacert PEM (its names must "
            "include the URL's host), or --insecure to skip verification; nothing was loaded."
        )


def _numbers(value: str | Sequence | None, kind: type) -> list | None:
    """A comma-separated flag ("0,1") or a sequence, as a list of `kind`; None stays None."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    try:
        return [kind(x) for x in items]
    except (TypeError, ValueError) as e:
        raise PerfctlError(
            f"perfctl load: {e}. Fix: give lists comma-separated, e.g. "
            "--cpus 0,1 or --ramp-rates 1000,2000."
        ) from None


def _headers(lines: Sequence[str]) -> dict[str, str]:
    """{name: value} from "Name: value" strings; PerfctlError on one without a name."""
    out = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name.strip() or " " in name.strip():
            raise PerfctlError(
                f"perfctl load: --header {line!r} is not 'Name: value'. Fix: e.g. "
                "-H 'Authorization: Bearer {env:TOKEN}'."
            )
        out[name.strip()] = value.strip()
    return out


def _workload_file(
    path: str | Path, url_path: str, method: str, body: str, headers: dict[str, str]
) -> Workload:
    """The workload of a YAML file (`--workload`): an experiment's `workload:` block, alone or
    under that key; the URL gives the target, and its path when the file names none; -H
    headers are added to the file's (and win)."""
    import yaml  # the one command that reads a workload file pays for the parser

    f = Path(path)
    try:
        data = yaml.safe_load(f.read_text())
    except OSError as e:
        raise PerfctlError(
            f"perfctl load: --workload {f}: cannot read it ({e.strerror}). Fix: give the path "
            "of a YAML file holding a workload block (docs/workloads.md)."
        ) from None
    except yaml.YAMLError as e:
        raise PerfctlError(
            f"perfctl load: --workload {f}: not valid YAML ({str(e).splitlines()[0]}). Fix: "
            "write the workload block as in an experiment file (docs/workloads.md)."
        ) from None
    if isinstance(data, dict) and isinstance(data.get("workload"), dict):
        data = data["workload"]
    if not isinstance(data, dict):
        raise PerfctlError(
            f"perfctl load: --workload {f}: holds no mapping. Fix: write a workload block, "
            "e.g. `requests: [{name: home, path: /}]` (docs/workloads.md)."
        )
    if method.upper() != "GET" or body:
        raise PerfctlError(
            f"perfctl load: --method and --body do not go with --workload {f}: the file "
            "says what each request is. Fix: put `method:` and `body:` in the file."
        )
    data = dict(data)
    if not ({"path", "requests", "replay"} & data.keys()):
        data["path"] = url_path
    if headers:
        data["headers"] = {**(data.get("headers") or {}), **headers}
    try:
        return Workload.model_validate(data)
    except ValidationError as e:
        raise validation_error(str(f), "workload", e) from None


def load(
    url: str,
    *,
    connections: int = 10,
    duration: str = "10s",
    warmup: str = "1s",
    rate: float | None = None,
    mode: str | None = None,
    arrivals: str = "poisson",
    processes: int = 1,
    cpus: str | Sequence[int] | None = None,
    think: str = "0s",
    timeout: str = "5s",
    keepalive: bool = True,
    method: str = "GET",
    body: str = "",
    headers: Sequence[str] = (),
    bursts: int = 1,
    burst_interval: str = "1s",
    ramp_rates: str | Sequence[float] | None = None,
    slo_p99: str = "10ms",
    seed: int = 1,
    out: str | Path | None = None,
    cacert: str | Path | None = None,
    insecure: bool = False,
    tls_resume: bool = True,
    workload: str | Path | None = None,
) -> dict:
    """Load one URL: closed (default), open (`rate`, no coordinated omission), burst or ramp
    (`ramp_rates`); the keyword arguments are `perfctl load`'s flags (`perfctl load --help`).
    Returns the figures `perfctl load --json` prints: throughput_rps, requests, errors,
    errors_by_class, latency_ms {p50, p90, p99, p999, max, mean}, valid, invalid_reasons,
    selfcheck, and per mode sustainable_rps, ramp_steps, release_spread_ms_max. `out` keeps
    requests.parquet and summary.json there. `headers`: "Name: value" strings, on every
    request ({env:NAME} in a value reads the environment). An https:// URL is loaded over
    TLS 1.3, verified against `cacert` (a PEM file; default: the system's CAs) unless
    `insecure`; `tls_resume` False makes every connection a full handshake; the result then
    has `tls` (connections, resumed, handshake_p50_ms, handshake_p99_ms, handshake_max_ms).
    `workload`: a YAML file with an experiment's workload block (a mix, generated fields,
    a replay); the result then has `endpoints`, one dict per request of the mix."""
    chosen = mode or ("ramp" if ramp_rates else "open" if rate else "closed")
    host, port, path, query, https = _target(url)
    tls_target = _tls_target(https, None if cacert is None else str(cacert), insecure)
    rates = _numbers(ramp_rates, float)
    cpu_list = tuple(_numbers(cpus, int) or ())
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
        "keepalive": keepalive,
        "tls_resume": tls_resume,
        "bursts": bursts,
        "burst_interval": burst_interval,
        "seed": seed,
        "ramp": {"rates": rates, "slo": {"p99_ms": slo_p99}} if rates else None,
    }
    target = path + (f"?{query}" if query else "")
    try:
        ld = Load.model_validate(fields)
        work = (
            Workload(path=target, method=method.upper(), body=body, headers=_headers(headers))
            if workload is None
            else None
        )
    except ValidationError as e:
        err = e.errors()[0]
        flag = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "a flag"
        raise PerfctlError(
            f"perfctl load: {flag}: {err['msg'].removeprefix('Value error, ')} "
            f"(got {err.get('input')!r}). Fix: see perfctl load --help; "
            "durations like 10s or 250ms."
        ) from None
    source = "perfctl load --header"
    if work is None:
        source = str(Path(workload).resolve())
        work = _workload_file(workload, target, method, body, _headers(headers))
    check_workload(work, "http", source, "")
    spec = to_load_spec(
        ld,
        work,
        host,
        port,
        seed=seed,
        cpus=cpu_list,
        tls=tls_target,
        source=source if workload is not None else None,
    )
    if spec.tls:
        _check_https(spec, url)
    with tempfile.TemporaryDirectory(prefix="perfctl-load-") as tmp:
        where = Path(out) if out is not None else Path(tmp)
        summary = generate_to_dir(spec, where)
        row = stats.summarize_digest(
            digest.read(where / "digest.json"),
            summary,
            chosen,
            target_rate_rps=rate,
            requests_path=where / "requests.parquet",
            clients=spec.connections if chosen == "closed" else None,
        )
        names = endpoint_names(spec, target)
        ends = endpoint_rows(where, summary, chosen, names, row, None) if workload else None
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
        "selfcheck": {k: summary.get(k) for k in SELFCHECK_KEYS},
    }
    # open load: the largest lateness shift of a figure as a share of its precision (> 1:
    # invalid, loadgen/validity.py)
    result["selfcheck"]["lateness_shift_of_precision"] = row.get("lateness_shift_of_precision")
    if spec.tls:
        result["tls"] = {
            k[4:]: summary.get(k)
            for k in (
                "tls_connections",
                "tls_resumed",
                "tls_handshake_p50_ms",
                "tls_handshake_p99_ms",
                "tls_handshake_max_ms",
            )
        }
    for k in ("sustainable_rps", "ramp_steps", "release_spread_ms_max"):
        if k in summary:
            result[k] = summary[k]
    if ends is not None:
        keep = ("endpoint", "share", "requests", "errors", "throughput_rps", "valid")
        keep += ("latency_p50_ms", "latency_p99_ms")
        result["endpoints"] = [{k: e[k] for k in keep} for e in ends]
    return result

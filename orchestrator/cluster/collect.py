"""What a cluster trial's hosts brought back, into the trial (cluster/trial.py runs it): each
shard's result judged into the trial's reasons and the usable ones merged into its files
(shard_results: shards.json, the clocks' columns), and the server host's log, resources and
client addresses (server_result). Each returns its hosts' noise readings for
merge.noise_rollup.
"""

from __future__ import annotations

import json
import math

from loadgen.spec import LoadSpec

from ..results import write_json
from ..run.trial_row import ServerEnd, TrialOutcome, load_generator_failed
from . import merge, stalls
from .session import Clock


def shard_results(
    out: TrialOutcome,
    shards: dict[str, LoadSpec],
    addrs: dict[str, str],
    clocks: dict[str, Clock],
    results: dict,
    bound_ms: float,
) -> list[tuple[str, dict, list[str]]]:
    """Each shard's result (run_shard's, its files fetched into shards/<host>/; shards: host
    -> its spec) judged into out.host_reasons, and the usable ones merged into the trial's
    files and out.summary, the clocks' columns into out.columns; shards.json written.
    bound_ms: cluster.max_clock_uncertainty.
    Returns each usable shard's noise readings (host, columns, reasons)."""
    tdir, reasons = out.tdir, out.host_reasons
    parts, shard_info, shard_noise = [], [], []
    for h, s in shards.items():
        clock = clocks.get(h, Clock(0, 0))
        info = {
            "host": h,
            "address": addrs[h],
            **clock.as_dict(),
            "rate_rps": s.rate_rps,
            "connections": s.connections,
            "seed": s.seed,
        }
        shard_info.append(info)
        r = results.get(h)
        sdir = tdir / "shards" / h
        sdir.mkdir(parents=True, exist_ok=True)
        if clock.uncertainty_ns / 1e6 > bound_ms:
            reasons.append(
                f"clock offset of host {h} known only to ±"
                f"{clock.uncertainty_ns / 1e6:.2f} ms > "
                f"{bound_ms:g} ms (cluster.max_clock_uncertainty): the shards may "
                "not have started together"
            )
        if r is None or isinstance(r, BaseException):
            info["status"] = "lost" if r is None else "failed"
            if r is not None:
                reasons.append(f"shard {h}: the task failed there: {type(r).__name__}: {r}")
            continue
        (sdir / "loadgen.log").write_text(r["log"])
        info["lead_ms"] = r["lead_ms"]
        if r["lead_ms"] < 0:
            reasons.append(f"shard {h} began {-r['lead_ms']:.0f} ms after the agreed start instant")
        if r["files"] is None:
            reasons.append(
                load_generator_failed(f"shard {h}: load generator", r["code"], r["log"][-300:])
            )
            info["status"] = "failed"
            continue
        summary = json.loads(r["summary"])
        m, why = merge.shard_verdicts(
            h, sdir, summary, out.spec.mode, s.rate_rps, out.max_error_rate
        )
        reasons += why
        own = h != out.hosts["server_host"] and s.processes <= len(r["cpus"])
        shard_noise.append(
            (
                h,
                *merge.shard_noise(
                    r["samples"],
                    summary,
                    m["requests"],
                    out.cell.load.window_s,
                    set(r["cpus"]),
                    own,
                ),
            )
        )
        info.update(
            {
                "status": "ok",
                "requests": m["requests"],
                "completed": m["completed"],
                "achieved_rate": m["achieved_rate"],
                "valid": m["valid"],
                "invalid_reasons": m["invalid_reasons"],
                "records_written": summary.get("records_written", 0),
                "send_lateness_p99_ms": summary.get("send_lateness_p99_ms", math.nan),
                "loop_lag_p99_ms": summary.get("loop_lag_p99_ms", math.nan),
                "loadgen_cpu_pct": summary.get("loadgen_cpu_pct", math.nan),
            }
        )
        parts.append((h, sdir))
    if parts:
        first = json.loads((parts[0][1] / "summary.json").read_text())  # the merged clock's
        out.summary, shifts = merge.merge_shards(parts, tdir)
        reasons += stalls.cut_off_reasons(
            tdir / "requests.parquet",
            [h for h, _ in parts],
            int(first["start_ns"]),
            int(first["measure_start_ns"]),
            int(first["measure_end_ns"]),
        )
        for info in shard_info:
            if info["host"] in shifts:
                info["shift_ns"] = shifts[info["host"]]
        write_json(tdir / "summary.json", out.summary)
    if len(parts) < len(shards) and not any("lost" in r or "shard" in r for r in reasons):
        out.load_failure = "not every shard returned its records"
    write_json(
        tdir / "shards.json", {"server_host": out.hosts["server_host"], "shards": shard_info}
    )
    out.columns["clock_offset_ms_max"] = (
        max(abs(c.offset_ns) for c in clocks.values()) / 1e6 if clocks else math.nan
    )
    out.columns["clock_uncertainty_ms_max"] = (
        max(c.uncertainty_ns for c in clocks.values()) / 1e6 if clocks else math.nan
    )
    return shard_noise


def server_result(
    out: TrialOutcome, host: str, address: str, server_out: dict
) -> tuple[str, dict, list[str]]:
    """What tasks.stop_server brought back from the server's host into the outcome, and its
    log, resource samples and server.json into the trial directory. Returns the host's noise
    readings (host, columns, reasons)."""
    tdir = out.tdir
    (tdir / "server.log").write_bytes(server_out["log"])
    (tdir / "resources.parquet").write_bytes(server_out["resources"])
    write_json(
        tdir / "server.json",
        {
            "host": host,
            "address": address,
            "port": server_out["port"],
            "client_addresses": server_out["clients"],
            "exit_code": server_out["code"],
        },
    )
    out.resources = server_out["summary"]
    out.columns["server_client_addresses"] = len(server_out["clients"])
    out.server = ServerEnd(
        server_out["alive"],
        server_out["refuses"],
        server_out["code"],
        server_out["port"],
        tdir / "server.log",
        host=host,
    )
    out.tree_reasons = server_out["tree_reasons"]
    out.network.update(server_out["network"])
    out.network_reasons = server_out["network_reasons"]
    return host, server_out["noise"], server_out["noise_reasons"]

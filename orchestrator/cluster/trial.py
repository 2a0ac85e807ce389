"""One trial on a cluster: the server on its host, one load-generator shard per loadgen host,
all through Dask tasks that only start, watch and stop subprocesses (tasks.py), then the
shards merged into the trial's files and row (merge.py).

Files in the trial directory, besides those of a local trial: shards.json (per shard: host,
address, clock offset and its uncertainty, lead before the start instant, shift_ns, requests
and self-checks), shards/<host>/ (that shard's summary.json, digest.json, latency.hlog and
loadgen.log), server.json (the client addresses the server, or its proxy, saw).
requests.parquet (as `load.records` says) has a `host` column; digest.json and latency.hlog
are the shards' added up (merge.py).

With a `network:` block the server's host also runs perfctl-proxy in front of the server
(tasks.start_server), probed there before and after the load; the trial's network columns
and checks are a local trial's.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from pathlib import Path

from ..errors import PerfctlError
from ..experiment.load import shard_specs, to_load_spec, trial_seed
from ..experiment.plan import Cell, Plan
from ..results import trial_dir, write_json
from ..run.trial import describe, summarize_trial
from . import merge, tasks
from .session import Clock, HostLost, Session, outcome

START_LEAD_S = 2.0  # between agreeing on the instant and the shards' start
SERVER_START_S = 300.0  # a bundled server's first build on a host can take minutes
SERVER_LEASE_GRACE_S = 120.0
STOP_GRACE_S = 30.0


def _row_base(cell: Cell, trial: int, seed: int) -> dict:
    return {"cell_id": cell.cell_id, "trial": trial, **cell.values, **describe(cell), "seed": seed}


def execute_cluster_trial(
    session: Session, plan: Plan, cell: Cell, trial: int, run_dir: Path
) -> dict:
    """Like run.trial.execute_trial, on the cluster's hosts. Returns the trial's row."""
    tdir = trial_dir(run_dir, cell.cell_id, trial)
    tdir.mkdir(parents=True, exist_ok=True)
    known = session.names()
    server_host = cell.placement.server_host(known)
    lg_hosts = cell.placement.loadgen_hosts(known)
    addrs = session.require(list(dict.fromkeys([server_host, *lg_hosts])))
    seed = trial_seed(cell.cell_id, trial, cell.load.seed)
    token = f"{cell.cell_id}-{trial}-{secrets.token_hex(4)}"
    load = cell.load
    phase_s = load.warmup_s + load.window_s + load.timeout_s
    reasons: list[str] = []
    results: dict = {}
    clocks: dict[str, Clock] = {}
    server_out = None
    start_wall = 0
    ended = False
    try:
        try:
            started = session.wait(
                {
                    server_host: session.submit(
                        addrs[server_host],
                        tasks.start_server,
                        token,
                        cell.server_name,
                        cell.server,
                        cell.placement.server_cpu_list,
                        plan.source,
                        START_LEAD_S + phase_s + SERVER_LEASE_GRACE_S,
                        cell.network if cell.network.shapes else None,
                        seed,
                        cell.placement.injector_cpus,
                    )
                },
                {server_host: addrs[server_host]},
                SERVER_START_S,
            )[server_host]
        except (HostLost, TimeoutError) as e:
            # the trial is invalid; the next one needing the host waits for it (Session.require)
            why = (
                f"left ({e.detail})"
                if isinstance(e, HostLost)
                else f"did not answer within {SERVER_START_S:g} s"
            )
            row = _row_base(cell, trial, seed)
            row.update(
                {
                    "requests": 0,
                    "errors": 0,
                    "throughput_rps": 0.0,
                    "valid": False,
                    "server_host": server_host,
                    "loadgen_hosts": ",".join(lg_hosts),
                    "shards": len(lg_hosts),
                    "invalid_reasons": f"server host {server_host} ({addrs[server_host]}) "
                    f"{why} while the server {cell.server_name} was "
                    "starting there",
                }
            )
            return row
        if isinstance(started, PerfctlError):
            raise started
        if isinstance(started, BaseException):
            raise PerfctlError(
                f"host {server_host} ({addrs[server_host]}): starting the server "
                f"{cell.server_name} failed there: {type(started).__name__}: "
                f"{started}. Fix: check that perfctl is installed on that host "
                "at the same version as here (docs/clusters.md)."
            )
        spec = to_load_spec(
            load,
            cell.workload,
            started["host"],
            started["port"],
            seed=seed,
            cpus=tuple(cell.placement.loadgen_cpu_list or ()),
        )
        (tdir / "spec.json").write_text(spec.to_json())
        specs = shard_specs(spec, len(lg_hosts))
        futures: dict = {}
        try:
            clocks = {h: session.clock(h, a) for h, a in addrs.items()}
            start_wall = time.time_ns() + int(START_LEAD_S * 1e9)
            futures = {
                h: session.submit(
                    addrs[h],
                    tasks.run_shard,
                    token,
                    s.to_json(),
                    start_wall + clocks[h].offset_ns,
                    list(s.cpus) or None,
                )
                for h, s in zip(lg_hosts, specs)
            }
            results = session.wait(
                futures, addrs, START_LEAD_S + phase_s + tasks.SHARD_GRACE_S + STOP_GRACE_S
            )
        except HostLost as e:
            reasons.append(
                f"host(s) {', '.join(e.hosts)} "
                f"({', '.join(addrs[h] for h in e.hosts)}) lost during the trial"
                f"{': ' + e.detail if e.detail else ''}; the trial's processes on "
                "the other hosts were stopped"
            )
            results = {
                h: outcome(f) for h, f in futures.items() if f.status in ("finished", "error")
            }
        except TimeoutError:
            reasons.append("the shards did not finish in time; their processes were stopped")
            results = {
                h: outcome(f) for h, f in futures.items() if f.status in ("finished", "error")
            }
        ended = True
    finally:  # shards still running; on the way out by an exception, the server too
        session.stop_trial(token, addrs, server=not ended)
    window = None
    if start_wall and server_host in clocks:
        s_wall = start_wall + clocks[server_host].offset_ns
        window = (
            s_wall + int(load.warmup_s * 1e9),
            s_wall + int((load.warmup_s + load.window_s) * 1e9),
        )
    try:
        server_out = session.wait(
            {
                server_host: session.submit(
                    addrs[server_host],
                    tasks.stop_server,
                    token,
                    window,
                    window[0] - int(load.warmup_s * 1e9) if window else time.time_ns(),
                    0,
                    load.window_s,
                )
            },
            {server_host: addrs[server_host]},
            STOP_GRACE_S,
        )[server_host]
    except (HostLost, TimeoutError):
        reasons.append(
            f"server host {server_host} ({addrs[server_host]}) lost or unreachable "
            "at the end of the trial"
        )
        server_out = None
    if isinstance(server_out, BaseException):
        reasons.append(
            f"stopping the server on {server_host} failed: "
            f"{type(server_out).__name__}: {server_out}"
        )
        server_out = None
    _fetch(session, token, tdir, addrs, results, reasons)
    return _row(
        plan,
        cell,
        trial,
        seed,
        tdir,
        spec,
        specs,
        lg_hosts,
        server_host,
        addrs,
        clocks,
        results,
        started,
        server_out,
        reasons,
        session,
    )


def _fetch(
    session: Session,
    token: str,
    tdir: Path,
    addrs: dict[str, str],
    results: dict,
    reasons: list[str],
) -> None:
    """Each finished shard's files into tdir/shards/<host>/ (Session.fetch_files); a shard
    whose files cannot be fetched counts as lost (its result becomes the error)."""
    for h, r in results.items():
        if not isinstance(r, dict) or not r.get("files"):
            continue
        try:
            session.fetch_files(h, addrs[h], token, r["files"], tdir / "shards" / h)
        except (HostLost, TimeoutError, OSError) as e:
            why = "host lost" if isinstance(e, HostLost) else type(e).__name__
            reasons.append(
                f"shard {h}: its records could not be fetched from {addrs[h]} ({why}: {e})"
            )
            results[h] = None


def _row(
    plan,
    cell,
    trial,
    seed,
    tdir,
    spec,
    specs,
    lg_hosts,
    server_host,
    addrs,
    clocks,
    results,
    started,
    server_out,
    reasons,
    session,
) -> dict:
    load = cell.load
    row = _row_base(cell, trial, seed)
    cpus = cell.placement.server_cpu_list or session.facts.get(server_host, {}).get("cpus")
    row.update(
        {
            "startup_s": started["startup_s"],
            "network_backend": "proxy" if cell.network.shapes else "none",
            "server_cores": len(cpus) if cpus else math.nan,
            "server_host": server_host,
            "loadgen_hosts": ",".join(lg_hosts),
            "shards": len(lg_hosts),
        }
    )
    max_err = plan.experiment.validity.error_limit(spec.mode)
    bound_ms = session.cfg.max_clock_uncertainty_s * 1e3
    parts, shard_info, shard_noise = [], [], []
    for h, s in zip(lg_hosts, specs):
        clock = clocks.get(h, Clock(0, 0))
        info = {
            "host": h,
            "address": addrs[h],
            **clock.as_dict(),
            "rate_rps": s.rate_rps,
            "connections": s.connections,
            "seed": s.seed,
        }
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
            shard_info.append(info)
            continue
        (sdir / "loadgen.log").write_text(r["log"])
        info["lead_ms"] = r["lead_ms"]
        if r["lead_ms"] < 0:
            reasons.append(f"shard {h} began {-r['lead_ms']:.0f} ms after the agreed start instant")
        if r["files"] is None:
            why = "timed out" if r["code"] is None else f"exited {r['code']}"
            reasons.append(f"shard {h}: load generator {why}: {r['log'][-300:]}")
            info["status"] = "failed"
            shard_info.append(info)
            continue
        summary = json.loads(r["summary"])
        m, why = merge.shard_verdicts(h, sdir, summary, spec.mode, s.rate_rps, max_err)
        reasons += why
        own = h != server_host and s.processes <= len(r["cpus"])
        nrow, nwhy = merge.shard_noise(
            r["samples"], summary, m["requests"], load.window_s, set(r["cpus"]), own
        )
        shard_noise.append((h, nrow, nwhy))
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
        shard_info.append(info)
    summary = None
    if parts:
        summary, shifts = merge.merge_shards(parts, tdir)
        for info in shard_info:
            if info["host"] in shifts:
                info["shift_ns"] = shifts[info["host"]]
        write_json(tdir / "summary.json", summary)
        metrics, timeline = summarize_trial(tdir, summary, spec, max_err)
        if metrics["invalid_reasons"]:
            reasons += [
                r
                for r in metrics["invalid_reasons"].split("; ")
                if not any(r in x for x in reasons)
            ]
        row.update({k: v for k, v in metrics.items() if k not in ("valid", "invalid_reasons")})
        timeline.to_parquet(tdir / "timeline.parquet", index=False)
    else:
        row.update({"requests": 0, "errors": 0, "throughput_rps": 0.0})
    if len(parts) < len(lg_hosts) and not any("lost" in r or "shard" in r for r in reasons):
        reasons.append("not every shard returned its records")
    row["clock_offset_ms_max"] = (
        max(abs(c.offset_ns) for c in clocks.values()) / 1e6 if clocks else math.nan
    )
    row["clock_uncertainty_ms_max"] = (
        max(c.uncertainty_ns for c in clocks.values()) / 1e6 if clocks else math.nan
    )
    server_noise = None
    if server_out is not None and not server_out.get("missing"):
        (tdir / "server.log").write_bytes(server_out["log"])
        (tdir / "resources.parquet").write_bytes(server_out["resources"])
        row.update(server_out["summary"])
        row["server_client_addresses"] = len(server_out["clients"])
        write_json(
            tdir / "server.json",
            {
                "host": server_host,
                "address": addrs[server_host],
                "port": server_out["port"],
                "client_addresses": server_out["clients"],
                "exit_code": server_out["code"],
            },
        )
        if not server_out["alive"]:
            reasons.append(
                f"server died during the trial (exit {server_out['code']}) on "
                f"{server_host}; see {tdir / 'server.log'}"
            )
        elif server_out["refuses"]:
            reasons.append(
                f"server stopped accepting connections on {server_host} port "
                f"{server_out['port']}; see {tdir / 'server.log'}"
            )
        reasons += server_out["tree_reasons"]
        row.update(server_out["network"])
        reasons += server_out["network_reasons"]
        server_noise = (server_host, server_out["noise"], server_out["noise_reasons"])
    write_json(tdir / "shards.json", {"server_host": server_host, "shards": shard_info})
    row["valid"] = not reasons
    row["invalid_reasons"] = "; ".join(reasons)
    row.update(
        merge.noise_rollup(server_noise, shard_noise, int(row.get("requests") or 0), load.window_s)
    )
    return row

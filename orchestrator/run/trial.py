"""One trial: a fresh server (and network injector), the load generator in its own process,
teardown, and the trial's row for trials.csv (columns: results/schema.py).

The orchestrator is never in the measurement path: the load generator is a separate process
(`python -m loadgen spec.json dir`) that writes its raw columns to files.
"""
from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd

from loadgen import stats as lstats
from loadgen.spec import EXIT_CANNOT_WRITE

from ..experiment.load import to_load_spec, trial_seed
from ..experiment.network import Network
from ..experiment.plan import Cell, Plan
from ..experiment.servers import BundledServer
from ..netem import make_injector
from ..results import read_summary, trial_dir, write_json
from ..results.store import unwritable
from . import noise
from .bundled import ROOT
from .process import spawn, tail, terminate
from .sampler import ResourceSampler
from .server import ServerProcess

LOADGEN_GRACE_S = 30.0
ACCEPT_CHECK_TIMEOUT_S = 2.0


def describe(cell: Cell) -> dict:
    """Config-derived columns every trial row carries (models and plots use them)."""
    s = cell.server
    bundled_ = isinstance(s, BundledServer)
    cpus = cell.placement.server_cpu_list
    return {
        "server_impl": s.impl if bundled_ else "cmd",
        "concurrency_model": s.concurrency_model if bundled_ else "",
        "server_threads": s.threads if bundled_ else (s.threads or math.nan),
        "server_backlog": s.backlog if bundled_ else math.nan,
        "server_cores": len(cpus) if cpus else len(os.sched_getaffinity(0)),
        "load_mode": cell.load.mode,
        "connections": cell.load.connections,
        "think_time_s": cell.load.think_time_s,
        "window_s": cell.load.window_s,
        "work_spin_us": cell.workload.spin_us,
        "work_sleep_us": cell.workload.sleep_us,
    }


def _network_row(net: Network, injector, probes: list) -> tuple[dict, list[str]]:
    """trials.csv columns about the injected network, and reasons to distrust the trial."""
    row = {"network_backend": injector.backend if injector else "none",
           "rtt_expected_ms": net.expected_rtt_p50_ms() if injector else 0.0,
           "rtt_measured_ms": math.nan, "rtt_measured_before_ms": math.nan,
           "rtt_measured_after_ms": math.nan}
    reasons = []
    for when, probe in probes:
        row[f"rtt_measured_{when}_ms"] = probe.added_p50_ms
        if probe.throughput_bps:
            row[f"bandwidth_measured_{when}_mbit"] = probe.throughput_bps / 1e6
        ok, why = injector.check(probe)
        if not ok:
            reasons.append(f"network injection off {when} the load: {why}")
    measured = [p.added_p50_ms for _, p in probes]
    if measured:
        row["rtt_measured_ms"] = float(sum(measured) / len(measured))
    return row, reasons


def stopped_accepting(host: str, port: int) -> bool:
    """True when nothing accepts on host:port any more (a refused connect; a slow or full
    backlog is not proof, so a timeout is not counted)."""
    try:
        with socket.create_connection((host, port), timeout=ACCEPT_CHECK_TIMEOUT_S):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def _watched_cpus(cell: Cell, loadgen_cpus: tuple[int, ...]) -> tuple[set[int], bool]:
    """The CPUs the server and the load generator may run on, and whether the load
    generator has CPUs of its own (pinned apart from the server, one worker per CPU)."""
    allowed = set(os.sched_getaffinity(0))
    server = set(cell.placement.server_cpu_list or allowed)
    loadgen = set(loadgen_cpus or allowed)
    own = (bool(loadgen_cpus) and cell.placement.server_cpu_list is not None
           and not server & loadgen and cell.load.processes <= len(loadgen))
    return server | loadgen, own


def _noise_row(sampler: ResourceSampler | None, summary: dict | None, requests: int,
               window_s: float, cpus: set[int], loadgen_has_own_cpus: bool) -> dict:
    """The host-noise columns, `quiet` and `noise_reasons` (run/noise.py)."""
    pair = None
    if sampler is not None and summary is not None:
        pair = noise.window_samples(sampler.noise, int(summary["measure_start_ns"]),
                                    int(summary["measure_end_ns"]))
    row = noise.readings(*pair, requests, window_s, cpus) if pair else noise.not_measured()
    reasons = noise.noise_reasons(row, loadgen_has_own_cpus)
    row["quiet"] = not reasons
    row["noise_reasons"] = "; ".join(reasons)
    return row


def execute_trial(plan: Plan, cell: Cell, trial: int, run_dir: Path) -> dict:
    """One trial: fresh server (and network injector), load, teardown. Returns its row."""
    tdir = trial_dir(run_dir, cell.cell_id, trial)
    tdir.mkdir(parents=True, exist_ok=True)
    net = cell.network
    seed = trial_seed(cell.cell_id, trial, cell.load.seed)
    injector = make_injector(net, seed=seed) if net.shapes else None
    probes: list = []
    loadgen_proc = None
    sampler = None
    server = None
    try:
        if injector is not None:
            injector.prepare()
        server = ServerProcess(
            cell.server_name, cell.server, tdir, cell.placement.server_cpu_list, plan.source,
            host=injector.bind_host if injector else "127.0.0.1",
            wrap=injector.wrap_command if injector else None)
        server.start()
        startup_s = server.wait_ready()
        host, port = server.host, server.port
        if injector is not None:
            host, port = injector.start(server.host, server.port)
            probes.append(("before", injector.probe()))
        spec = to_load_spec(cell.load, cell.workload, host, port, seed=seed,
                            cpus=tuple(cell.placement.loadgen_cpu_list or ()))
        (tdir / "spec.json").write_text(spec.to_json())
        cpus, loadgen_own_cpus = _watched_cpus(cell, spec.cpus)
        loadgen_proc = spawn([sys.executable, "-m", "loadgen", str(tdir / "spec.json"),
                              str(tdir)], tdir / "loadgen.log", cwd=ROOT)
        sampler = ResourceSampler(server.pid, loadgen_proc.pid, cpus).start()
        limit = spec.warmup_s + spec.window_s + spec.timeout_s + LOADGEN_GRACE_S
        try:
            code = loadgen_proc.wait(limit)
        except subprocess.TimeoutExpired:
            code = None
        sampler.stop()
        alive = server.proc is not None and server.proc.poll() is None
        refuses = alive and stopped_accepting(server.host, server.port)
        if injector is not None and alive:
            probes.append(("after", injector.probe()))
    finally:
        if sampler is not None:
            sampler.stop()
        if loadgen_proc is not None:
            terminate(loadgen_proc)
        server_code = server.stop() if server is not None else None
        if injector is not None:
            injector.stop()
    if code == EXIT_CANNOT_WRITE:     # disk full, dir removed, permission lost: stop the run
        raise unwritable(run_dir, tdir)
    row = {"cell_id": cell.cell_id, "trial": trial, **cell.values, **describe(cell),
           "seed": seed, "startup_s": startup_s}
    net_row, reasons = _network_row(net, injector, probes)
    row.update(net_row)
    summary = None
    if code != 0 or not (tdir / "requests.parquet").is_file():
        why = "timed out" if code is None else f"exited {code}"
        reasons.append(f"load generator {why}: {tail(tdir / 'loadgen.log', 3)}")
        row.update({"requests": 0, "errors": 0, "throughput_rps": 0.0})
    else:
        cols = pd.read_parquet(tdir / "requests.parquet")
        summary = read_summary(tdir)
        metrics = lstats.summarize({k: cols[k].to_numpy() for k in cols.columns}, summary,
                                   spec.mode, target_rate_rps=spec.rate_rps or None,
                                   max_error_rate=plan.experiment.validity.error_limit(spec.mode))
        if "ramp_steps" in summary:
            write_json(tdir / "ramp.json", {"steps": summary["ramp_steps"],
                                            "slo": summary["slo"]})
        if metrics["invalid_reasons"]:
            reasons.append(metrics["invalid_reasons"])
        row.update({k: v for k, v in metrics.items() if k not in ("valid", "invalid_reasons")})
        lstats.timeline({k: cols[k].to_numpy() for k in cols.columns}, summary).to_parquet(
            tdir / "timeline.parquet", index=False)
    if not alive:
        reasons.append(f"server died during the trial (exit {server_code}); see {tdir / 'server.log'}")
    elif refuses:
        reasons.append(f"server stopped accepting connections on port {server.port}; see "
                       f"{tdir / 'server.log'}")
    if sampler is not None:
        row.update(sampler.summary())
        sampler.frame().to_parquet(tdir / "resources.parquet", index=False)
        load_start_ns = summary["start_ns"] if summary else sampler.noise[0].t_ns
        reasons += sampler.watch.reasons(load_start_ns)
    row["valid"] = not reasons
    row["invalid_reasons"] = "; ".join(reasons)
    row.update(_noise_row(sampler, summary, int(row.get("requests") or 0), cell.load.window_s,
                          cpus, loadgen_own_cpus))
    return row

"""Runs a Plan: per trial a fresh server, the load generator in its own process, one row.

The orchestrator is never in the measurement path: the load generator is a separate process
(`python -m loadgen spec.json dir`) that writes its raw columns to files. After each trial the
row is appended atomically, so an interrupted run keeps every finished trial, and
`--resume` runs only what is missing.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import pandas as pd

from loadgen import stats as lstats
from loadgen.spec import LoadSpec

from . import bundled, results, servers
from .config import BundledServer, Cell, Plan
from .netem import NetworkSpec, make_injector
from .sampler import ResourceSampler

LOADGEN_GRACE_S = 30.0


@dataclass
class RunOutcome:
    run_dir: Path
    trials: pd.DataFrame
    ran: int
    skipped: int
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)


def load_spec(cell: Cell, host: str, port: int, trial: int) -> LoadSpec:
    w, ld = cell.workload, cell.load
    query = urlencode({k: v for k, v in w.params.items()})
    return LoadSpec(
        host=host, port=port, target=w.path + (f"?{query}" if query else ""), method=w.method,
        body=w.body, mode=ld.mode, connections=ld.connections, think_time_s=ld.think_time_s,
        think_dist=ld.think, rate_rps=ld.rate_rps or 0.0, arrivals=ld.arrivals,
        max_outstanding=ld.max_outstanding, duration_s=ld.duration_s, warmup_s=ld.warmup_s,
        timeout_s=ld.timeout_s, keepalive=ld.keepalive, seed=ld.seed + 1000 * trial,
        cpus=tuple(cell.placement.loadgen_cpus or ()), processes=ld.processes,
        bursts=ld.bursts, burst_interval_s=ld.burst_interval_s,
        ramp_rates=tuple(ld.ramp.rates) if ld.ramp else (),
        ramp_step_s=ld.ramp.step_s if ld.ramp else 5.0,
        slo_p99_ms=ld.ramp.slo.p99_ms if ld.ramp else 10.0,
        slo_error_rate=ld.ramp.slo.error_rate if ld.ramp else 0.001)


def describe(cell: Cell) -> dict:
    """Config-derived columns every trial row carries (models and plots use them)."""
    s = cell.server
    bundled_ = isinstance(s, BundledServer)
    cpus = cell.placement.server_cpu_list
    return {
        "server_impl": s.impl if bundled_ else "cmd",
        "server_model": s.model_name if bundled_ else "",
        "server_threads": s.threads if bundled_ else (s.threads or math.nan),
        "server_backlog": s.backlog if bundled_ else math.nan,
        "server_cores": len(cpus) if cpus else len(os.sched_getaffinity(0)),
        "load_mode": cell.load.mode,
        "connections": cell.load.connections,
        "think_time_s": cell.load.think_time_s,
        "duration_s": cell.load.window_s,
        "work_spin_us": cell.workload.spin_us,
        "work_sleep_us": cell.workload.sleep_us,
    }


def _network_row(net: NetworkSpec, injector, probes: list) -> tuple[dict, list[str]]:
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


def run_trial(plan: Plan, cell: Cell, trial: int, run_dir: Path) -> dict:
    """One trial: fresh server (and network injector), load, teardown. Returns its row."""
    tdir = results.trial_dir(run_dir, cell.cell_id, trial)
    tdir.mkdir(parents=True, exist_ok=True)
    net = NetworkSpec.model_validate(cell.network)
    injector = make_injector(net, seed=cell.load.seed + trial) if net.shapes else None
    probes: list = []
    loadgen_proc = None
    sampler = None
    server = None
    try:
        if injector is not None:
            injector.prepare()
        server = servers.ServerProcess(
            cell.server_name, cell.server, tdir, cell.placement.server_cpu_list, plan.source,
            host=injector.bind_host if injector else "127.0.0.1",
            wrap=injector.wrap_command if injector else None)
        server.start()
        startup_s = server.wait_ready()
        host, port = server.host, server.port
        if injector is not None:
            host, port = injector.start(server.host, server.port)
            probes.append(("before", injector.probe()))
        spec = load_spec(cell, host, port, trial)
        (tdir / "spec.json").write_text(spec.to_json())
        sampler = ResourceSampler(server.pid).start()
        loadgen_proc = servers.spawn([sys.executable, "-m", "loadgen", str(tdir / "spec.json"),
                                      str(tdir)], tdir / "loadgen.log", cwd=bundled.ROOT)
        limit = spec.warmup_s + spec.window_s + spec.timeout_s + LOADGEN_GRACE_S
        try:
            code = loadgen_proc.wait(limit)
        except subprocess.TimeoutExpired:
            code = None
        sampler.stop()
        alive = server.proc is not None and server.proc.poll() is None
        if injector is not None and alive:
            probes.append(("after", injector.probe()))
    finally:
        if sampler is not None:
            sampler.stop()
        if loadgen_proc is not None:
            servers.terminate(loadgen_proc)
        server_code = server.stop() if server is not None else None
        if injector is not None:
            injector.stop()
    row = {"cell_id": cell.cell_id, "trial": trial, **cell.values, **describe(cell),
           "startup_s": startup_s}
    net_row, reasons = _network_row(net, injector, probes)
    row.update(net_row)
    if code != 0 or not (tdir / "requests.parquet").is_file():
        why = "timed out" if code is None else f"exited {code}"
        reasons.append(f"load generator {why}: {servers.tail(tdir / 'loadgen.log', 3)}")
        row.update({"requests": 0, "errors": 0, "throughput_rps": 0.0})
    else:
        cols = pd.read_parquet(tdir / "requests.parquet")
        summary = json.loads((tdir / "summary.json").read_text())
        metrics = lstats.summarize({k: cols[k].to_numpy() for k in cols.columns}, summary,
                                   spec.mode, target_rate_rps=spec.rate_rps or None)
        if "ramp_steps" in summary:
            results.write_json(tdir / "ramp.json", {"steps": summary["ramp_steps"],
                                                    "slo": summary["slo"]})
        if metrics["invalid_reasons"]:
            reasons.append(metrics["invalid_reasons"])
        row.update({k: v for k, v in metrics.items() if k not in ("valid", "invalid_reasons")})
        lstats.timeline({k: cols[k].to_numpy() for k in cols.columns}, summary).to_parquet(
            tdir / "timeline.parquet", index=False)
    if not alive:
        reasons.append(f"server died during the trial (exit {server_code}); see {tdir / 'server.log'}")
    if sampler is not None:
        row.update(sampler.summary())
        sampler.frame().to_parquet(tdir / "resources.parquet", index=False)
    row["valid"] = not reasons
    row["invalid_reasons"] = "; ".join(reasons)
    return row


def run_plan(plan: Plan, run_dir: Path, on_trial=None, on_start=None) -> RunOutcome:
    """Run every trial not yet in run_dir/trials.csv. Callbacks drive the progress display:
    on_start(cell, trial) before a trial, on_trial(row) after it."""
    table = results.TrialTable(run_dir)
    done = table.done()
    todo = [(c, k) for c in plan.cells for k in range(1, plan.repeats + 1)
            if (c.cell_id, k) not in done]
    for cell, k in todo:
        if on_start:
            on_start(cell, k)
        row = run_trial(plan, cell, k, run_dir)
        table.append(row)
        if on_trial:
            on_trial(row)
    return RunOutcome(run_dir, table.frame() if table.rows else pd.DataFrame(), len(todo),
                      len(done))


def run_info(plan: Plan, host: dict) -> dict:
    """The contents of run.json."""
    return {
        "experiment": plan.experiment.name,
        "source": str(Path(plan.source).resolve()),
        "profile": plan.profile,
        "overrides": plan.overrides,
        "document": plan.document,
        "axes": plan.axes,
        "repeats": plan.repeats,
        "cells": [{"cell_id": c.cell_id, "values": c.values,
                   "server": c.server.model_dump(mode="json"), "load": c.load.model_dump(),
                   "workload": c.workload.model_dump(), "network": c.network,
                   "placement": c.placement.model_dump()} for c in plan.cells],
        "network_backend": "none",
        "host": host,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }

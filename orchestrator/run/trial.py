"""One trial: a fresh server (and network injector), the load generator in its own process,
teardown, and the trial's row for trials.csv (columns: results/schema.py).

The orchestrator is never in the measurement path: the load generator is a separate process
(`python -m loadgen spec.json dir`) that writes its raw columns to files.
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import subprocess
import time
from pathlib import Path

import pandas as pd

from loadgen import contract
from loadgen import digest as ldigest
from loadgen import hdr as lhdr
from loadgen import stats as lstats
from loadgen.records import stream_batches
from loadgen.spec import EXIT_CANNOT_WRITE

from ..experiment.catalogue import BLOCKING_LOOPS, dispatch_of
from ..experiment.load import to_load_spec, trial_seed
from ..experiment.network import Network
from ..experiment.plan import Cell, Plan
from ..experiment.servers import BundledServer
from ..measure import dispatch_probe, kernel_tcp, live, noise, profiler
from ..measure.sampler import ResourceSampler
from ..netem import make_injector
from ..proc.process import spawn, tail, terminate
from ..results import read_summary, trial_dir, write_json
from ..results.store import unwritable
from . import driver
from .bundled import ROOT
from .server import ServerProcess
from .services import ServiceSet

LOADGEN_GRACE_S = 30.0
ACCEPT_CHECK_TIMEOUT_S = 2.0
# with a network schedule the load starts at an agreed instant this far ahead (the load
# generator's start-up fits in it, also on a busy host), which is t = 0 of the schedule and of
# the timeline
SCHEDULE_LEAD_NS = 3_000_000_000
WATCH_S = 0.25  # how often the live view looks at the load generator's live file


def describe(cell: Cell) -> dict:
    """Config-derived columns every trial row carries (models and plots use them)."""
    s = cell.server
    bundled_ = isinstance(s, BundledServer)
    cpus = cell.placement.server_cpu_list
    if bundled_:
        dispatch, source = dispatch_of(s.impl, s.concurrency_model), "catalogue"
        blocks = (s.impl, s.concurrency_model) in BLOCKING_LOOPS
    else:
        dispatch, source = s.dispatch or "", "declared" if s.dispatch else ""
        blocks = False  # a declared event loop does not block (models/cell_station.py)
    return {
        "server_impl": s.impl if bundled_ else "cmd",
        "concurrency_model": s.concurrency_model if bundled_ else "",
        "server_dispatch": dispatch,
        "server_dispatch_source": source,
        "server_waits_block": blocks,
        "server_threads": s.threads if bundled_ else (s.threads or math.nan),
        "server_backlog": s.backlog if bundled_ else math.nan,
        "server_cores": len(cpus) if cpus else len(os.sched_getaffinity(0)),
        "load_mode": cell.load.mode,
        "load_driver": cell.load.driver_label,
        "connections": cell.load.connections,
        "keepalive": cell.load.keepalive,
        "think_time_s": cell.load.think_time_s,
        "window_s": cell.load.window_s,
        "work_spin_us": cell.workload.spin_us,
        "work_sleep_us": cell.workload.sleep_us,
    }


def needs_probe(cell: Cell) -> bool:
    """A `cmd` server that declares neither `dispatch:` nor `threads:` (either missing) is
    probed before each trial (measure/dispatch_probe.py), when the load speaks HTTP."""
    s = cell.server
    if isinstance(s, BundledServer) or cell.load.driver != "http":
        return False
    return s.dispatch is None or s.threads is None


def network_row(net: Network, injector, probes: list) -> tuple[dict, list[str]]:
    """trials.csv columns about the injected network, and reasons to distrust the trial.
    probes: [(when, ProbeResult, the network state it was taken in)]."""
    row = {
        "network_backend": injector.backend if injector else "none",
        "rtt_expected_ms": net.expected_rtt_p50_ms() if injector else 0.0,
        "rtt_measured_ms": math.nan,
        "rtt_measured_before_ms": math.nan,
        "rtt_measured_after_ms": math.nan,
    }
    reasons = []
    for when, probe, state in probes:
        row[f"rtt_measured_{when}_ms"] = probe.added_p50_ms
        if state is not net:
            row[f"rtt_expected_{when}_ms"] = state.expected_rtt_p50_ms()
        if probe.throughput_bps:
            row[f"bandwidth_measured_{when}_mbit"] = probe.throughput_bps / 1e6
        if probe.released:
            row[f"release_error_p50_{when}_us"] = probe.release_err_p50_us
            row[f"release_error_p99_{when}_us"] = probe.release_err_p99_us
        ok, why = injector.check(probe, state)
        if not ok:
            reasons.append(f"network injection off {when} the load: {why}")
    measured = [p.added_p50_ms for _, p, _ in probes]
    if measured:
        row["rtt_measured_ms"] = float(sum(measured) / len(measured))
    stats = getattr(injector, "stats", None) or {}
    if stats.get("released"):
        row["release_error_p50_us"] = stats["release_err_p50_ns"] / 1e3
        row["release_error_p99_us"] = stats["release_err_p99_ns"] / 1e3
    if net.schedule and injector is not None:
        row["network_changes"] = len(injector.changes())
        if row["network_changes"] < len(net.schedule):
            reasons.append(
                f"network schedule: {row['network_changes']} of {len(net.schedule)} "
                "steps took effect before the trial ended (an `at:` beyond the load?)"
            )
    return row, reasons


def network_changes(net: Network, changes: list[dict], start_ns: int) -> list[dict]:
    """The applied schedule steps relative to the load's start instant (timeline t_s = 0):
    [{step, at_s (asked), due_s, applied_s, network}]."""
    return [
        {
            "step": c["step"],
            "at_s": net.schedule[c["step"] - 1].at_s,
            "due_s": (c["due_ns"] - start_ns) / 1e9,
            "applied_s": (c["applied_ns"] - start_ns) / 1e9,
            "network": net.schedule[c["step"] - 1].state.describe(),
        }
        for c in changes
    ]


def timeline_with_changes(
    timeline: pd.DataFrame, changes: list[dict], bin_s: float = 1.0
) -> pd.DataFrame:
    """The per-second timeline plus `network_step` (the schedule step in force at the end of
    the bin, 0 = the network block itself) and `network_change_s` (when a step took effect,
    in the bin it did; NaN in the others)."""
    timeline = timeline.copy()
    ends = timeline["t_s"].to_numpy() + bin_s
    timeline["network_step"] = 0
    timeline["network_change_s"] = math.nan
    for c in changes:
        timeline.loc[ends > c["applied_s"], "network_step"] = c["step"]
        k = int(c["applied_s"] // bin_s)
        if 0 <= k < len(timeline):
            timeline.loc[timeline.index[k], "network_change_s"] = c["applied_s"]
    return timeline


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


def _watched_cpus(
    cell: Cell, loadgen_cpus: tuple[int, ...], services_running: bool = False
) -> tuple[set[int], bool]:
    """The CPUs the server and the load generator may run on, and whether the load
    generator has CPUs of its own: pinned apart from the server, one worker per CPU, each
    worker one busy thread (the HTTP generator's event loop; another driver's threads, the RMI
    driver's pool of clients, wait behind each other), and no service of the trial (PostgreSQL,
    unpinned) running beside it. Only then is its run-queue wait someone else's doing."""
    allowed = set(os.sched_getaffinity(0))
    server = set(cell.placement.server_cpu_list or allowed)
    loadgen = set(loadgen_cpus or allowed)
    own = (
        bool(loadgen_cpus)
        and cell.placement.server_cpu_list is not None
        and not server & loadgen
        and cell.load.processes <= len(loadgen)
        and cell.load.driver == "http"
        and not services_running
    )
    return server | loadgen, own


def _noise_row(
    sampler: ResourceSampler | None,
    summary: dict | None,
    requests: int,
    window_s: float,
    cpus: set[int],
    loadgen_has_own_cpus: bool,
) -> dict:
    """The host-noise columns, `quiet` and `noise_reasons` (measure/noise.py)."""
    pair = None
    if sampler is not None and summary is not None:
        pair = noise.window_samples(
            sampler.noise, int(summary["measure_start_ns"]), int(summary["measure_end_ns"])
        )
    row = noise.readings(*pair, requests, window_s, cpus) if pair else noise.not_measured()
    reasons = noise.noise_reasons(row, loadgen_has_own_cpus)
    row["quiet"] = not reasons
    row["noise_reasons"] = "; ".join(reasons)
    return row


def summarize_trial(tdir: Path, summary: dict, spec, max_error_rate: float | None):
    """The trial's metrics and timeline from the load generator's digest.json and
    latency.hlog, streamed: nothing here grows with the number of requests. With every
    request kept (`records: all`), one more pass over requests.parquet makes the percentiles
    exact order statistics; otherwise they come from the HdrHistograms (within 0.1%)."""
    if not (tdir / "digest.json").is_file():
        _digest_from_rows(tdir, summary, spec.timeout_s)
    doc = ldigest.read(tdir / "digest.json")
    every = summary.get("records", "all") == "all" and (tdir / "requests.parquet").is_file()
    metrics = lstats.summarize_digest(
        doc,
        summary,
        spec.mode,
        target_rate_rps=spec.rate_rps or None,
        max_error_rate=max_error_rate,
        requests_path=tdir / "requests.parquet" if every else None,
    )
    timeline = lstats.timeline_of_digest(doc, summary, lhdr.iter_log(tdir / "latency.hlog"))
    return metrics, timeline


def _digest_from_rows(tdir: Path, summary: dict, timeout_s: float) -> None:
    """A driver other than the HTTP generator writes rows, not a digest (loadgen/DRIVER.md):
    stream its requests.parquet through one, a batch at a time."""
    d = ldigest.Digest(timeout_s)
    d.begin(
        int(summary.get("start_ns", summary["measure_start_ns"])),
        int(summary["measure_start_ns"]),
        int(summary["measure_end_ns"]),
    )
    for batch in stream_batches(tdir / "requests.parquet"):
        d.add(
            {
                name: batch.column(i).to_numpy(zero_copy_only=False)
                for i, name in enumerate(batch.schema.names)
            }
        )
    d.write(tdir)


def _wait(proc: subprocess.Popen, limit_s: float, watch=None) -> int | None:
    """proc's exit code, or None when it has not ended within limit_s; every WATCH_S while
    waiting, watch() (the live view)."""
    if watch is None:
        try:
            return proc.wait(limit_s)
        except subprocess.TimeoutExpired:
            return None
    deadline = time.monotonic() + limit_s
    while True:
        try:
            return proc.wait(max(0.0, min(WATCH_S, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                return None
            watch()


def execute_trial(
    plan: Plan,
    cell: Cell,
    trial: int,
    run_dir: Path,
    services: ServiceSet | None = None,
    on_second=None,
) -> dict:
    """One trial: fresh server (and network injector, and the `scope: trial` services), load,
    teardown. Returns its row. services: the plan's services (run-scope ones already up).
    on_second(LiveSecond): called about once a second while the load runs (measure/live.py)."""
    services = services if services is not None else ServiceSet({}, plan.source)
    tdir = trial_dir(run_dir, cell.cell_id, trial)
    tdir.mkdir(parents=True, exist_ok=True)
    net = cell.network
    seed = trial_seed(cell.cell_id, trial, cell.load.seed)
    injector = (
        make_injector(net, seed=seed, cpus=cell.placement.injector_cpus) if net.shapes else None
    )
    probes: list = []
    probed: dict = {}
    loadgen_proc = None
    sampler = None
    server = None
    counters = None
    prof = None
    try:
        driver.prepare(cell.load.driver)
        if injector is not None:
            injector.prepare()
        services.start("trial", tdir)
        server = ServerProcess(
            cell.server_name,
            cell.server,
            tdir,
            cell.placement.server_cpu_list,
            plan.source,
            host=injector.bind_host if injector else "127.0.0.1",
            wrap=injector.wrap_command if injector else None,
            services=services.endpoints(),
        )
        server.start()
        startup_s = server.wait_ready()
        host, port = server.host, server.port
        if needs_probe(cell):  # directly, before any injected delay and the load
            probed = dispatch_probe.probe(host, port, cell.workload.target).row()
        if injector is not None:
            host, port = injector.start(server.host, server.port)
            probes.append(("before", injector.probe(), injector.state_now()))
        spec = to_load_spec(
            cell.load,
            cell.workload,
            host,
            port,
            seed=seed,
            cpus=tuple(cell.placement.loadgen_cpu_list or ()),
        )
        if spec.mode == "open":  # handed to every driver (loadgen/DRIVER.md)
            spec = dataclasses.replace(spec, schedule_file=contract.SCHEDULE_FILE)
            contract.write_schedule(spec, tdir / contract.SCHEDULE_FILE)
        if injector is not None and net.schedule:
            spec = dataclasses.replace(spec, start_at_ns=time.perf_counter_ns() + SCHEDULE_LEAD_NS)
            injector.start_schedule(spec.start_at_ns)
        (tdir / "spec.json").write_text(spec.to_json())
        cpus, loadgen_own_cpus = _watched_cpus(cell, spec.cpus, bool(services.pids()))
        counters = kernel_tcp.TrialCounters(server.pid, server.port).start()
        if plan.experiment.profile:
            prof = profiler.for_server(
                server.pid,
                tdir,
                server.argv,
                cell.server.impl if isinstance(cell.server, BundledServer) else None,
            ).start()
        # the HTTP generator pins its own worker processes; another driver is pinned whole
        loadgen_proc = spawn(
            driver.argv(cell.load.driver, tdir / "spec.json", tdir),
            tdir / "loadgen.log",
            cwd=ROOT,
            cpus=None if cell.load.driver == "http" else list(spec.cpus),
        )
        sampler = ResourceSampler(
            server.pid,
            loadgen_proc.pid,
            cpus,
            services=services.pids(),
            loadgen_cpus=set(spec.cpus) if loadgen_own_cpus else None,
        ).start()
        limit = spec.warmup_s + spec.window_s + spec.timeout_s + LOADGEN_GRACE_S
        live_tail = live.LiveTail(tdir) if on_second is not None else None

        def watch() -> None:
            for lines in live_tail.poll():
                on_second(live.combine(lines, sampler, cpus, loadgen_own_cpus))

        code = _wait(loadgen_proc, limit, watch if live_tail is not None else None)
        sampler.stop()
        counters.stop()
        if prof is not None:
            prof.stop()
            prof = None
        alive = server.proc is not None and server.proc.poll() is None
        services_dead = services.dead()
        refuses = alive and stopped_accepting(server.host, server.port)
        if injector is not None and alive:
            state = injector.state_now()
            probes.append(("after", injector.probe(), state))
    finally:
        if sampler is not None:
            sampler.stop()
        if counters is not None:
            counters.stop()
        if prof is not None and prof.proc is not None:
            terminate(prof.proc)
        if loadgen_proc is not None:
            terminate(loadgen_proc)
        server_code = server.stop() if server is not None else None
        services.stop("trial")
        if injector is not None:
            injector.stop()
    if code == EXIT_CANNOT_WRITE:  # disk full, dir removed, permission lost: stop the run
        raise unwritable(run_dir, tdir)
    row = {
        "cell_id": cell.cell_id,
        "trial": trial,
        **cell.values,
        **describe(cell),
        "seed": seed,
        "startup_s": startup_s,
        **probed,
    }
    net_row, reasons = network_row(net, injector, probes)
    row.update(net_row)
    summary = None
    who = (
        "load generator" if cell.load.driver == "http" else f"load driver {cell.load.driver_label}"
    )
    broken = contract.check_output(tdir, spec.mode) if code == 0 else []
    if code != 0 or broken:
        why = "timed out" if code is None else f"exited {code}"
        reasons.append(
            f"{who} wrote output that breaks loadgen/DRIVER.md: {'; '.join(broken)}"
            if code == 0
            else f"{who} {why}: {tail(tdir / 'loadgen.log', 3)}"
        )
        row.update({"requests": 0, "errors": 0, "throughput_rps": 0.0})
    else:
        summary = read_summary(tdir)
        metrics, timeline = summarize_trial(
            tdir, summary, spec, plan.experiment.validity.error_limit(spec.mode)
        )
        if "ramp_steps" in summary:
            write_json(tdir / "ramp.json", {"steps": summary["ramp_steps"], "slo": summary["slo"]})
        if metrics["invalid_reasons"]:
            reasons.append(metrics["invalid_reasons"])
        row.update({k: v for k, v in metrics.items() if k not in ("valid", "invalid_reasons")})
        if net.schedule and injector is not None:
            changes = network_changes(net, injector.changes(), int(summary["start_ns"]))
            write_json(tdir / "network_changes.json", {"changes": changes})
            timeline = timeline_with_changes(timeline, changes)
        timeline.to_parquet(tdir / "timeline.parquet", index=False)
    reasons += services_dead
    if not alive:
        reasons.append(
            f"server died during the trial (exit {server_code}); see {tdir / 'server.log'}"
        )
    elif refuses:
        reasons.append(
            f"server stopped accepting connections on port {server.port}; see {tdir / 'server.log'}"
        )
    if counters is not None:
        row.update(counters.row())
    if sampler is not None:
        row.update(
            sampler.summary(
                (int(summary["measure_start_ns"]), int(summary["measure_end_ns"]))
                if summary
                else None
            )
        )
        sampler.frame().to_parquet(tdir / "resources.parquet", index=False)
        load_start_ns = summary["start_ns"] if summary else sampler.noise[0].t_ns
        reasons += sampler.watch.reasons(load_start_ns)
    row["valid"] = not reasons
    row["invalid_reasons"] = "; ".join(reasons)
    row.update(
        _noise_row(
            sampler,
            summary,
            int(row.get("requests") or 0),
            cell.load.window_s,
            cpus,
            loadgen_own_cpus,
        )
    )
    return row

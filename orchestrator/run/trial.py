"""One trial on this host: a fresh server (and network injector), the load generator in its own
process, teardown, and what the trial produced handed to run/trial_row.py for its row in trials.csv.

The orchestrator is never in the measurement path: the load generator is a separate process
(`python -m loadgen spec.json dir`) that writes its raw columns to files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from functools import partial
from pathlib import Path

from loadgen import contract, tls
from loadgen.spec import EXIT_CANNOT_WRITE, OWN_CPU_SPIN_BUDGET

from ..errors import PerfctlError
from ..experiment.load import TlsTarget, to_load_spec
from ..experiment.plan import Cell, Plan
from ..experiment.servers import BundledServer
from ..measure import dispatch_probe, kernel_tcp, live, noise, profiler
from ..measure.sampler import ResourceSampler
from ..netem import make_injector
from ..proc.process import at_death, forget, spawn, tail, terminate
from ..results import read_summary
from ..results.write import unwritable
from . import driver
from .bundled import ROOT
from .certs import RunCertificate
from .server import ServerProcess
from .services import ServiceSet
from .trial_row import ServerEnd, TrialOutcome, load_generator_failed, network_row, trial_row

LOADGEN_GRACE_S = 30.0
# with a network schedule the load starts at an agreed instant this far ahead (the load
# generator's start-up fits in it, also on a busy host), which is t = 0 of the schedule and of
# the timeline
SCHEDULE_LEAD_NS = 3_000_000_000
WATCH_S = 0.25  # how often the live view looks at the load generator's live file


def needs_probe(cell: Cell) -> bool:
    """A `cmd` server that declares neither `dispatch:` nor `threads:` (either missing) is
    probed before each trial (measure/dispatch_probe.py), when the load speaks HTTP."""
    s = cell.server
    if isinstance(s, BundledServer) or cell.load.driver != "http":
        return False
    return s.dispatch is None or s.threads is None


def _check_https(spec, source: str, server_name: str) -> None:
    """One TLS connection before the load (loadgen/tls.py probe): a server given `tls: true`
    that does not serve the certificate it was given, or speaks plain HTTP, is a PerfctlError
    before the load, not a trial full of connect errors."""
    problem = tls.probe(spec, spec.timeout_s)
    if problem is not None:
        raise PerfctlError(
            f"{source}: key `servers.{server_name}.tls`: {problem}. Fix: make the server "
            "serve HTTPS with the certificate perfctl made for the trial ({cert} and {key} in "
            "its cmd or files, or PERFCTL_TLS_CERT and PERFCTL_TLS_KEY), or drop `tls: true`."
        )


def host_early_wake_ns(run_dir: Path) -> int:
    """The load generator's first early wake-up before a timed send: the timer lateness the
    run's host check measured (run.json host_check.timer_p99_us; loadgen/wake.py then follows
    what it sees itself), or 0 for the generator's own default when there was no check."""
    try:
        check = json.loads((run_dir / "run.json").read_text()).get("host_check") or {}
        return int(float(check.get("timer_p99_us", 0.0)) * 1e3)
    except (OSError, ValueError, TypeError):
        return 0


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


def _tell_go(proc: subprocess.Popen) -> None:
    """Start the load of a generator started --when-told (its spec is written). One that
    already ended (it failed at its start) keeps its exit code and log for the trial's row."""
    try:
        proc.stdin.write(b"go\n")
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def execute_trial(
    plan: Plan,
    cell: Cell,
    trial: int,
    run_dir: Path,
    services: ServiceSet | None = None,
    on_second=None,
) -> dict:
    """One trial: fresh server (and network injector, and the `scope: trial` services), load,
    teardown. Returns its row (run/trial_row.py). services: the plan's services (run-scope ones
    already up). on_second(LiveSecond): called about once a second while the load runs
    (measure/live.py)."""
    services = services if services is not None else ServiceSet({}, plan.source)
    out = TrialOutcome.begin(
        cell, trial, run_dir, cell.placement.server_cpu_list or sorted(os.sched_getaffinity(0))
    )
    tdir, seed, net = out.tdir, out.seed, cell.network
    injector = (
        make_injector(net, seed=seed, cpus=cell.placement.injector_cpus) if net.shapes else None
    )
    probes: list = []
    loadgen_proc = None
    sampler = None
    server = None
    counters = None
    prof = None
    cert = None
    try:
        driver.prepare(cell.load.driver)
        if driver.can_wait(cell.load.driver):
            # started now, told `go` once its spec is written: its interpreter and imports
            # run while the server starts (the finally below stops it if no load follows)
            loadgen_proc = spawn(
                driver.argv(cell.load.driver, tdir / "spec.json", tdir, when_told=True),
                tdir / "loadgen.log",
                cwd=ROOT,
                stdin_pipe=True,
            )
        if injector is not None:
            injector.prepare()
        services.start("trial", tdir)
        if cell.server.tls:  # made for this trial, in a private directory; removed below
            cert = RunCertificate.make()
            # and by the guardian if perfctl dies first (kill -9): no key outlives the run
            at_death(_cert_key(cert), [["rm", "-rf", str(cert.directory)]])
        server = ServerProcess(
            cell.server_name,
            cell.server,
            tdir,
            cell.placement.server_cpu_list,
            plan.source,
            host=injector.bind_host if injector else "127.0.0.1",
            wrap=injector.wrap_command if injector else None,
            services=services.endpoints(),
            tls=cert,
        )
        server.start()
        out.startup_s = server.wait_ready()
        host, port = server.host, server.port
        if needs_probe(cell):  # directly, before any injected delay and the load
            out.probe = dispatch_probe.probe(host, port, cell.workload.probe_target).row()
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
            source=plan.source,
            # the certificate names localhost: checked whatever address the load goes to
            tls=TlsTarget(str(cert.ca_file), server_name="localhost") if cert else None,
        )
        if cert is not None:
            _check_https(spec, plan.source, cell.server_name)
        cpus, loadgen_own_cpus = _watched_cpus(cell, spec.cpus, bool(services.pids()))
        spec = dataclasses.replace(
            spec,
            early_wake_ns=host_early_wake_ns(run_dir),
            # on CPUs of its own the generator may poll for punctuality nearly all it likes
            spin_budget=OWN_CPU_SPIN_BUDGET if loadgen_own_cpus else 0.0,
        )
        if spec.mode == "open":  # handed to every driver (loadgen/DRIVER.md)
            spec = dataclasses.replace(spec, schedule_file=contract.SCHEDULE_FILE)
            contract.write_schedule(spec, tdir / contract.SCHEDULE_FILE)
        if injector is not None and net.schedule:
            spec = dataclasses.replace(spec, start_at_ns=time.perf_counter_ns() + SCHEDULE_LEAD_NS)
            injector.start_schedule(spec.start_at_ns)
        (tdir / "spec.json").write_text(spec.to_json())
        out.spec = spec
        out.max_error_rate = plan.experiment.validity.error_limit(spec.mode)
        counters = kernel_tcp.TrialCounters(server.pid, server.port).start()
        if plan.experiment.profile:
            prof = profiler.for_server(
                server.pid,
                tdir,
                server.argv,
                cell.server.impl if isinstance(cell.server, BundledServer) else None,
            ).start()
        if loadgen_proc is not None:
            _tell_go(loadgen_proc)
        else:  # the HTTP generator pins its own worker processes; another driver is pinned whole
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
        if spec.warmup_auto_max_s:  # warmup: auto warms up first, a timeout's grace after it
            limit += spec.warmup_auto_max_s + 3 * spec.timeout_s
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
        alive, refuses = server.serving()
        out.service_reasons = services.dead()
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
        if cert is not None:
            cert.remove()
            forget(_cert_key(cert))
    if code == EXIT_CANNOT_WRITE:  # disk full, dir removed, permission lost: stop the run
        raise unwritable(run_dir, tdir)
    out.server = ServerEnd(alive, refuses, server_code, server.port, tdir / "server.log")
    out.network, out.network_reasons = network_row(net, injector, probes)
    if net.schedule and injector is not None:
        out.applied_steps = injector.changes()
    out.columns = counters.row()
    _load_and_samples(out, code, sampler, cpus, loadgen_own_cpus)
    return trial_row(out)


def _load_and_samples(
    out: TrialOutcome,
    code: int | None,
    sampler: ResourceSampler,
    cpus: set[int],
    loadgen_own_cpus: bool,
) -> None:
    """What the load generator (exit code `code`) left in the trial directory, and what the
    sampler saw of the server and the host over its measured window, into `out`; the
    sampler's resources.parquet written beside them."""
    out.summary, out.load_failure = _load_output(out.tdir, code, out.cell)
    window = (
        (int(out.summary["measure_start_ns"]), int(out.summary["measure_end_ns"]))
        if out.summary
        else None
    )
    out.resources = sampler.summary(window)
    sampler.frame().to_parquet(out.tdir / "resources.parquet", index=False)
    out.tree_reasons = sampler.watch.reasons(
        out.summary["start_ns"] if out.summary else sampler.noise[0].t_ns
    )
    out.noise = partial(
        _noise_row,
        sampler,
        out.summary,
        window_s=out.cell.load.window_s,
        cpus=cpus,
        loadgen_has_own_cpus=loadgen_own_cpus,
    )


def _load_output(tdir: Path, code: int | None, cell: Cell) -> tuple[dict | None, str | None]:
    """The load generator's summary.json when its output is usable, else why not: it timed
    out, exited non-zero, or wrote files that break loadgen/DRIVER.md."""
    who = (
        "load generator" if cell.load.driver == "http" else f"load driver {cell.load.driver_label}"
    )
    if code != 0:
        return None, load_generator_failed(who, code, tail(tdir / "loadgen.log", 3))
    broken = contract.check_output(tdir, cell.load.mode)
    if broken:
        return None, f"{who} wrote output that breaks loadgen/DRIVER.md: {', and '.join(broken)}"
    return read_summary(tdir), None


def _cert_key(cert: RunCertificate) -> str:
    """The guardian's key for removing a trial's certificate directory."""
    return f"tls-{cert.directory.name}"

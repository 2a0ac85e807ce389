"""One trial on a cluster: the server on its host, one load-generator shard per loadgen host,
all through Dask tasks that only start, watch and stop subprocesses (tasks.py), then what
the hosts brought back judged and merged into the trial's files (collect.py, merge.py) and what the trial produced handed to
run/trial_row.py for its row, the same builder a local trial's goes through. Besides a local
trial's columns the row has server_host, loadgen_hosts, shards, clock_offset_ms_max,
clock_uncertainty_ms_max and server_client_addresses; its noise columns are the worst host's
(merge.noise_rollup). A load-generator host cut off during the load is one of its reasons
(stalls.py).

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

import math
import secrets
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ..errors import PerfctlError
from ..experiment.load import shard_specs, to_load_spec
from ..experiment.plan import Cell, Plan
from ..run.trial_row import TrialOutcome, trial_row
from . import collect, merge, tasks
from .session import Clock, HostLost, SchedulerLost, Session, outcome

START_LEAD_S = 2.0  # between agreeing on the instant and the shards' start
SERVER_START_S = 300.0  # a bundled server's first build on a host can take minutes
SERVER_LEASE_GRACE_S = 120.0
STOP_GRACE_S = 30.0


def execute_cluster_trial(
    session: Session, plan: Plan, cell: Cell, trial: int, run_dir: Path
) -> dict:
    """Like run.trial.execute_trial, on the cluster's hosts. Returns the trial's row
    (run/trial_row.py)."""
    known = session.names()
    server_host = cell.placement.server_host(known)
    lg_hosts = cell.placement.loadgen_hosts(known)
    addrs = session.require(list(dict.fromkeys([server_host, *lg_hosts])))
    out = TrialOutcome.begin(
        cell,
        trial,
        run_dir,
        cell.placement.server_cpu_list or session.facts.get(server_host, {}).get("cpus"),
        hosts={
            "server_host": server_host,
            "loadgen_hosts": ",".join(lg_hosts),
            "shards": len(lg_hosts),
        },
        network={"network_backend": "proxy" if cell.network.shapes else "none"},
    )
    try:
        return _measure(session, plan, out, addrs, lg_hosts)
    except SchedulerLost as e:
        # the run stops (the CLI prints e's paragraph); the trial is recorded first, invalid
        out.host_reasons.append(f"the Dask scheduler died during the trial ({e.why})")
        e.row = trial_row(out)
        raise


def _measure(
    session: Session, plan: Plan, out: TrialOutcome, addrs: dict[str, str], lg_hosts: list[str]
) -> dict:
    """The trial begun in `out` on its hosts (addrs: every host it uses; lg_hosts: the
    shards'), to its row. SchedulerLost when the scheduler stops answering meanwhile."""
    cell, server_host = out.cell, out.hosts["server_host"]
    tdir, seed = out.tdir, out.seed
    token = f"{cell.cell_id}-{out.trial}-{secrets.token_hex(4)}"
    calls = _Calls(session, token, addrs)
    load = cell.load
    phase_s = load.warmup_s + load.window_s + load.timeout_s
    reasons = out.host_reasons
    results: dict = {}
    clocks: dict[str, Clock] = {}
    start_wall = 0
    ended = False
    try:
        started = _start_server(calls, plan, out, START_LEAD_S + phase_s)
        if started is None:
            return trial_row(out)
        out.startup_s = started["startup_s"]
        out.spec = to_load_spec(
            load,
            cell.workload,
            started["host"],
            started["port"],
            seed=seed,
            cpus=tuple(cell.placement.loadgen_cpu_list or ()),
            source=plan.source,
        )
        (tdir / "spec.json").write_text(out.spec.to_json())
        shards = dict(zip(lg_hosts, shard_specs(out.spec, len(lg_hosts))))
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
                for h, s in shards.items()
            }
            results = session.wait(
                futures, addrs, START_LEAD_S + phase_s + tasks.SHARD_GRACE_S + STOP_GRACE_S
            )
        except (HostLost, TimeoutError) as e:
            reasons.append(
                f"host(s) {', '.join(e.hosts)} "
                f"({', '.join(addrs[h] for h in e.hosts)}) lost during the trial"
                f"{': ' + e.detail if e.detail else ''}; the trial's processes on "
                "the other hosts were stopped"
                if isinstance(e, HostLost)
                else "the shards did not finish in time; their processes were stopped"
            )
            results = {
                h: outcome(f) for h, f in futures.items() if f.status in ("finished", "error")
            }
        ended = True
    finally:  # shards still running; on the way out by an exception, the server too
        session.stop_trial(token, addrs, server=not ended)
    server_out = _stop_server(calls, out, clocks, start_wall)
    _clock_steps(session, out, addrs, clocks, session.cfg.max_clock_uncertainty_s * 1e3)
    _fetch(calls, out, results)
    out.max_error_rate = plan.experiment.validity.error_limit(out.spec.mode)
    bound_ms = session.cfg.max_clock_uncertainty_s * 1e3
    shard_noise = collect.shard_results(out, shards, addrs, clocks, results, bound_ms)
    server_noise = None
    if server_out is not None and not server_out.get("missing"):
        server_noise = collect.server_result(out, server_host, addrs[server_host], server_out)
    out.noise = partial(merge.noise_rollup, server_noise, shard_noise, window_s=load.window_s)
    return trial_row(out)


@dataclass(frozen=True)
class _Calls:
    """What every call of one cluster trial to its hosts takes: the session, the trial's
    token (what its tasks and files are known by on every host) and the hosts' addresses."""

    session: Session
    token: str
    addrs: dict[str, str]

    def one(self, host: str, fn, *args, timeout_s: float):
        """fn(token, *args) as a task on `host`, waited for up to timeout_s: its result, or
        the exception it raised there. HostLost or TimeoutError when the host leaves or does
        not answer."""
        future = self.session.submit(self.addrs[host], fn, self.token, *args)
        return self.session.wait({host: future}, {host: self.addrs[host]}, timeout_s)[host]


def _start_server(calls: _Calls, plan: Plan, out: TrialOutcome, phase_s: float) -> dict | None:
    """tasks.start_server on the server's host (with the proxy in front when the network
    shapes), leased for phase_s and a grace: where the shards connect, or None (and the
    reason in out.host_reasons) when the host left or did not answer. Raises PerfctlError
    when the server could not start there."""
    cell, host, address = out.cell, out.hosts["server_host"], calls.addrs[out.hosts["server_host"]]
    try:
        started = calls.one(
            host,
            tasks.start_server,
            cell.server_name,
            cell.server,
            cell.placement.server_cpu_list,
            plan.source,
            phase_s + SERVER_LEASE_GRACE_S,
            cell.network if cell.network.shapes else None,
            out.seed,
            cell.placement.injector_cpus,
            timeout_s=SERVER_START_S,
        )
    except (HostLost, TimeoutError) as e:
        # the trial is invalid; the next one needing the host waits for it (Session.require)
        why = (
            f"left ({e.detail})"
            if isinstance(e, HostLost)
            else f"did not answer within {SERVER_START_S:g} s"
        )
        out.host_reasons.append(
            f"server host {host} ({address}) {why} while the server "
            f"{cell.server_name} was starting there"
        )
        return None
    if isinstance(started, PerfctlError):
        raise started
    if isinstance(started, BaseException):
        raise PerfctlError(
            f"host {host} ({address}): starting the server "
            f"{cell.server_name} failed there: {type(started).__name__}: "
            f"{started}. Fix: check that perfctl is installed on that host "
            "at the same version as here (docs/clusters.md)."
        )
    return started


def _stop_server(
    calls: _Calls, out: TrialOutcome, clocks: dict[str, Clock], start_wall: int
) -> dict | None:
    """tasks.stop_server on the server's host, told the measured window in that host's wall
    clock (start_wall: the shards' agreed start, in the coordinator's; 0 if they never got
    one): its result, or None (and the reason in out.host_reasons) when the host is lost or
    the task failed."""
    host, load = out.hosts["server_host"], out.cell.load
    window = None
    if start_wall and host in clocks:
        s_wall = start_wall + clocks[host].offset_ns
        window = (
            s_wall + int(load.warmup_s * 1e9),
            s_wall + int((load.warmup_s + load.window_s) * 1e9),
        )
    try:
        server_out = calls.one(
            host,
            tasks.stop_server,
            window,
            window[0] - int(load.warmup_s * 1e9) if window else time.time_ns(),
            0,
            load.window_s,
            timeout_s=STOP_GRACE_S,
        )
    except (HostLost, TimeoutError):
        out.host_reasons.append(
            f"server host {host} ({calls.addrs[host]}) lost or unreachable at the end of the trial"
        )
        return None
    if isinstance(server_out, BaseException):
        out.host_reasons.append(
            f"stopping the server on {host} failed: {type(server_out).__name__}: {server_out}"
        )
        return None
    return server_out


def _clock_steps(
    session: Session,
    out: TrialOutcome,
    addrs: dict[str, str],
    before: dict[str, Clock],
    bound_ms: float,
) -> None:
    """Each host's clock offset measured again after the load: a host whose offset moved
    since `before` by more than bound_ms (cluster.max_clock_uncertainty) beyond both
    measurements' uncertainty had its wall clock stepped (or slewed that fast) during the
    trial, so what was placed through the offset measured before (the shards' start instant,
    the server's measured window) is off by as much there: the trial is invalid. A host that
    no longer answers is the lost host's reason, not this one's. Column clock_step_ms_max: the
    largest change seen (NaN when none could be measured)."""
    steps = []
    now = session.addresses()
    for h, c0 in before.items():
        if now.get(h) != addrs[h]:  # gone: asking would wait for Dask's connect timeout
            continue
        try:
            c1 = session.clock(h, addrs[h])
        except HostLost:
            continue
        step_ms = (c1.offset_ns - c0.offset_ns) / 1e6
        steps.append(abs(step_ms))
        slack_ms = (c0.uncertainty_ns + c1.uncertainty_ns) / 1e6
        if abs(step_ms) > bound_ms + slack_ms:
            out.host_reasons.append(
                f"host {h}'s clock stepped by {step_ms:.0f} ms during the trial (its offset "
                f"to perfctl's clock went from {c0.offset_ns / 1e6:.1f} to "
                f"{c1.offset_ns / 1e6:.1f} ms ±{slack_ms:.1f} ms, more than "
                f"cluster.max_clock_uncertainty, {bound_ms:g} ms)"
            )
    out.columns["clock_step_ms_max"] = max(steps) if steps else math.nan


def _fetch(calls: _Calls, out: TrialOutcome, results: dict) -> None:
    """Each finished shard's files into tdir/shards/<host>/ (Session.fetch_files); a shard
    whose files cannot be fetched counts as lost (its result becomes None, the reason goes
    to out.host_reasons)."""
    for h, r in results.items():
        if not isinstance(r, dict) or not r.get("files"):
            continue
        address = calls.addrs[h]
        try:
            calls.session.fetch_files(h, address, calls.token, r["files"], out.tdir / "shards" / h)
        except (HostLost, TimeoutError, OSError) as e:
            why = "host lost" if isinstance(e, HostLost) else type(e).__name__
            out.host_reasons.append(
                f"shard {h}: its records could not be fetched from {address} ({why}: {e})"
            )
            results[h] = None

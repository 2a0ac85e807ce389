"""A trial's row for trials.csv (columns: results/schema.py), built in one place for a trial on
this host (run/trial.py) and one on a cluster (cluster/trial.py).

Each path gathers what its trial produced into a TrialOutcome: the load generator's summary
(a cluster's merged over its shards), how the server ended, the injected network's columns
and checks, the resource and noise samples, and the reasons to distrust the trial that only
that path can see (a shard lost, a service that died). `trial_row` turns it into the row, and
writes the trial's timeline.parquet (and ramp.json, network_changes.json where they apply).
Every sentence of `invalid_reasons` that both paths can give is written here, once.

Order matters twice, and is kept here: the row's keys (trials.csv's columns outside the
schema's lists keep the order they first appear in) and the reasons (`invalid_reasons` reads
them in the order found: the network's checks, the hosts', the load generator's verdicts,
then the server's end).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from loadgen import digest as ldigest
from loadgen import hdr as lhdr
from loadgen import stats as lstats
from loadgen.records import stream_batches
from loadgen.spec import LoadSpec

from ..experiment.catalogue import BLOCKING_LOOPS, dispatch_of
from ..experiment.load import trial_seed
from ..experiment.network import Network
from ..experiment.plan import Cell
from ..experiment.servers import BundledServer
from ..netem.expected import expected_rtt_p50_ms
from ..results import trial_dir, write_json
from .endpoints import endpoint_names, write_trial_endpoints

ZERO_LOAD = {"requests": 0, "errors": 0, "throughput_rps": 0.0}  # no usable load output


@dataclass
class ServerEnd:
    """How the trial's server ended. alive: still running when the load ended; refuses:
    alive, but nothing accepted on its port any more (stopped_accepting); exit_code: what
    stopping it returned; log: its server.log in the trial directory; host: the cluster host
    it ran on ("" on this host)."""

    alive: bool
    refuses: bool
    exit_code: int | None
    port: int
    log: Path
    host: str = ""


@dataclass
class TrialOutcome:
    """What one trial produced, on this host or on a cluster: the one input of trial_row.

    A path fills it as its trial goes; what a trial never reached keeps its default (a server
    that never started: no `server`, no `summary`, no `noise`)."""

    cell: Cell
    trial: int
    seed: int  # the trial's schedule seed (experiment/load.py trial_seed)
    tdir: Path  # the trial directory
    spec: LoadSpec | None = None  # the load generator's spec (the whole trial's, not a shard's)
    max_error_rate: float | None = None  # the validity's error limit for spec.mode
    startup_s: float = math.nan  # until the server answered
    probe: dict = field(default_factory=dict)  # a cmd server's dispatch probe (probe_* columns)
    server_cpus: Sequence[int] | None = None  # where the server may run (None: unknown)
    hosts: dict = field(default_factory=dict)  # a cluster's server_host, loadgen_hosts, shards
    network: dict = field(default_factory=dict)  # the network columns (network_row)
    network_reasons: list[str] = field(default_factory=list)  # the injected network's checks
    host_reasons: list[str] = field(default_factory=list)  # a cluster's hosts and shards
    # the load generator's summary.json (a cluster's merged one), its files in tdir; None
    # when there is no usable output
    summary: dict | None = None
    load_failure: str | None = None  # why the load's output is missing or broken
    applied_steps: list[dict] | None = None  # a network schedule's (Injector.changes())
    service_reasons: list[str] = field(default_factory=list)  # services that died
    server: ServerEnd | None = None  # None: never started, or its end is unknown (host lost)
    tree_reasons: list[str] = field(default_factory=list)  # the server's process tree
    columns: dict = field(default_factory=dict)  # the path's own: TCP counters, clocks
    resources: dict = field(default_factory=dict)  # the server's CPU, memory, threads
    # the noise columns (quiet and noise_reasons included) given the trial's request
    # count; None when the host was never watched
    noise: Callable[[int], dict] | None = None

    @classmethod
    def begin(
        cls, cell: Cell, trial: int, run_dir: Path, server_cpus: Sequence[int] | None, **fields
    ) -> TrialOutcome:
        """The outcome of a trial about to run: its directory made, its seed drawn."""
        tdir = trial_dir(run_dir, cell.cell_id, trial)
        tdir.mkdir(parents=True, exist_ok=True)
        seed = trial_seed(cell.cell_id, trial, cell.load.seed)
        return cls(cell, trial, seed, tdir, server_cpus=server_cpus, **fields)


def trial_row(t: TrialOutcome) -> dict:
    """The trial's row, from what it produced. Writes timeline.parquet, endpoints.csv (and
    ramp.json, network_changes.json when the load or the network has them) into t.tdir."""
    row = {
        "cell_id": t.cell.cell_id,
        "trial": t.trial,
        **t.cell.values,
        **describe(t.cell, t.server_cpus),
        "seed": t.seed,
        "startup_s": t.startup_s,
        **t.probe,
        **t.hosts,
        **t.network,
    }
    reasons = [*t.network_reasons, *t.host_reasons]
    if t.summary is None:
        row.update(ZERO_LOAD)
    else:
        metrics = _load_columns(t)
        # a cluster's shards said most of these already, each with its host
        reasons += [
            r
            for r in metrics["invalid_reasons"].split("; ")
            if r and not any(r in x for x in t.host_reasons)
        ]
        row.update({k: v for k, v in metrics.items() if k not in ("valid", "invalid_reasons")})
    if t.load_failure:
        reasons.append(t.load_failure)
    reasons += t.service_reasons
    if t.server is not None:
        reasons += server_reasons(t.server)
    reasons += t.tree_reasons
    row.update(t.columns)
    row.update(t.resources)
    row["valid"] = not reasons
    row["invalid_reasons"] = "; ".join(reasons)
    if t.noise is not None:
        row.update(t.noise(int(row.get("requests") or 0)))
    if t.summary is not None and t.spec is not None:
        write_trial_endpoints(
            t.tdir,
            t.summary,
            t.spec.mode,
            endpoint_names(t.spec, t.cell.workload.path),
            row,
            t.max_error_rate,
        )
    return row


def _load_columns(t: TrialOutcome) -> dict:
    """The load generator's metrics and self-checks; its timeline written beside them."""
    metrics, timeline = summarize_trial(t.tdir, t.summary, t.spec, t.max_error_rate)
    if "ramp_steps" in t.summary:
        write_json(
            t.tdir / "ramp.json", {"steps": t.summary["ramp_steps"], "slo": t.summary["slo"]}
        )
    if t.applied_steps is not None:
        changes = network_changes(t.cell.network, t.applied_steps, int(t.summary["start_ns"]))
        write_json(t.tdir / "network_changes.json", {"changes": changes})
        timeline = timeline_with_changes(timeline, changes)
    timeline.to_parquet(t.tdir / "timeline.parquet", index=False)
    return metrics


# --- the sentences of invalid_reasons both paths give ----------------------------------------
def server_reasons(end: ServerEnd) -> list[str]:
    """Why the server's end makes the trial invalid: it died, or it stopped accepting."""
    if not end.alive:
        on = f" on {end.host}" if end.host else ""
        return [f"server died during the trial (exit {end.exit_code}){on}; see {end.log}"]
    if end.refuses:
        port = f"{end.host} port {end.port}" if end.host else f"port {end.port}"
        return [f"server stopped accepting connections on {port}; see {end.log}"]
    return []


def load_generator_failed(who: str, code: int | None, log_tail: str) -> str:
    """A load generator (`who`) that ran out of time (code None) or exited non-zero."""
    return f"{who} {'timed out' if code is None else f'exited {code}'}: {log_tail}"


# --- the columns --------------------------------------------------------------------------------
def describe(cell: Cell, server_cpus: Sequence[int] | None) -> dict:
    """Config-derived columns every trial row carries (models and plots use them).
    server_cpus: the CPUs the server may run on (server_cores; NaN when unknown)."""
    s = cell.server
    bundled_ = isinstance(s, BundledServer)
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
        "server_cores": len(server_cpus) if server_cpus else math.nan,
        "load_mode": cell.load.mode,
        "load_driver": cell.load.driver_label,
        "connections": cell.load.connections,
        "keepalive": cell.load.keepalive,
        "think_time_s": cell.load.think_time_s,
        "window_s": cell.load.window_s,
        "work_spin_us": cell.workload.spin_us,
        "work_sleep_us": cell.workload.sleep_us,
    }


def network_row(net: Network, injector, probes: list) -> tuple[dict, list[str]]:
    """trials.csv columns about the injected network, and reasons to distrust the trial.
    probes: [(when, ProbeResult, the network state it was taken in)]."""
    row = {
        "network_backend": injector.backend if injector else "none",
        "rtt_expected_ms": expected_rtt_p50_ms(net) if injector else 0.0,
        "rtt_measured_ms": math.nan,
        "rtt_measured_before_ms": math.nan,
        "rtt_measured_after_ms": math.nan,
    }
    reasons = []
    for when, probe, state in probes:
        row[f"rtt_measured_{when}_ms"] = probe.added_p50_ms
        if state is not net:
            row[f"rtt_expected_{when}_ms"] = expected_rtt_p50_ms(state)
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
        if "sent_err_p50_ns" in stats:  # a proxy built before 2026-11-27 has no such figure
            row["send_done_error_p50_us"] = stats["sent_err_p50_ns"] / 1e3
            row["send_done_error_p99_us"] = stats["sent_err_p99_ns"] / 1e3
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


def summarize_trial(tdir: Path, summary: dict, spec, max_error_rate: float | None):
    """The trial's metrics and timeline from the load generator's digest.json and
    latency.hlog, streamed: nothing here grows with the number of requests. With every
    request kept (`records: all`), one more pass over requests.parquet makes the percentiles
    exact order statistics; otherwise they come from the HdrHistograms (within 0.1%)."""
    if not (tdir / "digest.json").is_file():
        _digest_from_rows(tdir, summary, spec.timeout_s, by_request=len(spec.requests) > 1)
    doc = ldigest.read(tdir / "digest.json")
    every = summary.get("records", "all") == "all" and (tdir / "requests.parquet").is_file()
    metrics = lstats.summarize_digest(
        doc,
        summary,
        spec.mode,
        target_rate_rps=spec.rate_rps or None,
        max_error_rate=max_error_rate,
        requests_path=tdir / "requests.parquet" if every else None,
        clients=spec.connections if spec.mode == "closed" else None,
    )
    timeline = lstats.timeline_of_digest(doc, summary, lhdr.iter_log(tdir / "latency.hlog"))
    return metrics, timeline


def _digest_from_rows(tdir: Path, summary: dict, timeout_s: float, by_request: bool) -> None:
    """A driver other than the HTTP generator writes rows, not a digest (loadgen/DRIVER.md):
    stream its requests.parquet through one, a batch at a time (by_request: a mix, its figures
    per request index too, from the rows' `request` column)."""
    d = ldigest.Digest(timeout_s, by_request=by_request)
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

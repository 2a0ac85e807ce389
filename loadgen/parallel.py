"""Generating a LoadSpec's load to files, in one process or split over several.

`generate_to_dir(spec, out_dir)` writes summary.json, digest.json and latency.hlog (digest.py:
every request summarised chunk by chunk, so memory stays bounded) and requests.parquet (every
request, a sample, or none, as `records` says; spilled in chunks), and while it runs appends
per-second lines to live.jsonl (live-<i>.jsonl per worker process; live.py) for whoever
watches. The spec's mode object is looked up once; it says how
many worker processes share the load (ramp: its steps follow one another in one process).
With P > 1, P worker processes (one uvloop loop each, pinned round-robin to spec.cpus) share
one start instant, each generating the mode's share of the load (Mode.share), and the raw
columns are merged at the end.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import pyarrow.parquet as pq

from .digest import Digest, merge_files
from .live import LiveStats
from .modes import Mode, mode_for
from .prewarm import prewarm
from .records import parquet_options, stream_batches
from .sink import ParquetSink
from .spec import LoadSpec

START_LEAD_NS = 400_000_000  # time for the worker processes to start before the instant


def generate_to_dir(spec: LoadSpec, out_dir: str | Path) -> dict:
    """Generate the spec's load; write requests.parquet and summary.json into out_dir."""
    mode = mode_for(spec)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    warm = prewarm(spec) if not spec.start_at_ns else {}  # warmup: auto (prewarm.py)
    if mode.processes == 1:
        summary = _generate_here(mode, out)
    else:
        summary = _generate_in_processes(mode, out)
    summary.update(warm)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _sink(mode: Mode, path: Path, extra: dict | None = None) -> ParquetSink:
    """The sink of one worker process: its digest, and the rows `records` keeps."""
    spec = mode.spec
    keep = spec.keep_fraction
    by_request = len(spec.requests) > 1 or len(spec.replay_names) > 1
    digest = Digest(spec.timeout_s, by_request=by_request)
    return ParquetSink(path if keep > 0 else None, extra, digest, keep, seed=spec.seed)


def _generate_here(mode: Mode, out: Path) -> dict:
    sink = _sink(mode, out / "requests.parquet.tmp")
    live = LiveStats(out / "live.jsonl")
    try:
        summary = mode.generate(sink, live=live)
    finally:
        live.close()
    sink.finish()
    sink.digest.write(out)
    if sink.writer is not None:
        os.replace(out / "requests.parquet.tmp", out / "requests.parquet")
    summary["records"] = mode.spec.records
    summary["records_written"] = sink.written
    return summary


def _generate_in_processes(mode: Mode, out: Path) -> dict:
    spec, count = mode.spec, mode.processes
    # an instant the spec already agreed (a network schedule runs from it), else one just ahead
    start = max(spec.start_at_ns, time.perf_counter_ns() + START_LEAD_NS)
    ctx = mp.get_context("fork")
    procs = []
    for i in range(count):
        p = ctx.Process(
            target=_child, args=(mode.share(i, count, start), str(out / f"part-{i}.parquet"), i)
        )
        p.start()
        procs.append(p)
    limit = (
        (start - time.perf_counter_ns()) / 1e9 + spec.warmup_s + spec.window_s + spec.timeout_s + 60
    )
    deadline = time.monotonic() + limit
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    parts = [out / f"part-{i}.parquet" for i in range(count)]
    missing = [
        str(p)
        for p, pr in zip(parts, procs)
        if pr.exitcode != 0 or not p.with_suffix(".json").is_file()
    ]
    if missing:
        raise RuntimeError(f"load-generator worker(s) failed: {', '.join(missing)}")
    summaries = [json.loads(p.with_suffix(".json").read_text()) for p in parts]
    if spec.keep_fraction > 0:
        schema = pq.read_schema(parts[0])
        with pq.ParquetWriter(
            out / "requests.parquet.tmp", schema, **parquet_options(schema.names)
        ) as writer:
            for p in parts:
                for batch in stream_batches(p):
                    writer.write_batch(batch)
        os.replace(out / "requests.parquet.tmp", out / "requests.parquet")
    # histograms and counts add up; the per-worker latency logs stay (latency-worker-<i>.hlog)
    merge_files(
        [out / f"digest-worker-{i}.json" for i in range(count)],
        [out / f"latency-worker-{i}.hlog" for i in range(count)],
        out,
    )
    for i, p in enumerate(parts):
        p.unlink(missing_ok=True)
        p.with_suffix(".json").unlink()
        (out / f"digest-worker-{i}.json").unlink()
    return merge_summaries(summaries)


def _child(mode: Mode, part: str, index: int) -> None:
    sink = _sink(mode, Path(part), extra={"worker": index})
    live = LiveStats(Path(part).parent / f"live-{index}.jsonl", index)
    try:
        summary = mode.generate(sink, seq_base=index * 1_000_000_000, live=live)
    finally:
        live.close()
    sink.finish()
    sink.digest.write(Path(part).parent, f"digest-worker-{index}", f"latency-worker-{index}.hlog")
    summary["records"] = mode.spec.records
    summary["records_written"] = sink.written
    Path(part).with_suffix(".json").write_text(json.dumps(summary))


def merge_summaries(parts: list[dict]) -> dict:
    """One summary from several workers: sums of counts, maxima of lags and lateness
    (the p99 reported is the worst worker's p99: conservative), CPU per worker."""
    out = dict(parts[0])
    for k in (
        "scheduled_in_window",
        "dropped",
        "requests_recorded",
        "gc_pauses",
        "records_written",
        "send_poll_denied",
    ):
        out[k] = sum(p.get(k, 0) for p in parts)
    if "delivered_arrivals" in parts[0]:  # open load: the worst part's spacing (delivered.py)
        out["delivered_arrivals"] = sum(p.get("delivered_arrivals", 0) for p in parts)
        for k in (
            "delivered_ks",
            "delivered_stalled_pct",
            "lateness_backlog_ms",
            "backlog_busy_share",
        ):
            vals = [p.get(k) for p in parts]
            out[k] = None if None in vals else max(vals, key=abs)
    for k in ("tls_connections", "tls_resumed"):  # HTTPS only
        if k in parts[0]:
            out[k] = sum(p.get(k, 0) for p in parts)
    for k in (
        "loop_lag_p99_ms",
        "loop_lag_max_ms",
        "send_lateness_p50_ms",
        "send_lateness_p99_ms",
        "send_lateness_p999_ms",  # the union's quantile is at most the largest part's
        "send_lateness_mean_ms",  # and its mean at most the largest part's mean
        "send_lateness_max_ms",
        "gc_pause_max_ms",
        "loadgen_cpu_pct",
        "release_spread_ms_max",
        "send_early_wake_ms",
        "send_poll_cpu_pct",
        "tls_handshake_p50_ms",
        "tls_handshake_p99_ms",
        "tls_handshake_max_ms",
    ):
        if k in parts[0]:
            out[k] = max(p.get(k, 0.0) for p in parts)
    out["loadgen_cpu_pct_per_worker"] = [p.get("loadgen_cpu_pct", 0.0) for p in parts]
    out["processes"] = len(parts)
    return out

"""Generating a LoadSpec's load to files, in one process or split over several.

`generate_to_dir(spec, out_dir)` writes requests.parquet (every request, spilled in chunks so
memory stays bounded) and summary.json, and while it runs appends per-second lines to
live.jsonl (live-<i>.jsonl per worker process; live.py) for whoever watches. The spec's mode object is looked up once; it says how
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

from .live import LiveStats
from .modes import Mode, mode_for
from .sink import ParquetSink
from .spec import LoadSpec

START_LEAD_NS = 400_000_000   # time for the worker processes to start before the instant


def generate_to_dir(spec: LoadSpec, out_dir: str | Path) -> dict:
    """Generate the spec's load; write requests.parquet and summary.json into out_dir."""
    mode = mode_for(spec)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if mode.processes == 1:
        summary = _generate_here(mode, out)
    else:
        summary = _generate_in_processes(mode, out)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _generate_here(mode: Mode, out: Path) -> dict:
    sink = ParquetSink(out / "requests.parquet.tmp")
    live = LiveStats(out / "live.jsonl")
    try:
        summary = mode.generate(sink, live=live)
    finally:
        live.close()
    sink.finish()
    os.replace(out / "requests.parquet.tmp", out / "requests.parquet")
    return summary


def _generate_in_processes(mode: Mode, out: Path) -> dict:
    spec, count = mode.spec, mode.processes
    start = time.perf_counter_ns() + START_LEAD_NS
    ctx = mp.get_context("fork")
    procs = []
    for i in range(count):
        p = ctx.Process(target=_child, args=(mode.share(i, count, start),
                                             str(out / f"part-{i}.parquet"), i))
        p.start()
        procs.append(p)
    limit = START_LEAD_NS / 1e9 + spec.warmup_s + spec.window_s + spec.timeout_s + 60
    deadline = time.monotonic() + limit
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    parts = [out / f"part-{i}.parquet" for i in range(count)]
    missing = [str(p) for p, pr in zip(parts, procs) if pr.exitcode != 0 or not p.is_file()]
    if missing:
        raise RuntimeError(f"load-generator worker(s) failed: {', '.join(missing)}")
    summaries = [json.loads(p.with_suffix(".json").read_text()) for p in parts]
    with pq.ParquetWriter(out / "requests.parquet.tmp", pq.read_schema(parts[0])) as writer:
        for p in parts:
            for batch in pq.ParquetFile(p).iter_batches():
                writer.write_batch(batch)
    os.replace(out / "requests.parquet.tmp", out / "requests.parquet")
    for p in parts:
        p.unlink()
        p.with_suffix(".json").unlink()
    return merge_summaries(summaries)


def _child(mode: Mode, part: str, index: int) -> None:
    sink = ParquetSink(Path(part), extra={"worker": index})
    live = LiveStats(Path(part).parent / f"live-{index}.jsonl", index)
    try:
        summary = mode.generate(sink, seq_base=index * 1_000_000_000, live=live)
    finally:
        live.close()
    sink.finish()
    Path(part).with_suffix(".json").write_text(json.dumps(summary))


def merge_summaries(parts: list[dict]) -> dict:
    """One summary from several workers: sums of counts, maxima of lags and lateness
    (the p99 reported is the worst worker's p99: conservative), CPU per worker."""
    out = dict(parts[0])
    for k in ("scheduled_in_window", "dropped", "requests_recorded", "gc_pauses"):
        out[k] = sum(p.get(k, 0) for p in parts)
    for k in ("loop_lag_p99_ms", "loop_lag_max_ms", "send_lateness_p50_ms",
              "send_lateness_p99_ms", "send_lateness_max_ms", "gc_pause_max_ms",
              "loadgen_cpu_pct", "release_spread_ms_max"):
        if k in parts[0]:
            out[k] = max(p.get(k, 0.0) for p in parts)
    out["loadgen_cpu_pct_per_worker"] = [p.get("loadgen_cpu_pct", 0.0) for p in parts]
    out["processes"] = len(parts)
    return out

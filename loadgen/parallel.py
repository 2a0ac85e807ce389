"""Running a LoadSpec to files, in one process or split over several.

`run_to_dir(spec, out_dir)` writes requests.parquet (every request, spilled in chunks so
memory stays bounded) and summary.json. With spec.processes = P > 1, P worker processes
(one uvloop loop each, pinned round-robin to spec.cpus) share one start instant; open-mode
arrivals are split (P independent Poisson streams of rate/P superpose to one of rate; constant
streams are interleaved by offset), closed/burst connections are divided, and the raw columns
are merged at the end. Ramp mode steps through rates in one process (ramp.py).
"""
from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import pyarrow.parquet as pq

from . import worker
from .ramp import run_ramp
from .sink import ParquetSink
from .spec import LoadSpec

START_LEAD_NS = 400_000_000   # time for the worker processes to start before the instant


def _split(spec: LoadSpec, index: int, count: int, start_at_ns: int) -> LoadSpec:
    share = spec.connections // count + (1 if index < spec.connections % count else 0)
    cpus = (spec.cpus[index % len(spec.cpus)],) if spec.cpus else ()
    changes = dict(connections=max(1, share), seed=spec.seed * 1009 + index, cpus=cpus,
                   processes=1, start_at_ns=start_at_ns,
                   max_outstanding=max(1, spec.outstanding_cap // count))
    if spec.mode == "open":
        changes["rate_rps"] = spec.rate_rps / count
    return dataclasses.replace(spec, **changes)


def _child(spec: LoadSpec, part: str, index: int) -> None:
    sink = ParquetSink(Path(part), extra={"worker": index})
    rec, summary = worker.run(spec, sink, seq_base=index * 1_000_000_000)
    sink.close(rec)
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


def run_to_dir(spec: LoadSpec, out_dir: str | Path) -> dict:
    """Run the spec and write requests.parquet and summary.json into out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    final = out / "requests.parquet"
    if spec.mode == "ramp":
        summary = run_ramp(spec, out)
    elif spec.processes == 1:
        sink = ParquetSink(out / "requests.parquet.tmp")
        rec, summary = worker.run(spec, sink)
        sink.close(rec)
        os.replace(out / "requests.parquet.tmp", final)
    else:
        start = time.perf_counter_ns() + START_LEAD_NS
        ctx = mp.get_context("fork")
        procs = []
        for i in range(spec.processes):
            sub = _split(spec, i, spec.processes, start)
            p = ctx.Process(target=_child, args=(sub, str(out / f"part-{i}.parquet"), i))
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
        parts = [out / f"part-{i}.parquet" for i in range(spec.processes)]
        missing = [str(p) for p, pr in zip(parts, procs) if pr.exitcode != 0 or not p.is_file()]
        if missing:
            raise RuntimeError(f"load-generator worker(s) failed: {', '.join(missing)}")
        summaries = [json.loads(p.with_suffix(".json").read_text()) for p in parts]
        with pq.ParquetWriter(out / "requests.parquet.tmp",
                              pq.read_schema(parts[0])) as writer:
            for p in parts:
                for batch in pq.ParquetFile(p).iter_batches():
                    writer.write_batch(batch)
        os.replace(out / "requests.parquet.tmp", final)
        for p in parts:
            p.unlink()
            p.with_suffix(".json").unlink()
        summary = merge_summaries(summaries)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary

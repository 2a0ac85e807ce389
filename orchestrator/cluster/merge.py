"""Shards into one trial: their digests and latency logs into one (histograms and counts
added, never percentiles averaged), their raw records streamed into one requests.parquet, their
summaries into one, and their self-checks into the trial's verdicts. Nothing here holds a
shard's rows in memory: records move one parquet batch at a time, and the trial's percentiles
come from the merged digest (exact order statistics after one more streamed pass when every
request is kept, else the HdrHistogram's, within 0.1%: run/trial_row.py summarize_trial).

Timestamps: each shard records its own host's CLOCK_MONOTONIC. In the merged file each
shard's times are moved by one constant (`shift_ns` in shards.json: the first shard's start
instant minus this shard's), so all shards' start instants coincide and a request's latency
(done - intended, one host's clock) is unchanged to the nanosecond. The raw time of a row is
its merged time minus its shard's shift_ns. The digests need no shift: their per-second bins
count from each shard's own start instant, and every shard's measured window lies at the same
offsets from it (warm-up, window), so the merged digest is in the first shard's clock too.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from loadgen import digest as ldigest
from loadgen import stats as lstats
from loadgen.parallel import merge_summaries
from loadgen.records import parquet_options

from ..measure import noise

NS_COLUMNS = ("intended_ns", "sent_ns", "first_byte_ns", "done_ns")
BATCH_ROWS = 1 << 16


def merge_shards(shards: list[tuple[str, Path]], out: Path) -> tuple[dict, dict]:
    """shards: (host, directory holding that shard's summary.json, digest.json, latency.hlog
    and, unless `records: none`, requests.parquet), in shard order. Writes into out the
    merged digest.json, latency.hlog and requests.parquet (with a `host` column; each shard's
    requests.parquet is removed once the merged one is in place: its rows are all there).
    Returns (the merged summary, host -> shift_ns). Memory: one batch of rows at a time."""
    summaries = [json.loads((d / "summary.json").read_text()) for _, d in shards]
    ref = summaries[0]["start_ns"]
    shifts = {h: int(ref - s["start_ns"]) for (h, _), s in zip(shards, summaries)}
    ldigest.merge_files(
        [d / "digest.json" for _, d in shards], [d / "latency.hlog" for _, d in shards], out
    )
    files = [(h, d / "requests.parquet") for h, d in shards if (d / "requests.parquet").is_file()]
    if files:
        _merge_records(files, shifts, out / "requests.parquet")
        for _, f in files:
            f.unlink()
    summary = merge_summaries(summaries)
    summary["shards"] = len(shards)
    return summary, shifts


def _merge_records(files: list[tuple[str, Path]], shifts: dict[str, int], out: Path) -> None:
    """Each shard's rows, batch by batch, times shifted, a `host` column added."""
    first = pq.read_schema(files[0][1])
    schema = first.append(pa.field("host", pa.string()))
    tmp = out.with_name(out.name + ".tmp")
    with pq.ParquetWriter(tmp, schema, **parquet_options(schema.names)) as writer:
        for host, path in files:
            shift = shifts[host]
            for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
                cols = []
                for field in first:
                    a = batch.column(field.name)
                    if field.name in NS_COLUMNS and shift:
                        v = a.to_numpy(zero_copy_only=False)
                        a = pa.array(np.where(v != 0, v + shift, 0), field.type)
                    cols.append(a)
                cols.append(pa.array([host] * batch.num_rows, pa.string()))
                writer.write_batch(pa.RecordBatch.from_arrays(cols, schema=schema))
    tmp.replace(out)


def shard_noise(
    samples: list, summary: dict, requests: int, window_s: float, cpus: set[int], own_cpus: bool
) -> tuple[dict, list[str]]:
    """One shard host's noise readings over its measured window (its own clock)."""
    pair = (
        noise.window_samples(
            samples, int(summary["measure_start_ns"]), int(summary["measure_end_ns"])
        )
        if summary
        else None
    )
    row = noise.readings(*pair, requests, window_s, cpus) if pair else noise.not_measured()
    return row, noise.noise_reasons(row, own_cpus)


def noise_rollup(
    server: tuple[str, dict, list[str]] | None,
    shards: list[tuple[str, dict, list[str]]],
    requests: int,
    window_s: float,
) -> dict:
    """The trial's noise columns from every host's readings: steal, foreign CPU and the load
    generator's waits are the worst host's; the server's are its host's; `quiet` only when
    every host was; `noise_reasons` name the host."""
    hosts = ([server] if server else []) + shards
    row = noise.not_measured()

    def worst(col: str, among) -> float:
        vals = [r[col] for _, r, _ in among if r.get(col, math.nan) == r.get(col, math.nan)]
        return max(vals) if vals else math.nan

    for col in ("noise_steal_pct", "noise_foreign_cpu_pct"):
        row[col] = worst(col, hosts)
    for col in (
        "noise_loadgen_runqueue_wait_ms_per_s",
        "noise_loadgen_involuntary_switches_per_s",
        "noise_loadgen_cpu_others_pct",
    ):
        row[col] = worst(col, shards)
    if server:
        for col in (
            "noise_server_runqueue_wait_ms_per_s",
            "noise_server_involuntary_switches_per_s",
        ):
            row[col] = server[1][col]
    waits = [server[1]["noise_server_runqueue_wait_ms_per_s"]] if server else []
    waits += [r["noise_loadgen_runqueue_wait_ms_per_s"] for _, r, _ in shards]
    row["noise_runqueue_wait_us_per_request"] = (
        sum(waits) * window_s * 1e3 / requests if requests and waits else math.nan
    )
    row["noise_cpus"] = " ".join(f"{h}:{r['noise_cpus']}" for h, r, _ in hosts)
    reasons = [f"{h}: {why}" for h, _, rs in hosts for why in rs]
    row["quiet"] = not reasons
    row["noise_reasons"] = "; ".join(reasons)
    return row


def shard_verdicts(
    host: str, sdir: Path, summary: dict, mode: str, rate_rps: float, max_error_rate: float | None
) -> tuple[dict, list[str]]:
    """One shard's own metrics and self-checks (lateness, loop lag, CPU, GC, its share of the
    rate) from its digest, each reason prefixed with its host."""
    doc = ldigest.read(sdir / "digest.json")
    m = lstats.summarize_digest(
        doc, summary, mode, target_rate_rps=rate_rps or None, max_error_rate=max_error_rate
    )
    reasons = [f"shard {host}: {r}" for r in m["invalid_reasons"].split("; ") if r]
    return m, reasons

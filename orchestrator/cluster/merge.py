"""Shards into one trial: their raw records into one requests.parquet, their summaries into
one, and their self-checks into the trial's verdicts. Nothing is averaged: the merged file
holds every request of every shard, and percentiles come from it.

Timestamps: each shard records its own host's CLOCK_MONOTONIC. In the merged file each
shard's times are moved by one constant (`shift_ns` in shards.json: the first shard's start
instant minus this shard's), so all shards' start instants coincide and a request's latency
(done - intended, one host's clock) is unchanged to the nanosecond. The raw time of a row is
its merged time minus its shard's shift_ns.
"""
from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from loadgen import stats as lstats
from loadgen.parallel import merge_summaries

from ..run import noise

NS_COLUMNS = ("intended_ns", "sent_ns", "first_byte_ns", "done_ns")


def merge_requests(shards: list[tuple[str, bytes, dict]], out: Path) -> tuple[dict, dict, dict]:
    """shards: (host, requests.parquet bytes, summary) in shard order. Writes out (with a
    `host` column) and returns (the merged columns as numpy arrays, the merged summary,
    host -> shift_ns)."""
    ref = shards[0][2]["start_ns"]
    tables, shifts = [], {}
    for host, data, summary in shards:
        table = pq.read_table(io.BytesIO(data))
        shift = int(ref - summary["start_ns"])
        shifts[host] = shift
        for col in NS_COLUMNS:
            if col in table.column_names and shift:
                v = table[col].to_numpy()
                table = table.set_column(table.schema.get_field_index(col), col,
                                         pa.array(np.where(v != 0, v + shift, 0)))
        table = table.append_column("host", pa.array([host] * table.num_rows, pa.string()))
        tables.append(table)
    merged = pa.concat_tables(tables, promote_options="default")
    tmp = out.with_name(out.name + ".tmp")
    pq.write_table(merged, tmp)
    tmp.replace(out)
    summary = merge_summaries([s for _, _, s in shards])
    summary["shards"] = len(shards)
    cols = {k: merged[k].to_numpy() for k in merged.column_names if k != "host"}
    return cols, summary, shifts


def shard_columns(data: bytes) -> dict:
    table = pq.read_table(io.BytesIO(data))
    return {k: table[k].to_numpy() for k in table.column_names}


def shard_noise(samples: list, summary: dict, requests: int, window_s: float, cpus: set[int],
                own_cpus: bool) -> tuple[dict, list[str]]:
    """One shard host's noise readings over its measured window (its own clock)."""
    pair = noise.window_samples(samples, int(summary["measure_start_ns"]),
                                int(summary["measure_end_ns"])) if summary else None
    row = noise.readings(*pair, requests, window_s, cpus) if pair else noise.not_measured()
    return row, noise.noise_reasons(row, own_cpus)


def noise_rollup(server: tuple[str, dict, list[str]] | None,
                 shards: list[tuple[str, dict, list[str]]], requests: int,
                 window_s: float) -> dict:
    """The trial's noise columns from every host's readings: steal, foreign CPU and the load
    generator's waits are the worst host's; the server's are its host's; `quiet` only when
    every host was; `noise_reasons` name the host."""
    hosts = ([server] if server else []) + shards
    row = noise.not_measured()

    def worst(col: str, among) -> float:
        vals = [r[col] for _, r, _ in among if r.get(col) == r.get(col)]
        return max(vals) if vals else math.nan
    for col in ("noise_steal_pct", "noise_foreign_cpu_pct"):
        row[col] = worst(col, hosts)
    for col in ("noise_loadgen_runqueue_wait_ms_per_s", "noise_loadgen_involuntary_switches_per_s"):
        row[col] = worst(col, shards)
    if server:
        for col in ("noise_server_runqueue_wait_ms_per_s",
                    "noise_server_involuntary_switches_per_s"):
            row[col] = server[1][col]
    waits = [server[1]["noise_server_runqueue_wait_ms_per_s"]] if server else []
    waits += [r["noise_loadgen_runqueue_wait_ms_per_s"] for _, r, _ in shards]
    row["noise_runqueue_wait_us_per_request"] = (sum(waits) * window_s * 1e3 / requests
                                                 if requests and waits else math.nan)
    row["noise_cpus"] = " ".join(f"{h}:{r['noise_cpus']}" for h, r, _ in hosts)
    reasons = [f"{h}: {why}" for h, _, rs in hosts for why in rs]
    row["quiet"] = not reasons
    row["noise_reasons"] = "; ".join(reasons)
    return row


def shard_verdicts(host: str, cols: dict, summary: dict, mode: str, rate_rps: float,
                   max_error_rate: float | None) -> tuple[dict, list[str]]:
    """One shard's own metrics and self-checks (lateness, loop lag, CPU, GC, its share of the
    rate), each reason prefixed with its host."""
    m = lstats.summarize(cols, summary, mode, target_rate_rps=rate_rps or None,
                         max_error_rate=max_error_rate)
    reasons = [f"shard {host}: {r}" for r in m["invalid_reasons"].split("; ") if r]
    return m, reasons

"""The machine-checked half of loadgen/DRIVER.md: the schedule file perfctl hands a driver, and
the check of what a driver wrote (requests and summary.json) before anything reads it.

`check_output(out_dir, mode)` is the boundary: it looks only at the files a driver left in
its output directory. It returns the problems as sentences (empty: the output honours the
contract) and, when there are none, leaves `requests.parquet` in the canonical columns of
records.COLUMNS, converted from `requests.arrow` (Arrow IPC) or `requests.csv` when the driver
wrote one of those. It never raises on bad driver output: a driver's mistake makes its trial
invalid, never perfctl crash.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from . import schedule
from .records import COLUMNS, ERROR_NAMES, parquet_options, stream_batches
from .spec import LoadSpec

SCHEDULE_FILE = "schedule.bin"  # little-endian int64 ns offsets from the start instant
REQUEST_FILES = ("requests.parquet", "requests.arrow", "requests.csv")  # first found is read
REQUIRED_COLUMNS = ("intended_ns", "sent_ns", "done_ns", "status", "error")
OPTIONAL_COLUMNS = {
    "first_byte_ns": 0,
    "bytes": 0,
    "conn": -1,
    "svc_ms": math.nan,
    "queue_ms": math.nan,
    "db_ms": math.nan,
    "request": 0,
    "tls_handshake_ms": math.nan,
    "dispatch_late_ns": 0,  # read only when the summary says it was recorded
}
SUMMARY_KEYS = (
    "start_ns",
    "measure_start_ns",
    "measure_end_ns",
    "requests_recorded",
    "loadgen_cpu_pct",
    "loop_lag_p99_ms",
    "gc_pause_max_ms",
)
SUMMARY_KEYS_BY_MODE = {
    "open": (
        "scheduled_in_window",
        "dropped",
        "send_lateness_p50_ms",
        "send_lateness_p99_ms",
        "send_lateness_max_ms",
    ),
    "burst": ("release_spread_ms_max",),
}
_SCHEMA = pa.schema([pa.field(k, pa.from_numpy_dtype(np.dtype(t))) for k, t in COLUMNS.items()])


# --- the schedule ---------------------------------------------------------------------------
def schedule_offsets_ns(spec: LoadSpec) -> np.ndarray:
    """The whole schedule of `spec` in one array of int64 ns offsets from the start instant
    (for tests and short schedules; write_schedule streams it)."""
    parts = list(schedule.spec_schedule(spec).chunks_ns())
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def write_schedule(spec: LoadSpec, path: Path) -> int:
    """Write spec's schedule to path (DRIVER.md: int64 little-endian, ascending), chunk by
    chunk, so memory stays flat whatever its length; returns how many arrivals it holds."""
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with open(tmp, "wb") as f:
        for part in schedule.spec_schedule(spec).chunks_ns():
            f.write(part.astype("<i8", copy=False).tobytes())
            n += len(part)
    os.replace(tmp, path)
    return n


def read_schedule(path: Path) -> np.ndarray:
    return np.frombuffer(Path(path).read_bytes(), dtype="<i8").astype(np.int64)


# --- checking a driver's output ---------------------------------------------------------------
def check_output(out_dir: str | Path, mode: str) -> list[str]:
    """What is wrong with the requests and summary.json in out_dir (module docstring)."""
    out = Path(out_dir)
    problems, summary = _check_summary(out / "summary.json", mode)
    if summary.get("records", "all") == "none":  # the HTTP generator kept histograms only
        return problems + (
            []
            if (out / "digest.json").is_file()
            else [f"records: none, but no digest.json in {out}"]
        )
    found = next((out / f for f in REQUEST_FILES if (out / f).is_file()), None)
    if found is None:
        return problems + [f"no requests file in {out} (one of {', '.join(REQUEST_FILES)})"]
    try:
        problems += _check_requests(found, summary)
    except (pa.ArrowException, OSError, ValueError) as e:  # unreadable, bad types, bad CSV
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        problems.append(f"{found.name} is malformed: {first[:300]}")
    return problems


def _check_summary(path: Path, mode: str) -> tuple[list[str], dict]:
    if not path.is_file():
        return [f"no {path.name} in {path.parent}"], {}
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return [f"{path.name} is not JSON: {e}"], {}
    if not isinstance(summary, dict):
        return [f"{path.name} is not a JSON object"], {}
    need = SUMMARY_KEYS + SUMMARY_KEYS_BY_MODE.get(mode, ())
    missing = [k for k in need if k not in summary]
    bad = [
        k
        for k in need
        if k in summary
        and (isinstance(summary[k], bool) or not isinstance(summary[k], (int, float)))
    ]
    problems = []
    if missing:
        problems.append(
            f"{path.name} lacks {', '.join(missing)} ({mode} load needs them: loadgen/DRIVER.md)"
        )
    if bad:
        problems.append(f"{path.name}: {', '.join(bad)} must be numbers")
    if (
        not missing
        and not bad
        and not (summary["start_ns"] <= summary["measure_start_ns"] <= summary["measure_end_ns"])
    ):
        problems.append(f"{path.name}: start_ns <= measure_start_ns <= measure_end_ns fails")
    return problems, summary if not problems else {}


def _reader(path: Path):
    """(schema, iterator of record batches) of a requests file."""
    if path.suffix == ".parquet":
        return pq.read_schema(path), stream_batches(path, batch_size=1 << 17)
    if path.suffix == ".arrow":
        try:
            r = pa.ipc.open_stream(pa.memory_map(str(path)))
        except pa.ArrowInvalid:
            r = pa.ipc.open_file(pa.memory_map(str(path)))
            return r.schema, (r.get_batch(i) for i in range(r.num_record_batches))
        return r.schema, iter(r)
    types = {k: pa.from_numpy_dtype(np.dtype(t)) for k, t in COLUMNS.items()}
    r = pacsv.open_csv(path, convert_options=pacsv.ConvertOptions(column_types=types))
    return r.schema, iter(r)


def _canonical(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch in records.COLUMNS order and types (optional columns filled in)."""
    n = batch.num_rows
    arrays = []
    for field in _SCHEMA:
        if field.name in batch.schema.names:
            arrays.append(pc.cast(batch.column(field.name), field.type))  # safe: no truncation
        else:
            arrays.append(pa.array(np.full(n, OPTIONAL_COLUMNS[field.name]), type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=_SCHEMA)


def _check_requests(path: Path, summary: dict) -> list[str]:
    schema, batches = _reader(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in schema.names]
    if missing:
        return [f"{path.name} lacks column(s) {', '.join(missing)} (loadgen/DRIVER.md)"]
    not_numeric = [
        c
        for c in COLUMNS
        if c in schema.names
        and not (
            pa.types.is_integer(schema.field(c).type) or pa.types.is_floating(schema.field(c).type)
        )
    ]
    if not_numeric:
        return [f"{path.name}: column(s) {', '.join(not_numeric)} are not numbers"]
    canonical = path.suffix == ".parquet" and all(
        c in schema.names and schema.field(c).type == _SCHEMA.field(c).type for c in COLUMNS
    )
    tmp = path.with_name("requests.parquet.tmp")
    writer = None if canonical else pq.ParquetWriter(tmp, _SCHEMA, **parquet_options(_SCHEMA.names))
    rows, bad_error, disorder, nulls = 0, 0, 0, 0
    try:
        for batch in batches:
            nulls += sum(batch.column(c).null_count for c in REQUIRED_COLUMNS)
            b = _canonical(batch)
            rows += b.num_rows
            err = b.column("error").to_numpy(zero_copy_only=False)
            bad_error += int(np.count_nonzero((err < 0) | (err > max(ERROR_NAMES))))
            ok = err == 0
            t = {
                k: b.column(k).to_numpy(zero_copy_only=False)[ok]
                for k in ("intended_ns", "sent_ns", "done_ns")
            }
            disorder += int(
                np.count_nonzero(
                    (t["intended_ns"] <= 0)
                    | (t["sent_ns"] < t["intended_ns"])
                    | (t["done_ns"] < t["sent_ns"])
                )
            )
            if writer is not None:
                writer.write_batch(b)
    except BaseException:  # a value that does not convert: no half-written file is left
        if writer is not None:
            writer.close()
            writer = None
        tmp.unlink(missing_ok=True)
        raise
    finally:
        if writer is not None:
            writer.close()
    problems = []
    if nulls:
        problems.append(f"{path.name}: {nulls} empty values in required columns")
    if bad_error:
        problems.append(
            f"{path.name}: {bad_error} rows have an `error` outside 0..{max(ERROR_NAMES)}"
            f" ({', '.join(f'{k} {v}' for k, v in ERROR_NAMES.items())})"
        )
    if disorder:
        problems.append(
            f"{path.name}: {disorder} answered rows (error 0) break 0 < intended_ns "
            "<= sent_ns <= done_ns"
        )
    # a sample (`records: sample:F`, the HTTP generator) holds records_written of the rows
    key = "requests_recorded" if summary.get("records", "all") == "all" else "records_written"
    if summary and summary.get(key) != rows:
        problems.append(
            f"{path.name} holds {rows} rows but summary.json says {key} "
            f"= {summary.get(key)} (output cut short?)"
        )
    if problems or canonical:
        tmp.unlink(missing_ok=True)
        return problems
    os.replace(tmp, path.with_name("requests.parquet"))
    if path.name != "requests.parquet":
        path.unlink()
    return []

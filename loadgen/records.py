"""Per-request records kept as preallocated numpy columns, in fixed-size chunks.

One row per request attempt. Times are perf_counter_ns values (CLOCK_MONOTONIC, so comparable
across the worker processes of one machine). `intended_ns` is when the request should have
been sent (open mode: the schedule; closed mode: when the connection became free after its
think time; burst: the release instant), so latency = done_ns - intended_ns has no
coordinated omission.

Memory stays bounded in long phases: when a chunk is full a new one starts, and sealed chunks
whose rows are all final (answered or failed) are handed to a sink (a parquet writer) and
dropped, oldest first, so rows keep their order.
"""

from __future__ import annotations

import numpy as np

# Error classes (column `error`); 0 means the exchange completed at the HTTP level.
OK, CONNECT, RESET, TIMEOUT, PARSE, DROPPED, UNFINISHED = 0, 1, 2, 3, 4, 5, 6
ERROR_NAMES = {
    OK: "ok",
    CONNECT: "refused",
    RESET: "reset",
    TIMEOUT: "timeout",
    PARSE: "parse",
    DROPPED: "dropped",
    UNFINISHED: "unfinished",
}

COLUMNS = {
    "intended_ns": np.int64,
    "sent_ns": np.int64,
    "first_byte_ns": np.int64,
    "done_ns": np.int64,
    "status": np.int16,
    "error": np.int8,
    "bytes": np.int32,
    "conn": np.int32,
    "svc_ms": np.float32,
    "queue_ms": np.float32,
    "db_ms": np.float32,  # Server-Timing db;dur= (/db only): the part of svc in the database
    "request": np.int16,  # the request's index in the mix (mix.py; 0 without a mix)
    # HTTPS: the TLS handshake of the connection this request opened (NaN: plain HTTP, or a
    # request on a connection opened before it)
    "tls_handshake_ms": np.float32,
    # open load: how late the dispatcher handled this arrival (sent - intended, less any wait
    # for a free connection), ns, clipped to LATE_CLIP_NS; 0 elsewhere. latency minus it is
    # the request's on-time latency, which validity.py judges the trial by.
    "dispatch_late_ns": np.int32,
}
LATE_CLIP_NS = np.iinfo(np.int32).max
CHUNK_ROWS = 1 << 18
# Columns with few distinct values: the only ones parquet dictionary-encodes. Its default
# tries a dictionary on every column; on the unique nanosecond times that fails and falls back
# after the work is done, ~3.5x the CPU per row (on the load generator's spill thread, which
# shares its core) for a larger file (measured: 319 vs 87 ns/row, 30 vs 25 bytes/row).
_DICT_COLUMNS = ("status", "error", "conn", "bytes", "request")


def parquet_options(names) -> dict:
    """Keyword arguments for a pyarrow ParquetWriter of request records with columns `names`:
    snappy, dictionaries only on low-cardinality columns (and any small-int extra column)."""
    return {
        "compression": "snappy",
        "use_dictionary": [n for n in names if n in _DICT_COLUMNS or n not in COLUMNS],
    }


def http_ok(status: np.ndarray) -> np.ndarray:
    """Responses that count as answered: a 2xx status (anything else is an `errors_http`)."""
    return (status >= 200) & (status < 300)


# A Chunk's attribute for each column: the column's name, but `nbytes` for `bytes`.
_ATTRS = {col: "nbytes" if col == "bytes" else col for col in COLUMNS}
_FILL = {
    "conn": -1,
    "svc_ms": np.nan,
    "queue_ms": np.nan,
    "db_ms": np.nan,
    "tls_handshake_ms": np.nan,
}


class Chunk:
    """`cap` rows of every column. `n` rows used; `final` rows answered or failed.

    Each column is a numpy array (`arrays`, by column name, for whole-column work) and a
    memoryview of the same memory as an attribute (`chunk.sent_ns[i] = t`): the hot path writes
    single cells, and a memoryview store costs half a numpy one.
    """

    __slots__ = ("cap", "n", "final", "arrays", *_ATTRS.values())

    def __init__(self, cap: int) -> None:
        self.cap, self.n, self.final = cap, 0, 0
        self.arrays = {
            k: np.full(cap, _FILL[k], t) if k in _FILL else np.zeros(cap, t)
            for k, t in COLUMNS.items()
        }
        for col, attr in _ATTRS.items():
            setattr(self, attr, memoryview(self.arrays[col]))

    def end(self, i: int, error: int, t_ns: int) -> None:
        """Row i failed with an error class at t_ns (it becomes final)."""
        self.error[i] = error
        self.done_ns[i] = t_ns
        self.final += 1

    def frame(self) -> dict[str, np.ndarray]:
        n = self.n
        return {k: a[:n] for k, a in self.arrays.items()}


class Records:
    """All rows of one worker. `new()` returns (chunk, index); fields are written in place.

    sink: called with a chunk's frame when a sealed chunk is complete (spill); None keeps
    every chunk in memory.
    """

    def __init__(self, chunk_rows: int = CHUNK_ROWS, sink=None) -> None:
        self.chunk_rows = chunk_rows
        self.chunk = Chunk(chunk_rows)
        self.sealed: list[Chunk] = []
        self.sink = sink
        self.total = 0
        self.spilled = 0

    def new(self, intended_ns: int) -> tuple[Chunk, int]:
        c = self.chunk
        if c.n == c.cap:
            self.sealed.append(c)
            c = self.chunk = Chunk(self.chunk_rows)
        i = c.n
        c.intended_ns[i] = intended_ns
        c.n = i + 1
        self.total += 1
        return c, i

    def spill(self) -> None:
        """Hand complete sealed chunks to the sink, oldest first (keeps row order)."""
        if self.sink is None:
            return
        while self.sealed and self.sealed[0].final >= self.sealed[0].n:
            c = self.sealed.pop(0)
            self.sink(c.frame())
            self.spilled += c.n

    def chunks(self) -> list[Chunk]:
        """The chunks still in memory, in row order."""
        return [*self.sealed, self.chunk]

    def frame(self) -> dict[str, np.ndarray]:
        """Every in-memory row as one set of columns (copies when there are several chunks)."""
        frames = [c.frame() for c in self.chunks() if c.n]
        if not frames:
            return Chunk(1).frame()
        if len(frames) == 1:
            return frames[0]
        return {k: np.concatenate([f[k] for f in frames]) for k in frames[0]}


def stream_batches(path, columns=None, batch_size: int = 1 << 16):
    """The record batches of a parquet file, one at a time, in memory that does not grow with
    the file. pre_buffer is off: with pyarrow's default (on), a file read batch by batch keeps
    the buffered column chunks of every row group it has passed until it is closed, so
    memory grows with the file (12M requests, 4 columns: 405 MB peak; 185 MB with it off)."""
    import pyarrow.parquet as pq  # here: the load generator's hot path never reads parquet

    f = pq.ParquetFile(path, pre_buffer=False)
    try:
        yield from f.iter_batches(batch_size=batch_size, columns=columns)
    finally:
        f.close()

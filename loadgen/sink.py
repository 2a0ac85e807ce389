"""ParquetSink: where a load phase's request rows go, off the loop: into the phase's Digest
(digest.py: summaries and histograms, every row) and, as `records` says, into one parquet
file (every row, a sample of them, or none)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .digest import Digest
from .records import COLUMNS, Chunk, Records, parquet_options


class ParquetSink:
    """Appends chunks of columns to one parquet file as row groups, on a writer thread.

    Spilling a full chunk takes tens of milliseconds; done on the event loop it would stall
    every request in flight (and inflate their latencies), so the loop only hands the chunk
    over. The one thread keeps row-group order. The file and pyarrow's conversions are set
    up here, before any load is generated.

    The same thread feeds the digest, so it sees the rows in order and is never touched by
    two threads. path None writes no file (`records: none`); keep (0..1] writes that
    fraction of the rows, drawn independently per row from a generator seeded with `seed`
    (`records: sample:F`). The digest always sees every row.
    """

    def __init__(
        self,
        path: Path | None,
        extra: dict | None = None,
        digest: Digest | None = None,
        keep: float = 1.0,
        seed: int = 0,
    ) -> None:
        self.path = path
        self.extra = extra or {}
        self.rows = 0
        self.written = 0
        self.digest = digest
        self.keep = keep
        self.rng = np.random.default_rng(seed)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="spill")
        self.pending: list = []
        fields = [pa.field(k, pa.from_numpy_dtype(np.dtype(t))) for k, t in COLUMNS.items()]
        fields += [pa.field(k, pa.int16()) for k in self.extra]
        self.schema = pa.schema(fields)
        self.writer = None
        if path is not None:
            self._table(Chunk(1).frame())  # warm pyarrow's table and writer paths up
            self.writer = pq.ParquetWriter(
                self.path, self.schema, **parquet_options(self.schema.names)
            )

    def _table(self, cols: dict[str, np.ndarray]) -> pa.Table:
        n = len(next(iter(cols.values())))
        arrays = [_column(cols[k], np.dtype(t)) for k, t in COLUMNS.items()]
        arrays += [
            _column(np.full(n, v, dtype=np.int16), np.dtype(np.int16)) for v in self.extra.values()
        ]
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def _write(self, cols: dict[str, np.ndarray]) -> None:
        if self.digest is not None:
            self.digest.add(cols)
        if self.writer is None:
            return
        if self.keep < 1.0:
            pick = self.rng.random(len(cols["intended_ns"])) < self.keep
            cols = {k: v[pick] for k, v in cols.items()}
        self.written += len(cols["intended_ns"])
        self.writer.write_table(self._table(cols))

    def begin(self, start_ns: int, measure_start_ns: int, measure_end_ns: int) -> None:
        """A load phase's times are known (the Worker calls this as it starts): the digest
        opens its measured window, in order with the rows on the writer thread."""
        if self.digest is not None:
            self.pending.append(
                self.pool.submit(self.digest.begin, start_ns, measure_start_ns, measure_end_ns)
            )

    def __call__(self, cols: dict[str, np.ndarray]) -> None:
        """Queue columns for writing (the caller never changes them afterwards)."""
        self.rows += len(next(iter(cols.values())))
        self.pending = [f for f in self.pending if not f.done() or f.exception() is not None]
        self.pending.append(self.pool.submit(self._write, cols))

    def close_chunks(self, rec: Records) -> None:
        """Write every row still in memory (the load phase is over, so all rows are final)."""
        for c in rec.chunks():
            if c.n:
                self(c.frame())
        self.flush()

    def flush(self) -> None:
        """Wait for queued writes; a failed write raises here."""
        for f in self.pending:
            f.result()
        self.pending = []

    def finish(self) -> None:
        """Close the file (a phase without requests still gets a valid file with the schema)."""
        try:
            self.flush()
        finally:
            self.pool.shutdown(wait=True)
            if self.writer is not None:
                self.writer.close()

    def close(self, rec: Records) -> None:
        self.close_chunks(rec)
        self.finish()


def _column(values: np.ndarray, dtype: np.dtype) -> pa.Array:
    """A numpy column as a pyarrow array over the same memory (NaN stays a value, as with
    pa.array). pa.array() would first import pandas to ask whether `values` is one of its
    types: ~0.35 s of every trial's start-up (tests/loadgen/test_sink.py checks both)."""
    values = np.ascontiguousarray(values, dtype=dtype)
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(dtype), len(values), [None, pa.py_buffer(values)]
    )

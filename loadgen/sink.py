"""ParquetSink: where a load phase's request rows go, one parquet file written off the loop."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .records import COLUMNS, Chunk, Records


class ParquetSink:
    """Appends chunks of columns to one parquet file as row groups, on a writer thread.

    Spilling a full chunk takes tens of milliseconds; done on the event loop it would stall
    every request in flight (and inflate their latencies), so the loop only hands the chunk
    over. The one thread keeps row-group order. The file and pyarrow's conversions are set
    up here, before any load is generated (pyarrow's first conversion alone takes ~0.3 s).
    """

    def __init__(self, path: Path, extra: dict | None = None) -> None:
        self.path = path
        self.extra = extra or {}
        self.rows = 0
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="spill")
        self.pending: list = []
        fields = [pa.field(k, pa.from_numpy_dtype(np.dtype(t))) for k, t in COLUMNS.items()]
        fields += [pa.field(k, pa.int16()) for k in self.extra]
        self.schema = pa.schema(fields)
        self._table(Chunk(1).frame())       # warm pyarrow up
        self.writer = pq.ParquetWriter(self.path, self.schema)

    def _table(self, cols: dict[str, np.ndarray]) -> pa.Table:
        n = len(next(iter(cols.values())))
        arrays = [pa.array(cols[k]) for k in COLUMNS]
        arrays += [pa.array(np.full(n, v, dtype=np.int16)) for v in self.extra.values()]
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def _write(self, cols: dict[str, np.ndarray]) -> None:
        self.writer.write_table(self._table(cols))

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
            self.writer.close()

    def close(self, rec: Records) -> None:
        self.close_chunks(rec)
        self.finish()

"""Per-request records kept as preallocated numpy columns (one row per request attempt).

Times are perf_counter_ns values of the worker process; `intended_ns` is when the request
should have been sent (open mode: the schedule; closed mode: when the connection became free
after think time), so latency = done_ns - intended_ns has no coordinated omission.
"""
from __future__ import annotations

import numpy as np

# Error classes (column `error`); 0 means the exchange completed at the HTTP level.
OK, CONNECT, RESET, TIMEOUT, PARSE, DROPPED, UNFINISHED = 0, 1, 2, 3, 4, 5, 6
ERROR_NAMES = {OK: "ok", CONNECT: "connect", RESET: "reset", TIMEOUT: "timeout",
               PARSE: "parse", DROPPED: "dropped", UNFINISHED: "unfinished"}

COLUMNS = {
    "intended_ns": np.int64, "sent_ns": np.int64, "first_byte_ns": np.int64,
    "done_ns": np.int64, "status": np.int16, "error": np.int8, "bytes": np.int32,
    "conn": np.int32, "svc_ms": np.float32, "queue_ms": np.float32,
}


class Records:
    """Growable columns. `new()` returns a row index; fields are written in place."""

    def __init__(self, capacity: int = 65536) -> None:
        self.n = 0
        self._cap = max(1024, capacity)
        self.cols = {k: np.zeros(self._cap, dtype=t) for k, t in COLUMNS.items()}
        self.cols["svc_ms"].fill(np.nan)
        self.cols["queue_ms"].fill(np.nan)
        self._bind()

    def _bind(self) -> None:
        c = self.cols
        self.intended, self.sent, self.first_byte = c["intended_ns"], c["sent_ns"], c["first_byte_ns"]
        self.done, self.status, self.error = c["done_ns"], c["status"], c["error"]
        self.nbytes, self.conn, self.svc, self.queue = c["bytes"], c["conn"], c["svc_ms"], c["queue_ms"]

    def new(self, intended_ns: int) -> int:
        i = self.n
        if i == self._cap:
            self._grow()
        self.intended[i] = intended_ns
        self.n = i + 1
        return i

    def _grow(self) -> None:
        new_cap = self._cap * 2
        for k, col in self.cols.items():
            bigger = np.zeros(new_cap, dtype=col.dtype)
            if col.dtype.kind == "f":
                bigger.fill(np.nan)
            bigger[: self._cap] = col
            self.cols[k] = bigger
        self._cap = new_cap
        self._bind()

    def frame(self) -> dict[str, np.ndarray]:
        """The filled part of every column (views, no copy)."""
        return {k: v[: self.n] for k, v in self.cols.items()}

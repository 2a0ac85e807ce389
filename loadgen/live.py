"""Per-second statistics while a phase runs, appended to a file the orchestrator tails.

A 1 s timer on the worker's loop (never the request path) looks at the rows that ended since
its last tick and appends one JSON line:

    {"worker": 0, "second": 3, "t_s": 3.0, "phase": "measure", "ok": 998, "errors": 2,
     "p50_ms": 0.41, "p99_ms": 2.3, "lateness_p99_ms": 0.05, "timer_lag_ms": 0.2}

`second` counts ticks (1, 2, ...) since the first phase began (warm-up included; a ramp's steps go on
counting), `t_s` is seconds since this phase's start instant; `phase` is warmup,
measure or drain (after the window, answers still arriving); latency is done - intended of
the ok rows that ended in that second; `lateness_p99_ms` is sent - intended of the rows sent
in it; `timer_lag_ms` how late this very timer fired (the loop's lag, once a second). Each
line is written whole with one write(2) on a file opened O_APPEND, so a reader sees complete
lines or nothing of one. These numbers are for watching; the trial's results come from the
raw rows (requests.parquet), never from this file.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

# np.percentile's first call imports numpy.ma (8-9 ms): at the first tick, which falls on the
# window's start after a whole-second warm-up, that held up the sends due meanwhile (a pinned,
# busy-polling generator's lateness p99.9 5 ms in one trial of two). Imported here instead,
# while the generator starts beside the server.
import numpy.ma  # noqa: F401

from .records import OK
from .worker import START_DELAY_NS

_now = time.perf_counter_ns
TICK_S = 1.0


class LiveStats:
    """One worker process's live file. attach(worker) once per phase (ramp: per step)."""

    def __init__(self, path: str | os.PathLike, worker_index: int = 0) -> None:
        self.path = os.fspath(path)
        self.worker_index = worker_index
        self._fd: int | None = None
        self._second = 0

    def attach(self, worker) -> None:
        """Start ticking on worker's loop from its start instant until it finishes."""
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError:
                return  # nothing to watch with; the phase goes on
        self._worker = worker
        self._last_ns = _now()
        # id(chunk) -> (chunk, first row not yet ended); holding the chunk keeps its id unique
        self._cursor: dict[int, tuple] = {}
        # Ticks fall on whole seconds after the phase's start instant (the worker sets it the
        # same way a moment later), so a warm-up of whole seconds is whole ticks.
        first_ns = (worker.spec.start_at_ns or (self._last_ns + START_DELAY_NS)) + int(TICK_S * 1e9)
        worker.loop.call_later(max(0.0, (first_ns - _now()) / 1e9), self._tick, first_ns)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _tick(self, due_ns: int) -> None:
        w = self._worker
        now = _now()
        self._second += 1
        try:
            self._write(self._second_stats(w, self._last_ns, now, due_ns))
        except OSError:
            self.close()
            return
        self._last_ns = now
        if not w.finishing and self._fd is not None:
            nxt = due_ns + int(TICK_S * 1e9)
            while nxt <= now:  # a stalled loop skips ticks, never bunches them
                nxt += int(TICK_S * 1e9)
            w.loop.call_later((nxt - now) / 1e9, self._tick, nxt)

    def _second_stats(self, w, lo_ns: int, hi_ns: int, due_ns: int) -> dict:
        """The rows that ended in (lo_ns, hi_ns]; phase and t_s from the tick's nominal end."""
        lat, late = [], []
        ok = errors = 0
        horizon_ns = int((w.spec.timeout_s + 2.0) * 1e9)
        cursor = {}
        for chunk in w.rec.chunks():
            a = chunk.arrays
            start = self._cursor.get(id(chunk), (chunk, 0))[1]
            n = chunk.n
            done = a["done_ns"][start:n]
            ended = (done > lo_ns) & (done <= hi_ns)
            err = a["error"][start:n]
            good = ended & (err == OK)
            ok += int(good.sum())
            errors += int((ended & (err != OK)).sum())
            if good.any():
                lat.append((done[good] - a["intended_ns"][start:n][good]) / 1e6)
            sent = a["sent_ns"][start:n]
            just_sent = (sent > lo_ns) & (sent <= hi_ns)
            if just_sent.any():
                late.append((sent[just_sent] - a["intended_ns"][start:n][just_sent]) / 1e6)
            # Next tick starts at the first row still open, or later: a row meant to be sent
            # more than timeout + 2 s ago has ended (the worker's sweep) or is about to, so the
            # scan stays bounded by the rows of the last few seconds.
            open_rows = np.flatnonzero(done == 0)
            first_open = int(open_rows[0]) if open_rows.size else n - start
            stale = int(np.searchsorted(a["intended_ns"][start:n], hi_ns - horizon_ns))
            cursor[id(chunk)] = (chunk, start + min(max(first_open, stale), n - start))
        self._cursor = cursor
        lat_a = np.concatenate(lat) if lat else np.empty(0)
        late_a = np.concatenate(late) if late else np.empty(0)
        phase = (
            "warmup"
            if due_ns <= w.measure_start_ns
            else "measure"
            if due_ns <= w.end_ns
            else "drain"
        )
        return {
            "worker": self.worker_index,
            "second": self._second,
            "t_s": round((due_ns - w.start_ns) / 1e9, 3),
            "phase": phase,
            "ok": ok,
            "errors": errors,
            "p50_ms": float(np.percentile(lat_a, 50)) if lat_a.size else None,
            "p99_ms": float(np.percentile(lat_a, 99)) if lat_a.size else None,
            "lateness_p99_ms": float(np.percentile(late_a, 99)) if late_a.size else None,
            "timer_lag_ms": round((hi_ns - due_ns) / 1e6, 3),
        }

    def _write(self, line: dict) -> None:
        if self._fd is not None:
            os.write(self._fd, (json.dumps(line) + "\n").encode())

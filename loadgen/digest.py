"""Digest: a load phase's requests summarised chunk by chunk, in memory that does not grow
with the number of requests.

A Digest sees every request row exactly once (the sink hands it each chunk of columns, off the
event loop) and keeps:
- per measured window (one per load phase; ramp has one per step), and within it per request
  of a mix when asked (`by_request`: the `request` column, mix.py): exact counts (requests,
  completed, answered, each error class, sends), exact sums, minimum and maximum of the
  latency and of send-to-done, and HdrHistograms (hdr.py) of latency, send-to-done, the
  on-time latency (latency less the dispatcher's lateness, open load: validity.py) and of the
  server's Server-Timing `svc`/`queue` and the rest of each latency (`overhead`, latency minus
  svc minus queue), which the queueing models fall back to without per-request rows;
- per second of the whole load phase (by completion time, as the timeline): completions,
  errors, sends, and an HdrHistogram of the latencies completed in that second; a second is
  encoded (a few hundred bytes) once no row can fall into it any more, so a one-hour phase
  keeps ~3,600 short strings, not 3,600 histograms.

Everything in it adds up: Digest.merge of several worker processes' digests is the digest of
their union (counts and histograms added, never percentiles averaged). `write(dir, stem)`
writes STEM.json and the per-second latency log (`latency.hlog`, the standard interval-log
format). Which request counts as what is loadgen/stats.py's definition, applied here in
columns: latency = done - intended over rows without an error class; errors = rows with an
error class or a non-2xx status.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from . import hdr
from .records import DROPPED, ERROR_NAMES, OK, http_ok

BIN_NS = 1_000_000_000  # the timeline's bin: one second
SEAL_MARGIN_NS = 2_000_000_000  # a bin is sealed this long (plus the timeout) behind the rows
WINDOW_HISTOGRAMS = ("latency", "sent_to_done", "on_time", "svc", "queue", "overhead")
_COUNTS = ("requests", "completed", "answered", "errors_http", "sent", "dropped")
_SUMS = (
    "bytes_ok",
    "latency_sum_ns",
    "sent_to_done_sum_ns",
    "on_time_sum_ns",
    "svc_n",
    "svc_sum_ms",
    "svc_sumsq_ms2",
    "queue_sum_ms",
    "overhead_n",
    "overhead_sum_ms",
    "db_n",
    "db_sum_ms",
)


class Window:
    """The exact counts, sums and histograms of the requests intended in one measured window
    [measure_start_ns, measure_end_ns)."""

    def __init__(
        self, start_ns: int, measure_start_ns: int, measure_end_ns: int, by_request: bool = False
    ) -> None:
        self.start_ns, self.measure_start_ns, self.measure_end_ns = (
            int(start_ns),
            int(measure_start_ns),
            int(measure_end_ns),
        )
        # a mix: the same figures per request index (the `request` column); else None
        self.parts: dict[int, Window] | None = {} if by_request else None
        self.counts = dict.fromkeys(_COUNTS, 0)
        self.errors = {name: 0 for code, name in ERROR_NAMES.items() if code != OK}
        self.sums = dict.fromkeys(_SUMS, 0.0)
        self.latency_min_ns = math.inf
        self.latency_max_ns = -math.inf
        self.hists = {k: hdr.new() for k in WINDOW_HISTOGRAMS}

    def add(self, c: dict[str, np.ndarray]) -> None:
        """Add the rows of columns c that were intended in this window."""
        m = (c["intended_ns"] >= self.measure_start_ns) & (c["intended_ns"] < self.measure_end_ns)
        if not m.any():
            return
        if self.parts is not None and "request" in c:
            self._add_parts(c, m)
        err, status = c["error"][m], c["status"][m]
        ok = err == OK
        done, intended, sent = c["done_ns"][m], c["intended_ns"][m], c["sent_ns"][m]
        lat = (done - intended)[ok]
        s2d = (done - sent)[ok]
        n = self.counts
        n["requests"] += int(m.sum())
        n["completed"] += int(ok.sum())
        answered = ok & http_ok(status)
        n["answered"] += int(answered.sum())
        n["errors_http"] += int(np.count_nonzero(ok & ~http_ok(status)))
        n["sent"] += int(np.count_nonzero((sent > 0) & (err != DROPPED)))
        n["dropped"] += int(np.count_nonzero(err == DROPPED))
        codes = np.bincount(err.astype(np.int64), minlength=len(ERROR_NAMES))
        for code, name in ERROR_NAMES.items():
            if code != OK:
                self.errors[name] += int(codes[code])
        s = self.sums
        if "bytes" in c:
            s["bytes_ok"] += float(c["bytes"][m][ok].sum(dtype=np.int64))
        if lat.size:
            s["latency_sum_ns"] += float(lat.sum(dtype=np.int64))
            s["sent_to_done_sum_ns"] += float(s2d.sum(dtype=np.int64))
            self.latency_min_ns = min(self.latency_min_ns, int(lat.min()))
            self.latency_max_ns = max(self.latency_max_ns, int(lat.max()))
            hdr.record(self.hists["latency"], lat)
            hdr.record(self.hists["sent_to_done"], s2d)
            if "dispatch_late_ns" in c:  # the on-time latency (validity.py)
                on_time = np.maximum(lat - c["dispatch_late_ns"][m][ok], 0)
                s["on_time_sum_ns"] += float(on_time.sum(dtype=np.int64))
                hdr.record(self.hists["on_time"], on_time)
        if "svc_ms" in c:
            self._server_timing(c, m, ok & (status > 0) & (status < 400))

    def _add_parts(self, c: dict[str, np.ndarray], m: np.ndarray) -> None:
        """The window's rows of each request index, into that request's own Window."""
        kinds = c["request"]
        for k in np.unique(kinds[m]).tolist():
            part = self.parts.get(k)
            if part is None:
                part = self.parts[k] = Window(
                    self.start_ns, self.measure_start_ns, self.measure_end_ns
                )
            rows = np.flatnonzero(m & (kinds == k))
            part.add({name: col[rows] for name, col in c.items()})

    def _server_timing(self, c: dict[str, np.ndarray], m: np.ndarray, good: np.ndarray) -> None:
        """svc, queue and overhead (latency - svc - queue) of the completed requests that
        reported svc, as the queueing models' service estimate reads them."""
        rows = np.flatnonzero(m)[good]
        svc_all = c["svc_ms"][rows]
        has = np.isfinite(svc_all)
        if not has.any():
            return
        rows = rows[has]
        svc = svc_all[has].astype(np.float64)
        queue = np.nan_to_num(c["queue_ms"][rows].astype(np.float64), nan=0.0)
        lat_ms = (c["done_ns"][rows] - c["intended_ns"][rows]) / 1e6
        over = lat_ms - svc - queue
        s = self.sums
        s["svc_n"] += float(svc.size)
        s["svc_sum_ms"] += float(svc.sum())
        s["svc_sumsq_ms2"] += float(np.dot(svc, svc))
        s["queue_sum_ms"] += float(queue.sum())
        if "db_ms" in c:  # /db: the part of svc in the database (rows without it: none)
            db = c["db_ms"][rows].astype(np.float64)
            has_db = np.isfinite(db)
            s["db_n"] += float(has_db.sum())
            s["db_sum_ms"] += float(db[has_db].sum())
        fin = np.isfinite(over)
        s["overhead_n"] += float(fin.sum())
        s["overhead_sum_ms"] += float(over[fin].sum())
        hdr.record(self.hists["svc"], np.rint(svc * 1e6))
        hdr.record(self.hists["queue"], np.rint(queue * 1e6))
        # negative overheads (clock granularity) are recorded as 0, as the models clip them
        hdr.record(self.hists["overhead"], np.rint(np.maximum(over[fin], 0.0) * 1e6))

    def merge(self, other: Window) -> None:
        for k in self.counts:
            self.counts[k] += other.counts[k]
        for k in self.errors:
            self.errors[k] += other.errors[k]
        for k in self.sums:
            self.sums[k] += other.sums[k]
        self.latency_min_ns = min(self.latency_min_ns, other.latency_min_ns)
        self.latency_max_ns = max(self.latency_max_ns, other.latency_max_ns)
        for k in self.hists:
            hdr.add(self.hists[k], other.hists[k])
        if other.parts:
            if self.parts is None:
                self.parts = {}
            for k, part in other.parts.items():
                if k in self.parts:
                    self.parts[k].merge(part)
                else:
                    self.parts[k] = part

    def to_json(self) -> dict:
        return {
            "start_ns": self.start_ns,
            "measure_start_ns": self.measure_start_ns,
            "measure_end_ns": self.measure_end_ns,
            "counts": self.counts,
            "errors": self.errors,
            "sums": self.sums,
            "latency_min_ns": None if math.isinf(self.latency_min_ns) else self.latency_min_ns,
            "latency_max_ns": None if math.isinf(self.latency_max_ns) else self.latency_max_ns,
            "histograms": {k: hdr.encode(h) for k, h in self.hists.items()},
            **(
                {"requests": {str(k): p.to_json() for k, p in sorted(self.parts.items())}}
                if self.parts is not None
                else {}
            ),
        }

    @classmethod
    def from_json(cls, d: dict) -> Window:
        w = cls(d["start_ns"], d["measure_start_ns"], d["measure_end_ns"])
        w.counts.update(d["counts"])
        w.errors.update(d["errors"])
        w.sums.update(d["sums"])
        w.latency_min_ns = math.inf if d["latency_min_ns"] is None else d["latency_min_ns"]
        w.latency_max_ns = -math.inf if d["latency_max_ns"] is None else d["latency_max_ns"]
        w.hists = {k: hdr.decode(v) for k, v in d["histograms"].items()}
        for k in WINDOW_HISTOGRAMS:  # a digest written before a histogram existed: empty
            w.hists.setdefault(k, hdr.new())
        if "requests" in d:
            w.parts = {int(k): cls.from_json(p) for k, p in d["requests"].items()}
        return w


class Bins:
    """Per-second counters and latency histograms of the whole phase, by completion time
    (sends by send time, for the requests in flight at each second's end)."""

    COUNTERS = ("ok", "errors", "sent", "done_sent")

    def __init__(self, start_ns: int) -> None:
        self.start_ns = int(start_ns)
        self.n = {k: np.zeros(0, dtype=np.int64) for k in self.COUNTERS}
        self.open: dict[int, object] = {}  # bin -> histogram, still filling
        self.sealed: dict[int, str] = {}  # bin -> encoded histogram

    def _grow(self, size: int) -> None:
        have = len(self.n["ok"])
        if size > have:
            for k, a in self.n.items():
                self.n[k] = np.concatenate([a, np.zeros(max(size, 2 * have) - have, np.int64)])

    def _bin(self, t_ns: np.ndarray) -> np.ndarray:
        return np.maximum((t_ns - self.start_ns) // BIN_NS, 0)

    def _count(self, key: str, b: np.ndarray) -> None:
        if b.size:
            self._grow(int(b.max()) + 1)
            got = np.bincount(b)
            self.n[key][: got.size] += got

    def add(self, c: dict[str, np.ndarray]) -> None:
        done, sent = c["done_ns"], c["sent_ns"]
        has_done = done > 0
        ok = c["error"] == OK
        b = self._bin(done)
        self._count("ok", b[has_done & ok])
        self._count("errors", b[has_done & ~(ok & http_ok(c["status"]))])
        self._count("sent", self._bin(sent[sent > 0]))
        self._count("done_sent", b[has_done & (sent > 0)])
        sel = has_done & ok
        bo, lat = b[sel], (done - c["intended_ns"])[sel]
        if lat.size == 0:
            return
        # one index computation, then each second's rows as one slice of the sorted order
        order = np.argsort(bo, kind="stable")
        bo, lat = bo[order], lat[order]
        idx = hdr.indexes(self._histogram(int(bo[0])), lat)
        cuts = np.flatnonzero(np.diff(bo)) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, bo.size]):
            part = lat[lo:hi]
            hdr.add_indexes(self._histogram(int(bo[lo])), idx[lo:hi], part.min(), part.max())

    def _histogram(self, k: int):
        h = self.open.get(k)
        if h is None:
            h = self.open[k] = hdr.new()
            if k in self.sealed:  # a late row: reopen the sealed second
                hdr.add(h, hdr.decode(self.sealed.pop(k)))
        return h

    def seal_before(self, t_ns: int) -> None:
        """Encode the open seconds that end before t_ns (no row will complete in them)."""
        last = (t_ns - self.start_ns) // BIN_NS
        for k in [k for k in self.open if k < last]:
            self.sealed[k] = hdr.encode(self.open.pop(k))

    def histogram(self, k: int):
        """Second k's latency histogram (a new object; empty when nothing completed)."""
        if k in self.open:
            return hdr.add(hdr.new(), self.open[k])
        return hdr.decode(self.sealed[k]) if k in self.sealed else hdr.new()

    def size(self) -> int:
        used = [k for k in self.COUNTERS if self.n[k].any()]
        last = max((int(np.flatnonzero(self.n[k])[-1]) for k in used), default=-1)
        return max(last + 1, max(self.open, default=-1) + 1, max(self.sealed, default=-1) + 1)


class Digest:
    """See the module docstring. begin() opens a measured window (the Worker calls it when
    its phase's times are known); add() takes every chunk of rows; write() saves it."""

    def __init__(self, timeout_s: float = 5.0, by_request: bool = False) -> None:
        self.timeout_ns = int(timeout_s * 1e9)
        self.by_request = by_request  # windows keep figures per request of a mix too
        self.windows: list[Window] = []
        self.bins: Bins | None = None
        self.rows = 0

    def begin(self, start_ns: int, measure_start_ns: int, measure_end_ns: int) -> None:
        if self.bins is None:
            self.bins = Bins(start_ns)
        self.windows.append(Window(start_ns, measure_start_ns, measure_end_ns, self.by_request))

    def add(self, cols: dict[str, np.ndarray]) -> None:
        """Take one chunk of rows (never changed afterwards)."""
        n = len(cols["intended_ns"])
        if n == 0:
            return
        if self.bins is None:  # rows before any window (a bare Records in a test)
            self.begin(int(cols["intended_ns"].min()), 0, 0)
        self.rows += n
        for w in self.windows:
            w.add(cols)
        self.bins.add(cols)
        self.bins.seal_before(int(cols["intended_ns"].max()) - self.timeout_ns - SEAL_MARGIN_NS)

    # --- files -------------------------------------------------------------------------
    def to_json(self) -> dict:
        b = self.bins
        size = b.size() if b else 0
        return {
            "format": 1,
            "bin_s": BIN_NS / 1e9,
            "rows": self.rows,
            "start_ns": b.start_ns if b else 0,
            "hdr": {
                "unit": "ns",
                "significant_digits": hdr.SIGNIFICANT_DIGITS,
                "highest_ns": hdr.HIGHEST_NS,
                "relative_error": hdr.RELATIVE_ERROR,
            },
            "windows": [w.to_json() for w in self.windows],
            "bins": {k: b.n[k][:size].tolist() for k in Bins.COUNTERS}
            if b
            else {k: [] for k in Bins.COUNTERS},
        }

    def write(self, out: Path, stem: str = "digest", log_name: str = "latency.hlog") -> None:
        """STEM.json and the per-second latency log, each written whole and renamed."""
        (out / f"{stem}.json.tmp").write_text(json.dumps(self.to_json()))
        (out / f"{stem}.json.tmp").replace(out / f"{stem}.json")
        write_interval_log(
            out / log_name,
            self.interval_histograms(),
            self.bins.start_ns if self.bins else time.perf_counter_ns(),
        )

    def interval_histograms(self):
        """(start_s, 1.0, histogram) per second of the phase, empty seconds included."""
        if self.bins is None:
            return
        for k in range(self.bins.size()):
            yield k * BIN_NS / 1e9, BIN_NS / 1e9, self.bins.histogram(k)


def epoch_of(perf_ns: int) -> float:
    """Seconds since the epoch of a perf_counter_ns instant of this machine."""
    return time.time() - (time.perf_counter_ns() - perf_ns) / 1e9


def write_interval_log(path: Path, intervals, start_perf_ns: int) -> None:
    hdr.write_log(
        path,
        intervals,
        epoch_of(start_perf_ns),
        "perfctl load generator: latency (done - intended) of requests completed "
        "in each second, ns",
    )


def read(path: Path) -> dict:
    """A digest file as written by Digest.write (windows decoded into Window objects)."""
    return read_doc(json.loads(Path(path).read_text()))


def read_doc(d: dict) -> dict:
    """Digest.to_json's dict with its windows decoded into Window objects."""
    return {**d, "windows": [Window.from_json(w) for w in d["windows"]]}


def merge_files(
    parts: list[Path],
    logs: list[Path],
    out: Path,
    stem: str = "digest",
    log_name: str = "latency.hlog",
) -> None:
    """One digest and one latency log from several worker processes' (which share their
    start instant): window counts and histograms added, per-second counters and histograms
    added second by second. Reads the logs one interval at a time."""
    docs = [read(p) for p in parts]
    base = docs[0]
    for d in docs[1:]:
        for w, o in zip(base["windows"], d["windows"]):
            w.merge(o)
        base["rows"] += d["rows"]
        for k in Bins.COUNTERS:
            a, b = base["bins"][k], d["bins"][k]
            size = max(len(a), len(b))
            base["bins"][k] = (
                np.pad(np.asarray(a, np.int64), (0, size - len(a)))
                + np.pad(np.asarray(b, np.int64), (0, size - len(b)))
            ).tolist()
    base["windows"] = [w.to_json() for w in base["windows"]]
    (out / f"{stem}.json.tmp").write_text(json.dumps(base))
    (out / f"{stem}.json.tmp").replace(out / f"{stem}.json")
    write_interval_log(out / log_name, _added_intervals(logs), base["start_ns"])


def _added_intervals(logs: list[Path]):
    """Second k of the merged log: the sum of second k of every log (all start together)."""
    readers = [hdr.iter_log(p) for p in logs]
    k = 0
    while True:
        got = [h for h in (next(r, None) for r in readers) if h is not None]
        if not got:
            return
        total = hdr.new()
        for g in got:
            hdr.add(total, g)
        yield k * BIN_NS / 1e9, BIN_NS / 1e9, total
        k += 1

"""HdrHistograms of latencies, in nanoseconds: recording whole columns at once, percentiles,
and the standard interval log (`latency.hlog`) that HdrHistogram's own tools read.

The histograms are the `hdrhistogram` package's (`hdrh`), so their encoding, their logs and
their addition are the reference ones. What this module adds is speed where the package is
slow in pure Python: recording a numpy column (one vectorised index computation and one
bincount, instead of a Python call per value) and reading percentiles from the counts with
numpy (the package walks all ~34,000 counters in Python per percentile).

Contract of every histogram here: values are integers in nanoseconds, 1 ns to HIGHEST_NS,
3 significant digits. A value is known to within its bucket: exact below 2,048 ns, and above
that within 1/1024 of itself (relative error <= 0.098%, i.e. <= 0.1%). Percentiles read here
are the highest value of the bucket holding the order statistic (HdrHistogram's convention),
so they never understate. Values above HIGHEST_NS are recorded as HIGHEST_NS; negative ones
as 0. Histograms are not thread-safe; merge them by addition (`add`), never by averaging
percentiles.
"""

from __future__ import annotations

import math
import time
import weakref
from pathlib import Path

import numpy as np
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader, HistogramLogWriter

HIGHEST_NS = 3_600 * 10**9  # one hour: no latency a trial keeps is longer
SIGNIFICANT_DIGITS = 3
RELATIVE_ERROR = 2.0**-10  # the bound above, 0.098%
MAX_VALUE_UNIT_RATIO = 1e6  # the log's "Interval_Max" column in ms (values are ns)


def _acyclic(h: HdrHistogram) -> HdrHistogram:
    """h with its encoder's back reference made weak. The package's histogram and its encoder
    point at each other, so a dropped histogram (~270 KB of counters) waited for the cyclic
    garbage collector: a load generator that opens one per second held dozens of dead ones,
    more as its heap grew. Without the cycle a histogram is freed when its last reference
    goes; the encoder lives exactly as long as the histogram that owns it."""
    h.encoder.histogram = weakref.proxy(h)
    return h


def new() -> HdrHistogram:
    """An empty latency histogram (ns, 3 significant digits)."""
    return _acyclic(HdrHistogram(1, HIGHEST_NS, SIGNIFICANT_DIGITS))


def counts(h: HdrHistogram) -> np.ndarray:
    """The histogram's counters as a numpy view (writes go into the histogram)."""
    return np.ctypeslib.as_array(h.counts)


def indexes(h: HdrHistogram, values_ns: np.ndarray) -> np.ndarray:
    """The counter index of each value (int64 array; values clipped to the histogram's
    range): HdrHistogram's _counts_index_for, vectorised."""
    v = np.clip(np.asarray(values_ns), 0, HIGHEST_NS).astype(np.int64, copy=False)
    # bit length of (v | mask): the binary exponent of its float64 (exact below 2**53),
    # read from the float's exponent bits
    f = (v | h.sub_bucket_mask).astype(np.float64)
    bucket = (f.view(np.int64) >> 52) - (
        1022 + h.unit_magnitude + h.sub_bucket_half_count_magnitude + 1
    )
    sub = v >> (bucket + h.unit_magnitude)
    sub -= h.sub_bucket_half_count
    sub += (bucket + 1) << h.sub_bucket_half_count_magnitude
    return sub


def record(h: HdrHistogram, values_ns: np.ndarray) -> None:
    """Record every value of a column (ns) into h."""
    v = np.asarray(values_ns)
    if v.size == 0:
        return
    add_indexes(h, indexes(h, v), int(v.min()), int(v.max()))


def add_indexes(h: HdrHistogram, idx: np.ndarray, lowest: int, highest: int) -> None:
    """Count one value at each counter index (indexes() of values whose extremes are
    lowest and highest, in ns)."""
    if idx.size == 0:
        return
    c = counts(h)
    c += np.bincount(idx, minlength=h.counts_len)[: h.counts_len].astype(c.dtype, copy=False)
    h.total_count += int(idx.size)
    h.min_value = min(h.min_value, max(int(lowest), 0))
    h.max_value = max(h.max_value, min(int(highest), HIGHEST_NS))


def add(dst: HdrHistogram, src: HdrHistogram) -> HdrHistogram:
    """dst += src (counts added, as the package does); returns dst."""
    if src.total_count:
        dst.add(src)
    return dst


def value_at_index(h: HdrHistogram, index: np.ndarray) -> np.ndarray:
    """The lowest value of each counter index (vectorised get_value_from_index)."""
    index = np.asarray(index, dtype=np.int64)
    bucket = (index >> h.sub_bucket_half_count_magnitude) - 1
    sub = (index & (h.sub_bucket_half_count - 1)) + h.sub_bucket_half_count
    low = bucket < 0
    sub = np.where(low, sub - h.sub_bucket_half_count, sub)
    bucket = np.where(low, 0, bucket)
    return sub << (bucket + h.unit_magnitude)


def bucket_width(h: HdrHistogram, index: np.ndarray) -> np.ndarray:
    """How many ns values share each counter index."""
    bucket = np.maximum(
        (np.asarray(index, dtype=np.int64) >> h.sub_bucket_half_count_magnitude) - 1, 0
    )
    return np.left_shift(1, bucket + h.unit_magnitude)


def rank(n: int, q: float) -> int:
    """The 1-based rank of the q-th percentile (0..100) among n values: the inverted CDF, as
    loadgen.stats.percentile uses for exact order statistics."""
    return min(n, max(1, math.ceil(round(q / 100.0 * n, 9))))


def locate(h: HdrHistogram, k: int) -> tuple[int, int, int]:
    """The bucket of the k-th smallest value (1-based): (lowest value, highest value, how many
    values lie below the bucket). Exact refinement reads only the values in [low, high]."""
    cum = np.cumsum(counts(h), dtype=np.int64)
    i = int(np.searchsorted(cum, k))
    low = int(value_at_index(h, i))
    return low, low + int(bucket_width(h, i)) - 1, int(cum[i - 1]) if i else 0


def percentiles_ms(h: HdrHistogram, qs: list[float]) -> list[float]:
    """The q-th percentiles (0..100) in ms: the highest value of the bucket holding the order
    statistic of rank ceil(q n / 100) (within 0.1% above the exact one). NaN when empty."""
    n = int(h.total_count)
    return values_at_ranks_ms(h, [rank(n, q) for q in qs]) if n else [math.nan] * len(qs)


def values_at_ranks_ms(h: HdrHistogram, ks: list[int]) -> list[float]:
    """The k-th smallest values (1-based ranks) in ms, as percentiles_ms reads them."""
    n = int(h.total_count)
    if n == 0:
        return [math.nan] * len(ks)
    cum = np.cumsum(counts(h), dtype=np.int64)
    i = np.searchsorted(cum, np.clip(np.asarray(ks, dtype=np.int64), 1, n))
    high = np.minimum(value_at_index(h, i) + bucket_width(h, i) - 1, max(h.max_value, 0))
    return [float(x) / 1e6 for x in high]


def count_at_or_below(h: HdrHistogram, value_ns: int) -> int:
    """How many values lie in the buckets up to the one holding value_ns (so every value
    <= value_ns, and those sharing its bucket: within 0.1% above it)."""
    if value_ns < 0:
        return 0
    i = int(indexes(h, np.asarray([value_ns]))[0])
    return int(counts(h)[: i + 1].sum(dtype=np.int64))


def percentile_ms(h: HdrHistogram, q: float) -> float:
    return percentiles_ms(h, [q])[0]


def mean_std_ms(h: HdrHistogram) -> tuple[float, float]:
    """Mean and standard deviation (ms) from bucket midpoints (within 0.05% each)."""
    c = counts(h)
    nz = np.flatnonzero(c)
    if nz.size == 0:
        return math.nan, math.nan
    mid = value_at_index(h, nz) + (bucket_width(h, nz) - 1) / 2.0
    w = c[nz].astype(np.float64)
    mean = float(np.dot(mid, w) / w.sum())
    var = float(np.dot((mid - mean) ** 2, w) / w.sum())
    return mean / 1e6, math.sqrt(var) / 1e6


def cdf_ms(h: HdrHistogram) -> tuple[np.ndarray, np.ndarray]:
    """(highest value of each non-empty bucket in ms, fraction of values at or below it)."""
    c = counts(h)
    nz = np.flatnonzero(c)
    if nz.size == 0:
        return np.empty(0), np.empty(0)
    high = (value_at_index(h, nz) + bucket_width(h, nz) - 1) / 1e6
    return high, np.cumsum(c[nz]) / float(c[nz].sum())


def sparse(h: HdrHistogram) -> tuple[np.ndarray, np.ndarray]:
    """(counter indexes, counts) of the non-empty counters."""
    c = counts(h)
    nz = np.flatnonzero(c)
    return nz, c[nz].copy()


def encode(h: HdrHistogram) -> str:
    """The standard compressed, base64 form (what a log line holds)."""
    return h.encode().decode("ascii")


def decode(text: str) -> HdrHistogram:
    return _acyclic(HdrHistogram.decode(text.encode("ascii") if isinstance(text, str) else text))


def write_log(
    path: Path,
    intervals: list[tuple[float, float, HdrHistogram]],
    start_epoch_s: float,
    comment: str = "",
) -> None:
    """Write an interval log: one line per (start_s, length_s, histogram), start_s relative
    to start_epoch_s (seconds since the epoch), which the header gives as StartTime and
    BaseTime. Written to PATH.tmp and renamed."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        w = HistogramLogWriter(f)
        if comment:
            w.output_comment(comment)
        w.output_log_format_version()
        # StartTime and BaseTime are the same text: the reader skips lines whose start
        # (time stamp + BaseTime - StartTime) falls before 0, as a rounding gap would make it
        stamp = time.strftime("%a %b %d %H:%M:%S %Z %Y", time.localtime(start_epoch_s))
        epoch = f"{start_epoch_s:.6f}"
        w.output_comment(f"[StartTime: {epoch} (seconds since epoch), {stamp}]")
        w.output_comment(f"[BaseTime: {epoch} (seconds since epoch)]")
        w.output_legend()
        for start_s, length_s, h in intervals:
            # a start of 0 reads as "unset" to the writer, which then takes the histogram's
            # own start stamp: 0 for these, so the line says 0 all the same
            w.output_interval_histogram(h, start_s, start_s + length_s, MAX_VALUE_UNIT_RATIO)
    tmp.replace(path)


def iter_log(path: Path):
    """The interval histograms of a log, in order, read one at a time with the package's
    reader (each carries its absolute start and end time stamps in ms)."""
    reader = HistogramLogReader(str(path), new())
    try:
        while (h := reader.get_next_interval_histogram()) is not None:
            yield h
    finally:
        reader.close()


def read_log(path: Path) -> list[HdrHistogram]:
    return list(iter_log(path))

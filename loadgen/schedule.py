"""Open-loop arrival schedules: intended send times, seeded so a schedule replays exactly,
produced in chunks so that a schedule of any length takes the same, small memory.

A load phase has two segments, the warm-up [0, warmup_s) and the measured window
[warmup_s, horizon_s). Each segment gets exactly round(rate x its length) arrivals, so the load
offered in the measured window is the load asked for, whatever the seed. Within a segment:

- poisson: n exponential gaps plus one more, scaled so that n arrivals end inside the segment.
  Scaled exponential spacings are the spacings of n sorted uniforms, which is what a Poisson
  process conditioned on its count is: the gaps stay exponential in distribution.
- uniform: the same with gaps drawn from U(0, 2/rate] (same mean, lower variance).
- constant: n arrivals exactly length/n apart (1/rate when rate x length is whole).

Streaming. The scale of a segment is the sum of all its n + 1 gaps, known only once every gap
is drawn. A `Schedule` therefore draws each segment's gaps twice from the same generator
state: once when it is made, keeping only their running sum (the scale), and again, chunk by
chunk, as the arrivals are consumed. Numpy's generators give the same numbers whether drawn
in one call or in pieces, and the running sum is carried from chunk to chunk in the same
order of additions as one cumulative sum, so the chunks joined are bit for bit the array one
call would have made: the schedule of a seed is the same as before chunking, and the same
for the HTTP generator and for the schedule file a driver reads. Memory: a few chunks of
CHUNK float64 values, whatever rate x length is. Cost: the gaps are drawn twice, the first
pass when the Schedule is made, before the load starts (benchmarks/schedule_stream.py times
both passes by length).

A schedule split over P worker processes is split by arrival (`shard`: every P-th arrival),
so the shards add up to the whole schedule, exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from .spec import LoadSpec

ARRIVAL_LIMIT = 50_000_000
CHUNK = 16_384  # arrivals per chunk: 128 KiB of float64
ARRIVALS = ("poisson", "uniform", "constant")


def segment_count(rate_rps: float, length_s: float) -> int:
    """Arrivals in a segment: rate x length, rounded half up (the one rounding rule)."""
    if rate_rps <= 0 or length_s <= 0:
        return 0
    return int(np.floor(rate_rps * length_s + 0.5))


def _gaps(arrivals: str, rng: np.random.Generator, k: int) -> np.ndarray:
    """The next k gaps of a segment (unscaled, mean 1)."""
    if arrivals == "poisson":
        return rng.exponential(1.0, k)
    return 2.0 - rng.uniform(0.0, 2.0, k)  # uniform, in (0, 2]: never a zero gap


def _running_sums(
    arrivals: str, rng: np.random.Generator, count: int, chunk: int
) -> Iterator[np.ndarray]:
    """The cumulative sums of the next `count` gaps, `chunk` at a time (the carry is added to
    each chunk's first gap, so the additions happen in np.cumsum's order)."""
    carry = 0.0
    for lo in range(0, count, chunk):
        s = _gaps(arrivals, rng, min(chunk, count - lo))
        s[0] += carry
        np.add.accumulate(s, out=s)
        carry = float(s[-1])
        yield s


class _Segment:
    """n arrivals in [start_s, end_s); for poisson/uniform, the generator state its gaps start
    from and their scale (the sum of all n + 1 gaps)."""

    def __init__(
        self,
        arrivals: str,
        n: int,
        start_s: float,
        end_s: float,
        rng: np.random.Generator,
        chunk: int,
    ) -> None:
        self.arrivals, self.n, self.start_s, self.end_s = arrivals, n, start_s, end_s
        self.state = None
        self.scale = 1.0
        if n and arrivals != "constant":
            self.state = rng.bit_generator.state  # a copy (a dict)
            last = 0.0
            for s in _running_sums(arrivals, rng, n + 1, chunk):  # leaves rng past them
                last = s[-1]
            self.scale = float(last)

    def chunks(self, chunk: int) -> Iterator[np.ndarray]:
        """The segment's offsets, ascending, in arrays of at most `chunk`."""
        n, start, end = self.n, self.start_s, self.end_s
        if n == 0:
            return
        length = end - start
        top = np.nextafter(end, start)
        if self.arrivals == "constant":
            for lo in range(0, n, chunk):
                t = start + length * (np.arange(lo, min(n, lo + chunk), dtype=np.float64) / n)
                yield np.minimum(t, top)
            return
        rng = np.random.default_rng()
        rng.bit_generator.state = self.state
        for ends in _running_sums(self.arrivals, rng, n, chunk):
            t = start + length * (ends / self.scale)
            yield np.minimum(t, top, out=t)


class Schedule:
    """The open-load schedule of one phase: round(rate x warmup_s) arrivals in [0, warmup_s)
    and round(rate x (horizon_s - warmup_s)) in [warmup_s, horizon_s), at most `limit` in all
    (the warm-up's first). Making one draws every gap once (module docstring), so do it before
    the load starts; `chunks()` then yields the offsets (seconds from the start instant) in
    ascending arrays of at most CHUNK, as often as asked, always the same ones."""

    def __init__(
        self,
        arrivals: str,
        rate_rps: float,
        horizon_s: float,
        seed: int,
        limit: int = ARRIVAL_LIMIT,
        warmup_s: float = 0.0,
        chunk: int | None = None,
    ) -> None:
        if arrivals not in ARRIVALS:
            raise ValueError(f"unknown arrivals {arrivals!r}")
        self.chunk = int(chunk or CHUNK)
        self.segments: list[_Segment] = []
        if rate_rps <= 0 or horizon_s <= 0:
            return
        warmup_s = min(max(0.0, warmup_s), horizon_s)
        n_warm = min(limit, segment_count(rate_rps, warmup_s))
        n_window = min(limit - n_warm, segment_count(rate_rps, horizon_s - warmup_s))
        rng = np.random.default_rng(seed)
        self.segments = [
            _Segment(arrivals, n_warm, 0.0, warmup_s, rng, self.chunk),
            _Segment(arrivals, n_window, warmup_s, horizon_s, rng, self.chunk),
        ]

    def __len__(self) -> int:
        return sum(s.n for s in self.segments)

    def chunks(self) -> Iterator[np.ndarray]:
        for seg in self.segments:
            yield from seg.chunks(self.chunk)

    def chunks_ns(self, index: int = 0, count: int = 1) -> Iterator[np.ndarray]:
        """Worker `index` of `count`'s share (shard_chunks) as int64 ns offsets."""
        for c in shard_chunks(self.chunks(), index, count):
            yield (c * 1e9).astype(np.int64)

    def offsets_s(self) -> np.ndarray:
        """The whole schedule in one array (for tests and short schedules: it holds every
        arrival; the generator and the schedule file use the chunks). The same (arrivals,
        rate, horizon, seed, warmup) always gives the same array."""
        parts = list(self.chunks())
        return np.concatenate(parts) if parts else np.empty(0)


def spec_schedule(spec: LoadSpec) -> Schedule:
    """The open-load schedule of `spec`: its arrivals at its rate over warm-up + duration,
    from its seed, at most max_requests. The one recipe: the HTTP generator sends it
    (modes/open_loop.py) and the driver contract writes it for every other driver
    (contract.py write_schedule), so the same spec and seed give the same arrivals in both."""
    return Schedule(
        spec.arrivals,
        spec.rate_rps,
        spec.warmup_s + spec.duration_s,
        spec.seed,
        limit=spec.max_requests,
        warmup_s=spec.warmup_s,
    )


def shard(offsets: np.ndarray, index: int, count: int) -> np.ndarray:
    """Worker `index` of `count`'s part of a schedule: every count-th arrival from `index`.
    The parts of 0..count-1 together are the schedule; each holds len/count of it, +-1."""
    return offsets[index::count] if count > 1 else offsets


def shard_chunks(chunks: Iterable[np.ndarray], index: int, count: int) -> Iterator[np.ndarray]:
    """shard() of the schedule the chunks make up, chunk by chunk (empty parts skipped)."""
    if count <= 1:
        yield from chunks
        return
    seen = 0  # arrivals before this chunk
    for c in chunks:
        part = c[(index - seen) % count :: count]
        seen += len(c)
        if len(part):
            yield part

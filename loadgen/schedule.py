"""Open-loop arrival schedules: intended send times, seeded so a schedule replays exactly.

A load phase has two segments, the warm-up [0, warmup_s) and the measured window
[warmup_s, horizon_s). Each segment gets exactly round(rate x its length) arrivals, so the load
offered in the measured window is the load asked for, whatever the seed. Within a segment:

- poisson: n exponential gaps plus one more, scaled so that n arrivals end inside the segment.
  Scaled exponential spacings are the spacings of n sorted uniforms, which is what a Poisson
  process conditioned on its count is: the gaps stay exponential in distribution.
- uniform: the same with gaps drawn from U(0, 2/rate] (same mean, lower variance).
- constant: n arrivals exactly length/n apart (1/rate when rate x length is whole).

A schedule split over P worker processes is split by arrival (`shard`: every P-th arrival),
so the shards add up to the whole schedule, exactly.
"""
from __future__ import annotations

import numpy as np

ARRIVAL_LIMIT = 50_000_000


def segment_count(rate_rps: float, length_s: float) -> int:
    """Arrivals in a segment: rate x length, rounded half up (the one rounding rule)."""
    if rate_rps <= 0 or length_s <= 0:
        return 0
    return int(np.floor(rate_rps * length_s + 0.5))


def _segment(arrivals: str, n: int, start_s: float, end_s: float,
             rng: np.random.Generator) -> np.ndarray:
    """n ascending offsets in [start_s, end_s)."""
    if n == 0:
        return np.empty(0)
    length = end_s - start_s
    if arrivals == "constant":
        t = start_s + length * (np.arange(n, dtype=np.float64) / n)
    else:
        if arrivals == "poisson":
            gaps = rng.exponential(1.0, n + 1)
        elif arrivals == "uniform":
            gaps = 2.0 - rng.uniform(0.0, 2.0, n + 1)      # (0, 2]: never a zero last gap
        else:
            raise ValueError(f"unknown arrivals {arrivals!r}")
        ends = np.cumsum(gaps)
        t = start_s + length * (ends[:n] / ends[n])
    return np.minimum(t, np.nextafter(end_s, start_s))


def arrival_offsets_s(arrivals: str, rate_rps: float, horizon_s: float, seed: int,
                      limit: int = ARRIVAL_LIMIT, warmup_s: float = 0.0) -> np.ndarray:
    """Intended send offsets in seconds from the start instant, ascending, all < horizon_s.

    round(rate x warmup_s) of them lie in [0, warmup_s) and round(rate x (horizon_s -
    warmup_s)) in [warmup_s, horizon_s); at most `limit` in all (the warm-up's first). The
    same (arrivals, rate, horizon, seed, warmup) always gives the same array.
    """
    if arrivals not in ("poisson", "uniform", "constant"):
        raise ValueError(f"unknown arrivals {arrivals!r}")
    if rate_rps <= 0 or horizon_s <= 0:
        return np.empty(0)
    warmup_s = min(max(0.0, warmup_s), horizon_s)
    n_warm = min(limit, segment_count(rate_rps, warmup_s))
    n_window = min(limit - n_warm, segment_count(rate_rps, horizon_s - warmup_s))
    rng = np.random.default_rng(seed)
    return np.concatenate([_segment(arrivals, n_warm, 0.0, warmup_s, rng),
                           _segment(arrivals, n_window, warmup_s, horizon_s, rng)])


def shard(offsets: np.ndarray, index: int, count: int) -> np.ndarray:
    """Worker `index` of `count`'s part of a schedule: every count-th arrival from `index`.
    The parts of 0..count-1 together are the schedule; each holds len/count of it, +-1."""
    return offsets[index::count] if count > 1 else offsets

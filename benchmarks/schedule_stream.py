"""Open-load schedules in chunks (issue 18): time and memory to make and read one, by length.

    .venv/bin/python benchmarks/schedule_stream.py [--rate 50000] [--minutes 1 2 5 10] [--quick]

For each length at --rate (Poisson): the time to make the Schedule (the first pass over the
gaps, done before the load starts), the time to read every chunk as the load generator does
(int64 ns), the peak of Python-traced allocations while doing both (tracemalloc), and, for
comparison, the peak of building the same schedule as one array (what the generator held
before chunking; skipped above 2 minutes unless --one-array-all, it needs ~3 x 8 bytes per
arrival). The chunks and the one array are checked equal wherever both are built.
Goal: the streamed peak is flat (a few MB) whatever the length; time linear in arrivals.
Timings need a quiet host; the memory figures do not.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from loadgen import schedule  # noqa: E402


def streamed(rate: float, seconds: float, seed: int) -> tuple[float, float, int, int, str]:
    tracemalloc.start()
    t0 = time.perf_counter()
    s = schedule.Schedule("poisson", rate, seconds, seed)
    t1 = time.perf_counter()
    n, h = 0, 0
    for part in s.chunks_ns():
        n += len(part)
        h = (h * 1_000_003 + int(part[-1])) % (1 << 61)  # cheap fingerprint of the joins
    t2 = time.perf_counter()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return t1 - t0, t2 - t1, peak, n, str(h)


def one_array(rate: float, seconds: float, seed: int) -> tuple[float, int, np.ndarray]:
    tracemalloc.start()
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    n = schedule.segment_count(rate, seconds)
    ends = np.cumsum(rng.exponential(1.0, n + 1))
    t = np.minimum(0.0 + seconds * (ends[:n] / ends[n]), np.nextafter(seconds, 0.0))
    ns = (t * 1e9).astype(np.int64)
    t1 = time.perf_counter()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return t1 - t0, peak, ns


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rate", type=float, default=50_000)
    ap.add_argument("--minutes", type=float, nargs="+", default=[1, 2, 5, 10])
    ap.add_argument("--one-array-all", action="store_true")
    ap.add_argument("--quick", action="store_true", help="lengths 0.1 and 0.2 min (a smoke run)")
    args = ap.parse_args()
    minutes = [0.1, 0.2] if args.quick else args.minutes
    print(
        f"{'min':>5} {'arrivals':>11} {'make s':>7} {'read s':>7} {'ns/arr':>7} "
        f"{'peak MB':>8} {'1-array s':>9} {'1-array MB':>10} same"
    )
    for m in minutes:
        make_s, read_s, peak, n, _ = streamed(args.rate, m * 60, seed=1)
        per = (make_s + read_s) / max(n, 1) * 1e9
        ref = "-"
        one_s = one_mb = float("nan")
        if args.one_array_all or m <= 2:
            one_s, one_peak, arr = one_array(args.rate, m * 60, seed=1)
            one_mb = one_peak / 2**20
            got = np.concatenate(
                list(schedule.Schedule("poisson", args.rate, m * 60, 1).chunks_ns())
            )
            ref = "yes" if np.array_equal(got, arr) else "NO"
            del arr, got
        print(
            f"{m:>5g} {n:>11,} {make_s:>7.2f} {read_s:>7.2f} {per:>7.1f} "
            f"{peak / 2**20:>8.2f} {one_s:>9.2f} {one_mb:>10.1f} {ref}"
        )


if __name__ == "__main__":
    main()

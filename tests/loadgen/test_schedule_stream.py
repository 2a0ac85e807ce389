"""Open-loop schedules streamed in chunks (issue #18): the same arrivals as the one-array
definition, bit for bit, the same statistics on long schedules, memory that does not grow with
the schedule, and the same schedule for the HTTP generator and for a driver's schedule.bin."""

import tracemalloc

import numpy as np
import pytest
from scipy import stats as sps

from loadgen import contract, schedule
from loadgen.spec import LoadSpec


def one_array(arrivals, rate, horizon, seed, warmup=0.0, limit=schedule.ARRIVAL_LIMIT):
    """The schedule as it was defined before chunking: every gap of a segment drawn in one
    call, one cumulative sum, scaled by its last element. Kept here as the reference."""
    rng = np.random.default_rng(seed)
    warmup = min(max(0.0, warmup), horizon)
    n_warm = min(limit, schedule.segment_count(rate, warmup))
    n_win = min(limit - n_warm, schedule.segment_count(rate, horizon - warmup))
    out = []
    for n, a, b in ((n_warm, 0.0, warmup), (n_win, warmup, horizon)):
        if n == 0:
            continue
        if arrivals == "constant":
            t = a + (b - a) * (np.arange(n, dtype=np.float64) / n)
        else:
            gaps = (
                rng.exponential(1.0, n + 1)
                if arrivals == "poisson"
                else 2.0 - rng.uniform(0.0, 2.0, n + 1)
            )
            ends = np.cumsum(gaps)
            t = a + (b - a) * (ends[:n] / ends[n])
        out.append(np.minimum(t, np.nextafter(b, a)))
    return np.concatenate(out) if out else np.empty(0)


@pytest.mark.parametrize("arrivals", schedule.ARRIVALS)
def test_chunks_join_into_the_one_array_schedule_bit_for_bit(arrivals):
    """Seeded schedules of runs made before chunking replay unchanged, at any chunk size."""
    for rate, horizon, warmup, seed, limit in (
        (1000, 2.0, 0.0, 7, schedule.ARRIVAL_LIMIT),
        (20000, 3.3, 0.7, 99, schedule.ARRIVAL_LIMIT),
        (20000, 3.3, 0.7, 99, 30_000),
        (37.3, 5.0, 1.0, 1, schedule.ARRIVAL_LIMIT),
        (0.9, 5.0, 1.0, 5, schedule.ARRIVAL_LIMIT),
    ):
        ref = one_array(arrivals, rate, horizon, seed, warmup, limit)
        for chunk in (1, 7, 1000, None) if len(ref) < 5000 else (13, 1000, None):
            s = schedule.Schedule(arrivals, rate, horizon, seed, limit, warmup, chunk)
            parts = list(s.chunks())
            got = np.concatenate(parts) if parts else np.empty(0)
            assert len(s) == len(ref) and np.array_equal(got, ref), (rate, seed, chunk)
            assert all(len(p) <= (chunk or schedule.CHUNK) for p in parts)
            assert np.array_equal(np.concatenate(list(s.chunks())), got)  # re-readable


def test_sharded_chunks_are_the_shards_of_the_whole():
    whole = schedule.Schedule("poisson", 3000, 3.0, seed=4, warmup_s=0.5).offsets_s()
    s = schedule.Schedule("poisson", 3000, 3.0, 4, warmup_s=0.5, chunk=333)
    for count in (1, 2, 3, 7):
        for i in range(count):
            got = np.concatenate(list(s.chunks_ns(i, count)))
            assert np.array_equal(got, (schedule.shard(whole, i, count) * 1e9).astype(np.int64))


@pytest.mark.parametrize("arrivals", ["poisson", "uniform", "constant"])
def test_long_streamed_schedule_offers_exactly_rate_times_window(arrivals):
    """2.05 M arrivals over 125 chunks: the count in the window is exact, the arrivals ascend
    across every join, and nothing reaches the horizon."""
    rate, warmup, horizon = 50_000, 1.0, 42.0
    s = schedule.Schedule(arrivals, rate, horizon, 2024, warmup_s=warmup)
    n_warm = n_win = 0
    last = -1.0
    for part in s.chunks():
        assert part[0] >= last and (np.diff(part) >= 0).all()
        last = part[-1]
        n_warm += int(np.count_nonzero(part < warmup))
        n_win += int(np.count_nonzero((part >= warmup) & (part < horizon)))
    assert last < horizon
    assert n_win == schedule.segment_count(rate, horizon - warmup) == 2_050_000
    assert n_warm == 50_000


def test_long_poisson_schedule_is_uniform_given_its_count_and_gaps_stay_exponential():
    """Chunks must not leave a trace: the window's times are sorted uniforms, the gaps
    exponential, and so are the gaps that straddle chunk joins."""
    rate, warmup, horizon, chunk = 50_000, 1.0, 21.0, 4096
    t = schedule.Schedule("poisson", rate, horizon, 11, warmup_s=warmup, chunk=chunk).offsets_s()
    window = t[t >= warmup]
    assert sps.kstest(window, "uniform", args=(warmup, horizon - warmup)).pvalue > 0.001
    gaps = np.diff(window)
    assert sps.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue > 0.001
    joins = np.diff(t)[chunk - 1 :: chunk]  # gap from a chunk's last to the next's first
    assert len(joins) > 200
    assert sps.kstest(joins, "expon", args=(0, 1 / rate)).pvalue > 0.001
    # per-second counts of a Poisson process: variance ~ mean (dispersion ~1), not smoother
    per_s = np.bincount(np.floor(window - warmup).astype(int), minlength=20)[:20]
    assert 0.4 < per_s.var(ddof=1) / per_s.mean() < 2.0


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_ten_minute_schedule_at_50k_per_second_streams_in_flat_memory():
    """30 M arrivals (240 MB as one float64 array) read chunk by chunk: the peak of what is
    allocated stays a few chunks, under 4 MB, while every arrival is seen."""
    seen = []

    def consume():
        s = schedule.Schedule("poisson", 50_000, 600.0, 3, warmup_s=0.0)
        n = 0
        for part in s.chunks_ns():
            n += len(part)
        seen.append(n)

    peak = _peak_bytes(consume)
    assert seen == [30_000_000]
    assert peak < 4 * 2**20, peak


def test_schedule_file_is_written_chunk_by_chunk(tmp_path):
    """A 60 s file at 50k/s is 24 MB; writing it allocates a few chunks, not the file."""
    spec = LoadSpec(mode="open", rate_rps=50_000, duration_s=59, warmup_s=1, seed=8)
    path = tmp_path / contract.SCHEDULE_FILE
    counted = []
    peak = _peak_bytes(lambda: counted.append(contract.write_schedule(spec, path)))
    assert counted == [3_000_000] and path.stat().st_size == 8 * 3_000_000
    assert peak < 4 * 2**20, peak
    ref = (one_array("poisson", 50_000, 60.0, 8, 1.0) * 1e9).astype(np.int64)
    assert np.array_equal(contract.read_schedule(path), ref)

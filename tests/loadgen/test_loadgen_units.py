"""Load-generator building blocks: schedules, records, percentiles, Server-Timing parsing."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from loadgen import schedule, stats
from loadgen.client import parse_server_timing
from loadgen.records import Records
from loadgen.spec import LoadSpec
from loadgen.worker import build_request


def test_schedules_replay_exactly_and_stay_in_horizon():
    a = schedule.Schedule("poisson", 1000, 2.0, seed=7).offsets_s()
    b = schedule.Schedule("poisson", 1000, 2.0, seed=7).offsets_s()
    c = schedule.Schedule("poisson", 1000, 2.0, seed=8).offsets_s()
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert (np.diff(a) > 0).all() and a[-1] < 2.0
    const = schedule.Schedule("constant", 100, 1.0, seed=1).offsets_s()
    assert len(const) == 100 and np.allclose(np.diff(const), 0.01)


def test_poisson_gaps_are_exponential():
    t = schedule.Schedule("poisson", 2000, 5.0, seed=3).offsets_s()
    gaps = np.diff(t)
    assert sps.kstest(gaps, "expon", args=(0, 1 / 2000)).pvalue > 0.01
    assert len(t) == 10000


@pytest.mark.parametrize("arrivals", ["poisson", "uniform", "constant"])
def test_open_load_offers_rate_times_window(arrivals):
    """Issue #13: at 200/s over a 4 s window after 1 s of warm-up, seed 1001 offered 719
    arrivals (10% short), and every cell shared that shortfall. Now each segment holds
    rate x length arrivals, rounded, whatever the seed and rate."""
    for rate, seed in ((200, 1001), (200, 7), (37.3, 1), (1000, 99), (0.9, 5)):
        t = schedule.Schedule(arrivals, rate, 5.0, seed, warmup_s=1.0).offsets_s()
        in_window = np.count_nonzero((t >= 1.0) & (t < 5.0))
        assert in_window == schedule.segment_count(rate, 4.0) == int(rate * 4 + 0.5), (rate, seed)
        assert np.count_nonzero(t < 1.0) == int(rate * 1 + 0.5)
        assert (np.diff(t) >= 0).all() and t[-1] < 5.0


def test_poisson_arrivals_conditioned_on_their_count_are_uniform_in_the_window():
    """Fixing the count keeps the Poisson shape: given n arrivals in a window, their times
    are n sorted uniforms, so the gaps stay exponential in distribution."""
    t = schedule.Schedule("poisson", 500, 21.0, seed=11, warmup_s=1.0).offsets_s()
    window = t[t >= 1.0]
    assert sps.kstest(window, "uniform", args=(1.0, 20.0)).pvalue > 0.01
    assert sps.kstest(np.diff(window), "expon", args=(0, 1 / 500)).pvalue > 0.01


def test_shards_of_a_schedule_add_up_to_it_exactly():
    whole = schedule.Schedule("poisson", 300, 3.0, seed=4, warmup_s=0.5).offsets_s()
    for count in (1, 2, 3, 7):
        parts = [schedule.shard(whole, i, count) for i in range(count)]
        assert sum(len(p) for p in parts) == len(whole)
        assert np.array_equal(np.sort(np.concatenate(parts)), whole)
        assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1


def test_uniform_gaps_keep_the_mean():
    t = schedule.Schedule("uniform", 500, 10.0, seed=3).offsets_s()
    assert np.diff(t).mean() == pytest.approx(1 / 500, rel=0.03)


def test_median_ci_needs_six_values_and_brackets_the_median():
    assert all(math.isnan(v) for v in stats.median_ci(np.arange(5.0)))
    assert stats.median_ci(np.array([3.0, 1, 2, 6, 5, 4])) == (1.0, 6.0)  # 96.9% coverage
    rng = np.random.default_rng(2)
    hits = sum(
        lo <= 0.0 <= hi for lo, hi in (stats.median_ci(rng.normal(0, 1, 9)) for _ in range(2000))
    )
    assert 0.95 <= hits / 2000 <= 0.99  # n = 9: [x(2), x(8)], 96.1% coverage


def test_binom_ppf_is_scipy_stats_binom_ppf():
    """Every trial's CI ranks come from stats.binom_ppf (scipy.special, light to import); it
    must give scipy.stats' answer exactly, small samples and large, in the tails the CIs use
    and away from them."""
    rng = np.random.default_rng(5)
    ns = [*range(1, 400), *map(int, rng.integers(400, 3_000_000, 300))]
    for n in ns:
        for p in (0.5, 0.9, 0.99, 0.999):
            for q in (0.005, 0.025, 0.05, 0.3, 0.95, 0.975, 0.995):
                assert stats.binom_ppf(q, n, p) == int(sps.binom.ppf(q, n, p)), (q, n, p)


def test_a_trials_ci_ranks_do_not_import_scipy_stats():
    """scipy.stats costs ~1 s at start-up: a trial's row reads its CI ranks without it."""
    import subprocess
    import sys

    code = (
        "import sys; from loadgen import stats; stats.ci_ranks(10_000, 99.0); "
        "print('scipy.stats' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_exact_percentiles_are_observed_values():
    v = np.arange(1, 1001, dtype=float)
    assert stats.percentile(v, 50) == 500
    assert stats.percentile(v, 99) == 990
    assert stats.percentile(v, 99.9) == 999
    assert math.isnan(stats.percentile(np.empty(0), 50))


def test_percentile_ci_brackets_the_truth():
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(200):
        sample = rng.exponential(1.0, 2000)
        lo, hi = stats.percentile_ci(sample, 99.0)
        hits += lo <= -math.log(0.01) <= hi
    assert 0.90 <= hits / 200 <= 0.995  # nominal 95% coverage


def test_server_timing_parse():
    svc, queue, db = parse_server_timing(b"queue;dur=0.125, svc;dur=1.500")
    assert (svc, queue) == (1.5, 0.125) and math.isnan(db)
    svc, queue, _ = parse_server_timing(b"svc;desc=x;dur=2")
    assert svc == 2.0 and math.isnan(queue)
    svc, _, _ = parse_server_timing(b"svc;dur=oops")
    assert math.isnan(svc)
    assert parse_server_timing(b"queue;dur=0.010, svc;dur=0.900, db;dur=0.750") == (0.9, 0.01, 0.75)


def test_records_chunk_without_losing_rows():
    r = Records(chunk_rows=1024)
    for i in range(5000):
        c, row = r.new(i)
        c.end(row, 0, i + 10)
    f = r.frame()
    assert len(f["intended_ns"]) == 5000 and f["done_ns"][4999] == 5009
    assert np.isnan(f["svc_ms"]).all()


def test_records_spill_final_chunks_in_order_and_keep_memory_bounded():
    spilled = []
    r = Records(chunk_rows=100, sink=lambda cols: spilled.append(cols["intended_ns"].copy()))
    held = []
    for i in range(1000):
        c, row = r.new(i)
        if i == 150:
            held.append((c, row))  # an unanswered request holds its chunk (and later ones)
        else:
            c.end(row, 0, i)
        r.spill()
    assert sum(len(s) for s in spilled) == 100  # only the chunk before the held one
    c, row = held[0]
    c.end(row, 0, 1)
    r.spill()
    assert sum(len(s) for s in spilled) == 900 and len(r.chunks()) == 1
    assert np.array_equal(np.concatenate(spilled), np.arange(900))


def test_summarize_counts_errors_and_flags_drops():
    n = 100
    cols = {
        "intended_ns": np.arange(n) * 10_000_000,
        "sent_ns": np.arange(n) * 10_000_000,
        "done_ns": np.arange(n) * 10_000_000 + 1_000_000,
        "status": np.full(n, 200),
        "error": np.zeros(n, dtype=np.int8),
    }
    cols["status"][:3] = 503
    cols["error"][3:5] = 5  # dropped
    summary = {"measure_start_ns": 0, "measure_end_ns": n * 10_000_000, "scheduled_in_window": n}
    row = stats.summarize(cols, summary, "open", 1.0, 100.0)
    assert row["requests"] == 100 and row["errors"] == 5 and row["dropped"] == 2
    assert row["latency_p50_ms"] == pytest.approx(1.0)
    assert not row["valid"] and "dropped" in row["invalid_reasons"]


def _window(n, status=200, error=0):
    cols = {
        "intended_ns": np.arange(n) * 10_000_000 + 1,
        "sent_ns": np.arange(n) * 10_000_000 + 1,
        "done_ns": np.arange(n) * 10_000_000 + 1_000_001,
        "status": np.full(n, status),
        "error": np.full(n, error, dtype=np.int8),
    }
    return cols, {"measure_start_ns": 0, "measure_end_ns": 1_000_000_000, "scheduled_in_window": n}


def test_open_trial_whose_send_rate_misses_the_target_is_invalid():
    """The schedule offered and sent 90 arrivals in 1 s against a target of 100/s: before,
    sent == scheduled passed; the load asked for was not the load offered."""
    cols, summary = _window(90)
    row = stats.summarize(cols, summary, "open", 1.0, 100.0)
    assert row["offered_rate"] == 90 and row["achieved_rate"] == 90
    assert not row["valid"] and "misses the target 100/s by -10.0%" in row["invalid_reasons"]
    cols, summary = _window(100)
    assert stats.summarize(cols, summary, "open", 1.0, 100.0)["valid"]


def test_errors_above_max_error_rate_make_a_trial_invalid():
    cols, summary = _window(100)
    cols["error"][:3] = 1  # refused
    cols["status"][3:5] = 302  # not 2xx: an error too
    row = stats.summarize(cols, summary, "open", 1.0, 100.0, max_error_rate=0.01)
    assert row["errors"] == 5 and row["errors_http"] == 2 and row["errors_refused"] == 3
    assert not row["valid"] and "error rate 5.00% > 1%" in row["invalid_reasons"]
    assert "refused 3, http 2" in row["invalid_reasons"]
    assert stats.summarize(cols, summary, "open", 1.0, 100.0, max_error_rate=0.1)["valid"]
    assert stats.summarize(cols, summary, "open", 1.0, 100.0)["valid"]  # no limit given


def test_request_bytes():
    spec = LoadSpec(host="127.0.0.1", port=9, target="/work?spin_us=5", keepalive=False)
    req = build_request(spec)
    assert req.startswith(b"GET /work?spin_us=5 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n")
    assert b"Connection: close\r\n" in req and req.endswith(b"\r\n\r\n")
    post = build_request(LoadSpec(method="POST", body="user=a&pass=b"))
    assert b"Content-Length: 13\r\n" in post and post.endswith(b"user=a&pass=b")


def test_spec_round_trips_through_json():
    spec = LoadSpec(mode="open", rate_rps=10, body=b"x=1", cpus=(1,), headers=(("A", "b"),))
    assert LoadSpec.from_json(spec.to_json()) == spec
    with pytest.raises(ValueError):
        LoadSpec(mode="open", rate_rps=0)


def test_burst_is_not_judged_by_its_own_release_stall():
    n = 10
    cols = {
        "intended_ns": np.zeros(n, dtype=np.int64) + 1,
        "sent_ns": np.ones(n, dtype=np.int64),
        "done_ns": np.full(n, 2_000_001),
        "status": np.full(n, 201),
        "error": np.zeros(n, dtype=np.int8),
    }
    summary = {"measure_start_ns": 0, "measure_end_ns": 10**9, "loop_lag_p99_ms": 200.0}
    assert stats.summarize(cols, summary, "burst")["valid"]
    assert not stats.summarize(cols, summary, "closed")["valid"]


def test_scan_head_reads_framing_and_server_timing_case_insensitively():
    from loadgen.client import scan_head

    head = (
        b"HTTP/1.1 200 OK\r\ncontent-LENGTH: 5\r\nSERVER-timing: queue;dur=0.5\r\n"
        b"Server-Timing: svc;dur=2\r\n\r\nbody!"
    )
    framed, svc, queue, db = scan_head(head, True)
    assert framed and svc == 2.0 and queue == 0.5 and db != db
    framed, svc, _, _ = scan_head(
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"
        b"\r\nContent-Length: 9\r\nServer-Timing: svc;dur=1",
        True,
    )
    assert not framed and svc != svc  # body bytes are not headers
    framed, _, _, _ = scan_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", True)
    assert framed


class _Worker:
    """Just enough of loadgen.worker.Worker for one Connection: records what it is told."""

    fast = False
    issuing = True

    def __init__(self):
        self.done, self.failed = 0, 0

    def on_done(self, conn):
        self.done += 1

    def on_failed(self, conn):
        self.failed += 1

    def on_lost(self, conn):
        pass


class _Transport:
    def write(self, data):
        pass

    def close(self):
        pass

    def abort(self):
        pass


def _connection():
    from loadgen.client import Connection

    w = _Worker()
    conn = Connection(w, 0)
    conn.connection_made(_Transport())
    return w, conn


def test_a_head_split_into_single_bytes_is_still_read():
    from loadgen.records import Chunk

    w, conn = _connection()
    chunk = Chunk(4)
    chunk.n = 1
    conn.send(chunk, 0, b"GET / HTTP/1.1\r\n\r\n")
    resp = b"HTTP/1.1 203 OK\r\nServer-Timing: svc;dur=1.5\r\nContent-Length: 3\r\n\r\nabc"
    for i in range(len(resp)):
        conn.data_received(resp[i : i + 1])
    assert w.done == 1 and chunk.status[0] == 203 and chunk.svc_ms[0] == 1.5
    assert chunk.nbytes[0] == len(resp) and 0 < chunk.first_byte_ns[0] <= chunk.done_ns[0]


def test_an_endless_head_is_a_parse_error():
    from loadgen.client import MAX_HEAD_BYTES
    from loadgen.records import PARSE, Chunk

    w, conn = _connection()
    chunk = Chunk(4)
    chunk.n = 1
    conn.send(chunk, 0, b"GET / HTTP/1.1\r\n\r\n")
    conn.data_received(b"HTTP/1.1 200 OK\r\n")
    line = b"X-Filler: " + b"a" * 4000 + b"\r\n"
    for _ in range(MAX_HEAD_BYTES // len(line) + 2):
        if not conn.open:
            break
        conn.data_received(line)
    assert w.failed == 1 and chunk.error[0] == PARSE and not conn.open

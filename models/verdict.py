"""A verdict on every prediction: does the measurement fall in the band the model's own
uncertainty allows? If not, the model is rejected for that cell, and the verdict names the
evidence in the run's readings that points to why.

The band of a prediction. Its parameters are estimated from the run: the service time S (from
Server-Timing, a single-user probe or the utilization law) and the overhead (the time outside
the server). Their sampling distribution comes from a bootstrap over trials and requests
(``bootstrap``: resample the trials, then each trial's requests in blocks of one second where
the run kept their order, so a queue's correlated latencies move together; one block is
resampled request by request). Every model here grows with S, so the 2.5 and 97.5 percentiles
of S give the band's ends exactly; the overhead's and the arrival rate's intervals widen them
(each side the root of the sum of squares of the one-at-a-time shifts, ``band``).

The measured side has its own interval, from the same bootstrap of the measured latencies. A
prediction is
- ``held`` when the two intervals overlap;
- ``rejected`` when they do not, or when the model's assumptions do not hold in the run (a
  station that says it is ``broken``: connections pinned to fewer workers), or when more than
  FAILED_MATTERS of the requests failed (the measured latency is then of the survivors);
- ``inconclusive`` when they overlap but the band, or the measurement's interval, is wider
  than the precision asked of the models (GOAL: 10 % for a mean, 25 % for a p99): the run
  cannot tell;
- ``no prediction`` when the model gives none (no p99 without a closed form, no service
  estimate).
``causes`` lists the evidence for a rejection: accept-queue overflows, failed requests, a
saturated CPU with more threads than cores, the database, connection pinning, injected delay
held by a worker, GC or safepoint pauses, a saturated load generator, host noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from loadgen.floats import float_or_nan

__all__ = [
    "Sample",
    "Interval",
    "StatVerdict",
    "bootstrap",
    "band",
    "judge",
    "causes",
    "GOAL",
    "DRAWS",
]

DRAWS = 200  # bootstrap replicates
LEVEL = 0.95
GOAL = {"mean": 0.10, "p99": 0.25}  # the precision asked of the models (issue 27)
FAILED_MATTERS = 0.005  # a larger share of failed requests: the latency is the survivors'


@dataclass(frozen=True)
class Sample:
    """One trial's values [any unit] as blocks of (values, counts), in time order where the
    run kept it (one block per second); a single block is resampled value by value."""

    blocks: tuple[tuple[np.ndarray, np.ndarray], ...]

    @staticmethod
    def of_values(values: np.ndarray, block_of: np.ndarray | None = None) -> Sample:
        """From raw values; `block_of` (one label per value, e.g. the second it was sent in)
        groups them into blocks."""
        v = np.asarray(values, dtype=float)
        keep = np.isfinite(v)
        v = v[keep]
        if block_of is None:
            u, c = np.unique(v, return_counts=True)
            return Sample(((u, c),))
        b = np.asarray(block_of)[keep]
        order = np.argsort(b, kind="stable")
        b, v = b[order], v[order]
        cuts = np.flatnonzero(b[1:] != b[:-1]) + 1
        return Sample(tuple((part, np.ones(part.size)) for part in np.split(v, cuts)))


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high


RESOLUTION = 4e-3  # values are pooled into buckets this wide (relative)
MAX_BLOCKS = 120  # more blocks in a trial are merged, neighbours together


def _grid_keys(values: np.ndarray) -> np.ndarray:
    """Bucket keys of values on a log grid of relative width RESOLUTION (<= 0 -> one key)."""
    v = np.asarray(values, dtype=float)
    out = np.full(v.shape, np.iinfo(np.int64).min, dtype=np.int64)
    pos = v > 0
    out[pos] = np.round(np.log(v[pos]) / math.log1p(RESOLUTION)).astype(np.int64)
    return out


def _trial_matrix(sample: Sample, keys: np.ndarray) -> np.ndarray:
    """(blocks x keys) counts of one trial, at most MAX_BLOCKS rows."""
    blocks = sample.blocks
    groups = np.array_split(np.arange(len(blocks)), min(len(blocks), MAX_BLOCKS))
    m = np.zeros((len(groups), keys.size))
    for r, g in enumerate(groups):
        for i in g:
            v, c = blocks[i]
            np.add.at(m[r], np.searchsorted(keys, _grid_keys(v)), c)
    return m


def _replicates(m: np.ndarray, draws: int, rng) -> np.ndarray:
    """(draws x keys) resampled counts of one trial: its blocks with replacement, or its one
    block value by value (multinomially)."""
    if m.shape[0] > 1:
        picks = rng.integers(0, m.shape[0], (draws, m.shape[0]))
        weights = np.zeros((draws, m.shape[0]))
        np.add.at(weights, (np.arange(draws)[:, None], picks), 1.0)
        return weights @ m
    n = int(m[0].sum())
    return rng.multinomial(n, m[0] / n, size=draws).astype(float)


def bootstrap(
    trials: Sequence[Sample], stats: Sequence[str] = ("mean", "p99"), draws: int = DRAWS, seed=0
) -> dict[str, np.ndarray]:
    """Bootstrap replicates of each statistic (`mean`, `pNN`) of the trials pooled: resample
    the trials (when there are several), then each chosen trial's blocks (when it has
    several; a single block multinomially, value by value). Values are pooled into buckets
    RESOLUTION wide first (the bootstrap's own error is far larger). Returns
    {stat: (draws,) array}."""
    trials = [t for t in trials if t.blocks and sum(float(c.sum()) for _, c in t.blocks) > 0]
    out = {s: np.full(draws, math.nan) for s in stats}
    if not trials:
        return out
    allv = np.concatenate([v for t in trials for v, _ in t.blocks])
    keys = np.unique(_grid_keys(allv))
    with np.errstate(over="ignore"):
        grid = np.where(keys == np.iinfo(np.int64).min, 0.0, np.exp(keys * math.log1p(RESOLUTION)))
    rng = np.random.default_rng(seed)
    reps = [_replicates(_trial_matrix(t, keys), draws, rng) for t in trials]
    if len(reps) == 1:
        counts = reps[0]
    else:
        counts = np.zeros((draws, keys.size))
        picks = rng.integers(0, len(reps), (draws, len(reps)))
        for j in range(len(reps)):
            for i in range(len(reps)):
                rows = np.nonzero(picks[:, j] == i)[0]
                if rows.size:  # the j-th pick of draw b: trial i's replicate (b + j)
                    counts[rows] += reps[i][(rows + j) % draws]
    total = counts.sum(axis=1)
    ok = total > 0
    cum = np.cumsum(counts, axis=1)
    for s in stats:
        if s == "mean":
            out[s][ok] = (counts[ok] @ grid) / total[ok]
            continue
        k = np.maximum(np.ceil(_pct(s) * total), 1.0)
        idx = (cum >= k[:, None]).argmax(axis=1)
        out[s][ok] = grid[idx[ok]]
    return out


def _pct(stat: str) -> float:
    # here: stations loads the queueing models and scipy.stats, which a plain run's plots (they
    # read verdict.Sample) do without (tests/cli/test_light_commands.py)
    from .stations import percentile_of  # noqa: PLC0415  (as above)

    return percentile_of(stat) / 100.0


def interval(replicates: np.ndarray, level: float = LEVEL) -> Interval:
    """The percentile interval of bootstrap replicates (NaN ends when there are none)."""
    r = np.asarray(replicates, dtype=float)
    r = r[np.isfinite(r)]
    if r.size < 10:
        return Interval(math.nan, math.nan)
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(r, [a, 1.0 - a])
    return Interval(float(lo), float(hi))


def band(
    predict: Callable[[dict], float], params: dict[str, tuple[float, Interval]]
) -> tuple[float, Interval]:
    """The prediction at the parameters' values and its band: each parameter moved alone to
    its interval's ends (the prediction is monotone in each), the shifts on each side added
    in quadrature. A parameter end where the model has no finite answer (overload) makes that
    side infinite. params: name -> (value, interval); NaN interval ends are skipped."""
    base_args = {k: v for k, (v, _) in params.items()}
    base = predict(base_args)
    if not math.isfinite(base):
        return base, Interval(base, base)
    up = down = 0.0
    for name, (_, iv) in params.items():
        for end in (iv.low, iv.high):
            if not math.isfinite(end):
                continue
            try:
                y = predict({**base_args, name: end})
            except (ValueError, ZeroDivisionError):
                y = math.inf
            if not math.isfinite(y):
                up = math.inf
                continue
            d = y - base
            if d > 0:
                up = math.hypot(up, d) if math.isfinite(up) else up
            else:
                down = math.hypot(down, d)
    return base, Interval(base - down, base + up)


@dataclass(frozen=True)
class StatVerdict:
    """The verdict on one predicted statistic (mean or p99) of one cell."""

    stat: str
    status: str  # held | rejected | inconclusive | no prediction
    predicted_ms: float
    band_ms: Interval
    measured_ms: float
    measured_band_ms: Interval
    why: str = ""  # for rejected: what broke (outside the band, broken assumptions, failures)
    causes: tuple[str, ...] = field(default=())

    @property
    def error(self) -> float:
        if not (math.isfinite(self.predicted_ms) and self.measured_ms):
            return math.nan
        return (self.predicted_ms - self.measured_ms) / self.measured_ms

    def short(self) -> str:
        """'held', 'rejected: <the first cause>', ... for a table cell."""
        if self.status == "rejected" and self.causes:
            return f"rejected: {self.causes[0]}"
        if self.status == "rejected" and self.why:
            return f"rejected: {self.why}"
        return self.status


def judge(
    stat: str,
    predicted_ms: float,
    band_ms: Interval,
    measured_ms: float,
    measured_band_ms: Interval,
    broken: str | None = None,
    failed_share: float = 0.0,
    evidence: Sequence[str] = (),
) -> StatVerdict:
    """The verdict on one statistic (module docstring): held, rejected (with why and the
    evidence that may explain it), inconclusive or no prediction."""

    def verdict(status: str, why: str = "", found: Sequence[str] = ()) -> StatVerdict:
        return StatVerdict(
            stat, status, predicted_ms, band_ms, measured_ms, measured_band_ms, why, tuple(found)
        )

    if broken:
        found = (broken, *(e for e in evidence if e != broken))
        return verdict("rejected", "the model's assumptions do not hold", found)
    if predicted_ms == math.inf and math.isfinite(measured_ms):
        return verdict("rejected", "the model says overload (no steady state)", evidence)
    if not (math.isfinite(predicted_ms) and math.isfinite(measured_ms)):
        return verdict("no prediction")
    if failed_share > FAILED_MATTERS:
        why = (
            f"{100 * failed_share:.1f}% of requests failed: the measured latency is only "
            "the finished ones'"
        )
        return verdict("rejected", why, evidence)
    meas = measured_band_ms
    if not (math.isfinite(meas.low) and math.isfinite(meas.high)):
        meas = Interval(measured_ms, measured_ms)
    if not band_ms.overlaps(meas):
        side = "above" if predicted_ms > measured_ms else "below"
        why = f"measured {measured_ms:.3g} ms is outside the band; the model is {side} it"
        return verdict(
            "rejected", why, tuple(evidence) or ("no known cause in the run's readings",)
        )
    goal = GOAL.get(stat, GOAL["p99"])
    half = max(predicted_ms - band_ms.low, band_ms.high - predicted_ms)
    if half > goal * predicted_ms:
        return verdict("inconclusive", f"the band is wider than +-{100 * goal:.0f}%")
    half_meas = max(measured_ms - meas.low, meas.high - measured_ms)
    if half_meas > goal * measured_ms:
        return verdict(
            "inconclusive",
            f"the measurement's own interval is wider than +-{100 * goal:.0f}% "
            "(too few requests or seconds to tell)",
        )
    return verdict("held")


def causes(row, station=None, service=None) -> list[str]:
    """The evidence in a cell's readings that can make a queueing model miss, in words, most
    telling first. `row` holds the cell's configuration and its readings (means over its
    trials, sums for counters): error_rate, errors_timeout, tcp_listen_overflows,
    tcp_listen_drops, server_cpu_pct, server_cores, server_threads, connections, keepalive,
    rtt_measured_ms, rtt_expected_ms, loadgen_cpu_pct, send_lateness_p99_ms,
    latency_mean_ms, server_gc_pause_max_ms, server_gc_pause_total_ms, quiet,
    noise_reasons, db utilisation inputs."""
    out = []
    if station is not None and station.broken:
        out.append(station.broken)
    threads, cores = float_or_nan(row.get("server_threads")), float_or_nan(row.get("server_cores"))
    conns = float_or_nan(row.get("connections"))
    keep = row.get("keepalive", True)
    keep = keep if isinstance(keep, bool) else str(keep).lower() not in ("false", "0")
    failed = float_or_nan(row.get("error_rate"))
    timeouts = float_or_nan(row.get("errors_timeout"))
    if (
        (station is None or not station.pinned)
        and keep
        and conns > threads
        and (failed > FAILED_MATTERS or timeouts > 0)
        and str(row.get("server_dispatch", "")) in ("", "per_connection")
    ):
        out.append(
            f"connection pinning suspected: {conns:.0f} keep-alive connections on "
            f"{threads:.0f} threads and {100 * failed:.1f}% of requests failed"
        )
    elif failed > FAILED_MATTERS:
        kinds = f" (timeouts: {timeouts:.0f})" if timeouts > 0 else ""
        out.append(f"{100 * failed:.1f}% of requests failed{kinds}")
    over = float_or_nan(row.get("tcp_listen_overflows"))
    drops = float_or_nan(row.get("tcp_listen_drops"))
    if over > 0 or drops > 0:
        out.append(
            f"accept queue overflowed: {over:.0f} listen overflows, {drops:.0f} drops "
            "(clients retried their SYNs: seconds of delay)"
        )
    cpu = float_or_nan(row.get("server_cpu_pct"))
    if cores > 0 and cpu / 100.0 >= 0.9 * cores and threads > cores:
        out.append(
            f"CPU saturated: {cpu / 100:.2f} of {cores:.0f} core(s) busy with {threads:.0f} "
            "threads (they share the cores)"
        )
    elif cores > 0 and cpu / 100.0 >= 0.95 * cores:
        out.append(f"CPU saturated: {cpu / 100:.2f} of {cores:.0f} core(s) busy")
    if service is not None and getattr(service, "has_db", False):
        x = float_or_nan(row.get("throughput_rps"))
        c_db = float_or_nan(row.get("db_servers"))
        u = x * service.db_mean_s / c_db if c_db > 0 else math.nan
        if service.db_share > 0.3 or u > 0.7:
            out.append(
                f"the database: {100 * service.db_share:.0f}% of the service time is spent in "
                "it" + (f", its {c_db:.0f} connection(s) {100 * u:.0f}% busy" if u == u else "")
            )
    rtt = float_or_nan(row.get("rtt_measured_ms"))
    if not rtt > 0:
        rtt = float_or_nan(row.get("rtt_expected_ms"))
    if rtt > 0.5 and station is not None and station.dispatch != "event_loop":
        held = station.connections is not None and (
            station.dispatch == "per_connection" or station.connections < station.servers
        )
        if held:
            out.append(
                f"injected delay queued behind a worker: each keep-alive connection holds its "
                f"worker across the {rtt:.3g} ms round trip"
            )
    if station is not None and station.dispatch == "event_loop" and station.loops > 1:
        out.append(
            f"connections spread unevenly over the {station.loops} loops (each loop owns the "
            "connections it accepted, and one loop may accept a batch)"
        )
    gc_max = float_or_nan(row.get("server_gc_pause_max_ms"))
    gc_total = float_or_nan(row.get("server_gc_pause_total_ms"))
    if gc_max > 0:
        out.append(
            f"GC/safepoint pauses up to {gc_max:.3g} ms"
            + (f" ({gc_total:.0f} ms in all)" if gc_total > 0 else "")
        )
    lg = float_or_nan(row.get("loadgen_cpu_pct"))
    late = float_or_nan(row.get("send_lateness_p99_ms"))
    mean = float_or_nan(row.get("latency_mean_ms"))
    if lg >= 90:
        out.append(f"the load generator was saturated ({lg:.0f}% of a CPU)")
    elif late > 0 and mean > 0 and late > 0.1 * mean:
        out.append(
            f"the load generator fell behind its schedule (send lateness p99 {late:.3g} ms, "
            f"{lg:.0f}% of a CPU)"
        )
    quiet = row.get("quiet")
    if quiet is not None and str(quiet).lower() in ("false", "0"):
        reason = str(row.get("noise_reasons", "") or "").strip()
        out.append("host noise" + (f": {reason}" if reason and reason != "nan" else ""))
    return out

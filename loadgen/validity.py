"""Whether a trial's figures can be trusted: the load generator judged by what its own
imperfection could do to the figures the trial reports, and the load judged against the load
asked for.

The figures are the latency statistics of the measured window: mean, p50, p90, p99 and p99.9,
each latency measured from the request's intended send time. Each has a stated precision:
how far it may move and stay what the trial says it is. For a percentile, down to the low end
of its 95% confidence interval (distribution-free, from order statistics: stats.ci_ranks); for
the mean, 1.96 standard errors. Below PRECISION_FLOOR of the figure nothing is resolved anyway
(a trial's figures do not repeat that closely), so a shift that small is always accepted. A
figure whose sample is too small to bound it (a p99.9 of a few hundred requests) states no
precision and is not judged.

Send lateness (open and ramp load). A request sent late carries its lateness in its latency.
Had every request gone out on time, each latency would be shorter by its dispatch lateness D;
the figure recomputed that way is the on-time figure, and the shift reported - on-time must stay
within the figure's precision. Per request, D <= sent - intended, so the same statistic of
done - sent (`sent_to_done`) is never above the on-time one: reported - sent_to_done bounds the
shift, and equals it when no request waited for a free connection (a wait is also in
sent - intended: the server's own queue when it serves one connection per worker). Two more
bounds come from the dispatcher's own lateness record: no request's D exceeds its maximum, so
no figure moves further than that; and at most 1% of requests have D above its p99, so a
percentile moves at most by its distance to the percentile one point lower plus that p99, and
the mean by that p99 plus 1% of the maximum (likewise with its p99.9 and the percentile 0.1
point lower, where the dispatcher reports one: near a knee, where the p99 is 10x the p98, that
bound is the tight one). The mean's on-time figure is exact where the dispatcher reports the
mean of D (`send_lateness_mean_ms`): the mean moves by exactly that. Where the generator records each
arrival's dispatch lateness (`dispatch_late_ns`, perfctl's own generator does; the summary says
`dispatch_lateness_recorded`), the on-time figures are computed from the rows themselves and
the shift judged is the measured one; otherwise it is the smallest of these bounds
(`lateness_shift_<figure>_pct`). A 2 ms lateness then barely moves a 20 ms p99 and invalidates
a 50 us one. What the bounds read besides the figures comes from the window's HdrHistogram
(within 0.1%).

Judged by what the server saw (open load, Poisson arrivals). Where send lateness moved the
figures beyond their precision, the trial may still stand: a Poisson stream whose points are
each moved by an independent delay is a Poisson stream of the same rate (delivered.py), so the
server faced the load asked for and its latency is the on-time latency, measured from each
request's actual dispatch. The generator reports how the arrivals it sent differ from the
schedule, and each must be within its limit (`server_saw`): the inter-send times' KS distance
from the schedule's (MAX_DELIVERED_KS), the share held past a mean gap by a stall
(MAX_STALLED_PCT), and the lateness that depends on the server (later while requests are in
flight), which must not move a figure beyond its precision (a request sent later into a busy
server waits less there). Then the trial's figures are the on-time ones (`figures_from`
"send", with the reason in `figures_why`) and the intended-time ones stay beside them
(`latency_<figure>_intended_ms`). Waiting for a free connection is not dispatch lateness, so it
stays in the on-time latency: no coordinated omission. Otherwise (other arrivals, a driver that
does not report them, a limit passed) the lateness invalidates the trial as before, and the
reason says which limit failed.

Stalls (the event loop's lag, garbage-collector pauses). A stall of s ms delays the requests
sent or answered during it by at most s. GC pauses are timed exactly, and they strike requests
whatever their latency (the pause is the collector's, not the server's): the pauses touch a
share phi = (2 x rate x their total length + one per pause) / n of the requests (sends and
answers), so of the m requests within s below a percentile about phi x m can be pushed across
it, which moves it to at most the value that many ranks lower, and never by more than the
longest pause; the mean moves at most phi x s. In closed load each client has one request waiting or in
flight, and a pause stops the sends, so a pause touches at most one request per client: phi is
then at most clients x pauses / n. Both must stay within each figure's precision.
The loop-lag probe (a 10 ms timer) cannot tell a stall shorter than MAX_LOOP_LAG_P99_MS from
its own timer's resolution and overshoot; its p99 must stay within the p99's precision or that
floor, whichever is larger (in open load the send-lateness rule above sees the same stalls at
request resolution).

The load itself is judged as asked: the open load's send rate within MAX_SEND_RATE_MISS of the
target, no arrival dropped past the outstanding cap, the error rate within the experiment's
limit, and (closed load) the load generator below MAX_LOADGEN_CPU_PCT of a CPU.

Every reason ends with what the user can do about it (`Fix: ...`). Reasons never contain
"; ": a trial's reasons are joined with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .floats import float_or_nan

PRECISION_FLOOR = 0.02  # a shift below 2% of a figure is always within its precision
CONFIDENCE_Z = 1.96  # the mean's 95% interval, in standard errors
MAX_LOOP_LAG_P99_MS = 5.0  # below this the 10 ms lag probe reads its timer, not stalls
MAX_LOADGEN_CPU_PCT = 95.0
MAX_SEND_RATE_MISS = 0.01  # open mode: sends in the window vs target rate x window

FIX_PIN = "pin the load generator to a CPU of its own (placement: {loadgen_cpus: [N]})"
FIX_LATE = (
    f"Fix: {FIX_PIN}. If it stays late this host's timer is too coarse for figures this "
    "small: move hosts (perfctl calibrate measures what a host resolves)."
)
FIX_LATE_PINNED = (
    "Fix: the generator already busy-polled a CPU of its own: spread the load over more "
    "load-generator processes (load.processes) on CPUs of their own, or move hosts (perfctl "
    "calibrate measures what a host resolves)."
)
FIX_STALL = (
    f"Fix: {FIX_PIN}, or use fewer connections per load-generator process (more load.processes)."
)
FIX_JIT = (
    "Fix: a longer warm-up (load.warmup), so that the driver's JIT has compiled its hot code "
    f"before the window; else {FIX_PIN}."
)
MAX_JIT_WINDOW_SHARE = 0.03  # of the window: JIT compiling beyond this is named beside the host
FIX_CPU = (
    "Fix: add load-generator processes (load.processes) on CPUs of their own "
    "(placement: loadgen_cpus), or use fewer connections."
)
FIX_RATE = f"Fix: {FIX_PIN}, or add load-generator processes (load.processes)."
FIX_DROPPED = (
    "Fix: the server fell that far behind the rate: lower the rate, or raise "
    "load.max_outstanding to measure the backlog."
)
FIX_ERRORS = "Fix: see the trial's server.log for why the server failed them."
# what the server saw: the arrivals sent, against the schedule (delivered.py), effect sizes
MAX_DELIVERED_KS = 0.05  # inter-send times' KS distance from the schedule's
MAX_STALLED_PCT = 1.0  # arrivals dispatched more than a mean gap late


@dataclass(frozen=True)
class Figure:
    """One latency statistic of the window, in ms. rank: its 1-based order statistic among
    the n completed requests (0 for the mean)."""

    name: str  # mean | p50 | p90 | p99 | p999
    rank: int
    reported_ms: float  # from the intended send time
    sent_to_done_ms: float  # the same statistic of done - sent
    ci_low_ms: float  # low end of its 95% interval; NaN: the sample cannot bound it
    # the same statistic of the on-time latency (latency less each request's dispatch lateness),
    # where the generator recorded it (NaN: not recorded; the shift is then bounded)
    on_time_ms: float = math.nan

    @property
    def allowed_shift_ms(self) -> float:
        """How far it may move and stay within its stated precision (inf: not judged)."""
        if not (self.ci_low_ms == self.ci_low_ms and self.reported_ms == self.reported_ms):
            return math.inf
        return max(self.reported_ms - self.ci_low_ms, PRECISION_FLOOR * abs(self.reported_ms))


@dataclass(frozen=True)
class Figures:
    """The window's figures and readers of its latencies' order statistics:
    at_rank_ms(ks): the ks-th smallest latencies (1-based ranks), ms;
    count_at_or_below_ms(x): how many latencies are <= x ms."""

    n: int
    items: dict[str, Figure]
    at_rank_ms: Callable[[list[int]], list[float]]
    count_at_or_below_ms: Callable[[float], int]
    # the on-time latency's p99 CI (low, high) ms, where recorded (figures_from "send")
    on_time_p99_ci_ms: tuple[float, float] = (math.nan, math.nan)


@dataclass(frozen=True)
class Shift:
    """How far something could move one figure (ms), against how far it may (ms)."""

    figure: Figure
    shift_ms: float
    allowed_ms: float

    @property
    def pct(self) -> float:
        r = self.figure.reported_ms
        return 100.0 * self.shift_ms / r if r else math.nan

    @property
    def ratio(self) -> float:
        """shift / allowed: above 1 the figure moved beyond its precision."""
        if math.isinf(self.allowed_ms):
            return math.nan
        return self.shift_ms / self.allowed_ms if self.allowed_ms > 0 else math.inf

    @property
    def exceeds(self) -> bool:
        return self.ratio > 1.0


LATENESS_QUANTILES = ((0.01, "send_lateness_p99_ms"), (0.001, "send_lateness_p999_ms"))


def lateness_shifts(figs: Figures, summary: dict) -> list[Shift]:
    """The most send lateness can have moved each figure (see the module docstring). For each
    lateness quantile d_q the dispatcher reports (p99; p99.9 where it reports one): at most a
    share q of the requests have D > d_q, so a percentile at rank r moves at most by its
    distance to the value at rank r - ceil(q n), plus d_q."""
    d_max = float_or_nan(summary.get("send_lateness_max_ms"))
    d_p99 = float_or_nan(summary.get("send_lateness_p99_ms"))
    d_mean = float_or_nan(summary.get("send_lateness_mean_ms"))
    pct = [f for f in figs.items.values() if f.rank > 1]
    quantiles = [(q, float_or_nan(summary.get(k))) for q, k in LATENESS_QUANTILES]
    quantiles = [(q, d) for q, d in quantiles if d == d]
    below: dict[str, list[float]] = {f.name: [] for f in pct}
    for q, d_q in quantiles if pct else ():
        lower = [max(1, f.rank - math.ceil(q * figs.n)) for f in pct]
        for f, v in zip(pct, figs.at_rank_ms(lower)):
            below[f.name].append(max(0.0, f.reported_ms - v) + d_q)
    out = []
    for f in figs.items.values():
        bounds = [max(0.0, f.reported_ms - f.sent_to_done_ms)]
        if d_max == d_max:
            bounds.append(d_max)
            if f.rank == 0 and d_p99 == d_p99:  # the mean of D: at most 1% of it above p99
                bounds.append(d_p99 + 0.01 * d_max)
        if f.rank == 0 and d_mean == d_mean:  # each latency moved by at most its own D
            bounds.append(d_mean)
        bounds += below.get(f.name, [])
        if f.on_time_ms == f.on_time_ms:  # measured: the shift itself, not a bound on it
            bounds = [max(0.0, f.reported_ms - f.on_time_ms)]
        out.append(Shift(f, min(b for b in bounds if b == b), f.allowed_shift_ms))
    return out


def server_saw(summary: dict, figs: Figures) -> tuple[bool, str]:
    """Whether the arrivals sent were the Poisson load asked for, displaced by lateness that
    did not depend on the server: (True, what was measured) or (False, the limit passed, or
    why it cannot be told). The server-dependent lateness (delivered.py) is held against
    each figure's precision: a request sent that much later into a busy server waits about
    that much less. The mean moves by that times the share of busy arrivals b; a percentile
    q by that times the share of busy ones among the 1 - q above it, at most b / (1 - q)
    (to first order: only that share of the requests around it moved)."""
    if summary.get("arrivals") != "poisson":
        return False, "only a Poisson schedule stays itself under independent delays"
    ks = float_or_nan(summary.get("delivered_ks"))
    stalled = float_or_nan(summary.get("delivered_stalled_pct"))
    dep = float_or_nan(summary.get("lateness_backlog_ms"))
    busy = float_or_nan(summary.get("backlog_busy_share"))
    if not (ks == ks and stalled == stalled and dep == dep and busy == busy):
        return False, "the generator did not report the arrivals it sent (or too few to judge)"
    tail = {"mean": 1.0, "p50": 0.5, "p90": 0.1, "p99": 0.01, "p999": 0.001}
    moved = [
        Shift(f, dep * min(1.0, busy / tail.get(f.name, 1.0)), f.allowed_shift_ms)
        for f in figs.items.values()
    ]
    worst = max(moved, key=lambda m: m.ratio if m.ratio == m.ratio else 0.0)
    share = f", {100 * worst.ratio:.0f}% of the {_label(worst.figure.name)}'s precision"
    measured = (
        f"inter-send KS distance {ks:.3f} (limit {MAX_DELIVERED_KS:g}), "
        f"{stalled:.2f}% held past a mean gap (limit {MAX_STALLED_PCT:g}%), "
        f"{1e3 * dep:.1f} us later with the server busy"
        + (share if worst.ratio == worst.ratio else "")
    )
    failed = []
    if ks > MAX_DELIVERED_KS:
        failed.append("the spacing of the sends changed")
    if stalled > MAX_STALLED_PCT:
        failed.append("stalls sent arrivals in bunches")
    if any(m.exceeds for m in moved):
        failed.append("the lateness followed the server's backlog")
    if failed:
        return False, f"{' and '.join(failed)}: {measured}"
    return True, measured


def figures_source(figs: Figures | None, summary: dict, mode: str) -> tuple[str, str]:
    """Which figures the trial reports ("intended" | "send") and why. "send" where open
    load's send lateness moved a figure beyond its precision, every figure has its on-time
    value, and the server saw the load asked for (server_saw)."""
    if mode != "open" or figs is None or figs.n == 0:
        return "intended", ""
    shifts = lateness_shifts(figs, summary)
    if not any(s.exceeds for s in shifts):
        return "intended", ""
    if any(f.on_time_ms != f.on_time_ms for f in figs.items.values()):
        return "intended", "the generator did not record each request's dispatch lateness"
    ok, why = server_saw(summary, figs)
    if not ok:
        return "intended", why
    worst = max(shifts, key=lambda s: s.ratio if s.ratio == s.ratio else 0.0)
    late = float_or_nan(summary.get("send_lateness_p99_ms"))
    return "send", (
        f"figures from each request's actual send: the generator's lateness (p99 "
        f"{late:.2f} ms) moved the {_label(worst.figure.name)} by {worst.pct:.1f}%, but it did "
        f"not depend on the server and the server saw the Poisson arrivals asked for ({why})"
    )


def gc_shifts(
    figs: Figures, summary: dict, rate_rps: float, clients: int | None = None
) -> list[Shift]:
    """The most the load generator's GC pauses can have moved each figure. A driver that
    reports only its longest pause is judged as if the pauses had touched every request.
    clients: closed load's clients, each with one request waiting or in flight at a time, so
    a pause touches at most that many (it stops the sends, so none arrive during it)."""
    longest = float_or_nan(summary.get("gc_pause_max_ms"))
    if not longest > 0 or figs.n == 0:
        return []
    total, pauses = (
        float_or_nan(summary.get("gc_pause_total_ms")),
        float_or_nan(summary.get("gc_pauses")),
    )
    if total == total and rate_rps == rate_rps:
        touched = 2 * rate_rps * total / 1e3 + (pauses if pauses == pauses else 1.0)
        if clients and pauses == pauses:
            touched = min(touched, clients * pauses)
        share = min(1.0, touched / figs.n)
    else:
        share = 1.0
    out = []
    for f in figs.items.values():
        if f.rank == 0:
            out.append(Shift(f, share * longest, f.allowed_shift_ms))
            continue
        near = f.rank - figs.count_at_or_below_ms(f.reported_ms - longest)
        crossing = min(f.rank - 1, math.ceil(share * max(0, near)))
        lower = figs.at_rank_ms([f.rank - crossing])[0] if crossing else f.reported_ms
        out.append(Shift(f, min(longest, max(0.0, f.reported_ms - lower)), f.allowed_shift_ms))
    return out


def shift_columns(figs: Figures | None, summary: dict, mode: str) -> dict:
    """trials.csv's lateness_shift_<figure>_pct (how far send lateness can have moved each
    figure, % of it) and lateness_shift_of_precision (the largest shift as a share of its
    figure's precision: above 1 the trial is invalid); NaN outside open load."""
    names = ("mean", "p50", "p90", "p99", "p999")
    out = {f"lateness_shift_{k}_pct": math.nan for k in names}
    out["lateness_shift_of_precision"] = math.nan
    if mode != "open" or figs is None or figs.n == 0:
        return out
    shifts = lateness_shifts(figs, summary)
    for s in shifts:
        out[f"lateness_shift_{s.figure.name}_pct"] = s.pct
    ratios = [s.ratio for s in shifts if s.ratio == s.ratio]
    out["lateness_shift_of_precision"] = max(ratios) if ratios else math.nan
    return out


def _label(name: str) -> str:
    return "p99.9" if name == "p999" else name


def _moved(shifts: list[Shift], what: str) -> str:
    """'<what> moved the p99 latency by up to 12.3% (0.45 of 3.66 ms), more than its
    precision of 3.1% (...)', about the figure moved furthest past its precision, naming
    the others."""
    bad = sorted((s for s in shifts if s.exceeds), key=lambda s: -s.ratio)
    worst = bad[0]
    f = worst.figure
    also = f", and the {', '.join(_label(s.figure.name) for s in bad[1:])} too" if bad[1:] else ""
    # the latencies are whole ns: the text reads the figures to the ns, so that the rows in
    # memory and the streamed digest, whose float sums differ in the last bits, say the same
    # (a 4005 ns shift otherwise read 0.004 one way and 0.00401 the other)
    shift, reported, allowed = (
        round(v, 6) for v in (worst.shift_ms, f.reported_ms, worst.allowed_ms)
    )
    return (
        f"{what} moved the {_label(f.name)} latency by up to {100 * shift / reported:.1f}% "
        f"({shift:.3g} of {reported:.3g} ms), more than its precision of "
        f"{100 * allowed / reported:.1f}% (its 95% interval, at least "
        f"{100 * PRECISION_FLOOR:g}%){also}"
    )


def send_rate_miss(sent: int, target_rate_rps: float, duration_s: float) -> str:
    """Why the sends in the window miss target x window by more than MAX_SEND_RATE_MISS
    (or half an arrival, the rounding of the schedule's count); "" when they do not."""
    expected = target_rate_rps * duration_s
    if expected <= 0 or abs(sent - expected) <= max(MAX_SEND_RATE_MISS * expected, 0.5):
        return ""
    return (
        f"achieved send rate {sent / duration_s:.1f}/s misses the target "
        f"{target_rate_rps:g}/s by {100 * (sent - expected) / expected:+.1f}% "
        f"(limit ±{100 * MAX_SEND_RATE_MISS:g}%). {FIX_RATE}"
    )


def jit_in_window(summary: dict) -> str:
    """What may have made a driver on a JIT runtime late, when its compiler was still busy in
    the window: "its JIT still compiled for 412 ms of the 3.0 s window (warm-up: 2318 ms)"; ""
    otherwise. A driver reports `jit_compile_ms` (its compiler threads' time in the window and
    the drain after it) and `warmup_jit_compile_ms` (loadgen/DRIVER.md). Compiling on the
    driver's pinned core takes it from the clients and the lag ticker alike, so a warm-up too
    short for the JIT shows up as lag; the host may have been busy as well, so the reason names
    the JIT beside the host, not instead of it."""
    jit = float_or_nan(summary.get("jit_compile_ms"))
    window_s = (
        float_or_nan(summary.get("measure_end_ns")) - float_or_nan(summary.get("measure_start_ns"))
    ) / 1e9
    if not (jit == jit and window_s > 0 and jit > MAX_JIT_WINDOW_SHARE * window_s * 1e3):
        return ""
    warm = float_or_nan(summary.get("warmup_jit_compile_ms"))
    warm_text = f" (warm-up: {warm:.0f} ms)" if warm == warm else ""
    return f"its JIT still compiled for {jit:.0f} ms of the {window_s:.1f} s window{warm_text}"


def error_breakdown(row: dict) -> str:
    """The error classes that occurred, e.g. "refused 1142, http 3"."""
    parts = [f"{k[len('errors_') :]} {row[k]}" for k in row if k.startswith("errors_") and row[k]]
    return ", ".join(parts)


def verdict(
    row: dict,
    summary: dict,
    mode: str,
    figs: Figures | None = None,
    sent: int | None = None,
    duration_s: float | None = None,
    max_error_rate: float | None = None,
    clients: int | None = None,
    source: tuple[str, str] = ("intended", ""),
) -> list[str]:
    """Why this trial cannot be trusted (empty list: it can). row: the trial's counts and
    figures (stats.window_row); figs: its figures for the shift rules (None: none judged);
    clients: closed load's clients (gc_shifts); source: figures_source's answer (figures
    from the send are not moved by the lateness)."""
    reasons = []
    if row["completed"] == 0 and mode != "burst":
        reasons.append("no request completed in the measured window")
    rate = row.get("error_rate")
    if max_error_rate is not None and rate == rate and rate is not None and rate > max_error_rate:
        reasons.append(
            f"error rate {100 * rate:.2f}% > {100 * max_error_rate:g}% "
            f"({error_breakdown(row)}): the server failed requests "
            f"(validity.max_error_rate). {FIX_ERRORS}"
        )
    judged = figs is not None and figs.n > 0
    if mode == "open":
        target = row.get("target_rate") or 0.0
        if sent is not None and duration_s and target > 0:
            miss = send_rate_miss(sent, target, duration_s)
            if miss:
                reasons.append(miss)
        if row["dropped"]:
            reasons.append(
                f"{row['dropped']} arrivals dropped past the outstanding-request cap. {FIX_DROPPED}"
            )
        if judged:
            shifts = lateness_shifts(figs, summary)
            if source[0] != "send" and any(s.exceeds for s in shifts):
                late = float_or_nan(summary.get("send_lateness_p99_ms"))
                unseen = f" (not judged by what the server saw: {source[1]})" if source[1] else ""
                fix = FIX_LATE_PINNED if summary.get("send_busy_poll") else FIX_LATE
                reasons.append(
                    _moved(shifts, f"send lateness (p99 {late:.2f} ms)")
                    + f": the load generator fell behind its schedule{unseen}. {fix}"
                )
    # Burst mode stalls the loop on purpose while it opens N sockets in one release; how far
    # apart the releases really were is reported (release_spread_ms_max) instead.
    lag = float_or_nan(summary.get("loop_lag_p99_ms"))
    p99 = figs.items.get("p99") if judged else None
    p99_allowed = p99.allowed_shift_ms if p99 is not None else math.inf
    lag_limit = max(MAX_LOOP_LAG_P99_MS, p99_allowed if math.isfinite(p99_allowed) else 0.0)
    if mode != "burst" and lag > lag_limit:
        head = (
            f"load-generator event-loop lag p99 {lag:.1f} ms > {lag_limit:.1f} ms (the p99 "
            f"latency's precision, at least {MAX_LOOP_LAG_P99_MS:g} ms)"
        )
        jit = jit_in_window(summary)
        if jit:
            reasons.append(f"{head}: {jit}, or the host was busy. {FIX_JIT}")
        else:
            reasons.append(f"{head}: host busy or load generator saturated. {FIX_STALL}")
    if judged:
        rate_rps = row.get("achieved_rate")
        gc = gc_shifts(
            figs,
            summary,
            rate_rps if rate_rps is not None else math.nan,
            clients if mode == "closed" else None,
        )
        if any(s.exceeds for s in gc):
            longest = float_or_nan(summary.get("gc_pause_max_ms"))
            reasons.append(
                _moved(gc, f"load-generator GC pauses (longest {longest:.1f} ms)")
                + f". {FIX_STALL}"
            )
    # In open mode the dispatcher polls between close arrivals, so CPU says little there;
    # send lateness above is the direct measure. In closed mode CPU is the only witness.
    if mode == "closed" and float_or_nan(summary.get("loadgen_cpu_pct")) > MAX_LOADGEN_CPU_PCT:
        reasons.append(
            f"load-generator CPU {summary['loadgen_cpu_pct']:.0f}% > {MAX_LOADGEN_CPU_PCT:g}% "
            f"of a CPU: it may be the bottleneck. {FIX_CPU}"
        )
    return reasons

"""The capacity and its interval from the probes at the knee, and where the next probe goes.

Pure functions of the probes' measurements and the fitted station (models/stations.py); no I/O.

What is estimated. At a load level x (an arrival rate, or a number of users) one trial's
latency statistic P(x) (its p99, say) varies from trial to trial. x meets the SLO when the
MEDIAN trial's statistic m(x) is at most the limit L (and errors are within theirs); the
capacity is the largest such x, C = m^-1(L).

How. The fitted station gives the shape of the curve, g(x) (its predicted statistic at x); the
measured curve is taken to be that shape stretched along the load axis, m(x) = g(k x), with k
unknown (k = 1 when the model is exact). Under that, one probe at x_i measuring P_i gives its
own estimate of the capacity,

    C_i = x_i g^-1(L) / g^-1(P_i)

and each C_i has median exactly C, whatever x_i: the model only carries each probe's
measurement along the curve to the SLO, and the closer x_i is to C the less it matters.
The stretch moves the curve's saturation too, to x_max / k; when the saturation was measured
and a probe measured so far below the model that its C_i reaches it (no queue meets an SLO
there), the stretch is refuted for it, and the probe is carried by the latency's ratio
instead, keeping the saturation: m(x) = g(x) P_i / g(x_i), C_i = g^-1(L g(x_i) / P_i).
(A Java pool on one core, its near-constant service time far flatter than the model's
exponential, measured 2.49 ms at half its saturation against the model's 5 ms: stretched, an
estimate of 1.85x the saturation; the next probe went to 98% of it and overloaded.)
Trial-to-trial noise in ln P_i becomes noise in ln C_i divided by the curve's elasticity
e_i = dln g / dln x at the probe (the knee is steep, so a 10% error in a p99 is a few per cent
of load). A trial's p99 is itself noisier where the curve is steeper (the queue's bursts last
longer): on the reference M/M/4, var(ln P) grows as about e^1.3, so var(ln C_i) falls only
slowly with e. The weights take var(ln C_i) = s^2 / w_i with w_i = sqrt(e_i) (var(ln P)
growing as e^1.5, a little faster than measured: it errs towards equal weights), plus, for a
probe far from the knee, the error a wrong curve shape leaves, (SHAPE_ERROR ln(x_i / C))^2:

    ln C^ = sum w_i ln C_i / sum w_i
    s^2   = max( sum w_i (ln C_i - ln C^)^2 / (n - 1),   within-trial floor )
    interval = C^ exp(-+ t(n-1) s / sqrt(sum w_i))

The first term of s^2 is the probes' own scatter (it holds every source of trial-to-trial
noise); the second is a floor from inside each trial, the variance of the log of its
per-second p99 divided by its number of seconds (batch means) and by e_i^1.5, so that two
probes that agree by luck do not make a narrow interval. t(n-1) is Student's quantile for the
confidence asked for, so the interval is exact when ln C_i is normal with those variances. On
the simulated M/M/4 (tests/search/search_sim.py, 6 knee probes of 5 s) the interval's
standard errors average 1.97% against a spread of 2.09% of the estimates over 80 searches.

Where the next probe goes: where it shrinks the interval most. For each candidate level x
near C^ the expected half-width after a probe there is t s / sqrt(sum w + w(x)) together with
the bias a wrong curve shape leaves, SHAPE_ERROR x the weighted mean of ln(x_j / C^) over the
probes with it (a C_i is off by about (1 - e_true / e_model) ln(x_i / C) when the shape is
wrong, and probes on both sides of C cancel). The candidate with the smallest sum of squares
wins: near C^, on the side that balances the probes so far, and never where the calibrated
model expects more than FAR_SLO x the limit (a trial's p99 gets noisy fast past the knee).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy import optimize
from scipy import stats as sstats

from models.stations import Station, rate_for_slo

SHAPE_ERROR = 0.3  # assumed |1 - e_true / e_model|: how wrong the model's steepness may be
MIN_ELASTICITY = 0.05  # a probe on the flat part of the curve: at least this steep
DEFAULT_LOG_SD = 0.15  # var(ln P) before any probe measured it (typical p99 of a 5 s trial)
CANDIDATES = 41  # levels tried when placing a probe
MAX_SPAN = 0.10  # candidates within +-10% of the estimate
MIN_SPAN = 0.02
FAR_SLO = 1.5  # knee probes go where the model expects at most this x the SLO
# a probe measured above this x the SLO is carried to it from this x the SLO: that far up the
# curve the model's shape says little (a stall in one trial, not the knee), one such probe
# should not drag the estimate, and inverting a processor-sharing model there (rho > 0.99)
# took minutes: a Java pool probe's p99 of 236 ms against a 5 ms SLO hung the search's result
FAR_INVERT = 4.0
# what a model that cannot be evaluated raises (math overflow, a domain error): the cell's
# search gives up and says so rather than end the run with a traceback
MODEL_ERRORS = (ArithmeticError, ValueError)


@dataclass(frozen=True)
class Curve:
    """The fitted model's statistic (seconds) against the load level: open (`think_s` None):
    the station at an arrival rate; closed: n users thinking think_s, by exact MVA (the mean;
    a percentile is the MVA mean times the open station's percentile-to-mean ratio at the MVA
    throughput, an approximation that keeps the mean exact)."""

    station: Station
    stat: str
    think_s: float | None = None
    # the station's saturation is a measured one (the search's saturation probe, or what an
    # overloaded probe completed), not only the model's: no capacity reaches it
    measured_max: bool = False

    @property
    def closed(self) -> bool:
        return self.think_s is not None

    @cached_property
    def level_max(self) -> float:
        """The highest level the curve is defined to: the station's saturation rate (open), or
        well past the users at which the closed loop saturates."""
        st = self.station
        if not self.closed:
            return st.max_rate()
        n_star = (st.mean_service_s + st.overhead_s + self.think_s) * st.max_rate()
        return float(min(100_000, math.ceil(4 * n_star) + 64))

    @cached_property
    def _mva(self):
        return self.station.closed(int(self.level_max), self.think_s)

    def latency_s(self, level: float) -> float:
        """The statistic at a level (inf at or past an open station's saturation)."""
        st = self.station
        if not self.closed:
            if level >= st.max_rate():
                return math.inf
            return st.latency_s(max(level, st.max_rate() * 1e-9), self.stat)
        n = np.clip(level, 1.0, self.level_max)
        users = self._mva.users.astype(float)
        mean = float(np.interp(n, users, self._mva.response_time))
        if self.stat == "mean":
            return mean
        x = min(float(np.interp(n, users, self._mva.throughput)), st.max_rate() * (1 - 1e-6))
        return mean * st.latency_s(x, self.stat) / st.latency_s(x, "mean")

    def level_for(self, latency_s: float) -> float:
        """The level at which the statistic is latency_s; NaN when latency_s is below the
        unloaded one (the curve never goes that low)."""
        if not (latency_s > 0):
            return math.nan
        if not self.closed:
            r = rate_for_slo(self.station, self.stat, latency_s)
            return r if r > 0 else math.nan
        lo, hi = 1.0, self.level_max
        if self.latency_s(lo) > latency_s:
            return math.nan
        if self.latency_s(hi) <= latency_s:
            return hi
        return float(optimize.brentq(lambda n: self.latency_s(n) - latency_s, lo, hi, xtol=1e-6))

    def elasticity(self, level: float) -> float:
        """dln g / dln x at a level (numerically, +-1%), at least MIN_ELASTICITY."""
        h = 0.01
        hi = level * (1 + h)
        if hi >= self.level_max:
            hi, lo = self.level_max * (1 - 1e-6), level * (1 - 2 * h)
        else:
            lo = level * (1 - h)
        a, b = self.latency_s(lo), self.latency_s(hi)
        if not (math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0 and hi > lo):
            return MIN_ELASTICITY
        return max(MIN_ELASTICITY, math.log(b / a) / math.log(hi / lo))


@dataclass(frozen=True)
class Point:
    """One usable probe at the knee: its level, its statistic (s) and the within-trial
    variance of ln(statistic) (NaN: unknown)."""

    level: float
    latency_s: float
    within_var: float = math.nan


@dataclass
class Estimate:
    """The capacity (NaN without a usable probe), its interval (NaN without two), and how."""

    capacity: float = math.nan
    low: float = math.nan
    high: float = math.nan
    confidence: float = 0.95
    n: int = 0
    df: int = 0
    log_sd: float = math.nan  # s: the spread of ln P per probe
    log_se: float = math.nan  # of ln C^
    each: list[float] = field(default_factory=list)  # C_i per point (NaN: not extrapolable)
    weights: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def half_width(self) -> float:
        """Relative: (high - low) / 2 / capacity (NaN without an interval)."""
        if not (self.capacity > 0 and math.isfinite(self.low) and math.isfinite(self.high)):
            return math.nan
        return (self.high - self.low) / 2 / self.capacity


def within_variance(seconds) -> float:
    """Batch means: var(ln x) over the window's seconds / their number (NaN under 2)."""
    x = np.asarray(seconds, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    if x.size < 2:
        return math.nan
    return float(np.var(np.log(x), ddof=1) / x.size)


def estimate(
    points: list[Point], curve: Curve, slo_s: float, confidence: float, upper: float = math.inf
) -> Estimate:
    """The capacity and its interval (module docstring). upper: the lowest level known to
    fail the SLO by other evidence (errors, an overloaded probe); the interval stops there."""
    out = Estimate(confidence=confidence)
    target = curve.level_for(slo_s)
    logs, weights, within, levels = [], [], [], []
    far = scaled = 0
    for p in points:
        far += p.latency_s > FAR_INVERT * slo_s
        at = curve.level_for(min(p.latency_s, FAR_INVERT * slo_s))
        c_i = p.level * target / at if at > 0 and target > 0 else math.nan
        e = curve.elasticity(at) if math.isfinite(c_i) else math.nan
        if (
            math.isfinite(c_i)
            and curve.measured_max
            and not curve.closed
            and c_i >= curve.level_max
        ):
            # the stretched curve would saturate past the measured saturation, which no queue
            # does: the probe refutes the stretch (the server is far faster than the model at
            # that load, a flatter curve), so it is carried by the latency's ratio instead
            c_i, e = _scaled(p, curve, slo_s)
            scaled += math.isfinite(c_i)
        out.each.append(c_i)
        if not math.isfinite(c_i):
            out.weights.append(0.0)
            continue
        out.weights.append(math.sqrt(e))
        logs.append(math.log(c_i))
        levels.append(p.level)
        weights.append(math.sqrt(e))
        if math.isfinite(p.within_var):
            within.append(p.within_var / e**1.5)  # var(ln P_i) = s^2 e_i^1.5
    if far:
        out.notes.append(
            f"{far} probe(s) measured above {FAR_INVERT:g}x the SLO: carried to it from "
            f"{FAR_INVERT:g}x (that far up the curve the model's shape says little)"
        )
    if scaled:
        out.notes.append(
            f"{scaled} probe(s) measured so far below the model that stretching its curve "
            "would put the SLO past the measured saturation: carried by the ratio of measured "
            "to predicted latency instead (the saturation kept)"
        )
    skipped = len(points) - len(logs)
    if skipped:
        out.notes.append(
            f"{skipped} probe(s) measured below the model's unloaded latency: not extrapolated"
        )
    n = len(logs)
    out.n = n
    if n == 0:
        return out
    lw, w0 = np.asarray(logs), np.asarray(weights)
    centre = float(np.sum(w0 * lw) / np.sum(w0))
    # a probe far from the knee also carries the model's shape error: var(ln C_i) = s^2 / w_i
    # + (SHAPE_ERROR ln(x_i / C))^2, with s at its prior DEFAULT_LOG_SD to fix the weights
    bias = SHAPE_ERROR * np.log(np.asarray(levels) / math.exp(centre))
    w = w0 / (1 + w0 * bias**2 / DEFAULT_LOG_SD**2)
    centre = float(np.sum(w * lw) / np.sum(w))
    out.capacity = math.exp(centre)
    it = iter(w)
    out.weights = [float(next(it)) if x > 0 else 0.0 for x in out.weights]
    if n >= 2:
        between = float(np.sum(w * (lw - centre) ** 2) / (n - 1))
        floor = float(np.mean(within)) if within else 0.0
        out.log_sd = math.sqrt(max(between, floor))
        out.log_se = out.log_sd / math.sqrt(float(np.sum(w)))
        out.df = n - 1
        t = float(sstats.t.ppf((1 + confidence) / 2, n - 1))
        out.low = out.capacity * math.exp(-t * out.log_se)
        out.high = out.capacity * math.exp(t * out.log_se)
    if out.capacity > upper:
        out.notes.append(
            f"the probes' estimate {out.capacity:.4g} is above {upper:.4g}, a level already "
            "seen to fail the SLO (errors or overload): capped there"
        )
        out.capacity = upper
    if math.isfinite(out.high) and out.high > upper:
        out.high = upper
        out.low = min(out.low, upper)
    return out


def _scaled(p: Point, curve: Curve, slo_s: float) -> tuple[float, float]:
    """A probe's capacity when the curve keeps its saturation and its latency is scaled by
    the probe's measured / predicted ratio: the level where g(x) = slo P(x_i) / g(x_i); and
    the curve's elasticity there (the SLO's noise is carried by the slope at the capacity)."""
    g = curve.latency_s(p.level)
    if not (math.isfinite(g) and g > 0 and p.latency_s > 0):
        return math.nan, math.nan
    c = curve.level_for(slo_s * g / p.latency_s)
    if not c > 0:
        return math.nan, math.nan
    return c, curve.elasticity(c)


def next_level(
    points: list[Point], curve: Curve, slo_s: float, est: Estimate, upper: float = math.inf
) -> float:
    """Where the next probe at the knee goes (module docstring): the model's answer before
    any probe, then the candidate that shrinks the expected interval most. Never at or past
    the station's saturation or a level known to fail."""
    cap = min(upper, curve.level_max) * (0.98 if not curve.closed else 1.0)
    target = curve.level_for(slo_s)
    if not points or not (est.capacity > 0):
        guess = target if target > 0 else 0.5 * curve.level_max
        return _level(min(guess, cap), curve)
    centre = est.capacity
    # nowhere the calibrated model expects the statistic above FAR_SLO x the SLO: the noise
    # of a trial's p99 grows fast past the knee, and so does the risk of an overload
    far = curve.level_for(FAR_SLO * slo_s)
    if target > 0 and far > 0:
        cap = min(cap, centre * far / target)
    half = est.half_width
    span = min(MAX_SPAN, max(MIN_SPAN, half if math.isfinite(half) else 0.05))
    var = est.log_sd**2 if math.isfinite(est.log_sd) else DEFAULT_LOG_SD**2
    used = [
        (p.level, w)
        for p, w, c in zip(points, est.weights, est.each, strict=True)
        if w > 0 and math.isfinite(c)
    ]
    sum_w = sum(w for _, w in used)
    offset = sum(w * math.log(x / centre) for x, w in used)
    best, best_score = centre, math.inf
    for u in np.linspace(-1.0, 1.0, CANDIDATES):
        x = centre * (1 + span * u)
        if x >= cap or x <= 0:
            continue
        w_x = math.sqrt(curve.elasticity(x * target / centre) if target > 0 else MIN_ELASTICITY)
        total = sum_w + w_x
        bias = SHAPE_ERROR * (offset + w_x * math.log(x / centre)) / total
        score = var / total + bias**2
        if score < best_score:
            best, best_score = x, score
    return _level(min(best, cap), curve)


def _level(x: float, curve: Curve) -> float:
    """A level as probed: users are whole (at least 1); a rate is kept to 4 digits."""
    if curve.closed:
        return float(max(1, round(x)))
    return float(f"{x:.4g}")

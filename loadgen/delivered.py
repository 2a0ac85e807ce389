"""The arrivals the server was actually sent, against the schedule: whether an open-load trial
may be judged by what the server saw.

A Poisson stream whose points are each moved by an independent delay is still a Poisson
stream of the same rate (the displacement theorem). So send lateness that does not depend on
the server (the host's timer, a generator preempted by something else) leaves the server
facing exactly the load asked for, and its latency is then measured from each request's
actual send: the on-time figures (validity.py). Lateness that does depend on the server does
not qualify: a generator that falls behind while many requests are in flight (it shares a CPU
with a busy server, or its own answers hold it up) sends fewer arrivals exactly when the
server is busiest, and a stall sends the arrivals it held up in one bunch.

What the dispatcher records here, for the measured window's dispatched arrivals in the order
it sent them (each its intended instant s, its lateness D and the requests in flight or
queued at its dispatch, q):
- the gaps between intended instants and between actual dispatches (s + D), in two
  HdrHistograms: their two-sample Kolmogorov-Smirnov distance (`delivered_ks`) is how far the
  delays changed the spacing of the arrivals; a displacement small against the gaps, or a
  large independent one, leaves it near the sampling noise of ~1/sqrt(n);
- the share of arrivals dispatched later than the mean gap (`delivered_stalled_pct`): held up
  by a stall, they went out in a bunch with the ones after them;
- the lateness that depends on the server: the mean of D (clipped at a tenth of the mean gap,
  so that a few stalls do not decide it; those are the stall share's) over dispatches with a
  request in flight or queued, less its mean over those with none, less two standard errors
  of that difference (`lateness_backlog_ms`: what the window shows beyond its noise),
  and the share of dispatches with one (`backlog_busy_share`). A generator that shares a CPU
  with a busy server, or answers responses between sends, is later while the server is busy,
  and a request sent later into a busy server waits less there: validity.server_saw holds
  that difference against each figure's precision. (A correlation would not do: a pinned
  generator answering responses is a few microseconds later with more in flight, r 0.3-0.65
  measured, which nothing at these figures' scale notices.)
Each is an effect size with a fixed limit (validity.py), not a p-value, which any window of
100,000 arrivals fails. Lateness from waiting for a free connection is not D (the row's
dispatch_late_ns leaves it out), so it stays inside the latency: no coordinated omission.
"""

from __future__ import annotations

import math

import numpy as np

from . import hdr


class Delivered:
    """Accumulates the window's dispatched arrivals, a batch at a time, in dispatch order.
    mean_gap_ns: the schedule's mean spacing for this process (1e9 x shards / rate)."""

    def __init__(self, mean_gap_ns: float) -> None:
        self.mean_gap_ns = float(mean_gap_ns)
        self.intended_gaps = hdr.new()
        self.delivered_gaps = hdr.new()
        self._last: tuple[int, int] | None = None  # the previous arrival's (s, s + D)
        self.n = 0
        self.stalled = 0  # dispatched later than the mean gap
        # D clipped at a tenth of the mean gap: (count, sum) with nothing in flight, and with
        self._idle = [0, 0.0, 0.0]  # count, sum, sum of squares
        self._busy = [0, 0.0, 0.0]

    def add(self, sched_ns: np.ndarray, late_ns: np.ndarray, queued: np.ndarray) -> None:
        """A batch of dispatched window arrivals: intended instants, lateness, in flight."""
        if not len(sched_ns):
            return
        s = sched_ns.astype(np.int64)
        a = s + late_ns.astype(np.int64)
        if self._last is not None:
            s = np.concatenate(([self._last[0]], s))
            a = np.concatenate(([self._last[1]], a))
        if len(s) > 1:
            hdr.record(self.intended_gaps, np.diff(s))
            hdr.record(self.delivered_gaps, np.maximum(np.diff(a), 0))
        self._last = (int(s[-1]), int(a[-1]))
        self.n += len(sched_ns)
        if self.mean_gap_ns > 0:
            self.stalled += int(np.count_nonzero(late_ns > self.mean_gap_ns))
        x = np.minimum(late_ns.astype(np.float64), BACKLOG_CLIP * self.mean_gap_ns)
        busy = queued > 0
        for acc, xs in ((self._busy, x[busy]), (self._idle, x[~busy])):
            acc[0] += int(xs.size)
            acc[1] += float(xs.sum())
            acc[2] += float((xs * xs).sum())

    def summary(self) -> dict:
        """delivered_ks, delivered_stalled_pct, lateness_backlog_ms, backlog_busy_share and
        delivered_arrivals
        (None where fewer than MIN_ARRIVALS were sent: not judged)."""
        out = {
            "delivered_arrivals": self.n,
            "delivered_ks": None,
            "delivered_stalled_pct": None,
            "lateness_backlog_ms": None,
            "backlog_busy_share": None,
        }
        if self.intended_gaps.total_count < MIN_ARRIVALS or self.mean_gap_ns <= 0:
            return out
        out["delivered_ks"] = ks_distance(self.intended_gaps, self.delivered_gaps)
        out["delivered_stalled_pct"] = 100.0 * self.stalled / self.n
        nb, ni = self._busy[0], self._idle[0]
        out["backlog_busy_share"] = nb / self.n
        # all busy or all idle: nothing to tell the two apart by, and no server-made difference
        dep = 0.0
        if nb > 1 and ni > 1:
            (mb, vb), (mi, vi) = _mean_var(self._busy), _mean_var(self._idle)
            # what the window shows beyond its own noise: the difference less two standard
            # errors (a few dozen busy dispatches and one stall would otherwise decide it)
            dep = mb - mi - 2.0 * math.sqrt(vb / nb + vi / ni)
        out["lateness_backlog_ms"] = max(0.0, dep) / 1e6
        return out


BACKLOG_CLIP = 0.1  # of the mean gap: lateness past it is a stall's, judged by the stall share
MIN_ARRIVALS = 200  # fewer gaps than this: the spacing is not judged (and not trusted)


def ks_distance(a, b) -> float:
    """The two-sample Kolmogorov-Smirnov distance of two HdrHistograms (same layout): the
    largest gap between their empirical CDFs, read at every bucket (within a bucket's width,
    0.1% of its value)."""
    ca, cb = hdr.counts(a).astype(np.float64), hdr.counts(b).astype(np.float64)
    n = max(len(ca), len(cb))
    ca, cb = np.pad(ca, (0, n - len(ca))), np.pad(cb, (0, n - len(cb)))
    if ca.sum() == 0 or cb.sum() == 0:
        return math.nan
    return float(np.max(np.abs(np.cumsum(ca) / ca.sum() - np.cumsum(cb) / cb.sum())))


def _mean_var(acc: list) -> tuple[float, float]:
    n, total, squares = acc
    mean = total / n
    return mean, max(0.0, squares / n - mean * mean) * n / (n - 1)

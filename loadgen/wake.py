"""When to wake before a timed send, so a send is on time on a host whose timer is slow.

An open-loop arrival must leave at its intended instant. The generator's timer is a timerfd
(hosttimer.py: nanosecond instants, never early) where the host has one, else the event
loop's own timers, which are coarse (libuv rounds to milliseconds and may fire up to a tick
early). Either way the host adds its own wake-up delay: on a quiet bare host tens of
microseconds, on a cloud vCPU woken from halt up to a few milliseconds at the 99th
percentile. So the loop aims its timer `early_ns` before the instant and polls (call_soon,
serving I/O in between) for the last stretch, never sending early.

`early_ns` follows the ~99th percentile of how late the timer actually fires against what it
was aimed at (a stochastic-approximation quantile: up 99 steps on a late wake, down one step
on a wake in time), between a floor and EARLY_MAX_NS, starting at EARLY_START_NS (or the
host's measured timer lateness, when the orchestrator measured it before the run). The same
rule as the latency proxy's release timer (orchestrator/netem/proxy/proxy.c). The floor is
EARLY_MIN_PRECISE_NS with a timerfd (only the cost of waking) and EARLY_MIN_NS with the
loop's millisecond timers (a tick early at most, so polled below that).

CPU cost, bounded and stated: polling burns the CPU from the wake to the instant, so at a
rate r the loop polls about r x early_ns of every second. Polling is allowed at most
SPIN_BUDGET of one CPU in every BUDGET_WINDOW_NS; past it the loop aims its timers at the
floor for the rest of the window (counted in `denied`), so a generator at a low rate on a
slow host spends at most a quarter of a CPU on punctuality. A generator on CPUs of its own
(pinned apart from the server, one worker per CPU: the orchestrator says so in the spec's
`spin_budget`) busy-polls (OWN_CPU_SPIN_BUDGET, a budget of 1): nothing else wants that CPU, and no early
wake-up beats the timer's tail. The early wake-up follows the timer's 99th percentile, so 1%
of the sends still wait out the rest of it (on a 2-vCPU VM pinned: lateness p99 0.04-0.05 ms,
p99.9 0.5-3.5 ms), and a budget runs out at a few thousand arrivals a second (at 2,584/s with
90%: p99 0.21 ms, p99.9 1.5 ms). Busy-polling, the loop stays awake from one send to the
next, serving I/O on every turn, and sleeps on its timer only across gaps longer than
SPIN_LEAD_NS (a warm-up's end, a long pause in the schedule). With a timerfd a denied send is
late by the host's wake-up latency (tens to hundreds of microseconds), not by a millisecond
tick: at 2,000 arrivals a second, where the polling alone would take most of a CPU, the
sends stay well inside a millisecond. The summary reports the
final `early_ns`, the share of CPU spent polling and the windows denied.
"""

from __future__ import annotations

import time

from .spec import OWN_CPU_SPIN_BUDGET  # noqa: F401  (the budget on a CPU of its own)

_now = time.perf_counter_ns

EARLY_MIN_NS = 200_000  # libuv's millisecond timers fire at most a tick early; poll below this
EARLY_MIN_PRECISE_NS = 20_000  # a timerfd (hosttimer.py) is never early: only the wake-up's cost
EARLY_START_NS = 1_200_000
EARLY_MAX_NS = 6_000_000
STEP_NS = 2_000  # a late wake moves early_ns up 99 steps (198 us), a wake in time down 1
SPIN_BUDGET = 0.25  # of one CPU
BUDGET_WINDOW_NS = 100_000_000
# busy-polling (a budget of 1): the timer sleeps only across waits longer than this, and wakes
# this long before the instant (far beyond the timer's tail: a VM's p99.9 of 3.5 ms)
SPIN_LEAD_NS = 20_000_000


class EarlyWake:
    """The early wake-up of one event loop's timed actions (not thread-safe: one loop).

    lead_ns(now) -> how long before a timed action to arm the timer; woke(aimed, now) records
    how late a timer fired against the instant it was aimed at; polled(ns) counts polling time
    against the budget."""

    def __init__(
        self, start_ns: int | None = None, floor_ns: int = EARLY_MIN_NS, budget: float = 0.0
    ) -> None:
        self.floor_ns = floor_ns
        self.budget = budget if 0.0 < budget <= 1.0 else SPIN_BUDGET
        self.spin = self.budget >= 1.0  # busy-poll up to each timed action
        start = EARLY_START_NS if start_ns is None else int(start_ns)
        self.early_ns = min(max(start, floor_ns), EARLY_MAX_NS)
        self.polled_ns = 0
        self.denied = 0
        self._window_start_ns = _now()
        self._window_polled_ns = 0
        self._started_ns = self._window_start_ns

    def woke(self, aimed_ns: int, now_ns: int) -> None:
        """The timer aimed at aimed_ns fired at now_ns: follow the 99th percentile."""
        late = now_ns - aimed_ns
        e = self.early_ns + 99 * STEP_NS if late > self.early_ns else self.early_ns - STEP_NS
        self.early_ns = min(max(e, self.floor_ns), EARLY_MAX_NS)

    def lead_ns(self, now_ns: int) -> int:
        """How far before a timed action to wake: early_ns while the polling budget lasts,
        the floor once this window's budget is spent; SPIN_LEAD_NS when busy-polling."""
        if self.spin:
            return SPIN_LEAD_NS
        if now_ns - self._window_start_ns >= BUDGET_WINDOW_NS:
            self._window_start_ns = now_ns
            self._window_polled_ns = 0
        if self._window_polled_ns >= self.budget * BUDGET_WINDOW_NS:
            self.denied += 1
            return self.floor_ns
        return self.early_ns

    def polled(self, ns: int) -> None:
        """ns of polling (a call_soon turn that found the instant not yet due)."""
        self.polled_ns += ns
        self._window_polled_ns += ns

    def summary(self) -> dict:
        wall = max(1, _now() - self._started_ns)
        return {
            "send_early_wake_ms": self.early_ns / 1e6,
            "send_poll_cpu_pct": 100.0 * self.polled_ns / wall,
            "send_poll_denied": self.denied,
            "send_poll_budget_pct": 100.0 * self.budget,
            "send_busy_poll": self.spin,
        }

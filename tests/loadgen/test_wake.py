"""loadgen/wake.py: the early wake-up follows the timer's 99th-percentile lateness, within its
bounds, and polling stays within its CPU budget."""

from __future__ import annotations

import numpy as np

from loadgen import wake
from loadgen.wake import EarlyWake


def feed(w: EarlyWake, late_ns: np.ndarray) -> None:
    for late in late_ns:
        w.woke(0, int(late))


def test_early_wake_settles_near_the_99th_percentile_of_timer_lateness():
    rng = np.random.default_rng(1)
    # a slow cloud timer: mostly ~150 us late, a tail to several milliseconds
    late = np.where(
        rng.random(60_000) < 0.97,
        rng.exponential(150_000, 60_000),
        rng.exponential(1_500_000, 60_000),
    )
    w = EarlyWake()
    feed(w, late[:30_000])
    settled = []
    for chunk in np.split(late[30_000:], 30):
        feed(w, chunk)
        settled.append(w.early_ns)
    p99 = np.percentile(late, 99)
    assert 0.8 * p99 < np.median(settled) < 1.25 * p99, (np.median(settled), p99)
    # so about 1% of sends would be late: the share of wakes later than early_ns
    assert np.mean(late[30_000:] > np.median(settled)) < 0.02


def test_early_wake_stays_within_its_bounds():
    w = EarlyWake()
    feed(w, np.full(5_000, 50_000_000))  # a timer 50 ms late every time
    assert w.early_ns == wake.EARLY_MAX_NS
    feed(w, np.zeros(20_000, dtype=np.int64))  # a perfect timer
    assert w.early_ns == wake.EARLY_MIN_NS


def test_a_host_measurement_seeds_the_first_early_wake():
    assert EarlyWake(3_000_000).early_ns == 3_000_000
    assert EarlyWake(10).early_ns == wake.EARLY_MIN_NS


def test_polling_past_its_budget_falls_back_to_the_timer_for_the_rest_of_the_window():
    w = EarlyWake(2_000_000)
    t0 = w._window_start_ns
    assert w.lead_ns(t0 + 1) == 2_000_000
    w.polled(int(wake.SPIN_BUDGET * wake.BUDGET_WINDOW_NS))
    assert w.lead_ns(t0 + 2) == wake.EARLY_MIN_NS
    assert w.denied == 1
    # the next window starts with a fresh budget
    assert w.lead_ns(t0 + wake.BUDGET_WINDOW_NS + 1) == 2_000_000
    s = w.summary()
    assert s["send_early_wake_ms"] == 2.0 and s["send_poll_denied"] == 1


def test_a_generator_on_its_own_cpu_busy_polls_up_to_each_send():
    """spec.spin_budget (set by the orchestrator when the generator has CPUs of its own) is 1:
    the timer sleeps only across waits longer than SPIN_LEAD_NS and the loop polls the rest,
    however much it has polled already (no early wake-up beats the timer's tail)."""
    third = wake.BUDGET_WINDOW_NS // 3
    shared = EarlyWake(2_000_000)
    own = EarlyWake(2_000_000, budget=wake.OWN_CPU_SPIN_BUDGET)
    for w in (shared, own):
        w.polled(third)
    t0 = own._window_start_ns
    assert shared.lead_ns(shared._window_start_ns + 1) == wake.EARLY_MIN_NS
    assert own.lead_ns(t0 + 1) == wake.SPIN_LEAD_NS
    own.polled(wake.BUDGET_WINDOW_NS)  # a whole window polled: still not denied
    assert own.lead_ns(t0 + 2) == wake.SPIN_LEAD_NS and own.denied == 0
    assert own.summary()["send_busy_poll"] and own.summary()["send_poll_budget_pct"] == 100.0
    assert not shared.summary()["send_busy_poll"]
    assert shared.summary()["send_poll_budget_pct"] == 25.0


def test_a_part_budget_still_runs_out():
    """A budget below 1 is a budget: 90% of a window polled, the rest waits on the floor."""
    w = EarlyWake(2_000_000, budget=0.9)
    t0 = w._window_start_ns
    assert w.lead_ns(t0 + 1) == 2_000_000
    w.polled(int(0.9 * wake.BUDGET_WINDOW_NS))
    assert w.lead_ns(t0 + 2) == wake.EARLY_MIN_NS and w.denied == 1

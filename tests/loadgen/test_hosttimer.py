"""loadgen/hosttimer.py: callbacks at absolute nanosecond instants on the loop, never early, in
order, including those scheduled from inside a callback."""

from __future__ import annotations

import time

import pytest
import uvloop

from loadgen.hosttimer import HostTimer

_now = time.perf_counter_ns


@pytest.fixture
def loop():
    lp = uvloop.new_event_loop()
    yield lp
    lp.close()


def test_callbacks_fire_in_order_and_never_early(loop):
    timer = HostTimer.open(loop)
    assert timer is not None, "timerfd should exist on this Linux host"
    fired: list[tuple[str, int, int]] = []
    done = loop.create_future()
    t0 = _now()

    def hit(name: str, when: int) -> None:
        fired.append((name, when, _now()))
        if len(fired) == 6:
            done.set_result(None)

    # scheduled out of order, two at one instant, some sub-millisecond apart
    for name, off_us in [("c", 3_000), ("a", 400), ("b", 900), ("b2", 900), ("e", 7_250)]:
        timer.schedule(t0 + off_us * 1000, hit, name, t0 + off_us * 1000)

    def chain() -> None:  # scheduled from inside a callback, earlier than one still waiting
        timer.schedule(t0 + 2_000_000, hit, "d", t0 + 2_000_000)

    timer.schedule(t0 + 1_000_000, chain)
    loop.run_until_complete(done)
    timer.close()
    assert [f[0] for f in fired] == ["a", "b", "b2", "d", "c", "e"]
    assert all(at >= when for _, when, at in fired), fired


def test_an_item_earlier_than_the_armed_one_rearms_the_timer(loop):
    """The case a single-shot timer gets wrong: a callback schedules a later item while an
    earlier one still waits in the heap; the earlier one must not wait for the later one."""
    timer = HostTimer.open(loop)
    fired: list[str] = []
    done = loop.create_future()
    t0 = _now()

    def first() -> None:
        fired.append("first")
        timer.schedule(t0 + 200_000_000, last)  # 200 ms on

    def early() -> None:
        fired.append("early")
        done.set_result(_now())

    def last() -> None:
        fired.append("last")

    timer.schedule(t0 + 1_000_000, first)
    timer.schedule(t0 + 1_500_000, early)
    loop.run_until_complete(done)
    timer.close()
    # held until `last` was due, both would have fired in the one wake-up: `last` too
    assert fired == ["first", "early"]


def test_switch_off(monkeypatch, loop):
    monkeypatch.setenv("PERFCTL_TIMERFD", "0")
    assert HostTimer.open(loop) is None

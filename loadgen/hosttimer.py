"""A nanosecond timer for one event loop: Linux's timerfd, armed at absolute CLOCK_MONOTONIC
instants (the clock of time.perf_counter_ns here) and watched by the loop as a readable fd.

Why: the event loop's own timers have millisecond resolution (libuv rounds a 0.3 ms delay to
0 or 1 ms, and epoll_wait takes milliseconds), so an open-loop send timed by them is up to a
millisecond late unless the loop polls the last stretch; at 2,000 arrivals a second the
polling alone would use most of a CPU. A timerfd fires when its instant passes, give or take
the host's wake-up latency (hrtimers, no timer slack), and wakes the loop's epoll_wait at once.
So the generator polls only the host's wake-up latency (wake.EarlyWake), not a millisecond.

Python 3.11 has no os.timerfd_* (3.13 adds them), so the two calls go through ctypes.
`HostTimer.open()` returns None where timerfd is missing (not Linux, no libc symbol, a seccomp
filter) or PERFCTL_TIMERFD=0 is set (to compare the two): the caller then falls back to the
loop's call_later.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import heapq
import itertools
import os
import sys
import time

CLOCK_MONOTONIC = 1
TFD_TIMER_ABSTIME = 1
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = 0o2000000
_now = time.perf_counter_ns


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    create.argtypes, create.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settime.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(_Itimerspec),
        ctypes.POINTER(_Itimerspec),
    ]
    settime.restype = ctypes.c_int
    return create, settime


class HostTimer:
    """Callbacks at absolute perf_counter_ns instants on one asyncio loop (not thread-safe).

    schedule(when_ns, fn, *args) calls fn(*args) from the loop once when_ns has passed (never
    before); close() stops watching and closes the fd."""

    def __init__(self, loop, fd: int, settime) -> None:
        self.loop = loop
        self.fd = fd
        self._settime = settime
        self._spec = _Itimerspec()
        self._heap: list[tuple[int, int, object, tuple]] = []
        self._count = itertools.count()
        self._armed_ns = 0  # the instant the fd is set to fire at (0: disarmed)
        self._firing = False  # in _fired: it arms once, for the earliest left, when done
        loop.add_reader(fd, self._fired)

    @classmethod
    def open(cls, loop) -> HostTimer | None:
        calls = None if os.environ.get("PERFCTL_TIMERFD") == "0" else _libc()
        if calls is None:
            return None
        create, settime = calls
        fd = create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            return None
        return cls(loop, fd, settime)

    def schedule(self, when_ns: int, fn, *args) -> None:
        heapq.heappush(self._heap, (when_ns, next(self._count), fn, args))
        if not self._firing and (self._armed_ns == 0 or when_ns < self._armed_ns):
            self._arm(when_ns)

    def close(self) -> None:
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
        self._heap.clear()

    def _arm(self, when_ns: int) -> None:
        v = self._spec.it_value
        v.tv_sec, v.tv_nsec = divmod(max(1, when_ns), 1_000_000_000)
        if self._settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self._armed_ns = when_ns

    def _fired(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:  # re-armed since it became readable
            pass
        self._armed_ns = 0
        heap = self._heap
        now = _now()
        self._firing = True
        try:
            while heap and heap[0][0] <= now:
                _, _, fn, args = heapq.heappop(heap)
                fn(*args)
        finally:
            self._firing = False
        if heap and self.fd >= 0:
            self._arm(heap[0][0])

"""The host's own figures, measured in about two seconds before a run and by `perfctl doctor`:
how late its timer wakes a sleeping thread, how long one thread takes to wake another, how
much CPU the hypervisor steals, and the loopback round trip. They bound what a trial on this
host can resolve: an open-loop send can be no more punctual than the timer (after the load
generator's early wake-up, loadgen/wake.py), and no latency below the loopback round trip
plus a wake-up is measured without them in it.

`measure(seconds)` returns a HostCheck; `verdict(check, ...)` says in words what the host
can and cannot support, with the numbers. Standard library only (no numpy: doctor stays light).
"""

from __future__ import annotations

import math
import os
import random
import socket
import statistics
import threading
import time
from dataclasses import asdict, dataclass

_now = time.perf_counter_ns

SLEEP_S = 0.001  # the timer probe's sleep: a typical open-loop gap at ~1k req/s
# Beyond these the host is named as the limit (README: valid and quiet, the host's figures)
TIMER_P99_NOTE_US = 1_000.0
STEAL_NOTE_PCT = 5.0
# How long `perfctl run` measures before its first trial; PERFCTL_HOST_CHECK_S overrides it
# (0: no check; the test suite shortens it, since it starts hundreds of runs)
RUN_CHECK_S = 2.0


def run_check_seconds() -> float:
    """The host check's length at the start of a run: RUN_CHECK_S or $PERFCTL_HOST_CHECK_S."""
    try:
        return max(0.0, float(os.environ.get("PERFCTL_HOST_CHECK_S", RUN_CHECK_S)))
    except ValueError:
        return RUN_CHECK_S


@dataclass(frozen=True)
class HostCheck:
    """timer_*: how late time.sleep(1 ms) returns (us); wake_*: one thread waking another
    through a pipe (us); loopback_rtt_*: a 1-byte TCP ping-pong over 127.0.0.1 (us); steal_pct:
    CPU stolen by the hypervisor over the check (% of all CPU time); duration_s: how long."""

    timer_p50_us: float
    timer_p99_us: float
    wake_p50_us: float
    wake_p99_us: float
    loopback_rtt_p50_us: float
    loopback_rtt_p99_us: float
    steal_pct: float
    cpus: int
    duration_s: float

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """One line with every figure, e.g. for the start of a run."""
        return (
            f"timer late p50 {self.timer_p50_us:.0f} us p99 {self.timer_p99_us:.0f} us, "
            f"wake-up p99 {self.wake_p99_us:.0f} us, loopback RTT p50 "
            f"{self.loopback_rtt_p50_us:.0f} us p99 {self.loopback_rtt_p99_us:.0f} us, "
            f"steal {self.steal_pct:.1f}% ({self.duration_s:.1f} s)"
        )


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s), max(1, math.ceil(q / 100.0 * len(s)))) - 1]  # the inverted CDF


def _steal_ticks() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs from /proc/stat; (0, 0) where unreadable."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def _timer(deadline_ns: int) -> list[float]:
    out = []
    while _now() < deadline_ns:
        t = _now()
        time.sleep(SLEEP_S)
        out.append((_now() - t) / 1e3 - SLEEP_S * 1e6)
    return out


def _wake(deadline_ns: int) -> list[float]:
    """A thread blocked on a pipe read, woken by a write: write -> wake (us)."""
    r, w = os.pipe()
    stamps: list[int] = []
    out: list[float] = []

    def sleeper() -> None:
        while True:
            b = os.read(r, 1)
            if b == b"q":
                return
            out.append((_now() - stamps[-1]) / 1e3)

    t = threading.Thread(target=sleeper, daemon=True)
    t.start()
    try:
        while _now() < deadline_ns:
            time.sleep(SLEEP_S)  # let the reader block again: a real wake-up, not a hand-over
            stamps.append(_now())
            os.write(w, b"x")
        time.sleep(2 * SLEEP_S)
    finally:
        os.write(w, b"q")
        t.join(1.0)
        os.close(r)
        os.close(w)
    return out


def _loopback(deadline_ns: int) -> list[float]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    cli = socket.create_connection(srv.getsockname())
    peer, _ = srv.accept()
    for s in (cli, peer):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def echo() -> None:
        while True:
            b = peer.recv(1)
            if not b or b == b"q":
                return
            peer.sendall(b)

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    out = []
    try:
        while _now() < deadline_ns:
            t0 = _now()
            cli.sendall(b"x")
            cli.recv(1)
            out.append((_now() - t0) / 1e3)
    finally:
        cli.sendall(b"q")
        t.join(1.0)
        for s in (cli, peer, srv):
            s.close()
    return out


SEND_WAITS = ("sleep", "sleep+spin", "spin")
SEND_RATE = 300.0  # arrivals/s: the send-precision table's rate (issue 41's)
SPIN_LEAD_S = 0.002  # sleep+spin: sleep to this long before the instant, then spin


def send_precision(seconds: float = 3.0, rate: float = SEND_RATE) -> list[dict]:
    """How late a send could leave on this host, waited for three ways: Poisson instants at
    `rate` for seconds / 3 each, on this thread, no I/O: sleep to each instant; sleep to
    SPIN_LEAD_S before it, then spin; spin the whole time. Each: {wait, p50_us, p99_us,
    p999_us, cpu_pct} (the CPU the waiting took, % of one). Only spinning reaches the host's
    limit; a load generator on a CPU of its own does (loadgen/wake.py)."""
    rng = random.Random(41)
    out = []
    for how in SEND_WAITS:
        late: list[float] = []
        cpu0, wall0 = time.thread_time_ns(), _now()
        due = _now() + 5_000_000
        end = due + int(seconds / len(SEND_WAITS) * 1e9)
        while due < end:
            if how != "spin":
                target = due if how == "sleep" else due - int(SPIN_LEAD_S * 1e9)
                wait = target - _now()
                if wait > 0:
                    time.sleep(wait / 1e9)
            while _now() < due:
                pass
            late.append((_now() - due) / 1e3)
            due += int(rng.expovariate(rate) * 1e9)
        wall = max(1, _now() - wall0)
        out.append(
            {
                "wait": how,
                "p50_us": statistics.median(late) if late else float("nan"),
                "p99_us": _pct(late, 99),
                "p999_us": _pct(late, 99.9),
                "cpu_pct": 100.0 * (time.thread_time_ns() - cpu0) / wall,
            }
        )
    return out


def measure(seconds: float = 2.0) -> HostCheck:
    """Measure the host for about `seconds` (timer, then wake-ups, then loopback, in turn)."""
    start = _now()
    steal0, total0 = _steal_ticks()
    share = int(seconds * 1e9 / 3)
    timer = _timer(start + share)
    wake = _wake(start + 2 * share)
    loop = _loopback(start + 3 * share)
    steal1, total1 = _steal_ticks()
    steal = 100.0 * (steal1 - steal0) / (total1 - total0) if total1 > total0 else 0.0
    return HostCheck(
        timer_p50_us=statistics.median(timer) if timer else float("nan"),
        timer_p99_us=_pct(timer, 99),
        wake_p50_us=statistics.median(wake) if wake else float("nan"),
        wake_p99_us=_pct(wake, 99),
        loopback_rtt_p50_us=statistics.median(loop) if loop else float("nan"),
        loopback_rtt_p99_us=_pct(loop, 99),
        steal_pct=steal,
        cpus=os.cpu_count() or 1,
        duration_s=(_now() - start) / 1e9,
    )


def verdict(check: HostCheck, precision: float = 0.05) -> list[str]:
    """What the host limits, in sentences with the numbers ([] when nothing does). precision
    is the relative precision the experiment asks for (its `precision`, 5% by default)."""
    out = []
    if check.timer_p99_us > TIMER_P99_NOTE_US:
        floor_ms = check.timer_p99_us / 1e3 / precision
        out.append(
            f"slow timer: time.sleep(1 ms) returns {check.timer_p99_us / 1e3:.1f} ms late at the "
            f"99th percentile (p50 {check.timer_p50_us:.0f} us). The load generator wakes early to "
            "make up for it (loadgen/wake.py); where it cannot, an open-loop trial's latencies "
            f"under ~{floor_ms:.0f} ms at p99 can be moved by more than {100 * precision:g}% and "
            "such trials are marked invalid. Pin the load generator (placement.loadgen_cpus) or "
            "use a host with a faster timer"
        )
    if check.steal_pct > STEAL_NOTE_PCT:
        out.append(
            f"CPU steal {check.steal_pct:.1f}% during the check: the hypervisor is running "
            "others on these CPUs, so expect trials marked 'not quiet' and wider intervals "
            "(perfctl calibrate measures how wide)"
        )
    return out

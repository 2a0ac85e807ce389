"""A short probe of a server perfctl did not write: how long one request takes alone, how many
it serves at once, and whether a worker keeps its keep-alive connection. The queueing models
need all three (models/cell_station.py) and a `cmd` server that declares neither `dispatch:`
nor `threads:` tells perfctl none of them.

Run once per trial, on the fresh server before the load (and before any injected delay: it
talks to the server directly). About a second for a server of a few milliseconds per request;
every step has a deadline, so a server that never answers costs at most PROBE_BUDGET_S.

1. Alone: WARMUP + up to SEQUENTIAL requests one after another on one keep-alive connection.
   Their send-to-answer times give S1 (mean, standard error, SCV): the single-user service
   time, round trip included. Whether the answers carry Server-Timing is noted.
2. Pinning: keep-alive connections opened one at a time, one request each, every connection
   kept open. A server whose workers keep their connection answers the first c and leaves the
   next waiting (PIN_WAIT x S1): it pins connections, and c is exact. Answered all the way to
   PIN_CONNECTIONS: not pinned.
3. Parallelism (not pinned): BURST requests sent at once on new connections, BURSTS times.
   With c workers and exponential service the j-th answer comes, on average, after
   S1 sum_{m<j} 1 / min(K - m, c) (each gap an exponential of rate min(remaining, c) / S1):
   c is solved from the measured mean answer time over S1 (less noisy than the last one's);
   for a near-constant service time, answers come in rounds of c, S1 apart. c >= K reads as
   "at least K".

The dispatch it infers: pinned -> per_connection; one at a time -> event_loop (one worker:
whatever it waits for holds it); several -> shared_queue with c threads. It cannot tell
processor sharing from a FIFO queue (exponential service hides it): the models derive sharing
from the CPU readings instead.
"""

from __future__ import annotations

import math
import selectors
import socket
import time
from dataclasses import dataclass

__all__ = ["ProbeResult", "probe", "parallelism"]

WARMUP = 5
SEQUENTIAL = 200
PIN_CONNECTIONS = 33  # up to 32 workers told apart; more reads as "not pinned"
PIN_WAIT = 20.0  # x S1: an unanswered request this long is waiting for a worker
BURST = 16
BURSTS = 5
PROBE_BUDGET_S = 10.0
SEQUENTIAL_BUDGET_S = 1.5  # step 1 stops after this long, however few answers it has
MIN_WAIT_S = 0.2


@dataclass(frozen=True)
class ProbeResult:
    """What the probe saw. dispatch "" and threads None when it could not tell."""

    dispatch: str
    threads: int | None
    service_ms: float
    service_se_ms: float
    service_scv: float
    requests: int
    server_timing: bool
    note: str

    def row(self) -> dict:
        """trials.csv columns (probe_*)."""
        return {
            "probe_dispatch": self.dispatch,
            "probe_threads": self.threads if self.threads is not None else math.nan,
            "probe_service_ms": self.service_ms,
            "probe_service_se_ms": self.service_se_ms,
            "probe_service_scv": self.service_scv,
            "probe_requests": self.requests,
            "probe_server_timing": self.server_timing,
            "probe_note": self.note,
        }


class _Conn:
    """One keep-alive HTTP/1.1 connection that sends GET target and reads whole answers
    (Content-Length or chunked)."""

    def __init__(self, host: str, port: int, target: str, close: bool = False) -> None:
        self.sock = socket.create_connection((host, port), timeout=5.0)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request = (
            f"GET {target} HTTP/1.1\r\nHost: {host}\r\n"
            + ("Connection: close\r\n" if close else "")
            + "\r\n"
        ).encode()
        self.buf = b""
        self.head: bytes | None = None

    def send(self) -> None:
        self.sock.sendall(self.request)

    def poll(self) -> bool:
        """Read what is there; True once an answer is whole (it is then dropped from buf)."""
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return False
        if not data:
            raise ConnectionError("closed before the answer")
        self.buf += data
        return self._whole()

    def _whole(self) -> bool:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = self.buf[:end].decode("latin-1").lower()
        body = self.buf[end + 4 :]
        length = None
        chunked = False
        for line in head.split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip() == "content-length":
                length = int(value.strip())
            elif name.strip() == "transfer-encoding" and "chunked" in value:
                chunked = True
        if chunked:
            if b"\r\n0\r\n\r\n" not in b"\r\n" + body:
                return False
            used = (b"\r\n" + body).index(b"\r\n0\r\n\r\n") + 5
        else:
            used = length or 0
            if len(body) < used:
                return False
        self.head = self.buf[:end]
        self.buf = body[used:]
        return True

    def wait_answer(self, timeout_s: float) -> bool:
        """Block until an answer is whole; False after timeout_s."""
        self.sock.setblocking(True)
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return False
            if not data:
                raise ConnectionError("closed before the answer")
            self.buf += data
            if self._whole():
                return True

    def close(self) -> None:
        self.sock.close()


def expected_mean_ratio(c: int, k: int, scv: float = 1.0) -> float:
    """E[mean answer time] / S1 of k requests sent at once to c FIFO workers: exponential
    service (module docstring), or, for a near-constant one (scv < 0.5), rounds of c."""
    if scv < 0.5:
        return sum(math.ceil(j / c) for j in range(1, k + 1)) / k
    total, t = 0.0, 0.0
    for m in range(k):
        t += 1.0 / min(k - m, c)
        total += t
    return total / k


def parallelism(ratio: float, k: int, scv: float = 1.0) -> tuple[int, bool]:
    """The workers c whose expected mean answer time of k simultaneous requests, over S1,
    is closest to `ratio` (expected_mean_ratio); (k, True) when even c = k is slower than
    measured (c >= k)."""
    if ratio <= expected_mean_ratio(k, k, scv) * (1 + 1e-9):
        return k, True
    best = min(range(1, k + 1), key=lambda c: abs(math.log(expected_mean_ratio(c, k, scv) / ratio)))
    return best, False


def probe(host: str, port: int, target: str, budget_s: float = PROBE_BUDGET_S) -> ProbeResult:
    """Probe the server at host:port with GET target (module docstring). Never raises for
    what the server does: a server that fails a step gets a ProbeResult that says so."""
    deadline = time.monotonic() + budget_s
    notes = []
    times = []
    timing = False
    try:
        conn = _Conn(host, port, target)
        try:
            for i in range(WARMUP + SEQUENTIAL):
                if time.monotonic() > deadline - budget_s + SEQUENTIAL_BUDGET_S:
                    break
                t0 = time.perf_counter_ns()
                conn.send()
                if not conn.wait_answer(max(deadline - time.monotonic(), 0.01)):
                    break
                if i >= WARMUP:
                    times.append((time.perf_counter_ns() - t0) / 1e6)
                timing = timing or b"server-timing:" in (conn.head or b"").lower()
        finally:
            conn.close()
    except OSError as e:
        return ProbeResult("", None, math.nan, math.nan, math.nan, 0, False, f"no answer: {e}")
    if len(times) < 2:
        return ProbeResult(
            "", None, math.nan, math.nan, math.nan, len(times), timing, "too few answers alone"
        )
    n = len(times)
    s1 = sum(times) / n
    var = sum((t - s1) ** 2 for t in times) / (n - 1)
    se, scv = math.sqrt(var / n), var / s1**2
    wait_s = max(PIN_WAIT * s1 / 1e3, MIN_WAIT_S)
    pinned_at = _pinning(host, port, target, wait_s, deadline)
    if pinned_at is not None:
        notes.append(
            f"connection {pinned_at + 1} waited {wait_s * 1e3:.0f} ms while {pinned_at} "
            "idle keep-alive connections held the workers: they keep their connections"
        )
        return ProbeResult("per_connection", pinned_at, s1, se, scv, n, timing, "; ".join(notes))
    notes.append(f"not pinned up to {PIN_CONNECTIONS} idle keep-alive connections")
    ratios = []
    k = BURST
    for _ in range(BURSTS):
        if time.monotonic() > deadline - k * s1 / 1e3:
            break
        mean = _burst(host, port, target, k, deadline)
        if mean is None:
            break
        ratios.append(mean / s1)
    if not ratios:
        notes.append("the burst got no answers in time")
        return ProbeResult("", None, s1, se, scv, n, timing, "; ".join(notes))
    ratio = sum(ratios) / len(ratios)
    c, at_least = parallelism(ratio, k, scv)
    notes.append(
        f"{k} requests at once were answered after {ratio:.2f} x S1 on average: "
        + (f"at least {k} served at once" if at_least else f"{c} served at once")
    )
    dispatch = "event_loop" if c == 1 else "shared_queue"
    return ProbeResult(dispatch, c, s1, se, scv, n, timing, "; ".join(notes))


def _pinning(host, port, target, wait_s: float, deadline: float) -> int | None:
    """The number of connections answered before one waits (pinned), or None (not pinned)."""
    conns: list[_Conn] = []
    try:
        for i in range(PIN_CONNECTIONS):
            if time.monotonic() + wait_s > deadline:
                return None
            c = _Conn(host, port, target)
            conns.append(c)
            c.send()
            if not c.wait_answer(wait_s):
                return i if i > 0 else None
        return None
    except OSError:
        return None
    finally:
        for c in conns:
            c.close()


def _burst(host, port, target, k: int, deadline: float) -> float | None:
    """Send k requests at once on new connections; the mean ms until each answer (None: a
    failure or the deadline)."""
    conns = []
    sel = selectors.DefaultSelector()
    try:
        for _ in range(k):
            conns.append(_Conn(host, port, target, close=True))
        t0 = time.perf_counter_ns()
        for c in conns:
            c.send()
            c.sock.setblocking(False)
            sel.register(c.sock, selectors.EVENT_READ, c)
        left, total_ns = k, 0
        while left:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                return None
            for key, _ in sel.select(timeout):
                c = key.data
                if c.poll():
                    total_ns += time.perf_counter_ns() - t0
                    sel.unregister(c.sock)
                    left -= 1
        return total_ns / k / 1e6
    except (OSError, ConnectionError):
        return None
    finally:
        sel.close()
        for c in conns:
            c.close()

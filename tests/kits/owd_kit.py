"""One-way delays measured from outside a proxy, for the netem tests: a sink thread in the
test's process (the sender's clock) records each frame's delay; frames go on an idle path
(spaced wider than delay + rto), so each delay is its own and not its predecessor's. Tests
import it as `owd_kit` (tests/conftest.py puts tests/kits/ on sys.path)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import numpy as np

FRAME = struct.Struct("!qq")  # sequence number, send time (perf_counter_ns)
FIRST_FRAMES = 10  # frames judged right after a schedule change


class Sink:
    """A listener in a thread: records (seq, one-way delay ms) of every frame it receives."""

    def __init__(self):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        self.owd: dict[int, float] = {}
        self.sent: dict[int, int] = {}  # seq -> send time (perf_counter_ns)
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        try:
            c, _ = self.ls.accept()
        except OSError:  # closed before anyone connected
            return
        buf = b""
        while True:
            try:
                b = c.recv(65536)
            except OSError:
                return
            now = time.perf_counter_ns()
            if not b:
                return
            buf += b
            while len(buf) >= FRAME.size:
                seq, sent = FRAME.unpack_from(buf)
                self.owd[seq] = (now - sent) / 1e6
                self.sent[seq] = sent
                buf = buf[FRAME.size :]

    def close(self):
        self.ls.close()


def await_frames(sink: Sink, s: socket.socket, n: int) -> None:
    """Wait (bounded) until the sink has all n frames, then close the sender."""
    deadline = time.monotonic() + 5
    while len(sink.owd) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    s.close()
    assert len(sink.owd) == n, f"{len(sink.owd)} of {n} frames arrived"


def one_way_ms(port: int, sink: Sink, n: int, gap_s: float) -> np.ndarray:
    """Send n frames gap_s apart to port; their one-way delays (ms) in send order."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(n):
        s.sendall(FRAME.pack(i, time.perf_counter_ns()))
        time.sleep(gap_s)
    await_frames(sink, s, n)
    return np.array([sink.owd[i] for i in range(n)])


def one_way_ms_pair(a: tuple[int, Sink], b: tuple[int, Sink], n: int, gap_s: float):
    """one_way_ms on two paths at once, (port, sink) each: frame i goes to a, then at once to
    b, so both see the same moments of this host. Their delays (ms), a's then b's."""
    conns = []
    for port, _ in (a, b):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append(s)
    for i in range(n):
        for s in conns:
            s.sendall(FRAME.pack(i, time.perf_counter_ns()))
        time.sleep(gap_s)
    for s, (_, sink) in zip(conns, (a, b)):
        await_frames(sink, s, n)
    return tuple(np.array([sink.owd[i] for i in range(n)]) for _, sink in (a, b))


def runs_of(flags: np.ndarray) -> list[int]:
    """Lengths of the runs of consecutive True."""
    out, k = [], 0
    for f in flags:
        if f:
            k += 1
        elif k:
            out.append(k)
            k = 0
    if k:
        out.append(k)
    return out

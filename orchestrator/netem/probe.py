"""Measuring a path: round-trip samples and bulk throughput.

Two RTT methods:
  echo-rtt     one TCP connection; each sample is a 16-byte write and the time until the same
               16 bytes come back (a request/response round trip through the path). Used for
               the proxy: its --echo-listen port echoes at the far end of the emulated path, so
               the probe crosses exactly the up delay, then the down delay, without touching
               the server. (The proxy does not delay the TCP handshake, so connect time would
               not show its delay.)
  tcp-connect  each sample is one connect() to a port on the far side of the veth: the time
               from SYN to SYN-ACK (or to the RST of a closed port) crosses the netem/tbf
               qdiscs both ways and involves no application at all.
"""

from __future__ import annotations

import socket
import statistics
import struct
import threading
import time
from dataclasses import asdict, dataclass, field

PAYLOAD = b"perfctl-probe-16"

# Linux's SO_TIMESTAMPNS (the asm-generic value; Python's socket module does not export it):
# each received segment is stamped by the kernel with CLOCK_REALTIME, the clock of
# time.time_ns(), and recvmsg returns the stamp as an SCM_TIMESTAMPNS control message.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("qq")


@dataclass
class ProbeResult:
    method: str  # "echo-rtt" | "echo-rtt-pipelined" | "tcp-connect"
    rtt_ms: list[float]  # one sample per round trip, through the path
    baseline_ms: float = 0.0  # p50 of the same measurement without emulation
    throughput_bps: float | None = None  # bulk transfer through the path (bandwidth set only)
    expected_added_ms: float | None = None  # filled by the injector: spec's p50 added RTT
    expected_bps: float | None = None
    notes: list[str] = field(default_factory=list)
    # proxy only: how late the proxy released held chunks during the probe (send time - due
    # time; p50 / p99 over `released` chunks, from the proxy's own histogram)
    released: int = 0
    release_err_p50_us: float = float("nan")
    release_err_p99_us: float = float("nan")

    @property
    def added_ms(self) -> list[float]:
        """Each sample minus the baseline: the RTT the emulation added, per round trip."""
        return [r - self.baseline_ms for r in self.rtt_ms]

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.rtt_ms) if self.rtt_ms else float("nan")

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.rtt_ms) if self.rtt_ms else float("nan")

    @property
    def p90_ms(self) -> float:
        if not self.rtt_ms:
            return float("nan")
        s = sorted(self.rtt_ms)
        return s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))]

    @property
    def added_p50_ms(self) -> float:
        """Median RTT minus the baseline: the RTT the emulation added."""
        return self.p50_ms - self.baseline_ms

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            p50_ms=self.p50_ms,
            mean_ms=self.mean_ms,
            p90_ms=self.p90_ms,
            added_p50_ms=self.added_p50_ms,
        )
        return d


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        got = s.recv(n - len(buf))
        if not got:
            raise ConnectionError("path closed during probe")
        buf += got
    return bytes(buf)


def echo_rtt_samples(
    host: str,
    port: int,
    samples: int = 20,
    warmup: int = 2,
    timeout_s: float = 10.0,
    gap_s: float = 0.0,
) -> list[float]:
    """Round trips (ms) of a 16-byte message over one connection to an echo at host:port."""
    out: list[float] = []
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(warmup + samples):
            t0 = time.perf_counter_ns()
            s.sendall(PAYLOAD)
            _recv_exact(s, len(PAYLOAD))
            t1 = time.perf_counter_ns()
            if i >= warmup:
                out.append((t1 - t0) / 1e6)
            if gap_s:
                time.sleep(gap_s)
    return out


def pipelined_echo_rtt_samples(
    host: str,
    port: int,
    samples: int = 20,
    warmup: int = 2,
    interval_s: float = 0.005,
    timeout_s: float = 10.0,
) -> list[float]:
    """Round trips (ms) of 16-byte messages sent every interval_s over one connection to an
    echo at host:port, without waiting for each answer: the probe takes about one round trip
    plus samples x interval_s, not samples round trips (20 through 50 ms each way: 0.2 s, not
    2 s). Only for a path that delays every byte alike (no jitter, loss, reordering or resets):
    over one TCP connection a message held back holds back the ones behind it, which would
    skew the distribution that the sequential probe (echo_rtt_samples) measures there."""
    total = warmup + samples
    sent_ns = [0] * total
    failed: list[BaseException] = []
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def send() -> None:
            due = time.perf_counter()
            try:
                for i in range(total):
                    wait = due - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                    sent_ns[i] = time.perf_counter_ns()
                    s.sendall(PAYLOAD)
                    due += interval_s
            except OSError as e:
                failed.append(e)

        sender = threading.Thread(target=send, name="perfctl-probe-send", daemon=True)
        sender.start()
        out: list[float] = []
        try:
            for i in range(total):  # TCP keeps the order: the i-th answer is the i-th message's
                _recv_exact(s, len(PAYLOAD))
                if i >= warmup:
                    out.append((time.perf_counter_ns() - sent_ns[i]) / 1e6)
        finally:  # a failed send leaves the reads to the socket's timeout
            sender.join(timeout_s)
    if failed:
        raise ConnectionError(f"path failed during probe: {failed[0]}")
    return out


def connect_rtt_samples(
    host: str, port: int, samples: int = 20, warmup: int = 1, timeout_s: float = 5.0
) -> list[float]:
    """Round trips (ms) measured as connect() time: SYN -> SYN-ACK, or -> RST if nothing
    listens (ECONNREFUSED also takes exactly one round trip)."""
    out: list[float] = []
    for i in range(warmup + samples):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(timeout_s)
        t0 = time.perf_counter_ns()
        try:
            s.connect((host, port))
        except ConnectionRefusedError:
            pass
        finally:
            t1 = time.perf_counter_ns()
            s.close()
        if i >= warmup:
            out.append((t1 - t0) / 1e6)
    return out


def echo_throughput_bps(host: str, port: int, nbytes: int, timeout_s: float = 30.0) -> float:
    """Send nbytes through an echo and read them back concurrently; rate (bits/s) measured at
    the receiver from the first byte back to the last one."""
    block = bytes(range(256)) * 64  # 16 KiB
    err: list[BaseException] = []

    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def send() -> None:
            try:
                left = nbytes
                while left > 0:
                    n = min(left, len(block))
                    s.sendall(block[:n])
                    left -= n
            except BaseException as e:  # pragma: no cover - surfaced below
                err.append(e)

        t = threading.Thread(target=send, daemon=True)
        t.start()
        got = 0
        first_t = first_n = None
        last_t = None
        deadline = time.monotonic() + timeout_s
        while got < nbytes and time.monotonic() < deadline:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            now = time.perf_counter()
            if first_t is None:
                first_t, first_n = now, len(chunk)
            got += len(chunk)
            last_t = now
        t.join(timeout=5)
    if err:
        raise err[0]
    if got < nbytes or first_t is None or last_t is None or last_t <= first_t:
        raise ConnectionError(f"throughput probe got {got} of {nbytes} bytes")
    return (got - first_n) * 8 / (last_t - first_t)


def sink_throughput_bps(host: str, port: int, nbytes: int, timeout_s: float = 30.0) -> float:
    """Send nbytes to a sink that answers with b'ok\\n' after reading them all; bits/s from the
    first write to the answer (the path's RTT is subtracted by the caller if it matters)."""
    block = bytes(range(256)) * 256  # 64 KiB
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        t0 = time.perf_counter()
        left = nbytes
        while left > 0:
            n = min(left, len(block))
            s.sendall(block[:n])
            left -= n
        s.shutdown(socket.SHUT_WR)
        reply = s.recv(16)
        t1 = time.perf_counter()
    if not reply.startswith(b"ok"):
        raise ConnectionError(f"sink answered {reply!r}")
    return nbytes * 8 / (t1 - t0)


# Run inside a namespace with `python -c SINK_CODE HOST`: prints the port, serves one bulk
# upload (reads to EOF, answers ok), exits. Bounded by a 60 s alarm.
SINK_CODE = r"""
import signal, socket, sys
signal.alarm(60)
ls = socket.socket(); ls.bind((sys.argv[1], 0)); ls.listen(4)
print(ls.getsockname()[1], flush=True)
c, _ = ls.accept()
while c.recv(1 << 17):
    pass
c.sendall(b"ok\n"); c.close()
"""


# An echo server for probing a path from the outside (tests, benchmarks), in its own process
# so its latency does not fight the caller for the GIL: prints its port, echoes every byte
# (backlog 4096), exits on SIGTERM or after argv[1] seconds (default 120).
ECHO_SERVER_CODE = r"""
import asyncio, signal, sys
try:
    import uvloop; uvloop.install()
except ImportError:
    pass
async def handle(r, w):
    try:
        while True:
            b = await r.read(65536)
            if not b:
                break
            w.write(b)
            await w.drain()
        w.close()
    except (ConnectionError, OSError):
        w.transport.abort()
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
    print(srv.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    await asyncio.wait_for(stop, float(sys.argv[1]) if len(sys.argv) > 1 else 120)
asyncio.run(main())
"""


def interleaved_rtt_ms(
    port_a: int, port_b: int, n: int, warmup: int = 10, host: str = "127.0.0.1"
) -> tuple[list[float], list[float]]:
    """n echo round trips [ms] on each of two paths, alternating a/b so both see the same
    host noise; the first `warmup` pairs are dropped."""
    a: list[float] = []
    b: list[float] = []
    with (
        socket.create_connection((host, port_a), timeout=10) as sa,
        socket.create_connection((host, port_b), timeout=10) as sb,
    ):
        for s in (sa, sb):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(warmup + n):
            for s, out in ((sa, a), (sb, b)):
                t0 = time.perf_counter_ns()
                s.sendall(PAYLOAD)
                _recv_exact(s, len(PAYLOAD))
                if i >= warmup:
                    out.append((time.perf_counter_ns() - t0) / 1e6)
    return a, b


def enable_rx_stamps(s: socket.socket) -> None:
    """Have the kernel stamp what `s` receives (set it on a listener: accepted sockets inherit it)."""
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


def recv_stamped(s: socket.socket, bufsize: int) -> tuple[bytes, int | None]:
    """One recv and the kernel's receive stamp of it: CLOCK_REALTIME ns (comparable with
    time.time_ns()) of the newest segment the read returned, when the kernel received it, before
    this process woke up to read it; None without a stamp (enable_rx_stamps not set)."""
    data, ancillary, _flags, _addr = s.recvmsg(bufsize, socket.CMSG_SPACE(_TIMESPEC.size))
    for level, kind, raw in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(raw)
            return data, sec * 1_000_000_000 + nsec
    return data, None

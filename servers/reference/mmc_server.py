"""A server whose latency is known in closed form: c workers serving one FIFO queue, each request
taking an exponentially distributed time (a sleep), so under Poisson arrivals it is an M/M/c
FCFS queue and its sojourn-time distribution (mean, p99, any percentile) is exact.

It is not one of perfctl's bundled servers (no catalogue entry, no servers/PROTOCOL.md
conformance): tests and benchmarks start it through `cmd:`, the way a user starts a server
perfctl did not write, to check the queueing models and the capacity search against a truth
that does not depend on perfctl's own servers.

    python servers/reference/mmc_server.py --port 8080 --workers 4 --service-ms 4 [--seed 1]
        [--dist exp|fixed] [--no-server-timing] [--host 127.0.0.1]

Every request (any method, any path; a body with Content-Length is read and ignored) joins one
FIFO queue when it has been read whole; a free worker takes the oldest, sleeps its service time
and answers `200 ok` on the same connection (keep-alive; `Connection: close` is honoured). So a
request never waits behind its own connection's worker: connections are not pinned to workers.
`Server-Timing: queue;dur=Q, svc;dur=S` (ms) gives the time queued and the time served, unless
--no-server-timing. The service time includes the sleep's own overshoot (the host's timer),
which Server-Timing reports as measured. `GET /stats` answers the count of requests served,
as JSON, without queueing. Standard library only; one I/O thread, `workers` worker threads.
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import selectors
import socket
import sys
import threading
import time

MAX_HEAD_BYTES = 16 * 1024


class Served:
    """Requests answered so far (GET /stats), shared by the workers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0

    def add(self) -> None:
        with self.lock:
            self.count += 1


def parse_head(buf: bytes) -> tuple[int, int, bool, str] | None:
    """(head length, body length, keep-alive, path) of the first request in buf; None when
    the head is not complete yet. Raises ValueError on a malformed head."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > MAX_HEAD_BYTES:
            raise ValueError("head too large")
        return None
    lines = buf[:end].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError(f"bad request line {lines[0]!r}")
    body, keep = 0, parts[2] == "HTTP/1.1"
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == "content-length":
            body = int(value)
        elif name == "connection":
            keep = value != "close" if parts[2] == "HTTP/1.1" else value == "keep-alive"
    return end + 4, body, keep, parts[1]


def send_all(sock: socket.socket, data: bytes) -> bool:
    """Write data on a non-blocking socket, waiting while the send buffer is full."""
    view = memoryview(data)
    while view:
        try:
            n = sock.send(view)
        except BlockingIOError:
            selectors.DefaultSelector().select(0.05)
            continue
        except OSError:
            return False
        view = view[n:]
    return True


def answer(sock: socket.socket, queue_ms: float, svc_ms: float, keep: bool, timing: bool) -> bool:
    head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
    if timing:
        head += f"Server-Timing: queue;dur={queue_ms:.3f}, svc;dur={svc_ms:.3f}\r\n"
    if not keep:
        head += "Connection: close\r\n"
    return send_all(sock, (head + "\r\nok").encode())


def worker(fifo: queue.Queue, draw, served: Served, timing: bool, closer) -> None:
    while True:
        item = fifo.get()
        if item is None:
            return
        sock, read_ns, keep = item
        start_ns = time.perf_counter_ns()
        time.sleep(draw())
        svc_ms = (time.perf_counter_ns() - start_ns) / 1e6
        served.add()
        ok = answer(sock, (start_ns - read_ns) / 1e6, svc_ms, keep, timing)
        if not ok or not keep:
            closer(sock)


def serve(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    rng_lock = threading.Lock()
    mean_s = args.service_ms / 1e3

    def draw() -> float:
        if args.dist == "fixed":
            return mean_s
        with rng_lock:  # one stream of draws, in the order workers take requests
            return rng.expovariate(1.0 / mean_s)

    listener = socket.create_server((args.host, args.port), backlog=args.backlog)
    listener.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    fifo: queue.Queue = queue.Queue()
    served = Served()
    buffers: dict[socket.socket, bytearray] = {}
    to_close: queue.SimpleQueue = queue.SimpleQueue()
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    sel.register(wake_r, selectors.EVENT_READ, "wake")

    def closer(sock: socket.socket) -> None:  # from a worker: the I/O thread owns the selector
        to_close.put(sock)
        try:
            wake_w.send(b"x")
        except OSError:
            pass

    timing = not args.no_server_timing
    for _ in range(args.workers):
        threading.Thread(
            target=worker, args=(fifo, draw, served, timing, closer), daemon=True
        ).start()
    print(
        f"mmc_server listening on {args.host}:{listener.getsockname()[1]} "
        f"workers={args.workers} service_ms={args.service_ms} dist={args.dist}",
        flush=True,
    )

    def drop(sock: socket.socket) -> None:
        if sock in buffers:
            del buffers[sock]
            try:
                sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()

    while True:
        for key, _ in sel.select():
            if key.fileobj is listener:
                while True:
                    try:
                        conn, _ = listener.accept()
                    except BlockingIOError:
                        break
                    conn.setblocking(False)
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    buffers[conn] = bytearray()
                    sel.register(conn, selectors.EVENT_READ, None)
                continue
            if key.data == "wake":
                try:
                    wake_r.recv(4096)
                except BlockingIOError:
                    pass
                while not to_close.empty():
                    drop(to_close.get())
                continue
            sock = key.fileobj
            try:
                data = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                drop(sock)
                continue
            buf = buffers[sock]
            buf += data
            while True:
                try:
                    head = parse_head(bytes(buf))
                except ValueError:
                    send_all(sock, b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                    drop(sock)
                    break
                if head is None or len(buf) < head[0] + head[1]:
                    break
                size, body, keep, path = head
                del buf[: size + body]
                read_ns = time.perf_counter_ns()
                if path == "/stats":
                    with served.lock:
                        text = json.dumps({"served": served.count})
                    send_all(
                        sock,
                        (
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            f"Content-Length: {len(text)}\r\n\r\n{text}"
                        ).encode(),
                    )
                    continue
                fifo.put((sock, read_ns, keep))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--workers", type=int, default=4, help="c: requests served at once")
    p.add_argument("--service-ms", type=float, default=4.0, help="mean service time, ms")
    p.add_argument("--dist", choices=("exp", "fixed"), default="exp")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--backlog", type=int, default=1024)
    p.add_argument("--no-server-timing", action="store_true")
    args = p.parse_args(argv)
    if args.workers < 1 or args.service_ms <= 0:
        p.error("--workers must be >= 1 and --service-ms > 0")
    try:
        serve(args)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the parts of benchmarks/netem_accuracy.py share: proxies and servers started under
perfctl's process supervisor (Proc, StatsProxy whose stats lines it reads, proxy, nginx or a
uvloop responder), interleaved echo round trips, load from wrk or a Python client, and the
host's and a process's CPU seconds. Importing it puts the repo root on sys.path.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.netem.probe import (
    interleaved_rtt_ms,
)
from orchestrator.proc.ports import free_port  # noqa: E402
from orchestrator.proc.process import spawn, spawn_until_line, terminate  # noqa: E402

HTTP_CODE = r"""
import asyncio, signal
try:
    import uvloop; uvloop.install()
except ImportError:
    pass
RESP = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n\r\nok\n"
class P(asyncio.Protocol):
    def connection_made(self, t): self.t = t; self.buf = b""
    def data_received(self, d):
        self.buf += d
        n = self.buf.count(b"\r\n\r\n")
        if n:
            self.buf = self.buf[self.buf.rfind(b"\r\n\r\n") + 4:]
            self.t.write(RESP * n)
async def main():
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(P, "127.0.0.1", 0, backlog=4096)
    print(srv.sockets[0].getsockname()[1], flush=True)
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    await asyncio.wait_for(stop, 900)
asyncio.run(main())
"""


class Proc:
    """A child that prints its port on its first line, under perfctl's process supervisor."""

    def __init__(self, argv):
        self.p, line, err = spawn_until_line([str(a) for a in argv], 30.0, str(argv[0]))
        err.close()
        m = re.search(r"(\d+)(?: to |\s*$)", line)
        self.line = line
        self.port = int(m.group(1)) if m else None
        m2 = re.search(r"echo [\d.]+:(\d+)", line)
        self.echo_port = int(m2.group(1)) if m2 else None

    def stop(self):
        terminate(self.p, grace_s=5.0)


def proxy(binary, to_port, *flags, echo=False) -> Proc:
    argv = [binary, "--listen", "127.0.0.1:0", "--to", f"127.0.0.1:{to_port}", *flags]
    if echo:
        argv += ["--echo-listen", "127.0.0.1:0"]
    return Proc(argv)


def p50(xs) -> float:
    return statistics.median(xs)


def interleaved(port_a, port_b, n, warmup=10):
    a, b = interleaved_rtt_ms(port_a, port_b, n, warmup)
    return np.array(a), np.array(b)


def start_http_server(tmp: Path):
    """nginx (1 worker, `return 200`) if installed, else a uvloop HTTP responder."""
    nginx = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None
    )
    if nginx:
        port = free_port()
        conf = tmp / "nginx.conf"
        conf.write_text(f"""worker_processes 1; daemon off; pid {tmp}/nginx.pid; error_log {tmp}/error.log;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 100000000; client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp};
  uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
  server {{ listen 127.0.0.1:{port} backlog=4096; location / {{ return 200 "ok\\n"; }} }} }}
""")
        p = spawn([nginx, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log")])
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return "nginx", port, p
            except OSError:
                time.sleep(0.05)
        terminate(p)
    proc = Proc([sys.executable, "-c", HTTP_CODE])
    return "python-uvloop", proc.port, proc.p


def host_busy_s() -> float:
    """CPU seconds the host's CPUs spent busy (not idle, iowait or stolen) since boot."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(f[:8]) - f[3] - f[4] - f[7]) / os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of one process, all its threads."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def wrk_rps(port: int, conns: int, seconds: float) -> tuple[float, float]:
    """(requests/s, p50 latency ms) from wrk."""
    out = subprocess.run(
        [
            "/usr/bin/wrk",
            "-t1",
            f"-c{conns}",
            f"-d{seconds}s",
            "--latency",
            f"http://127.0.0.1:{port}/",
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    m = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    lat = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)] if m else float("nan")
    return rps, lat


def py_rps(port: int, conns: int, seconds: float) -> tuple[float, float]:
    """Fallback load: a uvloop client, `conns` keep-alive connections, closed loop."""
    import asyncio

    async def main():
        done = 0
        lats = []
        stop = time.perf_counter() + seconds

        async def one():
            nonlocal done
            r, w = await asyncio.open_connection("127.0.0.1", port)
            req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                w.write(req)
                await r.readuntil(b"\r\n\r\n")
                await r.readexactly(3)
                lats.append(time.perf_counter() - t0)
                done += 1
            w.close()

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(conns)))
        return done / (time.perf_counter() - t0), statistics.median(lats) * 1e3

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(main())


def parse_stats(text: str) -> dict[str, int]:
    lines = [ln for ln in text.splitlines() if "perfctl-proxy stats:" in ln]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", lines[-1])} if lines else {}


class StatsProxy(Proc):
    """A proxy whose stats lines we can ask for (SIGUSR1) and read without moving its offset."""

    def __init__(self, argv):
        self.p, self.line, self.err = spawn_until_line(
            [str(a) for a in argv], 30.0, "perfctl-proxy"
        )
        self.port = int(re.search(r"listening on [\d.]+:(\d+)", self.line).group(1))
        m2 = re.search(r"echo [\d.]+:(\d+)", self.line)
        self.echo_port = int(m2.group(1)) if m2 else None

    def text(self) -> str:
        fd = self.err.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def stats(self) -> dict[str, int]:
        n = self.text().count("stats:")
        self.p.send_signal(signal.SIGUSR1)
        t_end = time.monotonic() + 5
        while self.text().count("stats:") == n and time.monotonic() < t_end:
            time.sleep(0.005)
        return parse_stats(self.text())

    def stop(self):
        terminate(self.p, grace_s=5.0)
        self.err.close()

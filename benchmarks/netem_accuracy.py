"""How accurate and how lean is the network emulation? One run, one table.

    .venv/bin/python benchmarks/netem_accuracy.py [--quick]

Measures, on this host, in one run:
  * delay 1, 10, 50 ms (proxy): added RTT p50 (through the proxy minus direct, same echo
    server) and its error vs 2 x delay;
  * jitter 2 ms on 10 ms (uniform, normal, pareto): KS p-value of the added RTTs against the
    configured law (raw, and convolved with the host noise measured on an interleaved
    no-jitter path);
  * bandwidth 10 and 100 mbit: bulk-transfer throughput error (proxy; tbf too where it works);
  * delay 0: proxy's added p50 in microseconds (1 connection ping-pong) and requests/s through
    the proxy / direct with 50 connections (wrk against nginx if both exist, else a Python
    client against a Python HTTP server).
Goals (from the brief): added p50 <= 50 us and >= 50 % of direct requests/s at delay 0.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.experiment.network import Network  # noqa: E402
from orchestrator.netem import backend_status, build_proxy, make_injector  # noqa: E402
from orchestrator.run.ports import free_port  # noqa: E402
from orchestrator.run.process import spawn, spawn_until_line, terminate  # noqa: E402
from orchestrator.netem.probe import (ECHO_SERVER_CODE, echo_rtt_samples,  # noqa: E402
                                      echo_throughput_bps, interleaved_rtt_ms)
from orchestrator.experiment.network import jitter_samples_ms  # noqa: E402

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
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
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


def wrk_rps(port: int, conns: int, seconds: float) -> tuple[float, float]:
    """(requests/s, p50 latency ms) from wrk."""
    out = subprocess.run(["/usr/bin/wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency",
                          f"http://127.0.0.1:{port}/"], capture_output=True, text=True,
                         timeout=seconds + 30).stdout
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


# --------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer samples, shorter load runs")
    args = ap.parse_args()
    q = args.quick
    binary = str(build_proxy())
    rows: list[tuple[str, str, str, str]] = []   # (what, measured, target, verdict)

    def row(what, measured, target, ok):
        rows.append((what, measured, target, "ok" if ok else "MISS"))
        print(f"  {what:<48} {measured:<28} {target:<18} {'ok' if ok else 'MISS'}", flush=True)

    print(f"host: {os.cpu_count()} CPUs, load {open('/proc/loadavg').read().split()[:3]}")
    echo = Proc([sys.executable, "-c", ECHO_SERVER_CODE, "900"])
    tmp = Path(tempfile.mkdtemp(prefix="perfctl-netem-bench-"))
    started: list[Proc] = []
    try:
        # ---- delay accuracy
        direct = echo_rtt_samples("127.0.0.1", echo.port, samples=300 if not q else 100, warmup=20)
        for d, n in ((1, 300), (10, 100), (50, 40)):
            n = max(20, n // 3) if q else n
            p = proxy(binary, echo.port, "--delay", f"{d}ms")
            started.append(p)
            via = echo_rtt_samples("127.0.0.1", p.port, samples=n, warmup=5)
            p.stop()
            added = p50(via) - p50(direct)
            err = added - 2 * d
            row(f"delay {d}ms: added RTT p50 (n={n})", f"{added:.3f} ms (err {err * 1e3:+.0f} us, {err / (2 * d) * 100:+.2f}%)",
                "|err| <= max(10%,0.5ms)", abs(err) <= max(0.1 * 2 * d, 0.5))

        # ---- jitter KS
        n = 60 if q else 200
        for dist in ("uniform", "normal", "pareto"):
            ref = proxy(binary, echo.port, "--delay", "10ms", echo=True)
            jp = proxy(binary, echo.port, "--delay", "10ms", "--jitter", "2ms", "--distribution", dist,
                       "--seed", "3", echo=True)
            started += [ref, jp]
            jit, plain = interleaved(jp.echo_port, ref.echo_port, n)
            ref.stop()
            jp.stop()
            rng = np.random.default_rng(1)
            model = sum(np.maximum(0.0, 10.0 + jitter_samples_ms(rng, 100_000, 2.0, dist)) for _ in range(2))
            p_raw = stats.ks_2samp(jit - (np.median(plain) - 20.0), model).pvalue
            p_conv = stats.ks_2samp(jit, model + rng.choice(plain - 20.0, model.size)).pvalue
            row(f"jitter 2ms {dist} on 10ms: KS p (n={n})", f"{p_conv:.3f} (raw {p_raw:.3f})", "p > 0.001",
                p_conv > 0.001)

        # ---- bandwidth
        for bw in (10e6, 100e6):
            p = proxy(binary, echo.port, "--bandwidth", f"{int(bw)}bit")
            started.append(p)
            got = echo_throughput_bps("127.0.0.1", p.port, int(bw / 8 * (0.5 if q else 1.0)))
            p.stop()
            err = got / bw - 1
            row(f"proxy bandwidth {bw / 1e6:g}mbit: bulk throughput", f"{got / 1e6:.2f} Mbit/s ({err * 100:+.1f}%)",
                "|err| <= 10%", abs(err) <= 0.10)
        if backend_status("tbf")[0]:
            for bw in ("10mbit", "100mbit"):
                spec = Network(backend="tbf", bandwidth=bw)
                with make_injector(spec) as inj:
                    inj.prepare()
                    res = inj.probe(samples=3)
                err = res.throughput_bps / spec.bandwidth_bps - 1
                row(f"tbf bandwidth {bw}: bulk goodput", f"{res.throughput_bps / 1e6:.2f} Mbit/s ({err * 100:+.1f}%)",
                    "|err| <= 10%", abs(err) <= 0.10)

        # ---- delay 0: added latency and throughput
        p0 = proxy(binary, echo.port)
        started.append(p0)
        m = 3000 if not q else 500
        d_s, v_s = [], []
        for _ in range(3):   # interleave blocks so both see the same host noise
            d_s += echo_rtt_samples("127.0.0.1", echo.port, samples=m // 3, warmup=20)
            v_s += echo_rtt_samples("127.0.0.1", p0.port, samples=m // 3, warmup=20)
        p0.stop()
        added_us = (p50(v_s) - p50(d_s)) * 1e3
        row(f"delay 0: proxy added RTT p50 (1 conn, n={m})", f"{added_us:.1f} us (direct {p50(d_s) * 1e3:.0f} us)",
            "<= 50 us", added_us <= 50)

        name, hport, hproc = start_http_server(tmp)
        use_wrk = os.path.exists("/usr/bin/wrk")
        load = wrk_rps if use_wrk else py_rps
        secs = 3 if q else 5
        p0 = proxy(binary, hport)
        started.append(p0)
        direct_r, via_r = [], []
        for _ in range(2 if q else 3):
            direct_r.append(load(hport, 50, secs))
            via_r.append(load(p0.port, 50, secs))
        p0.stop()
        terminate(hproc, grace_s=5.0)
        d_rps = p50([r for r, _ in direct_r])
        v_rps = p50([r for r, _ in via_r])
        d_lat = p50([lat for _, lat in direct_r])
        v_lat = p50([lat for _, lat in via_r])
        tool = f"{'wrk' if use_wrk else 'python client'} -c50 vs {name}"
        row(f"delay 0: req/s via proxy / direct ({tool})",
            f"{v_rps / d_rps:.2f} ({v_rps:,.0f} / {d_rps:,.0f})", ">= 0.50", v_rps / d_rps >= 0.5)
        row("delay 0: p50 latency under load, via - direct", f"{(v_lat - d_lat) * 1e3:+.0f} us "
            f"({v_lat * 1e3:.0f} vs {d_lat * 1e3:.0f} us)", "(info)", True)
    finally:
        for p in started:
            try:
                p.stop()
            except Exception:
                pass
        echo.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"{'measurement':<48} {'result':<28} {'target':<18} verdict")
    print("-" * 104)
    for what, measured, target, verdict in rows:
        print(f"{what:<48} {measured:<28} {target:<18} {verdict}")
    print(f"\nload average after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()

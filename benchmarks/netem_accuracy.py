"""How accurate and how lean is the network emulation? One run, one table.

    .venv/bin/python benchmarks/netem_accuracy.py [--rounds 5] [--quick] [--only delay0,loss,...]
        [--compare-binary OLD_BUILD/perfctl-proxy]

Measures, on this host, in one run:
  * the delay seen from outside, over --rounds alternating rounds (0, 1, 10, 50 ms, 0, ...):
    `perfctl netem proxy --delay D` in front of nginx, a raw keep-alive socket client (not
    perfctl's) alternating requests through it and direct at the same cadence, and wrk -c1
    through and direct at the same cadence; the added error beyond 2 x D, p50 of the rounds
    (goal: within +/-100 us at 1, 10 and 50 ms), also at the client's kernel receive stamp
    (without the client's own wake-up); the proxy's release-time error p50/p99 (its histogram
    of send time - due time), when its send() returned (the segment in nginx's socket by then) and receive lag (its wake-up - the kernel's stamp) as diagnostics;
    with --compare-binary, another proxy build measured in the same rounds (before/after);
  * Gilbert-Elliott loss: one-way delays of spaced frames through the proxy to a sink; the
    frames held back an rto give the loss rate and the mean burst length, vs the chain's;
  * a mid-trial schedule end to end (`perfctl run` of a tiny experiment): when the step took
    effect in the trial's timeline and when the first request crossed the new delay, vs its
    `at`. Goal: within 100 ms. Then a step back down: no request sent after it waits past the
    requests held under the old delay by more than the steady part's worst + 5 ms;
  * jitter 2 ms on 10 ms (uniform, normal, pareto): KS p-value of the added RTTs against the
    configured law (raw, and convolved with the host noise measured on an interleaved
    no-jitter path);
  * bandwidth 10 and 100 mbit: bulk-transfer throughput error (proxy; tbf too where it works);
  * delay 0: proxy's added p50 in microseconds (1 connection ping-pong) and requests/s through
    the proxy / direct with 50 connections (wrk against nginx if both exist, else a Python
    client against a Python HTTP server).
Goals (issues 20, 32): added error within +/-0.1 ms; at delay 0 added p50 <= 30 us and >= 0.8 x
direct requests/s (alternated over --rounds rounds). --quick: 1 round, fewer samples (a smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
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
from orchestrator.netem.expected import jitter_samples_ms, loss_sampling_interval  # noqa: E402
from orchestrator.netem.probe import (
    ECHO_SERVER_CODE,
    echo_rtt_samples,  # noqa: E402
    echo_throughput_bps,
    enable_rx_stamps,
    interleaved_rtt_ms,
    recv_stamped,
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


# --------------------------------------------------------------------------- sections
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


HTTP_PING = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
CADENCE_GAP_MS = 2  # idle after each request of the outside view (both paths)
WRK_CADENCE_LUA = """
-- one request, then `gap` ms idle (wrk's delay() hook), so wrk keeps a chosen cadence
function init(args) gap = tonumber(args[1]) end
function delay() return gap end
"""


class HttpPinger:
    """A raw keep-alive HTTP/1.1 client, not perfctl's: one GET at a time on one connection.
    Each ping gives two round trips (ns): time.time_ns() from just before send() to just after
    the last byte was read (what an application sees), and to the kernel's receive stamp of
    the response's last segment (the same, without this client's own wake-up)."""

    def __init__(self, port: int):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        enable_rx_stamps(self.s)

    def ping(self) -> tuple[int, int]:
        t0 = time.time_ns()
        self.s.sendall(HTTP_PING)
        buf, need, rx_ns = b"", None, None
        while need is None or len(buf) < need:
            data, rx_ns = recv_stamped(self.s, 65536)
            if not data:
                raise ConnectionError("the server closed the keep-alive connection")
            buf += data
            end = buf.find(b"\r\n\r\n")
            if need is None and end >= 0:
                m = re.search(rb"(?i)content-length:\s*(\d+)", buf[:end])
                need = end + 4 + (int(m.group(1)) if m else 0)
        t1 = time.time_ns()
        return t1 - t0, (rx_ns if rx_ns is not None else t1) - t0

    def close(self) -> None:
        self.s.close()


def wrk_p50_ms(port: int, seconds: int, gap_ms: int, script: Path) -> float:
    """p50 latency (ms, wrk's own, 10 us resolution) of wrk -c1 with gap_ms idle between requests."""
    out = subprocess.run(
        [
            "/usr/bin/wrk",
            "-t1",
            "-c1",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(script),
            f"http://127.0.0.1:{port}/",
            "--",
            str(gap_ms),
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
    ).stdout
    m = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)] if m else float("nan")


def delay_seen_from_outside(
    tmp: Path, rounds: int, q: bool, row, compare_binary: str | None = None
) -> None:
    """Delay 0/1/10/50 ms through `perfctl netem proxy` in front of nginx, measured by clients
    that are not perfctl's, against direct requests to the same nginx at the same cadence.

    Per round and delay D, a raw keep-alive client alternates a request through the proxy and
    one direct, with CADENCE_GAP_MS idle after each: nginx idles D + CADENCE_GAP_MS + D before
    either kind of request, so the host's wake-up from idle is in both. The added error beyond
    2 x D is p50(through) - p50(direct) - 2 x D. One thing the baseline cannot match: the
    client waits 2 x D for a reply through the proxy and ~0.1 ms for a direct one, and a thread
    woken from a long wait wakes later; the same figure at the client's kernel receive stamp
    leaves that wake-up out. Then wrk -c1 through and direct, its delay() hook keeping the same
    cadence (CADENCE_GAP_MS after a reply through the proxy, 2 x D + CADENCE_GAP_MS after a
    direct one). The proxy's own release-error and receive-lag figures (its stats window over
    the round) are diagnostics. Verdicts (issue 32): |p50 over the rounds| <= 100 us at 1, 10
    and 50 ms.

    compare_binary: another perfctl-proxy (e.g. a build of an older commit) measured the same
    way in the same rounds, its requests interleaved with this checkout's (through this one,
    direct, through the other, direct): a before/after that the host's load cannot tilt."""
    gap_ms = CADENCE_GAP_MS
    delays = (0, 1, 10, 50)
    samples = {0: 200, 1: 200, 10: 80, 50: 30}
    wrk_s = 2 if q else 4  # wrk takes whole seconds
    name, hport, hproc = start_http_server(tmp)
    script = tmp / "cadence.lua"
    script.write_text(WRK_CADENCE_LUA)
    use_wrk = os.path.exists("/usr/bin/wrk")
    proxies: dict[int, StatsProxy] = {}
    others: dict[int, StatsProxy] = {}
    keys = ("user", "stamp", "other_user", "other_stamp", "wrk", "rel50", "rel99", "rx50", "rx99")
    keys += ("sent50", "sent99")
    per = {d: {k: [] for k in keys} for d in delays}
    try:
        # through perfctl's CLI, as a user runs it (this checkout's, wherever we run from)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))
        )
        for d in delays:
            argv = [sys.executable, "-m", "orchestrator.cli", "netem", "proxy"]
            argv += ["--listen", "127.0.0.1:0", "--to", f"127.0.0.1:{hport}"]
            proxies[d] = StatsProxy(argv + (["--delay", f"{d}ms"] if d else []))
            if compare_binary:
                argv = [compare_binary, "--listen", "127.0.0.1:0", "--to", f"127.0.0.1:{hport}"]
                others[d] = StatsProxy(argv + (["--delay", f"{d}ms"] if d else []))
        for _r in range(rounds):
            for d in delays:
                n = samples[d] // (3 if q else 1)
                px = proxies[d]
                clients = {"": HttpPinger(px.port), "direct": HttpPinger(hport)}
                if compare_binary:
                    clients["other_"] = HttpPinger(others[d].port)
                got: dict[str, list[tuple[int, int]]] = {k: [] for k in clients}
                try:
                    for c in clients.values():  # warm-up: connections open, nginx warm
                        c.ping()
                    px.stats()  # opens the proxy's stats window
                    for _ in range(n):
                        for via in (k for k in clients if k != "direct"):
                            for k in (via, "direct"):
                                got[k].append(clients[k].ping())
                                time.sleep(gap_ms / 1e3)
                    st = px.stats()
                finally:
                    for c in clients.values():
                        c.close()
                two_d_us = 2 * d * 1e3
                dr = np.array(got.pop("direct")) / 1e3  # us: [user, stamp]
                for via, samples_ns in got.items():
                    v = np.array(samples_ns) / 1e3
                    per[d][f"{via}user"].append(np.median(v[:, 0]) - np.median(dr[:, 0]) - two_d_us)
                    per[d][f"{via}stamp"].append(
                        np.median(v[:, 1]) - np.median(dr[:, 1]) - two_d_us
                    )
                per[d]["rel50"].append(st.get("win_release_err_p50_ns", 0) / 1e3)
                per[d]["rel99"].append(st.get("win_release_err_p99_ns", 0) / 1e3)
                per[d]["rx50"].append(st.get("win_rx_lag_p50_ns", float("nan")) / 1e3)
                per[d]["rx99"].append(st.get("win_rx_lag_p99_ns", float("nan")) / 1e3)
                per[d]["sent50"].append(st.get("win_sent_err_p50_ns", float("nan")) / 1e3)
                per[d]["sent99"].append(st.get("win_sent_err_p99_ns", float("nan")) / 1e3)
                if use_wrk:
                    w_via = wrk_p50_ms(px.port, wrk_s, gap_ms, script)
                    w_direct = wrk_p50_ms(hport, wrk_s, 2 * d + gap_ms, script)
                    per[d]["wrk"].append((w_via - w_direct) * 1e3 - two_d_us)
    finally:
        for px in (*proxies.values(), *others.values()):
            px.stop()
        terminate(hproc, grace_s=5.0)

    def rounds_of(xs) -> str:
        return " ".join(f"{x:+.0f}" for x in xs)

    for d in delays:
        v = per[d]
        goal = d > 0
        target = "|p50| <= 100 us" if goal else "(info: the hop)"
        err = p50(v["user"])
        row(
            f"delay {d}ms: added beyond 2xD, raw client vs {name}",
            f"{err:+.0f} us (rounds {rounds_of(v['user'])})",
            target,
            abs(err) <= 100 or not goal,
        )
        err = p50(v["stamp"])
        row(
            f"delay {d}ms: same at the client's kernel stamp",
            f"{err:+.0f} us (rounds {rounds_of(v['stamp'])})",
            target,
            abs(err) <= 100 or not goal,
        )
        if v["wrk"]:
            err = p50(v["wrk"])
            row(
                f"delay {d}ms: wrk -c1 p50 through - direct - 2xD",
                f"{err:+.0f} us (rounds {rounds_of(v['wrk'])})",
                target,
                abs(err) <= 100 or not goal,
            )
        if v["other_user"]:
            row(
                f"delay {d}ms: --compare-binary, raw client / stamp",
                f"{p50(v['other_user']):+.0f} / {p50(v['other_stamp']):+.0f} us "
                f"(this build {p50(v['user']):+.0f} / {p50(v['stamp']):+.0f})",
                "(info: same rounds)",
                True,
            )
        if goal:
            row(
                f"delay {d}ms: proxy's release error p50 / p99",
                f"{p50(v['rel50']):+.1f} / {max(v['rel99']):+.1f} us (worst round)",
                "(diagnostic)",
                True,
            )
            row(
                f"delay {d}ms: proxy's send() returned p50 / p99",
                f"{p50(v['sent50']):+.1f} / {max(v['sent99']):+.1f} us (worst round)",
                "(diagnostic)",
                True,
            )
            row(
                f"delay {d}ms: proxy's receive lag p50 / p99",
                f"{p50(v['rx50']):.1f} / {max(v['rx99']):.1f} us (worst round)",
                "(diagnostic)",
                True,
            )


def gilbert_elliott(binary, q, row):
    """One-way frames through the proxy to a sink thread: loss rate and mean burst length."""
    import struct
    import threading

    from orchestrator.experiment.network import GilbertElliott

    ge = GilbertElliott(p=0.02, r=0.25, loss_bad=0.9, loss_good=0.005)
    frame = struct.Struct("!qq")
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    owd: dict[int, float] = {}

    def sink():
        c, _ = ls.accept()
        buf = b""
        while True:
            b = c.recv(65536)
            now = time.perf_counter_ns()
            if not b:
                return
            buf += b
            while len(buf) >= frame.size:
                i, t0 = frame.unpack_from(buf)
                owd[i] = (now - t0) / 1e6
                buf = buf[frame.size :]

    threading.Thread(target=sink, daemon=True).start()
    # spaced wider than delay + rto, so each frame's delay is its own; a frame is "held" when
    # it arrives more than rto/2 late (host stalls of a few ms stay below that)
    n = 300 if q else 3000
    p = StatsProxy(
        [
            binary,
            "--listen",
            "127.0.0.1:0",
            "--to",
            f"127.0.0.1:{ls.getsockname()[1]}",
            "--delay",
            "1ms",
            "--rto",
            "20ms",
            "--threads",
            "1",
            "--gemodel",
            f"{ge.p},{ge.r},{ge.loss_bad},{ge.loss_good}",
        ]
    )
    try:
        s = socket.create_connection(("127.0.0.1", p.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(n):
            s.sendall(frame.pack(i, time.perf_counter_ns()))
            time.sleep(0.023)
        t_end = time.monotonic() + 5
        while len(owd) < n and time.monotonic() < t_end:
            time.sleep(0.01)
        held = p.stats().get("held_up")
        s.close()
    finally:
        p.stop()
        ls.close()
    lost = np.array([owd.get(i, 1e9) > 1.0 + 10.0 for i in range(n)])
    edges = np.diff(np.r_[0, lost.astype(int), 0])
    runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    rate, burst = lost.mean(), runs.mean() if runs.size else 0.0
    # the verdict: is the measurement one that n chunks of the configured chain show 99% of
    # the time? (a fixed tolerance around the long-run value fails a correct chain often:
    # n=3000 here holds only ~55 bad spells)
    (r_lo, r_hi), (b_lo, b_hi) = loss_sampling_interval(ge, n)
    row(
        f"Gilbert-Elliott loss rate (n={n} one-way chunks)",
        f"{rate * 100:.2f}% vs {ge.loss_rate() * 100:.2f}% (n={n}: 99% in {r_lo * 100:.2f}-{r_hi * 100:.2f}%)",
        "in the 99% band",
        r_lo <= rate <= r_hi,
    )
    row(
        "Gilbert-Elliott mean burst length",
        f"{burst:.2f} vs {ge.mean_burst():.2f} chunks (99% in {b_lo:.2f}-{b_hi:.2f})",
        "in the 99% band",
        b_lo <= burst <= b_hi,
    )
    if held is not None:
        row(
            "Gilbert-Elliott: chunks the proxy held vs seen held",
            f"{held} vs {int(lost.sum())}",
            "(info)",
            True,
        )


SCHEDULE_YAML = """
name: netem-schedule-bench
servers:
  py: {impl: python, model: async}
workload: {path: /work}
load: {mode: closed, connections: 4, duration: 5s, warmup: 1s}
network: {delay: 1ms, schedule: [{at: 2500ms, delay: 20ms}, {at: 4s, delay: 1ms}]}
"""


def schedule_end_to_end(tmp: Path, row):
    """perfctl run of a tiny experiment whose network changes at 2.5 s: the change in the
    timeline and the first request that crossed the new delay, vs 2.5 s."""
    import pandas as pd

    (tmp / "sched.yaml").write_text(SCHEDULE_YAML)
    out = tmp / "sched-run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(tmp / "sched.yaml"),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if proc.returncode != 0:
        row("schedule: perfctl run", f"exit {proc.returncode}", "exit 0", False)
        print(proc.stdout[-2000:], proc.stderr[-2000:])
        return
    tdir = next((out / "cells").glob("*/trial-*"))
    change = json.loads((tdir / "network_changes.json").read_text())["changes"][0]
    tl = pd.read_parquet(tdir / "timeline.parquet")
    in_tl = tl["network_change_s"].dropna()
    req = pd.read_parquet(tdir / "requests.parquet")
    start = json.loads((tdir / "summary.json").read_text())["start_ns"]
    sent_s = (req["sent_ns"] - start) / 1e9
    lat = (req["done_ns"] - req["sent_ns"]) / 1e6
    seen = sent_s[(lat >= 40 * 0.95) & (sent_s > 1.0)].min()
    err_tl = (float(in_tl.iloc[0]) - 2.5) * 1e3 if len(in_tl) else float("nan")
    row(
        "schedule at 2.5s: change in the timeline",
        f"{float(in_tl.iloc[0]):.4f} s ({err_tl:+.1f} ms)" if len(in_tl) else "missing",
        "|err| <= 100 ms",
        abs(err_tl) <= 100,
    )
    row(
        "schedule at 2.5s: first request over new delay",
        f"sent {seen:.4f} s ({(seen - 2.5) * 1e3:+.1f} ms)",
        "|err| <= 100 ms",
        abs(seen - 2.5) <= 0.1,
    )
    row(
        "schedule at 2.5s: applied vs due (proxy)",
        f"{(change['applied_s'] - change['due_s']) * 1e3:+.2f} ms",
        "(info)",
        True,
    )
    # the step down at 4 s (issue 20: a +233 ms wait was once seen after a change, on a host
    # whose CPU pressure was ~90%): a request sent after it may wait behind what was sent
    # under 20 ms (at most until that is due), never longer. The bar is the worst
    # send-to-done of the steady 1 ms stretch before 2.5 s (this host's noise) + 5 ms
    down = json.loads((tdir / "network_changes.json").read_text())["changes"][1]["applied_s"]
    steady = lat[(sent_s > 1.2) & (sent_s < change["applied_s"] - 0.1)]
    held_until = sent_s[sent_s < down].max() + 2 * 0.020
    after = (sent_s > down + 0.001) & (sent_s < down + 0.3)
    excess = lat[after] - np.maximum(held_until - sent_s[after], 0.0) * 1e3
    worst = float(excess.max()) if after.any() else float("nan")
    bar = float(steady.max()) if len(steady) else float("nan")
    row(
        "schedule step down at 4s: worst wait past the held requests",
        f"{worst:.2f} ms (n={int(after.sum())})",
        f"<= steady max + 5 = {bar + 5:.2f} ms",
        worst <= bar + 5,
    )


# --------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--quick", action="store_true", help="1 round, fewer samples, shorter load runs"
    )
    ap.add_argument(
        "--rounds", type=int, default=None, help="alternating rounds (default 5; 1 with --quick)"
    )
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated parts to run: precision, jitter, "
        "bandwidth, delay0, loss, schedule (default: all)",
    )
    ap.add_argument(
        "--compare-binary",
        default=None,
        help="precision part: also measure this perfctl-proxy binary (e.g. a build of an older "
        "commit), interleaved with this checkout's in the same rounds",
    )
    args = ap.parse_args()
    parts = set(filter(None, args.only.split(",")))
    unknown = parts - {"precision", "jitter", "bandwidth", "delay0", "loss", "schedule"}
    if unknown:
        ap.error(f"--only: unknown part(s) {', '.join(sorted(unknown))}")

    def want(part: str) -> bool:
        return not parts or part in parts

    q = args.quick
    rounds = args.rounds or (1 if q else 5)
    binary = str(build_proxy())
    rows: list[tuple[str, str, str, str]] = []  # (what, measured, target, verdict)

    def row(what, measured, target, ok):
        rows.append((what, measured, target, "ok" if ok else "MISS"))
        print(f"  {what:<52} {measured:<34} {target:<18} {'ok' if ok else 'MISS'}", flush=True)

    print(f"host: {os.cpu_count()} CPUs, load {open('/proc/loadavg').read().split()[:3]}")
    echo = Proc([sys.executable, "-c", ECHO_SERVER_CODE, "900"])
    tmp = Path(tempfile.mkdtemp(prefix="perfctl-netem-bench-"))
    started: list[Proc] = []
    try:
        # ---- the delay as clients outside perfctl see it, and the proxy's release precision
        if want("precision"):
            delay_seen_from_outside(tmp, rounds, q, row, args.compare_binary)
        # ---- jitter KS
        if want("jitter"):
            n = 60 if q else 200
            for dist in ("uniform", "normal", "pareto"):
                ref = proxy(binary, echo.port, "--delay", "10ms", echo=True)
                jp = proxy(
                    binary,
                    echo.port,
                    "--delay",
                    "10ms",
                    "--jitter",
                    "2ms",
                    "--distribution",
                    dist,
                    "--seed",
                    "3",
                    echo=True,
                )
                started += [ref, jp]
                jit, plain = interleaved(jp.echo_port, ref.echo_port, n)
                ref.stop()
                jp.stop()
                rng = np.random.default_rng(1)
                model = sum(
                    np.maximum(0.0, 10.0 + jitter_samples_ms(rng, 100_000, 2.0, dist))
                    for _ in range(2)
                )
                p_raw = stats.ks_2samp(jit - (np.median(plain) - 20.0), model).pvalue
                p_conv = stats.ks_2samp(jit, model + rng.choice(plain - 20.0, model.size)).pvalue
                row(
                    f"jitter 2ms {dist} on 10ms: KS p (n={n})",
                    f"{p_conv:.3f} (raw {p_raw:.3f})",
                    "p > 0.001",
                    p_conv > 0.001,
                )
        # ---- bandwidth
        if want("bandwidth"):
            for bw in (10e6, 100e6):
                p = proxy(binary, echo.port, "--bandwidth", f"{int(bw)}bit")
                started.append(p)
                got = echo_throughput_bps("127.0.0.1", p.port, int(bw / 8 * (0.5 if q else 1.0)))
                p.stop()
                err = got / bw - 1
                row(
                    f"proxy bandwidth {bw / 1e6:g}mbit: bulk throughput",
                    f"{got / 1e6:.2f} Mbit/s ({err * 100:+.1f}%)",
                    "|err| <= 10%",
                    abs(err) <= 0.10,
                )
            if backend_status("tbf")[0]:
                for bw in ("10mbit", "100mbit"):
                    spec = Network(backend="tbf", bandwidth=bw)
                    with make_injector(spec) as inj:
                        inj.prepare()
                        res = inj.probe(samples=3)
                    err = res.throughput_bps / spec.bandwidth_bps - 1
                    row(
                        f"tbf bandwidth {bw}: bulk goodput",
                        f"{res.throughput_bps / 1e6:.2f} Mbit/s ({err * 100:+.1f}%)",
                        "|err| <= 10%",
                        abs(err) <= 0.10,
                    )
        # ---- delay 0: added latency and throughput, alternating with direct
        if want("delay0"):
            p0 = proxy(binary, echo.port)
            started.append(p0)
            m = 3000 if not q else 500
            d_s, v_s = [], []
            for _ in range(max(3, rounds)):  # interleave blocks so both see the same host noise
                d_s += echo_rtt_samples("127.0.0.1", echo.port, samples=m // 3, warmup=20)
                v_s += echo_rtt_samples("127.0.0.1", p0.port, samples=m // 3, warmup=20)
            p0.stop()
            added_us = (p50(v_s) - p50(d_s)) * 1e3
            row(
                f"delay 0: proxy added RTT p50 (1 conn, n={len(v_s)})",
                f"{added_us:.1f} us (direct {p50(d_s) * 1e3:.0f} us)",
                "<= 30 us",
                added_us <= 30,
            )
            # the same with the idle poll on (--poll 50us): a worker keeps polling 50 us after I/O,
            # so the next segment of a ping-pong skips the sleep/wake-up; its CPU is the price
            p1 = proxy(binary, echo.port, "--poll", "50us")
            started.append(p1)
            d_s, v_s, busy = [], [], 0.0
            for _ in range(max(3, rounds)):
                d_s += echo_rtt_samples("127.0.0.1", echo.port, samples=m // 3, warmup=20)
                c0, t0 = proc_cpu_s(p1.p.pid), time.perf_counter()
                v_s += echo_rtt_samples("127.0.0.1", p1.port, samples=m // 3, warmup=20)
                busy += (proc_cpu_s(p1.p.pid) - c0) / (time.perf_counter() - t0)
            p1.stop()
            added_poll = (p50(v_s) - p50(d_s)) * 1e3
            row(
                "delay 0, --poll 50us: added RTT p50 (1 conn)",
                f"{added_poll:.1f} us (proxy CPU {busy / max(3, rounds) * 100:.0f}% of a core)",
                "(info: <= 30 us)",
                True,
            )

            name, hport, hproc = start_http_server(tmp)
            use_wrk = os.path.exists("/usr/bin/wrk")
            load = wrk_rps if use_wrk else py_rps
            secs = 2 if q else 5
            p0 = proxy(binary, hport)
            pp = proxy(binary, hport, "--poll", "50us")
            started += [p0, pp]
            direct_r, via_r, poll_r = [], [], []
            cpu = {
                "direct_host": 0.0,
                "direct_req": 0.0,
                "via_host": 0.0,
                "via_proxy": 0.0,
                "via_req": 0.0,
            }
            for _ in range(rounds):
                h0 = host_busy_s()
                direct_r.append(load(hport, 50, secs))
                cpu["direct_host"] += host_busy_s() - h0
                cpu["direct_req"] += direct_r[-1][0] * secs
                h0, c0 = host_busy_s(), proc_cpu_s(p0.p.pid)
                via_r.append(load(p0.port, 50, secs))
                cpu["via_host"] += host_busy_s() - h0
                cpu["via_proxy"] += proc_cpu_s(p0.p.pid) - c0
                cpu["via_req"] += via_r[-1][0] * secs
                poll_r.append(load(pp.port, 50, secs))
            p0.stop()
            pp.stop()
            terminate(hproc, grace_s=5.0)
            ratios = [v / d for (v, _), (d, _) in zip(via_r, direct_r)]
            d_rps = p50([r for r, _ in direct_r])
            v_rps = p50([r for r, _ in via_r])
            d_lat = p50([lat for _, lat in direct_r])
            v_lat = p50([lat for _, lat in via_r])
            tool = f"{'wrk' if use_wrk else 'python client'} -c50 vs {name}"
            row(
                f"delay 0: req/s via proxy / direct ({tool})",
                f"{p50(ratios):.2f} (rounds {' '.join(f'{x:.2f}' for x in ratios)})",
                ">= 0.80",
                min(ratios) >= 0.8,
            )
            pratios = [v / d for (v, _), (d, _) in zip(poll_r, direct_r)]
            row(
                "delay 0, --poll 50us: req/s via proxy / direct",
                f"{p50(pratios):.2f} (rounds {' '.join(f'{x:.2f}' for x in pratios)})",
                "(info)",
                True,
            )
            # what limits the ratio: CPU. Both paths saturate the host's CPUs; the proxy's own CPU per
            # request comes on top of the client's and the server's.
            d_us = cpu["direct_host"] / max(cpu["direct_req"], 1) * 1e6
            v_us = cpu["via_host"] / max(cpu["via_req"], 1) * 1e6
            px_us = cpu["via_proxy"] / max(cpu["via_req"], 1) * 1e6
            row(
                "delay 0: host CPU per request, direct / via (proxy's share)",
                f"{d_us:.1f} / {v_us:.1f} us ({px_us:.1f} us in the proxy); CPU-bound ceiling "
                f"{d_us / max(v_us, 1e-9):.2f}",
                f"(info: {os.cpu_count()} CPUs)",
                True,
            )
            row(
                "delay 0: p50 latency under load, via - direct",
                f"{(v_lat - d_lat) * 1e3:+.0f} us "
                f"({v_lat * 1e3:.0f} vs {d_lat * 1e3:.0f} us; {v_rps:,.0f} vs {d_rps:,.0f} req/s)",
                "(info)",
                True,
            )
        # ---- realism
        if want("loss"):
            gilbert_elliott(binary, q, row)
        if want("schedule"):
            schedule_end_to_end(tmp, row)
    finally:
        for p in started:
            try:
                p.stop()
            except Exception:
                pass
        echo.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"{'measurement':<52} {'result':<34} {'target':<18} verdict")
    print("-" * 114)
    for what, measured, target, verdict in rows:
        print(f"{what:<52} {measured:<34} {target:<18} {verdict}")
    print(f"\nload average after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()

"""The proxy backend: perfctl-proxy (C, epoll + timerfd) between the load generator and the
server, on the server's address in its own process group. Works on any Linux, no root needed;
delay, jitter and loss are applied per chunk at the TCP level (see proxy.c), bandwidth in
aggregate per direction. Its probe is request/response round trips to the proxy's built-in
echo at the far end of the emulated path; a schedule is `--at` blocks the proxy runs from the
start instant written to its stdin.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from ..errors import PerfctlError
from ..experiment.network import Network
from ..proc.process import spawn_until_line, terminate
from . import probe as _probe
from .base import Injector, bulk_bytes
from .build import PROXY_BINARY, build_proxy
from .commands import proxy_argv

_LISTEN_RE = re.compile(r"listening on (\S+):(\d+) to \S+(?: echo (\S+):(\d+))?")
_CHANGE_RE = re.compile(r"perfctl-proxy change step=(\d+) due_ns=(\d+) applied_ns=(\d+)")
STATS_WAIT_S = 5.0


def parse_proxy_stats(text: str) -> dict[str, int]:
    """The counters of the last `perfctl-proxy stats:` line in text ({} if none)."""
    lines = [ln for ln in text.splitlines() if "perfctl-proxy stats:" in ln]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", lines[-1])} if lines else {}


class ProxyInjector(Injector):
    """perfctl-proxy between client and server. `stats` holds the proxy's counters after stop()."""

    backend = "proxy"

    def __init__(
        self,
        spec: Network,
        seed: int | None = None,
        listen_host: str = "127.0.0.1",
        queue_limit: int | None = None,
        start_timeout_s: float = 10.0,
        cpus: list[int] | None = None,
    ):
        super().__init__(spec)
        self.seed = seed
        self.cpus = list(cpus) if cpus else None
        self.listen_host = listen_host
        self.queue_limit = queue_limit
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.binary: Path | None = None
        self.address: tuple[str, int] | None = None
        self.echo_address: tuple[str, int] | None = None
        self.stats: dict[str, int] = {}
        self.argv: list[str] = []
        self._stderr = None
        self._baseline_ms: float | None = None

    def prepare(self) -> None:
        if self.binary is None:
            self.binary = build_proxy()

    def start(self, target_host: str, target_port: int) -> tuple[str, int]:
        if self.proc is not None:
            raise PerfctlError("this ProxyInjector is already started; stop() it first")
        self.prepare()
        self.argv = proxy_argv(
            self.binary,
            self.spec,
            f"{self.listen_host}:0",
            f"{target_host}:{target_port}",
            echo_listen=f"{self.listen_host}:0",
            seed=self.seed,
            queue_limit=self.queue_limit,
            cpus=self.cpus,
            schedule_anchor="stdin",
        )
        self.proc, line, self._stderr = spawn_until_line(
            self.argv, self.start_timeout_s, "perfctl-proxy", stdin_pipe=bool(self.spec.schedule)
        )
        m = _LISTEN_RE.search(line)
        if not m:
            self.stop()
            raise PerfctlError(f"perfctl-proxy printed an unexpected first line: {line!r}")
        self.address = (m.group(1), int(m.group(2)))
        self.echo_address = (m.group(3), int(m.group(4)))
        self._started = True
        return self.address

    def probe(self, samples: int = 20) -> _probe.ProbeResult:
        if not self.echo_address:
            raise PerfctlError("probe() needs a started ProxyInjector")
        spec = self.state_now()
        n = self.probe_samples(spec, samples)
        timeout = (
            10.0
            + 3 * (spec.rto_ms / 1e3 if spec.has_loss else 0)
            + spec.expected_rtt_ms() / 1e3 * 4
        )
        if self._baseline_ms is None:
            self._baseline_ms = _proxy_baseline_ms(self.binary)
        self.live_stats()  # opens a fresh window of release-time errors
        pipelined = self.probe_pipelines(spec)
        if pipelined:
            rtts = _probe.pipelined_echo_rtt_samples(
                *self.echo_address, samples=n, timeout_s=timeout
            )
        else:
            rtts = _probe.echo_rtt_samples(*self.echo_address, samples=n, timeout_s=timeout)
        res = _probe.ProbeResult(
            method="echo-rtt-pipelined" if pipelined else "echo-rtt",
            rtt_ms=rtts,
            baseline_ms=self._baseline_ms,
            expected_added_ms=self.expected_p50_ms(spec),
        )
        res.notes.append(
            "16-byte request/response round trips to the proxy's built-in echo at the "
            "far end of the emulated path; baseline = same through an unshaped proxy"
        )
        st = self.live_stats()
        if st.get("win_released"):
            res.released = st["win_released"]
            res.release_err_p50_us = st["win_release_err_p50_ns"] / 1e3
            res.release_err_p99_us = st["win_release_err_p99_ns"] / 1e3
        if spec.path_bandwidth_bps:
            res.expected_bps = spec.path_bandwidth_bps
            res.throughput_bps = _probe.echo_throughput_bps(
                *self.echo_address, bulk_bytes(spec.path_bandwidth_bps), timeout_s=timeout + 30
            )
        return res

    def _stderr_now(self) -> str:
        """The proxy's stderr so far, read without moving the file offset it writes at."""
        if self._stderr is None:
            return getattr(self, "stderr_text", "")
        fd = self._stderr.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def live_stats(self) -> dict[str, int]:
        """SIGUSR1: the proxy prints its counters (release errors over the window since the
        previous line); {} when it is not running or does not answer within 5 s."""
        if self.proc is None or self.proc.poll() is not None:
            return {}
        before = self._stderr_now().count("perfctl-proxy stats:")
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + STATS_WAIT_S
        while time.monotonic() < deadline:
            text = self._stderr_now()
            if text.count("perfctl-proxy stats:") > before and text.endswith("\n"):
                return parse_proxy_stats(text)
            time.sleep(0.005)
        return {}

    def start_schedule(self, anchor_ns: int) -> None:
        if not self.spec.schedule:
            return
        if self.proc is None or self.proc.stdin is None:
            raise PerfctlError("start_schedule() needs a started ProxyInjector with a schedule")
        self.proc.stdin.write(f"start {int(anchor_ns)}\n".encode())
        self.proc.stdin.flush()

    def changes(self) -> list[dict]:
        return [
            {"step": int(a), "due_ns": int(b), "applied_ns": int(c)}
            for a, b, c in _CHANGE_RE.findall(self._stderr_now())
        ]

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            terminate(proc)
            if proc.stdin is not None:
                proc.stdin.close()
        if self._stderr is not None:
            try:
                text = self._stderr_now()
                self.stats = parse_proxy_stats(text) or self.stats
                self.stderr_text = text
            finally:
                self._stderr.close()
                self._stderr = None

    def describe(self) -> dict:
        d = super().describe()
        d.update(
            argv=self.argv,
            stats=self.stats,
            cpus=self.cpus,
            semantics="per chunk at the TCP level; bandwidth aggregate per direction",
        )
        return d


def _proxy_baseline_ms(binary: Path | None, samples: int = 20) -> float:
    """p50 RTT through an unshaped proxy's echo: what the probe would read with zero delay."""
    if binary is None:
        return 0.0
    proc, line, err = spawn_until_line(
        [
            str(binary),
            "--listen",
            "127.0.0.1:0",
            "--to",
            "127.0.0.1:9",
            "--echo-listen",
            "127.0.0.1:0",
        ],
        10.0,
        "perfctl-proxy",
    )
    try:
        m = _LISTEN_RE.search(line)
        rtts = _probe.echo_rtt_samples(m.group(3), int(m.group(4)), samples=samples)
        return sorted(rtts)[len(rtts) // 2]
    finally:
        terminate(proc)
        err.close()


def proxy_status() -> tuple[bool, str]:
    """(works on this host, why / why not): perfctl-proxy is built, or can be."""
    if PROXY_BINARY.is_file() or (
        shutil.which("make") and (shutil.which("gcc") or shutil.which("cc"))
    ):
        return True, "perfctl-proxy (built on demand with gcc/make); any Linux, no root needed"
    return False, "needs gcc and make to build perfctl-proxy (apt-get install gcc make)"

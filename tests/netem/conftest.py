"""Fixtures for the netem tests: the built proxy, a local echo server, a proxy launcher."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager

import pytest
from owd_kit import Sink
from signal_kit import wait_for

from orchestrator.netem.probe import ECHO_SERVER_CODE


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="session")
def proxy_bin() -> str:
    from orchestrator.netem import build_proxy

    return str(build_proxy())


@pytest.fixture(scope="module")
def echo_port():
    proc = subprocess.Popen(
        [sys.executable, "-c", ECHO_SERVER_CODE], stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(proc.stdout.readline())
        yield port
    finally:
        _stop(proc)


class Proxy:
    def __init__(self, proc: subprocess.Popen, line: str, err):
        self.proc = proc
        self.line = line
        self.started_ns = time.perf_counter_ns()  # just after the proxy listens
        self._err = err
        m = re.search(r"listening on ([\d.]+):(\d+) to \S+(?: echo ([\d.]+):(\d+))?", line)
        assert m, line
        self.port = int(m.group(2))
        self.echo_port = int(m.group(4)) if m.group(4) else None
        self.rc: int | None = None
        self.stats: dict[str, int] = {}

    def stderr(self) -> str:
        # pread: the proxy writes at the file offset it shares with us; seeking would move it
        fd = self._err.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def live_stats(self) -> dict[str, int]:
        """SIGUSR1 -> the proxy prints its counters; parse that new line (a proxy that never
        prints it fails the test, rather than handing back the previous line)."""
        before = self.stderr().count("stats:")
        self.proc.send_signal(signal.SIGUSR1)
        wait_for(
            lambda: self.stderr().count("stats:") > before,
            "the proxy's stats line after SIGUSR1",
            timeout_s=5,
            reading=lambda: self.stderr()[-500:],
        )
        return _parse_stats(self.stderr())

    def wait_line(self, word: str, count: int = 1, timeout_s: float = 10.0) -> list[str]:
        """Wait until `count` stderr lines contain `word` (the proxy's log of an event);
        returns them."""

        def lines() -> list[str] | None:
            got = [ln for ln in self.stderr().splitlines() if word in ln]
            return got if len(got) >= count else None

        return wait_for(
            lines,
            f"{count} proxy log line(s) with {word!r}",
            timeout_s,
            reading=lambda: self.stderr()[-500:],
        )

    def stop(self) -> int:
        if self.rc is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.rc = self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.rc = self.proc.wait(5)
            self.stats = _parse_stats(self.stderr())
            self.proc.stdout.close()
            if self.proc.stdin:
                self.proc.stdin.close()
        return self.rc


def _parse_stats(text: str) -> dict[str, int]:
    lines = [line for line in text.splitlines() if "stats:" in line]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", lines[-1])} if lines else {}


@pytest.fixture
def run_proxy(proxy_bin):
    """run_proxy(to_port, *flags, echo=False) -> Proxy; every proxy is stopped at teardown."""
    started: list[Proxy] = []

    def start(
        to_port: int, *flags: str, echo: bool = False, stdin: bool = False, env=None
    ) -> Proxy:
        argv = [proxy_bin, "--listen", "127.0.0.1:0", "--to", f"127.0.0.1:{to_port}", *flags]
        if echo:
            argv += ["--echo-listen", "127.0.0.1:0"]
        err = tempfile.TemporaryFile()
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            env={**os.environ, **env} if env else None,
        )
        line = proc.stdout.readline()
        p = Proxy(proc, line, err)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()
        p._err.close()


def is_root() -> bool:
    return os.geteuid() == 0


@contextmanager
def deadline(seconds: float):
    """Fail instead of hanging: SIGALRM after `seconds`."""

    def boom(*_):
        raise TimeoutError(f"test exceeded {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def sink():
    """A one-way-delay sink (owd_kit.Sink), closed after the test."""
    s = Sink()
    yield s
    s.close()

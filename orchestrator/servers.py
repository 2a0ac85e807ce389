"""Server processes: launch in their own process group, pinned, wait until ready, stop.

Every process perfctl starts is registered in `CHILDREN`, so `stop_all()` (called from the
CLI's signal handlers and finally blocks) can end whatever is still running, even on Ctrl-C.
"""
from __future__ import annotations

import os
import random
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import bundled
from .config import BundledServer, CommandServer
from .errors import PerfctlError

CHILDREN: set[subprocess.Popen] = set()
READY_POLL_S = 0.05


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody uses right now, chosen below the ephemeral range: a port from the
    kernel's own pick can be taken as the local port of a client connection (the load
    generator opens thousands) between this check and the server's bind."""
    low, _ = _ephemeral_range()
    if low > 12000:
        for port in random.sample(range(10000, low), 64):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def spawn(argv: list[str], log_path: Path | None = None, cpus: list[int] | None = None,
          cwd: Path | None = None, env: dict | None = None) -> subprocess.Popen:
    """Start argv in a new session (own process group), optionally pinned with taskset.

    stdout and stderr go to log_path (or are discarded). The process is registered for
    stop_all().
    """
    if cpus:
        argv = ["taskset", "-c", ",".join(map(str, cpus)), *argv]
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, env=env, start_new_session=True)
    except FileNotFoundError as e:
        raise PerfctlError(f"cannot start {argv[0]!r}: {e.strerror}. Fix: install it or give "
                           "the full path in the server's cmd.") from None
    finally:
        if log_path:
            out.close()
    CHILDREN.add(proc)
    return proc


def terminate(proc: subprocess.Popen, grace_s: float = 3.0) -> int | None:
    """SIGTERM the process group, then SIGKILL after grace_s. Returns the exit code."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = None
    if proc.poll() is None and pgid is not None:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    if pgid is not None:      # children of the group that outlived its leader, too
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass
    CHILDREN.discard(proc)
    return proc.returncode


def stop_all() -> None:
    for proc in list(CHILDREN):
        terminate(proc, grace_s=1.0)


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no output)"
    return "\n".join(text.strip().splitlines()[-lines:]) or "(no output)"


class ServerProcess:
    """One running server for one trial: start() -> wait_ready() -> stop()."""

    def __init__(self, name: str, spec: BundledServer | CommandServer, workdir: Path,
                 cpus: list[int] | None, source: str = "experiment", host: str = "127.0.0.1",
                 wrap=None) -> None:
        """host: the address to listen on; wrap: argv -> argv (e.g. run in a namespace)."""
        self.name = name
        self.spec = spec
        self.workdir = workdir
        self.cpus = cpus
        self.source = source
        self.host = host
        self.wrap = wrap or (lambda argv: argv)
        self.port = 0
        self.log_path = workdir / "server.log"
        self.proc: subprocess.Popen | None = None
        self.argv: list[str] = []

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        spec = self.spec
        if isinstance(spec, CommandServer) and spec.port is not None:
            if port_taken(spec.port):
                raise PerfctlError(
                    f"{self.source}: key `servers.{self.name}.port`: port {spec.port} is already "
                    "taken by another process. Fix: stop that process, or remove `port:` so "
                    "perfctl picks a free port.")
            self.port = spec.port
        else:
            self.port = free_port(self.host) if self.host.startswith("127.") else free_port()
        if isinstance(spec, BundledServer):
            bundled.build(spec.impl, spec.variant)
            self.argv = bundled.command(spec.impl, spec.model_name, self.port, spec.threads,
                                        spec.backlog, spec.buckets, spec.layout,
                                        variant=spec.variant, host=self.host)
        else:
            for rel, content in spec.files.items():
                f = self.workdir / rel
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(content.replace("{port}", str(self.port))
                             .replace("{workdir}", str(self.workdir)).replace("{host}", self.host))
            cmd = (spec.cmd.replace("{port}", str(self.port))
                   .replace("{workdir}", str(self.workdir)).replace("{host}", self.host))
            self.argv = shlex.split(cmd)
        self.proc = spawn(self.wrap(self.argv), self.log_path, self.cpus, cwd=self.workdir)

    def wait_ready(self) -> float:
        """Block until the server answers; returns seconds taken. Raises PerfctlError when it
        exits during start-up or does not answer in time (with its last 20 log lines)."""
        spec = self.spec
        timeout = spec.startup_timeout_s if isinstance(spec, BundledServer) else spec.ready.timeout_s
        path = "/health" if isinstance(spec, BundledServer) else spec.ready.http
        t0 = time.monotonic()
        while True:
            code = self.proc.poll()
            if code is not None:
                raise PerfctlError(
                    f"{self.source}: key `servers.{self.name}`: the server exited with status "
                    f"{code} during start-up ({shlex.join(self.argv)}). Its last lines:\n"
                    f"{tail(self.log_path)}\nFix: check the server's options and that it can run "
                    "by hand (perfctl serve ... for bundled servers).")
            if self._answers(path):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                self.stop()
                raise PerfctlError(
                    f"{self.source}: key `servers.{self.name}`: the server did not become ready "
                    f"within {timeout:.0f} s ({'GET ' + path if path else 'TCP connect'} on port "
                    f"{self.port}). Its last lines:\n{tail(self.log_path)}\nFix: make it listen on "
                    "{port}, or raise ready.timeout / startup_timeout.")
            time.sleep(READY_POLL_S)

    def _answers(self, path: str | None) -> bool:
        if path is None:
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return True
            except OSError:
                return False
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.port}{path}", timeout=1.0) as r:
                return r.status < 500
        except urllib.error.HTTPError as e:
            return e.code < 500
        except (OSError, ValueError):
            return False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        code = terminate(self.proc)
        self.proc = None
        return code

"""Fixtures for the C server tests: building servers/c, starting servers on 127.0.0.1 port 0,
and a minimal raw-socket HTTP client (so that malformed bytes go out exactly as written).

Every server started through `c_server` is killed at teardown, also when the test fails.
"""

from __future__ import annotations

import fcntl
import os
import re
import selectors
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import setup_kit

ROOT = Path(__file__).resolve().parents[2]
C_DIR = ROOT / "servers" / "c"
BUILD = C_DIR / "build"
LISTEN_RE = re.compile(
    rb"^perfctl-server listening on 127\.0\.0\.1:(\d+) impl=c model=(\w+) threads=(\d+) "
    rb"backlog=(\d+)\n$"
)
TIMING_RE = re.compile(r"^queue;dur=\d+\.\d{3}, svc;dur=\d+\.\d{3}$")
SANITIZER_MARKERS = (
    "AddressSanitizer",
    "LeakSanitizer",
    "UndefinedBehaviorSanitizer",
    "runtime error:",
    "SUMMARY:",
)


def run_make(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    """`make -C servers/c ARGS`, one at a time across pytest-xdist's workers (make test runs
    this folder on both CPUs): two makes writing one binary at once fail with "Text file busy"."""
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / ".tests-make.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return subprocess.run(
            ["make", "-C", str(C_DIR), *args], capture_output=True, text=True, timeout=timeout
        )


def make(target: str, timeout: float = 120, **variables: str) -> subprocess.CompletedProcess:
    return run_make(["-s", target] + [f"{k}={v}" for k, v in variables.items()], timeout)


@pytest.fixture(scope="session")
def c_binaries() -> dict[str, Path]:
    """Builds the normal and the ASan server once per session."""
    setup_kit.require_tools("gcc", package="gcc")
    setup_kit.require_tools("make", package="make")
    out = {}
    for target, name in (("all", "perfctl-server"), ("asan", "perfctl-server-asan")):
        proc = make(target)
        assert proc.returncode == 0, f"make {target} failed:\n{proc.stdout}\n{proc.stderr}"
        out[target] = BUILD / name
    return out


class Server:
    """One running server process; stderr goes to a temporary file."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None):
        self.argv = argv
        self.stderr_file = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.stderr_file,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        self.line = self._first_line(timeout=15)
        m = LISTEN_RE.match(self.line)
        if not m:
            self.kill()
            raise AssertionError(f"bad listening line {self.line!r}; stderr: {self.stderr()}")
        self.port = int(m.group(1))
        self.model = m.group(2).decode()

    def _first_line(self, timeout: float) -> bytes:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        buf = b""
        deadline = time.monotonic() + timeout
        try:
            while not buf.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.kill()
                    raise AssertionError(f"no listening line within {timeout}s: {self.stderr()}")
                chunk = os.read(self.proc.stdout.fileno(), 1)
                if not chunk:
                    self.kill()
                    raise AssertionError(f"server exited early: {self.stderr()}")
                buf += chunk
        finally:
            sel.close()
        return buf

    @property
    def pid(self) -> int:
        return self.proc.pid

    def fd_count(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def stderr(self) -> str:
        self.stderr_file.seek(0)
        return self.stderr_file.read().decode(errors="replace")

    def terminate(self, timeout: float = 3.0) -> tuple[int, float]:
        """SIGTERM; returns (exit status, seconds to exit). Kills it if it does not exit."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"server did not exit within {timeout}s of SIGTERM") from None
        return rc, time.monotonic() - t0

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.stdout:
            self.proc.stdout.close()


@pytest.fixture
def c_server(c_binaries):
    """Factory: c_server(model, asan=False, threads=4, extra=[...], env={...}) -> Server."""
    started: list[Server] = []

    def start(
        model: str,
        asan: bool = False,
        threads: int = 4,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> Server:
        binary = c_binaries["asan" if asan else "all"]
        argv = [
            str(binary),
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            "--model",
            model,
            "--threads",
            str(threads),
            *(extra or []),
        ]
        if asan:
            env = {
                "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0",
                "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
                **(env or {}),
            }
        s = Server(argv, env)
        started.append(s)
        return s

    yield start
    for s in started:
        s.kill()


# --- a minimal HTTP/1.1 client over raw sockets -------------------------------------------


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status, self.headers, self.body = status, headers, body

    def __repr__(self) -> str:
        return f"Response({self.status}, {self.headers}, {self.body[:60]!r})"


class Reader:
    """Reads responses from one socket, keeping bytes that belong to the next response."""

    def __init__(self, sock: socket.socket):
        self.sock, self.buf = sock, b""

    def _fill(self) -> bool:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            return False
        self.buf += chunk
        return True

    def response(self) -> Response:
        for _ in range(100000):
            if b"\r\n\r\n" in self.buf:
                break
            if not self._fill():
                raise ConnectionError(f"closed before a full response head: {self.buf!r}")
        else:
            raise AssertionError("response head never ended")
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        assert parts[0] == "HTTP/1.1", lines[0]
        headers = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        if parts[1].startswith("1"):
            return Response(int(parts[1]), headers, b"")  # interim response: no body
        n = int(headers["content-length"])
        for _ in range(100000):
            if len(self.buf) >= n:
                break
            if not self._fill():
                raise ConnectionError("closed inside a response body")
        body, self.buf = self.buf[:n], self.buf[n:]
        return Response(int(parts[1]), headers, body)

    def at_eof(self, timeout: float = 3.0) -> bool:
        """True if the server closes the connection (nothing more than EOF arrives)."""
        self.sock.settimeout(timeout)
        try:
            return not self.buf and self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def exchange(
    port: int, raw: bytes, timeout: float = 10.0, check_close: bool = False
) -> tuple[Response, bool | None]:
    """Sends raw on a new connection; returns the first response and, with check_close,
    whether the server then closed the connection."""
    with connect(port, timeout) as s:
        s.sendall(raw)
        r = Reader(s)
        resp = r.response()
        return resp, (r.at_eof(timeout=3.0) if check_close else None)


def get(port: int, target: str, headers: str = "") -> Response:
    return exchange(port, f"GET {target} HTTP/1.1\r\nHost: t\r\n{headers}\r\n".encode())[0]


@pytest.fixture
def http():
    """The raw-socket client helpers, for test modules (conftest is not importable)."""
    import types

    return types.SimpleNamespace(
        connect=connect,
        Reader=Reader,
        Response=Response,
        exchange=exchange,
        get=get,
        TIMING_RE=TIMING_RE,
        SANITIZER_MARKERS=SANITIZER_MARKERS,
    )

"""Fixtures and a tiny raw HTTP/1.1 client for the bundled Java server's tests.

Every server started here binds 127.0.0.1 port 0, is killed on teardown (even when a test
fails), and every socket has a timeout, so no test can hang or leave a JVM behind.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JAVA_DIR = ROOT / "servers" / "java"
CLASSES = JAVA_DIR / "build" / "classes"
CORPUS = ROOT / "servers" / "corpus" / "sentences.tsv"
JDK17_JAVA = Path("/usr/lib/jvm/java-17-openjdk-amd64/bin/java")
MODELS = ("single", "thread", "pool", "virtual")
LISTEN_RE = re.compile(
    r"^perfctl-server listening on 127\.0\.0\.1:(\d+) impl=java model=(\w+) threads=(\d+) backlog=(\d+)$"
)
TIMING_RE = re.compile(r"^queue;dur=(\d+\.\d{3}), svc;dur=(\d+\.\d{3})$")
STATS_KEYS = {
    "impl",
    "model",
    "threads",
    "requests",
    "work_requests",
    "bucket_sum",
    "buckets",
    "queue_length",
    "users",
    "connections",
}


def newest_java() -> str:
    """The JVM perfctl itself would pick for model `virtual` (the newest JDK, >= 21)."""
    from orchestrator.run import bundled

    jdk = bundled.find_jdk(21)
    if jdk is None:
        pytest.skip("no JDK >= 21 under /usr/lib/jvm")
    return jdk.java


class JavaServer:
    """One server process; use as a context manager or call stop()."""

    def __init__(
        self, model: str, *flags: str, java: str | None = None, start_timeout: float = 20.0
    ):
        self.model = model
        self.stderr = tempfile.TemporaryFile()
        argv = [
            java or newest_java(),
            "-Xss512k",
            "-cp",
            str(CLASSES),
            "perfctl.server.Main",
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            "--model",
            model,
            "--corpus",
            str(CORPUS),
            *flags,
        ]
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.pid = self.proc.pid
        try:
            self.line = self._read_line(start_timeout)
            m = LISTEN_RE.match(self.line)
            assert m, f"bad listening line {self.line!r}; stderr: {self.stderr_text()}"
            self.port = int(m.group(1))
        except BaseException:
            self.stop()
            raise

    def _read_line(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        buf = b""
        fd = self.proc.stdout.fileno()
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"no listening line within {timeout}s; stderr: {self.stderr_text()}"
                )
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise AssertionError(
                        f"server exited ({self.proc.poll()}) before listening; "
                        f"stderr: {self.stderr_text()}"
                    )
                buf += chunk
        return buf.split(b"\n", 1)[0].decode()

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def fd_count(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self, timeout: float = 5.0) -> int:
        """SIGTERM; returns the exit status (raises if it takes longer than timeout)."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.stdout:
            self.proc.stdout.close()
        self.stderr.close()

    def __enter__(self) -> JavaServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def client(self, timeout: float = 10.0) -> Client:
        return Client(self.port, timeout)

    def get(self, target: str, timeout: float = 10.0) -> Response:
        with self.client(timeout) as c:
            return c.request("GET", target)

    def stats(self) -> dict:
        import json

        r = self.get("/stats")
        assert r.status == 200, r
        return json.loads(r.body)


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    raw_head: bytes = field(repr=False, default=b"")

    def timing(self) -> tuple[float, float]:
        m = TIMING_RE.match(self.headers.get("server-timing", ""))
        assert m, f"bad Server-Timing {self.headers.get('server-timing')!r}"
        return float(m.group(1)), float(m.group(2))


class Client:
    """A raw HTTP/1.1 client on one connection: send bytes, read whole responses."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.file = self.sock.makefile("rb")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(
        self,
        method: str,
        target: str,
        body: bytes = b"",
        headers: dict | None = None,
        version: str = "HTTP/1.1",
    ) -> Response:
        self.send(build_request(method, target, body, headers, version))
        return self.read_response()

    def read_response(self, head: bool = False) -> Response:
        status_line = self.file.readline(65536)
        if not status_line:
            raise EOFError("connection closed before a response")
        raw = status_line
        parts = status_line.decode("latin-1").rstrip("\r\n").split(" ", 2)
        assert parts[0] == "HTTP/1.1" and len(parts) >= 2, status_line
        headers: dict[str, str] = {}
        while True:
            line = self.file.readline(65536)
            raw += line
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        n = int(headers.get("content-length", "0"))
        body = b"" if head else self.file.read(n)
        assert len(body) == (0 if head else n), f"short body: {len(body)} of {n}"
        return Response(int(parts[1]), headers, body, raw)

    def at_eof(self, timeout: float = 5.0) -> bool:
        """True when the server closed the connection (reads EOF or a reset within timeout)."""
        self.sock.settimeout(timeout)
        try:
            return self.file.read(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def reset(self) -> None:
        """Close with RST (SO_LINGER 0)."""
        import struct

        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close()

    def close(self) -> None:
        try:
            self.file.close()
        finally:
            self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def build_request(
    method: str,
    target: str,
    body: bytes = b"",
    headers: dict | None = None,
    version: str = "HTTP/1.1",
) -> bytes:
    h = {"Host": "127.0.0.1"}
    if body or method == "POST":
        h["Content-Length"] = str(len(body))
        h["Content-Type"] = "application/x-www-form-urlencoded"
    h.update(headers or {})
    head = (
        f"{method} {target} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    )
    return head.encode("latin-1") + body


def wait_until(cond, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(interval)
    return cond()


@pytest.fixture(scope="session")
def java_build() -> Path:
    """Builds the server once per session with the command perfctl uses, one make at a time
    across pytest-xdist's workers (make test runs this folder on both CPUs)."""
    (JAVA_DIR / "build").mkdir(parents=True, exist_ok=True)
    with open(JAVA_DIR / "build" / ".tests-make.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        proc = subprocess.run(
            ["make", "-s", "-C", str(JAVA_DIR), "all"], capture_output=True, text=True, timeout=300
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (CLASSES / "perfctl" / "server" / "Main.class").is_file()
    return CLASSES


@pytest.fixture(scope="module", params=MODELS)
def server(request, jkit):
    """One JavaServer per model for a whole test module (JVM start-up is the slow part): the
    module's tests run in file order per model and leave it healthy for the next one."""
    with jkit.JavaServer(request.param, "--threads", "4", "--buckets", "64") as srv:
        yield srv
        assert srv.alive(), f"server died; stderr: {srv.stderr_text()}"


@pytest.fixture(scope="session")
def jkit(java_build):
    """This module's helpers, for test modules (which cannot import conftest under importlib mode)."""
    import types

    return types.SimpleNamespace(
        JavaServer=JavaServer,
        Client=Client,
        Response=Response,
        build_request=build_request,
        wait_until=wait_until,
        newest_java=newest_java,
        MODELS=MODELS,
        CLASSES=CLASSES,
        CORPUS=CORPUS,
        JAVA_DIR=JAVA_DIR,
        JDK17_JAVA=JDK17_JAVA,
        LISTEN_RE=LISTEN_RE,
        STATS_KEYS=STATS_KEYS,
    )
